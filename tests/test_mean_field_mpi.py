"""`mpirun -n 2 wflow verify mean-field` splits the replicates over ranks and equals serial.

The PDE runs on the mesh distributed by DOLFINx (its cell masses agree with the serial
solve to round-off), the particle replicates are split over the ranks by
:func:`wflow.infra.parallel.parallel_map` (each carries its own seed), so every number
of the summary agrees with the serial run to round-off and the verdict is the same.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

ROOT = Path(__file__).resolve().parents[1]
MPIRUN = Path(sys.executable).parent / "mpirun"
WFLOW = Path(sys.executable).parent / "wflow"


def _numbers(d: dict) -> list[float]:
    out = []
    for v in d.values():
        if isinstance(v, dict):
            out += _numbers(v)
        elif isinstance(v, list):
            out += [float(x) for x in v if isinstance(x, (int, float))]
        elif isinstance(v, (int, float)) and not isinstance(v, bool):
            out.append(float(v))
    return out


@pytest.mark.mpi
@pytest.mark.skipif(not MPIRUN.exists(), reason="mpirun not in the environment")
def test_verify_mean_field_two_ranks_equals_serial(tmp_path):
    env = dict(os.environ, NUMBA_NUM_THREADS="1", OMP_NUM_THREADS="1")
    serial, par = tmp_path / "serial", tmp_path / "par"
    r = subprocess.run([str(WFLOW), "verify", "mean-field", "--quick", "--out", str(serial)],
                       capture_output=True, text=True, env=env, cwd=ROOT, timeout=900)
    assert r.returncode == 0, r.stdout + r.stderr
    r = subprocess.run([str(MPIRUN), "-n", "2", str(WFLOW), "verify", "mean-field", "--quick",
                        "--out", str(par)], capture_output=True, text=True, env=env,
                       cwd=ROOT, timeout=900)
    assert r.returncode == 0, r.stdout + r.stderr
    assert r.stdout.count("verify mean-field") == 1  # only rank 0 reports and writes
    a = json.loads((serial / "summary.json").read_text())
    b = json.loads((par / "summary.json").read_text())
    assert a["passed"] == b["passed"]
    assert [c["ok"] for c in a["criteria"]] == [c["ok"] for c in b["criteria"]]
    # the PDE on a distributed mesh sums its fluxes in another order: round-off, amplified
    # by the t-scores' 1/s.e. (~1e3) — agreement to 1e-8 relative
    for key in ("fits", "reported", "tests"):
        np.testing.assert_allclose(_numbers(a[key]), _numbers(b[key]), rtol=1e-8, atol=1e-12)
