"""The causal mask and the positional bias in the particle solver (THEORY §9).

``Attention(mask=Causal(), bias=...)``: token ``i`` (row ``i``) attends to ``j ≤ i``
(``j < i`` strict) with logits ``s_h(x_i, x_j) + b(i, j)``. Checked against a dense
``(n, n)`` reference written here from the formula (small ``n``).

Tolerance. Each head sum adds ``≤ n`` positive weights (each rounded to
``~(β|s| + |b| + 4) ε``) against vectors of norm 1, then ``V_h`` (``d`` products) and the
tangent projection (``d``); relative to the sum of the absolute terms
``Σ_h w_h max_i ‖|V_h|‖_∞`` (normalised kinds; times ``max Z`` for the unnormalised ones)
the velocity is within ``(n + 2d + H) ε``. We assert ``8 (n + 2d + H) ε`` (a factor 8 for
the few roundings per term). A trajectory of ``S`` RK4 steps accumulates ``4 S`` such
evaluation errors, grown by at most ``e^{L T}`` (``L ≲ β ‖A‖ ‖V‖``; ``e^{1}`` at the
settings below).
"""

from __future__ import annotations

import numpy as np
import pytest

from wflow import ALiBi, Attention, Bias, Causal, Heads, simulate
from wflow.energy import evaluate, head_energies, particle_field
from wflow.infra.schema import ScenarioError

from .conftest import EPS


def sphere(rng, n, d):
    x = rng.standard_normal((n, d))
    return x / np.linalg.norm(x, axis=1)[:, None]


def dense_velocity(x, heads, beta, kind="softmax", shift=1, bias=None):
    """The masked velocity from the formula, with ``(n, n)`` matrices."""
    n, d = x.shape
    i = np.arange(n)[:, None]
    j = np.arange(n)[None, :]
    allowed = j < i + shift
    b = np.zeros((n, n)) if bias is None else bias(i, j)
    acc = np.zeros((n, d))
    for h in range(heads.H):
        s = beta * x @ heads.A[h] @ x.T + b
        k = np.maximum(0.0, s) if kind == "relu" else np.exp(np.where(allowed, s, 0.0))
        k = np.where(allowed, k, 0.0) / n
        f = (k @ x) @ heads.V[h].T
        if kind == "softmax":
            Z = k.sum(axis=1)
            f = np.where(Z[:, None] > 0, f / np.where(Z > 0, Z, 1.0)[:, None], 0.0)
        acc += heads.w[h] * f
    return acc - np.sum(acc * x, axis=1)[:, None] * x


def scale_of(heads, x=None, beta=1.0, kind="softmax"):
    """Sum of the absolute terms of the velocity (module docstring)."""
    sc = sum(heads.w[h] * np.max(np.abs(heads.V[h]).sum(axis=1)) for h in range(heads.H))
    if kind != "softmax":  # the unnormalised sums: Σ_j m_j k(s_ij) ≤ max k
        sc *= np.exp(beta * max(np.max(np.abs(heads.A[h])) for h in range(heads.H)) * x.shape[1])
    return float(sc)


def tol_eval(n, d, H):
    return 8.0 * (n + 2 * d + H) * EPS


def rk4_reference(x0, vel, T, dt):
    """wflow's RK4: stages at ``y/|y|`` (the radially extended field), final projection."""
    x = x0.copy()
    def nz(y):
        return y / np.linalg.norm(y, axis=1)[:, None]
    for _ in range(round(T / dt)):
        k1 = vel(x)
        k2 = vel(nz(x + 0.5 * dt * k1))
        k3 = vel(nz(x + 0.5 * dt * k2))
        k4 = vel(nz(x + dt * k3))
        x = nz(x + (dt / 6.0) * (k1 + 2 * k2 + 2 * k3 + k4))
    return x


MODELS = {
    "causal": (Causal(), None, 1, None),
    "strict": (Causal(strict=True), None, 0, None),
    "alibi": (Causal(), ALiBi(0.3), 1, ALiBi(0.3)),
    "callable": (Causal(), Bias(lambda i, j: 0.2 * np.cos(i - j)), 1,
                 lambda i, j: 0.2 * np.cos(i - j)),
}


