"""Triangulations, their tolerances and the mesh validation error.

Part of :mod:`wflow.geometry.mesh` (see its docstring for the pipeline).
"""

from __future__ import annotations

import logging
from typing import TYPE_CHECKING, NamedTuple

import numpy as np

if TYPE_CHECKING:  # pragma: no cover
    pass



logger = logging.getLogger(__name__)

#: Default tolerance on ``| |x| − 1 |`` for the vertices of a sphere mesh.
RADIUS_TOL = 1e-8
#: Meshes read by the solvers (:func:`load_mesh`) whose vertices are off the unit sphere
#: by more than the radius tolerance but at most this much are projected onto it (with a
#: logged warning). 1e-6 covers single-precision files (float32 carries a relative
#: rounding of 6e-8 per coordinate, e.g. pyvista's ``Sphere``: ``| |x| − 1 | ≈ 4e-8``),
#: while a mesh of another radius or a wrong unit is still refused.
PROJECT_TOL = 1e-6


class MeshValidationError(ValueError):
    """A mesh failed a named validity check (``.check`` holds the name)."""

    def __init__(self, check: str, message: str) -> None:
        super().__init__(f"mesh check '{check}' failed: {message}")
        self.check = check
        self.detail = message

    def __reduce__(self) -> tuple:  # picklable (MPI broadcasts errors from rank 0)
        return (type(self), (self.check, self.detail))


class Triangulation(NamedTuple):
    """A triangulated surface: ``points (V, 3)`` float64 and ``cells (M, 3)`` int64."""

    points: np.ndarray
    cells: np.ndarray


class MeshReport(NamedTuple):
    """Size and quality of a validated sphere triangulation (flat triangles)."""

    cells: int
    vertices: int
    edges: int
    min_area: float
    max_area: float
    total_area: float
    min_edge: float
    max_edge: float
    max_radius_error: float
    flipped: bool


