"""Heads of value rank ``r`` in the field the solvers use (:func:`wflow.energy.evaluate`).

``V_h = W_{O,h} W_{V,h}`` with ``W_{V,h} ∈ R^{r×d}``: the field is formed from sums of width
``r + k`` (values ``W_V`` and keys ``K``, :func:`wflow.energy.field_from_sums`) instead of
``d``, and must equal the field of the same heads given by the full matrix ``V``.

Tolerance. Both sides sum the same ``N`` positive weights ``m_j k(s_ij)`` (each rounded to
``~(β|s| + 4) ε`` relative) against vectors that differ only in the order of two matrix
products (lengths ``r`` and ``d``, resp. ``k`` and ``d``). Each entry of ``f_h``,
``∇ψ_h`` is therefore within ``(N + 2d + β|s|) ε`` of the other side relative to the sum of
the absolute terms, ``max_i Σ_j m_j k(s_ij) |M_h| |y_j|`` with ``|M_h|`` the entrywise
absolute product ``|W_O||W_V|`` (resp. ``|Q|ᵀ|K|``), divided by ``Z`` for the normalised
``f``. The velocity adds the head sum and the projection (``H + d`` more roundings). We
assert ``8 (N + 2d + H) ε`` on that scale (a factor 8 for the few products per entry).
"""

from __future__ import annotations

import numpy as np
import pytest

from wflow import Attention, Heads, simulate
from wflow.attention.schedules import Static
from wflow.energy import evaluate
from wflow.kernels import kernel_sums

from .conftest import EPS


def sphere(rng, n, d):
    x = rng.standard_normal((n, d))
    return x / np.linalg.norm(x, axis=1)[:, None]


def full_of(heads: Heads) -> Heads:
    """The same heads given by the full product ``V = W_O W_V``."""
    return Heads(heads.Q, heads.K, heads.V, heads.w)


def scales(heads: Heads, fe) -> dict[str, float]:
    """Sum of the absolute terms of each quantity (module docstring), per quantity."""
    WV, WO = heads.value_factors()
    mv = np.max(np.abs(WO) @ np.abs(WV) @ np.ones(heads.d))  # max row sum of |W_O||W_V|
    mq = np.max(np.swapaxes(np.abs(heads.Q), 1, 2) @ np.abs(heads.K) @ np.ones(heads.d))
    zmax = float(np.max(fe.Z))
    wsum = float(np.sum(heads.w))
    return {"f": mv, "v": wsum * mv, "grad_psi": mq * zmax, "Z": zmax, "Phi": zmax}


def tolerance(n: int, d: int, H: int) -> float:
    return 8.0 * (n + 2 * d + H) * EPS  # module docstring


def field_error(a, b, sc) -> dict[str, float]:
    return {k: float(np.max(np.abs(getattr(a, k) - getattr(b, k)))) / sc[k] for k in sc}


def rank_heads(rng, H, d, k, symmetric=False, scale=1.5):
    h = Heads.random_rank(H, d, k, rng, scale=scale)
    if symmetric:  # Q = K: A_h = Q_hᵀ Q_h symmetric (one call, no swapped sums)
        h = Heads(h.Q, h.Q, None, h.w, WV=h.WV, WO=h.WO)
    return h


@pytest.mark.parametrize("symmetric", [False, True])
@pytest.mark.parametrize("H", [1, 4])
@pytest.mark.parametrize("k", [1, 16])
def test_rank_field_equals_full_matrix(rng, H, k, symmetric):
    d, n = 64, 40
    heads = rank_heads(rng, H, d, k, symmetric)
    assert heads.is_symmetric() == symmetric
    x = sphere(rng, n, d)
    attn = Attention("softmax", 2.0)
    got = evaluate(x, heads, attn)
    want = evaluate(x, full_of(heads), attn)
    assert got.Y is None and want.Y is not None  # formed at rank r + k < d: no full Y
    err = field_error(got, want, scales(heads, want))
    tol = tolerance(n, d, H)
    assert max(err.values()) <= tol, (err, tol)
    for key in ("bhat", "hmZ"):
        assert np.allclose(getattr(got, key), getattr(want, key), rtol=tol, atol=0)


