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
from collections.abc import Callable, Iterator
from dataclasses import replace
from typing import Any, NamedTuple

import numpy as np

from ..attention.diffusion import check_diffusion
from ..attention.heads import Attention, Heads
from ..attention.schedules import Schedule, as_schedule
from ..diagnostics import (
    BalanceAccumulator,
)
from ..energy import energy_gradient_A
from ..geometry.sphere import check_on_sphere
from ..infra.accuracy import is_default
from ..infra.progress import progress_bar
from ..infra.schema import ScenarioError
from ..kernels import KernelLog
from ..status import Status, failed_run, unjudged_status
from .adaptive import adaptive_grid, check_accuracy_applies, default_aside
from .compiled import COMPILED_SCHEDULES, compiled_support, simulate_compiled
from .free_energy import (
    ITO_STEP_KEYS,
    bias_rate,
    ito_integrands,
    judge_noisy_run,
    martingale_cv,
)
from .integrators import (
    INTEGRATORS,
    _Kernel,
    _state_terms,
    _velocity,
    compiled_code,
    time_grid,
)
from .judged import judged_fixed, judged_noisy
from .loop import (
    COMPILED_NO_ITO,
    ITO_OFF,
    check_noisy,
    completed_remedy,
    ito_by_default,
    ito_unjudged_reason,
    refuse_masked_records,
    time_loop,
    unjudged_chain,
    unjudged_masked_ito,
)
from .noise import TokenNoise
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
            kernel_log: KernelLog | None = None, diffusion: float = 0.0, seed: int = 0,
            path: int = 0, grid: np.ndarray | None = None,
            ito_terms: bool = True, dtype: str = "float64") -> Iterator[ParticleState]:
    """Generate the trajectory ``(t_k, state_k)`` for one weight path, ``k = 0..S``.

    Each yielded state carries the field at ``(x_k, θ_k)`` (reused by the next step) and
    the balance integrands; at a jump time of the weights the state is the one after the
    jump and ``pre_jump`` holds the integrands at ``θ⁻``. ``kernel_*`` select the
    attention-sum back-end (:func:`wflow.kernels.kernel_sums`) and log its choices.
    ``diffusion``: token diffusion ``D`` (THEORY §8; a stochastic integrator), its noise
    keyed by ``(seed, path, token block, step)`` (:class:`wflow.particles.noise.TokenNoise`).
    ``grid``: the step times (an adaptive run's grid); ``None``: uniform ``dt`` and jumps.
    ``ito_terms`` (with ``diffusion > 0``): each state's integrands also hold the Itô
    balance's :data:`~wflow.particles.free_energy.ITO_STEP_KEYS`.
    ``dtype``: precision of the kernel sums (``ParticleOptions.dtype``).
    """
    kernel = _Kernel(kernel_backend, kernel_tol, kernel_log, dtype)
    x = check_on_sphere(x0, name="tokens")
    n = x.shape[0]
    m = np.full(n, 1.0 / n)
    diffusion = check_diffusion(diffusion, "particles.diffusion")
    with_ito = diffusion > 0 and ito_terms

    def terms(x: np.ndarray, t: float, theta: np.ndarray, heads: Heads | None):
        if with_ito:  # the Itô terms need the full-width sums Y: heads of rank r by V
            heads = _full_width(schedule.heads_at(theta) if heads is None else heads)
        out = _state_terms(x, m, t, theta, schedule, attn, flow, heads, kernel)
        if with_ito:  # the Itô balance's terms of this state (D > 0 only)
            hh, fe, vel, tm = out
            it = ito_integrands(x, m, hh, attn, fe, vel, diffusion, backend=kernel_backend,
                                tol=kernel_tol)
            out = hh, fe, vel, {**tm, "lap": it["lap"], "qv": it["qv"], "kappa": bias_rate(
                hh, attn, x.shape[1], diffusion, it["u2"])}
        return out

    noise = TokenNoise(seed, n, x.shape[1], path=path) if diffusion > 0 else None

    def control(x: np.ndarray, fe, heads: Heads, integ, step_noise, h: float) -> float:
        return martingale_cv(x, m, heads, fe, _velocity(fe, flow), integ, step_noise, h,
                             diffusion)

    return time_loop(x, schedule, attn, T=T, dt=dt, integrator=integrator, flow=flow,
                     rng=rng, kernel=kernel, terms=terms,
                     finite=lambda x: bool(np.all(np.isfinite(x))), diffusion=diffusion,
                     noise=noise, grid=grid, control=control if with_ito else None)


