"""The causal fast sum on S², serial or one rank's part (private).

The driver of :func:`wflow.kernels._causal_numba.causal_fast_head`; part of
:mod:`wflow.kernels.causal` (its docstring describes the method).
"""

from __future__ import annotations

import math

import numpy as np

from ..attention.mask import Causal

__all__ = ["FAST_BLOCK", "KEEP_BYTES", "causal_coefficients", "causal_kept_bytes",
           "causal_wave_bytes"]

_EPS = float(np.finfo(np.float64).eps)
#: Tokens per block of the causal fast sum (pairs inside a block are summed directly:
#: ``n · FAST_BLOCK / 2`` of them; a multiple of the expansion's chunk of 64 points).
FAST_BLOCK = 64
#: Bytes of coefficient buffers in flight (``wave`` blocks of ``8 K`` doubles) at most:
#: the streaming memory, ``O(K)`` per block of the wave.
_WAVE_BYTES = 32 << 20
#: The budget of a rank's kept coefficients: a rank of ``P > 1`` keeps its blocks'
#: coefficients ``D_b`` from its coefficients-only pass for its full pass, instead of
#: computing them twice, when ``nb (16 K + 2) · 8 ≤ KEEP_BYTES`` (``nb`` blocks of
#: :data:`FAST_BLOCK` tokens); above it they are computed again (the same numbers, bit for
#: bit). A block stores ``8 K + 2`` doubles (real and imaginary ``4 × K``, two estimate
#: sums), half what the rule counts, so a rank holds at most ``KEEP_BYTES / 2``: 176 MB for
#: 2.5·10⁵ tokens at degree 36 (kept), none for 5·10⁵ (351 MB stored, 703 MB counted: not
#: kept). :func:`causal_kept_bytes` is the rule, for the kernel and the memory estimate.
KEEP_BYTES = 512 << 20


def causal_coefficients(L: int) -> int:
    """Harmonic coefficients ``K = (L + 1)(L + 2)/2`` of degree ``L`` (orders ``m ≥ 0``)."""
    return (int(L) + 1) * (int(L) + 2) // 2


def causal_kept_bytes(M: int, P: int, K: int, *, offset: int = 0) -> int:
    """Bytes of kept block coefficients of one rank (``0``: computed twice, not kept).

    A rank of ``P`` holding ``M`` tokens from sequence position ``offset`` covers
    ``nb = ⌈(offset mod B + M)/B⌉`` blocks (``B`` = :data:`FAST_BLOCK`; its first block
    may start in the previous rank's tokens) and keeps them when ``P > 1``, ``M > 0`` and
    ``nb (16 K + 2) · 8 ≤`` :data:`KEEP_BYTES`; it then stores ``nb (8 K + 2)`` doubles.

    Parameters
    ----------
    M : int
        Tokens of the rank.
    P : int
        Ranks (one process keeps nothing: it makes one pass).
    K : int
        Coefficients per row (:func:`causal_coefficients` of the head's degree).
    offset : int
        The rank's first token in the sequence.

    Returns
    -------
    int
        Bytes held by the kept buffer (shared by the heads: the largest ``K`` decides).
    """
    B = FAST_BLOCK
    nb = (int(offset) % B + int(M) + B - 1) // B
    if int(P) > 1 and int(M) > 0 and nb * (16 * int(K) + 2) * 8 <= KEEP_BYTES:
        return nb * (8 * int(K) + 2) * 8
    return 0


