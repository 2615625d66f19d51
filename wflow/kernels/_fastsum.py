"""Fast summation of exponential attention sums on S² (d = 3) by spherical harmonics.

Applies to the attention kinds whose kernel declares ``fastsum`` (``k(s) = e^s``:
softmax, USA; :mod:`wflow.attention.kinds`); :func:`wflow.kernels.plan_kernel` checks it.

For one head with score matrix ``A`` write ``u_j = A y_j ∈ R³``, so that
``s_ij = β xᵢᵀ A y_j = β xᵢ·u_j``. For a target ``x`` on the unit sphere the
plane-wave (Funk–Hecke) expansion and the addition theorem give, for any
``u = r û``,

    e^{β x·u} = Σ_l (2l+1) i_l(βr) P_l(x·û)
              = 4π Σ_l i_l(βr) Σ_{m=-l}^{l} Y_lm(x) Y_lm(û)*,

with ``i_l`` the modified spherical Bessel functions of the first kind. Hence
every sum ``G(x) = Σ_j q_j e^{β x·u_j}`` (charges ``q_j = m_j`` for ``Z`` and
``q_j = m_j y_j`` for the three components of ``Y``) is, truncated at degree
``L``,

    G_L(x) = Σ_{l ≤ L} Σ_{m=0}^{l} ε_m Re( W_lm(x) · conj C_lm ),
    C_lm   = 4π Σ_j q_j i_l(β r_j) W_lm(û_j),       ε_0 = 1, ε_m = 2,

where ``W_lm = N_lm P_l^m(cos θ) e^{imφ}`` are the orthonormal harmonics,
computed by the stable three-term recurrences in Cartesian form
(``sin θ e^{iφ} = x + iy``: no trigonometric functions, no pole
singularity). Cost ``O((N + M) L²)`` instead of ``O(N M)``. Nothing here needs
``A`` to be symmetric or invertible: ``A`` only enters through the points
``u_j``. The score moment needs no extra expansion: ``S(x) = β xᵀ A Y(x)``.

Shift. Any centre ``c`` can be factored out exactly,
``e^{β x·u_j} = e^{β x·c} e^{β x·(u_j - c)}``, and only the second factor is
expanded, with radius ``R' = max_j |u_j - c|``. The centre is chosen to
minimise ``R'`` (origin, box centre or an approximate smallest enclosing ball);
concentrated sources (a cluster of tokens) then have small ``R'``.

Error control (relative to ``Z_i``, the natural scale of both ``Z`` and ``Y``
since ``|y_j| = 1``; ``f = V Y / Z`` inherits it):

* truncation: ``|P_l| ≤ 1`` gives ``|G - G_L| ≤ Σ_j |q_j| T_L(β R')`` with the tail
  ``T_L(z) = Σ_{l>L} (2l+1) i_l(z)``; ``L`` is the smallest degree with
  ``T_L(βR') ≤ tol/4 · e^{-βR'}`` (the inner sum is at least ``e^{-βR'} Σ m``,
  so this holds for ANY source distribution);
* round-off: the expansion adds terms whose absolute values sum to about
  ``Σ_j |q_j| e^{β r_j}``, so the absolute round-off is ``≈ κ ε Σ_j |q_j| e^{β r_j}``
  (``κ`` calibrated in the tests). Relative to a small ``Z_i`` this grows like
  ``ε e^{2βR'}``: the expansion stops paying off when ``β R'`` is large and the
  sources are spread out (several far-apart clusters), whatever ``L`` costs.

:func:`harmonic_sums` returns the a-posteriori estimate
``max_i (trunc + round-off) / G_i`` per head; :func:`wflow.kernels.kernel_sums`
falls back to the direct sum for every head whose estimate exceeds the
tolerance.
"""

from __future__ import annotations

import logging
import math
from typing import NamedTuple

import numpy as np
from numba import njit, prange

from ._plan_cache import PlanCache
from ._rows import _FM, fexp

__all__ = [
    "FastSumResult",
    "sph_bessel_i",
    "bessel_tail",
    "choose_degree",
    "enclosing_centre",
    "estimate_floor",
    "harmonic_sums",
    "ROUNDOFF_KAPPA",
    "MAX_DEGREE",
    "PLAN_CACHE",
]

