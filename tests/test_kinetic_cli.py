"""``wflow kinetic``: the kinetic limit of causal attention from a scenario.

The command runs :func:`wflow.kinetic.solve_kinetic` on the scenario's mesh, density,
heads and causal mask, with ``λ`` of the limit bias from ``[kinetic] alibi`` or the
``[attention] bias`` (equal numbers: the files hold the API's result bit for bit); every
key it writes is in the output-key table with its command; bad input exits 2 naming the
key; the cost model is within 2× of measured runs
(``bench/results/kinetic_estimate.json``), and ``mpirun -n 2`` writes the serial result.
"""

from __future__ import annotations

import csv
import json
import shutil
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

from wflow.apps.output_keys import contract_problems, flatten, unexplained
from wflow.cli import main

ROOT = Path(__file__).resolve().parents[1]
MPIRUN = Path(sys.executable).parent / "mpirun"
RESULTS = ROOT / "bench" / "results" / "kinetic_estimate.json"

#: The shipped example (``wflow/data/causal_kinetic.toml``), edited per test.
EXAMPLE = ROOT / "wflow" / "data" / "causal_kinetic.toml"
_BIAS = 'bias = {type = "alibi", lam = 2.0, n = 64}'


def scenario(tmp_path: Path, *, bias: str = _BIAS, kinetic: str = "",
             name: str = "k.toml", drop: str = "") -> Path:
    """The example with its bias line replaced, lines added to ``[kinetic]``, or dropped."""
    text = EXAMPLE.read_text().replace(_BIAS, bias) + kinetic + "\n"
    if drop:
        text = "\n".join(line for line in text.splitlines() if not line.startswith(drop))
    f = tmp_path / name
    f.write_text(text, encoding="utf-8")
    return f


def test_kinetic_writes_the_api_result_and_documents_every_key(tmp_path, capsys):
    from wflow import KineticOptions, solve_kinetic
    from wflow.attention.heads import Attention, Heads
    from wflow.attention.mask import get_mask
    from wflow.geometry.mesh import load_mesh
    from wflow.pde import PDEOptions

    out = tmp_path / "out"
    assert main(["kinetic", str(scenario(tmp_path)), "--out", str(out)]) == 0
    cap = capsys.readouterr()
    assert "kinetic: success, 4 slices × 320 cells" in cap.out
    assert "time-error estimate" in cap.out and "note:" not in cap.err  # rtol: judged
    s = json.loads((out / "summary.json").read_text())
    assert s["solver"] == "kinetic" and s["status"] == "success" and s["slices"] == 4
    assert s["alibi"] == {"lambda": 2.0, "source": "attention.bias (lam)"}
    assert not unexplained(flatten(s)) and not contract_problems(s, "kinetic")
    with (out / "diagnostics.csv").open() as fh:
        rows = list(csv.DictReader(fh))
    assert not unexplained(list(rows[0]), csv=True)
    assert len(rows) == 3 * 4
    with np.load(out / "slices.npz") as z:
        rho, mass, areas = z["rho"], z["mass"], z["areas"]
    assert rho.shape == (3, 4, 320)
    # every slice keeps its mass 1/S (a few ulps of the sums over 320 cells)
    assert np.abs(mass - 0.25).max() <= 64 * np.finfo(float).eps
    # the command runs the API: the same numbers bit for bit
    api = solve_kinetic({"type": "vmf", "means": [[1.0, 0.0, 0.2], [-0.3, 1.0, 0.0]],
                         "kappas": [5.0, 4.0]}, Heads.scalar([1.0], d=3),
                        Attention("softmax", 1.0, mask=get_mask("causal")),
                        mesh=load_mesh("icosphere:320"),
                        options=KineticOptions(S=4, alibi=2.0, pde=PDEOptions(
                            T=0.5, dt=0.05, order=2, n_saves=3, balance=False,
                            clusters=False, seed=1, rtol=1e-3)))
    assert np.array_equal(api.rho, rho) and np.array_equal(api.areas, areas)
    # negative control: another λ is another result
    other = solve_kinetic(api.rho[0] * 0 + rho[0], Heads.scalar([1.0], d=3),
                          Attention("softmax", 1.0, mask=get_mask("causal")),
                          mesh=load_mesh("icosphere:320"),
                          options=KineticOptions(S=4, alibi=2.2, pde=PDEOptions(
                              T=0.5, dt=0.05, order=2, n_saves=3, balance=False,
                              clusters=False, seed=1, rtol=1e-3)))
    assert not np.array_equal(other.rho[-1], rho[-1])


