"""``ParticleOptions.dtype``: float32 kernel sums in :func:`wflow.simulate`.

Tolerance. Each float32 evaluation is within the kernel's a-priori estimate ``err_est``
(relative to ``Z_i``, resp. ``Z_i max|y|`` for ``Y``; ``KernelLog.max_err_est``), so the
velocity is within ``2 err_est`` on the scale of its absolute terms ``Σ_h w_h ‖|W_O||W_V|‖``
(tests/test_field_rank.py). An RK4 step averages its four stage velocities (weights
summing to 1), so ``S`` steps of ``dt`` add at most ``T · 2 err_est · scale`` to ``x(T)``,
grown by ``e^{L T} ≤ e^{0.5}`` (``L ≲ β ‖A‖ ‖V‖ ≲ 10`` at ``T = 0.05``).
"""

from __future__ import annotations

import numpy as np
import pytest

from wflow import Attention, Heads, ParticleOptions, simulate
from wflow.energy import evaluate
from wflow.infra.schema import ScenarioError
from wflow.particles.options import PARTICLES_SCHEMA

from .conftest import EPS


def sphere(rng, n, d):
    x = rng.standard_normal((n, d))
    return x / np.linalg.norm(x, axis=1)[:, None]


def v_scale(heads: Heads) -> float:
    WV, WO = heads.value_factors()
    return float(np.sum(heads.w) * np.max(np.abs(WO) @ np.abs(WV) @ np.ones(heads.d)))


def test_float32_run_within_the_kernel_estimate(rng):
    d, n, H, k = 64, 60, 4, 16
    heads = Heads.random_rank(H, d, k, rng, scale=1.5)
    x0 = sphere(rng, n, d)
    attn = Attention("softmax", 1.0)
    T, dt = 0.05, 0.01
    r64 = simulate(x0, heads, attn, T=T, dt=dt)
    r32 = simulate(x0, heads, attn, T=T, dt=dt, dtype="float32")
    assert r32.status == "success" and r32.extra["engine"] == "python"
    assert "particles.dtype" in r32.extra["engine_reason"]
    est = r32.extra["kernel"]["max_err_est"]
    assert r32.extra["kernel"]["last"]["dtype"] == "float32"
    assert 0 < est < 1e-4, est
    sc = v_scale(heads)
    # the velocity of the final state, and the trajectory (module docstring)
    v32 = evaluate(r32.x[0], heads, attn, dtype="float32").v
    v64 = evaluate(r32.x[0], heads, attn).v
    assert float(np.max(np.abs(v32 - v64))) <= 2 * est * sc
    err = float(np.max(np.abs(r32.x[0] - r64.x[0])))
    tol = T * 2 * est * sc * np.exp(0.5)
    assert err <= tol, (err, tol)
    # control: float32 was used (an error far above float64 round-off of the same run)
    assert err > 1000 * EPS, err  # (x(T) has unit norm; float64 gives the same x(T))


@pytest.mark.parametrize("engine", ["auto", "python"])
def test_float64_bit_for_bit(rng, engine):
    heads = Heads.random_symmetric(2, 3, rng)
    x0 = sphere(rng, 12, 3)
    attn = Attention("softmax", 1.0)
    a = simulate(x0, heads, attn, T=0.05, dt=0.01, engine=engine)
    b = simulate(x0, heads, attn, T=0.05, dt=0.01, engine=engine, dtype="float64")
    assert a.extra["engine"] == b.extra["engine"]
    assert np.array_equal(a.x, b.x)
    assert all(np.array_equal(a.history[k], b.history[k]) for k in a.history)


def test_dtype_key_and_refusals(rng):
    assert "dtype" in PARTICLES_SCHEMA and ParticleOptions().dtype == "float64"
    with pytest.raises(ValueError, match=r"particles\.dtype"):
        ParticleOptions(dtype="float16")
    from wflow.particles.spec import particle_options_from_dict

    assert particle_options_from_dict({"dtype": "float32"}).dtype == "float32"  # [particles]
    with pytest.raises(ScenarioError, match=r"particles\.dtype"):
        particle_options_from_dict({"dtype": "half"})
    heads = Heads.random_symmetric(2, 3, rng)
    x0 = sphere(rng, 8, 3)
    with pytest.raises(ScenarioError, match=r"particles\.dtype.*compiled"):
        simulate(x0, heads, Attention("softmax", 1.0), T=0.02, dt=0.01, dtype="float32",
                 engine="compiled")
    with pytest.raises(ScenarioError, match=r"particles\.dtype.*attention\.mask"):
        simulate(x0, heads, Attention("softmax", 1.0, mask="causal"), T=0.02, dt=0.01,
                 dtype="float32")
    # d <= 3, engine auto: the Python loop (the fused float64 pass is not used)
    res = simulate(x0, heads, Attention("softmax", 1.0), T=0.02, dt=0.01, dtype="float32")
    assert res.extra["engine"] == "python" and res.status == "success"
    assert res.extra["kernel"]["last"]["dtype"] == "float32"
