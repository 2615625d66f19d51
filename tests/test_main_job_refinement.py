"""The main job's τ/h refinement table (issue 20, item 4): levels, orders, verdicts, faults.

Four FV levels (320, 500, 720, 980 cells; h ∝ τ), W₂ and L¹ of the JKO against the
surrogate PDE on the same mesh at the JKO times, the JKO's EDI residual, each with a fitted
order and a verdict (thresholds: the theoretical order minus a measured margin,
wflow/apps/main/verdicts.py, ``ORDER_MARGIN``). Negative
controls are injected through the public API the main job calls
(``wflow.apps.jobs.jko.run_jko_scenario``; the FV step ``wflow.jko.steppers.fv_step``), perturbing
only the JKO: β × 1.03, a JKO that steps 1.1τ while it says τ, recorded times
``t_k = 1.1kτ``, and the softmax mobility replaced by ``b̂ = 1``. Each makes the run
not ``success`` with the named verdict FAIL; the correct scheme passes on the same
scenarios (and at another seed, with another initial density).

Scenario ``USA``: one USA head ``A = V = I``, ``β = 5``, two vMF bumps (κ = 1.5),
``T = 0.02``: the JKO error is dominated by ``τ`` and ``h`` alike, and small enough
beside the effect of a 3 % change of β (measured W₂ orders: correct 1.12, β × 1.03 0.06,
β × 0.97 0.67). Scenario ``SOFTMAX``: one softmax head ``A = I``, ``β = 2``, ``T = 1``,
where the mobility ``b̂ = 1/Z`` differs from 1 by a factor ~2.
Each run takes 10–20 s on a shared 2-core machine.
"""

from __future__ import annotations

import warnings
from dataclasses import replace

import numpy as np
import pytest

import wflow.apps.jobs.jko as jko_run
import wflow.apps.main as mj
import wflow.jko.steppers as jko_steppers
from wflow.apps.main import refinement as mj_refinement
from wflow.apps.main import verdicts as mj_verdicts
from wflow.attention.heads import Attention

SCENARIO = """
seed = SEED
[attention]
kind = "KIND"
beta = BETA
d = 3
[heads]
type = "matrices"
A = [[[1.0, 0.0, 0.0], [0.0, 1.0, 0.0], [0.0, 0.0, 1.0]]]
value_sign = 1
w = "mean"
[density]
type = "vmf"
means = [[1.0, 0.0, 0.3], [-1.0, 0.2, 0.0]]
kappas = [1.5, 1.5]
weights = WEIGHTS
[pde]
mesh = "icosphere:980"
T = TEND
dt = DT
order = 2
flow = "surrogate"
n_saves = 15
[run]
n_particles = 50
particle_steps_per_save = 1
render = false
jko_refinement = 3
[jko]
tau = TAU
verify = false
"""

USA = {"KIND": "usa", "BETA": "5.0", "TEND": "0.02", "DT": "0.0004",
       "TAU": repr(0.02 / 14), "SEED": "0", "WEIGHTS": "[0.55, 0.45]"}
SOFTMAX = {**USA, "KIND": "softmax", "BETA": "2.0", "TEND": "1.0", "DT": "0.02",
           "TAU": repr(1.0 / 14), "SEED": "1"}

W2 = "JKO refinement: order of max_k W₂(JKO, PDE) in τ"
L1 = "JKO refinement: order of max_k L¹(JKO, PDE) in τ"
EDI = "JKO refinement: order of JKO Σ|EDI_k| (relative) in τ"
TIMES = "JKO refinement: recorded times t_k = kτ"


def _run(tmp_path, name: str, values: dict) -> dict:
    text = SCENARIO
    for k, v in values.items():
        text = text.replace(k, v)
    p = tmp_path / f"{name}.toml"
    p.write_text(text)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        return mj.run_main_job(p, tmp_path / name).summary


def _verdicts(s: dict) -> dict[str, str]:
    return {v["quantity"]: v["verdict"] for v in s["verdicts"]}


def _wrap(monkeypatch, fault):
    """Replace the public ``run_jko_scenario`` the main job calls by ``fault(real, ...)``."""
    real = jko_run.run_jko_scenario
    monkeypatch.setattr(jko_run, "run_jko_scenario",
                        lambda *a, **k: fault(real, *a, **k))


