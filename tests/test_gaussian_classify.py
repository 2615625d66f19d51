"""Long-time classifier: every label against a closed form or an exact invariant.

Each label has a test with its closed form (or invariant) and a negative control:
a parameter or initial-datum change that must flip the label, or a probe horizon
too short to decide, which must answer ``undetermined`` with a reason.
"""

from __future__ import annotations

import json
import math

import numpy as np
import pytest
import scipy.linalg

from wflow.gaussian import (
    GaussianParams,
    blowup_time_isotropic,
    blowup_time_scalar,
    classify,
    integrate_moments,
)
from wflow.gaussian.asymptotics import fit_tail_rate
from wflow.gaussian.riccati import (
    equilibrium_families,
    riccati_linearisation,
    riccati_residual,
)
from wflow.gaussian.structure import frozen_kernel_part

S2 = np.array([[1.0, 0.5], [0.5, 1.0]])
S3 = np.array([[1.0, 0.3, -0.2], [0.3, 0.8, 0.1], [-0.2, 0.1, 0.6]])
V3 = np.array([[2.0, 0.5, 0.0], [0.5, 1.0, 0.3], [0.0, 0.3, 1.5]])  # SPD, not commuting with B
#: Relative spread that the tail fit accepts as settled (asymptotics.fit_tail_rate).
FIT_RTOL = 0.05


def run(p, S0, T, **kw):
    """A tight reference integration (independent of the classifier's)."""
    kw = {"n_out": 2, "rtol": 1e-12, "atol": 1e-16, "method": "LSODA"} | kw
    return integrate_moments(p, np.zeros(p.d), S0, T, **kw)


def assert_rate(cl, kind, rate, rtol):
    assert cl.rate_kind == kind, (cl.rate_kind, cl.reason)
    assert cl.rate == pytest.approx(rate, rel=rtol), (cl.rate, rate, cl.reason)


# ----------------------------------------------------------------------------- tail fits
@pytest.mark.parametrize("kind,rate", [("exponential", 0.7), ("algebraic", 1.5),
                                       ("algebraic", -2.0), ("exponential", -0.3)])
def test_tail_fit_recovers_laws(kind, rate):
    T = 100.0 if kind == "exponential" else 1e4
    t = np.union1d(np.geomspace(1e-3, T, 400), np.linspace(0, T, 200))
    q = np.exp(-rate * t) if kind == "exponential" else (1 + t) ** (-rate)
    fit = fit_tail_rate(t, q)
    assert fit.kind == kind, fit.reason
    # (1 + t)^{-p} has local exponent p t/(1 + t): 1e-4 off at t = 1e4
    assert fit.rate == pytest.approx(rate, rel=1e-3), fit.reason


def test_tail_fit_refuses_a_short_tail():
    t = np.linspace(0, 0.01, 50)
    fit = fit_tail_rate(t, 1.0 / (1.0 + t))
    assert fit.kind is None and "too short" in fit.reason


# ----------------------------------------------------------------------------- converges_to_zero
def test_algebraic_decay_non_scalar_V_closed_form():
    """Issue example: A = 0, V = diag(2, 1), B = −I, Σ₀ = I: σᵢ(t) = 1/(1 + 2vᵢt) exactly."""
    p = GaussianParams.make(2, V=np.diag([2.0, 1.0]), B=-1.0)
    for horizon in (50.0, 1e3, 1e5):  # the verdict is structural: independent of the horizon
        cl = classify(p, Sigma0=np.eye(2), horizon=horizon)
        assert cl.label == "converges_to_zero" and cl.method == "exact", cl.reason
        assert_rate(cl, "algebraic", 1.0, 0)
    # t Σ(t) → diag(1/(2vᵢ)) = X*, the stable equilibrium of the Riccati equation with A = I/2
    np.testing.assert_allclose(cl.details["t_Sigma_limit"], np.diag([0.25, 0.5]), atol=1e-12)
    # fitted exponent of the check integration: local exponent 2vt/(1 + 2vt) → 1
    cl = classify(p, Sigma0=np.eye(2), horizon=1e3)
    assert cl.rate_fit.kind == "algebraic"
    assert cl.rate_fit.rate == pytest.approx(1.0, rel=1e-3), cl.rate_fit.reason
    # the probe alone recognises the algebraic law (it used to say 'undetermined')
    pr = classify(p, Sigma0=np.eye(2), horizon=1e5, method="probe")
    assert pr.label == "converges_to_zero" and pr.rate_kind == "algebraic", pr.reason
    assert pr.rate == pytest.approx(1.0, rel=1e-4), pr.reason


