"""Compiled (numba) back-end of :mod:`wflow.kernels`: fused, multi-core direct sums.

Private module: call :func:`wflow.kernels.kernel_sums` instead.

All kernels evaluate, for every head ``h`` and target ``i``,
``Z = Σ_j m_j k(s_ij)``, ``Y = Σ_j m_j k(s_ij) y_j`` and optionally
``Φ = Σ_j m_j Φ(s_ij)`` and ``S = Σ_j m_j k(s_ij) s_ij`` in ONE pass over the
sources, with scores ``s_ij = <qx_i, ky_j>`` (``β`` already folded into ``qx``).
Nothing of size ``M × N`` is ever stored: each target keeps its running sums in
registers, so the extra memory is ``O(1)`` per target, and the parallel loop
runs over (head, target block). Small problems run them with one thread
(``numba.set_num_threads(1)`` around the call, see :mod:`wflow.kernels`).

Every row is summed by the one source of the row loops, :mod:`wflow.kernels._rows`
(its exponential :func:`~wflow.kernels._rows.fexp` included).

Kernel codes (the ``kind`` argument): :data:`wflow.attention.kinds.CODE_EXP` (``e^s``:
softmax, USA) and :data:`~wflow.attention.kinds.CODE_RELU` (``max(0, s)``), the
``code`` of each registered kind's kernel. numba freezes them as compile-time constants.
"""

from __future__ import annotations

import numpy as np
from numba import njit, prange

from ..attention.kinds import CODE_EXP, CODE_RELU
from ._rows import _FM, CHUNK, fexp, put_sums, relu, row3, row_chunked, weigh

# No process-wide setting on import (issue 26): the OpenMP wait policy of numba's workers
# is the user's (``OMP_WAIT_POLICY``); the ``wflow`` command sets PASSIVE for its process.

__all__ = [
    "fexp_array",
    "max_rownorm",
    "particle_terms",
    "euler_path",
    "direct3",
    "direct_generic",
    "exp_block",
]

#: Target rows handled by one parallel work item.
ROWS = 8


@njit(fastmath=_FM, cache=True)
def fexp_array(s, out):
    """``out[:] = e^{s}`` elementwise with :func:`fexp` (used by the tests)."""
    for i in range(s.size):
        out[i] = fexp(s[i])


@njit(cache=True)
def max_rownorm(Q, x):
    """``max_{h,i} |Q_h x_i|`` (the overflow guard's factor) without temporaries."""
    H, k, d = Q.shape
    best = 0.0
    for h in range(H):
        for i in range(x.shape[0]):
            nrm = 0.0
            for a in range(k):
                t = 0.0
                for b in range(d):
                    t += Q[h, a, b] * x[i, b]
                nrm += t * t
            best = max(best, nrm)
    return np.sqrt(best)


# --------------------------------------------------------------------------- d = 3
@njit(fastmath=_FM, cache=True)
def _direct3_rows(t, nblk, qx, ky, my, m, kind, want_s, Z, Y, P, S):
    """Work item ``t``: head ``t // nblk``, target rows ``ROWS·(t % nblk) + [0, ROWS)``."""
    M = qx.shape[1]
    N = m.shape[0]
    h = t // nblk
    i0 = (t % nblk) * ROWS
    i1 = min(M, i0 + ROWS)
    k0, k1, k2 = ky[h, 0], ky[h, 1], ky[h, 2]
    y0, y1, y2 = my[0], my[1], my[2]
    for i in range(i0, i1):
        a0 = qx[h, i, 0]
        a1 = qx[h, i, 1]
        a2 = qx[h, i, 2]
        if want_s or kind != CODE_EXP:
            z, v0, v1, v2, sm, _, _ = row3(kind, a0, a1, a2, k0, k1, k2, y0, y1, y2, m, N, True)
        else:  # the exponential without S: one multiply-add less per pair
            z, v0, v1, v2, _, _, _ = row3(kind, a0, a1, a2, k0, k1, k2, y0, y1, y2, m, N, True)
            sm = 0.0
        Y[h, i, 0] = v0
        Y[h, i, 1] = v1
        Y[h, i, 2] = v2
        put_sums((h, i), z, sm, kind, want_s, Z, P, S)


