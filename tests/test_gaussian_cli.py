"""``wflow gaussian``: the three forms, outputs, scenario validation, the pretrained hand-off."""

from __future__ import annotations

import csv
import json
import sys
import types
from pathlib import Path

import numpy as np
import pytest

from wflow.cli import main
from wflow.gaussian import blowup_time_isotropic

DEMOS = Path(__file__).resolve().parents[1] / "demos"

SMALL = """\
title = "small"
d = 2

[params]
A = [[0.5, -0.8], [0.8, 0.5]]
b = [0.2, -0.1]
V = -1.0
B = [[1.0, 0.3], [0.3, 0.6]]

[initial]
m = [1.0, 0.0]
Sigma = [[0.3, 0.1], [0.1, 0.2]]

[run]
T = 6.0
n_out = 31

[particles]
n = 150
steps = 30

[target]
m = [-1.0, 1.0]
Sigma = [[1.0, -0.4], [-0.4, 0.5]]
T = 1.0

[phase]
x_name = "a"
x = [-1.0, 1.0]
y_name = "vb"
y = [-1.0, 1.0]
n = 5
Ax = 1.0
V0 = 1.0
By = 1.0
"""


def write(tmp_path: Path, text: str, name: str = "s.toml") -> Path:
    p = tmp_path / name
    p.write_text(text)
    return p


def test_help_describes_all_forms(capsys):
    with pytest.raises(SystemExit) as e:
        main(["gaussian", "--help"])
    assert e.value.code == 0
    out = capsys.readouterr().out
    for word in ("SCENARIO.toml", "reach", "pretrained", "--n-samples", "make install-models",
                 "--model", "blow-up", "Riccati"):
        assert word in out, word


def test_blowup_demo_scenario(tmp_path, capsys):
    out = tmp_path / "blow"
    assert main(["gaussian", str(DEMOS / "gaussian_blowup.toml"), "--out", str(out)]) == 0
    s = json.loads((out / "summary.json").read_text())
    t_star = blowup_time_isotropic(0.2, 0.7, 0.4, np.diag([0.8, 0.5, 0.2]))
    assert s["result"]["status"] == "blowup"
    assert s["result"]["blowup_time"] == pytest.approx(t_star, rel=1e-8)
    assert s["closed_form_blowup_time"] == pytest.approx(t_star, rel=1e-10)
    assert s["classification"]["label"] == "blows_up"
    assert s["classification"]["blowup_time"] == pytest.approx(t_star, rel=1e-10)
    with (out / "trajectory.csv").open() as fh:
        rows = list(csv.reader(fh))
    assert rows[0][:4] == ["t", "m_0", "m_1", "m_2"] and "lambda_max" in rows[0]
    assert float(rows[-1][0]) < t_star  # stops at the event, before t*
    assert all(np.isfinite(float(v)) for v in rows[-1])
    assert (out / "trajectory.png").stat().st_size > 0
    assert "blowup" in capsys.readouterr().out


def test_run_form_full_scenario(tmp_path):
    scn = write(tmp_path, SMALL)
    out = tmp_path / "run"
    assert main(["gaussian", "run", str(scn), "--out", str(out)]) == 0
    s = json.loads((out / "summary.json").read_text())
    assert s["result"]["status"] == "completed"
    assert s["classification"]["label"] == "converges"
    assert s["nearest_equilibrium"]["stable"] and s["nearest_equilibrium"]["bures_distance"] < 0.05
    assert s["particles"]["status"] == "ok" and s["particles"]["w2"] < 0.2
    assert sum(s["phase_diagram"]["counts"].values()) == 25
    assert (out / "phase_diagram.png").is_file() and (out / "trajectory.png").is_file()


def test_reach_form(tmp_path, capsys):
    scn = write(tmp_path, SMALL)
    out = tmp_path / "reach"
    assert main(["gaussian", "reach", str(scn), "--out", str(out)]) == 0
    s = json.loads((out / "summary.json").read_text())
    assert s["reach"]["status"] == "reached"
    assert s["reach"]["Sigma_error"] < 1e-7 and s["reach"]["m_error"] < 1e-7
    header = (out / "trajectory.csv").read_text().splitlines()[0].split(",")
    assert "A_0_1" in header and "b_1" in header
    assert (out / "reach.png").is_file()
    assert "reached" in capsys.readouterr().out


def test_reach_rank_mismatch_is_refused(tmp_path, capsys):
    text = SMALL.replace("Sigma = [[0.3, 0.1], [0.1, 0.2]]", "Sigma = [[0.3, 0.0], [0.0, 0.0]]")
    out = tmp_path / "r"
    assert main(["gaussian", "reach", str(write(tmp_path, text)), "--out", str(out)]) == 2
    err = capsys.readouterr().err
    assert "rank Σ₁ = 2 differs from rank Σ₀ = 1" in err and "invariant" in err
    assert not out.exists()