def test_algebraic_decay_d3_non_scalar_V_and_B_self_similar_profile():
    B = -np.array([[1.0, 0.2, 0.0], [0.2, 0.7, 0.1], [0.0, 0.1, 0.5]])
    p = GaussianParams.make(3, V=V3, B=B)
    assert np.linalg.norm(V3 @ B - B @ V3) > 0.1  # genuinely non-commuting
    cl = classify(p, Sigma0=S3, horizon=1e3)
    assert cl.label == "converges_to_zero" and cl.method == "exact"
    assert_rate(cl, "algebraic", 1.0, 0)
    X = np.asarray(cl.details["t_Sigma_limit"])
    Qx = V3 @ X @ B @ X
    np.testing.assert_allclose(X + Qx + Qx.T, 0, atol=1e-12)  # X* + Q(X*) = 0
    T = 1e6
    np.testing.assert_allclose(T * run(p, S3, T).final_Sigma, X, rtol=0, atol=1e-5)  # O(1/T)
    assert abs(cl.rate_fit.rate - 1.0) <= FIT_RTOL, cl.rate_fit.reason


def test_exponential_decay_to_zero_linear_flow():
    A = np.array([[-0.4, 1.0], [-1.0, -0.4]])  # Re λ = −0.4: ‖Σ‖ ~ e^{−0.8t}
    p = GaussianParams.make(2, A=A, V=0.0, B=1.0)
    cl = classify(p, Sigma0=S2, horizon=40.0)
    assert cl.label == "converges_to_zero" and cl.method == "exact"
    assert_rate(cl, "exponential", 0.8, 1e-12)
    # negative control: an expanding A flips the label
    assert classify(p.replace(A=A + 0.5 * np.eye(2)), Sigma0=S2).label == "unbounded"


def test_mixed_algebraic_and_exponential_directions():
    """V = I, A = diag(−1, 0), B = diag(0, −1): e^{−2t} and 1/(1 + 2t): algebraic wins."""
    p = GaussianParams.make(2, A=np.diag([-1.0, 0.0]), V=1.0, B=np.diag([0.0, -1.0]))
    cl = classify(p, Sigma0=S2, horizon=1e3)
    assert cl.label == "converges_to_zero" and cl.method == "exact", cl.reason
    assert_rate(cl, "algebraic", 1.0, 0)
    assert cl.rate_fit.rate == pytest.approx(1.0, rel=1e-2), cl.rate_fit.reason


