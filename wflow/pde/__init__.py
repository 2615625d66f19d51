"""The transformer PDE on a triangulated sphere: finite volumes on DOLFINx (docs/theory.md §2).

Solves ``∂_t ρ + div_S(ρ v[μ_t, Θ_t]) = 0`` on S² for the transformer velocity ``v`` or
its effective-mobility surrogate ``v̂`` (docs/theory.md §3), or for a prescribed velocity.

Rooms (the same in every solver package):

* :mod:`~wflow.pde.options` — :class:`PDEOptions` and the ``[pde]`` schema;
* :mod:`~wflow.pde.limiters` — the registered slope limiters (:data:`LIMITERS`);
* :mod:`~wflow.pde.fv` — finite-volume geometry, reconstruction, fluxes, positivity;
* :mod:`~wflow.pde.integrators` — the registered SSP time integrators
  (:data:`TIME_INTEGRATORS`, each declaring ``order()``);
* :mod:`~wflow.pde.velocity` — nonlocal (transformer / surrogate) or prescribed velocity;
* :mod:`~wflow.pde.diffusion` — token diffusion ``D Δ_S ρ`` (two-point fluxes,
  Crank–Nicolson through PETSc, Strang splitting with the drift; :class:`TokenDiffusion`);
* :mod:`~wflow.pde.solver` — :func:`iterate_pde` (generator) and :func:`solve_pde`;
* :mod:`~wflow.pde.result` — :class:`PDEResult`;

Initial densities live in :mod:`wflow.geometry.density` (shared with the JKO scheme and the main
job); :func:`initial_density` and :func:`density_spec_from_scenario` are re-exported here.
"""

from ..geometry.density import DENSITY_SPEC, density_spec_from_scenario, initial_density
from .diffusion import TokenDiffusion
from .options import (
    LIMITERS,
    PDE_SCHEMA,
    PDE_SPEC,
    TIME_INTEGRATORS,
    PDEOptions,
    pde_options_from_dict,
)
from .solver import PDEResult, PDEState, iterate_pde, solve_pde
from .velocity import rotation_velocity

__all__ = [
    "PDEOptions",
    "PDEState",
    "PDEResult",
    "TIME_INTEGRATORS",
    "LIMITERS",
    "initial_density",
    "iterate_pde",
    "solve_pde",
    "rotation_velocity",
    "pde_options_from_dict",
    "density_spec_from_scenario",
    "PDE_SCHEMA",
    "PDE_SPEC",
    "DENSITY_SPEC",
    "TokenDiffusion",
]
