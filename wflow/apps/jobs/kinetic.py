"""The kinetic solver's file job: scenario → ``summary.json``, ``diagnostics.csv``, slices.

:func:`run_kinetic` runs the causal (decoder) system's mean-field limit
(:func:`wflow.kinetic.solve_kinetic`) of a scenario: ``[attention] mask`` must be causal,
``[kinetic]`` gives the slices (``S``, the quadrature, ``alibi``), ``[pde]`` the mesh and
the finite volumes every slice shares, ``[density]`` (or the law of ``[tokens]``) the
initial density of every position. The slope ``λ`` of the limit bias
``b(s, s') = −λ(s − s')`` is ``[kinetic] alibi`` when given, else the ``[attention] bias``
(ALiBi with ``lam``: ``λ = lam``; with ``slope``: ``λ = slope · [tokens] n``, the
token-level slope times the number of tokens). The only room of :mod:`wflow.kinetic`
that writes files.
"""

from __future__ import annotations

import contextlib
import logging
from collections.abc import Mapping
from dataclasses import replace
from pathlib import Path
from typing import Any

import numpy as np

from ...attention.mask import ALiBi, get_bias
from ...geometry.density import density_spec_from_scenario
from ...infra.schema import ScenarioError
from ...kinetic.options import KineticTable
from ...kinetic.result import KineticResult
from ...kinetic.solver import solve_kinetic
from ...kinetic.spec import SPEC
from .mesh import mesh_file, mesh_size, mesh_size_of
from .noise import job_diffusion
from .runner import Job, heads_of, run_job

__all__ = ["JOB", "run_kinetic", "limit_alibi"]

logger = logging.getLogger(__name__)


def limit_alibi(scenario: Any, table: KineticTable) -> tuple[float, str]:
    """``(λ, source)``: the slope of the limit bias and where it came from.

    ``[kinetic] alibi`` when the scenario sets it; else ``[attention] bias``: an ALiBi
    table ``{type = "alibi", lam, n}`` gives ``λ = lam``, ``{type = "alibi", slope}``
    gives ``λ = slope · [tokens] n``; no bias gives ``λ = 0``.

    Raises
    ------
    ScenarioError
        A user's bias callable (no limit in ``s``), or ``[kinetic] alibi`` and an
        ``[attention] bias`` that disagree; the message names the key.
    """
    raw = scenario.attention.get("bias", "none")
    bias = get_bias(raw, "attention.bias")
    if bias is not None and not isinstance(bias, ALiBi):
        raise ScenarioError("attention.bias: the kinetic limit takes the ALiBi bias only (a "
                            "token-level b(i, j) has no limit in s = i/n); give [kinetic] "
                            "alibi = λ and no attention.bias")
    derived = None
    if isinstance(bias, ALiBi):
        lam = raw.get("lam") if isinstance(raw, Mapping) else None
        n = int(scenario.tokens.get("n", 0))
        derived = (float(lam), "attention.bias (lam)") if lam is not None else (
            bias.slope * n, f"attention.bias (slope {bias.slope:g} × tokens.n = {n})")
    if table.alibi_given:
        lam = float(table.options.alibi)
        if derived is not None and not np.isclose(derived[0], lam, rtol=1e-12, atol=0.0):
            raise ScenarioError(f"kinetic.alibi: {lam:g} disagrees with {derived[1]}, which "
                                f"gives λ = {derived[0]:g}; give one of them")
        return lam, "kinetic.alibi"
    return derived if derived is not None else (0.0, "none")


def _table(sc: Any, overrides: dict[str, Any]) -> KineticTable:
    """``[kinetic]`` (and its ``[pde]``) as parsed at load, with the command line's overrides."""
    table = sc.table("kinetic")
    mesh = overrides.pop("mesh", None)
    D, key = job_diffusion(sc, overrides)
    if D > 0:
        raise ScenarioError(f"{key}: token diffusion is not in the kinetic solver (D = {D:g}); "
                            "leave it at 0")
    S = overrides.pop("S", None)
    pde = {k: v for k, v in overrides.items() if v is not None}
    table = replace(table, mesh=table.mesh if mesh is None else mesh,
                    S=table.S if S is None else S,
                    pde=replace(table.pde, **pde) if pde else table.pde)
    # the run's options, built once here: a [pde] key the causal system has no use for
    # exits 2 naming it, before any estimate (KineticTable.options)
    _ = table.options
    return table


def _build(scenario: Any, table: KineticTable, comm: Any) -> dict:
    from ...geometry.mesh import load_mesh

    if scenario.d != 3:
        raise ValueError(f"attention.d: the kinetic solver works on S² (d = 3), got "
                         f"{scenario.d}")
    attn = scenario.attention_obj()
    if attn.mask is None:
        raise ScenarioError("attention.mask: the kinetic limit is the causal (decoder) "
                            "system's; set attention.mask = 'causal' (the exchangeable "
                            "model's limit is `wflow pde`)")
    lam, source = limit_alibi(scenario, table)
    mesh_spec = mesh_file(scenario, table.mesh)
    schedule = scenario.build_schedule()
    sm = load_mesh(mesh_spec, comm=comm)
    return {"mesh_spec": mesh_spec, "density": density_spec_from_scenario(scenario),
            "attn": replace(attn, bias=None), "mask": scenario.attention.get("mask"),
            "schedule": schedule, "mesh": sm, "H": heads_of(schedule),
            "alibi": (lam, source)}


