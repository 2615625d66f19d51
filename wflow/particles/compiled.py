"""The compiled particle time loop: :func:`simulate_compiled`.

:func:`simulate_compiled` runs every schedule kind and Monte-Carlo paths
(:func:`wflow.particles.euler_path`, in :mod:`wflow.particles.static_euler`, is the older
Euler loop for static heads in ``d ≤ 3``).

:func:`simulate_compiled` is ``simulate(..., engine="compiled")``: the same trajectory,
per-step integrands, records and balances as the Python loop of
:func:`wflow.particles.simulate` (tested to 1e-12 for every schedule kind, every
integrator with compiled code, noisy weights and token noise under a fixed seed), with
the whole time loop compiled (:mod:`wflow.particles._path_numba`):

* the state of every step (velocity, energies, slope terms, ``∂E_h/∂A_h``, the Itô sum)
  from one fused pass per evaluation, any ``d``, pairs counted once for symmetric heads
  (:mod:`wflow.kernels.primitives`);
* the weights in the same arithmetic as :meth:`wflow.attention.schedules.Schedule.advance`:
  closed forms (static, deterministic OU, oscillating), explicit Euler or RK4 half steps
  (relaxed; the published frames computed in the loop, any other target tabulated from
  the schedule), Euler–Maruyama with the normals drawn by NumPy from the same generators,
  in the same order as ``simulate`` (``SeedSequence(seed).spawn(n_paths)``, one
  ``(H, rows, d)`` draw per step), layers jumping at their grid times;
* token diffusion (THEORY §8) with ``em``, ``strang`` and ``strang-heun``: the keyed
  token noise of :class:`~wflow.particles.noise.TokenNoise` (normals, or the heat-kernel
  increments ``(ξ, θ)`` of :meth:`~wflow.particles.noise.StepNoise.heat_draws`) drawn in
  Python a block of steps at a time, the same streams as the Python loop, applied in the
  compiled step; token-noise replicates (``n_paths > 1``, deterministic weights) are paths;
* Monte-Carlo paths in one parallel loop (each path serial); one path with parallel
  evaluations (the pair-once sums split into fixed row slices per head, so the
  summation order, hence every bit of the result, is independent of threads and load).

Diagnostics the loop does not compute — cluster counts, per-head rates, attention
entropies — are evaluated in Python at the recorded states (every ``record_every``
steps). Callable schedules (and schedule subclasses), integrators without compiled code
(a user's, or a subclass of a built-in one), attention kinds without compiled kernel, and
the NumPy or fast-summation kernel back-ends run on the Python path
(:func:`compiled_support` says why): the compiled loop never runs one integrator or
schedule in place of another.
"""

from __future__ import annotations

import logging
import time
from concurrent.futures import ThreadPoolExecutor
from functools import partial
from typing import NamedTuple

import numpy as np

from ..attention.heads import Attention
from ..attention.kinds import get_kind
from ..attention.published import PublishedFrames
from ..attention.schedules import Layers, OrnsteinUhlenbeck, Oscillating, Relaxed, Schedule, Static
from ..diagnostics import BalanceAccumulator
from ..geometry.sphere import check_on_sphere
from ..infra import interrupts
from ..infra.progress import progress_bar
from ..kernels import (
    KernelInfo,
    KernelLog,
    aligned,
    aligned_empty,
    plan_kernel,
    raise_bound,
    threads,
)
from ..status import Status
from .integrators import (
    CODE_EM,
    CODE_EULER,
    CODE_RK4,
    CODE_STRANG,
    CODE_STRANG_HEUN,
    INTEGRATORS,
    _Kernel,
    _velocity,
    compiled_code,
    time_grid,
)
from .loop import unjudged_chain
from .noise import TokenNoise
from .options import INTEGRATOR_ORDER, ParticleOptions
from .result import STEP_KEYS, ParticleResult, ParticleState, _record, add_simpson, judge_run

__all__ = [
    "compiled_support",
    "simulate_compiled",
]

logger = logging.getLogger(__name__)

