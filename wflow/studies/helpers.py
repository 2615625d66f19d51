"""Helpers of the studies: head builders, token layouts, rates, times, the engine's accuracy.

Head builders, token layouts, fitted rates and clustering times of the [MH] studies; the
particle engine's accuracy check as a criterion (:func:`run_accuracy`,
:func:`accuracy_criterion`); the negative controls several studies share
(:data:`VELOCITY_FAMILY`, :func:`value_scale`, and the words of the ``time-doubled`` and
``no-mobility`` controls, :func:`time_doubled_fault`, :func:`no_mobility_fault`).
"""

from __future__ import annotations

import logging
import warnings
from typing import NamedTuple

import numpy as np

from ..attention.heads import Attention, Heads
from ..attention.schedules import Static
from ..diagnostics import mean_inner_product
from ..geometry.sphere import check_on_sphere
from ..status import Status
from .base import Criterion

__all__ = [
    "head_overlap",
    "approx_orthogonal_heads",
    "block_heads",
    "spread_tokens",
    "reduce_to_span",
    "fit_early_rate",
    "fit_decay_rate",
    "clustering_time",
    "ClusteringRun",
    "particle_clustering_time",
    "run_accuracy",
    "accuracy_criterion",
    "VELOCITY_FAMILY",
    "time_doubled_fault",
    "no_mobility_fault",
    "value_scale",
]

logger = logging.getLogger(__name__)


# ------------------------------------------------------------------------- head builders
def head_overlap(heads: Heads) -> float:
    """``max_{h≠h'} ‖A_{h'} A_h‖_op`` (0 for one head)."""
    A = heads.A
    best = 0.0
    for h in range(heads.H):
        for g in range(heads.H):
            if g != h:
                best = max(best, float(np.linalg.norm(A[g] @ A[h], 2)))
    return best


def block_heads(H: int, d: int, alpha: float, *, w: float | np.ndarray = 1.0) -> Heads:
    """Heads in orthogonal coordinate blocks: ``A_h = V_h = Hα P_h``, block size ``d // H``.

    ``P_h`` projects on coordinates ``[h k, (h+1) k)``, ``k = d // H``; ``A_h A_h' = 0``.
    """
    if H < 1 or d < H:
        raise ValueError(f"block_heads: need 1 <= H <= d, got H={H}, d={d}")
    k = d // H
    A = np.zeros((H, d, d))
    for h in range(H):
        idx = np.arange(h * k, (h + 1) * k)
        A[h, idx, idx] = H * alpha
    return Heads.bilinear(A, w=w)


def spread_tokens(n: int, H: int, d: int | None = None) -> np.ndarray:
    """Orthonormal tokens ``x_i = H^{-1/2} Σ_h e_{h k + i}`` spread over the ``H`` blocks.

    Each block ``h`` (size ``k = d // H >= n``) sees the orthogonal vectors ``e_{hk+i}/√H``.
    """
    d = H * n if d is None else d
    k = d // H
    if k < n:
        raise ValueError(f"spread_tokens: need block size d // H >= n, got d={d}, H={H}, n={n}")
    x = np.zeros((n, d))
    for h in range(H):
        x[np.arange(n), h * k + np.arange(n)] = 1.0 / np.sqrt(H)
    return x


