"""[MH] multi-head formulas and checks (wflow.multihead, docs/theory.md §6)."""

from __future__ import annotations

import numpy as np
import pytest

from wflow.attention.heads import Attention, Heads
from wflow.diagnostics import attention_entropy, head_rates, radial_shadows
from wflow.energy import evaluate, slope_terms
from wflow.geometry.sphere import equiangular_tokens, orthonormal_tokens, sample_uniform
from wflow.multihead import (
    beta_star,
    beta_star_blocks,
    beta_star_exact,
    c_star,
    dominance_cosine,
    dominance_root,
    early_rate,
    equiangular_entropy,
    equiangular_rate,
    equiangular_rhs,
    equiangular_time,
    lambda_c,
    radial_dominance,
    relu_equiangular_time,
    solve_equiangular,
)
from wflow.particles import simulate
from wflow.studies.helpers import (
    approx_orthogonal_heads,
    block_heads,
    clustering_time,
    fit_decay_rate,
    fit_early_rate,
    head_overlap,
    particle_clustering_time,
    reduce_to_span,
    spread_tokens,
)

from .conftest import EPS, KINDS

GOLDEN = (1 + np.sqrt(5)) / 2


# ------------------------------------------------------------------------------ c*, β*
def test_c_star_values_and_quadratic():
    H = np.arange(1, 50)
    c = c_star(H)
    np.testing.assert_allclose(c[:2], [1.0, 1 / GOLDEN], rtol=4 * EPS)
    # defining quadratic c² + (H−1)c − 1 = 0; its terms are O(1): round-off of a few eps
    np.testing.assert_allclose(c**2 + (H - 1) * c - 1, 0, atol=8 * EPS)
    assert np.all(np.diff(c) < 0) and np.all(c > 0)


def test_beta_star_matches_naive_formula_and_broadcasts():
    H = np.array([2, 3, 4, 8])[:, None]
    n = np.array([16, 32, 1000])[None, :]
    alpha = 0.7
    got = beta_star(H, n, alpha)
    assert got.shape == (4, 3)
    c = (np.sqrt((H - 1.0) ** 2 + 4) - (H - 1.0)) / 2
    naive = np.log(c**2 * (n - 1) / (1 - c**2)) / (2 * alpha)
    # the library uses 1 − c² = (H−1)c (no cancellation); the naive form loses ~1e-15
    np.testing.assert_allclose(got, naive, rtol=1e-12)
    assert beta_star(1, 10, 1.0) == np.inf
    assert beta_star_exact(1, 10, 1.0) == np.inf and beta_star_blocks(1, 10, 1.0) == np.inf
    # golden ratio case: c*(2)²/(1 − c*(2)²) = 1/φ
    np.testing.assert_allclose(beta_star(2, 11, 1.0), 0.5 * np.log(10 / GOLDEN), rtol=1e-14)
    # β* <= 0 when c*² <= 1/n: dominance fails at every β > 0
    assert beta_star(4, 8, 1.0) < 0
    assert np.all(beta_star(np.arange(2, 6), 64, 1.0) < beta_star_exact(np.arange(2, 6), 64, 1.0))


@pytest.mark.parametrize("bad, name", [
    (dict(H=0, n=10, alpha=1.0), "H"), (dict(H=1.5, n=10, alpha=1.0), "H"),
    (dict(H=np.nan, n=10, alpha=1.0), "H"), (dict(H=2, n=1, alpha=1.0), "n"),
    (dict(H=2, n=5.5, alpha=1.0), "n"), (dict(H=2, n=10, alpha=0.0), "alpha"),
    (dict(H=2, n=10, alpha=-1.0), "alpha"), (dict(H=2, n=10, alpha=np.inf), "alpha"),
])
def test_beta_star_domain_errors(bad, name):
    for f in (beta_star, beta_star_exact, beta_star_blocks):
        with pytest.raises(ValueError, match=f"argument {name} out of domain"):
            f(**bad)


def test_beta_star_nan_mode_marks_only_bad_entries():
    got = beta_star([2, 0, 3, 2], [10, 10, 1, 10], [1.0, 1.0, 1.0, -2.0], errors="nan")
    assert np.isfinite(got[0]) and np.all(np.isnan(got[1:]))
    assert np.isnan(c_star([0, 2], errors="nan")[0])
    with pytest.raises(ValueError, match="errors"):
        beta_star(2, 10, 1.0, errors="ignore")