#: Schedule classes the compiled loop mirrors exactly (subclasses may override methods).
COMPILED_SCHEDULES = (Static, OrnsteinUhlenbeck, Oscillating, Relaxed, Layers)
#: Diagnostics evaluated in Python at the recorded states.
_EXTRA_KEYS = ("n_clusters", "dEh_dt", "dEh_own", "dEh_cross_direct", "dEh_cross_radial",
               "radial_margin", "radial_shadow", "entropy", "entropy_rate")
#: Doubles of pre-drawn normals / tabulated targets per block of steps (32 MiB).
_BLOCK_BUDGET = 1 << 22
#: Longest block of steps between two returns to Python (progress, recorded extras).
_BLOCK_MAX = 500
#: One path may evaluate its states on all threads (one parallel region per evaluation)
#: from this many kernel evaluations ``n² H`` per state; whether it does is measured
#: (:class:`_Probe`). The results are the same bits either way.
PAR_MIN_EVALS = 1 << 15
#: Seconds between two measurements of serial against parallel evaluations.
REPROBE_S = 5.0


#: Token scheme of the compiled loop (``_path_numba.TOK_*``) per integrator code.
_TOKEN_SCHEME = {CODE_EULER: "TOK_EULER", CODE_EM: "TOK_EULER", CODE_RK4: "TOK_RK4",
                 CODE_STRANG: "TOK_STRANG", CODE_STRANG_HEUN: "TOK_STRANG_HEUN"}
#: Integrator codes with a compiled noisy step.
_NOISY_CODES = (CODE_EM, CODE_STRANG, CODE_STRANG_HEUN)


class _Probe:
    """Chooses serial or parallel evaluations for one path by timing both, now and then.

    Every :data:`REPROBE_S` seconds the next two short blocks (~20 ms of work each) run
    serially and in parallel, and the faster mode runs until the next probe. A load-average
    rule guessed wrong in both directions on a shared machine: it kept runs serial after
    other jobs had stopped (the average lags by a minute and counts this process's own
    work), and a thread team whose second thread the OS parks waits a whole time slice
    per region.
    """

    def __init__(self, work: int, stages: int):
        est = work * stages * 0.7e-9  # s per step at ~0.7 ns per evaluation
        self.steps = int(min(500, max(8, 0.02 / max(est, 1e-9))))
        self.next_at = 0.0
        self.pending: list[bool] = []
        self.rate = {False: 0.0, True: 0.0}
        self.par = True

    def next(self, k0: int, k1: int) -> tuple[bool, int]:
        """The mode and end of the block starting at ``k0`` (proposed end ``k1``)."""
        if k0 == 0:  # the first state alone, then the first probe
            return False, min(k1, 1)
        if not self.pending and time.perf_counter() >= self.next_at and k1 - k0 >= self.steps:
            self.pending = [False, True]
        if self.pending:
            return self.pending[0], min(k1, k0 + self.steps)
        return self.par, k1

    def done(self, par: bool, steps: int, seconds: float) -> None:
        """Record a block's wall time; after a probe pair, choose the faster mode."""
        if not self.pending:
            return
        self.rate[par] = seconds / max(steps, 1)
        self.pending.pop(0)
        if not self.pending:
            self.par = self.rate[True] < self.rate[False]
            self.next_at = time.perf_counter() + REPROBE_S
            logger.debug("particles: %s evaluations (%.3g vs %.3g s per step)",
                         "parallel" if self.par else "serial", self.rate[True],
                         self.rate[False])


def _is_published(schedule: Relaxed) -> bool:
    """Whether a relaxed schedule's target is the published frames for its own ``(H, d)``."""
    tgt = schedule.target
    H, rows, d = schedule.theta0.shape
    return isinstance(tgt, PublishedFrames) and tgt.H == H and tgt.d == d and rows == d