# ----------------------------------------------------------------------------- converges (≠ 0)
def test_rank_deficient_B_limit_depends_on_sigma0():
    """Issue example: V = I, B = diag(−1, 0): Σ⁻¹(t) = Σ₀⁻¹ + diag(2t, 0), Σ → Q(QᵀΣ₀⁻¹Q)⁻¹Qᵀ."""
    p = GaussianParams.make(2, V=1.0, B=np.diag([-1.0, 0.0]))
    cl = classify(p, Sigma0=S2, horizon=1e4)
    assert cl.label == "converges" and cl.method == "exact", cl.reason
    np.testing.assert_allclose(cl.limit, np.diag([0.0, 0.75]), atol=1e-15)
    assert cl.limit_rank == 1
    assert_rate(cl, "algebraic", 1.0, 0)  # Σ(t) − Σ∞ = O(1/t) from the closed form
    assert cl.rate_fit.rate == pytest.approx(1.0, rel=1e-3), cl.rate_fit.reason
    # the closed form at t = 1e4 against the classifier's limit
    P = np.linalg.inv(S2) + np.diag([2e4, 0.0])
    np.testing.assert_allclose(np.linalg.inv(P), cl.limit, atol=1e-4)
    # another Σ₀, another limit (a continuum of equilibria {BΣ = 0})
    other = np.array([[1.0, -0.9], [-0.9, 2.0]])
    lim2 = classify(p, Sigma0=other, check=False).limit
    np.testing.assert_allclose(lim2, np.diag([0.0, 2.0 - 0.81]), atol=1e-14)
    # scope "all": the label holds for every Σ₀, the limit does not exist independently of it
    allc = classify(p)
    assert allc.label == "converges" and allc.limit is None and allc.scope == "all"
    assert any(f.source == "kernel" for f in allc.families)
    # negative control: B of full rank moves Σ to 0
    neg = classify(p.replace(B=np.diag([-1.0, -1e-3])), Sigma0=S2, check=False)
    assert neg.label == "converges_to_zero"


@pytest.mark.parametrize("v1,v2", [(2.0, 1.0), (4.0, 1.0), (1.0, 2.0)])
def test_rank_deficient_B_diagonal_V_exponent_closed_form(v1, v2):
    """V = diag(v1, v2), B = diag(−1, 0): σ₁₁ = σ/(1+2v₁σt), σ₁₂ ∝ g^{−(v₁+v₂)/(2v₁)},
    σ₂₂ − σ₂₂(∞) = (σ₁₂(0)²/σ₁₁(0)) g^{−v₂/v₁}, g = 1 + 2v₁σ₁₁(0)t: exponent min(1, v₂/v₁)."""
    p = GaussianParams.make(2, V=np.diag([v1, v2]), B=np.diag([-1.0, 0.0]))
    t = np.geomspace(1.0, 1e6, 13)
    tr = run(p, S2, 1e6, t_eval=t, n_out=None)
    g = 1 + 2 * v1 * t
    exact = np.empty((t.size, 2, 2))
    exact[:, 0, 0] = 1 / g
    exact[:, 0, 1] = exact[:, 1, 0] = 0.5 * g ** (-(v1 + v2) / (2 * v1))
    exact[:, 1, 1] = 1 - 0.25 * (1 - g ** (-v2 / v1))
    np.testing.assert_allclose(tr.Sigma, exact, atol=1e-10)  # integrator vs closed form
    cl = classify(p, Sigma0=S2, horizon=1e6)
    assert cl.label == "converges" and cl.method == "exact"
    np.testing.assert_allclose(cl.limit, np.diag([0.0, 0.75]), atol=1e-15)
    want = min(1.0, v2 / v1)
    assert_rate(cl, "algebraic", want, 1e-12)
    assert cl.rate_fit.rate == pytest.approx(want, rel=1e-2), cl.rate_fit.reason


def test_d3_rank_one_B_commuting_V():
    """B = −e₁e₁ᵀ (rank one), V = diag(3, 1, 2): exponent min(1, v_q/v_i) = 1/3."""
    p = GaussianParams.make(3, V=np.diag([3.0, 1.0, 2.0]), B=np.diag([-1.0, 0.0, 0.0]))
    cl = classify(p, Sigma0=S3, horizon=1e6)
    Q = np.eye(3)[:, 1:]
    SK = Q @ np.linalg.inv(Q.T @ np.linalg.inv(S3) @ Q) @ Q.T
    assert cl.label == "converges" and cl.method == "exact"
    np.testing.assert_allclose(cl.limit, SK, atol=1e-14)
    assert cl.limit_rank == 2
    assert_rate(cl, "algebraic", 1 / 3, 1e-12)
    assert cl.rate_fit.rate == pytest.approx(1 / 3, rel=2e-2), cl.rate_fit.reason


