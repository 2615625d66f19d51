"""The score test of ``noisy-mean-field``: centred on the particles' measured bias.

Fast (no study run): the bias coefficients are the fit of the results file; the centred
score reads synthetic replicates whose mean is off by the bias alone as the null, and a
wrong ``D`` of either sign on top of it as caught; the uncentred score (the negative
control: the centring removed) is caught by the bias alone when it is many standard errors.
"""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest

from wflow.studies import noisy_mean_field as nmf

RESULTS = Path(__file__).resolve().parents[1] / "bench" / "results"


def test_bias_coefficients_are_the_results_files_fit():
    fit = json.loads((RESULTS / "noisy_mean_field_bias.json").read_text())["fit"]
    # the constants are the file's numbers copied (repr round trip): equal exactly
    assert nmf.BIAS_STEP == (fit["a_at_h_T_over_16"], fit["a_se"])
    assert nmf.BIAS_CHAOS == (fit["b_at_n_1000"], fit["b_se"])


def _bias_bench():
    import importlib.util

    spec = importlib.util.spec_from_file_location(
        "noisy_mean_field_bias", RESULTS.parent / "noisy_mean_field_bias.py")
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


def test_centring_predicts_the_rows_measured_at_the_study_step(monkeypatch):
    """The fit (rows at T/8 … T/32, degree 3) against rows it never saw: the study's own
    step and degree, seeds used by no size or power run."""
    sec = json.loads((RESULTS / "noisy_mean_field_bias.json").read_text())["at_study_step"]
    rows = sec["rows"]
    assert {r["steps"] for r in rows} == {nmf.PARTICLE_STEPS}
    assert {r["degree"] for r in rows} == {nmf.MODES["quick"]["L"]}
    assert {r["n"] for r in rows} >= {nmf.MODES["quick"]["n"], nmf.MODES["full"]["n"]}
    # fresh seeds: not the size seeds 0–99 nor the held-out power seeds
    assert not {r["seed"] for r in rows} & (set(range(100)) | set(range(1000, 1005))
                                             | set(range(2000, 2060)))
    bench = _bias_bench()
    check = bench.check(rows)
    # the stored check is the module's centring now (a few flops per row: relative 1e-12)
    for got, want in zip(check["rows"], sec["check"]["rows"], strict=True):
        assert got["z"] == pytest.approx(want["z"], rel=1e-12, abs=1e-12)
    assert check["p_value"] > 0.01 and all(abs(r["z"]) < 3 for r in check["rows"])
    # negative controls: no centring, or a centre twice the fit, is rejected by these rows
    for scale in (0.0, 2.0):
        monkeypatch.setattr(nmf, "BIAS_STEP", tuple(scale * v for v in nmf.BIAS_STEP))
        monkeypatch.setattr(nmf, "BIAS_CHAOS", tuple(scale * v for v in nmf.BIAS_CHAOS))
        assert bench.check(rows)["p_value"] < 0.01, scale
        monkeypatch.undo()


def test_particle_bias_formula():
    a, sa = nmf.BIAS_STEP
    b, sb = nmf.BIAS_CHAOS
    eps = np.finfo(float).eps
    # a few flops: relative 8 eps
    got = nmf.particle_bias(1000, 16)
    assert got[0] == pytest.approx(a + b, rel=8 * eps)
    assert got[1] == pytest.approx(np.hypot(sa, sb), rel=8 * eps)
    got = nmf.particle_bias(250, 32)
    assert got[0] == pytest.approx(a / 4 + 4 * b, rel=8 * eps)
    assert got[1] == pytest.approx(np.hypot(sa / 4, 4 * sb), rel=8 * eps)


def _replicates(rng, g, shift_rel, D, R, sd):
    """``R`` replicates whose mean moments are ``ref + shift_rel·D·g`` (``ref = 0``)."""
    K = g.size + 1
    X = rng.standard_normal((R, K)) * sd
    X -= X.mean(axis=0)  # exact mean: the test reads the centring, not Monte Carlo luck
    X[:, 1:] += shift_rel * D * g
    return X


@pytest.mark.parametrize("wrong", [0.0, 0.02, -0.02])
def test_centred_score_reads_the_bias_as_null(wrong):
    rng = np.random.default_rng(5)
    D, R, K = 0.15, 256, 25
    g = rng.standard_normal(K - 1)
    # replicate s.d. such that the score's s.e. is 0.4 % of D
    sd = 0.004 * D * np.sqrt(R) * np.linalg.norm(g)
    bias = (0.003, 0.0006)
    X = _replicates(rng, g, bias[0] + wrong, D, R, sd)
    zero = np.zeros(K)
    s = nmf.score(g, X, zero, zero, D, bias=bias)
    raw = nmf.score(g, X, zero, zero, D)
    if wrong == 0.0:
        assert abs(s["z"]) < 1e-6  # the mean is exactly the bias
    else:  # a wrong D of ±2 %: caught, with the sign of the error
        assert abs(s["z"]) > s["t_crit"] and np.sign(s["z"]) == np.sign(wrong)
    # the fitted D is uncorrected: D(1 + bias + wrong) to round-off
    assert s["D_fit"] == pytest.approx(D * (1 + bias[0] + wrong), rel=1e-12)
    assert raw["z"] == pytest.approx(s["z_raw"], rel=1e-12)


def test_uncentred_score_is_caught_by_the_bias_alone():
    """Negative control: with the centring removed, a bias of 4 s.e. fails the score."""
    rng = np.random.default_rng(6)
    D, R, K = 0.15, 256, 25
    g = rng.standard_normal(K - 1)
    sd = 0.004 * D * np.sqrt(R) * np.linalg.norm(g)
    X = _replicates(rng, g, 0.016, D, R, sd)
    zero = np.zeros(K)
    raw = nmf.score(g, X, zero, zero, D)
    assert abs(raw["z"]) > raw["t_crit"]
    assert abs(nmf.score(g, X, zero, zero, D, bias=(0.016, 0.0))["z"]) < 1e-6
