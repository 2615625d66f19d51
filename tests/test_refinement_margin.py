"""The refinement verdicts' thresholds: the theoretical order minus a measured margin, and
the largest level-to-level rise.

``wflow.apps.main.verdicts.ORDER_MARGIN`` and ``RISE_MAX`` must be what
``bench/refinement_margin.py`` measured (``bench/results/refinement_margin.json``: the
fitted orders and per-level values of ≥ 100 correct main jobs, held-out correct and faulty
runs), and the verdicts must read them. Nothing is run here but the verdict functions on
stored numbers.
"""

from __future__ import annotations

import json
import math
from pathlib import Path

import pytest

from wflow.apps.main import refinement as mj_refinement
from wflow.apps.main import verdicts as mj_verdicts

RESULTS = Path(__file__).resolve().parents[1] / "bench" / "results" / "refinement_margin.json"
MAIN_JOB = RESULTS.parent / "bench_main_job.json"
W2 = "JKO refinement: order of max_k W₂(JKO, PDE) in τ"
L1 = "JKO refinement: order of max_k L¹(JKO, PDE) in τ"
EDI = "JKO refinement: order of JKO Σ|EDI_k| (relative) in τ"


@pytest.fixture(scope="module")
def bench(request):
    import sys

    sys.path.insert(0, str(RESULTS.parents[1]))
    try:
        import refinement_margin
    finally:
        sys.path.remove(str(RESULTS.parents[1]))
    return refinement_margin


@pytest.fixture(scope="module")
def data() -> dict:
    return json.loads(RESULTS.read_text())


def test_the_margin_is_measured_over_at_least_100_correct_runs(data):
    s = data["summary"]
    cal = [r for r in data["rows"] if r["fault"] is None and r["seed"] < 10_000]
    assert s["calibration_runs"] == len(cal) >= 100
    assert {r["template"] for r in cal} == {"usa", "softmax", "default"}
    assert len({(r["template"], r["seed"]) for r in cal}) == len(cal)  # distinct draws
    for r in data["rows"]:  # CPU and wall time beside each row
        assert r["cpu_s"] > 0 and r["wall_s"] > 0


def test_the_stored_summary_is_what_its_rows_give(bench, data):
    # through JSON, as stored (tuples → lists); the sums of times are exact in the same order
    assert json.loads(json.dumps(bench.summarise(data["rows"]))) == data["summary"]


def test_the_code_reads_the_measured_margin(data):
    s = data["summary"]
    assert mj_verdicts.ORDER_MARGIN == pytest.approx(s["margin"], abs=1e-12)
    assert mj_verdicts.RISE_MAX == pytest.approx(s["rise_max"], abs=1e-12)
    assert mj_refinement.RISE_MAX is mj_verdicts.RISE_MAX
    assert mj_verdicts.THEORY_ORDER == s["theory"]
    for key, name in (("w2", "ORDER_MIN_W2"), ("l1", "ORDER_MIN_L1"), ("edi", "ORDER_MIN_EDI")):
        assert getattr(mj_verdicts, name) == pytest.approx(s["threshold"][key], abs=1e-12)
        assert getattr(mj_refinement, name) == getattr(mj_verdicts, name)


def test_a_margin_that_the_runs_do_not_support_is_refused(bench, data):
    """Negative control: one more correct run, 0.1 below the smallest order measured,
    moves the measured margin: the constant no longer equals it."""
    cal = [r for r in data["rows"] if r["fault"] is None and r["seed"] < 10_000]
    worst = min(cal, key=lambda r: r["order_w2"] if r["order_w2"] is not None else math.inf)
    extra = {**worst, "seed": 9_999, "order_w2": worst["order_w2"] - 0.1}
    moved = bench.summarise([*data["rows"], extra])["margin"]
    assert moved["w2"] > mj_verdicts.ORDER_MARGIN["w2"]


def test_a_rise_that_the_runs_do_not_support_is_refused(bench, data):
    """Negative control: one more correct run whose largest level-to-level ratio is 0.1
    above the largest measured moves RISE_MAX: the constant no longer equals it."""
    cal = [r for r in data["rows"] if r["fault"] is None and r["seed"] < 10_000]
    for k in ("w2", "l1", "edi"):
        worst = max(cal, key=lambda r: bench.levels_of(r, k)[f"rise_{k}"])
        v = list(worst[f"values_{k}"])
        i = max(range(1, len(v)), key=lambda j: v[j] / v[j - 1])
        v[i] = v[i] + 0.1 * v[i - 1]  # that ratio + 0.1
        extra = {**worst, "seed": 9_999, f"values_{k}": v}
        moved = bench.summarise([*data["rows"], extra])["rise_max"]
        assert moved[k] > mj_verdicts.RISE_MAX[k], k