logger = logging.getLogger(__name__)

#: Round-off constant κ of the error estimate (calibrated in tests/test_kernels.py).
ROUNDOFF_KAPPA = 16.0
#: Largest truncation degree the expansion will use.
MAX_DEGREE = 400
#: Points per vectorised chunk.
_CS = 64
#: Partial coefficient sums (parallel work items of the source side). Fixed, so the
#: summation order, hence the result, never depends on the number of threads.
_NBLK = 8
_EPS = float(np.finfo(np.float64).eps)


# ----------------------------------------------------------------------- Bessel i_l
@njit(cache=True, fastmath={"contract"})
def _bessel_row(z, L, out):
    """``out[l] = i_l(z)`` for ``l = 0..L`` (``z ≥ 0``).

    Ratios ``ρ_l = i_l / i_{l-1} = z / (2l + 1 + z ρ_{l+1})`` by the backward
    (minimal-solution, hence stable) recurrence started far above ``L``, then
    ``i_l = ρ_l i_{l-1}`` from ``i_0 = sinh(z)/z``.
    """
    if z == 0.0:
        out[0] = 1.0
        for l in range(1, L + 1):
            out[l] = 0.0
        return
    top = L + 24 + int(1.5 * z) + int(4.0 * math.sqrt(z))
    rho = 0.0
    for l in range(top, L, -1):
        rho = z / (2 * l + 1 + z * rho)
    # rho now holds ρ_{L+1}; go on down to ρ_1, storing ratios in out[1..L]
    for l in range(L, 0, -1):
        rho = z / (2 * l + 1 + z * rho)
        out[l] = rho
    if z < 1e-5:
        i0 = 1.0 + z * z / 6.0
    else:
        i0 = math.sinh(z) / z
    out[0] = i0
    for l in range(1, L + 1):
        out[l] = out[l] * out[l - 1]


@njit(cache=True, fastmath={"contract"})
def _bessel_chunk(z, L, out):
    """``out[l, j] = i_l(z_j)`` for a chunk of arguments, vectorised over ``j``.

    Same recurrence as :func:`_bessel_row`, with one starting index for the
    chunk (that of its largest argument) so the ratio loop runs over ``j``.
    """
    n = z.shape[0]
    zmax = 0.0
    for j in range(n):
        zmax = max(zmax, z[j])
    top = L + 24 + int(1.5 * zmax) + int(4.0 * math.sqrt(zmax))
    rho = np.zeros(n)
    for l in range(top, L, -1):
        for j in range(n):
            rho[j] = z[j] / (2 * l + 1 + z[j] * rho[j])
    for l in range(L, 0, -1):
        row = out[l]
        for j in range(n):
            rho[j] = z[j] / (2 * l + 1 + z[j] * rho[j])
            row[j] = rho[j]
    row0 = out[0]
    for j in range(n):
        zj = z[j]
        if zj < 1e-5:
            row0[j] = 1.0 + zj * zj / 6.0
        else:
            row0[j] = math.sinh(zj) / zj
    for l in range(1, L + 1):
        row = out[l]
        prev = out[l - 1]
        for j in range(n):
            row[j] = row[j] * prev[j]


@njit(cache=True)
def _bessel_table(z, L, out):
    for j in range(z.shape[0]):
        _bessel_row(z[j], L, out[:, j])


def sph_bessel_i(z: np.ndarray | float, L: int) -> np.ndarray:
    """Modified spherical Bessel functions ``i_l(z)``, ``l = 0..L``.

    Parameters
    ----------
    z : array_like, ``z ≥ 0``
    L : int

    Returns
    -------
    (L + 1, *z.shape) array
    """
    z = np.asarray(z, dtype=np.float64)
    if np.any(~np.isfinite(z)) or np.any(z < 0):
        raise ValueError("z: must be finite and >= 0")
    flat = np.ascontiguousarray(z.reshape(-1))
    out = np.empty((L + 1, flat.size))
    _bessel_table(flat, int(L), out)
    return out.reshape((L + 1,) + z.shape)


