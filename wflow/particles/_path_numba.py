"""Compiled (numba) time loop of :mod:`wflow.particles.compiled`. Private module.

One function, :func:`path_block`, advances one weight-noise path over a block of steps
``k0 → k1`` exactly as :func:`wflow.particles.iterate` + :func:`wflow.particles.simulate`
do: weights (closed form, explicit Euler, RK4 half steps or Euler–Maruyama with the
caller's pre-drawn normals), tokens (explicit Euler or RK4 with normalised stages), the
state of every step from one evaluation (:func:`state_par` / :func:`state_ser`),
``∂_tE`` through the weights, the Itô term, the martingale increment, the running energy
balance of :class:`wflow.diagnostics.BalanceAccumulator` (same formulas, same order) and
the recorded diagnostics. It releases the GIL: the caller runs Monte-Carlo paths from a
pool of threads (each path serial), or one path with parallel evaluations.

Element-wise updates of weights and tokens are compiled without fast-math so that they
round exactly as the NumPy expressions of :mod:`wflow.attention.schedules` and
:mod:`wflow.particles.solver` they mirror; only the attention sums are reassociated.

Compile time (first use; cached on disk afterwards, see README "Performance"): numba
optimises each compiled function together with everything it calls, so every call level
re-optimises the kernels below it. The thin levels are inlined (``inline="always"``),
calls never pass literal constants (each literal would compile the callee once more),
and Monte-Carlo paths run in threads instead of a parallel loop over paths.
The attention sums of each token's row are the kernels' own: the row functions of
:mod:`wflow.kernels.primitives` (:func:`~wflow.kernels.primitives.row3`,
:func:`~wflow.kernels.primitives.row3_ito`, :func:`~wflow.kernels.primitives.row5`,
:func:`~wflow.kernels.primitives.scores_chunk`, :func:`~wflow.kernels.primitives.weigh_chunk`,
from :mod:`wflow.kernels._rows`, which the direct and causal sums call too;
``tests/test_kernel_rows.py`` pins a state's sums to :func:`wflow.kernels.kernel_sums`).
Everything else the loop compiles lives in this file: numba's cache checks only the file of
each function, so a kernel edited in another file leaves a stale cached loop behind (clear
``__pycache__`` after editing ``_rows.py``; the kernel codes of :mod:`wflow.attention.kinds`
are frozen for the same reason).
:func:`state_par` is not cached on its own: a loop compiled against a parallel function
loaded from numba's cache was cached broken (it crashed the next process; reproduced with
numba 0.68, tested in ``tests/test_compiled.py``), so the parallel evaluation is always
compiled together with the loop, and cached inside it.
"""

from __future__ import annotations

import math

import numpy as np
from numba import njit, prange

from ..attention.kinds import CODE_EXP
from ..kernels import EXP_OVERFLOW
from ..kernels.primitives import CHUNK, FASTMATH, row3, row3_ito, row5, scores_chunk, weigh_chunk

__all__ = ["path_block", "published_frames_into"]

# integer parameters (ipar)
(I_N, I_DIM, I_H, I_KIND, I_SOFT, I_SURR, I_RK4, I_WKIND, I_PKIND, I_VFIX, I_STOCH,
 I_SYMN, I_TOK) = range(13)
N_IPAR = 13
# token schemes (ipar[I_TOK]; I_RK4 = 1: the weights by RK4 half steps)
TOK_EULER, TOK_RK4, TOK_STRANG, TOK_STRANG_HEUN = range(4)
# float parameters (fpar)
F_BETA, F_SIGN, F_VSIGN, F_KAPPA, F_OMEGA, F_ITOF, F_2D = range(7)
N_FPAR = 7
# weight schedules
W_STATIC, W_OU, W_OSC, W_RELAX_PUB, W_RELAX_TAB, W_LAYERS = range(6)
# per-step integrands (the ``steps`` of simulate), in this order
T_E, T_DEDT, T_POWER, T_SLOPE2, T_SPEED2, T_G2, T_ITO = range(7)
N_TERMS = 7
# recorded scalars
RECORDED = ("E", "dEdt_w", "power", "slope2", "speed2", "G2", "ito", "bhat_mean", "bhat_min",
            "bhat_max", "mean_inner", "balance_chain", "balance_edi", "balance_g2")
# accumulator: E0, E, work, power, dissipation, G2, Itô, martingale
A_E0, A_E, A_W, A_P, A_D, A_G, A_I, A_M = range(8)
N_ACC = 8
# failure codes (STAT[p, 0]); STAT[p, 1] = state index, STAT[p, 2] = value (bound or t)
FAIL_NONE, FAIL_NONFINITE, FAIL_BOUND, FAIL_ZERO = range(4)


# ------------------------------------------------ particle states for compiled paths
# One evaluation of a particle state (targets = sources) for the compiled time loops of
# wflow.particles.compiled, any d, in ONE parallel loop over blocks of PROWS targets. Each
# target row is summed over every source for every head (full rows: at n = 200 they cost
# the same as counting every pair once, 0.6 ns per evaluation against 1.3 ns per pair, and
# need no second pass), and as soon as a head's sums are known the row's head output,
# ∇ψ_h, mobility terms, the block's partials of E_h, ∂E_h/∂A_h and the Itô sum, and the
# overflow-guard norms are accumulated; at the end of the row its velocity and slope
# integrands. Rows are independent and the blocks are a function of n alone, so every bit
# of the result is independent of threads and load; the caller reduces the partials in
# block order. Layouts: xT (D, npad) component-major (D = 3 for d ≤ 3, zero-padded;
# D = d above), nx (npad,) = |x_i|², m (n,) masses, A, V (H, D, D), Q, K (H, k, D) (for the
# guard), vel (D, npad). Itô sum: Σ_ij m_i m_j Φ''(s_ij) (|x_i|²|x_j|² + gsq <x_i, x_j>²)
# (gsq = 1: symmetric noise, 0: plain; Φ'' = e^s, or 1_{s>0} for ReLU).

#: Targets per task of a particle-state evaluation.
PROWS = 16
#: Columns of the per-block partials PT: power, slope2, speed2, G2, Σ m b̂, min b̂, max b̂,
#: max |Q_h x_i|², max |K_h x_i|², Z ≤ 0 seen.
NPART = 10


#: Initial partials of a block (see :data:`NPART`): sums 0, min b̂ +∞, max b̂ −∞, maxima 0.
_START = (0.0, 0.0, 0.0, 0.0, 0.0, np.inf, -np.inf, 0.0, 0.0, 0.0)


@njit(cache=True, inline="always")
def _open_block(b, N, full, PE, PG, PI):
    """Rows ``[i0, i1)`` of block ``b`` (:data:`PROWS` targets of ``N``).

    ``full``: the block's partials of ``E_h``, ``∂E_h/∂A_h`` and the Itô sum
    (``PE[b]``, ``PG[b]``, ``PI[b]``) are zeroed first.
    """
    i0 = b * PROWS
    i1 = min(N, i0 + PROWS)
    if full:
        PE[b] = 0.0
        PG[b] = 0.0
        PI[b] = 0.0
    return i0, i1


