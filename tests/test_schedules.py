"""Weight schedules θ_h(t): closed forms, integrators and their orders, noise laws, jumps."""

from __future__ import annotations

import numpy as np
import pytest

from wflow.attention.heads import Heads
from wflow.attention.schedules import (
    CallableSchedule,
    Layers,
    OrnsteinUhlenbeck,
    Oscillating,
    Parametrisation,
    Relaxed,
    Static,
    as_schedule,
)

from .conftest import EPS


def _param(H: int = 2, d: int = 3) -> Parametrisation:
    return Parametrisation("bilinear", np.full(H, 1.0 / H))


def _sym(rng, H=2, d=3):
    Z = rng.standard_normal((H, d, d))
    return 0.5 * (Z + np.swapaxes(Z, 1, 2))


def _integrate(sch, T: float, n: int, method: str) -> np.ndarray:
    th, dt = sch.initial_theta(), T / n
    for k in range(n):
        th = sch.advance(th, k * dt, dt, None, method=method)[1]
    return th


def test_deterministic_ou_uses_its_closed_form(rng):
    """``θ(t) = θ_∞ + (θ₀ − θ_∞) e^{−κt}``: advance returns the closed form (exact)."""
    th0, inf = _sym(rng), np.broadcast_to(np.eye(3), (2, 3, 3))
    ou = OrnsteinUhlenbeck(_param(), th0, inf, kappa=0.7)
    mid, end = ou.advance(th0, 0.0, 0.4, None)
    np.testing.assert_allclose(end, inf + (th0 - inf) * np.exp(-0.28), rtol=0, atol=8 * EPS)
    np.testing.assert_allclose(mid, inf + (th0 - inf) * np.exp(-0.14), rtol=0, atol=8 * EPS)


@pytest.mark.parametrize("method, order", [("rk4", 4), ("euler", 1)])
def test_relaxed_integrators_reach_their_order(rng, method, order):
    """``dθ/dt = κ(F(t) − θ)`` against a fine RK4 reference: the fitted log–log slope of the
    error matches the integrator's order within 0.3."""
    th0 = _sym(rng)

    def target(t):
        return np.stack([np.cos(t) * np.eye(3), np.sin(2 * t) * np.eye(3)])

    sch = Relaxed(_param(), th0, target, kappa=1.5)
    ref = _integrate(sch, 1.0, 4096, "rk4")
    ns = np.array([8, 16, 32, 64]) if method == "rk4" else np.array([64, 128, 256, 512])
    err = [np.abs(_integrate(sch, 1.0, int(n), method) - ref).max() for n in ns]
    slope = -np.polyfit(np.log(ns), np.log(err), 1)[0]
    assert abs(slope - order) < 0.3, f"{method}: observed order {slope:.3f}, expected {order}"


def test_oscillating_closed_form_and_drift_agree(rng):
    """The drift is the time derivative of the closed form (central difference, O(h²))."""
    sch = Oscillating(_param(), _sym(rng), amplitude=0.5, omega=1.3)
    t, h = 0.9, 1e-5
    fd = (sch.closed_form(t + h) - sch.closed_form(t - h)) / (2 * h)
    np.testing.assert_allclose(sch.drift(sch.closed_form(t), t), fd, atol=1e-9)
    np.testing.assert_allclose(sch.phases, 2 * np.pi * np.arange(2) / 2)


def test_symmetric_ou_noise_has_the_documented_variances(rng):
    """``dW_sym = √dt (Z + Zᵀ)/2``: diagonal variance ``dt``, off-diagonal ``dt/2`` (per unit
    σ²), checked on 40 000 draws at 5 standard errors; plain noise has variance 1 everywhere."""
    ou = OrnsteinUhlenbeck(_param(1, 3), np.zeros((1, 3, 3)), np.zeros((1, 3, 3)), kappa=0.0,
                           sigma0=1.0, symmetric_noise=True)
    z = ou.noise((40000, 3, 3), rng)
    var = z.var(axis=0)
    se = np.sqrt(2.0 / z.shape[0])  # s.e. of a variance estimate, relative
    assert np.all(np.abs(np.diag(var) - 1.0) < 5 * se)
    off = var[~np.eye(3, dtype=bool)]
    assert np.all(np.abs(off - 0.5) < 5 * 0.5 * se)
    np.testing.assert_allclose(z, np.swapaxes(z, 1, 2))
    plain = OrnsteinUhlenbeck(_param(1, 3), np.zeros((1, 3, 3)), np.zeros((1, 3, 3)), sigma0=1.0)
    v2 = plain.noise((40000, 3, 3), rng).var(axis=0)
    assert np.all(np.abs(v2 - 1.0) < 5 * se)  # negative control: 0.5 off-diagonal fails this
    assert not np.all(np.abs(off - 1.0) < 5 * se)


def test_noisy_schedules_need_a_generator(rng):
    ou = OrnsteinUhlenbeck(_param(), _sym(rng), np.zeros((2, 3, 3)), sigma0=0.3)
    with pytest.raises(ValueError, match="random generator"):
        ou.advance(ou.initial_theta(), 0.0, 0.1, None)


def test_layers_jump_at_multiples_of_delta(rng):
    A = [_sym(rng) for _ in range(3)]
    sch = Layers(_param(), np.stack(A), delta=0.5)
    assert sch.jump_times == (0.5, 1.0)
    assert [sch.layer(t) for t in (0.0, 0.49, 0.5, 0.99, 1.0, 7.0)] == [0, 0, 1, 1, 2, 2]
    np.testing.assert_array_equal(sch.after_jump(A[0], 0.5), A[1])
    with pytest.raises(ValueError, match="delta"):
        Layers(_param(), np.stack(A), delta=0.0)


def test_callable_schedule_checks_its_shape(rng):
    th0 = _sym(rng)
    sch = CallableSchedule(_param(), th0, lambda th, t: -th)
    np.testing.assert_allclose(_integrate(sch, 1.0, 64, "rk4"), th0 * np.exp(-1.0), rtol=1e-8)
    with pytest.raises(ValueError, match="must return shape"):
        CallableSchedule(_param(), th0, lambda th, t: th[0])


def test_as_schedule_coerces_and_refuses(rng):
    heads = Heads.bilinear(_sym(rng), w=0.5)
    sch = as_schedule(heads)
    assert isinstance(sch, Static)
    np.testing.assert_array_equal(sch.heads_at_time(3.0).A, heads.A)
    noisy = OrnsteinUhlenbeck(_param(), _sym(rng), np.zeros((2, 3, 3)), sigma0=0.3)
    assert as_schedule(noisy) is noisy
    with pytest.raises(ValueError):
        as_schedule(noisy, deterministic=True)
    with pytest.raises(ValueError, match="parametrisation"):
        Parametrisation("lowrank", np.ones(2))
