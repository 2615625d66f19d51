"""Compiled (numba) causal sums: the lower triangle's work only, and the causal fast sum on S².

Private module: call :func:`wflow.kernels.causal.causal_sums` instead.

Direct sums. Target row ``i`` (local index) sums over the sources ``j < lim[i]``
(``lim = clip(i + dpos + shift, 0, N)``: the causal mask in global positions) the terms
``m_j k(ℓ_ij)`` with the logit ``ℓ_ij = s_ij + b_ij``; the bias is affine in ``j`` for ALiBi
(``b_ij = base_i + pos_j``, ``base_i = −slope (i + dpos)``, ``pos_j = slope·j`` a row the
caller passes as ``bias[0]``: no integer-to-float conversion in the vectorised loops; zeros
without bias) or read from a block ``bias[i, j]`` (a user's ``b(i, j)``, evaluated by the
caller one row block at a time). Rows go to work items of equal pair counts (``items``:
row boundaries from the cumulative ``lim``), all heads in one ``prange``: the triangle is
balanced over the threads. Each row is summed serially in source order, so the result
never depends on the partition or the thread count.

Fast sums (S², ``k = e^s``). :func:`causal_fast_head` streams blocks of ``B`` tokens
(global positions ``[bB, (b+1)B)``): block ``b``'s coefficients ``D_b`` (weights
``e^{−slope((b+1)B − j)} ≤ 1``, relative to the block's end), an exclusive scan
``C_{b+1} = e^{−slope B} C_b + D_b`` (the carry relative to the block start: no
overflow whatever ``n·slope``), the expansion of ``C_b`` at the block's targets times
``e^{−slope(i − bB)}``, and the pairs inside the block summed directly (the mask and the
bias exactly). Blocks are processed by waves of ``wave`` blocks (coefficients and
evaluations parallel over the wave's blocks, the scan serial in block order): memory
``O(wave · K)``, and the result does not depend on ``wave`` nor the threads.
"""

from __future__ import annotations

import math

import numpy as np
from numba import njit, prange

from ._fastsum import _CS, chunk_buffers, harmonic_chunk
from ._rows import _FM, CHUNK, fexp, put_sums, row3_biased, row_chunked, weigh

__all__ = ["causal_rows3", "causal_rows_generic", "masked_weigh_block", "causal_fast_head"]


# ------------------------------------------------------------------------ direct
@njit(fastmath=_FM, cache=True)
def _rows3(h, r0, r1, qx, ky, my, m, lim, kind, mode, slope, dpos, bias, Z, Y, P, S):
    k0, k1, k2 = ky[h, 0], ky[h, 1], ky[h, 2]
    y0, y1, y2 = my[0], my[1], my[2]
    for i in range(r0, r1):
        br = bias[i] if mode == 2 else bias[0]  # the block's row, or pos_j = slope·j
        z, v0, v1, v2, sm, _, _ = row3_biased(kind, qx[h, i, 0], qx[h, i, 1], qx[h, i, 2], k0,
                                              k1, k2, y0, y1, y2, m, lim[i], True,
                                              -slope * (i + dpos), br)
        Y[h, i, 0] = v0
        Y[h, i, 1] = v1
        Y[h, i, 2] = v2
        put_sums((h, i), z, sm, kind, True, Z, P, S)


@njit(parallel=True, cache=True)
def causal_rows3(qx, ky, my, m, lim, items, kind, mode, slope, dpos, bias, Z, Y, P, S):
    """Masked direct sums, scores of rank ≤ 3, the lower triangle only.

    Parameters
    ----------
    qx : (H, M, 3)   ``β A_hᵀ x_i`` (or ``β Q_h x_i``), zero-padded.
    ky : (H, 3, N)   ``y_j`` (or ``K_h y_j``), component-major.
    my : (3, N)      ``m_j y_j``, component-major.
    m : (N,)         masses.
    lim : (M,) int64 sources per row (``j < lim[i]``).
    items : (T + 1,) int64 row boundaries of the balanced work items.
    kind : int       kernel code. mode : 0/1 affine bias (``slope``, ``dpos``), 2 ``bias``.
    bias : (M, ≥ max lim) array (mode 2, ``slope = 0``); else ``(1, N)``: ``slope·j``.
    Z, P, S : (H, M), Y : (H, M, 3) outputs (``S = Σ m k(ℓ) ℓ``; ``P`` for ReLU only).
    """
    T = items.shape[0] - 1
    for t in prange(qx.shape[0] * T):
        h = t // T
        b = t % T
        _rows3(h, items[b], items[b + 1], qx, ky, my, m, lim, kind, mode, slope, dpos, bias,
               Z, Y, P, S)


