"""Compiled (numba) back-end of :mod:`wflow.kernels`: fused, multi-core direct sums.

Private module: call :func:`wflow.kernels.kernel_sums` instead.

All kernels evaluate, for every head ``h`` and target ``i``,
``Z = Σ_j m_j k(s_ij)``, ``Y = Σ_j m_j k(s_ij) y_j`` and optionally
``Φ = Σ_j m_j Φ(s_ij)`` and ``S = Σ_j m_j k(s_ij) s_ij`` in ONE pass over the
sources, with scores ``s_ij = <qx_i, ky_j>`` (``β`` already folded into ``qx``).
Nothing of size ``M × N`` is ever stored: each target keeps its running sums in
registers, so the extra memory is ``O(1)`` per target (``O(threads · N)`` for
the symmetric kernel), and the parallel loop runs over (head, target block).

The exponential is evaluated by :func:`fexp`, an inlined branch-free
``2^k · p(r)`` with a degree-10 polynomial on ``|r| ≤ ln2/2`` (relative error
≤ 3e-15 on ``[-708, 709]``, see the tests) that LLVM vectorises; libm's ``exp``
is a scalar call and numba without Intel SVML cannot vectorise it.

Kind codes: ``0`` exponential (softmax / USA), ``1`` ReLU.
"""

from __future__ import annotations

import numpy as np
from numba import njit, prange, types
from numba.extending import intrinsic

__all__ = ["fexp_array", "direct3", "direct3_sym", "direct_generic", "exp_block"]

#: Fast-math flags: contraction to FMA and reassociation (needed to vectorise the sums).
#: No ``nnan``/``ninf``: NaN and Inf must propagate to the caller's checks.
_FM = {"contract", "reassoc", "nsz", "arcp"}
#: Target rows handled by one parallel work item.
ROWS = 8
#: Sources per chunk in the chunked kernels (a chunk of scores stays in L1).
CHUNK = 256


@intrinsic
def _i64_as_f64(typingctx, x):  # noqa: D103 - LLVM bitcast int64 -> float64
    sig = types.float64(types.int64)

    def codegen(context, builder, signature, args):
        return builder.bitcast(args[0], context.get_value_type(types.float64))

    return sig, codegen


# Degree-10 polynomial for e^r on |r| <= ln2/2 (Chebyshev interpolant, rel. error 1.6e-15).
_C0 = 1.0000000000000007
_C1 = 1.0000000000000033
_C2 = 0.49999999999981276
_C3 = 0.16666666666591878
_C4 = 0.041666666679511064
_C5 = 0.008333333373313332
_C6 = 0.0013888885644825215
_C7 = 0.00019841185367587414
_C8 = 2.480492104939883e-05
_C9 = 2.763411179587552e-06
_C10 = 2.6395126582526755e-07
_LOG2E = 1.4426950408889634
_LN2_HI = 6.93147180369123816490e-01  # high part of ln 2: k · _LN2_HI is exact for |k| < 2^21
_LN2_LO = 1.90821492927058770002e-10


@njit(fastmath={"contract"}, cache=True)
def fexp(s):
    """``e^s`` for ``-708 ≤ s ≤ 709`` (inputs below -708 are clamped): ``2^k · p(s - k ln2)``."""
    s = max(s, -708.0)
    kf = np.rint(s * _LOG2E)
    r = (s - kf * _LN2_HI) - kf * _LN2_LO
    p = _C10
    p = p * r + _C9
    p = p * r + _C8
    p = p * r + _C7
    p = p * r + _C6
    p = p * r + _C5
    p = p * r + _C4
    p = p * r + _C3
    p = p * r + _C2
    p = p * r + _C1
    p = p * r + _C0
    return p * _i64_as_f64((np.int64(kf) + 1023) << 52)


@njit(fastmath=_FM, cache=True)
def fexp_array(s, out):
    """``out[:] = e^{s}`` elementwise with :func:`fexp` (used by the tests)."""
    for i in range(s.size):
        out[i] = fexp(s[i])


