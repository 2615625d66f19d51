"""The PDE solver loop: :func:`iterate_pde` (accepted time levels), :func:`solve_pde`, result.

Solves the continuity equation (docs/theory.md §2)

    ∂_t ρ + div_S(ρ v[μ_t, Θ_t]) = 0   on S²,

for the transformer velocity ``v`` or its effective-mobility surrogate ``v̂``
(``flow = "transformer" | "surrogate"``, docs/theory.md §3), or for a prescribed
velocity field ``v(x, t)`` (used by the rigid-rotation tests).

The discretisation (cell-centred finite volumes, upwind or limited linear
reconstruction, SSP time stepping, the positivity bound) is in :mod:`wflow.pde.fv`; here
the time loop: every step takes ``Δt = min(dt, cfl · min_K m_K/out_K, time to the next
output / jump)``, a step whose later stage would break positivity is rejected and
retried with a smaller ``Δt``, and the mass is checked for conservation.

Diagnostics (same meaning as the particle ones, :mod:`wflow.particles`): the
measure ``μ_h = Σ_K m_K δ_{ĉ_K}`` is fed to the particle formulas
(:func:`~wflow.energy.evaluate` with targets = sources = ``ĉ``, masses ``m``):
``E``, ``E_h``, ``∂_tE`` (``dEdt_w``), ``power``, ``slope2``, ``speed2``, ``G2``,
``b̂`` statistics, the running balance (:class:`~wflow.diagnostics.BalanceAccumulator`,
trapezoid over the accepted steps), attention entropies of the softmax rows over
the cells (entropy of ``p_KL = m_L e^{s_KL}/Z_K``, ``<= log M``), the mass-weighted
mean inner product and a cluster count (connected components of the cell graph
restricted to ``{ρ >= cluster_level · max ρ}`` holding at least
``cluster_min_mass`` of the mass).

Token diffusion (``options.diffusion = D > 0``): ``∂_t ρ + div_S(ρ v) = D Δ_S ρ`` by the
Strang step and the free-energy balance of :class:`wflow.pde.diffusion.StrangSplitting`;
``D = 0`` runs the noiseless code path, bit for bit.

Parallel: run the same code under ``mpirun -n P``. DOLFINx distributes the mesh
(``GhostMode.shared_facet``); each rank computes the fluxes of its facets; the
nonlocal sums need every cell mass, so masses (and order-2 slopes) are
all-gathered in the original cell order every stage (``O(M)`` communication
against ``O(M²)`` work), and flux contributions to ghost cells are sent to their
owners with a DOLFINx reverse scatter. The result equals the serial one to
round-off.
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
from ..attention.schedules import Schedule, as_schedule
from ..diagnostics import BalanceAccumulator, head_rates, mean_inner_product, radial_shadows
from ..energy import (
    FieldEval,
    dE_dt_weights,
    energy_gradient_A,
    evaluate,
    head_energies,
    ito_correction,
    slope_terms,
)
from ..geometry.density import initial_density
from ..geometry.mesh import SphereMesh
from ..infra.accuracy import StepController
from ..infra.progress import progress_bar
from ..kernels import kernel_sums
from ..results import finish_history
from ..status import Status, failed_run
from .accuracy import accuracy_check as _accuracy
from .accuracy import controlled_step, unestimated
from .accuracy import time_order as _time_order
from .accuracy import tolerance_check as _tolerance_check
from .diffusion import StrangSplitting
from .fv import _FV, _allsum, _clusters, check_min_dt, retry_dt, ssp_step
from .integrators import TIME_INTEGRATORS
from .limiters import check_applicable
from .options import PDEOptions
from .result import PDEResult
from .velocity import VelocityField, _Nonlocal, _Prescribed, global_backend

__all__ = [
    "PDEState",
    "PDEResult",
    "iterate_pde",
    "solve_pde",
]

logger = logging.getLogger(__name__)


#: Why a PDE run without a tolerance may have no judged check, and the other remedy.
NO_CHAIN_PRESCRIBED = "a prescribed velocity has no energy, so no chain rule to judge"
NO_CHAIN_RECORDED = "the chain rule is not recorded (pde.balance = false)"
BALANCE_REMEDY = ", or leave pde.balance = true (the chain-rule check)"


class PDEState(NamedTuple):
    """One accepted time level (yielded by :func:`iterate_pde`).

    Attributes
    ----------
    t : float
    step : int
        Number of accepted steps so far.
    dt : float
        Step that led here (0 for the initial state).
    m : (M,) array
        Cell masses, global original order (the same on every rank).
    rho : (M,) array
        ``m / |K|``.
    theta : array or None
        Weight parameters ``θ(t)`` (``None`` for a prescribed velocity).
    heads : Heads or None
    field : FieldEval or None
        Cell-level field at the owned projected centroids (when measured).
    integrands : dict or None
        ``E, dEdt_w, power, slope2, speed2, G2, ito`` (when measured).
    dtheta_noise : array or None
        ``θ_{k+1} − θ_k − Δt·drift`` of the *next* step (martingale term).
    is_save : bool
        ``t`` is one of the output times.
    pre_jump : dict or None
        Integrands at ``t⁻`` when the weights jump at ``t`` (``integrands`` hold ``θ⁺``).
    """

    t: float
    step: int
    dt: float
    m: np.ndarray
    rho: np.ndarray
    theta: np.ndarray | None
    heads: Heads | None
    field: FieldEval | None
    integrands: dict | None
    dtheta_noise: np.ndarray | None
    is_save: bool
    pre_jump: dict | None = None
    err: float | None = None


class _Run:
    """Shared state of one run (solver objects, counters)."""

    def __init__(self, mesh: SphereMesh, opts: PDEOptions, schedule: Schedule | None,
                 attn: Attention | None, velocity: VelocityField | None) -> None:
        self.mesh = mesh
        self.opts = opts
        self.span = opts.T  # the time interval's length (the tolerance is per unit time)
        self.integrator = TIME_INTEGRATORS.resolve(opts.integrator)
        check_applicable(opts)  # a limiter (or its parameter) where it has no effect
        self.fv = _FV(mesh, opts)
        self.schedule = schedule
        self.attn = attn
        if velocity is not None:
            self.vel: _Nonlocal | _Prescribed = _Prescribed(velocity)
        else:
            assert schedule is not None and attn is not None
            backend = opts.kernel_backend
            if backend == "auto":
                backend = global_backend(self.fv, schedule, attn, opts.kernel_tol)
            self.vel = _Nonlocal(schedule, attn, opts.flow, backend, opts.kernel_tol)
        self.rejected = 0
        self.measure_time = 0.0
        self.rhs_time = 0.0
        self.min_bound = math.inf
        self.umax = 0.0
        # error control (options.rtol/atol): step doubling judged by a PI controller
        self.tol = opts.tolerance
        self.ctrl: StepController | None = None
        self.err_sum = 0.0  # Σ of the accepted steps' local-error norms (global estimate)
        if self.tol is not None:
            if opts.diffusion > 0:
                raise ValueError("pde.rtol: error control is not available with token "
                                 "diffusion (the Strang step); leave rtol/atol unset")
            if schedule is not None and schedule.stochastic:
                raise ValueError("pde.rtol: error control of noisy weights (weak error) is not "
                                 "available; leave rtol/atol unset")
            self.ctrl = StepController(order=self.integrator.order(), span=opts.T,
                                       dt_min=opts.min_dt)
        # token diffusion (Strang splitting, wflow.pde.diffusion); None: today's solver
        self.strang = StrangSplitting(self) if opts.diffusion > 0 else None

    # ------------------------------------------------------------------ cell-level terms
    def measure(self, m_glob: np.ndarray, t: float, theta: np.ndarray
                ) -> tuple[Heads, FieldEval, dict]:
        """Energy integrands at the state (particle formulas on ``Σ m_K δ_{ĉ_K}``)."""
        t0 = time.perf_counter()
        fv, sch, attn = self.fv, self.schedule, self.attn
        assert sch is not None and attn is not None
        comm = fv.comm
        heads = sch.heads_at(theta)
        x = fv.chat_owned
        mo = m_glob[fv.orig_owned]
        vel = self.vel
        kw = ({"backend": vel.backend, "tol": vel.tol, "log": vel.log}
              if isinstance(vel, _Nonlocal) else {})
        fe = evaluate(x, heads, attn, y=fv.chat_glob, m=m_glob, **kw)
        vel = fe.v if self.opts.flow == "transformer" else fe.vhat
        st = slope_terms(x, mo, fe, heads, vel)
        E_h = head_energies(fe, mo, attn)
        dEdt = 0.0 if sch.static else dE_dt_weights(x, mo, fe, heads, sch.A_dot(theta, t), attn)
        loc = np.concatenate([[heads.w @ E_h, dEdt, st.power, st.slope2, st.speed2, st.G2],
                              E_h])
        tot = _allsum(comm, loc)
        ito = 0.0
        if sch.stochastic:
            ito = ito_correction(fv.chat_glob, m_glob, heads, attn, sch.sigma(t),
                                 symmetric_noise=sch.symmetric_noise)
        terms = {"E": float(tot[0]), "dEdt_w": float(tot[1]), "power": float(tot[2]),
                 "slope2": float(tot[3]), "speed2": float(tot[4]), "G2": float(tot[5]),
                 "ito": float(ito), "E_h": np.asarray(tot[6:])}
        if self.strang is not None:
            ft = self.strang.free_terms(m_glob, heads, fe, terms["E"])
            ft["power_drift"] = terms["power"]
            terms.update(ft)
            terms["power"] = ft["power_drift"] + ft["power_diffusion"]
        self.measure_time += time.perf_counter() - t0
        return heads, fe, terms

    # ------------------------------------------------------------------ one step
    def stage_rates(self, m_glob: np.ndarray, t: float, theta: Any
                    ) -> tuple[np.ndarray, np.ndarray]:
        t0 = time.perf_counter()
        v = self.vel(self.fv.qhat, t, theta, self.fv.chat_glob, m_glob)
        net, out, info = self.fv.rates(m_glob, v)
        self.umax = max(self.umax, info["umax"])
        self.rhs_time += time.perf_counter() - t0
        return net, out

    def try_step(self, m_glob: np.ndarray, net0: np.ndarray, out0: np.ndarray, t: float,
                 dt: float, thetas: tuple) -> tuple[np.ndarray | None, float]:
        """Attempt one SSP step; returns (new owned masses or None, smallest stage bound).

        The integrator (:data:`~wflow.pde.integrators.TIME_INTEGRATORS`) combines
        forward-Euler stages; each stage is checked against the positivity bound.
        """
        fv = self.fv
        th0, th_mid, th1 = thetas

        def rates(m_own: np.ndarray, c: float, theta: Any) -> tuple[np.ndarray, np.ndarray]:
            return self.stage_rates(fv.gather(m_own), t + dt if c == 1.0 else t + c * dt, theta)

        return ssp_step(self.integrator, m_glob[fv.orig_owned], net0, out0, dt,
                        {0.0: th0, 0.5: th_mid, 1.0: th1}, rates, fv.bound, fv.comm)

    def gather(self, m_own: np.ndarray) -> np.ndarray:
        """Owned masses -> global masses (original order, every rank)."""
        return self.fv.gather(m_own)

    def owned(self, m_glob: np.ndarray) -> np.ndarray:
        """Owned masses (this rank's cells) of global masses."""
        return m_glob[self.fv.orig_owned]

    def density(self, m_own: np.ndarray) -> np.ndarray:
        """Owned masses -> owned cell densities ``m_K/|K|``."""
        return m_own / self.fv.areas_glob[self.fv.orig_owned]


def _check_inputs(schedule: Schedule | None, attn: Attention | None,
                  velocity: VelocityField | None) -> None:
    if velocity is None and (schedule is None or attn is None):
        raise ValueError("heads/attention: required unless a prescribed velocity is given")
    if velocity is not None and schedule is not None:
        raise ValueError("velocity: give either a prescribed velocity or heads, not both")
    refuse_masked(attn, "the transformer PDE (one density, no token order)")
    if schedule is not None and schedule.heads_at(schedule.initial_theta()).d != 3:
        raise ValueError("heads: the mesh solver works on S² (d = 3), got heads of dimension "
                         f"{schedule.heads_at(schedule.initial_theta()).d}")
    if velocity is not None and not callable(velocity):
        raise ValueError("velocity: must be a callable v(x (n, 3), t) -> (n, 3)")


def iterate_pde(mesh: SphereMesh, rho0: np.ndarray, heads_or_schedule: Heads | Schedule | None
                = None, attn: Attention | None = None, *, velocity: VelocityField | None = None,
                options: PDEOptions | None = None, measure: bool | None = None,
                _run: _Run | None = None) -> Iterator[PDEState]:
    """Generate the accepted time levels ``(t_k, state_k)`` of the FV solution.

    Parameters
    ----------
    mesh : SphereMesh
    rho0 : (M,) array
        Initial cell densities in the mesh's original cell order (e.g. from
        :func:`initial_density`); must be ``>= 0`` with positive mass.
    heads_or_schedule, attn
        Static heads or a :class:`~wflow.attention.schedules.Schedule`, and the attention.
    velocity : callable, optional
        Prescribed velocity ``v(x (n, 3), t) -> (n, 3)`` instead of the nonlocal one.
    options : PDEOptions
    measure : bool, optional
        Compute the energy integrands at every level (default ``options.balance``);
        the output levels are always measured for a nonlocal velocity.

    Yields
    ------
    PDEState
        The initial state, then one state per accepted step; the last has ``t = T``.
        With ``options.rtol``/``atol``, ``err`` is the step's local-error norm
        (:func:`~wflow.infra.accuracy.error_norm`, ``1`` = the tolerance).
        Raises ``FloatingPointError`` if the positivity bound collapses below
        ``options.min_dt`` or values become non-finite.
    """
    opts = options or PDEOptions()
    schedule = None if heads_or_schedule is None else as_schedule(heads_or_schedule)
    _check_inputs(schedule, attn, velocity)
    run = _run or _Run(mesh, opts, schedule, attn, velocity)
    fv = run.fv
    rho0 = np.asarray(rho0, dtype=np.float64)
    if rho0.shape != (fv.M,):
        raise ValueError(f"rho0: expected {fv.M} cell values, got shape {rho0.shape}")
    if not np.all(np.isfinite(rho0)) or np.any(rho0 < 0):
        raise ValueError("rho0: densities must be finite and >= 0")
    m_glob = rho0 * fv.areas_glob
    if not m_glob.sum() > 0:
        raise ValueError("rho0: total mass must be > 0")
    measure = opts.balance if measure is None else measure
    nonlocal_ = schedule is not None
    tol = 1e-12 * opts.T
    saves = np.linspace(0.0, opts.T, int(opts.n_saves))
    jumps = [float(j) for j in (schedule.jump_times if schedule else ()) if 0 < j < opts.T]
    stops: list[float] = []
    for s in sorted([*saves.tolist(), *jumps]):  # merge near-duplicates (a jump at a save)
        if not stops or s - stops[-1] > tol:
            stops.append(s)
        elif s in jumps:
            stops[-1] = s
    rng = np.random.default_rng(opts.seed)
    theta = schedule.initial_theta() if schedule else None

    def state(t: float, k: int, dt: float, m: np.ndarray, th: Any, is_save: bool,
              dnoise: Any = None) -> PDEState:
        heads = fe = terms = None
        if nonlocal_ and (measure or is_save):
            heads, fe, terms = run.measure(m, t, th)
        elif nonlocal_:
            heads = schedule.heads_at(th)
        return PDEState(t, k, dt, m, m / fv.areas_glob, th, heads, fe, terms, dnoise, is_save)

    ctrl = run.ctrl
    h_ctrl = opts.dt  # the controller's proposal (error control only)
    err: float | None = None
    t, k, istop = 0.0, 0, 1
    cur = state(0.0, 0, 0.0, m_glob, theta, True)
    net, out = run.stage_rates(m_glob, t, theta)
    pending = cur
    while True:
        if istop >= len(stops):
            yield pending
            return
        if k >= opts.max_steps:
            yield pending
            raise _MaxSteps(f"max_steps = {opts.max_steps} reached at t = {t:.6g} < T")
        t_stop = stops[istop]
        if run.strang is not None and run.strang.next_dt is not None \
                and run.strang.next_dt[0] == t:
            dt = run.strang.next_dt[1]  # Strang: predicted at the end of the last step
        else:
            bound = fv.bound(m_glob[fv.orig_owned], out)
            dt = min(opts.dt, opts.cfl * bound, t_stop - t)
            if ctrl is not None and opts.adaptive:
                dt = min(dt, h_ctrl)
            if t_stop - t - dt <= tol:
                dt = t_stop - t
        while True:
            check_min_dt(dt, opts.min_dt, t)
            if schedule is not None and ctrl is None:
                th_mid, th_new = schedule.advance(theta, t, dt, rng)
            else:
                th_mid = th_new = None
            if ctrl is not None:
                m_new, bmin, err, th_new, h_ctrl, retry = controlled_step(
                    run, m_glob, net, out, t, dt, theta, rng, h_ctrl, opts.adaptive)
                if retry:
                    dt = h_ctrl
                    continue
            elif run.strang is None:
                m_new, bmin = run.try_step(m_glob, net, out, t, dt, (theta, th_mid, th_new))
            else:
                m_new, bmin = run.strang.step(m_glob, t, dt, (theta, th_mid, th_new))
            run.min_bound = min(run.min_bound, bmin)
            if m_new is not None:
                break
            run.rejected += 1
            dt = retry_dt(t, dt, bmin, opts.cfl)
        dnoise = None
        if schedule is not None and schedule.stochastic:
            dnoise = th_new - theta - dt * schedule.drift(theta, t)
        # the state at t carries the noise increment of the step leaving it
        yield pending._replace(dtheta_noise=dnoise)
        landed = abs((t + dt) - t_stop) <= tol or dt == t_stop - t
        t = t_stop if landed else t + dt
        k += 1
        m_glob = fv.gather(m_new)
        if not np.all(np.isfinite(m_glob)):
            raise FloatingPointError(f"non-finite cell masses at t = {t:.6g}")
        theta = th_new
        is_save = landed and bool(np.any(np.abs(saves - t) <= tol))
        pending = state(t, k, dt, m_glob, theta, is_save)
        if landed and schedule is not None and any(abs(t - j) <= tol for j in jumps):
            before = pending.integrands
            theta = schedule.after_jump(theta, t)
            pending = state(t, k, dt, m_glob, theta, is_save)._replace(pre_jump=before)
        if ctrl is not None:
            pending = pending._replace(err=err)
        if landed:
            istop += 1
        if istop < len(stops):
            if run.strang is None:
                net, out = run.stage_rates(m_glob, t, theta)
            else:
                run.strang.predict(m_glob, t, theta, stops[istop], bmin, tol)


class _MaxSteps(RuntimeError):
    pass


def _entropy(run: _Run, heads: Heads, m_glob: np.ndarray) -> np.ndarray:
    """Mass-weighted mean over cells K of the softmax-row entropies over cells, per head."""
    fv, attn = run.fv, run.attn
    assert attn is not None
    x = fv.chat_owned
    sums = kernel_sums(x, fv.chat_glob, m_glob, heads.Q, heads.K, beta=attn.beta,
                       kind="softmax", scores=True)
    mlogm = np.where(m_glob > 0, m_glob * np.log(np.where(m_glob > 0, m_glob, 1.0)), 0.0)
    zl = kernel_sums(x, fv.chat_glob, mlogm, heads.Q, heads.K, beta=attn.beta,
                     kind="softmax").Z
    ent = np.log(sums.Z) - (sums.S + zl) / sums.Z  # (H, no)
    return np.asarray(_allsum(fv.comm, ent @ m_glob[fv.orig_owned]))


def _record(rows: dict[str, list], run: _Run, st: PDEState, acc: BalanceAccumulator | None
            ) -> None:
    fv, opts = run.fv, run.opts

    def put(key: str, val: Any) -> None:
        rows.setdefault(key, []).append(val)

    put("t", st.t)
    put("mass", float(st.m.sum()))
    put("rho_min", float(st.rho.min()))
    put("rho_max", float(st.rho.max()))
    put("mean_inner", mean_inner_product(fv.chat_glob, st.m))
    if opts.clusters:
        put("n_clusters", float(_clusters(st.rho, st.m, fv.nbr_glob, opts.cluster_level,
                                          opts.cluster_min_mass)))
    if st.integrands is None:
        return
    terms, fe, heads = st.integrands, st.field, st.heads
    assert fe is not None and heads is not None
    put("E", terms["E"])
    put("E_h", terms["E_h"])
    for key in ("dEdt_w", "power", "slope2", "speed2", "G2", "ito"):
        put(key, terms[key])
    mo = st.m[fv.orig_owned]
    comm = fv.comm
    from mpi4py import MPI

    bsum = _allsum(comm, float(mo @ fe.bhat))
    bmin = fe.bhat.min() if fe.bhat.size else math.inf
    bmax = fe.bhat.max() if fe.bhat.size else -math.inf
    if comm.size > 1:
        bmin = comm.allreduce(bmin, op=MPI.MIN)
        bmax = comm.allreduce(bmax, op=MPI.MAX)
    put("bhat_mean", float(bsum))
    put("bhat_min", float(bmin))
    put("bhat_max", float(bmax))
    if acc is not None:
        res = acc.residuals()
        # the EDI forms need a gradient-flow direction: not applicable (not recorded, never
        # NaN) for heads that are not value-aligned and symmetric (sign 0)
        # with token diffusion the free-energy EDI replaces the EDI forms of E
        for key in ("chain", "edi", "g2") if acc.sign and run.strang is None else ("chain",):
            put(f"balance_{key}", res[key])
    if run.strang is not None:
        run.strang.record(put, terms, acc)
    if opts.head_rates:
        hr = head_rates(fv.chat_owned, mo, fe, heads)
        put("dEh_dt", np.asarray(_allsum(comm, hr.total)))
        put("dEh_own", np.asarray(_allsum(comm, hr.own)))
        put("dEh_cross_direct", np.asarray(_allsum(comm, hr.cross_direct)))
        put("dEh_cross_radial", np.asarray(_allsum(comm, hr.cross_radial)))
        put("radial_shadow", np.asarray(_allsum(comm, radial_shadows(fv.chat_owned, fe) @ mo)))
    if opts.entropy:
        put("entropy", _entropy(run, heads, st.m))


def solve_pde(rho0: np.ndarray | Any = "uniform",
              heads_or_schedule: Heads | Schedule | None = None, attn: Attention | None = None,
              *_old: Any, mesh: SphereMesh | None = None, velocity: VelocityField | None = None,
              options: PDEOptions | None = None, **kwargs: Any) -> PDEResult:
    """Solve the transformer PDE (or transport by a prescribed velocity) on a sphere mesh.

    The order of every solve function (docs/guide/solvers.md): the initial state, the
    heads or schedule, the attention; then keywords only (the geometry, ``options=``)::

        solve_pde(rho0, heads, attn, mesh=mesh, options=PDEOptions(...))

    The former order ``solve_pde(mesh, rho0, heads, attn)`` (a :class:`SphereMesh`
    first) still runs for one release, with a :class:`DeprecationWarning`.

    Parameters
    ----------
    rho0 : (M,) array or density spec
        Initial densities (original cell order) or anything :func:`initial_density`
        accepts; normalised to mass 1.
    heads_or_schedule : Heads or Schedule, optional
        Static heads or a weight schedule (nonlocal velocity).
    attn : Attention, optional
    mesh : SphereMesh
        Required (keyword). From :func:`wflow.geometry.mesh.load_mesh`.
    velocity : callable, optional
        Prescribed velocity ``v(x, t)`` instead of the nonlocal one.
    options : PDEOptions, optional
        Keyword arguments override its fields.

    Returns
    -------
    PDEResult
        ``status == "success"`` only if ``T`` was reached with finite values, the mass
        conserved, the densities non-negative and (with ``balance``) the chain-rule
        residual within its tolerance, or (with ``rtol``/``atol``) the time-error
        estimate within the requested one; ``"inaccurate"`` when only those fail;
        ``"completed"`` when nothing judged the accuracy (a prescribed velocity or
        ``balance = false``, without ``rtol``).
    """
    if isinstance(rho0, SphereMesh):  # the former order solve_pde(mesh, rho0, heads, attn)
        if mesh is not None or len(_old) > 1:
            raise TypeError("solve_pde: give the mesh once, as mesh= (solve_pde(rho0, heads, "
                            "attn, mesh=mesh, options=...))")
        warnings.warn("solve_pde(mesh, rho0, heads, attn) is deprecated: call "
                      "solve_pde(rho0, heads, attn, mesh=mesh)", DeprecationWarning,
                      stacklevel=2)
        mesh, rho0, heads_or_schedule, attn = (
            rho0, "uniform" if heads_or_schedule is None else heads_or_schedule, attn,
            _old[0] if _old else None)
    elif _old:
        raise TypeError(f"solve_pde: takes 3 positional arguments (rho0, heads, attn), got "
                        f"{3 + len(_old)}")
    if mesh is None:
        raise TypeError("solve_pde: mesh= is required (solve_pde(rho0, heads, attn, "
                        "mesh=mesh))")
    refuse_masked(attn, "the transformer PDE (one density, no token order)")
    opts = options or PDEOptions()
    if kwargs:
        opts = replace(opts, **kwargs)
    r0 = initial_density(mesh, rho0)
    schedule = None if heads_or_schedule is None else as_schedule(heads_or_schedule)
    _check_inputs(schedule, attn, velocity)
    run = _Run(mesh, opts, schedule, attn, velocity)
    fv = run.fv
    sign = 0
    if schedule is not None:
        h0 = schedule.heads_at(schedule.initial_theta())
        sign = h0.value_alignment() if h0.is_symmetric() else 0
    rows: dict[str, list] = {}
    rhos: list[np.ndarray] = []
    steps: dict[str, list] = {}
    acc: BalanceAccumulator | None = None
    prev: PDEState | None = None
    status, message = Status.SUCCESS, ""
    mass0 = float(r0 @ fv.areas_glob)
    max_mass_err = 0.0
    min_rho = math.inf
    bar = progress_bar(opts.T, opts.progress, desc="pde", unit="t", rank=fv.comm.rank,
                       time_axis=True)
    t_start = time.perf_counter()
    measure = opts.balance and schedule is not None
    try:
        for st in iterate_pde(mesh, r0, schedule, attn, velocity=velocity, options=opts,
                              measure=measure, _run=run):
            steps.setdefault("t", []).append(st.t)
            steps.setdefault("dt", []).append(st.dt)
            if run.tol is not None:  # the step's local-error norm (1 = the tolerance)
                steps.setdefault("error_norm", []).append(0.0 if st.err is None else st.err)
            max_mass_err = max(max_mass_err, abs(float(st.m.sum()) - mass0) / mass0)
            min_rho = min(min_rho, float(st.rho.min()))
            if st.integrands is not None and measure:
                for key in ("E", "dEdt_w", "power", "slope2", "speed2", "G2", "ito"):
                    steps.setdefault(key, []).append(st.integrands[key])
                if run.strang is not None:
                    for key in ("free_energy", "free_dissipation", "power_diffusion"):
                        steps.setdefault(key, []).append(st.integrands[key])
                if acc is None:
                    acc = BalanceAccumulator(sign=sign, E0=st.integrands["E"])
                else:
                    assert prev is not None and prev.integrands is not None
                    mart = 0.0
                    if prev.dtheta_noise is not None and schedule is not None:
                        G = energy_gradient_A(fv.chat_owned, prev.m[fv.orig_owned], prev.field)
                        G = np.asarray(_allsum(fv.comm, G))
                        dA = schedule.param.A_dot(prev.theta, prev.dtheta_noise)
                        mart = float(np.einsum("h,hij,hij->", prev.heads.w, G, dA))
                    acc.step(st.t - prev.t, prev.integrands, st.integrands,
                             pre_jump=st.pre_jump, martingale=mart,
                             stochastic=schedule is not None and schedule.stochastic)
                    if run.strang is not None:
                        run.strang.free_step(st.t - prev.t, prev.integrands,
                                             st.pre_jump or st.integrands)
            if st.is_save and (not rows or st.t > rows["t"][-1]):
                _record(rows, run, st, acc)
                rhos.append(st.rho.copy())
            if bar is not None and prev is not None:
                bar.update(st.t - prev.t)
            prev = st
    except _MaxSteps as exc:
        status, message = Status.MAX_STEPS, str(exc)
        warnings.warn(f"pde: {exc}; raise pde.max_steps or dt", UserWarning, stacklevel=2)
    except FloatingPointError as exc:
        status, message = failed_run(exc, "pde", logger, UserWarning)
    finally:
        if bar is not None:
            bar.close()
    wall = time.perf_counter() - t_start
    history, tt, status, message = finish_history(rows, status, message)
    rho = np.asarray(rhos) if rhos else np.empty((0, fv.M))
    if status == Status.SUCCESS and max_mass_err > 1e-10:
        status = Status.FAILED
        message = f"mass drifted by {max_mass_err:.2e} (relative): conservation broken"
    if status == Status.SUCCESS and rhos and min_rho < -1e-12 * float(np.max(rhos)):
        status = Status.FAILED
        message = f"negative density {min_rho:.3e}: positivity broken"
    nsteps = len(steps.get("t", [1])) - 1
    n_evals = run.vel.n_evals
    stats = {
        "steps": nsteps, "rejected_steps": run.rejected, "velocity_evals": n_evals,
        "wall_time": wall, "time_per_step": wall / max(nsteps, 1),
        "time_per_velocity_eval": run.vel.eval_time / max(n_evals, 1),
        "rhs_time": run.rhs_time, "measure_time": run.measure_time,
        "mass_error_max": max_mass_err, "rho_min": min_rho,
        "dt_min": float(np.min(steps["dt"][1:])) if nsteps else float("nan"),
        "dt_max": float(np.max(steps["dt"][1:])) if nsteps else float("nan"),
        "max_normal_speed": run.umax, "cells": fv.M, "ranks": fv.comm.size,
        "edge_quadrature_points": fv.q,
        "kernel": run.vel.log.summary() if isinstance(run.vel, _Nonlocal) else None,
    }
    if run.strang is not None:  # token diffusion: the Strang / Crank–Nicolson counters
        stats.update(run.strang.stats())
    if run.tol is not None:  # error control: the controller's counts and the estimate
        assert run.ctrl is not None
        stats.update({"rtol": run.tol.rtol, "atol": run.tol.atol, "adaptive": opts.adaptive,
                      "accepted_steps": nsteps,
                      "error_rejected_steps": run.ctrl.rejected,
                      "error_estimate": run.err_sum})
    bal = acc.residuals() if acc is not None else {}
    if sign == 0 or run.strang is not None:  # EDI of E not applicable: absent, not NaN
        bal = {k: v for k, v in bal.items() if k not in ("edi", "g2")}
    if run.strang is not None and acc is not None:
        bal.update(run.strang.free_residuals(acc))
    steps_arr = {k: np.asarray(v) for k, v in steps.items()}
    checks: dict[str, Any] = {}
    if acc is not None and "power" in steps_arr and nsteps:
        check = _accuracy(steps_arr, bal["chain"], opts,
                          schedule is not None and schedule.stochastic)
        checks["chain"] = check.as_dict()
        if status == Status.SUCCESS and not check.passed:
            status, message = Status.INACCURATE, check.failure()
            logger.warning("pde run inaccurate: %s", message)
    if run.tol is not None and nsteps:
        checks["tolerance"] = _tolerance_check(run, steps_arr)
        if status in (Status.SUCCESS, Status.INACCURATE) \
                and not checks["tolerance"]["passed"]:
            status, message = Status.INACCURATE, checks["tolerance"]["message"]
            logger.warning("pde run inaccurate: %s", message)
    if run.tol is None and not any(c.get("judged", True) for c in checks.values()):
        # nothing judged the run (a prescribed velocity, or pde.balance = false): completed
        status, message = unestimated(
            status, message, checks, NO_CHAIN_PRESCRIBED if velocity is not None
            else NO_CHAIN_RECORDED, remedy="" if velocity is not None else BALANCE_REMEDY)
    res = PDEResult(status, message, opts, tt, rho, rho @ fv.areas_glob, steps_arr, bal,
                    mesh.gather_owned(mesh.centroids), fv.areas_glob, sign, history=history,
                    stats=stats, checks=checks, wall_time=wall, order=_time_order(opts))
    if status == Status.SUCCESS:
        logger.info("pde: %d steps (%d rejected), %.2f s", nsteps, run.rejected, wall)
    return res
