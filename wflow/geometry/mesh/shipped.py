"""The meshes shipped with the repository (``meshes/``) and the default mesh.

Part of :mod:`wflow.geometry.mesh` (see its docstring for the pipeline).
"""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING

if TYPE_CHECKING:  # pragma: no cover
    pass



#: Directory of the meshes shipped with the repository.
MESH_DIR = Path(__file__).resolve().parents[3] / "meshes"
#: The default mesh of a PDE scenario (regenerated as ``icosphere:2420`` if absent).
DEFAULT_MESH = "sphere_2420.msh"


def shipped_meshes() -> list[Path]:
    """The mesh files in ``meshes/`` (sorted by cell count in the name)."""
    if not MESH_DIR.is_dir():
        return []
    files = list(MESH_DIR.glob("sphere_*.msh"))
    return sorted(files, key=lambda f: int(f.stem.split("_")[1]))


def default_mesh_path() -> Path:
    """Path of the default scenario mesh ``meshes/sphere_2420.msh``."""
    return MESH_DIR / DEFAULT_MESH