@njit(fastmath=_FM, cache=True)
def _rows_generic(h, r0, r1, qx, kyT, yT, m, lim, kind, mode, slope, dpos, bias, Z, Y, P, S):
    r = yT.shape[0]
    sc = np.empty(CHUNK)
    yacc = np.empty(r)
    for i in range(r0, r1):
        br = bias[i] if mode == 2 else bias[0]
        z, sm = row_chunked(kind, qx[h, i], kyT[h], yT, m, lim[i], sc, yacc, True,
                            -slope * (i + dpos), br)
        for c in range(r):
            Y[h, i, c] = yacc[c]
        put_sums((h, i), z, sm, kind, True, Z, P, S)


@njit(parallel=True, cache=True)
def causal_rows_generic(qx, kyT, vyT, m, lim, items, kind, mode, slope, dpos, bias, Z, Y, P,
                        S):
    """Masked direct sums for any score width ``w`` (``qx (H, M, w)``, ``kyT (H, w, N)``).

    ``vyT (Hv, r, N)``: the values summed, ``Y_h(i) = Σ_{j < lim_i} m_j k(ℓ_ij) vy_j``:
    the sources themselves shared by the heads (``Hv = 1``, ``r = d``) or each head's
    ``W_{V,h} y_j`` (``Hv = H``, ``r`` the value rank: ``O(w + r)`` a pair, not
    ``O(w + d)``); ``Y (H, M, r)``; the rest as in :func:`causal_rows3`. The sum of scores
    starts from the bias (``ℓ = b + Σ_c qx_c ky_c``).
    """
    T = items.shape[0] - 1
    shared = vyT.shape[0] == 1
    for t in prange(qx.shape[0] * T):
        h = t // T
        b = t % T
        _rows_generic(h, items[b], items[b + 1], qx, kyT, vyT[0 if shared else h], m, lim,
                      kind, mode, slope, dpos, bias, Z, Y, P, S)


@njit(fastmath=_FM, cache=True, nogil=True)
def masked_weigh_block(sc, m, lim, kind, mode, slope, dpos, bias, Z, P, S):
    """In place on a block of scores ``sc`` (b, N): ``sc ← m_j k(s + b)`` for ``j < lim``, else 0.

    The element-wise half of the wide (BLAS) path: ``Y = sc @ vy`` follows in BLAS.
    ``dpos``: global position of row 0 minus that of source 0; ``bias`` as in
    :func:`causal_rows3`. Serial, GIL-free.
    """
    rows, N = sc.shape
    for i in range(rows):
        n = lim[i]
        row = sc[i]
        if mode != 0:
            br = bias[i] if mode == 2 else bias[0]
            base = -slope * (i + dpos)
            for j in range(n):
                row[j] += base + br[j]
        z, sm, _ = weigh(row, m, n, kind, True)
        for j in range(n, N):
            row[j] = 0.0
        put_sums(i, z, sm, kind, True, Z, P, S)


