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
from ...jko.options import auto_steps_bound, check_applicable, jko_options_from_dict
from ...jko.solver import JKOResult, auto_step, solve_jko
from ...status import Status

__all__ = [
    "run_jko_scenario",
    "run_jko",
]

logger = logging.getLogger(__name__)


def run_jko_scenario(mesh: Any, rho0: np.ndarray, schedule: Any, attn: Attention,
                     sc: Any, *, T: float | None = None, progress: bool | None = None,
                     tau: float | None = None, scheme: str | None = None) -> JKOResult:
    """JKO on a loaded :class:`~wflow.geometry.mesh.SphereMesh` with the ``[jko]`` table of ``sc``.

    ``rho0`` are cell densities in the mesh's original order; ``T`` defaults to the
    ``[jko]`` value (then ``[pde] T``, then 1); ``tau`` overrides ``[jko] tau``, whose
    default ``"auto"`` is resolved on this mesh (:func:`~wflow.jko.auto_step`; the
    choice is in ``stats["tau_rule"]``); ``scheme`` overrides ``[jko] scheme`` (the main
    job's OT cross-check). Used by the main job (``wflow run``).
    """
    pde_sec = sc.sections.get("pde", {}) or {}
    _, opts, extras = jko_options_from_dict(sc.sections.get("jko"),
                                            T=T if T is not None else pde_sec.get("T"),
                                            crosscheck=True)
    if T is not None and "T" not in (sc.sections.get("jko") or {}):
        opts = replace(opts, T=float(T))
    if progress is not None:
        opts = replace(opts, progress=progress)
    if scheme is not None:
        opts = replace(opts, scheme=scheme)
    cen = mesh.gather_owned(mesh.centroids)
    areas = mesh.gather_owned(mesh.areas)
    return _solve(cen, areas, np.asarray(rho0) * areas, schedule, attn, opts, extras, tau,
                  mesh=mesh)


