r"""``wflow reproduce castin_ranks``: ranks of the limit covariance of the softmax moment ODE.

The published experiment is the *Traditional self-attention* section of
``histograms.py`` with ``utils.py`` in ``vcastin/2025-transformers-PDEs`` (Castin–Ablin–
Carrillo–Peyré, *A unified perspective on the dynamics of deep transformers*), commit
``53ad7f3``. For a Gaussian measure the softmax transformer PDE closes on its covariance:

.. math:: \\dot Σ = VΣAΣ + (VΣAΣ)^⊤,\\qquad A = K^⊤Q/\\sqrt d,

and the paper histograms the rank of the limit of ``Σ`` over random draws. Conventions,
term by term (``h`` = ``histograms.py``, ``u`` = ``utils.py``):

=======================  ==============================================================
convention               published (line)
=======================  ==============================================================
draws                    ``d ∈ {3, 4, 5}``, 100 per ``d`` (h 12-13); ``Q ∈ R^{⌊d/2⌋×d}``
                         standard normal from ``np.random.seed(40)`` for all ``d`` in
                         order (h 9, 16), ``K = −Q`` (h 17), so ``A = −QᵀQ/√d ≤ 0``
value                    ``V = I`` (h 27), or ``V = WᵀW`` with ``W`` normal from
                         ``np.random.seed(26)`` (h 39-42)
initial covariance       ``Σ₀ = GGᵀ``, ``G`` normal ``d×d``, ``np.random.seed(41)`` at the
                         start of every ``d`` (u 309, 317-318), one per attempt
right-hand side          ``A = (Kᵀ·Q)/√d``, ``R = (V·Σ)·(A·Σ)``, ``R + Rᵀ`` (u 11-14)
integrator               projected Euler: ``Σ ← P(Σ + h R)`` with ``P`` = eigen-
                         decomposition, negative eigenvalues set to ``1e-14`` (u 60-64,
                         88-89); ``h`` = 0.09, 0.05, 0.02 (``V = I``) and 0.09, 0.06,
                         0.02 (``V`` random) for ``d`` = 3, 4, 5 (h 22, 43)
stopping rule            converged when ``‖R‖_F < tol`` (checked after the update,
                         u 87-95): ``tol`` = 1e-4, at most 60 000 steps (``V = I``,
                         h 32-33); 5e-5 and 90 000 (``V`` random, h 57-58); diverged
                         when ``tr Σ > 1e3`` (u 77, 96)
limit                    the *last recorded* iterate, i.e. ``Σ`` before the final
                         update (u 85, 334)
rank                     ``#{eigenvalues > 0.1}`` (u 335, ``tol_rank``, h 34, 59)
rejection                an attempt that did not converge draws a new ``Σ₀`` for the same
                         ``(Q, K, V)`` (u 314-343); a converged one with rank
                         ``> ⌊(d+1)/2⌋`` is an *exception*: counted, left out of the
                         histogram (u 336-341); at most ``n_max`` attempts per ``d``
                         (1000 for ``V = I``, 10 000 for ``V`` random, h 60)
=======================  ==============================================================

The NumPy operations are the published ones in the published order (same BLAS and LAPACK
calls on ``d×d`` arrays), so with the same NumPy the iterates agree bit for bit; the tests
check ranks, iteration counts and limits against the published code run on this machine.

Speed (``RankOptions.lanes``, default 128). The published loop is sequential: attempt
``k`` uses the draw of index ``i`` = the number of earlier attempts that converged. The
batched engine (:class:`_Speculator`) integrates many ``(k, i)`` nodes at once in
stacked NumPy calls (:func:`batched_euler_step`: the same ``gemm``/``syevd`` per slice,
~3 µs per lane and step against ~19 µs for the scalar step, which is Python overhead
around ``eigh``), spends its lanes on the nodes most likely on the published path, and
commits only nodes whose predecessors' outcomes are known: the published attempts bit for
bit whatever it guesses (tests against the scalar loop and the published run). A compiled
(numba) loop was not used: numba's LAPACK is SciPy's OpenBLAS (another version than
NumPy's), so its ``eigh`` is not guaranteed bit-identical, and ``eigh`` is the cost.

wflow's better solver (:func:`exact_limit`). For ``V = I`` the ODE is solved in closed
form: ``Σ(t) = (Σ₀^{-1} − 2tA)^{-1}`` (differentiate: ``Σ̇ = 2ΣAΣ``), whose limit is
``Σ_∞ = N (Nᵀ Σ₀^{-1} N)^{-1} Nᵀ`` with ``N`` an orthonormal basis of ``ker Q``; its
rank is ``d − ⌊d/2⌋ = ⌈d/2⌉`` exactly. For random ``V`` (no closed form) the ODE is
integrated by :func:`scipy.integrate.solve_ivp` (LSODA, ``rtol = 1e-10``) to
``t = 10⁶`` and on by decades to ``10¹⁰`` while some direction is neither settled (1%
over a decade) nor decaying (a factor 5 per decade; ``1/t`` gives 10): directions still
in transition at ``10¹⁰`` (nearly singular ``V``) are *unsettled*, and the limit's rank
is then only bracketed (:func:`exact_limit`). Both solvers' ranks use the published
threshold 0.1 as well.

The claim (what the histograms and the rejection rule say): *the covariance converges to
a low-rank matrix, of rank at most* ``⌈d/2⌉`` *for every draw.*
"""

from __future__ import annotations

import logging
import time
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any, Literal

import numpy as np

from ..infra.parallel import parallel_map

