"""Two runs never mix: locks, the claimed final move, checkpoints, stale leftovers, mpirun.

Real processes where the case is about processes: a running ``wflow particles`` holds its
``--out`` and a second ``wflow particles`` on it is refused at once (exit 2, naming the
holder); SIGTERM then ends the first like Ctrl-C. The claimed final move keeps what
appeared at ``--out`` during a run (exit 1, results in staging, named). Checkpoints are
read only with ``--resume``; wflow's own leftovers are recognised; a non-MPI-aware
command refuses ``mpirun -n 2``. Each verdict has its negative control.
"""

from __future__ import annotations

import json
import logging
import os
import shutil
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path

import pytest

import wflow.apps.jobs.particles as prun
from wflow.apps.main import checkpoint as mj_checkpoint
from wflow.apps.main import options as mj_options
from wflow.apps.main import phases as mj_phases
from wflow.cli import main
from wflow.infra import lock
from wflow.infra.io import (
    OUTPUT_MARKER,
    STAGING_MARKER,
    OutputChangedError,
    OutputError,
    claim_output,
    release_all_outputs,
    run_directory,
    stale_staging,
    write_json,
)

from .test_cli_output import SCENARIO
from .test_cli_run import _scenario as run_scenario

ROOT = Path(__file__).resolve().parents[1]
MPIRUN = Path(sys.executable).parent / "mpirun"
ENV = dict(os.environ, PYTHONUNBUFFERED="1", OMP_NUM_THREADS="1",
           PYTHONPATH=os.pathsep.join([str(ROOT), os.environ.get("PYTHONPATH", "")]))


@pytest.fixture(autouse=True)
def _release():
    yield
    release_all_outputs()


def _sc(tmp_path: Path, T: float = 0.2) -> Path:
    p = tmp_path / "sc.toml"
    p.write_text(SCENARIO.replace("T = 0.2", f"T = {T!r}"))
    return p


def _one_line(err: str) -> str:
    lines = [ln for ln in err.strip().splitlines() if ln.strip()]
    assert "Traceback" not in err, err
    return lines[-1].split("\r")[-1].strip()


def _wait_for(proc: subprocess.Popen, word: bytes, timeout: float = 240) -> bytes:
    os.set_blocking(proc.stderr.fileno(), False)
    seen, t0 = b"", time.monotonic()
    while word not in seen and time.monotonic() - t0 < timeout:
        time.sleep(0.2)
        seen += proc.stderr.read() or b""
        assert proc.poll() is None, seen.decode()
    return seen


