r"""Linear statistics on S²: real spherical-harmonic moments of tokens and of cell masses.

The moment of degree ``l`` and order ``m`` of a probability measure ``μ`` on ``S²`` is

.. math::

    μ_{lm} = \int_{S^2} Y_{lm}\, dμ, \qquad 0 <= l <= L,\ -l <= m <= l,

with the real orthonormal harmonics (no Condon–Shortley phase)

.. math::

    Y_{l0} = \tilde P_l^0(z), \quad
    Y_{l,m} = \sqrt2\, \tilde P_l^m(z) \cos mφ, \quad
    Y_{l,-m} = \sqrt2\, \tilde P_l^m(z) \sin mφ \quad (m > 0),

``\tilde P_l^m = N_{lm} P_l^m``, ``N_{lm}² = (2l+1)/(4π) · (l−m)!/(l+m)!``, so that
``∫ Y_{lm} Y_{l'm'} dA = δ_{ll'} δ_{mm'}``. Moment ``(l, m)`` sits at index
``l² + l + m`` of a vector of length ``(L+1)²``. They are evaluated as polynomials in
the Cartesian coordinates: ``sin^m θ e^{imφ} = (x + iy)^m`` and the divided Legendre
functions ``\tilde P_l^m / sin^m θ`` by the stable three-term recurrence in ``l``.

* :func:`token_moment_sums` — ``Σ_i w_i Y_k(x_i)`` over tokens: ``O(n L²)`` time,
  ``O(L² · block)`` memory, a plain sum (so distributable: each rank sums its tokens and
  one Allreduce of ``(L+1)²`` numbers gives the whole); :func:`token_moments` divides
  by the count.
* :func:`cell_moments` — the moments of the PDE's measure: mass ``m_K`` on cell ``K``,
  spread uniformly over the flat triangle (densities per flat area, docs/theory.md §8)
  and carried to the sphere by the radial projection ``p ↦ p/|p|`` (the measure
  :func:`wflow.geometry.sphere.sample_cells` draws from), i.e.
  ``μ_k = Σ_K m_K |K|^{-1} ∫_K Y_k(p/|p|) dA(p)``, with the conical-product
  Gauss–Jacobi rule of :func:`triangle_rule` on each flat triangle.
* :func:`sphere_moments` — the moments of a density per *spherical* area over the
  projected cells (``∫_{\hat K} f Y_k dA`` through the flat-triangle parametrisation and the
  projection's Jacobian ``(n_K · a_K)/|p|³``): with an analytic ``f`` it checks the
  quadrature against closed forms;
* :func:`zonal_vmf_moments` — analytic moments of a von Mises–Fisher law (the reference
  of the tests).

A kernel MMD for a zonal kernel ``k(x·y) = Σ_l a_l (2l+1)/(4π) P_l(x·y)`` is, by the
addition theorem, ``MMD²(μ, ν) = Σ_l a_l Σ_m (μ_{lm} − ν_{lm})²`` (:func:`zonal_mmd2`).
"""

from __future__ import annotations

import math
from typing import Any

import numpy as np

__all__ = ["harmonic_index", "real_harmonics", "token_moment_sums", "token_cross_sums",
           "token_moments",
           "triangle_rule", "cell_moments", "sphere_moments", "zonal_vmf_moments", "zonal_mmd2",
           "heat_weights", "n_moments"]

#: Tokens per block of :func:`token_moment_sums` (memory ``(L+1)² · BLOCK`` floats).
BLOCK = 65536


def n_moments(L: int) -> int:
    """``(L+1)²``: the number of real harmonics of degree ``<= L``."""
    return (int(L) + 1) ** 2


def harmonic_index(L: int) -> tuple[np.ndarray, np.ndarray]:
    """``(l, m)`` of each index ``k = l² + l + m`` (two ``((L+1)²,)`` integer arrays)."""
    ls = np.concatenate([np.full(2 * l + 1, l) for l in range(L + 1)])
    ms = np.concatenate([np.arange(-l, l + 1) for l in range(L + 1)])
    return ls, ms


