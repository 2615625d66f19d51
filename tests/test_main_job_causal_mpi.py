"""``mpirun -n P wflow run`` of a masked scenario: every rank gives the serial result.

A tiny causal main job (120 tokens, 6 slices on 320 cells, 8 RK4 steps, 16 replicates)
run in this process and under ``mpirun -n 1, 2, 3``: the kinetic slices, the main run's
trajectory and every replicate's binned moments equal the serial ones to round-off. A
negative control (the ALiBi slope 2 % off, through the scenario) is told apart by the same
comparison; an exchangeable scenario under two ranks is refused (exit 2, one line); a
checkpoint written by an interrupted serial run is resumed under two ranks.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

from tests.test_main_job_causal import EXAMPLE, interrupt_at_replicate_3
from wflow.cli import EXIT_BAD_INPUT, main

ROOT = Path(__file__).resolve().parents[1]
MPIRUN = Path(sys.executable).parent / "mpirun"
EPS = np.finfo(float).eps
N, STEPS = 120, 8
# Round-off: each attention sum over ranks adds the same terms in another order (≤ 2 N ε
# relative, wflow.kernels.split), the kinetic velocities likewise over the cells; along
# STEPS RK4 steps of a flow with O(1) Lipschitz constant these add up, with a factor 10 of
# head room for the moments' and the control variates' regression: 20 N STEPS ε ≈ 4e-12.
TOL = 20 * N * STEPS * EPS

#: The shipped example made tiny: (text, replacement), each asserted to be there.
TINY = (("seed = 1", "seed = 3"), ("lam = 2.0, n = 600", "lam = LAM, n = 120"),
        ('"icosphere:1280"', '"icosphere:320"'), ("T = 1.0", "T = 0.5"),
        ("n_saves = 3", "n_saves = 2"), ("n_particles = 600", "n_particles = 120"),
        ("particle_steps_per_save = 8", "particle_steps_per_save = 4"))


def _tiny() -> str:
    text = EXAMPLE.read_text(encoding="utf-8")
    for old, new in TINY:
        assert old in text, old
        text = text.replace(old, new)
    return text


needs_mpirun = pytest.mark.skipif(not MPIRUN.exists() and shutil.which("mpirun") is None,
                                  reason="mpirun not available")


def _scenario(tmp_path: Path, lam: str = "2.0") -> Path:
    p = tmp_path / f"causal_{lam}.toml"
    p.write_text(_tiny().replace("LAM", lam), encoding="utf-8")
    return p


def _mpirun(P: int, *args: str) -> subprocess.CompletedProcess:
    env = dict(os.environ, OMP_NUM_THREADS="1", PYTHONPATH=str(ROOT))
    return subprocess.run([str(MPIRUN), "-n", str(P), sys.executable, "-m", "wflow.cli", *args],
                          capture_output=True, text=True, timeout=600, cwd=ROOT, env=env)


def _arrays(out: Path) -> dict[str, np.ndarray]:
    res = {}
    for name, keys in (("causal_moments.npz", None), ("trajectory.npz", ("x",)),
                       ("slices.npz", ("rho", "mass"))):
        with np.load(out / name) as z:
            res.update({f"{name}:{k}": z[k] for k in (keys or z.files)})
    return res


def _max_diff(a: dict, b: dict) -> float:
    assert a.keys() == b.keys()
    return max(float(np.max(np.abs(a[k] - b[k]))) for k in a)


@pytest.fixture(scope="module")
def serial(tmp_path_factory):
    tmp = tmp_path_factory.mktemp("causal_mpi")
    out = tmp / "serial"
    assert main(["run", str(_scenario(tmp)), "--out", str(out)]) == 0
    return tmp, _arrays(out)


@pytest.mark.mpi
@needs_mpirun
@pytest.mark.parametrize("P", [1, 2, 3])
def test_every_rank_count_gives_the_serial_result(serial, P):
    tmp, ref = serial
    out = tmp / f"p{P}"
    r = _mpirun(P, "run", str(_scenario(tmp)), "--out", str(out))
    assert r.returncode == 0, r.stdout + r.stderr
    # rank 0 speaks: one summary line, one line on the JKO
    assert r.stdout.count("run: success") == 1, r.stdout
    assert r.stdout.count("not a gradient flow") == 1, r.stdout
    got = _arrays(out)
    assert _max_diff(got, ref) <= TOL, _max_diff(got, ref)
    import json

    s = json.loads((out / "summary.json").read_text(encoding="utf-8"))
    assert s["status"] == "success" and s["kinetic_stats"]["ranks"] == P


@pytest.mark.mpi
@needs_mpirun
def test_a_slope_off_by_two_percent_is_told_apart(serial):
    """Negative control: the same comparison on a run with λ = 2.04 (the tokens' slope
    and the limit's, both 2 % off) finds a difference far above the tolerance."""
    tmp, ref = serial
    out = tmp / "bad"
    r = _mpirun(2, "run", str(_scenario(tmp, "2.04")), "--out", str(out))
    assert r.returncode == 0, r.stdout + r.stderr
    assert _max_diff(_arrays(out), ref) > 1e3 * TOL


@pytest.mark.mpi
@needs_mpirun
def test_an_exchangeable_scenario_under_two_ranks_exits_2(tmp_path):
    p = tmp_path / "plain.toml"
    lines = _tiny().splitlines(keepends=True)
    drop = ("mask =", "bias =", "[kinetic]", "S = 6")
    p.write_text("".join(ln for ln in lines if not ln.startswith(drop)), encoding="utf-8")
    out = tmp_path / "o"
    r = _mpirun(2, "run", str(p), "--out", str(out))
    assert r.returncode == EXIT_BAD_INPUT, r.stdout + r.stderr
    lines = [ln for ln in r.stderr.splitlines() if ln.strip()]
    assert len(lines) == 1 and "only a scenario with [attention] mask" in lines[0], r.stderr
    assert not out.exists() and not Path(str(out) + ".ckpt").exists()


@pytest.mark.mpi
@needs_mpirun
def test_a_serial_checkpoint_resumes_under_two_ranks(serial, monkeypatch):
    """Ctrl-C at replicate 3 of a serial run; ``mpirun -n 2 wflow run --resume`` restores
    the phases and the replicates done (rank 0 decides, every rank reads) and ends with the
    serial numbers."""
    tmp, ref = serial
    out = tmp / "resumed"
    interrupt_at_replicate_3(monkeypatch, _scenario(tmp), out)
    r = _mpirun(2, "run", "--resume", str(out))
    assert r.returncode == 0, r.stdout + r.stderr
    assert r.stdout.count("phase particles restored from the checkpoint") == 1, r.stdout
    assert _max_diff(_arrays(out), ref) <= TOL
    assert not Path(str(out) + ".ckpt").exists()
