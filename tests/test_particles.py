"""Particle engine: identities, orders, invariants, against a naive reference."""

from __future__ import annotations

import numpy as np
import pytest

from wflow.attention.heads import Attention, Heads
from wflow.attention.kinds import get_kind
from wflow.attention.schedules import (
    CallableSchedule,
    Layers,
    OrnsteinUhlenbeck,
    Oscillating,
    Parametrisation,
    Static,
)
from wflow.diagnostics import attention_entropy, entropy_production, head_rates
from wflow.energy import evaluate, head_energies, slope_terms
from wflow.geometry.sphere import sample_uniform
from wflow.particles import INTEGRATOR_ORDER, iterate, simulate
from wflow.published.td import published_relaxed

from .conftest import EPS, KINDS, needs_compiled


def fitted_order(h, err):
    return np.polyfit(np.log(h), np.log(np.abs(err)), 1)[0]


# ----------------------------------------------------------------------------- naive reference
def naive(x, heads, attn):
    """Independent O(n²) reference: explicit loops over heads, full pair matrices."""
    n, d = x.shape
    spec = get_kind(attn.kind)
    E = 0.0
    v = np.zeros((n, d))
    gpsi = np.zeros((n, d))
    Zs = []
    for h in range(heads.H):
        A, V, w = heads.Q[h].T @ heads.K[h], heads.V[h], heads.w[h]
        S = attn.beta * x @ A @ x.T
        k, Phi = spec.dphi(S), spec.phi(S)  # the kind's own k = Φ' and Φ
        Z = k.mean(axis=1)
        Zs.append(Z)
        E += w * Phi.sum() / n**2 / (2 * attn.beta)
        out = (k @ x) @ V.T / n
        if spec.normalised:
            out = out / Z[:, None]
        v += w * out
        # ∇_x of (1/2β)∫∫Φ(βxᵀAy) symmetrised (general A)
        kT = spec.dphi(S.T)
        gpsi += w * 0.5 * ((k @ x) @ A.T + (kT @ x) @ A) / n
    P = np.eye(d)[None] - x[:, :, None] * x[:, None, :]
    v = np.einsum("nij,nj->ni", P, v)
    return E, v, gpsi, np.array(Zs)


@pytest.mark.parametrize("kind", KINDS)
@pytest.mark.parametrize("symmetric", [True, False])
def test_energy_velocity_slope_match_naive(rng, kind, symmetric):
    n, d, H = 37, 4, 3
    x = sample_uniform(n, d, rng)
    if symmetric:
        heads = Heads.random_symmetric(H, d, rng, scale=0.4, w=rng.uniform(0.2, 1, H))
    else:
        heads = Heads(rng.normal(size=(H, 2, d)), rng.normal(size=(H, 2, d)),
                      rng.normal(size=(H, d, d)), rng.uniform(0.2, 1, H))
    attn = Attention(kind, 0.7)
    E_ref, v_ref, g_ref, Z_ref = naive(x, heads, attn)
    fe = evaluate(x, heads, attn)
    m = np.full(n, 1 / n)
    # sums of O(n) positive terms: relative round-off ~ n·eps
    tol = 100 * n * EPS
    np.testing.assert_allclose(heads.w @ head_energies(fe, m, attn), E_ref, rtol=tol)
    np.testing.assert_allclose(fe.v, v_ref, rtol=tol, atol=tol * np.abs(v_ref).max())
    gpsi = np.einsum("h,hnd->nd", heads.w, fe.grad_psi)
    np.testing.assert_allclose(gpsi, g_ref, rtol=tol, atol=tol * np.abs(g_ref).max())
    np.testing.assert_allclose(fe.Z, Z_ref, rtol=tol)
    st = slope_terms(x, m, fe, heads, fe.v)
    np.testing.assert_allclose(st.power, np.mean(np.sum(g_ref * v_ref, 1)), rtol=1e-12,
                               atol=1e-14)