@pytest.mark.parametrize("kind", ["usa", "relu"])
def test_rank_field_other_kinds(rng, kind):
    d, n, H, k = 64, 30, 4, 16
    heads = rank_heads(rng, H, d, k)
    x = sphere(rng, n, d)
    attn = Attention(kind, 1.0)
    got, want = evaluate(x, heads, attn), evaluate(x, full_of(heads), attn)
    err = field_error(got, want, scales(heads, want))
    assert max(err.values()) <= tolerance(n, d, H), err


def test_perturbed_factor_is_caught(rng):
    """Negative control: a relative change of 1e-6 in one entry of ``W_O`` is caught."""
    d, n, H, k = 64, 40, 4, 16
    heads = rank_heads(rng, H, d, k)
    x = sphere(rng, n, d)
    attn = Attention("softmax", 2.0)
    want = evaluate(x, full_of(heads), attn)
    WO = np.array(heads.WO)
    WO[1, 5, 3] *= 1.0 + 1e-6
    bad = evaluate(x, heads.with_(WV=heads.WV, WO=WO), attn)
    err = field_error(bad, want, scales(heads, want))
    assert err["f"] > 100 * tolerance(n, d, H), err


def today_field(x, heads, attn):
    """The field as computed before values of rank r (full-width sums, V applied after)."""
    m = np.full(x.shape[0], 1.0 / x.shape[0])
    kw = {"beta": attn.beta, "kind": attn.kind}
    s = kernel_sums(x, x, m, heads.Q, heads.K, potential=True, **kw)
    AY = np.einsum("hij,hmj->hmi", heads.A, s.Y)
    if heads.is_symmetric():
        grad = AY
    else:
        t = kernel_sums(x, x, m, heads.K, heads.Q, **kw)
        grad = 0.5 * (AY + np.einsum("hji,hmj->hmi", heads.A, t.Y))
    VY = np.einsum("hij,hmj->hmi", heads.V, s.Y)
    f = VY / s.Z[:, :, None]
    v = np.einsum("h,hmd->md", heads.w, f)
    v = v - np.sum(v * x, axis=1)[:, None] * x
    return s.Z, s.Y, s.Phi, f, grad, v


@pytest.mark.parametrize("make", ["full", "rank_d"])
def test_full_rank_heads_bit_for_bit(rng, make):
    """Heads given by ``V``, and factors with ``r + k ≥ d``, are today's computation exactly."""
    d, n, H = 64, 30, 4
    if make == "full":
        heads = full_of(rank_heads(rng, H, d, 16))
    else:  # r = k = d: no saving at rank, the full-width path with V = W_O W_V
        heads = rank_heads(rng, H, d, d, scale=1.0)
    x = sphere(rng, n, d)
    attn = Attention("softmax", 1.5)
    fe = evaluate(x, heads, attn)
    Z, Y, Phi, f, grad, v = today_field(x, heads, attn)
    for a, b in ((fe.Z, Z), (fe.Y, Y), (fe.Phi, Phi), (fe.f, f), (fe.grad_psi, grad),
                 (fe.v, v)):
        assert np.array_equal(a, b)


@pytest.mark.parametrize("H,k", [(1, 1), (4, 16)])
def test_simulate_rank_trajectory(rng, H, k):
    """``simulate`` with rank heads (Python loop, sums at rank) equals the full-V run.

    Trajectory tolerance: the per-evaluation error (module docstring) accumulated over the
    ``4 S`` RK4 stages of ``S`` steps; ``dt · L`` with ``L ~ β ‖A‖ ‖V‖ ≲ 10`` keeps the
    growth factor ``e^{L T} ≤ e^{0.5}`` at ``T = 0.05``: ``4 S · tol · e^{0.5} ·`` scale.
    """
    d, n = 64, 24
    heads = rank_heads(rng, H, d, k)
    x0 = sphere(rng, n, d)
    attn = Attention("softmax", 1.0)
    T, dt = 0.05, 0.01
    got = simulate(x0, heads, attn, T=T, dt=dt, integrator="rk4")
    want = simulate(x0, full_of(heads), attn, T=T, dt=dt, integrator="rk4", engine="python")
    assert got.status == want.status == "success"
    S = round(T / dt)
    sc = scales(heads, evaluate(x0, full_of(heads), attn))["v"] * T
    err = float(np.max(np.abs(got.x[0] - want.x[0])))
    tol = 4 * S * tolerance(n, d, H) * np.exp(0.5) * sc
    assert err <= tol, (err, tol)
    assert np.allclose(got.history["E"], want.history["E"], rtol=1e-12, atol=0)