def approx_orthogonal_heads(H: int, d: int, *, scale: float, delta: float,
                            rng: np.random.Generator, w: float | np.ndarray = 1.0,
                            tol: float = 1e-10) -> Heads:
    """Symmetric PSD heads ``A_h = scale · U_h U_hᵀ`` with ``max ‖A_{h'}A_h‖_op = δ`` exactly.

    ``U_h`` is the orthonormal basis (QR) of ``E_h + t G_h``, ``E_h`` the coordinate block
    ``h`` (size ``k = d // H``) and ``G_h`` standard normal; ``t >= 0`` is found by
    bisection so that ``max_{h≠h'} ‖A_{h'}A_h‖_op = δ`` to relative ``tol``
    (``δ = 0``: exact blocks, ``A_{h'}A_h = 0``). Value-aligned (``V_h = A_h``).

    Parameters
    ----------
    scale : float
        ``‖A_h‖_op = scale > 0``.
    delta : float
        Target overlap, ``0 <= δ < scale²/2`` (larger values need non-generic frames).
    """
    if not (np.isfinite(scale) and scale > 0):
        raise ValueError(f"scale: must be finite and > 0, got {scale!r}")
    if not (np.isfinite(delta) and 0 <= delta < 0.5 * scale**2):
        raise ValueError(f"delta: must lie in [0, scale²/2) = [0, {0.5 * scale**2}), got {delta!r}")
    if H < 1 or d < H:
        raise ValueError(f"approx_orthogonal_heads: need 1 <= H <= d, got H={H}, d={d}")
    k = d // H
    E = [np.eye(d)[:, h * k:(h + 1) * k] for h in range(H)]
    G = [rng.standard_normal((d, k)) for _ in range(H)]

    def build(t: float) -> Heads:
        A = np.empty((H, d, d))
        for h in range(H):
            U, _ = np.linalg.qr(E[h] + t * G[h])
            A[h] = scale * (U @ U.T)
            A[h] = 0.5 * (A[h] + A[h].T)
        return Heads.bilinear(A, w=w)

    if delta == 0 or H == 1:
        return build(0.0)
    lo, hi = 0.0, 1.0
    while head_overlap(build(hi)) < delta:
        hi *= 2.0
        if hi > 1e6:
            raise ValueError(f"delta: overlap {delta} not reachable with H={H}, d={d}")
    for _ in range(200):
        mid = 0.5 * (lo + hi)
        if head_overlap(build(mid)) < delta:
            lo = mid
        else:
            hi = mid
        if hi - lo <= tol * hi:
            break
    return build(hi)



def reduce_to_span(x: np.ndarray) -> np.ndarray:
    """Tokens expressed in an orthonormal basis of their span: ``(n, d) → (n, r)``, ``r = rank``.

    The Gram matrix is preserved. For scalar heads (``A_h = V_h = λ_h I``, any kind) the
    velocity ``P_{x_i} Σ_j k_ij x_j`` lies in ``span{x_j}``, so the span is invariant and the
    flow of the reduced tokens is the flow of the original ones (``O(d)``-equivariance):
    ``x(t) = y(t) Bᵀ``. This lets studies use random tokens in large ``d`` at cost ``O(n)``
    per dimension.
    """
    x = check_on_sphere(x, name="tokens")
    q, r = np.linalg.qr(x.T)  # x.T = q r, x = rᵀ qᵀ
    keep = np.abs(np.diag(r)) > 1e-12 * max(1.0, float(np.max(np.abs(r))))
    y = r.T[:, keep] if np.all(keep) else x @ q[:, keep]
    return y / np.linalg.norm(y, axis=1, keepdims=True)


def fit_early_rate(t: np.ndarray, q: np.ndarray, *, tau: float, degree: int = 6) -> float:
    """``q'(0)`` from a least-squares polynomial of ``degree`` fitted on ``0 <= t <= tau``.

    For a smooth noiseless trajectory the error is ``O(tau^degree)`` (truncation) plus the
    integrator error amplified by ``~1/tau``; use a ``tau`` well inside the early phase
    (e.g. ``γ(τ) <= 0.05``) and at least ``degree + 2`` samples.
    """
    t = np.asarray(t, dtype=np.float64)
    q = np.asarray(q, dtype=np.float64)
    sel = t <= tau * (1 + 1e-12)
    if sel.sum() < degree + 2:
        raise ValueError(f"fit_early_rate: need at least {degree + 2} samples in [0, tau], "
                         f"got {int(sel.sum())}")
    coef = np.polynomial.polynomial.polyfit(t[sel], q[sel], degree)
    return float(coef[1])


