"""One JKO step: ``μ_{k+1} ∈ argmin_ν (1/2τ) W²_{b̂_k}(μ_k, ν) − sE(ν, t_{k+1})``.

Per-step records (:class:`JKOStepInfo`): ``W²_{b̂_k}(μ_k, μ_{k+1})`` (exact ``W²`` also
for entropic steps), the OT term, the objective, inner iterations, the optimality gap,
and the POT cross-checks.
"""

from __future__ import annotations

import time
from typing import NamedTuple

import numpy as np

from ..attention.diffusion import DIFFUSION_KEY, check_diffusion
from ..attention.heads import Attention, Heads
from ..energy import evaluate, head_energies, slope_terms
from ..infra.schema import ScenarioError
from .cost import _Geometry
from .energy import _check_heads, energy_gradient
from .inner import _gcg, _mirror
from .options import JKOOptions
from .oracle import _Oracle
from .pot import _POT

__all__ = [
    "JKOStepInfo",
    "jko_step",
]


class JKOStepInfo(NamedTuple):
    """What one JKO step did.

    Attributes
    ----------
    W2sq : float
        ``W²_{b̂_k}(μ_k, μ_{k+1})`` (exact transport cost; see the module docstring).
    ot_value : float
        The OT term of the objective: ``W2sq`` (exact) or ``OT_ε`` (entropic).
    objective : float
        ``J_k(μ_{k+1}) = ot_value/(2τ) − sE(μ_{k+1}, t_{k+1})``.
    inner_iters : int
    gap, gap_rel : float
        Final first-order optimality gap and ``gap/scale``.
    converged : bool
    W2sq_pot : float
        POT cross-check of ``W2sq`` (``ot.emd2``), NaN when not verified.
    gap_pot : float
        The optimality gap recomputed with the POT value of ``OT(μ_k, μ_{k+1})``
        (``ot.emd2`` / log-domain ``ot.sinkhorn``) instead of the tracked plan cost;
        NaN when not verified.
    pairs : int
        Candidate pairs scanned per oracle call (``M²`` when dense).
    time : float
        Wall time of the step (s).
    scheme : str
        ``"ot"`` or ``"fv"``.
    substeps, newton_iters : int
        FV: pseudo-time substeps and Newton iterations (0 for the OT scheme).
    monotone : bool
        FV: the step objective never increased along the CCP iterations.
    min_ratio : float
        FV: ``min_K m^{k+1}_K / m^k_K`` over the cells holding mass (NaN for OT).
    free : dict or None
        FV with token diffusion ``D > 0``: the step's ``free_edi_step``, ``W2sq_entropy``,
        ``entropy_newton`` (:class:`wflow.jko.fv.FVStepResult`); else None.
    """

    W2sq: float
    ot_value: float
    objective: float
    inner_iters: int
    gap: float
    gap_rel: float
    converged: bool
    W2sq_pot: float
    gap_pot: float
    pairs: int
    time: float
    scheme: str = "ot"
    substeps: int = 0
    newton_iters: int = 0
    monotone: bool = True
    min_ratio: float = float("nan")
    free: dict | None = None


