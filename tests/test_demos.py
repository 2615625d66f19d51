"""Every demo runs in quick mode (plain scripts, as a user would run them)."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

DEMOS = sorted((Path(__file__).resolve().parents[1] / "demos").glob("*.py"))


@pytest.mark.parametrize("demo", DEMOS, ids=[d.stem for d in DEMOS])
def test_demo_quick(demo, tmp_path):
    env = dict(os.environ, MPLBACKEND="Agg")
    r = subprocess.run([sys.executable, str(demo), "--quick", "--out", str(tmp_path)],
                       capture_output=True, text=True, env=env, timeout=300)
    assert r.returncode == 0, f"{demo.name} failed:\n{r.stdout}\n{r.stderr}"
    assert r.stdout.strip(), f"{demo.name} printed nothing"
