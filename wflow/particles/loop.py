"""The time loop of one weight path, shared by the serial and the split particle engines.

:func:`time_loop` yields the states ``k = 0..S`` of :func:`wflow.particles.iterate`; the
state terms (field, integrands) come from the caller, so the same loop drives the tokens
of one process (:mod:`wflow.particles.solver`) and a block of tokens split over MPI ranks
(:mod:`wflow.particles.split`).
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from dataclasses import replace

import numpy as np

from ..attention.heads import Attention
from ..attention.schedules import Schedule
from ..infra.schema import ScenarioError
from ..status import Status
from .free_energy import NO_LAPLACIAN, NOISY_WEIGHTS, has_laplacian
from .integrators import INTEGRATORS, ParticleIntegrator, StochasticIntegrator, time_grid
from .noise import TokenNoise
from .options import ParticleOptions
from .result import ParticleState

__all__ = ["time_loop", "check_noisy", "unjudged_chain", "unjudged_masked_ito",
           "refuse_masked_records", "ito_by_default", "ito_unjudged_reason", "unjudged_ahead",
           "completed_remedy", "MASKED_REASON"]


#: Why a noisy run's Itô balance is not judged: turned off, or not recorded by the compiled loop.
ITO_OFF = "not asked for (particles.ito_balance = false)"
COMPILED_NO_ITO = "the compiled loop records no Laplacian of the energy (engine = 'compiled')"

#: Why the chain-rule and Itô checks of a masked run are recorded, not judged.
MASKED_REASON = "a masked attention has no energy whose chain rule the run follows"


def unjudged_chain(status: Status, message: str, checks: dict, opts,
                   attn=None) -> tuple[Status, str, dict]:
    """The run's verdict where the chain rule is recorded, not judged.

    Token diffusion (``opts.diffusion > 0``): ``dE/dt = power`` is not the energy balance
    of noisy tokens: that one has the tokens' Itô term ``D Σ_i Δ_{S,i}E`` and a martingale,
    and is judged in the mean over paths by
    :func:`wflow.particles.free_energy.judge_noisy_run` where the run records the Laplacian.
    A masked attention (``attn.mask``, THEORY §9): the recorded energy terms are those of
    the unmasked model (:func:`wflow.particles.integrators._state_terms`), not an energy of
    the causal system, so its residual does not decide the status either. Either way the
    check keeps its value with ``judged: False`` and the reason, and an ``inaccurate``
    verdict it alone set becomes ``success``. Neither (``D = 0``, no mask): unchanged.
    """
    masked = getattr(attn, "mask", None) is not None
    noisy = getattr(opts, "diffusion", 0.0) > 0
    if not (masked or noisy) or "chain" not in checks:
        return status, message, checks
    reason = MASKED_REASON if masked else ("token diffusion D > 0: the noiseless chain "
                                           "rule does not apply")
    checks = {**checks, "chain": {**checks["chain"], "judged": False, "reason": reason}}
    if status == Status.INACCURATE:
        status, message = Status.SUCCESS, ""
    return status, message, checks


def unjudged_masked_ito(before: tuple[Status, str], after: tuple[Status, str, dict],
                        attn) -> tuple[Status, str, dict]:
    """Under a mask, the Itô balance's check recorded but not judged (``before``'s verdict).

    ``before``: status and message ahead of
    :func:`~wflow.particles.free_energy.judge_noisy_run`; ``after``: its result. Without a
    mask, or without an Itô check, ``after`` unchanged.
    """
    status, message, checks = after
    if getattr(attn, "mask", None) is None or "ito_balance" not in checks:
        return status, message, checks
    checks = {**checks, "ito_balance": {**checks["ito_balance"], "judged": False,
                                        "reason": MASKED_REASON}}
    return before[0], before[1], checks


def refuse_masked_records(attn, opts) -> None:
    """Refuse the records a masked run has no meaning for, naming ``attention.mask``.

    ``entropy = True``: the entropy identity is recorded from the unmasked attention
    (:func:`wflow.particles.result._record`); ``ito_balance = True``: the Itô energy
    balance asked to be judged (``None`` records it unjudged).
    """
    mask = getattr(attn, "mask", None)
    if mask is None:
        return
    if getattr(opts, "entropy", False):
        raise ScenarioError(f"attention.mask: {mask.name!r} with particles.entropy = true: "
                            "the attention entropies and their identity are those of the "
                            "unmasked model; set entropy = false")
    if getattr(opts, "diffusion", 0.0) > 0 and getattr(opts, "ito_balance", None) is True:
        raise ScenarioError(f"attention.mask: {mask.name!r} with particles.ito_balance = "
                            f"true: {MASKED_REASON}; leave ito_balance unset to record it "
                            "unjudged")


def check_noisy(integ: ParticleIntegrator) -> None:
    """Refuse token diffusion ``D > 0`` with a deterministic integrator."""
    if not isinstance(integ, StochasticIntegrator):
        stoch = [k for k, v in INTEGRATORS.items() if isinstance(v, StochasticIntegrator)]
        raise ScenarioError(f"particles.integrator: {integ.name!r} is deterministic; token "
                         f"diffusion D > 0 needs a stochastic integrator ({stoch})")


def time_loop(x: np.ndarray, schedule: Schedule, attn: Attention, *, T: float, dt: float,
              integrator: str, flow: str, rng: np.random.Generator | None, kernel,
              terms: Callable, finite: Callable[[np.ndarray], bool], diffusion: float = 0.0,
              noise: TokenNoise | None = None, grid: np.ndarray | None = None,
              control: Callable | None = None) -> Iterator[ParticleState]:
    """The time loop of :func:`~wflow.particles.iterate` and of the split loop.

    ``terms(x, t, θ, heads or None)`` gives ``(heads, field, velocity, integrands)`` of a
    state; ``kernel`` evaluates the integrators' stages; ``finite(x)``: every token finite.
    ``diffusion > 0``: token diffusion (THEORY §8) by a stochastic integrator's
    ``noisy_step`` with the keyed noise ``noise.at(k)`` of step ``k`` (the tokens ``x`` are
    the rows ``noise`` was made for); ``0``: the noiseless loop, bit for bit.
    ``grid``: the step times (an adaptive run's accepted grid, every jump time among
    them); ``None``: ``time_grid(T, dt, jumps)``.
    ``control(x, field, heads, integrator, step_noise, h)`` (with ``diffusion > 0``): the
    control variate of step ``k``'s martingale increment, put in state ``k``'s integrands
    as ``"cv"`` (:func:`wflow.particles.free_energy.martingale_cv`).
    """
    if grid is None:
        grid = time_grid(T, dt, schedule.jump_times)
    # weights take the tokens' explicit Euler step under the Euler integrator (the
    # published scheme), RK4 half steps under RK4 (4th-order midpoint)
    integ = INTEGRATORS.resolve(integrator)
    noisy = diffusion > 0.0
    if noisy:
        check_noisy(integ)
        if noise is None:
            raise ScenarioError("particles.diffusion: D > 0 needs the token noise streams")
    weights = integ.weights
    theta = schedule.initial_theta()
    heads, fe, vel, tm = terms(x, 0.0, theta, None)
    jumps = set(schedule.jump_times)
    pre_jump: dict[str, float] | None = None
    for k in range(len(grid)):
        t = float(grid[k])
        if k + 1 == len(grid):
            if noisy and control is not None:
                tm = {**tm, "cv": 0.0}  # no step after the last state
            yield ParticleState(t, x, theta, heads, fe, vel, tm, None, pre_jump)
            return
        h = float(grid[k + 1] - t)
        theta_mid, theta_new = schedule.advance(theta, t, h, rng, method=weights)
        dnoise = None
        if schedule.stochastic:
            dnoise = theta_new - theta - h * schedule.drift(theta, t)
        if noisy and control is not None:
            tm = {**tm, "cv": control(x, fe, heads, integ, noise.at(k), h)}
        yield ParticleState(t, x, theta, heads, fe, vel, tm, dnoise, pre_jump)
        if noisy:
            x_new = integ.noisy_step(x, h, vel, heads, theta, theta_mid, theta_new, schedule,
                                     attn, flow, kernel, diffusion=diffusion,
                                     noise=noise.at(k))
        else:
            x_new = integ.step(x, h, vel, heads, theta, theta_mid, theta_new, schedule, attn,
                               flow, kernel)
        x, theta = x_new, theta_new
        t_new = float(grid[k + 1])
        heads, fe, vel, tm = terms(x, t_new, theta, heads if schedule.static else None)
        pre_jump = None
        if t_new in jumps:
            pre_jump = tm
            theta = schedule.after_jump(theta, t_new)
            heads, fe, vel, tm = terms(x, t_new, theta, None)
        if not finite(x) or not np.isfinite(tm["E"]):
            raise FloatingPointError(f"non-finite tokens or energy at t = {t_new:.6g}; "
                                     "reduce dt or the head scale")


def ito_by_default(opts: ParticleOptions, attn: Attention, schedule: Schedule) -> str | None:
    """Why ``engine = "auto"`` takes the Python loop to judge the Itô balance, or None.

    With token diffusion and ``ito_balance`` unset the balance is judged wherever it can
    be (:mod:`wflow.particles.free_energy`): a kind with the closed-form Laplacian,
    deterministic weights and no mask. The compiled loop records no Laplacian, so such a
    run takes the Python loop; ``ito_balance = False`` keeps the compiled loop (its
    status then ``completed``: no accuracy check judged).
    """
    if not (opts.diffusion > 0 and opts.ito_balance is None):
        return None
    if ito_unjudged_reason(attn, schedule) is not None:
        return None
    return ("the Itô energy balance (judged by default with token diffusion) is recorded by "
            "the Python loop; set particles.ito_balance = false for the compiled loop "
            "without it")


def ito_unjudged_reason(attn: Attention, schedule: Schedule) -> str | None:
    """Why no time loop judges the Itô balance of this model (None: the Python loop does)."""
    if not has_laplacian(attn.kind):
        return NO_LAPLACIAN
    if schedule.stochastic:
        return NOISY_WEIGHTS
    if getattr(attn, "mask", None) is not None:
        return MASKED_REASON
    return None


def unjudged_ahead(opts: ParticleOptions, attn: Attention, schedule: Schedule) -> str | None:
    """Why no accuracy check of this run will be judged, before it runs (None: one will).

    What :func:`~wflow.particles.simulate` will find after the run
    (:func:`wflow.status.unjudged_status`): with ``rtol``, ``atol`` or ``adaptive`` the
    error estimate is judged; with token diffusion the chain rule is not, and the Itô
    balance is judged where it applies (:func:`ito_unjudged_reason`) unless
    ``ito_balance = False`` or ``engine = "compiled"``; without it, a mask leaves the
    chain rule unjudged. ``tests/test_completed_rule.py`` holds it to the outcome.
    """
    from .adaptive import default_aside  # (adaptive imports the integrators, as loop does)
    if default_aside(opts, schedule.stochastic) is not None:  # as with rtol = None
        opts = replace(opts, rtol=None)
    if opts.rtol is not None or opts.atol is not None or opts.adaptive:
        return None
    if opts.diffusion > 0:
        why = ito_unjudged_reason(attn, schedule)
        if why is None and opts.ito_balance is False:
            why = f"the Itô balance {ITO_OFF}"
        elif why is None and opts.engine == "compiled":
            why = COMPILED_NO_ITO
        return None if why is None else f"token diffusion without a judged Itô balance: {why}"
    return MASKED_REASON if getattr(attn, "mask", None) is not None else None


def completed_remedy(opts: ParticleOptions, schedule: Schedule) -> str:
    """How to have a run judged that no check judged (never an option that is refused)."""
    if schedule.stochastic:  # rtol is refused with noisy weights, with or without D
        return "no estimate judges noisy weights yet (particles.rtol is refused with them)"
    return "set particles.rtol to judge the run by " + (
        "the weak-error estimate of its token moments" if opts.diffusion > 0
        else "the step-doubling estimate of its tokens")
