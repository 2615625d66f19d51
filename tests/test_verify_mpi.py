"""`mpirun -n 2 wflow verify …` spreads the independent runs over ranks and equals serial.

Each study's independent runs (``gamma``'s perturbed flows, ``mean-field``'s particle
replicates) are split over the ranks by :func:`wflow.infra.parallel.parallel_map`, each
carrying its own seed; only rank 0 reports and writes. ``mean-field``'s PDE runs on the
mesh distributed by DOLFINx, whose cell masses agree with the serial solve to round-off.
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

pytestmark = [pytest.mark.mpi,
              pytest.mark.skipif(not MPIRUN.exists(), reason="mpirun not in the environment")]


def _serial_and_two_ranks(study: str, tmp_path: Path, timeout: int,
                          extra: tuple[str, ...] = ()) -> tuple[dict, dict]:
    """The summaries of ``wflow verify STUDY --quick [extra]`` serial and on 2 ranks."""
    env = dict(os.environ, NUMBA_NUM_THREADS="1", OMP_NUM_THREADS="1")
    serial, par = tmp_path / "serial", tmp_path / "par"
    r = subprocess.run([str(WFLOW), "verify", study, "--quick", *extra, "--out", str(serial)],
                       capture_output=True, text=True, env=env, cwd=ROOT, timeout=timeout)
    assert r.returncode == 0, r.stdout + r.stderr
    r = subprocess.run([str(MPIRUN), "-n", "2", str(WFLOW), "verify", study, "--quick",
                        *extra, "--out", str(par)], capture_output=True, text=True, env=env,
                       cwd=ROOT, timeout=timeout)
    assert r.returncode == 0, r.stdout + r.stderr
    assert r.stdout.count(f"verify {study}") == 1  # only rank 0 reports and writes
    return (json.loads((serial / "summary.json").read_text()),
            json.loads((par / "summary.json").read_text()))


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


def test_verify_gamma_two_ranks_equals_serial(tmp_path):
    a, b = _serial_and_two_ranks("gamma", tmp_path, 600)
    # each run carries its own seed: the distributed study gives the same numbers exactly
    assert a["table"] == b["table"] and a["fits"] == b["fits"]


@pytest.mark.slow  # a minute or more on 2 cores; gamma's keeps the distributed study in the default
def test_verify_mean_field_two_ranks_equals_serial(tmp_path):
    a, b = _serial_and_two_ranks("mean-field", tmp_path, 900)
    assert a["passed"] == b["passed"]
    assert [c["ok"] for c in a["criteria"]] == [c["ok"] for c in b["criteria"]]
    # the PDE on a distributed mesh sums its fluxes in another order: round-off, amplified
    # by the t-scores' 1/s.e. (~1e3) — agreement to 1e-8 relative
    for key in ("fits", "reported", "tests"):
        np.testing.assert_allclose(_numbers(a[key]), _numbers(b[key]), rtol=1e-8, atol=1e-12)


@pytest.mark.slow  # as the float64 run, with the float32 replicates on the Python loop
def test_verify_mean_field_float32_two_ranks_equals_serial(tmp_path):
    """The float32 replicates and their float64 control distributed over the ranks (each
    replicate's run is serial on its rank): the same verdict and numbers as serial."""
    a, b = _serial_and_two_ranks("mean-field", tmp_path, 900, ("--dtype", "float32"))
    assert a["dtype"] == b["dtype"] == "float32" and a["passed"] == b["passed"]
    assert [c["ok"] for c in a["criteria"]] == [c["ok"] for c in b["criteria"]]
    # the float32 control's numbers: its runs are the same on either layout, exactly
    assert a["float32"] == b["float32"]
    # the PDE on a distributed mesh: round-off amplified by the t-scores (as above)
    for key in ("fits", "reported", "tests"):
        np.testing.assert_allclose(_numbers(a[key]), _numbers(b[key]), rtol=1e-8, atol=1e-12)
