r"""The continuous-time limit of the published staircase iteration, with error control.

:func:`~wflow.published.metastable_staircase.staircase_energy` is the published
``time_rescale_3`` of GKPR's ``staircase.py``, exact: 10⁶ fixed normalised ascent steps
``θ ← θ + lr·log β · g/‖g‖₂`` (``lr = 1e-5``). In the rescaled time ``s = lr·k`` of its
figure, the iteration is the explicit Euler scheme, step ``lr``, of the flow

.. math::

    \frac{d\theta_i}{ds} = \log\beta \, \frac{g_i(\theta)}{\lVert g(\theta)\rVert_2},
    \qquad g_i = n^{-2} \sum_j -\sin(\theta_i - \theta_j)\,
    e^{\beta(\cos(\theta_i - \theta_j) - 1)},

(angles in radians, ``s`` dimensionless, ``n = 5``). This module integrates that flow with an
embedded Runge–Kutta pair (SciPy's ``scipy.integrate.DOP853`` stepper by default) under
the ``rtol``/``atol`` a user asks for, and applies the published merge rule (``θ_k ← θ_j`` for
``j < k`` in order when ``|θ_j − θ_k| < merge_dist``) as an event: the first ``s`` at which
``‖g‖ < merge_grad`` *and* two distinct angles lie within ``merge_dist`` (the published test
of every step, on the gradient just used). Integration restarts after each merge and stops
when all tokens have merged (where the published step turns to ``0/0``) or at
``s_max = lr·max_iter``. It is a variant with a name of its own; the published iteration is
untouched and remains the reference.

Two reformulations, exact for the flow, keep the explicit pair stable and finite:

* merged tokens are integrated once, as a cluster of multiplicity ``m``
  (``g_a = n^{-2} Σ_b m_b (−sin(θ_a−θ_b)) e^{β(cos(θ_a−θ_b)−1)}``, ``‖g‖² = Σ_a m_a g_a²``).
  The published merged tokens stay bitwise equal; integrating them separately makes their
  separation a mode of rate ``≈ 2 log β /(n²‖g‖)`` (``10¹⁷`` per unit ``s`` when
  ``‖g‖ ≈ 1e-17``), which round-off in an explicit Runge–Kutta stage excites;
* the direction ``g/‖g‖`` is scale free, so ``g`` is computed with its largest exponent
  ``M = max_{a≠b} β(cos(θ_a−θ_b)−1)`` factored out, and the event reads
  ``log‖g‖ = M + log‖g̃‖`` (``e^{β(cos−1)}`` underflows to 0 for distant clusters at
  β = 4000).

Accuracy, measured (``compare_staircase`` and ``tests/test_staircase_flow.py``, the six
published β, merge times in ``s``):

* the published scheme is explicit Euler, step ``lr``, with the merge rule checked once per
  step, so its merge times carry an ``O(lr)`` error. Against this flow at ``rtol = 1e-12``
  its largest merge-time difference per β is 4.39, 4.04, 3.83, 5.05, 4.31, 3.10 ``lr``
  (β = 500 … 4000) at ``lr = 1e-5``; at ``lr/2``, ``lr/4``, ``lr/8`` (same horizon) it is
  at most 2.05e-5, 1.06e-5, 0.56e-5: first order, ``≤ 5.05 lr``, hence
  :data:`DISCRETISATION_LR` ``= 6``;
* the flow's own merge-time error against ``rtol = 1e-12`` is at most 0.41·``rtol`` over
  ``rtol = 1e-3 … 1e-10`` (5.8e-5, 1.6e-5, 1.9e-6, 4.1e-7, 1.8e-8, 7.2e-10, 2.5e-10,
  4.2e-12), hence :data:`FLOW_ERROR_PER_RTOL` ``= 1``;
* 45–90 accepted steps per β (``rtol = 1e-6``: 74, 49, 48, 46, 45, 45), against the
  published 10⁶ (of which 9 238–12 237 run before the full merge turns them to NaN).

:func:`compare_staircase` accepts a β when its merges are the published ones (same pairs)
and every merge time agrees within :func:`merge_time_tolerance`
``= DISCRETISATION_LR·lr + FLOW_ERROR_PER_RTOL·rtol + atol`` (6.1e-5 at the defaults; the
published ones agree within 3.1e-5 … 5.07e-5). β off by 1 % moves them by 6.9e-5 … 2.0e-4.
"""

