"""Sphere meshes: generation, validation with named checks, I/O, DOLFINx geometry."""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

from wflow.geometry.mesh import (
    MESH_DIR,
    MeshValidationError,
    SphereMesh,
    Triangulation,
    generate_sphere,
    icosphere,
    load_mesh,
    read_surface,
    shipped_meshes,
    validate_sphere,
    write_surface,
)

from .conftest import EPS


@pytest.fixture(scope="module")
def ico6() -> Triangulation:
    return icosphere(6)


@pytest.fixture(scope="module")
def sm720() -> SphereMesh:
    return load_mesh("icosphere:720")


def flat_areas(tri: Triangulation) -> np.ndarray:
    p, c = tri.points, tri.cells
    return 0.5 * np.linalg.norm(np.cross(p[c[:, 1]] - p[c[:, 0]], p[c[:, 2]] - p[c[:, 0]]),
                                axis=1)


# ------------------------------------------------------------------ generation
@pytest.mark.parametrize("n", [1, 2, 3, 6])
def test_icosphere_counts_and_validity(n):
    tri, rep = validate_sphere(*icosphere(n))
    assert rep.cells == 20 * n * n
    assert rep.vertices == 10 * n * n + 2
    assert rep.edges == 30 * n * n
    assert not rep.flipped
    assert rep.max_radius_error <= 4 * EPS
    # flat area tends to 4π from below as h -> 0
    assert rep.total_area < 4 * np.pi


def test_icosphere_frequency_two_is_midpoint_refinement():
    tri = icosphere(2)
    v0 = icosphere(1).points
    # the 12 icosahedron vertices are kept exactly
    d = np.min(np.linalg.norm(tri.points[:, None, :] - v0[None], axis=2), axis=0)
    np.testing.assert_allclose(d, 0.0, atol=4 * EPS)


def test_generate_sphere_icosphere_rounds_frequency():
    assert generate_sphere(2500).cells.shape[0] == 20 * 11**2


def test_gmsh_sphere_is_valid():
    tri = generate_sphere(600, method="gmsh")
    _, rep = validate_sphere(*tri)
    assert 400 <= rep.cells <= 800, rep.cells
    assert rep.max_radius_error <= 4 * EPS


def test_generate_rejects_bad_arguments():
    with pytest.raises(ValueError, match="cells"):
        generate_sphere(5)
    with pytest.raises(ValueError, match="method"):
        generate_sphere(100, method="uv")


# ------------------------------------------------------------------ validation
def check_name(exc: pytest.ExceptionInfo) -> str:
    assert isinstance(exc.value, MeshValidationError)
    assert str(exc.value).startswith(f"mesh check '{exc.value.check}' failed")
    return exc.value.check


def test_rejects_wrong_radius(ico6):
    with pytest.raises(MeshValidationError) as exc:
        validate_sphere(2.0 * ico6.points, ico6.cells)
    assert check_name(exc) == "radius"
    assert "2" in str(exc.value)


def test_rejects_hole(ico6):
    with pytest.raises(MeshValidationError) as exc:
        validate_sphere(ico6.points, ico6.cells[1:])
    assert check_name(exc) == "closed"
    assert "3 boundary edges" in str(exc.value)


def test_rejects_non_manifold_edge(ico6):
    p, c = ico6
    # a "fin": a new vertex glued to an existing edge makes that edge carry 3 cells
    a, b = c[0, 0], c[0, 1]
    q = (p[a] + p[b]) + 0.3 * np.cross(p[a], p[b])
    q /= np.linalg.norm(q)
    pts = np.vstack([p, q])
    cells = np.vstack([c, [[a, b, pts.shape[0] - 1]]])
    with pytest.raises(MeshValidationError) as exc:
        validate_sphere(pts, cells)
    assert check_name(exc) == "manifold"


def test_rejects_inconsistent_orientation(ico6):
    c = ico6.cells.copy()
    c[5] = c[5, [0, 2, 1]]
    with pytest.raises(MeshValidationError) as exc:
        validate_sphere(ico6.points, c)
    assert check_name(exc) == "orientation"


