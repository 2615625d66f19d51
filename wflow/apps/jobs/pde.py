"""The PDE's file job: scenario → ``summary.json``, ``diagnostics.csv``, densities, renders.

:func:`run_pde` validates, solves, checks every number is finite and only then writes
its output directory atomically (collective under MPI, rank 0 writes); a failed run
writes nothing, an inaccurate one is written with its status and reason; this is the only
room of :mod:`wflow.pde` that writes files (:func:`write_xdmf`, :func:`render_snapshots`).
"""

from __future__ import annotations

import logging
from collections.abc import Mapping
from dataclasses import replace
from pathlib import Path
from typing import Any

import numpy as np

from ...geometry.density import density_spec_from_scenario
from ...geometry.mesh import SphereMesh
from ...pde.options import PDETable
from ...pde.solver import PDEResult, solve_pde
from ...pde.spec import SPEC
from .mesh import mesh_file, mesh_size, mesh_size_of
from .noise import job_diffusion
from .runner import Job, heads_of, run_job

__all__ = [
    "JOB",
    "run_pde",
    "write_xdmf",
    "render_snapshots",
]

logger = logging.getLogger(__name__)


def render_snapshots(mesh: SphereMesh, t: np.ndarray, rho: np.ndarray, out_dir: str | Path, *,
                     size: tuple[int, int] = (1160, 560), prefix: str = "rho",
                     shared_range: bool = False) -> list[Path]:
    """PNG snapshots of ``rho[k]`` on the sphere: two opposite views (pyvista off-screen).

    Both views share one logarithmic colour scale, ``[lo, max ρ_k]`` per snapshot
    (``shared_range``: over all snapshots; :func:`wflow.apps.animate.log_colour_range`:
    ``lo`` the smallest positive density, at most 6 decades below the maximum; smaller
    values get the lowest colour). A clustered density spans decades: on a linear scale
    every cell away from the cluster, the whole opposite side included, had one colour.
    The colour bar stands beside the second view, clear of the sphere. Collective under
    MPI (gathers the cell vertices); rank 0 writes.
    """
    import os

    from ..animate import log_colour_range

    verts = mesh.gather_owned(mesh.cell_vertices)  # (M, 3, 3), original order
    if mesh.comm.rank != 0:
        return []
    os.environ.setdefault("VTK_DEFAULT_OPENGL_WINDOW", "vtkEGLRenderWindow")
    import pyvista as pv

    pv.OFF_SCREEN = True
    M = verts.shape[0]
    faces = np.hstack([np.full((M, 1), 3), np.arange(3 * M).reshape(M, 3)]).ravel()
    out_dir = Path(out_dir)
    out_dir.mkdir(parents=True, exist_ok=True)
    # look at the densest cell of the last snapshot (clusters stay in view), and from behind
    cen = verts.mean(axis=1)
    u = cen[int(np.argmax(rho[-1]))]
    u = u / np.linalg.norm(u)
    up = np.array([0.0, 0.0, 1.0]) if abs(u[2]) < 0.9 else np.array([1.0, 0.0, 0.0])
    files = []
    for k in range(rho.shape[0]):
        lo, hi = log_colour_range(rho if shared_range else rho[k])
        poly = pv.PolyData(verts.reshape(-1, 3), faces)
        poly.cell_data["density"] = np.clip(rho[k], lo, None)
        pl = pv.Plotter(off_screen=True, window_size=list(size), shape=(1, 2))
        # the camera at 7 radii: the sphere fills the middle of each view, the colour bar
        # (x ≥ 0.84 of the second view) and its labels stay clear of it
        for j, (eye, label) in enumerate(((7.0 * u, "densest cell at T"),
                                          (-7.0 * u, "opposite side"))):
            pl.subplot(0, j)
            pl.add_mesh(poly, scalars="density", cmap="viridis", clim=[lo, hi], log_scale=True,
                        show_scalar_bar=(j == 1), lighting=False,
                        scalar_bar_args={"title": "density (log)", "vertical": True,
                                         "position_x": 0.84, "position_y": 0.12,
                                         "width": 0.05, "height": 0.72, "fmt": "%.2g",
                                         "n_labels": 4})
            pl.add_axes()
            pl.add_text(f"t = {t[k]:.4g} ({label})", font_size=11)
            pl.camera_position = [tuple(eye), (0, 0, 0), tuple(up)]
        f = out_dir / f"{prefix}_{k:04d}.png"
        pl.screenshot(str(f))
        pl.close()
        files.append(f)
    return files