def bessel_tail(z: float, L: int) -> float:
    """``T_L(z) = Σ_{l>L} (2l+1) i_l(z)``: truncation bound of the expansion of ``e^{z cos γ}``.

    Summed directly from ``l = L + 1`` (no cancellation); the terms decrease
    monotonically once ``l > z`` and faster than geometrically, the sum stops
    when they are below ``1e-17`` of the running sum.
    """
    n = max(2 * L + 64, L + int(3 * z) + 64)
    il = sph_bessel_i(float(z), n)
    terms = (2 * np.arange(n + 1) + 1) * il
    return float(np.sum(terms[L + 1:]))


def choose_degree(zmax: float, tol: float, *, max_degree: int = MAX_DEGREE) -> int | None:
    """Smallest ``L`` with ``T_L(zmax) ≤ tol/4 · e^{-zmax}``, or ``None`` above ``max_degree``.

    ``zmax = β R'``. The factor ``e^{-zmax}`` makes the bound relative to the
    smallest possible inner sum ``e^{-βR'} Σ m`` (any source distribution).
    """
    zmax = float(zmax)
    n = max(max_degree + 2, int(3 * zmax) + 64)
    il = sph_bessel_i(zmax, n)
    terms = (2 * np.arange(n + 1) + 1) * il
    tails = np.cumsum(terms[::-1])[::-1]  # tails[l] = Σ_{l' ≥ l}
    target = 0.25 * tol * math.exp(-zmax)
    for L in range(0, max_degree + 1):
        if tails[L + 1] <= target:
            return L
    return None


@njit(cache=True)
def _radius(u, c0, c1, c2):
    r2 = 0.0
    for j in range(u.shape[0]):
        d0 = u[j, 0] - c0
        d1 = u[j, 1] - c1
        d2 = u[j, 2] - c2
        r2 = max(r2, d0 * d0 + d1 * d1 + d2 * d2)
    return math.sqrt(r2)


@njit(cache=True)
def _farthest(u, c0, c1, c2):
    best = -1.0
    k = 0
    for j in range(u.shape[0]):
        d0 = u[j, 0] - c0
        d1 = u[j, 1] - c1
        d2 = u[j, 2] - c2
        r2 = d0 * d0 + d1 * d1 + d2 * d2
        if r2 > best:
            best = r2
            k = j
    return k, math.sqrt(best)


@njit(cache=True)
def _ritter(u):
    """Ritter's approximate smallest enclosing ball, then a few growth passes."""
    k, _ = _farthest(u, u[0, 0], u[0, 1], u[0, 2])
    q = u[k].copy()
    k2, dist = _farthest(u, q[0], q[1], q[2])
    r = u[k2]
    c = 0.5 * (q + r)
    rad = 0.5 * dist
    for _ in range(8):
        far, dist = _farthest(u, c[0], c[1], c[2])
        if dist <= rad * (1.0 + 1e-12):
            break
        new_rad = 0.5 * (rad + dist)
        c = c + (dist - new_rad) / dist * (u[far] - c)
        rad = new_rad
    return c, _radius(u, c[0], c[1], c[2])


def enclosing_centre(u: np.ndarray) -> tuple[np.ndarray, float]:
    """A centre ``c`` with small ``R' = max_j |u_j - c|`` (origin, box centre or Ritter's ball).

    For the exactly smallest enclosing ball ``c`` lies in the convex hull of the
    touching points, so every direction ``x`` has a touching source with
    ``x·(u_j - c) ≥ 0``: the shifted inner sum is at least that source's mass.
    """
    u = np.ascontiguousarray(u, dtype=np.float64)
    if u.shape[0] == 0:
        return np.zeros(3), 0.0
    cands = [np.zeros(3), 0.5 * (u.min(axis=0) + u.max(axis=0))]
    radii = [_radius(u, 0.0, 0.0, 0.0), _radius(u, *cands[1])]
    c, rad = _ritter(u)
    cands.append(c)
    radii.append(rad)
    best = int(np.argmin(radii))
    return cands[best], float(radii[best])


# ---------------------------------------------------------------- harmonic tables
def _tables(L: int) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
    """Recurrence coefficients of degree ``L`` (:data:`PLAN_CACHE`, read-only arrays).

    They depend on ``L`` only, not on the points: built once per degree
    (:func:`_build_tables`) and shared by every later evaluation.
    """
    return PLAN_CACHE.tables(int(L))