# ----------------------------------------------------------------------------- levels
def test_levels_are_icospheres_with_h_proportional_to_tau():
    """Four levels up to 40 500 cells (ratio 1.5), and on small meshes down to 320 cells."""
    assert mj_refinement._levels(40500, 12, 3) == [(18000, 8), (8000, 5), (3380, 3)]
    assert mj_refinement._levels(980, 14, 3) == [(720, 12), (500, 10), (320, 8)]
    assert mj_refinement._levels(2420, 8, 3) == [(1280, 6), (720, 4), (320, 3)]
    # a repeated step count is dropped, never a duplicate row
    assert mj_refinement._levels(980, 2, 3) == [(500, 1)]


# ----------------------------------------------------------------------------- correct
@pytest.mark.parametrize("seed,weights", [("0", "[0.55, 0.45]"), ("7", "[0.45, 0.55]")])
def test_correct_scheme_passes_every_refinement_verdict(tmp_path, seed, weights):
    s = _run(tmp_path, f"ok{seed}", {**USA, "SEED": seed, "WEIGHTS": weights})
    assert s["status"] == "success", s["message"]
    v = _verdicts(s)
    for q in (W2, L1, EDI, TIMES):
        assert v[q] == "PASS", (q, s["jko_refinement"])
    tab = s["jko_refinement"]
    assert [r["cells"] for r in tab["rows"]] == [320, 500, 720, 980]
    assert all(r["scheme"] == "fv" and r["locked_steps"] == 0 for r in tab["rows"])
    assert tab["shrinks_w2"] and tab["shrinks_l1"] and tab["shrinks_edi"]
    # above the thresholds theory − measured margin (verdicts.ORDER_MARGIN)
    assert tab["order_w2"] > mj_verdicts.ORDER_MIN_W2, tab["order_w2"]
    assert tab["order_l1"] > mj_verdicts.ORDER_MIN_L1, tab["order_l1"]
    assert tab["order_edi"] > 1.0, tab["order_edi"]  # first order (measured 2.1)
    # the OT cross-check: the coarsest level once more, reported, not a row of the fit
    ot = tab["ot_crosscheck"]
    assert ot["scheme"] == "ot" and ot["cells"] == 320 and ot["tau"] == tab["rows"][0]["tau"]
    assert v["OT cross-check: max_k W₂(JKO, PDE) with scheme = \"ot\" (320 cells)"] \
        == "reported"
    rep = (tmp_path / f"ok{seed}" / "report.md").read_text()
    assert "every check below passed" in rep
    assert "max W₂(JKO, PDE) | max L¹(JKO, PDE) |" in rep
    assert f"W₂ {tab['order_w2']:.2f} (pass >= {mj_verdicts.ORDER_MIN_W2:g})" in rep
    assert "OT cross-check (the coarsest level once more" in rep


# ----------------------------------------------------------------------------- faults
def _assert_caught(s: dict, *names: str) -> None:
    assert s["status"] != "success", s["jko_refinement"]
    v = _verdicts(s)
    for q in names:
        assert v[q] == "FAIL", (q, s["jko_refinement"]["order_w2"],
                                s["jko_refinement"]["order_l1"])
        assert q in s["message"]


def test_beta_off_by_three_per_cent_is_caught(tmp_path, monkeypatch):
    _wrap(monkeypatch, lambda real, mesh, rho0, schedule, attn, sc, **k: real(
        mesh, rho0, schedule, Attention(attn.kind, attn.beta * 1.03), sc, **k))
    s = _run(tmp_path, "beta", USA)
    _assert_caught(s, W2, L1)
    assert s["jko_refinement"]["order_w2"] < 0.5  # measured 0.06 (correct 1.12)


def _slow_clock(real, mesh, rho0, schedule, attn, sc, **k):
    """A JKO that steps 1.1τ while it reports τ (its times and options relabelled)."""
    res0 = real(mesh, rho0, schedule, attn, sc, **k)
    T, tau = res0.options.T, res0.options.tau
    # the step 1.1τ to 1.1T (run_jko_scenario's overrides: the scenario's [jko] is valid)
    bad = real(mesh, rho0, schedule, attn, sc, **{**k, "T": 1.1 * T, "tau": 1.1 * tau})
    return replace(bad, t=np.asarray(bad.t) / 1.1, options=replace(bad.options, T=T, tau=tau))


def test_tau_mislabelled_in_the_step_is_caught(tmp_path, monkeypatch):
    _wrap(monkeypatch, _slow_clock)
    s = _run(tmp_path, "tau", USA)
    _assert_caught(s, W2, L1)
    assert _verdicts(s)[TIMES] == "PASS"  # the labels are consistent: only the PDE sees it


