"""The accuracy core: tolerances, the exact cross-rank sum, the error norm, the PI controller."""

from __future__ import annotations

import math

import numpy as np
import pytest

from wflow.infra.accuracy import (
    MIN_RTOL,
    StepController,
    Tolerance,
    error_norm,
    exact_sum,
    richardson_error,
)
from wflow.infra.schema import ScenarioError


class _FakeComm:
    """The allgather of ``P`` ranks, played in one process (each part is one 'rank')."""

    def __init__(self, parts):
        self.parts = parts

    def Get_size(self):
        return len(self.parts)

    def allgather(self, _mine):
        from wflow.infra.accuracy import _exact_bins
        return [(bool(np.all(np.isfinite(p))), _exact_bins(p)) for p in self.parts]


def test_exact_sum_is_correctly_rounded():
    rng = np.random.default_rng(1)
    for scale in (1e-300, 1.0, 1e200):
        x = rng.standard_normal(10_001) * scale * np.exp(rng.uniform(-30, 30, 10_001))
        assert exact_sum(x) == math.fsum(x)  # fsum is correctly rounded: bit equality
    # cancellation the naive sum gets wrong: the exact sum does not
    x = np.array([1e16, 1.0, -1e16, 1.0])
    assert exact_sum(x) == 2.0
    assert float(np.sum(x)) != 2.0  # control: the naive sum loses the 1.0's


def test_exact_sum_does_not_depend_on_the_split():
    rng = np.random.default_rng(2)
    x = rng.standard_normal(5000) ** 2 * 1e-3
    serial = exact_sum(x)
    for P in (2, 3, 7):
        parts = np.array_split(rng.permutation(x), P)
        assert exact_sum(parts[0], _FakeComm(parts)) == serial


def test_exact_sum_non_finite_is_nan():
    assert math.isnan(exact_sum(np.array([1.0, np.inf])))


def test_tolerance_refuses_naming_the_key():
    Tolerance(rtol=1e-6, atol=0.0)
    for bad in ({"rtol": 0.0}, {"rtol": MIN_RTOL / 2}, {"rtol": 1.0}, {"atol": -1.0},
                {"rtol": float("nan")}, {"rtol": True}, {"atol": "1e-3"}):
        with pytest.raises(ScenarioError, match=r"^particles\.(rtol|atol)"):
            Tolerance(key="particles", **bad)


def test_error_norm_scales_componentwise():
    tol = Tolerance(rtol=1e-3, atol=1e-6)
    y = np.array([1.0, 100.0])
    err = np.array([1e-3 + 1e-6, 0.0])  # exactly the first component's tolerance
    assert error_norm(err, y, y, tol) == pytest.approx(math.sqrt(0.5), rel=1e-12)
    assert error_norm(np.array([np.nan, 0.0]), y, y, tol) == math.inf


def test_richardson_estimates_the_error_of_two_half_steps():
    # explicit Euler on y' = -y from 1 over h: exact e^{-h}; the estimate of the error of
    # two half steps is within O(h) relative of the true error
    for h in (0.1, 0.05):
        full = 1 - h
        halves = (1 - h / 2) ** 2
        est = richardson_error(np.array(full), np.array(halves), 1)
        true = halves - math.exp(-h)
        assert abs(est / true - 1) < 2 * h


def _integrate(tol: Tolerance, span: float | None = 2.0):
    """Explicit Euler + step doubling on y' = -y, y(0)=1, to t = 2: final relative error."""
    ctrl = StepController(order=1, span=span)
    t, y, dt = 0.0, np.array([1.0]), 0.1
    while t < 2.0 - 1e-15:
        dt = min(dt, 2.0 - t)
        full = y * (1 - dt)
        halves = y * (1 - dt / 2) ** 2
        err = error_norm(richardson_error(full, halves, 1), y, halves, tol)
        ok, dt_next = ctrl.propose(dt, err)
        if ok:
            t, y = t + dt, halves
        dt = dt_next
    return abs(y[0] / math.exp(-2.0) - 1.0), ctrl


def test_per_unit_step_control_meets_the_tolerance_globally():
    for rtol in (1e-2, 1e-3, 1e-4):
        tol = Tolerance(rtol=rtol, atol=0.0)
        e, ctrl = _integrate(tol)
        # per unit step: the local errors, each <= rtol |y(t)| dt/T in the RMS sense, sum to
        # <= rtol |y(T)| up to the flow's contraction (y' = -y moves relative errors
        # unchanged), so the final relative error is within rtol (measured: 0.86 rtol at
        # every rtol); not far below it either (over-resolving 4x wastes steps)
        assert rtol / 4 <= e <= rtol
        assert ctrl.accepted > 0


def test_per_step_control_misses_the_global_tolerance():
    # control: the classical per-step criterion lets the global error grow like
    # (number of steps) x rtol ~ sqrt(rtol) for Euler: at rtol = 1e-4 it is > 10 rtol
    e, _ = _integrate(Tolerance(rtol=1e-4, atol=0.0), span=None)
    assert e > 10 * 1e-4


def test_controller_rejects_and_never_grows_after_a_rejection():
    ctrl = StepController(order=1)
    ok, dt = ctrl.propose(1.0, 100.0)
    assert not ok and dt < 1.0 and ctrl.rejected == 1
    ok, dt2 = ctrl.propose(dt, 1e-8)
    assert ok and dt2 <= dt  # right after a rejection the step does not grow
    ok, dt3 = ctrl.propose(dt2, float("nan"))
    assert not ok and dt3 == pytest.approx(dt2 * ctrl.fmin)


def test_controller_reports_an_unreachable_tolerance():
    ctrl = StepController(order=1, dt_min=1e-3)
    dt = 1e-2
    with pytest.raises(FloatingPointError, match="cannot be met"):
        for _ in range(50):
            _, dt = ctrl.propose(dt, 1e6)