def compiled_support(x0: np.ndarray, schedule: Schedule, attn: Attention,
                     opts: ParticleOptions) -> str | None:
    """Why :func:`simulate_compiled` cannot run this simulation, or ``None`` if it can.

    Unsupported: integrators without compiled code
    (:func:`~wflow.particles.integrators.compiled_code`: a user's integrator, a subclass of
    a built-in one), token diffusion with an integrator whose compiled step is not a noisy
    one (``em``, ``strang`` and ``strang-heun`` have one), schedules other than
    :data:`COMPILED_SCHEDULES` (exact types: callables, subclasses),
    the ``"numpy"`` and ``"fastsum"`` kernel back-ends, ``"auto"`` where it would plan
    the fast summation at ``t = 0`` (large ``n`` on S²), attention kinds without a
    compiled kernel (:attr:`wflow.attention.kinds.AttentionKind.compiled`), a causal
    mask, heads of value rank ``r < d`` for ``d > 3`` (summed at their rank in Python).
    """
    integ = INTEGRATORS.resolve(opts.integrator, "particles.integrator")
    if getattr(attn, "mask", None) is not None:
        return f"a causal mask (attention.mask = {attn.mask.name!r}) runs on the Python loop"
    spec = get_kind(attn.kind)
    if not spec.compiled:
        return spec.not_compiled()
    if compiled_code(integ) is None:
        return (f"integrator {integ.name!r} ({type(integ).__qualname__}) has no compiled "
                "code (ParticleIntegrator.compiled_code)")
    if getattr(opts, "diffusion", 0.0) > 0 and compiled_code(integ) not in _NOISY_CODES:
        return (f"token diffusion with integrator {integ.name!r} runs on the Python loop "
                "(only 'em', 'strang' and 'strang-heun' have a compiled noisy step)")
    if type(schedule) not in COMPILED_SCHEDULES:
        return f"{type(schedule).__name__} schedules run on the Python path"
    h0 = schedule.heads_at(schedule.initial_theta())
    if h0.value_factors() is not None and 3 < h0.d and h0.value_rank < h0.d:
        return f"heads of value rank {h0.value_rank} < d run on the Python loop, at rank"
    if opts.kernel_backend in ("numpy", "fastsum"):
        return f"kernel_backend={opts.kernel_backend!r} runs on the Python path"
    if opts.kernel_backend == "auto":
        heads = schedule.heads_at(schedule.initial_theta())
        n = x0.shape[0]
        plan = plan_kernel(x0, x0, heads.Q, heads.K, beta=attn.beta, kind=attn.kind,
                           tol=opts.kernel_tol, m=np.full(n, 1.0 / n))
        if plan.backend != "direct":
            return f"kernel_backend='auto' plans {plan.backend} sums ({plan.reason})"
    return None


def _integrator_code(opts: ParticleOptions) -> int:
    """The compiled code of the run's integrator (checked by :func:`compiled_support`)."""
    code = compiled_code(INTEGRATORS.resolve(opts.integrator))
    if code not in _TOKEN_SCHEME:
        raise ValueError(f"particles.integrator: {opts.integrator!r} has no compiled code "
                         f"(got {code!r})")
    return code


def _rk4_weights(opts: ParticleOptions) -> bool:
    """Whether the run's weights take RK4 half steps (``integrator.weights == "rk4"``)."""
    return INTEGRATORS.resolve(opts.integrator).weights == "rk4"


class _Program(NamedTuple):
    """Everything the compiled loop reads that does not change along a run."""

    ipar: np.ndarray
    fpar: np.ndarray
    wkind: int
    A0: np.ndarray
    V0: np.ndarray
    Q0: np.ndarray
    K0: np.ndarray
    Vfix: np.ndarray
    wa: np.ndarray
    wb: np.ndarray
    wc: np.ndarray
    thetas: np.ndarray
    sig: np.ndarray
    jump: np.ndarray


