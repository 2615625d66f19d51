"""Compiled kernels of the finite-volume JKO step (:mod:`wflow.jko.fv`).

Cell graph in CSR form: the neighbours of cell ``K`` are ``idx[ptr[K]:ptr[K+1]]`` with
transmissibilities ``w`` (``|σ|/d_σ``); ``c_K = δ b̂_K / |K|`` (``δ`` the pseudo-time
substep). With ``d_KL = λ_L − λ_K`` the discrete Hamilton–Jacobi operator is::

    G_K(λ) = λ_K − ½ c_K Σ_L w_KL (d_KL⁺)² − t_K,

its Jacobian ``G'`` has ``G'_KK = 1 + c_K Σ_L w_KL d_KL⁺`` and
``G'_KL = −c_K w_KL d_KL⁺`` (nonzero only where ``λ_L > λ_K``): in the order of
decreasing ``λ`` it is lower triangular, and the implicit upwind continuity matrix
``G'ᵀ`` is upper triangular. Both solves are one sweep (``O(N)``, no fill).
"""

from __future__ import annotations

import numpy as np
from numba import njit


@njit(cache=True)
def hj_residual(lam, tgt, ptr, idx, w, c, out):  # pragma: no cover - compiled
    """``out = G(λ)``; returns ``max |G|``."""
    n = lam.size
    big = 0.0
    for k in range(n):
        s = 0.0
        lk = lam[k]
        for j in range(ptr[k], ptr[k + 1]):
            d = lam[idx[j]] - lk
            if d > 0.0:
                s += w[j] * d * d
        g = lk - 0.5 * c[k] * s - tgt[k]
        out[k] = g
        if abs(g) > big:
            big = abs(g)
    return big


@njit(cache=True)
def hj_newton_solve(lam, rhs, ptr, idx, w, c, order, out):  # pragma: no cover - compiled
    """Solve ``G'(λ) x = rhs`` by one sweep over ``order`` (cells by decreasing ``λ``)."""
    for q in range(order.size):
        k = order[q]
        lk = lam[k]
        diag = 1.0
        s = rhs[k]
        for j in range(ptr[k], ptr[k + 1]):
            L = idx[j]
            d = lam[L] - lk
            if d > 0.0:
                a = c[k] * w[j] * d
                diag += a
                s += a * out[L]
        out[k] = s / diag


@njit(cache=True)
def continuity_solve(lam, m0, ptr, idx, w, c, order_asc, out):  # pragma: no cover
    """Solve ``G'(λ)ᵀ m = m0`` (implicit upwind continuity) over cells by increasing ``λ``."""
    r = m0.copy()
    for q in range(order_asc.size):
        k = order_asc[q]
        lk = lam[k]
        diag = 1.0
        for j in range(ptr[k], ptr[k + 1]):
            d = lam[idx[j]] - lk
            if d > 0.0:
                diag += c[k] * w[j] * d
        mk = r[k] / diag
        out[k] = mk
        for j in range(ptr[k], ptr[k + 1]):
            L = idx[j]
            d = lam[L] - lk
            if d > 0.0:
                r[L] += c[k] * w[j] * d * mk


def warmup() -> None:
    """Compile the kernels on a 2-cell graph (``cache=True`` keeps them on disk)."""
    lam = np.array([0.0, 1.0])
    ptr = np.array([0, 1, 2], dtype=np.int64)
    idx = np.array([1, 0], dtype=np.int64)
    w = np.ones(2)
    c = np.ones(2)
    out = np.zeros(2)
    hj_residual(lam, lam, ptr, idx, w, c, out)
    hj_newton_solve(lam, lam, ptr, idx, w, c, np.array([1, 0], dtype=np.int64), out)
    continuity_solve(lam, lam, ptr, idx, w, c, np.array([0, 1], dtype=np.int64), out)
