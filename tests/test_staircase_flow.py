"""The metastable staircase as a flow with error control (issue 42).

:mod:`wflow.published.staircase_flow` integrates ``dθ/ds = log β · g/‖g‖`` (the continuous
limit of the published 10⁶-step iteration, which stays the reference) with an embedded
Runge–Kutta pair and the published merge rule as an event. Measured here: the merge times
equal the published ones within ``6·lr + rtol + atol`` (the published scheme's own
first-order error is ≤ 5.05 lr), in ≤ 10⁴ (in fact 45–90) accepted steps per β; the
flow's error is ≤ ``rtol`` at three requested tolerances; negative controls fail.
"""

from __future__ import annotations

import json
import math

import numpy as np
import pytest

from wflow.apps.output_keys import contract_problems, flatten, unexplained
from wflow.cli import main
from wflow.published import metastable_staircase as ms
from wflow.published import staircase_flow as sf
from wflow.published.staircase_flow import (
    DISCRETISATION_LR,
    FLOW_ERROR_PER_RTOL,
    StaircaseFlowOptions,
    compare_staircase,
    merge_time_tolerance,
    staircase_flow,
)

QUICK = StaircaseFlowOptions.quick()


def _times(run: sf.FlowRun) -> dict[tuple[int, int], float]:
    return {(j, k): s for s, j, k in run.merges}


def test_quick_merge_times_equal_the_published_ones_within_the_tolerance():
    """β = 500, 4000 (StaircaseOptions.quick): same merges, |Δs| ≤ 6.1e-5, ≤ 10⁴ steps."""
    c = compare_staircase(QUICK)
    assert c.status == "success", c.per_beta
    assert c.tolerance == pytest.approx(DISCRETISATION_LR * 1e-5 + 1e-6 + 1e-9)
    for b, p in c.per_beta.items():
        assert p["same_pairs"], b
        assert len(p["flow_merges"]) == 5  # 5 tokens: 4 merges, one pair of them at once
        assert p["max_dt"] <= c.tolerance, (b, p["max_dt"])
        assert p["steps"] <= 10_000, (b, p["steps"])  # the budget
        assert p["steps"] <= 200, (b, p["steps"])  # measured 74 and 45
        assert p["published_steps"] > 9_000  # the published run to its full merge


def test_every_published_beta_within_the_tolerance_and_the_step_budget():
    """The six published β (the published runs stop at their full merge: ~2 s in all)."""
    c = compare_staircase()
    assert c.status == "success", {b: p["max_dt"] for b, p in c.per_beta.items()}
    assert set(c.per_beta) == {"500", "1000", "1500", "2000", "3000", "4000"}
    assert all(p["steps"] <= 10_000 for p in c.per_beta.values())
    assert c.max_dt <= 5.1e-5  # measured 3.1e-5 … 5.07e-5


def test_the_flow_matches_the_published_direction_and_energy():
    """``rhs`` is ``log β · g/‖g‖`` with the published ``g``; the energy records rise to 1."""
    th = ms.published_theta0(2000)
    beta = 1000.0
    D = th[:, None] - th[None, :]
    g = np.sum(-np.sin(D) * np.exp(beta * (np.cos(D) - 1)), axis=1) / th.size ** 2
    gs, M = sf._scaled_grad(th, np.ones(th.size), beta)
    np.testing.assert_allclose(gs / np.linalg.norm(gs), g / np.linalg.norm(g), rtol=1e-13)
    assert M + math.log(np.linalg.norm(gs)) == pytest.approx(math.log(np.linalg.norm(g)),
                                                             rel=1e-13)
    run = staircase_flow(beta, QUICK)
    assert run.stop == "merged" and np.ptp(run.theta) == 0
    assert run.E[0] == pytest.approx(np.exp(beta * (np.cos(D) - 1)).sum() / 25, rel=1e-14)
    assert run.E[-1] == pytest.approx(1.0, abs=1e-14)
    assert np.all(np.diff(run.E) >= -1e-12)  # ascent: the energy never falls
    assert run.nfev > run.steps > 0 and run.legs == 4  # 4 merge events (one merges 2 pairs)


@pytest.mark.parametrize("rtol", [1e-4, 1e-6, 1e-8])
def test_requested_tolerance_bounds_the_merge_time_error(rtol):
    """Against rtol = 1e-12: max |Δs| ≤ rtol (measured ≤ 0.41 rtol over 1e-3 … 1e-10)."""
    for beta in (500, 4000):
        ref = _times(staircase_flow(beta, StaircaseFlowOptions.quick(rtol=1e-12)))
        got = _times(staircase_flow(beta, StaircaseFlowOptions.quick(rtol=rtol)))
        assert got.keys() == ref.keys()
        err = max(abs(got[p] - ref[p]) for p in ref)
        assert err <= FLOW_ERROR_PER_RTOL * rtol, (beta, rtol, err)


