"""Triangulated unit spheres: generation, meshio I/O, validation, DOLFINx conversion.

Pipeline
--------
1. **Triangulation** ``(points (V, 3), cells (M, 3))``: generated
   (:func:`icosphere`, :func:`gmsh_sphere`, :func:`generate_sphere`) or read
   with meshio (:func:`read_surface`, any format meshio reads).
2. **Validation** (:func:`validate_sphere`): a closed, consistently oriented,
   single-cover triangulation of the *unit* sphere. Each check has a name; a
   failure raises :class:`MeshValidationError` (a ``ValueError``) whose message
   starts with ``mesh check '<name>' failed``. Checks, in order:
   ``shape``, ``finite``, ``indices``, ``radius``, ``degenerate``,
   ``duplicate_vertices``, ``manifold`` (edges with more than two cells),
   ``closed`` (holes: edges with one cell), ``orientation`` (each edge
   traversed once in each direction), ``connected``, ``euler``
   (``V − E + F = 2``), ``covering`` (the signed solid angles of the cells sum
   to ``±4π``: one sheet). A consistently but inward-oriented mesh is
   flipped to outward orientation (logged), not rejected.
3. **DOLFINx manifold mesh** (:class:`SphereMesh`, tdim 2, gdim 3, flat P1
   triangles). Every geometric quantity the solver uses comes from DOLFINx:
   cell areas, centroids and cell normals are assembled DG0 forms
   (``∫_K 1 dx``, ``∫_K x dx / |K|``, ``∫_K CellNormal dx / |K|``); the
   facet-to-cell connectivity, the ghost layer and the owner of each cell come
   from the DOLFINx topology; facet (edge) endpoints and cell vertices are read
   from ``mesh.geometry``. In parallel the mesh is distributed by DOLFINx with
   ``GhostMode.shared_facet`` so every facet of an owned cell has both cells
   on the rank.

Facet geometry (edge ``e`` between cells ``K⁺`` and ``K⁻``): length ``|e|``
(flat), conormals ``n⁺`` (in the plane of ``K⁺``, orthogonal to ``e``,
pointing out of ``K⁺``) and ``n⁻``, and the single-valued normal
``n_e = ½(n⁺ − n⁻)`` (``≈`` the unit normal of the great circle through
``e``, pointing from ``K⁺`` to ``K⁻``). Gauss–Legendre points on the flat
edge give the flux quadrature.
"""

from __future__ import annotations

from .dolfinx import SphereMesh, load_mesh
from .dual import DualGeometry, NotWellCentredError, dual_from_cell_vertices, dual_geometry
from .generation import generate_sphere, gmsh_sphere, icosphere
from .io import read_surface, write_surface
from .shipped import DEFAULT_MESH, MESH_DIR, default_mesh_path, shipped_meshes
from .triangulation import PROJECT_TOL, RADIUS_TOL, MeshReport, MeshValidationError, Triangulation
from .validation import mesh_stats, project_to_sphere, validate_sphere

__all__ = [
    "DualGeometry",
    "NotWellCentredError",
    "dual_geometry",
    "dual_from_cell_vertices",
    "MeshValidationError",
    "MeshReport",
    "Triangulation",
    "SphereMesh",
    "icosphere",
    "gmsh_sphere",
    "generate_sphere",
    "read_surface",
    "write_surface",
    "validate_sphere",
    "mesh_stats",
    "load_mesh",
    "shipped_meshes",
    "default_mesh_path",
    "MESH_DIR",
    "DEFAULT_MESH",
    "RADIUS_TOL",
    "PROJECT_TOL",
    "project_to_sphere",
]
