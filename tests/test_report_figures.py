"""The main job's report figures, as reviewed by eye and pinned (``wflow.apps.report``).

* the EDI residual has its own panel with a log axis (beside the energy terms, which are
  orders of magnitude larger, it was a flat line at zero);
* a tolerance line stands in the panel of the one curve it applies to (the JKO EDI
  tolerance was drawn across W₂, L¹ and the slope line; the particles' W₂ tolerance
  across the JKO's W₂).

The checks are structural (axes, scales, which lines share a panel), so they are
independent of fonts and renderers; a negative control draws the old one-panel figure
and asserts that the checks catch it.
"""

from __future__ import annotations

import numpy as np
import pytest

plt = pytest.importorskip("matplotlib.pyplot")

from wflow.apps.report import edi_figure, refinement_figure, w2_figure  # noqa: E402


def _labels(ax) -> list[str]:
    return [ln.get_label() for ln in ax.get_lines()]


def tolerance_problems(fig, owner: dict[str, str]) -> list[str]:
    """Tolerance lines that share a panel with a curve they do not apply to.

    ``owner``: a substring of a tolerance line's label -> a substring of the one curve's
    label it applies to; every other data curve (not a reference line) in its panel is a
    problem.
    """
    bad = []
    for ax in fig.axes:
        labels = _labels(ax)
        for tol, curve in owner.items():
            if not any(tol in lab for lab in labels):
                continue
            others = [lab for lab in labels if tol not in lab and curve not in lab
                      and not lab.startswith("_")]
            refs = ("sampling level", "n^(-1/2)")  # reference levels of the same curve
            others = [lab for lab in others if not lab.startswith(refs)]
            if others:
                bad.append(f"'{tol}' drawn across {others}")
    return bad


def _steps(n: int = 41) -> dict:
    t = np.linspace(0.0, 2.0, n)
    slope2 = 0.1 + 0.1 * t
    speed2 = slope2 * (1 + 1e-4 * np.sin(t))  # a tiny EDI residual
    E = 0.6 + np.concatenate([[0.0], np.cumsum(0.5 * np.diff(t) * (slope2[1:] + slope2[:-1]))])
    return {"t": t, "E": E, "speed2": speed2, "slope2": slope2, "dEdt_w": np.zeros(n)}


def test_the_edi_residual_has_its_own_log_panel():
    fig = edi_figure(plt, _steps(), sign=1, defect=False)
    try:
        top, bottom = fig.axes
        assert bottom.get_yscale() == "log" and top.get_yscale() == "linear"
        assert not any("residual" in lab for lab in _labels(top))
        res = next(ln for ln in bottom.get_lines() if "residual" in ln.get_label())
        y = np.asarray(res.get_ydata())
        assert y.max() < 1e-3 * np.ptp(top.get_lines()[0].get_ydata())  # why it needs a panel
        assert y.min() > 0
    finally:
        plt.close(fig)


def test_tolerance_lines_stand_with_their_curve():
    tab = {"rows": [{"tau": t, "w2_max": 0.3 * t, "l1_max": 0.8 * t ** 0.6,
                     "edi_abs_relative": 0.1 * t ** 1.5} for t in (2 / 3, 1 / 2, 1 / 3, 1 / 4)],
           "order_w2": 0.8, "order_l1": 0.6, "order_edi": 1.5}
    fig = refinement_figure(plt, tab, tolerance=0.1)
    try:
        assert len(fig.axes) == 2
        assert tolerance_problems(fig, {"tolerance": "EDI"}) == []
    finally:
        plt.close(fig)
    t = np.linspace(0, 2, 9)
    compare = {"t": t, "w2_particles_vs_pde": 0.065 + 0 * t, "t_jko": t,
               "w2_jko_vs_pde": 0.04 * t}
    w = {"particles_vs_pde_initial": 0.065, "growth_tolerance": 3.0, "n_inv_sqrt": 0.022}
    fig = w2_figure(plt, compare, w)
    try:
        assert len(fig.axes) == 2
        assert tolerance_problems(fig, {"tolerance": "particles"}) == []
        assert any("JKO" in lab for lab in _labels(fig.axes[1]))
    finally:
        plt.close(fig)


def test_a_tolerance_across_other_curves_is_caught():
    """Negative control: the former one-panel refinement figure fails the check."""
    fig, ax = plt.subplots()
    tau = [0.5, 0.25]
    ax.loglog(tau, [0.2, 0.1], label="max W₂(JKO, PDE)")
    ax.loglog(tau, [0.5, 0.3], label="max L¹(JKO, PDE)")
    ax.loglog(tau, [0.05, 0.02], label="JKO Σ|EDI_k| relative")
    ax.axhline(0.1, label="JKO Σ|EDI_k| tolerance")
    try:
        assert tolerance_problems(fig, {"tolerance": "EDI"})
    finally:
        plt.close(fig)


def test_density_pictures_use_a_log_scale_over_the_data():
    """The density pictures (GIF, sphere renders) colour a clustered density on a log scale
    spanning the data, at most ``RENDER_DECADES`` decades: on the former linear ``[0, max]``
    scale the opposite side of the default run (3e-4 … 0.3 against a maximum of 6.95) was
    one colour."""
    from wflow.apps.animate import RENDER_DECADES, log_colour_range

    rho = np.array([6.95, 0.31, 7.3e-3, 3.0e-4])
    lo, hi = log_colour_range(rho)
    assert (lo, hi) == (3.0e-4, 6.95)
    # the opposite side's values spread over several decades of the scale, not one colour
    span = np.log10(rho[1:] / lo) / np.log10(hi / lo)
    assert span.max() - span.min() > 0.5
    # more decades than allowed: clipped there; a constant density: one decade below it
    lo, hi = log_colour_range(np.array([1.0, 1e-12]))
    assert lo == pytest.approx(10.0 ** -RENDER_DECADES, rel=1e-12) and hi == 1.0
    assert log_colour_range(np.full(5, 2.0)) == (0.2, 2.0)
    # negative control: a linear [0, max] scale puts the three small values within 5 %
    lin = rho[1:] / rho.max()
    assert lin.max() - lin.min() < 0.05
