"""The softmax moment ODE of the covariance, its projected Euler integrator and its exact limit.

Part of :mod:`wflow.published.castin_ranks` (the package re-exports its names).
"""

from __future__ import annotations

import numpy as np

from .options import RankCase, RankOptions


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
    (:func:`_eigh`), ``diag(λ)`` written into one zero matrix (measured per step against
    the published code: ``bench/results/bench_castin_step.json`` and
    ``bench_reproduce_field.json``, docs/reproduce_field.md); the tests check it bit for bit
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
