"""`wflow run`: every section validated before the first phase; resume only the same scenario.

Checked at the command line: exit status, the one line, no checkpoint or output left by
bad input, no phase computed (the phase functions are replaced by ones that fail the test),
a checkpoint resumed only with the scenario (and the files it names) it was made with.
"""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest

from wflow.apps.main import phases as mj_phases
from wflow.cli import main

from .test_main_job import SCENARIO as MAIN_JOB_SCENARIO

# the main job's test scenario with a short horizon and an explicit JKO step (T = 2τ)
SCENARIO = MAIN_JOB_SCENARIO.replace("T = 1.0", "T = 0.3").replace(
    "[run]", "[jko]\ntau = 0.15\n[run]").replace("RENDER", "false").replace(
    'type = "matrices"\nA = [[[1.5, 0.3, 0.0], [0.3, 0.5, 0.0], [0.0, 0.0, -0.5]],\n'
    '     [[0.2, 0.0, 0.4], [0.0, 1.0, 0.0], [0.4, 0.0, 1.2]]]',
    'type = "file"\nfile = "heads.npz"')
A = np.array([[[1.5, 0.3, 0.0], [0.3, 0.5, 0.0], [0.0, 0.0, -0.5]],
              [[0.2, 0.0, 0.4], [0.0, 1.0, 0.0], [0.4, 0.0, 1.2]]])
assert 'file = "heads.npz"' in SCENARIO and "tau = 0.15" in SCENARIO


def _scenario(tmp_path: Path, *, jko: str = "false", replace: tuple[str, str] = ("", ""),
              name: str = "run.toml") -> Path:
    if not (tmp_path / "heads.npz").exists():
        np.savez(tmp_path / "heads.npz", A=A)
    p = tmp_path / name
    p.write_text(SCENARIO.replace("JKO", jko).replace(*replace) if replace[0]
                 else SCENARIO.replace("JKO", jko))
    return p


@pytest.fixture
def no_phase(monkeypatch):
    def boom(*a, **k):
        raise AssertionError("a phase ran although the scenario is invalid")
    for name in ("_run_pde", "_run_particles", "_run_jko"):
        monkeypatch.setattr(mj_phases, name, boom)


def _one_line(err: str) -> str:
    lines = err.strip().splitlines()
    assert len(lines) == 1 and "Traceback" not in err, err
    return lines[0]


@pytest.mark.parametrize("replace,words", [
    (("tau = 0.15", "tua = 0.15"), ["jko.tua: unknown key"]),
    (("tau = 0.15", "tau = 0.2"), ["jko.T", "multiple of jko.tau"]),
    (("tau = 0.15", "tau = 0.15\not = \"exact\""), ["jko.ot"]),
])
def test_jko_section_is_validated_before_the_first_phase(tmp_path, capsys, no_phase, replace,
                                                         words):
    sc = _scenario(tmp_path, jko="true", replace=replace)
    out = tmp_path / "o"
    assert main(["run", str(sc), "--out", str(out)]) == 2
    captured = capsys.readouterr()
    line = _one_line(captured.err)
    for w in words:
        assert w in line, line
    assert "phase" not in captured.out
    assert not out.exists() and not (tmp_path / "o.ckpt").exists()


def test_jko_needs_value_aligned_heads_before_the_first_phase(tmp_path, capsys, no_phase):
    np.savez(tmp_path / "heads.npz", A=A, V=np.swapaxes(A, 1, 2) @ A)  # V not ±A
    sc = _scenario(tmp_path, jko="true")
    assert main(["run", str(sc), "--out", str(tmp_path / "o")]) == 2
    assert "value-aligned" in _one_line(capsys.readouterr().err)
    assert not (tmp_path / "o.ckpt").exists()


def test_foreign_checkpoint_folder_is_refused(tmp_path, capsys, no_phase):
    ck = tmp_path / "o.ckpt"
    ck.mkdir()
    (ck / "thesis.pdf").write_text("x")
    assert main(["run", str(_scenario(tmp_path)), "--out", str(tmp_path / "o")]) == 2
    assert "not a wflow checkpoint" in _one_line(capsys.readouterr().err)
    assert (ck / "thesis.pdf").read_text() == "x"


def test_interrupt_resume_and_scenario_fingerprint(tmp_path, capsys, monkeypatch):
    sc = _scenario(tmp_path)
    out = tmp_path / "o"
    real = mj_phases._run_particles

    def interrupted(*a, **k):
        raise KeyboardInterrupt
    monkeypatch.setattr(mj_phases, "_run_particles", interrupted)
    # Ctrl-C after the PDE phase: 130, one line with the resume command, no traceback
    assert main(["run", str(sc), "--out", str(out)]) == 130
    line = _one_line(capsys.readouterr().err)
    assert line.startswith("wflow run: interrupted;") and f"wflow run --resume {out}" in line
    assert (tmp_path / "o.ckpt" / "pde.pkl").is_file() and not out.exists()
    meta = json.loads((tmp_path / "o.ckpt" / "scenario.json").read_text())
    assert meta["fingerprint"]["scenario"] and "file:heads.npz" in meta["fingerprint"]
    monkeypatch.setattr(mj_phases, "_run_particles", real)
    ckpt_before = sorted(p.name for p in (tmp_path / "o.ckpt").iterdir())

    # a different scenario is refused, the difference named, the checkpoint kept
    changed = _scenario(tmp_path, replace=("n_particles = 300", "n_particles = 400"),
                        name="changed.toml")
    assert main(["run", str(changed), "--resume", str(out)]) == 2
    line = _one_line(capsys.readouterr().err)
    assert "run.n_particles: 300 -> 400" in line and "without --resume" in line
    # so is a changed file the scenario names (same TOML text)
    np.savez(tmp_path / "heads.npz", A=1.1 * A)
    assert main(["run", str(sc), "--resume", "--out", str(out)]) == 2
    assert "file 'heads.npz' changed" in _one_line(capsys.readouterr().err)
    np.savez(tmp_path / "heads.npz", A=A)
    assert sorted(p.name for p in (tmp_path / "o.ckpt").iterdir()) == ckpt_before

    # the same scenario resumes (PDE phase restored, not recomputed)
    monkeypatch.setattr(mj_phases, "_run_pde", lambda *a, **k: pytest.fail("pde recomputed"))
    assert main(["run", str(sc), "--resume", str(out)]) == 0
    s = json.loads((out / "summary.json").read_text())
    assert s["status"] == "success" and s["edi"]["pde"]["relative"] < 0.05
    assert not (tmp_path / "o.ckpt").exists()


def test_resume_dir_must_match_out(tmp_path, capsys, no_phase):
    assert main(["run", "--resume", str(tmp_path / "a"), "--out", str(tmp_path / "b")]) == 2
    assert "differs from --out" in _one_line(capsys.readouterr().err)