def _build_tables(L: int) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
    """Recurrence coefficients in the m-major layout ``idx(m, l) = off[m] + l - m``."""
    off = np.zeros(L + 2, dtype=np.int64)
    for m in range(L + 1):
        off[m + 1] = off[m] + (L + 1 - m)
    P = int(off[L + 1])
    a = np.zeros(P)
    b = np.zeros(P)
    for m in range(L + 1):
        ls = np.arange(m + 2, L + 1, dtype=np.float64)
        idx = off[m] + (ls - m).astype(np.int64)
        a[idx] = np.sqrt((4 * ls**2 - 1) / (ls**2 - m**2))
        b[idx] = np.sqrt(((ls - 1) ** 2 - m**2) / (4 * (ls - 1) ** 2 - 1))
    mm = np.arange(L + 1, dtype=np.float64)
    dmm = np.ones(L + 1)
    dmm[1:] = np.sqrt((2 * mm[1:] + 1) / (2 * mm[1:]))
    d1 = np.sqrt(2 * mm + 3)
    return off, a, b, dmm, d1


@njit(fastmath=_FM, cache=True, inline="always")
def _sectoral_step(f, X, Yc, mr, mi, n):
    """``(mr + i mi) ← f (x + i y)(mr + i mi)``: the sectoral seed of order ``m`` from ``m − 1``."""
    for j in range(n):
        tr = f * (mr[j] * X[j] - mi[j] * Yc[j])
        mi[j] = f * (mr[j] * Yc[j] + mi[j] * X[j])
        mr[j] = tr


@njit(fastmath=_FM, cache=True, inline="always")
def _degree_step(l, mo, base, a, b, d1, Zc, mr, mi, p1r, p1i, p2r, p2i, n):
    """Advance the normalised ``Y_l^m`` recurrence in ``l`` (p1: degree l, p2: l − 1)."""
    if l == mo:
        for j in range(n):
            p1r[j] = mr[j]
            p1i[j] = mi[j]
            p2r[j] = 0.0
            p2i[j] = 0.0
    elif l == mo + 1:
        f = d1[mo]
        for j in range(n):
            p2r[j] = p1r[j]
            p2i[j] = p1i[j]
            p1r[j] = f * Zc[j] * p2r[j]
            p1i[j] = f * Zc[j] * p2i[j]
    else:
        al = a[base + l - mo]
        bl = b[base + l - mo]
        for j in range(n):
            tr = al * (Zc[j] * p1r[j] - bl * p2r[j])
            ti = al * (Zc[j] * p1i[j] - bl * p2i[j])
            p2r[j] = p1r[j]
            p2i[j] = p1i[j]
            p1r[j] = tr
            p1i[j] = ti


@njit(cache=True, inline="always")
def chunk_buffers(L, nq):
    """Scratch of one chunk of :data:`_CS` sources for the coefficient passes.

    Returns ``(bes (L + 1, _CS), mr, mi, p1r, p1i, p2r, p2i (_CS,), g (nq, _CS))``
    (uninitialised): Bessel factors, ``e^{imφ}``, the two Legendre recurrences, charges.
    """
    return (np.empty((L + 1, _CS)), np.empty(_CS), np.empty(_CS), np.empty(_CS),
            np.empty(_CS), np.empty(_CS), np.empty(_CS), np.empty((nq, _CS)))


