"""``wflow run`` of a masked scenario (THEORY §9): the causal particles against the kinetic
limit by position-binned moments; the JKO and the EDI not applicable (one line, recorded in
``summary.json``); ``run.jko = true`` with a mask refused (exit 2, naming the key); the
estimate refuses an absurd run; a negative control (the kinetic solve with a wrong ALiBi
slope) is not a success.

The shipped example ``wflow/data/causal_run.toml`` runs once per module (about 15 s on two
loaded cores); the negative control runs it once more.
"""

from __future__ import annotations

import csv
import json
from dataclasses import replace
from importlib import resources
from pathlib import Path

import numpy as np
import pytest

import wflow.apps.jobs.kinetic as kinetic_job
from wflow.apps.main.causal import NOT_GRADIENT_FLOW, bins_of
from wflow.apps.output_keys import contract_problems, flatten, unexplained
from wflow.cli import EXIT_BAD_INPUT, EXIT_FAILED, main

EXAMPLE = Path(str(resources.files("wflow") / "data" / "causal_run.toml"))


@pytest.fixture(scope="module")
def example(tmp_path_factory):
    out = tmp_path_factory.mktemp("causal") / "run"
    import contextlib
    import io

    buf = io.StringIO()
    with contextlib.redirect_stdout(buf):
        code = main(["run", str(EXAMPLE), "--out", str(out)])
    return code, out, buf.getvalue()


def _summary(out: Path) -> dict:
    return json.loads((out / "summary.json").read_text(encoding="utf-8"))


def test_the_example_passes_the_moment_test(example):
    code, out, stdout = example
    s = _summary(out)
    assert code == 0 and s["status"] == "success" and s["message"] == "", s["message"]
    m = s["causal_moments"]
    assert m["passed"] and m["finite"]
    assert 0 < m["max_t_T"] <= m["t_crit_T"] and 0 < m["max_t_0"] <= m["t_crit_0"]
    # the layout: S = 6 slices -> 6 bins of 100 tokens, 8 moments each, 16 replicates
    assert (m["bins"], m["slices_per_bin"], m["replicates"]) == (6, 1, 16)
    assert len(m["test_T"]["t"]) == m["bins"] * 8 and len(m["t_per_bin_T"]) == 6
    assert m["ref_error_max"] > 0 and m["max_t_T_plain"] <= m["t_crit_T"]
    # the controls (24 a bin) explain most of the fluctuation at T: s.e. ×0.14 measured
    assert m["controls"] == 6 * 24 and m["cv_se_ratio"] < 0.3
    # the tokens and the slices are one model: token slope × n = the limit's λ
    assert s["alibi"]["lambda"] == 2.0
    assert s["alibi"]["token_slope"] * s["n_particles"] == pytest.approx(2.0, rel=1e-12)
    assert s["mask"] == "causal" and s["slices"] == 6 and s["attention"] == "usa"
    # the kinetic solution moves (the test compares something) and conserves each slice
    arr = np.load(out / "causal_moments.npz")
    assert np.max(np.abs(arr["kinetic_T"] - arr["kinetic_0"])) > 5 * m["detectable_T"]
    assert arr["particles_T"].shape == (16, 6, 9) and arr["particles_T_cv"].shape == (16, 49)
    assert s["kinetic_stats"]["mass_error_max"] < 1e-12
    assert "run: success" in stdout and f"{m['max_t_T']:.2f}" in stdout


def test_jko_and_edi_are_not_applicable(example):
    _, out, stdout = example
    s = _summary(out)
    for key in ("jko", "edi"):
        assert s[key] == {"status": "not applicable", "reason": NOT_GRADIENT_FLOW}
    lines = [ln for ln in stdout.splitlines() if "not a gradient flow" in ln]
    assert len(lines) == 1 and "JKO" in lines[0] and "EDI" in lines[0], stdout
    rows = {v["quantity"]: v["verdict"] for v in s["verdicts"]}
    assert rows["JKO"] == rows["EDI residuals"] == "n/a"


def test_outputs_are_documented_and_written(example):
    _, out, _ = example
    s = _summary(out)
    keys = flatten(s)
    assert not unexplained(keys), unexplained(keys)
    assert not contract_problems(s, "run"), contract_problems(s, "run")
    for table in sorted(out.glob("*.csv")):
        with table.open(encoding="utf-8") as fh:
            cols = next(csv.reader(fh))
        assert not unexplained(cols, csv=True), (table.name, unexplained(cols, csv=True))
    report = (out / "report.md").read_text(encoding="utf-8")
    assert "![causal_moments.png](causal_moments.png)" in report
    assert (out / "causal_moments.png").stat().st_size > 10_000
    assert "not a gradient flow" in report and "**Status: success**" in report
    with np.load(out / "slices.npz") as z:
        assert z["rho"].shape[1] == 6 and np.all(np.isfinite(z["rho"]))
    with np.load(out / "trajectory.npz") as z:
        assert z["x"].shape[1] == 600
    assert not Path(str(out) + ".ckpt").exists()


def test_bins_of():
    assert [bins_of(S) for S in (1, 2, 3, 4, 6, 12, 20, 30)] == [1, 1, 3, 1, 6, 6, 10, 15]


def _variant(tmp_path: Path, old: str, new: str) -> Path:
    text = EXAMPLE.read_text(encoding="utf-8")
    assert old in text
    p = tmp_path / "sc.toml"
    p.write_text(text.replace(old, new), encoding="utf-8")
    return p