def _solve(cen: np.ndarray, areas: np.ndarray, mass0: np.ndarray, schedule: Any,
           attn: Attention, opts: Any, extras: dict, tau: float | None, *,
           mesh: Any = None) -> JKOResult:
    """Resolve ``tau = "auto"`` (or apply ``tau``) on this mesh, then solve.

    ``stats["tau_rule"]`` records the step against the mesh (``h``, ``|v|_max``,
    ``τ|v|_max/h``) whether it was chosen (:func:`~wflow.jko.auto_step`) or given.
    """
    if tau is not None:
        opts = replace(opts, tau=float(tau))
    auto, info = auto_step(cen, areas, mass0, schedule, attn, options=opts,
                           eps=extras["eps_auto"])
    if tau is None and extras["tau_auto"]:
        opts = auto
    else:  # the given step, and where it sits against the mesh
        info = {**info, "rule": "given", "tau": opts.tau, "steps": opts.steps,
                "cells_per_step": opts.tau * info["vmax"] / info["h"]}
    if opts.ot == "sinkhorn" and extras["eps_auto"]:
        opts = replace(opts, eps=auto.eps)
    info["eps"] = opts.epsilon
    res = solve_jko(mass0, schedule, attn, points=cen, areas=areas, options=opts, mesh=mesh)
    return replace(res, stats={**res.stats, "tau_rule": info})


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
    from ...geometry.density import density_spec_from_scenario, initial_density
    from ...geometry.mesh import MESH_DIR, load_mesh
    from ...infra.estimate import check_estimate
    from ...infra.io import (
        check_finite,
        history_columns,
        provenance,
        run_directory,
        save_npz,
        write_csv,
        write_json,
    )
    from ...jko.estimate import estimate_jko
    from .precheck import precheck_jko  # before generating or reading the mesh

    precheck_jko(scenario, mesh=None,
                 overrides={k: v for k, v in (overrides or {}).items() if v is not None},
                 confirm=confirm)
    pde_sec = scenario.sections.get("pde", {}) or {}
    overrides = {k: v for k, v in (overrides or {}).items() if v is not None}
    mesh_spec, opts, extras = jko_options_from_dict(
        scenario.sections.get("jko"), T=pde_sec.get("T"), mesh=pde_sec.get("mesh"),
        scheme=overrides.get("scheme"))
    tau = overrides.get("tau")
    if tau is None and extras["tau_auto"] and "T" in overrides:
        overrides["tau"] = overrides["T"]  # the placeholder step, resolved on the mesh
    if overrides:
        opts = replace(opts, **overrides)
        check_applicable(opts, set(overrides), label="--{}")  # a flag of no effect: refused
    if progress is not None:
        opts = replace(opts, progress=progress)
    if tau is None and not extras["tau_auto"]:
        tau = opts.tau
    if mesh_spec != "default" and ":" not in mesh_spec:
        p = scenario.path(mesh_spec)
        if p.is_file() or not (MESH_DIR / mesh_spec).is_file():
            mesh_spec = str(p)
    if scenario.d != 3:
        raise ValueError(f"attention.d: the JKO scheme works on S² meshes (d = 3), got "
                         f"{scenario.d}")
    attn = scenario.attention_obj()
    schedule = scenario.build_schedule()
    sm = load_mesh(mesh_spec)
    M = int(sm.num_global)
    k = opts.steps if not extras["tau_auto"] or tau is not None else \
        auto_steps_bound(opts.T, M)
    check_estimate(estimate_jko(cells=M, H=int(schedule.heads_at(schedule.initial_theta()).H),
                                steps=k, max_pairs=opts.max_pairs,
                                dense_ot_max_cells=opts.dense_ot_max_cells,
                                scheme="ot" if opts.scheme == "ot" else "fv",
                                verify_max_cells=(0 if opts.verify is False else
                                                  M if opts.verify else opts.verify_max_cells)),
                   confirm=confirm)
    rho0 = initial_density(sm, density_spec_from_scenario(scenario), base_dir=scenario.base_dir)
    cen = sm.gather_owned(sm.centroids)
    areas = sm.gather_owned(sm.areas)
    res = _solve(cen, areas, rho0 * areas, schedule, attn, opts, extras, tau, mesh=sm)
    opts = res.options
    if res.status == Status.FAILED:
        raise FloatingPointError(f"jko run failed: {res.message}")
    cols = history_columns(res.t, {k: np.asarray(v)[None] for k, v in res.history.items()})
    w2_pde = None
    if extras["compare_pde"]:
        from ...geometry.transport import w2_sphere
        from ...pde import PDEOptions, solve_pde

        pres = solve_pde(rho0, schedule, attn, mesh=sm, options=PDEOptions(
            T=opts.T, dt=min(opts.tau, 0.01), order=2, flow="surrogate",
            n_saves=opts.steps + 1, balance=False, clusters=False, progress=False))
        if pres.status != Status.SUCCESS:
            raise FloatingPointError(f"jko compare_pde: the PDE failed: {pres.message}")
        w2_pde = np.array([w2_sphere(res.centroids, res.centroids, res.masses[k],
                                     pres.masses[k], max_points=max(6000, res.areas.size))
                           for k in range(len(res.t))])
        cols["w2_vs_pde"] = w2_pde
    summary = {
        "status": res.status, "solver": "jko", "scenario": scenario.raw,
        "provenance": provenance(), "seed": scenario.seed,
        "mesh": {"spec": str(mesh_spec), "cells": int(res.areas.size)},
        "n_heads": int(schedule.heads_at(schedule.initial_theta()).H),
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
        write_json(stage / "summary.json", summary)
        write_csv(stage / "diagnostics.csv", cols)
        save_npz(stage / "density.npz", t=res.t, rho=res.rho, centroids=res.centroids,
                 areas=res.areas)
    logger.info("jko: wrote %s", out)
    return res