@njit(parallel=True, cache=True)
def direct3(qx, ky, my, m, kind, want_s, Z, Y, P, S):
    """Fused direct sums for ``d = 3`` (scores of rank ≤ 3), all heads in one parallel loop.

    Parameters
    ----------
    qx : (H, M, 3)   ``β A_hᵀ x_i`` resp. ``β Q_h x_i`` (zero-padded to 3 components).
    ky : (H, 3, N)   ``y_j`` resp. ``K_h y_j``, transposed (component-major).
    my : (3, N)      ``m_j y_j``, transposed.
    m : (N,)         source masses.
    kind : int       kernel code: CODE_EXP exponential, CODE_RELU ReLU.
    want_s : bool    accumulate ``S``.
    Z, P, S : (H, M) outputs (``P`` only written for ReLU), Y : (H, M, 3) output.
    """
    nblk = (qx.shape[1] + ROWS - 1) // ROWS
    for t in prange(qx.shape[0] * nblk):
        _direct3_rows(t, nblk, qx, ky, my, m, kind, want_s, Z, Y, P, S)


# --------------------------------------------------------------------------- any d
@njit(fastmath=_FM, cache=True)
def _generic_rows(t, nblk, qx, ky, yT, m, kind, want_s, Z, Y, P, S):
    """Work item ``t`` of :func:`direct_generic` (one head, ``ROWS`` targets)."""
    M = qx.shape[1]
    d = yT.shape[0]
    N = m.shape[0]
    h = t // nblk
    i0 = (t % nblk) * ROWS
    i1 = min(M, i0 + ROWS)
    sc = np.empty(CHUNK)
    yacc = np.empty(d)
    for i in range(i0, i1):
        z, sm = row_chunked(kind, qx[h, i], ky[h], yT, m, N, sc, yacc, False, 0.0, m)
        for c in range(d):
            Y[h, i, c] = yacc[c]
        put_sums((h, i), z, sm, kind, want_s, Z, P, S)


@njit(parallel=True, cache=True)
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
    nblk = (qx.shape[1] + ROWS - 1) // ROWS
    for t in prange(qx.shape[0] * nblk):
        _generic_rows(t, nblk, qx, ky, yT, m, kind, want_s, Z, Y, P, S)


@njit(fastmath=_FM, cache=True, nogil=True)
def exp_block(sc, m, kind, want_s, Z, P, S):
    """In place on a block of scores ``sc`` (b, N): ``sc ← m_j k(sc)``, and the row sums.

    The element-wise half of the BLAS back-end: ``Y = sc @ y`` follows in BLAS.
    ``Z, P, S`` are (b,) views of the outputs. Serial and GIL-free: the caller
    runs it from its own worker threads (with single-threaded BLAS), so no two
    thread teams alternate on the same cores.
    """
    b, N = sc.shape
    for i in range(b):
        z, sm, _ = weigh(sc[i], m, N, kind, True)
        put_sums(i, z, sm, kind, want_s, Z, P, S)


# ------------------------------------------------------- particle step, one pass
# Layouts: x (n, 3), xT (3, n) contiguous, A, V (H, 3, 3); Y, Yp (H, 3, n) (component-major,
# so the pair-once column updates are contiguous); Z, P, PH (H, n); G (H, n, 3).


@njit(fastmath=_FM, cache=True)
def _rows_sums(i0, i1, xT, A, m, beta, kind, sym, Z, Y, Yp, P):
    """Targets ``i0 ≤ i < i1``, every head: ``Z, Y, Φ`` (and ``Y'`` with ``Aᵀ`` if not ``sym``)."""
    H = A.shape[0]
    N = m.shape[0]
    x0, x1, x2 = xT[0], xT[1], xT[2]
    for i in range(i0, i1):
        xi0 = x0[i]
        xi1 = x1[i]
        xi2 = x2[i]
        for h in range(H):
            # s_ij = β xᵢᵀ A y_j = <β Aᵀ xᵢ, y_j>
            a0 = beta * (A[h, 0, 0] * xi0 + A[h, 1, 0] * xi1 + A[h, 2, 0] * xi2)
            a1 = beta * (A[h, 0, 1] * xi0 + A[h, 1, 1] * xi1 + A[h, 2, 1] * xi2)
            a2 = beta * (A[h, 0, 2] * xi0 + A[h, 1, 2] * xi1 + A[h, 2, 2] * xi2)
            z, y0, y1, y2, _, ph, _ = row3(kind, a0, a1, a2, x0, x1, x2, x0, x1, x2, m, N, False)
            Z[h, i] = z
            P[h, i] = ph
            Y[h, 0, i] = y0
            Y[h, 1, i] = y1
            Y[h, 2, i] = y2
            if not sym:  # Y' (roles of Q and K swapped): s'_ij = <β A xᵢ, y_j>
                b0 = beta * (A[h, 0, 0] * xi0 + A[h, 0, 1] * xi1 + A[h, 0, 2] * xi2)
                b1 = beta * (A[h, 1, 0] * xi0 + A[h, 1, 1] * xi1 + A[h, 1, 2] * xi2)
                b2 = beta * (A[h, 2, 0] * xi0 + A[h, 2, 1] * xi1 + A[h, 2, 2] * xi2)
                _, t0, t1, t2, _, _, _ = row3(kind, b0, b1, b2, x0, x1, x2, x0, x1, x2, m, N,
                                              False)
                Yp[h, 0, i] = t0
                Yp[h, 1, i] = t1
                Yp[h, 2, i] = t2


