"""`mpirun -n 2 wflow verify …` spreads the independent runs over ranks with identical numbers."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
MPIRUN = Path(sys.executable).parent / "mpirun"
WFLOW = Path(sys.executable).parent / "wflow"


@pytest.mark.mpi
@pytest.mark.skipif(not MPIRUN.exists(), reason="mpirun not in the environment")
def test_verify_gamma_two_ranks_equals_serial(tmp_path):
    env = dict(os.environ, NUMBA_NUM_THREADS="1", OMP_NUM_THREADS="1")
    serial, par = tmp_path / "serial", tmp_path / "par"
    r = subprocess.run([str(WFLOW), "verify", "gamma", "--quick", "--out", str(serial)],
                       capture_output=True, text=True, env=env, cwd=ROOT, timeout=600)
    assert r.returncode == 0, r.stdout + r.stderr
    r = subprocess.run([str(MPIRUN), "-n", "2", str(WFLOW), "verify", "gamma", "--quick",
                        "--out", str(par)], capture_output=True, text=True, env=env,
                       cwd=ROOT, timeout=600)
    assert r.returncode == 0, r.stdout + r.stderr
    a = json.loads((serial / "summary.json").read_text())
    b = json.loads((par / "summary.json").read_text())
    # each run carries its own seed: the distributed study gives the same numbers exactly
    assert a["table"] == b["table"] and a["fits"] == b["fits"]
    assert r.stdout.count("verify gamma") == 1  # only rank 0 reports and writes