from __future__ import annotations

import logging
import math
import time
from dataclasses import dataclass
from typing import Any

import numpy as np
from scipy.integrate import DOP853, RK23, RK45
from scipy.optimize import brentq

from .metastable_staircase import StaircaseOptions, published_theta0, staircase_energy

__all__ = [
    "StaircaseFlowOptions",
    "FlowRun",
    "staircase_flow",
    "StaircaseComparison",
    "compare_staircase",
    "merge_time_tolerance",
    "adaptive_summary",
    "DISCRETISATION_LR",
    "FLOW_ERROR_PER_RTOL",
]

logger = logging.getLogger(__name__)

#: Merge times of the published iteration agree with the flow's within this many ``lr``
#: (measured: see the module docstring and :func:`merge_time_tolerance`).
DISCRETISATION_LR = 6.0
#: The flow's merge-time error per unit of the requested ``rtol`` (``s`` units).
FLOW_ERROR_PER_RTOL = 1.0

_METHODS = {"DOP853": DOP853, "RK45": RK45, "RK23": RK23}
#: A step moves no adjacent pair by more than this fraction of its gap (see ``_leg``).
GAP_FRACTION = 0.5


@dataclass(frozen=True, kw_only=True)
class StaircaseFlowOptions:
    """Settings of :func:`staircase_flow` and :func:`compare_staircase` (keyword only).

    Parameters
    ----------
    betas : tuple of float
        β of the runs (published 500, 1000, 1500, 2000, 3000, 4000); each > 1.
    rtol : float
        Relative tolerance of the embedded Runge–Kutta pair, in ``(0, 0.1]``. Default
        ``1e-6``: the flow's merge-time error (``≲ 2e-6`` in ``s``) is then ten times below
        the published scheme's own ``O(lr)`` error (``≈ 2–4e-5``), at ~100 steps per β.
    atol : float
        Absolute tolerance on the angles (radians), > 0. Default ``rtol·1e-3``.
    method : str
        ``"DOP853"`` (default, order 8(5,3)), ``"RK45"`` or ``"RK23"``.
    lr : float
        The published step (``10e-6``): the time unit of the published merge times and of
        the discretisation part of the tolerance.
    max_iter : int
        Published steps per β (10⁶): the flow stops at ``s_max = lr·max_iter``.
    beta0 : float
        β of the initial angles (published 2000 for every β).
    merge_grad, merge_dist : float
        Published merging thresholds (``10e-6`` on ``‖g‖``, ``10e-4`` rad).
    max_steps : int
        Accepted steps allowed per β (10⁴); a run past it stops and says so.
    """

    betas: tuple[float, ...] = (500, 1000, 1500, 2000, 3000, 4000)
    rtol: float = 1e-6
    atol: float | None = None
    method: str = "DOP853"
    lr: float = 10e-6
    max_iter: int = 1_000_000
    beta0: float = 2000
    merge_grad: float = 10e-6
    merge_dist: float = 10e-4
    max_steps: int = 10_000

    def __post_init__(self) -> None:
        checks = {
            "betas": bool(self.betas) and all(float(b) > 1 for b in self.betas),
            "rtol": 0 < self.rtol <= 0.1,
            "atol": self.atol is None or self.atol > 0,
            "method": self.method in _METHODS,
            "lr": self.lr > 0,
            "max_iter": isinstance(self.max_iter, int) and self.max_iter >= 1,
            "beta0": self.beta0 > 1,
            "merge_grad": self.merge_grad > 0,
            "merge_dist": self.merge_dist > 0,
            "max_steps": isinstance(self.max_steps, int) and self.max_steps >= 1,
        }
        need = {"betas": "a non-empty tuple of β > 1", "rtol": "in (0, 0.1]",
                "atol": "None or > 0", "method": f"one of {', '.join(_METHODS)}",
                "lr": "> 0", "max_iter": "an int >= 1", "beta0": "> 1",
                "merge_grad": "> 0", "merge_dist": "> 0", "max_steps": "an int >= 1"}
        for key, ok in checks.items():
            if not ok:
                raise ValueError(f"staircase_flow: {key} must be {need[key]}, "
                                 f"got {getattr(self, key)!r}")

    @property
    def atol_value(self) -> float:
        """``atol``, or ``rtol·1e-3`` when unset (radians)."""
        return self.rtol * 1e-3 if self.atol is None else float(self.atol)

    @property
    def s_max(self) -> float:
        """End of the rescaled time, ``lr·max_iter``."""
        return self.lr * self.max_iter

    def published(self) -> StaircaseOptions:
        """The published run these options are compared with (same β, lr, thresholds)."""
        return StaircaseOptions(betas=tuple(self.betas), max_iter=self.max_iter, lr=self.lr,
                                beta0=self.beta0, merge_grad=self.merge_grad,
                                merge_dist=self.merge_dist)

    @classmethod
    def quick(cls, **changes: Any) -> StaircaseFlowOptions:
        """The quick published run: β = 500, 4000 and 20 000 steps.

        As :meth:`~wflow.published.metastable_staircase.StaircaseOptions.quick`.
        """
        base: dict[str, Any] = {"betas": (500, 4000), "max_iter": 20_000}
        base.update(changes)
        return cls(**base)


