"""``demos/phase_diagram.py --quick``: its pinned numbers, its figure and its raw data.

The same entry belongs in ``tests/test_demos.py``'s ``PINNED`` (owned by the lead); until
it is there, this file pins the demo (as scikit-fem's example tests do).
"""

from __future__ import annotations

import importlib.util
import json
from pathlib import Path

import numpy as np
import pytest

ROOT = Path(__file__).resolve().parents[1]

#: ``main(quick=True)``: deterministic (Newton to ~1e-13, Brent to 1e-13 in m), so 1e-9
#: relative leaves room for BLAS summation order and nothing else; a physics change (the
#: coupling convention, the kernel, the fold) moves them by far more.
PINNED = {
    "beta_star": 1.8161545254358862,
    "k_sharp_beta3": 0.668809795493452,
    "k_c_beta3": 0.6168721972981277,
    "k_fold_beta3": 0.6042237643901619,
    "exponent_below": 0.4999082770095864,
    # at β*, K − K_# ≈ b m⁴ is 2.2e-10 at the smallest m = 0.005 of the fit, against a
    # round-off of K of ~eps·K/m ≈ 5e-14 (module wflow.phase.zonal): 2e-4 relative on that
    # point, ~1e-5 on the fitted slope (measured: 3e-8 between two exact evaluations of
    # the Gegenbauer polynomials). Pinned absolutely to 2e-5.
    "exponent_at": (0.2500013348530882, 2e-5),
}


def _load():
    spec = importlib.util.spec_from_file_location("demo_phase_diagram",
                                                  ROOT / "demos" / "phase_diagram.py")
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


FIXTURE = ROOT / "tests" / "data" / "phase_particles_points.json"


def test_phase_diagram_demo_quick(tmp_path):
    result = _load().main(quick=True, out=tmp_path, points=FIXTURE)
    for key, want in PINNED.items():
        if isinstance(want, tuple):
            np.testing.assert_allclose(result[key], want[0], rtol=0, atol=want[1], err_msg=key)
        else:
            np.testing.assert_allclose(result[key], want, rtol=1e-9, err_msg=key)
    assert result["discontinuous"] == 6  # β = 2, 2.5, 3, 4, 5, 6 of the quick grid
    assert result["dichotomy"]["3"]["holds"]
    png, js = tmp_path / "phase_diagram.png", tmp_path / "phase_diagram.json"
    assert png.stat().st_size > 10_000
    data = json.loads(js.read_text())  # standard JSON: the continuous folds are null
    assert data["diagram"]["k_fold"][0] is None
    assert abs(data["k_c_beta3"] - PINNED["k_c_beta3"]) < 1e-12
    # negative control: the published "fold" label of 0.61687 is not our fold
    assert abs(result["k_fold_beta3"] - 0.61687) > 1e-3
    # the fixture's particle points, each with its verdict against the branch
    pts = result["particle_points"]
    assert [(p["beta"], p["K"], p["passed"]) for p in pts] == [(1.0, 2.2, True),
                                                              (3.0, 0.9, False)]
    assert data["particle_points"][0]["se"] == 1.2e-4