def test_flips_consistently_inward_mesh(ico6):
    tri, rep = validate_sphere(ico6.points, ico6.cells[:, ::-1])
    assert rep.flipped
    np.testing.assert_array_equal(np.sort(tri.cells, axis=1), np.sort(ico6.cells, axis=1))
    _, rep2 = validate_sphere(*tri)
    assert not rep2.flipped


def test_rejects_duplicate_vertices(ico6):
    p, c = ico6
    pts = np.vstack([p, p[c[0, 0]]])
    cells = c.copy()
    cells[0, 0] = pts.shape[0] - 1  # one cell uses a copy: unmerged seam
    with pytest.raises(MeshValidationError) as exc:
        validate_sphere(pts, cells)
    assert check_name(exc) == "duplicate_vertices"


def test_rejects_two_spheres(ico6):
    p, c = ico6
    # rotated copy: disjoint vertex sets, each a closed sphere
    from scipy.spatial.transform import Rotation

    R = Rotation.from_rotvec([0.1, 0.2, 0.05]).as_matrix()  # generic: no vertex maps to one
    pts = np.vstack([p, p @ R.T])
    cells = np.vstack([c, c + p.shape[0]])
    with pytest.raises(MeshValidationError) as exc:
        validate_sphere(pts, cells)
    assert check_name(exc) == "connected"


@pytest.mark.parametrize("bad, check", [
    (lambda p, c: (p[:, :2], c), "shape"),
    (lambda p, c: (p, c[:, :2]), "shape"),
    (lambda p, c: (np.where(np.arange(p.shape[0])[:, None] == 3, np.nan, p), c), "finite"),
    (lambda p, c: (p, np.where(c == 0, p.shape[0] + 5, c)), "indices"),
    (lambda p, c: (p, np.vstack([c[:-1], [[0, 0, 1]]])), "indices"),
])
def test_rejects_malformed_input(ico6, bad, check):
    with pytest.raises(MeshValidationError) as exc:
        validate_sphere(*bad(*ico6))
    assert check_name(exc) == check


def test_rejects_torus_by_euler_characteristic():
    # a triangulated torus (closed, manifold, oriented) with its vertices pushed onto the sphere
    nt, nphi = 9, 6
    th, ph = np.meshgrid(2 * np.pi * np.arange(nt) / nt, 2 * np.pi * np.arange(nphi) / nphi,
                         indexing="ij")
    p = np.stack([(2 + np.cos(ph)) * np.cos(th), (2 + np.cos(ph)) * np.sin(th),
                  np.sin(ph) + 0.37],
                 axis=-1).reshape(-1, 3)
    p /= np.linalg.norm(p, axis=1, keepdims=True)
    idx = lambda i, j: (i % nt) * nphi + (j % nphi)  # noqa: E731
    cells = []
    for i in range(nt):
        for j in range(nphi):
            cells += [[idx(i, j), idx(i + 1, j), idx(i + 1, j + 1)],
                      [idx(i, j), idx(i + 1, j + 1), idx(i, j + 1)]]
    with pytest.raises(MeshValidationError) as exc:
        validate_sphere(p, np.array(cells))
    assert check_name(exc) == "euler"
    assert "V - E + F = 0" in str(exc.value)


def test_solid_angles_sum_to_4pi_for_octahedron():
    from wflow.geometry.mesh.validation import _solid_angles

    p = np.array([[1, 0, 0], [-1, 0, 0], [0, 1, 0], [0, -1, 0], [0, 0, 1], [0, 0, -1.0]])
    c = np.array([[0, 2, 4], [2, 1, 4], [1, 3, 4], [3, 0, 4],
                  [2, 0, 5], [1, 2, 5], [3, 1, 5], [0, 3, 5]])
    _, rep = validate_sphere(p, c)
    assert rep.cells == 8
    np.testing.assert_allclose(_solid_angles(p, c), np.pi / 2, rtol=1e-14)


# ------------------------------------------------------------------ I/O
@pytest.mark.parametrize("suffix", [".msh", ".xdmf", ".vtu"])
def test_write_read_roundtrip(tmp_path, ico6, suffix):
    f = tmp_path / f"s{suffix}"
    write_surface(f, ico6)
    tri = read_surface(f)
    np.testing.assert_array_equal(tri.cells, ico6.cells)
    np.testing.assert_array_equal(tri.points, ico6.points)