# --------------------------------------------------------------------------- d = 3
@njit(parallel=True, fastmath=_FM, cache=True)
def direct3(qx, ky, my, m, kind, want_s, Z, Y, P, S):
    """Fused direct sums for ``d = 3`` (scores of rank ≤ 3), all heads in one parallel loop.

    Parameters
    ----------
    qx : (H, M, 3)   ``β A_hᵀ x_i`` resp. ``β Q_h x_i`` (zero-padded to 3 components).
    ky : (H, 3, N)   ``K_h y_j`` resp. ``y_j``, transposed (component-major).
    my : (3, N)      ``m_j y_j``, transposed.
    m : (N,)         source masses.
    kind : int       0 exponential, 1 ReLU.
    want_s : bool    accumulate ``S``.
    Z, P, S : (H, M) outputs (``P`` only written for ReLU), Y : (H, M, 3) output.
    """
    H, M = qx.shape[0], qx.shape[1]
    N = m.shape[0]
    nblk = (M + ROWS - 1) // ROWS
    for t in prange(H * nblk):
        h = t // nblk
        i0 = (t % nblk) * ROWS
        i1 = min(M, i0 + ROWS)
        k0 = ky[h, 0]
        k1 = ky[h, 1]
        k2 = ky[h, 2]
        y0 = my[0]
        y1 = my[1]
        y2 = my[2]
        for i in range(i0, i1):
            a0 = qx[h, i, 0]
            a1 = qx[h, i, 1]
            a2 = qx[h, i, 2]
            z = 0.0
            v0 = 0.0
            v1 = 0.0
            v2 = 0.0
            sm = 0.0
            if kind == 0 and not want_s:
                for j in range(N):
                    e = fexp(a0 * k0[j] + a1 * k1[j] + a2 * k2[j])
                    z += e * m[j]
                    v0 += e * y0[j]
                    v1 += e * y1[j]
                    v2 += e * y2[j]
            elif kind == 0:
                for j in range(N):
                    s = a0 * k0[j] + a1 * k1[j] + a2 * k2[j]
                    e = fexp(s)
                    em = e * m[j]
                    z += em
                    sm += em * s
                    v0 += e * y0[j]
                    v1 += e * y1[j]
                    v2 += e * y2[j]
            else:
                for j in range(N):
                    s = a0 * k0[j] + a1 * k1[j] + a2 * k2[j]
                    e = max(s, 0.0)
                    em = e * m[j]
                    z += em
                    sm += em * s
                    v0 += e * y0[j]
                    v1 += e * y1[j]
                    v2 += e * y2[j]
            Z[h, i] = z
            Y[h, i, 0] = v0
            Y[h, i, 1] = v1
            Y[h, i, 2] = v2
            if kind == 1:
                # ReLU: k s = max(0, s)² so Φ = ½ Σ m k² = ½ Σ m k s.
                P[h, i] = 0.5 * sm
            if want_s:
                S[h, i] = sm


