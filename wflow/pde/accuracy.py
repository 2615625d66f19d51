"""The PDE's accuracy: the step-doubling estimate, the tolerance and chain-rule checks.

Part of :mod:`wflow.pde` (the solver's error control): :func:`doubled_step`
takes one step and two half steps and measures the kept solution's error with
:func:`~wflow.infra.accuracy.richardson_error` in :func:`~wflow.infra.accuracy.error_norm`;
:func:`tolerance_check` judges a run by its estimate against the requested tolerance and
names the step that would meet it; :func:`accuracy_check` is the chain-rule check.
:func:`controlled_step` is one step under the PI controller (:func:`judge_step`). The
finite-volume solvers share them: the PDE's and the kinetic solver's (all slices at once).
A run that nothing judges (no tolerance, no chain rule) ends ``completed``
(:func:`unestimated`, :func:`unestimated_note` for the note before it).
"""

from __future__ import annotations

import logging
import math
from typing import Any

import numpy as np

from ..infra.accuracy import StepController, error_norm, richardson_error
from ..status import Check, Status, balance_order, judge_steps, unjudged_status
from .integrators import TIME_INTEGRATORS
from .options import PDEOptions

__all__ = ["doubled_step", "controlled_step", "judge_step", "tolerance_check", "accuracy_check",
           "time_order", "unestimated", "unestimated_note", "NO_TIME_ESTIMATE", "RTOL_REMEDY"]

#: Why a finite-volume run without ``pde.rtol``/``atol`` has no time-error estimate.
NO_TIME_ESTIMATE = ("no estimate of the time-discretisation error (pde.rtol and pde.atol "
                    "unset: fixed steps)")
#: How to have such a run judged.
RTOL_REMEDY = ("set pde.rtol (and pde.atol) for the step-doubling estimate and error control "
               "(wflow.pde.accuracy)")

logger = logging.getLogger(__name__)


def doubled_step(run: Any, m_glob: np.ndarray, net0: np.ndarray, out0: np.ndarray, t: float,
                 dt: float, theta: Any, rng: np.random.Generator | None
                 ) -> tuple[np.ndarray | None, float, float, Any]:
    r"""One step of size ``dt`` and two of ``dt/2``, with the step-doubling estimate.

    Returns ``(owned masses of the two half steps or None, smallest stage bound,
    error norm, θ(t + dt))``. The estimate of the kept solution's error is
    :func:`~wflow.infra.accuracy.richardson_error` at the integrator's order ``q``,
    ``e = (ρ_h − ρ_{h/2,h/2})/(2^q − 1)`` on the densities, measured by
    :func:`~wflow.infra.accuracy.error_norm` over all ranks' owned cells (an exact sum:
    the same number for any rank count); ``inf`` when a step broke positivity.

    ``run`` is a finite-volume run (the PDE's, or the kinetic solver's with every slice):
    ``schedule``, ``tol``, ``integrator``, ``fv.comm``, and ``try_step(m_glob, net0, out0,
    t, dt, (θ_0, θ_½, θ_1))``, ``stage_rates(m_glob, t, θ)``, ``gather(m_own)``,
    ``owned(m_glob)`` and ``density(m_own)`` (owned masses to densities).
    """
    sch = run.schedule
    assert run.tol is not None
    th_mid = th_new = th_q = th_h = th_3q = th_2 = None
    if sch is not None:
        th_mid, th_new = sch.advance(theta, t, dt, rng)
        th_q, th_h = sch.advance(theta, t, 0.5 * dt, rng)
        th_3q, th_2 = sch.advance(th_h, t + 0.5 * dt, 0.5 * dt, rng)
    full, b0 = run.try_step(m_glob, net0, out0, t, dt, (theta, th_mid, th_new))
    if full is None:
        return None, b0, math.inf, th_new
    half, b1 = run.try_step(m_glob, net0, out0, t, 0.5 * dt, (theta, th_q, th_h))
    if half is None:
        return None, min(b0, b1), math.inf, th_new
    g = run.gather(half)
    net1, out1 = run.stage_rates(g, t + 0.5 * dt, th_h)
    two, b2 = run.try_step(g, net1, out1, t + 0.5 * dt, 0.5 * dt, (th_h, th_3q, th_2))
    bmin = min(b0, b1, b2)
    if two is None:
        return None, bmin, math.inf, th_2
    err = richardson_error(run.density(full), run.density(two), run.integrator.order())
    norm = error_norm(err, run.density(run.owned(m_glob)), run.density(two), run.tol,
                      comm=run.fv.comm)
    return two, bmin, norm, th_2


def judge_step(ctrl: StepController, dt: float, err: float, h_ctrl: float, *, t: float,
               T: float) -> tuple[bool, float]:
    """The controller's verdict on a doubled step: ``(accepted, its next proposal)``.

    ``h_ctrl`` is the proposal the step was taken under; a step cut short of it (by an
    output time) does not shrink the proposal when it is accepted.
    """
    limited = dt >= h_ctrl * (1 - 1e-12)
    ok, h_next = ctrl.propose(dt, err)
    if not ok:
        logger.debug("t = %.6g: step %.3e rejected (error %.3g of the tolerance per unit "
                     "time), retrying with %.3e", t, dt, err * T / dt, h_next)
        return False, h_next
    return True, h_next if limited else max(h_ctrl, h_next)


