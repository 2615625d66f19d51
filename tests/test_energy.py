"""Energies, first variations, mobilities and slopes (docs/theory.md §3) against definitions."""

from __future__ import annotations

import numpy as np
import pytest

from wflow.attention.heads import Attention, Heads
from wflow.attention.kinds import get_kind
from wflow.energy import dE_dt_weights, evaluate, head_energies, slope_terms
from wflow.geometry.sphere import project_tangent, sample_uniform

from .conftest import EPS, KINDS


def _phi(s: np.ndarray, kind: str) -> np.ndarray:
    """The energy's potential ``Φ`` of the kind (its own NumPy ``Φ``, e.g. ``e^s``, ReLU's
    ``max(0, s)²/2``)."""
    return get_kind(kind).phi(s)


def _energy(x: np.ndarray, m: np.ndarray, heads: Heads, attn: Attention) -> float:
    """``E = Σ_h w_h (1/2β) Σ_ij m_i m_j Φ(β x_iᵀ A_h x_j)``, written out."""
    s = attn.beta * np.einsum("id,hde,je->hij", x, heads.A, x)
    return float(np.einsum("h,i,hij,j->", heads.w, m, _phi(s, attn.kind), m) / (2 * attn.beta))


def _setup(rng, H=2, d=3, n=40, beta=1.7):
    x = sample_uniform(n, d, rng)
    m = rng.uniform(0.5, 1.5, n)
    m /= m.sum()
    heads = Heads.random_symmetric(H, d, rng, scale=0.6, w=rng.uniform(0.2, 1.0, H))
    return x, m, heads, beta


@pytest.mark.parametrize("kind", KINDS)
def test_head_energies_are_the_double_sum(rng, kind):
    x, m, heads, beta = _setup(rng)
    attn = Attention(kind, beta)
    fe = evaluate(x, heads, attn, m=m, backend=get_kind(kind).exact_backend)
    E = float(heads.w @ head_energies(fe, m, attn))
    # a sum of n² positive terms of size O(1): relative round-off ~ n·eps
    np.testing.assert_allclose(E, _energy(x, m, heads, attn), rtol=100 * EPS)
    assert not np.isclose(E, _energy(x, m, heads, Attention(kind, 1.03 * beta)), rtol=1e-4)


@pytest.mark.parametrize("kind", KINDS)
def test_grad_psi_is_the_gradient_of_the_energy(rng, kind):
    """``∂E/∂x_i = m_i Σ_h w_h ∇ψ_h(x_i)`` (ambient gradient; central differences, O(h²))."""
    x, m, heads, beta = _setup(rng, n=12)
    attn = Attention(kind, beta)
    fe = evaluate(x, heads, attn, m=m, backend=get_kind(kind).exact_backend)
    grad = m[:, None] * np.einsum("h,hmd->md", heads.w, fe.grad_psi)
    h = 1e-6
    fd = np.zeros_like(x)
    for i in range(x.shape[0]):
        for k in range(x.shape[1]):
            xp, xm = x.copy(), x.copy()
            xp[i, k] += h
            xm[i, k] -= h
            fd[i, k] = (_energy(xp, m, heads, attn) - _energy(xm, m, heads, attn)) / (2 * h)
    # O(h²) truncation plus round-off O(eps·E/h) ~ 1e-10
    np.testing.assert_allclose(grad, fd, atol=1e-8)


def test_usa_power_slope_and_speed_coincide(rng):
    """USA, value-aligned heads: ``v = P∇ψ``, so ``power = |∂E|² = |μ'|² = ∫|v|²`` (b̂ = 1)."""
    x, m, heads, beta = _setup(rng, H=3)
    attn = Attention("usa", beta)
    fe = evaluate(x, heads, attn, m=m, backend="direct")
    st = slope_terms(x, m, fe, heads, fe.v)
    np.testing.assert_allclose([st.slope2, st.speed2, st.G2], st.power, rtol=1e-13)
    np.testing.assert_allclose(fe.bhat, 1.0)


def test_one_softmax_head_is_a_weighted_gradient_flow(rng):
    """One head: ``v = v̂ = b̂ P∇ψ`` with ``b̂ = 1/Z``, so the three slopes coincide."""
    x, m, heads, beta = _setup(rng, H=1)
    attn = Attention("softmax", beta)
    fe = evaluate(x, heads, attn, m=m, backend="direct")
    np.testing.assert_allclose(fe.v, fe.vhat, atol=1e-14)
    np.testing.assert_allclose(fe.bhat, 1.0 / fe.Z[0], rtol=1e-14)
    st = slope_terms(x, m, fe, heads, fe.v)
    np.testing.assert_allclose([st.slope2, st.speed2, st.G2], st.power, rtol=1e-12)


def test_several_softmax_heads_only_the_surrogate_is_a_gradient_flow(rng):
    """Different heads: ``v̂`` satisfies ``power = |∂E|² = |μ'|²_b̂``; the transformer velocity
    ``v`` in general does not (the EDI defect of docs/theory.md §3)."""
    x, m, heads, beta = _setup(rng, H=3, beta=2.5)
    attn = Attention("softmax", beta)
    fe = evaluate(x, heads, attn, m=m, backend="direct")
    hat = slope_terms(x, m, fe, heads, fe.vhat)
    np.testing.assert_allclose([hat.slope2, hat.speed2], hat.power, rtol=1e-12)
    tr = slope_terms(x, m, fe, heads, fe.v)
    assert abs(tr.speed2 - tr.power) > 1e-4 * abs(tr.power)
    # the surrogate's mobility is the w̄-harmonic mean of the head mobilities 1/Z_h
    np.testing.assert_allclose(1.0 / fe.bhat, heads.wbar @ fe.Z, rtol=1e-14)


@pytest.mark.parametrize("kind", KINDS)
def test_weight_derivative_of_the_energy(rng, kind):
    """``∂_t E = Σ_h w_h <∂E_h/∂A_h, Ȧ_h>`` against a central difference along ``Ȧ``."""
    x, m, heads, beta = _setup(rng)
    attn = Attention(kind, beta)
    Z = rng.standard_normal(heads.A.shape)
    Adot = Z + np.swapaxes(Z, 1, 2)
    fe = evaluate(x, heads, attn, m=m, backend=get_kind(kind).exact_backend)
    val = dE_dt_weights(x, m, fe, heads, Adot, attn)
    h = 1e-6

    def E(A):
        return _energy(x, m, Heads.bilinear(A, w=heads.w), attn)

    fd = (E(heads.A + h * Adot) - E(heads.A - h * Adot)) / (2 * h)
    np.testing.assert_allclose(val, fd, rtol=1e-7, atol=1e-9)


def test_velocity_is_tangent(rng):
    x, m, heads, beta = _setup(rng)
    fe = evaluate(x, heads, Attention("softmax", beta), m=m, backend="direct")
    for v in (fe.v, fe.vhat):
        np.testing.assert_allclose(np.sum(v * x, axis=1), 0.0, atol=50 * EPS)
        np.testing.assert_allclose(project_tangent(x, v), v, atol=50 * EPS)