@dataclass
class FlowRun:
    """One β of :func:`staircase_flow`.

    Attributes
    ----------
    beta : float
    merges : list of (float, int, int)
        ``(s, j, k)`` of each merge, in the published order (``s`` rescaled time).
    s : (records,) array
        Rescaled times of the records: the start, every accepted step, every merge.
    E : (records,) array
        Energy ``n^{-2} Σ_ij e^{β(cos(θ_i−θ_j)−1)}`` at ``s``.
    theta : (n,) array
        Final angles (radians).
    steps : int
        Accepted Runge–Kutta steps, every leg together.
    rejected : int
        Rejected step attempts (evaluations inside the solver's steps over its stages,
        less the accepted steps).
    nfev : int
        Evaluations of the right-hand side (step selection, rejections and the dense
        output of the event location included).
    legs : int
        Integrations (one more than the merge events).
    s_end : float
        Where it stopped; ``stop``: ``"merged"`` (one cluster), ``"s_max"`` or
        ``"max_steps"``. ``wall_s``: seconds.
    """

    beta: float
    merges: list[tuple[float, int, int]]
    s: np.ndarray
    E: np.ndarray
    theta: np.ndarray
    steps: int
    rejected: int
    nfev: int
    legs: int
    s_end: float
    stop: str
    wall_s: float = 0.0


def _scaled_grad(pos: np.ndarray, mult: np.ndarray, beta: float
                 ) -> tuple[np.ndarray, float]:
    """``g̃`` with ``g = e^M g̃`` per cluster, and ``M`` (``-inf`` for one cluster)."""
    D = pos[:, None] - pos[None, :]
    ex = beta * (np.cos(D) - 1)
    off = ~np.eye(pos.size, dtype=bool)
    M = float(ex[off].max()) if pos.size > 1 else -math.inf
    if not math.isfinite(M):
        return np.zeros_like(pos), M
    w = np.exp(np.where(off, ex - M, -math.inf))  # the diagonal: sin 0 = 0, no overflow
    g = (-np.sin(D) * w) @ mult / mult.sum() ** 2
    return g, M


def _log_gnorm(pos: np.ndarray, mult: np.ndarray, beta: float) -> float:
    g, M = _scaled_grad(pos, mult, beta)
    nrm = float(np.sqrt(np.sum(mult * g * g)))
    return M + math.log(nrm) if nrm > 0 else -math.inf


def _energy(pos: np.ndarray, mult: np.ndarray, beta: float) -> float:
    D = pos[:, None] - pos[None, :]
    return float(mult @ np.exp(beta * (np.cos(D) - 1)) @ mult / mult.sum() ** 2)


def _apply_merge(theta: np.ndarray, dist: float, s: float,
                 merges: list[tuple[float, int, int]]) -> None:
    """The published rule (lines 385-388), in place on the token angles."""
    n = theta.size
    for j in range(n):
        for k in range(j + 1, n):
            if abs(theta[j] - theta[k]) < dist:
                if theta[k] != theta[j]:
                    merges.append((s, j, k))
                theta[k] = theta[j]


