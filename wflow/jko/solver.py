"""The JKO time loop on a sphere mesh (docs/theory.md §4): :func:`iterate_jko`, :func:`solve_jko`.

One step of size ``τ`` of the ascent of ``E`` (descent of ``F = −sE``)::

    μ_{k+1} ∈ argmin_ν  J_k(ν) = (1/2τ) W²_{b̂_k}(μ_k, ν) − s E(ν, t_{k+1}),

``s = +1`` for value-aligned heads ``V_h = A_h`` (ascent, convention of docs/theory.md) and
``s = −1`` for ``V_h = −A_h`` (descent convention of the published experiments).

The pieces: transport costs and candidate pairs (:mod:`wflow.jko.cost`), the energy
on cell measures (:mod:`wflow.jko.energy`), the inner solvers and their optimality gap
(:mod:`wflow.jko.oracle`, :mod:`wflow.jko.inner`), the POT cross-checks
(:mod:`wflow.jko.pot`) and one step (:mod:`wflow.jko.step`). Here the time loop
(:func:`iterate_jko`, :func:`solve_jko`) and its records.

Per-step records: ``W2sq = W²_{b̂_k}(μ_k, μ_{k+1})`` (exact ``W²`` also for entropic
steps: the entropic transport cost carries an ``O(ε)`` blur per step), inner
iterations, gap, and the discrete EDI residual (ascent functional ``F = sE``)::

    edi_k = s(E_{k+1} − E_k) − s τ ½(∂_tE_k + ∂_tE_{k+1})
            − [W²/(2τ) + τ/4 (|∂E|²_k + |∂E|²_{k+1})].

The running balance uses the shared :class:`~wflow.diagnostics.BalanceAccumulator`
with ``speed2 = W²/τ²`` over each step.

Limitations (measured, see the tests and the report): on a fixed mesh the exact
discrete JKO *locks* when ``τ |v| <~ h/2`` (moving mass ``δ`` by one cell costs
``δ h²``, linear in ``δ``, and gains only ``δ h |∇ψ|``: the step is a Lagrangian move
snapped to the cells). Agreement with the PDE is first order in ``τ`` in the resolved
range ``τ |v|_max >~ 3h`` (exact), or, for the entropic scheme with ``ε = 4τ²``, as long
as the mesh resolves ``√(ε b̂)``. The summed EDI residual shrinks at about first order
for the entropic scheme under joint refinement ``h ∝ τ``; for the exact scheme it
plateaus at a few per cent of the dissipation (the snapping error of ``W²/τ²``).
"""

from __future__ import annotations

import logging
import math
import time
import warnings
from collections.abc import Iterator
from dataclasses import replace
from typing import Any, NamedTuple

import numpy as np

from ..attention.heads import Attention, Heads
from ..attention.mask import refuse_masked
from ..attention.schedules import as_schedule
from ..diagnostics import BalanceAccumulator
from ..energy import dE_dt_weights, evaluate, head_energies, slope_terms
from ..infra.accuracy import StepController
from ..infra.progress import progress_bar
from ..results import finish_history
from ..status import Status, failed_run, unjudged_status
from .accuracy import doubling_error, fixed_tau_check, tolerance_check, with_step
from .energy import _check_heads, energy_gradient
from .fv import fv_free_fisher, fv_slope2
from .options import (
    JKOOptions,
    JKOWarning,
    auto_tau,
    check_diffusion_scheme,
    check_tolerance_scheme,
)
from .result import JKOResult, free_balance, judge
from .schemes import SCHEMES
from .step import JKOStepInfo
from .steppers import FVScheme, OTScheme, as_dual

__all__ = [
    "FVScheme",  # (defined in wflow.jko.steppers)
    "OTScheme",
    "JKOState",
    "JKOResult",
    "auto_step",
    "iterate_jko",
    "solve_jko",
]

logger = logging.getLogger(__name__)


