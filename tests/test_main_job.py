"""The main job: outputs, EDI/W2 numbers, resume after an interruption, bad scenarios."""

from __future__ import annotations

import json

import numpy as np
import pytest

import wflow.apps.main as mj
from wflow.apps.main import phases as mj_phases
from wflow.cli import main

SCENARIO = """
seed = 3
[attention]
kind = "softmax"
beta = 1.0
d = 3
[heads]
type = "matrices"
A = [[[1.5, 0.3, 0.0], [0.3, 0.5, 0.0], [0.0, 0.0, -0.5]],
     [[0.2, 0.0, 0.4], [0.0, 1.0, 0.0], [0.4, 0.0, 1.2]]]
w = "mean"
[density]
type = "vmf"
means = [[1.0, 0.0, 0.2], [-0.3, 1.0, 0.0]]
kappas = [5.0, 4.0]
[pde]
mesh = "sphere_720.msh"
T = 1.0
dt = 0.05
order = 2
flow = "surrogate"
n_saves = 4
[run]
n_particles = 300
particle_steps_per_save = 2
jko = JKO
render = RENDER
"""


def _scenario(tmp_path, render="false", jko="false"):
    p = tmp_path / "run.toml"
    p.write_text(SCENARIO.replace("RENDER", render).replace("JKO", jko))
    return p


def test_main_job_outputs_and_numbers(tmp_path):
    out = tmp_path / "out"
    assert main(["run", str(_scenario(tmp_path, "true", "true")), "--out", str(out)]) == 0
    s = json.loads((out / "summary.json").read_text())
    assert s["status"] == "success", s["message"]
    assert "jko" in s["edi"] and s["w2"]["jko_vs_pde"] < 0.5
    assert s["edi"]["jko"]["dissipation"] > 0 and (out / "diagnostics_jko.csv").is_file()
    for key in ("pde", "particles"):
        assert abs(s["edi"][key]["relative"]) < 0.05, s["edi"][key]
    assert s["mass_error"] < 1e-12 and s["min_density"] >= 0
    # particles vs PDE stays at the level of the initial sampling error
    assert s["w2"]["particles_vs_pde"] < 2 * s["w2"]["particles_vs_pde_initial"]
    for f in ("report.md", "density.npz", "trajectory.npz", "diagnostics_pde.csv",
              "diagnostics_particles.csv", "w2.csv", "energy.png", "edi_balance.png",
              "w2.png", "density_0000.png"):
        assert (out / f).is_file(), f
    with np.load(out / "density.npz") as z:
        assert z["rho"].shape == (4, 720) and z["areas"].shape == (720,)
    assert not (tmp_path / "out.ckpt").exists()


def test_resume_after_interrupt_gives_same_result(tmp_path, monkeypatch):
    sc = _scenario(tmp_path)
    ref = mj.run_main_job(sc, tmp_path / "ref")
    real = mj_phases._run_particles

    def boom(*a, **k):
        raise KeyboardInterrupt

    monkeypatch.setattr(mj_phases, "_run_particles", boom)
    with pytest.raises(KeyboardInterrupt):
        mj.run_main_job(sc, tmp_path / "out")
    assert (tmp_path / "out.ckpt" / "pde.pkl").is_file()
    assert not (tmp_path / "out").exists()  # nothing that looks complete
    monkeypatch.setattr(mj_phases, "_run_particles", real)
    res = mj.run_main_job(None, tmp_path / "out", resume=True)
    for k in ("edi", "w2", "mass_error", "min_density"):
        assert res.summary[k] == ref.summary[k]


def test_bad_run_section_names_key(tmp_path, capsys):
    p = tmp_path / "bad.toml"
    p.write_text(SCENARIO.replace("RENDER", "false").replace("JKO", "false").replace(
        "n_particles = 300",
                                                             "n_particels = 300"))
    assert main(["run", str(p), "--out", str(tmp_path / "o")]) == 2
    assert "run.n_particels: unknown key" in capsys.readouterr().err
    assert not (tmp_path / "o").exists() and not (tmp_path / "o.ckpt").exists()