def controlled_step(run: Any, m_glob: np.ndarray, net0: np.ndarray, out0: np.ndarray,
                    t: float, dt: float, theta: Any, rng: np.random.Generator | None,
                    h_ctrl: float, adaptive: bool
                    ) -> tuple[np.ndarray | None, float, float, Any, float, bool]:
    """A doubled step (:func:`doubled_step`) judged by ``run.ctrl`` where ``adaptive``.

    Returns ``(owned masses or None, smallest stage bound, error norm, θ(t + dt), the
    controller's proposal, retry)``: ``retry`` when the controller rejected the step (take
    it again at the proposal); an accepted step's error norm is added to ``run.err_sum``.
    ``None`` masses without ``retry``: a stage broke positivity.
    """
    m_new, bmin, err, th_new = doubled_step(run, m_glob, net0, out0, t, dt, theta, rng)
    if m_new is not None and adaptive:
        ok, h_ctrl = judge_step(run.ctrl, dt, err, h_ctrl, t=t, T=run.span)
        if not ok:
            return None, bmin, err, th_new, h_ctrl, True
    if m_new is not None:
        run.err_sum += err
    return m_new, bmin, err, th_new, h_ctrl, False


def accuracy_check(steps: dict[str, np.ndarray], chain: float, opts: PDEOptions,
              stochastic: bool) -> Check:
    """Chain-rule check of a PDE run (:func:`wflow.status.chain_check`).

    The measured rate ``∫<∇ψ, v> dμ_h`` uses the cell-centred velocity, the solution the
    edge fluxes: the residual carries the spatial error too, so the balance order is
    ``min(time order, spatial order, 2)`` (1 with noisy weights).
    """
    q = 1 if stochastic else balance_order(time_order(opts), opts.order)
    scheme = (f"order {opts.order} in space, {opts.integrator} in time, dt <= {opts.dt:g}"
              + (", Euler–Maruyama weights" if stochastic else ""))
    return judge_steps(steps["t"], steps, chain, order=q, scheme=scheme)


def tolerance_check(run: Any, steps: dict[str, np.ndarray]) -> dict[str, Any]:
    r"""The run judged by its error estimate against the requested tolerance.

    The global-error estimate is the sum of the accepted steps' local-error norms,
    ``Ê = Σ_n ‖e_n‖`` (each in units of the tolerance, :func:`error_norm`): the error at
    ``T`` of a contractive flow is at most ``Ê`` tolerances. Error control keeps
    ``‖e_n‖ ≤ Δt_n/T``, so ``Ê ≤ 1``; fixed steps (``adaptive = False``) may not. As
    ``‖e_n‖ T/Δt_n ∝ Δt_n^q`` (order ``q``), the step that would meet the tolerance is
    the controller's, ``0.9·min_n Δt_n (‖e_n‖ T/Δt_n)^{−1/q}`` over the steps that miss
    it: the remedy named.
    """
    assert run.tol is not None
    q = run.integrator.order()
    est = float(run.err_sum)
    dts, errs = steps["dt"][1:], steps["error_norm"][1:]
    dt_max = float(np.max(dts))
    passed = est <= 1.0
    per_unit = errs * run.span / dts
    miss = per_unit > 1.0
    dt_meet = (0.9 * float(np.min(dts[miss] * per_unit[miss] ** (-1.0 / q)))
               if np.any(miss) else dt_max)
    if est > 1.0:  # the sum too: never propose more than the aggregate's own Δt^q rule
        dt_meet = min(dt_meet, 0.9 * dt_max * est ** (-1.0 / q))
    msg = ""
    if not passed:
        msg = (f"the estimated time-discretisation error is {est:.3g} times the tolerance "
               f"(rtol = {run.tol.rtol:g}, atol = {run.tol.atol:g}) with steps up to "
               f"{dt_max:.3g}; remedy: pde.dt = {dt_meet:.3g} would meet it (or leave "
               "pde.adaptive = true)")
    return {"name": "tolerance", "estimate": est, "passed": passed, "order": q,
            "rtol": run.tol.rtol, "atol": run.tol.atol, "dt_max": dt_max,
            "dt_meeting": dt_meet, "message": msg}


def unestimated(status: Status | str, message: str, checks: dict[str, Any], why: str, *,
                remedy: str = "") -> tuple[Status, str]:
    """A run without a tolerance whose other checks judge nothing: ``completed``.

    Records ``checks["tolerance"]`` as not judged (``why`` no other check applies, and
    :data:`NO_TIME_ESTIMATE`) and returns :func:`wflow.status.unjudged_status` with the
    remedy :data:`RTOL_REMEDY` (and ``remedy``, another way, appended): a ``success`` whose
    every check is unjudged becomes ``completed``; a judged check keeps it.
    """
    checks["tolerance"] = {"name": "tolerance", "judged": False,
                           "reason": f"{why}; {NO_TIME_ESTIMATE}"}
    return unjudged_status(status, message, checks, remedy=RTOL_REMEDY + remedy)


def unestimated_note(why: str, remedy: str = "") -> str:
    """The note a command prints before a run that :func:`unestimated` will end ``completed``."""
    return (f"no accuracy check will be judged ({why}; {NO_TIME_ESTIMATE}): the run will end "
            f"completed (exit 1); {RTOL_REMEDY}{remedy}")


def time_order(opts: PDEOptions) -> int:
    """Order in ``dt`` of the PDE's time integrator."""
    return int(TIME_INTEGRATORS.resolve(opts.integrator).order())
