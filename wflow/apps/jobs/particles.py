"""The particle solver's file job: scenario → ``summary.json``, ``diagnostics.csv``, trajectory.

:func:`run_particles` validates first, computes, checks every number is finite, and only
then writes its output directory atomically (:func:`wflow.infra.io.run_directory`), so a failed
run leaves nothing that looks complete. A run with finite but inaccurate numbers
(status ``"inaccurate"``, :mod:`wflow.status`) is written, with its status and the reason
in ``summary.json``, so that it can be inspected. This is the only room of
:mod:`wflow.particles` that writes files.
"""

from __future__ import annotations

import logging
from dataclasses import replace
from functools import partial
from pathlib import Path
from typing import TYPE_CHECKING, Any

from ...infra.estimate import dt_record
from ...infra.io import check_finite, history_columns, provenance, run_directory, save_npz
from ...infra.io.outputs import write_run_files
from ...kernels.memory import fast_degree
from ...particles.estimate import fastsum_eligible
from ...particles.loop import completed_remedy, unjudged_ahead
from ...particles.result import ParticleResult
from ...particles.solver import simulate
from ...particles.spec import SPEC
from .noise import check_particles_diffusion, job_diffusion
from .runner import Job, heads_of, run_job

if TYPE_CHECKING:
    from ..scenario import Scenario

__all__ = ["run_particles", "JOB"]

logger = logging.getLogger(__name__)


def _table(sc: Scenario, overrides: dict[str, Any]) -> Any:
    D, key = job_diffusion(sc, overrides)  # [attention] diffusion or --diffusion
    opts = sc.particle_options(**{k: v for k, v in overrides.items() if v is not None},
                               **({"diffusion": D} if D > 0 else {}))
    check_particles_diffusion(opts, key)
    return opts


def _mask_name(mask: Any) -> str | None:
    """The mask's scenario name (``None`` for no mask): a value or a mask object."""
    if mask is None or mask == "none":
        return None
    return mask if isinstance(mask, str) else str(mask.name)


def _sizes(*, n: int, d: int, schedule: Any, kind: str, beta: float, mask: Any,
           opts: Any, ranks: int) -> dict:
    """The estimate's sizes: ``n, d, H, kind``, ranks, mask, fast degree, noisy weights.

    ``stochastic``: whether the schedule is noisy (deterministic weights run one path).
    ``degree`` (:func:`~wflow.kernels.memory.fast_degree`, of the schedule's initial
    heads) only where it matters: a causal mask summed fast (the kept coefficients).
    """
    name = _mask_name(mask)
    degree = None
    if name is not None and fastsum_eligible(kind, d, opts.kernel_backend):
        degree = fast_degree(schedule.heads_at(schedule.initial_theta()).A, beta,
                             opts.kernel_tol)
    return {"n": int(n), "d": int(d), "H": heads_of(schedule), "kind": kind,
            "ranks": int(ranks), "mask": name, "degree": degree,
            "stochastic": bool(schedule.stochastic)}


def _size(sc: Scenario, opts: Any, *, ranks: int = 1) -> dict | None:
    """The sizes before sampling the tokens (unknown for tokens read from a file).

    ``ranks``: the communicator's size (the memory estimate is per rank).
    """
    if sc.tokens.get("sampler") == "file":
        return None
    return _sizes(n=int(sc.tokens["n"]), d=sc.d, schedule=sc.build_schedule(),
                  kind=sc.attention["kind"], beta=float(sc.attention["beta"]),
                  mask=sc.attention.get("mask"), opts=opts, ranks=ranks)


def _build(sc: Scenario, opts: Any, comm: Any) -> dict:
    attn = sc.attention_obj()
    schedule = sc.build_schedule()
    x0 = sc.build_tokens()
    # a dt that does not divide T: logged before the run, recorded in summary.json
    return {"attn": attn, "schedule": schedule, "x0": x0, "H": heads_of(schedule),
            "dt": dt_record(opts.T, opts.dt, what="particles"), "opts": opts,
            "ranks": 1 if comm is None else int(comm.Get_size())}


def _size_of(p: dict) -> dict:
    attn = p["attn"]
    return _sizes(n=p["x0"].shape[0], d=p["x0"].shape[1], schedule=p["schedule"],
                  kind=attn.kind, beta=float(attn.beta), mask=getattr(attn, "mask", None),
                  opts=p["opts"], ranks=p["ranks"])


def _unjudged(p: dict, opts: Any) -> str | None:
    """The note of a run whose status will be ``completed`` (Job.unjudged), or None."""
    why = unjudged_ahead(opts, p["attn"], p["schedule"])
    if why is None:
        return None
    return (f"no accuracy check will be judged ({why}): the run will end completed (exit 1); "
            + completed_remedy(opts, p["schedule"]))


def _solve(p: dict, opts: Any, comm: Any) -> ParticleResult:
    # the module's name, looked up at the call (SPEC.solve; tests wrap it)
    return simulate(p["x0"], p["schedule"], p["attn"], options=opts, comm=comm)


