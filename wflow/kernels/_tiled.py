"""Tiled direct sums for wide heads: two BLAS GEMMs per tile and a compiled exponential.

Private module: call :func:`wflow.kernels.kernel_sums` instead.

For one head ``h``, a tile of targets ``I`` (``TM`` rows) and a tile of sources ``J``
(``TN`` columns)::

    S_IJ  = qx_I ky_Jᵀ                  GEMM, (TM × w) (w × TN): the scores, β folded in
    E_IJ  = m_J k(S_IJ - c_I)           compiled, vectorised, in place (c_I: shift, below)
    Z_I  += Σ_J E_IJ                    (same pass, float64 accumulators)
    Y_I  += E_IJ vy_J                   GEMM, (TM × TN) (TN × r): the values, width r

with ``vy_j = W_{V,h} y_j`` (``r`` the value rank; ``vy = y``, ``r = d`` for full values).
A head costs ``2 (w + r)`` flops per (target, source) pair, all of it in GEMMs but the
exponential; the tile of scores (:data:`TM` × :data:`TN`, 1 MiB in either precision) stays in the
core's L2 between the two GEMMs, so nothing of size ``(M, N)`` exists: memory is
``O(TM · TN)`` per thread.

Precision (``dtype``):

``"float64"``
    Scores, exponential and GEMMs in float64, no shift (the score bound ``β|Qx||Ky|
    ≤ 700`` of :func:`~wflow.kernels.validation.raise_bound` keeps ``e^s`` finite), the
    exponential of :func:`wflow.kernels._numba.fexp` (relative error ≤ 4e-15).
``"float32"``
    Scores, shifted exponential and both GEMMs in float32 (SGEMM: twice the float64
    rate, half the memory traffic), with a stable log-sum-exp shift ``c_i ≥ max_j s_ij``
    per target, so the shifted exponential never exceeds 1 and never overflows: the bound
    ``c_i = |qx_i| max_j |ky_j|`` where every ``c_i ≤`` :data:`SHIFT_BOUND` (no row can
    then lose all its terms to underflow), else the running maximum of the row over the
    source tiles seen so far (the sums already accumulated rescaled by
    ``e^{c_old - c_new}`` when it grows). The normalisers ``Z``, the moments ``S`` and the
    value sums ``Y`` are accumulated over the tiles in float64 and multiplied by
    ``e^{c_i}`` (float64) at the end; within a tile ``Y`` (the SGEMM) and ``Z`` are summed
    in float32 (``S``, when asked, in float64). Each weight then carries a relative error
    of about ``(|s| + 2) ε₃₂`` (score rounding and the exponential), each tile's value sum
    and normaliser one of ``√TN ε₃₂`` (float32 accumulation over ``TN`` sources).

Threads: the jobs ``(head, target tile)`` run on ``numba.get_num_threads()`` Python
threads, each with its own tile buffers, BLAS limited to one thread inside the call
(``threadpoolctl.threadpool_limits``, restored on exit: the process's settings are left
as they were), the exponential GIL-free. Without ``threadpoolctl`` the tiles run in
sequence on BLAS's own threads.
"""

from __future__ import annotations

import math
import time

import numpy as np
from numba import njit, types

from ..attention.kinds import CODE_EXP, CODE_RELU
from ._rows import _FM, bitcast, fexp, weigh

#: Targets per tile.
TM = 256
#: Sources per tile in float32 (a tile of scores is ``TM · TN · 4`` bytes = 1 MiB); float64
#: tiles take ``TN // 2`` sources, the same 1 MiB. Measured (``bench/bench_width.py``): at
#: ``TM = 256`` the operands of the two GEMMs streamed per tile (``K_h y_J``, ``vy_J``) are
#: half those of 128 × 1024 tiles per pair, and the GEMMs of inner width 64 run faster.
TN = 1024
#: Shortest target tile made to give every thread a job (few heads, few targets).
_MIN_TM = 32

_F32 = np.float32
# e^r on |r| ≤ ln2/2 in float32: Taylor polynomial of degree 7 (truncation 5e-9 relative,
# below ε₃₂ = 6e-8); e^s = 2^k e^r with k = rint(s / ln 2), Cody–Waite reduction.
_P32 = tuple(_F32(1.0 / math.factorial(i)) for i in range(8))
_LOG2E32 = _F32(1.4426950408889634)
_LN2_HI32 = _F32(0.693145751953125)  # 12 bits: k · _LN2_HI32 exact for |k| < 2^12
_LN2_LO32 = _F32(1.428606765330187e-06)
_MIN32 = _F32(-87.0)  # e^-87 = 1.6e-38 ≥ the smallest normal float32 (1.2e-38)
#: float32, exponential kinds: the shift of target ``i`` is the bound
#: ``c_i = |qx_i| max_j |ky_j| ≥ max_j s_ij`` when every ``c_i ≤ SHIFT_BOUND`` (then
#: ``s - c ≥ -2 c ≥ -80 > -87``: no term of a row underflows), else the running maximum
#: of the row (:func:`exp_tile32_online`, one more pass over each tile).
SHIFT_BOUND = 40.0