def test_energy_gradient_by_finite_differences(rng):
    """∇ψ is the gradient of n·E w.r.t. one particle (tangent perturbation, central FD)."""
    n, d = 20, 3
    x = sample_uniform(n, d, rng)
    heads = Heads.random_symmetric(2, d, rng, scale=0.5)
    attn = Attention("usa", 1.3)
    m = np.full(n, 1 / n)

    def E(y):
        return heads.w @ head_energies(evaluate(y, heads, attn), m, attn)

    fe = evaluate(x, heads, attn)
    g = np.einsum("h,hnd->nd", heads.w, fe.grad_psi)
    i, eps = 3, 1e-5
    u = rng.normal(size=d)
    u -= (u @ x[i]) * x[i]  # tangent direction
    xp, xm = x.copy(), x.copy()
    xp[i] += eps * u
    xm[i] -= eps * u
    fd = (E(xp) - E(xm)) / (2 * eps)
    # dE = (1/n)·2·<∇ψ, u>·(1/2)... with E = (1/2β)ΣΣ/n²: d/dx_i E = (2/n)(1/2)∇ψ = ∇ψ/n
    np.testing.assert_allclose(fd, g[i] @ u / n, rtol=1e-7)  # central FD error O(eps²)


def test_usa_static_identity_dEdt_equals_speed(rng):
    """USA, static symmetric value-aligned heads: dE/dt = (1/n)Σ|ẋ|² pointwise in time."""
    x = sample_uniform(50, 3, rng)
    heads = Heads.random_symmetric(3, 3, rng, scale=0.6, value_sign=1.0)
    attn = Attention("usa", 1.0)
    for st in iterate(x, Static.of(heads), attn, T=0.5, dt=0.1, integrator="rk4"):
        it = st.integrands
        speed = np.mean(np.sum(st.velocity**2, axis=1))
        np.testing.assert_allclose(it["power"], speed, rtol=1e3 * EPS)
        np.testing.assert_allclose(it["slope2"], speed, rtol=1e3 * EPS)
        np.testing.assert_allclose(it["speed2"], speed, rtol=1e3 * EPS)


@pytest.mark.parametrize("integrator", ["euler", "rk4"])
def test_balance_residual_order(rng, integrator):
    """The discrete energy-balance residual shrinks at the integrator's order."""
    x = sample_uniform(60, 3, rng)
    heads = Heads.random_symmetric(2, 3, rng, scale=0.5)
    attn = Attention("usa", 1.0)
    dts = [0.1, 0.05, 0.025] if integrator == "euler" else [0.1, 0.05, 0.025]
    key = "edi" if integrator == "euler" else "chain_simpson"
    res = [simulate(x, heads, attn, T=1.0, dt=dt, integrator=integrator, head_rates=False,
                    clusters=False).balance[key][0] for dt in dts]
    order = fitted_order(dts, res)
    expect = INTEGRATOR_ORDER[integrator]
    assert abs(order - expect) < 0.35, f"{integrator}: balance residual order {order:.2f}, " \
        f"expected {expect} (residuals {res})"


@pytest.mark.parametrize("integrator", ["euler", "rk4"])
def test_integrator_order_on_trajectory(rng, integrator):
    """Fitted order of the final-state error against a fine RK4 reference."""
    x = sample_uniform(40, 3, rng)
    heads = Heads.random_symmetric(2, 3, rng, scale=0.5)
    attn = Attention("softmax", 1.0)
    T = 1.0
    ref = simulate(x, heads, attn, T=T, dt=1 / 256, integrator="rk4", head_rates=False,
                   clusters=False).x[0]
    dts = [0.1, 0.05, 0.025] if integrator == "euler" else [0.25, 0.125, 0.0625]
    errs = [np.abs(simulate(x, heads, attn, T=T, dt=dt, integrator=integrator,
                            head_rates=False, clusters=False).x[0] - ref).max() for dt in dts]
    order = fitted_order(dts, errs)
    expect = INTEGRATOR_ORDER[integrator]
    assert abs(order - expect) < 0.35, f"{integrator}: observed order {order:.2f}, " \
        f"declared {expect} (errors {errs})"