@njit(fastmath=_FM, cache=True)
def harmonic_chunk(coeffs, X, Yc, Zc, z, g, n, L, off, a, b, dmm, d1, Cr, Ci, acc, bes, mr, mi, p1r,
           p1i, p2r, p2i):
    """One chunk of ``n ≤ _CS`` points through the harmonic recurrences.

    ``coeffs``: sources, ``C[c, lm] += Σ_j g[c, j] i_l(z_j) W_lm(û_j)`` (``X, Yc, Zc`` the
    directions ``û_j``); else targets, ``acc[c, i] = Σ_lm Re(W_lm(x_i) conj C_lm)`` (``C``
    scaled by ``4π ε_m``; ``z``, ``g``, ``bes`` unused). The one chunk step of
    :func:`_coefficients`, :func:`_evaluate` and the causal fast sum.
    """
    nq = Cr.shape[0]
    if coeffs:
        _bessel_chunk(z, L, bes[:, :n])
    else:
        acc[:, :] = 0.0
    inv = 1.0 / math.sqrt(4.0 * math.pi)
    for j in range(n):
        mr[j] = inv
        mi[j] = 0.0
    for mo in range(L + 1):
        if mo > 0:
            _sectoral_step(dmm[mo], X, Yc, mr, mi, n)
        base = off[mo]
        for l in range(mo, L + 1):
            _degree_step(l, mo, base, a, b, d1, Zc, mr, mi, p1r, p1i, p2r, p2i, n)
            idx = base + l - mo
            if coeffs:
                br = bes[l]
                for c in range(nq):
                    gc = g[c]
                    sr = 0.0
                    si = 0.0
                    for j in range(n):
                        t = gc[j] * br[j]
                        sr += t * p1r[j]
                        si += t * p1i[j]
                    Cr[c, idx] += sr
                    Ci[c, idx] += si
            else:
                for c in range(nq):
                    cr = Cr[c, idx]
                    ci = Ci[c, idx]
                    ac = acc[c]
                    for j in range(n):
                        ac[j] += p1r[j] * cr + p1i[j] * ci


@njit(parallel=True, fastmath=_FM, cache=True)
def _coefficients(uT, z, q, L, off, a, b, dmm, d1, nblk, Cr, Ci):
    """Accumulate ``C_lm`` (without the ``4π ε_m`` factor) into per-block partial sums.

    uT : (3, N) unit directions ``û_j``; z : (N,) ``β r_j``; q : (nq, N) charges;
    Cr, Ci : (nblk, nq, P) partial sums, block ``b`` takes chunks ``b, b + nblk, …``.
    """
    N = z.shape[0]
    nq = q.shape[0]
    nch = (N + _CS - 1) // _CS
    for blk in prange(nblk):
        cr = Cr[blk]
        ci = Ci[blk]
        cr[:, :] = 0.0
        ci[:, :] = 0.0
        bes, mr, mi, p1r, p1i, p2r, p2i, g = chunk_buffers(L, nq)
        for ch in range(blk, nch, nblk):
            j0 = ch * _CS
            n = min(N, j0 + _CS) - j0
            for c in range(nq):
                for j in range(n):
                    g[c, j] = q[c, j0 + j]
            harmonic_chunk(True, uT[0, j0:j0 + n], uT[1, j0:j0 + n], uT[2, j0:j0 + n],
                           z[j0:j0 + n], g, n, L, off, a, b, dmm, d1, cr, ci, g, bes, mr, mi,
                           p1r, p1i, p2r, p2i)


@njit(parallel=True, fastmath=_FM, cache=True)
def _evaluate(xT, L, off, a, b, dmm, d1, Cr, Ci, out):
    """``out[c, i] = Σ_lm Re(W_lm(x_i) conj C_lm)`` (coefficients include ``4π ε_m``)."""
    M = xT.shape[1]
    nq = Cr.shape[0]
    nch = (M + _CS - 1) // _CS
    for ch in prange(nch):
        i0 = ch * _CS
        n = min(M, i0 + _CS) - i0
        bes, mr, mi, p1r, p1i, p2r, p2i, acc = chunk_buffers(0, nq)
        harmonic_chunk(False, xT[0, i0:i0 + n], xT[1, i0:i0 + n], xT[2, i0:i0 + n], mr[:0],
                       acc, n, L, off, a, b, dmm, d1, Cr, Ci, acc, bes, mr, mi, p1r, p1i, p2r,
                       p2i)
        for c in range(nq):
            for j in range(n):
                out[c, i0 + j] = acc[c, j]


