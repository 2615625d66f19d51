"""Dual (Voronoi-type) geometry of a sphere triangulation for two-point fluxes (docs/theory.md §4).

The finite-volume JKO step (:mod:`wflow.jko.fv`) and the token diffusion of the PDE
(:mod:`wflow.pde.diffusion`) need, for every cell ``K`` a centre
``x_K`` and for every edge ``σ = K|L`` its length ``|σ|`` and the distance ``d_σ``
between the centres of ``K`` and ``L``, such that the arc ``x_K x_L`` is orthogonal to
``σ`` (two-point flux consistency). On the unit sphere this holds for the *spherical
circumcentres*:

* the circumcentre of the spherical triangle ``(a, b, c)`` is
  ``x_K = n/|n|``, ``n = (b − a) × (c − a)`` (oriented outward): it is equidistant
  from ``a, b, c`` (``⟨x_K, a⟩ = ⟨x_K, b⟩ = ⟨x_K, c⟩``, since ``n ⟂ b − a, c − a``);
* the circumcentres of the two cells of the edge ``ab`` are both on the great circle
  ``{x : ⟨x, a⟩ = ⟨x, b⟩}``, the perpendicular bisector of the arc ``ab``: the
  geodesic ``x_K x_L`` crosses ``σ`` at a right angle (proven; exact for every
  triangulation, well centred or not).

What is *not* automatic is that ``x_K`` lies inside ``K`` (*well-centredness*). Without
it, the arc ``x_K x_L`` may not cross ``σ`` and ``d_σ`` no longer measures the
transport distance across ``σ`` (it can even be 0 for a pair of right triangles, or the
two centres can be in the wrong order): the two-point fluxes are then inconsistent.
:func:`dual_geometry` computes, for every cell, the signed angular distance of its
circumcentre to the three edge great circles, divided by the cell's inradius-like scale
``√|K|`` (the *margin*; positive = inside), and refuses (``strict=True``, default) or
warns for a mesh whose worst margin is ``<= 0``, naming the worst cell. The shipped
icospheres are well centred (checked in ``tests/test_jko_fv.py``).

Quantities (all on the *unit sphere*, radians and steradians):

* ``areas`` — the spherical-triangle areas ``|K|`` (Van Oosterom–Strackee solid angle;
  they sum to ``4π`` to round-off). The FV densities are ``ρ_K = m_K/|K|`` with these
  areas; masses ``m_K`` are what the scheme transports, so the flat areas of
  :class:`~wflow.geometry.mesh.SphereMesh` enter only where a caller converts masses to
  densities.
* ``edge_length`` — the geodesic length ``|σ| = arccos⟨a, b⟩``;
* ``dist`` — ``d_σ = arccos⟨x_K, x_L⟩`` (> 0 on a well-centred mesh);
* ``trans = |σ|/d_σ`` — the transmissibility of the two-point flux.
"""

from __future__ import annotations

import logging
import warnings
from dataclasses import dataclass

import numpy as np

__all__ = [
    "DualGeometry",
    "NotWellCentredError",
    "dual_geometry",
    "dual_from_cell_vertices",
    "log_mean",
]

logger = logging.getLogger(__name__)


class NotWellCentredError(ValueError):
    """A cell's circumcentre is not strictly inside it (two-point fluxes inconsistent)."""


