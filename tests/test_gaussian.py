"""Gaussian dynamics (docs/theory.md §7): moment ODE, closed forms, blow-up, equilibria,
classifier, reachability, particles."""

from __future__ import annotations

import math
import warnings

import numpy as np
import pytest
import scipy.integrate

from wflow.gaussian import (
    CallableParams,
    ConstantParams,
    GaussianParams,
    LayerParams,
    blowup_time_closed_form,
    blowup_time_isotropic,
    blowup_time_scalar,
    bures_map,
    bures_wasserstein_distance,
    integrate_moments,
    moment_rhs,
    particle_velocity,
    psd_factor,
    riccati_closed_form,
)
from wflow.gaussian.classify import classify, phase_diagram
from wflow.gaussian.reach import plan_controls, principal_rotation, reach
from wflow.gaussian.riccati import (
    equilibria,
    riccati_linearisation,
    riccati_residual,
    sym_basis,
)
from wflow.kernels import kernel_sums

from .conftest import EPS


def spd(rng, d, scale=1.0, floor=0.1):
    X = rng.normal(size=(d, d))
    return scale * (X @ X.T / d + floor * np.eye(d))


def naive_moments(params, m0, S0, T, t_eval):
    """Independent reference: the moment ODE on (m, vec Σ) directly, DOP853 at tight tolerance."""
    d = m0.size

    def f(t, y):
        dm, dS = moment_rhs(params, y[:d], y[d:].reshape(d, d))
        return np.concatenate([dm, dS.ravel()])

    sol = scipy.integrate.solve_ivp(f, (0, T), np.concatenate([m0, S0.ravel()]), t_eval=t_eval,
                                    method="DOP853", rtol=1e-12, atol=1e-14)
    return sol.y[:d].T, sol.y[d:].T.reshape(-1, d, d)


# ----------------------------------------------------------------------------- Gaussian identity
def test_attention_of_gaussian_is_tilted_mean(rng):
    """∫ y e^{<Bx,y>} dN(m,Σ) / ∫ e^{<Bx,y>} dN(m,Σ) = m + ΣBx (Gauss–Hermite, exact quadrature
    for the tilted Gaussian up to the truncation of the rule)."""
    d = 2
    m = np.array([0.3, -0.2])
    S = np.array([[0.4, 0.1], [0.1, 0.25]])
    B = np.array([[0.5, -0.2], [0.3, 0.4]])
    z, w = np.polynomial.hermite_e.hermegauss(40)  # weight e^{-z²/2}
    Z1, Z2 = np.meshgrid(z, z, indexing="ij")
    W = np.outer(w, w).ravel()
    Lc = np.linalg.cholesky(S)
    y = m + np.stack([Z1.ravel(), Z2.ravel()], 1) @ Lc.T
    x = rng.normal(size=(5, d))
    ks = kernel_sums(x, y, W / W.sum(), B[None], np.eye(d)[None], beta=1.0, kind="softmax")
    att = ks.Y[0] / ks.Z[0][:, None]
    # 40-point rule integrates the (entire) tilted integrand to ~machine precision
    np.testing.assert_allclose(att, m + x @ (S @ B).T, rtol=0, atol=1e-12)


# ----------------------------------------------------------------------------- validation
def test_params_validation_names_argument():
    with pytest.raises(ValueError, match="V: expected a scalar or a \\(2, 2\\) matrix"):
        GaussianParams.make(2, V=np.ones((3, 3)))
    with pytest.raises(ValueError, match="B: contains NaN"):
        GaussianParams.make(2, B=np.array([[np.nan, 0], [0, 1]]))
    with pytest.raises(ValueError, match="b: a scalar is only accepted for the zero vector"):
        GaussianParams.make(2, b=1.0)
    p = GaussianParams.make(2, A=0.5)
    with pytest.raises(ValueError):
        p.A[0, 0] = 1.0  # read-only