# ------------------------------------------------------------------ radial dominance
@pytest.mark.parametrize("H", [2, 3, 4])
def test_margin_changes_sign_at_beta_star(H, rng):
    n, alpha = 24, 1.3
    x = orthonormal_tokens(n, n + 3, rng)  # rotated, embedded in d > n
    heads = Heads.scalar([alpha] * H, n + 3)
    xtol = 1e-12
    # Brent: |root − β*| <= xtol + 4 eps β*; round-off of the margin (~1e-16 with O(1) slope)
    # moves the root by ~1e-15: allow 10x the bracket tolerance
    tol = lambda b: 10 * (xtol + 4 * EPS * b) + 1e-13  # noqa: E731
    bs = float(beta_star(H, n, alpha))
    assert abs(dominance_root(x, heads, bracket=(bs / 3, 3 * bs), xtol=xtol) - bs) <= tol(bs)
    be = float(beta_star_exact(H, n, alpha))
    root_e = dominance_root(x, heads, bracket=(be / 3, 3 * be), which="margin_exact", xtol=xtol)
    assert abs(root_e - be) <= tol(be)
    xb, hb = spread_tokens(n, H), block_heads(H, H * n, alpha)
    bb = float(beta_star_blocks(H, n, alpha))
    assert abs(dominance_root(xb, hb, bracket=(bb / 3, 3 * bb), xtol=xtol) - bb) <= tol(bb)
    below = radial_dominance(x, heads, Attention("softmax", 0.9 * bs))
    above = radial_dominance(x, heads, Attention("softmax", 1.1 * bs))
    assert np.all(below.holds) and not np.any(above.holds)


def test_cosine_of_head_output(rng):
    n, alpha, beta = 10, 0.8, 1.7
    x = orthonormal_tokens(n, n, rng)
    fe = evaluate(x, Heads.scalar([alpha], n), Attention("softmax", beta))
    cos = np.einsum("nd,nd->n", fe.f[0], x) / np.linalg.norm(fe.f[0], axis=1)
    np.testing.assert_allclose(cos, dominance_cosine(beta, n, alpha), rtol=1e-14)


def test_single_head_has_no_cross_term(rng):
    x = orthonormal_tokens(12, 12, rng)
    for beta in (0.1, 1.0, 10.0, 30.0):
        rd = radial_dominance(x, Heads.scalar([1.0], 12), Attention("softmax", beta))
        assert rd.cross_bound[0] == 0 and rd.cross_radial[0] == 0 and rd.holds[0]
        # own = Z |P f|² = mean(Z) (n−1)/(e^β + n − 1)² for orthonormal tokens: accurate even
        # where the outputs are radial to 1e-13 (projected evaluation, no cancellation)
        Zbar = (np.exp(beta) + 11) / 12
        np.testing.assert_allclose(rd.own[0], Zbar * 11 / (np.exp(beta) + 11) ** 2, rtol=1e-3)


def test_radial_dominance_split_against_independent_sums(rng):
    n, d = 15, 4
    x = sample_uniform(n, d, rng)
    heads = Heads.random_symmetric(3, d, rng, scale=0.7, w=np.array([0.5, 1.0, 0.3]))
    attn = Attention("softmax", 1.2)
    rd = radial_dominance(x, heads, attn)
    m = np.full(n, 1 / n)
    fe = evaluate(x, heads, attn)
    # total per-head rate = ∫<∇ψ_h, v> from energy.slope_terms (independent code path)
    pw = slope_terms(x, m, fe, heads, fe.v).power_heads
    np.testing.assert_allclose(rd.rate, pw, rtol=1e-12, atol=1e-14)
    hr = head_rates(x, m, fe, heads)
    np.testing.assert_allclose(rd.own, hr.own, rtol=1e-12)
    np.testing.assert_allclose(rd.cross_radial, hr.cross_radial, rtol=1e-15)
    # naive per-token loop for the Cauchy–Schwarz bound
    a = radial_shadows(x, fe)
    R = np.zeros(heads.H)
    for h in range(heads.H):
        for i in range(n):
            others = sum(heads.w[g] * abs(a[g, i]) for g in range(heads.H) if g != h)
            R[h] += np.linalg.norm(fe.grad_psi[h, i]) * others / n
    np.testing.assert_allclose(rd.cross_bound, R, rtol=1e-13)
    assert np.all(np.abs(rd.cross_radial) <= rd.cross_bound * (1 + 1e-14))
    assert np.all(rd.margin_pointwise * n <= rd.margin + 1e-12)  # min <= mean
    # certificate: dE_h/dt >= own + cross_direct − R
    assert np.all(rd.rate >= rd.margin_general - 1e-13)


