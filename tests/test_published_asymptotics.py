"""Study `asymptotics` (THEORY §5): positive runs at several seeds, faults that flip it."""

from __future__ import annotations

import json

import pytest

from wflow.studies import asymptotics


@pytest.mark.parametrize("seed", [0, 1, 2])
def test_asymptotics_quick_passes_at_several_seeds(seed, tmp_path):
    res = asymptotics.run(out=tmp_path / "a", quick=True, seed=seed)
    summary = json.loads((tmp_path / "a" / "summary.json").read_text())
    assert res.passed, res.verdict
    assert summary["passed"] and "as predicted" in res.verdict and "OUTSIDE" not in res.verdict
    fits = summary["fits"]["G2_vs_H"]
    assert abs(fits["ou"]["slope"] + 1) < asymptotics.SLOPE_TOL
    assert abs(fits["oscillating"]["slope"]) < asymptotics.SLOPE_TOL


@pytest.mark.parametrize("fault, says", [
    ("ou_constant_noise", "OU loses >= 80 % of its early G²"),
    ("frozen_oscillation", "oscillating late level within 5x of its early level"),
    ("shared_noise", "(OU, theory −1: OUTSIDE"),
])
def test_asymptotics_faults_flip_the_verdict(fault, says, tmp_path):
    res = asymptotics.run(out=tmp_path / "a", quick=True, seed=0, fault=fault)
    assert not res.passed and says in res.verdict and fault in res.verdict, res.verdict


def test_asymptotics_rejects_an_unknown_fault(tmp_path):
    with pytest.raises(ValueError, match="unknown fault"):
        asymptotics.run(out=tmp_path / "a", quick=True, fault="nope")
    assert not (tmp_path / "a").exists()


@pytest.mark.slow
@pytest.mark.parametrize("seed", [0, 1, 2, 3])
def test_asymptotics_full_passes(seed, tmp_path):
    # full mode: n = 200, T = 20, dt = 5e-3, H = 1 … 100, 3 paths (runtime in summary.json)
    res = asymptotics.run(out=tmp_path / "a", quick=False, seed=seed)
    print(f"asymptotics full seed {seed}: {res.summary['wall_time_s']:.0f} s; {res.verdict}")
    assert res.passed, res.verdict