def test_second_process_on_the_same_out_is_refused_then_sigterm(tmp_path):
    """Two real `wflow particles` on one --out: the second exits 2 naming the first."""
    sc = _sc(tmp_path, T=5000.0)
    out = tmp_path / "o"
    a = subprocess.Popen([sys.executable, "-m", "wflow.cli", "particles", str(sc), "--out",
                          str(out), "--progress"], cwd=tmp_path, env=ENV,
                         stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    try:
        seen = _wait_for(a, b"particles")
        holder = lock.read_lock(lock.lock_path(out))
        assert holder is not None and holder["pid"] == a.pid
        b = subprocess.run([sys.executable, "-m", "wflow.cli", "particles", str(sc), "--out",
                            str(out)], cwd=tmp_path, env=ENV, capture_output=True, text=True,
                           timeout=120)
        assert b.returncode == 2, b.stderr
        line = _one_line(b.stderr)
        assert line.startswith("wflow particles: error:") and "in use by another wflow" in line
        assert f"PID {a.pid}" in line and socket.gethostname() in line and "started" in line
        assert a.poll() is None  # the first run goes on
        a.send_signal(signal.SIGTERM)  # like Ctrl-C: one line, 128 + 15, nothing left
        _, err = a.communicate(timeout=120)
    finally:
        if a.poll() is None:
            a.kill()
    err = (seen + err).decode()
    assert a.returncode == 128 + signal.SIGTERM, err
    assert _one_line(err) == "wflow particles: interrupted by SIGTERM"
    assert "PETSC" not in err.upper()
    assert not out.exists()
    assert not lock.lock_path(out).exists()  # released
    assert not [p for p in tmp_path.iterdir() if ".partial-" in p.name]


def test_lock_is_exclusive_reentrant_and_named(tmp_path):
    out = tmp_path / "o"
    lk = lock.acquire(out)
    assert lock.acquire(out) is lk and lock.held(out)  # re-entrant in one process
    info = lock.read_lock(lock.lock_path(out))
    assert info["pid"] == os.getpid() and info["host"] == socket.gethostname()
    code = ("import sys; from wflow.infra import lock\n"
            f"try:\n    lock.acquire({str(out)!r})\nexcept lock.LockedError as e:\n"
            "    print(e); sys.exit(3)\n")
    r = subprocess.run([sys.executable, "-c", code], env=ENV, capture_output=True, text=True,
                       timeout=60)
    assert r.returncode == 3 and f"PID {os.getpid()}" in r.stdout, r.stdout + r.stderr
    lock.release(out)
    lock.release(out)
    assert not lock.held(out) and not lock.lock_path(out).exists()
    r = subprocess.run([sys.executable, "-c", code], env=ENV, capture_output=True, text=True,
                       timeout=60)
    assert r.returncode == 0, r.stdout + r.stderr  # control: free again


def test_stale_lock_of_a_dead_process_is_taken_over_with_a_warning(tmp_path, caplog):
    out = tmp_path / "o"
    dead = subprocess.run([sys.executable, "-c", "import os; print(os.getpid())"],
                          capture_output=True, text=True).stdout.strip()
    lock.lock_path(out).write_text(json.dumps({
        "wflow_lock": 1, "pid": int(dead), "host": socket.gethostname(),
        "command": ["wflow", "run"], "started": "2026-01-01T00:00:00+0000"}))
    with caplog.at_level(logging.WARNING, logger="wflow.infra.lock"):
        assert claim_output(out) == out
    assert "stale lock" in caplog.text and f"PID {dead}" in caplog.text
    assert "no longer running" in caplog.text
    assert lock.read_lock(lock.lock_path(out))["pid"] == os.getpid()


def test_output_that_appears_during_the_run_is_kept(tmp_path, capsys, monkeypatch):
    """The final move replaces only what was claimed: exit 1, results kept in staging."""
    sc = _sc(tmp_path)
    out = tmp_path / "o"
    real = prun.simulate

    def meanwhile(*a, **k):  # another (lock-ignoring) writer creates the output
        res = real(*a, **k)
        out.mkdir()
        write_json(out / "summary.json", {"other": True})
        write_json(out / OUTPUT_MARKER, {"wflow_output": 1, "files": ["summary.json"],
                                         "created": "meanwhile"})
        return res
    monkeypatch.setattr(prun, "simulate", meanwhile)
    assert main(["particles", str(sc), "--out", str(out), "--overwrite"]) == 1
    line = _one_line(capsys.readouterr().err)
    assert line.startswith("wflow particles: run failed:") and "changed during the run" in line
    assert "it was nothing" in line and "new results are kept in" in line
    kept = Path(line.rsplit("kept in ", 1)[1])
    assert (kept / "summary.json").is_file() and (kept / OUTPUT_MARKER).is_file()
    assert json.loads((out / "summary.json").read_text()) == {"other": True}
    # control: without the intruder the same command writes its output
    monkeypatch.setattr(prun, "simulate", real)
    shutil.rmtree(out)
    assert main(["particles", str(sc), "--out", str(out)]) == 0
    assert "scenario" in json.loads((out / "summary.json").read_text())


def test_overwrite_replaces_only_the_output_checked_at_the_start(tmp_path):
    out = tmp_path / "o"
    with run_directory(out) as st:
        write_json(st / "summary.json", {"v": 1})
    claim_output(out, overwrite=True)
    with pytest.raises(OutputChangedError, match="kept in") as e:
        with run_directory(out) as st:
            write_json(st / "summary.json", {"v": 3})
            # meanwhile another wflow output replaces the claimed one
            shutil.rmtree(out)
            out.mkdir()
            write_json(out / "summary.json", {"v": 2})
            write_json(out / OUTPUT_MARKER, {"wflow_output": 1, "files": ["summary.json"]})
    assert "it was a wflow output" in str(e.value)
    assert json.loads((out / "summary.json").read_text()) == {"v": 2}
    # control: the claimed output itself is replaced
    release_all_outputs()
    claim_output(out, overwrite=True)
    with run_directory(out) as st:
        write_json(st / "summary.json", {"v": 4})
    assert json.loads((out / "summary.json").read_text()) == {"v": 4}


def test_without_overwrite_a_claim_refuses_a_previous_output(tmp_path):
    out = tmp_path / "o"
    with run_directory(out) as st:
        write_json(st / "summary.json", {"v": 1})
    with pytest.raises(OutputError, match="--overwrite"):
        claim_output(out)
    assert not lock.held(out) and not lock.lock_path(out).exists()


def test_stale_staging_of_a_dead_process_is_removed(tmp_path):
    out = tmp_path / "o"
    dead = int(subprocess.run([sys.executable, "-c", "import os; print(os.getpid())"],
                              capture_output=True, text=True).stdout)
    ours = tmp_path / ".o.partial-abc"
    ours.mkdir()
    write_json(ours / "summary.json", {"status": "success"})
    write_json(ours / STAGING_MARKER, {"wflow_staging": 1, "pid": dead,
                                       "host": socket.gethostname()})
    alive = tmp_path / ".o.partial-live"
    alive.mkdir()
    write_json(alive / STAGING_MARKER, {"wflow_staging": 1, "pid": os.getpid(),
                                        "host": socket.gethostname()})
    foreign = tmp_path / ".o.partial-xyz"  # no marker: not wflow's to judge
    foreign.mkdir()
    assert stale_staging(out) == [ours]
    claim_output(out)
    assert not ours.exists() and alive.exists() and foreign.exists()


def test_a_staging_folder_says_incomplete_until_it_is_moved(tmp_path):
    out = tmp_path / "o"
    with run_directory(out) as st:
        info = json.loads((st / STAGING_MARKER).read_text())
        assert info["incomplete"] is True and info["pid"] == os.getpid()
    assert not (out / STAGING_MARKER).exists() and (out / OUTPUT_MARKER).is_file()


def test_checkpoint_of_another_scenario_needs_resume_or_overwrite(tmp_path, capsys,
                                                                  monkeypatch):
    sc = run_scenario(tmp_path)
    out = tmp_path / "o"
    other = run_scenario(tmp_path, replace=("n_particles = 300", "n_particles = 400"),
                         name="other.toml")
    sc_o = mj_options._load(other)
    raw_o = sc_o.raw
    ck = mj_checkpoint._Checkpoint(out)
    ck.start(raw_o, sc_o.base_dir, mj_checkpoint._fingerprint(raw_o, sc_o.base_dir))
    ck.save("pde", {"res": "theirs"})

    def boom(*a, **k):
        raise KeyboardInterrupt
    monkeypatch.setattr(mj_phases, "_run_pde", boom)
    assert main(["run", str(sc), "--out", str(out)]) == 2
    line = _one_line(capsys.readouterr().err)
    assert "checkpoint of another scenario" in line and "run.n_particles: 400 -> 300" in line
    assert ck.load("pde") == {"res": "theirs"}  # kept
    # --overwrite discards it (the run then starts: here interrupted in its first phase)
    assert main(["run", str(sc), "--out", str(out), "--overwrite"]) == 130
    assert "discarding the checkpoint" in capsys.readouterr().out
    assert not ck.has("pde") and ck.meta()["raw"]["run"]["n_particles"] == 300


def test_checkpoint_is_read_only_with_resume(tmp_path, capsys, monkeypatch):
    """A checkpoint of the same scenario is not loaded without --resume (it starts over)."""
    sc = run_scenario(tmp_path)
    out = tmp_path / "o"
    s = mj_options._load(sc)
    raw = s.raw
    ck = mj_checkpoint._Checkpoint(out)
    ck.start(raw, s.base_dir, mj_checkpoint._fingerprint(raw, s.base_dir))
    ck.save("pde", {"res": "stale"})
    ran = []

    def pde(*a, **k):
        ran.append(1)
        raise KeyboardInterrupt
    monkeypatch.setattr(mj_phases, "_run_pde", pde)
    assert main(["run", str(sc), "--out", str(out)]) == 130
    assert ran == [1]  # computed, not restored
    ck.save("pde", {"res": "kept"})
    monkeypatch.setattr(mj_phases, "_run_particles", pde)
    monkeypatch.setattr(mj_phases, "_run_pde", lambda *a, **k: pytest.fail("pde recomputed"))
    assert main(["run", str(sc), "--resume", str(out)]) == 130  # control: --resume restores
    assert "phase pde restored from the checkpoint" in capsys.readouterr().out


def test_own_leftover_checkpoint_is_recognised(tmp_path):
    out = tmp_path / "o"
    ck = mj_checkpoint._Checkpoint(out)
    ck.dir.mkdir()
    (ck.dir / "compare.pkl").write_bytes(b"x")  # what a mixed run of an older wflow left
    ck.check()
    assert ck._ours()
    ck.clear()
    assert not ck.dir.exists()
    ck.dir.mkdir()  # control: a foreign file makes it not ours
    (ck.dir / "notes.txt").write_text("mine")
    with pytest.raises(OutputError, match="not a wflow checkpoint"):
        ck.check()


@pytest.mark.mpi
@pytest.mark.skipif(not MPIRUN.exists(), reason="mpirun not available")
def test_non_mpi_command_refuses_mpirun(tmp_path):
    sc = _sc(tmp_path)
    out = tmp_path / "o"
    r = subprocess.run([str(MPIRUN), "-n", "2", sys.executable, "-m", "wflow.cli", "particles",
                        str(sc), "--out", str(out)], capture_output=True, text=True,
                       timeout=120, cwd=tmp_path, env=ENV)
    assert r.returncode == 2, r.stdout + r.stderr
    lines = [ln for ln in r.stderr.splitlines() if ln.startswith("wflow particles")]
    assert len(lines) == 1 and "not MPI-aware" in lines[0], r.stderr
    assert not out.exists() and not lock.lock_path(out).exists()
