"""The JKO run's result and its verdicts: :class:`JKOResult`, :func:`judge`, :func:`free_balance`.

Part of :mod:`wflow.jko` (beside :mod:`wflow.jko.solver`, which fills them): the locking,
empty-cell and EDI verdicts of a finished run (:mod:`wflow.status`), and the free-energy
balance of a run with token diffusion ``D > 0`` (THEORY §8).
"""

from __future__ import annotations

import logging
import warnings
from dataclasses import dataclass
from typing import Any

import numpy as np

from ..attention.heads import Attention
from ..attention.kinds import get_kind
from ..results import SolverResult
from ..status import JKO_EDI_RTOL, Status, relative_check, worst_status
from .options import JKOOptions, JKOWarning
from .schemes import SCHEMES

__all__ = ["JKOResult", "judge", "free_balance"]

logger = logging.getLogger(__name__)


@dataclass(frozen=True)
class JKOResult(SolverResult):
    """Result of :func:`solve_jko` (the fields of :class:`~wflow.results.SolverResult`, and).

    Attributes
    ----------
    status : Status
        ``SUCCESS``; ``NOT_CONVERGED`` (some inner solve missed its tolerance; the
        sequence is complete and reported); ``INACCURATE`` (the summed EDI residual
        exceeds :data:`wflow.status.JKO_EDI_RTOL` of the dissipation, or, with
        ``rtol``/``atol``, the error estimate of ``ρ(T)`` exceeds the tolerance: the
        message names the ``tau`` that would meet it); ``LOCKED``
        (every step left the measure unchanged although the slope was not zero); or
        ``FAILED``. ``message`` gives every reason (also partial locking).
    message : str
    options : JKOOptions
    order : int
        1: the scheme is first order in ``τ``.
    t : (K+1,) array
        ``t_k = kτ``.
    masses : (K+1, M) array
        Cell masses ``μ_k``.
    rho : (K+1, M) array
        Densities ``μ_k / |K|``.
    history : dict of arrays
        Per level ``k`` (first axis ``K+1``; step quantities of the step *into* ``t_k``,
        0 at ``t_0``): ``E``, ``E_h`` (K+1, H), ``dEdt_w``, ``slope2``, ``G2``,
        ``speed2 = W²/τ²``, ``W2sq``, ``W2``, ``ot_value``, ``inner_iters``, ``gap``,
        ``gap_rel``, ``converged``, ``locked`` (1: the step left ``μ`` unchanged although
        the slope was not zero), ``edi_step``, ``jko_ineq`` (``s[E(μ_{k+1}, t_{k+1})
        − E(μ_k, t_{k+1})] − W²/(2τ)``, ``>= 0`` up to the gap), ``balance_edi``,
        ``mass``, ``support``, ``rho_max``, ``bhat_mean``, ``step_time``; with
        ``rtol``/``atol`` also ``tau`` (the step into ``t_k``) and ``error_norm`` (the
        local-error norm of the step pair ending at ``t_k``, units of the tolerance).
    balance : dict
        :class:`~wflow.diagnostics.BalanceAccumulator` residuals (``dE``, ``work``,
        ``dissipation``, ``chain``, ``edi``, ...).
    centroids, areas : arrays
        Projected centroids ``(M, 3)`` and areas ``(M,)``.
    stats : dict
        Steps, inner iterations, locked steps, timings, candidate pairs, ``ε``.
    sign : int
        ``+1`` ascent / ``−1`` descent.
    checks : dict
        ``"edi"``: the relative summed EDI residual against its tolerance;
        ``"locked_steps"``: how many steps were locked (history column ``locked``);
        with ``rtol``/``atol``, ``"tolerance"``: the error estimate of ``ρ(T)`` against
        the tolerance (:mod:`wflow.jko.accuracy`), and in ``stats`` ``rtol``, ``atol``,
        ``adaptive``, ``accepted_steps``, ``error_rejected_steps``, ``error_estimate``.
    """

    t: np.ndarray
    masses: np.ndarray
    rho: np.ndarray
    balance: dict[str, float]
    centroids: np.ndarray
    areas: np.ndarray
    sign: int = 0

    def summary(self) -> dict[str, Any]:
        """JSON-ready summary (final diagnostics, balance, checks, stats, options)."""
        final = {k: np.asarray(v[-1]).tolist() for k, v in self.history.items() if len(v)}
        return {"status": self.status, "message": self.message,
                "options": {k: getattr(self.options, k)
                            for k in self.options.__dataclass_fields__},
                "t_final": float(self.t[-1]), "final": final, "balance": self.balance,
                "checks": self.checks, "stats": self.stats, "sign": self.sign}




def free_balance(history: dict, tau: float, attn: Attention) -> dict[str, float]:
    """The run's free-energy EDI of ``F_D = D H − sE`` (THEORY §8), token diffusion ``D > 0``.

    ``free_edi = Σ_k edi^F_k``, each step's ``F_{k+1} − F_k + (τ/2)(I_h(m^k) + I_h(m^{k+1}))``
    at the heads of ``t_{k+1}`` (:func:`wflow.jko.fv.fv_step`); ``free_dF = F(T) − F(0)``;
    ``free_dissipation_int = Σ_k (τ/2)(I_h(m^k) + I_h(m^{k+1}))``, the trapezoid of the
    relative Fisher information. For a normalised kind (softmax) the split step's plain
    entropy metric is not the model's gradient flow of ``F_D``: the residual is
    ``free_edi_defect``, a property of the model, never judged (as the PDE's).
    """
    fi = np.asarray(history["free_fisher_h"], dtype=float)
    F = np.asarray(history["free_energy"], dtype=float)
    key = "free_edi_defect" if get_kind(attn.kind).normalised else "free_edi"
    return {key: float(np.sum(history["free_edi_step"][1:])),
            "free_dF": float(F[-1] - F[0]),
            "free_dissipation_int": _trapezoid(history, tau, fi)}