@njit(cache=True, inline="always")
def _put(PT, b, vals):
    """The block's partials (see :data:`NPART`) into ``PT[b]``."""
    for r in range(NPART):
        PT[b, r] = vals[r]


@njit(fastmath=FASTMATH, cache=True, error_model="numpy")
def _state3(b, full, ito, gsq, xT, nx, A, V, Qm, Km, w, wbar, m, beta, kind, soft, sym,
            surrogate, vel, PE, PG, PI, PT):
    """Block ``b`` of a state evaluation, ``d ≤ 3`` (see the layout comment above).

    The flags select whole source loops (each branch-free, so LLVM vectorises it).
    """
    H = A.shape[0]
    N = m.shape[0]
    kq = Qm.shape[1]
    x0 = xT[0]
    x1 = xT[1]
    x2 = xT[2]
    i0, i1 = _open_block(b, N, full, PE, PG, PI)
    pw, sl, sp, gg, bs, blo, bhi, qmax, kmax, zbad = _START
    for i in range(i0, i1):
        xi0 = x0[i]
        xi1 = x1[i]
        xi2 = x2[i]
        nxi = nx[i]
        mi = m[i]
        g0 = 0.0
        g1 = 0.0
        g2 = 0.0
        u0 = 0.0
        u1 = 0.0
        u2 = 0.0
        f0 = 0.0
        f1 = 0.0
        f2 = 0.0
        wz = 0.0
        wiz = 0.0
        for h in range(H):
            # s_ij = β xᵢᵀ A x_j = <β Aᵀ xᵢ, x_j>
            a0 = beta * (A[h, 0, 0] * xi0 + A[h, 1, 0] * xi1 + A[h, 2, 0] * xi2)
            a1 = beta * (A[h, 0, 1] * xi0 + A[h, 1, 1] * xi1 + A[h, 2, 1] * xi2)
            a2 = beta * (A[h, 0, 2] * xi0 + A[h, 1, 2] * xi1 + A[h, 2, 2] * xi2)
            if kind == CODE_EXP and ito:  # the Itô sum in the same pass
                z, y0, y1, y2, _, ph, tt = row3_ito(kind, a0, a1, a2, x0, x1, x2, m, N, xi0,
                                                    xi1, xi2, nxi, nx, gsq)
            else:
                z, y0, y1, y2, _, ph, _ = row3(kind, a0, a1, a2, x0, x1, x2, x0, x1, x2, m, N,
                                               False)
                tt = 0.0
                if ito:  # ReLU: Φ'' = 1_{s > 0}
                    for j in range(N):
                        sc = a0 * x0[j] + a1 * x1[j] + a2 * x2[j]
                        gij = xi0 * x0[j] + xi1 * x1[j] + xi2 * x2[j]
                        tt += (m[j] if sc > 0.0 else 0.0) * (nxi * nx[j] + gsq * gij * gij)
            # ∇ψ_h = A Y (symmetric) or ½ (A Y + Aᵀ Y'), Y' with the roles of Q and K swapped
            q0 = A[h, 0, 0] * y0 + A[h, 0, 1] * y1 + A[h, 0, 2] * y2
            q1 = A[h, 1, 0] * y0 + A[h, 1, 1] * y1 + A[h, 1, 2] * y2
            q2 = A[h, 2, 0] * y0 + A[h, 2, 1] * y1 + A[h, 2, 2] * y2
            if not sym:
                b0 = beta * (A[h, 0, 0] * xi0 + A[h, 0, 1] * xi1 + A[h, 0, 2] * xi2)
                b1 = beta * (A[h, 1, 0] * xi0 + A[h, 1, 1] * xi1 + A[h, 1, 2] * xi2)
                b2 = beta * (A[h, 2, 0] * xi0 + A[h, 2, 1] * xi1 + A[h, 2, 2] * xi2)
                _, t0, t1, t2, _, _, _ = row3(kind, b0, b1, b2, x0, x1, x2, x0, x1, x2, m, N,
                                              False)
                q0 = 0.5 * (q0 + A[h, 0, 0] * t0 + A[h, 1, 0] * t1 + A[h, 2, 0] * t2)
                q1 = 0.5 * (q1 + A[h, 0, 1] * t0 + A[h, 1, 1] * t1 + A[h, 2, 1] * t2)
                q2 = 0.5 * (q2 + A[h, 0, 2] * t0 + A[h, 1, 2] * t1 + A[h, 2, 2] * t2)
            wh = w[h]
            g0 += wh * q0
            g1 += wh * q1
            g2 += wh * q2
            vy0 = V[h, 0, 0] * y0 + V[h, 0, 1] * y1 + V[h, 0, 2] * y2
            vy1 = V[h, 1, 0] * y0 + V[h, 1, 1] * y1 + V[h, 1, 2] * y2
            vy2 = V[h, 2, 0] * y0 + V[h, 2, 1] * y1 + V[h, 2, 2] * y2
            u0 += wh * vy0
            u1 += wh * vy1
            u2 += wh * vy2
            if soft:
                c = wh / z
                f0 += c * vy0
                f1 += c * vy1
                f2 += c * vy2
                wz += wbar[h] * z
                wiz += wbar[h] / z
                if not z > 0.0:
                    zbad = 1.0
            else:
                f0 += wh * vy0
                f1 += wh * vy1
                f2 += wh * vy2
            if full:  # the block's partials of E_h, ∂E_h/∂A_h = ½ Σ m_i x_i Y_iᵀ, Itô
                PE[b, h] += mi * ph
                PI[b, h] += mi * tt
                hx0 = 0.5 * mi * xi0
                hx1 = 0.5 * mi * xi1
                hx2 = 0.5 * mi * xi2
                PG[b, h, 0, 0] += hx0 * y0
                PG[b, h, 0, 1] += hx0 * y1
                PG[b, h, 0, 2] += hx0 * y2
                PG[b, h, 1, 0] += hx1 * y0
                PG[b, h, 1, 1] += hx1 * y1
                PG[b, h, 1, 2] += hx1 * y2
                PG[b, h, 2, 0] += hx2 * y0
                PG[b, h, 2, 1] += hx2 * y1
                PG[b, h, 2, 2] += hx2 * y2
            # the overflow guard's norms |Q_h x_i|², |K_h x_i|² (no rows in Qm: Q = I, K = A)
            if kq == 0:
                t0 = A[h, 0, 0] * xi0 + A[h, 0, 1] * xi1 + A[h, 0, 2] * xi2
                t1 = A[h, 1, 0] * xi0 + A[h, 1, 1] * xi1 + A[h, 1, 2] * xi2
                t2 = A[h, 2, 0] * xi0 + A[h, 2, 1] * xi1 + A[h, 2, 2] * xi2
                nq = nxi
                nk = t0 * t0 + t1 * t1 + t2 * t2
            else:
                nq = 0.0
                nk = 0.0
                for r in range(kq):
                    tq = Qm[h, r, 0] * xi0 + Qm[h, r, 1] * xi1 + Qm[h, r, 2] * xi2
                    tk = Km[h, r, 0] * xi0 + Km[h, r, 1] * xi1 + Km[h, r, 2] * xi2
                    nq += tq * tq
                    nk += tk * tk
            qmax = max(qmax, nq)
            kmax = max(kmax, nk)
        if soft:
            bh = 1.0 / wz
            hmz = 1.0 / wiz
        else:
            bh = 1.0
            hmz = 1.0
        if surrogate:
            r = xi0 * u0 + xi1 * u1 + xi2 * u2
            c0 = bh * (u0 - r * xi0)
            c1 = bh * (u1 - r * xi1)
            c2 = bh * (u2 - r * xi2)
        else:
            r = xi0 * f0 + xi1 * f1 + xi2 * f2
            c0 = f0 - r * xi0
            c1 = f1 - r * xi1
            c2 = f2 - r * xi2
        vel[0, i] = c0
        vel[1, i] = c1
        vel[2, i] = c2
        if full:
            r = xi0 * g0 + xi1 * g1 + xi2 * g2
            p0 = g0 - r * xi0
            p1 = g1 - r * xi1
            p2 = g2 - r * xi2
            v2 = c0 * c0 + c1 * c1 + c2 * c2
            pw += mi * (g0 * c0 + g1 * c1 + g2 * c2)  # <∇ψ, v>
            sl += mi * (bh * (p0 * p0 + p1 * p1 + p2 * p2))  # b̂ |P∇ψ|²
            sp += mi * (v2 / bh)  # |v|² / b̂
            gg += mi * (v2 * hmz)  # |v|² HM(Z)
            bs += mi * bh
            blo = min(blo, bh)
            bhi = max(bhi, bh)
    _put(PT, b, (pw, sl, sp, gg, bs, blo, bhi, qmax, kmax, zbad))


