"""The linear minimisation oracle of the generalised conditional gradient (JKO inner solver).

``W²(μ_k, ·)`` is convex but *piecewise linear* on the simplex and ``E`` is convex for
positive-definite kernels, so ``J_k`` is concave on every linear piece: its minimisers
sit on kinks where the ``emd`` potential is only one subgradient, and mirror descent
with it does not reach a vanishing optimality gap. The default inner solver
(``inner = "gcg"``) is therefore the *generalised conditional gradient* (Frank–Wolfe
for a convex-plus-smooth objective) on the equivalent semi-relaxed problem over plans
with first marginal ``μ_k`` and free second marginal ``ν = πᵀ1``::

    min_π  L(π) + R(π) − sE(πᵀ1),   L = <C, π>/(2τ),   R = (ε/2τ) KL(π | μ ⊗ α).

Each iteration linearises ``sE`` at ``ν`` (gradient ``g``) and solves the rest in
closed form row by row (the linear minimisation oracle): exact — row ``i`` sends all
of ``μ_i`` to ``argmin_j C_ij/(2τ) − g_j``; entropic — row ``i`` is the Gibbs
distribution ``∝ α_j exp(−(C_ij − 2τ g_j)/ε)``. The step ``γ ∈ [0, 1]`` minimises the
quadratic upper model exactly. The *optimality gap*

    gap = [L + R](π) − <g, ν> − min_S ([L + R](S) − <g, ν_S>)  >= 0

is zero exactly at first-order stationary points (``2τ g`` is then an optimal dual
potential of ``OT(μ_k, ν)``: the first-order condition of ``J_k`` in ``ν`` with the
OT potential as the gradient of ``W²``); for the exact problem it equals
``1/(2τ)`` times the primal–dual gap of that potential, so the transport cost of the
plan *is* ``W²_{b̂}(μ_k, μ_{k+1})`` to within ``2τ · gap``. Stop when
``gap <= gap_rtol · max(τ |∂E|²(μ_k), ...)`` (the energy the step is expected to
dissipate). The objective decreases monotonically from ``ν = μ_k``, so
``sE(μ_{k+1}) − sE(μ_k) >= W²/(2τ)`` at the new time whatever the iteration count:
energy monotonicity holds by construction. Candidate targets of row ``i`` are limited
to a geodesic ball whose radius is *proved* to contain the minimiser,
``r_i² = b̂_max (2τ (g_max − g_i) + ε(40 + log α_max/α_min))`` (entropic: Gibbs weights
below ``e^{-40}`` of the row maximum are dropped); the pairs are found from row blocks
of inner products ``<ĉ_i, ĉ_j> >= cos r_i − 16 eps`` (BLAS; the slack absorbs the rounding
of ``<ĉ_i, ĉ_i>``, and every row contains its own cell, see
:func:`~wflow.jko.cost.candidate_block`) and cached across iterations and,
with ``warm_start``, steps (rebuilt with a 30 % margin when a radius grows); beyond
``max_pairs`` the row blocks are rescanned at every call. Memory is ``O(pairs)`` plus
``O(block · M)``, never an ``M × M`` array (except the dense POT cross-checks).
"""

from __future__ import annotations

import math

import numpy as np

from .cost import _Geometry, candidate_block, pair_mobility

__all__ = [
    "TRUNC",
]

#: Entropic truncation: Gibbs weights below ``e^{-TRUNC}`` of the row maximum are dropped.
TRUNC = 40.0