def test_psd_factor(rng):
    L = rng.normal(size=(4, 2))
    S = L @ L.T
    F = psd_factor(S)
    assert F.shape == (4, 2)
    np.testing.assert_allclose(F @ F.T, S, atol=100 * EPS * np.abs(S).max())
    with pytest.raises(ValueError, match="Sigma: not positive semi-definite"):
        psd_factor(np.diag([1.0, -0.5]))
    with pytest.raises(ValueError, match="Sigma0: not symmetric"):
        psd_factor(np.array([[1.0, 0.5], [0.0, 1.0]]), name="Sigma0")


# ----------------------------------------------------------------------------- moment ODE
@pytest.mark.parametrize("method", ["Radau", "LSODA", "DOP853"])
def test_integrator_matches_closed_form_general_A(rng, method):
    """V = vI: Σ(t) = e^{At} L₀(I − L₀ᵀG(t)L₀)^{-1}L₀ᵀe^{Aᵀt} (Bernoulli), non-normal A."""
    d = 3
    K = rng.normal(size=(d, d))
    # V = −0.7 I and B with positive definite symmetric part: C = v(B + Bᵀ) ≺ 0, no blow-up
    p = GaussianParams.make(d, A=0.4 * rng.normal(size=(d, d)), V=-0.7,
                            B=spd(rng, d, 0.5) + 0.3 * (K - K.T), b=rng.normal(size=d))
    S0 = spd(rng, d)
    tr = integrate_moments(p, rng.normal(size=d), S0, 2.0, n_out=9, method=method, rtol=1e-10,
                           atol=1e-13)
    assert tr.status == "completed"
    ex = riccati_closed_form(p, S0, tr.t)
    # global error of an rtol = 1e-10 integration over O(1) time: ~1e-8 relative
    np.testing.assert_allclose(tr.Sigma, ex, rtol=0, atol=1e-7 * np.abs(ex).max())
    np.testing.assert_array_equal(tr.Sigma, np.swapaxes(tr.Sigma, 1, 2))


def test_integrator_matches_naive_general_V(rng):
    """General (non-scalar) V: the factorised integrator agrees with a naive vec-Σ integration."""
    d = 3
    p = GaussianParams.make(d, A=0.3 * rng.normal(size=(d, d)), V=0.5 * rng.normal(size=(d, d)),
                            B=0.5 * rng.normal(size=(d, d)), b=rng.normal(size=d))
    m0, S0 = rng.normal(size=d), spd(rng, d, 0.5)
    tr = integrate_moments(p, m0, S0, 1.5, n_out=7, rtol=1e-11, atol=1e-13)
    m_ref, S_ref = naive_moments(p, m0, S0, 1.5, tr.t)
    np.testing.assert_allclose(tr.m, m_ref, atol=1e-8 * max(1, np.abs(m_ref).max()))
    np.testing.assert_allclose(tr.Sigma, S_ref, atol=1e-8 * np.abs(S_ref).max())


def test_rank_deficient_sigma_keeps_rank_and_psd(rng):
    d, r = 4, 2
    p = GaussianParams.make(d, A=0.3 * rng.normal(size=(d, d)), V=0.6 * rng.normal(size=(d, d)),
                            B=0.4 * rng.normal(size=(d, d)))
    L = rng.normal(size=(d, r))
    S0 = L @ L.T
    tr = integrate_moments(p, np.zeros(d), S0, 1.0, n_out=11)
    assert tr.rank == r and tr.status == "completed"
    lam = np.linalg.eigvalsh(tr.Sigma)
    # exactly rank r: Σ = LLᵀ with L (d, r); the d − r smallest eigenvalues are round-off
    assert np.all(np.abs(lam[:, : d - r]) <= 1e3 * EPS * lam[:, -1:]), lam[:, : d - r]
    assert np.all(lam[:, d - r] > 1e-3 * lam[:, -1]), "rank dropped"
    # same result from the V = vI closed form (rank-deficient Σ₀)
    q = p.replace(V=0.8)
    tr2 = integrate_moments(q, np.zeros(d), S0, 1.0, n_out=5, rtol=1e-11, atol=1e-13)
    ex = riccati_closed_form(q, S0, tr2.t)
    np.testing.assert_allclose(tr2.Sigma, ex, atol=1e-8 * np.abs(ex).max())