@pytest.mark.parametrize("model", list(MODELS))
@pytest.mark.parametrize("kind", ["softmax", "usa"])
@pytest.mark.parametrize("d", [3, 8])
def test_masked_field_equals_dense_reference(rng, model, kind, d):
    mask, bias, shift, ref_bias = MODELS[model]
    n, H, beta = 30, 2, 1.5
    heads = Heads.random_rank(H, d, d, rng, scale=1.0)
    heads = Heads(heads.Q, heads.K, heads.V, heads.w)
    x = sphere(rng, n, d)
    fe = evaluate(x, heads, Attention(kind, beta, mask=mask, bias=bias))
    want = dense_velocity(x, heads, beta, kind, shift, ref_bias)
    err = float(np.max(np.abs(fe.v - want)))
    assert err <= tol_eval(n, d, H) * scale_of(heads, x, beta, kind), err
    assert fe.Phi is None and fe.grad_psi is None  # no energy under the mask


def test_strict_first_token_does_not_move(rng):
    """Strict mask: token 0 attends to nothing; its velocity is defined as 0 (no 0/0)."""
    heads = Heads.random_symmetric(2, 3, rng)
    x0 = sphere(rng, 12, 3)
    attn = Attention("softmax", 1.0, mask="causal_strict")
    fe = evaluate(x0, heads, attn)
    assert np.all(fe.v[0] == 0.0) and np.all(np.isfinite(fe.v)) and fe.Z[:, 0].max() == 0.0
    res = simulate(x0, heads, attn, T=0.2, dt=0.02)
    assert np.allclose(res.x[0][0], x0[0], rtol=0, atol=4 * 10 * EPS)
    assert not np.allclose(res.x[0][1:], x0[1:], atol=1e-6)


def masked_run(rng, mask, bias, n=16, d=3, T=0.2, dt=0.02):
    heads = Heads.random_symmetric(2, d, rng, scale=1.0)
    x0 = sphere(rng, n, d)
    res = simulate(x0, heads, Attention("softmax", 1.0, mask=mask, bias=bias), T=T, dt=dt,
                   integrator="rk4")
    return heads, x0, res


def traj_tol(n, d, H, T, dt, heads):
    return 4 * round(T / dt) * tol_eval(n, d, H) * np.e * scale_of(heads) * T


@pytest.mark.parametrize("model", ["causal", "strict", "alibi"])
def test_masked_simulate_equals_dense_reference(rng, model):
    mask, bias, shift, ref_bias = MODELS[model]
    T, dt = 0.2, 0.02
    heads, x0, res = masked_run(rng, mask, bias, T=T, dt=dt)
    assert res.extra["engine"] == "python" and "causal mask" in res.extra["engine_reason"]
    want = rk4_reference(x0, lambda x: dense_velocity(x, heads, 1.0, "softmax", shift,
                                                      ref_bias), T, dt)
    err = float(np.max(np.abs(res.x[0] - want)))
    assert err <= traj_tol(*x0.shape, heads.H, T, dt, heads), err


@pytest.mark.parametrize("fault", ["mask shifted by one", "ALiBi slope +2%"])
def test_faults_are_caught(rng, fault):
    """Negative controls through the public API: the run under a faulty model is caught."""
    T, dt = 0.2, 0.02
    if fault == "mask shifted by one":  # j < i run, j ≤ i reference
        heads, x0, res = masked_run(rng, Causal(strict=True), None, T=T, dt=dt)
        shift, ref_bias = 1, None
    else:
        heads, x0, res = masked_run(rng, Causal(), ALiBi(0.3 * 1.02), T=T, dt=dt)
        shift, ref_bias = 1, ALiBi(0.3)
    want = rk4_reference(x0, lambda x: dense_velocity(x, heads, 1.0, "softmax", shift,
                                                      ref_bias), T, dt)
    err = float(np.max(np.abs(res.x[0] - want)))
    assert err > 100 * traj_tol(*x0.shape, heads.H, T, dt, heads), err