@njit(fastmath=_FM, cache=True, inline="always")
def _pair_row(kf, a0, a1, a2, q0, q1, q2, mm, n, eb, z, y0, y1, y2, ph):
    """Row side of a chunk of pairs (kernel ``kf``): ``eb[j] = k(s_j)``, running sums updated.

    Returns ``(z, y0, y1, y2, ph)`` plus ``Σ m_j k (1, x_j, k/2)``, accumulated onto the
    running values (the sums of :func:`wflow.kernels._rows.row3`, plain values, continued
    across chunks; the column side reads ``eb``).
    """
    for j in range(n):
        e = kf(a0 * q0[j] + a1 * q1[j] + a2 * q2[j])
        em = e * mm[j]
        z += em
        y0 += em * q0[j]
        y1 += em * q1[j]
        y2 += em * q2[j]
        ph += 0.5 * e * em
        eb[j] = e  # last: moved up, the vectoriser (so the rounding) sees another loop
    return z, y0, y1, y2, ph


@njit(fastmath=_FM, cache=True, inline="always")
def _add_scaled(d, eb, c, n):
    """``d[j] += eb[j] · c`` for ``j < n`` (a column update of the pair-once sums)."""
    for j in range(n):
        d[j] += eb[j] * c


@njit(fastmath=_FM, cache=True)
def _head_sums_pair_once(h, xT, A, m, beta, kind, Z, Y, P, eb):
    """One SYMMETRIC head, every pair once (half the kernel evaluations).

    ``s_ij = s_ji``, so pair ``i < j`` adds ``m_j k y_j`` to target ``i`` and
    ``m_i k y_i`` to target ``j``. The row loop only reads (it vectorises); the
    column updates run in separate short loops over the buffer ``eb``.
    """
    N = m.shape[0]
    x0 = xT[0]
    x1 = xT[1]
    x2 = xT[2]
    zc = Z[h]
    pc = P[h]
    c0 = Y[h, 0]
    c1 = Y[h, 1]
    c2 = Y[h, 2]
    zc[:] = 0.0
    pc[:] = 0.0
    c0[:] = 0.0
    c1[:] = 0.0
    c2[:] = 0.0
    for i in range(N):
        xi0 = x0[i]
        xi1 = x1[i]
        xi2 = x2[i]
        a0 = beta * (A[h, 0, 0] * xi0 + A[h, 1, 0] * xi1 + A[h, 2, 0] * xi2)
        a1 = beta * (A[h, 0, 1] * xi0 + A[h, 1, 1] * xi1 + A[h, 2, 1] * xi2)
        a2 = beta * (A[h, 0, 2] * xi0 + A[h, 1, 2] * xi1 + A[h, 2, 2] * xi2)
        mi = m[i]
        w0 = mi * xi0
        w1 = mi * xi1
        w2 = mi * xi2
        z = 0.0
        y0 = 0.0
        y1 = 0.0
        y2 = 0.0
        ph = 0.0
        for j0 in range(i, N, CHUNK):
            j1 = min(N, j0 + CHUNK)
            n = j1 - j0
            q0 = x0[j0:j1]
            q1 = x1[j0:j1]
            q2 = x2[j0:j1]
            mm = m[j0:j1]
            if kind == CODE_EXP:  # Φ = Z: no ph
                z, y0, y1, y2, _ = _pair_row(fexp, a0, a1, a2, q0, q1, q2, mm, n, eb, z, y0, y1,
                                             y2, ph)
            else:
                z, y0, y1, y2, ph = _pair_row(relu, a0, a1, a2, q0, q1, q2, mm, n, eb, z, y0, y1,
                                              y2, ph)
            if j0 == i:  # the diagonal pair is counted on the row side only
                eb[0] = 0.0
            _add_scaled(zc[j0:j1], eb, mi, n)
            _add_scaled(c0[j0:j1], eb, w0, n)
            _add_scaled(c1[j0:j1], eb, w1, n)
            _add_scaled(c2[j0:j1], eb, w2, n)
            if kind == CODE_RELU:
                d = pc[j0:j1]
                for j in range(n):
                    d[j] += 0.5 * eb[j] * eb[j] * mi
        zc[i] += z
        c0[i] += y0
        c1[i] += y1
        c2[i] += y2
        pc[i] += ph
    if kind == CODE_EXP:
        pc[:] = zc