def interrupt_at_replicate_3(monkeypatch, scenario: Path, out: Path) -> None:
    """Run the main job of ``scenario`` into ``out`` with Ctrl-C at replicate 3 of the
    comparison: the phases and replicates 1–2 are left checkpointed (asserted)."""
    import wflow.apps.main.causal as causal
    from wflow.apps.main import run_main_job

    real = causal._particles

    def interrupted(*args, r, **kw):
        if r == 3:
            raise KeyboardInterrupt
        return real(*args, r=r, **kw)

    with monkeypatch.context() as mp:
        mp.setattr(causal, "_particles", interrupted)
        with pytest.raises(KeyboardInterrupt, match="--resume"):
            run_main_job(scenario, out)
    assert {"kinetic.pkl", "particles.pkl", "compare.causal_replicate_2.pkl"} \
        <= {f.name for f in Path(str(out) + ".ckpt").iterdir()}


def _one_line(err: str) -> str:
    lines = err.strip().splitlines()
    assert len(lines) == 1 and "Traceback" not in err, err
    return lines[0]


@pytest.mark.parametrize("old, new, key", [
    ("particle_steps_per_save = 8", "particle_steps_per_save = 8\njko = true", "run.jko: "),
    ("n_particles = 600 ", "n_particles = 300 ", "run.n_particles: "),
    ('kind = "usa"', 'kind = "usa"\ndiffusion = 0.1', "attention.diffusion: "),
])
def test_bad_input_exits_2_naming_the_key(tmp_path, capsys, old, new, key):
    out = tmp_path / "o"
    assert main(["run", str(_variant(tmp_path, old, new)), "--out", str(out)]) \
        == EXIT_BAD_INPUT
    line = _one_line(capsys.readouterr().err)
    assert key in line, line
    if key == "run.jko: ":
        assert "not a gradient flow" in line
    assert not out.exists() and not Path(str(out) + ".ckpt").exists()


def test_the_estimate_refuses_an_absurd_run(tmp_path, capsys):
    out = tmp_path / "o"
    p = _variant(tmp_path, 'mesh = "icosphere:1280"', 'mesh = "icosphere:5000000"')
    assert main(["run", str(p), "--out", str(out)]) == EXIT_BAD_INPUT
    line = _one_line(capsys.readouterr().err)
    assert line.startswith("wflow run: error: run: ") and "pass --yes" in line, line
    assert not out.exists() and not Path(str(out) + ".ckpt").exists()


def test_a_wrong_kinetic_bias_slope_is_not_a_success(tmp_path, monkeypatch, capsys):
    """Negative control: the kinetic solve (every one of its levels) without the ALiBi bias
    (λ = 0 instead of 2) while the particles keep theirs: the moment test at T fails."""
    real = kinetic_job.solve_kinetic

    def no_bias(*args, options, **kw):
        return real(*args, options=replace(options, alibi=0.0), **kw)

    monkeypatch.setattr(kinetic_job, "solve_kinetic", no_bias)
    out = tmp_path / "o"
    assert main(["run", str(EXAMPLE), "--out", str(out)]) == EXIT_FAILED
    s = _summary(out)
    m = s["causal_moments"]
    assert s["status"] == "inaccurate" and not m["passed"]
    assert m["max_t_T"] > 2 * m["t_crit_T"], m["max_t_T"]
    assert m["max_t_0"] <= m["t_crit_0"]  # the initial draw is right: the dynamics is not
    assert "binned moments at T" in s["message"]
    assert "wflow run: run inaccurate" in capsys.readouterr().err


def test_an_interrupted_run_resumes_to_the_same_result(example, tmp_path, monkeypatch):
    """Ctrl-C in the comparison (at replicate 3): the phases and the replicates done are
    checkpointed; ``resume`` restores them and gives the uninterrupted run's numbers."""
    from wflow.apps.main import run_main_job

    out = tmp_path / "o"
    interrupt_at_replicate_3(monkeypatch, EXAMPLE, out)
    ckpt = Path(str(out) + ".ckpt")
    res = run_main_job(None, out, resume=True)
    assert res.summary["resumed"]["restored_phases"] == ["kinetic", "particles"]
    want = _summary(example[1])["causal_moments"]
    got = res.summary["causal_moments"]
    for key in ("max_t_T", "max_t_0", "ref_error_max"):
        assert got[key] == pytest.approx(want[key], rel=1e-12, abs=1e-15), key
    assert not ckpt.exists()


def test_the_estimate_covers_the_example(example):
    """The cost model of the causal run against the example's measured wall time (CPU time
    of the phases on two loaded cores: within a factor 4 either way), growing with the
    slices and the tokens."""
    from wflow.apps.main.causal import REPLICATES
    from wflow.apps.main.estimate import estimate_causal_job

    s = _summary(example[1])
    kw = {"cells": 1280, "S": 6, "n": 600, "H": 1, "T": 1.0, "dt": 0.05, "n_saves": 3,
          "steps_per_save": 8, "replicates": REPLICATES, "order": 2}
    est = estimate_causal_job(**kw)
    measured = s["wall_time_s"]["total"]
    assert measured / 4 < est.seconds < 4 * measured, (est.describe(), measured)
    assert estimate_causal_job(**{**kw, "S": 12}).seconds > est.seconds
    assert estimate_causal_job(**{**kw, "n": 2400}).seconds > est.seconds
