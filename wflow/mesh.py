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

import contextlib
import io
import logging
import math
import os
import shutil
import tempfile
from dataclasses import dataclass
from functools import cached_property
from pathlib import Path
from typing import TYPE_CHECKING, Any, NamedTuple

import numpy as np

if TYPE_CHECKING:  # pragma: no cover
    from mpi4py import MPI

__all__ = [
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
    "RADIUS_TOL",
    "PROJECT_TOL",
    "project_to_sphere",
]

logger = logging.getLogger(__name__)

#: Default tolerance on ``| |x| − 1 |`` for the vertices of a sphere mesh.
RADIUS_TOL = 1e-8
#: Meshes read by the solvers (:func:`load_mesh`) whose vertices are off the unit sphere
#: by more than the radius tolerance but at most this much are projected onto it (with a
#: logged warning). 1e-6 covers single-precision files (float32 carries a relative
#: rounding of 6e-8 per coordinate, e.g. pyvista's ``Sphere``: ``| |x| − 1 | ≈ 4e-8``),
#: while a mesh of another radius or a wrong unit is still refused.
PROJECT_TOL = 1e-6
#: Directory of the meshes shipped with the repository.
MESH_DIR = Path(__file__).resolve().parent.parent / "meshes"
#: The default mesh of a PDE scenario (regenerated as ``icosphere:2420`` if absent).
DEFAULT_MESH = "sphere_2420.msh"


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


# --------------------------------------------------------------------------- generation


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


# --------------------------------------------------------------------------- I/O
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

    from .io import current_umask

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