@pytest.mark.parametrize("integrator", ["euler", "rk4"])
def test_tokens_stay_on_sphere(rng, integrator):
    x = sample_uniform(80, 5, rng)
    heads = Heads.random_symmetric(3, 5, rng, scale=1.0)
    res = simulate(x, heads, Attention("softmax", 2.0), T=2.0, dt=0.05, integrator=integrator,
                   save_trajectory=True, head_rates=False, clusters=False)
    norms = np.linalg.norm(res.trajectory, axis=-1)
    np.testing.assert_allclose(norms, 1.0, atol=4 * EPS)  # one renormalisation per step


def test_one_softmax_head_is_exact_gradient_flow(rng):
    """SA, one head: v = b̂ P∇ψ, so slope², speed², G² coincide and the EDI residual → 0."""
    x = sample_uniform(50, 3, rng)
    heads = Heads.random_symmetric(1, 3, rng, scale=0.8)
    attn = Attention("softmax", 1.0)
    fe = evaluate(x, heads, attn)
    st = slope_terms(x, np.full(50, 1 / 50), fe, heads, fe.v)
    np.testing.assert_allclose([st.slope2, st.speed2, st.G2], st.power, rtol=1e3 * EPS)
    r = [simulate(x, heads, attn, T=1.0, dt=dt, integrator="euler", head_rates=False,
                  clusters=False).balance["edi"][0] for dt in (0.1, 0.05, 0.025)]
    order = fitted_order([0.1, 0.05, 0.025], r)
    assert abs(order - 1) < 0.3, f"EDI residual order {order:.2f} (residuals {r})"


def test_multihead_softmax_defect_vs_surrogate(rng):
    """Several different SA heads: the surrogate's EDI residual → 0, the transformer's does not."""
    x = sample_uniform(60, 3, rng)
    heads = Heads.random_symmetric(3, 3, rng, scale=1.0)
    attn = Attention("softmax", 1.0)
    kw = dict(T=1.0, integrator="euler", head_rates=False, clusters=False)
    sur = [simulate(x, heads, attn, dt=dt, flow="surrogate", **kw).balance["edi"][0]
           for dt in (0.05, 0.025)]
    tra = [simulate(x, heads, attn, dt=dt, flow="transformer", **kw).balance["edi"][0]
           for dt in (0.05, 0.025)]
    assert abs(sur[1]) < 0.6 * abs(sur[0]), f"surrogate residual does not shrink: {sur}"
    assert abs(tra[1]) > 10 * abs(sur[1]), f"transformer defect {tra} vs surrogate {sur}"
    assert abs(tra[1] - tra[0]) < 0.2 * abs(tra[1]), f"defect not stable under dt: {tra}"


def test_entropy_identity_against_finite_difference(rng):
    """dH/dt = −β² Cov_p(s, ṡ) against a central difference of H along a trajectory."""
    x = sample_uniform(30, 3, rng)
    heads = Heads(rng.normal(size=(2, 3, 3)), rng.normal(size=(2, 3, 3)),
                  rng.normal(size=(2, 3, 3)), np.array([0.6, 0.4]))  # general heads
    attn = Attention("softmax", 0.8)
    dt = 1e-3
    states = list(iterate(x, Static.of(heads), attn, T=2 * dt, dt=dt, integrator="rk4"))
    H = [attention_entropy(s.x, heads, attn) for s in states]
    fd = (H[2] - H[0]) / (2 * dt)
    rate = entropy_production(states[1].x, states[1].velocity, heads, attn)
    # central difference error O(dt²) relative to the O(1) rates
    np.testing.assert_allclose(fd, rate, atol=1e-5 * np.abs(rate).max() + 1e-9)


