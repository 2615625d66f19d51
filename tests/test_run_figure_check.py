"""``run.png`` (``wflow pde --gif``, ``wflow particles --gif``): its residual column is the
chain-rule residual, the check that decides the status, never the G² balance residual."""

from __future__ import annotations

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402
import numpy as np  # noqa: E402

from wflow.apps.animate import RunSeries, run_figure  # noqa: E402


def test_residual_column_is_the_chain_rule_check(tmp_path, monkeypatch):
    """Softmax heads: the G² balance residual grows (here to ~380) while the chain rule
    holds to 1e-6; the residual column shows the latter, labelled as the status's check.
    Negative control: a chain residual injected into the balance shows up there."""
    t = np.linspace(0.0, 2.0, 21)
    chain = 1e-6 * t
    bal = {"dE": 3.0 * t, "work": 0.5 * t, "ito": 0 * t, "martingale": 0 * t,
           "power_int": 2.5 * t - chain, "G2_int": 3.0 * t - 190.0 * t}
    figs = []
    real_close = plt.close
    monkeypatch.setattr(plt, "close", lambda fig=None: figs.append(fig))

    def residual_line(b):
        run_figure([RunSeries("pde", t, 1 + t, 1 + t, b, +1)], tmp_path / "run.png")
        fig = figs.pop()
        ax = fig.axes[3]
        line = next(ln for ln in ax.get_lines() if "residual" in ln.get_label())
        real_close(fig)
        return ax, line

    ax, line = residual_line(bal)
    assert "chain-rule residual" in line.get_label() and "G²" not in line.get_label()
    assert "check of the status" in ax.get_title()
    y = np.asarray(line.get_ydata())
    np.testing.assert_allclose(y[1:], chain[1:], rtol=1e-9)  # not |ΔE − … − ∫G²| ≈ 380
    _, bad = residual_line({**bal, "power_int": bal["power_int"] - 0.3 * t})
    assert np.asarray(bad.get_ydata())[-1] > 0.5  # the fault is seen there