def real_harmonics(x: np.ndarray, L: int) -> np.ndarray:
    """The real orthonormal harmonics ``Y_k(x)``, ``k < (L+1)²``, at unit vectors ``x``.

    Parameters
    ----------
    x : (N, 3) array
        Points on the unit sphere (not renormalised here).
    L : int
        Largest degree.

    Returns
    -------
    ((L+1)², N) array
    """
    L = int(L)
    if L < 0:
        raise ValueError("real_harmonics: L must be >= 0")
    x = np.asarray(x, float)
    X, Yc, Z = x[:, 0], x[:, 1], x[:, 2]
    N = x.shape[0]
    out = np.empty(((L + 1) ** 2, N))
    # (x + iy)^m: real and imaginary parts
    cr, ci = np.ones(N), np.zeros(N)
    q_mm = 1.0 / math.sqrt(4.0 * math.pi)  # divided sectoral value \tilde P_m^m / s^m
    for m in range(L + 1):
        if m > 0:
            cr, ci = cr * X - ci * Yc, cr * Yc + ci * X
            q_mm *= math.sqrt((2.0 * m + 1.0) / (2.0 * m))
        # the recurrence in l for this m (values of \tilde P_l^m / s^m)
        p2 = np.full(N, q_mm)
        p1 = None
        for l in range(m, L + 1):
            if l == m:
                cur = p2
            elif l == m + 1:
                cur = math.sqrt(2.0 * m + 3.0) * Z * p2
                p1 = cur
            else:
                a = math.sqrt((4.0 * l * l - 1.0) / (l * l - m * m))
                b = math.sqrt(((l - 1.0) ** 2 - m * m) / (4.0 * (l - 1.0) ** 2 - 1.0))
                cur = a * (Z * p1 - b * p2)
                p2, p1 = p1, cur
            k = l * l + l
            if m == 0:
                out[k] = cur
            else:
                out[k + m] = math.sqrt(2.0) * cur * cr
                out[k - m] = math.sqrt(2.0) * cur * ci
    return out


def token_moment_sums(x: np.ndarray, L: int, *, weights: np.ndarray | None = None,
                      squares: bool = False, block: int = BLOCK
                      ) -> np.ndarray | tuple[np.ndarray, np.ndarray]:
    """``S_k = Σ_i w_i Y_k(x_i)`` (``w_i = 1`` by default), by blocks of tokens.

    A sum, so distributable: the sums of disjoint sets of tokens add (one Allreduce of
    ``(L+1)²`` numbers). Time ``O(n L²)``, memory ``O(L² · block)`` beyond the tokens.

    Parameters
    ----------
    x : (n, 3) array
        Tokens on the unit sphere.
    L : int
    weights : (n,) array, optional
    squares : bool
        Also return ``Σ_i w_i Y_k(x_i)²`` (per-token variances).

    Returns
    -------
    ((L+1)²,) array, or two of them with ``squares``
    """
    x = np.asarray(x, float)
    if x.ndim != 2 or x.shape[1] != 3:
        raise ValueError(f"token_moment_sums: tokens must be (n, 3), got {x.shape}")
    out = np.zeros((int(L) + 1) ** 2)
    sq = np.zeros_like(out)
    for a in range(0, x.shape[0], int(block)):
        Y = real_harmonics(x[a:a + block], L)
        w = np.ones(Y.shape[1]) if weights is None else np.asarray(weights[a:a + block], float)
        out += Y @ w
        if squares:
            sq += (Y * Y) @ w
    return (out, sq) if squares else out


def token_cross_sums(x_ctrl: np.ndarray, x: np.ndarray, L_ctrl: int, L: int, *,
                     block: int = BLOCK) -> tuple[np.ndarray, ...]:
    r"""Sums for control variates: harmonics ``Z`` of ``x_ctrl`` against ``Y`` of ``x``.

    With ``Z_i = (Y_j(x^{ctrl}_i))_{1 ≤ j < (L_{ctrl}+1)²}`` (the constant left out) and
    ``Y_i = (Y_k(x_i))_{k < (L+1)²}`` for the same tokens ``i`` (in the mean-field study:
    each token at ``t = 0`` and at ``T``), the raw sums

    .. math::

        S_Z = Σ_i Z_i,\quad S_Y = Σ_i Y_i,\quad S_{ZZ} = Σ_i Z_i Z_i^T,\quad
        S_{ZY} = Σ_i Z_i Y_i^T,\quad S_{YY} = Σ_i Y_i ∘ Y_i .

    Sums, so distributable over disjoint sets of tokens; time ``O(n (P² + P K))``,
    memory ``O((P + K) · block + P (P + K))`` (``P = (L_{ctrl}+1)² − 1``, ``K = (L+1)²``).

    Parameters
    ----------
    x_ctrl, x : (n, 3) arrays
        The same tokens at two times (rows paired).
    L_ctrl, L : int
        Largest degrees of the controls and of the moments.

    Returns
    -------
    S_Z (P,), S_Y (K,), S_ZZ (P, P), S_ZY (P, K), S_YY (K,)
    """
    x_ctrl, x = np.asarray(x_ctrl, float), np.asarray(x, float)
    if x_ctrl.shape != x.shape or x.ndim != 2 or x.shape[1] != 3:
        raise ValueError(f"token_cross_sums: paired (n, 3) tokens needed, got {x_ctrl.shape} "
                         f"and {x.shape}")
    P, K = (int(L_ctrl) + 1) ** 2 - 1, (int(L) + 1) ** 2
    sz, sy, syy = np.zeros(P), np.zeros(K), np.zeros(K)
    szz, szy = np.zeros((P, P)), np.zeros((P, K))
    for a in range(0, x.shape[0], int(block)):
        Z = real_harmonics(x_ctrl[a:a + block], L_ctrl)[1:]
        Y = real_harmonics(x[a:a + block], L)
        sz += Z.sum(axis=1)
        sy += Y.sum(axis=1)
        syy += (Y * Y).sum(axis=1)
        szz += Z @ Z.T
        szy += Z @ Y.T
    return sz, sy, szz, szy, syy