def test_entropy_bounds(rng):
    x = sample_uniform(25, 3, rng)
    heads = Heads.random_symmetric(2, 3, rng)
    ent = attention_entropy(x, heads, Attention("softmax", 1.0))
    assert np.all(ent > 0) and np.all(ent <= np.log(25) + 1e-12)
    ent0 = attention_entropy(x, heads.with_(K=np.zeros_like(heads.K)), Attention("softmax", 1.0))
    np.testing.assert_allclose(ent0, np.log(25), rtol=1e-14)  # zero scores: uniform rows


def test_head_rates_sum_to_power(rng):
    x = sample_uniform(40, 4, rng)
    heads = Heads.random_symmetric(3, 4, rng, scale=0.5, w=1.0)
    attn = Attention("softmax", 1.0)
    fe = evaluate(x, heads, attn)
    m = np.full(40, 1 / 40)
    hr = head_rates(x, m, fe, heads)
    st = slope_terms(x, m, fe, heads, fe.v)
    np.testing.assert_allclose(hr.total, st.power_heads, rtol=1e-12)
    np.testing.assert_allclose(heads.w @ hr.total, st.power, rtol=1e-12)


# ----------------------------------------------------------------------------- schedules
def _bilinear(rng, H=2, d=3, sign=1.0, scale=1.0):
    heads = Heads.random_symmetric(H, d, rng, value_sign=sign, scale=scale)
    return Parametrisation.from_heads(heads, kind="bilinear")


def test_ou_without_noise_relaxes_to_target(rng):
    param, theta0 = _bilinear(rng)
    target = np.broadcast_to(np.eye(3), theta0.shape)
    sch = OrnsteinUhlenbeck(param, theta0, target, kappa=2.0)
    x = sample_uniform(30, 3, rng)
    res = simulate(x, sch, Attention("softmax", 1.0), T=8.0, dt=0.05, integrator="rk4",
                   head_rates=False, clusters=False)
    err = np.abs(res.theta[0] - target).max()
    bound = np.abs(theta0 - target).max() * np.exp(-2.0 * 8.0)
    np.testing.assert_allclose(err, bound, rtol=1e-6)  # closed form e^{-κt}


def test_ou_noise_balance_monte_carlo_mean_is_zero(rng):
    """OU with noise: per-path residual = Itô-Taylor remainder; its MC mean is ≈ 0."""
    param, theta0 = _bilinear(rng, H=2, sign=-1.0)
    sch = OrnsteinUhlenbeck(param, theta0, np.broadcast_to(np.eye(3), theta0.shape), kappa=1.0,
                            sigma0=np.sqrt(2.0), symmetric_noise=True)
    x = sample_uniform(40, 3, rng)
    res = simulate(x, sch, Attention("softmax", 1.0), T=0.5, dt=0.005, integrator="euler",
                   n_paths=24, seed=3, head_rates=False, clusters=False, record_every=100)
    chain = res.balance["chain"]
    mean, se = chain.mean(), chain.std(ddof=1) / np.sqrt(chain.size)
    assert abs(mean) < 4 * se + 1e-3 * np.abs(res.balance["martingale"]).mean(), (
        f"MC mean residual {mean:.3e} ± {se:.3e} not within error of 0")
    # the martingale and Itô terms are not negligible: the check has teeth
    assert np.abs(res.balance["martingale"]).mean() > 20 * abs(mean)
    assert np.abs(res.balance["ito"]).mean() > 5 * se
    # the path statistics: paths differ, deterministic parts agree
    assert res.history["E"].shape[0] == 24
    assert res.std("E")[-1] > 0


def test_oscillating_schedule_matches_closed_form_and_energy_work(rng):
    param, theta_inf = _bilinear(rng, H=3, scale=0.3)
    sch = Oscillating(param, theta_inf, amplitude=0.3, omega=2.0)
    np.testing.assert_allclose(sch.initial_theta()[1] - theta_inf[1],
                               0.3 * np.sin(2 * np.pi / 3))
    x = sample_uniform(40, 3, rng)
    r = [simulate(x, sch, Attention("usa", 1.0), T=1.0, dt=dt, integrator="rk4",
                  head_rates=False, clusters=False).balance["chain_simpson"][0]
         for dt in (0.2, 0.1, 0.05)]
    order = fitted_order([0.2, 0.1, 0.05], r)
    assert order > 3.3, f"time-dependent balance order {order:.2f} (residuals {r})"


