"""The scenario key ``[attention] diffusion`` and ``--diffusion`` through the jobs (issue 40).

``D`` is read once by the scenario (``check_diffusion``: ``D < 0``, NaN, inf exit 2 naming
``attention.diffusion``), overridden by ``--diffusion`` on ``wflow particles``, ``pde``
and ``jko``, passed to ``ParticleOptions``/``PDEOptions``/``JKOOptions``, and a ``D`` with
no effect in the solver run (a deterministic particle integrator, the OT JKO scheme) exits
2 naming the key it came from. Negative controls: the same runs with an effective ``D``
succeed and record it.
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from wflow.apps.output_keys import flatten, unexplained
from wflow.apps.scenario import load_scenario
from wflow.cli import EXIT_BAD_INPUT, main

ROOT = Path(__file__).resolve().parents[1]

SCENARIO = """
seed = 1
[attention]
kind = "usa"
beta = 1.0
d = 3
{diffusion}
[tokens]
n = 40
[heads]
type = "scalar"
lambdas = [1.0]
[particles]
T = 0.1
dt = 0.05
integrator = "{integrator}"
[density]
type = "vmf"
means = [[0.0, 0.0, 1.0]]
kappas = [3.0]
[pde]
mesh = "sphere_720.msh"
T = 0.1
dt = 0.05
order = 2
[jko]
mesh = "sphere_720.msh"
T = 0.1
tau = 0.025
"""


def scenario(tmp_path: Path, diffusion: str | None = "diffusion = 0.05",
             integrator: str = "em") -> Path:
    p = tmp_path / "sc.toml"
    p.write_text(SCENARIO.format(diffusion=diffusion or "", integrator=integrator))
    return p


def err_line(capsys) -> str:
    err = capsys.readouterr().err.strip()
    assert "Traceback" not in err and len(err.splitlines()) == 1, err
    return err


@pytest.mark.parametrize("bad", ["-0.1", "nan", "inf", "\"0.1\""])
def test_bad_scenario_diffusion_exits_2_naming_the_key(tmp_path, capsys, bad):
    p = scenario(tmp_path, f"diffusion = {bad}")
    for cmd in ("particles", "pde", "jko"):
        assert main([cmd, str(p), "--out", str(tmp_path / "o")]) == EXIT_BAD_INPUT
        assert "attention.diffusion: " in err_line(capsys)
    assert not (tmp_path / "o").exists()
    good = load_scenario(scenario(tmp_path, "diffusion = 0.25"))  # negative control
    assert good.diffusion == 0.25 and load_scenario(scenario(tmp_path, None)).diffusion == 0.0


def test_subprocess_exit_codes(tmp_path):
    """The real command line: a bad flag and a D without effect exit 2, one line each."""
    def run(*args):
        return subprocess.run([sys.executable, "-m", "wflow.cli", *args], cwd=tmp_path,
                              capture_output=True, text=True, timeout=300,
                              env={**__import__("os").environ, "PYTHONPATH": str(ROOT)})

    p = scenario(tmp_path, None, integrator="rk4")
    r = run("particles", str(p), "--out", "o", "--diffusion", "-1")
    assert r.returncode == 2 and "--diffusion: must be >= 0" in r.stderr, r.stderr
    r = run("particles", str(p), "--out", "o", "--diffusion", "0.1")
    assert r.returncode == 2 and "--diffusion: token diffusion D = 0.1 has no effect" \
        in r.stderr and "'rk4'" in r.stderr, r.stderr
    r = run("jko", str(p), "--out", "o", "--diffusion", "0.1", "--scheme", "ot")
    assert r.returncode == 2 and "--diffusion: " in r.stderr and "'ot'" in r.stderr, r.stderr
    assert not (tmp_path / "o").exists()
    r = run("particles", str(p), "--out", "o", "--diffusion", "0")  # negative control
    assert r.returncode == 0, r.stderr
    s = json.loads((tmp_path / "o" / "summary.json").read_text())
    assert s["diffusion"] == 0.0


def test_particles_scenario_d_needs_a_stochastic_integrator(tmp_path, capsys):
    p = scenario(tmp_path, integrator="rk4")
    assert main(["particles", str(p), "--out", str(tmp_path / "o")]) == EXIT_BAD_INPUT
    line = err_line(capsys)
    assert "attention.diffusion: token diffusion D = 0.05 has no effect" in line
    assert not (tmp_path / "o").exists()
    # negative controls: --diffusion 0 overrides the scenario; "em" takes the noise
    assert main(["particles", str(p), "--out", str(tmp_path / "z"), "--diffusion", "0"]) == 0
    p = scenario(tmp_path, integrator="em")
    assert main(["particles", str(p), "--out", str(tmp_path / "n")]) == 0
    s = json.loads((tmp_path / "n" / "summary.json").read_text())
    assert s["diffusion"] == 0.05 and not unexplained(flatten(s))


def test_jko_and_pde_get_the_noise(tmp_path, capsys):
    p = scenario(tmp_path)
    # the noisy JKO judges no check of its own (both EDI forms recorded, not judged): it
    # ends ``completed`` and exits 1, naming the remedy; its outputs are written
    assert main(["jko", str(p), "--out", str(tmp_path / "j")]) == 1
    err = capsys.readouterr().err
    assert err.index("wflow jko: note: no accuracy check will be judged") < err.index(
        "run completed: no accuracy check was judged"), err
    s = json.loads((tmp_path / "j" / "summary.json").read_text())
    assert s["status"] == "completed" and "jko.rtol" in s["message"]
    assert s["options"]["diffusion"] == 0.05 and "free_edi" in s["balance"]
    assert s["checks"]["free_edi"]["judged"] is False
    assert s["balance"]["free_dissipation_int"] > 0
    assert not unexplained(flatten(s))
    assert main(["pde", str(p), "--out", str(tmp_path / "p"), "--diffusion", "0.1"]) == 0
    s = json.loads((tmp_path / "p" / "summary.json").read_text())
    assert s["options"]["diffusion"] == 0.1 and "free_edi" in s["balance"]
    # negative control: the OT scheme with the scenario's D exits 2 naming the scenario key
    capsys.readouterr()
    assert main(["jko", str(p), "--out", str(tmp_path / "o"), "--scheme", "ot"]) == 2
    assert err_line(capsys).startswith("wflow jko: error: attention.diffusion: ")


def test_zero_diffusion_job_is_todays_job_bit_for_bit(tmp_path, capsys):
    import numpy as np

    a, b = tmp_path / "a", tmp_path / "b"
    a.mkdir(), b.mkdir()
    pa, pb = scenario(a, None), scenario(b, "diffusion = 0.0")
    assert main(["jko", str(pa), "--out", str(a / "o")]) == 0
    assert main(["jko", str(pb), "--out", str(b / "o")]) == 0
    assert "note:" not in capsys.readouterr().err  # judged runs: no note before them
    ra, rb = np.load(a / "o" / "density.npz"), np.load(b / "o" / "density.npz")
    assert np.array_equal(ra["rho"], rb["rho"])
    assert main(["jko", str(pb), "--out", str(b / "n"), "--diffusion", "1e-9"]) == 1  # completed
    assert not np.array_equal(ra["rho"], np.load(b / "n" / "density.npz")["rho"])


def test_jko_compare_pde_solves_the_same_noisy_flow(tmp_path):
    """``[jko] compare_pde`` with token diffusion: the reference PDE carries the run's ``D``
    (it used to solve the noiseless flow). The recorded ``W₂`` at ``T`` is the distance to
    the PDE at ``D`` (recomputed here to round-off), and it is smaller than the distance to
    the noiseless PDE (the control: 0.032 against 0.050 when measured)."""
    import csv

    import numpy as np

    from wflow.apps.scenario import load_scenario
    from wflow.geometry.density import initial_density
    from wflow.geometry.mesh import load_mesh
    from wflow.geometry.transport import w2_sphere
    from wflow.pde import PDEOptions, solve_pde

    p = tmp_path / "sc.toml"
    p.write_text(SCENARIO.format(diffusion="diffusion = 0.05", integrator="em").replace(
        "tau = 0.025", "tau = 0.025\ncompare_pde = true"))
    assert main(["jko", str(p), "--out", str(tmp_path / "o")]) == 1  # completed
    rows = list(csv.DictReader((tmp_path / "o" / "diagnostics.csv").open()))
    w2_T = float(rows[-1]["w2_vs_pde"])
    d = np.load(tmp_path / "o" / "density.npz")
    sc, mesh = load_scenario(p), load_mesh("sphere_720.msh")
    rho0 = initial_density(mesh, {"type": "vmf", "means": [[0.0, 0.0, 1.0]], "kappas": [3.0]})
    m_jko = d["rho"][-1] * d["areas"]

    def w2_to_pde(D: float) -> float:
        ref = solve_pde(rho0, sc.build_schedule(), sc.attention_obj(), mesh=mesh,
                        options=PDEOptions(T=0.1, dt=0.01, order=2, flow="surrogate",
                                           n_saves=5, balance=False, clusters=False,
                                           progress=False, diffusion=D))
        return w2_sphere(d["centroids"], d["centroids"], m_jko, ref.masses[-1],
                         max_points=6000)

    # the same exact transport problem: equal to round-off (1e-9 of W₂ ≈ 0.03)
    assert abs(w2_T - w2_to_pde(0.05)) <= 1e-9
    assert w2_T < 0.8 * w2_to_pde(0.0)