@pytest.mark.parametrize("edit,message", [
    (("[run]", "[run]\nfoo = 1"), "run.foo: unknown key"),
    (("T = 6.0", "T = nan"), "run.T: must be finite"),
    (("V = -1.0", "V = [1.0, 2.0]"), "params.V: expected a scalar or a 2×2 matrix"),
    (("m = [1.0, 0.0]", "m = [1.0]"), "initial.m: expected a vector of length 2"),
    (("Sigma = [[0.3, 0.1], [0.1, 0.2]]", "Sigma = [[0.3, 0.5], [0.5, 0.2]]"),
     "initial.Sigma: not positive semi-definite"),
    (("d = 2", "d = 2\nbogus = 3"), "scenario.bogus: unknown key"),
    (("n = 150", "n = 1.5"), "particles.n: expected an integer"),
])
def test_scenario_validation_names_key(tmp_path, capsys, edit, message):
    text = SMALL.replace(*edit, 1)
    assert main(["gaussian", str(write(tmp_path, text)), "--out", str(tmp_path / "o")]) == 2
    assert message in capsys.readouterr().err


def test_missing_file_and_misplaced_options(tmp_path, capsys):
    assert main(["gaussian", str(tmp_path / "nope.toml"), "--out", str(tmp_path / "o")]) == 2
    assert "scenario file not found" in capsys.readouterr().err
    scn = write(tmp_path, SMALL)
    assert main(["gaussian", str(scn), "--out", str(tmp_path / "o"), "--n-samples", "4"]) == 2
    assert "--n-samples: only for `wflow gaussian pretrained`" in capsys.readouterr().err
    assert main(["gaussian", "reach", "--out", str(tmp_path / "o")]) == 2
    assert "reach: needs a SCENARIO.toml" in capsys.readouterr().err


def test_pretrained_calls_the_models_contract(tmp_path, monkeypatch, capsys):
    calls = {}

    def fake_gaussianity(*, n_samples, seed, layers=None, pca_dim=None):
        calls.update(n_samples=n_samples, seed=seed, layers=layers, pca_dim=pca_dim)
        return types.SimpleNamespace(status="success", message="", name="RESULT")

    def fake_write(result, out_dir):
        calls["result"] = result
        (Path(out_dir) / "summary.json").write_text("{}")

    fake = types.ModuleType("wflow.models")
    fake.pretrained_gaussianity = fake_gaussianity
    fake.write_pretrained_report = fake_write
    monkeypatch.setitem(sys.modules, "wflow.models", fake)
    out = tmp_path / "pre"
    assert main(["gaussian", "pretrained", "--out", str(out), "--n-samples", "64", "--seed", "3",
                 "--layers", "0", "2"]) == 0
    assert calls.pop("result").name == "RESULT"
    assert calls == {"n_samples": 64, "seed": 3, "layers": [0, 2], "pca_dim": None}
    assert (out / "summary.json").is_file()


def test_pretrained_without_models_extra(tmp_path, monkeypatch, capsys):
    monkeypatch.setitem(sys.modules, "wflow.models", None)  # import raises ImportError
    assert main(["gaussian", "pretrained", "--out", str(tmp_path / "p")]) == 2
    assert "make install-models" in capsys.readouterr().err
    assert not (tmp_path / "p").exists()


def test_layers_scenario(tmp_path):
    """[[layers]] override [params] per layer; T defaults to the total depth; no classification."""
    text = """\
d = 1
[params]
V = 1.0
B = 0.5
[[layers]]
duration = 0.5
[[layers]]
duration = 0.25
B = -0.5
[initial]
m = [0.0]
Sigma = [[1.0]]
[particles]
n = 100
steps = 30
"""
    out = tmp_path / "layers"
    assert main(["gaussian", str(write(tmp_path, text)), "--out", str(out)]) == 0
    s = json.loads((out / "summary.json").read_text())
    assert s["T"] == 0.75 and "classification" not in s
    # 1/σ decreases by 2vb·Δ in layer 1 (vb = 0.5) and increases by 0.5·0.25 in layer 2
    assert s["result"]["final_Sigma"][0][0] == pytest.approx(1 / (1 - 0.5 + 0.25), rel=1e-8)
    assert s["particles"]["status"] == "ok"