def _trapezoid(history: dict, tau: float, f: np.ndarray) -> float:
    """``Σ_k (τ_k/2)(f_k + f_{k+1})``: ``τ`` fixed, or the steps of ``history["tau"]``."""
    if "tau" in history:  # error control: the controller's steps
        return float(0.5 * np.sum(np.asarray(history["tau"][1:]) * (f[1:] + f[:-1])))
    return float(0.5 * tau * np.sum(f[1:] + f[:-1]))


def judge(bal: dict, history: dict, n_locked: int, status: str, message: str,
           opts: JKOOptions, attn: Attention | None = None) -> tuple[str, str, dict]:
    """Locking and EDI status of a finished JKO run (see :mod:`wflow.status`).

    * every step locked: ``"locked"``; some: a warning, and the count in the message;
    * ``Σ_k |edi_k| / dissipation > JKO_EDI_RTOL``: ``"inaccurate"``. The per-step
      residuals are summed in absolute value: the time error and the error of snapping
      the transported mass to the cells have opposite signs and would otherwise cancel
      by chance. First order in ``τ`` (hence ``0.1^1``); measured on the main job's
      default: 0.009 at ``τ|v|_max ≈ 3h``, 0.12 at ``1.2h`` (near the locking plateau),
      1 when every step is locked.
    """
    scheme = SCHEMES.resolve(opts.scheme)
    steps = len(history["E"]) - 1
    reasons = [message] if message else []
    checks: dict[str, Any] = {}
    if n_locked:
        fr = np.asarray(history["moved_fraction"][1:])
        lk = np.asarray(history["locked"][1:]) > 0
        what = (f"{n_locked} of {steps} JKO steps locked: they moved less than "
                f"jko.lock_fraction = {opts.lock_fraction:g} of the first-order predicted "
                f"transport τ²½(|∂E|²_k + |∂E|²_k+1) (moved fractions of the locked steps: "
                + ", ".join(f"{v:.2f}" for v in fr[lk][:8]) + ("…" if lk.sum() > 8 else "")
                + "); " + scheme.lock_advice)
        warnings.warn(f"jko: {what}", JKOWarning, stacklevel=3)
        logger.warning("jko: %s", what)
        status = worst_status(status, Status.LOCKED if n_locked == steps else Status.INACCURATE)
        reasons.append(what)
    empty = float(np.max(history["empty"])) if "empty" in history else 0.0
    checks["empty_cells_max"] = int(empty)
    if empty:
        what = (f"up to {int(empty)} cells empty (mass < 1e-9 of the initial mass of the "
                "cell) at some t_k: the density speckles")
        reasons.append(what)
        logger.warning("jko: %s", what)
        if scheme.empty_cells_fail:  # e.g. proven impossible for the FV step
            status = worst_status(status, Status.FAILED)
    check = relative_check(
        "JKO EDI", float(np.sum(np.abs(history["edi_step"][1:]))), bal["dissipation"],
        float(np.max(np.abs(history["E"]))), tolerance=JKO_EDI_RTOL,
        rule=f"Σ_k |edi_k| / Σ_k (W²/2τ + τ/4(|∂E|²_k + |∂E|²_k+1)); tolerance "
             f"{JKO_EDI_RTOL:g} for the first-order scheme (τ = {opts.tau:g}, "
             f"ε = {opts.epsilon:g})")
    checks["edi"] = check.as_dict()
    checks["locked_steps"] = n_locked
    if opts.diffusion > 0:
        # the EDI of E alone is not the noisy scheme's balance: recorded, not judged. The
        # free-energy EDI of F_D is measured and recorded, not judged either (as the PDE's
        # balance.free_edi): on a fixed mesh it carries a spatial error that does not vanish
        # with τ (measured, 720 cells, D = 0.05: 0.152 at τ = 0.05, 0.142 at τ = 0.025), so
        # a fixed tolerance would judge the mesh, not the step; it vanishes under joint
        # refinement (tests/test_jko_entropy.py). softmax: a defect of the model.
        checks["edi"] = {**checks["edi"], "judged": False,
                         "reason": "token diffusion D > 0: the free-energy EDI applies"}
        check = relative_check(
            "JKO free-energy EDI", float(np.sum(np.abs(history["free_edi_step"][1:]))),
            _trapezoid(history, opts.tau, np.asarray(history["free_fisher_h"], dtype=float)),
            float(np.max(np.abs(history["free_energy"]))), tolerance=JKO_EDI_RTOL,
            rule=f"Σ_k |edi^F_k| / Σ_k (τ/2)(I_h(m^k) + I_h(m^k+1)); tolerance "
                 f"{JKO_EDI_RTOL:g} for the first-order split step (τ = {opts.tau:g}, "
                 f"D = {opts.diffusion:g})")
        normalised = attn is not None and get_kind(attn.kind).normalised
        checks["free_edi"] = {**check.as_dict(), "judged": False, "reason": (
            "softmax heads: the plain Laplacian is not the gradient flow of F_D (a defect "
            "of the model)" if normalised else "a discretisation error in h and τ "
            "(first order under joint refinement), reported, not judged at a fixed mesh")}
    if not check.passed and checks.get("free_edi", {}).get("judged", True):
        status = worst_status(status, Status.INACCURATE)
        reasons.append(check.failure())
    return status, "; ".join(reasons), checks