def test_orthogonal_heads_have_no_direct_cross_term(rng):
    H, n = 3, 5
    heads = block_heads(H, H * n, 1.0)
    assert head_overlap(heads) == 0
    x = sample_uniform(n, H * n, rng)
    rd = radial_dominance(x, heads, Attention("softmax", 2.0))
    np.testing.assert_allclose(rd.cross_direct, 0, atol=1e-15)


@pytest.mark.parametrize("delta", [0.0, 1e-3, 0.05])
def test_approx_orthogonal_heads_overlap_and_direct_bound(delta, rng):
    H, d, scale = 3, 12, 2.0
    heads = approx_orthogonal_heads(H, d, scale=scale, delta=delta * scale**2, rng=rng)
    assert heads.is_symmetric() and heads.value_alignment() == 1
    np.testing.assert_allclose(np.linalg.norm(heads.A, 2, axis=(1, 2)), scale, rtol=1e-12)
    np.testing.assert_allclose(head_overlap(heads), delta * scale**2, rtol=1e-8, atol=1e-14)
    # |cross_direct_h| <= δ ∫ |Y_h| Σ_{h'≠h} w_h' |Y_h'| / Z_h'  (‖A_h A_h'‖ <= δ)
    x = sample_uniform(20, d, rng)
    attn = Attention("softmax", 1.0)
    rd = radial_dominance(x, heads, attn)
    fe = evaluate(x, heads, attn)
    Yn = np.linalg.norm(fe.Y, axis=2)
    fn = heads.w[:, None] * Yn / fe.Z
    bound = [np.mean(Yn[h] * (fn.sum(0) - fn[h])) * head_overlap(heads) for h in range(H)]
    assert np.all(np.abs(rd.cross_direct) <= np.asarray(bound) * (1 + 1e-12) + 1e-15)


def test_approx_orthogonal_heads_bad_input(rng):
    with pytest.raises(ValueError, match="delta"):
        approx_orthogonal_heads(2, 4, scale=1.0, delta=0.6, rng=rng)
    with pytest.raises(ValueError, match="scale"):
        approx_orthogonal_heads(2, 4, scale=0.0, delta=0.0, rng=rng)


# --------------------------------------------------------------------------- φ and λ_c
def test_equiangular_rate_and_early_rate():
    lam = np.array([0.1, 1.0, 5.0])
    rate = equiangular_rate
    np.testing.assert_allclose(rate(lam, 1.5, 7), 2 * lam / (np.exp(1.5 * lam) + 6), rtol=1e-14)
    assert rate(1e4, 1.0, 5) == 0.0  # no overflow for huge λβ (strict errstate in conftest)
    assert early_rate([1.0, 2.0], 1.0, 4) == pytest.approx(float(rate(1.0, 1, 4) + rate(2.0, 1, 4)),
                                                           rel=1e-15)
    with pytest.raises(ValueError, match="argument n"):
        equiangular_rate(1.0, 1.0, 1)


@pytest.mark.parametrize("n, beta", [(2, 1.0), (8, 1.0), (8, 3.0), (1000, 0.5)])
def test_lambda_c_is_inflection_point(n, beta):
    lc = float(lambda_c(n, beta))
    s = beta * lc
    assert s > 2
    # defining equation (s − 2) e^s = (n − 1)(s + 2), relative residual at round-off
    np.testing.assert_allclose((s - 2) * np.exp(s), (n - 1) * (s + 2), rtol=1e-12)

    def d2(lam, h):  # central second difference
        rate = equiangular_rate
        return (rate(lam + h, beta, n) - 2 * rate(lam, beta, n) + rate(lam - h, beta, n)) / h**2

    h = 1e-3 * lc
    assert d2(0.9 * lc, h) < 0 < d2(1.1 * lc, h)
    assert np.all(np.diff(np.sign([d2(t * lc, h) for t in np.linspace(0.2, 3, 40)])) >= 0)


def test_lambda_c_vectorised():
    got = lambda_c([2, 8], [1.0, 2.0])
    np.testing.assert_allclose(got, [float(lambda_c(2, 1.0)), float(lambda_c(8, 2.0))])


