"""`wflow pde` at the command line: heads the EDI does not apply to, and the files users open.

* Heads that are not value-aligned (``V ≠ ±A``) or not symmetric define no gradient flow:
  the run succeeds and the EDI is recorded as not applicable (absent), never as NaN
  (issue 14, item 5). Negative control: value-aligned heads do record a finite EDI.
* ``density.xdmf`` (+ ``.h5``) and ``density.npz`` hold the cells in one order, the mesh
  file's (item 9), and the output's modes follow the umask.
"""

from __future__ import annotations

import json
import os
import stat

import h5py
import numpy as np
import pytest

from wflow.cli import main

BASE = """seed = 0
[heads]
type = "matrices"
A = AAA
VVV
[density]
type = "vmf"
means = [[0.0, 0.0, 1.0]]
kappas = [4.0]
[pde]
mesh = "icosphere:1280"
T = 0.1
dt = 0.05
order = 2
n_saves = 3
"""
SYM = "[[[1.0, 0.2, 0.0], [0.2, 0.5, 0.0], [0.0, 0.0, -0.5]]]"
NONSYM = "[[[1.0, 0.6, 0.0], [-0.2, 0.5, 0.0], [0.0, 0.3, -0.5]]]"
OTHER_V = "V = [[[0.3, 0.0, 0.0], [0.0, -0.7, 0.1], [0.0, 0.1, 0.2]]]"


def _run(tmp_path, capsys, A: str, V: str = "") -> tuple[dict, list[str], str]:
    sc = tmp_path / "s.toml"
    sc.write_text(BASE.replace("AAA", A).replace("VVV", V))
    out = tmp_path / "o"
    rc = main(["pde", str(sc), "--out", str(out)])
    captured = capsys.readouterr()
    assert rc == 0, captured.err
    text = (out / "summary.json").read_text()
    assert '"nan"' not in text  # nothing recorded as NaN
    header = (out / "diagnostics.csv").read_text().splitlines()[0].split(",")
    return json.loads(text), header, captured.out


@pytest.mark.parametrize("A,V", [(SYM, OTHER_V), (NONSYM, "")],
                         ids=["V-not-pm-A", "A-not-symmetric"])
def test_edi_not_applicable_is_absent_not_nan(tmp_path, capsys, A, V):
    s, header, out = _run(tmp_path, capsys, A, V)
    assert s["status"] == "success" and s["sign"] == 0
    assert "balance_chain" in header
    assert "balance_edi" not in header and "balance_g2" not in header
    assert "edi" not in s["balance"] and "g2" not in s["balance"]
    assert np.isfinite(s["balance"]["chain"])
    assert "EDI not applicable (heads not value-aligned)" in out


def test_value_aligned_heads_record_the_edi(tmp_path, capsys):
    s, header, out = _run(tmp_path, capsys, SYM)
    assert s["sign"] == 1 and "balance_edi" in header and np.isfinite(s["balance"]["edi"])
    assert "EDI residual" in out


def test_xdmf_and_npz_share_the_mesh_file_cell_order(tmp_path, capsys):
    old = os.umask(0o027)
    try:
        _run(tmp_path, capsys, SYM)
    finally:
        os.umask(old)
    out = tmp_path / "o"
    with np.load(out / "density.npz") as z, h5py.File(out / "density.h5", "r") as f:
        pts, cells = f["Mesh/geometry"][()], f["Mesh/topology"][()]
        cen = pts[cells].mean(axis=1)
        # the same cells, in the same order: centroid i of the XDMF mesh is npz centroid i
        c_npz = z["centroids"] / np.linalg.norm(z["centroids"], axis=1)[:, None]
        c_xdmf = cen / np.linalg.norm(cen, axis=1)[:, None]
        np.testing.assert_allclose(c_xdmf, c_npz, atol=1e-12)
        np.testing.assert_array_equal(f["Function/t"][()], z["t"])
        for k in range(z["rho"].shape[0]):
            np.testing.assert_array_equal(f[f"Function/rho/{k}"][()], z["rho"][k])
    # the XDMF is readable by a standard reader (meshio) with the same values
    import meshio

    reader = meshio.xdmf.TimeSeriesReader(str(out / "density.xdmf"))
    rp, rc = reader.read_points_cells()
    np.testing.assert_array_equal(rc[0].data, cells)
    with np.load(out / "density.npz") as z:
        for k in range(reader.num_steps):
            tk, _, cd = reader.read_data(k)
            np.testing.assert_array_equal(cd["rho"][0].ravel(), z["rho"][k])
    # modes follow the umask (0o027 here)
    assert stat.S_IMODE(out.stat().st_mode) == 0o750
    for f in ("density.npz", "density.xdmf", "density.h5", "summary.json"):
        assert stat.S_IMODE((out / f).stat().st_mode) == 0o640, f



def test_balance_off_without_rtol_is_said_before_and_ends_completed(tmp_path, capsys):
    """``balance = false`` and no ``rtol``: a note before the run, ``completed``, exit 1;
    controls: with ``rtol`` (or the chain rule) no note and ``success``, exit 0."""
    base = BASE.replace("AAA", SYM).replace("VVV", "").replace("icosphere:1280",
                                                                  "icosphere:320")
    for extra, rc in (("balance = false\n", 1), ("balance = false\nrtol = 1e-3\n", 0),
                      ("", 0)):
        sc = tmp_path / "s.toml"
        sc.write_text(base + extra)
        out = tmp_path / f"o{len(extra)}"
        assert main(["pde", str(sc), "--out", str(out)]) == rc
        err = capsys.readouterr().err
        s = json.loads((out / "summary.json").read_text())
        noted = "wflow pde: note: no accuracy check will be judged" in err
        assert noted == (rc == 1) and s["status"] == ("completed" if rc else "success"), err
        if rc:
            assert "pde.balance = false" in err and "set pde.rtol" in err
            assert "run completed" in err and not s["checks"]["tolerance"]["judged"]