@njit(fastmath=_FM, cache=True)
def _post_rows(i0, i1, xT, A, V, w, wbar, soft, sym, surrogate, Z, Y, Yp,
               G, vel, v, vhat, terms, PH):
    """Head outputs, velocities and slope integrands of targets ``i0 ≤ i < i1`` from the sums."""
    H = A.shape[0]
    for i in range(i0, i1):
        xi0 = xT[0, i]
        xi1 = xT[1, i]
        xi2 = xT[2, i]
        f0 = 0.0
        f1 = 0.0
        f2 = 0.0
        u0 = 0.0
        u1 = 0.0
        u2 = 0.0
        g0 = 0.0
        g1 = 0.0
        g2 = 0.0
        wz = 0.0
        wiz = 0.0
        for h in range(H):
            z = Z[h, i]
            y0 = Y[h, 0, i]
            y1 = Y[h, 1, i]
            y2 = Y[h, 2, i]
            # ∇ψ_h = A Y (symmetric) or ½ (A Y + Aᵀ Y')
            q0 = A[h, 0, 0] * y0 + A[h, 0, 1] * y1 + A[h, 0, 2] * y2
            q1 = A[h, 1, 0] * y0 + A[h, 1, 1] * y1 + A[h, 1, 2] * y2
            q2 = A[h, 2, 0] * y0 + A[h, 2, 1] * y1 + A[h, 2, 2] * y2
            if not sym:
                t0 = Yp[h, 0, i]
                t1 = Yp[h, 1, i]
                t2 = Yp[h, 2, i]
                q0 = 0.5 * (q0 + A[h, 0, 0] * t0 + A[h, 1, 0] * t1 + A[h, 2, 0] * t2)
                q1 = 0.5 * (q1 + A[h, 0, 1] * t0 + A[h, 1, 1] * t1 + A[h, 2, 1] * t2)
                q2 = 0.5 * (q2 + A[h, 0, 2] * t0 + A[h, 1, 2] * t1 + A[h, 2, 2] * t2)
            G[h, i, 0] = q0
            G[h, i, 1] = q1
            G[h, i, 2] = q2
            g0 += w[h] * q0
            g1 += w[h] * q1
            g2 += w[h] * q2
            vy0 = V[h, 0, 0] * y0 + V[h, 0, 1] * y1 + V[h, 0, 2] * y2
            vy1 = V[h, 1, 0] * y0 + V[h, 1, 1] * y1 + V[h, 1, 2] * y2
            vy2 = V[h, 2, 0] * y0 + V[h, 2, 1] * y1 + V[h, 2, 2] * y2
            u0 += w[h] * vy0
            u1 += w[h] * vy1
            u2 += w[h] * vy2
            if soft:
                f0 += w[h] * vy0 / z
                f1 += w[h] * vy1 / z
                f2 += w[h] * vy2 / z
                wz += wbar[h] * z
                wiz += wbar[h] / z
            else:
                f0 += w[h] * vy0
                f1 += w[h] * vy1
                f2 += w[h] * vy2
        if soft:
            bh = 1.0 / wz
            hm = 1.0 / wiz
        else:
            bh = 1.0
            hm = 1.0
        r = xi0 * f0 + xi1 * f1 + xi2 * f2
        v[i, 0] = f0 - r * xi0
        v[i, 1] = f1 - r * xi1
        v[i, 2] = f2 - r * xi2
        r = xi0 * u0 + xi1 * u1 + xi2 * u2
        vhat[i, 0] = bh * (u0 - r * xi0)
        vhat[i, 1] = bh * (u1 - r * xi1)
        vhat[i, 2] = bh * (u2 - r * xi2)
        if surrogate:
            c0 = vhat[i, 0]
            c1 = vhat[i, 1]
            c2 = vhat[i, 2]
        else:
            c0 = v[i, 0]
            c1 = v[i, 1]
            c2 = v[i, 2]
        vel[i, 0] = c0
        vel[i, 1] = c1
        vel[i, 2] = c2
        r = xi0 * g0 + xi1 * g1 + xi2 * g2
        p0 = g0 - r * xi0
        p1 = g1 - r * xi1
        p2 = g2 - r * xi2
        v2 = c0 * c0 + c1 * c1 + c2 * c2
        terms[0, i] = g0 * c0 + g1 * c1 + g2 * c2  # <∇ψ, v>
        terms[1, i] = bh * (p0 * p0 + p1 * p1 + p2 * p2)  # b̂ |P∇ψ|²
        terms[2, i] = v2 / bh  # |v|² / b̂
        terms[3, i] = v2 * hm  # |v|² HM(Z)
        for h in range(H):
            PH[h, i] = G[h, i, 0] * c0 + G[h, i, 1] * c1 + G[h, i, 2] * c2  # <∇ψ_h, v>