def _full_width(heads: Heads) -> Heads:
    """Heads of value rank ``r`` given by their full ``V = W_O W_V`` (others as they are).

    The Itô balance's second moments (:func:`~wflow.particles.free_energy.ito_integrands`)
    read the full-width sums ``Y`` a field evaluated at rank has not; such a run moves its
    tokens with the heads by ``V`` (the field is the same to round-off).
    """
    return heads if heads.value_factors() is None else heads.with_(V=heads.V)


class _PathRun(NamedTuple):
    """One finished path: recorded rows, per-step integrands, balance terms, final state."""

    rows: dict[str, list]
    steps: dict[str, np.ndarray]
    balance: dict[str, float]
    x: np.ndarray
    theta: np.ndarray
    traj: list
    ttraj: list


def _run_path(states: Iterator[ParticleState], *, S: int, sign: int, grid: np.ndarray,
              rec_idx: np.ndarray, schedule: Schedule, opts: ParticleOptions,
              record: Callable[[dict, ParticleState, BalanceAccumulator], None],
              martingale: Callable[[ParticleState], float],
              keep: Callable[[np.ndarray], np.ndarray], bar) -> _PathRun:
    """Drive one path's states: integrands of every step, the balance, the records."""
    acc: BalanceAccumulator | None = None
    prev: ParticleState | None = None
    rows: dict[str, list] = {}
    steps = {k: np.empty(S + 1) for k in STEP_KEYS}
    traj, ttraj = [], []
    for k, st in enumerate(states):
        terms = st.integrands
        if k == 0:  # the Itô balance's integrands, where the run records them (D > 0)
            steps.update({key: np.empty(S + 1) for key in ITO_STEP_KEYS if key in terms})
        for key in steps:
            steps[key][k] = terms[key]
        if acc is None:
            acc = BalanceAccumulator(sign=sign, E0=terms["E"])
        else:
            assert prev is not None
            mart = 0.0
            if prev.dtheta_noise is not None:
                mart = martingale(prev)
            acc.step(st.t - prev.t, prev.integrands, terms, pre_jump=st.pre_jump,
                     stochastic=schedule.stochastic, martingale=mart)
            if bar is not None:
                bar.update(1)
        prev = st
        if k in rec_idx:
            record(rows, st, acc)
            if opts.save_trajectory:
                traj.append(keep(st.x))
                ttraj.append(st.theta.copy())
    assert acc is not None and prev is not None
    balance: dict[str, float] = {}
    for key, val in acc.residuals().items():
        if np.isfinite(val) or key not in ("edi", "g2"):  # undefined when sign = 0
            balance[key] = val
    simp: dict[str, list[float]] = {}
    add_simpson(simp, grid, {k: v[None] for k, v in steps.items()}, 0, sign=sign,
                schedule=schedule)
    balance.update({k: v[0] for k, v in simp.items()})
    return _PathRun(rows, steps, balance, prev.x, prev.theta, traj, ttraj)


def _kept_tokens(n: int, opts: ParticleOptions) -> np.ndarray | None:
    """Global indices of the tokens a saved trajectory keeps (``None``: all of them)."""
    k = int(getattr(opts, "trajectory_tokens", 0) or 0)
    if k <= 0 or k >= n:
        return None
    return np.unique(np.round(np.linspace(0, n - 1, k)).astype(np.int64))


