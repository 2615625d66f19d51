"""Cost estimates of the jobs before anything whose cost grows with the run.

:func:`~wflow.apps.jobs.particles.run_particles`, :func:`~wflow.apps.jobs.pde.run_pde` and
:func:`~wflow.apps.jobs.jko.run_jko` (``wflow particles``, ``pde``, ``jko``) estimate from
the scenario's numbers — the token count, the mesh's cell count named by its spec
(:func:`wflow.geometry.mesh.estimate.mesh_cells`: ``icosphere:N``, ``gmsh:N``, the default mesh, a
gmsh file's header) — *before* sampling tokens and before generating or reading the mesh,
and refuse what cannot fit or takes beyond :data:`wflow.infra.estimate.CONFIRM_SECONDS`
without ``--yes`` (:func:`wflow.infra.estimate.check_estimate`, exit status 2), on a
terminal and in batch mode. The solvers check again on what they built (the exact mesh, the
loaded tokens). Where the numbers are not known without the expensive step (tokens from a
file, a mesh format without a header count) the pre-check is skipped and the solver's check
decides.
"""

from __future__ import annotations

import math
from pathlib import Path
from typing import Any

from ...geometry.mesh.estimate import mesh_cells
from ...infra.estimate import check_estimate
from ...jko.estimate import estimate_jko
from ...jko.options import auto_steps_bound
from ...particles.estimate import estimate_particles, fastsum_eligible
from ...pde.estimate import estimate_pde

__all__ = ["precheck_particles", "precheck_pde", "precheck_jko", "resolve_mesh"]


def _heads(sc: Any) -> int:
    schedule = sc.build_schedule()
    return int(schedule.heads_at(schedule.initial_theta()).H)


def resolve_mesh(sc: Any, spec: str) -> tuple[str, Path | None]:
    """``(spec, file)``: the file a mesh spec names (as the solvers resolve it), if one."""
    from ...geometry.mesh import MESH_DIR

    if spec == "default" or ":" in spec:
        return spec, None
    p = sc.path(spec)
    if p.is_file():
        return str(p), p
    q = MESH_DIR / spec
    return spec, q if q.is_file() else None


def precheck_particles(sc: Any, *, save_trajectory: bool, confirm: bool) -> None:
    """Estimate ``wflow particles`` before sampling the tokens (skipped for token files)."""
    if sc.tokens.get("sampler") == "file":
        return
    opts = sc.particle_options(save_trajectory=save_trajectory)
    check_estimate(estimate_particles(
        n=int(sc.tokens["n"]), d=sc.d, H=_heads(sc), T=opts.T, dt=opts.dt,
        paths=opts.n_paths, record_every=opts.record_every, integrator=opts.integrator,
        save_trajectory=opts.save_trajectory,
        fastsum=fastsum_eligible(sc.attention["kind"], sc.d, opts.kernel_backend)),
        confirm=confirm)


def precheck_pde(sc: Any, *, mesh: str | None, overrides: dict[str, Any],
                 confirm: bool, comm: Any = None) -> None:
    """Estimate ``wflow pde`` from the mesh's cell count, before generating or reading it.

    Collective under MPI: rank 0 decides, every rank raises the same error.
    """
    from dataclasses import replace

    from ...infra.estimate import EstimateError
    from ...infra.parallel import comm_rank_size
    from ...pde.options import pde_options_from_dict

    if comm is None:
        comm, rank, size = comm_rank_size()
    else:
        rank, size = comm.rank, comm.size
    # the inputs on every rank (a bad scenario raises on all of them alike)
    spec, opts = pde_options_from_dict(sc.sections.get("pde"), seed=sc.seed)
    spec = mesh if mesh is not None else spec
    opts = replace(opts, **{k: v for k, v in overrides.items() if v is not None})
    spec, path = resolve_mesh(sc, spec)
    cells = mesh_cells(spec, path=path)
    if cells is None:
        return  # the solver's own check, on the loaded mesh
    est = estimate_pde(cells=cells, H=_heads(sc), T=opts.T, dt=opts.dt,
                       n_saves=int(opts.n_saves), cfl=opts.cfl, order=int(opts.order),
                       integrator=opts.integrator, max_steps=int(opts.max_steps))
    err = None
    if rank == 0:
        try:
            check_estimate(est, confirm=confirm)
        except EstimateError as exc:
            err = str(exc)
    if size > 1:
        err = comm.bcast(err, root=0)
    if err is not None:
        raise EstimateError(err)


def precheck_jko(sc: Any, *, mesh: str | None, overrides: dict[str, Any],
                 confirm: bool) -> None:
    """Estimate ``wflow jko`` from the mesh's cell count and ``T/τ``, before the mesh."""
    from ...jko.options import jko_options_from_dict

    pde_sec = sc.sections.get("pde", {}) or {}
    jko_sec = dict(sc.sections.get("jko", {}) or {})
    if mesh is not None:
        jko_sec["mesh"] = mesh
    spec, opts, extras = jko_options_from_dict(jko_sec, T=pde_sec.get("T"),
                                               mesh=pde_sec.get("mesh"))
    T = float(overrides.get("T") or opts.T)
    tau = overrides.get("tau") or (None if extras["tau_auto"] else opts.tau)
    spec, path = resolve_mesh(sc, spec)
    cells = mesh_cells(spec, path=path)
    if cells is None:
        return
    # τ = "auto": T/(3h) steps (the rule with |v|max ≈ 1, as the solver's own estimate)
    steps = math.ceil(T / float(tau) - 1e-9) if tau else auto_steps_bound(T, cells)
    verify = opts.verify
    check_estimate(estimate_jko(cells=cells, H=_heads(sc), steps=float(steps),
                                max_pairs=opts.max_pairs,
                                dense_ot_max_cells=opts.dense_ot_max_cells,
                                scheme="ot" if opts.scheme == "ot" else "fv",
                                verify_max_cells=(0 if verify is False else
                                                  cells if verify else opts.verify_max_cells)),
                   confirm=confirm)