def test_zero_covariance_is_rank_zero(rng):
    p = GaussianParams.make(2, A=-0.5, V=1.0, B=1.0, b=[1.0, 0.0])
    tr = integrate_moments(p, np.array([1.0, 1.0]), np.zeros((2, 2)), 1.0, n_out=3)
    assert tr.rank == 0
    np.testing.assert_array_equal(tr.Sigma, 0.0)
    # ṁ = (A + V)m + b = 0.5 m + b exactly
    ex = np.exp(0.5) * np.array([1.0, 1.0]) + (np.exp(0.5) - 1) / 0.5 * np.array([1.0, 0.0])
    np.testing.assert_allclose(tr.final_m, ex, rtol=1e-8)


def test_layer_schedule_equals_sequential_runs(rng):
    d = 2
    p1 = GaussianParams.make(d, A=0.3 * rng.normal(size=(d, d)), V=0.5, B=-0.4)
    p2 = GaussianParams.make(d, A=-0.2, V=0.3 * rng.normal(size=(d, d)), B=0.3, b=[0.1, 0.2])
    m0, S0 = rng.normal(size=d), spd(rng, d)
    sched = LayerParams([p1, p2], [0.7, 0.5])
    tr = integrate_moments(sched, m0, S0, 1.2, t_eval=np.array([0.0, 0.7, 1.2]), rtol=1e-11,
                           atol=1e-13)
    a = integrate_moments(p1, m0, S0, 0.7, n_out=2, rtol=1e-11, atol=1e-13)
    b = integrate_moments(p2, a.final_m, a.final_Sigma, 0.5, n_out=2, rtol=1e-11, atol=1e-13)
    np.testing.assert_allclose(tr.Sigma[1], a.final_Sigma, rtol=1e-9)
    np.testing.assert_allclose(tr.Sigma[2], b.final_Sigma, rtol=1e-8)
    np.testing.assert_allclose(tr.m[2], b.final_m, rtol=1e-8)


def test_callable_schedule_scalar_closed_form():
    """σ̇ = 2v(t)b(t)σ² ⇒ 1/σ(t) = 1/σ₀ − 2∫₀ᵗ v b ds; here v(t) = cos t, b = 0.5."""
    sched = CallableParams(lambda t: (0.0, 0.0, math.cos(t), 0.5), 1)
    s0 = 0.8
    tr = integrate_moments(sched, [0.0], [[s0]], 3.0, n_out=7, rtol=1e-11, atol=1e-13)
    ex = 1.0 / (1 / s0 - np.sin(tr.t))
    np.testing.assert_allclose(tr.Sigma[:, 0, 0], ex, rtol=1e-8)


# ----------------------------------------------------------------------------- blow-up
@pytest.mark.parametrize("a,v,b,s0", [(0.0, 1.0, 0.5, 2.0), (0.3, 0.7, 0.4, 0.9),
                                      (-0.3, 1.0, 0.5, 2.0), (0.0, -1.0, -2.0, 0.25)])
def test_scalar_blowup_time_matches_closed_form(a, v, b, s0):
    p = GaussianParams.make(1, A=a, V=v, B=b)
    tr = integrate_moments(p, [0.3], [[s0]], 10.0)
    t_star = blowup_time_scalar(a, v, b, s0)
    if a == 0:
        assert t_star == pytest.approx(1 / (2 * v * b * s0), rel=1e-14)
    assert tr.status == "blowup", tr.message
    assert np.all(np.isfinite(tr.Sigma)) and np.all(np.isfinite(tr.m))
    assert np.trace(tr.final_Sigma) >= 0.999 * tr.threshold
    # extrapolation t + λ/λ̇ is exact for the scalar Riccati equation when a = 0; otherwise
    # O(a/λ) with λ ~ 1e8: the error is the integration error (rtol 1e-9)
    assert tr.blowup_time == pytest.approx(t_star, rel=1e-8)
    assert tr.event_time < tr.blowup_time