class JKOState(NamedTuple):
    """One JKO time level (yielded by :func:`iterate_jko`).

    Attributes
    ----------
    t : float
    step : int
    m : (M,) array
        Cell masses.
    heads : Heads
        Heads at ``t``.
    terms : dict
        ``E, E_h, dEdt_w, slope2, G2, bhat_mean`` at ``(μ_k, t_k)``.
    info : JKOStepInfo or None
        The step that led here (``None`` for the initial state).
    jump : float
        Energy jump of a weight jump at ``t`` (layers), else 0.
    dt : float
        The step that led here (``τ``; with error control, the controller's; 0 at ``t_0``).
    err : float or None
        With error control: the local-error norm of the step pair ending here (in units
        of the tolerance, :func:`wflow.jko.accuracy.doubling_error`; 0 on the first half).
    rejected : int
        With error control: the steps the controller rejected so far.
    """

    t: float
    step: int
    m: np.ndarray
    heads: Heads
    terms: dict
    info: JKOStepInfo | None
    jump: float = 0.0
    dt: float = 0.0
    err: float | None = None
    rejected: int = 0


def _terms(points: np.ndarray, m: np.ndarray, heads: Heads, attn: Attention, schedule: Any,
           theta: np.ndarray, t: float, dual: Any = None, diffusion: float = 0.0
           ) -> tuple[dict, np.ndarray]:
    fe = evaluate(points, heads, attn, m=m)
    st = slope_terms(points, m, fe, heads, fe.vhat)
    E_h = head_energies(fe, m, attn)
    dEdt = 0.0 if schedule.static else dE_dt_weights(points, m, fe, heads,
                                                      schedule.A_dot(theta, t), attn)
    out = {"E": float(heads.w @ E_h), "E_h": np.asarray(E_h), "dEdt_w": float(dEdt),
           "slope2": float(st.slope2), "G2": float(st.G2), "power_vhat": float(st.power),
           "bhat_mean": float(m @ fe.bhat), "bhat_min": float(fe.bhat.min()),
           "bhat_max": float(fe.bhat.max())}
    if dual is not None:  # the slope in the FV scheme's own metric
        psi = np.einsum("h,hm->m", heads.w, fe.Phi) / attn.beta
        out["slope2_h"] = fv_slope2(dual, m, psi, fe.bhat, heads.value_alignment())
        if diffusion > 0:  # the free energy F = D H − sE and its relative Fisher information
            sign = heads.value_alignment()
            out["free_energy"] = diffusion * dual.entropy(m) - sign * out["E"]
            out["free_fisher_h"] = fv_free_fisher(dual, m, psi, diffusion=diffusion,
                                                  sign=sign)
    return out, fe.bhat


def _prepare(points: np.ndarray, areas: np.ndarray, mass0: np.ndarray
             ) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    x = np.asarray(points, dtype=np.float64)
    if x.ndim != 2 or x.shape[1] != 3:
        raise ValueError(f"points: expected cell centroids of shape (M, 3), got {x.shape}")
    if not np.all(np.isfinite(x)):
        raise ValueError("points: contains NaN or Inf")
    nrm = np.linalg.norm(x, axis=1)
    if np.any(nrm <= 0):
        raise ValueError("points: a centroid is the zero vector")
    x = x / nrm[:, None]
    a = np.asarray(areas, dtype=np.float64)
    if a.shape != (x.shape[0],) or not np.all(np.isfinite(a)) or np.any(a <= 0):
        raise ValueError(f"areas: expected {x.shape[0]} finite positive cell areas")
    m = np.asarray(mass0, dtype=np.float64)
    if m.shape != (x.shape[0],):
        raise ValueError(f"mass0: expected {x.shape[0]} cell masses, got shape {m.shape}")
    if not np.all(np.isfinite(m)) or np.any(m < 0) or not m.sum() > 0:
        raise ValueError("mass0: cell masses must be finite, >= 0, with positive total")
    return x, a, m / m.sum()


