"""``-v`` logs each command's cost estimate once (issue 42: ``wflow -v`` logged it twice)."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

DEMOS = Path(__file__).resolve().parents[1] / "demos"


def _estimate_lines(tmp_path: Path, *args: str) -> list[str]:
    r = subprocess.run([sys.executable, "-m", "wflow.cli", "-v", *args, "--out",
                        str(tmp_path / "out")], capture_output=True, text=True, timeout=600)
    assert r.returncode == 0, r.stderr[-2000:]
    return [ln for ln in r.stderr.splitlines() if "estimate of" in ln]


def test_particles_logs_its_estimate_once(tmp_path):
    lines = _estimate_lines(tmp_path, "particles", str(DEMOS / "particles_clustering_s2.toml"))
    assert len(lines) == 1, lines
