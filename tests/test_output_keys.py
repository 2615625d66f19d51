"""Every key wflow writes into summary.json and every CSV column is explained by the one
table of :mod:`wflow.apps.output_keys` (meaning, unit, sign); the documentation's output
reference is generated from it."""

from __future__ import annotations

import csv
import json

import pytest

from wflow.apps.output_keys import (
    CSV_COLUMNS,
    SUMMARY_KEYS,
    contract_problems,
    explain,
    flatten,
    unexplained,
)
from wflow.cli import main
from wflow.studies.base import VERDICT_STATUS

SCENARIO = """
seed = 3
[attention]
kind = "softmax"
beta = 1.0
d = 3
[tokens]
n = 100
sampler = "vmf"
means = [[1.0, 0.0, 0.2], [-0.3, 1.0, 0.0]]
kappas = [5.0, 4.0]
[heads]
type = "matrices"
A = [[[1.5, 0.3, 0.0], [0.3, 0.5, 0.0], [0.0, 0.0, -0.5]],
     [[0.2, 0.0, 0.4], [0.0, 1.0, 0.0], [0.4, 0.0, 1.2]]]
w = "mean"
[particles]
T = 0.3
dt = 0.05
entropy = true
[density]
type = "vmf"
means = [[1.0, 0.0, 0.2], [-0.3, 1.0, 0.0]]
kappas = [5.0, 4.0]
[pde]
mesh = "sphere_720.msh"
T = 0.5
dt = 0.05
order = 2
flow = "surrogate"
n_saves = 3
entropy = true
head_rates = true
[jko]
mesh = "sphere_720.msh"
T = 1.0
tau = 0.5
[run]
n_particles = 200
particle_steps_per_save = 2
jko = true
"""


@pytest.fixture(scope="module")
def outputs(tmp_path_factory):
    root = tmp_path_factory.mktemp("outputs")
    sc = root / "small.toml"
    sc.write_text(SCENARIO, encoding="utf-8")
    outs = {}
    for cmd in ("particles", "pde", "jko", "run"):
        out = root / cmd
        assert main([cmd, str(sc), "--out", str(out)]) == 0, cmd
        outs[cmd] = out
    return outs


@pytest.mark.parametrize("cmd", ["particles", "pde", "jko", "run"])
def test_every_written_key_and_column_is_in_the_table(outputs, cmd):
    out = outputs[cmd]
    summary = json.loads((out / "summary.json").read_text(encoding="utf-8"))
    keys = flatten(summary)
    assert len(keys) > 50
    assert not unexplained(keys), f"{cmd}: summary keys missing from output_keys: " \
        f"{unexplained(keys)}"
    assert not contract_problems(summary, cmd)
    for table in sorted(out.glob("*.csv")):
        with table.open(encoding="utf-8") as fh:
            cols = next(csv.reader(fh))
        assert not unexplained(cols, csv=True), f"{table.name}: {unexplained(cols, csv=True)}"


def _summary(out) -> dict:
    return json.loads((out / "summary.json").read_text(encoding="utf-8"))


def test_verify_keeps_the_contract(tmp_path):
    """wflow verify equiangular: every key documented; the verdict is the status."""
    assert main(["verify", "equiangular", "--quick", "--out", str(tmp_path / "s")]) == 0
    s = _summary(tmp_path / "s")
    assert {"study", "passed", "verdict", "criteria[].value"} <= set(flatten(s))
    assert not contract_problems(s, "verify"), contract_problems(s, "verify")
    assert s["status"] == VERDICT_STATUS["PASS"] == "success" and s["message"] == ""
    assert set(s["checks"]) == {c["name"] for c in s["criteria"]}
    assert all(c["passed"] for c in s["checks"].values())
    # negative control: a documented fault fails the verdict, and the status says so
    assert main(["verify", "equiangular", "--quick", "--fault", "euler",
                 "--out", str(tmp_path / "f")]) == 1
    f = _summary(tmp_path / "f")
    assert f["status"] == "failed" and f["message"] == f["verdict"]
    assert not all(c["passed"] for c in f["checks"].values())