def test_d3_rank_two_B_commuting_V_exponent_follows_the_coupling():
    """V = diag(1, 4, 2), B = diag(−1, −1, 0): (Σ_W)_QQ ~ Σᵢ J_qi² t^{−v_q/vᵢ}, v_q/vᵢ = 2, 1/2.
    Σ₀ coupling ker B to the v = 4 direction: t^{−1/2}; a Σ₀ that does not: t^{−1}."""
    p = GaussianParams.make(3, V=np.diag([1.0, 4.0, 2.0]), B=np.diag([-1.0, -1.0, 0.0]))
    cl = classify(p, Sigma0=S3, horizon=1e6)
    assert cl.label == "converges" and cl.method == "exact"
    assert_rate(cl, "algebraic", 0.5, 1e-12)
    assert cl.rate_fit.rate == pytest.approx(0.5, rel=2e-2), cl.rate_fit.reason
    # negative control: J_q,(v=4) = 0 initially (and stays 0: J̇ is diagonal in the eigenbasis)
    S0 = np.array([[1.0, 0.0, -0.2], [0.0, 0.8, 0.0], [-0.2, 0.0, 0.6]])
    cl = classify(p, Sigma0=S0, horizon=1e6)
    assert_rate(cl, "algebraic", 1.0, 1e-12)
    assert cl.rate_fit.rate == pytest.approx(1.0, rel=1e-3), cl.rate_fit.reason


@pytest.mark.parametrize("B", [np.diag([-1.0, -0.5, 0.0]), np.diag([-1.0, 0.0, 0.0])],
                         ids=["rank2", "rank1"])
def test_d3_rank_deficient_B_general_V_invariant_and_limit(B):
    """Non-commuting V: QᵀΣ(t)⁻¹Q is conserved (exact invariant); Σ → Σ_K (Lyapunov + fit)."""
    p = GaussianParams.make(3, V=V3, B=B)
    k = int(np.sum(np.diag(B) == 0))
    Q = np.eye(3)[:, 3 - k:]
    tr = run(p, S3, 50.0, n_out=11)
    K0 = Q.T @ np.linalg.inv(S3) @ Q
    for S in tr.Sigma:
        # conserved to the integration accuracy (rtol 1e-12 on the factor, Σ⁻¹ well conditioned
        # up to t = 50)
        np.testing.assert_allclose(Q.T @ np.linalg.inv(S) @ Q, K0, rtol=1e-7)
    cl = classify(p, Sigma0=S3, horizon=1e5)
    SK = Q @ np.linalg.inv(K0) @ Q.T
    np.testing.assert_allclose(frozen_kernel_part(B, S3), SK, atol=1e-14)
    assert cl.label == "converges" and cl.method == "lyapunov", cl.reason
    np.testing.assert_allclose(cl.limit, SK, atol=1e-14)
    assert cl.rate_kind == "algebraic" and 0.5 < cl.rate <= 1.0 + FIT_RTOL, cl.reason
    # independent long integration lands on Σ_K
    np.testing.assert_allclose(run(p, S3, 1e8).final_Sigma, SK, atol=1e-6)
    # negative control: a horizon too short to confirm the limit → undetermined, with reason
    short = classify(p, Sigma0=S3, horizon=0.5)
    assert short.label == "undetermined" and "longer horizon" in short.reason


def test_rank_deficient_sigma0_frozen_part():
    """Σ₀ of rank 2 in d = 3 whose range meets ker B in a line: Σ_K = L₀ΠL₀ᵀ, rank 1."""
    L0 = np.array([[1.0, 0.0], [0.0, 1.0], [0.0, 1.0]])
    S0 = L0 @ L0.T  # range ∋ (0, 1, 1) ∈ ker B
    B = np.array([[-1.0, 0.0, 0.0], [0.0, -0.5, 0.5], [0.0, 0.5, -0.5]])  # ker B = span(0, 1, 1)
    p = GaussianParams.make(3, V=1.0, B=B)
    cl = classify(p, Sigma0=S0, horizon=1e4)
    u = np.array([0.0, 1.0, 1.0])
    assert cl.label == "converges" and cl.limit_rank == 1
    np.testing.assert_allclose(cl.limit, np.outer(u, u), atol=1e-14)
    np.testing.assert_allclose(run(p, S0, 1e8).final_Sigma, np.outer(u, u), atol=1e-6)