class _Oracle:
    """Linear minimisation oracle of the semi-relaxed (entropic) transport term.

    Row ``i`` only needs the targets ``j`` with ``d_ij² <= r_i²``,
    ``r_i² = b̂_max (2τ (g_max − g_i) + ε(TRUNC + log α_max/α_min))``: any other target is
    worse than staying put (exact) resp. has a Gibbs weight below ``e^{-TRUNC}`` of the
    row's largest (entropic). Candidates come from the cached k-d tree pair list when it
    is small enough, else from row blocks of BLAS inner products masked by
    ``<ĉ_i, ĉ_j> >= cos r_i`` (memory ``O(block · M)``). Rows without mass are skipped.
    """

    def __init__(self, geo: _Geometry, bhat: np.ndarray, tau: float, eps: float,
                 mean: str) -> None:
        self.geo, self.bhat, self.tau, self.eps, self.mean = geo, bhat, tau, eps, mean
        self.bmax = float(bhat.max())
        lr = float(geo.log_alpha.max() - geo.log_alpha.min())
        self.slack = eps * (TRUNC + lr)
        self.n_pairs = 0
        self.last_lse = np.zeros(geo.M)  # entropic: row log-normalisers of the last call

    def row_radii(self, g: np.ndarray) -> np.ndarray:
        """Proved candidate radii ``r_i`` (radians, capped at π).

        π for all rows when ``neighbourhood`` is off: the unrestricted scan, for validation.
        """
        if not self.geo.opts.neighbourhood:
            return np.full(g.size, math.pi)
        r2 = self.bmax * (2.0 * self.tau * (float(g.max()) - g) + self.slack)
        return np.minimum(np.sqrt(np.maximum(r2, 0.0)), math.pi)

    def __call__(self, mu: np.ndarray, g: np.ndarray) -> tuple[np.ndarray, float, float]:
        """Rows ``S_i`` minimising ``<C/(2τ) − g, S_i> + (ε/2τ) KL(S_i | μ_i α)``.

        Returns ``(ν_S, value, transport)`` with ``value = [L + R](S) − <g, ν_S>`` and
        ``transport = <C, S>``.
        """
        rows = np.flatnonzero(mu > 0)
        radii = self.row_radii(g)
        nuS = np.zeros(mu.size)
        acc = [0.0, 0.0]
        self.n_pairs = 0
        pairs = self.geo.candidates(rows, radii)
        if pairs is not None:
            self._rows(rows, pairs.indptr, pairs.J, pairs.d2, mu, g, nuS, acc)
            return nuS, acc[0], acc[1]
        # too many candidates to keep: masked row blocks, recomputed at every call
        B = max(1, (1 << 22) // mu.size)
        for b0 in range(0, rows.size, B):
            blk = rows[b0:b0 + B]
            rr, J, d2 = candidate_block(self.geo.x, blk, radii[blk])  # sorted by row
            indptr = np.searchsorted(rr, np.arange(blk.size + 1))
            self._rows_local(blk, indptr, J, d2, mu, g, nuS, acc)
        return nuS, acc[0], acc[1]

    def _rows(self, rows, indptr, J, d2, mu, g, nuS, acc) -> None:
        """LMO on the global CSR candidate list restricted to ``rows``."""
        counts = np.diff(indptr)[rows]
        sel = np.repeat(indptr[rows], counts) + (
            np.arange(counts.sum()) - np.repeat(np.cumsum(counts) - counts, counts))
        lind = np.concatenate([[0], np.cumsum(counts)])
        self._rows_local(rows, lind, J[sel], d2[sel], mu, g, nuS, acc)

    def _rows_local(self, rows, indptr, J, d2, mu, g, nuS, acc) -> None:
        """LMO for ``rows`` with candidates ``J[indptr[k]:indptr[k+1]]`` of row ``rows[k]``."""
        n = rows.size
        loc = np.repeat(np.arange(n), np.diff(indptr))
        ri = rows[loc]
        C = d2 / pair_mobility(self.bhat[ri], self.bhat[J], self.mean)
        self.n_pairs += C.size
        starts = indptr[:-1]
        m = mu[rows]
        if self.eps == 0.0:
            G = C / (2.0 * self.tau) - g[J]
            rmin = np.minimum.reduceat(G, starts)
            hit = np.flatnonzero(G <= rmin[loc])
            _, first = np.unique(loc[hit], return_index=True)
            pick = hit[first]
            nuS += np.bincount(J[pick], weights=m, minlength=nuS.size)
            acc[0] += float(m @ rmin)
            acc[1] += float(m @ C[pick])
            return
        L = -(C - 2.0 * self.tau * g[J]) / self.eps + self.geo.log_alpha[J]
        rmax = np.maximum.reduceat(L, starts)
        P = np.exp(L - rmax[loc])
        Zr = np.add.reduceat(P, starts)
        P /= Zr[loc]
        lse = rmax + np.log(Zr)
        self.last_lse[rows] = lse
        w = m[loc] * P
        nuS += np.bincount(J, weights=w, minlength=nuS.size)
        acc[0] += -(self.eps / (2.0 * self.tau)) * float(m @ lse)
        acc[1] += float(w @ C)