@njit(fastmath=FASTMATH, cache=True, error_model="numpy")
def _stateg(b, full, ito, gsq, xT, nx, A, V, Qm, Km, w, wbar, m, beta, kind, soft, sym,
            surrogate, vel, PE, PG, PI, PT, buf):
    """As :func:`_state3` for any ``D``.

    Scores of a source chunk are built in ``buf[0]`` (inner products in ``buf[1]``), small
    vectors in ``buf[2:]``.
    """
    H = A.shape[0]
    N = m.shape[0]
    D = xT.shape[0]
    kq = Qm.shape[1]
    sc = buf[0]
    gg_ = buf[1]
    a = buf[2, :D]
    xi = buf[3, :D]
    y = buf[4, :D]
    yp = buf[5, :D]
    g = buf[6, :D]
    u = buf[7, :D]
    f = buf[8, :D]
    q = buf[9, :D]
    i0, i1 = _open_block(b, N, full, PE, PG, PI)
    pw, sl, sp, gsum, bs, blo, bhi, qmax, kmax, zbad = _START
    for i in range(i0, i1):
        for c in range(D):
            xi[c] = xT[c, i]
            g[c] = 0.0
            u[c] = 0.0
            f[c] = 0.0
        nxi = nx[i]
        mi = m[i]
        wz = 0.0
        wiz = 0.0
        for h in range(H):
            z = 0.0
            ph = 0.0
            tt = 0.0
            for rep in range(1 if sym else 2):
                # rep 0: s_ij = <β Aᵀ xᵢ, x_j> → Y; rep 1: <β A xᵢ, x_j> → Y'
                for c in range(D):
                    t = 0.0
                    for r in range(D):
                        t += (A[h, r, c] if rep == 0 else A[h, c, r]) * xi[r]
                    a[c] = beta * t
                    if rep == 0:
                        y[c] = 0.0
                    else:
                        yp[c] = 0.0
                want_ito = ito and rep == 0
                if D == 5 and (kind == CODE_EXP or not want_ito):  # fused in registers
                    r5 = row5(a, xi, xT, nx, nxi, m, kind, want_ito, gsq)
                    if rep == 0:
                        z = r5[0]
                        ph = r5[6]
                        tt = r5[7]
                        for c in range(5):
                            y[c] = r5[1 + c]
                    else:
                        for c in range(5):
                            yp[c] = r5[1 + c]
                    continue
                for j0 in range(0, N, CHUNK):
                    n = min(N, j0 + CHUNK) - j0
                    mm = m[j0:j0 + n]
                    scores_chunk(a, xT, j0, n, sc)
                    if want_ito:
                        scores_chunk(xi, xT, j0, n, gg_)
                    zc, _, pc = weigh_chunk(sc, mm, xT, j0, n, kind, y if rep == 0 else yp, False)
                    if want_ito and kind == CODE_EXP:
                        for j in range(n):
                            gij = gg_[j]
                            tt += sc[j] * (nxi * nx[j0 + j] + gsq * gij * gij)
                    elif want_ito:
                        for j in range(n):
                            gij = gg_[j]
                            tt += (mm[j] if sc[j] > 0.0 else 0.0) * (nxi * nx[j0 + j]
                                                                       + gsq * gij * gij)
                    if rep == 0:
                        z += zc
                        ph += pc
            if kind == CODE_EXP:
                ph = z
            for r in range(D):
                t = 0.0
                for c in range(D):
                    t += A[h, r, c] * y[c]
                q[r] = t
            if not sym:
                for r in range(D):
                    t = 0.0
                    for c in range(D):
                        t += A[h, c, r] * yp[c]
                    q[r] = 0.5 * (q[r] + t)
            wh = w[h]
            c_ = wh / z if soft else wh
            for r in range(D):
                t = 0.0
                for c in range(D):
                    t += V[h, r, c] * y[c]
                g[r] += wh * q[r]
                u[r] += wh * t
                f[r] += c_ * t
            if soft:
                wz += wbar[h] * z
                wiz += wbar[h] / z
                if not z > 0.0:
                    zbad = 1.0
            if full:
                PE[b, h] += mi * ph
                PI[b, h] += mi * tt
                for r in range(D):
                    hx = 0.5 * mi * xi[r]
                    for c in range(D):
                        PG[b, h, r, c] += hx * y[c]
            # the guard's norms; no rows in Qm: Q = I, K = A, and a = β A xᵢ after the last rep
            nq = nxi if kq == 0 else 0.0
            nk = 0.0
            if kq == 0:
                for c in range(D):
                    nk += a[c] * a[c]
                nk /= beta * beta
            for r in range(kq):
                tq = 0.0
                tk = 0.0
                for c in range(D):
                    tq += Qm[h, r, c] * xi[c]
                    tk += Km[h, r, c] * xi[c]
                nq += tq * tq
                nk += tk * tk
            qmax = max(qmax, nq)
            kmax = max(kmax, nk)
        bh = 1.0 / wz if soft else 1.0
        hmz = 1.0 / wiz if soft else 1.0
        rf = 0.0
        ru = 0.0
        rg = 0.0
        for c in range(D):
            rf += xi[c] * f[c]
            ru += xi[c] * u[c]
            rg += xi[c] * g[c]
        v2 = 0.0
        p2 = 0.0
        pwi = 0.0
        for c in range(D):
            vc = bh * (u[c] - ru * xi[c]) if surrogate else f[c] - rf * xi[c]
            vel[c, i] = vc
            v2 += vc * vc
            pwi += g[c] * vc
            pc = g[c] - rg * xi[c]
            p2 += pc * pc
        if full:
            pw += mi * pwi
            sl += mi * (bh * p2)
            sp += mi * (v2 / bh)
            gsum += mi * (v2 * hmz)
            bs += mi * bh
            blo = min(blo, bh)
            bhi = max(bhi, bh)
    _put(PT, b, (pw, sl, sp, gsum, bs, blo, bhi, qmax, kmax, zbad))


