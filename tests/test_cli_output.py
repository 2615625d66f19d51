"""Output locations at the command line: wflow never deletes or replaces what it did not write.

Every case runs the real ``wflow particles`` command in-process on a tiny scenario and
checks the exit status, the one-line message, that nothing is left behind and that the
user's files are untouched. Refused locations are refused *before* any computation (the
run function is replaced by one that fails the test if called).
"""

from __future__ import annotations

import json
import os
import stat
from pathlib import Path

import pytest

import wflow.apps.jobs.particles as prun
from wflow.cli import main
from wflow.infra.io import OUTPUT_MARKER, read_output_marker

SCENARIO = """seed = 1
[attention]
kind = "softmax"
beta = 1.0
d = 3
[tokens]
n = 30
[heads]
type = "random_symmetric"
H = 2
scale = 0.5
[particles]
T = 0.2
dt = 0.05
"""


@pytest.fixture
def sc(tmp_path) -> Path:
    p = tmp_path / "sc.toml"
    p.write_text(SCENARIO)
    return p


@pytest.fixture
def no_compute(monkeypatch):
    """Fail the test if the command gets as far as computing."""
    def boom(*a, **k):
        raise AssertionError("computed although the output location is refused")
    monkeypatch.setattr(prun, "run_particles", boom)


def _refused(capsys, rc: int, *words: str) -> str:
    err = capsys.readouterr().err
    assert rc == 2, err
    lines = err.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("wflow particles: error: --out"), err
    for w in words:
        assert w in lines[0], (w, lines[0])
    return lines[0]


def _snapshot(folder: Path) -> dict[str, bytes]:
    return {str(p.relative_to(folder)): p.read_bytes() for p in sorted(folder.rglob("*"))
            if p.is_file()}


def _no_staging(parent: Path) -> None:
    left = [p.name for p in parent.iterdir() if ".partial-" in p.name or ".old-" in p.name
            or p.name.startswith(".wflow-probe-")]
    assert not left, left


def test_folder_with_user_files_is_refused(tmp_path, sc, capsys, no_compute):
    out = tmp_path / "o"
    out.mkdir()
    (out / "keep.txt").write_text("x")
    before = _snapshot(out)
    _refused(capsys, main(["particles", str(sc), "--out", str(out)]),
             "not a wflow output", "keep.txt")
    assert _snapshot(out) == before
    _no_staging(tmp_path)
    # --overwrite does not change that: it only ever replaces a wflow output
    _refused(capsys, main(["particles", str(sc), "--out", str(out), "--overwrite"]),
             "not a wflow output")
    assert _snapshot(out) == before


def test_regular_file_is_refused(tmp_path, sc, capsys, no_compute):
    f = tmp_path / "results"
    f.write_text("user data")
    _refused(capsys, main(["particles", str(sc), "--out", str(f), "--overwrite"]),
             "is a file")
    assert f.read_text() == "user data"
    _no_staging(tmp_path)


def test_a_path_under_a_file_is_refused(tmp_path, sc, capsys, no_compute):
    f = tmp_path / "notes.txt"
    f.write_text("x")
    _refused(capsys, main(["particles", str(sc), "--out", str(f / "run")]), "not a folder")
    assert f.read_text() == "x"
    _no_staging(tmp_path)


@pytest.mark.parametrize("spelling", [".", "./", "..", "sub/.."])
def test_current_folder_and_its_parents_are_refused(tmp_path, sc, capsys, monkeypatch,
                                                     no_compute, spelling):
    work = tmp_path / "work"
    (work / "sub").mkdir(parents=True)
    (work / "paper.tex").write_text("x")
    monkeypatch.chdir(work)
    before = _snapshot(tmp_path)
    _refused(capsys, main(["particles", str(sc), "--out", spelling]), "current folder")
    assert _snapshot(tmp_path) == before
    _no_staging(work)


def test_home_folder_is_refused_and_tilde_expands(tmp_path, sc, capsys, monkeypatch):
    home = tmp_path / "home"
    home.mkdir()
    (home / ".bashrc").write_text("user")
    monkeypatch.setenv("HOME", str(home))
    real = prun.run_particles
    monkeypatch.setattr(prun, "run_particles", lambda *a, **k: pytest.fail("computed"))
    _refused(capsys, main(["particles", str(sc), "--out", "~"]), "not a wflow output")
    assert (home / ".bashrc").read_text() == "user"
    monkeypatch.setattr(prun, "run_particles", real)
    assert main(["particles", str(sc), "--out", "~/runs/r1"]) == 0
    assert (home / "runs" / "r1" / "summary.json").is_file()
    assert not (tmp_path / "~").exists()