def test_relaxed_schedule_tracks_target(rng):
    param, theta0 = _bilinear(rng, H=2, sign=-1.0)
    sch = published_relaxed(theta0, w=0.5, kappa=5.0)
    # after ≫ 1/κ the parameters follow F(t) up to O(|F'|/κ)
    th = sch.heads_at_time(6.0).A
    F = sch.target(6.0)
    assert np.abs(th - F).max() < 3 * 1.5 * 2 / 5.0


def test_layers_jump_energy_is_accounted(rng):
    x = sample_uniform(30, 3, rng)
    h0 = Heads.random_symmetric(2, 3, rng, scale=0.5)
    h1 = Heads.random_symmetric(2, 3, rng, scale=0.5)
    sch = Layers.of([h0, h1], delta=0.35)
    res = [simulate(x, sch, Attention("usa", 1.0), T=1.0, dt=dt, integrator="rk4",
                    head_rates=False, clusters=False) for dt in (0.1, 0.05)]
    assert 0.35 in set(np.round(res[0].steps["t"], 12))
    chain = [abs(r.balance["chain"][0]) for r in res]
    work = abs(res[1].balance["work"][0])  # the energy jump at t = 0.35
    # with the jump accounted for, the residual is the trapezoid error (order 2), ≪ the jump
    assert chain[1] < 0.01 * work, f"residual {chain} vs jump {work}"
    order = np.log2(chain[0] / chain[1])
    assert abs(order - 2) < 0.4, f"balance order with a jump {order:.2f}"


def target_identity_drift(theta, t):  # used through "module:function"
    return np.eye(theta.shape[-1]) - theta


def test_callable_schedule_from_spec(rng):
    from wflow.infra.callables import load_callable

    fn = load_callable("tests.test_particles:target_identity_drift")
    param, theta0 = _bilinear(rng)
    sch = CallableSchedule(param, theta0, fn)
    th = sch.heads_at_time(20.0).A
    # θ(t) − I = e^{−t}(θ₀ − I): at t = 20, |θ − I| <= 1e-8 |θ₀ − I|
    np.testing.assert_allclose(th, np.broadcast_to(np.eye(3), th.shape),
                               atol=1e-8 * np.abs(theta0).max() + 1e-8)
    with pytest.raises(ValueError, match="schedule.function"):
        load_callable("nope", name="schedule.function")


def test_kernel_memory_is_blocked():
    """n = 20 000, H = 8, d = 3: peak extra memory of one evaluation stays far below 2 GB."""
    import tracemalloc

    rng = np.random.default_rng(0)
    x = sample_uniform(20000, 3, rng)
    heads = Heads.random_symmetric(8, 3, rng, scale=0.3)
    from wflow.kernels import kernel_sums

    tracemalloc.start()
    kernel_sums(x[:2000], x, np.full(20000, 1 / 20000), heads.Q, heads.K, beta=1.0,
                kind="softmax")
    peak = tracemalloc.get_traced_memory()[1]
    tracemalloc.stop()
    assert peak < 300e6, f"peak {peak / 1e6:.0f} MB: the pair matrix is not blocked"


def test_entropy_identity_recorded_both_sides(rng):
    x = sample_uniform(40, 3, rng)
    heads = Heads.random_symmetric(2, 3, rng)
    r = simulate(x, heads, Attention("softmax", 1.0), T=0.2, dt=0.005, entropy=True,
                 integrator="rk4")
    rhs, lhs = r.history["entropy_rate"][0, 1:-1], r.history["entropy_rate_fd"][0, 1:-1]
    # central differences of H: error O(dt²·|H'''|) ≪ 1e-3 of the rates here
    np.testing.assert_allclose(lhs, rhs, atol=1e-3 * np.abs(rhs).max())