@dataclass(frozen=True, eq=False)
class DualGeometry:
    """Cell centres and edge geometry of a sphere triangulation (module docstring).

    Attributes
    ----------
    points : (V, 3) array
        Vertices projected to the unit sphere.
    cells : (M, 3) int array
        Outward-oriented triangles (input order of the cells is kept).
    centres : (M, 3) array
        Spherical circumcentres ``x_K`` (unit vectors).
    areas : (M,) array
        Spherical-triangle areas ``|K|`` (sr).
    edge_cells : (E, 2) int array
        ``(K, L)`` of each edge, ``K < L``.
    edge_length : (E,) array
        ``|σ|`` (geodesic, rad).
    dist : (E,) array
        ``d_σ = d_S(x_K, x_L)`` (rad).
    trans : (E,) array
        ``|σ| / d_σ``.
    margin : (M,) array
        Signed angular distance of ``x_K`` to the nearest edge great circle of ``K``
        divided by ``√|K|`` (> 0: well centred).
    h : float
        Mean cell size ``√(mean |K|)``.
    """

    points: np.ndarray
    cells: np.ndarray
    centres: np.ndarray
    areas: np.ndarray
    edge_cells: np.ndarray
    edge_length: np.ndarray
    dist: np.ndarray
    trans: np.ndarray
    margin: np.ndarray
    h: float

    @property
    def M(self) -> int:
        """Number of cells."""
        return int(self.cells.shape[0])

    @property
    def well_centred(self) -> bool:
        """Whether every circumcentre lies strictly inside its cell."""
        return bool(np.all(self.margin > 0))

    def worst_cell(self) -> tuple[int, float]:
        """``(index, margin)`` of the cell whose circumcentre is nearest to (or beyond) an edge."""
        k = int(np.argmin(self.margin))
        return k, float(self.margin[k])

    def entropy(self, m: np.ndarray) -> float:
        """``H(m) = Σ_K m_K log(m_K / σ(K))``, ``σ(K) = |K|/4π`` (``0 log 0 = 0``).

        The relative entropy of the cell masses with respect to the normalised surface
        measure (THEORY §8: ``∫ρ log ρ dσ`` with ``ρ = dμ/dσ``); token diffusion ``D``
        enters the free energy as ``D·H``.
        """
        m = np.asarray(m, dtype=np.float64)
        pos = m > 0
        return float(np.sum(m[pos] * np.log(4.0 * np.pi * m[pos] / self.areas[pos])))

    def divergence(self, J: np.ndarray) -> np.ndarray:
        """``(div J)_K = Σ_σ J_{K,σ}`` for edge fluxes ``J`` oriented from ``K`` to ``L``."""
        K, L = self.edge_cells[:, 0], self.edge_cells[:, 1]
        return np.bincount(K, J, self.M) - np.bincount(L, J, self.M)


def _sph_area(a: np.ndarray, b: np.ndarray, c: np.ndarray) -> np.ndarray:
    num = np.einsum("ij,ij->i", a, np.cross(b, c))
    den = 1.0 + np.einsum("ij,ij->i", a, b) + np.einsum("ij,ij->i", b, c) \
        + np.einsum("ij,ij->i", c, a)
    return 2.0 * np.arctan2(num, den)


def _arc(u: np.ndarray, v: np.ndarray) -> np.ndarray:
    """Geodesic distance of unit vectors (atan2 form: accurate for small angles)."""
    return np.arctan2(np.linalg.norm(np.cross(u, v), axis=1), np.einsum("ij,ij->i", u, v))


def log_mean(a: np.ndarray, b: np.ndarray) -> np.ndarray:
    """Logarithmic mean ``(a − b)/(log a − log b)`` (``a`` where ``a = b``, 0 if either is 0).

    The edge density of two-point fluxes for which ``θ_σ (log ρ_K − log ρ_L) = ρ_K − ρ_L``
    exactly (entropy dissipation of the heat flow, :mod:`wflow.pde.diffusion`).
    """
    a = np.asarray(a, dtype=np.float64)
    b = np.asarray(b, dtype=np.float64)
    with np.errstate(divide="ignore", invalid="ignore"):
        la, lb = np.log(a), np.log(b)
        out = (a - b) / (la - lb)
    close = np.abs(a - b) <= 1e-8 * np.maximum(a, b)
    # series of the log mean at a ≈ b: ½(a + b) − (a − b)²/(12 (a+b)/2) + …
    mid = 0.5 * (a + b)
    near = mid - (a - b) ** 2 / (12.0 * np.where(mid > 0, mid, 1.0))
    out = np.where(close, near, out)
    return np.where((a > 0) & (b > 0), out, 0.0)