def fit_decay_rate(t: np.ndarray, r: np.ndarray, *, lo: float, hi: float) -> tuple[float, int]:
    """Exponential decay rate ``k`` of ``r(t) ≈ C e^{−k t}`` fitted on ``lo <= r <= hi``.

    Returns ``(k, number of samples used)``; needs at least 3 samples in the window.
    """
    t = np.asarray(t, dtype=np.float64)
    r = np.asarray(r, dtype=np.float64)
    sel = (r >= lo) & (r <= hi)
    if sel.sum() < 3:
        raise ValueError(f"fit_decay_rate: fewer than 3 samples with {lo} <= r <= {hi}")
    slope = np.polyfit(t[sel], np.log(r[sel]), 1)[0]
    return float(-slope), int(sel.sum())


def clustering_time(t: np.ndarray, q: np.ndarray, threshold: float) -> float:
    """First time ``q(t) >= threshold``, linearly interpolated between recorded steps.

    Returns ``nan`` if the threshold is never reached (the caller decides; never a guess),
    ``t[0]`` if it holds initially.
    """
    t = np.asarray(t, dtype=np.float64)
    q = np.asarray(q, dtype=np.float64)
    if t.shape != q.shape or t.ndim != 1:
        raise ValueError(f"clustering_time: t and q must be 1-D of equal length, got "
                         f"{t.shape}, {q.shape}")
    hit = np.nonzero(q >= threshold)[0]
    if hit.size == 0:
        return float("nan")
    k = int(hit[0])
    if k == 0:
        return float(t[0])
    t0, t1, q0, q1 = t[k - 1], t[k], q[k - 1], q[k]
    return float(t0 + (threshold - q0) * (t1 - t0) / (q1 - q0))


class ClusteringRun(NamedTuple):
    """Result of :func:`particle_clustering_time`.

    ``status``: ``"success"`` (threshold reached), ``"stalled"`` (an equilibrium below the
    threshold: max token speed fell under ``v_tol``) or ``"not_reached"`` (``T_max`` hit).
    ``time`` is the interpolated clustering time (``nan`` unless ``"success"``).
    """

    status: str
    time: float
    t: np.ndarray
    mean_inner: np.ndarray


def particle_clustering_time(x0: np.ndarray, heads: Heads, attn: Attention, *,
                             threshold: float = 0.9, dt: float = 0.05, T_max: float = 1e3,
                             v_tol: float = 1e-9) -> ClusteringRun:
    """First time the mean pairwise inner product ``q`` of the particles reaches ``threshold``.

    Runs the particle system (RK4, :func:`wflow.particles.iterate`) until then. Every step
    is recorded (``q`` at the RK4 grid; linear interpolation of the crossing, error
    ``O(dt² |q''|)``). Stops early with ``"stalled"`` when ``max_i |ẋ_i| < v_tol`` (e.g. ReLU
    multi-cluster equilibria, whose clusters have non-positive mutual inner products and no
    longer interact) and with ``"not_reached"`` at ``T_max``; both warn.
    """
    from ..particles import iterate

    if not -1 < threshold < 1:
        raise ValueError(f"threshold: must lie in (-1, 1), got {threshold}")
    ts, qs = [], []
    status = "not_reached"
    for st in iterate(x0, Static.of(heads), attn, T=T_max, dt=dt, integrator="rk4"):
        ts.append(st.t)
        qs.append(mean_inner_product(st.x))
        if qs[-1] >= threshold:
            status = Status.SUCCESS
            break
        if float(np.max(np.linalg.norm(st.velocity, axis=1))) < v_tol:
            status = "stalled"
            break
    t, q = np.asarray(ts), np.asarray(qs)
    if status != Status.SUCCESS:
        warnings.warn(f"particle_clustering_time: {status}: mean inner product {q[-1]:.3f} "
                      f"below {threshold} at t = {t[-1]:.4g}", stacklevel=2)
        return ClusteringRun(status, float("nan"), t, q)
    return ClusteringRun(status, clustering_time(t, q, threshold), t, q)


