"""The mesh job's cost check (``wflow mesh --cells N``): memory, time and a size cap.

A mesh is cheap to make; what it costs is the solvers that would run on it, so the cap
:data:`MAX_MESH_CELLS` is argued from one PDE step (:mod:`wflow.pde.estimate`).
"""

from __future__ import annotations

from ...geometry.mesh.estimate import estimate_mesh, mesh_cells
from ...infra.estimate import Estimate, EstimateError, check_estimate, format_seconds
from ...pde.estimate import PDE_PAIR_SECONDS

__all__ = ["MAX_MESH_CELLS", "check_mesh_estimate"]

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