def dual_geometry(points: np.ndarray, cells: np.ndarray, *, strict: bool = True
                  ) -> DualGeometry:
    """Circumcentres, spherical areas and two-point edge geometry of a sphere triangulation.

    Parameters
    ----------
    points : (V, 3) array
        Vertices (projected to the unit sphere here).
    cells : (M, 3) int array
        Triangles of a closed single-cover triangulation (as validated by
        :func:`wflow.geometry.mesh.validate_sphere`); inward-oriented cells are flipped.
    strict : bool
        Raise :class:`NotWellCentredError` for a mesh that is not well centred
        (default); otherwise warn (``UserWarning``) and continue.

    Returns
    -------
    DualGeometry
    """
    p = np.asarray(points, dtype=np.float64)
    p = p / np.linalg.norm(p, axis=1, keepdims=True)
    c = np.array(cells, dtype=np.int64)
    if c.ndim != 2 or c.shape[1] != 3:
        raise ValueError(f"cells: expected (M, 3) triangles, got shape {c.shape}")
    a, b, cc = p[c[:, 0]], p[c[:, 1]], p[c[:, 2]]
    area = _sph_area(a, b, cc)
    flip = area < 0
    if np.any(flip):
        c[flip] = c[flip][:, [0, 2, 1]]
        a, b, cc = p[c[:, 0]], p[c[:, 1]], p[c[:, 2]]
        area = np.abs(area)
    n = np.cross(b - a, cc - a)
    x = n / np.linalg.norm(n, axis=1, keepdims=True)
    # signed angular distances of x to the three edge great circles (positive inside)
    marg = np.full(c.shape[0], np.inf)
    for u, v in ((a, b), (b, cc), (cc, a)):
        nrm = np.cross(u, v)
        s = np.einsum("ij,ij->i", nrm, x) / np.linalg.norm(nrm, axis=1)
        marg = np.minimum(marg, np.arcsin(np.clip(s, -1.0, 1.0)))
    margin = marg / np.sqrt(area)
    # edges: pair the directed edges (each undirected edge once in each direction)
    M = c.shape[0]
    directed = np.concatenate([c[:, [0, 1]], c[:, [1, 2]], c[:, [2, 0]]])
    owner = np.tile(np.arange(M), 3)
    key = np.sort(directed, axis=1)
    order = np.lexsort((key[:, 1], key[:, 0]))
    ks = key[order]
    same = np.all(ks[0::2] == ks[1::2], axis=1)
    if directed.shape[0] % 2 or not np.all(same):
        raise ValueError("cells: not a closed manifold triangulation (an edge does not have "
                         "exactly two cells)")
    K = owner[order[0::2]]
    L = owner[order[1::2]]
    lo, hi = np.minimum(K, L), np.maximum(K, L)
    ec = np.stack([lo, hi], axis=1)
    ends = ks[0::2]
    length = _arc(p[ends[:, 0]], p[ends[:, 1]])
    dist = _arc(x[lo], x[hi])
    geo = DualGeometry(points=p, cells=c, centres=x, areas=area, edge_cells=ec,
                       edge_length=length, dist=dist,
                       trans=length / np.maximum(dist, 1e-300), margin=margin,
                       h=float(np.sqrt(area.mean())))
    if not geo.well_centred:
        k, mk = geo.worst_cell()
        bad = int(np.sum(margin <= 0))
        msg = (f"mesh is not well centred: {bad} of {M} cells have their circumcentre on or "
               f"outside an edge (worst: cell {k}, margin {mk:.3g} of √|K|); two-point "
               "fluxes need a well-centred (acute) triangulation, e.g. an icosphere "
               "(icosphere:<cells>)")
        if strict:
            raise NotWellCentredError(msg)
        warnings.warn(msg, UserWarning, stacklevel=2)
        logger.warning(msg)
    return geo


def dual_from_cell_vertices(cell_vertices: np.ndarray, *, strict: bool = True
                            ) -> DualGeometry:
    """:func:`dual_geometry` from per-cell vertex coordinates ``(M, 3, 3)``.

    Vertices shared by cells are identified by their exact coordinates (as read from one
    geometry array, e.g. ``SphereMesh.gather_owned(SphereMesh.cell_vertices)``).
    """
    cv = np.asarray(cell_vertices, dtype=np.float64)
    if cv.ndim != 3 or cv.shape[1:] != (3, 3):
        raise ValueError(f"cell_vertices: expected shape (M, 3, 3), got {cv.shape}")
    pts, inv = np.unique(cv.reshape(-1, 3), axis=0, return_inverse=True)
    return dual_geometry(pts, inv.reshape(-1, 3), strict=strict)
