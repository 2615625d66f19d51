"""The published experiments' weight dynamics, term by term (docs/theory.md §5)."""

from __future__ import annotations

import math

import numpy as np
import pytest

from wflow.attention.heads import Attention
from wflow.attention.schedules import Parametrisation
from wflow.geometry.sphere import sample_uniform
from wflow.particles import simulate
from wflow.published.td import published_frames, published_relaxed


def _theory_frame(t: float, h: int, H: int, d: int) -> np.ndarray:
    """docs/theory.md §5 written out literally (0-based h, i, k as in the published code)."""
    s = t + 2 * math.pi * h / H
    c, sn = math.cos, math.sin
    if d == 2:
        return np.array([[2 + 1.5 * c(s), sn(2 * s)], [sn(2 * s), 2 - 1.5 * c(s)]])
    if d == 3:
        return np.array([[2 + 1.5 * c(s), sn(2 * s), sn(s)],
                         [sn(2 * s), 2 + 1.5 * sn(s), c(2 * s)],
                         [sn(s), c(2 * s), 2 + 1.5 * c(s + math.pi / 4)]])
    F = np.diag([2 + 1.5 * c(s + 2 * math.pi * i / d) for i in range(d)])
    pairs = [(i, j) for i in range(d) for j in range(i + 1, d)]
    for k, (i, j) in enumerate(pairs):
        F[i, j] = F[j, i] = sn(2 * s + 2 * math.pi * k / len(pairs))
    return F


@pytest.mark.parametrize("d", [2, 3, 4, 5])
@pytest.mark.parametrize("H", [1, 3, 10])
def test_published_frames_are_theory_formulas(d, H):
    for t in (0.0, 0.37, 5.0, 19.99):
        F = published_frames(t, H, d)
        want = np.stack([_theory_frame(t, h, H, d) for h in range(H)])
        # the same arithmetic up to libm vs NumPy rounding of sin/cos: a few ulp of O(1)
        np.testing.assert_allclose(F, want, rtol=0, atol=8 * np.finfo(float).eps)
        np.testing.assert_array_equal(F, np.swapaxes(F, 1, 2))


@pytest.mark.parametrize("d", [2, 3, 5])
def test_head_average_of_frames_is_two_identity_for_three_or_more_heads(d):
    for H in (3, 10, 100):
        for t in (0.0, 1.3, 7.7):
            np.testing.assert_allclose(published_frames(t, H, d).mean(axis=0), 2 * np.eye(d),
                                       atol=1e-13)
    # negative control: with two heads the first harmonics cancel but 2s ones do not
    assert np.abs(published_frames(0.3, 2, 3).mean(axis=0) - 2 * np.eye(3)).max() > 0.1


def test_euler_integrator_advances_weights_with_the_same_euler_step():
    rng = np.random.default_rng(0)
    H, d, dt = 3, 3, 0.05
    Z = rng.standard_normal((H, d, d))
    sch = published_relaxed(Z + np.swapaxes(Z, 1, 2))
    x0 = sample_uniform(20, d, rng)
    res = simulate(x0, sch, Attention("softmax", 1.0), T=2 * dt, dt=dt, integrator="euler",
                   head_rates=False, clusters=False)
    th = sch.initial_theta()
    for k in range(2):
        th = th + dt * (published_frames(k * dt, H, d) - th)
    np.testing.assert_allclose(res.theta[0], th, rtol=0, atol=1e-14)
    # negative control: RK4 weights are not the Euler step
    res4 = simulate(x0, sch, Attention("softmax", 1.0), T=2 * dt, dt=dt, integrator="rk4",
                    head_rates=False, clusters=False)
    assert np.abs(res4.theta[0] - th).max() > 1e-4


def test_published_relaxed_defaults_are_the_published_ones():
    H = 4
    theta0 = np.zeros((H, 3, 3))
    sch = published_relaxed(theta0)
    heads = sch.heads_at(theta0 + np.eye(3))
    np.testing.assert_allclose(heads.w, 1.0 / H)
    np.testing.assert_allclose(heads.V, -heads.K)  # value −D_h: energy descent
    np.testing.assert_allclose(sch.drift(theta0, 0.7), published_frames(0.7, H, 3))
    assert isinstance(sch.param, Parametrisation) and sch.kappa == 1.0
