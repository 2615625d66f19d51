"""Statuses (wflow.status): finite but meaningless numbers are ``"inaccurate"``, JKO locking
is ``"locked"``, and the file jobs still write such runs with the reason. Each check has a
negative control (an injected fault through the public API) and a positive one."""

from __future__ import annotations

import json
import warnings

import numpy as np
import pytest

from wflow.attention.heads import Attention, Heads
from wflow.geometry.sphere import sample_uniform
from wflow.jko import JKOOptions, JKOWarning, auto_step, solve_jko
from wflow.jko.options import auto_steps_bound, auto_tau
from wflow.particles import simulate
from wflow.status import (
    STATUSES,
    balance_order,
    chain_check,
    chain_tolerance,
    edi_kind,
    worst_status,
)

A2 = np.array([[[1.5, 0.3, 0.0], [0.3, 0.5, 0.0], [0.0, 0.0, -0.5]],
               [[0.2, 0.0, 0.4], [0.0, 1.0, 0.0], [0.4, 0.0, 1.2]]])
VMF = {"type": "vmf", "means": [[1.0, 0.0, 0.2], [-0.3, 1.0, 0.0], [0.0, -0.4, -1.0]],
       "kappas": [6.0, 4.0, 5.0], "weights": [0.4, 0.35, 0.25]}


# ----------------------------------------------------------------------------- the rule
def test_tolerance_rule_and_status_order():
    assert balance_order(1) == 1 and balance_order(4) == 2 and balance_order(3, 1) == 1
    assert chain_tolerance(1) == 0.1 and chain_tolerance(2) == 0.01
    assert worst_status("success", "inaccurate", "not_converged") == "not_converged"
    assert worst_status("locked", "failed") == "failed" and worst_status() == "success"
    assert STATUSES[0] == "success" and STATUSES[-1] == "failed"
    # per path: the worst path decides; a budget of zero falls back to √eps·|E|
    c = chain_check(np.array([1e-4, 0.5]), np.array([1.0, 1.0]), 1.0, order=1, scheme="x")
    assert not c.passed and c.value == 0.5 and "2 paths" in c.rule
    still = chain_check(1e-12, 0.0, 1.0, order=2, scheme="x")
    assert still.passed and still.value < 1e-3
    moved = chain_check(1e-3, 0.0, 1.0, order=2, scheme="x")
    assert not moved.passed  # nothing to balance it with: not a round-off residual


def test_edi_kind_names_what_the_residual_means():
    two = Heads.bilinear(A2, w=0.5)
    assert edi_kind(two, "softmax", "transformer") == "defect"
    assert edi_kind(two, "softmax", "surrogate") == "identity"
    assert edi_kind(two, "usa", "transformer") == "identity"
    assert edi_kind(Heads.bilinear(np.stack([A2[0], A2[0]]), w=0.5), "softmax",
                    "transformer") == "identity"  # one normaliser
    bad = Heads.bilinear(A2, V=np.stack([np.eye(3)] * 2), w=0.5)
    assert edi_kind(bad, "softmax", "surrogate") == "undefined"


# ----------------------------------------------------------------------------- particles
def test_particles_large_beta_is_inaccurate_with_the_reason():
    """Issue example: USA, β = 200 — finite numbers (G² ~ 1e166) but the chain-rule
    residual is −100 % of ∫power: "inaccurate", naming the residual and the tolerance
    (``rtol = None``: the chain rule decides). Under the default ``rtol = 1e-3`` the step
    doubling decides, thousands of tolerances off, naming a step that would meet it.
    Positive control: the same run at β = 1 succeeds with margin."""
    x0 = sample_uniform(200, 3, np.random.default_rng(0))
    heads = Heads.scalar([1.0], 3)
    judged = simulate(x0, heads, Attention("usa", 200.0), T=2.0, dt=0.1, integrator="euler")
    assert judged.status == "inaccurate" and not judged.checks["chain"]["passed"]
    assert "misses the requested accuracy (rtol = 0.001" in judged.message
    assert judged.checks["accuracy"]["error"] > 100 and "remedy: dt <=" in judged.message
    bad = simulate(x0, heads, Attention("usa", 200.0), T=2.0, dt=0.1, integrator="euler",
                   rtol=None)
    assert np.all(np.isfinite(bad.history["G2"]))
    assert bad.status == "inaccurate"
    assert "chain-rule residual" in bad.message and "tolerance 0.1" in bad.message
    assert bad.checks["chain"]["value"] > 0.9 and not bad.checks["chain"]["passed"]
    good = simulate(x0, heads, Attention("usa", 1.0), T=2.0, dt=0.01, integrator="euler",
                   rtol=None)
    assert good.status == "success", good.message
    assert good.checks["chain"]["value"] < 0.1 * good.checks["chain"]["tolerance"]  # 3.5e-3


