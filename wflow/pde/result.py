"""The result of :func:`wflow.pde.solve_pde` (:class:`PDEResult`, on the shared solver base)."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import numpy as np

from ..results import SolverResult

__all__ = ["PDEResult"]


@dataclass(frozen=True)
class PDEResult(SolverResult):
    """Result of :func:`solve_pde` (the fields of :class:`~wflow.results.SolverResult`, and).

    Attributes
    ----------
    status : Status
        ``SUCCESS``; ``INACCURATE`` (finite, mass conserved, positive, but the
        chain-rule residual exceeds its tolerance, or the error estimate exceeds the requested
        ``rtol``/``atol``, see :mod:`wflow.status`); ``COMPLETED`` (no check judged: a
        prescribed velocity or ``balance = false``, without ``rtol``);
        ``MAX_STEPS``; or ``FAILED`` (non-finite values, collapsed step, broken
        conservation or positivity). ``message`` says why.
    message : str
    options : PDEOptions
    order : int
        Order in ``dt`` of the time integrator (the space order is ``options.order``).
    t : (S,) array
        Output times reached.
    rho : (S, M) array
        Cell densities at the output times (mesh's original cell order).
    mass : (S,) array
        ``Σ_K ρ_K |K|`` at the output times.
    history : dict of arrays
        Diagnostics at the output times (``(S,)`` scalars, ``(S, H)`` per head).
    steps : dict of arrays
        Per accepted step: ``t``, ``dt``, (with ``balance``) the energy integrands and (with
        ``rtol``/``atol``) ``error_norm``, the step's local-error norm (``1`` = the tolerance).
    balance : dict
        Final balance terms and residuals (``chain``, ``edi``, ``g2``; see
        :class:`~wflow.diagnostics.BalanceAccumulator`). With token diffusion ``edi`` and
        ``g2`` are absent and ``free_edi`` (or ``free_edi_defect`` for softmax heads),
        ``free_dF`` and ``free_dissipation_int`` report the free-energy EDI.
    centroids, areas : arrays
        Flat centroids ``(M, 3)`` and areas ``(M,)`` of the cells (original order).
    stats : dict
        Steps, rejected steps, velocity evaluations, timings, positivity and mass errors;
        with ``rtol``/``atol``: ``accepted_steps``, ``error_rejected_steps`` (by the error
        controller), ``error_estimate`` (``Σ_n`` local-error norms: the global error at
        ``T`` in units of the tolerance, ``≤ 1`` to meet it), ``rtol``, ``atol``.
    sign : int
        ``+1`` ascent / ``−1`` descent for value-aligned symmetric heads, else 0.
    checks : dict
        Accuracy checks behind the status (``"chain"``, see
        :func:`wflow.status.chain_check`; with ``rtol``/``atol`` ``"tolerance"``: the error
        estimate against the tolerance, ``passed``, and ``dt_meeting``, the step the remedy
        names); empty without the running balance or a tolerance.
    """

    t: np.ndarray
    rho: np.ndarray
    mass: np.ndarray
    steps: dict[str, np.ndarray]
    balance: dict[str, float]
    centroids: np.ndarray
    areas: np.ndarray
    sign: int = 0

    @property
    def masses(self) -> np.ndarray:
        """Cell masses ``ρ_K |K|`` at the output times, ``(S, M)``."""
        return self.rho * self.areas[None, :]

    def summary(self) -> dict[str, Any]:
        """JSON-ready summary (final diagnostics, balance, stats)."""
        final = {k: np.asarray(v[-1]).tolist() for k, v in self.history.items() if len(v)}
        return {"status": self.status, "message": self.message,
                "options": {k: getattr(self.options, k) for k in self.options.__dataclass_fields__},
                "integrator": self.options.integrator, "t_final": float(self.t[-1]),
                "final": final, "balance": self.balance, "checks": self.checks,
                "stats": self.stats, "sign": self.sign}
