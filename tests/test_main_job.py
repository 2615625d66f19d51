"""The main job: outputs, EDI/W2 numbers, resume after an interruption, bad scenarios."""

from __future__ import annotations

import json

import numpy as np
import pytest

import wflow.main_job as mj
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
T = 0.3
dt = 0.05
order = 2
flow = "surrogate"
n_saves = 4
[run]
n_particles = 300
particle_steps_per_save = 2
jko = JKO
render = RENDER
[jko]
tau = 0.15
"""


def _scenario(tmp_path, render="false", jko="false"):
    p = tmp_path / "run.toml"
    p.write_text(SCENARIO.replace("RENDER", render).replace("JKO", jko))
    return p


def test_main_job_outputs_and_numbers(tmp_path):
    out = tmp_path / "out"
    assert main(["run", str(_scenario(tmp_path, "true", "true")), "--out", str(out)]) == 0
    s = json.loads((out / "summary.json").read_text())
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
    real = mj._run_particles

    def boom(*a, **k):
        raise KeyboardInterrupt

    monkeypatch.setattr(mj, "_run_particles", boom)
    with pytest.raises(KeyboardInterrupt):
        mj.run_main_job(sc, tmp_path / "out")
    assert (tmp_path / "out.ckpt" / "pde.pkl").is_file()
    assert not (tmp_path / "out").exists()  # nothing that looks complete
    monkeypatch.setattr(mj, "_run_particles", real)
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
