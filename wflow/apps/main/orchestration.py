"""The main job's entry point: validate everything, then run, checkpoint and write its phases.

Part of the main job (:mod:`wflow.apps.main`).
"""

from __future__ import annotations

import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from ...infra.io import (
    OutputError,
    run_directory,
)
from ..scenario import ScenarioError, parse_scenario
from . import phases
from .checkpoint import (
    _Checkpoint,
    _differences,
    _fingerprint,
    _phase,
    _Pieces,
    _session_record,
)
from .compare import _compare
from .estimate import check_run_estimate
from .moments import main_job_moments
from .options import MainJobResult, _load
from .refinement import _jko_refinement
from .summary import _summary, _write_outputs


def run_main_job(scenario: str | Path | None, out: str | Path, *, resume: bool = False,
                 progress: bool | None = None, overwrite: bool = False,
                 confirm: bool = False) -> MainJobResult:
    """Run the main job; write ``out/`` (see module docstring).

    Parameters
    ----------
    scenario : path or None
        Scenario TOML; ``None`` uses the shipped default, or with ``resume`` the
        checkpointed scenario. With ``resume`` a given scenario must equal the
        checkpointed one (the table, the files and the callables it names), else
        ``ScenarioError`` names the differences.
    out : path
        Output directory (claim it first with :func:`wflow.infra.io.claim_output`, as
        ``wflow run`` does: then only the output found there at the start is replaced).
    resume : bool
        Continue from ``out.ckpt/`` (the only way a checkpoint is read).
    overwrite : bool
        Without ``resume``: replace a checkpoint of *another* scenario at ``out.ckpt``
        (else refused, naming the differences).
    confirm : bool
        Run even if the estimate exceeds :data:`wflow.infra.estimate.CONFIRM_SECONDS`
        (``--yes``; see :func:`wflow.infra.estimate.check_estimate`).

    Raises
    ------
    ScenarioError, ValueError, FileNotFoundError
        Bad input, before any phase runs (nothing written, no checkpoint).
    KeyboardInterrupt
        With a message saying how to resume (the completed phases stay checkpointed);
        the exception keeps its type (:class:`wflow.cli.Terminated` for SIGTERM/SIGHUP).
    """
    from ...infra import lock
    from .ranks import on_rank0, world

    out = Path(out)
    ck = _Checkpoint(out)
    comm = world()  # under mpirun: rank 0 locks and writes (wflow.apps.main.ranks)

    def claim() -> None:
        ck.check()
        try:
            lock.acquire(ck.dir, what="checkpoint")
        except lock.LockedError as exc:
            raise OutputError(str(exc)) from None

    on_rank0(comm, claim)
    try:
        return _run_locked(scenario, out, ck, resume=resume, progress=progress,
                           overwrite=overwrite, confirm=confirm, comm=comm)
    finally:
        if comm is None or comm.Get_rank() == 0:
            lock.release(ck.dir)