def write_xdmf(mesh: SphereMesh, t: np.ndarray, rho: np.ndarray, path: str | Path) -> None:
    """ParaView time series of ρ: cell data ``rho`` per output time, cells in the mesh file's order.

    The same cell order as ``density.npz``: ``rho[k, i]`` belongs to cell ``i`` of the mesh
    file in both (DOLFINx's internal order is never written). ``path`` ends in ``.xdmf``;
    the heavy data go to the ``.h5`` beside it: ``/Mesh/geometry`` ``(V, 3)``,
    ``/Mesh/topology`` ``(M, 3)`` (vertices deduplicated from the cells' coordinates),
    ``/Function/rho/<k>`` ``(M,)`` and ``/Function/t`` ``(S,)``. Collective (gathers the cell
    vertices); rank 0 writes.
    """
    import h5py

    verts = mesh.gather_owned(mesh.cell_vertices)  # (M, 3, 3), original order
    if mesh.comm.rank != 0:
        return
    path = Path(path)
    pts, inv = np.unique(verts.reshape(-1, 3), axis=0, return_inverse=True)
    cells = inv.reshape(-1, 3).astype(np.int64)
    M, V = cells.shape[0], pts.shape[0]
    h5 = path.with_suffix(".h5")
    with h5py.File(h5, "w") as f:
        f["Mesh/geometry"] = pts
        f["Mesh/topology"] = cells
        f["Function/t"] = np.asarray(t, dtype=np.float64)
        for k in range(rho.shape[0]):
            f[f"Function/rho/{k}"] = np.asarray(rho[k], dtype=np.float64)
    grids = []
    for k in range(rho.shape[0]):
        grids.append(
            f'      <Grid Name="rho_{k}" GridType="Uniform">\n'
            f'        <Time Value="{float(t[k])!r}"/>\n'
            f'        <Topology TopologyType="Triangle" NumberOfElements="{M}" '
            'NodesPerElement="3">\n'
            f'          <DataItem Dimensions="{M} 3" NumberType="Int" Precision="8" '
            f'Format="HDF">{h5.name}:/Mesh/topology</DataItem>\n'
            '        </Topology>\n'
            '        <Geometry GeometryType="XYZ">\n'
            f'          <DataItem Dimensions="{V} 3" NumberType="Float" Precision="8" '
            f'Format="HDF">{h5.name}:/Mesh/geometry</DataItem>\n'
            '        </Geometry>\n'
            '        <Attribute Name="rho" AttributeType="Scalar" Center="Cell">\n'
            f'          <DataItem Dimensions="{M}" NumberType="Float" Precision="8" '
            f'Format="HDF">{h5.name}:/Function/rho/{k}</DataItem>\n'
            '        </Attribute>\n'
            '      </Grid>\n')
    path.write_text('<?xml version="1.0"?>\n<Xdmf Version="3.0">\n  <Domain>\n'
                    '    <Grid Name="rho" GridType="Collection" CollectionType="Temporal">\n'
                    + "".join(grids) + "    </Grid>\n  </Domain>\n</Xdmf>\n",
                    encoding="utf-8")


