"""Named validity checks of a sphere triangulation (:func:`validate_sphere`).

Part of :mod:`wflow.geometry.mesh` (see its docstring for the pipeline).
"""

from __future__ import annotations

import logging
import math
from typing import TYPE_CHECKING

import numpy as np

if TYPE_CHECKING:  # pragma: no cover
    pass

from .triangulation import RADIUS_TOL, MeshReport, MeshValidationError, Triangulation

logger = logging.getLogger(__name__)


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