def token_moments(x: np.ndarray, L: int, *, comm: Any = None) -> np.ndarray:
    """The moments ``(1/n) Σ_i Y_k(x_i)`` of the empirical measure of the tokens.

    ``comm`` (an mpi4py communicator): ``x`` holds this rank's tokens; the sums and the
    counts are Allreduced, so every rank gets the moments of all tokens.
    """
    s = token_moment_sums(x, L)
    n = float(np.asarray(x).shape[0])
    if comm is not None and comm.Get_size() > 1:
        buf = np.append(s, n)
        buf = comm.allreduce(buf)
        s, n = buf[:-1], buf[-1]
    if n <= 0:
        raise ValueError("token_moments: no tokens")
    return s / n


def triangle_rule(degree: int) -> tuple[np.ndarray, np.ndarray]:
    """A quadrature on the triangle exact for polynomials of total degree ``<= degree``.

    The conical (Stroud) product: ``q = ⌈(degree + 1)/2⌉`` Gauss–Jacobi points in
    ``u`` (weight ``1 − u``) times ``q`` Gauss–Legendre points in ``v``, mapped by
    ``(λ₁, λ₂, λ₃) = (u, (1 − u) v, (1 − u)(1 − v))`` (Duffy); exact for degree
    ``2q − 1``. Weights are positive and sum to 1 (the rule averages over the triangle).

    Returns
    -------
    lam : (q², 3) array
        Barycentric coordinates of the points.
    w : (q²,) array
        Weights, ``Σ w = 1``.
    """
    from scipy.special import roots_jacobi, roots_legendre

    q = max(1, (int(degree) + 2) // 2)
    xj, wj = roots_jacobi(q, 1.0, 0.0)  # weight (1 − s) on [−1, 1]
    xl, wl = roots_legendre(q)
    u, v = 0.5 * (1.0 + xj), 0.5 * (1.0 + xl)
    U, V = np.meshgrid(u, v, indexing="ij")
    W = np.outer(wj, wl)
    lam = np.stack([U.ravel(), ((1 - U) * V).ravel(), ((1 - U) * (1 - V)).ravel()], axis=1)
    w = W.ravel()
    return lam, w / w.sum()


def cell_moments(vertices: np.ndarray, masses: np.ndarray, L: int, *, degree: int = 9,
                 block: int = 8192) -> np.ndarray:
    """Moments of the PDE's measure: ``Σ_K m_K |K|^{-1} ∫_K Y_k(p/|p|) dA(p)``.

    The mass ``m_K`` is uniform on the flat triangle ``K`` (the PDE's convention: densities
    per flat area) and carried to ``S²`` by the radial projection. Each cell's average of
    the smooth integrand ``Y_k(p/|p|)`` is taken with :func:`triangle_rule` of the given
    ``degree``; its error is ``O((L h)^{degree+1})`` (``h`` the cell size), at round-off on
    meshes of ``>= 5 120`` cells for ``L <= 8`` and ``degree = 9`` (tested).

    Parameters
    ----------
    vertices : (M, 3, 3) array
        Vertex coordinates of each cell.
    masses : (M,) array
        Cell masses (any sign: a difference of two solutions is allowed).
    L : int
    degree : int
        Polynomial degree of the triangle rule.

    Returns
    -------
    ((L+1)²,) array
    """
    v = np.asarray(vertices, float)
    m = np.asarray(masses, float)
    if v.ndim != 3 or v.shape[1:] != (3, 3) or m.shape != (v.shape[0],):
        raise ValueError("cell_moments: need vertices (M, 3, 3) and masses (M,)")
    lam, w = triangle_rule(degree)
    out = np.zeros((int(L) + 1) ** 2)
    for a in range(0, v.shape[0], int(block)):
        vb, mb = v[a:a + block], m[a:a + block]
        p = np.einsum("qj,kjd->kqd", lam, vb).reshape(-1, 3)  # (cells·Q, 3)
        p /= np.linalg.norm(p, axis=1, keepdims=True)
        out += real_harmonics(p, L) @ (mb[:, None] * w[None, :]).reshape(-1)
        del p
    return out


def zonal_vmf_moments(mean: np.ndarray, kappa: float, L: int) -> np.ndarray:
    """Analytic moments of the von Mises–Fisher law ``κ/(4π sinh κ) e^{κ μ·x}``.

    By the Funk–Hecke formula ``∫ Y_{lm} dν = A_l(κ) Y_{lm}(μ)`` with
    ``A_l(κ) = I_{l+1/2}(κ)/I_{1/2}(κ)`` (``A_l = 1`` at ``κ = 0`` for ``l = 0`` only).
    """
    from scipy.special import ive

    mean = np.asarray(mean, float)
    mean = mean / np.linalg.norm(mean)
    ls, _ = harmonic_index(L)
    if kappa == 0:
        A = (ls == 0).astype(float)
    else:
        A = ive(ls + 0.5, kappa) / ive(0.5, kappa)
    return A * real_harmonics(mean[None], L)[:, 0]


def heat_weights(L: int, tau: float) -> np.ndarray:
    """Weights ``a_l = e^{−τ l(l+1)}`` per index (``a_0 = 0``: masses are equal).

    The heat kernel on ``S²`` at time ``τ`` truncated at degree ``L``; its MMD is
    :func:`zonal_mmd2` with these weights.
    """
    ls, _ = harmonic_index(L)
    a = np.exp(-tau * ls * (ls + 1.0))
    a[0] = 0.0
    return a


def zonal_mmd2(d: np.ndarray, weights: np.ndarray) -> float:
    """``MMD² = Σ_k a_k d_k²`` for moment differences ``d`` and per-index weights ``a``."""
    d = np.asarray(d, float)
    return float(np.sum(np.asarray(weights, float) * d * d))


def sphere_moments(vertices: np.ndarray, density: Any, L: int, *, degree: int = 9,
                   block: int = 8192) -> np.ndarray:
    r"""``Σ_K ∫_{\hat K} f Y_k dA``: moments of a density ``f`` per spherical area.

    Each spherical cell ``\hat K`` (the radial projection of the flat triangle ``K``) is
    parametrised by ``K``: ``dA_{S²} = (n_K · a_K)/|p|³ dA(p)`` (``n_K`` the unit normal,
    ``a_K`` a vertex), and the flat integral is taken with :func:`triangle_rule`. Over a
    closed mesh the cells tile ``S²``, so the result is ``∫_{S²} f Y_k dA`` up to the
    quadrature error (the reference of :func:`cell_moments`' tests).

    Parameters
    ----------
    vertices : (M, 3, 3) array
    density : callable
        Maps points ``(N, 3)`` on the sphere to ``(N,)`` densities.
    """
    v = np.asarray(vertices, float)
    lam, w = triangle_rule(degree)
    out = np.zeros((int(L) + 1) ** 2)
    for a in range(0, v.shape[0], int(block)):
        vb = v[a:a + block]
        nrm = np.cross(vb[:, 1] - vb[:, 0], vb[:, 2] - vb[:, 0])
        area2 = np.linalg.norm(nrm, axis=1)  # twice the flat area
        nrm = nrm / area2[:, None]
        h = np.einsum("kd,kd->k", nrm, vb[:, 0])  # distance of the plane from 0
        p = np.einsum("qj,kjd->kqd", lam, vb)
        r = np.linalg.norm(p, axis=2)
        jac = np.abs(h)[:, None] / r**3 * (0.5 * area2)[:, None] * w[None, :]
        u = (p / r[..., None]).reshape(-1, 3)
        out += real_harmonics(u, L) @ (np.asarray(density(u), float) * jac.reshape(-1))
    return out