def _leg(pos: np.ndarray, mult: np.ndarray, s0: float, beta: float,
         opts: StaircaseFlowOptions, log_thr: float, budget: int) -> dict[str, Any]:
    """Integrate the clusters ``pos`` from ``s0`` to the next merge event (or the end).

    The embedded pair (``opts.method``) steps under ``rtol``/``atol`` with one more cap:
    no adjacent pair of clusters closes more than ``GAP_FRACTION`` of its gap in one
    step (``h ≤ ½ gap/|v_a − v_b|``). Two clusters alone meet at a constant speed, where
    the error estimate is zero, and ``g/‖g‖`` flips sign at the meeting: without the cap a
    step can jump across it and the merge event with it. The event function is
    ``max(log‖g‖ − log merge_grad, min|θ_a − θ_b| − merge_dist)`` (negative exactly when
    the published rule fires), located by Brent's method on the step's dense output.
    """
    lb = math.log(beta)
    calls = [0]

    def rhs(_s: float, y: np.ndarray) -> np.ndarray:
        calls[0] += 1
        g, _ = _scaled_grad(y, mult, beta)
        nrm = np.sqrt(np.sum(mult * g * g))
        return lb * g / nrm if nrm > 0 else np.zeros_like(y)

    def event(y: np.ndarray) -> float:
        d = np.abs(y[:, None] - y[None, :])[np.triu_indices(y.size, 1)]
        ready = max(_log_gnorm(y, mult, beta) - log_thr, float(d.min()) - opts.merge_dist)
        return min(ready, float(np.diff(y).min()))  # a step across a meeting, too

    def cap(y: np.ndarray, v: np.ndarray) -> float:
        dv = np.abs(np.diff(v))
        gaps = np.diff(y)
        h = np.where(dv > 0, GAP_FRACTION * np.abs(gaps) / np.where(dv > 0, dv, 1), np.inf)
        return float(max(h.min(), 1e-14))

    order = np.argsort(pos)
    inv = np.argsort(order)
    y0 = pos[order]
    mult = mult[order]
    solver = _METHODS[opts.method](rhs, s0, y0, opts.s_max, rtol=opts.rtol,
                                   atol=opts.atol_value, max_step=cap(y0, rhs(s0, y0)))
    ts, ys = [s0], [y0]
    phi = event(y0)
    steps = attempts = 0
    hit = None
    while solver.status == "running" and steps < budget:
        solver.max_step = cap(solver.y, solver.f)
        before = calls[0]
        failure = solver.step()  # SciPy's OdeSolver: a message when the step failed
        attempts += (calls[0] - before) // solver.n_stages
        if failure is not None:
            raise RuntimeError(f"staircase_flow: the {opts.method} step failed at "
                               f"s = {solver.t:.6g}, β = {beta:g}: {failure}")
        steps += 1
        phi_new = event(solver.y)
        if phi > 0 >= phi_new:
            dense = solver.dense_output()
            s_ev = brentq(lambda t, d=dense: event(d(t)), solver.t_old, solver.t,
                          xtol=1e-15, rtol=4 * np.finfo(float).eps)
            hit = (s_ev, dense(s_ev))
            ts.append(s_ev)
            ys.append(hit[1])
            break
        ts.append(solver.t)
        ys.append(solver.y.copy())
        phi = phi_new
    s_end, y_end = (hit if hit is not None else (ts[-1], ys[-1]))
    return {"s": np.array(ts), "y": [y[inv] for y in ys], "s_end": float(s_end),
            "y_end": np.asarray(y_end)[inv], "event": hit, "steps": steps,
            "rejected": max(attempts - steps, 0), "nfev": calls[0]}