def _table(sc: Any, overrides: dict[str, Any]) -> PDETable:
    """``[pde]`` as parsed when the scenario loaded, with the command line's overrides."""
    table = sc.table("pde")
    mesh = overrides.pop("mesh", None)
    D, _ = job_diffusion(sc, overrides)  # [attention] diffusion or --diffusion
    changes = {k: v for k, v in overrides.items() if v is not None}
    if D != table.options.diffusion:
        changes["diffusion"] = D
    return PDETable(table.mesh if mesh is None else mesh,
                    replace(table.options, **changes) if changes else table.options)


def _build(scenario: Any, table: PDETable, comm: Any) -> dict:
    from ...geometry.mesh import load_mesh

    mesh_spec = mesh_file(scenario, table.mesh)
    if scenario.d != 3:
        raise ValueError(f"attention.d: the PDE solver works on S² (d = 3), got {scenario.d}")
    density = density_spec_from_scenario(scenario)
    attn = scenario.attention_obj()
    schedule = scenario.build_schedule()
    sm = load_mesh(mesh_spec, comm=comm)
    return {"mesh_spec": mesh_spec, "density": density, "attn": attn, "schedule": schedule,
            "mesh": sm, "H": heads_of(schedule)}


def _solve(p: dict, table: PDETable, comm: Any) -> PDEResult:
    return solve_pde(p["density"], p["schedule"], p["attn"], mesh=p["mesh"],
                     options=table.options)


def _write(scenario: Any, table: PDETable, p: dict, res: PDEResult, out: str | Path,
           comm: Any, *, render: bool = False, gif: bool = False) -> None:
    import contextlib

    from ...infra.io import check_finite, history_columns, provenance, run_directory
    from ...infra.io.outputs import write_run_files

    mesh_spec, sm, density, schedule = p["mesh_spec"], p["mesh"], p["density"], p["schedule"]
    summary = {
        "status": res.status, "solver": "pde", "scenario": scenario.raw,
        "provenance": provenance(), "seed": scenario.seed,
        "mesh": {"spec": mesh_spec, "cells": sm.num_global,
                 "min_area": float(res.areas.min()), "max_area": float(res.areas.max())},
        "n_heads": heads_of(schedule),
        "density": {k: (np.asarray(v).tolist() if isinstance(v, np.ndarray) else v)
                    for k, v in density.items()},
        **res.summary(),
        "outputs": {"density.npz": "t (S,), rho (S, M), centroids (M, 3), areas (M,)",
                    "density.xdmf": "ParaView time series, cell data 'rho', cells in the "
                                     "mesh file's order (as density.npz)",
                    "diagnostics.csv": "one row per output time"},
        "conventions": {
            "measure": "μ_h = Σ_K m_K δ_{ĉ_K}, m_K = ρ_K |K|, ĉ_K = c_K/|c_K|",
            "E": "Σ_h w_h (1/2β) Σ_KL m_K m_L Φ(β ĉ_Kᵀ A_h ĉ_L)",
            "balance_edi": "ΔE − ∫∂_tE − Itô − M − sign·∫(½speed2 + ½slope2)",
            "entropy": "Σ_K m_K H(p_K·), p_KL = m_L e^{s_KL}/Z_K (softmax rows over cells)",
        },
    }
    if comm.rank == 0:
        check_finite("summary.final", summary["final"])
    cols = history_columns(res.t, {k: np.asarray(v)[None]
                                   for k, v in _balance_from_t0(res).items()})
    with contextlib.ExitStack() as stack:
        stage = stack.enter_context(run_directory(out)) if comm.rank == 0 else None
        stage = Path(comm.bcast(None if stage is None else str(stage), root=0))
        write_xdmf(sm, res.t, res.rho, stage / "density.xdmf")
        if render:
            render_snapshots(sm, res.t, res.rho, stage / "render")
        if gif:
            verts = sm.gather_owned(sm.cell_vertices)  # collective
            if comm.rank == 0:
                from ..animate import pde_pictures

                pde_pictures(verts, res, stage, stochastic=schedule.stochastic)
        if comm.rank == 0:
            write_run_files(stage, summary, cols, {"density.npz": {
                "t": res.t, "rho": res.rho, "centroids": res.centroids, "areas": res.areas}})
        comm.barrier()
    logger.info("pde: wrote %s", out)


