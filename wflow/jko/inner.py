"""Inner solvers of one JKO step: generalised conditional gradient (default) and mirror descent.

Both minimise ``J_k(ν) = OT(μ_k, ν)/(2τ) − sE(ν)`` from ``ν = μ_k`` and stop on the same
first-order optimality gap; see :mod:`wflow.jko.oracle` for the gap and why the
conditional gradient is the default.
"""

from __future__ import annotations

import math
from typing import NamedTuple

import numpy as np

from .cost import cost_matrix
from .oracle import _Oracle
from .pot import _POT


class _Inner(NamedTuple):
    nu: np.ndarray
    g: np.ndarray
    LR: float           # [L + R](π) (tracked; exact: transport/(2τ))
    transport: float    # <C, π>
    iters: int
    gap: float
    converged: bool


def _gcg(mu: np.ndarray, gradF, oracle: _Oracle, *, tau: float, eps: float, tol: float,
         max_inner: int) -> _Inner:
    """Generalised conditional gradient on plans with first marginal ``μ`` (see module)."""
    nu = mu.copy()
    g = gradF(nu)
    # initial plan diag(μ): no transport; KL(diag μ | μ ⊗ α) = −Σ μ_i log α_i
    supp = mu > 0
    LR = (eps / (2.0 * tau)) * float(-(mu[supp] @ oracle.geo.log_alpha[supp])) if eps else 0.0
    transport = 0.0
    gap = math.inf
    it = 0
    for it in range(max_inner + 1):
        nuS, valS, trS = oracle(mu, g)
        gap = (LR - float(g @ nu)) - valS
        if gap <= tol:
            return _Inner(nu, g, LR, transport, it, max(gap, 0.0), True)
        if it == max_inner:
            break
        d = nuS - nu
        gd = gradF(d)
        q = float(d @ gd)
        gam = 1.0 if q >= 0.0 else min(1.0, gap / (-q))
        LRS = valS + float(g @ nuS)
        nu = nu + gam * d
        np.maximum(nu, 0.0, out=nu)  # round-off only: ν is a convex combination
        g = g + gam * gd
        LR = LR + gam * (LRS - LR)
        transport = transport + gam * (trS - transport)
    return _Inner(nu, g, LR, transport, it, gap, False)


def _mirror(mu: np.ndarray, gradF, pot: _POT, oracle: _Oracle, *, tau: float, eps: float,
            tol: float, max_inner: int, alpha: np.ndarray) -> _Inner:
    """Exponentiated gradient on ``ν`` with the POT potential as the gradient of ``OT``.

    Stopping rule: the same first-order gap as the GCG, evaluated with the POT value of
    ``OT(μ, ν)``: ``OT/(2τ) − <g, ν> − min_S([L + R](S) − <g, ν_S>) >= 0``. (The
    Frank–Wolfe gap ``<G, ν> − min_j G_j`` of the potential is linear in the distance to
    the minimiser and, for ``emd``, depends on the subgradient POT returns at a kink.)
    """
    rows = np.flatnonzero(mu > 0)

    def ot_eval(nu):
        if eps == 0.0:
            val, grad = pot.emd(mu, nu)
            return val, grad, val
        val, grad, P, cols = pot.sinkhorn(mu, nu)  # ν > 0 here: cols = all cells
        C = cost_matrix(pot.geo.x, pot.bhat, mean=pot.opts.mobility_mean, rows=rows)
        return val, grad, float(np.sum(P * C))

    # multiplicative updates cannot grow empty cells: start inside the simplex
    nu = 0.999 * mu + 0.001 * alpha
    val, grad, tr = ot_eval(nu)
    g = gradF(nu)
    J = val / (2.0 * tau) - 0.5 * float(nu @ g)  # F = ½<ν, ∇F(ν)> (F is quadratic)
    eta = 1.0 / max(float(g.max() - g.min()), 1e-300)
    gap = math.inf
    it = 0
    for it in range(max_inner + 1):
        G = grad / (2.0 * tau) - g
        gap = val / (2.0 * tau) - float(g @ nu) - oracle(mu, g)[1]
        if gap <= tol:
            return _Inner(nu, g, val / (2.0 * tau), tr, it, max(gap, 0.0), True)
        if it == max_inner:
            break
        for _ in range(60):  # Armijo backtracking on the Bregman (KL) model
            z = -eta * (G - G.min())
            nn = nu * np.exp(z)
            nn /= nn.sum()
            nn = np.maximum(nn, 1e-300)
            nn /= nn.sum()
            v2, gr2, tr2 = ot_eval(nn)
            g2 = gradF(nn)
            J2 = v2 / (2.0 * tau) - 0.5 * float(nn @ g2)
            kl = float(nn @ (np.log(nn) - np.log(nu)))
            if J2 <= J + float(G @ (nn - nu)) + kl / eta + 1e-14 * abs(J):
                break
            eta *= 0.5
        nu, val, grad, tr, g, J = nn, v2, gr2, tr2, g2, J2
        eta *= 1.5
    return _Inner(nu, g, val / (2.0 * tau), tr, it, gap, False)