def test_non_value_aligned_heads_run_without_edi(rng):
    """Heads with V ≠ ±A define no gradient-flow direction: the run succeeds and reports the
    chain-rule balance only (no NaN EDI columns)."""
    x = sample_uniform(30, 3, rng)
    heads = Heads(rng.normal(size=(2, 3, 3)), rng.normal(size=(2, 3, 3)),
                  rng.normal(size=(2, 3, 3)), np.array([0.5, 0.5]))
    r = simulate(x, heads, Attention("softmax", 0.5), T=0.2, dt=0.05)
    assert r.status == "success" and r.sign == 0
    assert "balance_edi" not in r.history and "edi" not in r.balance
    assert abs(r.balance["chain_simpson"][0]) < 1e-6


def test_head_rates_projected_form_is_accurate_at_large_beta():
    """One head αI on orthonormal tokens at large β: own power stays positive (no cancellation)."""
    from wflow.geometry.sphere import orthonormal_tokens

    x = orthonormal_tokens(12, 12)
    heads = Heads.scalar([1.0], 12)
    attn = Attention("softmax", 20.0)
    fe = evaluate(x, heads, attn)
    hr = head_rates(x, np.full(12, 1 / 12), fe, heads)
    # exact: own = Σ_i m_i |P∇ψ|·|P f| ... compare with the tangential velocity power
    st = slope_terms(x, np.full(12, 1 / 12), fe, heads, fe.v)
    assert hr.own[0] > 0
    np.testing.assert_allclose(hr.own[0], st.power, rtol=1e-9)


# ------------------------------------------------------------ compiled Euler path
@pytest.mark.parametrize("kind", KINDS)
@pytest.mark.parametrize("symmetric", [True, False])
@pytest.mark.parametrize("d,H,flow", [(3, 1, "transformer"), (3, 5, "surrogate"),
                                      (2, 2, "transformer")])
def test_euler_path_equals_simulate(rng, kind, symmetric, d, H, flow):
    """The compiled loop is the Euler path of simulate: tokens, energies, integrands and
    running balances agree to 1e-12 relative (only the summation order of the fused
    pass differs: round-off accumulated over 30 steps)."""
    from wflow.particles import euler_path

    needs_compiled(kind)  # euler_path is a compiled loop
    if symmetric:
        heads = Heads.random_symmetric(H, d, rng, scale=0.7, value_sign=-1.0)
    else:
        Q, K = rng.standard_normal((2, H, 2, d)) * 0.6
        heads = Heads(Q, K, rng.standard_normal((H, d, d)), rng.uniform(0.2, 1.0, H))
    x0 = sample_uniform(70, d, rng)
    attn = Attention(kind, 1.2)
    r = simulate(x0, heads, attn, T=0.3, dt=0.01, integrator="euler", flow=flow,
                 record_every=1, head_rates=False, rtol=None)  # the run alone, as euler_path
    p = euler_path(x0, heads, attn, dt=0.01, steps=30, flow=flow, save_every=10)
    assert r.status == p.status == "success"
    np.testing.assert_allclose(p.t, r.t, rtol=0, atol=1e-14)
    np.testing.assert_allclose(p.x, r.x[0], rtol=0, atol=1e-12)
    for key in ("E", "power", "slope2", "speed2", "G2"):
        want = r.history[key][0]
        np.testing.assert_allclose(getattr(p, key), want, rtol=0,
                                   atol=1e-12 * float(np.max(np.abs(want)) + 1e-300),
                                   err_msg=key)
    assert p.sign == r.sign
    assert set(p.balance) == {k.removeprefix("balance_") for k in r.history
                              if k.startswith("balance_")}
    for key, val in p.balance.items():
        np.testing.assert_allclose(val, r.history[f"balance_{key}"][0], rtol=0, atol=1e-12,
                                   err_msg=key)
    assert p.trajectory is not None and p.trajectory.shape == (4, 70, d)
    np.testing.assert_allclose(p.trajectory[0], x0, rtol=0, atol=0)
    np.testing.assert_allclose(np.linalg.norm(p.trajectory, axis=-1), 1.0, rtol=0, atol=4 * EPS)