def _program(schedule: Schedule, attn: Attention, opts: ParticleOptions, grid: np.ndarray,
             n: int, d: int, sign: int) -> _Program:
    from . import _path_numba as pn

    theta0 = np.asarray(schedule.initial_theta(), dtype=np.float64)
    H, R, _ = theta0.shape
    D = 3 if d <= 3 else d
    param = schedule.param
    heads0 = schedule.heads_at(theta0)
    # the overflow guard needs Q and K; none (zero rows) means Q = I, K = A at every step:
    # bilinear parameters, or static heads of that form
    eye = np.broadcast_to(np.eye(d), (H, d, d))
    bilinear = param.kind == "bilinear" or (
        isinstance(schedule, Static) and heads0.Q.shape == eye.shape
        and np.array_equal(heads0.Q, eye) and np.array_equal(heads0.K, heads0.A))
    kq = 0 if bilinear else heads0.Q.shape[1]
    A0, V0 = np.zeros((H, D, D)), np.zeros((H, D, D))
    Q0, K0 = np.zeros((H, kq, D)), np.zeros((H, kq, D))
    Vfix = np.zeros((H, d, d))
    wa, wb, wc = np.zeros_like(theta0), np.zeros_like(theta0), np.zeros(H)
    thetas = np.zeros((1,) + theta0.shape)
    jump = np.full(grid.size, -1, dtype=np.int64)
    kappa = omega = 0.0
    if isinstance(schedule, Static):
        wkind = pn.W_STATIC
        A0[:, :d, :d] = heads0.A
        V0[:, :d, :d] = heads0.V
        if kq:
            Q0[:, :, :d] = heads0.Q
            K0[:, :, :d] = heads0.K
    else:
        if param.kind == "bilinear" and param.V is not None:
            Vfix[:] = param.V
        if isinstance(schedule, OrnsteinUhlenbeck):
            wkind, kappa = pn.W_OU, float(schedule.kappa)
            wa[:], wb[:] = schedule.theta_inf, schedule.theta0
        elif isinstance(schedule, Oscillating):
            wkind, omega = pn.W_OSC, float(schedule.omega)
            wa[:], wb[:], wc[:] = schedule.theta_inf, schedule.amplitude, schedule.phases
        elif isinstance(schedule, Relaxed):
            wkind = pn.W_RELAX_PUB if _is_published(schedule) else pn.W_RELAX_TAB
            kappa = float(schedule.kappa)
        else:  # Layers
            wkind = pn.W_LAYERS
            thetas = np.ascontiguousarray(schedule.thetas, dtype=np.float64)
            jumps = set(schedule.jump_times)
            for k in range(1, grid.size):
                if float(grid[k]) in jumps:
                    jump[k] = schedule.layer(float(grid[k]))
    stoch = schedule.stochastic
    sig = np.array([schedule.sigma(float(t)) for t in grid]) if stoch else np.zeros(grid.size)
    ipar = np.zeros(pn.N_IPAR, dtype=np.int64)
    ipar[pn.I_N], ipar[pn.I_DIM], ipar[pn.I_H] = n, d, H
    spec = get_kind(attn.kind)
    ipar[pn.I_KIND] = spec.require_compiled("particles.engine='compiled'")
    ipar[pn.I_SOFT] = spec.normalised
    ipar[pn.I_SURR] = opts.flow == "surrogate"
    ipar[pn.I_RK4] = _rk4_weights(opts)
    ipar[pn.I_TOK] = getattr(pn, _TOKEN_SCHEME[_integrator_code(opts)])
    ipar[pn.I_WKIND] = wkind
    ipar[pn.I_PKIND] = 0 if param.kind == "bilinear" else 1
    ipar[pn.I_VFIX] = param.V is not None
    ipar[pn.I_STOCH] = stoch
    ipar[pn.I_SYMN] = bool(schedule.symmetric_noise)
    fpar = np.zeros(pn.N_FPAR)
    fpar[pn.F_BETA] = attn.beta
    fpar[pn.F_SIGN] = sign
    fpar[pn.F_VSIGN] = param.value_sign
    fpar[pn.F_KAPPA] = kappa
    fpar[pn.F_OMEGA] = omega
    fpar[pn.F_ITOF] = 0.125 if schedule.symmetric_noise else 0.25
    fpar[pn.F_2D] = 2.0 * float(getattr(opts, "diffusion", 0.0))
    return _Program(ipar, fpar, wkind, A0, V0, Q0, K0, Vfix, wa, wb, wc, thetas, sig, jump)