def test_neutral_directions_with_A_schur_limit_and_coupled_rate():
    """V = I, A = diag(−1, 0, 0.7), B = diag(0.4, 0, −1): a contracting direction with c > 0,
    a neutral one (a = c = 0) and an isolated variance −2a/c = 0.7. The neutral block keeps
    (P₀,NN − P₀,NX(P₀,XX − c/(2|a|))⁻¹P₀,XN)⁻¹; it relaxes like e^{−0.7t} (coupled to a = 0.7)."""
    p = GaussianParams.make(3, A=np.diag([-1.0, 0.0, 0.7]), V=1.0, B=np.diag([0.4, 0.0, -1.0]))
    S0 = 0.5 * S3
    cl = classify(p, Sigma0=S0, horizon=60.0)
    assert cl.label == "converges" and cl.method == "exact", cl.reason
    P0 = np.linalg.inv(S0)
    Nt = np.array([[P0[0, 0] - 0.8 / 2, P0[0, 1]], [P0[1, 0], P0[1, 1]]])
    want = np.zeros((3, 3))
    want[1, 1] = np.linalg.inv(Nt)[1, 1]
    want[2, 2] = 0.7
    np.testing.assert_allclose(cl.limit, want, atol=1e-14)
    np.testing.assert_allclose(run(p, S0, 80.0).final_Sigma, want, atol=1e-10)
    assert_rate(cl, "exponential", 0.7, 1e-12)
    assert cl.rate_fit.rate == pytest.approx(0.7, rel=1e-3), cl.rate_fit.reason
    # negative control: a Σ₀ that does not couple the neutral direction to a = 0.7 relaxes at
    # 2·min|a| = 1.4 instead; and a large Σ₀ blows up (c = 0.8 > 0 along a = −1)
    S_dec = np.diag([0.5, 0.4, 0.3])
    assert classify(p, Sigma0=S_dec, check=False).rate == pytest.approx(1.4, rel=1e-12)
    big = classify(p, Sigma0=np.diag([10.0, 1.0, 1.0]), check=False)
    # direction 0 alone: σ̇ = −2σ + 0.8σ² from 10 (decoupled: Σ₀ diagonal)
    assert big.label == "blows_up"
    assert big.blowup_time == pytest.approx(blowup_time_scalar(-1.0, 1.0, 0.4, 10.0), rel=1e-10)


def test_probe_certifies_isolated_equilibrium():
    """V = vI, A = 0.5I + rotation, B not commuting: Σ* = P*⁻¹, AᵀP* + P*A = −v(B + Bᵀ)."""
    A = np.array([[0.5, -0.8], [0.8, 0.5]])
    B = np.array([[1.0, 0.3], [0.3, 0.6]])
    p = GaussianParams.make(2, A=A, V=-1.0, B=B)
    P = scipy.linalg.solve_continuous_lyapunov(A.T, B + B.T)
    cl = classify(p, Sigma0=np.array([[0.3, 0.1], [0.1, 0.2]]))
    assert cl.label == "converges" and cl.method == "lyapunov", cl.reason
    np.testing.assert_allclose(cl.limit, np.linalg.inv(P), atol=1e-13)
    # rate: the slowest mode of the linearisation DF(Σ*) on the symmetric matrices
    spec = np.linalg.eigvals(riccati_linearisation(p, np.linalg.inv(P)))
    assert_rate(cl, "exponential", -float(np.max(spec.real)), 1e-10)
    allc = classify(p)
    assert allc.label == "converges" and allc.scope == "all"
    np.testing.assert_allclose(allc.limit, np.linalg.inv(P), atol=1e-13)