def jko_step(points: np.ndarray, areas: np.ndarray, mu: np.ndarray, heads: Heads,
             attn: Attention, *, options: JKOOptions, bhat: np.ndarray | None = None,
             slope2: float | None = None, energy: float | None = None,
             _geo: _Geometry | None = None, _warm: dict | None = None,
             diffusion: float = 0.0) -> tuple[np.ndarray, JKOStepInfo]:
    """One JKO step ``μ_k -> μ_{k+1}`` with the heads of time ``t_{k+1}``.

    Parameters
    ----------
    points : (M, 3) array
        Projected cell centroids (unit vectors).
    areas : (M,) array
        Cell areas (the reference measure ``α`` of the entropic term).
    mu : (M,) array
        Cell masses ``μ_k`` (sum 1).
    heads, attn
        Heads at ``t_{k+1}`` (symmetric, value-aligned).
    options : JKOOptions
    bhat : (M,) array, optional
        Lagged mobility ``b̂[μ_k]`` (computed with the given heads if omitted).
    slope2, energy : float, optional
        ``|∂E|²(μ_k)`` and ``E(μ_k)`` for the stopping scale (computed if omitted).
    diffusion : float
        Token diffusion ``D``: the OT scheme has no entropy term, so ``D > 0`` is refused
        (:class:`~wflow.infra.schema.ScenarioError` naming ``attention.diffusion``; the
        finite-volume scheme carries it, :func:`wflow.jko.fv.fv_step`).

    Returns
    -------
    (ν, JKOStepInfo)
        ``ν = μ_{k+1}`` (masses, sum 1) and the step record.
    """
    if check_diffusion(diffusion) > 0:
        raise ScenarioError(
            f"{DIFFUSION_KEY}: the OT JKO scheme (jko.scheme = \"ot\") has no entropy term, "
            f"so token diffusion D = {diffusion:g} would have no effect; use jko.scheme = "
            "\"fv\" (the Jordan–Kinderlehrer–Otto step with D Σ m log(m/σ))")
    t0 = time.perf_counter()
    opts = options
    s = _check_heads(heads)
    mu = np.asarray(mu, dtype=np.float64)
    if bhat is None or slope2 is None or energy is None:
        fe = evaluate(points, heads, attn, m=mu)
        bhat = fe.bhat if bhat is None else bhat
        if slope2 is None:
            slope2 = slope_terms(points, mu, fe, heads, fe.vhat).slope2
        if energy is None:
            energy = float(heads.w @ head_energies(fe, mu, attn))
    geo = _geo or _Geometry(points, areas, opts)
    warm = {} if _warm is None else _warm
    tau, eps = opts.tau, opts.epsilon
    scale = max(tau * slope2, 1e-12 * abs(energy), 1e-300)
    tol = opts.gap_rtol * scale

    def gradF(nu: np.ndarray) -> np.ndarray:
        return s * energy_gradient(points, nu, heads, attn)

    pot = _POT(geo, bhat, opts, eps, warm)
    oracle = _Oracle(geo, bhat, tau, eps, opts.mobility_mean)
    if opts.inner == "gcg":
        res = _gcg(mu, gradF, oracle, tau=tau, eps=eps, tol=tol, max_inner=opts.max_inner)
        npairs = oracle.n_pairs
    else:
        res = _mirror(mu, gradF, pot, oracle, tau=tau, eps=eps, tol=tol,
                      max_inner=opts.max_inner, alpha=geo.alpha)
        npairs = geo.M * geo.M
    nu = res.nu / res.nu.sum()
    # default: cross-check exact steps with ot.emd2 on small meshes; the log-domain
    # Sinkhorn check of entropic steps is slow (thousands of iterations at small ε) and
    # runs only on request
    verify = opts.verify if opts.verify is not None else (
        eps == 0.0 and geo.M <= opts.verify_max_cells)
    W2_pot = gap_pot = float("nan")
    oracle_min = oracle(mu, res.g)[1] if verify else 0.0
    if eps == 0.0:
        W2sq = res.transport
        ot_value = W2sq
        if verify:
            W2_pot, _ = pot.emd(mu, nu, sparse=opts.inner == "gcg")
            gap_pot = W2_pot / (2.0 * tau) - float(res.g @ nu) - oracle_min
            if opts.inner == "mirror":
                W2sq = ot_value = W2_pot
    else:
        ot_value = 2.0 * tau * res.LR
        # the EDI needs the exact W² of the step (the entropic transport cost carries
        # an O(ε) blur per step)
        # (beyond dense_ot_max_cells: on the candidate graph, an upper bound that is exact
        # when the optimal plan stays within the Gibbs support)
        W2sq, _ = pot.emd(mu, nu, sparse=True)
        if verify:
            init = None
            if opts.inner == "gcg":
                # the GCG plan is diag(u) K diag(v) with log u = log μ − lse, log v = log α
                # + 2τg/ε: Sinkhorn started there only has to confirm the marginals
                rows_, cols_ = np.flatnonzero(mu > 0), np.flatnonzero(nu > 0)
                init = (np.log(mu[rows_]) - oracle.last_lse[rows_],
                        geo.log_alpha[cols_] + 2.0 * tau * res.g[cols_] / eps)
            val, _, _, _ = pot.sinkhorn(mu, nu, init=init)
            gap_pot = val / (2.0 * tau) - float(res.g @ nu) - oracle_min
            W2_pot = W2sq
    Fnew = 0.5 * float(nu @ gradF(nu))
    info = JKOStepInfo(
        W2sq=float(W2sq), ot_value=float(ot_value),
        objective=float(ot_value / (2.0 * tau) - Fnew), inner_iters=int(res.iters),
        gap=float(res.gap), gap_rel=float(res.gap / scale), converged=bool(res.converged),
        W2sq_pot=float(W2_pot), gap_pot=gap_pot, pairs=int(npairs),
        time=time.perf_counter() - t0)
    if not opts.warm_start:
        geo.drop_cache()
        warm.clear()
    return nu, info