def _target_table(schedule: Relaxed, grid: np.ndarray, k0: int, k1: int, rk4: bool,
                  shape: tuple[int, ...]) -> np.ndarray:
    """Targets ``F(t)`` at the times ``Relaxed.advance`` evaluates them, steps ``k0..k1``.

    Row ``k − k0``: stage 0 at ``t_k`` (also the ``∂_tE`` of state ``k``); with RK4 the
    stages of the two half steps ``t, t + h/4, t + h/2, t + 3h/4, t + h`` in the same
    floating-point expressions as :func:`wflow.attention.schedules._rk4`.
    """
    tab = np.zeros((k1 - k0 + 1, 5) + shape)
    for k in range(k0, k1 + 1):
        t = float(grid[k])
        tab[k - k0, 0] = schedule.target(t)
        if rk4 and k < grid.size - 1:
            h = float(grid[k + 1] - t)
            hh = 0.5 * h
            t1 = t + 0.5 * h
            for st, tt in enumerate((t + 0.5 * hh, t + hh, t1 + 0.5 * hh, t1 + hh), start=1):
                tab[k - k0, st] = schedule.target(tt)
    return tab


def _token_noise(tokens: list[TokenNoise], code: int, k0: int, k1: int, grid: np.ndarray,
                 diffusion: float, d: int, npad: int) -> np.ndarray:
    """The token noise of steps ``k0..k1`` for every path, as the Python loop draws it.

    ``(P, k1 − k0, rows, npad)``: for ``em`` the normals ``ξ`` of
    :meth:`~wflow.particles.noise.StepNoise.normals` (rows ``0..d``); for the Strang
    splittings the two heat increments over ``s = D h/2`` of
    :meth:`~wflow.particles.noise.StepNoise.heat_draws` (``ξ``, ``cos θ``, ``sin θ`` of
    draw 0, then of draw 1), ``h`` the step of the grid as the loop computes it.
    """
    n = tokens[0].n
    rows = d if code == CODE_EM else 2 * (d + 2)
    out = np.zeros((len(tokens), k1 - k0, rows, npad))
    for p, tok in enumerate(tokens):
        for k in range(k0, k1):
            at = tok.at(k)
            if code == CODE_EM:
                out[p, k - k0, :, :n] = at.normals(0).T
                continue
            s = 0.5 * diffusion * float(grid[k + 1] - grid[k])
            for j in range(2):
                xi, th = at.heat_draws(s, j)
                r0 = j * (d + 2)
                out[p, k - k0, r0:r0 + d, :n] = xi.T
                out[p, k - k0, r0 + d, :n] = np.cos(th)
                out[p, k - k0, r0 + d + 1, :n] = np.sin(th)
    return out


def _fail_message(code: int, value: float) -> str:
    from . import _path_numba as pn

    if code == pn.FAIL_BOUND:
        try:
            raise_bound(value)
        except FloatingPointError as exc:
            return str(exc)
    if code == pn.FAIL_ZERO:
        return "softmax normaliser underflowed to 0; lower attention.beta"
    return f"non-finite tokens or energy at t = {value:.6g}; reduce dt or the head scale"


def _extras(x: np.ndarray, theta: np.ndarray, t: float, schedule: Schedule, attn: Attention,
            opts: ParticleOptions, sign: int) -> dict[str, object]:
    """Cluster count, head rates, entropies of one recorded state (as ``simulate`` records)."""
    from ..diagnostics import count_clusters

    if not (opts.head_rates or opts.entropy):
        return {"n_clusters": float(count_clusters(x, cos_threshold=opts.cluster_cos))}
    n = x.shape[0]
    m = np.full(n, 1.0 / n)
    heads = schedule.heads_at(theta)
    kernel = _Kernel(opts.kernel_backend, opts.kernel_tol, None)
    fused = kernel.fused(x, m, heads, attn, opts.flow)
    fe = fused[0] if fused is not None else kernel.evaluate(x, heads, attn)
    terms = dict.fromkeys(("E", "dEdt_w", "power", "slope2", "speed2", "G2", "ito"), 0.0)
    rows: dict[str, list] = {}
    st = ParticleState(t, x, theta, heads, fe, _velocity(fe, opts.flow), terms, None)
    _record(rows, st, m, attn, BalanceAccumulator(sign=sign, E0=0.0), opts, schedule)
    return {k: v[0] for k, v in rows.items() if k in _EXTRA_KEYS}