@njit(parallel=True, cache=True)
def particle_terms(xT, A, V, w, wbar, m, beta, kind, soft, sym, pair_once, surrogate,
                   Z, Y, Yp, P, G, vel, v, vhat, terms, PH):
    """Velocity, slopes and energies of a particle state in one compiled call (``d = 3``).

    Sums: every pair once per symmetric head (``pair_once``, parallel over heads),
    or row by row (parallel over targets; a second loop with ``Aᵀ`` for
    non-symmetric heads). Then per token: head outputs, transformer and
    surrogate velocities, the integrands ``<∇ψ, v>``, ``b̂|P∇ψ|²``, ``|v|²/b̂``,
    ``|v|² HM(Z)`` (``terms``) and ``<∇ψ_h, v>`` (``PH``).
    ``kind``: kernel code (CODE_EXP, CODE_RELU); ``soft``: normalised kind (else USA /
    ReLU); ``surrogate``: the slope terms are those of ``vhat`` instead of ``v``.
    Conventions of :mod:`wflow.energy`.
    """
    H = A.shape[0]
    N = m.shape[0]
    nblk = (N + ROWS - 1) // ROWS
    if pair_once:
        for h in prange(H):
            eb = np.empty(CHUNK)
            _head_sums_pair_once(h, xT, A, m, beta, kind, Z, Y, P, eb)
    else:
        for t in prange(nblk):
            i0 = t * ROWS
            _rows_sums(i0, min(N, i0 + ROWS), xT, A, m, beta, kind, sym, Z, Y, Yp, P)
    for t in prange(nblk):
        i0 = t * ROWS
        _post_rows(i0, min(N, i0 + ROWS), xT, A, V, w, wbar, soft, sym, surrogate, Z, Y, Yp,
                   G, vel, v, vhat, terms, PH)


@njit(cache=True)
def euler_path(xT, A, V, w, wbar, m, beta, kind, soft, sym, pair_once, surrogate, dt,
               save_every, out, saved):
    """Explicit Euler with renormalisation for static heads, the whole loop compiled.

    Per step ``k = 0..S`` (``S = out.shape[1] - 1``): :func:`particle_terms` at ``x_k``,
    ``out[:, k] = (E, power, slope2, speed2, G2)`` (sums against ``m``), tokens saved
    every ``save_every`` steps into ``saved`` (``save_every = 0``: none), then
    ``x ← (x + dt vel)/|x + dt vel|``. ``xT`` (3, n) is updated in place (the final
    state). Returns the number of steps recorded (``< S + 1`` if a value was not finite).
    """
    H = A.shape[0]
    N = m.shape[0]
    S = out.shape[1] - 1
    Z = np.empty((H, N))
    Y = np.empty((H, 3, N))
    Yp = Y if sym else np.empty((H, 3, N))
    P = np.empty((H, N))
    G = np.empty((H, N, 3))
    vel = np.empty((N, 3))
    v = np.empty((N, 3))
    vhat = np.empty((N, 3))
    terms = np.empty((4, N))
    PH = np.empty((H, N))
    for k in range(S + 1):
        particle_terms(xT, A, V, w, wbar, m, beta, kind, soft, sym, pair_once, surrogate,
                       Z, Y, Yp, P, G, vel, v, vhat, terms, PH)
        E = 0.0
        for h in range(H):
            e = 0.0
            for i in range(N):
                e += P[h, i] * m[i]
            E += w[h] * e
        out[0, k] = E / (2.0 * beta)
        for r in range(4):
            s = 0.0
            for i in range(N):
                s += terms[r, i] * m[i]
            out[r + 1, k] = s
        ok = True
        for r in range(5):
            if not np.isfinite(out[r, k]):
                ok = False
        if save_every > 0 and k % save_every == 0:
            saved[k // save_every] = xT
        if not ok:
            return k
        if k == S:
            break
        for i in range(N):
            a0 = xT[0, i] + dt * vel[i, 0]
            a1 = xT[1, i] + dt * vel[i, 1]
            a2 = xT[2, i] + dt * vel[i, 2]
            r_ = np.sqrt(a0 * a0 + a1 * a1 + a2 * a2)
            xT[0, i] = a0 / r_
            xT[1, i] = a1 / r_
            xT[2, i] = a2 / r_
    return S + 1