def test_mislabelled_recorded_times_are_caught(tmp_path, monkeypatch):
    _wrap(monkeypatch, lambda real, *a, **k: (lambda r: replace(r, t=1.1 * np.asarray(r.t)))(
        real(*a, **k)))
    s = _run(tmp_path, "times", USA)
    _assert_caught(s, TIMES)
    np.testing.assert_allclose(s["jko_refinement"]["time_error_max"], 0.1, rtol=1e-9)


def test_wrong_mobility_is_caught(tmp_path, monkeypatch):
    """The softmax mobility b̂ = 1/Z replaced by 1 in every FV step (the JKO only)."""
    real_step = jko_steppers.fv_step

    def step(*a, bhat, **k):
        return real_step(*a, bhat=np.ones_like(bhat), **k)

    def fault(real, *a, **k):
        with monkeypatch.context() as m:
            m.setattr(jko_steppers, "fv_step", step)
            return real(*a, **k)

    _wrap(monkeypatch, fault)
    s = _run(tmp_path, "mobility", SOFTMAX)
    _assert_caught(s, W2, L1, EDI)


def test_a_fault_on_one_level_is_caught_by_the_rise(tmp_path, monkeypatch):
    """β × 1.1 in the JKO of the 720-cell level only (softmax scenario): the fitted orders
    still pass, the W₂ of that level rises above the 500-cell level's (ratio > RISE_MAX):
    the W₂ verdict is FAIL through the level-to-level rule alone."""
    def one_level(real, mesh, rho0, schedule, attn, sc, **k):
        if int(mesh.num_global) == 720:
            attn = Attention(attn.kind, attn.beta * 1.1)
        return real(mesh, rho0, schedule, attn, sc, **k)

    _wrap(monkeypatch, one_level)
    s = _run(tmp_path, "level", SOFTMAX)
    _assert_caught(s, W2)
    tab = s["jko_refinement"]
    for key in ("w2", "l1", "edi"):  # the order alone does not catch it
        assert tab[f"order_{key}"] >= mj_verdicts.THEORY_ORDER[key] - \
            mj_verdicts.ORDER_MARGIN[key], (key, tab[f"order_{key}"])
        assert tab[f"settles_{key}"] is True
    assert [r["cells"] for r in tab["rows"]] == [320, 500, 720, 980]
    assert tab["ratios_w2"][1] == tab["rise_w2"] > mj_verdicts.RISE_MAX["w2"], tab["ratios_w2"]


def test_correct_softmax_scenario_passes(tmp_path):
    """The control of the mobility fault: the same softmax scenario, unperturbed."""
    s = _run(tmp_path, "softmax", SOFTMAX)
    assert s["status"] == "success", s["message"]
    v = _verdicts(s)
    assert all(v[q] == "PASS" for q in (W2, L1, EDI, TIMES)), s["jko_refinement"]


def test_a_table_that_does_not_shrink_fails():
    """A finest row 1.25 × the next coarser one (a rise above RISE_MAX): the verdicts are
    FAIL (never "every check passed"), whatever the fitted slope."""
    assert max(mj_verdicts.RISE_MAX.values()) < 1.25
    rows = [{"cells": 20 * n * n, "h": 1.0 / n, "tau": 1.0 / n, "w2_max": e, "l1_max": e,
             "edi_abs_relative": e, "time_error": 0.0, "status": "success"}
            for n, e in ((4, 0.4), (5, 0.3), (6, 0.2), (7, 0.25))]
    tab = mj_refinement._fit_table(rows, None)
    assert tab["order_w2"] > mj_verdicts.ORDER_MIN_W2 and tab["shrinks_w2"] is False
    got: dict[str, str] = {}
    mj_verdicts._refinement_verdicts(lambda q, v, t, verdict, m: got.__setitem__(q, verdict), tab,
                            "PDE")
    assert got[W2] == got[L1] == got[EDI] == "FAIL" and got[TIMES] == "PASS"
    # two levels (a scenario with few steps): a miss is a WARN, never a PASS
    got.clear()
    mj_verdicts._refinement_verdicts(lambda q, v, t, verdict, m: got.__setitem__(q, verdict),
                            mj_refinement._fit_table(rows[2:], None), "PDE")
    assert got[W2] == "WARN"
