r"""Accuracy a user asks for on the particles: adaptive steps and the fixed-step verdict.

Both use the step-doubling (Richardson) estimate of a deterministic integrator of order
``q`` (``euler``: 1, ``rk4``: 4), :func:`wflow.infra.accuracy.richardson_error`, measured
in the scaled RMS norm of the tokens (:func:`wflow.infra.accuracy.error_norm`,
``N = n·d`` components, per component ``atol + rtol·max(|x|, |x'|)``):

* **adaptive** (:func:`adaptive_grid`): from ``(t, x)`` one step ``h`` gives ``x_h`` and two
  steps ``h/2`` give ``x_½½``; the error of the *single* step (the one the run takes) is
  ``e = 2^q (x_h − x_½½)/(2^q − 1)``. A :class:`~wflow.infra.accuracy.StepController`
  with ``span = T`` (error per unit step) accepts ``‖e‖·T/h ≤ 1``, so the local errors
  of the accepted steps sum to at most the tolerance: the *global* error of ``x(T)`` is
  within it where the flow does not amplify errors. ``dt`` is the first and the largest
  step; steps end on every jump time of the weights. The accepted grid is then run by
  the ordinary Python loop (records, balance, checks as for fixed steps). Cost: three
  integrator steps per tried step plus one per accepted step in the final run, i.e.
  about ``4 (accepted + rejected)`` steps' work (:func:`wflow.particles.estimate.estimate_run`);
* **fixed steps judged** (:func:`fixed_step_error`): the whole run is repeated at
  ``dt/2`` (cost: twice the run's steps) and the global error of the run's ``x(T)`` is
  estimated by ``2^q (x_dt(T) − x_{dt/2}(T))/(2^q − 1)``; a norm above 1 names the
  step ``dt·(0.9/‖e‖)^{1/q}`` that would meet the tolerance.

Deterministic runs only: with token diffusion ``D > 0`` the error is a weak (statistical)
error, estimated for fixed steps by :mod:`wflow.particles.weak_error` (adaptive steps
refused); with noisy weights neither applies (refused).
"""

from __future__ import annotations

import logging
import math
from typing import Any

import numpy as np

from ..attention.heads import Attention
from ..attention.schedules import Schedule
from ..infra.accuracy import StepController, Tolerance, error_norm, is_default, richardson_error
from ..infra.schema import ScenarioError
from .integrators import INTEGRATORS, StochasticIntegrator, _Kernel, _state_terms

__all__ = ["adaptive_grid", "accuracy_refusal", "check_accuracy_applies", "default_aside",
           "fixed_step_error", "dt_remedy"]

logger = logging.getLogger(__name__)


def accuracy_refusal(opts: Any, stochastic: bool, key: str) -> str | None:
    """Why no error estimate of the run applies (``None``: one does), the line naming ``key``.

    ``key`` is ``"particles.adaptive"``, ``"particles.rtol"`` or ``"particles.atol"``;
    ``stochastic``: whether the weights' schedule is noisy. Deterministic runs: the
    step-doubling estimate (``euler``, ``rk4``; fixed or adaptive steps). Token diffusion
    ``D > 0``: fixed steps only, judged by the weak-error estimate of
    :mod:`wflow.particles.weak_error` (the stochastic integrator itself is checked by
    :func:`wflow.particles.loop.check_noisy`). Noisy weights: none either way.
    """
    if getattr(opts, "diffusion", 0.0) > 0:
        if getattr(opts, "adaptive", False):
            return (f"{key}: adaptive steps are for the deterministic integrators; with "
                    "token diffusion D > 0 set adaptive = false and particles.rtol / "
                    "particles.atol on fixed steps (judged by a weak-error estimate of the "
                    "token moments)")
        if stochastic:
            return (f"{key}: the weak-error estimate covers token diffusion with "
                    "deterministic weights; noisy weights need an estimate of the weights' "
                    "law too (not yet)")
        return None
    if stochastic:
        return (f"{key}: error control of the deterministic integrators only; noisy weights "
                "need a weak-error estimate (not yet)")
    integ = INTEGRATORS.resolve(opts.integrator, "particles.integrator")
    if isinstance(integ, StochasticIntegrator):
        return (f"{key}: {integ.name!r} is a stochastic integrator; error control is for "
                "'euler' and 'rk4' (with token diffusion D > 0: fixed steps judged by a "
                "weak-error estimate)")
    return None


