"""SIGTERM and SIGHUP behave like Ctrl-C: one line, 128 + signal, staging removed, no PETSc.

Real processes: ``wflow pde`` (PETSc loaded: its own handler must not print its crash
banner) serial and under ``mpirun -n 2``, and ``wflow run`` (the checkpoint is kept and
the resume command printed; the slow test resumes and checks the restored phases are
named and counted). The CLI restores the handlers it installed (importing wflow changes
none: another test file checks that).
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from wflow.cli import main
from wflow.infra import lock

from .test_cli_run import _scenario as run_scenario

ROOT = Path(__file__).resolve().parents[1]
MPIRUN = Path(sys.executable).parent / "mpirun"
ENV = dict(os.environ, PYTHONUNBUFFERED="1", OMP_NUM_THREADS="1", OPENBLAS_NUM_THREADS="1",
           PYTHONPATH=os.pathsep.join([str(ROOT), os.environ.get("PYTHONPATH", "")]))

PDE = """
seed = 1
[attention]
kind = "softmax"
beta = 1.0
d = 3
[heads]
type = "random_symmetric"
H = 1
[pde]
mesh = "icosphere:80"
T = 2000.0
dt = 0.05
"""


def _start(cmd: list[str], cwd: Path, mpi: int = 0) -> subprocess.Popen:
    pre = [str(MPIRUN), "-n", str(mpi)] if mpi else []
    return subprocess.Popen([*pre, sys.executable, "-m", "wflow.cli", *cmd], cwd=cwd, env=ENV,
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                            start_new_session=True)


def _signal_when(proc: subprocess.Popen, word: bytes, sig: int, *, stream: str = "stderr",
                 timeout: float = 240) -> tuple[str, str]:
    fh = getattr(proc, stream)
    os.set_blocking(fh.fileno(), False)
    seen, t0 = b"", time.monotonic()
    try:
        while word not in seen and time.monotonic() - t0 < timeout:
            time.sleep(0.2)
            seen += fh.read() or b""
            assert proc.poll() is None, seen.decode()
        time.sleep(0.5)
        proc.send_signal(sig)
        out, err = proc.communicate(timeout=120)
    finally:
        if proc.poll() is None:
            os.killpg(proc.pid, signal.SIGKILL)
    if stream == "stderr":
        return (out or b"").decode(), (seen + (err or b"")).decode()
    return (seen + (out or b"")).decode(), (err or b"").decode()


def _last_line(err: str) -> str:
    return [ln for ln in err.strip().splitlines() if ln.strip()][-1].split("\r")[-1].strip()


def _clean(tmp_path: Path, out: Path) -> None:
    assert not out.exists()
    assert not [p for p in tmp_path.iterdir() if ".partial-" in p.name]
    assert not lock.lock_path(out).exists()


@pytest.mark.parametrize("sig", [signal.SIGTERM, signal.SIGHUP], ids=["TERM", "HUP"])
def test_signal_on_pde_is_like_ctrl_c(tmp_path, sig):
    (tmp_path / "p.toml").write_text(PDE)
    out = tmp_path / "o"
    proc = _start(["pde", "p.toml", "--out", str(out), "--progress"], tmp_path)
    _, err = _signal_when(proc, b"pde", sig)
    assert proc.returncode == 128 + sig, err
    assert "Traceback" not in err and "PETSC" not in err.upper() and "MPI_Abort" not in err
    assert _last_line(err) == f"wflow pde: interrupted by {signal.Signals(sig).name}"
    _clean(tmp_path, out)


@pytest.mark.mpi
@pytest.mark.skipif(not MPIRUN.exists(), reason="mpirun not available")
def test_sigterm_under_mpirun(tmp_path):
    """mpirun forwards SIGTERM to both ranks: 143, no banner, nothing left, never a hang.

    The ranks get the signal at different points; a rank blocked in a collective that
    the other, leaving, never enters is ended by the CLI's watchdog (or by mpirun when the
    first rank ends). The one line is printed by rank 0 (or rank 1 on its behalf) but
    mpirun may drop it while it ends the job, so at most one is required.
    """
    (tmp_path / "p.toml").write_text(PDE)
    out = tmp_path / "o"
    proc = _start(["pde", "p.toml", "--out", str(out), "--progress"], tmp_path, mpi=2)
    _, err = _signal_when(proc, b"pde", signal.SIGTERM)
    assert proc.returncode == 128 + signal.SIGTERM, err
    assert "PETSC" not in err.upper() and "Traceback" not in err
    assert "MPI_Abort" not in err and "Caught signal" not in err
    lines = [ln for ln in err.splitlines() if "wflow pde: interrupted" in ln]
    assert len(lines) <= 1, err
    assert not out.exists()
    assert not [p for p in tmp_path.iterdir() if ".partial-" in p.name]


def test_sigterm_on_run_keeps_the_checkpoint_and_prints_the_resume_command(tmp_path):
    sc = run_scenario(tmp_path)
    out = tmp_path / "o"
    proc = _start(["run", str(sc), "--out", str(out)], tmp_path)
    _, err = _signal_when(proc, b"phase particles ...", signal.SIGTERM, stream="stdout")
    assert proc.returncode == 143, err
    line = _last_line(err)
    assert line.startswith("wflow run: interrupted by SIGTERM;") and \
        f"wflow run --resume {out}" in line, err
    assert (tmp_path / "o.ckpt" / "pde.pkl").is_file()
    _clean(tmp_path, out)
    assert not lock.lock_path(tmp_path / "o.ckpt").exists()


@pytest.mark.slow
def test_sigterm_then_resume_names_the_restored_phases(tmp_path, capsys):
    sc = run_scenario(tmp_path)
    out = tmp_path / "o"
    proc = _start(["run", str(sc), "--out", str(out)], tmp_path)
    _signal_when(proc, b"phase particles ...", signal.SIGTERM, stream="stdout")
    assert proc.returncode == 143
    assert main(["run", "--resume", str(out)]) == 0
    printed = capsys.readouterr().out
    assert "phase pde restored from the checkpoint" in printed
    assert "restored from the checkpoint: pde" in printed
    s = json.loads((out / "summary.json").read_text())
    restored = s["resumed"]["restored_phases"]
    assert restored[0] == "pde" and "compare" not in restored  # particles may have finished
    assert s["wall_time_s"]["total"] >= sum(s["wall_time_s"][p] for p in restored)
    assert s["wall_time_s"]["pde"] > 0
    uninterrupted = tmp_path / "u"
    assert main(["run", str(sc), "--out", str(uninterrupted)]) == 0
    u = json.loads((uninterrupted / "summary.json").read_text())
    assert u["resumed"]["restored_phases"] == []
    assert u["edi"] == s["edi"] and u["w2"] == s["w2"]  # the same result


def test_cli_restores_the_handlers_it_installed(tmp_path, capsys):
    before = {s: signal.getsignal(s) for s in (signal.SIGTERM, signal.SIGHUP, signal.SIGINT)}
    env = os.environ.get("PETSC_OPTIONS")
    main(["particles", str(tmp_path / "missing.toml"), "--out", str(tmp_path / "o")])
    assert {s: signal.getsignal(s) for s in before} == before
    assert os.environ.get("PETSC_OPTIONS") == env
