"""Loading a sphere mesh and its DOLFINx form with the geometry the FV solver uses.

Part of :mod:`wflow.geometry.mesh` (see its docstring for the pipeline).
"""

from __future__ import annotations

import logging
from dataclasses import dataclass
from functools import cached_property
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np

if TYPE_CHECKING:  # pragma: no cover
    from mpi4py import MPI

from .generation import METHODS, generate_sphere
from .io import read_surface
from .shipped import MESH_DIR, default_mesh_path
from .triangulation import PROJECT_TOL, RADIUS_TOL, MeshValidationError, Triangulation
from .validation import project_to_sphere, validate_sphere

logger = logging.getLogger(__name__)


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
    for meth in METHODS:
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
        ``|K| = ∫_K 1 dx`` (flat triangles; they sum to slightly less than ``4π``), in
        DOLFINx order. Densities and solver results are in the mesh file's order:
        ``gather_owned(areas)`` gives the areas in that order, so
        ``(rho * mesh.gather_owned(mesh.areas)).sum() == 1`` (docs/theory.md §8).
    centroids : (num_local, 3) float64
        ``c_K = ∫_K x dx / |K|`` (inside the sphere, ``|c_K| < 1``), DOLFINx order.
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