def strict_json(path: Path):
    """Parse as standard JSON: no NaN/Infinity tokens, no "inf"/"nan" strings for numbers."""
    def refuse(token):
        raise AssertionError(f"{path.name}: non-standard JSON constant {token}")

    data = json.loads(path.read_text(), parse_constant=refuse)

    def walk(x, where="$"):
        if isinstance(x, dict):
            for k, v in x.items():
                walk(v, f"{where}.{k}")
        elif isinstance(x, list):
            for i, v in enumerate(x):
                walk(v, f"{where}[{i}]")
        else:
            assert x not in ("inf", "-inf", "nan", "Infinity", "NaN"), where

    walk(data)
    return data


def test_issue_example_algebraic_decay(tmp_path, capsys):
    """A = 0, V = diag(2, 1), B = −I, Σ₀ = I: Σ → 0 like 1/t (was 'undetermined (probe)')."""
    out = tmp_path / "alg"
    assert main(["gaussian", str(DEMOS / "gaussian_algebraic.toml"), "--out", str(out)]) == 0
    io = capsys.readouterr()
    assert "classification: converges_to_zero (exact), ~ t^(−1)" in io.out
    assert io.err == ""  # no raw warning line
    s = strict_json(out / "summary.json")
    c = s["classification"]
    assert (c["label"], c["scope"], c["rate_kind"], c["rate"]) == (
        "converges_to_zero", "Sigma0", "algebraic", 1.0)
    assert c["rate_fit"]["rate"] == pytest.approx(1.0, rel=1e-3)
    np.testing.assert_allclose(c["details"]["t_Sigma_limit"], np.diag([0.25, 0.5]), atol=1e-12)
    # V is not scalar: no closed form, written as null (not "inf")
    assert s["closed_form_blowup_time"] is None and s["closed_form_searched_to"] is None
    # σᵢ(T) = 1/(1 + 2vᵢT)
    np.testing.assert_allclose(s["result"]["final_Sigma"], np.diag([1 / 4001, 1 / 2001]),
                               rtol=1e-7)


def test_issue_example_rank_deficient_B(tmp_path, capsys):
    """V = I, B = diag(−1, 0): Σ → Q(QᵀΣ₀⁻¹Q)⁻¹Qᵀ = diag(0, 0.75) (was 'bounded', limit None)."""
    out = tmp_path / "ker"
    assert main(["gaussian", str(DEMOS / "gaussian_kernel.toml"), "--out", str(out)]) == 0
    io = capsys.readouterr()
    assert "classification: converges (exact), ~ t^(−1), limit of rank 1" in io.out
    assert io.err == ""
    s = strict_json(out / "summary.json")
    c = s["classification"]
    assert c["label"] == "converges" and c["limit_rank"] == 1
    np.testing.assert_allclose(c["limit"], np.diag([0.0, 0.75]), atol=1e-15)
    assert any(f["source"] == "kernel" for f in c["families"])
    # V = vI: the closed form was searched up to T and found no blow-up: null, not "inf"
    assert s["closed_form_blowup_time"] is None and s["closed_form_searched_to"] == 1e4
    # Σ(T)⁻¹ = Σ₀⁻¹ + diag(2T, 0): W2 to the limit ≈ |Σ₁₂(T)|-sized, O(1/√T)·small
    P = np.linalg.inv(np.array([[1.0, 0.5], [0.5, 1.0]])) + np.diag([2e4, 0.0])
    np.testing.assert_allclose(s["result"]["final_Sigma"], np.linalg.inv(P), atol=1e-10)
    assert s["distance_to_limit"] < 1e-2


def test_classify_scope_all_and_validation(tmp_path, capsys):
    text = (DEMOS / "gaussian_kernel.toml").read_text().replace(
        "horizon = 10000.0", 'horizon = 10000.0\nscope = "all"')
    out = tmp_path / "all"
    assert main(["gaussian", str(write(tmp_path, text)), "--out", str(out)]) == 0
    c = strict_json(out / "summary.json")["classification"]
    assert c["scope"] == "all" and c["label"] == "converges" and c["limit"] is None
    bad = text.replace('scope = "all"', 'scope = "every"')
    assert main(["gaussian", str(write(tmp_path, bad, "b.toml")), "--out",
                 str(tmp_path / "b")]) == 2
    err = capsys.readouterr().err
    assert "classify.scope: must be one of ['initial', 'all'], got 'every'" in err


def test_reach_summary_is_standard_json(tmp_path):
    scn = write(tmp_path, SMALL)
    out = tmp_path / "reach"
    assert main(["gaussian", "reach", str(scn), "--out", str(out)]) == 0
    r = strict_json(out / "summary.json")["reach"]
    assert r["status"] == "reached" and r["message"] == ""
    assert r["w2_error"] >= r["m_error"]  # W2 ≥ |Δm| (no cancellation in the Bures term)
