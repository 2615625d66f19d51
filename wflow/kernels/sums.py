""":func:`kernel_sums`: every nonlocal attention sum, on the planned back-end.

Part of :mod:`wflow.kernels` (the face re-exports the public names).
"""

from __future__ import annotations

import logging
import math

import numpy as np

from .direct import WIDE, _direct_sums, _wide_factors, team, threads, tiled
from .plan import plan_kernel
from .reference import _numpy_sums
from .results import KernelInfo, KernelSums
from .validation import DEFAULT_TOL, _scores_A, _validate_sums, max_rownorm, raise_bound

logger = logging.getLogger(__name__)


_EPS = float(np.finfo(np.float64).eps)
_EPS32 = float(np.finfo(np.float32).eps)


def err_float32(bound: float, n: int) -> float:
    """A-priori relative error of float32 sums (``dtype="float32"``), per target.

    Each weight ``m_j e^{s_ij - c_i}`` carries a relative error of about ``(|s| + 2) ε₃₂``
    (the score rounded in float32: absolute ``|s| ε₃₂`` per rounding, ``√w`` of them
    adding like a random walk, bounded here by ``|s| ≤ bound``; the exponential and the mass
    ``2 ε₃₂``), and each value sum over a tile of :data:`~wflow.kernels._tiled.TN` sources
    one of ``√TN ε₃₂``; with the float64 accumulation over tiles (``n ε₆₄``) the estimate is
    ``(2 bound + 4 + √TN) ε₃₂ + n ε₆₄`` relative to ``Z_i`` (and to ``Z_i max|y|`` for ``Y``).
    """
    from ._tiled import TN

    return (2.0 * bound + 4.0 + math.sqrt(TN)) * _EPS32 + max(n, 1) * _EPS


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
    values: np.ndarray | None = None,
    dtype: str = "float64",
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
    values : (H, r, d) array, optional
        Value factors ``W_{V,h}`` of heads whose value has rank ``r``
        (:meth:`wflow.attention.heads.Heads.value_factors`): then
        ``Y_h(i) = Σ_j m_j k(s^h_ij) W_{V,h} y_j``, shape ``(H, M, r)``, accumulated at width
        ``r`` (cost ``O(M N (w + r))`` per head). ``None``: ``W_{V,h} = I`` (today's sums).
    dtype : {"float64", "float32"}
        Precision of the scores, the kernel values and the GEMMs of each tile.
        ``"float32"`` (the direct back-end by tiles, kinds with compiled kernels): scores
        and exponentials in float32 with a stable log-sum-exp shift per target, the sums
        accumulated in float64 (returned in float64); relative error about
        :func:`err_float32` (``.info.err_est``). ``"numpy"`` and ``"fastsum"`` are float64
        only.

    Returns
    -------
    KernelSums
        With ``.info`` (:class:`KernelInfo`).
    """
    x, y, m, Q, K, spec, values, dtype = _validate_sums(x, y, m, Q, K, beta, kind, backend,
                                                        tol, values, dtype)
    H, k, d = Q.shape
    r = d if values is None else values.shape[1]
    M, N = x.shape[0], y.shape[0]
    expo = spec.exponential
    triples = M * N * H
    err_direct = max(N, 1) * _EPS
    if dtype == "float32":
        return _float32_sums(x, y, m, Q, K, beta, spec, potential, scores, backend, tol,
                             values)
    if backend == "numpy" or not spec.compiled:
        why = "requested"
        if backend != "numpy":  # a kind without compiled kernels: NumPy under "auto" only
            why = plan_kernel(x, y, Q, K, beta=beta, kind=spec, backend=backend).reason
        Z, Y, Phi, S = _numpy_sums(x, y, m, Q, K, beta, spec, potential, scores, block,
                                   values)
        return KernelSums(Z, Y, Phi, S, KernelInfo("numpy", backend, why, err_direct,
                                                   tol, (), 1, triples))
    factors = None
    if M and N and H and d > 3 and tiled(k, d, r):  # the guard from the tiles' own factors
        factors, bound = _wide_factors(x, y, Q, K, beta)
        if expo:
            raise_bound(bound)
    elif expo and M and N and H:
        raise_bound(beta * max_rownorm(Q, x) * max_rownorm(K, y))
    plan = plan_kernel(x, y, Q, K, beta=beta, kind=kind, backend=backend, tol=tol, m=m)
    if plan.backend == "direct":
        Z, Y, Phi, S = _direct_sums(x, y, m, Q, K, beta, spec, potential, scores, values,
                                    factors=factors)
        reason = plan.reason
        if tiled(k, d, r):
            reason += f"; by tiles of BLAS GEMMs (score width + value width ≥ {WIDE})"
        return KernelSums(Z, Y, Phi, S, KernelInfo("direct", backend, reason, err_direct,
                                                   tol, (), threads(), triples))
    from . import _fastsum as fs

    A = _scores_A(Q, K)
    work = sum((M + N) * (L + 1) * (L + 2) / 2 for L in plan.degree if L >= 0)
    with team(work):
        res = fs.harmonic_sums(x, y, m, A, beta=beta, tol=tol, scores=scores,
                               heads=np.asarray(plan.fast_heads))
    Z, Y, S = res.Z, res.Y, res.S
    name, reason, err, degree = _fast_fallback(
        Z, Y, S, res.ok, res.err_est, res.degree, plan.fast_heads, plan.reason, tol, err_direct,
        lambda idx: _direct_sums(x, y, m, Q[idx], K[idx], beta, spec, False, scores))
    Phi = Z if potential else None
    if values is not None:  # Σ k W y = W Σ k y (d = 3: the full sums cost the same)
        Y = np.matmul(Y, np.swapaxes(values, 1, 2))
    return KernelSums(Z, Y, Phi, S, KernelInfo(name, backend, reason, err, tol, degree,
                                               threads(), triples))


def _fast_fallback(Z, Y, S, ok, err_est, degree, fast_heads, reason, tol, err_direct, direct):
    """The heads whose fast sum missed ``tol`` summed again directly, in place (any layout).

    ``ok``, ``err_est``, ``degree``, ``fast_heads`` (the plan's): ``(H,)`` per head; ``S``
    ``None`` without scores; ``direct(idx) → (Z, Y, Φ, S)`` the direct sums of the heads
    ``idx``. Returns ``(name, reason, err, degree)``: the back-end that ran (``fastsum``,
    ``fastsum+direct`` or ``direct``), ``reason`` with the failed heads' estimates added,
    the largest error estimate and the degree of each head (``-1``: summed directly).
    """
    redo = ~ok
    name = "fastsum"
    if np.any(redo):
        idx = np.flatnonzero(redo)
        failed = [h for h in idx if fast_heads[h]]
        if failed:
            ests = ", ".join(f"head {h}: {err_est[h]:.1e}" for h in failed)
            reason += f"; estimate above tol={tol:g} ({ests}), summed directly"
            logger.info("fast summation fell back to direct sums (%s)", ests)
        Zd, Yd, _, Sd = direct(idx)
        Z[idx] = Zd
        Y[idx] = Yd
        if S is not None:
            S[idx] = Sd
        name = "fastsum+direct" if np.any(ok) else "direct"
    ests = [float(e) for e in err_est[ok]] + ([err_direct] if np.any(redo) else [])
    degs = tuple(int(L) if o else -1 for L, o in zip(degree, ok, strict=True))
    return name, reason, float(max(ests)), degs


def _require_float32(backend: str, spec) -> None:
    """Refuse ``dtype="float32"`` where the direct back-end's float32 tiles cannot run.

    A float64-only ``backend`` (``numpy``, ``fastsum``) or a kind without compiled kernels
    (``spec``) raises, naming the options that work.
    """
    if backend not in ("auto", "direct"):
        raise ValueError(f"dtype: 'float32' runs the direct back-end by tiles; backend="
                         f"{backend!r} is float64 only (use backend='auto' or 'direct')")
    spec.require_compiled("dtype='float32'")


def _float32_sums(x, y, m, Q, K, beta, spec, potential, scores, backend, tol, values):
    """``dtype="float32"``: the direct sums by tiles (module :mod:`wflow.kernels._tiled`)."""
    _require_float32(backend, spec)
    H = Q.shape[0]
    M, N = x.shape[0], y.shape[0]
    bound = 0.0
    factors = None
    if M and N and H:
        factors, bound = _wide_factors(x, y, Q, K, beta)
        if spec.exponential:
            raise_bound(bound)  # e^{c_i} of the final rescaling is float64
    Z, Y, Phi, S = _direct_sums(x, y, m, Q, K, beta, spec, potential, scores, values,
                                "float32", factors=factors)
    reason = ("float32 requested: by tiles of SGEMMs, shifted exponential in float32, sums "
              "in float64")
    return KernelSums(Z, Y, Phi, S, KernelInfo("direct", backend, reason,
                                               err_float32(bound, N), tol, (), threads(),
                                               M * N * H, "float32"))