def _write(scenario: Scenario, opts: Any, p: dict, res: ParticleResult, out: str | Path,
           comm: Any, *, save_trajectory: bool = False, gif: bool = False) -> None:
    x0, schedule = p["x0"], p["schedule"]
    rank = 0 if comm is None else comm.Get_rank()
    dt = p["dt"]
    summary = {
        "status": res.status,
        "message": res.message,
        "checks": res.checks,
        "solver": "particles",
        "scenario": scenario.raw,
        "provenance": provenance(),
        "seed": scenario.seed,
        "n_tokens": int(x0.shape[0]),
        "d": int(x0.shape[1]),
        "n_heads": heads_of(schedule),
        "n_paths": res.n_paths,
        "integrator": opts.integrator,
        "integrator_order": res.order,
        "diffusion": float(opts.diffusion),
        "flow": opts.flow,
        "steps": int(len(res.steps["t"]) - 1),
        "dt": dt,
        "wall_time_s": res.wall_time,
        "gradient_flow_sign": res.sign,
        "kernel": res.extra.get("kernel"),
        "engine": res.extra.get("engine"),
        **({"engine_reason": res.extra["engine_reason"]} if "engine_reason" in res.extra else {}),
        **({"accuracy_default": res.extra["accuracy_default"]}
           if "accuracy_default" in res.extra else {}),
        "conventions": {
            "E": "Σ_h w_h (1/2β) ∫∫ Φ(β xᵀA_h y) dμ dμ (Φ = e^s; ReLU: s₊²/2)",
            "slope2": "∫ b̂ |P∇ψ|² dμ", "speed2": "∫ |v|²/b̂ dμ",
            "G2": "∫ |v|² HM_h(Z_h) dμ (published reference engine)",
            "balance_chain": "ΔE − ∫∂_tE − ∫power − Itô − M",
            "balance_edi": "ΔE − ∫∂_tE − Itô − M − sign·∫(½speed2 + ½slope2)",
            "balance_g2": "ΔE − ∫∂_tE − Itô − M − sign·∫G2",
        },
        "final": res.final(),
        "balance": res.balance_summary(),
    }
    check_finite("summary.final", {k: v["mean"] for k, v in summary["final"].items()})
    if res.extra.get("mpi"):
        summary["mpi"] = res.extra["mpi"]
    cols = history_columns(res.t, res.history)
    if rank != 0:  # one process writes (the result is the same on every rank)
        comm.barrier()
        return
    with run_directory(out) as stage:
        write_run_files(stage, summary, cols)
        if gif:
            from ..animate import particle_pictures

            particle_pictures(res, stage, stochastic=schedule.stochastic,
                              title=f"particles, H = {summary['n_heads']}")
        if save_trajectory:
            assert res.trajectory is not None
            arrays = {"t": res.t, "x": res.trajectory[0] if res.n_paths == 1 else res.trajectory}
            if res.theta_trajectory is not None:
                arrays["theta"] = (res.theta_trajectory[0] if res.n_paths == 1
                                   else res.theta_trajectory)
            save_npz(stage / "trajectory.npz", **arrays)
    if comm is not None and comm.Get_size() > 1:
        comm.barrier()
    logger.info("particles: wrote %s", out)


#: ``wflow particles``: the spec and what its job does beyond the runner.
JOB = Job(spec=SPEC, table=_table, size=_size, build=_build, size_of=_size_of, solve=_solve,
          write=_write, label="particle", unjudged=_unjudged)


def run_particles(scenario: Scenario, out: str | Path, *, save_trajectory: bool = False,
                  progress: bool | None = None, gif: bool = False,
                  confirm: bool = False, comm: Any = None,
                  diffusion: float | None = None) -> ParticleResult:
    """Run the particle system of ``scenario`` and write ``out/``.

    Writes ``summary.json`` (status and its reason, the accuracy checks, scenario echo,
    versions, seed, wall time, final diagnostics with Monte-Carlo mean/std,
    energy-balance residuals), ``diagnostics.csv`` (one row per recorded time) and, with
    ``save_trajectory``, ``trajectory.npz`` (``t``; ``x`` of shape ``(steps, n, d)`` —
    ``(paths, steps, n, d)`` for several paths; ``theta`` when the weights move); with
    ``gif``, ``tokens.gif`` (the tokens on S² of path 0, d = 3) and ``run.png`` (``E``,
    ``G²`` and the energy balance, :mod:`wflow.apps.animate`).
    Returns the result; ``res.status`` may be ``"inaccurate"`` (written all the same).
    With ``comm`` (``mpirun -n P wflow particles``) the run is split over its ranks
    (:func:`wflow.particles.simulate` ``comm``; collective) and rank 0 writes.

    Before computing, the cost is estimated (:func:`wflow.infra.estimate.check_estimate`:
    the memory per rank of ``comm``, :func:`wflow.particles.estimate.estimate_run`; a run
    that cannot fit in memory is refused; one above an hour needs ``confirm``,
    ``--yes``, on a terminal). A ``dt`` that does not divide ``T`` is replaced by
    ``T / ceil(T/dt)``: logged and recorded in ``summary.json["dt"]`` (requested, used,
    steps, adjusted). ``diffusion``: the token diffusion ``D`` (``--diffusion``; ``None``:
    the scenario's ``[attention] diffusion``); ``D > 0`` with a deterministic integrator
    is refused naming the key (:func:`~wflow.apps.jobs.noise.check_particles_diffusion`).

    Raises
    ------
    FloatingPointError
        If the run produced NaN/Inf (status ``"failed"``; nothing is written).
    EstimateError
        The run cannot fit in memory, or was not confirmed (nothing computed).
    """
    if gif and scenario.d != 3:
        raise ValueError(f"gif: the token animation shows S² (attention.d = 3), got d = "
                         f"{scenario.d}")
    ranks = 1 if comm is None else int(comm.Get_size())  # the estimate is per rank
    job = replace(JOB, size=partial(_size, ranks=ranks))
    return run_job(job, scenario, out, overrides={"save_trajectory": save_trajectory or gif,
                                                  "progress": progress,
                                                  "diffusion": diffusion},
                   confirm=confirm, comm=comm, save_trajectory=save_trajectory, gif=gif)