def test_probe_too_short_is_undetermined_with_reason():
    p = GaussianParams.make(2, V=np.diag([2.0, 1.0]), B=-1.0)
    cl = classify(p, Sigma0=np.eye(2), horizon=0.01, method="probe")
    assert cl.label == "undetermined" and "longer horizon" in cl.reason, cl.reason
    # negative control: long enough, the same probe decides
    assert classify(p, Sigma0=np.eye(2), horizon=1e5, method="probe").label == \
        "converges_to_zero"


def test_probe_continuum_limit():
    p = GaussianParams.make(2, V=1.0, B=np.diag([-1.0, 0.0]))
    cl = classify(p, Sigma0=S2, horizon=1e4, method="probe")
    assert cl.label == "converges" and cl.method == "probe", cl.reason
    # extrapolated from the tail: error ≲ the reported estimate
    err = cl.details["limit_error_estimate"]
    assert np.linalg.norm(cl.limit - np.diag([0.0, 0.75])) <= err < 1e-2


# ----------------------------------------------------------------------------- blows_up
def test_blowup_scalar_V_closed_form_and_sign_flip():
    p = GaussianParams.make(3, V=0.7, B=0.4)
    S0 = np.diag([0.8, 0.5, 0.2])
    cl = classify(p, Sigma0=S0)
    assert cl.label == "blows_up" and cl.method == "exact"
    assert cl.blowup_time == pytest.approx(blowup_time_isotropic(0.0, 0.7, 0.4, S0), rel=1e-10)
    # negative control: opposite definiteness converges to 0 like 1/t
    neg = classify(p.replace(B=-0.4), Sigma0=S0, check=False)
    assert neg.label == "converges_to_zero" and neg.rate_kind == "algebraic"


def test_blowup_general_V_within_lyapunov_bound():
    B = np.array([[1.0, 0.2, 0.0], [0.2, 0.7, 0.1], [0.0, 0.1, 0.5]])
    p = GaussianParams.make(3, V=V3, B=B)
    cl = classify(p, Sigma0=S3)
    assert cl.label == "blows_up" and cl.method == "exact"
    assert 0 < cl.blowup_time <= cl.details["blowup_time_bound"]
    ref = run(p, S3, 2 * cl.blowup_time, method="DOP853")  # another integrator than LSODA
    assert ref.status == "blowup"
    # two integrators' extrapolated t* (each ~1e-8 relative, solver.py)
    assert cl.blowup_time == pytest.approx(ref.blowup_time, rel=1e-6)


def test_semidefinite_same_sign_blows_up_unless_sigma0_in_kernel():
    p = GaussianParams.make(2, V=1.0, B=np.diag([1.0, 0.0]))
    cl = classify(p, Sigma0=np.eye(2))
    # P(t) = I − diag(2t, 0) is singular at t = 1/2
    assert cl.label == "blows_up" and cl.blowup_time == pytest.approx(0.5, rel=1e-10)
    # negative control: range Σ₀ ⊂ ker B is an equilibrium
    neg = classify(p, Sigma0=np.diag([0.0, 1.0]))
    assert neg.label == "converges" and neg.rate_kind == "stationary"


def test_depends_on_initial_data_both_ways():
    p = GaussianParams.make(1, A=-0.5, V=1.0, B=1.0)  # critical variance −2a/c = 0.5
    assert classify(p).label == "depends_on_initial_data"
    small = classify(p, Sigma0=np.array([[0.4]]), check=False)
    assert small.label == "converges_to_zero"
    assert_rate(small, "exponential", 1.0, 1e-12)
    big = classify(p, Sigma0=np.array([[0.6]]))
    assert big.label == "blows_up"
    assert big.blowup_time == pytest.approx(blowup_time_scalar(-0.5, 1.0, 1.0, 0.6), rel=1e-10)