def test_euler_path_bad_input(rng):
    from wflow.particles import euler_path

    heads = Heads.random_symmetric(2, 3, rng)
    x0 = sample_uniform(10, 3, rng)
    attn = Attention("softmax", 1.0)
    with pytest.raises(ValueError, match="dt"):
        euler_path(x0, heads, attn, dt=0.0, steps=3)
    with pytest.raises(ValueError, match="steps"):
        euler_path(x0, heads, attn, dt=0.1, steps=0)
    with pytest.raises(ValueError, match="save_every"):
        euler_path(x0, heads, attn, dt=0.1, steps=3, save_every=-1)
    with pytest.raises(ValueError, match="flow"):
        euler_path(x0, heads, attn, dt=0.1, steps=3, flow="other")
    with pytest.raises(ValueError, match="d <= 3"):
        euler_path(sample_uniform(10, 4, rng), Heads.random_symmetric(2, 4, rng), attn,
                   dt=0.1, steps=3)
    with pytest.raises(TypeError, match="heads"):
        euler_path(x0, Static.of(heads), attn, dt=0.1, steps=3)
    with pytest.raises(FloatingPointError, match="overflow"):
        euler_path(x0, Heads.random_symmetric(2, 3, rng, scale=500.0), attn, dt=0.1, steps=3)


@pytest.mark.parametrize("done", [0, 3])
def test_euler_path_failure_keeps_finite_records_only(rng, monkeypatch, done):
    """A non-finite step ends the run with status "failed": records stop before it."""
    import wflow.kernels._numba as kn
    from wflow.particles import euler_path

    def fake(xT, *args):
        out, saved = args[-2], args[-1]
        out[:, :done] = 1.0
        out[:, done] = np.nan
        saved[:] = 7.0
        return done

    monkeypatch.setattr(kn, "euler_path", fake)
    heads = Heads.random_symmetric(2, 3, rng, value_sign=-1.0)
    p = euler_path(sample_uniform(10, 3, rng), heads, Attention("softmax", 1.0), dt=0.1,
                   steps=8, save_every=2)
    assert p.status == "failed" and f"step {done}" in p.message
    assert p.E.shape == p.t.shape == p.G2.shape == (done,)
    assert all(v.shape == (done,) for v in p.balance.values())
    assert np.all(np.isfinite(p.E)) and all(np.all(np.isfinite(v)) for v in p.balance.values())
    assert p.trajectory is not None and p.trajectory.shape[0] == (0 if done == 0 else 2)


# ------------------------------------------------- fused particle state (simulate's path)
@pytest.mark.parametrize("kind", KINDS)
@pytest.mark.parametrize("symmetric", [True, False])
@pytest.mark.parametrize("flow", ["transformer", "surrogate"])
def test_particle_field_equals_separate_calls(rng, kind, symmetric, flow):
    """energy.particle_field = evaluate + slope_terms + head_energies to 1e-12 (one pass)."""
    from wflow.energy import particle_field

    needs_compiled(kind)  # particle_field is the fused compiled pass
    n, d, H = 120, 3, 3
    x = sample_uniform(n, d, rng)
    m = rng.uniform(0.5, 1.0, n)
    m /= m.sum()
    if symmetric:
        heads = Heads.random_symmetric(H, d, rng, scale=0.7, value_sign=-1.0)
    else:
        Q, K = rng.standard_normal((2, H, 2, d)) * 0.6
        heads = Heads(Q, K, rng.standard_normal((H, d, d)), rng.uniform(0.2, 1.0, H))
    attn = Attention(kind, 1.1)
    fe = evaluate(x, heads, attn, m=m)
    vel = fe.v if flow == "transformer" else fe.vhat
    st = slope_terms(x, m, fe, heads, vel)
    E = float(heads.w @ head_energies(fe, m, attn))
    fe2, st2, E2 = particle_field(x, m, heads, attn, flow=flow)
    for name in fe._fields:
        a, b = getattr(fe2, name), getattr(fe, name)
        np.testing.assert_allclose(a, b, rtol=0, atol=1e-12 * float(np.max(np.abs(b))),
                                   err_msg=name)
    for name in ("power", "slope2", "speed2", "G2"):
        a, b = getattr(st2, name), getattr(st, name)
        assert abs(a - b) <= 1e-12 * (abs(b) + float(np.max(np.abs(st.power_heads)))), name
    assert E2 == pytest.approx(E, rel=1e-12)