__all__ = [
    "CASES",
    "RankCase",
    "RankOptions",
    "rhs_softmax",
    "psd_project",
    "projected_euler",
    "draw_matrices",
    "run_case_dim",
    "exact_limit",
    "run_ranks",
    "judge_ranks",
    "write_ranks",
]

logger = logging.getLogger(__name__)

PAPER = ("Castin, Ablin, Carrillo, Peyré, A unified perspective on the dynamics of deep "
         "transformers; code vcastin/2025-transformers-PDEs, histograms.py (traditional "
         "self-attention) + utils.py")
CLAIM = ("the covariance of the softmax moment ODE converges to a low-rank matrix: rank of "
         "the limit <= ceil(d/2) for every draw (K = -Q, Q in R^{floor(d/2) x d})")


@dataclass(frozen=True)
class RankCase:
    """One published panel row: value matrix and integrator settings per dimension."""

    name: str
    value: Literal["identity", "random"]
    steps: tuple[float, ...]
    tol: float
    max_iter: int
    n_max_factor: int | None  # n_max = factor * n_per_dim; None: the published 1000


#: The two rows of ``histograms_trad.pdf`` (h 20-35 and 38-61).
CASES: dict[str, RankCase] = {
    "identity": RankCase("identity", "identity", (0.09, 0.05, 0.02), 1e-4, 60000, None),
    "random": RankCase("random", "random", (0.09, 0.06, 0.02), 5e-5, 90000, 100),
}


@dataclass(frozen=True)
class RankOptions:
    """Settings of :func:`run_ranks` (defaults: the published full scale).

    Parameters
    ----------
    dims : tuple of int
        Dimensions (published 3, 4, 5).
    n_per_dim : int
        Converged draws per dimension (published 100); also sizes the ``Q`` and ``V``
        lists as published (``np.repeat(dims, n_per_dim)``).
    cases : tuple of str
        Keys of :data:`CASES`.
    max_iter : int, optional
        Override the published step limits (quick mode only; changes the numbers).
    exact : bool
        Also run wflow's solver (:func:`exact_limit`) on every attempt.
    seed_q, seed_v, seed_init : int
        Published 40, 26, 41.
    tol_rank : float
        Published 0.1.
    lanes : int
        ``0`` (default): the published loop, one attempt after the other
        (:func:`projected_euler`, ~11 µs per step). ``L > 0``: the batched speculative
        engine (:class:`_Speculator`) on ``L`` lanes, the same numbers; fast where its
        guesses hold (68 s → 16 s of CPU against the untrimmed scalar loop on a
        ``max_iter = 1500`` case whose attempts all fail alike), but at the published
        scale it integrated 2.9× the published loop's steps (the random-``V`` outcomes
        are hard to guess) and was slower than the trimmed scalar loop.
    """

    dims: tuple[int, ...] = (3, 4, 5)
    n_per_dim: int = 100
    cases: tuple[str, ...] = ("identity", "random")
    max_iter: int | None = None
    exact: bool = True
    seed_q: int = 40
    seed_v: int = 26
    seed_init: int = 41
    tol_rank: float = 0.1
    lanes: int = 0

    def __post_init__(self) -> None:
        if self.lanes < 0:
            raise ValueError("castin_ranks: lanes >= 0 required")
        if self.n_per_dim < 1 or not self.dims or min(self.dims) < 2:
            raise ValueError("castin_ranks: n_per_dim >= 1 and dims >= 2 required")
        bad = [c for c in self.cases if c not in CASES]
        if bad:
            raise ValueError(f"castin_ranks: unknown cases {bad}; known {list(CASES)}")

    @classmethod
    def quick(cls, **changes: Any) -> RankOptions:
        """Seconds: the ``V = I`` row, 3 draws per dimension, published settings.

        The random-``V`` row needs ~2·10⁶ projected-Euler steps even for 3 draws.
        """
        base: dict[str, Any] = {"n_per_dim": 3, "cases": ("identity",)}
        base.update(changes)
        return cls(**base)


def rhs_softmax(S: np.ndarray, Q: np.ndarray, K: np.ndarray, V: np.ndarray, d: int
                ) -> np.ndarray:
    """``R + Rᵀ`` with ``R = (VΣ)(AΣ)``, ``A = KᵀQ/√d`` (u 11-14, same operations)."""
    A = np.dot(K.T, Q) / np.sqrt(d)
    R = np.dot(np.dot(V, S), np.dot(A, S))
    return R + R.T


def psd_project(S: np.ndarray, floor: float = 1e-14) -> np.ndarray:
    """Eigenvalues below 0 set to ``floor``, ``U diag(λ) Uᵀ`` (u 60-64, same operations)."""
    lam, U = np.linalg.eigh(S)
    lam[lam < 0] = floor
    return U.dot(np.diag(lam).dot(U.T))


try:  # the gufunc behind np.linalg.eigh: the same LAPACK call without its Python wrapper
    from numpy.linalg._umath_linalg import eigh_lo as _eigh_lo
except ImportError:  # pragma: no cover - another NumPy layout: the public call
    _eigh_lo = None