# ----------------------------------------------------------------------------- unbounded
def test_unbounded_exponential_and_algebraic():
    A = 0.3 * np.eye(2) + np.array([[0.0, -1.0], [1.0, 0.0]])
    cl = classify(GaussianParams.make(2, A=A, V=0.0, B=1.0), Sigma0=S2, horizon=40.0)
    assert cl.label == "unbounded" and cl.method == "exact"
    assert_rate(cl, "exponential", 0.6, 1e-12)
    assert cl.rate_fit.rate == pytest.approx(-0.6, rel=1e-3), cl.rate_fit.reason  # growth
    J = np.array([[0.0, 1.0], [0.0, 0.0]])  # Jordan block: e^{Jt} = I + Jt, ‖Σ‖ ~ t²
    cl = classify(GaussianParams.make(2, A=J, V=0.0, B=1.0), Sigma0=np.eye(2), horizon=1e3)
    assert cl.label == "unbounded"
    assert_rate(cl, "algebraic", 2.0, 0)
    assert cl.rate_fit.rate == pytest.approx(-2.0, rel=1e-3), cl.rate_fit.reason
    # negative control: Σ₀ in ker J is invariant (the Jordan chain is not excited)
    neg = classify(GaussianParams.make(2, A=J, V=0.0, B=1.0), Sigma0=np.diag([1.0, 0.0]))
    assert neg.label == "converges" and neg.rate_kind == "stationary"


def test_unbounded_commuting_neutral_growth():
    """V = I, A = diag(0.3, 0.5), B = diag(0, −1): c = 0 with a = 0.3 grows like e^{0.6t}."""
    p = GaussianParams.make(2, A=np.diag([0.3, 0.5]), V=1.0, B=np.diag([0.0, -1.0]))
    cl = classify(p, Sigma0=S2, horizon=40.0)
    assert cl.label == "unbounded" and cl.method == "exact"
    assert_rate(cl, "exponential", 0.6, 1e-12)
    assert classify(p).label == "unbounded"


# ----------------------------------------------------------------------------- oscillates
def test_oscillates_linear_rotation_periodic():
    A = np.array([[0.0, -1.0], [1.0, 0.0]])
    p = GaussianParams.make(2, A=A, V=0.0, B=1.0)
    S0 = np.diag([1.0, 2.0])
    cl = classify(p, Sigma0=S0)
    assert cl.label == "oscillates" and cl.method == "exact"
    assert cl.details["critical_frequencies"] == pytest.approx([1.0])
    tr = run(p, S0, 2 * np.pi, t_eval=np.array([0.0, np.pi / 2, 2 * np.pi]), n_out=None)
    np.testing.assert_allclose(tr.Sigma[-1], S0, atol=1e-9)  # period 2π (closed form)
    assert np.linalg.norm(tr.Sigma[1] - S0) > 1.0
    # negative control: a rotation-invariant Σ₀ does not move
    neg = classify(p, Sigma0=np.eye(2))
    assert neg.label == "converges" and neg.rate_kind == "stationary"


def test_oscillates_neutral_block_rotated_by_skew_A():
    A = np.zeros((3, 3))
    A[0, 1], A[1, 0], A[2, 2] = -1.0, 1.0, -0.5
    p = GaussianParams.make(3, A=A, V=1.0, B=np.diag([0.0, 0.0, -1.0]))
    assert classify(p).label == "oscillates"
    cl = classify(p, Sigma0=S3)
    assert cl.label == "oscillates" and cl.method == "exact", cl.reason
    # Σ(t + π) = Σ(t) (R(π) = −I) once the third direction has relaxed; not at a quarter turn
    tr = run(p, S3, 60 + np.pi, t_eval=np.array([60.0, 60 + np.pi / 2, 60 + np.pi]),
             n_out=None)
    np.testing.assert_allclose(tr.Sigma[2], tr.Sigma[0], atol=1e-8)
    assert np.linalg.norm(tr.Sigma[1] - tr.Sigma[0]) > 1e-3
    # negative control: without the skew part the neutral block is a Σ₀-dependent limit
    neg = classify(p.replace(A=np.diag([0.0, 0.0, -0.5])), Sigma0=S3, check=False)
    assert neg.label == "converges"