def test_rank_heads_leave_compiled_loop_with_reason(rng, caplog):
    """Rank heads at d > 3 run on the Python loop (at rank), the reason recorded and logged.

    Control: the same heads given by the full ``V`` run on the compiled loop.
    """
    import logging

    heads = rank_heads(rng, 4, 64, 16)
    x0 = sphere(rng, 12, 64)
    with caplog.at_level(logging.INFO, logger="wflow.particles.solver"):
        res = simulate(x0, heads, Attention("softmax", 1.0), T=0.02, dt=0.01)
    assert res.extra["engine"] == "python"
    assert "value rank 16" in res.extra["engine_reason"], res.extra["engine_reason"]
    assert any("value rank 16" in r.getMessage() for r in caplog.records)
    full = simulate(x0, full_of(heads), Attention("softmax", 1.0), T=0.02, dt=0.01)
    assert full.extra["engine"] == "compiled"
    from wflow.particles.compiled import compiled_support
    from wflow.particles.options import ParticleOptions

    opts = ParticleOptions(T=0.02, dt=0.01)
    assert compiled_support(x0, Static.of(full_of(heads)), Attention(), opts) is None
    why = compiled_support(x0, Static.of(heads), Attention(), opts)
    assert why is not None and "rank 16" in why, why


def test_static_keeps_rank_heads(rng):
    """``Static.of`` keeps heads of value rank ``r`` (their factors) and returns them at θ_0.

    Control: heads given by the full ``V`` are rebuilt from θ (no kept heads), as before.
    """
    heads = rank_heads(rng, 4, 64, 16)
    sch = Static.of(heads)
    h0 = sch.heads_at(sch.initial_theta())
    assert h0 is heads and h0.value_rank == 16
    assert np.array_equal(sch.heads_at(sch.theta0.copy()).WV, heads.WV)
    other = sch.heads_at(2.0 * sch.theta0)  # not the static path's θ: the heads of θ
    assert other.value_factors() is None and np.array_equal(other.V, 2.0 * heads.V)
    full = Static.of(full_of(heads))
    assert full.heads is None and full.heads_at(full.theta0).value_factors() is None


@pytest.mark.parametrize("engine", ["python", "compiled"])
def test_full_value_heads_simulate_bit_for_bit(rng, engine):
    """Heads given by ``V``: the run is the one from θ (today's schedule) bit for bit."""
    heads = full_of(rank_heads(rng, 2, 5, 2))
    x0 = sphere(rng, 10, 5)
    attn = Attention("softmax", 1.0)
    param, theta = Static.of(heads).param, Static.of(heads).theta0
    old = Static(param, theta)  # the heads of θ at every step
    a = simulate(x0, heads, attn, T=0.05, dt=0.01, engine=engine)
    b = simulate(x0, old, attn, T=0.05, dt=0.01, engine=engine)
    assert a.extra["engine"] == b.extra["engine"] == engine
    assert np.array_equal(a.x, b.x)
    assert all(np.array_equal(a.history[k], b.history[k]) for k in a.history)


def test_velocity_only_evaluation(rng):
    """``gradient=False`` (integrator stages): the same ``v``, bit for bit for heads given by
    ``V`` (the swapped sums only feed ``∇ψ``); at rank (width ``r``, not ``r + k``) to the
    tolerance of the module docstring."""
    d, n, H, k = 64, 30, 4, 16
    heads = rank_heads(rng, H, d, k)
    x = sphere(rng, n, d)
    attn = Attention("softmax", 1.0)
    full = full_of(heads)
    fv = evaluate(x, full, attn, gradient=False)
    assert fv.grad_psi is None and np.array_equal(fv.v, evaluate(x, full, attn).v)
    rv = evaluate(x, heads, attn, gradient=False)
    err = float(np.max(np.abs(rv.v - fv.v)))
    assert err <= tolerance(n, d, H) * scales(heads, fv)["v"], err