@pytest.mark.parametrize("a", [0.0, 0.2, -0.1])
def test_isotropic_blowup_time_matches_closed_form(rng, a):
    d = 3
    S0 = spd(rng, d)
    p = GaussianParams.make(d, A=a, V=0.7, B=0.6, b=rng.normal(size=d))
    tr = integrate_moments(p, rng.normal(size=d), S0, 20.0)
    t_star = blowup_time_isotropic(a, 0.7, 0.6, S0)
    if a == 0:
        assert t_star == pytest.approx(1 / (2 * 0.7 * 0.6 * np.linalg.eigvalsh(S0)[-1]),
                                       rel=1e-14)
    assert tr.status == "blowup"
    assert tr.blowup_time == pytest.approx(t_star, rel=1e-8)
    assert blowup_time_closed_form(p, S0, t_max=20.0) == pytest.approx(t_star, rel=1e-10)


def test_general_blowup_time_matches_gramian_closed_form(rng):
    """Non-commuting A, B with V = vI: detected t* vs the first root of λ_max(L₀ᵀG(t)L₀) = 1."""
    d = 3
    p = GaussianParams.make(d, A=0.3 * rng.normal(size=(d, d)), V=0.9,
                            B=spd(rng, d, 0.5) + 0.2 * rng.normal(size=(d, d)))
    S0 = spd(rng, d)
    tr = integrate_moments(p, np.zeros(d), S0, 20.0)
    t_cf = blowup_time_closed_form(p, S0, t_max=20.0)
    assert tr.status == "blowup" and math.isfinite(t_cf)
    # non-isotropic: the extrapolation error is O(1/λ) at λ ~ 1e8 plus the integration error
    assert tr.blowup_time == pytest.approx(t_cf, rel=1e-6)


def test_exponential_growth_is_not_a_blowup():
    """σ̇ = 2aσ (no attention): tr Σ passes 1e8 without the Riccati signature; continue."""
    p = GaussianParams.make(2, A=0.5)
    S0 = np.diag([1.0, 0.5])
    tr = integrate_moments(p, np.zeros(2), S0, 25.0, n_out=3)
    assert tr.status == "completed"
    np.testing.assert_allclose(tr.final_Sigma, np.exp(25.0) * S0, rtol=1e-7)


def test_depends_on_data_threshold():
    """a < 0 < vb: σ₀ below the critical variance −a/(vb) decays, above it blows up."""
    a, v, b = -0.5, 1.0, 1.0
    crit = -a / (v * b)
    p = GaussianParams.make(1, A=a, V=v, B=b)
    lo = integrate_moments(p, [0.0], [[0.9 * crit]], 30.0, n_out=3)
    hi = integrate_moments(p, [0.0], [[1.1 * crit]], 30.0, n_out=3)
    assert lo.status == "completed" and lo.final_Sigma[0, 0] < 1e-4
    assert hi.status == "blowup"
    assert hi.blowup_time == pytest.approx(blowup_time_scalar(a, v, b, 1.1 * crit), rel=1e-8)


# ----------------------------------------------------------------------------- equilibria
def test_linearisation_matches_finite_differences(rng):
    d = 3
    p = GaussianParams.make(d, A=rng.normal(size=(d, d)), V=rng.normal(size=(d, d)),
                            B=rng.normal(size=(d, d)))
    S = spd(rng, d)
    J = riccati_linearisation(p, S)
    E = sym_basis(d)
    h = 1e-6
    Jfd = np.array([np.einsum("kij,ij->k", E, (riccati_residual(p, S + h * H)
                                                - riccati_residual(p, S - h * H)) / (2 * h))
                    for H in E]).T
    # central differences of a quadratic map are exact up to round-off ~ eps·|F|/h
    np.testing.assert_allclose(J, Jfd, atol=1e-7 * np.abs(J).max())


