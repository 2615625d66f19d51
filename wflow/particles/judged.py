"""Fixed-step particle runs judged by the requested tolerance (``rtol`` / ``atol`` set).

A run with fixed steps ``dt`` and a tolerance is the run itself, then the same problem
at ``dt/2`` recording only its end (cost: twice the run's steps, so three times a bare
run), and an error estimate from the pair that decides the status; the chain-rule (and,
with token diffusion, the Itô-balance) checks stay in ``checks``:

* deterministic integrators: step doubling of the final tokens
  (:func:`~wflow.particles.adaptive.fixed_step_error`), ``success`` or ``inaccurate``
  naming a ``dt`` that would meet the tolerance;
* token diffusion ``D > 0``: the weak error of the token moments at ``T`` from an
  independent rerun (:func:`~wflow.particles.weak_error.weak_error_check`),
  ``success``, ``inaccurate`` naming a ``dt`` or ``inconclusive`` naming a token count;
  a failed Itô energy balance of the run itself (a fault of the model's conservation law,
  which no step removes) keeps the run ``inaccurate`` whatever the estimate says.

Both take the solver's ``simulate`` as their first argument (the solver calls them; they
call it back with the tolerance removed), and are collective over MPI ranks.
"""

from __future__ import annotations

import contextlib
import logging
from collections.abc import Callable
from dataclasses import replace
from typing import Any

import numpy as np

from ..attention.heads import Attention
from ..attention.schedules import Schedule
from ..infra.logs import filtered_logs
from ..status import Status
from .adaptive import fixed_step_error
from .integrators import INTEGRATORS
from .options import ParticleOptions
from .result import ParticleResult
from .weak_error import half_step_seed, weak_error_check

logger = logging.getLogger(__name__)

#: ``simulate(x0, schedule, attn, *, options, comm)`` of :mod:`wflow.particles.solver`.
Simulate = Callable[..., ParticleResult]


def _run_and_half(simulate: Simulate, x0: np.ndarray, schedule: Schedule, attn: Attention,
                  opts: ParticleOptions, comm: Any, **half: Any,
                  ) -> tuple[ParticleResult, ParticleResult | None]:
    """The bare run (no tolerance), then the run at ``dt/2`` recording only its end.

    ``half``: further option changes of the rerun (a seed, the Itô balance off). The
    rerun is ``None`` when the run failed (nothing to judge).
    """
    base = replace(opts, rtol=None, atol=None)
    res = simulate(x0, schedule, attn, options=base, comm=comm)
    if res.status == Status.FAILED:
        return res, None
    with _quiet():
        rerun = simulate(x0, schedule, attn, comm=comm, options=replace(
            base, dt=0.5 * opts.dt, record_every=10**9, entropy=False, head_rates=False,
            clusters=False, save_trajectory=False, progress=False, **half))
    return res, rerun


class _ErrorsOnly(logging.Filter):
    def filter(self, record: logging.LogRecord) -> bool:
        return record.levelno >= logging.ERROR


def _quiet() -> contextlib.AbstractContextManager:
    """The rerun's warnings off (its errors still show), on this package's loggers only.

    They repeat the run's (an engine fallback) or judge the rerun's own chain rule, which
    the estimate supersedes.
    """
    return filtered_logs("wflow.particles", _ErrorsOnly())


def judged_fixed(simulate: Simulate, x0: np.ndarray, schedule: Schedule, attn: Attention,
                 opts: ParticleOptions, comm: Any) -> ParticleResult:
    """A deterministic fixed-step run judged by step doubling of ``x(T)``.

    The requested tolerance decides the status (the chain-rule check stays in
    ``checks["chain"]``); a miss is ``inaccurate``, its message naming a ``dt`` that would
    meet it (:func:`~wflow.particles.adaptive.dt_remedy`).
    """
    res, half = _run_and_half(simulate, x0, schedule, attn, opts, comm)
    if half is None:
        return replace(res, options=opts)
    check = fixed_step_error(res.x[0], half.x[0], opts)
    status, message = Status.SUCCESS, ""
    if not check["passed"]:
        rem = check["dt_remedy"]
        status = Status.INACCURATE
        message = (f"fixed step dt = {opts.dt:g} misses the requested accuracy (rtol = "
                   f"{check['rtol']:g}, atol = {check['atol']:g}): estimated error of x(T) "
                   f"{check['error']:.3g}x the tolerance (step doubling of the whole run); "
                   f"remedy: dt <= {rem:.3g} ({int(np.ceil(opts.T / rem))} steps) or "
                   "adaptive = true")
        logger.warning("particle run inaccurate: %s", message)
    return replace(res, options=opts, status=status, message=message,
                   checks={**res.checks, "accuracy": check},
                   wall_time=res.wall_time + half.wall_time)


def judged_noisy(simulate: Simulate, x0: np.ndarray, schedule: Schedule, attn: Attention,
                 opts: ParticleOptions, comm: Any) -> ParticleResult:
    """A fixed-step noisy run (``D > 0``) judged by the weak error of its token moments.

    The rerun at ``dt/2`` is independent (seed
    :func:`~wflow.particles.weak_error.half_step_seed`, the Itô balance off); the status is
    ``success``, ``inaccurate`` naming a ``dt``, or ``inconclusive`` naming a token count.
    """
    if x0.shape[0] * max(1, int(opts.n_paths)) < 2:  # before any run: no variance of one
        raise ValueError("particles.rtol: the weak-error estimate needs at least two tokens "
                         f"(n · n_paths), got {x0.shape[0]} · {opts.n_paths}")
    seed_half = half_step_seed(opts.seed)
    res, half = _run_and_half(simulate, x0, schedule, attn, opts, comm, seed=seed_half,
                              ito_balance=False)
    if half is None:
        return replace(res, options=opts)
    wall = res.wall_time + half.wall_time
    if half.status == Status.FAILED:
        message = f"the dt/2 rerun of the weak-error estimate failed: {half.message}"
        logger.error("particle run failed: %s", message)
        return replace(res, options=opts, status=Status.FAILED, message=message,
                       wall_time=wall)
    verdict = weak_error_check(
        res.x, half.x, order=INTEGRATORS.resolve(opts.integrator).order(),
        tol=opts.tolerance(), dt=float(opts.dt), T=float(opts.T), n_paths=res.x.shape[0],
        seeds=(int(opts.seed), seed_half))
    record = {**verdict.record, "rerun_steps": int(len(half.steps["t"]) - 1),
              "run_steps": int(len(res.steps["t"]) - 1), "rerun_wall_time": half.wall_time,
              "run_wall_time": res.wall_time}
    status, message = verdict.status, verdict.message
    if res.status == Status.INACCURATE:  # the Itô balance failed: a fault, whatever dt does
        # decided, so it outranks an estimate that could not decide (inconclusive)
        status = Status.INACCURATE
        message = "; ".join(m for m in (res.message, message) if m)
    if status == Status.INACCURATE:
        logger.warning("particle run inaccurate: %s", message)
    elif status == Status.INCONCLUSIVE:
        logger.warning("particle run inconclusive: %s", message)
    return replace(res, options=opts, status=status, message=message,
                   checks={**res.checks, "accuracy": record}, wall_time=wall)