def test_token_order_matters(rng):
    """A permuted input is a different decoder input; the unmasked model is equivariant."""
    heads = Heads.random_symmetric(2, 3, rng)
    x = sphere(rng, 20, 3)
    p = rng.permutation(20)
    masked = Attention("softmax", 1.0, mask="causal")
    free = Attention("softmax", 1.0)
    vm, vmp = evaluate(x, heads, masked).v, evaluate(x[p], heads, masked).v
    vf, vfp = evaluate(x, heads, free).v, evaluate(x[p], heads, free).v
    tol = tol_eval(20, 3, 2) * scale_of(heads)
    assert np.max(np.abs(vfp - vf[p])) <= tol
    assert np.max(np.abs(vmp - vm[p])) > 1e-3
    # and the masked field is the reference at the permuted order, not a permutation of it
    assert np.max(np.abs(vmp - dense_velocity(x[p], heads, 1.0))) <= tol


def test_mask_none_is_today_bit_for_bit(rng):
    heads = Heads.random_symmetric(2, 3, rng)
    x0 = sphere(rng, 16, 3)
    a0 = Attention("softmax", 1.0)
    for a in (Attention("softmax", 1.0, mask=None), Attention("softmax", 1.0, mask="none")):
        assert a == a0 and a.mask is None and a.unmasked() is a
        for engine in ("compiled", "python"):
            r0 = simulate(x0, heads, a0, T=0.1, dt=0.02, engine=engine)
            r1 = simulate(x0, heads, a, T=0.1, dt=0.02, engine=engine)
            assert np.array_equal(r0.x, r1.x)
            assert all(np.array_equal(r0.history[k], r1.history[k]) for k in r0.history)


def test_masked_run_energy_terms_of_the_exchangeable_model(rng):
    """The state's energy is ``E[μ]`` of the unmasked model; its chain rule converges (RK4)."""
    heads = Heads.random_symmetric(2, 3, rng)
    x0 = sphere(rng, 16, 3)
    attn = Attention("softmax", 1.0, mask="causal")
    res = [simulate(x0, heads, attn, T=0.2, dt=dt) for dt in (0.04, 0.02)]
    _, _, E = particle_field(res[1].x[0], np.full(16, 1 / 16), heads, attn.unmasked())
    assert res[1].history["E"][0, -1] == pytest.approx(E, rel=1e-12)
    c = [r.checks["chain"]["value"] for r in res]
    assert c[0] / c[1] > 3.0, c  # second order (balance order 2): ratio ~ 4


def test_refusals_name_the_key(rng):
    heads = Heads.bilinear(np.eye(3))
    masked = Attention("softmax", 1.0, mask="causal")
    x = sphere(rng, 10, 3)
    from wflow.geometry.mesh import icosphere
    from wflow.pde import solve_pde

    with pytest.raises(ScenarioError, match="attention.mask"):
        solve_pde("uniform", heads, masked, mesh=icosphere(1))
    with pytest.raises(ScenarioError, match="attention.mask"):
        evaluate(x, heads, masked, y=x[:5])
    with pytest.raises(ScenarioError, match="attention.mask"):
        head_energies(evaluate(x, heads, masked), np.full(10, 0.1), masked)
    with pytest.raises(ScenarioError, match="attention.mask"):
        particle_field(x, np.full(10, 0.1), heads, masked)
    with pytest.raises(ValueError, match="particles.engine"):
        simulate(x, heads, masked, T=0.02, dt=0.01, engine="compiled")
    with pytest.raises(ScenarioError, match="attention.bias"):
        Attention("softmax", 1.0, bias=ALiBi(0.1))  # a bias without the mask
    with pytest.raises(ScenarioError, match="attention.mask"):
        Attention("softmax", 1.0, mask="decoder")