def _solve(p: dict, table: KineticTable, comm: Any) -> KineticResult:
    return solve_kinetic(p["density"], p["schedule"], p["attn"], mesh=p["mesh"],
                         options=replace(table.options, alibi=p["alibi"][0]))


def _write(scenario: Any, table: KineticTable, p: dict, res: KineticResult,
           out: str | Path, comm: Any) -> None:
    from ...infra.io import check_finite, provenance, run_directory, save_npz, write_csv, write_json

    sm = p["mesh"]
    lam, source = p["alibi"]
    summary = {
        "status": res.status, "solver": "kinetic", "scenario": scenario.raw,
        "provenance": provenance(), "seed": scenario.seed,
        "mesh": {"spec": p["mesh_spec"], "cells": sm.num_global,
                 "min_area": float(res.areas.min()), "max_area": float(res.areas.max())},
        "n_heads": p["H"], "mask": str(p["mask"]),
        "alibi": {"lambda": lam, "source": source},
        "density": {k: (np.asarray(v).tolist() if isinstance(v, np.ndarray) else v)
                    for k, v in p["density"].items()},
        **res.summary(),
        "checks": dict(res.checks),
        "outputs": {"slices.npz": "t (n,), s (S,), rho (n, S, M) the density of each slice "
                                  "(Σ_K ρ_K |K| = 1), mass (n, S), centroids (M, 3), "
                                  "areas (M,); cells in the mesh file's order",
                    "diagnostics.csv": "one row per output time and slice"},
    }
    if comm.rank == 0:
        check_finite("summary.final_slices", summary["final_slices"])
    mean = np.asarray(res.history["mean"])  # (n, S, 3)
    n, S = res.mass.shape
    cols = {"t": np.repeat(res.t, S), "slice": np.tile(np.arange(S), n),
            "s": np.tile(res.s, n), "mass": res.mass.ravel(),
            "mean_x": mean[..., 0].ravel(), "mean_y": mean[..., 1].ravel(),
            "mean_z": mean[..., 2].ravel()}
    with contextlib.ExitStack() as stack:
        stage = stack.enter_context(run_directory(out)) if comm.rank == 0 else None
        if comm.rank == 0:
            write_json(stage / "summary.json", summary)
            write_csv(stage / "diagnostics.csv", cols)
            save_npz(stage / "slices.npz", t=res.t, s=res.s, rho=res.rho, mass=res.mass,
                     centroids=res.centroids, areas=res.areas)
        comm.barrier()
    logger.info("kinetic: wrote %s", out)


def _unjudged(p: dict, table: KineticTable) -> str | None:
    """The note of a run that will end ``completed`` (no ``pde.rtol``; Job.unjudged)."""
    from ...kinetic.solver import NO_CHAIN
    from ...pde.accuracy import unestimated_note

    return None if table.pde.tolerance is not None else unestimated_note(NO_CHAIN)


#: ``wflow kinetic``: the spec and what its job does beyond the runner.
JOB = Job(spec=SPEC, table=_table, size=mesh_size, build=_build, size_of=mesh_size_of,
          solve=_solve, write=_write, unjudged=_unjudged)


def run_kinetic(scenario: Any, out: str | Path, *, progress: bool | None = None,
                overrides: Mapping[str, Any] | None = None, comm: Any = None,
                confirm: bool = False) -> KineticResult:
    """Run the kinetic limit of a causal scenario and write ``out/`` (collective under MPI).

    Writes ``summary.json`` (scenario echo, mesh, ``λ`` and its source, final diagnostics
    per slice, stats), ``diagnostics.csv`` (one row per output time and slice: mass and
    first moment) and ``slices.npz`` (``t`` ``(n,)``, ``s`` ``(S,)``, ``rho``
    ``(n, S, M)``, ``mass`` ``(n, S)``, ``centroids``, ``areas``; cells in the mesh
    file's order). The cost is estimated before anything is computed (refused if it
    cannot fit; above an hour only with ``confirm``).

    Raises
    ------
    ScenarioError
        No causal mask, token diffusion, a non-ALiBi bias, or inconsistent ``λ``.
    FloatingPointError
        The run failed (nothing is written).
    EstimateError
        The run cannot fit in memory, or was not confirmed (nothing computed).
    """
    from mpi4py import MPI

    comm = MPI.COMM_WORLD if comm is None else comm
    return run_job(JOB, scenario, out, overrides={**(overrides or {}), "progress": progress},
                   confirm=confirm, comm=comm)