def test_zero_equilibrium_spectrum_is_lyapunov_operator(rng):
    d = 3
    A = rng.normal(size=(d, d))
    p = GaussianParams.make(d, A=A, V=1.0, B=1.0)
    zero = equilibria(p)[0]
    ev = np.linalg.eigvals(A)
    expected = np.array([ev[i] + ev[j] for i in range(d) for j in range(i, d)])

    def srt(z):  # order by rounded (real, imag): robust to round-off ties
        return z[np.lexsort((np.round(z.imag, 8), np.round(z.real, 8)))]

    np.testing.assert_allclose(srt(zero.spectrum), srt(expected), atol=1e-10)


def test_lyapunov_equilibrium_and_stability(rng):
    d = 3
    A = 0.5 * np.eye(d) + 0.3 * rng.normal(size=(d, d))
    p = GaussianParams.make(d, A=A, V=-1.0, B=spd(rng, d), b=rng.normal(size=d))
    eqs = equilibria(p)
    pd = [e for e in eqs if e.rank == d]
    assert len(pd) == 1 and pd[0].source == "lyapunov"
    e = pd[0]
    # residual of an exact formula: round-off relative to |A||Σ| + |V||B||Σ|²
    scale = np.linalg.norm(A) * np.linalg.norm(e.Sigma) + np.linalg.norm(p.B) * np.linalg.norm(
        e.Sigma) ** 2
    assert e.residual <= 1e3 * EPS * scale
    assert e.stable
    # long-time integration converges to it
    tr = integrate_moments(p, np.zeros(d), spd(rng, d), 60.0, n_out=2)
    np.testing.assert_allclose(tr.final_Sigma, e.Sigma, atol=1e-7 * np.abs(e.Sigma).max())
    np.testing.assert_allclose(tr.final_m, e.m, atol=1e-6 * max(1, np.abs(e.m).max()))


def test_newton_equilibrium_general_V_matches_long_time_limit():
    p = GaussianParams.make(2, A=np.array([[0.5, 0.3], [-0.1, 0.4]]),
                            V=np.array([[1.0, 0.2], [0.0, 0.8]]), B=-np.eye(2))
    eqs = equilibria(p)
    pd = [e for e in eqs if e.rank == 2]
    assert len(pd) == 1 and pd[0].source == "newton" and pd[0].stable
    assert pd[0].residual <= 1e-12
    tr = integrate_moments(p, np.zeros(2), np.eye(2), 60.0, n_out=2)
    np.testing.assert_allclose(tr.final_Sigma, pd[0].Sigma, atol=1e-7)


# ----------------------------------------------------------------------------- classifier
@pytest.mark.parametrize("a,vb,label", [
    (0.5, -1.0, "converges"), (-0.5, -1.0, "converges_to_zero"), (0.5, 1.0, "blows_up"),
    (0.0, 1.0, "blows_up"), (-0.5, 1.0, "depends_on_initial_data"),
    (0.3, 0.0, "unbounded"), (0.0, 0.0, "converges")])
def test_exact_classifier_scalar_table(a, vb, label):
    p = GaussianParams.make(2, A=a, V=1.0, B=vb)
    cl = classify(p)
    assert cl.method == "exact" and cl.label == label, cl.reason
    if label == "converges" and vb != 0:
        sig = -a / vb  # σ* = −2a/c, c = 2vb
        np.testing.assert_allclose(cl.limit, sig * np.eye(2), atol=1e-14)
        assert (cl.rate_kind, cl.rate) == ("exponential", pytest.approx(2 * a))
    if label == "converges_to_zero":
        np.testing.assert_allclose(cl.limit, np.zeros((2, 2)), atol=0)
        assert (cl.rate_kind, cl.rate) == ("exponential", pytest.approx(2 * abs(a)))
    if label == "unbounded":
        assert (cl.rate_kind, cl.rate) == ("exponential", pytest.approx(2 * a))
    if (a, vb) == (0.0, 0.0):  # Σ̇ = 0: every Σ is an equilibrium, the limit is Σ₀
        assert cl.rate_kind == "stationary" and cl.limit is None
    if label == "depends_on_initial_data":
        assert cl.details["critical_variance"] == pytest.approx([-a / vb] * 2)


