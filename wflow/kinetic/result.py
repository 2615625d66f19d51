"""The result of :func:`wflow.kinetic.solve_kinetic` (:class:`KineticResult`, shared base)."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import numpy as np

from ..results import SolverResult

__all__ = ["KineticResult"]


@dataclass(frozen=True)
class KineticResult(SolverResult):
    """Result of :func:`solve_kinetic` (the fields of :class:`~wflow.results.SolverResult`, and).

    Shapes: ``n`` output times, ``S`` slices, ``M`` cells.

    Attributes
    ----------
    status : Status
        ``SUCCESS`` (with ``pde.rtol``/``atol``: the time-error estimate within the
        tolerance); ``INACCURATE`` (it is not; the message names the ``dt`` that would
        meet it); ``COMPLETED`` (no tolerance: nothing judged the accuracy);
        ``MAX_STEPS``; or ``FAILED`` (non-finite values, collapsed step, the mass of a
        slice not conserved to ``1e-10`` relative, a negative density).
    options : KineticOptions
    order : int
        Order in ``dt`` of the time integrator (space: ``options.pde.order``; position:
        2 in ``1/S`` with the midpoint quadrature, see :mod:`wflow.kinetic.slices`).
    t : (n,) array
        Output times reached.
    s : (S,) array
        Slice centres ``s_k = (k + ½)/S``.
    rho : (n, S, M) array
        The probability density of each slice, ``ρ(t, s_k, ·)`` (``Σ_K ρ_K |K| = 1``; the
        slice's cell masses are ``ρ |K| / S``, :attr:`masses`).
    mass : (n, S) array
        Mass of each slice, ``Σ_K m_{kK}`` (``1/S`` to round-off).
    history : dict of arrays
        At the output times: ``mean`` ``(n, S, 3)``, the first moment ``∫ x ρ(s_k, x) dx``
        of each slice (at the projected centroids); ``rho_min``, ``rho_max`` ``(n, S)``.
    steps : dict of arrays
        Per accepted step: ``t``, ``dt`` (with ``pde.rtol``/``atol``: ``error_norm``, the
        step's local-error estimate in units of the tolerance).
    centroids, areas : arrays
        Flat centroids ``(M, 3)`` and areas ``(M,)`` of the cells (original order).
    stats : dict
        ``steps``, ``rejected_steps``, ``velocity_evals`` (evaluations of all ``S``
        velocities), ``kernel_calls`` (``S`` per evaluation), ``mass_error_max`` (largest
        relative drift of a slice's mass), ``rho_min``, ``dt_min``, ``dt_max``, timings,
        ``cells``, ``slices``, ``ranks``, ``kernel`` (back-end log); with a tolerance
        ``rtol``, ``atol``, ``adaptive``, ``accepted_steps``, ``error_rejected_steps`` and
        ``error_estimate`` (the sum of the steps' error norms, ``≤ 1``: met).
    checks : dict
        ``tolerance``: the verdict against ``pde.rtol``/``atol``
        (:func:`wflow.pde.accuracy.tolerance_check`), or, without one, ``judged: False``
        and its ``reason``.
    """

    t: np.ndarray
    s: np.ndarray
    rho: np.ndarray
    mass: np.ndarray
    steps: dict[str, np.ndarray]
    centroids: np.ndarray
    areas: np.ndarray

    @property
    def masses(self) -> np.ndarray:
        """Cell masses ``ρ_K |K| / S`` of every slice at the output times, ``(n, S, M)``."""
        return self.rho * self.areas[None, None, :] / self.s.size

    def summary(self) -> dict[str, Any]:
        """JSON-ready summary (status, the slices' diagnostics at the last time, stats).

        ``final_slices``: each history entry at the last output time, one value per slice
        (``mean`` ``(S, 3)``, ``rho_min`` and ``rho_max`` ``(S,)``).
        """
        final = {k: np.asarray(v[-1]).tolist() for k, v in self.history.items() if len(v)}
        return {"status": self.status, "message": self.message, "slices": int(self.s.size),
                "t_final": float(self.t[-1]) if self.t.size else None,
                "final_slices": final, "stats": self.stats}