# -------------------------------------------------------------------- fast sums
@njit(fastmath=_FM, cache=True)
def _block_near(k0, k1, t0, xT, wb, q, slope, shift, out):
    """Pairs inside one block, directly: targets ``[max(k0, t0), k1)``, sources ``[k0, i + shift)``.

    ``xT (3, Ns)`` unit targets, ``wb (3, Ns)`` ``β (u_j − c)``, ``q (4, Ns)`` charges;
    terms ``q_j e^{x_i·wb_j − slope (i − j)}`` added to ``out[:, i − t0]``. Not a
    :func:`~wflow.kernels._rows.row3_biased` row: the bias ``slope·j`` is computed in the
    loop (contracted into the sum), and a precomputed row would round differently.
    """
    for i in range(max(k0, t0), k1):
        a0 = xT[0, i]
        a1 = xT[1, i]
        a2 = xT[2, i]
        z = 0.0
        v0 = 0.0
        v1 = 0.0
        v2 = 0.0
        base = -slope * i
        for j in range(k0, i + shift):
            e = fexp(a0 * wb[0, j] + a1 * wb[1, j] + a2 * wb[2, j] + (base + slope * j))
            z += e * q[0, j]
            v0 += e * q[1, j]
            v1 += e * q[2, j]
            v2 += e * q[3, j]
        r = i - t0
        out[0, r] += z
        out[1, r] += v0
        out[2, r] += v1
        out[3, r] += v2