@njit(cache=True, error_model="numpy", inline="always")
def _block(b, full, ito, gsq, xT, nx, A, V, Qm, Km, w, wbar, m, beta, kind, soft, sym,
           surrogate, vel, PE, PG, PI, PT, BUF):
    if xT.shape[0] == 3:
        _state3(b, full, ito, gsq, xT, nx, A, V, Qm, Km, w, wbar, m, beta, kind, soft, sym,
                surrogate, vel, PE, PG, PI, PT)
    else:
        _stateg(b, full, ito, gsq, xT, nx, A, V, Qm, Km, w, wbar, m, beta, kind, soft, sym,
                surrogate, vel, PE, PG, PI, PT, BUF[b])


@njit(parallel=True, error_model="numpy")  # not cached on its own: see the module docstring
def state_par(nblk, full, ito, gsq, xT, nx, A, V, Qm, Km, w, wbar, m, beta, kind, soft, sym,
              surrogate, vel, PE, PG, PI, PT, BUF):
    """A particle-state evaluation, blocks of rows in parallel (one region)."""
    for t in prange(nblk):
        # the prange index is unsigned: as int64, the kernels keep one signature
        _block(np.int64(t), full, ito, gsq, xT, nx, A, V, Qm, Km, w, wbar, m, beta, kind, soft,
               sym, surrogate, vel, PE, PG, PI, PT, BUF)


@njit(cache=True, error_model="numpy")
def state_ser(nblk, full, ito, gsq, xT, nx, A, V, Qm, Km, w, wbar, m, beta, kind, soft, sym,
              surrogate, vel, PE, PG, PI, PT, BUF):
    """A particle-state evaluation on the calling thread (the same dynamics, bit for bit).

    The recorded Itô sum of noisy weights has been seen one ulp apart from the parallel
    evaluation's (tests/test_compiled.py).
    """
    for b in range(nblk):
        _block(b, full, ito, gsq, xT, nx, A, V, Qm, Km, w, wbar, m, beta, kind, soft, sym,
               surrogate, vel, PE, PG, PI, PT, BUF)


# --------------------------------------------------------------------------- weights
@njit(cache=True, error_model="numpy")
def published_frames_into(t, H, d, F):
    """``F[h, :d, :d] = F_h(t)``: :func:`wflow.attention.published.published_frames` in the loop."""
    for h in range(H):
        s = t + 2.0 * math.pi * h / max(H, 1)
        if d == 2:
            c = math.cos(s)
            F[h, 0, 0] = 2.0 + 1.5 * c
            F[h, 1, 1] = 2.0 - 1.5 * c
            F[h, 0, 1] = F[h, 1, 0] = math.sin(2.0 * s)
        elif d == 3:
            F[h, 0, 0] = 2.0 + 1.5 * math.cos(s)
            F[h, 1, 1] = 2.0 + 1.5 * math.sin(s)
            F[h, 2, 2] = 2.0 + 1.5 * math.cos(s + math.pi / 4.0)
            F[h, 0, 1] = F[h, 1, 0] = math.sin(2.0 * s)
            F[h, 0, 2] = F[h, 2, 0] = math.sin(s)
            F[h, 1, 2] = F[h, 2, 1] = math.cos(2.0 * s)
        else:
            K = d * (d - 1) // 2
            for i in range(d):
                F[h, i, i] = 2.0 + 1.5 * math.cos(s + 2.0 * math.pi * i / d)
            k = 0
            for i in range(d):
                for j in range(i + 1, d):
                    F[h, i, j] = F[h, j, i] = math.sin(2.0 * s + 2.0 * math.pi * k / K)
                    k += 1


@njit(cache=True, error_model="numpy")
def _target(wkind, t, kk, stage, tab, F):
    """The relaxation target at time ``t``: computed (published) or from the table."""
    if wkind == W_RELAX_PUB:
        published_frames_into(t, F.shape[0], F.shape[2], F)
    else:
        F[:] = tab[kk, stage]


@njit(cache=True, error_model="numpy")
def _drift(wkind, th, t, kk, kappa, omega, wa, wb, wc, tab, F, out):
    """Deterministic ``dθ/dt`` at ``(θ, t)`` (``Schedule.drift``); ``kk``: table row of ``t``."""
    H, R, d = th.shape
    if wkind == W_RELAX_PUB or wkind == W_RELAX_TAB:
        _target(wkind, t, kk, kk - kk, tab, F)
    cs = 0.0
    for h in range(H):
        if wkind == W_OSC:
            cs = math.cos(omega * t + wc[h])
        for r in range(R):
            for c in range(d):
                if wkind == W_OU:
                    out[h, r, c] = (-kappa) * (th[h, r, c] - wa[h, r, c])
                elif wkind == W_OSC:
                    out[h, r, c] = (wb[h, r, c] * omega) * cs
                elif wkind == W_RELAX_PUB or wkind == W_RELAX_TAB:
                    out[h, r, c] = kappa * (F[h, r, c] - th[h, r, c])
                else:
                    out[h, r, c] = 0.0


@njit(cache=True, error_model="numpy")
def _closed_form(wkind, t, kappa, omega, wa, wb, wc, out):
    """``θ(t)`` of the closed-form schedules (deterministic OU, oscillating)."""
    H, R, d = out.shape
    ex = math.exp(-kappa * t) if wkind == W_OU else 0.0
    sn = 0.0
    for h in range(H):
        if wkind == W_OSC:
            sn = math.sin(omega * t + wc[h])
        for r in range(R):
            for c in range(d):
                if wkind == W_OU:  # θ_∞ + (θ_0 − θ_∞) e^{−κt}
                    out[h, r, c] = wa[h, r, c] + (wb[h, r, c] - wa[h, r, c]) * ex
                else:  # θ_∞ + a sin(ωt + φ_h)
                    out[h, r, c] = wa[h, r, c] + wb[h, r, c] * sn