def test_missing_mesh_named(tmp_path, capsys):
    p = tmp_path / "bad.toml"
    p.write_text(SCENARIO.replace("RENDER", "false").replace("JKO", "false").replace(
        "sphere_720.msh", "nope.msh"))
    assert main(["run", str(p), "--out", str(tmp_path / "o")]) == 2
    assert "nope.msh" in capsys.readouterr().err
    assert not (tmp_path / "o").exists() and not (tmp_path / "o.ckpt").exists()


def test_resume_without_checkpoint(tmp_path, capsys):
    assert main(["run", "--resume", "--out", str(tmp_path / "o")]) == 2
    assert "no checkpoint" in capsys.readouterr().err


# ----------------------------------------------------------------------------- statuses, report
def _run(tmp_path, name, text, monkeypatch=None):
    p = tmp_path / f"{name}.toml"
    p.write_text(text.replace("RENDER", "false").replace("JKO", "true"))
    return mj.run_main_job(p, tmp_path / name)


def _statements(report: str) -> set[str]:
    """The report's sentences with every number blanked: what it *says*."""
    import re

    return {re.sub(r"[-+]?\d[\d.e+-]*", "#", line) for line in report.splitlines()}


def test_main_job_statuses_verdicts_and_flow_statements(tmp_path):
    """Surrogate: every phase succeeds, every verdict passes, the τ/h table shrinks (W₂ at
    first order). Transformer: the EDI residual is reported as the model's defect, the
    chain-rule residual is the accuracy check, and the JKO is compared with a surrogate
    PDE run — the two reports differ in what they say, not only in their numbers."""
    sur = _run(tmp_path, "sur", SCENARIO)
    s = sur.summary
    assert s["status"] == "success" and s["message"] == ""
    assert set(s["statuses"]) == {"pde", "particles", "jko"}
    assert all(v["verdict"] in ("PASS", "reported") for v in s["verdicts"]), s["verdicts"]
    assert {v["quantity"] for v in s["verdicts"]} >= {
        "PDE: chain-rule residual (relative)", "particles: chain-rule residual (relative)",
        "JKO: Σ|EDI_k| (relative)",
        "JKO: locked steps", "W₂ (all 300 particles) vs PDE (max over t)"}
    assert all(v["meaning"] and v["tolerance"] for v in s["verdicts"])
    tab = s["jko_refinement"]
    assert len(tab["rows"]) == 2 and tab["shrinks_w2"] and tab["rows"][-1]["cells"] == 720
    assert s["w2"]["jko_reference"] == "pde" and s["w2"]["n_inv_sqrt"] == 300 ** -0.5
    tr = _run(tmp_path, "tr", SCENARIO.replace('flow = "surrogate"', 'flow = "transformer"'))
    t = tr.summary
    assert t["status"] == "success", t["message"]
    assert "pde_surrogate" in t["statuses"] and t["w2"]["jko_reference"] == "pde_surrogate"
    kinds = {v["quantity"]: v["verdict"] for v in t["verdicts"]}
    assert kinds["PDE: EDI defect (relative)"] == kinds["particles: EDI defect (relative)"] \
        == "defect (expected)"
    assert kinds["PDE: chain-rule residual (relative)"] == "PASS"
    assert t["edi"]["pde"]["meaning"] == "defect" and s["edi"]["pde"]["meaning"] == "identity"
    # the JKO is the same in both (it discretises v̂), and so is its comparison
    # (the surrogate reference saves at the JKO times: its adaptive steps differ slightly)
    np.testing.assert_allclose(t["w2"]["jko_vs_pde"], s["w2"]["jko_vs_pde"], rtol=1e-3)
    rs = (tmp_path / "sur" / "report.md").read_text()
    rt = (tmp_path / "tr" / "report.md").read_text()
    assert "**not** a gradient flow" in rt and "defect (expected)" in rt
    assert "second PDE run on v̂" in rt and "W₂ JKO vs surrogate PDE" in rt
    assert "exact weighted-Wasserstein gradient flow" in rs and "defect" not in rs
    assert "Status: SUCCESS" in rs and "FAIL" not in rs
    only_tr = _statements(rt) - _statements(rs)
    assert len(only_tr) >= 5, only_tr