def _wave_blocks(K: int) -> int:
    """Blocks per wave: ``max(1, _WAVE_BYTES // (64 K))`` (``K`` coefficients a row)."""
    return int(max(1, _WAVE_BYTES // (64 * int(K))))


def causal_wave_bytes(K: int) -> int:
    """Bytes of one head's coefficient buffers in flight: two ``(wave, 4, K)`` arrays.

    ``wave`` (:func:`_wave_blocks`) blocks: ``≈ _WAVE_BYTES`` (32 MiB) for every degree
    (one block's ``64 K`` bytes when a block alone exceeds it).
    """
    return 2 * _wave_blocks(K) * 4 * int(K) * 8


def _fast_causal(x, m, A, beta, tol, mask: Causal, slope, heads, comm, offset, dev):
    """Causal fast sums of the heads marked fast: ``(Z, Y, err)`` (others: 0 and ``err = inf``).

    Serial (``comm=None``) or one rank's part: the halo of earlier ranks' tokens in its
    first block, the coefficients-only pass and the gathered prefixes (module docstring).
    """
    from . import _causal_numba as cn
    from . import _fastsum as fs

    H = A.shape[0]
    M = x.shape[0]
    B = FAST_BLOCK
    Z = np.zeros((H, M))
    Y = np.zeros((H, M, 3))
    err = np.full(H, np.inf)
    P = 1 if comm is None else comm.Get_size()
    rank = 0 if comm is None else comm.Get_rank()
    S0 = (offset // B) * B
    # the halo: tokens of earlier ranks in this rank's first block [S0, offset) (< B of them)
    hx, hm = np.zeros((0, 3)), np.zeros(0)
    if P > 1:
        tails = comm.allgather((offset + M - min(M, B), x[M - min(M, B):].copy(),
                                m[M - min(M, B):].copy()))
        keep = []
        for q in range(rank):
            t0q, tx, tm = tails[q]
            pos = t0q + np.arange(tx.shape[0])
            sel = (pos >= S0) & (pos < offset)
            if np.any(sel):
                keep.append((tx[sel], tm[sel]))
        if keep:
            hx = np.concatenate([k[0] for k in keep])
            hm = np.concatenate([k[1] for k in keep])
    nh = hx.shape[0]
    if nh != offset - S0:
        raise RuntimeError(f"causal fast sum: halo of {nh} tokens, expected {offset - S0}")
    xs = np.concatenate([hx, x]) if nh else x
    ms = np.concatenate([hm, m]) if nh else m
    ns = np.sqrt(np.einsum("ij,ij->i", xs, xs))
    xsT = np.ascontiguousarray((xs / np.where(ns > 0, ns, 1.0)[:, None]).T)
    q = np.ascontiguousarray(np.vstack([ms[None, :], (ms[:, None] * xs).T]))
    qabs = np.ascontiguousarray(np.abs(q).max(axis=0))
    decay_of = lambda k: math.exp(-slope * k)  # noqa: E731 - one expression, same as the scan
    store = np.empty(0)
    for h, (c, zR, L, use) in enumerate(heads):
        if not use:
            continue
        u = xs @ A[h].T
        w = u - c
        r = np.sqrt(np.einsum("ij,ij->i", w, w))
        uhat = np.where(r[:, None] > 0, w / np.where(r > 0, r, 1.0)[:, None], [0.0, 0.0, 1.0])
        uT = np.ascontiguousarray(uhat.T)
        z = np.ascontiguousarray(beta * r)
        wb = np.ascontiguousarray((beta * w).T)
        tabs = fs._tables(L)
        Kc = int(tabs[0][L + 1])
        epsf = np.full(Kc, 8.0 * math.pi)
        epsf[: L + 1] = 4.0 * math.pi  # m = 0 first in the m-major layout
        # blocks per wave: as many as _WAVE_BYTES of coefficients hold, so the parallel
        # regions (two per wave, each ending in a barrier that costs a time slice on a
        # loaded machine) stay few: ~7 waves for n = 10⁶ at L = 20
        wave = _wave_blocks(Kc)  # the rule causal_wave_bytes counts for the estimate
        carry_r, carry_i, aux = np.zeros((4, Kc)), np.zeros((4, Kc)), np.zeros(2)
        bufs = [np.zeros((4, Kc)), np.zeros((4, Kc)), np.zeros(2),
                np.zeros((4, Kc)), np.zeros((4, Kc)), np.zeros(2)]
        out = np.zeros((4, M))
        est = np.zeros((2, M))
        nb = (nh + M + B - 1) // B  # blocks of the sequence [S0, offset + M)
        keep = causal_kept_bytes(M, P, Kc, offset=offset) > 0
        if keep:  # one buffer for every head (written in full by the coefficients pass)
            size = nb * (8 * Kc + 2)
            if store.size < size:
                store = np.empty(size)
            kr = store[: nb * 4 * Kc].reshape(nb, 4, Kc)
            ki = store[nb * 4 * Kc: nb * 8 * Kc].reshape(nb, 4, Kc)
            ka = store[nb * 8 * Kc: size].reshape(nb, 2)
        else:
            kr = ki = np.zeros((0, 4, Kc))
            ka = np.zeros((0, 2))
        if P > 1:
            # coefficients-only pass over this rank's tokens; the exclusive scan in rank order
            loc = [np.zeros((4, Kc)), np.zeros((4, Kc)), np.zeros(2)]
            g_last = -1
            if M:
                lead = offset - S0
                # contiguous copies (a view past the halo is not: numba would compile the
                # strided variant, measured 25 % slower)
                own = [np.ascontiguousarray(v[..., nh:]) for v in (xsT, uT, z, wb, q, qabs)]
                cn.causal_fast_head(*own, 0, lead, B, wave, L, *tabs, epsf, slope,
                                    mask.shift, *loc, False, out, est, *bufs, kr, ki, ka,
                                    1 if keep else 0, 0)
                g_last = (offset + M - 1) // B
            parts = comm.allgather((g_last, bufs[0], bufs[1], bufs[2], bufs[3], bufs[4], bufs[5]))
            g0 = S0 // B
            for qr in range(rank):
                gq, lr, li, la, dr, di, da = parts[qr]
                if gq < 0:
                    continue
                f = decay_of(S0 - gq * B)
                carry_r += f * lr
                carry_i += f * li
                aux += f * la
                if gq < g0:
                    f = decay_of(S0 - (gq + 1) * B)
                    carry_r += f * dr
                    carry_i += f * di
                    aux += f * da
        if M:
            # block 0 holds the halo in this pass, not in the coefficients-only one: computed
            cn.causal_fast_head(xsT, uT, z, wb, q, qabs, nh, 0, B, wave, L, *tabs, epsf, slope,
                                mask.shift, carry_r, carry_i, aux, True, out, est, *bufs, kr,
                                ki, ka, 2 if keep else 0, 1 if nh else 0)
        inner = out[0]
        tail = fs.bessel_tail(zR, L)
        with np.errstate(divide="ignore", invalid="ignore"):
            rel = (tail * est[0] + fs.ROUNDOFF_KAPPA * _EPS * est[1]) / inner
        seen = est[1] > 0  # targets with a far part (the rest are exact direct sums)
        bad = seen & ~(inner > 0)
        e = math.inf if np.any(bad) else float(np.max(rel[seen], initial=0.0))
        err[h] = e + zR * dev * math.exp(zR * dev)
        fac = np.exp(beta * (x @ c))
        Z[h] = fac * out[0]
        Y[h] = (fac * out[1:]).T
    return Z, Y, err
