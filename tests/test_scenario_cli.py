"""Scenario validation, the particles command and its outputs."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

from wflow.apps.scenario import ScenarioError, parse_scenario
from wflow.cli import build_parser, main

ROOT = Path(__file__).resolve().parents[1]

BASE = {
    "seed": 1,
    "attention": {"kind": "softmax", "beta": 1.0, "d": 3},
    "tokens": {"n": 30, "sampler": "uniform"},
    "heads": {"type": "random_symmetric", "H": 2, "scale": 0.5},
    "particles": {"T": 0.2, "dt": 0.05},
}


def with_(path: str, value):
    raw = json.loads(json.dumps(BASE))
    sec, key = path.split(".")
    raw.setdefault(sec, {})[key] = value
    return raw


@pytest.mark.parametrize(
    "path,value,match",
    [
        ("heads.scael", 1.0, r"heads\.scael: unknown key"),
        ("attention.beta", -1.0, r"attention\.beta: must be > 0"),
        ("attention.beta", float("nan"), r"attention\.beta: must be finite"),
        ("attention.kind", "linear", r"attention\.kind: must be one of"),
        ("tokens.n", 2.5, r"tokens\.n: expected an integer"),
        ("particles.integrator", "rk2", r"particles\.integrator"),
        ("heads.A", [[1.0, 0.0], [0.0, 1.0]], r"heads\.A: expected 3-dimensional"),
        ("schedule.type", "sometimes", r"schedule\.type"),
        ("tokens.sampler", "file", r"tokens\.file: required"),
    ],
)
def test_bad_values_name_the_key(path, value, match):
    with pytest.raises(ScenarioError, match=match):
        sc = parse_scenario(with_(path, value))
        sc.build_tokens()
        sc.build_schedule()


def test_unknown_section_and_wrong_matrix_shape():
    raw = dict(BASE, particels={"T": 1})
    with pytest.raises(ScenarioError, match="particels: unknown top-level key"):
        parse_scenario(raw)
    raw = with_("heads.type", "matrices")
    raw["heads"]["A"] = np.eye(2)[None].tolist()
    with pytest.raises(ScenarioError, match=r"heads\.A: expected shape \(H, 3, 3\)"):
        parse_scenario(raw).build_heads()


def test_non_unit_tokens_file_rejected(tmp_path):
    np.save(tmp_path / "x.npy", 2 * np.eye(3))
    raw = with_("tokens.sampler", "file")
    raw["tokens"]["file"] = "x.npy"
    with pytest.raises(ScenarioError, match="not on the unit sphere"):
        parse_scenario(raw, base_dir=tmp_path).build_tokens()


def _write(tmp_path, raw) -> Path:
    import tomllib  # noqa: F401  (round-trip through a real TOML file)

    lines = [f"seed = {raw['seed']}"]
    for sec, vals in raw.items():
        if sec == "seed":
            continue
        lines.append(f"[{sec}]")
        for k, v in vals.items():
            lines.append(f"{k} = {json.dumps(v)}")
    p = tmp_path / "sc.toml"
    p.write_text("\n".join(lines) + "\n")
    return p


def test_particles_command_writes_outputs(tmp_path):
    sc = _write(tmp_path, BASE)
    out = tmp_path / "out"
    assert main(["particles", str(sc), "--out", str(out), "--save-trajectory"]) == 0
    summary = json.loads((out / "summary.json").read_text())
    assert summary["status"] == "success" and summary["seed"] == 1
    assert summary["scenario"]["heads"]["H"] == 2
    # the kernel back-end that ran and its error estimate are recorded
    assert summary["kernel"]["calls"] and summary["kernel"]["max_err_est"] < 1e-10
    header = (out / "diagnostics.csv").read_text().splitlines()[0].split(",")
    for col in ("t", "E", "E_h0", "E_h1", "G2", "slope2", "speed2", "balance_chain",
                "radial_shadow_h0", "mean_inner", "n_clusters"):
        assert col in header
    with np.load(out / "trajectory.npz") as z:
        assert z["x"].shape == (5, 30, 3) and z["t"].shape == (5,)


def test_failed_scenario_leaves_no_output(tmp_path, capsys):
    sc = _write(tmp_path, with_("heads.scale", -1.0))
    out = tmp_path / "out"
    assert main(["particles", str(sc), "--out", str(out)]) == 2
    assert "heads.scale" in capsys.readouterr().err
    assert not out.exists() and not list(tmp_path.glob(".out*"))


def test_overflowing_run_reports_failure_not_success(tmp_path, capsys):
    raw = with_("heads.scale", 400.0)
    sc = _write(tmp_path, raw)
    out = tmp_path / "out"
    assert main(["particles", str(sc), "--out", str(out)]) == 1  # a failed run, not bad input
    assert "overflow" in capsys.readouterr().err
    assert not out.exists()


def test_monte_carlo_columns(tmp_path):
    raw = json.loads(json.dumps(BASE))
    raw["schedule"] = {"type": "ou", "sigma": 1.0, "symmetric_noise": True}
    raw["particles"]["n_paths"] = 3
    sc = _write(tmp_path, raw)
    out = tmp_path / "out"
    assert main(["particles", str(sc), "--out", str(out)]) == 0
    header = (out / "diagnostics.csv").read_text().splitlines()[0].split(",")
    assert "E_std" in header and "ito" in header
    summary = json.loads((out / "summary.json").read_text())
    assert summary["n_paths"] == 3 and len(summary["balance"]["chain"]["paths"]) == 3


def test_help_is_complete():
    parser = build_parser()
    text = parser.format_help()
    for cmd in ("particles", "run"):
        assert cmd in text
    r = subprocess.run([sys.executable, "-m", "wflow.cli", "particles", "--help"],
                       capture_output=True, text=True, cwd=ROOT)
    assert r.returncode == 0 and "--save-trajectory" in r.stdout