# ------------------------------------------------------------------------- driver
class FastSumResult(NamedTuple):
    """Harmonic-expansion sums for all heads (see module docstring).

    Attributes
    ----------
    Z : (H, M) array
    Y : (H, M, 3) array
    S : (H, M) array or None
    degree : (H,) int array
        Truncation degree ``L`` per head (``-1``: head not expanded, see ``ok``).
    err_est : (H,) array
        A-posteriori bound on ``max_i max(|ΔZ_i|, |ΔY_i|) / Z_i`` per head.
    ok : (H,) bool array
        ``err_est ≤ tol`` (heads that failed must be recomputed directly).
    radius : (H,) array
        ``β R'`` per head (radius of the shifted source cloud times ``β``).
    """

    Z: np.ndarray
    Y: np.ndarray
    S: np.ndarray | None
    degree: np.ndarray
    err_est: np.ndarray
    ok: np.ndarray
    radius: np.ndarray


@njit(fastmath=_FM, cache=True)
def _probe_min(bx, wT, m):
    """``min_p Σ_j m_j e^{<bx_p, w_j>}`` (a few probe targets, one thread)."""
    best = np.inf
    for p in range(bx.shape[0]):
        a0 = bx[p, 0]
        a1 = bx[p, 1]
        a2 = bx[p, 2]
        acc = 0.0
        for j in range(m.shape[0]):
            acc += m[j] * fexp(a0 * wT[0, j] + a1 * wT[1, j] + a2 * wT[2, j])
        best = min(best, acc)
    return best


def estimate_floor(x: np.ndarray, y: np.ndarray, m: np.ndarray, u: np.ndarray, c: np.ndarray,
                   beta: float, *, nprobe: int = 16) -> float:
    """Cheap lower bound of the a-posteriori estimate of :func:`harmonic_sums` for one head.

    The round-off term ``κ ε Σ_j |q_j| e^{β r_j}`` over ``min_i G'(x_i)``, with the
    minimum taken over ``nprobe`` targets only (evenly spaced, plus the target most
    opposite to the mass-weighted mean of ``u_j - c``), computed directly in
    ``O(nprobe · N)``. A minimum over fewer targets is larger, so this is below the
    full estimate: where it already exceeds ``tol``, the expansion would be wasted.
    """
    M = x.shape[0]
    if M == 0 or u.shape[0] == 0:
        return 0.0
    w = u - c
    r = np.sqrt(np.einsum("ij,ij->i", w, w))
    qabs = np.abs(m) * np.maximum(1.0, np.max(np.abs(y), axis=1))
    scale = float(np.sum(qabs * np.exp(beta * r)))
    mean = m @ w
    idx = np.unique(np.concatenate([np.linspace(0, M - 1, min(nprobe, M)).astype(np.int64),
                                    [int(np.argmin(x @ mean))]]))
    xp = x[idx] / np.linalg.norm(x[idx], axis=1, keepdims=True)
    gmin = _probe_min(np.ascontiguousarray(beta * xp), np.ascontiguousarray(w.T),
                      np.ascontiguousarray(m, dtype=np.float64))
    if not gmin > 0:
        return math.inf
    return ROUNDOFF_KAPPA * _EPS * scale / gmin


def plan_head(u: np.ndarray, beta: float, tol: float, *,
              max_degree: int = MAX_DEGREE) -> tuple[np.ndarray, float, int | None]:
    """Centre, ``β R'`` and truncation degree for one head's points ``u_j = A y_j``.

    Remembered by :data:`PLAN_CACHE` for the same points (bit for bit) and the same
    ``β, tol, max_degree``: :func:`wflow.kernels.plan_kernel` and :func:`harmonic_sums`
    of one evaluation plan the same head once.
    """
    return PLAN_CACHE.plan_head(u, beta, tol, max_degree)


def _plan_head(u: np.ndarray, beta: float, tol: float,
               max_degree: int) -> tuple[np.ndarray, float, int | None]:
    c, R = enclosing_centre(u)
    L = choose_degree(beta * R, tol, max_degree=max_degree)
    return c, beta * R, L


#: The process's :class:`~wflow.kernels._plan_cache.PlanCache` (the fast summation's tables
#: and head plans).
PLAN_CACHE = PlanCache(_build_tables, _plan_head)


