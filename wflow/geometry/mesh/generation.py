"""Generated sphere triangulations: icospheres (well centred) and gmsh meshes.

Part of :mod:`wflow.geometry.mesh` (see its docstring for the pipeline).
"""

from __future__ import annotations

import logging
import math
from typing import TYPE_CHECKING

import numpy as np

if TYPE_CHECKING:  # pragma: no cover
    pass

from .triangulation import Triangulation
from .validation import _orient_outward, validate_sphere

logger = logging.getLogger(__name__)




def _icosahedron() -> tuple[np.ndarray, np.ndarray]:
    t = (1.0 + math.sqrt(5.0)) / 2.0
    v = np.array([[-1, t, 0], [1, t, 0], [-1, -t, 0], [1, -t, 0],
                  [0, -1, t], [0, 1, t], [0, -1, -t], [0, 1, -t],
                  [t, 0, -1], [t, 0, 1], [-t, 0, -1], [-t, 0, 1]], dtype=np.float64)
    v /= np.linalg.norm(v, axis=1, keepdims=True)
    f = np.array([[0, 11, 5], [0, 5, 1], [0, 1, 7], [0, 7, 10], [0, 10, 11],
                  [1, 5, 9], [5, 11, 4], [11, 10, 2], [10, 7, 6], [7, 1, 8],
                  [3, 9, 4], [3, 4, 2], [3, 2, 6], [3, 6, 8], [3, 8, 9],
                  [4, 9, 5], [2, 4, 11], [6, 2, 10], [8, 6, 7], [9, 8, 1]], dtype=np.int64)
    return v, f


def icosphere(frequency: int) -> Triangulation:
    """Geodesic icosphere: each icosahedron face split into ``frequency²`` triangles.

    Face ``(A, B, C)`` gets the lattice points ``(i A + j B + k C)/n``,
    ``i + j + k = n``, projected radially to the unit sphere; points on shared
    edges are created once (keyed by the edge's end vertices), so the result is
    conforming. ``20 n²`` cells, ``10 n² + 2`` vertices, outward orientation.
    ``frequency = 2^k`` reproduces ``k`` midpoint refinements.

    Parameters
    ----------
    frequency : int
        Subdivision ``n >= 1``.
    """
    n = int(frequency)
    if n < 1 or n != frequency:
        raise ValueError(f"frequency: must be an integer >= 1, got {frequency!r}")
    v0, f0 = _icosahedron()
    index: dict[tuple, int] = {}
    pts: list[np.ndarray] = []

    def key(face: int, abc: tuple[int, int, int], ijk: tuple[int, int, int]) -> tuple:
        nz = [(abc[s], ijk[s]) for s in range(3) if ijk[s] > 0]
        if len(nz) == 1:  # icosahedron vertex
            return ("v", nz[0][0])
        if len(nz) == 2:  # on an icosahedron edge: position measured from the smaller vertex
            (a, ia), (b, ib) = sorted(nz)
            return ("e", a, b, ia)
        return ("f", face, ijk[0], ijk[1])

    def vid(face: int, abc: tuple[int, int, int], ijk: tuple[int, int, int]) -> int:
        k = key(face, abc, ijk)
        got = index.get(k)
        if got is None:
            p = (ijk[0] * v0[abc[0]] + ijk[1] * v0[abc[1]] + ijk[2] * v0[abc[2]]) / n
            got = index[k] = len(pts)
            pts.append(p / np.linalg.norm(p))
        return got

    cells: list[tuple[int, int, int]] = []
    for fi, (a, b, c) in enumerate(f0):
        abc = (int(a), int(b), int(c))
        # lattice point (i, j) -> weights (n - i - j, i, j) on (A, B, C); i along AB, j along AC
        grid: dict[tuple[int, int], int] = {}
        for i in range(n + 1):
            for j in range(n + 1 - i):
                grid[i, j] = vid(fi, abc, (n - i - j, i, j))
        for i in range(n):
            for j in range(n - i):
                cells.append((grid[i, j], grid[i + 1, j], grid[i, j + 1]))
                if i + j < n - 1:
                    cells.append((grid[i + 1, j], grid[i + 1, j + 1], grid[i, j + 1]))
    return Triangulation(np.asarray(pts), np.asarray(cells, dtype=np.int64))


def gmsh_sphere(cells: int) -> Triangulation:
    """Unstructured (frontal-Delaunay) gmsh triangulation of the unit sphere, ≈ ``cells`` cells.

    The target edge length ``h`` solves ``4π = cells · (√3/4) h²``; vertices are
    projected radially to the unit sphere and the cells oriented outward.
    """
    import gmsh

    if cells < 20:
        raise ValueError(f"cells: must be >= 20, got {cells}")
    # 1.05: calibrated so the frontal mesher lands within ~10 % of the requested count
    h = 1.05 * math.sqrt(16.0 * math.pi / (math.sqrt(3.0) * cells))
    was_init = gmsh.isInitialized()
    if not was_init:
        gmsh.initialize(interruptible=False)
    try:
        gmsh.option.setNumber("General.Terminal", 0)
        gmsh.model.add("wflow_sphere")
        gmsh.model.occ.addSphere(0.0, 0.0, 0.0, 1.0)
        gmsh.model.occ.synchronize()
        gmsh.option.setNumber("Mesh.MeshSizeMin", h)
        gmsh.option.setNumber("Mesh.MeshSizeMax", h)
        gmsh.option.setNumber("Mesh.MeshSizeFromCurvature", 0)
        gmsh.model.mesh.generate(2)
        tags, coords, _ = gmsh.model.mesh.getNodes()
        types, _, enodes = gmsh.model.mesh.getElements(2)
        tri = [k for k, t in enumerate(types) if t == 2]
        if not tri:
            raise RuntimeError("gmsh produced no triangles")
        conn = np.concatenate([enodes[k] for k in tri]).astype(np.int64).reshape(-1, 3)
        pts = np.asarray(coords, dtype=np.float64).reshape(-1, 3)
        lookup = np.full(int(tags.max()) + 1, -1, dtype=np.int64)
        lookup[tags.astype(np.int64)] = np.arange(tags.size)
        conn = lookup[conn]
        gmsh.model.remove()
    finally:
        if not was_init:
            gmsh.finalize()
    used, inv = np.unique(conn, return_inverse=True)
    pts = pts[used]
    conn = inv.reshape(-1, 3).astype(np.int64)
    pts /= np.linalg.norm(pts, axis=1, keepdims=True)
    return _orient_outward(Triangulation(pts, conn))[0]


#: Generators of :func:`generate_sphere` (and the ``"method:N"`` mesh specifications).
METHODS = ("icosphere", "gmsh")


def generate_sphere(cells: int, *, method: str = "icosphere") -> Triangulation:
    """Sphere triangulation with about ``cells`` cells.

    Parameters
    ----------
    cells : int
        Target number of cells (``>= 20``). ``icosphere`` uses the frequency
        ``n = round(√(cells/20))`` (exactly ``20 n²`` cells); ``gmsh`` is
        approximate.
    method : {"icosphere", "gmsh"}
    """
    if not isinstance(cells, (int, np.integer)) or cells < 20:
        raise ValueError(f"cells: must be an integer >= 20, got {cells!r}")
    if method == "icosphere":
        tri = icosphere(max(1, round(math.sqrt(cells / 20.0))))
    elif method == "gmsh":
        tri = gmsh_sphere(int(cells))
    else:
        raise ValueError(f"method: must be 'icosphere' or 'gmsh', got {method!r}")
    validate_sphere(tri.points, tri.cells)
    return tri


