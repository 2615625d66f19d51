r"""The kinetic (mean-field) limit of causal attention on a sphere mesh: the slice solver.

Position becomes ``s = i/n ∈ [0, 1]`` and the state a family ``ρ_t(s, ·)`` of probability
densities on S² (docs/theory.md, the kinetic limit of causal attention):

.. math::

    ∂_t ρ(s, ·) + \operatorname{div}_S\big(ρ(s, ·)\, v_s\big) = 0, \qquad
    v_s(x) = P_x \sum_h w_h f_h[μ_s^b](x), \qquad
    μ_s^b = \int_0^s e^{b(s, s')} ρ(s', ·)\, ds',

with ``f_h`` the head output of the attention kind (softmax: normalised over ``μ_s^b``;
USA and ReLU: unnormalised, so ``|v_s| = O(s)``) and the limit of the positional bias,
``b(s, s') = −λ (s − s')`` for ALiBi (``b(i, j) = −(λ/n)(i − j)`` over ``n`` tokens).

Discretisation:

* in ``s``: ``S`` slices at ``s_k = (k + ½)/S``, each the cell masses ``(M,)`` of a
  probability density times ``1/S`` (the state is an ``(S, M)`` array); ``μ_{s_k}^b`` by
  the quadrature of :mod:`wflow.kinetic.slices` (second order in ``1/S``);
* on the sphere: the finite volumes of :mod:`wflow.pde.fv` per slice (upwind or limited
  linear reconstruction, mass exact per slice, positivity under the CFL bound), the
  velocity at the edge quadrature points from :func:`wflow.kernels.kernel_sums` with the
  cells' projected centroids as sources: one call per slice and velocity evaluation on
  that slice's own masses, combined into the cumulative sums by prefix sums (the sums are
  linear in the masses, numerator and normaliser alike): ``O(S · N_q · M)`` work, memory
  ``O(S · N_q · H · d)``, nothing ``O((S M)²)``;
* in time: the SSP integrators of :mod:`wflow.pde.integrators` on the whole ``(S, M)``
  state, ``Δt = min(dt, cfl · min_{k,K} m_{kK}/out_{kK}, time to the next output)``, a step
  whose later stage breaks positivity retried with a smaller ``Δt``.

The first position: ``μ_s^b`` has mass ``O(s)``. For the unnormalised kinds ``v_0 = 0``:
the density of the first tokens does not move (slice 0 moves at speed ``O(1/S)``). For
softmax ``μ_s^b / |μ_s^b| → ρ(0, ·)``: the first slice follows the non-causal transformer
PDE of its own density (for a single first token, a Dirac with ``V = I``: it does not
move, as in the particle system). Both masks (``j ≤ i`` and ``j < i``) have this limit.

Exact reductions (tested): softmax with identical slices (any bias) is the transformer PDE
of that density on every slice (the normalisation removes ``μ_s^b``'s weight); USA with
``S = 1`` and the midpoint quadrature feels half the slice: the PDE at half the time.

Parallel: as :mod:`wflow.pde.solver` — the cells over MPI ranks, every slice's masses
all-gathered each stage (``O(S M)`` communication), equal to serial to round-off.
"""

from __future__ import annotations

import logging
import math
import time
from collections.abc import Iterator
from dataclasses import fields, replace
from typing import Any, NamedTuple

import numpy as np

from ..attention.heads import Attention, Heads
from ..attention.kinds import get_kind
from ..attention.mask import Causal
from ..attention.schedules import Schedule, as_schedule
from ..energy import field_from_sums
from ..geometry.density import initial_density
from ..geometry.mesh import SphereMesh
from ..infra.accuracy import StepController
from ..infra.progress import progress_bar
from ..infra.schema import ScenarioError
from ..kernels import KernelLog, KernelSums, kernel_sums
from ..pde.accuracy import controlled_step, tolerance_check, unestimated
from ..pde.fv import FiniteVolumes, check_min_dt, retry_dt, ssp_step
from ..pde.integrators import TIME_INTEGRATORS
from ..pde.limiters import check_applicable
from ..pde.velocity import global_backend
from ..results import finish_history
from ..status import Status
from .options import KineticOptions
from .result import KineticResult
from .slices import CumulativeMeasure, SliceBias, slice_centres

__all__ = ["KineticState", "KineticResult", "initial_slices", "iterate_kinetic",
           "solve_kinetic"]

logger = logging.getLogger(__name__)