@pytest.mark.parametrize("a,vb", [(0.5, -1.0), (0.5, 1.0), (-0.5, 1.0)])
def test_probe_agrees_with_exact(rng, a, vb):
    """Commuting but non-trivial: A = diag + rotation part on a 2-plane, B = vb·I."""
    A = a * np.eye(2) + np.array([[0.0, -0.7], [0.7, 0.0]])
    p = GaussianParams.make(2, A=A, V=1.0, B=vb)
    ex = classify(p, method="exact")
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        pr = classify(p, method="probe", horizon=40.0)
    assert ex.label == pr.label, (ex.reason, pr.reason)
    if ex.label == "converges":
        np.testing.assert_allclose(pr.limit, ex.limit, atol=1e-6)


def test_phase_diagram_regions():
    pd = phase_diagram(lambda a, vb: GaussianParams.make(1, A=a, V=1.0, B=vb),
                       [-1.0, -0.5, 0.5, 1.0], [-1.0, -0.5, 0.5, 1.0], x_name="a", y_name="vb")
    for j, vb in enumerate(pd.y):
        for i, a in enumerate(pd.x):
            want = ("converges" if vb < 0 and a > 0 else "converges_to_zero" if vb < 0
                    else "blows_up" if a > 0 else "depends_on_initial_data")
            assert pd.labels[j, i] == want, (a, vb)
    assert set(pd.methods.ravel()) == {"exact"}


# ----------------------------------------------------------------------------- Bures–Wasserstein
def test_bures_distance_matches_pot_and_closed_forms(rng):
    import ot

    d = 3
    m0, m1 = rng.normal(size=d), rng.normal(size=d)
    S0, S1 = spd(rng, d), spd(rng, d)
    ref = float(ot.gaussian.bures_wasserstein_distance(m0, m1, S0, S1))
    assert bures_wasserstein_distance(m0, S0, m1, S1) == pytest.approx(ref, rel=1e-10)
    # commuting covariances: W2² = |Δm|² + Σ(√λ₀ − √λ₁)²
    D0, D1 = np.diag([1.0, 4.0, 0.0]), np.diag([9.0, 1.0, 0.0])  # rank-deficient too
    w = bures_wasserstein_distance(m0, D0, m1, D1)
    assert w == pytest.approx(math.sqrt(np.sum((m0 - m1) ** 2) + 4 + 1), rel=1e-12)


def test_bures_map_is_spd_transport(rng):
    d = 4
    S0, S1 = spd(rng, d), spd(rng, d)
    G = bures_map(S0, S1)
    np.testing.assert_allclose(G, G.T, atol=0)
    assert np.linalg.eigvalsh(G)[0] > 0
    np.testing.assert_allclose(G @ S0 @ G, S1, atol=1e-10 * np.abs(S1).max())
    # own closed form Σ₀^{-1/2}(Σ₀^{1/2}Σ₁Σ₀^{1/2})^{1/2}Σ₀^{-1/2}
    lam, U = np.linalg.eigh(S0)
    R = (U * np.sqrt(lam)) @ U.T
    Ri = (U / np.sqrt(lam)) @ U.T
    lam2, U2 = np.linalg.eigh(R @ S1 @ R)
    np.testing.assert_allclose(G, Ri @ ((U2 * np.sqrt(lam2)) @ U2.T) @ Ri, atol=1e-10)