def harmonic_sums(
    x: np.ndarray,
    y: np.ndarray,
    m: np.ndarray,
    A: np.ndarray,
    *,
    beta: float,
    tol: float,
    scores: bool = False,
    max_degree: int = MAX_DEGREE,
    heads: np.ndarray | None = None,
) -> FastSumResult:
    """Exponential-kernel sums ``Z, Y (, S)`` on S² by the harmonic expansion.

    Parameters
    ----------
    x : (M, 3) array
        Targets; evaluated at ``x/|x|`` (the estimate adds ``β R' max||x|-1|``).
    y : (N, 3) array
        Sources (anywhere in ``R³``).
    m : (N,) array
        Source masses ``≥ 0``.
    A : (H, 3, 3) array
        Score matrices ``A_h = Q_hᵀ K_h`` (any, not necessarily symmetric).
    beta : float
        Inverse temperature.
    tol : float
        Target relative accuracy (per target, relative to ``Z_i``).
    scores : bool
        Also return ``S = β xᵀ A Y``.
    max_degree : int
        Heads that would need a larger degree are not expanded (``ok = False``).
    heads : (H,) bool array, optional
        Only expand these heads (others get ``ok = False``).

    Returns
    -------
    FastSumResult
    """
    x = np.asarray(x, dtype=np.float64)
    H = A.shape[0]
    M = x.shape[0]
    nx = np.sqrt(np.einsum("ij,ij->i", x, x))
    if np.any(nx == 0):
        raise ValueError("x: targets must be non-zero (points on the unit sphere)")
    xhat = x / nx[:, None]
    xT = np.ascontiguousarray(xhat.T)
    dev = float(np.max(np.abs(nx - 1.0)))
    Z = np.zeros((H, M))
    Y = np.zeros((H, M, 3))
    S = np.zeros((H, M)) if scores else None
    degree = np.full(H, -1, dtype=np.int64)
    err = np.full(H, np.inf)
    radius = np.zeros(H)
    q = np.ascontiguousarray(np.vstack([m[None, :], (m[:, None] * y).T]))  # (4, N)
    qabs = np.abs(q).max(axis=0)  # |q_j| bound for every charge
    nblk = _NBLK
    for h in range(H):
        if heads is not None and not heads[h]:
            continue
        u = y @ A[h].T  # u_j = A y_j
        c, zR, L = plan_head(u, beta, tol, max_degree=max_degree)
        radius[h] = zR
        if L is None:
            continue
        w = u - c
        r = np.sqrt(np.einsum("ij,ij->i", w, w))
        uhat = np.where(r[:, None] > 0, w / np.where(r > 0, r, 1.0)[:, None], [0.0, 0.0, 1.0])
        zj = beta * r
        off, a, b, dmm, d1 = _tables(L)
        P = int(off[L + 1])
        Cr = np.empty((nblk, 4, P))
        Ci = np.empty((nblk, 4, P))
        _coefficients(np.ascontiguousarray(uhat.T), np.ascontiguousarray(zj), q, L, off, a, b,
                      dmm, d1, nblk, Cr, Ci)
        eps_m = np.full(P, 2.0)
        eps_m[: L + 1] = 1.0  # m = 0 block comes first in the m-major layout
        Cr = 4.0 * math.pi * eps_m * Cr.sum(axis=0)
        Ci = 4.0 * math.pi * eps_m * Ci.sum(axis=0)
        out = np.empty((4, M))
        _evaluate(xT, L, off, a, b, dmm, d1, np.ascontiguousarray(Cr), np.ascontiguousarray(Ci),
                  out)
        inner = out[0]
        # error estimate on the inner (shifted) sums
        tail = bessel_tail(zR, L)
        scale = float(np.sum(qabs * np.exp(zj)))
        abs_err = tail * float(np.sum(qabs)) + ROUNDOFF_KAPPA * _EPS * scale
        zmin = float(np.min(inner))
        if not zmin > 0:
            err[h] = np.inf
        else:
            err[h] = abs_err / zmin + zR * dev * math.exp(zR * dev)
        degree[h] = L
        fac = np.exp(beta * (x @ c))  # exact shift factor at the true targets
        Z[h] = fac * inner
        Y[h] = (fac * out[1:]).T
        if scores:
            S[h] = beta * np.einsum("mi,ij,mj->m", x, A[h], Y[h])
    ok = err <= tol
    return FastSumResult(Z, Y, S, degree, err, ok, radius)