def simulate(x0: np.ndarray, heads_or_schedule: Heads | Schedule, attn: Attention, *,
             options: ParticleOptions | None = None, comm: Any = None,
             **kwargs) -> ParticleResult:
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
    comm : mpi4py communicator, optional
        Spread the run over its ranks (:mod:`wflow.particles.split`; every rank passes
        the same ``x0`` and gets the whole result): noisy paths over ranks when
        ``n_paths > 1``, else the tokens of the one system split over ranks (fast
        summation with one ordered sum of the harmonic coefficients per evaluation, or
        direct sums with the sources around a ring). Equal to the serial run to
        round-off; ``None`` or one rank: the serial run, unchanged. Collective.

    Returns
    -------
    ParticleResult
        The requested tolerance decides the status — ``rtol`` defaults to
        :data:`~wflow.infra.accuracy.DEFAULT_RTOL` (``1e-3``), so every run is judged by
        its error estimate unless ``rtol = None`` (fixed steps:
        :func:`~wflow.particles.adaptive.fixed_step_error`; token diffusion ``D > 0``: the
        weak-error estimate of :mod:`wflow.particles.weak_error`, ``"inconclusive"`` where
        its noise cannot decide, naming a token count). ``"completed"`` where no check is
        judged (:func:`wflow.status.unjudged_status`): token diffusion whose Itô balance
        is not recorded or cannot be judged (``ito_balance = False``, ``engine =
        "compiled"``, a kind without the closed-form Laplacian, noisy weights), or a mask
        (its chain rule is the unmasked energy's); the message names each reason and the
        remedy (``rtol``). With token diffusion, and where no estimate applies (noisy
        weights, a stochastic integrator), the default ``rtol`` steps aside
        (:func:`~wflow.particles.adaptive.default_aside`, ``extra["accuracy_default"]``)
        and the run is judged as with ``rtol = None``: ``"success"`` only if every number
        is finite and the chain-rule residual of every path is within its tolerance
        (:mod:`wflow.status`), else ``"inaccurate"`` naming both.
    """
    opts = options or ParticleOptions()
    if kwargs:
        opts = ParticleOptions(**{**opts.__dict__, **kwargs})
    schedule = as_schedule(heads_or_schedule)
    x0 = check_on_sphere(x0, name="tokens")
    if x0.shape[1] != schedule.heads_at(schedule.initial_theta()).d:
        raise ValueError(f"tokens: dimension {x0.shape[1]} does not match heads dimension "
                         f"{schedule.heads_at(schedule.initial_theta()).d}")
    refuse_masked_records(attn, opts)
    _check_dtype(opts, attn, comm)
    if opts.diffusion > 0:  # token diffusion: a stochastic integrator (THEORY §8)
        check_noisy(INTEGRATORS.resolve(opts.integrator, "particles.integrator"))
    aside = default_aside(opts, schedule.stochastic)
    if aside is not None:  # the default rtol where no estimate applies: as rtol = None
        logger.info("particles: %s", aside)
        opts = replace(opts, rtol=None)
    res = _dispatch(x0, schedule, attn, opts, comm)
    if aside is not None:
        res = replace(res, extra={**res.extra, "accuracy_default": aside})
    if opts.diffusion > 0 and opts.ito_balance is False and "ito_balance" not in res.checks:
        res = replace(res, checks={**res.checks, "ito_balance": {
            "judged": False, "reason": ITO_OFF}})
    status, message = unjudged_status(res.status, res.message, res.checks,
                                      remedy=completed_remedy(opts, schedule))
    if status != res.status:  # a success that no check backs (token diffusion, a mask)
        logger.info("particles: run completed, %s", message)
        res = replace(res, status=status, message=message)
    return res


def _dispatch(x0: np.ndarray, schedule: Schedule, attn: Attention, opts: ParticleOptions,
              comm: Any) -> ParticleResult:
    """The run of :func:`simulate` (checked inputs) on the engine its options choose."""
    python_why = _needs_python(opts)
    if python_why is None and opts.engine == "auto":
        python_why = ito_by_default(opts, attn, schedule)
    if opts.adaptive or opts.rtol is not None or opts.atol is not None:  # accuracy asked for
        check_accuracy_applies(opts, schedule, "particles.adaptive" if opts.adaptive
                               else "particles.atol" if opts.atol is not None
                               and (opts.rtol is None or is_default(opts.rtol))
                               else "particles.rtol")
        if not opts.adaptive:  # fixed steps judged by their error estimate (judged.py)
            judge = judged_noisy if opts.diffusion > 0 else judged_fixed
            return judge(simulate, x0, schedule, attn, opts, comm)
        if comm is not None and comm.Get_size() > 1:
            raise ScenarioError("particles.adaptive: adaptive steps are not split over MPI "
                                "ranks yet; run in one process")
        return _simulate_adaptive(x0, schedule, attn, opts)
    if comm is not None and comm.Get_size() > 1:
        return _simulate_split(x0, schedule, attn, opts, comm)
    if opts.engine != "python":  # the compiled time loop (wflow.particles.compiled)
        why = python_why or compiled_support(x0, schedule, attn, opts)
        kept = _kept_tokens(x0.shape[0], opts) if opts.save_trajectory else None
        if why is None and kept is not None and opts.engine == "auto":
            why = "a trajectory of a token subset (trajectory_tokens) is kept by the Python loop"
        if why is None:
            res = simulate_compiled(x0, schedule, attn, opts)
            if kept is not None and res.trajectory is not None:  # (engine = "compiled")
                res = replace(res, trajectory=res.trajectory[:, :, kept])
            if opts.diffusion > 0 and opts.ito_balance is not False:
                res = replace(res, checks={**res.checks, "ito_balance": {
                    "judged": False, "reason": ito_unjudged_reason(attn, schedule) or (
                        f"{COMPILED_NO_ITO}; set engine = 'auto' or 'python' to judge the "
                        "Itô balance")}})
            return res
        if opts.engine == "compiled":
            raise ValueError(f"particles.engine: 'compiled' does not apply: {why}")
        # a schedule or integrator the compiled loop lacks is worth a warning (the run is
        # much slower); a kernel back-end that needs Python was chosen (or planned) on purpose
        integ = INTEGRATORS.resolve(opts.integrator)
        lacks = type(schedule) not in COMPILED_SCHEDULES or compiled_code(integ) is None
        log = logger.warning if lacks else logger.info
        log("particles: engine 'auto' falls back to the Python loop (%s); set "
            "engine = 'python' to choose it explicitly", why)
    else:
        why = "engine = 'python' requested"
    return _simulate_python(x0, schedule, attn, opts, why)


def _check_dtype(opts: ParticleOptions, attn: Attention, comm: Any) -> None:
    """Refuse ``dtype = "float32"`` where it has no path, naming ``particles.dtype``.

    The compiled loop, the causal sums (float64 only) and the sums split over MPI ranks
    have no float32 path; ``float64`` passes.
    """
    if opts.dtype == "float64":
        return
    where = None
    if opts.engine == "compiled":
        where = "the compiled loop (engine = 'compiled') sums in float64"
    elif getattr(attn, "mask", None) is not None:
        where = f"the causal sums (attention.mask = {attn.mask.name!r}) are float64 only"
    elif comm is not None and comm.Get_size() > 1:
        where = "the sums split over MPI ranks are float64 only"
    if where is not None:
        raise ScenarioError(f"particles.dtype: {opts.dtype!r} has no path here: {where}; "
                            "use dtype = 'float64'")


def _needs_python(opts: ParticleOptions) -> str | None:
    """Why a run takes the Python loop whatever the compiled loop supports, or None.

    Float32 kernel sums (``dtype = "float32"``: the compiled loop sums in float64). With
    token diffusion: the Itô balance asked for (``ito_balance = True``: the compiled loop
    records no Laplacian).
    """
    if opts.dtype != "float64":
        return f"float32 kernel sums (particles.dtype = {opts.dtype!r}) run on the Python loop"
    if not opts.diffusion > 0:
        return None
    if opts.ito_balance:
        return "the Itô energy balance (ito_balance = true) is recorded by the Python loop"
    return None


def _simulate_python(x0: np.ndarray, schedule: Schedule, attn: Attention,
                     opts: ParticleOptions, why: str, grid: np.ndarray | None = None,
                     failed: str = "", extra_in: dict | None = None) -> ParticleResult:
    """The step-by-step Python loop of :func:`simulate` (on ``grid`` if given)."""
    if opts.n_paths > 1 and not schedule.stochastic and not opts.diffusion > 0:
        logger.info("deterministic schedule: running one path instead of %d", opts.n_paths)
    P, rngs, grid, S, rec_idx, sign = _setup(schedule, opts, grid)
    n = x0.shape[0]
    m = np.full(n, 1.0 / n)
    klog = KernelLog()
    bar = progress_bar(P * S, opts.progress, desc="particles")
    t_start = time.perf_counter()
    status, message = (Status.FAILED, failed) if failed else (Status.SUCCESS, "")
    runs: list[_PathRun] = []
    try:
        for p in range(P if not failed else 0):
            runs.append(_serial_path(x0, schedule, attn, opts, rngs[p], klog, m, S, sign,
                                     grid, rec_idx, bar, path=p))
    except FloatingPointError as exc:
        status, message = failed_run(exc, "particle", logger)
    finally:
        if bar is not None:
            bar.close()
    wall = time.perf_counter() - t_start
    extra = {"kernel": klog.summary(), "engine": "python", "engine_reason": why,
             **(extra_in or {})}
    return _assemble(runs, status, message, x0, schedule, opts, grid, rec_idx, wall, sign,
                     extra, attn)


def _simulate_adaptive(x0: np.ndarray, schedule: Schedule, attn: Attention,
                       opts: ParticleOptions) -> ParticleResult:
    """Adaptive steps (:func:`~wflow.particles.adaptive.adaptive_grid`), then the Python loop.

    ``extra["adaptive"]``: accepted / rejected counts and the accepted steps;
    ``checks["accuracy"]``: the controller's verdict (the status when it is met: the
    requested tolerance decides, the chain-rule check is kept in ``checks["chain"]``).
    """
    if opts.engine == "compiled":
        raise ValueError("particles.engine: 'compiled' does not apply: adaptive steps run "
                         "on the Python loop")
    kernel = _Kernel(opts.kernel_backend, opts.kernel_tol, None, opts.dtype)
    grid, info, failed = None, None, ""
    t0 = time.perf_counter()
    try:
        grid, info = adaptive_grid(x0, schedule, attn, opts, kernel)
    except FloatingPointError as exc:
        failed = f"adaptive steps: {exc}"
        logger.error("particle run failed: %s", failed)
    res = _simulate_python(x0, schedule, attn, opts, "adaptive steps run on the Python loop",
                           grid=grid, failed=failed,
                           extra_in={"adaptive": info} if info is not None else None)
    wall = time.perf_counter() - t0
    if failed or res.status == Status.FAILED:
        return replace(res, wall_time=wall)
    tol = opts.tolerance()
    check = {"passed": True, "rtol": tol.rtol, "atol": tol.atol,
             "estimate": "step doubling per step, error per unit step <= 1 (PI controller)",
             "accepted": info["accepted"], "rejected": info["rejected"],
             "dt_min": info["dt_min"], "dt_max": info["dt_max"]}
    return replace(res, status=Status.SUCCESS, message="", wall_time=wall,
                   checks={**res.checks, "accuracy": check})


def _setup(schedule: Schedule, opts: ParticleOptions, grid: np.ndarray | None = None):
    """Paths, their generators, the time grid, steps, recorded steps and the flow's sign.

    Paths: ``n_paths`` with noisy weights or token diffusion (independent token-noise
    replicates), else one.
    """
    P = int(opts.n_paths) if (schedule.stochastic or opts.diffusion > 0) else 1
    rngs = [np.random.default_rng(s) for s in np.random.SeedSequence(opts.seed).spawn(P)]
    if grid is None:
        grid = time_grid(opts.T, opts.dt, schedule.jump_times)
    S = len(grid) - 1
    rec_idx = np.unique(np.concatenate([np.arange(0, S + 1, int(opts.record_every)), [S]]))
    heads0 = schedule.heads_at(schedule.initial_theta())
    sign = heads0.value_alignment() if heads0.is_symmetric() else 0
    return P, rngs, grid, S, rec_idx, sign


def _serial_path(x0: np.ndarray, schedule: Schedule, attn: Attention, opts: ParticleOptions,
                 rng: np.random.Generator, klog: KernelLog, m: np.ndarray, S: int, sign: int,
                 grid: np.ndarray, rec_idx: np.ndarray, bar, path: int = 0) -> _PathRun:
    """One path of the whole system in this process (the step-by-step Python loop)."""

    def mart(prev: ParticleState) -> float:
        G = energy_gradient_A(prev.x, m, prev.field)
        dA = schedule.param.A_dot(prev.theta, prev.dtheta_noise)
        return float(np.einsum("h,hij,hij->", prev.heads.w, G, dA))

    idx = _kept_tokens(x0.shape[0], opts)
    states = iterate(x0, schedule, attn, T=opts.T, dt=opts.dt, integrator=opts.integrator,
                     flow=opts.flow, rng=rng, kernel_backend=opts.kernel_backend,
                     kernel_tol=opts.kernel_tol, kernel_log=klog,
                     diffusion=getattr(opts, "diffusion", 0.0), seed=opts.seed, path=path,
                     grid=grid, ito_terms=opts.ito_balance is not False, dtype=opts.dtype)
    return _run_path(
        states, S=S, sign=sign, grid=grid, rec_idx=rec_idx, schedule=schedule, opts=opts,
        record=lambda rows, st, acc: _record(rows, st, m, attn, acc, opts, schedule),
        martingale=mart, keep=(lambda x: x.copy()) if idx is None else (lambda x: x[idx]),
        bar=bar)


def _assemble(runs: list[_PathRun], status: Status, message: str, x0: np.ndarray,
              schedule: Schedule, opts: ParticleOptions, grid: np.ndarray,
              rec_idx: np.ndarray, wall: float, sign: int, extra: dict,
              attn: Attention | None = None) -> ParticleResult:
    """The :class:`ParticleResult` of the finished paths (in path order).

    ``attn`` with a mask: the chain-rule and Itô checks recorded, not judged
    (:func:`~wflow.particles.loop.unjudged_chain`).
    """
    if status == Status.FAILED:
        return ParticleResult(status, message, opts, grid[rec_idx], {}, {}, x0[None],
                              schedule.initial_theta()[None], None, None, sign,
                              {"engine": extra["engine"], "engine_reason": extra["engine_reason"],
                               **({"mpi": extra["mpi"]} if "mpi" in extra else {})},
                              order=INTEGRATOR_ORDER[opts.integrator], wall_time=wall)
    hist: dict[str, list] = {}
    balance: dict[str, list[float]] = {}
    for run in runs:
        for key, vals in run.rows.items():
            hist.setdefault(key, []).append(np.asarray(vals))
        for key, val in run.balance.items():
            balance.setdefault(key, []).append(val)
    steps = {k: np.stack([run.steps[k] for run in runs]) for k in STEP_KEYS}
    steps.update({k: np.stack([run.steps[k] for run in runs]) for k in ITO_STEP_KEYS
                  if runs and k in runs[0].steps})
    history = {k: np.stack(v) for k, v in hist.items()}
    t_rec = grid[rec_idx]
    if "entropy" in history and t_rec.size >= 3:
        # left side of the entropy identity: dH/dt by (second-order) finite differences of the
        # recorded entropies, next to the right side −β² Cov_p(s, ṡ) ("entropy_rate")
        history["entropy_rate_fd"] = np.gradient(history["entropy"], t_rec, axis=1)
    bal = {k: np.asarray(v) for k, v in balance.items()}
    status, message, checks = judge_run(history, steps, bal, grid, opts, schedule.stochastic)
    status, message, checks = unjudged_chain(status, message, checks, opts, attn)
    before = (status, message)
    status, message, checks = unjudged_masked_ito(before, judge_noisy_run(
        status, message, checks, grid, steps, bal, opts, schedule.stochastic), attn)
    save = opts.save_trajectory
    res = ParticleResult(
        status, message, opts, grid[rec_idx], {"t": grid, **steps}, bal,
        np.stack([run.x for run in runs]), np.stack([run.theta for run in runs]),
        np.stack([np.asarray(run.traj) for run in runs]) if save else None,
        np.stack([np.asarray(run.ttraj) for run in runs]) if (save and not schedule.static)
        else None, sign, extra, history=history, checks=checks,
        order=INTEGRATOR_ORDER[opts.integrator], wall_time=wall, engine=extra["engine"])
    if status == Status.INACCURATE:
        logger.warning("particle run inaccurate: %s", message)
    elif status != Status.SUCCESS:
        logger.error("particle run: %s", message)
    return res


def _simulate_split(x0: np.ndarray, schedule: Schedule, attn: Attention, opts: ParticleOptions,
                    comm: Any) -> ParticleResult:
    """:func:`simulate` over the ranks of ``comm`` (:mod:`wflow.particles.split`)."""
    from . import split as sp

    size, rank = comm.Get_size(), comm.Get_rank()
    P, rngs, grid, S, rec_idx, sign = _setup(schedule, opts)
    n = x0.shape[0]
    klog = KernelLog()
    t_start = time.perf_counter()
    status, message = Status.SUCCESS, ""
    runs: list[_PathRun] = []
    mode = "paths" if P > 1 else "tokens"
    if mode == "paths":  # whole paths on ranks p mod size, the serial loop's paths
        bar = progress_bar(len(range(rank, P, size)) * S, opts.progress, desc="particles",
                           rank=rank)
        m = np.full(n, 1.0 / n)
        mine: dict[int, _PathRun] = {}
        err = None
        try:
            for p in range(rank, P, size):
                mine[p] = _serial_path(x0, schedule, attn, opts, rngs[p], klog, m, S, sign,
                                       grid, rec_idx, bar, path=p)
        except FloatingPointError as exc:
            err = str(exc)
        finally:
            if bar is not None:
                bar.close()
        parts = comm.allgather((mine, err, klog))
        errs = [e for _, e, _ in parts if e is not None]
        if errs:
            status, message = Status.FAILED, errs[0]
            logger.error("particle run failed: %s", message)
        else:
            got: dict[int, _PathRun] = {}
            for d_, _, _ in parts:
                got.update(d_)
            runs = [got[p] for p in range(P)]
        klog = KernelLog()
        for _, _, lg in parts:
            for b, c in lg.counts.items():
                klog.counts[b] = klog.counts.get(b, 0) + c
            klog.max_err_est = max(klog.max_err_est, lg.max_err_est)
            klog.max_degree = max(klog.max_degree, lg.max_degree)
            klog.last = lg.last if lg.last is not None else klog.last
    else:  # one system, the tokens split over the ranks
        if opts.entropy:
            raise ValueError("particles.entropy: attention entropies are not split over MPI "
                             "ranks (O(n²) per record); run them in one process")
        if n < size:
            raise ValueError(f"tokens: {n} tokens cannot be split over {size} MPI ranks "
                             "(fewer tokens than ranks); run with fewer ranks")
        x_loc, first = sp.local_block(x0, comm)
        m = np.full(x_loc.shape[0], 1.0 / n)
        kernel = sp.SplitKernel(comm, n, opts.kernel_backend, opts.kernel_tol, klog)
        idx = _kept_tokens(n, opts)
        if idx is None:
            def keep(x: np.ndarray) -> np.ndarray:
                return x.copy()
        else:
            sel = idx[(idx >= first) & (idx < first + x_loc.shape[0])] - first

            def keep(x: np.ndarray) -> np.ndarray:
                return x[sel]
        bar = progress_bar(S, opts.progress, desc="particles", rank=rank)
        try:
            if opts.diffusion > 0:  # token noise keyed by global token block, not by rank
                states = _iterate_split_noisy(x_loc, first, n, schedule, attn, kernel, opts,
                                              rngs[0], comm)
            else:
                states = sp.iterate_split(x_loc, schedule, attn, kernel=kernel, T=opts.T,
                                          dt=opts.dt, integrator=opts.integrator,
                                          flow=opts.flow, rng=rngs[0])
            run = _run_path(
                states, S=S, sign=sign, grid=grid, rec_idx=rec_idx, schedule=schedule,
                opts=opts,
                record=lambda rows, st, acc: sp.record_split(rows, st, m, attn, acc, opts,
                                                             schedule, comm),
                martingale=lambda prev: sp.martingale_split(prev, m, schedule, comm),
                keep=keep, bar=bar)
            # the result holds the whole system: final (and kept) tokens gathered in order
            run = run._replace(x=sp.gather_rows(comm, run.x),
                               traj=[sp.gather_rows(comm, xk) for xk in run.traj])
            runs = [run]
        except FloatingPointError as exc:  # raised on every rank alike (collective checks)
            status, message = failed_run(exc, "particle", logger)
        finally:
            if bar is not None:
                bar.close()
    wall = sp.wall_max(comm, t_start)
    extra = {"kernel": klog.summary(), "engine": "python",
             "engine_reason": f"split over {size} MPI ranks ({mode})",
             "mpi": {"ranks": size, "mode": mode}}
    return _assemble(runs, status, message, x0, schedule, opts, grid, rec_idx, wall, sign,
                     extra, attn)


def _iterate_split_noisy(x_loc: np.ndarray, first: int, n: int, schedule: Schedule,
                         attn: Attention, kernel: Any, opts: ParticleOptions,
                         rng: np.random.Generator, comm: Any) -> Iterator[ParticleState]:
    """:func:`wflow.particles.split.iterate_split` with token diffusion (collective).

    This rank's tokens ``[first, first + len(x_loc))`` draw the rows of the keyed streams
    of the global token blocks (:class:`~wflow.particles.noise.TokenNoise`), so every
    token gets the serial run's noise whatever the number of ranks.
    """
    from . import split as sp

    x = check_on_sphere(x_loc, name="tokens") if x_loc.shape[0] else \
        np.asarray(x_loc, dtype=np.float64)
    m = np.full(x.shape[0], 1.0 / n)
    noise = TokenNoise(opts.seed, n, x_loc.shape[1], first=first, count=x.shape[0])

    def terms(x: np.ndarray, t: float, theta: np.ndarray, heads: Heads | None):
        if opts.ito_balance is not False:  # the Itô terms need the full-width sums Y
            heads = _full_width(schedule.heads_at(theta) if heads is None else heads)
        out = sp._state_terms_split(x, m, t, theta, schedule, attn, opts.flow, kernel, heads)
        if opts.ito_balance is not False:  # the Itô balance's terms, summed over the ranks
            hh, fe, vel, tm = out
            out = hh, fe, vel, {**tm, **_ito_split(x, m, hh, attn, fe, vel, opts, kernel,
                                                   comm)}
        return out

    def control(x: np.ndarray, fe, heads: Heads, integ, step_noise, h: float) -> float:
        from ..infra.parallel import ordered_sum

        part = martingale_cv(x, m, heads, fe, _velocity(fe, opts.flow), integ, step_noise, h,
                             opts.diffusion)
        return float(ordered_sum(comm, np.array([part]))[0])

    return time_loop(x, schedule, attn, T=opts.T, dt=opts.dt, integrator=opts.integrator,
                     flow=opts.flow, rng=rng, kernel=kernel, terms=terms,
                     finite=lambda x: bool(sp._gmin(comm, float(bool(np.all(np.isfinite(x)))))),
                     diffusion=opts.diffusion, noise=noise,
                     control=control if opts.ito_balance is not False else None)



def _ito_split(x: np.ndarray, m: np.ndarray, heads: Heads, attn: Attention, fe: Any,
               vel: np.ndarray, opts: ParticleOptions, kernel: Any,
               comm: Any) -> dict[str, float]:
    """:func:`~wflow.particles.free_energy.ito_integrands` of tokens split over the ranks.

    The second-moment sums over every rank's tokens (:func:`wflow.kernels.split.
    split_sums`), the per-rank parts added by one ordered sum, ``κ`` the ranks' maximum
    (collective).
    """
    from ..infra.parallel import ordered_sum
    from ..kernels.split import split_sums
    def sums(mass: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        s = split_sums(x, mass, heads.Q, heads.K, comm=comm, beta=attn.beta, kind=attn.kind,
                       backend=kernel.backend, tol=kernel.tol)
        return s.Z, s.Y

    loc = ito_integrands(x, m, heads, attn, fe, vel, opts.diffusion, sums=sums)
    lap, qv, u2 = (float(v) for v in ordered_sum(comm, np.array([loc["lap"], loc["qv"],
                                                                  loc["u2"]])))
    return {"lap": lap, "qv": qv,
            "kappa": bias_rate(heads, attn, x.shape[1], opts.diffusion, u2)}