@njit(cache=True, error_model="numpy")
def _rk4_relax(y, kappa, Fa, Fb, Fc, hh):
    """One RK4 step of ``dθ/dt = κ(F(t) − θ)`` for one element (``schedules._rk4``)."""
    k1 = kappa * (Fa - y)
    k2 = kappa * (Fb - (y + 0.5 * hh * k1))
    k3 = kappa * (Fb - (y + 0.5 * hh * k2))
    k4 = kappa * (Fc - (y + hh * k3))
    return y + (hh / 6.0) * (k1 + 2 * k2 + 2 * k3 + k4)


@njit(cache=True, error_model="numpy")
def _advance(wkind, stoch, rk4w, symn, th, t, h, kk, sigk, xi, kappa, omega, wa, wb, wc, tab,
             F, F5, dr, thm, thn):
    """``(θ(t + h/2), θ(t + h))`` into ``thm, thn`` (``Schedule.advance``).

    ``dr``: the drift at ``(θ, t)``.

    ``xi``: this step's standard normals (noisy schedules with ``sigk ≠ 0``).
    """
    H, R, d = th.shape
    if wkind == W_STATIC or wkind == W_LAYERS:
        thm[:] = th
        thn[:] = th
        return
    if (wkind == W_OU and not stoch) or wkind == W_OSC:
        _closed_form(wkind, t + 0.5 * h, kappa, omega, wa, wb, wc, thm)
        _closed_form(wkind, t + h, kappa, omega, wa, wb, wc, thn)
        return
    if stoch or not rk4w:  # explicit Euler / Euler–Maruyama, midpoint = mean of the ends
        c = sigk * math.sqrt(h)
        for a in range(H):
            for r in range(R):
                for s in range(d):
                    v = th[a, r, s] + h * dr[a, r, s]
                    if stoch and sigk != 0.0:
                        z = 0.5 * (xi[a, r, s] + xi[a, s, r]) if symn else xi[a, r, s]
                        v = v + c * z
                    thn[a, r, s] = v
                    thm[a, r, s] = 0.5 * (th[a, r, s] + v)
        return
    # relaxed drift, RK4 in two half steps (the midpoint at 4th order)
    hh = 0.5 * h
    t1 = t + 0.5 * h
    times = (t, t + 0.5 * hh, t + hh, t1 + 0.5 * hh, t1 + hh)
    for st in range(5):
        _target(wkind, times[st], kk, st, tab, F5[st])
    for a in range(H):
        for r in range(R):
            for s in range(d):
                mid = _rk4_relax(th[a, r, s], kappa, F5[0, a, r, s], F5[1, a, r, s],
                                 F5[2, a, r, s], hh)
                thm[a, r, s] = mid
                thn[a, r, s] = _rk4_relax(mid, kappa, F5[2, a, r, s], F5[3, a, r, s],
                                          F5[4, a, r, s], hh)


@njit(cache=True, error_model="numpy")
def _heads_of(pkind, usevfix, vsign, th, Vfix, A, V, Qm, Km):
    """Heads of ``θ`` (``Parametrisation.heads``): ``A = QᵀK``, ``V``; ``Q, K`` into ``Qm, Km``.

    ``Qm, Km`` without rows: the guard needs no ``Q, K`` (bilinear parameters).
    """
    H, R, d = th.shape
    kq = (R - d) // 2  # qkv: θ stacks Q (k rows), K (k rows), V (d rows)
    guard = Qm.shape[1] > 0
    for h in range(H):
        if pkind == 0:  # bilinear: Q = I, K = A = θ (Qm, Km without rows), V = ±A or fixed
            for a in range(d):
                for b in range(d):
                    A[h, a, b] = th[h, a, b]
                    V[h, a, b] = Vfix[h, a, b] if usevfix else vsign * th[h, a, b]
        else:  # qkv: rows Q (k), K (k), V (d)
            for a in range(d):
                for b in range(d):
                    t = 0.0
                    for r in range(kq):
                        t += th[h, r, a] * th[h, kq + r, b]
                    A[h, a, b] = t
                    V[h, a, b] = th[h, 2 * kq + a, b]
            if guard:
                for r in range(kq):
                    for b in range(d):
                        Qm[h, r, b] = th[h, r, b]
                        Km[h, r, b] = th[h, kq + r, b]


@njit(cache=True, error_model="numpy")
def _work_rate(pkind, th, thdot, w, Gm):
    """``Σ_h w_h <∂E_h/∂A_h, Ȧ_h>`` with ``Ȧ`` from the parameter velocity ``θ̇``."""
    H, R, d = th.shape
    kq = (R - d) // 2
    tot = 0.0
    for h in range(H):
        acc = 0.0
        for a in range(d):
            for b in range(d):
                if pkind == 0:
                    ad = thdot[h, a, b]
                else:  # Q̇ᵀK + QᵀK̇
                    t1 = 0.0
                    t2 = 0.0
                    for r in range(kq):
                        t1 += thdot[h, r, a] * th[h, kq + r, b]
                        t2 += th[h, r, a] * thdot[h, kq + r, b]
                    ad = t1 + t2
                acc += Gm[h, a, b] * ad
        tot += w[h] * acc
    return tot


# --------------------------------------------------------------------------- one state
@njit(cache=True, error_model="numpy")
def _is_sym(A, d):
    H = A.shape[0]
    big = 1.0
    diff = 0.0
    for h in range(H):
        for a in range(d):
            for b in range(d):
                big = max(big, abs(A[h, a, b]))
                diff = max(diff, abs(A[h, a, b] - A[h, b, a]))
    return diff <= 1e-12 * big


@njit(cache=True, error_model="numpy")
def _workspace(H, D, n):
    nblk = (n + PROWS - 1) // PROWS
    return (np.zeros((nblk, 10, max(CHUNK, D))), np.zeros((nblk, H)),
            np.zeros((nblk, H, D, D)), np.zeros((nblk, H)), np.zeros((nblk, NPART)))