@pytest.mark.parametrize("integrator,bad_dt,good_dt", [("euler", 1.0, 0.05), ("rk4", 2.0, 0.2)])
def test_particles_too_large_step_is_inaccurate(integrator, bad_dt, good_dt):
    """Negative control: a step far beyond the flow's time scale (the clustering demo,
    T = 20) leaves a chain-rule residual of 95 % (Euler, dt = 1) / 75 % (RK4, dt = 2) →
    "inaccurate"; a resolved step is "success" (measured 1.3e-2 for Euler at dt = 0.05,
    7e-4 for RK4 at dt = 0.2)."""
    from pathlib import Path

    from wflow.apps.scenario import load_scenario

    sc = load_scenario(Path(__file__).parents[1] / "demos" / "particles_clustering_s2.toml")
    x0, heads, attn = sc.build_tokens(), sc.build_schedule(), sc.attention_obj()
    bad = simulate(x0, heads, attn, T=20.0, dt=bad_dt, integrator=integrator)
    good = simulate(x0, heads, attn, T=20.0, dt=good_dt, integrator=integrator)
    assert bad.status == "inaccurate", bad.checks
    assert good.status == "success", good.message
    assert good.checks["chain"]["tolerance"] == (0.1 if integrator == "euler" else 0.01)


def test_particle_file_job_writes_an_inaccurate_run(tmp_path):
    from wflow.cli import main

    sc = tmp_path / "s.toml"
    sc.write_text('seed = 0\n[attention]\nkind = "usa"\nbeta = 200.0\nd = 3\n'
                  '[tokens]\nn = 100\nsampler = "uniform"\n[heads]\ntype = "scalar"\n'
                  'lambdas = [1.0]\n[particles]\nT = 1.0\ndt = 0.1\nintegrator = "euler"\n')
    main(["particles", str(sc), "--out", str(tmp_path / "out")])
    s = json.loads((tmp_path / "out" / "summary.json").read_text())
    # the default rtol = 1e-3 decides (step doubling); the chain rule is recorded beside it
    assert s["status"] == "inaccurate" and "misses the requested accuracy" in s["message"]
    assert s["checks"]["chain"]["passed"] is False and s["checks"]["accuracy"]["passed"] is False
    assert (tmp_path / "out" / "diagnostics.csv").is_file()


# ----------------------------------------------------------------------------- PDE
PDE_SCENARIO = """
seed = 0
[attention]
kind = "softmax"
beta = BETA
d = 3
[heads]
type = "scalar"
lambdas = [1.0]
[density]
type = "vmf"
means = [[1.0, 0.0, 0.2], [-0.3, 1.0, 0.0]]
kappas = [5.0, 4.0]
[pde]
mesh = "sphere_720.msh"
T = 0.5
order = 2
n_saves = 2
"""


def test_pde_large_beta_is_inaccurate_and_written(tmp_path):
    """Issue example: softmax β = 200 on 720 cells — mass conserved, density positive,
    numbers finite (E ~ 1e82), but the kernel is narrower than a cell: the chain-rule
    residual is ~70 % of the budget → "inaccurate", written with the reason. Positive
    control: β = 1 → "success" (residual 2.2e-3 against 0.01)."""
    from wflow.apps.jobs.pde import run_pde
    from wflow.apps.scenario import load_scenario

    for beta, status in (("200.0", "inaccurate"), ("1.0", "success")):
        p = tmp_path / f"b{beta}.toml"
        p.write_text(PDE_SCENARIO.replace("BETA", beta))
        out = tmp_path / f"out{beta}"
        with warnings.catch_warnings():
            warnings.simplefilter("ignore", RuntimeWarning)
            res = run_pde(load_scenario(p), out)
        assert res.status == status, res.message
        s = json.loads((out / "summary.json").read_text())
        assert s["status"] == status and s["checks"]["chain"]["tolerance"] == 0.01
        assert s["stats"]["mass_error_max"] < 1e-12 and s["stats"]["rho_min"] >= 0
        if status == "inaccurate":
            assert "chain-rule residual" in s["message"] and s["checks"]["chain"]["value"] > 0.3
        else:
            assert s["checks"]["chain"]["value"] < 0.5 * s["checks"]["chain"]["tolerance"]


# ----------------------------------------------------------------------------- JKO
def _jko_problem(freq: int = 6):
    from wflow.geometry.density import initial_density
    from wflow.geometry.mesh import load_mesh

    sm = load_mesh(f"icosphere:{20 * freq * freq}")
    cen, areas = sm.gather_owned(sm.centroids), sm.gather_owned(sm.areas)
    return cen, areas, initial_density(sm, VMF) * areas, Heads.bilinear(A2, w=0.5)


