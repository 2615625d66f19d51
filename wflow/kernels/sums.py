""":func:`kernel_sums`: every nonlocal attention sum, on the planned back-end.

Part of :mod:`wflow.kernels` (the face re-exports the public names).
"""

from __future__ import annotations

import logging

import numpy as np

from .direct import _direct_sums, team, threads
from .plan import plan_kernel
from .reference import _numpy_sums
from .results import KernelInfo, KernelSums
from .validation import DEFAULT_TOL, _scores_A, _validate, raise_bound

logger = logging.getLogger(__name__)


_EPS = float(np.finfo(np.float64).eps)
def kernel_sums(
    x: np.ndarray,
    y: np.ndarray,
    m: np.ndarray,
    Q: np.ndarray,
    K: np.ndarray,
    *,
    beta: float,
    kind: str,
    potential: bool = False,
    scores: bool = False,
    block: int | None = None,
    backend: str = "auto",
    tol: float = DEFAULT_TOL,
) -> KernelSums:
    """Evaluate the nonlocal attention sums (module docstring) with the chosen back-end.

    Parameters
    ----------
    x : (M, d) array
        Targets.
    y : (N, d) array
        Sources.
    m : (N,) array
        Source masses (``1/n`` for an empirical measure, cell masses on a mesh).
    Q, K : (H, k, d) arrays
        Query and key matrices.
    beta : float
        Inverse temperature.
    kind : str
        A registered attention kind (:data:`wflow.attention.kinds.KINDS`: ``"softmax"``,
        ``"usa"``, ``"relu"``); its kernel ``k`` (``e^s`` resp. ``max(0, s)``). Unknown
        names raise ``ValueError``.
    potential, scores : bool
        Also return ``Φ_h`` resp. ``S_h``.
    block : int, optional
        Targets per block of the ``"numpy"`` back-end (default ``BLOCK_ELEMS // N``).
    backend : {"auto", "numpy", "direct", "fastsum"}
        See the module docstring; ``"fastsum"`` raises ``ValueError`` where it
        is not applicable.
    tol : float
        Relative tolerance of the fast summation (per target, relative to
        ``Z_i``); ignored by the direct back-ends (exact to round-off).

    Returns
    -------
    KernelSums
        With ``.info`` (:class:`KernelInfo`).
    """
    x, y, m, Q, K, spec = _validate(x, y, m, Q, K, beta, kind, backend, tol)
    H = Q.shape[0]
    M, N = x.shape[0], y.shape[0]
    expo = spec.exponential
    triples = M * N * H
    err_direct = max(N, 1) * _EPS
    if backend == "numpy" or not spec.compiled:
        why = "requested"
        if backend != "numpy":  # a kind without compiled kernels: NumPy under "auto" only
            why = plan_kernel(x, y, Q, K, beta=beta, kind=spec, backend=backend).reason
        Z, Y, Phi, S = _numpy_sums(x, y, m, Q, K, beta, spec, potential, scores, block)
        return KernelSums(Z, Y, Phi, S, KernelInfo("numpy", backend, why, err_direct,
                                                   tol, (), 1, triples))
    if expo and M and N and H:
        from . import _numba as kn

        raise_bound(beta * kn.max_rownorm(Q, x) * kn.max_rownorm(K, y))
    plan = plan_kernel(x, y, Q, K, beta=beta, kind=kind, backend=backend, tol=tol, m=m)
    if plan.backend == "direct":
        Z, Y, Phi, S = _direct_sums(x, y, m, Q, K, beta, spec, potential, scores)
        return KernelSums(Z, Y, Phi, S, KernelInfo("direct", backend, plan.reason, err_direct,
                                                   tol, (), threads(), triples))
    from . import _fastsum as fs

    A = _scores_A(Q, K)
    work = sum((M + N) * (L + 1) * (L + 2) / 2 for L in plan.degree if L >= 0)
    with team(work):
        res = fs.harmonic_sums(x, y, m, A, beta=beta, tol=tol, scores=scores,
                               heads=np.asarray(plan.fast_heads))
    Z, Y, S = res.Z, res.Y, res.S
    redo = ~res.ok
    degree = tuple(int(L) if ok else -1 for L, ok in zip(res.degree, res.ok, strict=True))
    reason = plan.reason
    name = "fastsum"
    if np.any(redo):
        idx = np.flatnonzero(redo)
        failed = [h for h in idx if plan.fast_heads[h]]
        if failed:
            ests = ", ".join(f"head {h}: {res.err_est[h]:.1e}" for h in failed)
            reason += f"; estimate above tol={tol:g} ({ests}), summed directly"
            logger.info("fast summation fell back to direct sums (%s)", ests)
        Zd, Yd, _, Sd = _direct_sums(x, y, m, Q[idx], K[idx], beta, spec, False, scores)
        Z[idx] = Zd
        Y[idx] = Yd
        if scores:
            S[idx] = Sd
        name = "fastsum+direct" if np.any(res.ok) else "direct"
    ests = [float(e) for e in res.err_est[res.ok]] + ([err_direct] if np.any(redo) else [])
    err = float(max(ests))
    Phi = Z if potential else None
    return KernelSums(Z, Y, Phi, S, KernelInfo(name, backend, reason, err, tol, degree,
                                               threads(), triples))
