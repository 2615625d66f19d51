"""Options of the particle solver and the ``[particles]`` table of a scenario.

:class:`ParticleOptions` are the keyword-only options of :func:`wflow.particles.simulate`;
:data:`PARTICLES_SPEC` is the TOML schema of ``[particles]`` (same keys and defaults,
validated by :func:`wflow.infra.schema.take`, errors ``particles.<key>: ...``).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal

import numpy as np

from ..infra.schema import Spec, boolean, choice, number
from ..kernels import BACKENDS

__all__ = [
    "ENGINES",
    "INTEGRATOR_ORDER",
    "ParticleOptions",
    "PARTICLES_SPEC",
]

#: Declared order of each particle integrator (checked by a fitted-order test).
INTEGRATOR_ORDER = {"euler": 1, "rk4": 4}
#: Time loops of :func:`wflow.particles.simulate` (see :class:`ParticleOptions`).
ENGINES = ("auto", "compiled", "python")


@dataclass(frozen=True)
class ParticleOptions:
    """Options of :func:`simulate` (all keyword-only in the API).

    Parameters
    ----------
    T : float
        Final time (depth).
    dt : float
        Time step (the grid also contains every jump time of the schedule).
    integrator : {"euler", "rk4"}
    flow : {"transformer", "surrogate"}
        Velocity: the transformer's ``v`` or the gradient-flow surrogate ``v̂``.
    record_every : int
        Record diagnostics every this many steps (the balance uses every step).
    n_paths : int
        Independent weight-noise paths (Monte-Carlo); 1 for deterministic schedules.
    seed : int
        Seed of the weight noise (paths use ``SeedSequence(seed).spawn(n_paths)``).
    entropy : bool
        Record attention entropies and the entropy-production identity (``O(H n²)``).
    head_rates : bool
        Record per-head ``dE_h/dt`` with own / cross split and radial shadows.
    clusters : bool
        Record the number of clusters at ``cluster_cos``.
    cluster_cos : float
        Inner-product threshold linking two tokens in the cluster count.
    save_trajectory : bool
        Keep tokens (and weights) at every recorded time.
    progress : bool or None
        Progress bar (``None``: only when stderr is a TTY).
    kernel_backend : {"auto", "numpy", "direct", "fastsum"}
        Back-end of the attention sums (``auto``: fused direct sums, fast summation on S²
        where it pays off); the choice and its error estimate land in ``summary.json``.
    kernel_tol : float
        Relative tolerance of the fast summation.
    engine : {"auto", "compiled", "python"}
        ``"compiled"``: the whole time loop compiled
        (:func:`wflow.particles.compiled.simulate_compiled`, equal to the Python loop to
        round-off; an error where it does not apply); ``"python"``: the step-by-step loop
        of :func:`wflow.particles.iterate`; ``"auto"``: compiled wherever it applies (every
        schedule but callables, direct sums), else Python.
    """

    T: float = 1.0
    dt: float = 1e-2
    integrator: Literal["euler", "rk4"] = "rk4"
    flow: Literal["transformer", "surrogate"] = "transformer"
    record_every: int = 1
    n_paths: int = 1
    seed: int = 0
    entropy: bool = False
    head_rates: bool = True
    clusters: bool = True
    cluster_cos: float = 0.99
    save_trajectory: bool = False
    progress: bool | None = None
    kernel_backend: str = "auto"
    kernel_tol: float = 1e-10
    engine: Literal["auto", "compiled", "python"] = "auto"

    def __post_init__(self) -> None:
        if not (np.isfinite(self.T) and self.T > 0):
            raise ValueError(f"particles.T: must be a finite number > 0, got {self.T!r}")
        if not (np.isfinite(self.dt) and 0 < self.dt):
            raise ValueError(f"particles.dt: must be a finite number > 0, got {self.dt!r}")
        if self.integrator not in INTEGRATOR_ORDER:
            raise ValueError(f"particles.integrator: must be one of {sorted(INTEGRATOR_ORDER)}, "
                             f"got {self.integrator!r}")
        if self.flow not in ("transformer", "surrogate"):
            raise ValueError(f"particles.flow: must be 'transformer' or 'surrogate', "
                             f"got {self.flow!r}")
        if int(self.record_every) < 1:
            raise ValueError(f"particles.record_every: must be >= 1, got {self.record_every}")
        if int(self.n_paths) < 1:
            raise ValueError(f"particles.n_paths: must be >= 1, got {self.n_paths}")
        if not -1 < self.cluster_cos < 1:
            raise ValueError(f"particles.cluster_cos: must lie in (-1, 1), got {self.cluster_cos}")
        if self.kernel_backend not in BACKENDS:
            raise ValueError(f"particles.kernel_backend: must be one of {list(BACKENDS)}, "
                             f"got {self.kernel_backend!r}")
        if not self.kernel_tol > 0:
            raise ValueError(f"particles.kernel_tol: must be > 0, got {self.kernel_tol}")
        if self.engine not in ENGINES:
            raise ValueError(f"particles.engine: must be one of {list(ENGINES)}, "
                             f"got {self.engine!r}")


#: The ``[particles]`` table: ``key -> (default, checker)`` (defaults of :class:`ParticleOptions`).
PARTICLES_SPEC: Spec = {
    "T": (1.0, number(0, strict_lo=True)),
    "dt": (1e-2, number(0, strict_lo=True)),
    "integrator": ("rk4", choice("euler", "rk4")),
    "flow": ("transformer", choice("transformer", "surrogate")),
    "record_every": (1, number(1, integer=True)),
    "n_paths": (1, number(1, integer=True)),
    "entropy": (False, boolean),
    "head_rates": (True, boolean),
    "clusters": (True, boolean),
    "cluster_cos": (0.99, number(-1, 1)),
    "kernel_backend": ("auto", choice("auto", "numpy", "direct", "fastsum")),
    "kernel_tol": (1e-10, number(0, strict_lo=True)),
    "engine": ("auto", choice(*ENGINES)),
}
