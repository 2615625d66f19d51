"""Meshes a user brings: single precision, other radii, unreadable files, plain messages.

``wflow mesh --check F --project --out G`` projects onto the unit sphere and G passes
``--check``; without ``--project`` a mesh off the sphere is never written; the solvers'
loader projects meshes within :data:`wflow.geometry.mesh.PROJECT_TOL` with a warning and refuses
the rest; messages print plain numbers (issue 14, item 8).
"""

from __future__ import annotations

import logging

import meshio
import numpy as np
import pytest

from wflow.cli import main
from wflow.geometry.mesh import (
    PROJECT_TOL,
    RADIUS_TOL,
    MeshValidationError,
    Triangulation,
    icosphere,
    load_mesh,
    project_to_sphere,
    validate_sphere,
)


@pytest.fixture
def float32_sphere(tmp_path):
    """An icosphere stored in single precision (like pyvista's ``Sphere``): |r − 1| ~ 4e-8."""
    tri = icosphere(6)
    pts = tri.points.astype(np.float32)
    err = np.abs(np.linalg.norm(pts.astype(np.float64), axis=1) - 1).max()
    assert RADIUS_TOL < err < PROJECT_TOL  # the case of the issue
    f = tmp_path / "f32.vtu"
    meshio.write(f, meshio.Mesh(pts, [("triangle", tri.cells.astype(np.int32))]))
    return f


def _err(capsys) -> str:
    err = capsys.readouterr().err
    lines = err.strip().splitlines()
    assert len(lines) == 1 and "Traceback" not in err, err
    return lines[0]


def test_float32_mesh_fails_check_and_project_fixes_it(tmp_path, capsys, float32_sphere):
    assert main(["mesh", "--check", str(float32_sphere)]) == 2
    assert "mesh check 'radius' failed" in _err(capsys)
    g = tmp_path / "g.msh"
    assert main(["mesh", "--check", str(float32_sphere), "--project", "--out", str(g)]) == 0
    assert "projected onto the sphere" in capsys.readouterr().out
    assert main(["mesh", "--check", str(g)]) == 0  # the written mesh passes the strict check


def test_tolerant_check_never_writes_a_mesh_that_fails_check(tmp_path, capsys, float32_sphere):
    g = tmp_path / "g.msh"
    assert main(["mesh", "--check", str(float32_sphere), "--radius-tol", "1e-6"]) == 0
    capsys.readouterr()
    assert main(["mesh", "--check", str(float32_sphere), "--radius-tol", "1e-6", "--out",
                 str(g)]) == 2
    assert "--project" in _err(capsys)
    assert not g.exists() and not list(tmp_path.glob(".g.msh*"))


def test_other_radius_needs_explicit_projection(tmp_path, capsys):
    tri = icosphere(5)
    f = tmp_path / "half.msh"
    meshio.write(f, meshio.Mesh(0.5 * tri.points, [("triangle", tri.cells)]),
                 file_format="gmsh", binary=True)
    with pytest.raises(MeshValidationError, match="radius"):
        load_mesh(f)  # 0.5 is not a rounding error: refused by the solvers' loader
    g = tmp_path / "unit.msh"
    assert main(["mesh", "--check", str(f), "--project", "--out", str(g)]) == 0
    assert "was 5.0e-01" in capsys.readouterr().out
    assert main(["mesh", "--check", str(g)]) == 0


def test_loader_projects_within_tolerance_with_a_warning(float32_sphere, caplog):
    with caplog.at_level(logging.WARNING, logger="wflow.geometry.mesh"):
        sm = load_mesh(float32_sphere)
    assert any("projected onto the sphere" in r.getMessage() for r in caplog.records)
    verts = sm.cell_vertices.reshape(-1, 3)
    # projected in float64: unit length to round-off
    np.testing.assert_allclose(np.linalg.norm(verts, axis=1), 1.0, atol=4e-16)
    with pytest.raises(MeshValidationError, match="radius"):
        load_mesh(float32_sphere, project_tol=0.0)  # negative control: no projection


def test_pde_runs_on_a_single_precision_mesh(tmp_path, capsys, float32_sphere):
    sc = tmp_path / "s.toml"
    sc.write_text(f"""[heads]
type = "random_symmetric"
H = 1
scale = 0.5
[pde]
mesh = "{float32_sphere}"
T = 0.05
dt = 0.05
""")
    assert main(["pde", str(sc), "--out", str(tmp_path / "o")]) == 0


def test_existing_out_file_needs_overwrite(tmp_path, capsys):
    g = tmp_path / "g.msh"
    g.write_text("user's file")
    assert main(["mesh", "--cells", "80", "--out", str(g)]) == 2
    assert "--overwrite" in _err(capsys)
    assert g.read_text() == "user's file"
    assert main(["mesh", "--cells", "80", "--out", str(g), "--overwrite"]) == 0
    assert main(["mesh", "--check", str(g)]) == 0
    d = tmp_path / "folder"
    d.mkdir()
    assert main(["mesh", "--cells", "80", "--out", str(d), "--overwrite"]) == 2
    assert "is a folder" in _err(capsys)
    assert main(["mesh", "--cells", "80", "--out", str(g / "x.msh")]) == 2
    assert "not a folder" in _err(capsys)


def test_xdmf_mesh_written_with_its_h5(tmp_path, capsys):
    g = tmp_path / "s.xdmf"
    assert main(["mesh", "--cells", "80", "--out", str(g)]) == 0
    assert g.is_file() and (tmp_path / "s.h5").is_file()
    assert main(["mesh", "--check", str(g)]) == 0
    assert sorted(p.name for p in tmp_path.iterdir()) == ["s.h5", "s.xdmf"]


def test_unreadable_file_is_one_line(tmp_path, capsys):
    f = tmp_path / "m.vtk"
    f.write_bytes(b"# vtk DataFile Version 5.1\nnot really\n")
    assert main(["mesh", "--check", str(f)]) == 2
    line = _err(capsys)
    assert "mesh check 'read' failed" in line and "m.vtk" in line


@pytest.mark.parametrize("case", ["manifold", "closed", "duplicate_vertices"])
def test_messages_print_plain_numbers(case):
    tri = icosphere(3)
    p, c = tri.points, tri.cells
    if case == "manifold":
        c = np.vstack([c, c[:1][:, [0, 2, 1]]])
    elif case == "closed":
        c = c[1:]
    else:
        p = np.vstack([p, p[:1]])  # a second copy of vertex 0
    with pytest.raises(MeshValidationError) as e:
        validate_sphere(p, c)
    assert e.value.check == case, str(e.value)
    assert "np." not in str(e.value) and "int64" not in str(e.value)


def test_triangulation_projection_api():
    tri = icosphere(4)
    t2 = Triangulation(2.0 * tri.points, tri.cells)
    t3, before = project_to_sphere(t2)
    assert before == pytest.approx(1.0)
    validate_sphere(t3.points, t3.cells)
