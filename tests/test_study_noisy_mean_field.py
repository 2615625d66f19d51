"""Study ``noisy-mean-field`` (docs/theory.md §9): noisy particles against the noisy PDE.

Quick mode passes at seed 0; the PDE's diffusion off by ±5 %, a noiseless PDE and
particles that omit the Itô drift (a user integrator object, through ``run(fault=...)``)
FAIL, naming a criterion at ``T``.
"""

from __future__ import annotations

import json

import pytest

from wflow.studies.registry import STUDIES, load_study

pytestmark = pytest.mark.slow


def test_noisy_mean_field_quick_passes(tmp_path):
    assert STUDIES["noisy-mean-field"].section == "§9"
    res = load_study("noisy-mean-field").run(out=tmp_path / "m", quick=True, seed=0)
    assert res.passed, res.verdict
    summary = json.loads((tmp_path / "m" / "summary.json").read_text())
    assert all(c["ok"] for c in summary["criteria"]) and summary["settings"]["diffusion"] > 0


@pytest.mark.parametrize("fault, criterion", [
    ("pde-diffusion:0.05", "_at_T"), ("pde-diffusion:-0.05", "_at_T"),
    ("pde-noiseless", "_at_T"), ("particles-no-ito-drift", "_at_T")])
def test_noisy_mean_field_negative_controls(fault, criterion, tmp_path):
    res = load_study("noisy-mean-field").run(out=tmp_path / "m", quick=True, seed=0,
                                             fault=fault)
    assert res.passed is False and res.verdict.startswith("FAIL"), res.verdict
    assert criterion in res.verdict.split(". ")[0], res.verdict