def test_published_error_is_first_order_in_lr():
    """The published iteration at lr and lr/2 against the tight flow: ≤ 6 lr, and halves."""
    for beta in (500, 4000):
        ref = _times(staircase_flow(beta, StaircaseFlowOptions.quick(rtol=1e-12)))
        errs = []
        for lr in (1e-5, 5e-6):
            _, info = ms.staircase_energy(ms.published_theta0(2000), beta, lr=lr,
                                          max_iter=int(round(0.2 / lr)))
            pub = {(j, k): lr * i for i, j, k in info["merges"]}
            assert pub.keys() == ref.keys()
            errs.append(max(abs(pub[p] - ref[p]) for p in ref))
            assert errs[-1] <= DISCRETISATION_LR * lr, (beta, lr, errs[-1])
        assert errs[1] < 0.6 * errs[0], (beta, errs)  # measured 0.32 and 0.52


def test_negative_controls_fail():
    """β off by 1 % or a merge threshold 10× off in the reference: status failed."""
    off = compare_staircase(QUICK, reference=ms.StaircaseOptions.quick(betas=(495, 3960)))
    assert off.status == "failed"
    assert all(p["max_dt"] > off.tolerance for p in off.per_beta.values())
    grad = compare_staircase(QUICK, reference=ms.StaircaseOptions.quick(merge_grad=1e-6))
    assert grad.status == "failed"
    assert not any(p["same_pairs"] for p in grad.per_beta.values())
    few = compare_staircase(StaircaseFlowOptions.quick(max_steps=10))
    assert few.status == "failed"  # a step budget the flow cannot meet
    with pytest.raises(ValueError, match="reference.betas"):
        compare_staircase(QUICK, reference=ms.StaircaseOptions.quick(betas=(500,)))


@pytest.mark.parametrize("key, value", [
    ("betas", ()), ("betas", (500, 1)), ("rtol", 0.0), ("rtol", 0.5), ("atol", -1.0),
    ("method", "Euler"), ("lr", 0.0), ("max_iter", 0), ("beta0", 1.0),
    ("merge_grad", 0.0), ("merge_dist", -1e-3), ("max_steps", 0)])
def test_bad_options_are_refused_naming_the_key(key, value):
    with pytest.raises(ValueError, match=f"staircase_flow: {key} must be"):
        StaircaseFlowOptions(**{key: value})


def test_options_are_keyword_only_and_the_tolerance_reads_them():
    with pytest.raises(TypeError):
        StaircaseFlowOptions((500,))  # type: ignore[misc]
    o = StaircaseFlowOptions(rtol=1e-4, atol=1e-7, lr=2e-5, max_iter=10)
    assert o.s_max == pytest.approx(2e-4)
    assert merge_time_tolerance(o) == pytest.approx(6 * 2e-5 + 1e-4 + 1e-7)
    assert o.published() == ms.StaircaseOptions(betas=o.betas, max_iter=10, lr=2e-5)
    run = staircase_flow(500, o)  # a horizon before the first merge: stops at s_max
    assert run.stop == "s_max" and run.merges == [] and run.s_end == pytest.approx(2e-4)


def test_cli_adaptive_adds_the_comparison_to_the_published_reproduction(tmp_path, capsys):
    """``wflow reproduce metastable_staircase --quick --adaptive``: the published summary
    (checks, verdict unchanged) plus an ``adaptive`` block whose keys are declared."""
    out = tmp_path / "a"
    assert main(["reproduce", "metastable_staircase", "--quick", "--adaptive",
                 "--out", str(out)]) == 0
    s = json.loads((out / "summary.json").read_text(encoding="utf-8"))
    assert s["status"] == "success" and s["verdict"] == "reproduced"
    assert not contract_problems(s, "reproduce") and not unexplained(flatten(s))
    a = s["adaptive"]
    assert a["status"] == "success" and a["rtol"] == 1e-6
    assert set(a["per_beta"]) == {"500", "4000"}
    assert all(p["steps"] <= 10_000 and p["max_dt"] <= a["tolerance"]
               for p in a["per_beta"].values())
    assert "Adaptive flow: " in (out / "report.md").read_text(encoding="utf-8")
    assert "adaptive flow: " in capsys.readouterr().out


@pytest.mark.parametrize("args", [["glpr_phase", "--adaptive"],
                                  ["metastable_staircase", "--rtol", "1e-4"],
                                  ["metastable_staircase", "--adaptive", "--rtol", "0"]])
def test_cli_refuses_adaptive_where_it_means_nothing(args, tmp_path):
    out = tmp_path / "x"
    assert main(["reproduce", *args, "--quick", "--out", str(out)]) == 2
    assert not out.exists()