def test_read_missing_file(tmp_path):
    with pytest.raises(FileNotFoundError, match="does not exist"):
        read_surface(tmp_path / "nope.msh")


def test_shipped_meshes_match_readme():
    files = shipped_meshes()
    assert len(files) >= 4
    readme = (MESH_DIR / "README.md").read_text()
    cells = []
    for f in files:
        tri, rep = validate_sphere(*read_surface(f))
        row = next(line for line in readme.splitlines() if line.startswith(f"| `{f.name}`"))
        nums = [s.strip() for s in row.split("|")[3:8]]
        assert int(nums[0]) == rep.cells and int(nums[1]) == rep.vertices
        np.testing.assert_allclose([float(nums[2]), float(nums[3]), float(nums[4])],
                                   [rep.min_area, rep.max_area, rep.max_edge], rtol=1e-3)
        cells.append(rep.cells)
    assert min(cells) <= 800 and max(cells) >= 40000


# ------------------------------------------------------------------ DOLFINx geometry
def test_dolfinx_geometry_matches_triangulation(ico6, sm720):
    sm = sm720
    assert sm.mesh.topology.dim == 2 and sm.mesh.geometry.dim == 3
    assert sm.num_owned == sm.num_global == 720
    tri = ico6
    orig = sm.original_index
    # identities of flat triangles: tolerances are a few ulps of O(1) quantities
    np.testing.assert_allclose(sm.areas, flat_areas(tri)[orig], rtol=1e-13)
    np.testing.assert_allclose(sm.centroids, tri.points[tri.cells[orig]].mean(axis=1),
                               atol=1e-15)
    p = tri.points[tri.cells[orig]]
    n = np.cross(p[:, 1] - p[:, 0], p[:, 2] - p[:, 0])
    np.testing.assert_allclose(sm.normals, n / np.linalg.norm(n, axis=1, keepdims=True),
                               atol=1e-14)
    assert np.all(np.einsum("ij,ij->i", sm.normals, sm.centroids) > 0)


def test_facets_cover_each_edge_once(sm720):
    sm = sm720
    assert sm.facet_cells.shape == (1080, 2)
    pairs = {tuple(sorted(p)) for p in sm.facet_cells.tolist()}
    assert len(pairs) == 1080
    # each owned cell has three distinct neighbours, listed consistently with the facets
    assert np.all(np.sort(sm.cell_neighbors, axis=1)[:, :-1] != np.sort(sm.cell_neighbors,
                                                                        axis=1)[:, 1:])
    deg = np.bincount(sm.facet_cells.ravel(), minlength=sm.num_local)
    np.testing.assert_array_equal(deg, 3)


def test_conormals_unit_tangent_outward(sm720):
    sm = sm720
    con = sm.conormals
    np.testing.assert_allclose(np.linalg.norm(con, axis=2), 1.0, rtol=1e-14)
    t = sm.facet_points[:, 1] - sm.facet_points[:, 0]
    np.testing.assert_allclose(np.einsum("fsi,fi->fs", con, t), 0.0, atol=1e-15)
    for s in range(2):
        K = sm.facet_cells[:, s]
        # in the plane of the cell and pointing away from its centroid
        np.testing.assert_allclose(np.einsum("fi,fi->f", con[:, s], sm.normals[K]), 0.0,
                                   atol=1e-14)
        mid = sm.facet_points.mean(axis=1)
        assert np.all(np.einsum("fi,fi->f", con[:, s], mid - sm.centroids[K]) > 0)
    # closed polygon: Σ_e |e| n_{K,e} = 0 for every cell
    net = np.zeros((sm.num_local, 3))
    for s in range(2):
        np.add.at(net, sm.facet_cells[:, s], sm.facet_length[:, None] * con[:, s])
    np.testing.assert_allclose(net, 0.0, atol=1e-15)


