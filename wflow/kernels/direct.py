"""The direct back-end (numba) and the thread and memory-layout helpers it shares.

Part of :mod:`wflow.kernels` (the face re-exports the public names).
"""

from __future__ import annotations

import math
import os
import time
from contextlib import contextmanager

import numpy as np

from ..attention.kinds import AttentionKind
from .validation import _apply, _scores_A, max_rownorm

#: Heads with score width + value width ``min(k, d) + r`` at least this run by tiles of
#: BLAS GEMMs (:mod:`wflow.kernels._tiled`) in the direct back-end (and the causal sums by
#: BLAS blocks). Measured crossover (``bench/bench_width.py``, ``results/bench_width_cpu.json``,
#: one core, CPU time, ``k = d = r``, ``H = 2``, idle machine): tiles/fused = 1.31 at d = 3
#: (the fused kernel stays), 0.90 at d = 4, 0.74 at d = 8, 0.53 at d = 16 (the session
#: before: 0.73 at d = 4); the causal BLAS blocks against the causal rows at n = 3000:
#: 0.88 at d = 4, 0.77 at d = 8 (at n = 10⁵, one head: 0.67 and 0.42). So from width 8
#: (d = 4).
WIDE = 8
#: Below this many triples the direct back-end runs on the calling thread only.
SERIAL_TRIPLES = 1 << 18
#: ... and below this many when the machine is oversubscribed (1-min load average ≥ cores):
#: then a thread team waits for the OS to schedule all its threads (often a 4-16 ms time
#: slice), which costs more than the work (~1 ns per triple and core) below ~30 ms of it.
BUSY_SERIAL_TRIPLES = 1 << 25
_LOAD_CACHE = [0.0, 0.0]  # [time of the last reading, busy flag]
#: particle_terms sums symmetric heads pair-once (parallel over heads) from this many heads.
PAIR_ONCE_HEADS = 4
def threads() -> int:
    """Threads the numba kernels may use (``numba.get_num_threads()``)."""
    import numba

    return int(numba.get_num_threads())


def _busy() -> bool:
    """Whether the machine is oversubscribed (1-min load ≥ usable cores; re-read every 2 s)."""
    now = time.monotonic()
    if now - _LOAD_CACHE[0] > 2.0:
        try:
            cores = len(os.sched_getaffinity(0))
        except AttributeError:  # pragma: no cover - not on Linux
            cores = os.cpu_count() or 1
        try:
            _LOAD_CACHE[1] = float(os.getloadavg()[0] >= cores)
        except OSError:  # pragma: no cover
            _LOAD_CACHE[1] = 0.0
        _LOAD_CACHE[0] = now
    return bool(_LOAD_CACHE[1])


def _serial(triples: int) -> bool:
    """Whether to run on the calling thread (results are identical: same summation order)."""
    if triples < SERIAL_TRIPLES or threads() == 1:
        return True
    return triples < BUSY_SERIAL_TRIPLES and _busy()


ALIGN = 64  # bytes: one cache line, one AVX-512 vector