@pytest.mark.parametrize("bias, kinetic, lam, source", [
    ('bias = {type = "alibi", slope = 0.03125}', "", 2.0, "slope 0.03125 × tokens.n = 64"),
    ("", "alibi = 1.5", 1.5, "kinetic.alibi"),
    ('bias = {type = "alibi", lam = 1.5, n = 64}', "alibi = 1.5", 1.5, "kinetic.alibi"),
    ("", "", 0.0, "none"),
])
def test_the_limit_slope_and_where_it_came_from(tmp_path, bias, kinetic, lam, source):
    out = tmp_path / "out"
    assert main(["kinetic", str(scenario(tmp_path, bias=bias, kinetic=kinetic)), "--out",
                 str(out)]) == 0
    a = json.loads((out / "summary.json").read_text())["alibi"]
    assert a["lambda"] == pytest.approx(lam, rel=1e-15) and source in a["source"]


@pytest.mark.parametrize("edit, key", [
    (dict(drop="mask"), "attention.mask"),
    (dict(kinetic="S = 0", drop="S = 4"), "kinetic.S"),
    (dict(kinetic="slices = 4"), "kinetic.slices"),
    (dict(kinetic="quadrature = 'left'"), "kinetic.quadrature"),
    (dict(kinetic="alibi = 1.0"), "kinetic.alibi"),  # disagrees with the bias's lam = 2
    (dict(kinetic="alibi = -1.0", bias=""), "kinetic.alibi"),
])
def test_bad_input_exits_2_naming_the_key(tmp_path, capsys, edit, key):
    out = tmp_path / "out"
    assert main(["kinetic", str(scenario(tmp_path, **edit)), "--out", str(out)]) == 2
    err = capsys.readouterr().err
    assert key in err, err
    assert not out.exists()


def test_diffusion_and_pde_only_keys_exit_2(tmp_path, capsys):
    f = scenario(tmp_path)
    f.write_text(f.read_text().replace('mask = "causal"', 'mask = "causal"\ndiffusion = 0.1'))
    assert main(["kinetic", str(f), "--out", str(tmp_path / "a")]) == 2
    assert "attention.diffusion" in capsys.readouterr().err
    f = scenario(tmp_path, name="r.toml")
    f.write_text(f.read_text().replace("n_saves = 3", "n_saves = 3\nflow = 'surrogate'"))
    assert main(["kinetic", str(f), "--out", str(tmp_path / "b")]) == 2
    assert "pde.flow" in capsys.readouterr().err


def test_a_run_that_cannot_fit_is_refused_before_computing(tmp_path, capsys):
    f = scenario(tmp_path)
    f.write_text(f.read_text().replace("S = 4", "S = 100000000"))
    assert main(["kinetic", str(f), "--out", str(tmp_path / "o")]) == 2
    err = capsys.readouterr().err
    assert "kinetic" in err and ("memory" in err or "GiB" in err), err


def _rows() -> list[dict]:
    return [r for r in json.loads(RESULTS.read_text())["runs"]
            if r.get("status", "success") in ("success", "completed")]


