"""Every key wflow writes into summary.json and every CSV column is explained by the one
table of :mod:`wflow.infra.output_keys` (meaning, unit, sign); the documentation's output
reference is generated from it."""

from __future__ import annotations

import csv
import json

import pytest

from wflow.cli import main
from wflow.infra.output_keys import CSV_COLUMNS, SUMMARY_KEYS, explain, flatten, unexplained

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
    keys = flatten(json.loads((out / "summary.json").read_text(encoding="utf-8")))
    assert len(keys) > 50
    assert not unexplained(keys), f"{cmd}: summary keys missing from output_keys: " \
        f"{unexplained(keys)}"
    for table in sorted(out.glob("*.csv")):
        with table.open(encoding="utf-8") as fh:
            cols = next(csv.reader(fh))
        assert not unexplained(cols, csv=True), f"{table.name}: {unexplained(cols, csv=True)}"


def test_a_study_writes_the_common_keys(tmp_path):
    from wflow.studies.registry import load_study

    load_study("equiangular").run(out=tmp_path / "s", quick=True, seed=0)
    keys = flatten(json.loads((tmp_path / "s" / "summary.json").read_text(encoding="utf-8")))
    common = [k for k in keys if not k.startswith(("cases[]", "fits."))]
    assert {"study", "passed", "verdict", "criteria[].value"} <= set(common)
    assert not unexplained(common), unexplained(common)


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