def test_fv_divergence_matches_ufl_facet_normal_assembly(sm720):
    """Net outflow Σ_e ±|e| u·½(n⁺−n⁻) against a DOLFINx dS form with FacetNormal."""
    import ufl
    from dolfinx import fem, la

    sm = sm720
    msh = sm.mesh
    Vv = fem.functionspace(msh, ("Lagrange", 1, (3,)))
    u = fem.Function(Vv)
    u.interpolate(lambda x: np.stack([np.sin(2 * x[1]) + x[2], x[0] * x[2], np.cos(x[0])]))
    V0 = fem.functionspace(msh, ("DG", 0))
    q = ufl.TestFunction(V0)
    n = ufl.FacetNormal(msh)
    un = 0.5 * (ufl.dot(u("+"), n("+")) - ufl.dot(u("-"), n("-")))
    b = fem.assemble_vector(fem.form(un * (q("+") - q("-")) * ufl.dS))
    b.scatter_reverse(la.InsertMode.add)
    ref = b.array[np.asarray(V0.dofmap.list)[: sm.num_owned, 0]]
    # NumPy with the facet geometry of SphereMesh; u is linear on each edge -> midpoint exact
    uf = lambda x: np.stack([np.sin(2 * x[:, 1]) + x[:, 2], x[:, 0] * x[:, 2],  # noqa: E731
                             np.cos(x[:, 0])], axis=1)
    umid = 0.5 * (uf(sm.facet_points[:, 0]) + uf(sm.facet_points[:, 1]))
    F = sm.facet_length * np.einsum("fi,fi->f", umid, sm.facet_normal)
    net = np.zeros(sm.num_local)
    np.add.at(net, sm.facet_cells[:, 0], F)
    np.add.at(net, sm.facet_cells[:, 1], -F)
    np.testing.assert_allclose(net[: sm.num_owned], ref, atol=1e-14)
    assert np.max(np.abs(ref)) > 1e-3  # the comparison is not vacuous


def test_facet_quadrature(sm720):
    for k in (1, 2, 3):
        pts, w = sm720.facet_quadrature(k)
        assert pts.shape == (sm720.facet_cells.shape[0], k, 3)
        np.testing.assert_allclose(w.sum(), 1.0, rtol=1e-15)
        # exact for quadratics along the edge: ∫_0^1 s^2 = 1/3
        a, b = sm720.facet_points[:, 0], sm720.facet_points[:, 1]
        s = np.linalg.norm(pts - a[:, None], axis=2) / np.linalg.norm(b - a, axis=1)[:, None]
        if k >= 2:
            np.testing.assert_allclose(s**2 @ w, 1 / 3, rtol=1e-12)
    with pytest.raises(ValueError, match="quad_points"):
        sm720.facet_quadrature(5)


def test_gather_owned_serial_order(sm720, ico6):
    c = sm720.gather_owned(sm720.centroids)
    np.testing.assert_allclose(c, ico6.points[ico6.cells].mean(axis=1), atol=1e-15)


def test_load_mesh_specs(tmp_path):
    sm = load_mesh("sphere_720.msh")
    assert sm.num_global == 720
    bad = tmp_path / "big.msh"
    tri = icosphere(2)
    write_surface(bad, Triangulation(1.5 * tri.points, tri.cells))
    with pytest.raises(MeshValidationError, match="'radius'"):
        load_mesh(bad)
    with pytest.raises(ValueError, match="icosphere:<cells>"):
        load_mesh("icosphere:many")


# ------------------------------------------------------------------ CLI
def run_cli(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "wflow.cli", *args], capture_output=True,
                          text=True, timeout=120)


def test_cli_mesh_generate_and_check(tmp_path):
    out = tmp_path / "s.msh"
    r = run_cli("mesh", "--cells", "320", "--out", str(out))
    assert r.returncode == 0, r.stderr
    assert "cells 320" in r.stdout
    r = run_cli("mesh", "--check", str(out), "--out", str(tmp_path / "s.xdmf"))
    assert r.returncode == 0, r.stderr
    assert Path(tmp_path / "s.xdmf").is_file()


def test_cli_mesh_rejects_with_check_name(tmp_path):
    tri = icosphere(3)
    f = tmp_path / "holes.vtu"
    write_surface(f, Triangulation(tri.points, tri.cells[3:]))
    r = run_cli("mesh", "--check", str(f))
    assert r.returncode == 2
    assert re.search(r"mesh check 'closed' failed: the surface has holes", r.stderr), r.stderr
