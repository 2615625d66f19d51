"""Token diffusion in the particle and PDE cost estimates: cost counted, absurd steps refused.

* ``D = 0`` gives today's estimates bit for bit (the noiseless formulas, recomputed here).
* Particles: the noise draws are counted (Gaussian for ``em``, heat-kernel for ``strang``);
  a projected Euler–Maruyama step with ``D Δt (d − 1) > 0.5`` is refused, naming
  ``particles.dt`` and ``attention.diffusion`` with a step that meets the bound; the same
  step with ``strang`` (exact increments) and a step just inside the bound are accepted
  (negative controls).
* PDE: the two Crank–Nicolson sub-steps are counted, their CG iterations growing with
  ``q = Δt/Δt_+``; a step more than 100 positivity steps long is refused, naming
  ``pde.dt``; ``q = 99`` is accepted. ``C_+`` is checked on real meshes: the positivity
  step of ``sphere_720.msh`` and ``icosphere:1280`` is at most ``C_+/(M D)`` (negative
  control: a ``C_+`` 20 % smaller is not a bound on them).
* The command line refuses both before computing (exit 2, one line).
* The Itô balance's terms (``d`` more kernel sums per step and the control variate's
  noise) are counted where the run records them (the Python loop): ``estimate_run``
  tells the cases apart, and its estimate is within 2× of the measured rows of
  ``bench/bench_ito_estimate.py`` (negative control: the estimate without those terms
  is more than 2× low on the ``em`` rows).
"""

from __future__ import annotations

import json
import math
from pathlib import Path

import pytest

import wflow.apps.jobs.particles as prun
import wflow.geometry.mesh as mesh_mod
import wflow.particles.estimate as pe
import wflow.pde.estimate as de
from wflow.cli import main
from wflow.infra.estimate import EstimateError, step_count
from wflow.particles import ParticleOptions

from .test_noisy_wiring_cli import err_line, scenario


# ------------------------------------------------------------------ particles
def _old_particles(*, n, d, H, T, dt, paths, record_every, stages):
    """The noiseless particle estimate's seconds, as the formula stood before the noise."""
    S = step_count(T, dt)
    R = S / max(1, record_every) + 1
    per_eval = float(n) * n * H * pe.PAIR_SECONDS * max(int(d), 3) / 3.0
    return pe.STARTUP_SECONDS + paths * (S * (pe.STEP_SECONDS + stages * per_eval)
                                         + R * pe.RECORD_SECONDS)


@pytest.mark.parametrize("integ,stages", [("rk4", 4), ("euler", 1), ("em", 1), ("strang", 5),
                                          ("strang-heun", 4)])
def test_particles_zero_diffusion_is_todays_estimate_bit_for_bit(integ, stages):
    kw = {"n": 3000, "d": 5, "H": 2, "T": 3.0, "dt": 0.01, "paths": 3, "record_every": 4}
    a = pe.estimate_particles(**kw, integrator=integ)
    b = pe.estimate_particles(**kw, integrator=integ, diffusion=0.0)
    assert a == b
    assert a.seconds == _old_particles(**kw, stages=stages)  # exact: the same operations


def test_particles_noise_draws_are_counted():
    kw = {"n": 10_000, "d": 3, "H": 1, "T": 1.0, "dt": 0.01, "paths": 2}
    for integ, per in (("em", pe.NORMAL_DRAW_SECONDS), ("strang", pe.HEAT_DRAW_SECONDS),
                       ("strang-heun", pe.HEAT_DRAW_SECONDS)):
        quiet = pe.estimate_particles(**kw, integrator=integ)
        noisy = pe.estimate_particles(**kw, integrator=integ, diffusion=0.1)
        draws = {"em": 1, "strang": 2, "strang-heun": 2}[integ]
        extra = kw["paths"] * step_count(1.0, 0.01) * draws * kw["n"] * (per[0] + 3 * per[1])
        # the same sum in another order: a few ulps of the total
        assert math.isclose(noisy.seconds - quiet.seconds, extra, rel_tol=1e-9)
        assert noisy.memory == quiet.memory and noisy.steps == quiet.steps
    # the heat-kernel draws cost more than the Gaussian ones (measured 4.5x at d = 3)
    assert pe.noise_seconds("strang", n=1, d=3) > 4 * pe.noise_seconds("em", n=1, d=3)
    assert pe.noise_seconds("rk4", n=10, d=3) == 0.0


