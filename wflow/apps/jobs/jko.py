"""The JKO scheme's file job: scenario → ``summary.json``, ``diagnostics.csv``, ``density.npz``.

:func:`run_jko` validates, solves, checks every number is finite and only then writes
its output directory atomically; :func:`run_jko_scenario` runs the ``[jko]`` table of a
scenario on an already loaded mesh (the main job). The only room of :mod:`wflow.jko`
that writes files.
"""

from __future__ import annotations

import logging
from collections.abc import Mapping
from dataclasses import replace
from pathlib import Path
from typing import Any

import numpy as np

from ...attention.heads import Attention
from ...jko.options import FixedTau, JKOTable, check_diffusion_scheme
from ...jko.schemes import SCHEMES
from ...jko.solver import JKOResult, solve_jko
from ...jko.spec import SPEC, resolve_step
from ...status import Status
from .mesh import mesh_file, mesh_size, mesh_size_of
from .noise import job_diffusion
from .runner import Job, heads_of, run_job

__all__ = [
    "JOB",
    "run_jko_scenario",
    "run_jko",
]

logger = logging.getLogger(__name__)


def run_jko_scenario(mesh: Any, rho0: np.ndarray, schedule: Any, attn: Attention,
                     sc: Any, *, T: float | None = None, progress: bool | None = None,
                     tau: float | None = None, scheme: str | None = None,
                     diffusion: float | None = None) -> JKOResult:
    """JKO on a loaded :class:`~wflow.geometry.mesh.SphereMesh` with the ``[jko]`` table of ``sc``.

    ``rho0`` are cell densities in the mesh's original order; ``T`` replaces the table's
    default (``[pde] T``, then 1) where the table sets none; ``tau`` overrides the table's
    step rule and drops its ``rtol``/``atol`` (a row of the τ/h table runs the steps ``τ``
    it sets), else the rule, whose default ``"auto"`` is resolved on this mesh
    (:func:`~wflow.jko.spec.resolve_step`; the choice is in ``stats["tau_rule"]``);
    ``scheme`` overrides ``[jko] scheme`` (the main job's OT cross-check; a scheme without
    error control runs the steps ``τ``, the table's ``rtol``/``atol`` dropped); ``diffusion``: the
    token diffusion ``D`` (``None``: the scenario's ``[attention] diffusion``). Used by the
    main job (``wflow run``).
    """
    table = sc.table("jko")
    if T is not None and "T" not in table.given:
        table = replace(table, T=float(T))
    if tau is not None:
        table = replace(table, step=FixedTau(float(tau)))
    D = sc.diffusion if diffusion is None else diffusion
    changes = {k: v for k, v in (("progress", progress), ("scheme", scheme),
                                 ("diffusion", D if D > 0 else None)) if v is not None}
    if scheme is not None and not SCHEMES.resolve(scheme).resolve(mesh_given=True).error_control:
        changes.update(rtol=None, atol=None)  # a cross-check without error control: steps τ
    if tau is not None:  # a row of the τ/h table: a refinement study runs the steps τ it sets
        changes.update(rtol=None, atol=None)
    cen = mesh.gather_owned(mesh.centroids)
    areas = mesh.gather_owned(mesh.areas)
    return _solve_on(table, cen, areas, np.asarray(rho0) * areas, schedule, attn, mesh,
                     **changes)


def _solve_on(table: JKOTable, cen: np.ndarray, areas: np.ndarray, mass0: np.ndarray,
              schedule: Any, attn: Attention, mesh: Any, **changes: Any) -> JKOResult:
    """The table's step resolved on this mesh, then solved.

    :func:`~wflow.jko.spec.resolve_step`; ``stats["tau_rule"]`` records the step against
    the mesh.
    """
    opts, info = resolve_step(table, cen, areas, mass0, schedule, attn, **changes)
    res = solve_jko(mass0, schedule, attn, points=cen, areas=areas, options=opts, mesh=mesh)
    return replace(res, stats={**res.stats, "tau_rule": info})