# --------------------------------------------------------------------------- validation
def _edges(cells: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Directed edges ``(3M, 2)`` of the cells and their undirected keys ``(3M, 2)`` (sorted)."""
    directed = np.concatenate([cells[:, [0, 1]], cells[:, [1, 2]], cells[:, [2, 0]]])
    return directed, np.sort(directed, axis=1)


def _solid_angles(p: np.ndarray, cells: np.ndarray) -> np.ndarray:
    """Signed solid angle of each cell seen from the origin (Van Oosterom–Strackee)."""
    a, b, c = p[cells[:, 0]], p[cells[:, 1]], p[cells[:, 2]]
    la, lb, lc = (np.linalg.norm(u, axis=1) for u in (a, b, c))
    num = np.einsum("ij,ij->i", a, np.cross(b, c))
    den = (la * lb * lc + np.einsum("ij,ij->i", a, b) * lc
           + np.einsum("ij,ij->i", a, c) * lb + np.einsum("ij,ij->i", b, c) * la)
    return 2.0 * np.arctan2(num, den)


def _orient_outward(tri: Triangulation) -> tuple[Triangulation, bool]:
    """Flip every cell whose (flat) normal points inward; returns (tri, any_flipped)."""
    p, c = tri.points, tri.cells
    nrm = np.cross(p[c[:, 1]] - p[c[:, 0]], p[c[:, 2]] - p[c[:, 0]])
    inward = np.einsum("ij,ij->i", nrm, p[c].mean(axis=1)) < 0
    if np.any(inward):
        c = c.copy()
        c[inward] = c[inward][:, [0, 2, 1]]
    return Triangulation(p, c), bool(np.any(inward))


def validate_sphere(points: np.ndarray, cells: np.ndarray, *,
                    radius_tol: float = RADIUS_TOL) -> tuple[Triangulation, MeshReport]:
    """Check that ``(points, cells)`` is a closed triangulation of the unit sphere.

    Parameters
    ----------
    points : (V, 3) array
    cells : (M, 3) int array
    radius_tol : float
        Accepted ``max | |x_v| − 1 |``.

    Returns
    -------
    (Triangulation, MeshReport)
        The triangulation with outward orientation (flipped if it was
        consistently inward) and its statistics.

    Raises
    ------
    MeshValidationError
        Naming the first failed check (see the module docstring).
    """
    from scipy.sparse import coo_matrix
    from scipy.sparse.csgraph import connected_components

    p = np.asarray(points, dtype=np.float64)
    c = np.asarray(cells)
    if p.ndim != 2 or p.shape[1] != 3:
        raise MeshValidationError("shape", f"points must have shape (V, 3), got {p.shape}")
    if c.ndim != 2 or c.shape[1] != 3 or c.shape[0] == 0:
        raise MeshValidationError("shape", f"cells must be triangles, shape (M, 3), got {c.shape}")
    if not np.issubdtype(c.dtype, np.integer):
        raise MeshValidationError("shape", f"cells must be integer indices, got {c.dtype}")
    c = c.astype(np.int64)
    if not np.all(np.isfinite(p)):
        raise MeshValidationError("finite", "vertex coordinates contain NaN or Inf")
    if c.min() < 0 or c.max() >= p.shape[0]:
        raise MeshValidationError("indices", "a cell refers to a vertex index out of range")
    if np.any((c[:, 0] == c[:, 1]) | (c[:, 1] == c[:, 2]) | (c[:, 0] == c[:, 2])):
        raise MeshValidationError("indices", "a cell repeats a vertex")
    r = np.linalg.norm(p, axis=1)
    rerr = float(np.max(np.abs(r - 1.0)))
    if rerr > radius_tol:
        raise MeshValidationError(
            "radius", f"vertices are not on the unit sphere: max | |x| - 1 | = {rerr:.3e} > "
            f"{radius_tol:.1e} (radius range [{r.min():.6g}, {r.max():.6g}]); rescale the mesh "
            "or regenerate it with `wflow mesh`")
    e1 = p[c[:, 1]] - p[c[:, 0]]
    e2 = p[c[:, 2]] - p[c[:, 0]]
    area = 0.5 * np.linalg.norm(np.cross(e1, e2), axis=1)
    directed, und = _edges(c)
    elen = np.linalg.norm(p[directed[:, 1]] - p[directed[:, 0]], axis=1)
    hmean = float(np.mean(elen))
    bad = np.flatnonzero(area <= 1e-12 * hmean**2)
    if bad.size:
        raise MeshValidationError("degenerate", f"{bad.size} cells have (near) zero area, "
                                  f"e.g. cell {int(bad[0])}")
    # duplicate vertices: a point closer than 1e-9 h to another one
    from scipy.spatial import cKDTree

    pairs = cKDTree(p).query_pairs(1e-9 * hmean)
    if pairs:
        i, j = next(iter(pairs))
        raise MeshValidationError(
            "duplicate_vertices", f"{len(pairs)} pairs of coincident vertices (e.g. {int(i)}, "
            f"{int(j)}); "
            "merge them (unmerged seams leave holes)")
    uniq, inv, counts = np.unique(und, axis=0, return_inverse=True, return_counts=True)
    inv = inv.reshape(-1)
    if np.any(counts > 2):
        k = int(np.sum(counts > 2))
        raise MeshValidationError("manifold", f"{k} non-manifold edges (shared by more than "
                                  f"two cells), e.g. {tuple(int(v) for v in uniq[counts > 2][0])}")
    if np.any(counts == 1):
        k = int(np.sum(counts == 1))
        raise MeshValidationError("closed", f"the surface has holes: {k} boundary edges "
                                  "(edges with only one cell), e.g. "
                                  f"{tuple(int(v) for v in uniq[counts == 1][0])}")
    # orientation: the two uses of each edge must run in opposite directions
    forward = directed[:, 0] < directed[:, 1]
    nfwd = np.bincount(inv, weights=forward, minlength=uniq.shape[0])
    if np.any(nfwd != 1):
        k = int(np.sum(nfwd != 1))
        raise MeshValidationError("orientation", f"inconsistent orientation: {k} edges are "
                                  "traversed in the same direction by both of their cells")
    M, V, E = c.shape[0], p.shape[0], uniq.shape[0]
    adj = coo_matrix((np.ones(E), (uniq[:, 0], uniq[:, 1])), shape=(V, V))
    ncomp = connected_components(adj, directed=False)[0]
    if ncomp != 1:
        raise MeshValidationError("connected", f"the mesh has {ncomp} connected components")
    chi = V - E + M
    if chi != 2:
        raise MeshValidationError("euler", f"V - E + F = {chi}, a sphere has 2 (genus "
                                  f"{(2 - chi) // 2} surface)")
    omega = float(np.sum(_solid_angles(p, c)))
    sheets = omega / (4.0 * math.pi)
    if abs(abs(sheets) - 1.0) > 1e-6:
        raise MeshValidationError("covering", f"the cells cover the sphere {sheets:.4f} times "
                                  "(signed solid angles / 4π), expected exactly once")
    flipped = False
    if sheets < 0:
        logger.info("mesh is consistently oriented inward: flipping all cells outward")
        c = c[:, [0, 2, 1]]
        flipped = True
    report = MeshReport(
        cells=M, vertices=V, edges=E,
        min_area=float(area.min()), max_area=float(area.max()), total_area=float(area.sum()),
        min_edge=float(elen.min()), max_edge=float(elen.max()),
        max_radius_error=rerr, flipped=flipped,
    )
    return Triangulation(p, c), report


def project_to_sphere(tri: Triangulation) -> tuple[Triangulation, float]:
    """Project the vertices radially onto the unit sphere: ``x ↦ x/|x|``.

    Returns the projected triangulation and the largest ``| |x| − 1 |`` before.
    Raises :class:`MeshValidationError` (check ``finite``) for a vertex at the origin
    or with NaN/Inf coordinates.
    """
    p = np.asarray(tri.points, dtype=np.float64)
    r = np.linalg.norm(p, axis=1) if p.ndim == 2 else np.array([np.nan])
    if not np.all(np.isfinite(r)) or np.any(r == 0):
        raise MeshValidationError("finite", "cannot project onto the sphere: a vertex is at the "
                                  "origin or has NaN/Inf coordinates")
    return Triangulation(p / r[:, None], tri.cells), float(np.max(np.abs(r - 1.0)))


def mesh_stats(tri: Triangulation) -> MeshReport:
    """Statistics of a valid sphere triangulation (runs :func:`validate_sphere`)."""
    return validate_sphere(tri.points, tri.cells)[1]


# --------------------------------------------------------------------------- shipped meshes
def shipped_meshes() -> list[Path]:
    """The mesh files in ``meshes/`` (sorted by cell count in the name)."""
    if not MESH_DIR.is_dir():
        return []
    files = list(MESH_DIR.glob("sphere_*.msh"))
    return sorted(files, key=lambda f: int(f.stem.split("_")[1]))


def default_mesh_path() -> Path:
    """Path of the default scenario mesh ``meshes/sphere_2420.msh``."""
    return MESH_DIR / DEFAULT_MESH


def _near_sphere(tri: Triangulation, radius_tol: float, project_tol: float,
                 name: str) -> Triangulation:
    """``tri`` projected onto the sphere if its radius error is in ``(radius_tol, project_tol]``."""
    p = np.asarray(tri.points, dtype=np.float64)
    if p.ndim != 2 or p.shape[1] != 3 or not np.all(np.isfinite(p)):
        return tri  # validate_sphere names the problem
    err = float(np.max(np.abs(np.linalg.norm(p, axis=1) - 1.0))) if p.size else 0.0
    if radius_tol < err <= project_tol:
        logger.warning("mesh %s: vertices are off the unit sphere by up to %.1e (> %.0e, <= "
                       "%.0e): projected onto the sphere", name, err, radius_tol, project_tol)
        return project_to_sphere(tri)[0]
    return tri


def _triangulation_from_spec(spec: str | Path | Triangulation | None,
                             radius_tol: float, project_tol: float = 0.0) -> Triangulation:
    if isinstance(spec, Triangulation):
        spec = _near_sphere(spec, radius_tol, project_tol, "(triangulation)")
        return validate_sphere(spec.points, spec.cells, radius_tol=radius_tol)[0]
    if spec is None or str(spec) == "default":
        path = default_mesh_path()
        if not path.is_file():  # installed without the meshes/ folder: regenerate identically
            logger.info("default mesh %s not found, generating icosphere:2420", path)
            return generate_sphere(2420)
        spec = path
    s = str(spec)
    for meth in ("icosphere", "gmsh"):
        if s.startswith(meth + ":"):
            try:
                n = int(s.split(":", 1)[1])
            except ValueError:
                raise ValueError(f"mesh: expected '{meth}:<cells>', got {s!r}") from None
            return generate_sphere(n, method=meth)
    path = Path(s)
    if not path.is_file() and not path.is_absolute() and (MESH_DIR / path).is_file():
        path = MESH_DIR / path
    tri = _near_sphere(read_surface(path), radius_tol, project_tol, path.name)
    return validate_sphere(tri.points, tri.cells, radius_tol=radius_tol)[0]


def load_mesh(spec: str | Path | Triangulation | None = None, *, comm: Any = None,
              radius_tol: float = RADIUS_TOL, project_tol: float = PROJECT_TOL) -> SphereMesh:
    """Read / generate, validate and distribute a sphere mesh as a DOLFINx mesh.

    Parameters
    ----------
    spec : path, "icosphere:N", "gmsh:N", Triangulation or None
        A meshio-readable file (relative names are also looked up in
        ``meshes/``), a generator spec, or ``None`` / ``"default"`` for
        ``meshes/sphere_2420.msh``.
    comm : mpi4py communicator, optional
        Default ``MPI.COMM_WORLD``. Rank 0 reads and validates; DOLFINx
        partitions.
    radius_tol, project_tol : float
        Vertices must satisfy ``| |x| − 1 | <= radius_tol``; a mesh read from a file (or
        given as a triangulation) whose error is at most ``project_tol`` (default
        :data:`PROJECT_TOL` = 1e-6, e.g. single-precision files) is projected onto the
        sphere first, with a logged warning. Larger errors are refused (``wflow mesh
        --check FILE --project --out NEW`` projects any mesh explicitly).
    """
    from mpi4py import MPI

    comm = MPI.COMM_WORLD if comm is None else comm
    tri = err = None
    if comm.rank == 0:
        try:
            tri = _triangulation_from_spec(spec, radius_tol, project_tol)
        except Exception as exc:  # noqa: BLE001 - re-raised on every rank below
            err = exc
    err = comm.bcast(err, root=0)
    if err is not None:
        raise err
    return SphereMesh.from_triangulation(tri, comm=comm)


# --------------------------------------------------------------------------- DOLFINx
@dataclass(frozen=True, eq=False)
class SphereMesh:
    """A DOLFINx manifold mesh of the unit sphere with the geometry the FV solver uses.

    Cell arrays are indexed by *local* cell index (DOLFINx numbering: owned
    cells ``0..num_owned-1`` first, then ghosts). Facet arrays hold only the
    facets this rank computes fluxes for: every facet touching an owned cell
    is assigned to exactly one rank (the lower rank when its two cells have
    different owners), so summing over ranks counts each edge once.

    Attributes
    ----------
    mesh : dolfinx.mesh.Mesh
        tdim 2, gdim 3, ``GhostMode.shared_facet``.
    num_owned, num_local, num_global : int
        Owned, owned + ghost, and global cell counts.
    original_index : (num_local,) int64
        Index of each local cell in the input triangulation (DOLFINx reorders).
    areas : (num_local,) float64
        ``|K| = ∫_K 1 dx`` (flat triangles).
    centroids : (num_local, 3) float64
        ``c_K = ∫_K x dx / |K|`` (inside the sphere, ``|c_K| < 1``).
    normals : (num_local, 3) float64
        Unit ``CellNormal`` of DOLFINx (outward for a validated mesh).
    cell_vertices : (num_local, 3, 3) float64
        Vertex coordinates of each cell (``mesh.geometry.x`` through the geometry dofmap).
    cell_neighbors : (num_owned, 3) int32
        Local indices of the three face neighbours of each owned cell.
    facet_cells : (nf, 2) int32
        ``(K⁺, K⁻)`` of each facet assigned to this rank.
    facet_length : (nf,) float64
    facet_points : (nf, 2, 3) float64
        End points of the flat edge.
    conormals : (nf, 2, 3) float64
        ``n⁺`` (out of ``K⁺``) and ``n⁻`` (out of ``K⁻``), unit, in each cell's plane.
    facet_normal : (nf, 3) float64
        Single-valued ``n_e = ½(n⁺ − n⁻)``.
    """

    mesh: Any
    comm: Any
    num_owned: int
    num_local: int
    num_global: int
    original_index: np.ndarray
    areas: np.ndarray
    centroids: np.ndarray
    normals: np.ndarray
    cell_vertices: np.ndarray
    cell_neighbors: np.ndarray
    facet_cells: np.ndarray
    facet_length: np.ndarray
    facet_points: np.ndarray
    conormals: np.ndarray
    facet_normal: np.ndarray
    ghost_owner: np.ndarray

    # ---------------------------------------------------------------- construction
    @classmethod
    def from_triangulation(cls, tri: Triangulation | None, *, comm: MPI.Comm | None = None
                           ) -> SphereMesh:
        """Build the DOLFINx mesh (data on rank 0, partitioned by DOLFINx) and its geometry."""
        from mpi4py import MPI  # before dolfinx

        # isort: split
        import basix.ufl
        import ufl
        from dolfinx import mesh as dmesh

        comm = MPI.COMM_WORLD if comm is None else comm
        if comm.rank == 0:
            if tri is None:
                raise ValueError("mesh: rank 0 needs a triangulation")
            cells = np.ascontiguousarray(tri.cells, dtype=np.int64)
            pts = np.ascontiguousarray(tri.points, dtype=np.float64)
        else:
            cells = np.empty((0, 3), dtype=np.int64)
            pts = np.empty((0, 3), dtype=np.float64)
        coord = ufl.Mesh(basix.ufl.element("Lagrange", "triangle", 1, shape=(3,)))
        part = dmesh.create_cell_partitioner(dmesh.GhostMode.shared_facet, 2)
        msh = dmesh.create_mesh(comm, cells, coord, pts, partitioner=part)
        return cls._from_dolfinx(msh)

    @classmethod
    def _from_dolfinx(cls, msh: Any) -> SphereMesh:
        import ufl
        from dolfinx import fem, la
        from dolfinx import mesh as dmesh

        comm = msh.comm
        tdim = msh.topology.dim
        if tdim != 2 or msh.geometry.dim != 3:
            raise MeshValidationError("shape", f"expected a surface mesh (tdim 2, gdim 3), got "
                                      f"tdim {tdim}, gdim {msh.geometry.dim}")
        cmap = msh.topology.index_map(tdim)
        num_owned = cmap.size_local
        num_local = num_owned + cmap.num_ghosts
        ghost_owner = np.asarray(cmap.owners, dtype=np.int32)
        orig = np.asarray(msh.topology.original_cell_index, dtype=np.int64)[:num_local]

        # --- cell areas, centroids, normals: assembled DG0 forms
        V0 = fem.functionspace(msh, ("DG", 0))
        V0v = fem.functionspace(msh, ("DG", 0, (3,)))
        dof = np.asarray(V0.dofmap.list, dtype=np.int64)[:num_local, 0]
        dofv = np.asarray(V0v.dofmap.list, dtype=np.int64)[:num_local, 0]
        q = ufl.TestFunction(V0)
        qv = ufl.TestFunction(V0v)
        x = ufl.SpatialCoordinate(msh)
        nK = ufl.CellNormal(msh)

        def assemble(form: Any) -> np.ndarray:
            b = fem.assemble_vector(fem.form(form))
            b.scatter_reverse(la.InsertMode.add)
            b.scatter_forward()
            return b.array.copy()

        areas = assemble(q * ufl.dx)[dof]
        bs = V0v.dofmap.index_map_bs
        cent = assemble(ufl.inner(x, qv) * ufl.dx).reshape(-1, bs)[dofv] / areas[:, None]
        nrm = assemble(ufl.inner(nK, qv) * ufl.dx).reshape(-1, bs)[dofv] / areas[:, None]
        nrm /= np.linalg.norm(nrm, axis=1, keepdims=True)
        outward = np.einsum("ij,ij->i", nrm, cent)
        if np.any(outward <= 0):
            raise MeshValidationError(
                "orientation", f"{int(np.sum(outward <= 0))} DOLFINx cell normals point inward")

        # --- facets: connectivity and geometry from the DOLFINx topology / geometry
        msh.topology.create_connectivity(1, 2)
        msh.topology.create_connectivity(2, 1)
        f2c = msh.topology.connectivity(1, 2)
        c2f = msh.topology.connectivity(2, 1)
        fmap = msh.topology.index_map(1)
        nfac = fmap.size_local + fmap.num_ghosts
        f2c_off = np.asarray(f2c.offsets)
        f2c_arr = np.asarray(f2c.array)
        nlinks = np.diff(f2c_off)
        c2f_arr = np.asarray(c2f.array).reshape(-1, 3)[:num_local]
        # facets touching an owned cell
        cand = np.unique(c2f_arr[:num_owned].reshape(-1))
        if np.any(nlinks[cand] != 2):
            raise MeshValidationError("closed", "a facet of an owned cell has "
                                      f"{int(nlinks[cand].min())} local cells; expected 2 "
                                      "(closed surface, shared_facet ghosts)")
        fc = np.stack([f2c_arr[f2c_off[cand]], f2c_arr[f2c_off[cand] + 1]], axis=1)
        owner_of = np.concatenate([np.full(num_owned, comm.rank, dtype=np.int32), ghost_owner])
        owner = owner_of[fc]
        mine = np.minimum(owner[:, 0], owner[:, 1]) == comm.rank
        facets = cand[mine].astype(np.int32)
        fc = fc[mine].astype(np.int32)
        # orient each facet from the cell with the smaller original index (rank independent)
        swap = orig[fc[:, 0]] > orig[fc[:, 1]]
        fc[swap] = fc[swap][:, ::-1]
        xg = msh.geometry.x
        fgeo = dmesh.entities_to_geometry(msh, 1, facets)
        fpts = xg[fgeo]  # (nf, 2, 3)
        cgeo = dmesh.entities_to_geometry(msh, 2, np.arange(num_local, dtype=np.int32))
        cpts = xg[cgeo]  # (num_local, 3, 3)
        # face neighbours of owned cells (cell -> facets -> other cell)
        cf = c2f_arr[:num_owned]
        o0 = f2c_arr[f2c_off[cf]]
        o1 = f2c_arr[f2c_off[cf] + 1]
        own = np.arange(num_owned)[:, None]
        neighbors = np.where(o0 == own, o1, o0).astype(np.int32)
        del nfac

        a, b = fpts[:, 0], fpts[:, 1]
        t = b - a
        length = np.linalg.norm(t, axis=1)
        t /= length[:, None]
        con = np.empty((facets.size, 2, 3))
        for s in range(2):
            verts = cpts[fc[:, s]]  # (nf, 3, 3)
            # the vertex of the cell not on the facet: the one farthest from the edge line
            rel = verts - a[:, None, :]
            perp = rel - np.einsum("fvi,fi->fv", rel, t)[:, :, None] * t[:, None, :]
            dist = np.linalg.norm(perp, axis=2)
            opp = perp[np.arange(facets.size), np.argmax(dist, axis=1)]
            con[:, s] = -opp / np.linalg.norm(opp, axis=1, keepdims=True)
        facet_normal = 0.5 * (con[:, 0] - con[:, 1])
        total = comm.allreduce(num_owned)
        arrays = dict(
            original_index=orig, areas=areas, centroids=cent, normals=nrm, cell_vertices=cpts,
            cell_neighbors=neighbors, facet_cells=fc, facet_length=length, facet_points=fpts,
            conormals=con, facet_normal=facet_normal, ghost_owner=ghost_owner,
        )
        for arr in arrays.values():
            arr.setflags(write=False)
        return cls(mesh=msh, comm=comm, num_owned=num_owned, num_local=num_local,
                   num_global=int(total), **arrays)

    # ---------------------------------------------------------------- helpers
    def facet_quadrature(self, npts: int) -> tuple[np.ndarray, np.ndarray]:
        """Gauss–Legendre points on each flat edge and their weights (summing to 1).

        Returns ``points (nf, npts, 3)`` and ``weights (npts,)``.
        """
        if npts not in (1, 2, 3):
            raise ValueError(f"quad_points: must be 1, 2 or 3, got {npts}")
        s, w = np.polynomial.legendre.leggauss(npts)
        s = 0.5 * (s + 1.0)
        w = 0.5 * w
        a, b = self.facet_points[:, 0], self.facet_points[:, 1]
        pts = a[:, None, :] + s[None, :, None] * (b - a)[:, None, :]
        return pts, w

    @cached_property
    def _gather_plan(self) -> tuple[np.ndarray, np.ndarray]:
        """Original indices of every rank's owned cells, concatenated in rank order, and counts."""
        own = np.ascontiguousarray(self.original_index[: self.num_owned])
        if self.comm.size == 1:
            return own, np.array([self.num_owned])
        counts = np.asarray(self.comm.allgather(self.num_owned))
        allidx = np.empty(int(counts.sum()), dtype=np.int64)
        self.comm.Allgatherv(own, [allidx, counts])
        return allidx, counts

    def gather_owned(self, values: np.ndarray) -> np.ndarray:
        """All ranks' owned-cell values, ordered by original cell index (``(num_global, ...)``).

        Every rank gets the same array, identical to the serial cell order of
        the input triangulation (``MPI_Allgatherv``, no arithmetic).
        """
        vals = np.ascontiguousarray(np.asarray(values)[: self.num_owned])
        idx, counts = self._gather_plan
        out = np.empty((self.num_global,) + vals.shape[1:], dtype=vals.dtype)
        if self.comm.size == 1:
            out[idx] = vals
            return out
        per = int(np.prod(vals.shape[1:], dtype=np.int64))
        buf = np.empty((self.num_global,) + vals.shape[1:], dtype=vals.dtype)
        self.comm.Allgatherv(vals, [buf, counts * per])
        out[idx] = buf
        return out

    def local_from_global(self, values: np.ndarray) -> np.ndarray:
        """Pick this rank's local cells (owned + ghost) out of a globally ordered array."""
        return np.asarray(values)[self.original_index]

    def sum(self, local_owned: float | np.ndarray) -> Any:
        """``MPI.SUM`` over ranks (floats or arrays)."""
        if self.comm.size == 1:
            return local_owned
        return self.comm.allreduce(local_owned)