def test_particles_ito_terms_are_counted_where_recorded():
    """``ito = "yes"`` adds ``d`` evaluations and one more noise draw per step, exactly;
    ``"if-python"`` only where the fast summation is chosen; ``"no"`` nothing."""
    kw = {"d": 3, "H": 1, "T": 1.0, "dt": 0.01, "paths": 2, "integrator": "strang-heun",
          "diffusion": 0.1}
    S = step_count(1.0, 0.01)
    for n, fast in ((2000, False), (200_000, True)):
        base = pe.estimate_particles(n=n, fastsum=True, **kw)
        yes = pe.estimate_particles(n=n, fastsum=True, ito="yes", **kw)
        per_eval = min(float(n) * n * pe.PAIR_SECONDS, n * pe.FASTSUM_SECONDS)
        extra = kw["paths"] * S * (3 * per_eval + pe.noise_seconds("strang-heun", n=n, d=3))
        assert yes.seconds == pytest.approx(base.seconds + extra, rel=1e-12)
        # and the Laplacian's second moments in memory, (H, n, d, d) doubles a path
        assert yes.parts["Itô second moments"] == 8.0 * n * 9 * kw["paths"]
        assert yes.memory == base.memory + yes.parts["Itô second moments"]
        maybe = pe.estimate_particles(n=n, fastsum=True, ito="if-python", **kw)
        assert maybe.seconds == (yes.seconds if fast else base.seconds)
        assert pe.estimate_particles(n=n, fastsum=True, ito="no", **kw) == base
    assert pe.estimate_particles(n=2000, ito="yes", **{**kw, "diffusion": 0.0}) == \
        pe.estimate_particles(n=2000, **{**kw, "diffusion": 0.0})
    with pytest.raises(ValueError, match="ito"):
        pe.estimate_particles(n=2000, ito="maybe", **kw)


@pytest.mark.parametrize("opts,kind,stochastic,mask,want", [
    ({}, "softmax", False, None, "yes"),                       # auto takes the Python loop
    ({"ito_balance": False}, "softmax", False, None, "no"),    # compiled, not recorded
    ({"engine": "compiled"}, "softmax", False, None, "no"),
    ({"engine": "python", "ito_balance": None}, "softmax", True, None, "yes"),
    ({"ito_balance": True}, "usa", True, None, "yes"),
    ({}, "softmax", True, None, "if-python"),                  # noisy weights: unjudged
    ({}, "softmax", False, "causal", "yes"),                   # masks run the Python loop
    ({}, "relu", False, None, "no"),                           # no closed-form Laplacian
    ({"diffusion": 0.0}, "softmax", False, None, "no"),
])
def test_particles_estimate_knows_which_runs_record_the_ito_terms(opts, kind, stochastic,
                                                                  mask, want):
    o = ParticleOptions(**{"integrator": "em", "diffusion": 0.1, "T": 1.0, "dt": 0.01, **opts})
    assert pe._ito_cost(o, kind, mask, stochastic) == want


def test_particles_ito_estimate_within_2x_of_measured_rows():
    path = Path(__file__).resolve().parents[1] / "bench" / "results" / "bench_ito_estimate.json"
    rows = [r for r in json.loads(path.read_text())["rows"] if r["ito_balance"] is None]
    assert len(rows) == 6 and all(r["engine"] == "python" for r in rows)
    for r in rows:
        assert 0.5 <= r["ratio"] <= 2.0, r
        opts = ParticleOptions(T=0.2, dt=0.01, integrator=r["integrator"], diffusion=0.1,
                               clusters=False, head_rates=False)
        est = pe.estimate_run(opts, n=r["n"], d=3, H=1, kind="softmax", stochastic=False)
        assert est.seconds - pe.STARTUP_SECONDS == pytest.approx(r["estimate_s"], rel=1e-9)
    # the control: without the Itô terms (the estimate of a compiled run) the em rows,
    # one evaluation a step and the Itô terms most of the cost, are estimated > 2x low
    for r in (r for r in rows if r["integrator"] == "em"):
        opts = ParticleOptions(T=0.2, dt=0.01, integrator="em", diffusion=0.1,
                               clusters=False, head_rates=False, engine="compiled")
        bare = pe.estimate_run(opts, n=r["n"], d=3, H=1, kind="softmax", stochastic=False)
        assert (bare.seconds - pe.STARTUP_SECONDS) / r["cpu_s"] < 0.5, r


def test_particles_em_step_beyond_the_courant_bound_is_refused():
    kw = {"n": 100, "d": 3, "H": 1, "T": 1.0}
    # ν = D dt (d − 1) = 0.1 · 3 · 2 = 0.6 > 0.5
    with pytest.raises(EstimateError) as exc:
        pe.estimate_particles(**kw, dt=0.1, diffusion=3.0, integrator="em")
    msg = str(exc.value)
    assert msg.startswith("particles.dt: ") and "attention.diffusion D = 3" in msg
    assert "= 0.6 > 0.5" in msg and "dt <= 0.0833" in msg and '"strang"' in msg
    # negative controls: just inside the bound; the same step with exact increments
    assert pe.check_diffusive_step(diffusion=3.0, dt=0.08, d=3, integrator="em") == \
        pytest.approx(0.48, rel=1e-15)
    pe.estimate_particles(**kw, dt=0.08, diffusion=3.0, integrator="em")
    pe.estimate_particles(**kw, dt=0.1, diffusion=3.0, integrator="strang")
    # the bound scales with d − 1: the step refused in d = 3 passes on the circle
    pe.estimate_particles(**{**kw, "d": 2}, dt=0.1, diffusion=3.0, integrator="em")