def _table(sc: Any, overrides: dict[str, Any]) -> JKOTable:
    """``[jko]`` as parsed when the scenario loaded, with the command line's overrides.

    Checked against the scheme run: a key or flag of no effect is refused or warned; so is
    a token diffusion ``D > 0`` with the OT scheme (naming ``attention.diffusion`` or
    ``--diffusion``).
    """
    D, key = job_diffusion(sc, overrides)  # [attention] diffusion or --diffusion
    table = sc.table("jko").with_(**{k: v for k, v in overrides.items() if v is not None},
                                  diffusion=D if D > 0 else None)
    check_diffusion_scheme(table.unresolved_options(), key=key)  # 'ot' refuses D > 0
    return table


def _build(scenario: Any, table: JKOTable, comm: Any) -> dict:
    from ...geometry.density import density_spec_from_scenario, initial_density
    from ...geometry.mesh import load_mesh

    mesh_spec = mesh_file(scenario, table.mesh)
    if scenario.d != 3:
        raise ValueError(f"attention.d: the JKO scheme works on S² meshes (d = 3), got "
                         f"{scenario.d}")
    attn = scenario.attention_obj()
    schedule = scenario.build_schedule()
    sm = load_mesh(mesh_spec)
    rho0 = initial_density(sm, density_spec_from_scenario(scenario), base_dir=scenario.base_dir)
    return {"mesh_spec": mesh_spec, "attn": attn, "schedule": schedule, "mesh": sm,
            "rho0": rho0, "H": heads_of(schedule)}


def _unjudged(p: dict, table: JKOTable) -> str | None:
    """The note of a run whose status will be ``completed`` (Job.unjudged), or None.

    With token diffusion and no tolerance both EDI forms are recorded, not judged
    (:func:`wflow.jko.result.judge`).
    """
    opts = table.unresolved_options()
    if not opts.diffusion > 0 or opts.tolerance is not None:
        return None
    return ("no accuracy check will be judged (token diffusion: the EDI of E and the "
            "free-energy EDI are recorded, not judged): the run will end completed (exit 1); "
            "set jko.rtol to judge it by the error estimate of its steps")


def _solve(p: dict, table: JKOTable, comm: Any) -> JKOResult:
    sm = p["mesh"]
    cen = sm.gather_owned(sm.centroids)
    areas = sm.gather_owned(sm.areas)
    return _solve_on(table, cen, areas, p["rho0"] * areas, p["schedule"], p["attn"], sm)