def test_the_estimate_is_within_two_of_measured_runs(monkeypatch):
    import wflow.kinetic.estimate as ke

    rows = _rows()
    assert len(rows) >= 4 and {r["S"] for r in rows} >= {8, 16, 32}
    ratios = [ke.estimate_kinetic(**r["inputs"]).seconds / r["cpu_s"] for r in rows]
    assert all(0.5 <= q <= 2.0 for q in ratios), ratios
    # rows with error control (the shipped rtol = 1e-3) and without: both within 2×
    assert {r["inputs"]["error_control"] for r in rows} == {True, False}
    # the price of error control, on the largest run measured both ways (its steps are
    # 80 % of the CPU, start-up the rest): the model's ratio to the measured ratio
    # within 4/3 (measured 1.95×, predicted 2.04×); negative control: costed as fixed
    # steps (no step doubling) the predicted ratio is 1, off by more than that
    pair = {r["inputs"]["error_control"]: r for r in rows
            if r["mesh"] == "sphere_9680.msh" and r["S"] == 8}
    measured = pair[True]["cpu_s"] / pair[False]["cpu_s"]

    def model(doubling: bool) -> float:
        on = {**pair[True]["inputs"], "error_control": doubling}
        return ke.estimate_kinetic(**on).seconds / ke.estimate_kinetic(
            **pair[False]["inputs"]).seconds

    assert 0.75 <= model(True) / measured <= 4 / 3, (model(True), measured)
    assert not 0.75 <= model(False) / measured <= 4 / 3, (model(False), measured)
    # negative control: the PDE's model (one kernel sum a stage, not one per slice)
    monkeypatch.setattr(ke, "KINETIC_CALL_SECONDS", 0.0)
    monkeypatch.setattr(ke, "KINETIC_CELL_SECONDS", 0.0)
    bare = [ke.estimate_kinetic(**{**r["inputs"], "S": 1}).seconds / r["cpu_s"]
            for r in rows]
    assert any(not 0.5 <= q <= 2.0 for q in bare), bare


@pytest.mark.mpi
@pytest.mark.skipif(not MPIRUN.exists() and shutil.which("mpirun") is None,
                    reason="mpirun not available")
def test_two_ranks_write_the_serial_result(tmp_path):
    f = scenario(tmp_path)
    assert main(["kinetic", str(f), "--out", str(tmp_path / "serial")]) == 0
    r = subprocess.run([str(MPIRUN), "-n", "2", sys.executable, "-m", "wflow.cli", "kinetic",
                        str(f), "--out", str(tmp_path / "par")], capture_output=True,
                       text=True, timeout=300, cwd=ROOT)
    assert r.returncode == 0, r.stdout + r.stderr
    with np.load(tmp_path / "serial" / "slices.npz") as a, \
            np.load(tmp_path / "par" / "slices.npz") as b:
        # the fluxes summed in another order on two ranks: round-off of the densities
        np.testing.assert_allclose(b["rho"], a["rho"], rtol=0, atol=1e-12 * a["rho"].max())
    assert json.loads((tmp_path / "par" / "summary.json").read_text())["stats"]["ranks"] == 2


def test_without_rtol_the_run_is_said_before_and_ends_completed(tmp_path, capsys):
    """The example without its ``rtol``: a note before the run, ``completed``, exit 1
    (the control, the example as shipped, is ``success`` with no note: the first test)."""
    f = scenario(tmp_path, drop="rtol")
    out = tmp_path / "out"
    assert main(["kinetic", str(f), "--out", str(out)]) == 1
    cap = capsys.readouterr()
    assert "wflow kinetic: note: no accuracy check will be judged" in cap.err
    assert "set pde.rtol" in cap.err and "wflow kinetic: run completed" in cap.err
    assert "time error not estimated (pde.rtol unset)" in cap.out
    s = json.loads((out / "summary.json").read_text())
    assert s["status"] == "completed" and not s["checks"]["tolerance"]["judged"]
    assert not contract_problems(s, "kinetic")