def test_a_verdict_maps_to_one_status():
    from wflow.studies.base import StudyResult, study_status

    def status(passed, verdict):
        return study_status(StudyResult("x", {"criteria": []}, verdict, passed))[0]

    assert status(True, "All 2 criteria hold") == "success"
    assert status(False, "FAIL — 1 of 2 criteria not met") == "failed"
    assert status(False, "INCONCLUSIVE — the negative control did not fail") == "inconclusive"
    assert status(False, "s2_ou: published claim b ≈ −1: INCONCLUSIVE (tolerance ±0.25)") == \
        "inconclusive"
    assert status(False, "s2: s2_ou INCONCLUSIVE; s2_oscillating NOT REPRODUCED") == "failed"


#: A Gaussian scenario with every table the run and reach forms write keys for.
GAUSSIAN = """\
title = "contract"
d = 2
[params]
A = [[-0.4, 0.6], [-0.6, -0.4]]
b = [0.1, 0.0]
V = -0.5
B = [[0.8, 0.1], [0.1, 0.4]]
[initial]
m = [0.5, -0.5]
Sigma = [[0.4, 0.0], [0.0, 0.1]]
[run]
T = 4.0
n_out = 21
[particles]
n = 100
steps = 20
[target]
m = [1.0, 0.5]
Sigma = [[0.5, 0.2], [0.2, 0.6]]
T = 1.0
[phase]
x_name = "a"
x = [-1.0, 1.0]
y_name = "vb"
y = [-1.0, 1.0]
n = 3
Ax = 1.0
V0 = 1.0
By = 1.0
"""


def test_gaussian_keeps_the_contract(tmp_path):
    """wflow gaussian (run and reach forms): status, message, checks; every key documented."""
    sc = tmp_path / "g.toml"
    sc.write_text(GAUSSIAN, encoding="utf-8")
    assert main(["gaussian", str(sc), "--out", str(tmp_path / "run")]) == 0
    assert main(["gaussian", "reach", str(sc), "--out", str(tmp_path / "reach")]) == 0
    run, reach = _summary(tmp_path / "run"), _summary(tmp_path / "reach")
    assert len(flatten(run)) > 60
    assert not contract_problems(run, "gaussian"), contract_problems(run, "gaussian")
    assert not contract_problems(reach, "gaussian"), contract_problems(reach, "gaussian")
    assert run["status"] == "success" and run["checks"] == {}
    assert reach["status"] == "success" and set(reach["checks"]) == {
        "m_error", "Sigma_error", "w2_error"}
    assert all(c["passed"] and c["value"] <= c["tolerance"] for c in reach["checks"].values())


def test_a_missed_reach_is_not_a_success(tmp_path):
    """Negative control: a tolerance the controls cannot meet makes the checks fail."""
    from wflow.apps.jobs.gaussian import reach_scenario, write_reach
    from wflow.gaussian.options import load_gaussian_scenario

    sc = tmp_path / "g.toml"
    sc.write_text(GAUSSIAN, encoding="utf-8")
    scn = load_gaussian_scenario(sc)
    res = reach_scenario(scn, tol=1e-300)
    write_reach(res, scn, tmp_path / "r")
    s = _summary(tmp_path / "r")
    assert s["status"] == "inaccurate" and s["message"]
    assert not all(c["passed"] for c in s["checks"].values())


def test_a_broken_contract_is_caught():
    """Negative control: a summary without status, or with a key of another command."""
    ok = {"status": "success", "message": "", "checks": {}, "n_tokens": 1}
    assert contract_problems({k: v for k, v in ok.items() if k != "status"}, "particles") \
        == ["no status"]
    assert contract_problems({**ok, "checks": []}, "particles") == ["checks: not a mapping"]
    assert contract_problems(ok, "particles") == []
    assert contract_problems(ok, "gaussian") == [
        "n_tokens: its entry 'n_tokens' has where = 'wflow particles'"]


def test_an_unknown_key_is_caught():
    """Negative control: a key no entry explains is reported, in summaries and CSVs."""
    summary = {"status": "success", "edi": {"pde": {"relative": 0.1, "mystery": 1.0}},
               "verdicts": [{"value": 1.0, "oddity": 2}]}
    assert unexplained(flatten(summary)) == ["edi.pde.mystery", "verdicts[].oddity"]
    assert unexplained(["t", "E_h3", "not_a_column"], csv=True) == ["not_a_column"]


def test_every_entry_says_what_it_is():
    for entry in (*SUMMARY_KEYS, *CSV_COLUMNS):
        assert entry.meaning and entry.unit, entry
    assert explain("edi.jko.relative").unit == "1"
    assert explain("edi.jko.residual").unit == "energy"
