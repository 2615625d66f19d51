"""A run that cannot fit is refused before it starts; no silent changes.

Absurd sizes (T = 1e9 for particles, 10⁷ tokens, a 10⁶-cell mesh, a PDE with T = 1e9) are
refused or need ``--yes`` before any computation, with the estimate in one line; a
``dt`` that does not divide ``T`` is logged and recorded; a refinement table with one row
is a WARN verdict, never "every check passed". Negative controls: ordinary sizes pass.
"""

from __future__ import annotations

import json
import logging
import math

import pytest

import wflow.apps.main_job as mj
import wflow.infra.estimate as est
import wflow.particles.run as prun
from wflow.cli import main
from wflow.infra.estimate import (
    CONFIRM_SECONDS,
    EstimateError,
    check_estimate,
    dt_record,
    estimate_jko,
    estimate_particles,
    estimate_pde,
)

from .test_cli_output import SCENARIO


def _sc(tmp_path, **repl):
    text = SCENARIO
    for k, v in repl.items():
        text = text.replace(k, v)
    p = tmp_path / "sc.toml"
    p.write_text(text)
    return p


@pytest.fixture
def no_compute(monkeypatch):
    monkeypatch.setattr(prun, "simulate", lambda *a, **k: pytest.fail("computed"))


def _one_line(err: str) -> str:
    lines = err.strip().splitlines()
    assert len(lines) == 1 and "Traceback" not in err, err
    return lines[0]


def test_particles_with_absurd_T_are_refused_for_memory(tmp_path, capsys, no_compute):
    sc = _sc(tmp_path, **{"T = 0.2": "T = 1e9"})
    assert main(["particles", str(sc), "--out", str(tmp_path / "o")]) == 2
    line = _one_line(capsys.readouterr().err)
    assert line.startswith("wflow particles: error: particles: would need") and \
        "more memory than this machine has" in line and "recorded rows" in line
    assert not (tmp_path / "o").exists()


def test_ten_million_tokens_need_confirmation_on_a_terminal(monkeypatch):
    e = estimate_particles(n=10**7, H=2, T=1.0, dt=0.1)
    assert e.memory < 4 * 2**30  # blocked kernel sums: fits in memory ...
    assert e.seconds > CONFIRM_SECONDS  # ... but takes far longer than an hour
    with pytest.raises(EstimateError, match="pass --yes"):
        check_estimate(e, interactive=True, available=64 * 2**30)
    check_estimate(e, confirm=True, available=64 * 2**30)  # --yes runs it


def test_batch_mode_warns_and_goes_on(capsys):
    e = estimate_pde(cells=10**6, T=1.0, dt=0.01)
    assert e.seconds > CONFIRM_SECONDS
    check_estimate(e, interactive=False, available=64 * 2**30)
    err = capsys.readouterr().err
    assert "warning: estimate" in err and "batch mode" in err


def test_pde_with_absurd_T_is_bounded_by_max_steps_and_needs_yes():
    e = estimate_pde(cells=2420, T=1e9, dt=0.01, max_steps=1_000_000)
    assert e.steps == 1_000_000 and e.seconds > CONFIRM_SECONDS
    with pytest.raises(EstimateError, match="--yes"):
        check_estimate(e, interactive=True)


def test_jko_on_a_huge_mesh_needs_yes_and_memory():
    e = estimate_jko(cells=10**6, steps=10, scheme="ot")  # the candidate list is capped ...
    with pytest.raises(EstimateError, match="--yes"):  # ... the time is not
        check_estimate(e, interactive=True, available=8 * 2**30)
    with pytest.raises(EstimateError, match="candidate pairs"):
        check_estimate(e, confirm=True, available=2**30)


def test_ordinary_sizes_pass_quietly(capsys):
    for e in (estimate_particles(n=200, H=2, T=1.0, dt=0.01),
              estimate_pde(cells=2420, H=2, T=1.0, dt=0.01),
              estimate_jko(cells=2420, steps=10)):
        assert e.seconds < CONFIRM_SECONDS
        check_estimate(e, interactive=True)
    assert capsys.readouterr().err == ""


def test_cli_refuses_a_long_run_on_a_terminal_before_computing(tmp_path, capsys, no_compute,
                                                                monkeypatch):
    monkeypatch.setattr(est, "_interactive", lambda: True)
    sc = _sc(tmp_path, **{"n = 30": "n = 20000", "T = 0.2": "T = 1000.0"})
    assert main(["particles", str(sc), "--out", str(tmp_path / "o")]) == 2
    line = _one_line(capsys.readouterr().err)
    assert "pass --yes" in line and "steps" in line
    assert not (tmp_path / "o").exists()


def test_available_memory_is_positive_and_finite():
    m = est.available_memory()
    assert 0 < m < math.inf


def test_dt_that_does_not_divide_T_is_recorded(tmp_path, capsys, caplog):
    sc = _sc(tmp_path, **{"T = 0.2": "T = 1.0", "dt = 0.05": "dt = 0.3"})
    with caplog.at_level(logging.WARNING, logger="wflow.infra.estimate"):
        assert main(["particles", str(sc), "--out", str(tmp_path / "o")]) == 0
    s = json.loads((tmp_path / "o" / "summary.json").read_text())
    assert s["dt"] == {"requested": 0.3, "used": 0.25, "steps": 4, "adjusted": True}
    assert "4 steps of dt = 0.25" in capsys.readouterr().out
    assert "does not divide" in caplog.text
    # control: a dt that divides T is not adjusted, nothing logged
    assert dt_record(1.0, 0.25) == {"requested": 0.25, "used": 0.25, "steps": 4,
                                    "adjusted": False}
    assert dt_record(1.0, 5.0)["used"] == 1.0 and dt_record(1.0, 5.0)["steps"] == 1


def test_refinement_table_of_one_row_is_a_warning():
    class J:  # the parts of a JKO result the refinement block reads
        stats = {"tau_rule": {"vmax": 1.0}, "steps": 1, "locked_steps": 0}
        areas = __import__("numpy").full(80, 4 * math.pi / 80)
        options = type("O", (), {"tau": 1.0, "epsilon": 0.0, "scheme": "exact"})()
        status = "success"
        checks = {"edi": {"value": 0.1}}
        balance = {"edi": 0.1, "dissipation": 1.0}
    tab = mj._refinement_block(J(), {"rows": []}, {"w2_jko_vs_pde": __import__(
        "numpy").array([0.1])}, mj.RunOptions())
    assert tab["shrinks_w2"] is None and tab["shrinks_edi"] is None
    from wflow.apps.report import _yes_no

    assert _yes_no(None) == "not judged (one row)" and _yes_no(False) == "NO"