def _run_locked(scenario, out: Path, ck: _Checkpoint, *, resume: bool, progress,
                overwrite: bool, confirm: bool, comm: Any = None) -> MainJobResult:
    ck.check()  # again, under the lock
    if resume:
        meta = ck.meta()
        if meta is None:
            raise FileNotFoundError(f"--resume: no checkpoint found at {ck.dir}")
        base = Path(meta["base_dir"])
        fp_old = meta.get("fingerprint") or _fingerprint(meta["raw"], base)
        if scenario is None:
            sc, raw = parse_scenario(meta["raw"], base_dir=base), meta["raw"]
        else:
            sc = _load(Path(scenario))
            raw = sc.raw
        fp = _fingerprint(raw, sc.base_dir)
        diff = _differences(meta["raw"], raw, fp_old, fp)
        if fp != fp_old and not diff:
            diff = ["the scenario's folder or the files it names"]
        if diff:
            more = f" (and {len(diff) - 3} more)" if len(diff) > 3 else ""
            what = scenario if scenario is not None else "the scenario"
            raise ScenarioError(
                f"--resume: {what} differs from the scenario checkpointed in {ck.dir}: "
                f"{'; '.join(diff[:3])}{more}; run without --resume to start over")
    else:
        sc = _load(None if scenario is None else Path(scenario))
        raw = sc.raw
        fp = _fingerprint(raw, sc.base_dir)
        if ck.exists():
            meta = ck.meta()
            diff = (["(the checkpoint records no scenario)"] if meta is None else
                    _differences(meta["raw"], raw, meta.get("fingerprint") or {}, fp))
            if diff and not overwrite:
                more = f" (and {len(diff) - 3} more)" if len(diff) > 3 else ""
                raise ScenarioError(
                    f"{ck.dir}: holds the checkpoint of another scenario "
                    f"({'; '.join(diff[:3])}{more}); pass --resume to continue it (with its "
                    "scenario), --overwrite to discard it, or choose another --out")
            if ck.phases():
                print(f"run: discarding the checkpoint in {ck.dir} (phases "
                      f"{', '.join(ck.phases())}; pass --resume to continue it instead)",
                      flush=True)
    if sc.attention_obj().mask is not None:  # a decoder: particles vs the kinetic limit
        from .causal import run_causal_job
        from .ranks import RankCheckpoint

        return run_causal_job(sc, raw, out, ck if comm is None else RankCheckpoint(ck, comm),
                              fp, resume=resume, progress=progress, confirm=confirm,
                              comm=comm)
    from .ranks import refuse_unmasked

    refuse_unmasked(comm)
    ropts = sc.table("run")

    from ...geometry.density import density_spec_from_scenario, initial_density
    from ...geometry.mesh import load_mesh
    pde = sc.table("pde")  # parsed when the scenario loaded
    mesh_spec, popts = pde.mesh, pde.options
    # token diffusion D ([attention] diffusion, read once by the scenario) in every phase
    popts = type(popts)(**{**popts.__dict__, "progress": progress,
                           "diffusion": sc.diffusion})
    phases._check_noise(sc, ropts)  # a D without effect in a phase: refused, nothing run
    if mesh_spec != "default" and ":" not in str(mesh_spec) and sc.path(mesh_spec).is_file():
        mesh_spec = sc.path(mesh_spec)  # scenario-relative file; else shipped name / generator
    if sc.d != 3:
        raise ScenarioError("attention.d: the main job runs on S² meshes, d must be 3")
    from ...geometry.mesh import MESH_DIR
    from ...geometry.mesh.estimate import mesh_cells

    spec_file = next((p for p in (Path(str(mesh_spec)), MESH_DIR / str(mesh_spec))
                      if ":" not in str(mesh_spec) and p.is_file()), None)
    cells = mesh_cells(str(mesh_spec), path=spec_file)
    if cells is not None:  # before generating or reading the mesh (its name gives the size)
        check_run_estimate(sc, cells, popts, ropts, confirm=confirm)
    mesh = load_mesh(mesh_spec)
    rho0 = initial_density(mesh, density_spec_from_scenario(sc), base_dir=sc.base_dir)
    schedule = sc.build_schedule()
    attn = sc.attention_obj()
    if ropts.jko:
        phases._check_jko(mesh, rho0, schedule, attn, sc, popts)
    if int(mesh.num_global) != cells:  # once: again only where the name did not give the size
        check_run_estimate(sc, int(mesh.num_global), popts, ropts, confirm=confirm)
    if not resume:  # everything validated: start a fresh checkpoint
        ck.start(raw, sc.base_dir, fp)
    timings: dict[str, float] = {}
    cpu: dict[str, float] = {}
    restored: list[str] = []
    warned: list[dict] = []  # every phase's logged warnings, with the phase
    t_total = time.perf_counter()

    def phase(name: str, fn: Callable[[], Any]) -> Any:
        return _phase(ck, name, fn, timings, restored, resume=resume, warned=warned, cpu=cpu)

    try:
        pde = phase("pde", lambda: {"res": phases._run_pde(mesh, rho0, schedule, attn,
                                                           popts)})["res"]
        parts = phase("particles", lambda: phases._run_particles(mesh, pde, schedule, attn,
                                                                 popts, ropts, sc, progress))
        jko = jref = table = None
        if ropts.jko:
            jko = phase("jko", lambda: {"res": phases._run_jko(mesh, rho0, schedule, attn, sc,
                                                               popts, progress)})["res"]
            jref = pde
            if popts.flow != "surrogate":  # the JKO discretises v̂: its own reference PDE
                jref = phase("pde_surrogate", lambda: {"res": phases._run_pde(
                    mesh, rho0, schedule, attn,
                    phases._surrogate_options(popts, jko.stats["steps"]))})["res"]
            if ropts.jko_refinement:
                table = phase("jko_refinement", lambda: _jko_refinement(
                    mesh, sc, schedule, attn, popts, jko, ropts, jref))
        pieces = _Pieces(ck, "compare")  # an interrupted comparison resumes piece by piece
        cmp_ = phase("compare", lambda: {
            **_compare(pde, parts, jko, ropts, jref, seed=sc.seed, store=pieces),
            "moments": main_job_moments(mesh, pde, parts, schedule, attn, popts, ropts, sc,
                                        store=pieces)})
    except KeyboardInterrupt as exc:  # Ctrl-C, SIGTERM, SIGHUP: same type, with the hint
        exc.args = (f"completed phases are checkpointed in {ck.dir}; continue with: "
                    f"wflow run --resume {out}",)
        raise
    except OSError as exc:  # a full disk while checkpointing: the checkpoint is kept
        exc.add_note(f"completed phases are checkpointed in {ck.dir}; after freeing space "
                     f"continue with: wflow run --resume {out}")
        raise
    session = time.perf_counter() - t_total
    restored_wall = float(sum(timings[p] for p in restored))
    summary = _summary(sc, raw, pde, parts, jko, cmp_, timings, ropts, mesh,
                       session + restored_wall, jref=jref, table=table)
    summary.update(_session_record(warned, cpu, restored, restored_wall, session))
    try:
        with run_directory(out) as stage:
            _write_outputs(stage, pde, parts, jko, cmp_, summary, ropts, mesh)
    except KeyboardInterrupt as exc:
        exc.args = (f"the results were not written; every phase is checkpointed in {ck.dir}; "
                    f"continue with: wflow run --resume {out}",)
        raise
    except OSError as exc:
        exc.add_note(f"every phase is checkpointed in {ck.dir}; after freeing space "
                     f"continue with: wflow run --resume {out}")
        raise
    ck.clear()
    return MainJobResult(summary["status"], summary, out)