def dgr_model(n, beta, lam):
    """[DGR]'s ALiBi circle system as a wflow model (d = 2, USA, strict mask).

    Their weights ``e^{−(λ/n)(j−k)} / N_j`` with ``N_j = Σ_{k<j} e^{−(λ/n)(j−k)}`` are the
    bias ``b(j, k) = −(λ/n)(j − k) − log(N_j / n)`` on the masses ``1/n``; their interaction
    ``−β sin(θ_j−θ_k) e^{β cos(θ_j−θ_k)}`` is ``β`` times the tangent USA velocity of
    ``A = I``: ``V = β I``. (``N_0 = 0``: token 0 attends to nothing; its bias is unused.)
    """
    s = lam / n
    jj = np.arange(n)
    N = np.array([np.exp(-s * (j - np.arange(j))).sum() if j else 1.0 for j in jj])

    def b(i, j):
        return -s * (i - j) - np.log(N[np.broadcast_to(i, np.broadcast_shapes(i.shape,
                                                                                j.shape))] / n)

    heads = Heads.bilinear(np.eye(2)[None], V=beta * np.eye(2)[None])
    return heads, Attention("usa", beta, mask=Causal(strict=True), bias=Bias(b, name="dgr"))


def test_dgr_alibi_circle_maps_onto_simulate():
    """The published ALiBi circle model run by ``simulate`` (velocity to round-off, RK4 runs).

    Velocity: the same sums in another order, ``8 (n + 4) ε`` relative to ``β e^β`` (the
    largest interaction). Trajectory: the published RK4 steps the angles, wflow's the
    embedded points with normalised stages: two fourth-order schemes of one ODE, apart by
    ``O(dt⁴ T)``; at ``dt = 2.5e−3`` (``dt⁴ ≈ 4e−11``), ``T = 1``, asserted ``1e−9``.
    """
    from wflow.published.lost_in_the_middle import (
        alibi_circle_dynamics,
        alibi_circle_velocity_direct,
        alibi_initial_configuration,
    )

    n, beta, lam = 64, 1.0, 1.0
    theta0, _ = alibi_initial_configuration(n, 17)
    heads, attn = dgr_model(n, beta, lam)
    x0 = np.stack([np.cos(theta0), np.sin(theta0)], axis=1)
    v = evaluate(x0, heads, attn).v
    want = alibi_circle_velocity_direct(theta0, beta, lam)
    tangent = np.stack([-np.sin(theta0), np.cos(theta0)], axis=1)
    err_v = float(np.max(np.abs(v - want[:, None] * tangent)))
    assert err_v <= 8 * (n + 4) * EPS * beta * np.exp(beta), err_v
    T, dt = 1.0, 2.5e-3
    res = simulate(x0, heads, attn, T=T, dt=dt, integrator="rk4", record_every=400)
    _, th = alibi_circle_dynamics(theta0, beta=beta, lam=lam, T=T, dt=dt, every=400)
    xt = np.stack([np.cos(th[-1]), np.sin(th[-1])], axis=1)
    err_x = float(np.max(np.abs(res.x[0] - xt)))
    assert err_x <= 1e-9, err_x
    assert float(np.max(np.abs(res.x[0] - x0))) > 1e-2  # the tokens did move


def test_masked_rank_heads_equal_full_matrix(rng):
    """Rank heads under the mask: ``W_O (W_V Σ k y)`` equals ``V Σ k y`` to round-off."""
    d, n, H, k = 16, 25, 2, 4
    heads = Heads.random_rank(H, d, k, rng, scale=1.0)
    full = Heads(heads.Q, heads.K, heads.V, heads.w)
    x = sphere(rng, n, d)
    attn = Attention("softmax", 1.0, mask="causal", bias=ALiBi(0.1))
    got, want = evaluate(x, heads, attn).v, evaluate(x, full, attn).v
    assert np.max(np.abs(got - want)) <= tol_eval(n, d, H) * scale_of(full)
    assert np.max(np.abs(want - dense_velocity(x, full, 1.0, bias=ALiBi(0.1)))) <= \
        tol_eval(n, d, H) * scale_of(full)