def auto_step(points: np.ndarray, areas: np.ndarray, mass0: np.ndarray,
              heads_or_schedule: Any, attn: Attention, *, options: JKOOptions,
              eps: bool = False) -> tuple[JKOOptions, dict[str, Any]]:
    """Choose ``τ`` (and, with ``eps`` and ``ot = "sinkhorn"``, ``ε``) from the mesh.

    ``τ`` = :func:`~wflow.jko.options.auto_tau` ``(T, h, |v|_max)`` with ``h = √(mean |K|)``
    and ``|v|_max`` the largest surrogate speed ``|v̂|`` at ``t = 0`` over the cells holding
    mass, so that ``τ|v|_max ≈ 3h`` for the OT scheme (off the locking plateau) and, by
    the same rule, for the FV scheme (:data:`~wflow.jko.options.TAU_CELLS_FV` = 3; the FV
    step accepts any ``τ``); with token diffusion ``D > 0`` the heat flow's steps
    ``T·4D/(3h)²`` are added (its spread ``√(4Dτ)`` kept at ``3h``). ``ε = h²/min b̂`` (the
    Gibbs kernel of width ``√(ε b̂)`` spans a cell; ``ε ∝ τ²``, so ``ε = o(τ)``).

    Returns
    -------
    (JKOOptions, dict)
        The options with ``tau`` (and ``eps``) set, and the record of the choice
        (``rule``, ``h``, ``vmax``, ``tau``, ``cells_per_step = τ|v|_max/h``, ``eps``).
    """
    refuse_masked(attn, "the JKO scheme's automatic step")
    x, a, m = _prepare(points, areas, mass0)
    schedule = as_schedule(heads_or_schedule, deterministic=True)
    fe = evaluate(x, schedule.heads_at(schedule.initial_theta()), attn, m=m)
    speed = np.linalg.norm(fe.vhat, axis=1)
    vmax = float(np.max(speed[m > 0]))
    h = float(np.sqrt(np.mean(a)))
    cells = SCHEMES.resolve(options.scheme).resolve(mesh_given=True).tau_cells
    tau = auto_tau(options.T, h, vmax, cells=cells, diffusion=options.diffusion)
    changes: dict[str, Any] = {"tau": tau}
    if eps and options.ot == "sinkhorn":
        changes["eps"] = h * h / float(np.min(fe.bhat))
    opts = replace(options, **changes)
    info = {"rule": f"tau = T/N, N = max(1, round(T |v|max / ({cells:g} h))), "
                    "h = sqrt(mean cell area), |v|max = max |v̂| at t = 0"
                    + ("; eps = h²/min b̂" if "eps" in changes else ""),
            "h": h, "vmax": vmax, "tau": tau, "steps": opts.steps,
            "cells_per_step": tau * vmax / h, "eps": opts.epsilon}
    if options.diffusion > 0:  # the heat flow's spread per step, in cells (auto_tau)
        info["rule"] += (f"; with token diffusion N = max(1, round(T |v|max / ({cells:g} h) "
                         f"+ T·4D/({cells:g} h)²)), D = {options.diffusion:g}")
        info["diffusive_cells_per_step"] = math.sqrt(4.0 * options.diffusion * tau) / h
    return opts, info


def _resolve_scheme(opts: JKOOptions, mesh: Any) -> JKOOptions:
    """The options with the scheme that runs (``"auto"``: ``"fv"`` with a mesh, else ``"ot"``).

    A registered scheme stays a name (what the outputs record), a user's object itself.
    """
    given = SCHEMES.resolve(opts.scheme)
    scheme = given.resolve(mesh_given=mesh is not None)
    if scheme is given:
        return opts
    logger.info("jko: scheme %r -> %r (%s)", str(given), str(scheme),
                "mesh connectivity given" if mesh is not None else "no mesh connectivity")
    registered = scheme.name in SCHEMES and SCHEMES.get(scheme.name) is scheme
    return replace(opts, scheme=scheme.name if registered else scheme)


