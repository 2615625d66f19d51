r"""The JKO scheme's accuracy: the step-doubling estimate and the verdict against ``rtol``/``atol``.

Part of :mod:`wflow.jko` (the solver's error control), on the shared machinery of
:mod:`wflow.infra.accuracy`. The state is the cell density ``ρ_K = m_K/|K|`` (``M``
components, per component the tolerance ``atol + rtol·max(|ρ|, |ρ'|)``); a JKO step of
size ``τ`` is first order (:meth:`~wflow.jko.schemes.JKOScheme.order`, ``q = 1``: the
minimising movement agrees with the gradient flow to ``O(τ²)`` per step).

* **adaptive** (:func:`doubling_error`, used by :func:`wflow.jko.iterate_jko`): from
  ``(t, μ)`` one step ``h`` gives ``ρ_h`` and two steps ``h/2`` give ``ρ_½½`` (kept);
  the error of the kept halves is :func:`~wflow.infra.accuracy.richardson_error`
  ``e = (ρ_h − ρ_½½)/(2^q − 1)``, measured by :func:`~wflow.infra.accuracy.error_norm`.
  A :class:`~wflow.infra.accuracy.StepController` with ``span = T`` accepts the pair when
  ``‖e‖·T/h <= 1``: the accepted local errors sum to at most the tolerance, so the error
  of ``ρ(T)`` is within it where the flow does not amplify errors. Cost: three steps'
  work per kept pair of half steps, ``1.5`` per kept step (plus the rejected pairs);
* **fixed steps judged** (:func:`fixed_tau_check`): the run at ``τ`` is repeated at
  ``τ/2`` (twice its steps) and the error of ``ρ_τ(T)`` is
  ``2^q (ρ_τ(T) − ρ_{τ/2}(T))/(2^q − 1)``; a norm above 1 is ``inaccurate``, naming the
  step ``τ' = τ/⌈1/(0.9/‖e‖)^{1/q}⌉`` (error ``∝ τ^q``; a divisor of ``τ``, so of ``T``
  and of the weights' jump times) that would meet the tolerance.
"""

from __future__ import annotations

import math
from dataclasses import replace
from typing import Any

import numpy as np

from ..infra.accuracy import Tolerance, error_norm, richardson_error

__all__ = ["with_step", "doubling_error", "tolerance_check", "fixed_tau_check", "tau_remedy"]


def with_step(opts: Any, h: float) -> Any:
    """The options of one step of size ``h`` (``tau = T = h``; the rest unchanged)."""
    return replace(opts, T=float(h), tau=float(h))


def doubling_error(m: np.ndarray, m_full: np.ndarray, m_two: np.ndarray, areas: np.ndarray,
                   q: int, tol: Tolerance) -> float:
    """The error norm of two half steps against one step (``≤ 1``: within ``tol``).

    Parameters
    ----------
    m, m_full, m_two : (M,) arrays
        Cell masses before the step, after one step ``h``, after two steps ``h/2``.
    areas : (M,) array
        Cell areas ``|K|`` (sr): the state compared is the density ``ρ = m/|K|``.
    q : int
        The scheme's order.
    tol : Tolerance

    Returns
    -------
    float
        ``‖(ρ_h − ρ_½½)/(2^q − 1)‖`` in the scaled RMS norm
        (:func:`~wflow.infra.accuracy.error_norm`); ``inf`` when not finite.
    """
    e = richardson_error(m_full / areas, m_two / areas, q)
    return error_norm(e, m / areas, m_two / areas, tol)


def tau_remedy(tau: float, err: float, q: int) -> float:
    """A step meeting the tolerance: ``τ/⌈τ/(τ (0.9/err)^{1/q})⌉``.

    A divisor of ``τ``, hence of ``T`` and of every jump time of the weights that ``τ``
    divides (the run at it is valid wherever the run at ``τ`` was).
    """
    raw = tau * (0.9 / err) ** (1.0 / q)
    return tau / max(1, math.ceil(tau / raw - 1e-9))


