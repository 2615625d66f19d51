"""Particle solver: tokens on ``S^{d-1}`` moved by multi-head attention (docs/theory.md §2).

``ẋ_i = v[μ^n_t, Θ_t](x_i)`` with ``μ^n = (1/n) Σ δ_{x_i}``, the transformer velocity
``v = P_x Σ_h w_h f_h`` or the effective-mobility surrogate ``v̂`` (``flow="surrogate"``).

Integrators (registered in :data:`wflow.particles.integrators.INTEGRATORS`, each
declaring its order):

* ``"euler"`` — explicit Euler + renormalisation ``x ← (x + dt v)/|x + dt v|``
  (the literature's scheme, order 1);
* ``"rk4"`` — classical RK4 for the radially extended field ``F(x) = v(x/|x|)``
  (tangent, so ``|x|`` is a first integral) with normalised stages and a final
  projection, order 4.

Weights move with their schedule (:mod:`wflow.attention.schedules`): closed form where one
exists; otherwise the tokens' own explicit Euler step under ``"euler"`` (the published
scheme) and RK4 half steps under ``"rk4"``; Euler–Maruyama for noisy ones;
piecewise-constant layers jump at step boundaries (the time grid contains the jump times).

Monte-Carlo: ``n_paths`` independent weight-noise paths (generators spawned from one
seed), run one after the other with every operation vectorised over tokens and heads;
the result holds per-path histories and their mean / standard deviation.

Every step feeds the :class:`~wflow.diagnostics.BalanceAccumulator`; diagnostics are
recorded every ``record_every`` steps. The state of each step (field, slope terms,
energy) comes from one fused compiled pass (:func:`wflow.energy.particle_field`) for
``d ≤ 3`` where the sums are direct, else from :func:`wflow.energy.evaluate` with the
chosen back-end. :func:`euler_path` compiles the whole Euler loop for static heads.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Iterator

import numpy as np

from ..attention.heads import Attention, Heads
from ..attention.schedules import Schedule, as_schedule
from ..diagnostics import (
    BalanceAccumulator,
)
from ..energy import energy_gradient_A
from ..geometry.sphere import check_on_sphere
from ..infra.progress import progress_bar
from ..kernels import KernelLog
from ..status import Status
from .compiled import COMPILED_SCHEDULES, compiled_support, simulate_compiled
from .integrators import INTEGRATORS, _Kernel, _state_terms, compiled_code, time_grid
from .options import INTEGRATOR_ORDER, ParticleOptions
from .result import STEP_KEYS, ParticleResult, ParticleState, _record, add_simpson, judge_run

__all__ = [
    "iterate",
    "simulate",
]

logger = logging.getLogger(__name__)

def iterate(x0: np.ndarray, schedule: Schedule, attn: Attention, *, T: float, dt: float,
            integrator: str = "rk4", flow: str = "transformer",
            rng: np.random.Generator | None = None, kernel_backend: str = "auto",
            kernel_tol: float = 1e-10,
            kernel_log: KernelLog | None = None) -> Iterator[ParticleState]:
    """Generate the trajectory ``(t_k, state_k)`` for one weight path, ``k = 0..S``.

    Each yielded state carries the field at ``(x_k, θ_k)`` (reused by the next step) and
    the balance integrands; at a jump time of the weights the state is the one after the
    jump and ``pre_jump`` holds the integrands at ``θ⁻``. ``kernel_*`` select the
    attention-sum back-end (:func:`wflow.kernels.kernel_sums`) and log its choices.
    """
    kernel = _Kernel(kernel_backend, kernel_tol, kernel_log)
    x = check_on_sphere(x0, name="tokens")
    n = x.shape[0]
    m = np.full(n, 1.0 / n)
    grid = time_grid(T, dt, schedule.jump_times)
    # weights take the tokens' explicit Euler step under the Euler integrator (the
    # published scheme), RK4 half steps under RK4 (4th-order midpoint)
    integ = INTEGRATORS.lookup(integrator, "particles.integrator")
    weights = integ.weights
    theta = schedule.initial_theta()
    heads, fe, vel, terms = _state_terms(x, m, 0.0, theta, schedule, attn, flow, kernel=kernel)
    jumps = set(schedule.jump_times)
    pre_jump: dict[str, float] | None = None
    for k in range(len(grid)):
        t = float(grid[k])
        if k + 1 == len(grid):
            yield ParticleState(t, x, theta, heads, fe, vel, terms, None, pre_jump)
            return
        h = float(grid[k + 1] - t)
        theta_mid, theta_new = schedule.advance(theta, t, h, rng, method=weights)
        dnoise = None
        if schedule.stochastic:
            dnoise = theta_new - theta - h * schedule.drift(theta, t)
        yield ParticleState(t, x, theta, heads, fe, vel, terms, dnoise, pre_jump)
        x_new = integ.step(x, h, vel, heads, theta, theta_mid, theta_new, schedule, attn,
                           flow, kernel)
        x, theta = x_new, theta_new
        t_new = float(grid[k + 1])
        heads, fe, vel, terms = _state_terms(x, m, t_new, theta, schedule, attn, flow,
                                             heads if schedule.static else None, kernel)
        pre_jump = None
        if t_new in jumps:
            pre_jump = terms
            theta = schedule.after_jump(theta, t_new)
            heads, fe, vel, terms = _state_terms(x, m, t_new, theta, schedule, attn, flow,
                                                 kernel=kernel)
        if not np.all(np.isfinite(x)) or not np.isfinite(terms["E"]):
            raise FloatingPointError(f"non-finite tokens or energy at t = {t_new:.6g}; "
                                     "reduce dt or the head scale")


def simulate(x0: np.ndarray, heads_or_schedule: Heads | Schedule, attn: Attention, *,
             options: ParticleOptions | None = None, **kwargs) -> ParticleResult:
    """Run the particle system and record diagnostics and the energy balance.

    The order of every solve function (docs/guide/solvers.md): the initial state, the
    heads or schedule, the attention; then keywords only (``options=``)::

        simulate(x0, heads, attn, options=ParticleOptions(...))

    Parameters
    ----------
    x0 : (n, d) array
        Initial tokens on the unit sphere (shared by all paths).
    heads_or_schedule : Heads or Schedule
        Static heads or a weight schedule.
    attn : Attention
        Attention kind and ``β``.
    options : ParticleOptions, optional
        Solver options; keyword arguments override its fields.

    Returns
    -------
    ParticleResult
        ``status == "success"`` only if every recorded number is finite and the
        chain-rule residual of every path is within its tolerance (:mod:`wflow.status`);
        ``"inaccurate"`` with the residual and the tolerance in ``message`` otherwise.
    """
    opts = options or ParticleOptions()
    if kwargs:
        opts = ParticleOptions(**{**opts.__dict__, **kwargs})
    schedule = as_schedule(heads_or_schedule)
    x0 = check_on_sphere(x0, name="tokens")
    if x0.shape[1] != schedule.heads_at(schedule.initial_theta()).d:
        raise ValueError(f"tokens: dimension {x0.shape[1]} does not match heads dimension "
                         f"{schedule.heads_at(schedule.initial_theta()).d}")
    if opts.engine != "python":  # the compiled time loop (wflow.particles.compiled)
        why = compiled_support(x0, schedule, attn, opts)
        if why is None:
            return simulate_compiled(x0, schedule, attn, opts)
        if opts.engine == "compiled":
            raise ValueError(f"particles.engine: 'compiled' does not apply: {why}")
        # a schedule or integrator the compiled loop lacks is worth a warning (the run is
        # much slower); a kernel back-end that needs Python was chosen (or planned) on purpose
        integ = INTEGRATORS.lookup(opts.integrator, "particles.integrator")
        lacks = type(schedule) not in COMPILED_SCHEDULES or compiled_code(integ) is None
        log = logger.warning if lacks else logger.info
        log("particles: engine 'auto' falls back to the Python loop (%s); set "
            "engine = 'python' to choose it explicitly", why)
    else:
        why = "engine = 'python' requested"
    P = int(opts.n_paths) if schedule.stochastic else 1
    if opts.n_paths > 1 and not schedule.stochastic:
        logger.info("deterministic schedule: running one path instead of %d", opts.n_paths)
    rngs = [np.random.default_rng(s) for s in np.random.SeedSequence(opts.seed).spawn(P)]
    grid = time_grid(opts.T, opts.dt, schedule.jump_times)
    S = len(grid) - 1
    rec_idx = np.unique(np.concatenate([np.arange(0, S + 1, int(opts.record_every)), [S]]))
    heads0 = schedule.heads_at(schedule.initial_theta())
    sign = heads0.value_alignment() if heads0.is_symmetric() else 0
    n = x0.shape[0]
    m = np.full(n, 1.0 / n)

    hist: dict[str, list] = {}
    steps = {k: np.empty((P, S + 1)) for k in STEP_KEYS}
    balance: dict[str, list[float]] = {}
    xs, thetas, trajs, ttrajs = [], [], [], []
    klog = KernelLog()
    bar = progress_bar(P * S, opts.progress, desc="particles")
    t_start = time.perf_counter()
    status, message = Status.SUCCESS, ""
    try:
        for p in range(P):
            acc: BalanceAccumulator | None = None
            prev: ParticleState | None = None
            rows: dict[str, list] = {}
            traj, ttraj = [], []
            for k, st in enumerate(iterate(x0, schedule, attn, T=opts.T, dt=opts.dt,
                                           integrator=opts.integrator, flow=opts.flow,
                                           rng=rngs[p], kernel_backend=opts.kernel_backend,
                                           kernel_tol=opts.kernel_tol, kernel_log=klog)):
                terms = st.integrands
                for key in steps:
                    steps[key][p, k] = terms[key]
                if acc is None:
                    acc = BalanceAccumulator(sign=sign, E0=terms["E"])
                else:
                    assert prev is not None
                    mart = 0.0
                    if prev.dtheta_noise is not None:
                        G = energy_gradient_A(prev.x, m, prev.field)
                        dA = schedule.param.A_dot(prev.theta, prev.dtheta_noise)
                        mart = float(np.einsum("h,hij,hij->", prev.heads.w, G, dA))
                    acc.step(st.t - prev.t, prev.integrands, terms, pre_jump=st.pre_jump,
                             stochastic=schedule.stochastic, martingale=mart)
                    if bar is not None:
                        bar.update(1)
                prev = st
                if k in rec_idx:
                    _record(rows, st, m, attn, acc, opts, schedule)
                    if opts.save_trajectory:
                        traj.append(st.x.copy())
                        ttraj.append(st.theta.copy())
            for key, vals in rows.items():
                hist.setdefault(key, []).append(np.asarray(vals))
            assert acc is not None and prev is not None
            for key, val in acc.residuals().items():
                if np.isfinite(val) or key not in ("edi", "g2"):  # undefined when sign = 0
                    balance.setdefault(key, []).append(val)
            add_simpson(balance, grid, steps, p, sign=sign, schedule=schedule)
            xs.append(prev.x)
            thetas.append(prev.theta)
            if opts.save_trajectory:
                trajs.append(np.asarray(traj))
                ttrajs.append(np.asarray(ttraj))
    except FloatingPointError as exc:
        status, message = Status.FAILED, str(exc)
        logger.error("particle run failed: %s", exc)
    finally:
        if bar is not None:
            bar.close()
    wall = time.perf_counter() - t_start
    if status == Status.FAILED:
        return ParticleResult(status, message, opts, grid[rec_idx], {}, {}, x0[None],
                              schedule.initial_theta()[None], None, None, sign,
                              {"engine": "python", "engine_reason": why},
                              order=INTEGRATOR_ORDER[opts.integrator], wall_time=wall)
    history = {k: np.stack(v) for k, v in hist.items()}
    t_rec = grid[rec_idx]
    if "entropy" in history and t_rec.size >= 3:
        # left side of the entropy identity: dH/dt by (second-order) finite differences of the
        # recorded entropies, next to the right side −β² Cov_p(s, ṡ) ("entropy_rate")
        history["entropy_rate_fd"] = np.gradient(history["entropy"], t_rec, axis=1)
    bal = {k: np.asarray(v) for k, v in balance.items()}
    status, message, checks = judge_run(history, steps, bal, grid, opts, schedule.stochastic)
    res = ParticleResult(
        status, message, opts, grid[rec_idx], {"t": grid, **steps}, bal, np.stack(xs),
        np.stack(thetas), np.stack(trajs) if opts.save_trajectory else None,
        np.stack(ttrajs) if (opts.save_trajectory and not schedule.static) else None,
        sign, {"kernel": klog.summary(), "engine": "python", "engine_reason": why},
        history=history, checks=checks, order=INTEGRATOR_ORDER[opts.integrator],
        wall_time=wall, engine="python")
    if status == Status.INACCURATE:
        logger.warning("particle run inaccurate: %s", message)
    elif status != Status.SUCCESS:
        logger.error("particle run: %s", message)
    return res
