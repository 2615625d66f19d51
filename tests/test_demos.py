"""Every demo runs in quick mode (plain scripts, as a user would run them); the slow suite
runs every demo at full size and every shipped scenario through its command."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
DEMOS = sorted((ROOT / "demos").glob("*.py"))
TOMLS = sorted((ROOT / "demos").glob("*.toml"))
#: The command of a shipped scenario, from its name.
COMMAND = {"particles": ["particles"], "pde": ["pde"], "jko": ["jko"], "gaussian": ["gaussian"]}


@pytest.mark.parametrize("demo", DEMOS, ids=[d.stem for d in DEMOS])
def test_demo_quick(demo, tmp_path):
    env = dict(os.environ, MPLBACKEND="Agg")
    r = subprocess.run([sys.executable, str(demo), "--quick", "--out", str(tmp_path)],
                       capture_output=True, text=True, env=env, timeout=300)
    assert r.returncode == 0, f"{demo.name} failed:\n{r.stdout}\n{r.stderr}"
    assert r.stdout.strip(), f"{demo.name} printed nothing"


@pytest.mark.slow
@pytest.mark.parametrize("demo", DEMOS, ids=[d.stem for d in DEMOS])
def test_demo_full_size(demo, tmp_path):
    env = dict(os.environ, MPLBACKEND="Agg")
    r = subprocess.run([sys.executable, str(demo), "--out", str(tmp_path)],
                       capture_output=True, text=True, env=env, timeout=3600)
    assert r.returncode == 0, f"{demo.name} failed:\n{r.stdout}\n{r.stderr}"
    assert r.stdout.strip(), f"{demo.name} printed nothing"


@pytest.mark.slow
@pytest.mark.parametrize("toml", TOMLS, ids=[t.stem for t in TOMLS])
def test_shipped_scenario_through_its_command(toml, tmp_path):
    cmd = COMMAND[toml.stem.split("_")[0]]
    out = tmp_path / "out"
    env = dict(os.environ, MPLBACKEND="Agg")
    r = subprocess.run([sys.executable, "-m", "wflow.cli", *cmd, str(toml), "--out", str(out)],
                       capture_output=True, text=True, env=env, timeout=3600, cwd=ROOT)
    assert r.returncode == 0, f"wflow {cmd[0]} {toml.name} failed:\n{r.stdout}\n{r.stderr}"
    assert (out / "summary.json").is_file()


@pytest.mark.slow
def test_main_job_on_the_jko_demo_scenario(tmp_path):
    """`wflow run demos/jko_clustering_s2.toml` (crashed in the JKO phase before the fix of
    the candidate balls, issue 14 item 4)."""
    out = tmp_path / "out"
    env = dict(os.environ, MPLBACKEND="Agg")
    r = subprocess.run([sys.executable, "-m", "wflow.cli", "run",
                        str(ROOT / "demos" / "jko_clustering_s2.toml"), "--out", str(out)],
                       capture_output=True, text=True, env=env, timeout=3600, cwd=ROOT)
    assert r.returncode == 0, f"wflow run failed:\n{r.stdout}\n{r.stderr}"
    assert (out / "summary.json").is_file() and (out / "report.md").is_file()
