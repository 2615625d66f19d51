"""Exit statuses of the command line: 2 bad input, 1 a failed or untrustworthy run, 130 Ctrl-C.

Each class is checked at the CLI (status, one line on stderr, no traceback, nothing left
behind), with the real failure where one is cheap to provoke and a fake run result where
the status is rare (``inaccurate``, ``locked``: the rule is generic).
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
import types
from pathlib import Path

import pytest

import wflow.apps.jobs.particles as prun
from wflow.cli import EXIT_BAD_INPUT, EXIT_FAILED, EXIT_INTERRUPTED, main
from wflow.commands import finish

from .test_cli_output import SCENARIO

ROOT = Path(__file__).resolve().parents[1]
def _sc(tmp_path: Path, scale: float = 0.5, T: float = 0.2) -> Path:
    p = tmp_path / "sc.toml"
    p.write_text(SCENARIO.replace("scale = 0.5", f"scale = {scale!r}")
                 .replace("T = 0.2", f"T = {T!r}"))
    return p


def _one_line(err: str) -> str:
    lines = err.strip().splitlines()
    assert len(lines) == 1, err
    assert "Traceback" not in err
    return lines[0]


def test_bad_input_is_2(tmp_path, capsys):
    p = tmp_path / "bad.toml"
    p.write_text(SCENARIO.replace("scale = 0.5", "scael = 1.0"))
    assert main(["particles", str(p), "--out", str(tmp_path / "o")]) == EXIT_BAD_INPUT
    assert "heads.scael: unknown key" in _one_line(capsys.readouterr().err)
    assert not (tmp_path / "o").exists()
    assert main(["particles", str(tmp_path / "missing.toml"), "--out",
                 str(tmp_path / "o")]) == EXIT_BAD_INPUT
    assert "not found" in _one_line(capsys.readouterr().err)


def test_failed_run_is_1(tmp_path, capsys):
    assert main(["particles", str(_sc(tmp_path, scale=400.0)), "--out",
                 str(tmp_path / "o")]) == EXIT_FAILED
    line = _one_line(capsys.readouterr().err)
    assert line.startswith("wflow particles: particle run failed") and "overflow" in line
    assert not (tmp_path / "o").exists() and not list(tmp_path.glob(".o*"))


@pytest.mark.parametrize("status", ["inaccurate", "locked", "max_steps", "not_converged"])
def test_every_status_but_success_is_1(tmp_path, capsys, monkeypatch, status):
    res = types.SimpleNamespace(
        status=status, message=f"why it is {status}", wall_time=0.1,
        final=lambda: {"E": {"mean": 1.0}, "G2": {"mean": 0.5}},
        balance_summary=lambda: {"chain": {"mean": 0.0}})
    monkeypatch.setattr(prun, "run_particles", lambda *a, **k: res)
    assert main(["particles", str(_sc(tmp_path)), "--out", str(tmp_path / "o")]) == EXIT_FAILED
    captured = capsys.readouterr()
    assert _one_line(captured.err) == f"wflow particles: run {status}: why it is {status}"
    assert status in captured.out


def test_finish_rule():
    assert finish("x", "success") == 0
    for s in ("failed", "inaccurate", "locked", "not_converged", "max_steps", "anything"):
        assert finish("x", s, "m") == 1


def test_jko_not_converged_is_1(tmp_path, capsys):
    """A real non-converged JKO run (one inner iteration allowed): outputs written, status 1."""
    p = tmp_path / "j.toml"
    p.write_text("""seed = 0
[heads]
type = "matrices"
A = [[[2.0, 0.0, 0.0], [0.0, 1.0, 0.0], [0.0, 0.0, 0.5]]]
[density]
type = "vmf"
means = [[1.0, 0.0, 0.0]]
kappas = [3.0]
[jko]
scheme = "ot"
mesh = "sphere_720.msh"
T = 0.1
tau = 0.1
max_inner = 1
""")
    out = tmp_path / "o"
    with pytest.warns(UserWarning):
        rc = main(["jko", str(p), "--out", str(out)])
    assert rc == EXIT_FAILED
    assert _one_line(capsys.readouterr().err).startswith("wflow jko: run not_converged")
    assert (out / "summary.json").is_file()  # the data are there, the status says what it is


def test_keyboard_interrupt_is_130_one_line(tmp_path, capsys, monkeypatch):
    def interrupted(*a, **k):
        raise KeyboardInterrupt
    monkeypatch.setattr(prun, "run_particles", interrupted)
    assert main(["particles", str(_sc(tmp_path)), "--out",
                 str(tmp_path / "o")]) == EXIT_INTERRUPTED
    assert _one_line(capsys.readouterr().err) == "wflow particles: interrupted"
    assert not (tmp_path / "o").exists()


def test_ctrl_c_in_a_real_run(tmp_path):
    """SIGINT to a running `wflow particles`: status 130, one line, no traceback, no output."""
    sc = _sc(tmp_path, T=2000.0)
    env = dict(os.environ, PYTHONUNBUFFERED="1")
    proc = subprocess.Popen([sys.executable, "-m", "wflow.cli", "particles", str(sc), "--out",
                             str(tmp_path / "o"), "--progress"], cwd=tmp_path, env=env,
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    # wait until the time loop runs (the progress bar draws on stderr), then Ctrl-C
    os.set_blocking(proc.stderr.fileno(), False)
    seen = b""
    t0 = time.monotonic()
    while b"particles" not in seen and time.monotonic() - t0 < 240:
        time.sleep(0.2)
        seen += proc.stderr.read() or b""
        assert proc.poll() is None, seen.decode()
    time.sleep(0.5)
    proc.send_signal(signal.SIGINT)
    out, err = proc.communicate(timeout=120)
    err = (seen + err).decode()
    assert proc.returncode == EXIT_INTERRUPTED, err
    assert "Traceback" not in err
    assert err.strip().splitlines()[-1].split("\r")[-1].strip() == "wflow particles: interrupted"
    assert not (tmp_path / "o").exists()
    assert not [p for p in tmp_path.iterdir() if ".partial-" in p.name]


def test_verbose_debug_keeps_the_traceback_for_one_line_errors(tmp_path, capsys, caplog):
    p = tmp_path / "bad.toml"
    p.write_text("[heads]\nscael = 1\n")
    caplog.set_level("DEBUG", logger="wflow.cli")
    assert main(["-vv", "particles", str(p), "--out", str(tmp_path / "o")]) == EXIT_BAD_INPUT
    assert "heads.scael" in _one_line(capsys.readouterr().err)
    rec = [r for r in caplog.records if r.name == "wflow.cli" and r.exc_info]
    assert rec and "heads.scael" in str(rec[0].exc_info[1])


def test_unexpected_errors_keep_their_traceback(tmp_path, monkeypatch):
    def bug(*a, **k):
        raise RuntimeError("a bug")
    monkeypatch.setattr(prun, "run_particles", bug)
    with pytest.raises(RuntimeError, match="a bug"):
        main(["particles", str(_sc(tmp_path)), "--out", str(tmp_path / "o")])