def _write(scenario: Any, table: JKOTable, p: dict, res: JKOResult, out: str | Path,
           comm: Any) -> None:
    from ...infra.io import check_finite, history_columns, provenance, run_directory
    from ...infra.io.outputs import write_run_files

    opts, sm, rho0, schedule, attn = res.options, p["mesh"], p["rho0"], p["schedule"], p["attn"]
    mesh_spec = p["mesh_spec"]
    cols = history_columns(res.t, {k: np.asarray(v)[None] for k, v in res.history.items()})
    w2_pde = None
    if table.compare_pde:
        from ...geometry.transport import w2_sphere
        from ...pde import PDEOptions, solve_pde

        # the same flow: the surrogate velocity and the run's token diffusion (Strang)
        pres = solve_pde(rho0, schedule, attn, mesh=sm, options=PDEOptions(
            T=opts.T, dt=min(opts.tau, 0.01), order=2, flow="surrogate",
            n_saves=opts.steps + 1, balance=False, clusters=False, progress=False,
            diffusion=float(opts.diffusion)))
        if pres.status not in (Status.SUCCESS, Status.COMPLETED):  # balance off
            raise FloatingPointError(f"jko compare_pde: the PDE failed: {pres.message}")
        w2_pde = np.array([w2_sphere(res.centroids, res.centroids, res.masses[k],
                                     pres.masses[k], max_points=max(6000, res.areas.size))
                           for k in range(len(res.t))])
        cols["w2_vs_pde"] = w2_pde
    summary = {
        "status": res.status, "solver": "jko", "scenario": scenario.raw,
        "provenance": provenance(), "seed": scenario.seed,
        "mesh": {"spec": str(mesh_spec), "cells": int(res.areas.size)},
        "n_heads": heads_of(schedule),
        **res.summary(),
        "steps": {"W2sq": res.history["W2sq"][1:].tolist(),
                  "inner_iters": res.history["inner_iters"][1:].tolist(),
                  "gap_rel": res.history["gap_rel"][1:].tolist(),
                  "locked": res.history["locked"][1:].tolist(),
                  "edi_step": res.history["edi_step"][1:].tolist()},
        "edi_sum": float(np.sum(res.history["edi_step"][1:])),
        "outputs": {"density.npz": "t (K+1,), rho (K+1, M), centroids (M, 3), areas (M,)",
                    "diagnostics.csv": "one row per JKO time t_k = k tau"},
        "conventions": {
            "step": "μ_{k+1} = argmin (1/2τ) W²_{b̂_k}(μ_k, ν) − sE(ν, t_{k+1})",
            "scheme": opts.scheme,
            "cost": "C_ij = d_S(ĉ_i, ĉ_j)² / b̂_ij, b̂ lagged at μ_k, mean = "
                    + opts.mobility_mean,
            "W2sq": "W²_{b̂_k}(μ_k, μ_{k+1}) of the step into t_k (0 at t_0)",
            "edi_step": "s(E_{k+1} − E_k) − sτ·½(∂_tE_k + ∂_tE_{k+1}) − W²/(2τ) "
                        "− τ/4(|∂E|²_k + |∂E|²_{k+1})",
            "gap": "generalised conditional-gradient optimality gap of the inner solve",
        },
    }
    if w2_pde is not None:
        summary["w2_vs_pde_max"] = float(np.max(w2_pde))
    check_finite("summary.final", summary["final"])
    with run_directory(out) as stage:
        write_run_files(stage, summary, cols, {"density.npz": {
            "t": res.t, "rho": res.rho, "centroids": res.centroids, "areas": res.areas}})
    logger.info("jko: wrote %s", out)


#: ``wflow jko``: the spec and what its job does beyond the runner.
JOB = Job(spec=SPEC, table=_table, size=mesh_size, build=_build, size_of=mesh_size_of,
          solve=_solve, write=_write, unjudged=_unjudged)


def run_jko(scenario: Any, out: str | Path, *, progress: bool | None = None,
            overrides: Mapping[str, Any] | None = None, confirm: bool = False) -> JKOResult:
    """Run the JKO scheme of a scenario and write ``out/`` (what ``wflow jko`` calls).

    Writes ``summary.json`` (scenario echo, mesh, options, final diagnostics, balance,
    per-step table summary, stats), ``diagnostics.csv`` (one row per ``t_k``: ``E``,
    ``E_h*``, ``dEdt_w``, ``slope2``, ``W2sq``, ``inner_iters``, ``gap``, ``edi_step``,
    …; with ``compare_pde`` also ``w2_vs_pde``) and ``density.npz`` (``t`` ``(K+1,)``,
    ``rho`` ``(K+1, M)``, ``centroids``, ``areas``; cells in the mesh file's order).

    ``summary.json`` carries the status and its reason (``"locked"``, ``"inaccurate"``,
    ``"not_converged"`` runs are written, so that they can be inspected) and the checks
    (summed EDI residual against its tolerance, locked steps).

    Before solving, the cost is estimated (:func:`wflow.infra.estimate.check_estimate`:
    refused if it cannot fit in memory; above an hour ``confirm``, ``--yes``, is needed
    on a terminal).

    Raises
    ------
    FloatingPointError
        If the run failed (non-finite values; nothing is written).
    EstimateError
        The run cannot fit in memory, or was not confirmed (nothing computed).
    """
    return run_job(JOB, scenario, out, overrides={**(overrides or {}), "progress": progress},
                   confirm=confirm)