_i32_as_f32 = bitcast(types.int32, types.float32)
_f32_as_i32 = bitcast(types.float32, types.int32)
_SHIFTER32 = _F32(12582912.0)  # 1.5 · 2^23: s log2e + it rounds s log2e to an integer
_BIAS32 = np.int32(127 << 23)


@njit(fastmath={"contract"}, cache=True)
def fexp32(s):
    """``e^s`` in float32 for ``s ≤ 88`` (inputs below -87 give ``e^-87``): ``2^k · p(r)``.

    Relative error ≤ 2 ε₃₂ on ``[-87, 88]`` (tested); vectorised by LLVM (libm's ``expf`` is
    a scalar call). ``k`` by the shifter ``1.5 · 2^23`` as in :func:`~wflow.kernels._rows.fexp`
    (and, as there, not inlined at numba's level: its own fast-math flags).
    """
    s = max(s, _MIN32)
    t = s * _LOG2E32 + _SHIFTER32
    kf = t - _SHIFTER32
    r = (s - kf * _LN2_HI32) - kf * _LN2_LO32
    p = _P32[7]
    p = p * r + _P32[6]
    p = p * r + _P32[5]
    p = p * r + _P32[4]
    p = p * r + _P32[3]
    p = p * r + _P32[2]
    p = p * r + _P32[1]
    p = p * r + _P32[0]
    return p * _i32_as_f32((_f32_as_i32(t) << np.int32(23)) + _BIAS32)


@njit(fastmath=_FM, cache=True)
def fexp32_array(s, out):
    """``out[:] = e^{s}`` elementwise with :func:`fexp32` (float32 arrays; the tests)."""
    for i in range(s.size):
        out[i] = fexp32(s[i])


@njit(fastmath=_FM, cache=True, nogil=True)
def exp_tile64(sc, m, kind, want_s, Z, S):
    """In place on a float64 tile of scores ``sc`` (b, n): ``sc ← m_j k(sc)``; row sums added.

    ``Z[i] += Σ_j m_j k(s_ij)``, ``S[i] += Σ_j m_j k(s_ij) s_ij`` (float64, no shift; ``S``
    only when ``want_s``).
    """
    b, n = sc.shape
    for i in range(b):
        if want_s or kind != CODE_EXP:
            z, sm, _ = weigh(sc[i], m, n, kind, True)
            S[i] += sm
        else:
            row = sc[i]
            z = 0.0
            for j in range(n):
                e = fexp(row[j]) * m[j]
                z += e
                row[j] = e
        Z[i] += z


@njit(fastmath=_FM, cache=True, inline="always")
def _exp_row32(row, m, cf, want_s):
    """In place ``row[j] ← m_j e^{row[j] - cf}``; returns ``(Σ, Σ · s)`` (float64 values).

    Without ``want_s`` the sum ``Σ`` runs in float32 over the row of the tile, as the SGEMM
    sums the values of the same tile (relative ``√TN ε₃₂`` typical, one pass that
    vectorises at the float32 width); with it both sums run in float64.
    """
    z = 0.0
    sm = 0.0
    n = row.shape[0]
    if want_s:
        for j in range(n):
            s = row[j]
            e = fexp32(s - cf) * m[j]
            z += np.float64(e)
            sm += np.float64(e) * np.float64(s)
            row[j] = e
        return z, sm
    zt = _F32(0.0)
    for j in range(n):
        e = fexp32(row[j] - cf) * m[j]
        zt += e
        row[j] = e
    return np.float64(zt), sm


@njit(fastmath=_FM, cache=True, nogil=True)
def exp_tile32(sc, m, kind, want_s, c, Z, S):
    """In place on a float32 tile ``sc`` (b, n): ``sc ← m_j k(s_ij - c_i)``, fixed shifts.

    ``c_i ≥ max_j s_ij`` (a bound, fixed for all tiles: :data:`SHIFT_BOUND`), so
    ``e^{s - c} ≤ 1``. ``Z[i] += Σ_j m_j e^{s_ij - c_i}``, ``S[i] += Σ_j m_j e^{s_ij - c_i}
    s_ij`` (when ``want_s``) in float64. ReLU: ``c = 0``, ``k = max(0, s)``.
    """
    b, n = sc.shape
    for i in range(b):
        row = sc[i]
        if kind == CODE_EXP:
            z, sm = _exp_row32(row, m, np.float32(c[i]), want_s)
        else:
            z = 0.0
            sm = 0.0
            for j in range(n):
                s = row[j]
                e = max(s, _F32(0.0)) * m[j]
                z += np.float64(e)
                if want_s:
                    sm += np.float64(e) * np.float64(s)
                row[j] = e
        Z[i] += z
        S[i] += sm