def _eigh(S: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """``np.linalg.eigh(S)`` for a real ``d×d`` array: the same gufunc, the same numbers."""
    if _eigh_lo is None:  # pragma: no cover
        return np.linalg.eigh(S)
    lam, U = _eigh_lo(S, signature="d->dd")
    if lam[0] != lam[0]:
        # NaN (a non-finite input or a LAPACK failure): the public call decides, as in
        # the published code, whether this raises or returns NaN (then carried on)
        return np.linalg.eigh(S)
    return lam, U


def projected_euler(S0: np.ndarray, Q: np.ndarray, K: np.ndarray, V: np.ndarray, *,
                    step: float, tol: float, max_iter: int, tol_high: float = 1e3
                    ) -> tuple[np.ndarray, int, bool]:
    """The published ``evolution`` (u 67-103): returns ``(Σ_last, iterations, converged)``.

    Each iteration records ``Σ``, evaluates ``R``, sets ``Σ ← P(Σ + hR)`` and then stops
    if ``‖R‖_F < tol`` (converged) or ``tr Σ > tol_high``. ``Σ_last`` is the last
    *recorded* iterate (before the final update), ``iterations`` the number recorded.

    The operations of :func:`rhs_softmax` and :func:`psd_project` with their Python
    overhead trimmed, the numbers unchanged: ``A`` evaluated once (the published code
    recomputes the same expression each step), ``np.linalg.norm``'s own computation for
    a 2-D array (``sqrt(x·x)`` over ``ravel``), the gufunc behind ``np.linalg.eigh``
    (:func:`_eigh`), ``diag(λ)`` written into one zero matrix. ~11 µs per step at d = 5
    against ~19 µs for the published code (bench); the tests check it bit for bit
    against the published run and against :func:`psd_project` ∘ :func:`rhs_softmax`.
    """
    d = S0.shape[0]
    A = np.dot(K.T, Q) / np.sqrt(d)
    dot, sqrt = np.dot, np.sqrt
    D = np.zeros((d, d))
    diag = np.arange(d)
    S = S0.copy()
    last = S
    converged = False
    n = 0
    for _ in range(max_iter):
        last = S  # S is rebound below, never written in place
        n += 1
        R = dot(dot(V, S), dot(A, S))
        R = R + R.T
        x = R.ravel()
        res = sqrt(x.dot(x))
        S = S + step * R
        lam, U = _eigh(S)
        lam[lam < 0] = 1e-14
        D[diag, diag] = lam
        S = U.dot(D.dot(U.T))
        if res < tol:
            converged = True
            break
        if S.trace() > tol_high:
            break
    return last, n, converged


def draw_matrices(opts: RankOptions, case: RankCase
                  ) -> tuple[list[np.ndarray], list[np.ndarray], list[np.ndarray]]:
    """``Q``, ``K = −Q`` and ``V`` lists, in the published order (h 9-17, 39-42)."""
    dim_rep = np.repeat(np.asarray(opts.dims), opts.n_per_dim)
    rq = np.random.RandomState(opts.seed_q)
    Qs = [rq.randn(d // 2, d) for d in dim_rep]
    Ks = [-Q for Q in Qs]
    if case.value == "identity":
        Vs = [np.eye(d) for d in dim_rep]
    else:
        rv = np.random.RandomState(opts.seed_v)
        Ws = [rv.randn(d, d) for d in dim_rep]
        Vs = [np.dot(W.T, W) for W in Ws]
    return Qs, Ks, Vs


def _classify(S1: np.ndarray, S2: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray,
                                                        np.ndarray]:
    """Eigen-directions of ``Σ`` at ``t`` (``S2``) against ``t/10`` (``S1``).

    Returns ``(λ, U, kept, unsettled)``: *decaying* when ``λ(t) <= λ(t/10)/5`` (a
    direction that decays to 0 goes like ``1/t``: a factor 10 per decade) or below
    ``1e-9`` of the largest (round-off of the solver), *kept* when
    ``|λ(t) − λ(t/10)| <= 0.01 λ(t)`` (settled to 1% over a decade), else *unsettled*
    (in transition: a nearly singular ``V`` has time scales beyond any horizon).
    """
    S1, S2 = 0.5 * (S1 + S1.T), 0.5 * (S2 + S2.T)
    lam2, U2 = np.linalg.eigh(S2)
    lam1 = np.array([u @ S1 @ u for u in U2.T])  # the same directions at t/10
    alive = (lam2 > 0.2 * np.maximum(lam1, 1e-300)) & (lam2 > 1e-9 * max(lam2.max(), 1e-300))
    kept = alive & (np.abs(lam2 - lam1) <= 0.01 * lam2)
    return lam2, U2, kept, alive & ~kept


def exact_limit(S0: np.ndarray, Q: np.ndarray, K: np.ndarray, V: np.ndarray, *,
                identity: bool, t_end: float = 1e6, t_max: float = 1e10
                ) -> tuple[np.ndarray, int, int]:
    """Wflow's solution of the moment ODE: ``(Σ_∞, rank, unsettled)``, rank without threshold.

    ``identity=True`` (``V = I``, ``K = −Q``): closed form ``N (Nᵀ Σ₀^{-1} N)^{-1} Nᵀ``,
    rank ``dim ker Q``, nothing unsettled. Otherwise LSODA (``rtol = 1e-10``,
    ``atol = 1e-13``) to ``t_end``; each eigen-direction at ``t_end`` is compared with
    ``t_end / 10`` (:func:`_classify`: decaying, kept, or unsettled). While some are
    unsettled the integration goes on a decade at a time (``odeint``, at most 50 000
    steps per decade: a draw that blows up or crawls is not followed further) up to
    ``t_max``. ``rank`` counts the kept directions, ``unsettled`` those neither kept nor
    decaying at the last time reached (their limit is not known: the rank of the limit lies
    in ``[rank, rank + unsettled]``); the returned matrix is ``Σ`` there with the
    decaying part removed.
    """
    d = S0.shape[0]
    if identity:
        from scipy.linalg import null_space

        N = null_space(Q)
        M = N.T @ np.linalg.solve(S0, N)
        Sinf = N @ np.linalg.solve(M, N.T)
        return 0.5 * (Sinf + Sinf.T), int(N.shape[1]), 0
    from scipy.integrate import odeint, solve_ivp

    def f(_t: float, y: np.ndarray) -> np.ndarray:
        S = y.reshape(d, d)
        return rhs_softmax(S, Q, K, V, d).ravel()

    sol = solve_ivp(f, (0.0, t_end), S0.ravel(), method="LSODA", rtol=1e-10, atol=1e-13,
                    t_eval=[t_end / 10, t_end])
    if sol.status != 0:  # pragma: no cover - reported, not hidden
        raise RuntimeError(f"castin_ranks: solve_ivp failed: {sol.message}")
    S1 = sol.y[:, 0].reshape(d, d)
    S2 = sol.y[:, 1].reshape(d, d)
    lam2, U2, kept, uns = _classify(S1, S2)
    t = t_end
    while uns.any() and t < t_max:
        # a draw that blows up overflows inside the right-hand side: that is how it is
        # detected (non-finite y below), so the overflow is not a warning here
        with np.errstate(over="ignore", invalid="ignore"):
            y, info = odeint(f, S2.ravel(), [t, 10 * t], rtol=1e-10, atol=1e-13,
                             tfirst=True, mxstep=50000, full_output=True)
        if info["message"] != "Integration successful." or not np.isfinite(y[-1]).all():
            break  # blows up or crawls: the directions stay unsettled
        S1, S2, t = S2, y[-1].reshape(d, d), 10 * t
        lam2, U2, kept, uns = _classify(S1, S2)
    Sinf = (U2[:, kept | uns] * lam2[kept | uns]) @ U2[:, kept | uns].T
    return Sinf, int(kept.sum()), int(uns.sum())


# ----------------------------------------------------------------------------- batched
#: Relative guard band of the batched stopping tests: a lane whose vectorised residual
#: (or trace) lies within this band of the threshold is re-tested with the published
#: scalar call (``np.linalg.norm`` / ``np.trace``). The vectorised sums differ from the
#: published ones by at most ~25·eps relative (25 terms), 10⁶ times below the band.
_GUARD = 1e-8
#: Steps within which a diverging attempt (``tr Σ > 10³``) is counted as an early failure
#: by the scheduler's estimates (:class:`_Speculator`; no effect on the numbers).
_EARLY = 100


def batched_euler_step(S: np.ndarray, V: np.ndarray, A: np.ndarray, *, step: float,
                       tol: float, tol_high: float = 1e3
                       ) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """One published projected-Euler iteration for a stack of ``L`` independent lanes.

    Parameters
    ----------
    S, V, A : ndarray, shape (L, d, d)
        Iterates, value matrices and ``A = (Kᵀ·Q)/√d`` (each lane's own, computed once by
        the published expression, which the published code re-evaluates each step).
    step, tol, tol_high : float
        Euler step ``h``, convergence tolerance and divergence trace (u 77, 87-96).

    Returns
    -------
    S_new : ndarray, shape (L, d, d)
        ``P(S + h(R + Rᵀ))``.
    converged : ndarray of bool, shape (L,)
        ``‖R + Rᵀ‖_F < tol`` (the residual of ``S``, tested after the update, u 93).
    diverged : ndarray of bool, shape (L,)
        ``tr S_new > tol_high`` (u 96).

    Notes
    -----
    The same LAPACK/BLAS calls as the published scalar code, slice by slice: NumPy's
    stacked ``matmul`` calls ``gemm`` per ``d×d`` slice as ``np.dot`` does, stacked
    ``eigh`` calls ``syevd`` per slice, and the elementwise operations are those of the
    published line (``R + R.T``, ``S + h*R``, the clipping, ``U·(diag(λ)·Uᵀ)``). The
    two reductions (Frobenius norm, trace) are vectorised and only decide a comparison;
    a lane within :data:`_GUARD` of the threshold is decided by the published call. The
    tests check every iterate count and limit against the published run bit for bit.
    """
    R = np.matmul(np.matmul(V, S), np.matmul(A, S))
    R = R + np.swapaxes(R, 1, 2)
    res = np.sqrt(np.einsum("lij,lij->l", R, R))
    for m in np.flatnonzero(np.abs(res - tol) <= _GUARD * tol):
        res[m] = np.linalg.norm(R[m])
    Sn = S + step * R
    try:
        lam, U = np.linalg.eigh(Sn)
    except np.linalg.LinAlgError:  # pragma: no cover - some lane is NaN: decide per lane
        pairs = [np.linalg.eigh(Sn[m]) for m in range(Sn.shape[0])]  # raises as published
        lam = np.stack([p[0] for p in pairs])
        U = np.stack([p[1] for p in pairs])
    lam[lam < 0] = 1e-14
    d = S.shape[1]
    D = np.zeros_like(Sn)
    D[:, np.arange(d), np.arange(d)] = lam
    P = np.matmul(U, np.matmul(D, np.swapaxes(U, 1, 2)))
    tr = np.trace(P, axis1=1, axis2=2)
    for m in np.flatnonzero(np.abs(tr - tol_high) <= _GUARD * tol_high):
        tr[m] = np.trace(P[m])
    return P, res < tol, tr > tol_high


class _Speculator:
    """The published attempt loop (u 308-346) of one dimension, on ``L`` lanes at once.

    Attempt ``k`` integrates the ``k``-th ``Σ₀`` of the stream with the ``(Q, K, V)`` of
    index ``i`` = the number of attempts before ``k`` that converged, so which ``(k, i)``
    the published loop runs depends on earlier outcomes. Each lane integrates one node
    ``(k, i)`` exactly (:func:`batched_euler_step`); the lanes are spent on the nodes most
    likely to lie on the published path given the outcomes known so far (a success
    probability per index, shrunk to the dimension's rate, and lowered for a node still
    running past the converged attempts' iteration counts). Only nodes on the path, whose
    predecessors' outcomes are all known, are committed: the result is the published
    loop's whatever the predictions.
    """

    def __init__(self, *, d: int, S0: Any, QKV: Any, n_need: int, n_max: int, step: float,
                 tol: float, max_iter: int, lanes: int, p_start: float = 0.3,
                 p_keep: float = 0.1) -> None:
        self.d, self.S0, self.QKV = d, S0, QKV
        self.n_need, self.n_max, self.step, self.tol = n_need, n_max, step, tol
        self.max_iter, self.lanes = max_iter, max(1, lanes)
        # a lane costs ~1/4 of a scalar step (bench): start a node when it is on the
        # published path with probability >= p_start; keep a running one down to p_keep
        self.p_start, self.p_keep = p_start, p_keep
        self.done: dict[tuple[int, int], tuple[np.ndarray, int, bool]] = {}
        self.keys: list[tuple[int, int]] = []
        dd = (0, d, d)
        self.S, self.V, self.A = np.empty(dd), np.empty(dd), np.empty(dd)
        self.n = np.empty(0, np.int64)
        self.path: list[tuple[int, int]] = []
        self.k0 = self.i0 = 0
        self.lane_steps = 0

    # -- probabilities -------------------------------------------------------------
    def _probabilities(self, depth: int) -> dict[tuple[int, int], float]:
        stats = self._stats()
        probs: dict[tuple[int, int], float] = {}
        level = {self.i0: 1.0}
        for k in range(self.k0, min(self.n_max, self.k0 + depth)):
            nxt: dict[int, float] = {}
            for i, pr in level.items():
                if i >= self.n_need or pr < self.p_keep:
                    continue
                key = (k, i)
                probs[key] = pr
                p = stats(key)
                if p > 0:
                    nxt[i + 1] = nxt.get(i + 1, 0.0) + pr * p
                if p < 1:
                    nxt[i] = nxt.get(i, 0.0) + pr * (1.0 - p)
            if not nxt:
                break
            level = nxt
        return probs

    def _stats(self) -> Any:
        """``p_conv(key)``: the known outcome, else an estimate from the outcomes so far.

        Early failures (``tr Σ > 10³`` within :data:`_EARLY` steps) come long before the
        slow outcomes, so the rate is split, ``p = q·c``: ``q = P(survive the early
        phase)`` counts the running lanes past it as survivors, ``c = P(converge |
        survived)`` the finished slow outcomes; a lane running past the early phase has
        ``p = c``. Per index, its own counts shrunk to the dimension's rates (weight 2,
        Jeffreys priors for the dimension).
        """
        cnt: dict[int, list[int]] = {}  # index -> [early fail, slow fail, converged, alive]
        for (_, j), v in self.done.items():
            cnt.setdefault(j, [0, 0, 0, 0])[2 if v[2] else (0 if v[1] <= _EARLY else 1)] += 1
        running: dict[tuple[int, int], int] = {}
        for key, n in zip(self.keys, self.n.tolist(), strict=True):
            running[key] = n
            if n > _EARLY:
                cnt.setdefault(key[1], [0, 0, 0, 0])[3] += 1
        e, f, c, a = (sum(x[m] for x in cnt.values()) for m in range(4))
        q_dim = (f + c + a + 0.5) / (e + f + c + a + 1.0)
        c_dim = (c + 0.5) / (c + f + 1.0)

        def p_conv(key: tuple[int, int]) -> float:
            if key in self.done:
                return 1.0 if self.done[key][2] else 0.0
            ei, fi, ci, ai = cnt.get(key[1], (0, 0, 0, 0))
            cc = (ci + 2.0 * c_dim) / (ci + fi + 2.0)
            if running.get(key, 0) > _EARLY:
                return cc
            return cc * (fi + ci + ai + 2.0 * q_dim) / (ei + fi + ci + ai + 2.0)

        return p_conv

    # -- lanes ---------------------------------------------------------------------
    def _commit(self) -> None:
        while self.i0 < self.n_need and self.k0 < self.n_max and (self.k0, self.i0) in self.done:
            self.path.append((self.k0, self.i0))
            if self.done[(self.k0, self.i0)][2]:
                self.i0 += 1
            self.k0 += 1

    def finished(self) -> bool:
        return self.i0 >= self.n_need or self.k0 >= self.n_max

    def _schedule(self) -> None:
        """Spend the lanes on the most probable nodes; running ones weigh 3× (sunk work)."""
        probs = self._probabilities(depth=2 * self.lanes)
        running = set(self.keys)
        score = [(3.0 * p if k in running else p, k) for k, p in probs.items()
                 if k not in self.done
                 and (p >= self.p_start or (k in running and p >= self.p_keep))]
        score.sort(key=lambda t: (-t[0], t[1][0]))
        chosen = {k for _, k in score[:self.lanes]}
        keep = np.array([k in chosen for k in self.keys], bool)
        if not keep.all():
            self._select(keep)
        new = [k for _, k in score[:self.lanes] if k not in running]
        if not new:
            return
        S = np.stack([self.S0(k) for k, _ in new])
        V = np.stack([self.QKV(i)[0] for _, i in new])
        A = np.stack([self.QKV(i)[1] for _, i in new])
        self.S = np.concatenate([self.S, S])
        self.V = np.concatenate([self.V, V])
        self.A = np.concatenate([self.A, A])
        self.n = np.concatenate([self.n, np.zeros(len(new), np.int64)])
        self.keys.extend(new)

    def _select(self, keep: np.ndarray) -> None:
        self.S, self.V, self.A, self.n = self.S[keep], self.V[keep], self.A[keep], self.n[keep]
        self.keys = [k for k, m in zip(self.keys, keep, strict=True) if m]

    def run(self, *, reschedule: int = 256, min_gap: int = 32
            ) -> list[tuple[tuple[int, int], tuple[np.ndarray, int, bool]]]:
        """Integrate until the path is complete; ``[((k, i), (Σ_last, its, conv)), ...]``.

        The lanes are re-planned every ``reschedule`` steps, and after new outcomes at
        most every ``min_gap`` steps (at once when the head of the path is known or
        fewer than half the lanes run).
        """
        since = reschedule
        news = True
        while True:
            head = (self.k0, self.i0)
            self._commit()
            if self.finished():
                break
            if (since >= reschedule or (news and since >= min_gap)
                    or head != (self.k0, self.i0)
                    or (len(self.keys) < 0.5 * self.lanes and since >= 8)):
                self._schedule()
                since, news = 0, False
            Sn, conv, div = batched_euler_step(self.S, self.V, self.A, step=self.step,
                                               tol=self.tol)
            self.lane_steps += len(self.keys)
            self.n += 1
            stop = conv | div | (self.n >= self.max_iter)
            if stop.any():
                for m in np.flatnonzero(stop):
                    self.done[self.keys[m]] = (self.S[m].copy(), int(self.n[m]), bool(conv[m]))
                self.S = Sn
                self._select(~stop)
                news = True
            else:
                self.S = Sn
            since += 1
        return [(k, self.done[k]) for k in self.path]


def run_case_dim(item: tuple[RankOptions, str, int]) -> dict[str, Any]:
    """All attempts of one case and one dimension (the published loop u 308-346).

    Returns a dict: ``ranks`` (histogram entries, in order), ``exceptions``,
    ``attempts`` (per attempt: index into the draw lists, iterations, converged, rank,
    the limit's eigenvalues, and with ``exact`` the exact rank and threshold rank).
    """
    opts, cname, j = item
    case = CASES[cname]
    d = opts.dims[j]
    Qs, Ks, Vs = draw_matrices(opts, case)
    step = case.steps[j] if j < len(case.steps) else case.steps[-1]
    max_iter = opts.max_iter if opts.max_iter is not None else case.max_iter
    n_max = 1000 if case.n_max_factor is None else case.n_max_factor * opts.n_per_dim
    rng = np.random.RandomState(opts.seed_init)
    t0 = time.perf_counter()
    S0s: list[np.ndarray] = []

    def s0(k: int) -> np.ndarray:  # attempt k's Σ₀: the k-th draw of the stream (u 317-318)
        while len(S0s) <= k:
            G = rng.randn(d, d)
            S0s.append(G @ G.T)
        return S0s[k]

    def qkv(i: int) -> tuple[np.ndarray, np.ndarray]:
        idx = opts.n_per_dim * j + i
        return Vs[idx], np.dot(Ks[idx].T, Qs[idx]) / np.sqrt(d)  # A as in u 12

    if opts.lanes:
        spec = _Speculator(d=d, S0=s0, QKV=qkv, n_need=opts.n_per_dim,
                           n_max=n_max, step=step, tol=case.tol, max_iter=max_iter,
                           lanes=opts.lanes)
        path = spec.run()
        lane_steps = spec.lane_steps
    else:
        path = []
        i = 0
        for k in range(n_max):
            idx = opts.n_per_dim * j + i
            out = projected_euler(s0(k), Qs[idx], Ks[idx], Vs[idx], step=step,
                                  tol=case.tol, max_iter=max_iter)
            path.append(((k, i), out))
            i += out[2]
            if i == opts.n_per_dim:
                break
        lane_steps = sum(o[1] for _, o in path)
    ranks: list[int] = []
    exceptions = 0
    attempts: list[dict[str, Any]] = []
    for (k, i), (last, n_it, conv) in path:
        idx = opts.n_per_dim * j + i
        Q, K, V = Qs[idx], Ks[idx], Vs[idx]
        lam = np.linalg.eigvalsh(last)
        rec: dict[str, Any] = {"index": idx, "iterations": n_it, "converged": conv,
                               "eigenvalues": lam}
        if conv:
            rank = int(np.sum(lam > opts.tol_rank))
            rec["rank"] = rank
            if rank <= (d + 1) // 2:
                ranks.append(rank)
            else:
                exceptions += 1
        if opts.exact:
            Sinf, r_exact, r_uns = exact_limit(s0(k), Q, K, V,
                                               identity=case.value == "identity")
            rec["exact_rank"] = r_exact
            rec["exact_unsettled"] = r_uns
            rec["exact_rank_threshold"] = int(np.sum(np.linalg.eigvalsh(Sinf) > opts.tol_rank))
        attempts.append(rec)
    path_steps = sum(a["iterations"] for a in attempts)
    return {"case": cname, "d": d, "ranks": ranks, "exceptions": exceptions,
            "attempts": attempts, "wall_s": time.perf_counter() - t0,
            "lane_steps": int(lane_steps), "path_steps": int(path_steps)}


def run_ranks(opts: RankOptions | None = None) -> dict[str, dict[int, dict[str, Any]]]:
    """Every case and dimension, spread over MPI ranks; ``{case: {d: run_case_dim(...)}}``."""
    opts = opts or RankOptions()
    items = [(opts, c, j) for c in opts.cases for j in range(len(opts.dims))]
    out: dict[str, dict[int, dict[str, Any]]] = {}
    for r in parallel_map(run_case_dim, items):
        out.setdefault(r["case"], {})[r["d"]] = r
    return out


RULE = ("over the converged draws of the published solver, and over every attempted draw "
        "of wflow's exact solver: REPRODUCED when no draw has rank > ceil(d/2) with either "
        "solver (published rank: eigenvalues > 0.1; exact: the limit's settled directions); "
        "NOT REPRODUCED when the exact limit has more than ceil(d/2) settled directions for "
        "some draw; INCONCLUSIVE when only the published solver finds such draws "
        "(exceptions of a finite stopping time), when a draw's exact rank may exceed "
        "ceil(d/2) through directions not settled by t = 1e10, or a dimension has fewer "
        "converged draws than asked")


@dataclass(frozen=True)
class RankVerdict:
    """Verdict on the claim; ``reasons`` lists the counts it rests on."""

    verdict: str
    reasons: tuple[str, ...]
    rule: str


def judge_ranks(runs: dict[str, dict[int, dict[str, Any]]], n_per_dim: int,
                *, bound: Any = None) -> RankVerdict:
    """Judge :data:`CLAIM` (rule :data:`RULE`); ``bound(d)`` defaults to ``⌈d/2⌉``."""
    bound = bound or (lambda d: (d + 1) // 2)
    exc_pub = exc_exact = short = undetermined = 0
    reasons = []
    for cname, per_d in runs.items():
        for d, r in per_d.items():
            conv = [a for a in r["attempts"] if a["converged"]]
            hi_pub = sum(1 for a in conv if a["rank"] > bound(d))
            hi_ex = sum(1 for a in r["attempts"] if a.get("exact_rank", 0) > bound(d))
            undet = sum(1 for a in r["attempts"] if a.get("exact_rank", 0) <= bound(d)
                        < a.get("exact_rank", 0) + a.get("exact_unsettled", 0))
            exc_pub += hi_pub
            exc_exact += hi_ex
            undetermined += undet
            short += len(conv) < n_per_dim
            reasons.append(f"{cname} d={d}: {len(conv)} converged of {len(r['attempts'])} "
                           f"attempts, {hi_pub} with published rank > {bound(d)}, "
                           f"{hi_ex} with exact rank > {bound(d)}, {undet} whose exact "
                           f"rank may exceed {bound(d)} (directions not settled by "
                           "t = 1e10)")
    if exc_exact:
        v = "not reproduced"
    elif exc_pub or short or undetermined:
        v = "inconclusive"
    else:
        v = "reproduced"
    return RankVerdict(v, tuple(reasons), RULE)


def summarize(opts: RankOptions, runs: dict[str, dict[int, dict[str, Any]]],
              v: RankVerdict, control: RankVerdict) -> dict[str, Any]:
    """``summary.json`` content: histograms of both solvers, counts, verdict."""
    table: dict[str, Any] = {}
    for cname, per_d in runs.items():
        table[cname] = {}
        for d, r in per_d.items():
            conv = [a for a in r["attempts"] if a["converged"]]
            hist = np.bincount(r["ranks"], minlength=d + 1).tolist()
            ex = [a["exact_rank"] for a in r["attempts"] if "exact_rank" in a]
            ext = [a["exact_rank_threshold"] for a in conv if "exact_rank_threshold" in a]
            differ = sum(1 for a in conv if "exact_rank_threshold" in a
                         and a["exact_rank_threshold"] != a["rank"])
            table[cname][str(d)] = {
                "published_histogram": hist,
                "exceptions": r["exceptions"],
                "attempts": len(r["attempts"]),
                "converged": len(conv),
                "iterations_total": int(sum(a["iterations"] for a in r["attempts"])),
                "exact_rank_histogram_all_attempts":
                    np.bincount(ex, minlength=d + 1).tolist() if ex else None,
                "exact_threshold_histogram_converged":
                    np.bincount(ext, minlength=d + 1).tolist() if ext else None,
                "published_vs_exact_threshold_rank_differ": differ,
                "exact_unsettled_attempts": sum(1 for a in r["attempts"]
                                                if a.get("exact_unsettled", 0)),
                "wall_s": r["wall_s"],
                "euler_steps_published_loop": r.get("path_steps"),
                "euler_steps_integrated": r.get("lane_steps"),
            }
    return {"paper": PAPER, "claim": CLAIM, "settings": asdict(opts), "verdict": v.verdict,
            "verdict_rule": v.rule, "reasons": list(v.reasons),
            "control_bound_floor_d_over_2": control.verdict, "cases": table,
            "differences_from_published": [
                "none in the projected-Euler part (same NumPy operations and streams; "
                "RandomState(seed) instead of the global np.random.seed, the same stream)",
                "wflow's exact solver added: closed-form limit for V = I, LSODA to t = 1e6 "
                "for random V",
                "the L2 self-attention rows of histograms.py are not reproduced here"]}


def control(runs: dict[str, dict[int, dict[str, Any]]], n_per_dim: int) -> RankVerdict:
    """Negative control: the rule with the false bound ``⌊d/2⌋`` instead of ``⌈d/2⌉``.

    For odd ``d`` the exact rank is ``⌈d/2⌉ > ⌊d/2⌋``: the control must not be reproduced.
    """
    return judge_ranks(runs, n_per_dim, bound=lambda d: d // 2)


def write_ranks(stage: Path, opts: RankOptions, runs: dict[str, dict[int, dict[str, Any]]],
                v: RankVerdict) -> list[str]:
    """``castin_ranks.npz``, ``castin_ranks.csv`` (one row per attempt) and the figure."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    from ..infra.io import save_npz, write_csv

    cols: dict[str, list[Any]] = {k: [] for k in ("case", "d", "index", "iterations",
                                                 "converged", "rank", "exact_rank",
                                                 "exact_rank_threshold", "exact_unsettled",
                                                 "lambda_max")}
    arrays: dict[str, np.ndarray] = {}
    for cname, per_d in runs.items():
        for d, r in per_d.items():
            arrays[f"{cname}_d{d}_ranks"] = np.asarray(r["ranks"], np.int64)
            arrays[f"{cname}_d{d}_iterations"] = np.asarray(
                [a["iterations"] for a in r["attempts"]], np.int64)
            arrays[f"{cname}_d{d}_eigenvalues"] = np.asarray(
                [a["eigenvalues"] for a in r["attempts"]])
            for a in r["attempts"]:
                cols["case"].append(0 if cname == "identity" else 1)
                cols["d"].append(d)
                cols["index"].append(a["index"])
                cols["iterations"].append(a["iterations"])
                cols["converged"].append(int(a["converged"]))
                cols["rank"].append(a.get("rank", -1))
                cols["exact_rank"].append(a.get("exact_rank", -1))
                cols["exact_rank_threshold"].append(a.get("exact_rank_threshold", -1))
                cols["exact_unsettled"].append(a.get("exact_unsettled", -1))
                cols["lambda_max"].append(float(np.max(a["eigenvalues"])))
    save_npz(stage / "castin_ranks.npz", **arrays)
    write_csv(stage / "castin_ranks.csv", {k: np.asarray(c) for k, c in cols.items()})
    cases = list(runs)
    fig, axes = plt.subplots(len(cases), len(opts.dims),
                             figsize=(3.4 * len(opts.dims), 2.9 * len(cases)), squeeze=False)
    for a_row, cname in zip(axes, cases, strict=True):
        for ax, d in zip(a_row, opts.dims, strict=True):
            r = runs[cname][d]
            bins = np.arange(0, d + 1.5) - 0.5
            ax.hist(r["ranks"], bins=bins, alpha=0.6, label="published solver")
            ex = [a["exact_rank"] for a in r["attempts"] if "exact_rank" in a]
            if ex:
                ax.hist(ex, bins=bins, histtype="step", color="k", lw=1.5,
                        label="exact limit (all attempts)")
            ax.set_xticks(bins[:-1] + 0.5)
            ax.set_title(f"V {cname}, d = {d}", fontsize=9)
            ax.set_xlabel("rank")
    axes[0, 0].legend(fontsize=7)
    fig.suptitle(f"Castin et al. rank histograms — claim: {CLAIM} — {v.verdict.upper()}",
                 fontsize=8, wrap=True)
    fig.tight_layout()
    fig.savefig(stage / "castin_ranks.png", dpi=110)
    plt.close(fig)
    return ["castin_ranks.npz", "castin_ranks.csv", "castin_ranks.png"]


def reproduce(*, out: str | Path, options: RankOptions | None = None,
              overwrite: bool = True) -> Any:
    """Run both solvers, judge and write ``out/``; returns the ``StudyResult``."""
    from ..infra.io import atomic_write_text, prepare_output
    from ..studies.base import StudyResult, write_study

    opts = options or RankOptions()
    out = prepare_output(out, overwrite=overwrite)
    runs = run_ranks(opts)
    v = judge_ranks(runs, opts.n_per_dim)
    ctl = control(runs, opts.n_per_dim)
    summary = summarize(opts, runs, v, ctl)
    sentence = (f"castin_ranks: published claim {v.verdict.upper()} ({'; '.join(v.reasons)}); "
                f"control with the false bound floor(d/2): {ctl.verdict}.")
    study = StudyResult("reproduce_castin_ranks", summary, sentence, v.verdict == "reproduced")
    report = "\n".join([
        f"# castin_ranks — {v.verdict.upper()}", "", f"Paper: {PAPER}", "",
        f"Claim: {CLAIM}.", "", f"Rule: {RULE}", "", "Measured:",
        *[f"- {r}" for r in v.reasons], "",
        "| case | d | published histogram (rank 0..d) | exact limit ranks (all attempts) |",
        "|---|---|---|---|",
        *[f"| {c} | {d} | {t['published_histogram']} | "
          f"{t['exact_rank_histogram_all_attempts']} |"
          for c, per in summary["cases"].items() for d, t in per.items()],
        "", f"Negative control (bound floor(d/2)): {ctl.verdict}."]) + "\n"

    def write(stage: Path) -> list[str]:
        atomic_write_text(stage / "report.md", report)
        return ["report.md", *write_ranks(stage, opts, runs, v)]

    return write_study(out, study, write)