def _drawn_points(mod, tmp_path, points):
    """The (x, y) of the particle markers on each panel of the demo's figure."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    figs = []
    orig = plt.subplots

    def spy(*a, **k):
        fig, ax = orig(*a, **k)
        figs.append(ax)
        return fig, ax

    plt.subplots = spy
    try:
        result = mod.main(quick=True, out=tmp_path, points=points)
    finally:
        plt.subplots = orig
    ax = figs[0]
    stars = [ln.get_xydata().tolist() for a in ax[:2] for ln in a.get_lines()
             if ln.get_marker() == "*"]
    return result, stars, ax


def test_the_demo_draws_the_points_of_the_file(tmp_path, capsys):
    mod = _load()
    result, stars, ax = _drawn_points(mod, tmp_path, FIXTURE)
    out = capsys.readouterr().out
    assert "agrees" in out and "DIFFERS" in out
    # diagram: (β, K) of each point; branches: (K/K_#, m̄)
    k1, k3 = mod.k_sharp(1.0, 3), mod.k_sharp(3.0, 3)
    np.testing.assert_allclose(stars[0], [[1.0, 2.2], [3.0, 0.9]])
    np.testing.assert_allclose(stars[1], [[2.2 / k1, 0.83662], [0.9 / k3, 0.9490]])
    assert ax[2].axison
    for key, want in PINNED.items():  # the points change none of the pinned numbers
        got = result[key]
        np.testing.assert_allclose(got, want[0] if isinstance(want, tuple) else want,
                                   rtol=1e-9, atol=want[1] if isinstance(want, tuple) else 0)


def test_a_missing_points_file_is_said_and_draws_nothing(tmp_path, capsys):
    mod = _load()
    result, stars, ax = _drawn_points(mod, tmp_path, tmp_path / "none.json")
    assert "none drawn" in capsys.readouterr().out
    assert result["particle_points"] is None and stars == [] and not ax[2].axison


def test_a_pair_at_dt_and_half_dt_gets_its_limit_in_the_table(tmp_path, capsys):
    data = json.loads(FIXTURE.read_text())
    a = data["points"]["rows"][0]
    data["points"]["rows"] = [a, {**a, "dt": a["dt"] / 2, "mean": a["mean"] + 3e-4}]
    f = tmp_path / "pair.json"
    f.write_text(json.dumps(data))
    result, stars, ax = _drawn_points(_load(), tmp_path, f)
    pts = result["particle_points"]
    assert [p["dt"] for p in pts] == [0.05, 0.025, 0.0]
    # Richardson (order 2): (4 m_{dt/2} − m_dt) / 3 = m_dt + 4e-4
    assert pts[2]["mean"] == pytest.approx(a["mean"] + 4e-4, abs=1e-12)
    assert len(stars[0]) == 2  # the limit is no run: not on the diagram
    assert "Richardson" in capsys.readouterr().out


def test_a_larger_run_at_dt_alone_is_corrected_by_the_smaller_pairs(tmp_path, capsys):
    data = json.loads(FIXTURE.read_text())
    a = data["points"]["rows"][0]
    big = {**a, "n": 10 * a["n"], "mean": a["mean"] + 1e-4, "se": a["se"] / 3}
    data["points"]["rows"] = [a, {**a, "dt": a["dt"] / 2, "mean": a["mean"] + 3e-4}, big]
    f = tmp_path / "large.json"
    f.write_text(json.dumps(data))
    result, stars, ax = _drawn_points(_load(), tmp_path, f)
    pts = result["particle_points"]
    assert [(p["n"], p["dt"]) for p in pts] == [(a["n"], 0.05), (a["n"], 0.025),
                                                 (a["n"], 0.0), (big["n"], 0.05),
                                                 (big["n"], 0.0)]
    # the pair's bias at dt: (4/3)(m_dt − m_{dt/2}) = −4e-4, removed from the large run
    assert pts[4]["mean"] == pytest.approx(big["mean"] + 4e-4, abs=1e-12)
    assert pts[4]["bias_n"] == a["n"] and pts[2]["bias_n"] is None
    assert len(stars[0]) == 3  # runs only on the diagram
    # negative control: without a smaller pair the large run gets no limit
    data["points"]["rows"] = [a, big]
    f.write_text(json.dumps(data))
    result, _, _ = _drawn_points(_load(), tmp_path, f)
    assert [p["dt"] for p in result["particle_points"]] == [0.05, 0.05]


def test_the_recorded_large_points_agree_with_the_branch_as_the_guide_says():
    """bench/results/phase_particles.json through the demo's table: the 10⁶-token points,
    their step bias removed, agree with the branch, and each is the guide's row
    (docs/guide/phase.md). Negative control: the runs at dt = 0.05 do not agree."""
    from wflow.phase.particles import load_particle_points

    pts = _load()._with_limits(load_particle_points(ROOT / "bench" / "results"
                                                    / "phase_particles.json"))
    big = {(p.beta, p.dt): p for p in pts if p.n == 1_000_000}
    guide = " ".join((ROOT / "docs" / "guide" / "phase.md").read_text().split())

    def row(p):  # the guide's "m̄ ± s.e." cell (s.e. exponent without a leading zero)
        return f"{p.mean:.6f} ± {p.se:.1e}".replace("e-0", "e-")

    b3, b1 = big[(3.0, 0.0)], big[(1.0, 0.0)]
    assert b3.passed and b3.bias_n == 100_000  # the 10⁵ pair's bias (correct_dt)
    assert b1.passed and b1.bias_n is None  # its own pair at dt/2 (Richardson)
    assert f"| 3, 0.9 | → 0 (bias of the $10^5$ pair) | {row(b3)} |" in guide
    assert f"| 1, 2.2 | → 0 (Richardson) | {row(b1)} |" in guide
    assert not big[(3.0, 0.05)].passed and not big[(1.0, 0.05)].passed
