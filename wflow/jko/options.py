"""Options of the JKO scheme and the ``[jko]`` table of a scenario.

:class:`JKOOptions` are the keyword-only options of :func:`wflow.jko.solve_jko`;
:data:`JKO_SCHEMA` is the TOML schema of ``[jko]`` (the same keys and defaults plus
``mesh`` and ``compare_pde``), validated by :func:`jko_options_from_dict` with errors
``jko.<key>: ...``.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any, Literal

from ..infra.schema import ScenarioError, Spec, boolean, choice, number, string, take

__all__ = [
    "TAU_CELLS",
    "auto_tau",
    "MOBILITY_MEANS",
    "OT_METHODS",
    "INNER_SOLVERS",
    "JKOWarning",
    "JKOOptions",
    "JKO_SCHEMA",
    "JKO_SPEC",
    "jko_options_from_dict",
]


#: Symmetric means ``b̂_ij`` of the endpoint mobilities.
MOBILITY_MEANS = ("conformal", "arithmetic", "geometric", "harmonic")
#: OT back-ends: exact (network simplex) or entropic (log-domain Sinkhorn).
OT_METHODS = ("emd", "sinkhorn")
#: Inner solvers of the outer minimisation over ν.
INNER_SOLVERS = ("gcg", "mirror")


#: Cells a step should cross: the automatic step has ``τ |v|_max ≈ 3h``.
TAU_CELLS = 3.0


class JKOWarning(UserWarning):
    """An inner solve missed its tolerance, or steps locked (the run is kept and reported)."""


def auto_tau(T: float, h: float, vmax: float, *, cells: float = TAU_CELLS) -> float:
    """The automatic JKO step: ``τ = T/N``, ``N = max(1, round(T |v|_max / (cells · h)))``.

    The number of steps dividing ``T`` nearest to ``τ |v|_max = cells · h`` (``h`` the
    mean cell size ``√(mean |K|)``, ``|v|_max`` the largest surrogate speed at ``t = 0``):
    ``τ|v|_max/h`` lies in ``[2.25, 3.75]`` for ``N >= 2`` (``cells = 3``) and is at least
    1.5 when ``N = 1`` follows from rounding. Reason (:mod:`wflow.jko.solver`,
    "Limitations"): on a fixed mesh the exact JKO step locks when ``τ |v| <~ h/2`` —
    moving mass by one cell costs ``h²/2τ`` per unit mass and gains only ``h |∇ψ|`` — and
    agrees with the PDE at first order in ``τ`` once ``τ |v|_max >~ 3h``. Under joint
    refinement ``h ∝ τ`` the JKO-vs-PDE distance then shrinks at first order (measured on
    the main job's default: 0.39, 0.26, 0.19 for τ = 1, 2/3, 1/2).
    """
    if not (T > 0 and h > 0 and math.isfinite(vmax) and vmax >= 0):
        raise ValueError(f"auto_tau: needs T > 0, h > 0 and a finite speed, got T = {T!r}, "
                         f"h = {h!r}, |v|_max = {vmax!r}")
    n = max(1, math.floor(T * vmax / (cells * h) + 0.5))
    return T / n


def _tau(v: Any, key: str) -> Any:
    if v == "auto":
        return v
    if isinstance(v, str):
        raise ScenarioError(f"{key}: expected a number > 0 or \"auto\", got {v!r}")
    return number(0, strict_lo=True)(v, key)


@dataclass(frozen=True)
class JKOOptions:
    """Options of the JKO scheme (keyword-only in the API).

    Parameters
    ----------
    T : float
        Final time (a multiple of ``tau`` up to 1e-9 relative).
    tau : float
        Step size ``τ``.
    ot : {"emd", "sinkhorn"}
        Exact transport or entropic (``OT_ε`` relative to ``μ_k ⊗ α``).
    inner : {"gcg", "mirror"}
        Generalised conditional gradient on plans (default) or exponentiated gradient
        on ``ν`` with POT potentials (see the module docstring).
    eps : float, optional
        Entropic ``ε`` in cost units (rad²/mobility); default ``eps_scale · τ^eps_power``.
    eps_scale, eps_power : float
        Default rule ``ε = eps_scale · τ^eps_power``; ``eps_power > 1`` keeps ``ε = o(τ)``.
    mobility_mean : {"conformal", "arithmetic", "geometric", "harmonic"}
        Symmetric mean ``b̂_ij`` in the cost.
    gap_rtol : float
        Stop when ``gap <= gap_rtol · scale`` with ``scale = max(τ|∂E|²(μ_k), 1e-12|E|)``.
    max_inner : int
        Inner iterations before giving up (status ``"not_converged"`` + warning).
    warm_start : bool
        Reuse the candidate-pair cache (GCG) or the OT potentials (mirror, verify)
        across inner iterations and steps.
    verify : bool or None
        Cross-check each step with POT (``None``: exact steps when ``M <= verify_max_cells``;
        entropic steps only on request, the log-domain Sinkhorn is slow at small ``ε``).
    verify_max_cells : int
    neighbourhood : bool
        Restrict candidate targets to the proved radius (k-d tree pair list or masked
        row blocks); ``False`` scans all ``M²`` pairs (validation).
    max_pairs : int
        Largest candidate list kept in memory (24 bytes a pair); above it the rows are
        rescanned in blocks at every oracle call.
    dense_ot_max_cells : int
        Dense POT problems (``M × M`` cost) only up to this size; sparse ``ot.emd`` on
        the candidate graph beyond.
    sinkhorn_max_iter, sinkhorn_tol : int, float
        Log-domain Sinkhorn limits (POT ``numItermax``, ``stopThr``).
    emd_max_iter : int
        Network-simplex iteration limit.
    progress : bool or None
        tqdm progress bar (``None``: only on a terminal).
    """

    T: float = 1.0
    tau: float = 0.1
    ot: Literal["emd", "sinkhorn"] = "emd"
    inner: Literal["gcg", "mirror"] = "gcg"
    eps: float | None = None
    eps_scale: float = 1.0
    eps_power: float = 2.0
    mobility_mean: str = "conformal"
    gap_rtol: float = 1e-6
    max_inner: int = 500
    warm_start: bool = True
    verify: bool | None = None
    verify_max_cells: int = 2500
    neighbourhood: bool = True
    max_pairs: int = 50_000_000
    dense_ot_max_cells: int = 6000
    sinkhorn_max_iter: int = 20_000
    sinkhorn_tol: float = 1e-9
    emd_max_iter: int = 10_000_000
    progress: bool | None = None

    def __post_init__(self) -> None:
        def bad(key: str, what: str) -> ValueError:
            return ValueError(f"jko.{key}: {what}, got {getattr(self, key)!r}")

        for key in ("T", "tau", "eps_scale", "gap_rtol"):
            v = getattr(self, key)
            if isinstance(v, bool) or not isinstance(v, (int, float)) or not math.isfinite(v) \
                    or v <= 0:
                raise bad(key, "must be a finite number > 0")
        if self.eps is not None and not (isinstance(self.eps, (int, float))
                                         and math.isfinite(self.eps) and self.eps > 0):
            raise bad("eps", "must be a finite number > 0 (or omitted for the default rule)")
        if not (isinstance(self.eps_power, (int, float)) and self.eps_power > 1):
            raise bad("eps_power", "must be > 1 (ε = o(τ) avoids a spurious diffusion)")
        if self.ot not in OT_METHODS:
            raise bad("ot", f"must be one of {list(OT_METHODS)}")
        if self.inner not in INNER_SOLVERS:
            raise bad("inner", f"must be one of {list(INNER_SOLVERS)}")
        if self.mobility_mean not in MOBILITY_MEANS:
            raise bad("mobility_mean", f"must be one of {list(MOBILITY_MEANS)}")
        for key in ("max_inner", "verify_max_cells", "max_pairs", "dense_ot_max_cells",
                    "sinkhorn_max_iter", "emd_max_iter"):
            v = getattr(self, key)
            if isinstance(v, bool) or not isinstance(v, int) or v < 1:
                raise bad(key, "must be an integer >= 1")
        n = self.T / self.tau
        if abs(n - round(n)) > 1e-9 * max(1.0, n) or round(n) < 1:
            raise ValueError(f"jko.T: must be a positive multiple of jko.tau = {self.tau!r}, "
                             f"got T = {self.T!r} (T/τ = {n:.6g})")

    @property
    def steps(self) -> int:
        """Number of JKO steps ``T/τ``."""
        return int(round(self.T / self.tau))

    @property
    def epsilon(self) -> float:
        """Entropic ``ε`` (0 for exact transport)."""
        if self.ot == "emd":
            return 0.0
        return float(self.eps) if self.eps is not None else \
            float(self.eps_scale * self.tau ** self.eps_power)


#: The ``[jko]`` table: ``key -> (default, checker)``.
JKO_SCHEMA: Spec = {
    "mesh": (None, string),
    "T": (None, number(0, strict_lo=True)),
    "tau": ("auto", _tau),
    "ot": ("emd", choice(*OT_METHODS)),
    "inner": ("gcg", choice(*INNER_SOLVERS)),
    "eps": (None, number(0, strict_lo=True)),
    "eps_scale": (1.0, number(0, strict_lo=True)),
    "eps_power": (2.0, number(1, strict_lo=True)),
    "mobility_mean": ("conformal", choice(*MOBILITY_MEANS)),
    "gap_rtol": (1e-6, number(0, strict_lo=True)),
    "max_inner": (500, number(1, integer=True)),
    "warm_start": (True, boolean),
    "verify": (None, boolean),
    "verify_max_cells": (2500, number(1, integer=True)),
    "neighbourhood": (True, boolean),
    "compare_pde": (False, boolean),
}

#: Keys of the ``[jko]`` scenario table (see :func:`jko_options_from_dict`).
JKO_SPEC = ("mesh", "T", "tau", "ot", "inner", "eps", "eps_scale", "eps_power",
            "mobility_mean", "gap_rtol", "max_inner", "warm_start", "verify",
            "verify_max_cells", "neighbourhood", "compare_pde")


def jko_options_from_dict(d: Mapping[str, Any] | None, *, T: float | None = None,
                          mesh: str | None = None) -> tuple[str, JKOOptions, dict]:
    """Validate a ``[jko]`` table; returns ``(mesh_spec, JKOOptions, extras)``.

    Keys (defaults): ``mesh`` (default: ``[pde] mesh`` or the shipped default),
    ``T`` (default: ``[pde] T`` or 1), ``tau = "auto"`` (chosen from the mesh by the
    scenario jobs, :func:`auto_tau`; ``extras["tau_auto"]``, the returned options hold
    ``tau = T`` until then) or a number, ``ot = "emd" | "sinkhorn"``,
    ``inner = "gcg" | "mirror"``, ``eps`` (default ``eps_scale · tau^eps_power``; with
    ``tau = "auto"`` and ``ot = "sinkhorn"``: ``h²/min b̂``, the Gibbs kernel of width
    ``√(ε b̂)`` spans a cell),
    ``eps_scale = 1``, ``eps_power = 2``, ``mobility_mean = "conformal"``,
    ``gap_rtol = 1e-6``, ``max_inner = 500``, ``warm_start = true``, ``verify``
    (default: when the mesh has <= ``verify_max_cells = 2500`` cells),
    ``neighbourhood = true``, ``compare_pde = false`` (also solve the PDE with the
    surrogate velocity and record ``W_2`` JKO vs PDE at every ``t_k``; ``extras``).
    Errors name the key (``jko.<key>: ...``).
    """
    vals = take(d or {}, JKO_SCHEMA, "jko")
    mesh_spec = vals.pop("mesh") or mesh or "default"
    Tv = vals.pop("T")
    vals["T"] = float(Tv if Tv is not None else (T if T is not None else 1.0))
    auto = vals["tau"] == "auto"
    if auto:
        vals["tau"] = vals["T"]  # placeholder: one step, until the job knows the mesh
    extras = {"compare_pde": vals.pop("compare_pde"), "tau_auto": auto,
              "eps_auto": auto and vals["eps"] is None}
    return mesh_spec, JKOOptions(**vals), extras
