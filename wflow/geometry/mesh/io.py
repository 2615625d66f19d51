"""Reading and writing surface triangulations with meshio (any format meshio reads).

Part of :mod:`wflow.geometry.mesh` (see its docstring for the pipeline).
"""

from __future__ import annotations

import contextlib
import io
import logging
import os
import shutil
import tempfile
from pathlib import Path
from typing import TYPE_CHECKING

import numpy as np

if TYPE_CHECKING:  # pragma: no cover
    pass

from .triangulation import MeshValidationError, Triangulation

logger = logging.getLogger(__name__)


def read_surface(path: str | Path) -> Triangulation:
    """Read the triangles of any meshio-readable surface mesh (no validation).

    Vertices not used by a triangle are dropped. Raises ``FileNotFoundError``
    for a missing file and :class:`MeshValidationError` (check ``shape``) for a
    mesh without triangles or with other 2-D cells (quads, polygons).
    """
    import meshio

    path = Path(path)
    if not path.is_file():
        raise FileNotFoundError(f"mesh: file {str(path)!r} does not exist")
    said = io.StringIO()
    try:  # meshio prints (gmsh: blank lines) and, on some failures, calls sys.exit(1)
        with contextlib.redirect_stdout(said), contextlib.redirect_stderr(said):
            msh = meshio.read(path)
    except (Exception, SystemExit) as exc:  # noqa: BLE001 - any reader failure is bad input
        why = " ".join(str(exc).split()) if not isinstance(exc, SystemExit) else ""
        why = why or " ".join(said.getvalue().split()) or type(exc).__name__
        raise MeshValidationError("read", f"{path.name}: meshio cannot read it ({why}); "
                                  "formats: .msh, .vtu, .vtk (legacy 4.2), .stl, .ply, .obj, "
                                  ".xdmf, ...") from None
    tris = [b.data for b in msh.cells if b.type == "triangle"]
    other2d = sorted({b.type for b in msh.cells if b.type in
                      ("quad", "polygon", "triangle6", "quad8", "quad9", "triangle7")})
    if other2d:
        raise MeshValidationError(
            "shape", f"{path.name}: only linear triangles are supported, found {other2d}")
    if not tris:
        raise MeshValidationError("shape", f"{path.name}: no triangle cells in the file")
    cells = np.concatenate(tris).astype(np.int64)
    pts = np.asarray(msh.points, dtype=np.float64)
    if pts.ndim != 2 or pts.shape[1] not in (2, 3):
        raise MeshValidationError("shape", f"{path.name}: points have shape {pts.shape}")
    if pts.shape[1] == 2:
        raise MeshValidationError("shape", f"{path.name}: points are 2-D, a sphere needs 3-D")
    if cells.size and (cells.min() < 0 or cells.max() >= pts.shape[0]):
        raise MeshValidationError("indices", f"{path.name}: cell vertex index out of range")
    used, inv = np.unique(cells, return_inverse=True)
    if used.size < pts.shape[0]:
        logger.info("%s: dropping %d vertices not used by any triangle",
                    path.name, pts.shape[0] - used.size)
    return Triangulation(pts[used], inv.reshape(-1, 3).astype(np.int64))


def write_surface(path: str | Path, tri: Triangulation, *, overwrite: bool = True) -> list[Path]:
    """Write a triangulation with meshio (format from the suffix; ``.msh`` = gmsh 4.1 binary).

    Atomic: meshio writes into a hidden staging folder beside ``path`` (with the final
    file names, so an ``.xdmf`` still finds its ``.h5``) and the files are then moved into
    place; a failed write leaves nothing. ``overwrite=False`` refuses (``FileExistsError``)
    to replace any existing file. Returns the files written (``path`` first). Modes follow
    the umask.
    """
    import meshio

    from ...infra.io import current_umask

    path = Path(path)
    if path.is_dir():
        raise IsADirectoryError(f"mesh --out {path}: is a folder, expected a file name")
    path.parent.mkdir(parents=True, exist_ok=True)
    msh = meshio.Mesh(np.asarray(tri.points, dtype=np.float64),
                      [("triangle", np.asarray(tri.cells, dtype=np.int64))])
    stage = Path(tempfile.mkdtemp(prefix=f".{path.name}.partial-", dir=path.parent))
    try:
        os.chmod(stage, 0o777 & ~current_umask())
        with contextlib.redirect_stdout(io.StringIO()):
            if path.suffix == ".msh":
                meshio.write(stage / path.name, msh, file_format="gmsh", binary=True)
            else:
                meshio.write(stage / path.name, msh)
        made = sorted(stage.iterdir(), key=lambda f: f.name != path.name)
        targets = [path.parent / f.name for f in made]
        clash = [t for t in targets if t.exists() or t.is_symlink()]
        if clash and not overwrite:
            raise FileExistsError(f"mesh --out {path}: {clash[0]} exists; pass --overwrite to "
                                  "replace it")
        bad = [t for t in clash if t.is_dir() and not t.is_symlink()]
        if bad:
            raise IsADirectoryError(f"mesh --out {path}: {bad[0]} is a folder")
        for f, t in zip(made, targets, strict=True):
            os.replace(f, t)
    finally:
        shutil.rmtree(stage, ignore_errors=True)
    return targets