def check_accuracy_applies(opts: Any, schedule: Schedule, key: str) -> None:
    """Refuse error control where no estimate of the run applies, naming ``key``.

    :func:`accuracy_refusal` as a :class:`~wflow.infra.schema.ScenarioError` (exit 2).
    """
    why = accuracy_refusal(opts, schedule.stochastic, key)
    if why is not None:
        raise ScenarioError(why)


#: The start of every reason :func:`default_aside` gives.
DEFAULT_ASIDE = "the default rtol = 1e-3 steps aside"


def default_aside(opts: Any, stochastic: bool) -> str | None:
    """Why the default ``rtol`` steps aside for this run (``None``: it judges the run).

    Only the default (:data:`~wflow.infra.accuracy.DEFAULT_RTOL`, ``atol`` unset, fixed
    steps) steps aside: where :func:`accuracy_refusal` finds no estimate (a tolerance the
    user set is refused there instead), and with token diffusion ``D > 0``. There the
    weak-error estimate of the token moments has a noise floor ``∝ 1/√(n · paths)``
    that no run of ordinary size brings under ``1e-3`` (measured: 128 tokens × 16 paths,
    Strang, ``dt = 0.025``, floor ``1.2e3`` times the tolerance: ``inconclusive``, asking
    for 1.8e8 tokens), so a default would only say ``inconclusive``; the Itô energy
    balance, judged by its own standard error, decides instead, and ``particles.rtol``
    set by the user asks for the weak-error estimate. The run then goes on as with
    ``rtol = None``: judged by its chain rule or Itô balance, or ``completed``.
    """
    if not is_default(opts.rtol) or opts.atol is not None or opts.adaptive:
        return None
    if getattr(opts, "diffusion", 0.0) > 0:
        return (f"{DEFAULT_ASIDE}: token diffusion, whose weak-error estimate needs a "
                "tolerance above its noise floor (set particles.rtol to ask for it)")
    why = accuracy_refusal(opts, stochastic, "particles.rtol")
    if why is None:
        return None
    return f"{DEFAULT_ASIDE}: {why.split(': ', 1)[1]}"


def _global_factor(q: int) -> float:
    """``2^q``: the error of one step ``h`` over the Richardson estimate of two ``h/2``."""
    return 2.0 ** q


def dt_remedy(dt: float, err: float, q: int) -> float:
    """A fixed step that would meet the tolerance: ``dt·(0.9/err)^{1/q}`` (error ∝ dt^q)."""
    return dt * (0.9 / err) ** (1.0 / q)