#: Relative drift of a slice's mass that fails a run (round-off is ``~ steps · ε``).
MASS_TOL = 1e-10

#: Why a kinetic run has no check but the tolerance's (see :func:`wflow.pde.accuracy.unestimated`).
NO_CHAIN = "the causal system has no energy, so no chain rule to judge"


class KineticState(NamedTuple):
    """One accepted time level (yielded by :func:`iterate_kinetic`).

    Attributes
    ----------
    t : float
    step : int
        Accepted steps so far.
    dt : float
        The step that led here (0 for the initial state).
    m : (S, M) array
        Cell masses of every slice (global original cell order; slice ``k`` sums to ``1/S``).
    theta : array
        Weight parameters ``θ(t)``.
    is_save : bool
        ``t`` is one of the output times.
    err : float or None
        With ``pde.rtol``/``atol``: the step's local-error norm (step doubling,
        :func:`~wflow.infra.accuracy.error_norm`, ``1`` = the tolerance); else ``None``.
    """

    t: float
    step: int
    dt: float
    m: np.ndarray
    theta: np.ndarray
    is_save: bool
    err: float | None = None


def initial_slices(mesh: SphereMesh, rho0: Any, S: int) -> np.ndarray:
    """Initial probability densities of the ``S`` slices, ``(S, M)`` (each ``Σ_K ρ_K|K| = 1``).

    Parameters
    ----------
    mesh : SphereMesh
    rho0 : density spec, (S, M) array, or sequence of S density specs
        One spec (anything :func:`~wflow.geometry.density.initial_density` accepts): the
        same density on every slice (i.i.d. tokens). An ``(S, M)`` array or a sequence of
        ``S`` specs: slice ``k``'s density ``ρ_0(s_k, ·)`` (e.g. built from
        :func:`~wflow.kinetic.slices.slice_centres`). Each is normalised to mass 1.
    S : int
    """
    if isinstance(rho0, np.ndarray) and rho0.ndim == 2 or isinstance(rho0, (list, tuple)):
        if len(rho0) != S:
            raise ValueError(f"rho0: expected {S} slices (kinetic.S), got {len(rho0)}")
        return np.stack([initial_density(mesh, r) for r in rho0])
    return np.tile(initial_density(mesh, rho0), (S, 1))


class _SliceVelocities:
    """The ``S`` velocities ``v_{s_k}`` at the edge quadrature points (one kernel call a slice)."""

    def __init__(self, fv: FiniteVolumes, schedule: Schedule, attn: Attention,
                 cum: CumulativeMeasure, backend: str, tol: float) -> None:
        self.fv, self.schedule, self.attn, self.cum = fv, schedule, attn, cum
        self.backend, self.tol = backend, tol
        # a masked attention: field_from_sums forms Z and the value sums only (no energy)
        self.field_attn = Attention(attn.kind, attn.beta, mask=Causal())
        self.log = KernelLog()
        self.n_evals = 0
        self.kernel_calls = 0
        self.eval_time = 0.0

    def __call__(self, m_glob: np.ndarray, theta: np.ndarray) -> np.ndarray:
        """``(S, N_q, 3)`` velocities of the slices with masses ``m_glob`` ``(S, M)``."""
        t0 = time.perf_counter()
        fv, cum, S = self.fv, self.cum, m_glob.shape[0]
        heads = self.schedule.heads_at(theta)
        cache: dict[tuple, tuple[np.ndarray, np.ndarray]] = {}

        def cumulative(Q: np.ndarray, K: np.ndarray, values: np.ndarray | None
                       ) -> tuple[np.ndarray, np.ndarray]:
            key = (Q.tobytes(), K.tobytes(), None if values is None else values.tobytes())
            if key not in cache:
                Z, Y = [], []
                for m in m_glob:  # one call per slice on its own masses
                    ks = kernel_sums(fv.qhat, fv.chat_glob, m, Q, K, beta=self.attn.beta,
                                     kind=self.attn.kind, backend=self.backend, tol=self.tol,
                                     values=values)
                    self.log.add(ks.info)
                    Z.append(ks.Z)
                    Y.append(ks.Y)
                self.kernel_calls += S
                cache[key] = (cum.apply(np.stack(Z)), cum.apply(np.stack(Y)))
            return cache[key]

        v = np.empty((S, fv.qhat.shape[0], 3))
        for k in range(S):
            def sums(Q: np.ndarray, K: np.ndarray, potential: bool,
                     values: np.ndarray | None = None, k: int = k) -> KernelSums:
                Z, Y = cumulative(Q, K, values)
                return KernelSums(Z[k], Y[k], None, None)

            empty = np.ones(v.shape[1], dtype=bool) if cum.sees_nothing(k) else None
            v[k] = field_from_sums(fv.qhat, heads, self.field_attn, sums, empty=empty,
                                   gradient=False).v
        self.n_evals += 1
        self.eval_time += time.perf_counter() - t0
        return v