def test_float32_field_within_its_estimate(rng):
    """``dtype="float32"``: the velocity within the kernel's a-priori float32 estimate.

    ``err_est`` bounds each sum relative to ``Z_i`` (``Z_i max|y|`` for ``Y``); the head
    output ``f = W_O Y / Z`` then carries twice that on the scale of the absolute terms,
    the velocity the weighted sum of the heads (``scales``). Controls: ``float64`` is
    today's field bit for bit, and the float32 field is not the float64 one (an error
    above float64's ``8 (N + 2d + H) ε`` scale, so a silent float64 path is caught).
    """
    from wflow.kernels import KernelLog

    d, n, H, k = 64, 60, 4, 16
    heads = rank_heads(rng, H, d, k)
    x = sphere(rng, n, d)
    attn = Attention("softmax", 2.0)
    log = KernelLog()
    f32 = evaluate(x, heads, attn, dtype="float32", log=log)
    f64 = evaluate(x, heads, attn)
    assert np.array_equal(evaluate(x, heads, attn, dtype="float64").v, f64.v)
    est = log.max_err_est
    assert log.last.dtype == "float32"
    sc = scales(heads, f64)
    err = float(np.max(np.abs(f32.v - f64.v)))
    assert err <= 2 * est * sc["v"], (err, est)
    assert err > tolerance(n, d, H) * sc["v"], err


def test_radial_dominance_of_rank_heads(rng):
    """:func:`radial_dominance` of symmetric rank heads (``r + k < d``: no full ``Y``) equals
    that of the same heads given by ``V``, the direct bound included and still ``>= |cross
    direct|``. Control: an entry of ``W_O`` changed by 1e-6 (relative) moves the bound by
    more than the tolerance.

    Tolerance: each quantity is an integral over ``μ`` of products of two fields, each
    within ``8 (N + 2d + H) ε`` of the full-``V`` one on its scale (module docstring), so
    their relative difference is within twice that (plus the ``n``-term sum over ``μ``).
    """
    from wflow.multihead.dominance import radial_dominance

    d, n, H, k = 64, 40, 3, 8
    heads = rank_heads(rng, H, d, k, symmetric=True, scale=1.0)
    x = sphere(rng, n, d)
    attn = Attention("softmax", 2.0)
    assert evaluate(x, heads, attn).Y is None
    got = radial_dominance(x, heads, attn)
    want = radial_dominance(x, full_of(heads), attn)
    tol = 2 * tolerance(n, d, H) + n * EPS
    assert np.all(np.isfinite(got.direct_bound))
    assert np.allclose(got.direct_bound, want.direct_bound, rtol=tol, atol=0)
    assert np.all(got.direct_bound >= np.abs(got.cross_direct))
    for key in ("own", "cross_direct", "cross_radial", "cross_bound"):
        scale = float(np.max(np.abs(getattr(want, key))))
        assert np.max(np.abs(getattr(got, key) - getattr(want, key))) <= 10 * tol * scale, key
    WO = np.array(heads.WO)
    WO[1, 5, 3] *= 1.0 + 1e-6
    bad = radial_dominance(x, heads.with_(WV=heads.WV, WO=WO), attn)
    rel = np.max(np.abs(bad.direct_bound - want.direct_bound) / np.abs(want.direct_bound))
    assert rel > 100 * tol, rel


def test_noisy_rank_heads_ito_balance_at_full_width(rng):
    """Token diffusion with the Itô balance: heads of rank ``r`` (kept by ``Static``) run
    with their full ``V`` (the balance reads the full-width ``Y``), bit for bit the run of
    the heads given by ``V``; the balance is recorded and judged."""
    heads = rank_heads(rng, 2, 8, 2, scale=1.0)
    x0 = sphere(rng, 12, 8)
    attn = Attention("softmax", 1.0)
    kw = {"T": 0.04, "dt": 0.02, "integrator": "em", "diffusion": 0.05, "engine": "python"}
    got = simulate(x0, heads, attn, **kw)
    want = simulate(x0, full_of(heads), attn, **kw)
    assert got.checks["ito_balance"]["judged"] is True
    assert np.array_equal(got.x, want.x) and got.status == want.status