@njit(cache=True, error_model="numpy", inline="always")
def _evaluate(par, full, ito, gsq, d, xT, nx, A, V, Qm, Km, w, wbar, m, beta, kind, soft,
              surrogate, ws, vel, Eh, Gm, out):
    """One state: velocity ``vel`` and (``full``) the scalars, ``Eh`` and ``Gm = ∂E_h/∂A_h``.

    ``out = (E, power, slope2, speed2, G2, Σ_h w_h Itô_h, b̂ mean, min, max)``. Returns
    ``(bound, Z ≤ 0 seen)`` for the guards.
    """
    BUF, PE, PG, PI, PT = ws
    H = A.shape[0]
    D = xT.shape[0]
    N = m.shape[0]
    for i in range(N):
        t = 0.0
        for c in range(D):
            t += xT[c, i] * xT[c, i]
        nx[i] = t
    sym = _is_sym(A, d)
    nblk = (N + PROWS - 1) // PROWS
    if par:
        state_par(nblk, full, ito, gsq, xT, nx, A, V, Qm, Km, w, wbar, m, beta, kind, soft, sym,
                  surrogate, vel, PE, PG, PI, PT, BUF)
    else:
        state_ser(nblk, full, ito, gsq, xT, nx, A, V, Qm, Km, w, wbar, m, beta, kind, soft, sym,
                  surrogate, vel, PE, PG, PI, PT, BUF)
    qn = 0.0
    kn = 0.0
    zbad = False
    for b in range(nblk):
        qn = max(qn, PT[b, 7])
        kn = max(kn, PT[b, 8])
        zbad = zbad or PT[b, 9] > 0.0
    bound = beta * math.sqrt(qn) * math.sqrt(kn)
    if not full:
        return bound, zbad
    E = 0.0
    itos = 0.0
    for h in range(H):
        e = 0.0
        s = 0.0
        for b in range(nblk):
            e += PE[b, h]
            s += PI[b, h]
        Eh[h] = e / (2.0 * beta)
        E += w[h] * Eh[h]
        itos += w[h] * s
        for a in range(D):
            for c in range(D):
                g = 0.0
                for b in range(nblk):
                    g += PG[b, h, a, c]
                Gm[h, a, c] = g
    out[0] = E
    for r in range(4):
        s = 0.0
        for b in range(nblk):
            s += PT[b, r]
        out[1 + r] = s
    out[5] = itos
    s = 0.0
    lo = np.inf
    hi = -np.inf
    for b in range(nblk):
        s += PT[b, 4]
        lo = min(lo, PT[b, 5])
        hi = max(hi, PT[b, 6])
    out[6] = s
    out[7] = lo
    out[8] = hi
    return bound, zbad


@njit(cache=True, error_model="numpy")
def _normalize(y, n, out):
    """``out = y / |y|`` column-wise (``wflow.geometry.sphere.normalize``)."""
    D = y.shape[0]
    for i in range(n):
        t = 0.0
        for c in range(D):
            t += y[c, i] * y[c, i]
        r = math.sqrt(t)
        for c in range(D):
            out[c, i] = y[c, i] / r


@njit(cache=True, error_model="numpy")
def _stage_eval(par, base, f, src, n, ys, xs, gsq, d, nx, A, V, Qm, Km, w, wbar, m, beta,
                kind, soft, surrogate, ws, dst, Eh, Gm, out):
    """An integrator's stage: the velocity at ``(base + f src)/|…|`` into ``dst``.

    Returns :func:`_evaluate`'s ``(bound, zbad)`` (no energy terms: a stage, not a state).
    """
    no = n < 0  # a run-time False (a literal would compile _evaluate once more)
    for c in range(base.shape[0]):
        for i in range(n):
            ys[c, i] = base[c, i] + f * src[c, i]
    _normalize(ys, n, xs)
    return _evaluate(par, no, no, gsq, d, xs, nx, A, V, Qm, Km, w, wbar, m, beta, kind, soft,
                     surrogate, ws, dst, Eh, Gm, out)


@njit(cache=True, error_model="numpy")
def _heat(y, n, d, tn, r0, out):
    """``out`` = ``y`` moved by one exact heat-kernel increment (may be ``y`` itself).

    ``tn[r0 : r0 + d]``: the normals ``ξ``; ``tn[r0 + d]``, ``tn[r0 + d + 1]``: ``cos θ``,
    ``sin θ`` (:func:`wflow.particles.noise.heat_step`: ``cos θ y + sin θ P_y ξ/|P_y ξ|``,
    renormalised).
    """
    D = y.shape[0]
    for i in range(n):
        dot = 0.0
        for c in range(d):
            dot += tn[r0 + c, i] * y[c, i]
        nt = 0.0
        for c in range(d):
            tc = tn[r0 + c, i] - dot * y[c, i]
            nt += tc * tc
        ct = tn[r0 + d, i]
        st = tn[r0 + d + 1, i] / math.sqrt(nt)
        s2 = 0.0
        for c in range(d):
            v = ct * y[c, i] + st * (tn[r0 + c, i] - dot * y[c, i])
            out[c, i] = v
            s2 += v * v
        r = math.sqrt(s2)
        for c in range(d):
            out[c, i] = out[c, i] / r
        for c in range(d, D):
            out[c, i] = 0.0


@njit(cache=True, error_model="numpy")
def _mean_inner(xT, m):
    """``Σ_{i≠j} m_i m_j <x_i, x_j> / Σ_{i≠j} m_i m_j`` (``diagnostics.mean_inner_product``)."""
    D = xT.shape[0]
    N = m.shape[0]
    ss = 0.0
    diag = 0.0
    msum = 0.0
    m2 = 0.0
    for c in range(D):
        s = 0.0
        for i in range(N):
            s += m[i] * xT[c, i]
        ss += s * s
    for i in range(N):
        t = 0.0
        for c in range(D):
            t += xT[c, i] * xT[c, i]
        diag += m[i] * m[i] * t
        msum += m[i]
        m2 += m[i] * m[i]
    return (ss - diag) / (msum * msum - m2)