def _balance_from_t0(res: PDEResult) -> dict[str, np.ndarray]:
    """The history with every ``balance_*`` column from ``t_0`` on (0 there, nothing run).

    With token diffusion the solver records the free-energy balance columns
    (``balance_free_edi``, ...) from the first step on only (one row short of ``t``);
    a balance residual over ``[0, t_0]`` is 0, so the row at ``t_0`` is 0.
    """
    n = len(res.t)
    return {k: (np.concatenate([np.zeros((1, *np.shape(v)[1:])), np.asarray(v)])
                if k.startswith("balance_") and len(v) == n - 1 else v)
            for k, v in res.history.items()}


def _unjudged(p: dict, table: PDETable) -> str | None:
    """The note of a run whose status will be ``completed`` (Job.unjudged), or None.

    ``balance = false`` records no chain rule; without ``rtol`` nothing else judges the run
    (:func:`wflow.pde.accuracy.unestimated`).
    """
    from ...pde.accuracy import unestimated_note
    from ...pde.solver import BALANCE_REMEDY, NO_CHAIN_RECORDED

    o = table.options
    if o.balance or o.tolerance is not None:
        return None
    return unestimated_note(NO_CHAIN_RECORDED, BALANCE_REMEDY)


#: ``wflow pde``: the spec and what its job does beyond the runner.
JOB = Job(spec=SPEC, table=_table, size=mesh_size, build=_build, size_of=mesh_size_of,
          solve=_solve, write=_write, unjudged=_unjudged)


def run_pde(scenario: Any, out: str | Path, *, render: bool = False,
            progress: bool | None = None, overrides: Mapping[str, Any] | None = None,
            comm: Any = None, gif: bool = False, confirm: bool = False) -> PDEResult:
    """Run the PDE of a scenario and write ``out/`` (collective under MPI).

    Writes ``summary.json`` (scenario echo, mesh, options, final diagnostics, balance,
    stats), ``diagnostics.csv`` (one row per output time), ``density.npz`` (``t``
    ``(S,)``, ``rho`` ``(S, M)``, ``centroids`` ``(M, 3)``, ``areas`` ``(M,)``, cells in the
    mesh file's order), ``density.xdmf`` + ``density.h5`` (ParaView: DG0 cell data
    ``rho`` per output time, cells in the same mesh-file order as ``density.npz``) and,
    with ``render``, ``render/rho_XXXX.png``; with ``gif``, ``density.gif`` (one frame per
    output time, up to 60) and ``run.png`` (``E``, ``G²``, the energy balance;
    :mod:`wflow.apps.animate`).

    ``summary.json`` carries the status, its reason and the accuracy checks; a run that is
    ``"inaccurate"`` (finite, conservative, positive, but the chain-rule residual exceeds
    its tolerance, :mod:`wflow.status`) or stopped at ``max_steps`` is written all the
    same, so that it can be inspected; the returned result carries the status.

    Before solving, the cost is estimated on the loaded mesh
    (:func:`wflow.infra.estimate.check_estimate`; collective: every rank gets the same
    answer): a run that cannot fit in memory is refused, one above an hour needs
    ``confirm`` (``--yes``) on a terminal.

    Raises
    ------
    FloatingPointError
        If the run failed (non-finite values, collapsed step; nothing is written).
    EstimateError
        The run cannot fit in memory, or was not confirmed (nothing computed).
    """
    from mpi4py import MPI

    comm = MPI.COMM_WORLD if comm is None else comm
    return run_job(JOB, scenario, out, overrides={**(overrides or {}), "progress": progress},
                   confirm=confirm, comm=comm, render=render, gif=gif)