def staircase_flow(beta: float, opts: StaircaseFlowOptions | None = None, *,
                   theta0: np.ndarray | None = None) -> FlowRun:
    """Integrate ``dθ/ds = log β · g/‖g‖₂`` with the published merges as events.

    Parameters
    ----------
    beta : float
        Inverse temperature (> 1).
    opts : StaircaseFlowOptions, optional
        Tolerances, thresholds and ``s_max`` (default: published thresholds, ``rtol = 1e-6``).
    theta0 : (n,) array, optional
        Initial angles in radians (default
        :func:`~wflow.published.metastable_staircase.published_theta0` of ``opts.beta0``).

    Returns
    -------
    FlowRun
        Merge times ``s`` (comparable with ``lr·record`` of the published merges), records
        of the energy, step counts.
    """
    opts = opts or StaircaseFlowOptions()
    t0 = time.perf_counter()
    theta = np.array(published_theta0(opts.beta0) if theta0 is None else theta0, float)
    log_thr = math.log(opts.merge_grad)
    merges: list[tuple[float, int, int]] = []
    s, steps, rejected, nfev, legs, stop = 0.0, 0, 0, 0, 0, "s_max"
    rec_s: list[np.ndarray] = []
    rec_E: list[np.ndarray] = []
    while True:
        pos, labels = np.unique(theta, return_inverse=True)
        mult = np.bincount(labels).astype(float)
        if pos.size == 1:
            stop = "merged"
            rec_s.append(np.array([s]))
            rec_E.append(np.array([_energy(pos, mult, beta)]))
            break
        if s >= opts.s_max or steps >= opts.max_steps:
            stop = "s_max" if s >= opts.s_max else "max_steps"
            break

        leg = _leg(pos, mult, s, beta, opts, log_thr, opts.max_steps - steps)
        legs += 1
        steps += leg["steps"]
        rejected += leg["rejected"]
        nfev += leg["nfev"]
        rec_s.append(leg["s"])
        rec_E.append(np.array([_energy(y, mult, beta) for y in leg["y"]]))
        s = leg["s_end"]
        theta = np.array(leg["y_end"][labels])
        if leg["event"] is None:
            continue
        _apply_merge(theta, opts.merge_dist, s, merges)
        logger.debug("staircase_flow β=%g: merge event at s=%.6g (%d steps)", beta, s, steps)
    s_arr = np.concatenate(rec_s)
    E_arr = np.concatenate(rec_E)
    wall = time.perf_counter() - t0
    logger.info("staircase_flow β=%g: %d merges, %d steps, %d evaluations, %.2f s",
                beta, len(merges), steps, nfev, wall)
    return FlowRun(beta=float(beta), merges=merges, s=s_arr, E=E_arr, theta=theta,
                   steps=steps, rejected=rejected, nfev=nfev, legs=legs, s_end=s, stop=stop,
                   wall_s=wall)


def merge_time_tolerance(opts: StaircaseFlowOptions) -> float:
    """``DISCRETISATION_LR·lr + FLOW_ERROR_PER_RTOL·rtol + atol`` (rescaled time).

    The first term is the published scheme's own error (Euler, step ``lr``, merge rule
    checked once per step), the second the flow's under the requested ``rtol``.
    """
    return (DISCRETISATION_LR * opts.lr + FLOW_ERROR_PER_RTOL * opts.rtol
            + opts.atol_value)


@dataclass(frozen=True)
class StaircaseComparison:
    """Merge times of the flow against the published iteration's, per β.

    Attributes
    ----------
    status : str
        ``"success"`` when every β has the same merges (pairs ``(j, k)``) within
        ``tolerance``, within ``max_steps`` accepted steps; ``"failed"`` otherwise.
    tolerance : float
        :func:`merge_time_tolerance` (rescaled time ``s``).
    per_beta : dict
        ``{"β": {max_dt, max_dt_over_lr, steps, rejected, nfev, published_steps,
        flow_merges, published_merges, same_pairs, passed, flow_wall_s,
        published_wall_s}}``; ``max_dt`` is the largest ``|s_flow − lr·record|`` over the
        merges (``inf`` when the pairs differ).
    """

    status: str
    tolerance: float
    per_beta: dict[str, dict[str, Any]]
    options: StaircaseFlowOptions

    @property
    def max_dt(self) -> float:
        """Largest merge-time difference over every β."""
        return max(p["max_dt"] for p in self.per_beta.values())


def _merge_times(merges: list[tuple[Any, int, int]], unit: float) -> dict[tuple[int, int], float]:
    return {(int(j), int(k)): float(t) * unit for t, j, k in merges}


