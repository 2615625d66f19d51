"""``wflow run`` with token diffusion ``D > 0`` (issue 40, item 8): every phase gets the noise.

The shipped noisy scenario (``wflow/data/noisy_run.toml``) runs the PDE, the particles and
the JKO with ``D``; ``summary.json`` and the report state ``D`` and the free-energy EDI of
each solver. A ``D`` that a phase would drop (a deterministic particle integrator, the OT
JKO scheme) exits 2 naming ``attention.diffusion`` before any phase runs (negative
controls: the same scenario with ``D = 0`` passes the same checks).
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from wflow.apps.output_keys import flatten, unexplained
from wflow.cli import EXIT_BAD_INPUT, main

NOISY = Path(__file__).resolve().parents[1] / "wflow" / "data" / "noisy_run.toml"


def variant(tmp_path: Path, *pairs: tuple[str, str]) -> Path:
    text = NOISY.read_text()
    for old, new in pairs:
        assert old in text
        text = text.replace(old, new)
    p = tmp_path / "sc.toml"
    p.write_text(text)
    return p


@pytest.mark.parametrize("change, what", [
    (('particle_integrator = "em"', 'particle_integrator = "rk4"'), "run.particle_integrator"),
    (("verify = false", 'verify = false\nscheme = "ot"'), "'ot'"),
])
def test_a_noise_a_phase_would_drop_exits_2(tmp_path, capsys, change, what):
    p = variant(tmp_path, change)
    assert main(["run", str(p), "--out", str(tmp_path / "o")]) == EXIT_BAD_INPUT
    err = capsys.readouterr().err
    assert "attention.diffusion: token diffusion D = 0.05 has no effect" in err and what in err
    assert not (tmp_path / "o").exists() and not (tmp_path / "o.ckpt").exists()


def test_noiseless_variant_passes_the_same_checks(tmp_path):
    """Negative control of the refusals: with D = 0 the rk4 / OT variants are valid."""
    from wflow.apps.main import phases
    from wflow.apps.main.options import RunOptions, _load

    sc = _load(variant(tmp_path, ("diffusion = 0.05", "diffusion = 0.0"),
                       ('particle_integrator = "em"', 'particle_integrator = "rk4"')))
    phases._check_noise(sc, RunOptions(particle_integrator="rk4"))  # no refusal
    assert sc.diffusion == 0.0


def test_noisy_main_job_succeeds_and_reports_every_solver(tmp_path, capsys):
    out = tmp_path / "run"
    rc = main(["run", str(NOISY), "--out", str(out)])
    line = capsys.readouterr().out
    s = json.loads((out / "summary.json").read_text())
    assert rc == 0 and s["status"] == "success", s["message"]
    assert s["diffusion"] == 0.05 and "token diffusion D = 0.05" in line
    f = s["free_edi"]
    # the PDE's free-energy EDI: Strang + CN at 720 cells, measured 2.4e-3 of ∫I dt
    assert f["pde"]["meaning"] == "identity" and f["pde"]["relative"] < 0.05
    assert f["jko"]["meaning"] == "identity" and f["jko"]["relative"] is not None
    assert f["particles"]["meaning"] == "not recorded"  # particles carry no entropy
    ito = s["ito_balance"]  # their balance: Itô's formula for E, judged in the main phase
    assert ito["judged"] is True and ito["passed"] is True, ito
    assert abs(ito["mean"]) <= ito["tolerance"]
    row = next(r for r in s["verdicts"] if r["quantity"].startswith("particles: Itô"))
    assert row["verdict"] == "PASS", row
    assert s["checks"]["jko"]["free_edi"]["judged"] is False
    assert not unexplained(flatten(s))
    report = (out / "report.md").read_text()
    assert "Token diffusion D" in report and "free-energy EDI" in report


def test_ito_row_fails_a_failed_balance_and_reports_an_unjudged_one():
    """Negative control of the main job's Itô row: a failed check is a FAIL row."""
    from wflow.apps.main.summary import _ito_block
    from wflow.apps.main.verdicts import _ito_row
    from wflow.status import Verdict

    rows = []

    def add(q, v, tol, verdict, meaning):
        rows.append(verdict)

    base = {"judged": True, "mean": 0.3, "tolerance": 0.1, "stderr": 0.02,
            "bias_bound": 0.01, "budget": 1.0, "paths": 1}
    _ito_row(add, _ito_block({**base, "passed": False}), 0.05)
    _ito_row(add, _ito_block({**base, "mean": 0.05, "passed": True}), 0.05)
    _ito_row(add, _ito_block({"judged": False, "reason": "compiled loop", "mean": 0.1}), 0.05)
    _ito_row(add, _ito_block(None), 0.05)
    assert rows == [Verdict.FAIL, Verdict.PASS, Verdict.REPORTED, Verdict.NOT_APPLICABLE]
