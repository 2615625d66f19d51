"""Meshes in the jobs: the mesh a scenario names, its size before it exists, ``wflow mesh``'s cost.

* :func:`mesh_file` — the mesh spec as the mesh solvers load it (a scenario-relative file,
  else a shipped name or a generator spec);
* :func:`mesh_size` — the estimate's sizes (``cells``, ``H``) from the spec, before
  generating or reading the mesh (:func:`wflow.geometry.mesh.estimate.mesh_cells`:
  ``icosphere:N``, ``gmsh:N``, the default mesh, a gmsh file's header; ``None`` for a
  format without a header count: the job estimates on the loaded mesh);
* :func:`check_mesh_estimate` — ``wflow mesh --cells N``: a mesh is cheap to make; what it
  costs is the solvers that would run on it, so the cap :data:`MAX_MESH_CELLS` is argued
  from one PDE step (:mod:`wflow.pde.estimate`).
"""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path
from typing import Any

from ...geometry.mesh.estimate import estimate_mesh, mesh_cells
from ...infra.estimate import Estimate, EstimateError, check_estimate, format_seconds
from ...pde.estimate import PDE_PAIR_SECONDS
from .runner import heads_of

__all__ = ["MAX_MESH_CELLS", "check_mesh_estimate", "mesh_file", "mesh_size", "mesh_size_of"]

#: ``wflow mesh`` refuses more cells than this without ``--yes``: the mesh itself is cheap
#: (10⁷ cells: ~100 s, 5.3 GiB) but no solver runs on it within hours — one order-2 PDE step
#: costs ``3 M² PDE_PAIR_SECONDS`` (300 s at 10⁶ cells, and a run to T = 1 needs ~470 CFL
#: steps: 39 h), the JKO's kernel sums the same.
MAX_MESH_CELLS = 1_000_000


def check_mesh_estimate(*, cells: int, method: str = "icosphere", confirm: bool = False,
                        available: float | None = None) -> Estimate:
    """:func:`estimate_mesh` checked: memory, time, and :data:`MAX_MESH_CELLS` (``--yes``).

    Raises
    ------
    EstimateError
        More memory than available; or, without ``confirm``, more than
        :data:`CONFIRM_SECONDS` or more cells than :data:`MAX_MESH_CELLS`.
    """
    est = estimate_mesh(cells=cells, method=method)
    M = mesh_cells(f"{method}:{int(cells)}") or int(cells)
    if M > MAX_MESH_CELLS and not confirm:
        one_step = 3.0 * float(M) ** 2 * PDE_PAIR_SECONDS
        raise EstimateError(
            f"mesh: {M} cells ({est.describe()}) is above {MAX_MESH_CELLS:.0e} cells: one PDE "
            f"step on it is estimated at {format_seconds(one_step)} (no solver runs on it "
            "within hours); pass --yes to generate it anyway, or ask for fewer cells")
    return check_estimate(est, confirm=confirm, available=available)


def mesh_file(sc: Any, spec: str) -> str:
    """The mesh ``spec`` as the solvers load it.

    A file beside the scenario, if there is one (or if no shipped mesh has that name),
    else the shipped name or generator spec.
    """
    from ...geometry.mesh import MESH_DIR

    if spec != "default" and ":" not in spec:
        p = sc.path(spec)
        if p.is_file() or not (MESH_DIR / spec).is_file():
            return str(p)
    return spec


def _header_path(sc: Any, spec: str) -> Path | None:
    """The file whose header counts the cells (``None``: a generator spec or no file)."""
    from ...geometry.mesh import MESH_DIR

    if spec == "default" or ":" in spec:
        return None
    p = sc.path(spec)
    if p.is_file():
        return p
    q = MESH_DIR / spec
    return q if q.is_file() else None


def mesh_size(sc: Any, table: Any) -> dict | None:
    """``{"cells", "H"}`` of a mesh solver's estimate, before the mesh exists.

    The cells the mesh spec of ``table`` (its ``mesh``) names; ``None`` where the cell
    count is not known without reading the mesh.
    """
    cells = mesh_cells(table.mesh, path=_header_path(sc, table.mesh))
    if cells is None:
        return None
    return {"cells": cells, "H": heads_of(sc.build_schedule())}


def mesh_size_of(problem: Mapping[str, Any]) -> dict:
    """``{"cells", "H"}`` of a built mesh problem (its ``mesh`` and head count ``H``)."""
    return {"cells": int(problem["mesh"].num_global), "H": problem["H"]}