def compare_staircase(opts: StaircaseFlowOptions | None = None, *,
                      reference: StaircaseOptions | None = None) -> StaircaseComparison:
    """The flow's merge times against the published iteration's, β by β.

    Parameters
    ----------
    opts : StaircaseFlowOptions, optional
        The flow (default: every published β, ``rtol = 1e-6``).
    reference : StaircaseOptions, optional
        The published run (default ``opts.published()``: same β, ``lr``, steps and
        thresholds); its β are paired with ``opts.betas`` in order. The published run stops
        at its full merge (NaN after it), ~10⁴ of the 10⁶ steps, 0.2–0.3 s per β.

    Returns
    -------
    StaircaseComparison
        ``status == "success"`` only when every β's merges agree within
        :func:`merge_time_tolerance` and take at most ``opts.max_steps`` accepted steps.
    """
    opts = opts or StaircaseFlowOptions()
    ref = reference or opts.published()
    if len(ref.betas) != len(opts.betas):
        raise ValueError("compare_staircase: reference.betas must pair with opts.betas "
                         f"({len(ref.betas)} != {len(opts.betas)})")
    tol = merge_time_tolerance(opts)
    theta0 = published_theta0(ref.beta0)
    per: dict[str, dict[str, Any]] = {}
    for b, rb in zip(opts.betas, ref.betas, strict=True):
        t0 = time.perf_counter()
        _, info = staircase_energy(theta0, float(rb), lr=ref.lr, max_iter=ref.max_iter,
                                   merge_grad=ref.merge_grad, merge_dist=ref.merge_dist)
        pub_wall = time.perf_counter() - t0
        run = staircase_flow(float(b), opts)
        pub = _merge_times(info["merges"], ref.lr)
        flow = _merge_times(run.merges, 1.0)
        same = pub.keys() == flow.keys()
        dt = max((abs(flow[p] - pub[p]) for p in pub), default=0.0) if same else math.inf
        pub_steps = info["nan_from"] + 1 if info["nan_from"] >= 0 else ref.max_iter
        per[f"{b:g}"] = {
            "max_dt": dt, "max_dt_over_lr": dt / ref.lr, "steps": run.steps,
            "rejected": run.rejected, "nfev": run.nfev, "published_steps": pub_steps,
            "same_pairs": same,
            "flow_merges": [[s, j, k] for s, j, k in run.merges],
            "published_merges": [[int(i), j, k] for i, j, k in info["merges"]],
            "passed": bool(same and dt <= tol and run.steps <= opts.max_steps),
            "flow_wall_s": run.wall_s, "published_wall_s": pub_wall}
        logger.info("compare_staircase β=%g: max |Δs| = %.3g (tol %.3g), %d steps vs %d",
                    b, dt, tol, run.steps, pub_steps)
    ok = all(p["passed"] for p in per.values())
    return StaircaseComparison("success" if ok else "failed", tol, per, opts)


def adaptive_summary(published: StaircaseOptions, *, rtol: float = 1e-6) -> dict[str, Any]:
    """The ``adaptive`` block of ``wflow reproduce metastable_staircase --adaptive``.

    :func:`compare_staircase` of the flow (same β, ``lr``, horizon and thresholds as
    ``published``, the requested ``rtol``) with the published run.

    Returns
    -------
    dict
        ``status`` (``"success"``/``"failed"``), ``rtol``, ``tolerance`` (``s``), ``rule``,
        ``sentence`` and ``per_beta`` (``max_dt``, ``steps``, ``rejected``, ``nfev``,
        ``published_steps``, ``flow_merges``, ``passed``).
    """
    opts = StaircaseFlowOptions(betas=tuple(published.betas), rtol=rtol, lr=published.lr,
                                max_iter=published.max_iter, beta0=published.beta0,
                                merge_grad=published.merge_grad,
                                merge_dist=published.merge_dist)
    c = compare_staircase(opts, reference=published)
    keep = ("max_dt", "steps", "rejected", "nfev", "published_steps", "flow_merges", "passed")
    per = {b: {k: p[k] for k in keep} for b, p in c.per_beta.items()}
    sentence = (f"dθ/ds = log β·g/‖g‖ at rtol = {rtol:g}: {c.status}; "
                + "; ".join(f"β = {b}: {p['steps']} steps, max |Δ merge time| = "
                            f"{p['max_dt']:.3g}" for b, p in per.items())
                + f" (tolerance {c.tolerance:.3g} = {DISCRETISATION_LR:g}·lr + "
                  f"{FLOW_ERROR_PER_RTOL:g}·rtol + atol)")
    return {"status": c.status, "rtol": rtol, "tolerance": c.tolerance,
            "rule": "success when, for every β, the flow has the published merges and each "
                    "merge time agrees with lr·record within the tolerance, in at most "
                    f"{opts.max_steps} accepted steps",
            "sentence": sentence, "per_beta": per}