@njit(fastmath=_FM, cache=True, nogil=True)
def exp_tile32_online(sc, m, want_s, c, Z, S, alpha):
    """:func:`exp_tile32` for exponential kinds with the running row maximum as the shift.

    ``c_i`` (float64, ``-inf`` before the first tile) becomes the maximum of the row's
    scores so far; ``alpha_i = e^{c_old - c_new}`` rescales what was accumulated
    (``Z``, ``S`` here, ``Y`` by the caller). For score bounds above :data:`SHIFT_BOUND`,
    where a fixed shift could underflow every term of a row.
    """
    b, n = sc.shape
    for i in range(b):
        row = sc[i]
        mx = row[0]
        for j in range(1, n):
            if row[j] > mx:
                mx = row[j]
        cn = max(c[i], np.float64(mx))
        a = math.exp(c[i] - cn)
        c[i] = cn
        z, sm = _exp_row32(row, m, np.float32(cn), want_s)
        alpha[i] = a
        Z[i] = a * Z[i] + z
        S[i] = a * S[i] + sm


def _transposed(a: np.ndarray, ft, block: int = 64) -> np.ndarray:
    """``aᵀ`` (``a``: (n, w)) as a C-contiguous ``(w, n)`` array of ``ft``, by blocks of rows.

    One strided copy of the whole array writes each cache line of the result ``w`` times
    over (measured 7 ns per element at ``w = 768``); blocks of 64 rows keep the lines of a
    block in cache (1 ns per element).
    """
    n, w = a.shape
    out = np.empty((w, n), dtype=ft)
    for j in range(0, n, block):
        out[:, j:j + block] = a[j:j + block].T
    return out


class _Laps:
    """CPU time of the calling thread per stage of a tile, added into a dict (profiling)."""

    __slots__ = ("acc", "t")

    def __init__(self, acc: dict[str, float]) -> None:
        self.acc = acc
        self.t = time.thread_time()

    def lap(self, stage: str) -> None:
        """Charge the time since the last lap to ``stage``."""
        t = time.thread_time()
        self.acc[stage] = self.acc.get(stage, 0.0) + (t - self.t)
        self.t = t