def test_no_calibration_run_fails_a_verdict(bench, data):
    """The false-fail rate of the whole verdict (order, rise, finest below coarsest): 0 of
    N (one-sided 95 % bound 3 % at N = 100); the held-out correct runs too. Each row's
    per-level values are stored, so the rule is re-applied here to them."""
    s = data["summary"]
    for r in data["rows"]:
        if r["fault"] is None:
            for k in ("w2", "l1", "edi"):
                assert r[f"order_{k}"] >= s["threshold"][k] - 1e-12, (r["template"], r["seed"])
                assert not bench.fails(r, s["threshold"], s["rise_max"], k), \
                    (r["template"], r["seed"], k, r[f"values_{k}"])
                assert len(r[f"values_{k}"]) == len(r["levels"]) == 4
    assert s["false_fails"]["any"] == 0 and s["heldout_correct"]["false_fails"] == 0
    assert s["false_fail_bound_95"] <= 0.031


def _verdicts_of(tab: dict) -> dict[str, str]:
    got: dict[str, str] = {}
    mj_verdicts._refinement_verdicts(
        lambda q, v, t, verdict, m: got.__setitem__(q, verdict), tab, "PDE")
    return got


def test_the_verdicts_pass_above_the_threshold_and_fail_below():
    """A four-level table whose numbers fall at the order theory − margin ± 0.02."""
    for key, q in (("w2", W2), ("l1", L1), ("edi", EDI)):
        for delta, want in ((0.02, "PASS"), (-0.02, "FAIL")):
            p = mj_verdicts.THEORY_ORDER[key] - mj_verdicts.ORDER_MARGIN[key] + delta
            rows = [{"cells": 20 * n * n, "tau": 1.0 / n, "time_error": 0.0,
                     "w2_max": n ** -1.5, "l1_max": n ** -1.5, "edi_abs_relative": n ** -1.5,
                     f"{key}_max" if key != "edi" else "edi_abs_relative": float(n) ** -p}
                    for n in (4, 5, 6, 7)]
            assert _verdicts_of(mj_refinement._fit_table(rows, None))[q] == want, (key, delta)


def _table(key: str, v: list[float]) -> dict:
    """A four-level table (320 … 980 cells, h ∝ τ) whose column ``key`` is ``v`` (coarsest
    first) and whose other columns fall at order 1.5."""
    col = {"w2": "w2_max", "l1": "l1_max", "edi": "edi_abs_relative"}[key]
    rows = [{"cells": 20 * n * n, "tau": 1.0 / n, "time_error": 0.0,
             "w2_max": n ** -1.5, "l1_max": n ** -1.5, "edi_abs_relative": n ** -1.5,
             col: x} for n, x in zip((4, 5, 6, 7), v, strict=True)]
    return mj_refinement._fit_table(rows, None)


@pytest.mark.parametrize("key,q", [("w2", W2), ("l1", L1), ("edi", EDI)])
def test_one_level_rising_by_more_than_rise_max_fails(key, q):
    """Negative control: a second-order table (ratios 0.64, 0.69, 0.73) passes; the same
    table with the 720-cell level raised so that its ratio to the 500-cell level is
    RISE_MAX + 0.02 fails, while its fitted order still passes (only the rise catches
    it); RISE_MAX − 0.02 passes."""
    for delta, want in ((0.02, "FAIL"), (-0.02, "PASS")):
        v3 = (mj_verdicts.RISE_MAX[key] + delta) / 25
        v = [1 / 16, 1 / 25, v3, v3 * (6 / 7) ** 2]
        tab = _table(key, v)
        assert tab[f"order_{key}"] >= mj_verdicts.THEORY_ORDER[key] - \
            mj_verdicts.ORDER_MARGIN[key], (key, tab[f"order_{key}"])
        assert tab[f"settles_{key}"] is True
        # the ratio is formed from floats: 1e-12 ≫ the round-off of one division
        assert tab[f"rise_{key}"] == pytest.approx(mj_verdicts.RISE_MAX[key] + delta,
                                                   abs=1e-12)
        assert _verdicts_of(tab)[q] == want, (key, delta, tab[f"ratios_{key}"])
    assert _verdicts_of(_table(key, [1 / 16, 1 / 25, 1 / 36, 1 / 49]))[q] == "PASS"