def test_simulate_fused_path_equals_numpy_backend(rng):
    """simulate with the default back-end (fused pass, d = 3) against the NumPy reference
    back-end (separate evaluate / slope_terms): same run to 1e-12; the log says 'direct'."""
    heads = Heads.random_symmetric(4, 3, rng, scale=0.6, value_sign=-1.0)
    x0 = sample_uniform(80, 3, rng)
    attn = Attention("softmax", 1.0)
    kw = {"T": 0.3, "dt": 0.05, "integrator": "rk4", "head_rates": True}
    a = simulate(x0, heads, attn, **kw)
    b = simulate(x0, heads, attn, kernel_backend="numpy", **kw)
    assert a.status == b.status == "success"
    np.testing.assert_allclose(a.x, b.x, rtol=0, atol=1e-12)
    for key in ("E", "G2", "slope2", "speed2", "power", "balance_edi", "dEh_dt"):
        want = b.history[key]
        np.testing.assert_allclose(a.history[key], want, rtol=0,
                                   atol=1e-12 * float(np.max(np.abs(want))), err_msg=key)
    calls = a.extra["kernel"]["calls"]
    assert set(calls) == {"direct"}, calls
    assert b.extra["kernel"]["calls"].keys() == {"numpy"}


def _copy_at(a: np.ndarray, offset: int) -> np.ndarray:
    """Copy of ``a`` whose data start ``offset`` bytes past a 64-byte boundary."""
    buf = np.empty(a.size + 16)
    k = next(i for i in range(16) if (buf.ctypes.data + 8 * i) % 64 == offset)
    out = buf[k:k + a.size].reshape(a.shape)
    out[...] = a
    return out


def test_fused_step_is_bitwise_reproducible_whatever_the_alignment(rng):
    """The same state gives the same bits wherever NumPy put the arrays (the compiled
    reductions' order depends on alignment; wflow.kernels.aligned pins it): reruns and
    serial vs MPI runs agree exactly."""
    from wflow.energy import particle_field
    from wflow.kernels import kernel_sums

    heads = Heads.random_symmetric(3, 3, rng, scale=0.6)
    attn = Attention("softmax", 1.5)
    r = simulate(sample_uniform(100, 3, rng), heads, attn, T=1.0, dt=0.05, integrator="rk4",
                 save_trajectory=True, head_rates=False, clusters=False)
    m = np.full(100, 0.01)
    for x in r.trajectory[0][::3]:
        ref = particle_field(_copy_at(x, 0), m, heads, attn)
        ref_sums = kernel_sums(_copy_at(x, 0), x, m, heads.Q, heads.K, beta=1.5, kind="softmax",
                               backend="direct")
        for off in (8, 16, 24, 32, 40, 48, 56):
            fe, st, E = particle_field(_copy_at(x, off), _copy_at(m, off), heads, attn)
            assert np.array_equal(fe.v, ref[0].v) and E == ref[2] and st.G2 == ref[1].G2
            s = kernel_sums(_copy_at(x, off), _copy_at(x, off), _copy_at(m, off), heads.Q,
                            heads.K, beta=1.5, kind="softmax", backend="direct")
            assert np.array_equal(s.Z, ref_sums.Z) and np.array_equal(s.Y, ref_sums.Y)