@njit(parallel=True, fastmath=_FM, cache=True)
def direct3_sym(qx, ky, my, m, kind, want_s, nchunk, acc, Z, Y, P, S):
    """Particle case ``x = y`` with symmetric ``A_h``: each pair's kernel is computed once.

    ``s_ij = s_ji`` so the pair ``(i, j)``, ``i < j``, adds ``m_j k y_j`` to
    target ``i`` and ``m_i k y_i`` to target ``j``. Work item ``c`` of
    ``nchunk`` takes rows ``i ≡ c (mod nchunk)`` of one head (a balanced share
    of the triangle) and adds the column contributions into its private
    ``acc[c]`` (shape ``(5, N)``: z, y0, y1, y2, s); the private buffers are
    summed at the end, so the extra memory is ``O(nchunk · N)``.
    Arguments as in :func:`direct3` with ``M = N``.
    """
    H = qx.shape[0]
    N = m.shape[0]
    for h in range(H):
        k0 = ky[h, 0]
        k1 = ky[h, 1]
        k2 = ky[h, 2]
        y0 = my[0]
        y1 = my[1]
        y2 = my[2]
        for c in prange(nchunk):
            a = acc[c]
            a[:, :] = 0.0
            c0 = a[0]
            c1 = a[1]
            c2 = a[2]
            c3 = a[3]
            c4 = a[4]
            eb = np.empty(CHUNK)
            for i in range(c, N, nchunk):
                a0 = qx[h, i, 0]
                a1 = qx[h, i, 1]
                a2 = qx[h, i, 2]
                mi = m[i]
                w0 = y0[i]
                w1 = y1[i]
                w2 = y2[i]
                z = 0.0
                v0 = 0.0
                v1 = 0.0
                v2 = 0.0
                sm = 0.0
                # j = i once (diagonal), then j > i in chunks; the chunk loop only reads
                # (vectorises), the column updates run in separate short loops.
                for j0 in range(i, N, CHUNK):
                    j1 = min(N, j0 + CHUNK)
                    n = j1 - j0
                    # slices: non-negative local indices let LLVM use contiguous vector loads
                    q0 = k0[j0:j1]
                    q1 = k1[j0:j1]
                    q2 = k2[j0:j1]
                    mm = m[j0:j1]
                    u0 = y0[j0:j1]
                    u1 = y1[j0:j1]
                    u2 = y2[j0:j1]
                    if kind == 0:
                        for j in range(n):
                            s = a0 * q0[j] + a1 * q1[j] + a2 * q2[j]
                            e = fexp(s)
                            z += e * mm[j]
                            sm += e * s * mm[j]
                            v0 += e * u0[j]
                            v1 += e * u1[j]
                            v2 += e * u2[j]
                            eb[j] = e
                    else:
                        for j in range(n):
                            s = a0 * q0[j] + a1 * q1[j] + a2 * q2[j]
                            e = max(s, 0.0)
                            z += e * mm[j]
                            sm += e * s * mm[j]
                            v0 += e * u0[j]
                            v1 += e * u1[j]
                            v2 += e * u2[j]
                            eb[j] = e
                    if j0 == i:  # the diagonal pair is counted on the row side only
                        eb[0] = 0.0
                    d0 = c0[j0:j1]
                    d1 = c1[j0:j1]
                    d2 = c2[j0:j1]
                    d3 = c3[j0:j1]
                    for j in range(n):
                        d0[j] += eb[j] * mi
                    for j in range(n):
                        d1[j] += eb[j] * w0
                    for j in range(n):
                        d2[j] += eb[j] * w1
                    for j in range(n):
                        d3[j] += eb[j] * w2
                    if want_s or kind == 1:
                        d4 = c4[j0:j1]
                        for j in range(n):  # score moment: s_ji = s_ij recomputed
                            s = a0 * q0[j] + a1 * q1[j] + a2 * q2[j]
                            d4[j] += eb[j] * s * mi
                c0[i] += z
                c1[i] += v0
                c2[i] += v1
                c3[i] += v2
                c4[i] += sm
        for j in prange(N):
            z = 0.0
            v0 = 0.0
            v1 = 0.0
            v2 = 0.0
            sm = 0.0
            for c in range(nchunk):
                z += acc[c, 0, j]
                v0 += acc[c, 1, j]
                v1 += acc[c, 2, j]
                v2 += acc[c, 3, j]
                sm += acc[c, 4, j]
            Z[h, j] = z
            Y[h, j, 0] = v0
            Y[h, j, 1] = v1
            Y[h, j, 2] = v2
            if want_s:
                S[h, j] = sm
            if kind == 1:
                # ReLU: k s = max(0, s)² so Φ = ½ Σ m k² = ½ Σ m k s.
                P[h, j] = 0.5 * sm


# --------------------------------------------------------------------------- any d
@njit(parallel=True, fastmath=_FM, cache=True)
def direct_generic(qx, ky, yT, m, kind, want_s, Z, Y, P, S):
    """Fused direct sums for any ``(k, d)``: scores of a source chunk are built in L1.

    Parameters
    ----------
    qx : (H, M, k)   ``β Q_h x_i``.
    ky : (H, k, N)   ``K_h y_j``, transposed.
    yT : (d, N)      sources, transposed.
    m, kind, want_s, Z, Y, P, S
        As in :func:`direct3`.
    """
    H, M, k = qx.shape
    d = yT.shape[0]
    N = m.shape[0]
    nblk = (M + ROWS - 1) // ROWS
    for t in prange(H * nblk):
        h = t // nblk
        i0 = (t % nblk) * ROWS
        i1 = min(M, i0 + ROWS)
        sc = np.empty(CHUNK)
        yacc = np.empty(d)
        for i in range(i0, i1):
            z = 0.0
            sm = 0.0
            yacc[:] = 0.0
            for j0 in range(0, N, CHUNK):
                n = min(N, j0 + CHUNK) - j0
                a = qx[h, i, 0]
                kr = ky[h, 0, j0:j0 + n]
                for j in range(n):
                    sc[j] = a * kr[j]
                for c in range(1, k):
                    a = qx[h, i, c]
                    kr = ky[h, c, j0:j0 + n]
                    for j in range(n):
                        sc[j] += a * kr[j]
                mr = m[j0:j0 + n]
                if kind == 0:
                    for j in range(n):
                        s = sc[j]
                        em = fexp(s) * mr[j]
                        z += em
                        sm += em * s
                        sc[j] = em
                else:
                    for j in range(n):
                        s = sc[j]
                        em = max(s, 0.0) * mr[j]
                        z += em
                        sm += em * s
                        sc[j] = em
                for c in range(d):
                    yr = yT[c, j0:j0 + n]
                    acc = 0.0
                    for j in range(n):
                        acc += sc[j] * yr[j]
                    yacc[c] += acc
            Z[h, i] = z
            for c in range(d):
                Y[h, i, c] = yacc[c]
            if kind == 1:
                P[h, i] = 0.5 * sm
            if want_s:
                S[h, i] = sm