# ----------------------------------------------------------------------------- reachability
@pytest.mark.parametrize("attention", [False, True])
def test_reach_full_rank(rng, attention):
    d = 3
    V, B = (0.5 * rng.normal(size=(d, d)), 0.5 * rng.normal(size=(d, d))) if attention else (0, 0)
    m0, m1 = rng.normal(size=d), rng.normal(size=d)
    S0, S1 = spd(rng, d), spd(rng, d)
    res = reach(m0, S0, m1, S1, 1.5, V=V, B=B)
    assert res.status == "reached"
    assert len(res.plan.phases) == 1
    # G Σ₀ G = Σ₁ and the generator is log(G)/T
    np.testing.assert_allclose(res.plan.G @ S0 @ res.plan.G, S1, atol=1e-10)
    # integration at rtol 1e-10 over O(1) time
    assert res.m_error <= 1e-8 and res.Sigma_error <= 1e-8
    # W2 of nearly equal PD Gaussians: the trace formula cancels to ~sqrt(eps)
    assert res.w2_error <= 10 * math.sqrt(EPS) * max(1, np.linalg.norm(S1))


def test_reach_rank_deficient_other_range(rng):
    d = 3
    L0, L1 = rng.normal(size=(d, 2)), rng.normal(size=(d, 2))
    res = reach(rng.normal(size=d), L0 @ L0.T, rng.normal(size=d), L1 @ L1.T, 1.0, V=0.4, B=-0.3)
    assert res.status == "reached"
    assert [ph.kind for ph in res.plan.phases] == ["rotate", "stretch"]
    lam = np.linalg.eigvalsh(res.trajectory.Sigma)
    assert np.all(np.abs(lam[:, 0]) <= 1e3 * EPS * lam[:, -1])  # rank 2 throughout
    assert res.Sigma_error <= 1e-7


def test_reach_orthogonal_ranges_and_rotation():
    e1, e2 = np.eye(3)[:, :1], np.eye(3)[:, 1:2]
    Om = principal_rotation(e1, e2)
    np.testing.assert_array_equal(Om, -Om.T)
    res = reach(np.zeros(3), e1 @ e1.T, np.ones(3), 4 * e2 @ e2.T, 2.0)
    assert res.status == "reached" and res.Sigma_error <= 1e-8


def test_reach_refuses_rank_mismatch():
    with pytest.raises(ValueError, match="rank Σ₁ = 2 differs from rank Σ₀ = 1.*invariant"):
        plan_controls(np.zeros(2), np.diag([1.0, 0.0]), np.zeros(2), np.eye(2), 1.0)


# ----------------------------------------------------------------------------- particles
def test_particle_velocity_matches_naive(rng):
    n, d = 23, 3
    x = rng.normal(size=(n, d))
    p = GaussianParams.make(d, A=rng.normal(size=(d, d)), b=rng.normal(size=d),
                            V=rng.normal(size=(d, d)), B=0.5 * rng.normal(size=(d, d)))
    v = particle_velocity(x, p)
    ref = np.zeros((n, d))
    for i in range(n):
        s = np.array([(p.B @ x[i]) @ x[j] for j in range(n)])
        w = np.exp(s - s.max())
        ref[i] = p.A @ x[i] + p.b + p.V @ (w @ x / w.sum())
    np.testing.assert_allclose(v, ref, rtol=1e-12, atol=1e-12 * np.abs(ref).max())


def test_particles_track_moment_ode_at_rate_n_minus_half():
    from wflow.studies.gaussian_particles import EXPECTED_SLOPE, SLOPE_TOL, particle_errors

    res = particle_errors(ns=(32, 64, 128, 256, 512), reps=16, seed=0, steps=4)
    for name, slope in res.slopes.items():
        assert abs(slope - EXPECTED_SLOPE) <= SLOPE_TOL, (
            f"{name}: fitted slope {slope:.3f} ± {res.stderrs[name]:.3f}, theory −0.5")


def test_constant_schedule_protocol():
    p = GaussianParams.make(2, A=1.0)
    s = ConstantParams(p)
    assert s.at(3.0) is p and s.breakpoints(0, 1) == [] and s.is_constant
