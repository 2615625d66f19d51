"""The output folder machinery of :mod:`wflow.infra.io`: run_directory, prepare_output, markers.

Library-level complements of ``tests/test_cli_output.py``: the atomic swap of a previous
output (with and without ``renameat2``), a location that changes during the run, an
exception inside the staging folder, and ``mpirun -n 2 wflow pde`` agreeing on a refusal.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from wflow.infra.io import (
    OUTPUT_MARKER,
    OutputError,
    prepare_output,
    read_output_marker,
    run_directory,
    write_json,
)
from wflow.infra.io import outputs as wio_outputs

ROOT = Path(__file__).resolve().parents[1]
MPIRUN = Path(sys.executable).parent / "mpirun"


def _write(out: Path, value: int, **kw) -> None:
    with run_directory(out, **kw) as stage:
        write_json(stage / "summary.json", {"v": value})
        (stage / "sub").mkdir()
        write_json(stage / "sub" / "x.json", {"v": value})


def _siblings(p: Path) -> list[str]:
    return sorted(q.name for q in p.parent.iterdir() if q.name != p.name)


@pytest.mark.parametrize("exchange", [True, False], ids=["renameat2", "two-renames"])
def test_replace_previous_output(tmp_path, monkeypatch, exchange):
    out = tmp_path / "o"
    _write(out, 1)
    assert read_output_marker(out)["files"] == ["sub/x.json", "summary.json"]
    if not exchange:
        monkeypatch.setattr(wio_outputs, "_exchange", lambda a, b: False)
    _write(out, 2)
    assert '"v": 2' in (out / "summary.json").read_text()
    assert '"v": 2' in (out / "sub" / "x.json").read_text()
    assert _siblings(out) == []  # no staging or old folder left


def test_renameat2_is_used_on_linux(tmp_path):
    a, b = tmp_path / "a", tmp_path / "b"
    a.mkdir()
    b.mkdir()
    (a / "fa").write_text("a")
    (b / "fb").write_text("b")
    if not wio_outputs._exchange(a, b):
        pytest.skip("renameat2(RENAME_EXCHANGE) not supported here")
    assert (a / "fb").is_file() and (b / "fa").is_file()


def test_library_default_never_replaces_foreign_folders(tmp_path):
    out = tmp_path / "o"
    out.mkdir()
    (out / "keep.txt").write_text("x")
    with pytest.raises(OutputError, match="not a wflow output"):
        _write(out, 1)
    assert [p.name for p in out.iterdir()] == ["keep.txt"]
    assert _siblings(out) == []
    with pytest.raises(OutputError, match="previous wflow output"):
        _write(tmp_path / "p", 1)
        _write(tmp_path / "p", 2, overwrite=False)


def test_location_taken_during_the_run_keeps_results_in_staging(tmp_path):
    out = tmp_path / "o"
    with pytest.raises(OutputError, match="results are kept in") as e:
        with run_directory(out) as stage:
            write_json(stage / "summary.json", {"v": 1})
            out.mkdir()  # meanwhile the user creates a folder there, with a file
            (out / "mine.txt").write_text("mine")
    assert (out / "mine.txt").read_text() == "mine"
    kept = Path(str(e.value).rsplit("kept in ", 1)[1])
    assert (kept / "summary.json").is_file() and (kept / OUTPUT_MARKER).is_file()


def test_exception_inside_removes_staging_and_created_parents(tmp_path):
    out = tmp_path / "a" / "b" / "o"
    with pytest.raises(KeyboardInterrupt):
        with run_directory(out) as stage:
            write_json(stage / "summary.json", {"v": 1})
            raise KeyboardInterrupt
    assert list(tmp_path.iterdir()) == []


def test_prepare_output_creates_nothing(tmp_path):
    before = sorted(tmp_path.rglob("*"))
    p = prepare_output(tmp_path / "x" / "y")
    assert p == tmp_path / "x" / "y" and sorted(tmp_path.rglob("*")) == before
    assert prepare_output("~/wflow-test-never-created") == Path.home() / \
        "wflow-test-never-created"
    with pytest.raises(OutputError, match="empty path"):
        prepare_output("")


def test_marker_must_be_wflow_json(tmp_path):
    d = tmp_path / "d"
    d.mkdir()
    (d / OUTPUT_MARKER).write_text('{"files": []}')  # not our marker (no wflow_output key)
    assert read_output_marker(d) is None
    with pytest.raises(OutputError, match="not a wflow output"):
        prepare_output(d, overwrite=True)


@pytest.mark.mpi
@pytest.mark.skipif(not MPIRUN.exists() and shutil.which("mpirun") is None,
                    reason="mpirun not available")
def test_mpirun_ranks_agree_on_a_refused_output(tmp_path):
    sc = tmp_path / "s.toml"
    sc.write_text('[pde]\nmesh = "icosphere:80"\nT = 0.05\ndt = 0.05\n')
    out = tmp_path / "o"
    out.mkdir()
    (out / "keep.txt").write_text("x")
    env = dict(os.environ, OMP_NUM_THREADS="1", OPENBLAS_NUM_THREADS="1")
    r = subprocess.run([str(MPIRUN), "-n", "2", sys.executable, "-m", "wflow.cli", "pde",
                        str(sc), "--out", str(out)], capture_output=True, text=True,
                       timeout=300, cwd=ROOT, env=env)
    assert r.returncode == 2, r.stderr
    lines = [ln for ln in r.stderr.splitlines() if ln.startswith("wflow pde")]
    assert len(lines) == 1 and "not a wflow output" in lines[0], r.stderr
    assert [p.name for p in out.iterdir()] == ["keep.txt"]
