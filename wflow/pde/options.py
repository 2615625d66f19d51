"""Options of the PDE solver and the ``[pde]`` table of a scenario.

:class:`PDEOptions` are the keyword-only options of :func:`wflow.pde.solve_pde`;
:data:`PDE_SCHEMA` is the TOML schema of ``[pde]`` (the same keys and defaults plus
``mesh``), validated by :func:`pde_options_from_dict` with errors ``pde.<key>: ...``.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any, Literal

from ..infra.schema import Spec, boolean, choice, number, string, take
from ..kernels import BACKENDS

__all__ = [
    "TIME_INTEGRATORS",
    "LIMITERS",
    "PDEOptions",
    "PDE_SCHEMA",
    "PDE_SPEC",
    "pde_options_from_dict",
]


#: Time integrators: name -> (declared order, stages).
TIME_INTEGRATORS = {"euler": (1, 1), "ssprk2": (2, 2), "ssprk3": (3, 3)}
#: Slope limiters of the order-2 reconstruction (all followed by the positivity scaling).
LIMITERS = ("barth_jespersen", "venkatakrishnan", "positivity")


@dataclass(frozen=True)
class PDEOptions:
    """Options of :func:`solve_pde` (keyword-only in the API).

    Parameters
    ----------
    T : float
        Final time.
    dt : float
        Upper bound of the time step (the step is adaptive, from the CFL bound).
    order : {1, 2}
        Spatial order: upwind (1) or limited linear reconstruction (2).
    time_integrator : {"auto", "euler", "ssprk2", "ssprk3"}
        ``auto``: Euler for order 1, SSP-RK2 for order 2.
    limiter : {"barth_jespersen", "venkatakrishnan", "positivity"}
        Slope limiter of order 2 (each followed by the positivity scaling).
    venkat_k : float
        Venkatakrishnan's constant ``K`` (``ε² = (K h_K)³``).
    cfl : float
        Safety factor in ``(0, 1]`` times the positivity bound ``min_K m_K / out_K``.
    flow : {"transformer", "surrogate"}
        Velocity ``v`` or ``v̂`` (ignored for a prescribed velocity).
    quad_points : int
        Gauss points per edge (1 = midpoint, enough for order 2; 2 or 3).
    n_saves : int
        Number of equally spaced output times in ``[0, T]`` (both ends included).
    balance : bool
        Evaluate the energy integrands at every step (running EDI balance).
        Costs one cell-to-cell evaluation (``M²``) per step.
    entropy, head_rates, clusters : bool
        Extra diagnostics at the output times.
    cluster_level : float
        Cells with ``ρ >= cluster_level · max ρ`` form the cluster graph.
    cluster_min_mass : float
        Components with less mass are not counted as clusters.
    max_steps : int
        Give up (status ``"max_steps"``) after this many accepted steps.
    min_dt : float
        Give up (status ``"failed"``) if the positivity bound forces a smaller step.
    seed : int
        Seed of the weight noise (stochastic schedules).
    progress : bool or None
        tqdm progress bar (``None``: only on a TTY, rank 0).
    kernel_backend : {"auto", "numpy", "direct", "fastsum"}
        Back-end of the attention sums. ``auto`` is resolved once per run from the
        global problem (all edge quadrature points against all cells), so serial and
        MPI runs use the same back-end; the choice and its error estimate are in
        ``stats["kernel"]``.
    kernel_tol : float
        Relative tolerance of the fast summation.
    """

    T: float = 1.0
    dt: float = 1e-2
    order: int = 1
    time_integrator: str = "auto"
    limiter: str = "barth_jespersen"
    venkat_k: float = 5.0
    cfl: float = 0.9
    flow: Literal["transformer", "surrogate"] = "transformer"
    quad_points: int = 1
    n_saves: int = 11
    balance: bool = True
    entropy: bool = False
    head_rates: bool = False
    clusters: bool = True
    cluster_level: float = 0.1
    cluster_min_mass: float = 0.01
    max_steps: int = 1_000_000
    min_dt: float = 1e-12
    seed: int = 0
    progress: bool | None = None
    kernel_backend: str = "auto"
    kernel_tol: float = 1e-10

    def __post_init__(self) -> None:
        def bad(key: str, what: str) -> ValueError:
            return ValueError(f"pde.{key}: {what}, got {getattr(self, key)!r}")

        if self.kernel_backend not in BACKENDS:
            raise bad("kernel_backend", f"must be one of {list(BACKENDS)}")
        if not self.kernel_tol > 0:
            raise bad("kernel_tol", "must be > 0")

        if not (isinstance(self.T, (int, float)) and math.isfinite(self.T) and self.T > 0):
            raise bad("T", "must be a finite number > 0")
        if not (isinstance(self.dt, (int, float)) and math.isfinite(self.dt) and self.dt > 0):
            raise bad("dt", "must be a finite number > 0")
        if self.order not in (1, 2):
            raise bad("order", "must be 1 or 2")
        if self.time_integrator not in ("auto", *TIME_INTEGRATORS):
            raise bad("time_integrator", f"must be one of {['auto', *TIME_INTEGRATORS]}")
        if self.limiter not in LIMITERS:
            raise bad("limiter", f"must be one of {list(LIMITERS)}")
        if not 0 < self.cfl <= 1:
            raise bad("cfl", "must lie in (0, 1]")
        if self.flow not in ("transformer", "surrogate"):
            raise bad("flow", "must be 'transformer' or 'surrogate'")
        if self.quad_points not in (1, 2, 3):
            raise bad("quad_points", "must be 1, 2 or 3")
        if int(self.n_saves) < 2:
            raise bad("n_saves", "must be >= 2 (the initial and final times)")
        if not 0 <= self.cluster_level < 1:
            raise bad("cluster_level", "must lie in [0, 1)")
        if not 0 <= self.cluster_min_mass < 1:
            raise bad("cluster_min_mass", "must lie in [0, 1)")
        if int(self.max_steps) < 1:
            raise bad("max_steps", "must be >= 1")
        if not self.venkat_k > 0:
            raise bad("venkat_k", "must be > 0")

    @property
    def integrator(self) -> str:
        """The time integrator actually used (``auto`` resolved)."""
        if self.time_integrator != "auto":
            return self.time_integrator
        return "euler" if self.order == 1 else "ssprk2"


#: The ``[pde]`` table: ``key -> (default, checker)``.
PDE_SCHEMA: Spec = {
    "mesh": ("default", string),
    "T": (1.0, number(0, strict_lo=True)),
    "dt": (1e-2, number(0, strict_lo=True)),
    "order": (1, choice(1, 2)),
    "time_integrator": ("auto", choice("auto", *TIME_INTEGRATORS)),
    "limiter": ("barth_jespersen", choice(*LIMITERS)),
    "cfl": (0.9, number(0, 1, strict_lo=True)),
    "flow": ("transformer", choice("transformer", "surrogate")),
    "quad_points": (1, choice(1, 2, 3)),
    "n_saves": (11, number(2, integer=True)),
    "balance": (True, boolean),
    "entropy": (False, boolean),
    "head_rates": (False, boolean),
    "clusters": (True, boolean),
    "cluster_level": (0.1, number(0, 1)),
    "cluster_min_mass": (0.01, number(0, 1)),
    "max_steps": (1_000_000, number(1, integer=True)),
    "kernel_backend": ("auto", choice(*BACKENDS)),
    "kernel_tol": (1e-10, number(0, strict_lo=True)),
}

#: Keys of the ``[pde]`` section (see :func:`pde_options_from_dict`).
PDE_SPEC = ("mesh", "T", "dt", "order", "time_integrator", "limiter", "cfl", "flow",
            "quad_points", "n_saves", "balance", "entropy", "head_rates", "clusters",
            "cluster_level", "cluster_min_mass", "max_steps", "kernel_backend", "kernel_tol")


def pde_options_from_dict(d: Mapping[str, Any] | None, *, seed: int = 0
                          ) -> tuple[str, PDEOptions]:
    """Validate a ``[pde]`` table; returns ``(mesh_spec, PDEOptions)``.

    Keys (defaults): ``mesh = "default"`` (``meshes/sphere_2420.msh``; a path
    relative to the scenario, a shipped file name, or ``"icosphere:N"`` /
    ``"gmsh:N"``), ``T = 1``, ``dt = 0.01`` (upper bound), ``order = 1``,
    ``time_integrator = "auto"``, ``limiter = "barth_jespersen"``, ``cfl = 0.9``,
    ``flow = "transformer"``, ``quad_points = 1``, ``n_saves = 11``,
    ``balance = true``, ``entropy = false``, ``head_rates = false``,
    ``clusters = true``, ``cluster_level = 0.1``, ``cluster_min_mass = 0.01``,
    ``max_steps = 1000000``. Errors name the key (``pde.<key>: ...``).
    """
    vals = take(d or {}, PDE_SCHEMA, "pde")
    mesh = vals.pop("mesh")
    return mesh, PDEOptions(**vals, seed=seed)
