"""A full disk is one line: ``run failed: no space left on device while writing FILE``, exit 1.

A small tmpfs (2 MiB, mounted for the test; skipped where it cannot be mounted: not
root, no ``mount``) is filled up to a few pages; the run's output then cannot be
written. Nothing that looks complete is left (no output, no staging folder, no lock);
``wflow run`` keeps its checkpoint and ``--resume`` after freeing space finishes.
"""

from __future__ import annotations

import errno
import json
import os
import shutil
import subprocess
from pathlib import Path

import pytest

from wflow.apps.main import phases as mj_phases
from wflow.cli import main
from wflow.infra import lock
from wflow.infra.io import DiskFullError, atomic_write_bytes

from .test_cli_output import SCENARIO
from .test_cli_run import _scenario as run_scenario


@pytest.fixture
def small_disk(tmp_path):
    """A 2 MiB tmpfs at ``tmp_path/disk`` (unmounted afterwards)."""
    d = tmp_path / "disk"
    d.mkdir()
    if os.geteuid() != 0 or shutil.which("mount") is None:
        pytest.skip("mounting a tmpfs needs root and mount(8)")
    r = subprocess.run(["mount", "-t", "tmpfs", "-o", "size=2m", "tmpfs", str(d)],
                       capture_output=True, text=True)
    if r.returncode != 0:
        pytest.skip(f"cannot mount a tmpfs here: {r.stderr.strip()}")
    try:
        yield d
    finally:
        subprocess.run(["umount", "-l", str(d)], capture_output=True)


def _fill(disk: Path, leave: int) -> Path:
    """Fill ``disk`` but ``leave`` bytes (a filler file); returns the filler."""
    filler = disk / "filler"
    st = os.statvfs(disk)
    free = st.f_bavail * st.f_frsize
    with open(filler, "wb") as fh:
        fh.write(b"\0" * max(0, free - leave))
    return filler


def _one_line(err: str) -> str:
    lines = [ln for ln in err.strip().splitlines() if ln.strip()]
    assert len(lines) == 1 and "Traceback" not in err, err
    return lines[0]


def test_full_disk_is_one_line_and_leaves_nothing(small_disk, tmp_path, capsys):
    sc = tmp_path / "sc.toml"
    sc.write_text(SCENARIO)
    out = small_disk / "o"
    _fill(small_disk, leave=3 * 4096)  # the lock file and the staging marker fit
    assert main(["particles", str(sc), "--out", str(out)]) == 1
    line = _one_line(capsys.readouterr().err)
    assert line.startswith("wflow particles: run failed: no space left on device while "
                           f"writing {small_disk}"), line
    assert not out.exists() and not lock.lock_path(out).exists()
    assert sorted(p.name for p in small_disk.iterdir()) == ["filler"]
    # control: with space, the same command succeeds
    (small_disk / "filler").unlink()
    assert main(["particles", str(sc), "--out", str(out)]) == 0


def test_disk_full_error_names_the_file(tmp_path, monkeypatch):
    def full(*a, **k):
        raise OSError(errno.ENOSPC, "No space left on device")
    monkeypatch.setattr(os, "fsync", full)
    with pytest.raises(DiskFullError) as e:
        atomic_write_bytes(tmp_path / "x.bin", b"data")
    assert str(e.value) == f"no space left on device while writing {tmp_path / 'x.bin'}"
    assert list(tmp_path.iterdir()) == []  # no temporary file left


@pytest.mark.slow
def test_full_disk_in_wflow_run_keeps_the_checkpoint(small_disk, tmp_path, capsys,
                                                     monkeypatch):
    sc = run_scenario(tmp_path)
    out = small_disk / "o"
    real = mj_phases._run_particles

    def then_full(*a, **k):  # the disk fills up while the particles run
        res = real(*a, **k)
        _fill(small_disk, leave=0)
        return res
    monkeypatch.setattr(mj_phases, "_run_particles", then_full)
    assert main(["run", str(sc), "--out", str(out)]) == 1
    captured = capsys.readouterr()
    line = _one_line(captured.err)
    assert "run failed: no space left on device while writing" in line
    assert "particles.pkl" in line and f"wflow run --resume {out}" in line
    assert (small_disk / "o.ckpt" / "pde.pkl").is_file() and not out.exists()
    (small_disk / "filler").unlink()
    monkeypatch.setattr(mj_phases, "_run_particles", real)
    monkeypatch.setattr(mj_phases, "_run_pde", lambda *a, **k: pytest.fail("pde recomputed"))
    assert main(["run", "--resume", str(out)]) == 0
    s = json.loads((out / "summary.json").read_text())
    assert s["resumed"]["restored_phases"] == ["pde"]
