"""POT evaluations for the JKO scheme: OT values, potentials and the cross-checks.

POT is used for the OT values and potentials: ``verify`` recomputes each step's
``W²`` with ``ot.emd2`` (dense cost, or ``ot.emd`` on the sparse candidate graph beyond
``dense_ot_max_cells``) resp. ``OT_ε`` with the log-domain ``ot.sinkhorn`` (started
from the GCG scalings), and the optimality gap with that POT value (``gap_pot``).
``inner = "mirror"`` is the prescribed alternative: exponentiated gradient on ``ν``
with the POT potential as the gradient (``ot.emd`` with ``potentials_init`` or the
log-domain ``ot.sinkhorn`` with ``warmstart``; target potential ``ε log(v/α)``, both
warm-started across inner iterations and steps), Armijo steps, and the same gap with
the POT value as stopping rule. For the entropic problem it converges to the GCG
minimiser (test); for the exact one it stalls at the kinks and reports it.
"""

from __future__ import annotations

import warnings

import numpy as np

from .cost import _Geometry, cost_matrix, pair_mobility
from .options import JKOOptions, JKOWarning


class _POT:
    """POT evaluations of ``OT(μ, ν)`` and its gradient in ``ν`` (dense or sparse cost)."""

    def __init__(self, geo: _Geometry, bhat: np.ndarray, opts: JKOOptions, eps: float,
                 warm: dict) -> None:
        self.geo, self.bhat, self.opts, self.eps, self.warm = geo, bhat, opts, eps, warm

    def _cost(self, rows: np.ndarray, sparse: bool = False):
        """Dense cost rows, or the cost on the candidate graph of the last oracle call.

        The graph (used with ``sparse`` beyond ``dense_ot_max_cells``) holds the support
        of the GCG plan, so the restricted exact OT equals the full one when the GCG has
        converged.
        """
        import scipy.sparse as sp

        M = self.geo.M
        pairs = self.geo.pairs
        if (M <= self.opts.dense_ot_max_cells or not sparse or pairs is None
                or np.any(pairs.radii[rows] < 0)):
            return cost_matrix(self.geo.x, self.bhat, mean=self.opts.mobility_mean,
                               rows=rows)
        rr = np.repeat(np.arange(M), np.diff(pairs.indptr))
        C = pairs.d2 / pair_mobility(self.bhat[rr], self.bhat[pairs.J],
                                     self.opts.mobility_mean)
        full = sp.csr_array((C + 1e-300, pairs.J, pairs.indptr), shape=(M, M))
        return full[rows]

    def emd(self, mu: np.ndarray, nu: np.ndarray, sparse: bool = False
            ) -> tuple[float, np.ndarray]:
        """``W²`` and the target potential (``ot.emd``, warm-started potentials)."""
        import ot

        rows = np.flatnonzero(mu > 0)
        C = self._cost(rows, sparse)
        init = self.warm.get("emd") if self.opts.warm_start else None
        if init is not None and init[0].shape != (rows.size,):
            init = None
        with warnings.catch_warnings():
            warnings.simplefilter("ignore", UserWarning)
            _, log = ot.emd(mu[rows], nu, C, numItermax=self.opts.emd_max_iter, log=True,
                            potentials_init=init)
        if log.get("result_code", 1) != 1:
            raise FloatingPointError(f"ot.emd: {log.get('warning', 'failed')}")
        u, v = np.asarray(log["u"]), np.asarray(log["v"])
        self.warm["emd"] = (u, v)
        return float(log["cost"]), v

    def sinkhorn(self, mu: np.ndarray, nu: np.ndarray, init: tuple | None = None
                 ) -> tuple[float, np.ndarray, np.ndarray, np.ndarray]:
        """``OT_ε(μ, ν)`` relative to ``μ ⊗ α`` (log-domain ``ot.sinkhorn``, warm-started).

        Returns ``(value, grad, plan, cols)``: the gradient ``ε log(v/α)`` of ``OT_ε`` in
        ``ν`` on the support ``cols`` of ``ν`` (up to a constant) and the plan on
        ``supp μ × cols``.
        """
        import ot

        rows = np.flatnonzero(mu > 0)
        cols = np.flatnonzero(nu > 0)
        C = cost_matrix(self.geo.x, self.bhat, mean=self.opts.mobility_mean, rows=rows,
                        cols=cols)
        if init is None and self.opts.warm_start:
            init = self.warm.get("sinkhorn")
        if init is not None and (init[0].shape != (rows.size,) or init[1].shape != (cols.size,)):
            init = None
        with warnings.catch_warnings(record=True) as wlist:
            warnings.simplefilter("always")
            P, log = ot.sinkhorn(mu[rows], nu[cols], C, self.eps, method="sinkhorn_log",
                                 numItermax=self.opts.sinkhorn_max_iter,
                                 stopThr=self.opts.sinkhorn_tol, log=True, warmstart=init)
        if any("converge" in str(w.message) for w in wlist):
            warnings.warn("jko: log-domain Sinkhorn did not reach jko.sinkhorn_tol within "
                          "jko.sinkhorn_max_iter iterations", JKOWarning, stacklevel=3)
        lu, lv = np.asarray(log["log_u"]), np.asarray(log["log_v"])
        self.warm["sinkhorn"] = (lu, lv)
        la = self.geo.log_alpha[cols]
        pos = P > 0
        ref = np.broadcast_to(np.log(mu[rows])[:, None] + la[None, :], P.shape)
        kl = float(np.sum(P[pos] * (np.log(P[pos]) - ref[pos])))
        val = float(np.sum(P * C)) + self.eps * kl
        return val, self.eps * (lv - la), P, cols