# ----------------------------------------------------------------------------- structure, JSON
def test_equilibrium_families_of_rank_deficient_B():
    B = np.diag([-1.0, 0.0, 0.0])
    fams = equilibrium_families(GaussianParams.make(3, V=V3, B=B))
    assert len(fams) == 1 and fams[0].dimension == 3  # k(k+1)/2 with k = dim ker B = 2
    rng = np.random.default_rng(0)
    p = GaussianParams.make(3, V=V3, B=B)
    for _ in range(3):
        c = rng.standard_normal(3)
        S = np.einsum("k,kij->ij", c, fams[0].basis)
        np.testing.assert_allclose(riccati_residual(p, S), 0, atol=1e-14)
    assert fams[0].contains(frozen_kernel_part(B, S3))
    # negative control: B of full rank has no continuum
    assert equilibrium_families(GaussianParams.make(3, V=V3, B=-np.eye(3))) == ()


def test_classification_json_is_standard():
    p = GaussianParams.make(2, V=1.0, B=1.0)
    for cl in (classify(p), classify(p, Sigma0=S2), classify(p.replace(B=-1.0), Sigma0=S2)):
        text = json.dumps(cl.to_dict(), allow_nan=False)  # raises on NaN/Infinity
        assert '"inf"' not in text and '"nan"' not in text
    d = classify(p).to_dict()
    assert d["blowup_time"] is None and d["rate"] is None


def test_exact_method_refuses_where_no_structure_applies():
    A = np.array([[0.5, -0.8], [0.8, 0.5]])
    p = GaussianParams.make(2, A=A, V=-1.0, B=np.array([[1.0, 0.3], [0.3, 0.6]]))
    with pytest.raises(ValueError, match="no structural rule applies"):
        classify(p, Sigma0=S2, method="exact")
    assert math.isfinite(classify(p, Sigma0=S2).rate)


def test_probe_growth_needs_the_attention_scale():
    """σ̇ = 0.2σ + σ² from 1e-6 grows like e^{0.2t} for a while, then blows up at
    t* = ln(1 + 0.2/σ₀)/0.2 ≈ 61: a short probe must not call the early phase 'unbounded'."""
    p = GaussianParams.make(1, A=0.1, V=1.0, B=0.5)
    S0 = np.array([[1e-6]])
    short = classify(p, Sigma0=S0, horizon=50.0, method="probe")
    assert short.label == "undetermined" and "longer horizon" in short.reason, short.reason
    long = classify(p, Sigma0=S0, horizon=200.0, method="probe")
    assert long.label == "blows_up"
    # the integrator's extrapolated t* (~1e-8 relative, solver.py)
    assert long.blowup_time == pytest.approx(blowup_time_scalar(0.1, 1.0, 0.5, 1e-6), rel=1e-6)
    # genuine unbounded growth (c = 0 along a = 0.3) far beyond ‖A‖/(‖V‖‖B‖) is recognised
    q = GaussianParams.make(2, A=np.diag([0.3, 0.5]), V=1.0, B=np.diag([0.0, -1.0]))
    grow = classify(q, Sigma0=S2, horizon=60.0, method="probe")
    assert grow.label == "unbounded" and grow.rate_kind == "exponential"
    assert grow.rate == pytest.approx(0.6, rel=1e-3), grow.reason


def test_integrator_failure_is_logged_not_warned(caplog):
    """Exponential growth past MAX_TRACE fails the integration: a logged message, no warning."""
    import logging
    import warnings

    p = GaussianParams.make(1, A=40.0)  # tr Σ ~ e^{80t} passes 1e200 before t = 6
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        with caplog.at_level(logging.WARNING, logger="wflow.gaussian.solver"):
            tr = integrate_moments(p, np.zeros(1), np.eye(1), 10.0, n_out=3, method="LSODA")
            quiet = integrate_moments(p, np.zeros(1), np.eye(1), 10.0, n_out=3, method="LSODA",
                                      quiet=True)
    assert tr.status == quiet.status == "failed"
    assert sum("integrate_moments" in r.getMessage() for r in caplog.records) == 1