def iterate_jko(points: np.ndarray, areas: np.ndarray, mass0: np.ndarray,
                heads_or_schedule: Any, attn: Attention, *,
                options: JKOOptions | None = None, mesh: Any = None,
                step_mobility: Any = None) -> Iterator[JKOState]:
    """Generate the JKO sequence ``(t_k, μ_k)``, ``t_k = kτ``, ``k = 0..T/τ``.

    Parameters
    ----------
    points : (M, 3) array
        Cell centroids (projected to the unit sphere here).
    areas : (M,) array
        Cell areas.
    mass0 : (M,) array
        Initial cell masses (normalised to 1 here).
    heads_or_schedule : Heads or deterministic Schedule
        Static heads or a weight path; value-aligned symmetric heads at all times.
    attn : Attention
    options : JKOOptions
    mesh : Triangulation, SphereMesh or DualGeometry, optional
        The mesh connectivity (required by ``scheme = "fv"``; cells in the order of
        ``points``). The FV scheme places the masses at the spherical circumcentres and
        evaluates the energy there (``points`` are then only checked for their count).
    step_mobility : callable, optional
        ``b̂ -> b̂'`` (arrays of shape ``(M,)``): the mobility of the step's metric
        ``W²_{b̂'}`` as a function of the model's lagged ``b̂[μ_k]`` (default: ``b̂``
        itself). For negative controls only (a missing or wrong mobility factor, e.g.
        ``lambda b: 2 * b`` or ``np.ones_like``): the step then reports its transport
        cost ``W2sq`` in its own metric ``W²_{b̂'}``, while the slopes and the EDI keep the
        model's ``b̂``, so the EDI residual of a wrong mobility is first order in the
        error (``τ(c − 1)/2 |∂E|²`` per step for ``b̂' = c b̂``). Not a scenario option.

    Yields
    ------
    JKOState
        The initial state, then one per step (``info`` holds the step record).

    Notes
    -----
    With ``options.rtol``/``atol`` and ``adaptive`` (the default), the steps are the
    error controller's (:mod:`wflow.jko.accuracy`): from ``(t, μ)`` one step ``h`` and
    two steps ``h/2`` are taken, the two halves are kept (both yielded, ``t + h/2`` and
    ``t + h``) and their local error is the Richardson estimate at the scheme's order
    ``q`` (:meth:`~wflow.jko.schemes.JKOScheme.order`); a
    :class:`~wflow.infra.accuracy.StepController` with ``span = T`` accepts a pair when
    its error norm per unit step ``‖e‖T/h <= 1``. ``tau`` is the first and largest step;
    the steps land on every jump time of the weights. Otherwise the steps are ``t_k = kτ``.
    """
    refuse_masked(attn, "the JKO scheme (a minimising movement of the energy)")
    opts = _resolve_scheme(options or JKOOptions(), mesh)
    check_diffusion_scheme(opts, mesh_given=mesh is not None)
    x, a, m = _prepare(points, areas, mass0)
    schedule = as_schedule(heads_or_schedule, deterministic=True)
    tau = opts.tau
    jumps = [float(j) for j in schedule.jump_times if 0 < j < opts.T]
    check_tolerance_scheme(opts, mesh_given=mesh is not None)
    for j in jumps if opts.tolerance is None or not opts.adaptive else ():
        if abs(j / tau - round(j / tau)) > 1e-9 * max(1.0, j / tau):
            raise ValueError(f"jko.tau: the weight schedule jumps at t = {j:g}, which must be "
                             f"a multiple of tau = {tau:g}")
    scheme = SCHEMES.resolve(opts.scheme)
    dual = None
    if scheme.on_dual:
        dual = as_dual(mesh, x.shape[0])
        x = dual.centres
    theta = schedule.initial_theta()
    heads = schedule.heads_at(theta)
    sign = _check_heads(heads)
    terms, bhat = _terms(x, m, heads, attn, schedule, theta, 0.0, dual, opts.diffusion)
    run = scheme.prepare(x, a, m, dual, heads, attn, opts)
    yield JKOState(0.0, 0, m, heads, terms, None, dt=0.0)

    def advance(m: np.ndarray, theta: np.ndarray, t: float, h: float
                ) -> tuple[np.ndarray, JKOStepInfo, np.ndarray, Heads]:
        """One step of size ``h`` from ``(t, μ)``: ``(m_new, info, θ(t + h), heads)``."""
        _, theta_new = schedule.advance(theta, t, h, None)
        heads_new = schedule.heads_at(theta_new)
        if _check_heads(heads_new) != sign:
            raise ValueError(f"schedule: the value alignment of the heads changed sign at "
                             f"t = {t + h:g}")
        # lagged mobility b̂[μ_k] (heads of t_{k+1}: the step's metric), stopping scale
        fe = evaluate(x, heads_new, attn, m=m)
        s2 = slope_terms(x, m, fe, heads_new, fe.vhat).slope2
        e = float(heads_new.w @ head_energies(fe, m, attn))
        bh = fe.bhat if step_mobility is None else np.asarray(step_mobility(fe.bhat), float)
        o = opts if h == opts.tau else with_step(opts, h)
        m_new, info = scheme.step(run, m, heads_new, attn, o, fe=fe, sign=sign, bhat=bh,
                                  slope2=s2, energy=e)
        if not np.all(np.isfinite(m_new)):
            raise FloatingPointError(f"jko: non-finite cell masses at t = {t + h:.6g}")
        return m_new, info, theta_new, heads_new

    def land(k: int, t_new: float, h: float, m: np.ndarray, info: JKOStepInfo,
             theta: np.ndarray, heads: Heads, **extra: Any) -> tuple[JKOState, np.ndarray]:
        """The state after a kept step (a weight jump at ``t_new`` applied)."""
        if not info.converged:
            warnings.warn(scheme.unconverged(k, t_new, h, info, opts), JKOWarning,
                          stacklevel=3)
        terms, _ = _terms(x, m, heads, attn, schedule, theta, t_new, dual, opts.diffusion)
        jump = 0.0
        if any(abs(t_new - j) <= 1e-9 * max(1.0, t_new) for j in jumps):
            E_before = terms["E"]
            theta = schedule.after_jump(theta, t_new)
            heads = schedule.heads_at(theta)
            terms, _ = _terms(x, m, heads, attn, schedule, theta, t_new, dual,
                              opts.diffusion)
            jump = terms["E"] - E_before
        return JKOState(t_new, k, m, heads, terms, info, jump, dt=h, **extra), theta

    tol = opts.tolerance
    if tol is None or not opts.adaptive:  # the steps τ (today's loop)
        for k in range(opts.steps):
            t = k * tau
            m, info, theta, heads = advance(m, theta, t, tau)
            st, theta = land(k + 1, (k + 1) * tau, tau, m, info, theta, heads)
            yield st
        return
    # error control: one step h against two steps h/2 (the halves kept), a PI controller
    # on the error per unit step over [0, T] (wflow.jko.accuracy), landing on every jump
    q = int(scheme.order())
    ctrl = StepController(order=q, span=opts.T, dt_min=1e-12 * opts.T)
    tiny = 1e-9 * max(opts.T, 1.0)
    t, h, k = 0.0, tau, 0
    for t_end in sorted(set(jumps) | {opts.T}):
        while t < t_end - tiny:
            finish = h >= t_end - t - tiny
            h_try = (t_end - t) if finish else h
            full = advance(m, theta, t, h_try)
            half = advance(m, theta, t, 0.5 * h_try)
            two = advance(half[0], half[2], t + 0.5 * h_try, 0.5 * h_try)
            err = doubling_error(m, full[0], two[0], a, q, tol)
            ok, h_next = ctrl.propose(h_try, err)
            if ok:
                t_new = t_end if finish else t + h_try
                st, _ = land(k + 1, t + 0.5 * h_try, 0.5 * h_try, half[0], half[1],
                             half[2], half[3], err=0.0, rejected=ctrl.rejected)
                yield st
                m, info, theta, heads = two
                st, theta = land(k + 2, t_new, t_new - st.t, m, info, theta, heads,
                                 err=err, rejected=ctrl.rejected)
                yield st
                t, k = t_new, k + 2
            else:
                logger.debug("jko: t = %.6g, step %.3e rejected (error %.3g of the tolerance "
                             "per unit time), retrying with %.3e", t, h_try,
                             err * opts.T / h_try, h_next)
            h = min(h_next, tau)