# ------------------------------------------------------------------ equiangular reduction
def test_equiangular_rhs_limits():
    lam, beta, n = [0.7, 1.5], 1.0, 6
    assert float(equiangular_rhs(0.0, lam, beta, n)) == pytest.approx(early_rate(lam, beta, n),
                                                                      rel=1e-15)
    g = 1 - 1e-9
    # F(γ)/(1 − γ) = 2Λ + O(1 − γ)
    np.testing.assert_allclose(equiangular_rhs(g, lam, beta, n) / (1 - g), 2 * sum(lam),
                               rtol=1e-7)
    assert equiangular_rhs(0.0, lam, beta, n, kind="relu") == 0
    assert equiangular_rhs(0.5, lam, beta, n, kind="usa") > 0
    with pytest.raises(ValueError, match="lambdas"):
        equiangular_rhs(0.0, [-1.0], beta, n)


def test_equiangular_particles_softmax_rates(rng):
    """Stay equiangular; follow the 1-D ODE; early rate Σφ(λ_h); late decay rate 2Λ."""
    n, lam, beta = 6, [0.7, 1.5], 1.0
    x0 = equiangular_tokens(n, 0.0, d=n + 2, rng=rng)
    T = 12.0 / (2 * sum(lam)) + 2.0
    res = simulate(x0, Heads.scalar(lam, n + 2), Attention("softmax", beta), T=T, dt=0.01,
                   save_trajectory=True, clusters=False, head_rates=False, entropy=True)
    assert res.status == "success"
    X = res.trajectory[0]
    G = np.einsum("kid,kjd->kij", X, X)
    off = G[:, *np.triu_indices(n, 1)]
    # exact permutation symmetry: spread of the off-diagonal Gram entries at round-off
    assert np.max(off.max(1) - off.min(1)) < 1e-13
    gamma = res.history["mean_inner"][0]
    ode = solve_equiangular(0.0, lam, beta, n, res.t)
    # RK4, dt = 0.01: global error ~ C dt⁴ ≈ 1e-9
    np.testing.assert_allclose(gamma, ode.gamma, atol=1e-8)
    # degree-6 fit on [0, 0.1]: truncation ~1e-8 relative (see fit_early_rate)
    np.testing.assert_allclose(fit_early_rate(res.t, gamma, tau=0.1), early_rate(lam, beta, n),
                               rtol=1e-6)
    k, used = fit_decay_rate(res.t, 1 - gamma, lo=1e-8, hi=1e-4)
    assert used >= 20
    # correction O(1 − γ) <= 1e-4 · βΛ in the window
    np.testing.assert_allclose(k, 2 * sum(lam), rtol=5e-3)
    # entropy: non-decreasing to log n, equal to the closed form along the ODE
    ent = res.history["entropy"][0]
    assert np.min(np.diff(ent, axis=0)) >= -1e-12
    closed = np.stack([equiangular_entropy(gamma, lh, beta, n) for lh in lam], axis=1)
    np.testing.assert_allclose(ent, closed, atol=1e-12)
    np.testing.assert_allclose(ent[-1], np.log(n), atol=1e-6)


@pytest.mark.parametrize("kind", ["relu", "usa"])
def test_equiangular_particles_other_kinds(kind, rng):
    n, lam, beta, g0 = 5, [0.8, 1.2], 1.0, 0.2
    x0 = equiangular_tokens(n, g0, d=n, rng=rng)
    res = simulate(x0, Heads.scalar(lam, n), Attention(kind, beta), T=1.0, dt=0.01,
                   clusters=False, head_rates=False)
    ode = solve_equiangular(g0, lam, beta, n, res.t, kind=kind)
    np.testing.assert_allclose(res.history["mean_inner"][0], ode.gamma, atol=1e-9)


def test_equiangular_times_agree():
    n, beta = 8, 1.0
    for g0 in (1e-3, 0.05):
        closed = float(relu_equiangular_time(g0, 0.9, [1.0, 0.5], beta, n))
        quad = equiangular_time(g0, 0.9, [1.0, 0.5], beta, n, kind="relu")
        t = np.linspace(0, 1.5 * closed, 30001)
        sol = solve_equiangular(g0, [1.0, 0.5], beta, n, t, kind="relu")
        np.testing.assert_allclose(quad, closed, rtol=1e-10)
        # ODE sampled every 5e-4·T, linear interpolation: O(dt²) ≈ 1e-7 relative
        np.testing.assert_allclose(clustering_time(t, sol.gamma, 0.9), closed, rtol=1e-6)
    # ReLU: dT/d ln d → n/(4βΣλ²) for γ0 = d^{-1/2}, d ≫ n²
    d = np.array([1e12, 1e14])
    T = relu_equiangular_time(d**-0.5, 0.9, [1.0], beta, n)
    np.testing.assert_allclose(np.diff(T) / np.diff(np.log(d)), n / 4, rtol=1e-4)
    with pytest.raises(ValueError, match="ReLU"):
        equiangular_time(0.0, 0.9, [1.0], beta, n, kind="relu")