class _KineticRun:
    """Shared state of one run: the FV geometry, the velocities, counters."""

    def __init__(self, mesh: SphereMesh, opts: KineticOptions, schedule: Schedule,
                 attn: Attention, bias: SliceBias | None) -> None:
        popts = opts.pde
        self.opts = opts
        self.schedule = schedule
        self.span = popts.T  # the time interval's length (the tolerance is per unit time)
        self.integrator = TIME_INTEGRATORS.resolve(popts.integrator)
        check_applicable(popts)
        self.fv = FiniteVolumes(mesh, popts)
        self.cum = CumulativeMeasure(opts.S, opts.self_weight, opts.alibi, bias)
        backend = popts.kernel_backend
        if backend == "auto":
            backend = global_backend(self.fv, schedule, attn, popts.kernel_tol)
        self.vel = _SliceVelocities(self.fv, schedule, attn, self.cum, backend,
                                    popts.kernel_tol)
        self.rejected = 0
        self.rhs_time = 0.0
        self.umax = 0.0
        # error control (pde.rtol/atol): the PDE's step doubling over all slices, judged
        # by a PI controller per unit time (wflow.pde.accuracy)
        self.tol = popts.tolerance
        self.ctrl = (None if self.tol is None else StepController(
            order=self.integrator.order(), span=popts.T, dt_min=popts.min_dt))
        self.err_sum = 0.0  # Σ of the accepted steps' local-error norms (global estimate)

    def gather(self, m_own: np.ndarray) -> np.ndarray:
        """Owned ``(S, no)`` masses -> global ``(S, M)`` (original order, every rank)."""
        return np.stack([self.fv.gather(m) for m in m_own])

    def owned(self, m_glob: np.ndarray) -> np.ndarray:
        """Owned masses ``(S, no)`` (this rank's cells) of the global ``(S, M)``."""
        return m_glob[:, self.fv.orig_owned]

    def density(self, m_own: np.ndarray) -> np.ndarray:
        """Owned masses ``(S, no)`` -> each slice's probability density ``S m_{kK}/|K|``."""
        return m_own * (self.opts.S / self.fv.areas_glob[self.fv.orig_owned])[None, :]

    def stage_rates(self, m_glob: np.ndarray, t: float, theta: np.ndarray
                    ) -> tuple[np.ndarray, np.ndarray]:
        """:meth:`rates` (the kinetic velocity depends on ``t`` through ``θ`` only)."""
        return self.rates(m_glob, theta)

    def rates(self, m_glob: np.ndarray, theta: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """``dm/dt`` and outflow rates ``(S, no)`` of the owned cells of every slice."""
        t0 = time.perf_counter()
        v = self.vel(m_glob, theta)
        net, out = [], []
        for mk, vk in zip(m_glob, v, strict=True):
            n, o, info = self.fv.rates(mk, vk)
            net.append(n)
            out.append(o)
            self.umax = max(self.umax, info["umax"])
        self.rhs_time += time.perf_counter() - t0
        return np.stack(net), np.stack(out)

    def bound(self, m_own: np.ndarray, out: np.ndarray) -> float:
        """Largest positivity-preserving Euler step over every slice and cell."""
        return min(self.fv.bound(m, o) for m, o in zip(m_own, out, strict=True))

    def try_step(self, m_glob: np.ndarray, net0: np.ndarray, out0: np.ndarray, t: float,
                 dt: float, thetas: tuple) -> tuple[np.ndarray | None, float]:
        """One SSP step of all slices: (new owned masses or ``None``, smallest stage bound).

        ``thetas``: ``θ`` at ``t``, ``t + dt/2`` and ``t + dt``.
        """
        def rates(m_own: np.ndarray, c: float, theta: Any) -> tuple[np.ndarray, np.ndarray]:
            return self.rates(self.gather(m_own), theta)

        return ssp_step(self.integrator, self.owned(m_glob), net0, out0, dt,
                        dict(zip((0.0, 0.5, 1.0), thetas, strict=True)), rates, self.bound,
                        self.fv.comm)


def _check_inputs(schedule: Schedule, attn: Attention, opts: KineticOptions,
                  bias: SliceBias | None) -> None:
    if not isinstance(attn, Attention):
        raise ValueError("attn: an Attention (kind, beta) is required")
    if attn.bias is not None:
        raise ScenarioError(
            "attention.bias: the kinetic limit takes its bias in the position s ∈ [0, 1]: "
            "KineticOptions.alibi = λ (the ALiBi slope per token times n) or bias=b(s, s')")
    if (opts.alibi != 0.0 or bias is not None) and not get_kind(attn.kind).exponential:
        raise ValueError(f"kinetic.alibi: a positional bias factors out of the kernel only for "
                         f"exponential kinds (k(s + b) = e^b k(s)), not {attn.kind!r}")
    d = schedule.heads_at(schedule.initial_theta()).d
    if d != 3:
        raise ValueError(f"heads: the mesh solver works on S² (d = 3), got dimension {d}")
    if schedule.stochastic:
        raise ValueError("heads: the kinetic solver takes static or deterministic schedules, "
                         "not noisy weights")
    if any(0 < j < opts.pde.T for j in schedule.jump_times):
        raise ValueError("heads: the kinetic solver does not land on weight jumps (layers); "
                         "use static heads or a smooth schedule")


def iterate_kinetic(mesh: SphereMesh, rho0: np.ndarray, heads_or_schedule: Heads | Schedule,
                    attn: Attention, *, bias: SliceBias | None = None,
                    options: KineticOptions | None = None,
                    _run: _KineticRun | None = None) -> Iterator[KineticState]:
    """Generate the accepted time levels of the slices.

    Parameters
    ----------
    mesh : SphereMesh
    rho0 : (S, M) array
        Initial probability densities of the slices (:func:`initial_slices`), ``>= 0``.
    heads_or_schedule : Heads or Schedule
        Static heads or a deterministic weight schedule.
    attn : Attention
        Kind and ``β`` (a causal mask, if given, has the same limit; no token-level bias).
    bias : callable, optional
        ``b(s, s')`` vectorised over ``[0, 1]`` (instead of ``options.alibi``).
    options : KineticOptions

    Yields
    ------
    KineticState
        The initial state, then one per accepted step; the last has ``t = T``. Raises
        ``FloatingPointError`` if the step collapses below ``pde.min_dt`` or values become
        non-finite, ``RuntimeError`` after ``pde.max_steps`` steps.
    """
    opts = options or KineticOptions()
    popts = opts.pde
    schedule = as_schedule(heads_or_schedule)
    _check_inputs(schedule, attn, opts, bias)
    run = _run or _KineticRun(mesh, opts, schedule, attn, bias)
    fv, S = run.fv, opts.S
    rho0 = np.asarray(rho0, dtype=np.float64)
    if rho0.shape != (S, fv.M):
        raise ValueError(f"rho0: expected ({S}, {fv.M}) slice densities, got {rho0.shape}")
    if not np.all(np.isfinite(rho0)) or np.any(rho0 < 0):
        raise ValueError("rho0: densities must be finite and >= 0")
    m_glob = rho0 * fv.areas_glob[None, :]
    m_glob /= S * m_glob.sum(axis=1, keepdims=True)  # each slice a probability times 1/S
    tol = 1e-12 * popts.T
    saves = np.linspace(0.0, popts.T, int(popts.n_saves))
    theta = schedule.initial_theta()
    t, k, istop = 0.0, 0, 1
    yield KineticState(0.0, 0, 0.0, m_glob, theta, True)
    net, out = run.rates(m_glob, theta)
    ctrl = run.ctrl
    h_ctrl = popts.dt  # the controller's proposal (error control only)
    while istop < len(saves):
        if k >= popts.max_steps:
            raise RuntimeError(f"max_steps = {popts.max_steps} reached at t = {t:.6g} < T")
        t_stop = saves[istop]
        dt = min(popts.dt, popts.cfl * run.bound(run.owned(m_glob), out), t_stop - t)
        if ctrl is not None and popts.adaptive:
            dt = min(dt, h_ctrl)
        if t_stop - t - dt <= tol:
            dt = t_stop - t
        err = None
        while True:
            check_min_dt(dt, popts.min_dt, t)
            if ctrl is None:
                th_mid, th_new = schedule.advance(theta, t, dt, None)
                m_new, bmin = run.try_step(m_glob, net, out, t, dt, (theta, th_mid, th_new))
            else:
                m_new, bmin, err, th_new, h_ctrl, retry = controlled_step(
                    run, m_glob, net, out, t, dt, theta, None, h_ctrl, popts.adaptive)
                if retry:
                    dt = h_ctrl
                    continue
            if m_new is not None:
                break
            run.rejected += 1
            dt = retry_dt(t, dt, bmin, popts.cfl)
        landed = abs((t + dt) - t_stop) <= tol or dt == t_stop - t
        t = float(t_stop) if landed else t + dt
        k += 1
        m_glob = run.gather(m_new)
        if not np.all(np.isfinite(m_glob)):
            raise FloatingPointError(f"non-finite cell masses at t = {t:.6g}")
        theta = th_new
        istop += int(landed)
        yield KineticState(t, k, dt, m_glob, theta, landed, err)
        if istop < len(saves):
            net, out = run.rates(m_glob, theta)


def _stopped(exc: Exception) -> tuple[Status, str]:
    """The status of a run the loop stopped: ``MAX_STEPS`` (a ``RuntimeError``) or ``FAILED``."""
    if isinstance(exc, FloatingPointError):
        logger.error("kinetic run failed: %s", exc)
        return Status.FAILED, str(exc)
    logger.warning("kinetic: %s; raise pde.max_steps or dt", exc)
    return Status.MAX_STEPS, f"{exc}; raise pde.max_steps or dt"


def _split_kwargs(opts: KineticOptions, kwargs: dict[str, Any]) -> KineticOptions:
    """Keyword overrides: the kinetic fields on ``opts``, the others on ``opts.pde``."""
    own = {f.name for f in fields(KineticOptions)}
    mine = {k: v for k, v in kwargs.items() if k in own}
    pde = {k: v for k, v in kwargs.items() if k not in own}
    if pde:
        mine["pde"] = replace(mine.get("pde", opts.pde), **pde)
    return replace(opts, **mine) if mine else opts


def solve_kinetic(rho0: Any = "uniform", heads_or_schedule: Heads | Schedule | None = None,
                  attn: Attention | None = None, *, mesh: SphereMesh,
                  bias: SliceBias | None = None, options: KineticOptions | None = None,
                  **kwargs: Any) -> KineticResult:
    """Solve the kinetic limit of causal attention on a sphere mesh (module docstring).

    The order of every solve function: the initial state, the heads, the attention; then
    keywords only::

        solve_kinetic(rho0, heads, Attention("softmax", 4.0), mesh=mesh, S=32, alibi=1.0,
                      T=2.0, dt=0.01, order=2)

    Parameters
    ----------
    rho0 : density spec, (S, M) array or sequence of S specs
        Initial densities of the slices (:func:`initial_slices`); one spec: every slice.
    heads_or_schedule : Heads or Schedule
        Static heads or a deterministic weight schedule.
    attn : Attention
        Kind and ``β``. Its mask (``causal`` or ``causal_strict``, or none) does not change
        the limit; a token-level bias is refused (give ``alibi=λ`` or ``bias=``).
    mesh : SphereMesh
    bias : callable, optional
        A limit bias ``b(s, s')`` (vectorised over float arrays in ``[0, 1]``, finite),
        instead of ``alibi``; exponential kinds only.
    options : KineticOptions, optional
        Keyword arguments override its fields (``S``, ``quadrature``, ``alibi``) or those of
        its ``pde`` options (``T``, ``dt``, ``order``, ...).

    Returns
    -------
    KineticResult
        ``status == "success"`` only if ``T`` was reached with finite values, every slice's
        mass conserved to ``1e-10`` (relative, ``MASS_TOL``), the densities non-negative
        and, with ``pde.rtol``/``atol``, the time-error estimate within the tolerance
        (``checks["tolerance"]``; ``"inaccurate"`` when it is not). Without a tolerance no
        accuracy check is judged: ``"completed"``, naming the remedy.
    """
    if heads_or_schedule is None or attn is None:
        raise ValueError("heads/attention: the kinetic solver needs heads and an attention")
    opts = _split_kwargs(options or KineticOptions(), kwargs)
    popts = opts.pde
    schedule = as_schedule(heads_or_schedule)
    _check_inputs(schedule, attn, opts, bias)
    r0 = initial_slices(mesh, rho0, opts.S)
    run = _KineticRun(mesh, opts, schedule, attn, bias)
    fv = run.fv
    rows: dict[str, list] = {}
    steps: dict[str, list] = {"t": [], "dt": []}
    if run.tol is not None:
        steps["error_norm"] = []  # the step's local-error norm (1 = the tolerance)
    mass0: np.ndarray | None = None
    mass_err, min_rho = 0.0, math.inf
    status, message = Status.SUCCESS, ""
    bar = progress_bar(popts.T, popts.progress, desc="kinetic", unit="t", rank=fv.comm.rank,
                       time_axis=True)
    t_start = time.perf_counter()
    prev_t = 0.0
    try:
        for st in iterate_kinetic(mesh, r0, schedule, attn, bias=bias, options=opts, _run=run):
            steps["t"].append(st.t)
            steps["dt"].append(st.dt)
            if run.tol is not None:
                steps["error_norm"].append(0.0 if st.err is None else st.err)
            mass = st.m.sum(axis=1)
            mass0 = mass if mass0 is None else mass0
            mass_err = max(mass_err, float(np.max(np.abs(mass - mass0) / mass0)))
            rho = st.m * opts.S / fv.areas_glob[None, :]
            min_rho = min(min_rho, float(rho.min()))
            if st.is_save:
                for key, val in (("t", st.t), ("rho", rho), ("mass", mass),
                                 ("mean", opts.S * st.m @ fv.chat_glob),
                                 ("rho_min", rho.min(axis=1)), ("rho_max", rho.max(axis=1))):
                    rows.setdefault(key, []).append(val)
            if bar is not None:
                bar.update(st.t - prev_t)
            prev_t = st.t
    except (RuntimeError, FloatingPointError) as exc:
        status, message = _stopped(exc)
    finally:
        if bar is not None:
            bar.close()
    wall = time.perf_counter() - t_start
    rho_out = np.asarray(rows.pop("rho", np.empty((0, opts.S, fv.M))))
    mass_out = np.asarray(rows.pop("mass", np.empty((0, opts.S))))
    history, tt, status, message = finish_history(rows, status, message)
    if status == Status.SUCCESS and mass_err > MASS_TOL:
        status, message = Status.FAILED, (f"a slice's mass drifted by {mass_err:.2e} "
                                          "(relative): conservation broken")
    if status == Status.SUCCESS and min_rho < 0:
        status, message = Status.FAILED, f"negative density {min_rho:.3e}: positivity broken"
    nsteps = len(steps["t"]) - 1
    dts = np.asarray(steps["dt"][1:])
    vel = run.vel
    stats = {
        "steps": nsteps, "rejected_steps": run.rejected, "velocity_evals": vel.n_evals,
        "kernel_calls": vel.kernel_calls, "wall_time": wall,
        "time_per_step": wall / max(nsteps, 1), "rhs_time": run.rhs_time,
        "time_per_velocity_eval": vel.eval_time / max(vel.n_evals, 1),
        "mass_error_max": mass_err, "rho_min": min_rho,
        "dt_min": float(dts.min()) if nsteps else math.nan,
        "dt_max": float(dts.max()) if nsteps else math.nan,
        "max_normal_speed": run.umax, "cells": fv.M, "slices": opts.S,
        "ranks": fv.comm.size, "kernel": vel.log.summary(),
    }
    steps_arr = {k: np.asarray(v) for k, v in steps.items()}
    checks: dict[str, Any] = {}
    if run.tol is not None:  # error control: the controller's counts, the estimate judged
        assert run.ctrl is not None
        stats.update({"rtol": run.tol.rtol, "atol": run.tol.atol,
                      "adaptive": popts.adaptive, "accepted_steps": nsteps,
                      "error_rejected_steps": run.ctrl.rejected,
                      "error_estimate": run.err_sum})
        if nsteps:
            checks["tolerance"] = tolerance_check(run, steps_arr)
            if status == Status.SUCCESS and not checks["tolerance"]["passed"]:
                status, message = Status.INACCURATE, checks["tolerance"]["message"]
                logger.warning("kinetic run inaccurate: %s", message)
    else:  # conservation and positivity only: completed
        status, message = unestimated(status, message, checks, NO_CHAIN)
    res = KineticResult(status, message, opts, tt, slice_centres(opts.S), rho_out, mass_out,
                        steps_arr, mesh.gather_owned(mesh.centroids), fv.areas_glob,
                        history=history, stats=stats, checks=checks, wall_time=wall,
                        order=run.integrator.order())
    if status == Status.SUCCESS:
        logger.info("kinetic: %d slices, %d steps (%d rejected), %.2f s", opts.S, nsteps,
                    run.rejected, wall)
    return res