def test_jko_locking_is_a_status_and_auto_tau_resolves_it():
    """Issue example: 720 cells, τ = 0.1 — every step takes 0 inner iterations, W² = 0 and
    E is unchanged: status "locked", one JKOWarning, the locked column and count. The
    automatic τ (τ|v|max ≈ 3h) on the same mesh: no locked step, "success"."""
    cen, areas, m0, heads = _jko_problem()
    attn = Attention("softmax", 1.0)
    with pytest.warns(JKOWarning, match="5 of 5 JKO steps locked"):
        res = solve_jko(m0, heads, attn, points=cen, areas=areas,
                        options=JKOOptions(T=0.5, tau=0.1))
    assert res.status == "locked" and "locked" in res.message
    assert res.stats["locked_steps"] == 5 and np.all(res.history["locked"][1:] == 1)
    assert np.all(res.history["W2sq"][1:] == 0) and np.all(res.history["inner_iters"][1:] == 0)
    assert res.checks["edi"]["value"] == pytest.approx(1.0, abs=1e-9)  # nothing dissipated
    opts, info = auto_step(cen, areas, m0, heads, attn, options=JKOOptions(T=2.0))
    assert info["steps"] == 2 and 2.25 <= info["cells_per_step"] <= 3.75
    with warnings.catch_warnings():
        warnings.simplefilter("error", JKOWarning)
        ok = solve_jko(m0, heads, attn, points=cen, areas=areas, options=opts)
    assert ok.status == "success" and ok.stats["locked_steps"] == 0, ok.message
    assert ok.checks["edi"]["value"] < 0.1


def test_jko_partial_locking_is_counted_and_inaccurate():
    """τ = 0.2 on 720 cells (τ|v|max ≈ 0.65h): half the steps lock, the others move —
    the message counts the locked steps and the EDI residual (≈ 0.9) marks the run
    "inaccurate"."""
    cen, areas, m0, heads = _jko_problem()
    with pytest.warns(JKOWarning, match="of 10 JKO steps locked"):
        res = solve_jko(m0, heads, Attention("softmax", 1.0), points=cen, areas=areas,
                        options=JKOOptions(T=2.0, tau=0.2))
    n = res.stats["locked_steps"]
    assert 0 < n < 10 and res.status == "inaccurate"
    assert f"{n} of 10 JKO steps locked" in res.message and "JKO EDI residual" in res.message


def test_jko_file_job_writes_a_locked_run(tmp_path):
    from wflow.cli import main

    sc = tmp_path / "s.toml"
    sc.write_text('seed = 0\n[attention]\nkind = "softmax"\nbeta = 1.0\n[heads]\n'
                  f'type = "matrices"\nA = {A2.tolist()}\nw = "mean"\n'
                  f'[density]\ntype = "vmf"\nmeans = {VMF["means"]}\nkappas = {VMF["kappas"]}\n'
                  f'weights = {VMF["weights"]}\n'
                  '[jko]\nscheme = "ot"\nmesh = "sphere_720.msh"\nT = 0.3\ntau = 0.1\n')
    with pytest.warns(JKOWarning, match="locked"):
        main(["jko", str(sc), "--out", str(tmp_path / "out")])
    s = json.loads((tmp_path / "out" / "summary.json").read_text())
    assert s["status"] == "locked" and s["steps"]["locked"] == [1.0, 1.0, 1.0]
    rule = s["stats"]["tau_rule"]
    assert rule["rule"] == "given" and rule["cells_per_step"] < 0.5
    assert (tmp_path / "out" / "density.npz").is_file()


def test_auto_tau_rule():
    assert auto_tau(2.0, 0.072, 0.431) == 0.5  # the main job's default: N = round(3.99)
    assert auto_tau(2.0, 0.132, 0.430) == 1.0
    assert auto_tau(1.0, 0.1, 0.0) == 1.0  # nothing moves: one step
    with pytest.raises(ValueError, match="auto_tau"):
        auto_tau(1.0, 0.0, 1.0)


@pytest.mark.parametrize("cells", [320, 2420, 40500])
def test_auto_steps_bound_bounds_the_rule_at_unit_speed(cells):
    """The estimates' step count of ``tau = "auto"`` is the rule's own, at ``|v|_max = 1``:
    never below the steps :func:`auto_tau` takes (integers, exact), and it grows with the
    mesh (a wrong ``h`` or a swapped ratio fails one of the two)."""
    import math

    h = math.sqrt(4 * math.pi / cells)
    for T in (0.5, 2.0, 7.0):
        n_auto = round(T / auto_tau(T, h, 1.0))
        assert n_auto <= auto_steps_bound(T, cells) <= n_auto + 1
    assert auto_steps_bound(2.0, 40500) > auto_steps_bound(2.0, 320)
