"""The particle solver: tokens on ``S^{d-1}`` moved by multi-head attention (docs/theory.md §2).

``ẋ_i = v[μ^n_t, Θ_t](x_i)`` with ``μ^n = (1/n) Σ δ_{x_i}``, the transformer velocity
``v = P_x Σ_h w_h f_h`` or the effective-mobility surrogate ``v̂`` (``flow="surrogate"``).

Rooms (the same in every solver package):

* :mod:`~wflow.particles.options` — :class:`ParticleOptions` and the ``[particles]`` schema;
* :mod:`~wflow.particles.integrators` — time grid, state terms, the registered Euler / RK4
  integrators;
* :mod:`~wflow.particles.compiled` — the whole time loop compiled (``simulate(engine=...)``,
  :func:`simulate_compiled`); :mod:`~wflow.particles.static_euler` — :func:`euler_path`,
  the older compiled Euler loop for static heads;
* :mod:`~wflow.particles.solver` — :func:`iterate` (generator), :func:`simulate` and
  :class:`ParticleResult`;
"""

from .compiled import compiled_support, simulate_compiled
from .integrators import INTEGRATORS, time_grid
from .options import ENGINES, INTEGRATOR_ORDER, PARTICLES_SCHEMA, PARTICLES_SPEC, ParticleOptions
from .result import ParticleResult, ParticleState
from .solver import iterate, simulate
from .static_euler import EulerPath, euler_path

__all__ = [
    "ENGINES",
    "INTEGRATORS",
    "INTEGRATOR_ORDER",
    "PARTICLES_SCHEMA",
    "PARTICLES_SPEC",
    "EulerPath",
    "euler_path",
    "simulate_compiled",
    "compiled_support",
    "ParticleOptions",
    "ParticleState",
    "ParticleResult",
    "iterate",
    "simulate",
    "time_grid",
]