def simulate_compiled(x0: np.ndarray, schedule: Schedule, attn: Attention,
                      opts: ParticleOptions):
    """``simulate(x0, schedule, attn, options=opts)`` with the whole time loop compiled.

    Same :class:`~wflow.particles.ParticleResult` (histories, per-step integrands,
    balances incl. ``chain_simpson``, final states, trajectories, status) as the Python
    loop, to round-off (tested to 1e-12). Called by :func:`wflow.particles.simulate` for
    ``engine="compiled"`` or ``"auto"`` (see :func:`compiled_support`); the arguments are
    validated there.
    """
    from . import _path_numba as pn

    why = compiled_support(x0, schedule, attn, opts)
    if why is not None:
        raise ValueError(f"particles.engine: the compiled loop does not support this run: {why}")
    x0 = check_on_sphere(x0, name="tokens")
    n, d = x0.shape
    theta0 = np.asarray(schedule.initial_theta(), dtype=np.float64)
    H, R, _ = theta0.shape
    D = 3 if d <= 3 else d
    npad = -(-n // 8) * 8
    stoch = schedule.stochastic
    diffusion = float(getattr(opts, "diffusion", 0.0))
    # paths: of the weights' noise, or replicates of the token noise (deterministic weights)
    P = int(opts.n_paths) if (stoch or diffusion > 0) else 1
    if opts.n_paths > 1 and P == 1:
        logger.info("deterministic schedule: running one path instead of %d", opts.n_paths)
    rngs = [np.random.default_rng(s) for s in np.random.SeedSequence(opts.seed).spawn(P)]
    grid = time_grid(opts.T, opts.dt, schedule.jump_times)
    S = grid.size - 1
    rec_idx = np.unique(np.concatenate([np.arange(0, S + 1, int(opts.record_every)), [S]]))
    K = rec_idx.size
    heads0 = schedule.heads_at(theta0)
    sign = heads0.value_alignment() if heads0.is_symmetric() else 0
    prog = _program(schedule, attn, opts, grid, n, d, sign)
    rk4 = _rk4_weights(opts)
    code = _integrator_code(opts)
    # field evaluations per step (D = 0: the splittings' noiseless steps, strang's is RK4's)
    stages = INTEGRATORS.resolve(opts.integrator).stages()
    if code == CODE_STRANG and not float(getattr(opts, "diffusion", 0.0)) > 0:
        stages = INTEGRATORS["rk4"].stages()
    m = aligned(np.full(n, 1.0 / n))
    w = aligned(heads0.w)
    wbar = aligned(heads0.w / heads0.w.sum())
    recpos = np.full(S + 1, -1, dtype=np.int64)
    recpos[rec_idx] = np.arange(K)
    extras = opts.clusters or opts.head_rates or opts.entropy
    snap = opts.save_trajectory or extras
    # per-path state, on 64-byte boundaries (see wflow.kernels.aligned_empty)
    X = aligned_empty((P, D, npad))
    X[:] = 0.0
    X[:, :d, :n] = x0.T
    TH = aligned_empty((P, H, R, d))
    TH[:] = theta0
    VEL = aligned_empty((P, D, npad))
    VEL[:] = 0.0
    GM = np.zeros((P, H, D, D))
    CUR = np.zeros((P, pn.N_TERMS))
    ACC = np.zeros((P, pn.N_ACC))
    STAT = np.zeros((P, 3))
    STEPS = np.full((P, pn.N_TERMS, S + 1), np.nan)
    REC = np.full((P, K, len(pn.RECORDED)), np.nan)
    REH = np.full((P, K, H), np.nan)
    per_step = P * H * R * d * (1 + (5 if rk4 else 1) * (prog.wkind == pn.W_RELAX_TAB))
    block = int(min(_BLOCK_MAX, max(1, _BLOCK_BUDGET // max(per_step, 1))))
    tokens = ([TokenNoise(opts.seed, n, d, path=p) for p in range(P)] if diffusion > 0
              else None)
    # token noise rows per step: EM's normals; two heat increments (ξ, cos θ, sin θ)
    trows = d if code == CODE_EM else 2 * (d + 2)
    if tokens is not None:  # the token noise of a block of steps, within the budget
        block = int(max(1, min(block, _BLOCK_BUDGET // (P * trows * npad))))
    if snap:
        block = max(block, int(opts.record_every))
    nsnap = -(-block // int(opts.record_every)) + 1 if snap else 1
    SX = np.zeros((P, nsnap, n, d))
    STH = np.zeros((P, nsnap, H, R, d))
    extra_rows: list[list[dict]] = [[] for _ in range(P)]
    trajs: list[list[np.ndarray]] = [[] for _ in range(P)]
    ttrajs: list[list[np.ndarray]] = [[] for _ in range(P)]
    work = n * n * H
    # one path: parallel evaluations where they pay; the results are the same bits either
    # way, so the choice is measured (_Probe), not guessed from the load average
    probe = (_Probe(work, stages) if P == 1 and work >= PAR_MIN_EVALS and threads() > 1
             else None)
    par = probe is not None
    evals = 0
    bar = progress_bar(P * S, opts.progress, desc="particles")
    pool = ThreadPoolExecutor(max_workers=max(1, min(P, threads()))) if P > 1 else None
    t_start = time.perf_counter()
    try:
        k0 = 0
        while True:
            k1 = min(S, k0 + block)
            if probe is not None:
                par, k1 = probe.next(k0, k1)
            snappos = np.full(S + 1, -1, dtype=np.int64)
            in_block = rec_idx[(rec_idx >= k0) & (rec_idx <= k1)] if snap else rec_idx[:0]
            if k0 > 0:
                in_block = in_block[in_block > k0]  # state k0 was recorded by the last block
            snappos[in_block] = np.arange(in_block.size)
            noise = np.zeros((P, 1, H, R, d))
            if stoch:
                draws = int(np.count_nonzero(prog.sig[k0:k1] != 0.0))
                if draws:
                    noise = np.stack([rng.standard_normal((draws, H, R, d)) for rng in rngs])
            tnoise = np.zeros((P, 1, 1, 1))
            if tokens is not None:  # the keyed streams of simulate, columns padded to npad
                tnoise = _token_noise(tokens, code, k0, k1, grid, diffusion, d, npad)
            tab = np.zeros((1, 5, H, R, d))
            if prog.wkind == pn.W_RELAX_TAB:
                tab = _target_table(schedule, grid, k0, k1, rk4, (H, R, d))
            args = (k0, k1, prog.ipar, prog.fpar, grid, recpos, snappos, prog.sig, prog.jump, w,
                    wbar, m, prog.A0, prog.V0, prog.Q0, prog.K0, prog.Vfix, prog.wa, prog.wb,
                    prog.wc, tab, prog.thetas, noise, tnoise, X, TH, VEL, GM, CUR, ACC, STAT,
                    STEPS, REC, REH, SX, STH)
            if P == 1:
                t_block = time.perf_counter()
                if STAT[0, 0] == pn.FAIL_NONE:
                    pn.path_block(0, par, *args)
                if probe is not None:
                    probe.done(par, k1 - k0, time.perf_counter() - t_block)
            else:  # Monte-Carlo: paths from a pool of threads (the loop releases the GIL)
                todo = [p for p in range(P) if STAT[p, 0] == pn.FAIL_NONE]
                list(pool.map(partial(_run_path, args), todo))
            evals += (k1 - k0 + (k0 == 0)) * stages
            # a Ctrl-C/SIGTERM whose exception was dropped (raised in a ctypes callback
            # while numba loaded the compiled loop) still ends the run here
            interrupts.check()
            failed = np.flatnonzero(STAT[:, 0] != pn.FAIL_NONE)
            if failed.size:
                p = int(failed[0])
                raise FloatingPointError(_fail_message(int(STAT[p, 0]), float(STAT[p, 2])))
            for p in range(P):
                for s, k in enumerate(in_block):
                    if extras:
                        extra_rows[p].append(_extras(SX[p, s].copy(), STH[p, s].copy(),
                                                     float(grid[k]), schedule, attn, opts,
                                                     sign))
                    if opts.save_trajectory:
                        trajs[p].append(SX[p, s].copy())
                        ttrajs[p].append(STH[p, s].copy())
            if bar is not None:
                bar.update(P * (k1 - k0))
            if k1 == S:
                break
            k0 = k1
    except FloatingPointError as exc:
        wall = time.perf_counter() - t_start
        logger.error("particle run failed: %s", exc)
        return ParticleResult(Status.FAILED, str(exc), opts, grid[rec_idx], {}, {}, x0[None],
                              theta0[None], sign=sign, order=INTEGRATOR_ORDER[opts.integrator],
                              wall_time=wall, engine="compiled")
    finally:
        if bar is not None:
            bar.close()
        if pool is not None:
            pool.shutdown()
    wall = time.perf_counter() - t_start
    t_rec = grid[rec_idx]
    history: dict[str, np.ndarray] = {}
    for j, key in enumerate(pn.RECORDED[:11]):
        history[key] = REC[:, :, j].copy()
        if key == "E":
            history["E_h"] = REH.copy()
    if opts.clusters:
        history["n_clusters"] = np.array([[r["n_clusters"] for r in rows]
                                          for rows in extra_rows])
    for j, key in enumerate(pn.RECORDED[11:], start=11):
        if key == "balance_chain" or sign:
            history[key] = REC[:, :, j].copy()
    for key in _EXTRA_KEYS[1:]:
        if extra_rows[0] and key in extra_rows[0][0]:
            history[key] = np.array([[np.asarray(r[key]) for r in rows] for rows in extra_rows])
    if "entropy" in history and t_rec.size >= 3:
        history["entropy_rate_fd"] = np.gradient(history["entropy"], t_rec, axis=1)
    steps = {"t": grid}
    for j, key in enumerate(STEP_KEYS):
        steps[key] = STEPS[:, j].copy()
    balance: dict[str, list[float]] = {}
    for p in range(P):
        acc = BalanceAccumulator(sign=sign, E0=float(ACC[p, pn.A_E0]))
        acc.E, acc.W, acc.P, acc.D, acc.G, acc.I, acc.M = (float(v) for v in ACC[p, 1:])
        acc.steps = S
        for key, val in acc.residuals().items():
            if np.isfinite(val) or key not in ("edi", "g2"):  # undefined when sign = 0
                balance.setdefault(key, []).append(val)
        add_simpson(balance, grid, steps, p, sign=sign, schedule=schedule)
    bal = {k: np.asarray(v) for k, v in balance.items()}
    status, message, checks = judge_run(history, steps, bal, grid, opts, schedule.stochastic)
    status, message, checks = unjudged_chain(status, message, checks, opts)
    klog = KernelLog()
    klog.add(KernelInfo("direct", opts.kernel_backend,
                        "compiled particle path: fused direct sums, pairs once for symmetric "
                        "heads", max(n, 1) * float(np.finfo(np.float64).eps), opts.kernel_tol,
                        (), 1 if not (par or P > 1) else threads(), n * n * H))
    klog.counts["direct"] = evals * P
    x_fin = np.ascontiguousarray(np.swapaxes(X[:, :d, :n], 1, 2))
    res = ParticleResult(
        status, message, opts, t_rec, steps, bal, x_fin, TH.copy(),
        np.array([np.stack(tr) for tr in trajs]) if opts.save_trajectory else None,
        np.array([np.stack(tr) for tr in ttrajs])
        if (opts.save_trajectory and not schedule.static) else None,
        sign, {"kernel": klog.summary(), "engine": "compiled"}, history=history, checks=checks,
        order=INTEGRATOR_ORDER[opts.integrator], wall_time=wall, engine="compiled")
    if status == Status.INACCURATE:
        logger.warning("particle run inaccurate: %s", message)
    elif status != Status.SUCCESS:
        logger.error("particle run: %s", message)
    return res


def _run_path(args: tuple, p: int) -> None:
    from . import _path_numba as pn

    pn.path_block(p, False, *args)