def test_equiangular_entropy_closed_form(rng):
    n, lam, beta = 7, 1.3, 2.0
    g = np.linspace(-0.1, 1.0, 50)
    H = equiangular_entropy(g, lam, beta, n)
    assert np.all(np.diff(H) > 0)
    np.testing.assert_allclose(H[-1], np.log(n), rtol=1e-15)
    x = equiangular_tokens(n, 0.3, d=n, rng=rng)
    direct = attention_entropy(x, Heads.scalar([lam], n), Attention("softmax", beta))
    np.testing.assert_allclose(direct, equiangular_entropy(0.3, lam, beta, n), rtol=1e-13)


def test_solve_equiangular_bad_input():
    with pytest.raises(ValueError, match="gamma0"):
        solve_equiangular(1.0, [1.0], 1.0, 4, np.linspace(0, 1, 3))
    with pytest.raises(ValueError, match="t:"):
        solve_equiangular(0.0, [1.0], 1.0, 4, np.array([0.5, 1.0]))


# ------------------------------------------------------------------------- clustering time
def test_clustering_time_interpolation():
    t = np.linspace(0, 2, 21)
    assert clustering_time(t, 0.5 * t, 0.73) == pytest.approx(1.46, rel=1e-14)
    assert np.isnan(clustering_time(t, 0.1 * t, 0.9))
    assert clustering_time(t, np.ones_like(t), 0.9) == 0.0
    with pytest.raises(ValueError, match="equal length"):
        clustering_time(t, t[:-1], 0.5)


def test_reduce_to_span_preserves_dynamics(rng):
    n, d = 5, 40
    x = sample_uniform(n, d, rng)
    y = reduce_to_span(x)
    assert y.shape == (n, n)
    np.testing.assert_allclose(y @ y.T, x @ x.T, atol=1e-14)
    for kind in KINDS:
        attn = Attention(kind, 1.0)
        rx = simulate(x, Heads.scalar([1.0, 0.5], d), attn, T=1.0, dt=0.05, clusters=False,
                      head_rates=False)
        ry = simulate(y, Heads.scalar([1.0, 0.5], n), attn, T=1.0, dt=0.05, clusters=False,
                      head_rates=False)
        # same flow in another orthonormal basis: Gram matrices agree to round-off
        np.testing.assert_allclose(rx.x[0] @ rx.x[0].T, ry.x[0] @ ry.x[0].T, atol=1e-12)


def test_particle_clustering_time_softmax_and_stall(rng):
    n, g0 = 6, 0.05
    x0 = equiangular_tokens(n, g0, d=n, rng=rng)
    r = particle_clustering_time(x0, Heads.scalar([1.0], n), Attention("softmax", 1.0),
                                 threshold=0.9, dt=0.02, T_max=20)
    assert r.status == "success"
    # RK4 + linear interpolation of the crossing (error ~dt² q''/q')
    np.testing.assert_allclose(r.time, equiangular_time(g0, 0.9, [1.0], 1.0, n), rtol=1e-3)
    # ReLU: two antipodal tokens do not interact (max(0, s) = 0): an equilibrium
    x = np.array([[1.0, 0.0], [-1.0, 0.0]])
    with pytest.warns(UserWarning, match="stalled"):
        r = particle_clustering_time(x, Heads.scalar([1.0], 2), Attention("relu", 1.0),
                                     threshold=0.5, dt=0.1, T_max=5)
    assert r.status == "stalled" and np.isnan(r.time)


def test_fit_helpers_need_samples():
    t = np.linspace(0, 1, 5)
    with pytest.raises(ValueError, match="samples"):
        fit_early_rate(t, t, tau=0.5)
    with pytest.raises(ValueError, match="fewer than 3"):
        fit_decay_rate(t, np.exp(-t), lo=1e-9, hi=1e-8)