def test_symbolic_link_is_refused(tmp_path, sc, capsys, no_compute):
    target = tmp_path / "data"
    target.mkdir()
    (target / "a.csv").write_text("1")
    link = tmp_path / "link"
    link.symlink_to(target)
    _refused(capsys, main(["particles", str(sc), "--out", str(link), "--overwrite"]),
             "symbolic link")
    assert link.is_symlink() and (target / "a.csv").read_text() == "1"


def test_unwritable_location_is_refused_before_computing(tmp_path, sc, capsys, no_compute):
    # /proc refuses new folders even to root (chmod would not stop root)
    _refused(capsys, main(["particles", str(sc), "--out", "/proc/wflow-test/out"]),
             "cannot write")
    if os.geteuid() != 0:  # pragma: no branch - as a normal user a read-only folder too
        ro = tmp_path / "ro"
        ro.mkdir(mode=0o555)
        _refused(capsys, main(["particles", str(sc), "--out", str(ro / "o")]), "cannot write")
        assert not any(ro.iterdir())


def test_new_and_empty_folders_are_written_with_a_marker(tmp_path, sc, capsys):
    out = tmp_path / "deep" / "new"
    assert main(["particles", str(sc), "--out", str(out)]) == 0
    marker = read_output_marker(out)
    assert marker is not None
    assert marker["command"][:2] == ["wflow", "particles"]
    assert marker["files"] == ["diagnostics.csv", "summary.json"]
    assert marker["provenance"]["wflow"] and marker["created"]
    empty = tmp_path / "empty"
    empty.mkdir()
    assert main(["particles", str(sc), "--out", str(empty)]) == 0
    assert (empty / "summary.json").is_file() and (empty / OUTPUT_MARKER).is_file()
    _no_staging(tmp_path)


def test_previous_output_needs_overwrite_and_is_replaced_atomically(tmp_path, sc, capsys,
                                                                      monkeypatch):
    out = tmp_path / "o"
    assert main(["particles", str(sc), "--out", str(out)]) == 0
    capsys.readouterr()
    before = _snapshot(out)
    real = prun.run_particles
    monkeypatch.setattr(prun, "run_particles", lambda *a, **k: pytest.fail("computed"))
    _refused(capsys, main(["particles", str(sc), "--out", str(out)]),
             "previous wflow output", "--overwrite")
    assert _snapshot(out) == before
    monkeypatch.setattr(prun, "run_particles", real)
    sc.write_text(SCENARIO.replace("seed = 1", "seed = 2"))
    assert main(["particles", str(sc), "--out", str(out), "--overwrite"]) == 0
    assert json.loads((out / "summary.json").read_text())["seed"] == 2
    _no_staging(tmp_path)


def test_overwrite_never_deletes_files_added_to_an_output(tmp_path, sc, capsys, monkeypatch):
    out = tmp_path / "o"
    assert main(["particles", str(sc), "--out", str(out)]) == 0
    (out / "notes.txt").write_text("my notes")
    (out / "figs").mkdir()
    capsys.readouterr()
    monkeypatch.setattr(prun, "run_particles", lambda *a, **k: pytest.fail("computed"))
    _refused(capsys, main(["particles", str(sc), "--out", str(out), "--overwrite"]),
             "did not write", "figs")
    assert (out / "notes.txt").read_text() == "my notes" and (out / "figs").is_dir()


def test_failed_run_leaves_the_previous_output_and_nothing_else(tmp_path, sc, capsys):
    out = tmp_path / "o"
    assert main(["particles", str(sc), "--out", str(out)]) == 0
    before = _snapshot(out)
    capsys.readouterr()
    sc.write_text(SCENARIO.replace("scale = 0.5", "scale = 400.0"))  # overflows: a failed run
    assert main(["particles", str(sc), "--out", str(out), "--overwrite"]) == 1
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "failed" in err[0] and "overflow" in err[0]
    assert _snapshot(out) == before
    _no_staging(tmp_path)


@pytest.mark.parametrize("mask", [0o022, 0o027, 0o002])
def test_modes_follow_the_umask(tmp_path, sc, mask):
    old = os.umask(mask)
    try:
        assert main(["particles", str(sc), "--out", str(tmp_path / "o"),
                     "--save-trajectory"]) == 0
    finally:
        os.umask(old)
    out = tmp_path / "o"
    assert stat.S_IMODE(out.stat().st_mode) == 0o777 & ~mask
    for f in ("summary.json", "diagnostics.csv", "trajectory.npz", OUTPUT_MARKER):
        assert stat.S_IMODE((out / f).stat().st_mode) == 0o666 & ~mask, f
