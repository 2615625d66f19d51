"""Particle solver: tokens on ``S^{d-1}`` moved by multi-head attention (THEORY.md §2).

``ẋ_i = v[μ^n_t, Θ_t](x_i)`` with ``μ^n = (1/n) Σ δ_{x_i}``, the transformer velocity
``v = P_x Σ_h w_h f_h`` or the effective-mobility surrogate ``v̂`` (``flow="surrogate"``).

Integrators (each declares its order, see :data:`INTEGRATOR_ORDER`):

* ``"euler"`` — explicit Euler + renormalisation ``x ← (x + dt v)/|x + dt v|``
  (the literature's scheme, order 1);
* ``"rk4"`` — classical RK4 for the radially extended field ``F(x) = v(x/|x|)``
  (tangent, so ``|x|`` is a first integral) with normalised stages and a final
  projection, order 4.

Weights move with their schedule (:mod:`wflow.schedules`): closed form where one
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
from dataclasses import dataclass, field
from typing import NamedTuple

import numpy as np

from ..diagnostics import (
    BalanceAccumulator,
    attention_entropy,
    count_clusters,
    entropy_production,
    head_rates,
    mean_inner_product,
    radial_shadows,
    simpson_balance,
)
from ..energy import (
    FieldEval,
    energy_gradient_A,
    head_energies,
)
from ..heads import Attention, Heads
from ..kernels import KernelLog
from ..progress import progress_bar
from ..schedules import Schedule, as_schedule
from ..sphere import check_on_sphere, normalize
from ..status import Check, balance_order, judge_steps
from .integrators import _Kernel, _rk4_step, _state_terms, time_grid
from .options import INTEGRATOR_ORDER, ParticleOptions

__all__ = [
    "ParticleState",
    "ParticleResult",
    "iterate",
    "simulate",
]

logger = logging.getLogger(__name__)

#: The per-step integrands every run keeps (``ParticleResult.steps``, besides ``"t"``).
STEP_KEYS = ("E", "dEdt_w", "power", "slope2", "speed2", "G2", "ito")


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
    weights = "euler" if integrator == "euler" else "rk4"
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
        ``"success"``; ``"inaccurate"`` (finite, but the chain-rule residual of some path
        exceeds its tolerance, see :mod:`wflow.status`); or ``"failed"`` (non-finite
        values). ``message`` says why.
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
    checks : dict
        Accuracy checks behind the status (``"chain"``: relative chain-rule residual of
        the worst path, its tolerance, pass/fail and rule; :func:`wflow.status.chain_check`).
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
    checks: dict = field(default_factory=dict)

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
        from .compiled import compiled_support, simulate_compiled

        why = compiled_support(x0, schedule, attn, opts)
        if why is None:
            return simulate_compiled(x0, schedule, attn, opts)
        if opts.engine == "compiled":
            raise ValueError(f"particles.engine: 'compiled' does not apply: {why}")
        logger.info("particles: Python loop (%s)", why)
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
            add_simpson(balance, grid, steps, p, sign=sign, schedule=schedule)
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
    status, message, checks = judge_run(history, steps, bal, grid, opts, schedule.stochastic)
    res = ParticleResult(
        status, message, opts, INTEGRATOR_ORDER[opts.integrator], grid[rec_idx], history,
        {"t": grid, **steps}, bal, np.stack(xs), np.stack(thetas),
        np.stack(trajs) if opts.save_trajectory else None,
        np.stack(ttrajs) if (opts.save_trajectory and not schedule.static) else None,
        wall, sign, {"kernel": klog.summary()}, checks)
    if status == "inaccurate":
        logger.warning("particle run inaccurate: %s", message)
    elif status != "success":
        logger.error("particle run: %s", message)
    return res


def add_simpson(balance: dict[str, list[float]], grid: np.ndarray,
                steps: dict[str, np.ndarray], p: int, *, sign: int, schedule: Schedule) -> None:
    """Append path ``p``'s Simpson residuals to ``balance``.

    ``chain_simpson`` always; ``edi_simpson`` and ``g2_simpson`` for a gradient-flow
    direction with deterministic weights. Nothing with weight jumps: Simpson needs smooth
    integrands.
    """
    if schedule.jump_times:
        return
    # EDI forms: gradient-flow direction and deterministic weights (no Itô terms)
    simp = simpson_balance(grid, steps["E"][p], {k: steps[k][p] for k in STEP_KEYS},
                           sign=0 if schedule.stochastic else sign)
    for key, val in simp.items():
        balance.setdefault(f"{key}_simpson", []).append(val)


def judge_run(history: dict[str, np.ndarray], steps: dict[str, np.ndarray],
              balance: dict[str, np.ndarray], grid: np.ndarray, opts: ParticleOptions,
              stochastic: bool) -> tuple[str, str, dict]:
    """Status, message and checks of a finished run (both engines).

    ``"failed"`` on any non-finite recorded number; otherwise the chain-rule check
    (:func:`_accuracy`) decides between ``"success"`` and ``"inaccurate"``.
    """
    status, message = "success", ""
    for name, arr in list(history.items()) + [(k, steps[k]) for k in STEP_KEYS]:
        if not np.all(np.isfinite(arr)):
            status, message = "failed", f"non-finite values in diagnostic {name!r}"
    checks: dict = {}
    if status == "success":
        check = _accuracy(grid, steps, balance["chain"], opts, stochastic)
        checks["chain"] = check.as_dict()
        if not check.passed:
            status, message = "inaccurate", check.failure()
    return status, message, checks


def _accuracy(t: np.ndarray, steps: dict[str, np.ndarray], chain: np.ndarray,
              opts: ParticleOptions, stochastic: bool) -> Check:
    """Chain-rule check of a particle run (:func:`wflow.status.chain_check`), per path.

    Budget ``∫(|power| + |∂_tE| + |Itô|) dt`` from the per-step integrands (trapezoid).
    Balance order ``min(integrator order, 2)``; 1 with noisy weights (Euler–Maruyama
    leaves a per-path residual of order ``√dt`` through the quadratic variation, judged
    against the first-order tolerance). Every path is judged on its own — the residual
    is the discretisation error of that path's ODE, not Monte-Carlo noise — and the
    worst one sets the status.
    """
    q = 1 if stochastic else balance_order(INTEGRATOR_ORDER[opts.integrator])
    scheme = f"{opts.integrator}{' + Euler–Maruyama weights' if stochastic else ''}, " \
             f"dt = {opts.dt:g}"
    return judge_steps(t, steps, chain, order=q, scheme=scheme)


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