def aligned_empty(shape: int | tuple[int, ...]) -> np.ndarray:
    """Uninitialised C-contiguous float64 array whose data start on an :data:`ALIGN` boundary.

    The vectorised reductions of the compiled kernels sum in an order that depends on
    where the data start (measured: the same particle step differed by an ulp between
    reruns). NumPy aligns to 16 bytes only, so every array a kernel reduces over goes
    through :func:`aligned` / :func:`aligned_empty`: reruns, and serial vs MPI, then
    agree bit for bit.
    """
    shape = (shape,) if isinstance(shape, int) else tuple(shape)
    size = math.prod(shape)
    buf = np.empty(size + ALIGN // 8, dtype=np.float64)
    k = (-buf.ctypes.data % ALIGN) // 8
    return buf[k:k + size].reshape(shape)


def aligned(a: np.ndarray) -> np.ndarray:
    """C-contiguous float64 copy of ``a`` starting on an :data:`ALIGN` boundary."""
    a = np.asarray(a, dtype=np.float64)
    out = aligned_empty(a.shape)
    out[...] = a
    return out


def pair_once(sym: bool, n: int, H: int) -> bool:
    """Whether to count every pair once (symmetric heads, self-interaction).

    Fixed rule (the summation order never depends on threads or load): with
    ``PAIR_ONCE_HEADS`` heads or more the pair-once loop is parallel over heads; below
    :data:`SERIAL_TRIPLES` the sums run on one thread anyway, so halving the kernel
    evaluations always pays.
    """
    return sym and (H >= PAIR_ONCE_HEADS or n * n * H < SERIAL_TRIPLES)


@contextmanager
def team(work: float):
    """Run the numba kernels inside with one thread when ``work`` (≈ ns) is small."""
    if not _serial(int(work)):
        yield
        return
    import numba

    old = numba.get_num_threads()
    numba.set_num_threads(1)
    try:
        yield
    finally:
        numba.set_num_threads(old)


def _score_factors(x, y, Q, K, beta):
    """``(qx, ky)`` with ``s = <qx_i, ky_j>`` and ``β`` folded in, of the smaller width.

    ``k ≥ d``: ``qx = β Aᵀ x``, ``ky = y`` (width ``d``); else ``β Q x``, ``K y`` (width ``k``).
    """
    H, k, d = Q.shape
    if k >= d:
        qx = beta * np.matmul(x, _scores_A(Q, K))  # rows xᵢᵀ A = (Aᵀ xᵢ)ᵀ
        ky = np.broadcast_to(y, (H,) + y.shape)
    else:
        qx = beta * _apply(Q, x)
        ky = _apply(K, y)
    return qx, ky


def _wide_factors(x, y, Q, K, beta):
    """``((qx, ky), bound)``: the score factors of :func:`_score_factors` and ``β|Qx||Ky|``.

    The overflow guard's bound ``β max_{h,i} |Q_h x_i| max_{h,j} |K_h y_j|`` from the
    factors themselves when they are ``β Q x``, ``K y`` (``k < d``: no second projection),
    else by :func:`~wflow.kernels.validation.max_rownorm`.
    """
    qx, ky = _score_factors(x, y, Q, K, beta)
    if Q.shape[1] < Q.shape[2]:
        bound = math.sqrt(float(np.max(np.einsum("hmw,hmw->hm", qx, qx)))
                          * float(np.max(np.einsum("hnw,hnw->hn", ky, ky))))
    else:
        bound = beta * max_rownorm(Q, x) * max_rownorm(K, y)
    return (qx, ky), bound


def _pad3(qx: np.ndarray, ky: np.ndarray, m: np.ndarray, y: np.ndarray):
    """The operands of the ``d ≤ 3`` kernels, zero-padded to 3 components.

    ``qx`` (H, M, w), ``ky`` (H, N, w) score factors (``w ≤ 3``), ``m`` (N,), ``y`` (N, d)
    → ``qx3`` (H, M, 3), ``ky3`` (H, 3, N) (aligned, component-major), ``my = (m_j y_j)ᵀ``
    (3, N) (aligned).
    """
    H, M, w = qx.shape
    N, d = y.shape
    qx3 = np.zeros((H, M, 3))
    qx3[:, :, :w] = qx
    ky3 = aligned_empty((H, 3, N))
    ky3[:] = 0.0
    ky3[:, :w, :] = np.swapaxes(ky, 1, 2)
    my = aligned_empty((3, N))
    my[:] = 0.0
    my[:d] = (m[:, None] * y).T
    return qx3, ky3, my


def _direct_sums(x, y, m, Q, K, beta, spec: AttentionKind, potential, scores, values=None,
                 dtype="float64", *, factors=None):
    """Direct sums on the compiled paths; ``Y`` of width ``r`` (``values``: ``(H, r, d)``).

    Heads of width ``w + r ≥`` :data:`WIDE` (``w = min(k, d)`` the score width, ``r`` the
    value width) and every float32 request run by tiles (:mod:`wflow.kernels._tiled`);
    narrower heads in the fused kernels (``d ≤ 3``: :func:`~wflow.kernels._numba.direct3`).
    ``factors``: the ``(qx, ky)`` of :func:`_score_factors` when the caller has them.
    """
    from . import _numba as kn

    H, k, d = Q.shape
    r = d if values is None else values.shape[1]
    M = x.shape[0]
    N = y.shape[0]
    expo = spec.exponential
    kcode = spec.require_compiled("backend='direct'")
    Z = np.empty((H, M))
    Y = np.empty((H, M, r))
    P = np.empty((H, M))
    S = np.empty((H, M))
    if M == 0 or N == 0 or H == 0:
        Z[:] = 0.0
        Y[:] = 0.0
        P[:] = 0.0
        S[:] = 0.0
    elif tiled(k, d, r, dtype):
        from ._tiled import tiled_sums

        qx, ky = _score_factors(x, y, Q, K, beta) if factors is None else factors
        vy = y if values is None else list(_apply(values, y))
        w = qx.shape[2]
        tiled_sums(qx, ky, vy, m, kcode, dtype, Z, Y, P, S if (scores or not expo) else None,
                   threads=threads(),
                   serial=_serial(M * N * H * (w + r)))
    elif d <= 3:
        qx, ky = _score_factors(x, y, Q, K, beta)
        qx3, ky3, my = _pad3(qx, ky, m, y)
        Y3 = Y if (d == 3 and values is None) else np.empty((H, M, 3))
        with team(M * N * H):
            kn.direct3(qx3, ky3, my, aligned(m), kcode, scores, Z, Y3, P, S)
        if values is not None:  # Σ k W y = W Σ k y: at d ≤ 3 the full sums cost the same
            Y[:] = np.matmul(Y3[:, :, :d], np.swapaxes(values, 1, 2))
        elif d < 3:
            Y[:] = Y3[:, :, :d]
    else:
        qx, ky = _score_factors(x, y, Q, K, beta)
        w = qx.shape[2]
        qx = np.ascontiguousarray(qx)
        kyT = aligned(np.swapaxes(ky, 1, 2))
        with team(M * N * H * (w + r) / 4):
            if values is None:
                kn.direct_generic(qx, kyT, aligned(y.T), aligned(m), kcode, scores, Z, Y, P, S)
            else:
                for h in range(H):  # per head: its own values W_{V,h} y_j
                    hs = slice(h, h + 1)
                    kn.direct_generic(qx[hs], kyT[hs], aligned(values[h] @ y.T), aligned(m),
                                      kcode, scores, Z[hs], Y[hs], P[hs], S[hs])
    Phi = (Z if expo else P) if potential else None
    return Z, Y, Phi, (S if scores else None)


def tiled(k: int, d: int, r: int, dtype: str = "float64") -> bool:
    """Whether :func:`_direct_sums` runs heads of these widths by tiles (BLAS GEMMs).

    Every float32 request; float64 heads of score width ``w = min(k, d)`` and value width
    ``r`` with ``w + r ≥`` :data:`WIDE` (and ``d > 3``: the fused ``d ≤ 3`` kernel is faster).
    """
    return dtype == "float32" or (d > 3 and min(k, d) + r >= WIDE)