# ------------------------------------------------------------------ the engine's accuracy
def run_accuracy(res, study: str) -> float:
    """Chain-rule residual of a particle run over the engine's tolerance (``<= 1``: accurate).

    The engine (:func:`wflow.particles.simulate`) checks the energy chain rule
    ``ΔE = ∫∂_tE + ∫power (+ Itô + M)`` of every run at the integrator's balance order
    (``res.checks["chain"]``: worst path's relative residual and its tolerance) and calls
    a run that misses it ``"inaccurate"``. A non-finite run (``"failed"``) raises
    ``FloatingPointError``; an inaccurate one returns its ratio, so that the study's
    verdict FAILs on :func:`accuracy_criterion` instead of raising: a faulted solver that
    the engine's own check flags (a dropped softmax mobility speeds the flow up past what
    the step resolves) still gets a verdict naming it.
    """
    if res.status == Status.FAILED:
        raise FloatingPointError(f"{study}: particle run failed: {res.message}")
    chk = res.checks.get("chain")
    if chk is None:  # no chain-rule check recorded: accurate only if the engine says so
        return 0.0 if res.status == Status.SUCCESS else float("inf")
    return float(chk["value"]) / float(chk["tolerance"])


def accuracy_criterion(worst: float, hi: float = 1.0, why: str = "") -> Criterion:
    """``particle_accuracy``: the worst :func:`run_accuracy` of a study's runs, ``<= hi``.

    ``hi = 1``: the engine's own tolerance; a study whose runs are stochastic (the worst
    path's residual is a random variable) may set ``hi`` from its null distribution
    (``why`` says how).
    """
    return Criterion("particle_accuracy", worst, hi=hi,
                     what="worst chain-rule residual of the particle runs over the "
                          "engine's tolerance",
                     why=why or ("the engine's accuracy check at the integrator's balance "
                                 "order: an inaccurate run's numbers are not the theory's"))


# ------------------------------------------------------ faults of the particle studies
#: The fault family of the particle studies: the particle heads' value matrices scaled by
#: ``1 + s`` (``run(fault="velocity:S")``, sizes scanned by bench/size_power.py).
VELOCITY_FAMILY = {"velocity": "the particle heads have value matrices ×(1 + s) (velocity "
                               "and time scaled) while the formulas use the nominal heads"}


def time_doubled_fault(then: str,
                       who: str = "the particle heads have doubled value matrices") -> str:
    """The words of the ``time-doubled`` control: every value matrix ×2.

    Parameters
    ----------
    then : str
        What stays nominal, from ``"while"`` or ``"against"`` on (the theory side).
    who : str
        What runs doubled, with its verb.

    Returns
    -------
    str
        ``"{who} (time runs twice as fast) {then}"``: one description for every study.
    """
    return f"{who} (time runs twice as fast) {then}"


def no_mobility_fault(who: str, then: str = "") -> str:
    """The words of the ``no-mobility`` control: the softmax mobility ``1/Z`` dropped.

    Parameters
    ----------
    who : str
        What drops it, with its verb (``"the particles drop"``).
    then : str
        What stays softmax, from ``"while"`` or ``"against"`` on; ``""``: nothing added.

    Returns
    -------
    str
        One description for every study (unnormalised attention, kind ``usa``, same ``β``).
    """
    words = f"{who} the softmax mobility 1/Z (unnormalised attention, kind 'usa', same β)"
    return f"{words} {then}" if then else words


def value_scale(fault: str | None, family: str | None, size: float) -> float:
    """Factor of the particle heads' value matrices under a fault (velocity and time).

    ``2`` for the ``time-doubled`` control, ``1 + s`` in the :data:`VELOCITY_FAMILY`
    (``family``, ``size`` from :func:`wflow.studies.base.read_fault`), else ``1``.
    """
    return 2.0 if fault == "time-doubled" else (1.0 + size if family == "velocity" else 1.0)
