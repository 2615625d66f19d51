"""Particle solver: tokens on ``S^{d-1}`` moved by multi-head attention (THEORY.md §2).

``ẋ_i = v[μ^n_t, Θ_t](x_i)`` with ``μ^n = (1/n) Σ δ_{x_i}``, the transformer velocity
``v = P_x Σ_h w_h f_h`` or the effective-mobility surrogate ``v̂`` (``flow="surrogate"``).

Integrators (each declares its order, see :data:`INTEGRATOR_ORDER`):

* ``"euler"`` — explicit Euler + renormalisation ``x ← (x + dt v)/|x + dt v|``
  (the literature's scheme, order 1);
* ``"rk4"`` — classical RK4 for the radially extended field ``F(x) = v(x/|x|)``
  (tangent, so ``|x|`` is a first integral) with normalised stages and a final
  projection, order 4.

Weights move with their schedule (:mod:`wflow.schedules`): closed form or RK4 for
deterministic schedules, Euler–Maruyama for noisy ones; piecewise-constant layers
jump at step boundaries (the time grid contains the jump times).

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
import sys
import time
from collections.abc import Iterator
from dataclasses import dataclass, field
from typing import Literal, NamedTuple

import numpy as np

from .diagnostics import (
    BalanceAccumulator,
    attention_entropy,
    count_clusters,
    entropy_production,
    head_rates,
    mean_inner_product,
    radial_shadows,
    simpson_balance,
)
from .energy import (
    FieldEval,
    SlopeTerms,
    dE_dt_weights,
    energy_gradient_A,
    evaluate,
    head_energies,
    ito_correction,
    particle_field,
    slope_terms,
)
from .heads import Attention, Heads
from .kernels import BACKENDS, KernelLog, plan_kernel
from .schedules import Schedule, Static
from .sphere import check_on_sphere, normalize

__all__ = [
    "INTEGRATOR_ORDER",
    "EulerPath",
    "euler_path",
    "ParticleOptions",
    "ParticleState",
    "ParticleResult",
    "iterate",
    "simulate",
    "time_grid",
]

logger = logging.getLogger(__name__)

#: Declared order of each particle integrator (checked by a fitted-order test).
INTEGRATOR_ORDER = {"euler": 1, "rk4": 4}


@dataclass(frozen=True)
class ParticleOptions:
    """Options of :func:`simulate` (all keyword-only in the API).

    Parameters
    ----------
    T : float
        Final time (depth).
    dt : float
        Time step (the grid also contains every jump time of the schedule).
    integrator : {"euler", "rk4"}
    flow : {"transformer", "surrogate"}
        Velocity: the transformer's ``v`` or the gradient-flow surrogate ``v̂``.
    record_every : int
        Record diagnostics every this many steps (the balance uses every step).
    n_paths : int
        Independent weight-noise paths (Monte-Carlo); 1 for deterministic schedules.
    seed : int
        Seed of the weight noise (paths use ``SeedSequence(seed).spawn(n_paths)``).
    entropy : bool
        Record attention entropies and the entropy-production identity (``O(H n²)``).
    head_rates : bool
        Record per-head ``dE_h/dt`` with own / cross split and radial shadows.
    clusters : bool
        Record the number of clusters at ``cluster_cos``.
    cluster_cos : float
        Inner-product threshold linking two tokens in the cluster count.
    save_trajectory : bool
        Keep tokens (and weights) at every recorded time.
    progress : bool or None
        Progress bar (``None``: only when stderr is a TTY).
    kernel_backend : {"auto", "numpy", "direct", "fastsum"}
        Back-end of the attention sums (``auto``: fused direct sums, fast summation on S²
        where it pays off); the choice and its error estimate land in ``summary.json``.
    kernel_tol : float
        Relative tolerance of the fast summation.
    """

    T: float = 1.0
    dt: float = 1e-2
    integrator: Literal["euler", "rk4"] = "rk4"
    flow: Literal["transformer", "surrogate"] = "transformer"
    record_every: int = 1
    n_paths: int = 1
    seed: int = 0
    entropy: bool = False
    head_rates: bool = True
    clusters: bool = True
    cluster_cos: float = 0.99
    save_trajectory: bool = False
    progress: bool | None = None
    kernel_backend: str = "auto"
    kernel_tol: float = 1e-10

    def __post_init__(self) -> None:
        if not (np.isfinite(self.T) and self.T > 0):
            raise ValueError(f"particles.T: must be a finite number > 0, got {self.T!r}")
        if not (np.isfinite(self.dt) and 0 < self.dt):
            raise ValueError(f"particles.dt: must be a finite number > 0, got {self.dt!r}")
        if self.integrator not in INTEGRATOR_ORDER:
            raise ValueError(f"particles.integrator: must be one of {sorted(INTEGRATOR_ORDER)}, "
                             f"got {self.integrator!r}")
        if self.flow not in ("transformer", "surrogate"):
            raise ValueError(f"particles.flow: must be 'transformer' or 'surrogate', "
                             f"got {self.flow!r}")
        if int(self.record_every) < 1:
            raise ValueError(f"particles.record_every: must be >= 1, got {self.record_every}")
        if int(self.n_paths) < 1:
            raise ValueError(f"particles.n_paths: must be >= 1, got {self.n_paths}")
        if not -1 < self.cluster_cos < 1:
            raise ValueError(f"particles.cluster_cos: must lie in (-1, 1), got {self.cluster_cos}")
        if self.kernel_backend not in BACKENDS:
            raise ValueError(f"particles.kernel_backend: must be one of {list(BACKENDS)}, "
                             f"got {self.kernel_backend!r}")
        if not self.kernel_tol > 0:
            raise ValueError(f"particles.kernel_tol: must be > 0, got {self.kernel_tol}")


def time_grid(T: float, dt: float, jumps: tuple[float, ...] = ()) -> np.ndarray:
    """Step times ``0 = t_0 < … < t_S = T``: uniform ``dt`` plus every jump time in ``(0, T)``."""
    n = int(np.ceil(T / dt - 1e-9))
    grid = np.linspace(0.0, T, n + 1)
    tol = 1e-9 * max(T, 1.0)
    for j in (j for j in jumps if 0 < j < T):
        near = np.flatnonzero(np.abs(grid - j) <= tol)
        if near.size:
            grid[near] = j  # snap to the exact jump time
        else:
            grid = np.sort(np.append(grid, j))
    return grid


class ParticleState(NamedTuple):
    """One point of a trajectory (yielded by :func:`iterate`)."""

    t: float
    x: np.ndarray
    theta: np.ndarray
    heads: Heads
    field: FieldEval
    velocity: np.ndarray
    integrands: dict[str, float]
    dtheta_noise: np.ndarray | None  # θ_{k+1} − θ_k − dt·drift, for the martingale term
    pre_jump: dict[str, float] | None = None  # integrands at t⁻ when the weights jump at t


def _velocity(field_: FieldEval, flow: str) -> np.ndarray:
    return field_.v if flow == "transformer" else field_.vhat


class _Kernel(NamedTuple):
    """Kernel settings threaded through a run (back-end, tolerance, call log)."""

    backend: str = "auto"
    tol: float = 1e-10
    log: KernelLog | None = None

    def evaluate(self, x: np.ndarray, heads: Heads, attn: Attention) -> FieldEval:
        return evaluate(x, heads, attn, backend=self.backend, tol=self.tol, log=self.log)

    def fused(self, x: np.ndarray, m: np.ndarray, heads: Heads, attn: Attention,
              flow: str) -> tuple[FieldEval, SlopeTerms, float] | None:
        """Field, slope terms and energy in one compiled pass, where the sums are direct.

        ``d ≤ 3`` and back-end ``direct``, or ``auto`` where it would choose direct sums
        (not the fast summation); ``None`` otherwise (the caller evaluates separately).
        """
        if x.shape[1] > 3 or self.backend not in ("auto", "direct"):
            return None
        if self.backend == "auto" and plan_kernel(
                x, x, heads.Q, heads.K, beta=attn.beta, kind=attn.kind, tol=self.tol,
                m=m).backend != "direct":
            return None
        return particle_field(x, m, heads, attn, flow=flow, log=self.log,
                              backend=self.backend)


_DEFAULT_KERNEL = _Kernel()


def _state_terms(x: np.ndarray, m: np.ndarray, t: float, theta: np.ndarray, schedule: Schedule,
                 attn: Attention, flow: str, heads: Heads | None = None,
                 kernel: _Kernel = _DEFAULT_KERNEL) -> tuple[Heads, FieldEval, np.ndarray, dict]:
    heads = schedule.heads_at(theta) if heads is None else heads
    fused = kernel.fused(x, m, heads, attn, flow)
    if fused is None:
        fe = kernel.evaluate(x, heads, attn)
        st = slope_terms(x, m, fe, heads, _velocity(fe, flow))
        E = float(heads.w @ head_energies(fe, m, attn))
    else:
        fe, st, E = fused
    vel = _velocity(fe, flow)
    dEdt = 0.0 if schedule.static else dE_dt_weights(x, m, fe, heads,
                                                      schedule.A_dot(theta, t), attn)
    ito = 0.0
    if schedule.stochastic:
        ito = ito_correction(x, m, heads, attn, schedule.sigma(t),
                             symmetric_noise=schedule.symmetric_noise)
    terms = {"E": E, "dEdt_w": dEdt, "power": st.power, "slope2": st.slope2,
             "speed2": st.speed2, "G2": st.G2, "ito": ito}
    return heads, fe, vel, terms


def _rk4_step(x: np.ndarray, h: float, k1: np.ndarray, heads: Heads, theta: np.ndarray,
              theta_mid: np.ndarray, theta_new: np.ndarray, schedule: Schedule,
              attn: Attention, flow: str, kernel: _Kernel) -> np.ndarray:
    """One RK4 step of ``F(x) = v(x/|x|)`` with normalised stages and a final projection."""
    stage_heads = {id(theta): heads}  # heads built once per distinct θ (static: reused)

    def V(y: np.ndarray, th: np.ndarray) -> np.ndarray:
        hh = stage_heads.get(id(th))
        if hh is None:
            hh = stage_heads[id(th)] = schedule.heads_at(th)
        return _velocity(kernel.evaluate(normalize(y), hh, attn), flow)

    k2 = V(x + 0.5 * h * k1, theta_mid)
    k3 = V(x + 0.5 * h * k2, theta_mid)
    k4 = V(x + h * k3, theta_new)
    return normalize(x + (h / 6.0) * (k1 + 2 * k2 + 2 * k3 + k4))


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
        theta_mid, theta_new = schedule.advance(theta, t, h, rng)
        dnoise = None
        if schedule.stochastic:
            dnoise = theta_new - theta - h * schedule.drift(theta, t)
        yield ParticleState(t, x, theta, heads, fe, vel, terms, dnoise, pre_jump)
        if integrator == "euler":
            x_new = normalize(x + h * vel)
        else:
            x_new = _rk4_step(x, h, vel, heads, theta, theta_mid, theta_new, schedule, attn,
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


@dataclass(frozen=True)
class ParticleResult:
    """Result of :func:`simulate`.

    Attributes
    ----------
    status : str
        ``"success"``, or ``"failed"`` with ``message`` (e.g. non-finite values).
    t : (K,) array
        Recorded times.
    history : dict of arrays
        Per-path diagnostics, shape ``(P, K)`` for scalars, ``(P, K, H)`` per head.
    steps : dict of arrays
        Per-step balance integrands (``t`` of shape ``(S+1,)``; others ``(P, S+1)``).
    balance : dict of arrays
        Final balance terms and residuals per path, shape ``(P,)``.
    x : (P, n, d) array
        Final tokens per path.
    theta : (P, H, rows, d) array
        Final weight parameters per path.
    trajectory, theta_trajectory : arrays or None
        Tokens ``(P, K, n, d)`` / weights ``(P, K, H, rows, d)`` at recorded times.
    """

    status: str
    message: str
    options: ParticleOptions
    order: int
    t: np.ndarray
    history: dict[str, np.ndarray]
    steps: dict[str, np.ndarray]
    balance: dict[str, np.ndarray]
    x: np.ndarray
    theta: np.ndarray
    trajectory: np.ndarray | None = None
    theta_trajectory: np.ndarray | None = None
    wall_time: float = 0.0
    sign: int = 0
    extra: dict = field(default_factory=dict)

    @property
    def n_paths(self) -> int:
        """Number of Monte-Carlo paths."""
        return self.x.shape[0]

    def mean(self, name: str) -> np.ndarray:
        """Monte-Carlo mean of a recorded diagnostic over paths."""
        return self.history[name].mean(axis=0)

    def std(self, name: str) -> np.ndarray:
        """Monte-Carlo standard deviation (``ddof=1``; zeros for one path)."""
        h = self.history[name]
        return h.std(axis=0, ddof=1) if h.shape[0] > 1 else np.zeros(h.shape[1:])

    def final(self) -> dict[str, dict[str, float | list]]:
        """Final value of every diagnostic: mean and std over paths."""
        out = {}
        for name in self.history:
            mu, sd = self.mean(name)[-1], self.std(name)[-1]
            out[name] = {"mean": np.asarray(mu).tolist(), "std": np.asarray(sd).tolist()}
        return out

    def balance_summary(self) -> dict[str, dict[str, float]]:
        """Balance residuals: per-path values, mean and standard error of the mean."""
        out = {}
        for k, v in self.balance.items():
            P = v.shape[0]
            out[k] = {"mean": float(np.mean(v)),
                      "stderr": float(np.std(v, ddof=1) / np.sqrt(P)) if P > 1 else 0.0,
                      "paths": v.tolist()}
        return out


def _progress(total: int, enabled: bool | None, desc: str):
    enabled = sys.stderr.isatty() if enabled is None else enabled
    if not enabled:
        return None
    from tqdm import tqdm

    return tqdm(total=total, desc=desc, unit="step", leave=False)


def simulate(x0: np.ndarray, heads_or_schedule: Heads | Schedule, attn: Attention, *,
             options: ParticleOptions | None = None, **kwargs) -> ParticleResult:
    """Run the particle system and record diagnostics and the energy balance.

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
        ``status == "success"`` only if every recorded number is finite.
    """
    opts = options or ParticleOptions()
    if kwargs:
        opts = ParticleOptions(**{**opts.__dict__, **kwargs})
    schedule = (Static.of(heads_or_schedule) if isinstance(heads_or_schedule, Heads)
                else heads_or_schedule)
    x0 = check_on_sphere(x0, name="tokens")
    if x0.shape[1] != schedule.heads_at(schedule.initial_theta()).d:
        raise ValueError(f"tokens: dimension {x0.shape[1]} does not match heads dimension "
                         f"{schedule.heads_at(schedule.initial_theta()).d}")
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
    steps = {k: np.empty((P, S + 1)) for k in
             ("E", "dEdt_w", "power", "slope2", "speed2", "G2", "ito")}
    balance: dict[str, list[float]] = {}
    xs, thetas, trajs, ttrajs = [], [], [], []
    klog = KernelLog()
    bar = _progress(P * S, opts.progress, "particles")
    t_start = time.perf_counter()
    status, message = "success", ""
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
            if not schedule.jump_times:  # Simpson needs smooth integrands (no weight jumps)
                simp = simpson_balance(grid, steps["E"][p], {k: steps[k][p] for k in steps})
                balance.setdefault("chain_simpson", []).append(simp["chain"])
            xs.append(prev.x)
            thetas.append(prev.theta)
            if opts.save_trajectory:
                trajs.append(np.asarray(traj))
                ttrajs.append(np.asarray(ttraj))
    except FloatingPointError as exc:
        status, message = "failed", str(exc)
        logger.error("particle run failed: %s", exc)
    finally:
        if bar is not None:
            bar.close()
    wall = time.perf_counter() - t_start
    if status == "failed":
        return ParticleResult(status, message, opts, INTEGRATOR_ORDER[opts.integrator],
                              grid[rec_idx], {}, {}, {}, x0[None],
                              schedule.initial_theta()[None], None, None, wall, sign)
    history = {k: np.stack(v) for k, v in hist.items()}
    t_rec = grid[rec_idx]
    if "entropy" in history and t_rec.size >= 3:
        # left side of the entropy identity: dH/dt by (second-order) finite differences of the
        # recorded entropies, next to the right side −β² Cov_p(s, ṡ) ("entropy_rate")
        history["entropy_rate_fd"] = np.gradient(history["entropy"], t_rec, axis=1)
    bal = {k: np.asarray(v) for k, v in balance.items()}
    for name, arr in list(history.items()) + list(steps.items()):
        if not np.all(np.isfinite(arr)):
            status, message = "failed", f"non-finite values in diagnostic {name!r}"
    res = ParticleResult(
        status, message, opts, INTEGRATOR_ORDER[opts.integrator], grid[rec_idx], history,
        {"t": grid, **steps}, bal, np.stack(xs), np.stack(thetas),
        np.stack(trajs) if opts.save_trajectory else None,
        np.stack(ttrajs) if (opts.save_trajectory and not schedule.static) else None,
        wall, sign, {"kernel": klog.summary()})
    if status != "success":
        logger.error("particle run: %s", message)
    return res


def _record(rows: dict[str, list], st: ParticleState, m: np.ndarray, attn: Attention,
            acc: BalanceAccumulator, opts: ParticleOptions, schedule: Schedule) -> None:
    x, fe, heads = st.x, st.field, st.heads
    terms = st.integrands
    E_h = head_energies(fe, m, attn)

    def put(key: str, val) -> None:
        rows.setdefault(key, []).append(val)

    put("E", terms["E"])
    put("E_h", E_h)
    for key in ("dEdt_w", "power", "slope2", "speed2", "G2", "ito"):
        put(key, terms[key])
    put("bhat_mean", float(m @ fe.bhat))
    put("bhat_min", float(fe.bhat.min()))
    put("bhat_max", float(fe.bhat.max()))
    put("mean_inner", mean_inner_product(x, m))
    if opts.clusters:
        put("n_clusters", float(count_clusters(x, cos_threshold=opts.cluster_cos)))
    res = acc.residuals()
    for key in ("chain", "edi", "g2") if acc.sign else ("chain",):
        put(f"balance_{key}", res[key])
    if opts.head_rates:
        hr = head_rates(x, m, fe, heads)
        put("dEh_dt", hr.total)
        put("dEh_own", hr.own)
        put("dEh_cross_direct", hr.cross_direct)
        put("dEh_cross_radial", hr.cross_radial)
        put("radial_margin", hr.margin)
        put("radial_shadow", radial_shadows(x, fe) @ m)
    if opts.entropy:
        ent = attention_entropy(x, heads, attn)
        A_dot = None if schedule.static else schedule.A_dot(st.theta, st.t)
        rate = entropy_production(x, st.velocity, heads, attn, A_dot)
        put("entropy", ent @ m)
        put("entropy_rate", rate @ m)


# ------------------------------------------------ compiled Euler path (static heads)
class EulerPath(NamedTuple):
    """Result of :func:`euler_path` (every step recorded).

    Attributes
    ----------
    status, message : str
        ``"success"``, or ``"failed"`` with the first non-finite step; the records then
        stop before that step, ``x`` is the state at it.
    t : (S+1,) array
        Times ``k·dt``.
    E, power, slope2, speed2, G2 : (S+1,) arrays
        The integrands of :class:`wflow.diagnostics.BalanceAccumulator` at every step
        (conventions of :mod:`wflow.energy`; ``dEdt_w = 0`` for static heads).
    balance : dict of (S+1,) arrays
        Running residuals (trapezoid, as :func:`simulate`): ``chain = ΔE − ∫power``, and for
        value-aligned symmetric heads (``sign ≠ 0``) ``edi = ΔE − sign ∫½(speed2 + slope2)``
        and ``g2 = ΔE − sign ∫G2``.
    x : (n, d) array
        Final tokens.
    trajectory : (K, n, d) array or None
        Tokens every ``save_every`` steps.
    sign : int
        Value alignment of the heads (+1 ascent, −1 descent, 0 none).
    wall : float
        Wall time of the compiled loop (s).
    """

    status: str
    message: str
    t: np.ndarray
    E: np.ndarray
    power: np.ndarray
    slope2: np.ndarray
    speed2: np.ndarray
    G2: np.ndarray
    balance: dict[str, np.ndarray]
    x: np.ndarray
    trajectory: np.ndarray | None
    sign: int
    wall: float


def euler_path(x0: np.ndarray, heads: Heads, attn: Attention, *, dt: float, steps: int,
               flow: Literal["transformer", "surrogate"] = "transformer",
               m: np.ndarray | None = None, save_every: int = 0) -> EulerPath:
    """Explicit Euler ``x ← (x + dt v)/|x + dt v|`` for static heads in one compiled loop.

    The same trajectory, energies and running balances as
    ``simulate(x0, heads, attn, integrator="euler", record_every=1)`` (tested to 1e-12)
    for ``d ≤ 3``, without the per-step Python work: every step is one fused pass of
    :func:`wflow.kernels.particle_terms` (direct sums, pairs counted once for symmetric
    heads). Meant for the published multi-head experiments (small ``n``, many steps,
    ``E``, slope and balance at every step), where the per-step overhead of the general
    path dominates.

    Parameters
    ----------
    x0 : (n, d) array, ``d ≤ 3``
        Initial tokens on the unit sphere.
    heads : Heads
        Static heads.
    attn : Attention
    dt : float
        Time step (> 0).
    steps : int
        Number of steps ``S`` (≥ 1); ``T = S·dt``.
    flow : {"transformer", "surrogate"}
    m : (n,) array, optional
        Token masses (default uniform ``1/n``), summing to 1.
    save_every : int
        Keep the tokens every this many steps (0: only the final state).
    """
    from . import _kernels_numba as kn
    from .kernels import _pair_once, _raise_bound, _team, aligned, aligned_empty, particle_heads3

    if not isinstance(heads, Heads):
        raise TypeError(f"heads: euler_path needs static Heads, got {type(heads).__name__}")
    x0 = check_on_sphere(x0, name="tokens")
    n, d = x0.shape
    if d > 3 or d != heads.d:
        raise ValueError(f"tokens: euler_path needs d <= 3 matching the heads (d = {heads.d}), "
                         f"got d = {d}")
    if not (np.isfinite(dt) and dt > 0):
        raise ValueError(f"dt: must be a finite number > 0, got {dt!r}")
    if int(steps) != steps or steps < 1:
        raise ValueError(f"steps: must be an integer >= 1, got {steps!r}")
    if int(save_every) != save_every or save_every < 0:
        raise ValueError(f"save_every: must be an integer >= 0, got {save_every!r}")
    if flow not in ("transformer", "surrogate"):
        raise ValueError(f"flow: must be 'transformer' or 'surrogate', got {flow!r}")
    if m is None:
        m = np.full(n, 1.0 / n)
    m = np.ascontiguousarray(m, dtype=np.float64)
    if m.shape != (n,) or not np.all(np.isfinite(m)) or np.any(m < 0):
        raise ValueError(f"m: must be {n} finite non-negative masses")
    steps, save_every = int(steps), int(save_every)
    H = heads.H
    kind, beta = attn.kind, float(attn.beta)
    expo = kind != "relu"
    if expo:  # unit tokens: |Q x| <= ||Q||_2 for every x on the sphere, at every step
        _raise_bound(beta * max(float(np.linalg.norm(heads.Q[h], 2) * np.linalg.norm(heads.K[h], 2))
                                for h in range(H)))
    A3, V3, sym = particle_heads3(heads.Q, heads.K, heads.V)
    xT = aligned_empty((3, n))  # see wflow.kernels.aligned_empty: reruns agree bit for bit
    xT[:] = 0.0
    xT[:d] = x0.T
    w = np.ascontiguousarray(heads.w, dtype=np.float64)
    out = np.full((5, steps + 1), np.nan)
    nsave = steps // save_every + 1 if save_every else 0
    saved = np.zeros((nsave, 3, n))
    pair_once = _pair_once(sym, n, H)
    t0 = time.perf_counter()
    with _team(n * n * H * (1 if sym else 2)):
        done = kn.euler_path(xT, A3, V3, w, w / w.sum(), aligned(m), beta, 0 if expo else 1,
                             kind == "softmax", sym, pair_once, flow == "surrogate", float(dt),
                             save_every, out, saved)
    wall = time.perf_counter() - t0
    sign = heads.value_alignment() if heads.is_symmetric() else 0
    status, message = "success", ""
    if done < steps + 1:  # keep the finite records only (steps 0 .. done-1)
        status, message = "failed", f"non-finite energy or slope terms at step {done}"
        logger.error("euler_path: %s", message)
        out = out[:, :done]
        saved = saved[: (done - 1) // save_every + 1 if save_every and done else 0]
    E, power, slope2, speed2, G2 = out

    def cum(f: np.ndarray) -> np.ndarray:  # BalanceAccumulator's trapezoid, vectorised
        return np.concatenate([[0.0], np.cumsum(0.5 * dt * (f[1:] + f[:-1]))])[: f.size]

    dE = E - E[:1]
    balance = {"chain": dE - cum(power)}
    if sign:
        balance["edi"] = dE - sign * cum(0.5 * (speed2 + slope2))
        balance["g2"] = dE - sign * cum(G2)
    traj = np.ascontiguousarray(np.swapaxes(saved, 1, 2)[:, :, :d]) if save_every else None
    return EulerPath(status, message, dt * np.arange(E.size), E, power, slope2, speed2, G2,
                     balance, np.ascontiguousarray(xT[:d].T), traj, int(sign), wall)