def solve_jko(mass0: np.ndarray, heads_or_schedule: Any, attn: Attention, *_old: Any,
              points: np.ndarray | None = None, areas: np.ndarray | None = None,
              mesh: Any = None, options: JKOOptions | None = None, step_mobility: Any = None,
              **kwargs: Any) -> JKOResult:
    """Run the JKO scheme on ``[0, T]`` and collect diagnostics (see :class:`JKOResult`).

    The order of every solve function (docs/guide/solvers.md): the initial state, the
    heads or schedule, the attention; then keywords only (the geometry, ``options=``)::

        solve_jko(mass0, heads, attn, points=centroids, areas=areas, mesh=mesh,
                  options=JKOOptions(...))

    The former order ``solve_jko(points, areas, mass0, heads, attn)`` (five positional
    arguments) still runs for one release, with a :class:`DeprecationWarning`.

    Parameters
    ----------
    mass0 : (M,) array
        Initial cell masses ``μ_0`` (normalised to 1), in the order of ``points``.
    heads_or_schedule, attn
        See :func:`iterate_jko`.
    points : (M, 3) array
        Required (keyword). Cell centres (projected to the sphere).
    areas : (M,) array
        Required (keyword). Cell areas.
    options : JKOOptions, optional
        Keyword arguments override its fields.
    mesh : Triangulation, SphereMesh or DualGeometry, optional
        Required by ``scheme = "fv"`` (the default): see :func:`iterate_jko`.
    step_mobility : callable, optional
        Negative controls only: the mobility of the step's metric as a function of the
        model's ``b̂`` (:func:`iterate_jko`); the diagnostics keep the model's ``b̂``.
    """
    if len(_old) == 2 and np.ndim(mass0) == 2:  # the former (points, areas, mass0, heads, attn)
        if points is not None or areas is not None:
            raise TypeError("solve_jko: give points and areas once, as keywords "
                            "(solve_jko(mass0, heads, attn, points=..., areas=...))")
        warnings.warn("solve_jko(points, areas, mass0, heads, attn) is deprecated: call "
                      "solve_jko(mass0, heads, attn, points=points, areas=areas)",
                      DeprecationWarning, stacklevel=2)
        points, areas, mass0, heads_or_schedule, attn = (mass0, heads_or_schedule, attn,
                                                         *_old)
    elif _old:
        raise TypeError(f"solve_jko: takes 3 positional arguments (mass0, heads, attn), got "
                        f"{3 + len(_old)}")
    if points is None or areas is None:
        raise TypeError("solve_jko: points= and areas= are required (solve_jko(mass0, heads, "
                        "attn, points=..., areas=...))")
    opts = options or JKOOptions()
    if kwargs:
        opts = replace(opts, **kwargs)
    opts = _resolve_scheme(opts, mesh)
    check_diffusion_scheme(opts, mesh_given=mesh is not None)  # before any computing
    refuse_masked(attn, "the JKO scheme (a minimising movement of the energy)")
    check_tolerance_scheme(opts, mesh_given=mesh is not None)
    tol = opts.tolerance
    scheme = SCHEMES.resolve(opts.scheme)
    rows: dict[str, list] = {}
    masses: list[np.ndarray] = []
    acc: BalanceAccumulator | None = None
    status, message = Status.SUCCESS, ""
    prev: JKOState | None = None
    sign = 0
    bar = progress_bar(opts.steps, opts.progress, desc="jko")
    t_start = time.perf_counter()
    dual = as_dual(mesh, np.shape(points)[0]) if scheme.on_dual else None
    if dual is not None:
        mesh = dual
        xs = dual.centres
    else:
        xs = np.asarray(points) / np.linalg.norm(points, axis=1, keepdims=True)

    def put(key: str, val: Any) -> None:
        rows.setdefault(key, []).append(val)

    rejected = 0
    try:
        m_init = None
        for st in iterate_jko(points, areas, mass0, heads_or_schedule, attn, options=opts,
                              mesh=mesh, step_mobility=step_mobility):
            if m_init is None:
                m_init = st.m.copy()
            sign = st.heads.value_alignment()
            tm = st.terms
            info = st.info
            if acc is None:
                acc = BalanceAccumulator(sign=sign, E0=tm["E"])
                edi_step = ineq = 0.0
                W2sq = ot_value = 0.0
                frac = 1.0
            else:
                assert prev is not None and info is not None
                tau = st.t - prev.t
                W2sq, ot_value = info.W2sq, info.ot_value
                speed2 = W2sq / tau**2
                E_new = tm["E"] - st.jump
                left = {**prev.terms, "speed2": speed2, "power": sign * speed2}
                right = {**tm, "speed2": speed2, "power": sign * speed2}
                acc.add(tau, left, right, E_new=E_new)
                if st.jump:
                    acc.jump(st.jump)
                work = 0.5 * tau * (prev.terms["dEdt_w"] + tm["dEdt_w"])
                # the slope in the scheme's own metric (FV: the discrete Fisher slope)
                sk = "slope2_h" if "slope2_h" in tm else "slope2"
                diss = W2sq / (2 * tau) + 0.25 * tau * (prev.terms[sk] + tm[sk])
                pred = tau**2 * 0.5 * (prev.terms["slope2"] + tm["slope2"])
                frac = W2sq / pred if pred > 0 else 1.0
                edi_step = sign * (E_new - prev.terms["E"] - work) - diss
                # minimality against ν = μ_k at the new time: s ΔE at fixed t_{k+1} >= W²/2τ
                E_old_new = 0.5 * float(prev.m @ energy_gradient(
                    xs, prev.m, st.heads if not st.jump else prev.heads, attn,
                    backend=scheme.gradient_backend))
                ineq = sign * (E_new - E_old_new) - W2sq / (2 * tau)
                if bar is not None:
                    bar.update(1)
            put("t", st.t)
            put("E", tm["E"])
            put("E_h", tm["E_h"])
            for key in ("dEdt_w", "slope2", "G2", "bhat_mean", "bhat_min", "bhat_max"):
                put(key, tm[key])
            put("speed2", 0.0 if info is None else W2sq / st.dt**2)
            put("W2sq", W2sq)
            put("W2", math.sqrt(max(W2sq, 0.0)))
            put("ot_value", ot_value)
            # partial locking is judged on converged steps only (an unconverged inner
            # solve is reported as such, whatever it moved)
            locked = info is not None and (_is_locked(info, prev, st.dt) or (
                info.converged and _moving(prev, st.dt) and frac < opts.lock_fraction))
            put("locked", float(locked))
            put("moved_fraction", frac)
            put("empty", 0.0 if m_init is None else float(np.count_nonzero(
                (m_init > 0) & (st.m < 1e-9 * m_init))))
            if "slope2_h" in tm:
                put("slope2_h", tm["slope2_h"])
            for key, val in scheme.history(info).items():
                put(key, val)
            if opts.diffusion > 0:  # token diffusion: the free-energy EDI of each step
                free = {} if info is None or info.free is None else info.free
                put("free_energy", tm["free_energy"])
                put("free_fisher_h", tm["free_fisher_h"])
                for key in ("free_edi_step", "W2sq_entropy", "entropy_newton"):
                    put(key, float(free.get(key, 0.0)))
            put("inner_iters", 0 if info is None else info.inner_iters)
            put("gap", 0.0 if info is None else info.gap)
            put("gap_rel", 0.0 if info is None else info.gap_rel)
            put("converged", 1.0 if info is None else float(info.converged))
            put("W2sq_pot", 0.0 if info is None or not math.isfinite(info.W2sq_pot)
                else info.W2sq_pot)
            put("edi_step", edi_step)
            put("jko_ineq", ineq)
            put("balance_edi", acc.residuals()["edi"])
            put("mass", float(st.m.sum()))
            put("support", float(np.count_nonzero(st.m > 1e-14)))
            put("rho_max", float(np.max(st.m / np.asarray(areas))))
            put("step_time", 0.0 if info is None else info.time)
            if tol is not None:  # error control: the step and its local-error norm
                put("tau", st.dt)
                put("error_norm", 0.0 if st.err is None else st.err)
                rejected = st.rejected
            masses.append(st.m.copy())
            if info is not None and not info.converged:
                status = Status.NOT_CONVERGED
                message = (f"{int(np.sum(np.asarray(rows['converged']) == 0))} inner solve(s) "
                           f"missed jko.gap_rtol = {opts.gap_rtol:g}")
            prev = st
    except FloatingPointError as exc:
        status, message = failed_run(exc, "jko", logger, JKOWarning)
    finally:
        if bar is not None:
            bar.close()
    wall = time.perf_counter() - t_start
    history, tt, status, message = finish_history(rows, status, message)
    n_locked = int(np.sum(history["locked"][1:])) if "locked" in history else 0
    checks: dict[str, Any] = {}
    if status != Status.FAILED and acc is not None and len(tt) > 1:
        status, message, checks = judge(acc.residuals(), history, n_locked, status, message,
                                         opts, attn)
    x = np.asarray(xs, dtype=np.float64)
    a = np.asarray(areas, dtype=np.float64)
    mm = np.asarray(masses) if masses else np.empty((0, a.size))
    nsteps = max(len(masses) - 1, 0)
    it = history.get("inner_iters", np.zeros(1))[1:]
    st_time = history.get("step_time", np.zeros(1))[1:]
    stats = {"steps": nsteps, "cells": int(a.size), "tau": opts.tau, "eps": opts.epsilon,
             "inner_iters_total": int(it.sum()) if it.size else 0,
             "inner_iters_max": int(it.max()) if it.size else 0,
             "gap_rel_max": float(history["gap_rel"][1:].max()) if nsteps else 0.0,
             "wall_time": wall, "time_per_step": float(st_time.mean()) if st_time.size else 0.0,
             "time_per_inner_iter": float(st_time.sum() / max(it.sum(), 1)),
             "locked_steps": n_locked,
             "mass_error_max": float(np.max(np.abs(mm.sum(axis=1) - 1.0))) if mm.size else 0.0}
    if tol is not None and status != Status.FAILED and nsteps:
        q = int(scheme.order())
        if opts.adaptive:
            check = tolerance_check(history, tol, opts.T, q)
        else:  # the fixed steps judged: the run repeated at τ/2
            half = _final_masses(points, areas, mass0, heads_or_schedule, attn, mesh,
                                 replace(opts, tau=0.5 * opts.tau, rtol=None, atol=None,
                                         progress=False), step_mobility)
            check = fixed_tau_check(mm[-1], half, a, tol, opts.tau, q)
        checks["tolerance"] = check
        stats.update({"rtol": tol.rtol, "atol": tol.atol, "adaptive": opts.adaptive,
                      "accepted_steps": nsteps, "error_rejected_steps": rejected,
                      "error_estimate": check["estimate"]})
        if not check["passed"] and status in (Status.SUCCESS, Status.INACCURATE):
            status = Status.INACCURATE
            message = "; ".join(r for r in (message, check["message"]) if r)
            logger.warning("jko run inaccurate: %s", check["message"])
    status, message = unjudged_status(  # token diffusion: no check is judged
        status, message, checks, remedy="set jko.rtol to judge the run by the error "
        "estimate of its steps (jko.scheme = 'fv')")
    bal = acc.residuals() if acc is not None else {}
    if opts.diffusion > 0 and bal:
        bal.update(free_balance(history, opts.tau, attn))
    return JKOResult(status, message, opts, tt, mm, mm / a[None, :], bal, x, a, sign,
                     history=history, stats=stats, checks=checks, wall_time=wall, order=1)