# --------------------------------------------------------------------------- the loop
@njit(cache=True, error_model="numpy", nogil=True)
def path_block(p, par, k0, k1, ipar, fpar, grid, recpos, snappos, sig, jump, w, wbar, m,
               A0, V0, Q0, K0, Vfix, wa, wb, wc, tab, thetas, noise, tnoise,
               X, TH, VEL, GM, CUR, ACC, STAT, STEPS, REC, REH, SX, STH):
    """Advance path ``p`` over the steps ``k0 → k1`` (state ``k0`` evaluated unless ``k0 = 0``).

    ``par``: parallel evaluations (one path); ``noise[p]``: this block's normals, one
    ``(H, rows, d)`` draw per step with ``sig[k] ≠ 0`` in step order; ``tnoise[p, k − k0]``:
    the token noise of step ``k`` when ``fpar[F_2D] = 2D > 0`` (token diffusion): for
    projected Euler–Maruyama (``x + h v + √(2Dh) P_x ξ``, normalised, as
    :class:`wflow.particles.integrators.EulerMaruyama`) the normals ``ξ`` (rows ``0..d``),
    for the Strang splittings two heat-kernel increments (rows ``ξ, cos θ, sin θ`` of
    draw 0, then of draw 1: :func:`_heat`); ``ipar[I_TOK]``: the token scheme
    (``TOK_*``), ``ipar[I_RK4]``: the weights by RK4 half steps; ``tab``: relaxation
    targets of this block's steps (row ``k − k0``; 5 stages). Writes ``STEPS[p, :, k]``,
    records ``REC/REH[p, recpos[k]]``, snapshots ``SX/STH[p, snappos[k]]``; on failure sets
    ``STAT[p]`` and stops.
    """
    n = ipar[I_N]
    d = ipar[I_DIM]
    H = ipar[I_H]
    kind = ipar[I_KIND]
    soft = ipar[I_SOFT] != 0
    surrogate = ipar[I_SURR] != 0
    rk4 = ipar[I_RK4] != 0
    tok = ipar[I_TOK]
    wkind = ipar[I_WKIND]
    pkind = ipar[I_PKIND]
    usevfix = ipar[I_VFIX] != 0
    stoch = ipar[I_STOCH] != 0
    symn = ipar[I_SYMN] != 0
    beta = fpar[F_BETA]
    sign = fpar[F_SIGN]
    vsign = fpar[F_VSIGN]
    kappa = fpar[F_KAPPA]
    omega = fpar[F_OMEGA]
    itof = fpar[F_ITOF]
    two_d = fpar[F_2D]
    static = wkind == W_STATIC
    gsq = 1.0 if symn else 0.0
    # flags and indices as run-time values: a literal constant in a call would compile the
    # callee once more for that literal (numba dispatches on literal argument types)
    zero = k0 - k0
    yes = k1 >= k0
    no = k1 < k0
    D = X.shape[1]
    npad = X.shape[2]
    ws = _workspace(H, D, n)
    A = A0.copy()
    V = V0.copy()
    Qm = Q0.copy()
    Km = K0.copy()
    x = X[p]
    th = TH[p]
    vel = VEL[p]
    acc = ACC[p]
    cur = CUR[p]
    thm = np.empty_like(th)
    thn = np.empty_like(th)
    dr = np.empty_like(th)
    dn = np.empty_like(th)
    F = np.zeros(th.shape)
    F5 = np.zeros((5,) + th.shape)
    nx = np.zeros(npad)
    xn = np.zeros((D, npad))
    ys = np.zeros((D, npad))
    xs = np.zeros((D, npad))
    k2 = np.zeros((D, npad))
    k3 = np.zeros((D, npad))
    k4 = np.zeros((D, npad))
    yb = np.zeros((D, npad))
    k1b = np.zeros((D, npad)) if tok == TOK_STRANG else k4
    Eh = np.zeros(H)
    Gm = GM[p]
    out = np.zeros(9)
    right = np.zeros(N_TERMS)
    pre = np.zeros(N_TERMS)
    if k0 == 0:
        if not static:
            _heads_of(pkind, usevfix, vsign, th, Vfix, A, V, Qm, Km)
        bound, zbad = _evaluate(par, yes, stoch, gsq, d, x, nx, A, V, Qm, Km, w, wbar, m, beta,
                                kind, soft, surrogate, ws, vel, Eh, Gm, out)
        if _fail_state(STAT, p, zero, bound, zbad, soft):
            return
        _terms(out, static, stoch, wkind, pkind, th, grid[0], zero, kappa, omega, wa, wb, wc, tab,
               F, dr, w, Gm, sig[0], itof, beta, cur)
        if not (np.isfinite(cur[T_E]) and _finite(x, n)):
            STAT[p, 0] = FAIL_NONFINITE
            STAT[p, 1] = 0
            STAT[p, 2] = grid[0]
            return
        STEPS[p, :, 0] = cur
        acc[:] = 0.0
        acc[A_E0] = cur[T_E]
        acc[A_E] = cur[T_E]
        _record(p, zero, recpos, snappos, cur, out, Eh, x, th, m, acc, sign, n, d, REC, REH, SX,
                STH)
    inoise = 0
    for k in range(k0, k1):
        kk = k - k0
        t = grid[k]
        h = grid[k + 1] - t
        # weights over [t_k, t_k+1]: drift at (θ_k, t_k), then the schedule's step
        _drift(wkind, th, t, kk, kappa, omega, wa, wb, wc, tab, F, dr)
        xi = noise[p, min(inoise, noise.shape[1] - 1)]
        if stoch and sig[k] != 0.0:
            inoise += 1
        _advance(wkind, stoch, rk4, symn, th, t, h, kk, sig[k], xi, kappa, omega, wa, wb, wc,
                 tab, F, F5, dr, thm, thn)
        mart = 0.0
        if stoch:  # <∂E/∂A(t_k), σ ΔW_k> with ΔW from θ_k+1 − θ_k − h·drift
            for a in range(H):
                for r in range(th.shape[1]):
                    for c in range(d):
                        dn[a, r, c] = (thn[a, r, c] - th[a, r, c]) - h * dr[a, r, c]
            mart = _work_rate(pkind, th, dn, w, Gm)
        # tokens
        if tok == TOK_EULER:
            for c in range(D):
                for i in range(n):
                    ys[c, i] = x[c, i] + h * vel[c, i]
            if two_d != 0.0:  # token diffusion: + √(2Dh) P_x ξ
                xi_t = tnoise[p, kk]
                sh = np.sqrt(two_d * h)
                for i in range(n):
                    dot = 0.0
                    for c in range(d):
                        dot += xi_t[c, i] * x[c, i]
                    for c in range(d):
                        ys[c, i] += sh * (xi_t[c, i] - dot * x[c, i])
            _normalize(ys, n, xn)
        elif tok == TOK_STRANG_HEUN:  # Φ^Heun_{h/2} ∘ B_h ∘ Φ^Heun_{h/2}, stages normalised
            q = 0.5 * h
            if not static:
                _heads_of(pkind, usevfix, vsign, thm, Vfix, A, V, Qm, Km)
            for half in range(2):  # from (x, v(x)), then from (y, V(y) at θ_mid)
                base = x if half == 0 else yb
                ka = vel if half == 0 else k3
                if half == 1:  # k3 = V(y) (y normalised again, as the Python step does)
                    bound, zbad = _stage_eval(par, yb, 0.0, yb, n, ys, xs, gsq, d, nx, A, V,
                                              Qm, Km, w, wbar, m, beta, kind, soft,
                                              surrogate, ws, k3, Eh, Gm, out)
                    if _fail_state(STAT, p, k + 1, bound, zbad, soft):
                        return
                    if not static:
                        _heads_of(pkind, usevfix, vsign, thn, Vfix, A, V, Qm, Km)
                bound, zbad = _stage_eval(par, base, q, ka, n, ys, xs, gsq, d, nx, A, V, Qm,
                                          Km, w, wbar, m, beta, kind, soft, surrogate, ws, k2,
                                          Eh, Gm, out)
                if _fail_state(STAT, p, k + 1, bound, zbad, soft):
                    return
                for c in range(D):
                    for i in range(n):
                        ys[c, i] = base[c, i] + (0.5 * q) * (ka[c, i] + k2[c, i])
                _normalize(ys, n, yb if half == 0 else xn)
                if half == 0 and two_d != 0.0:  # B_h: two keyed heat increments over h/2
                    _heat(yb, n, d, tnoise[p, kk], zero, yb)
                    _heat(yb, n, d, tnoise[p, kk], d + 2, yb)
        else:  # RK4 from x with k1 = vel, or B_{h/2} ∘ RK4 ∘ B_{h/2} (strang)
            x0s = x
            k1s = vel
            if tok == TOK_STRANG and two_d != 0.0:  # D = 0: RK4's step, as the Python loop
                x0s = yb
                k1s = k1b
                _heat(x, n, d, tnoise[p, kk], zero, yb)
                if not static:
                    _heads_of(pkind, usevfix, vsign, th, Vfix, A, V, Qm, Km)
                bound, zbad = _evaluate(par, no, no, gsq, d, yb, nx, A, V, Qm, Km, w, wbar,
                                        m, beta, kind, soft, surrogate, ws, k1b, Eh, Gm, out)
                if _fail_state(STAT, p, k + 1, bound, zbad, soft):
                    return
            if not static:
                _heads_of(pkind, usevfix, vsign, thm, Vfix, A, V, Qm, Km)
            for st in range(3):
                src = k1s if st == 0 else (k2 if st == 1 else k3)
                dst = k2 if st == 0 else (k3 if st == 1 else k4)
                f = h if st == 2 else 0.5 * h
                if st == 2 and not static:
                    _heads_of(pkind, usevfix, vsign, thn, Vfix, A, V, Qm, Km)
                bound, zbad = _stage_eval(par, x0s, f, src, n, ys, xs, gsq, d, nx, A, V, Qm,
                                          Km, w, wbar, m, beta, kind, soft, surrogate, ws, dst,
                                          Eh, Gm, out)
                if _fail_state(STAT, p, k + 1, bound, zbad, soft):
                    return
            for c in range(D):
                for i in range(n):
                    ys[c, i] = x0s[c, i] + (h / 6.0) * (k1s[c, i] + 2 * k2[c, i]
                                                        + 2 * k3[c, i] + k4[c, i])
            _normalize(ys, n, xn)
            if tok == TOK_STRANG and two_d != 0.0:
                _heat(xn, n, d, tnoise[p, kk], d + 2, xn)
        # the state k+1 (after the jump of the weights, if any; `pre` before it)
        t1 = grid[k + 1]
        th[:] = thn
        jumped = jump[k + 1] >= 0
        for rep in range(2 if jumped else 1):
            if rep == 1:
                pre[:] = right
                th[:] = thetas[jump[k + 1]]
            if not static:
                _heads_of(pkind, usevfix, vsign, th, Vfix, A, V, Qm, Km)
            bound, zbad = _evaluate(par, yes, stoch, gsq, d, xn, nx, A, V, Qm, Km, w, wbar, m,
                                    beta, kind, soft, surrogate, ws, vel, Eh, Gm, out)
            if _fail_state(STAT, p, k + 1, bound, zbad, soft):
                return
            _terms(out, static, stoch, wkind, pkind, th, t1, kk + 1, kappa, omega, wa, wb, wc,
                   tab, F, dr, w, Gm, sig[k + 1], itof, beta, right)
        if not (np.isfinite(right[T_E]) and _finite(xn, n)):
            STAT[p, 0] = FAIL_NONFINITE
            STAT[p, 1] = k + 1
            STAT[p, 2] = t1
            return
        # running balance (BalanceAccumulator.step: trapezoid; Itô terms at the left point)
        end = pre if jumped else right
        end_dedt = cur[T_DEDT] if stoch else end[T_DEDT]
        acc[A_W] += 0.5 * h * (cur[T_DEDT] + end_dedt)
        acc[A_P] += 0.5 * h * (cur[T_POWER] + end[T_POWER])
        acc[A_D] += 0.5 * (0.5 * h * (cur[T_SPEED2] + end[T_SPEED2])
                           + 0.5 * h * (cur[T_SLOPE2] + end[T_SLOPE2]))
        acc[A_G] += 0.5 * h * (cur[T_G2] + end[T_G2])
        acc[A_I] += h * cur[T_ITO]
        acc[A_M] += mart
        acc[A_E] = end[T_E]
        if jumped:
            acc[A_W] += right[T_E] - pre[T_E]
            acc[A_E] += right[T_E] - pre[T_E]
        for c in range(D):
            for i in range(n):
                x[c, i] = xn[c, i]
        cur[:] = right
        STEPS[p, :, k + 1] = right
        _record(p, k + 1, recpos, snappos, cur, out, Eh, x, th, m, acc, sign, n, d, REC, REH,
                SX, STH)