@njit(parallel=True, cache=True)
def causal_fast_head(xT, uT, z, wb, q, qabs, t0, lead, B, wave, L, off, a, b, dmm, d1, epsf,
                     slope, shift, carry_r, carry_i, aux, near_eval, out, est, lo_r, lo_i, lo_aux,
                     last_r, last_i, last_aux, keep_r, keep_i, keep_a, keep_mode, keep_from):
    """Causal harmonic sums of one head over one sequence of tokens (serial, or one rank's).

    Parameters
    ----------
    xT : (3, Ns)  unit targets (the tokens, normalised).
    uT : (3, Ns)  unit directions ``û_j`` of ``u_j − c``; z : (Ns,) ``β |u_j − c|``.
    wb : (3, Ns)  ``β (u_j − c)`` (the pairs inside a block).
    q : (4, Ns)   charges ``m_j, m_j x_j``; qabs : (Ns,) ``max_c |q_cj|``.
    t0 : int      first target (array index; earlier tokens are sources only: the halo).
    lead : int    sequence index of array index 0 (blocks at multiples of ``B`` in the
                  sequence, whose position 0 is a multiple of ``B`` globally).
    B, wave : int block length, blocks per wave.
    L, off, a, b, dmm, d1 : degree and recurrence tables; epsf : (K,) ``4π ε_m``.
    slope : float ALiBi slope (0: no bias); shift : 1 (``j ≤ i``) or 0 (``j < i``).
    carry_r, carry_i : (4, K) in: the coefficients of all sources before the sequence's
                  first block (relative to its start); out: after the last block.
    aux : (2,)    in/out: the same for ``Σ qabs w`` and ``Σ qabs w e^{z}`` (estimate).
    near_eval : bool  False: coefficients and scan only (``out``, ``est`` untouched).
    out : (4, Ns − t0)  inner sums at the targets (added to).
    est : (2, Ns − t0)  far ``Σ qabs w`` and ``Σ qabs w e^{z}`` per target (estimate).
    lo_r, lo_i, lo_aux : the carry at the start of the last block (out);
    last_r, last_i, last_aux : the last block's own coefficients (out).
    keep_r, keep_i : (nb, 4, K), keep_a : (nb, 2)  every block's own coefficients ``D_b``
                  (and its two estimate sums), kept between two calls over the same blocks
                  (a rank's coefficients-only pass, then its full pass): ``keep_mode`` 0
                  unused (may be empty), 1 written, 2 read instead of computed for the
                  blocks ``b ≥ keep_from`` (block 0 of a full pass with a halo holds more
                  tokens than in the coefficients-only pass: computed). Bit for bit the
                  same ``D_b`` as computed: the same tokens, chunks and order.
    """
    Ns = z.shape[0]
    K = carry_r.shape[1]
    nq = q.shape[0]
    nseq = Ns + lead
    nb = (nseq + B - 1) // B
    decay = math.exp(-slope * B)
    Dr = np.empty((wave, nq, K))
    Di = np.empty((wave, nq, K))
    Da = np.empty((wave, 2))
    for w0 in range(0, nb, wave):
        w1 = min(nb, w0 + wave)
        nw = w1 - w0
        for t in prange(nw):
            blk = w0 + t
            k0 = max(0, blk * B - lead)
            k1 = min(Ns, (blk + 1) * B - lead)
            endseq = (blk + 1) * B
            cr = Dr[t]
            ci = Di[t]
            if keep_mode == 2 and blk >= keep_from:
                cr[:, :] = keep_r[blk]
                ci[:, :] = keep_i[blk]
                Da[t, 0] = keep_a[blk, 0]
                Da[t, 1] = keep_a[blk, 1]
                if near_eval and k1 > t0:
                    _block_near(k0, k1, t0, xT, wb, q, slope, shift, out)
                continue
            cr[:, :] = 0.0
            ci[:, :] = 0.0
            bes, mr, mi, p1r, p1i, p2r, p2i, g = chunk_buffers(L, nq)
            sa = 0.0
            sb = 0.0
            for j0 in range(k0, k1, _CS):
                n = min(k1, j0 + _CS) - j0
                for j in range(n):
                    wgt = 1.0 if slope == 0.0 else math.exp(-slope * (endseq - (j0 + j + lead)))
                    for c in range(nq):
                        g[c, j] = q[c, j0 + j] * wgt
                    qa = qabs[j0 + j] * wgt
                    sa += qa
                    sb += qa * math.exp(z[j0 + j])
                harmonic_chunk(True, uT[0, j0:j0 + n], uT[1, j0:j0 + n], uT[2, j0:j0 + n],
                               z[j0:j0 + n], g, n, L, off, a, b, dmm, d1, cr, ci, g, bes, mr,
                               mi, p1r, p1i, p2r, p2i)
            Da[t, 0] = sa
            Da[t, 1] = sb
            if keep_mode == 1:
                keep_r[blk] = cr
                keep_i[blk] = ci
                keep_a[blk, 0] = sa
                keep_a[blk, 1] = sb
            if near_eval and k1 > t0:
                _block_near(k0, k1, t0, xT, wb, q, slope, shift, out)
        # exclusive scan in block order (serial): D_t becomes the carry at block w0 + t
        for t in range(nw):
            if w0 + t == nb - 1:
                lo_r[:, :] = carry_r
                lo_i[:, :] = carry_i
                lo_aux[:] = aux
                last_r[:, :] = Dr[t]
                last_i[:, :] = Di[t]
                last_aux[:] = Da[t]
            for c in range(nq):
                for k in range(K):
                    tr = Dr[t, c, k]
                    ti = Di[t, c, k]
                    Dr[t, c, k] = carry_r[c, k]
                    Di[t, c, k] = carry_i[c, k]
                    carry_r[c, k] = decay * carry_r[c, k] + tr
                    carry_i[c, k] = decay * carry_i[c, k] + ti
            ta = Da[t, 0]
            tb = Da[t, 1]
            Da[t, 0] = aux[0]
            Da[t, 1] = aux[1]
            aux[0] = decay * aux[0] + ta
            aux[1] = decay * aux[1] + tb
        if not near_eval:
            continue
        for t in prange(nw):
            blk = w0 + t
            k0 = max(t0, blk * B - lead)
            k1 = min(Ns, (blk + 1) * B - lead)
            if k1 <= k0:
                continue
            startseq = blk * B
            Cr = Dr[t]
            Ci = Di[t]
            for c in range(nq):
                for k in range(K):
                    Cr[c, k] *= epsf[k]
                    Ci[c, k] *= epsf[k]
            bes, mr, mi, p1r, p1i, p2r, p2i, acc = chunk_buffers(0, nq)
            for i0 in range(k0, k1, _CS):
                n = min(k1, i0 + _CS) - i0
                harmonic_chunk(False, xT[0, i0:i0 + n], xT[1, i0:i0 + n], xT[2, i0:i0 + n],
                               z[:0], acc, n, L, off, a, b, dmm, d1, Cr, Ci, acc, bes, mr, mi,
                               p1r, p1i, p2r, p2i)
                for j in range(n):
                    i = i0 + j
                    f = 1.0 if slope == 0.0 else math.exp(-slope * (i + lead - startseq))
                    r = i - t0
                    for c in range(nq):
                        out[c, r] += f * acc[c, j]
                    est[0, r] = f * Da[t, 0]
                    est[1, r] = f * Da[t, 1]