def test_particles_cli_refuses_the_step_before_computing(tmp_path, capsys, monkeypatch):
    monkeypatch.setattr(prun, "simulate", lambda *a, **k: pytest.fail("computed"))
    p = scenario(tmp_path, integrator="em")  # dt = 0.05, d = 3
    assert main(["particles", str(p), "--out", str(tmp_path / "o"), "--diffusion", "20"]) == 2
    line = err_line(capsys)
    assert "particles.dt: " in line and "attention.diffusion D = 20" in line, line
    assert not (tmp_path / "o").exists()


# ------------------------------------------------------------------ PDE
def _old_pde(*, cells, H, T, dt, cfl, vmax, max_steps, stages):
    M = float(cells)
    S = de.pde_steps(M, T, dt, cfl, vmax, max_steps)
    return S * stages * (de.PDE_STAGE_SECONDS + M * M * H * de.PDE_PAIR_SECONDS) \
        + de.STARTUP_SECONDS


@pytest.mark.parametrize("order,stages", [(1, 1), (2, 2)])
def test_pde_zero_diffusion_is_todays_estimate_bit_for_bit(order, stages):
    kw = {"cells": 5120, "H": 2, "T": 2.0, "dt": 0.01}
    a = de.estimate_pde(**kw, order=order)
    b = de.estimate_pde(**kw, order=order, diffusion=0.0)
    assert a == b and "diffusion operator" not in a.parts
    assert a.seconds == _old_pde(**kw, cfl=0.9, vmax=1.5, max_steps=1_000_000, stages=stages)


def test_pde_diffusion_cost_grows_with_the_step_ratio():
    kw = {"cells": 40500, "H": 1, "T": 1.0, "dt": 1e-3}
    quiet = de.estimate_pde(**kw)
    small = de.estimate_pde(**kw, diffusion=1e-3)   # q = 0.0057
    large = de.estimate_pde(**kw, diffusion=1.0)    # q = 5.7
    assert quiet.seconds < small.seconds < large.seconds
    assert small.parts["diffusion operator"] == 600.0 * 40500
    S = quiet.steps
    assert math.isclose(large.seconds - quiet.seconds,
                        S * de.diffusion_seconds(40500, 1e-3, 1.0), rel_tol=1e-12)
    # the CG model against the measured iterations (sphere_40500.msh, rtol 1e-13):
    # (q, iterations) = (0.1, 8), (1, 20), (10, 55), (100, 146), (1000, 387); within 30 %
    for q, its in ((0.1, 8), (1, 20), (10, 55), (100, 146), (1000, 387)):
        assert abs(de.cg_iterations(q, 40500) / its - 1) < 0.3, (q, its)
    # and the sub-step's CPU time (9.5 ms at q = 1, 92 ms at q = 1000): within 2x
    for q, sec in ((1, 9.48e-3), (1000, 9.19e-2)):
        model = 40500 * (de.CN_CELL_SECONDS + de.CG_CELL_SECONDS * de.cg_iterations(q, 40500))
        assert 0.5 < model / sec < 2, (q, model, sec)


def test_pde_step_far_beyond_the_positivity_step_is_refused():
    dtp = de.positive_step(40500, 10.0)
    assert dtp == pytest.approx(7.1 / 405000, rel=1e-15)
    with pytest.raises(EstimateError) as exc:
        de.estimate_pde(cells=40500, T=1.0, dt=101 * dtp, diffusion=10.0)
    msg = str(exc.value)
    assert msg.startswith("pde.dt: ") and "attention.diffusion D = 10" in msg
    assert "40500 cells" in msg and f"dt <= {100 * dtp:.3g}" in msg
    # negative controls: 99 positivity steps pass; the advective CFL step (0.0106 at
    # 40 500 cells) caps a long dt first: q = 60 at D = 1, accepted
    de.estimate_pde(cells=40500, T=1.0, dt=99 * dtp, diffusion=10.0)
    de.estimate_pde(cells=40500, T=1.0, dt=1.0, diffusion=1.0)


def test_positive_step_constant_bounds_real_meshes():
    from wflow.geometry.mesh import load_mesh
    from wflow.pde.diffusion import TokenDiffusion

    for name in ("sphere_720.msh", "icosphere:1280"):
        td = TokenDiffusion(load_mesh(name), 0.5)
        real = 2.0 * td.positive_step()  # Δt_+ = 2 h_+ (Strang: two half steps)
        model = de.positive_step(td.M, 0.5)
        assert real <= model, (name, real, model)
        # negative control: a constant 20 % smaller is no longer a bound on these meshes
        assert real > 0.8 * model, (name, real, model)


def test_pde_cli_refuses_the_step_before_loading_the_mesh(tmp_path, capsys, monkeypatch):
    monkeypatch.setattr(mesh_mod, "load_mesh", lambda *a, **k: pytest.fail("mesh loaded"))
    p = scenario(tmp_path)  # sphere_720.msh, dt = 0.05: q = 0.05 · 720 D / 7.1
    assert main(["pde", str(p), "--out", str(tmp_path / "o"), "--diffusion", "50"]) == 2
    line = err_line(capsys)
    assert "pde.dt: " in line and "attention.diffusion D = 50" in line, line
    assert not (tmp_path / "o").exists()