@njit(cache=True, error_model="numpy")
def _finite(xT, n):
    for c in range(xT.shape[0]):
        for i in range(n):
            if not np.isfinite(xT[c, i]):
                return False
    return True


@njit(cache=True, error_model="numpy")
def _fail_state(STAT, p, k, bound, zbad, soft):
    """The guards of ``kernel_sums`` / ``particle_terms``: overflow bound, then ``Z ≤ 0``."""
    if bound > EXP_OVERFLOW:
        STAT[p, 0] = FAIL_BOUND
        STAT[p, 1] = k
        STAT[p, 2] = bound
        return True
    if soft and zbad:
        STAT[p, 0] = FAIL_ZERO
        STAT[p, 1] = k
        return True
    return False


@njit(cache=True, error_model="numpy")
def _terms(out, static, stoch, wkind, pkind, th, t, kk, kappa, omega, wa, wb, wc, tab, F, dr,
           w, Gm, sigt, itof, beta, dst):
    """The integrands of a state (``_state_terms``): E, ∂_tE, power, slopes, G², Itô."""
    dst[T_E] = out[0]
    dedt = 0.0
    if not static:
        _drift(wkind, th, t, kk, kappa, omega, wa, wb, wc, tab, F, dr)
        dedt = _work_rate(pkind, th, dr, w, Gm)
    dst[T_DEDT] = dedt
    dst[T_POWER] = out[1]
    dst[T_SLOPE2] = out[2]
    dst[T_SPEED2] = out[3]
    dst[T_G2] = out[4]
    ito = 0.0
    if stoch and sigt != 0.0:
        ito = itof * sigt ** 2 * beta * out[5]
    dst[T_ITO] = ito


@njit(cache=True, error_model="numpy")
def _record(p, k, recpos, snappos, cur, out, Eh, xT, th, m, acc, sign, n, d, REC, REH, SX,
            STH):
    r = recpos[k]
    if r >= 0:
        for j in range(N_TERMS):
            REC[p, r, j] = cur[j]
        REC[p, r, 7] = out[6]
        REC[p, r, 8] = out[7]
        REC[p, r, 9] = out[8]
        REC[p, r, 10] = _mean_inner(xT, m)
        base = (((acc[A_E] - acc[A_E0]) - acc[A_W]) - acc[A_I]) - acc[A_M]
        REC[p, r, 11] = base - acc[A_P]
        REC[p, r, 12] = base - sign * acc[A_D]
        REC[p, r, 13] = base - sign * acc[A_G]
        REH[p, r] = Eh
    s = snappos[k]
    if s >= 0:
        for i in range(n):
            for c in range(d):
                SX[p, s, i, c] = xT[c, i]
        STH[p, s] = th
