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
COMMAND = {"particles": ["particles"], "pde": ["pde"], "jko": ["jko"], "gaussian": ["gaussian"],
           "published": ["particles"]}  # one H of a published experiment (reproduce: all H)


def test_every_shipped_scenario_has_a_command():
    assert {t.stem.split("_")[0] for t in TOMLS} <= set(COMMAND)


def _run(args: list, timeout: float) -> subprocess.CompletedProcess:
    env = dict(os.environ, MPLBACKEND="Agg")
    r = subprocess.run([sys.executable, *map(str, args)], capture_output=True, text=True,
                       env=env, timeout=timeout, cwd=ROOT)
    assert r.returncode == 0, f"{' '.join(map(str, args))} failed:\n{r.stdout}\n{r.stderr}"
    assert r.stdout.strip(), f"{args} printed nothing"
    return r


@pytest.mark.parametrize("demo", DEMOS, ids=[d.stem for d in DEMOS])
def test_demo_quick(demo, tmp_path):
    _run([demo, "--quick", "--out", tmp_path], timeout=300)


@pytest.mark.slow
@pytest.mark.parametrize("demo", DEMOS, ids=[d.stem for d in DEMOS])
def test_demo_full_size(demo, tmp_path):
    _run([demo, "--out", tmp_path], timeout=3600)


@pytest.mark.slow
@pytest.mark.parametrize("toml", TOMLS, ids=[t.stem for t in TOMLS])
def test_shipped_scenario_through_its_command(toml, tmp_path):
    out = tmp_path / "out"
    _run(["-m", "wflow.cli", *COMMAND[toml.stem.split("_")[0]], toml, "--out", out],
         timeout=3600)
    assert (out / "summary.json").is_file()


@pytest.mark.slow
def test_main_job_on_the_jko_demo_scenario(tmp_path):
    """`wflow run demos/jko_clustering_s2.toml` (crashed in the JKO phase before the fix of
    the candidate balls, issue 14 item 4)."""
    out = tmp_path / "out"
    _run(["-m", "wflow.cli", "run", ROOT / "demos" / "jko_clustering_s2.toml", "--out", out],
         timeout=3600)
    assert (out / "summary.json").is_file() and (out / "report.md").is_file()