def adaptive_grid(x0: np.ndarray, schedule: Schedule, attn: Attention, opts: Any,
                  kernel: _Kernel) -> tuple[np.ndarray, dict]:
    """The adaptive time grid ``0 = t_0 < … < t_S = T`` of a deterministic run.

    Parameters
    ----------
    x0 : (n, d) array
        Initial tokens on the unit sphere.
    schedule, attn
        The weights (deterministic) and the attention.
    opts : ParticleOptions
        ``T``, ``dt`` (first and largest step), ``integrator``, ``flow``, the tolerance.
    kernel : _Kernel
        Attention-sum back-end.

    Returns
    -------
    grid : (S+1,) array
        Accepted step times (every jump time of the weights in ``(0, T)`` among them).
    info : dict
        ``accepted``, ``rejected``, ``dt`` (the accepted steps, ``(S,)``), ``dt_min``,
        ``dt_max``, ``rtol``, ``atol``, ``order``, ``control``.

    Raises
    ------
    FloatingPointError
        When a proposed step falls below ``1e-12 T`` (the tolerance is out of reach).
    """
    integ = INTEGRATORS.resolve(opts.integrator)
    q = int(integ.order())
    tol: Tolerance = opts.tolerance()
    T = float(opts.T)
    hmax = min(float(opts.dt), T)
    ctrl = StepController(order=q, span=T, dt_min=1e-12 * T)
    n = x0.shape[0]
    m = np.full(n, 1.0 / n)
    flow = opts.flow

    def step(x: np.ndarray, t: float, h: float, theta: np.ndarray):
        heads, _, vel, _ = _state_terms(x, m, t, theta, schedule, attn, flow, None, kernel)
        theta_mid, theta_new = schedule.advance(theta, t, h, None, method=integ.weights)
        return integ.step(x, h, vel, heads, theta, theta_mid, theta_new, schedule, attn,
                          flow, kernel), theta_new

    ends = sorted({float(j) for j in schedule.jump_times if 0 < j < T} | {T})
    x, theta, t, h = np.asarray(x0, dtype=np.float64), schedule.initial_theta(), 0.0, hmax
    times = [0.0]
    tiny = 1e-9 * max(T, 1.0)  # the grid's own snapping tolerance (time_grid)
    for t_end in ends:
        while t < t_end - tiny:
            land = h >= t_end - t - tiny
            h_try = (t_end - t) if land else h
            x1, th1 = step(x, t, h_try, theta)
            xa, tha = step(x, t, 0.5 * h_try, theta)
            xb, _ = step(xa, t + 0.5 * h_try, 0.5 * h_try, tha)
            err = _global_factor(q) * richardson_error(x1, xb, q)
            e = error_norm(err, x, x1, tol)
            ok, h_next = ctrl.propose(h_try, e)
            if ok:
                x, theta = x1, th1
                t = t_end if land else t + h_try
                times.append(t)
            h = min(h_next, hmax)
        if t_end < T:
            theta = schedule.after_jump(theta, t_end)
    grid = np.asarray(times)
    steps = np.diff(grid)
    info = {"accepted": ctrl.accepted, "rejected": ctrl.rejected, "dt": steps,
            "dt_min": float(steps.min()), "dt_max": float(steps.max()),
            "rtol": tol.rtol, "atol": tol.atol, "order": q,
            "control": "PI, error per unit step over [0, T], step doubling"}
    logger.info("particles: adaptive %s, %d accepted / %d rejected steps, dt in [%.3g, %.3g]",
                opts.integrator, ctrl.accepted, ctrl.rejected, info["dt_min"], info["dt_max"])
    return grid, info


def fixed_step_error(x_dt: np.ndarray, x_half: np.ndarray, opts: Any) -> dict:
    """The fixed-step run's accuracy check from the same run at ``dt/2``.

    Parameters
    ----------
    x_dt, x_half : (n, d) arrays
        Final tokens of the run at ``dt`` and at ``dt/2``.
    opts : ParticleOptions
        ``dt``, ``integrator`` (order ``q``), the tolerance.

    Returns
    -------
    dict
        ``error`` (scaled RMS norm of ``2^q (x_dt − x_{dt/2})/(2^q − 1)``, ``≤ 1``: within
        the tolerance), ``passed``, ``rtol``, ``atol``, ``dt``, ``dt_remedy`` (a step that
        would meet it), ``estimate``.
    """
    q = int(INTEGRATORS.resolve(opts.integrator).order())
    tol = opts.tolerance()
    err = _global_factor(q) * richardson_error(x_dt, x_half, q)
    e = error_norm(err, x_half, x_dt, tol)
    passed = bool(math.isfinite(e) and e <= 1.0)
    dt = float(opts.dt)
    return {"error": e, "passed": passed, "rtol": tol.rtol, "atol": tol.atol, "dt": dt,
            "dt_remedy": dt_remedy(dt, e, q) if math.isfinite(e) and e > 0 else dt,
            "estimate": "step doubling of the whole run (dt vs dt/2), global error of x(T)"}