@pytest.mark.parametrize("key,q", [("w2", W2), ("l1", L1), ("edi", EDI)])
def test_a_finest_value_above_the_coarsest_fails(key, q, monkeypatch):
    """Negative control: a table whose finest value is above its coarsest fails, even with
    every ratio allowed (RISE_MAX raised to 10 here) and its order above the threshold
    (lowered to −10 here: at the shipped thresholds the order or the rise fails such a
    table first); the same table with its finest value below the coarsest passes."""
    monkeypatch.setitem(mj_verdicts.RISE_MAX, key, 10.0)
    monkeypatch.setattr(mj_verdicts, {"w2": "ORDER_MIN_W2", "l1": "ORDER_MIN_L1",
                                      "edi": "ORDER_MIN_EDI"}[key], -10.0)
    for last, want in ((0.26, "FAIL"), (0.24, "PASS")):
        tab = _table(key, [0.25, 0.40, 0.30, last])
        assert tab[f"settles_{key}"] is (last < 0.25)
        assert _verdicts_of(tab)[q] == want, (key, last)
        assert mj_verdicts.order_passes(tab, key, min_order=-10.0) is (want == "PASS")


def test_an_old_shrinks_failure_with_a_small_rise_passes():
    """The correct default-family tables that the old rule false-failed: L¹ first rises a
    little from the coarsest level (reported as not shrinking), then falls: PASS now."""
    v = [0.4898, 0.5029, 0.4653, 0.4202]  # the L¹ column of default seed 8 (rounded)
    tab = _table("l1", v)
    assert tab["shrinks_l1"] is False and tab["settles_l1"] is True
    assert tab["rise_l1"] <= mj_verdicts.RISE_MAX["l1"]
    assert _verdicts_of(tab)[L1] == "PASS"


def test_the_shipped_default_passes_at_the_thresholds():
    """The shipped default's measured orders (2 420 cells, ``bench_main_job.json``)."""
    numbers = json.loads(MAIN_JOB.read_text())["runs"][0]["numbers"]
    orders = numbers["orders"]
    assert orders["w2"] >= mj_verdicts.ORDER_MIN_W2
    assert orders["l1"] >= mj_verdicts.ORDER_MIN_L1
    assert orders["edi"] >= mj_verdicts.ORDER_MIN_EDI
    # the whole rule on its stored rows (320 / 720 / 1 280 / 2 420 cells)
    tab = mj_refinement._fit_table([{**r, "time_error": 0.0} for r in numbers["rows"]], None)
    for key in ("w2", "l1", "edi"):
        # the same 4-point least-squares fit of the stored values: round-off ~1e-15 ≪ 1e-9
        assert tab[f"order_{key}"] == pytest.approx(orders[key], abs=1e-9)
        assert mj_verdicts.order_passes(tab, key), (key, tab[f"ratios_{key}"])


def test_the_faults_are_caught_at_held_out_seeds(data):
    """Power: β × 1.03 and a JKO stepping 1.1τ (USA family), b̂ → 1 (both softmax families)
    are caught at every held-out seed; the held-out correct runs pass. Not caught (stated
    in ``ORDER_MARGIN``'s docstring): β × 1.03 and 1.1τ on the default family."""
    p = data["summary"]["power"]
    for fam in ("beta/usa", "tau/usa", "mobility/softmax", "mobility/default"):
        assert p[fam]["runs"] >= 2 and p[fam]["caught"] == p[fam]["runs"], (fam, p[fam])
    assert p["beta/default"]["caught"] == p["tau/default"]["caught"] == 0
    held = data["summary"]["heldout_correct"]
    assert held["runs"] >= 6 and held["false_fails"] == 0


def test_a_fault_on_one_level_is_caught_by_the_rise_alone(bench, data):
    """Power of the level-to-level rule: β × 1.1 in the JKO of the 720-cell level only
    (softmax family, six held-out seeds) passes every fitted order at every seed; the W₂
    rise from the 500-cell level catches it at 4 of 6 (stated in ``RISE_MAX``'s docstring),
    and every run it catches is caught by the rise alone."""
    lv = data["summary"]["power"]["level/softmax"]
    assert lv["runs"] == 6 and lv["caught_by_order"] == lv["caught_by_settles"] == 0, lv
    assert lv["caught"] == lv["caught_by_rise"] == lv["caught_by_w2"] == 4, lv
    s = data["summary"]
    for r in data["rows"]:
        if r["fault"] == "level":
            lvw2 = bench.levels_of(r, "w2")
            caught = bench.fails(r, s["threshold"], s["rise_max"], "w2")
            # the faulted level is the third (720 cells): its ratio is the largest
            assert r["levels"][2] == 720 and (not caught or lvw2["ratios_w2"][1] ==
                                              lvw2["rise_w2"] > s["rise_max"]["w2"])
