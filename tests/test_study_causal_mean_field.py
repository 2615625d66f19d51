"""Study ``causal-mean-field`` (docs/theory.md §10): causal particles against the kinetic limit.

Quick mode passes at seed 0 with the summary's structure (bins × moments, the kinetic
reference's mesh and slice errors); the documented quick negative controls, injected
through ``run(fault=...)`` (the kinetic velocity off by ±2 %, the particles' mask shifted
to ``j < i``, the kinetic ALiBi slope off by 50 %) FAIL, naming a criterion at ``T``; a run
that raises does not count as caught.
"""

from __future__ import annotations

import json

import pytest

from wflow.studies.registry import STUDIES, load_study

pytestmark = pytest.mark.slow


def test_causal_mean_field_registered():
    mod = load_study("causal-mean-field")
    assert STUDIES["causal-mean-field"].section == "§10"
    for mode in mod.MODES.values():
        K = 1 + mode["B"] * ((mode["L"] + 1) ** 2 - 1)
        assert round(K ** 0.5) ** 2 == K and mode["n"] % mode["B"] == 0
        assert mode["S"] % mode["B"] == 0


def test_causal_mean_field_quick_passes(tmp_path):
    mod = load_study("causal-mean-field")
    res = mod.run(out=tmp_path / "m", quick=True, seed=0)
    assert res.passed, res.verdict
    summary = json.loads((tmp_path / "m" / "summary.json").read_text())
    assert [c["name"] for c in summary["criteria"]] == ["moments_at_0", "moments_at_T",
                                                        "hotelling_at_T"]
    assert all(c["ok"] for c in summary["criteria"])
    st, fits = summary["settings"], summary["fits"]
    assert st["token_slope"] * st["n"] == pytest.approx(st["alibi_lambda"])
    assert len(fits["t_per_bin_T"]) == st["bins"]
    assert len(summary["tests"]["T"]["t"]) == st["bins"] * ((st["degree"] + 1) ** 2 - 1)
    assert 0 < fits["slice_error_max"] and 0 < fits["mesh_error_max"]


@pytest.mark.parametrize("fault", ["pde-velocity:0.02", "pde-velocity:-0.02", "mask-shifted",
                                   "bias-slope:0.5"])
def test_causal_mean_field_negative_controls(fault, tmp_path):
    res = load_study("causal-mean-field").run(out=tmp_path / "m", quick=True, seed=0,
                                              fault=fault)
    assert res.passed is False and res.verdict.startswith("FAIL"), res.verdict
    assert "_at_T" in res.verdict.split(". ")[0], res.verdict
    assert "run_finite" not in res.verdict.split(". ")[0], res.verdict