def test_failing_checks_are_reported_as_fail(tmp_path, monkeypatch):
    """Negative controls through the public entry point: (1) a JKO step far below the cell
    scale (τ = 0.05 on 720 cells, τ|v|max ≈ 0.16h) locks: the JKO status is "locked", the
    run's status too, and the report says FAIL; (2) particles moved by flipped heads
    (V = −A) drift away from the PDE: W₂ exceeds 3× its t = 0 sampling level → FAIL, run
    "inaccurate"."""
    from wflow.attention.heads import Heads
    from wflow.jko import JKOWarning

    with pytest.warns(JKOWarning, match="3 of 3 JKO steps locked"):
        locked = _run(tmp_path, "locked", SCENARIO.replace("T = 1.0", "T = 0.15").replace(
            'render = RENDER', 'render = RENDER\njko_refinement = 0')
            + "[jko]\nscheme = \"ot\"\ntau = 0.05\n")
    s = locked.summary
    assert s["statuses"]["jko"]["status"] == "locked" and s["status"] == "locked"
    assert "3 of 3 JKO steps locked" in s["message"]
    rep = (tmp_path / "locked" / "report.md").read_text()
    assert "Status: LOCKED" in rep and "| JKO: locked steps | 3 of 3 | 0 | **FAIL** |" in rep
    real = mj_phases._run_particles

    def flipped(mesh, pde, schedule, attn, *a, **k):
        h = schedule.heads_at(schedule.initial_theta())
        return real(mesh, pde, Heads(h.Q, h.K, -h.V, h.w), attn, *a, **k)

    monkeypatch.setattr(mj_phases, "_run_particles", flipped)
    bad = _run(tmp_path, "flip", SCENARIO.replace("JKO", "false"))
    b = bad.summary
    assert b["status"] == "inaccurate" and "W₂ (all 300 particles) vs PDE" in b["message"]
    assert b["w2"]["particles_vs_pde_max"] > 3 * b["w2"]["particles_vs_pde_initial"]
    rep = (tmp_path / "flip" / "report.md").read_text()
    assert "Status: INACCURATE" in rep and "**FAIL**" in rep


@pytest.mark.slow
def test_default_run_is_off_the_locking_plateau_and_refines(tmp_path):
    """The shipped default (2000 → 500 particles, no render): every phase succeeds with
    margin; the FV JKO at τ = 0.25 (8 steps, τ|v|max/h ≈ 1.5) does not lock; the four-level
    τ/h table (320, 720, 1280, 2420 cells; τ = 2/3, 1/2, 1/3, 1/4) shows W₂ and L¹ of the
    JKO against the PDE and the JKO EDI residual shrinking (measured orders 0.80, 0.63,
    1.55; W₂ 0.195, 0.150, 0.112, 0.087), every refinement verdict PASS."""
    from importlib import resources

    text = (resources.files("wflow") / "data" / "default_run.toml").read_text()
    p = tmp_path / "default.toml"
    p.write_text(text.replace("n_particles = 2000", "n_particles = 500").replace(
        "jko = true", "jko = true\nrender = false"))
    s = mj.run_main_job(p, tmp_path / "out").summary
    assert s["status"] == "success", s["message"]
    assert s["checks"]["pde"]["chain"]["value"] < 0.1 * s["checks"]["pde"]["chain"]["tolerance"]
    assert s["checks"]["jko"]["edi"]["value"] < 0.2 * s["checks"]["jko"]["edi"]["tolerance"]
    assert s["jko_tau"]["tau"] == 0.25 and s["checks"]["jko"]["locked_steps"] == 0
    tab = s["jko_refinement"]
    assert [r["cells"] for r in tab["rows"]] == [320, 720, 1280, 2420]
    np.testing.assert_allclose([r["tau"] for r in tab["rows"]], [2 / 3, 1 / 2, 1 / 3, 1 / 4])
    assert tab["shrinks_w2"] and tab["shrinks_l1"] and tab["shrinks_edi"], tab["rows"]
    assert 0.6 < tab["order_w2"] < 1.5, tab["order_w2"]
    assert all(r["locked_steps"] == 0 and r["scheme"] == "fv" for r in tab["rows"])
    assert tab["ot_crosscheck"]["cells"] == 320
    assert all(v["verdict"] in ("PASS", "reported") for v in s["verdicts"]), s["verdicts"]