def tolerance_check(history: dict[str, np.ndarray], tol: Tolerance, T: float, q: int
                    ) -> dict[str, Any]:
    r"""The adaptive run judged by its error estimate against the tolerance.

    The global-error estimate is ``Ê = Σ_n ‖e_n‖`` over the kept pairs (each in units of
    the tolerance): the error at ``T`` of a contractive flow is at most ``Ê`` tolerances.
    The controller keeps ``‖e_n‖ <= h_n/T``, so ``Ê <= 1``. Where a pair missed it
    (``‖e_n‖ T/h_n > 1``) the largest step that would meet it is the controller's rule,
    ``0.9 min_n h_n (‖e_n‖T/h_n)^{−1/q}`` (``h_n`` the pair's length).
    """
    err = np.asarray(history["error_norm"], dtype=float)[1:]
    dts = np.asarray(history["tau"], dtype=float)[1:]
    pair = err > 0
    est = float(np.sum(err))
    hp = 2.0 * dts[pair]  # the pair's length: two halves
    per_unit = err[pair] * T / hp if hp.size else np.zeros(0)
    miss = per_unit > 1.0
    dt_max = float(np.max(dts)) if dts.size else 0.0
    tau_meet = (0.9 * float(np.min(hp[miss] * per_unit[miss] ** (-1.0 / q)))
                if np.any(miss) else 2.0 * dt_max)
    return _verdict(est, tol, q, tau_meet, "the estimated time-discretisation error",
                    " (as the largest step)", dt_max=dt_max,
                    control="PI, error per unit step over [0, T], step doubling (halves kept)")


def _verdict(est: float, tol: Tolerance, q: int, tau_meet: float, what: str, where: str,
             **extra: Any) -> dict[str, Any]:
    """The check's record: passed when the estimate ``est`` (tolerances) is ``<= 1``."""
    passed = bool(math.isfinite(est) and est <= 1.0)
    msg = "" if passed else (
        f"{what} is {est:.3g} times the tolerance (rtol = {tol.rtol:g}, atol = "
        f"{tol.atol:g}); remedy: jko.tau = {tau_meet:.6g} would meet it{where}")
    return {"name": "tolerance", "estimate": est, "passed": passed, "order": q,
            "rtol": tol.rtol, "atol": tol.atol, "tau_meeting": tau_meet, **extra,
            "message": msg}


def fixed_tau_check(m_tau: np.ndarray, m_half: np.ndarray, areas: np.ndarray, tol: Tolerance,
                    tau: float, q: int) -> dict[str, Any]:
    """The fixed-step run judged from the same run at ``τ/2``.

    Parameters
    ----------
    m_tau, m_half : (M,) arrays
        Cell masses at ``T`` of the run at ``τ`` and of the run at ``τ/2``.
    areas : (M,) array
        Cell areas (sr).
    tol : Tolerance
    tau : float
        The run's step.
    q : int
        The scheme's order.

    Returns
    -------
    dict
        ``estimate`` (scaled RMS norm of ``2^q (ρ_τ − ρ_{τ/2})/(2^q − 1)``: the error of
        the run's ``ρ(T)``, ``<= 1`` within the tolerance), ``passed``, ``tau``,
        ``tau_meeting`` (a divisor of ``τ`` that would meet it), ``message``.
    """
    e_arr = 2.0 ** q * richardson_error(m_tau / areas, m_half / areas, q)
    e = error_norm(e_arr, m_half / areas, m_tau / areas, tol)
    meet = tau_remedy(tau, e, q) if math.isfinite(e) and e > 0 else tau
    return _verdict(e, tol, q, meet, f"at the fixed step τ = {tau:g}, the estimated error "
                    "of ρ(T)", " (or leave jko.adaptive = true)", tau=tau,
                    control="fixed steps, the run repeated at tau/2 (global error of rho(T))")