def tiled_sums(qx, ky, vy, m, kind, dtype, Z, Y, P, S, *, threads, serial,
               tm=None, tn=None, stages=None) -> None:
    """Direct sums of all heads by tiles (module docstring), written into ``Z, Y, P, S``.

    Parameters
    ----------
    qx : (H, M, w) array
        ``β Q_h x_i`` (or ``β A_hᵀ x_i``).
    ky : (H, N, w) array
        ``K_h y_j`` (or ``y_j``).
    vy : (N, r) array or list of H arrays (N, r)
        The values summed: the sources, or ``W_{V,h} y_j`` per head.
    m : (N,) array
        Masses.
    kind : int
        Kernel code (``CODE_EXP``, ``CODE_RELU``).
    dtype : {"float64", "float32"}
    Z, P : (H, M) float64 arrays; Y : (H, M, r) float64 array; S : (H, M) array or None
        Outputs (``P = S / 2`` for ReLU: ``Φ = max(0, s)²/2``; ``S`` is needed for it).
    threads : int
        Worker threads (each runs whole jobs with one BLAS thread).
    serial : bool
        Run the jobs in sequence on the calling thread (BLAS's own threads).
    tm, tn : int, optional
        Tile sizes (targets, sources); default :data:`TM` and :data:`TN` (float32) or
        ``TN // 2`` (float64), read at the call. With threads, target tiles are shortened
        (to 32 rows at least) until there are ``threads`` jobs ``(head, target tile)``.
    stages : dict, optional
        Profiling: the CPU time of each stage (``"prep"``, ``"score"``, ``"exp"``,
        ``"value"``, ``"rest"``, seconds, summed over tiles) is added into it; the jobs then
        run in sequence on the calling thread.
    """
    H, M, _ = qx.shape
    N = m.shape[0]
    f32 = dtype == "float32"
    ft = np.float32 if f32 else np.float64
    want_s = S is not None
    S = np.empty((H, M)) if S is None else S
    laps = None if stages is None else _Laps(stages)
    serial = serial or laps is not None
    tm = max(1, min(int(TM if tm is None else tm), M))
    if not serial and threads > H:  # a job per thread at least: shorter target tiles
        tm = min(tm, max(_MIN_TM, -(-M // -(-int(threads) // H))))
    tn = max(1, min(int((TN if f32 else TN // 2) if tn is None else tn), N))
    qx = np.ascontiguousarray(qx, dtype=ft)
    # (w, N) per head; one copy when every head reads the same sources (ky broadcast, k ≥ d)
    kyT = ([_transposed(ky[0], ft)] * H if ky.strides[0] == 0 else
           [_transposed(ky[h], ft) for h in range(H)])
    vys = ([np.ascontiguousarray(v, dtype=ft) for v in vy] if isinstance(vy, list) else
           [np.ascontiguousarray(vy, dtype=ft)] * H)
    mt = np.ascontiguousarray(m, dtype=ft)
    r = vys[0].shape[1]
    online = False
    if f32 and kind == CODE_EXP:  # fixed shifts c_i = |qx_i| max_j |ky_j| (SHIFT_BOUND)
        cq = np.sqrt(np.einsum("hmw,hmw->hm", qx, qx, dtype=np.float64))
        ck = np.sqrt(np.max(np.einsum("hnw,hnw->hn", ky, ky), axis=1))
        # rounded to float32 once, so that the final e^{c_i} undoes exactly the shift used
        shift = (cq * ck[:, None]).astype(np.float32).astype(np.float64)
        online = bool(np.max(shift, initial=0.0) > SHIFT_BOUND)
    else:
        shift = np.zeros((H, M))
    if laps is not None:
        laps.lap("prep")

    def job(h: int, i0: int, buf: np.ndarray, tmp: np.ndarray) -> None:
        i1 = min(M, i0 + tm)
        b = i1 - i0
        z = np.zeros(b)
        sm = np.zeros(b)
        yacc = np.zeros((b, r))
        c = np.full(b, -np.inf) if online else shift[h, i0:i1].copy()
        alpha = np.empty(b)
        q = qx[h, i0:i1]
        if laps is not None:
            laps.lap("rest")
        for j0 in range(0, N, tn):
            j1 = min(N, j0 + tn)
            n = j1 - j0
            sc = buf[: b * n].reshape(b, n)
            np.matmul(q, kyT[h][:, j0:j1], out=sc)
            t = tmp[: b * r].reshape(b, r)
            if laps is not None:
                laps.lap("score")
            if online:
                exp_tile32_online(sc, mt[j0:j1], want_s, c, z, sm, alpha)
                yacc *= alpha[:, None]
            elif f32:
                exp_tile32(sc, mt[j0:j1], kind, want_s, c, z, sm)
            else:
                exp_tile64(sc, mt[j0:j1], kind, want_s, z, sm)
            if laps is not None:
                laps.lap("exp")
            np.matmul(sc, vys[h][j0:j1], out=t)
            yacc += t
            if laps is not None:
                laps.lap("value")
        if f32 and kind == CODE_EXP:
            scale = np.exp(c)  # ≤ e^700: finite (the caller's score bound)
            z *= scale
            sm *= scale
            yacc *= scale[:, None]
        Z[h, i0:i1] = z
        Y[h, i0:i1] = yacc
        S[h, i0:i1] = sm
        if kind == CODE_RELU:
            P[h, i0:i1] = 0.5 * sm
        if laps is not None:
            laps.lap("rest")

    jobs = [(h, i0) for h in range(H) for i0 in range(0, M, tm)]
    nt = min(int(threads), len(jobs))
    try:
        from threadpoolctl import threadpool_limits
    except ImportError:  # pragma: no cover - optional
        threadpool_limits = None
    if serial or nt <= 1 or threadpool_limits is None:
        buf, tmp = np.empty(tm * tn, dtype=ft), np.empty(tm * r, dtype=ft)
        for h, i0 in jobs:
            job(h, i0, buf, tmp)
        return
    import threading
    from concurrent.futures import ThreadPoolExecutor

    local = threading.local()

    def run(hj: tuple[int, int]) -> None:  # dynamic: a paused thread does not hold the rest
        if not hasattr(local, "buf"):
            local.buf = np.empty(tm * tn, dtype=ft)
            local.tmp = np.empty(tm * r, dtype=ft)
        job(hj[0], hj[1], local.buf, local.tmp)

    with threadpool_limits(1, user_api="blas"), ThreadPoolExecutor(nt) as ex:
        list(ex.map(run, jobs))