@njit(parallel=True, fastmath=_FM, cache=True)
def exp_block(sc, m, kind, want_s, Z, P, S):
    """In place on a block of scores ``sc`` (b, N): ``sc ← m_j k(sc)``, and the row sums.

    The element-wise half of the BLAS back-end: ``Y = sc @ y`` follows in BLAS.
    ``Z, P, S`` are (b,) views of the outputs.
    """
    b, N = sc.shape
    for i in prange(b):
        row = sc[i]
        z = 0.0
        sm = 0.0
        if kind == 0:
            for j in range(N):
                s = row[j]
                em = fexp(s) * m[j]
                z += em
                sm += em * s
                row[j] = em
        else:
            for j in range(N):
                s = row[j]
                em = max(s, 0.0) * m[j]
                z += em
                sm += em * s
                row[j] = em
        Z[i] = z
        if kind == 1:
            P[i] = 0.5 * sm
        if want_s:
            S[i] = sm


@njit(parallel=True, fastmath=_FM, cache=True)
def direct_wide(qx, ky, yT, m, kind, want_s, Z, Y, P, S):
    """Fused direct sums for wide heads (large ``k``): scores as contiguous dot products.

    Like :func:`direct_generic` but ``ky`` is row-major ``(H, N, k)``, so each
    score is a vectorised dot product over ``k`` (no score round trips through
    memory); a tile of ``ROWS`` targets shares every loaded source row.
    """
    H, M, k = qx.shape
    d = yT.shape[0]
    N = m.shape[0]
    nblk = (M + ROWS - 1) // ROWS
    for t in prange(H * nblk):
        h = t // nblk
        i0 = (t % nblk) * ROWS
        nr = min(M, i0 + ROWS) - i0
        sc = np.empty((ROWS, CHUNK))
        yacc = np.zeros((ROWS, d))
        zacc = np.zeros(ROWS)
        sacc = np.zeros(ROWS)
        for j0 in range(0, N, CHUNK):
            n = min(N, j0 + CHUNK) - j0
            for r in range(nr):
                q = qx[h, i0 + r]
                for j in range(n):
                    kr = ky[h, j0 + j]
                    acc = 0.0
                    for c in range(k):
                        acc += q[c] * kr[c]
                    sc[r, j] = acc
            mr = m[j0:j0 + n]
            for r in range(nr):
                row = sc[r]
                z = 0.0
                sm = 0.0
                if kind == 0:
                    for j in range(n):
                        s = row[j]
                        em = fexp(s) * mr[j]
                        z += em
                        sm += em * s
                        row[j] = em
                else:
                    for j in range(n):
                        s = row[j]
                        em = max(s, 0.0) * mr[j]
                        z += em
                        sm += em * s
                        row[j] = em
                zacc[r] += z
                sacc[r] += sm
                for c in range(d):
                    yr = yT[c, j0:j0 + n]
                    acc = 0.0
                    for j in range(n):
                        acc += row[j] * yr[j]
                    yacc[r, c] += acc
        for r in range(nr):
            i = i0 + r
            Z[h, i] = zacc[r]
            for c in range(d):
                Y[h, i, c] = yacc[r, c]
            if kind == 1:
                P[h, i] = 0.5 * sacc[r]
            if want_s:
                S[h, i] = sacc[r]