def _final_masses(points: np.ndarray, areas: np.ndarray, mass0: np.ndarray, heads: Any,
                  attn: Attention, mesh: Any, opts: JKOOptions, step_mobility: Any
                  ) -> np.ndarray:
    """The cell masses at ``T`` of :func:`iterate_jko` with ``opts`` (no records kept)."""
    with warnings.catch_warnings():  # the run's own warnings were given at its step τ
        warnings.simplefilter("ignore", JKOWarning)
        for st in iterate_jko(points, areas, mass0, heads, attn, options=opts, mesh=mesh,
                              step_mobility=step_mobility):
            m = st.m
    return m


def _moving(prev: JKOState | None, tau: float) -> bool:
    """The slope is not negligible: ``τ|∂E|²(μ_k) > 1e-12 |E|``."""
    return prev is not None and tau * prev.terms["slope2"] > 1e-12 * abs(prev.terms["E"])


def _is_locked(info: JKOStepInfo, prev: JKOState | None, tau: float) -> bool:
    """Whether a step is *locked*: the inner solver left ``μ_k`` where it was.

    Locked: no inner iteration, or ``W² = 0``, although the slope is not negligible — the
    energy the step should release, ``τ|∂E|²(μ_k)``, exceeds ``1e-12 |E|`` (the floor of
    the gap scale).
    """
    if prev is None:
        return False
    moving = tau * prev.terms["slope2"] > 1e-12 * abs(prev.terms["E"])
    return moving and (info.inner_iters == 0 or info.W2sq == 0.0)
