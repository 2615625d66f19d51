"""Accuracy on request for noisy particles: the weak-error estimate of the token moments.

The closed-form case is pure diffusion (heads with ``V = 0``: no drift) on ``S²`` from
``x_0 = e_1`` for every token. By rotation invariance a one-step law acts on the degree-``l``
harmonics by a factor ``ρ_l``: ``E[x_T] = ρ_1^S e_1`` and
``E[x_T x_Tᵀ] = I/d + ρ_2^S (e_1e_1ᵀ − I/d)`` (the traceless part of ``xxᵀ`` is of degree 2).
Exact Brownian motion (and so the Strang step, two exact heat-kernel increments):
``ρ_l^S = e^{−D l(l+d−2) T}`` (THEORY §8). Projected Euler–Maruyama over a step ``h``:
``x ← (x + √(2Dh) ξ_⊥)/|…|``, the cosine of the step's angle ``(1 + 2Dh q)^{−1/2}``,
``q ~ χ²_{d−1}``, so ``ρ_1 = E[(1 + 2Dhq)^{−1/2}]`` and, with ``R_2(z) = (dz² − 1)/(d − 1)``,
``ρ_2 = (d E[(1 + 2Dhq)^{−1}] − 1)/(d − 1)`` (quadratures to 1e-12). So both the true weak
error of the run at ``dt`` and the expectation of its Richardson estimate are known.

Statistical assertions are at 4.5 standard errors per moment (9 moments: a false alarm
``< 1e-4`` for a correct code); the seeds are fixed, so the tests are deterministic.
"""

from __future__ import annotations

import numpy as np
import pytest
from scipy import integrate, stats

from wflow.attention.heads import Attention, Heads
from wflow.attention.schedules import OrnsteinUhlenbeck, Parametrisation
from wflow.infra.accuracy import Tolerance
from wflow.infra.schema import ScenarioError
from wflow.particles import ParticleOptions, simulate
from wflow.particles.integrators import INTEGRATORS, EulerMaruyama
from wflow.particles.weak_error import (
    Z_SCORE,
    half_step_seed,
    token_moments,
    weak_error_check,
)
from wflow.status import Status

D, T, d = 0.5, 1.0, 3
#: 4.5 standard errors per moment: with 9 moments a correct code trips this with p < 1e-4
Z_TEST = 4.5


def _pure(n: int):
    """``n`` tokens at ``e_1``; one head with ``V = 0`` (no drift); cheap attention."""
    x0 = np.zeros((n, d))
    x0[:, 0] = 1.0
    heads = Heads(np.eye(d)[None], np.eye(d)[None], np.zeros((1, d, d)), np.ones(1))
    return x0, heads, Attention("usa", 1.0)


def _rho(h: float, l: int) -> float:
    """Euler–Maruyama's one-step factor on degree-``l`` zonal harmonics (l = 1, 2)."""
    if l == 1:
        def f(q):
            return stats.chi2.pdf(q, d - 1) / np.sqrt(1 + 2 * D * h * q)
    else:
        def f(q):
            return stats.chi2.pdf(q, d - 1) * (d / (1 + 2 * D * h * q) - 1) / (d - 1)
    return integrate.quad(f, 0, np.inf, epsabs=1e-13)[0]


def _moments(l1: float, l2: float) -> np.ndarray:
    """The 9 moments (``m_1``, upper triangle of ``m_2``) from ``x_0 = e_1`` given ``ρ_l^S``."""
    e1 = np.eye(d)[0]
    m2 = np.eye(d) / d + l2 * (np.outer(e1, e1) - np.eye(d) / d)
    iu = np.triu_indices(d)
    return np.concatenate([l1 * e1, m2[iu]])


def _exact() -> np.ndarray:
    return _moments(np.exp(-D * (d - 1) * T), np.exp(-2 * D * d * T))


def _em(dt: float) -> np.ndarray:
    S = round(T / dt)
    return _moments(_rho(dt, 1) ** S, _rho(dt, 2) ** S)


def _judged(name, n: int, dt: float, *, rtol: float = 0.1, atol: float = 0.05, seed: int = 0):
    x0, heads, attn = _pure(n)
    return simulate(x0, heads, attn, options=ParticleOptions(
        T=T, dt=dt, integrator=name, diffusion=D, seed=seed, head_rates=False,
        clusters=False, rtol=rtol, atol=atol))


def _z_from(check: dict, expected: np.ndarray) -> np.ndarray:
    """Per moment: distance of the estimate from ``expected`` in standard errors."""
    return (np.asarray(check["moment_error"]) - expected) / np.asarray(check["moment_se"])


class _ClaimsOrder4(EulerMaruyama):
    """Negative control: Euler–Maruyama (weak order 1) declaring order 4, registered."""

    name = "em_claims_4"
    declared_order = 4


# -------------------------------------------------------------------- estimate vs truth
def test_em_estimate_matches_the_closed_form():
    """EM at ``dt = 1/4``, 40 000 tokens: every moment's estimate within 4.5 s.e. of its
    closed-form expectation ``2(M_h − M_{h/2})``, and within ``4.5 s.e. + |bias|`` of the
    true error ``M_h − M_exact`` (the Richardson bias, closed form, is 22 % of the
    largest error at this pre-asymptotic step and is asserted below 25 %).

    Negative control: the same integrator registered with a wrong ``order() = 4``: its
    estimate ``(16/15)(M_h − M_{h/2})`` is 0.47 × the order-1 one, 0.049 off in ``x0``
    (about 15 of its own s.e., which shrink by the same factor), caught by the same
    comparison."""
    dt, n = 0.25, 40_000
    Mh, Mh2, Mx = _em(dt), _em(dt / 2), _exact()
    expect, true = 2.0 * (Mh - Mh2), Mh - Mx
    big = np.abs(true) > 1e-3
    assert np.all(np.abs(expect - true)[big] <= 0.25 * np.abs(true)[big])
    res = _judged("em", n, dt)
    chk = res.checks["accuracy"]
    assert chk["order"] == 1 and chk["tokens"] == n and chk["n_moments"] == 9
    z = _z_from(chk, expect)
    print(f"EM dt={dt}: estimate {np.round(chk['moment_error'], 4)}, true {np.round(true, 4)}"
          f", s.e. {np.round(chk['moment_se'], 4)}, z {np.round(z, 2)}")
    assert np.all(np.abs(z) <= Z_TEST), z
    dist = np.abs(np.asarray(chk["moment_error"]) - true)
    assert np.all(dist <= Z_TEST * np.asarray(chk["moment_se"]) + np.abs(expect - true))
    INTEGRATORS.register(_ClaimsOrder4)
    try:
        wrong = _judged("em_claims_4", n, dt).checks["accuracy"]
    finally:
        INTEGRATORS.unregister("em_claims_4")
    assert wrong["order"] == 4
    zw = _z_from(wrong, expect)
    print(f"declared order 4: z {np.round(zw, 2)}")
    assert np.max(np.abs(zw)) > Z_TEST, zw


def test_strang_estimate_is_zero_for_pure_diffusion():
    """Strang's half steps are exact heat-kernel increments: no bias at any ``dt``; the
    estimate is within 4.5 s.e. of 0 per moment and the run meets a tolerance its noise
    floor allows (``success``)."""
    res = _judged("strang", 20_000, 0.25)
    chk = res.checks["accuracy"]
    assert chk["order"] == 2
    z = _z_from(chk, np.zeros(9))
    assert np.all(np.abs(z) <= Z_TEST), z
    assert res.status == Status.SUCCESS and chk["passed"] and chk["error_upper"] <= 1


# ------------------------------------------------------------------------ the verdicts
def test_success_inaccurate_inconclusive_are_each_reached():
    """One case each, through ``simulate``; the messages name their remedy.

    * success: Strang, 40 000 tokens, ``rtol = 0.1``, ``atol = 0.03``;
    * inaccurate (a ``dt`` far too coarse, the negative control of success): EM at
      ``dt = 1/2``, true error 0.21 in ``x0`` against a tolerance ``≈ 0.013``;
    * inconclusive (an ensemble too small, the negative control of success): the
      success case with 300 tokens: the noise floor alone exceeds the tolerance.
    """
    ok = _judged("strang", 40_000, 0.25, rtol=0.1, atol=0.03)
    assert ok.status == Status.SUCCESS, ok.message
    assert ok.message == "" and ok.checks["accuracy"]["verdict"] == "success"

    bad = _judged("em", 20_000, 0.5, rtol=0.01, atol=0.01)
    chk = bad.checks["accuracy"]
    assert bad.status == Status.INACCURATE, bad.message
    assert chk["error_lower"] > 1 and not chk["passed"]
    rem = chk["dt_remedy"]
    assert rem == pytest.approx(0.5 * (0.9 / chk["error"]) ** 1.0)
    assert f"dt <= {rem:.3g}" in bad.message and f"({chk['steps_remedy']} steps)" in bad.message

    small = _judged("strang", 300, 0.25, rtol=0.1, atol=0.03)
    chk = small.checks["accuracy"]
    assert small.status == Status.INCONCLUSIVE, small.message
    assert chk["floor"] > 1 and chk["error_lower"] <= 1 < chk["error_upper"]
    n_need = chk["n_needed"]
    # the floor is ∝ 1/√n: n_needed = ⌈n F²⌉ (40 000 tokens succeeded above)
    assert n_need == int(np.ceil(300 * chk["floor"] ** 2)) and 300 < n_need <= 40_000
    assert f"n >= {n_need} tokens" in small.message


def test_moments_and_verdict_of_the_function():
    """:func:`weak_error_check` on known arrays: moments, s.e. from both runs, the verdicts.

    Tokens ``±e_1`` (half each): ``m_1 = 0``, ``m_2 = e_1e_1ᵀ``; the variance of ``x0`` is
    exactly ``N/(N − 1)``. Shifting every token of the ``dt`` run to ``e_1`` moves ``x0`` by
    1 with s.e. ``2·√(var/N)`` (order 1): ``inaccurate`` at a small tolerance."""
    N = 1000
    x = np.zeros((N, d))
    x[: N // 2, 0], x[N // 2:, 0] = 1.0, -1.0
    mo = token_moments(x[None])
    assert mo.count == N and mo.labels[:4] == ("x0", "x1", "x2", "x0x0")
    assert mo.mean[0] == 0.0 and mo.mean[3] == 1.0
    # the variance of ±1, N/(N−1), to a few ulps of the mean of N terms
    assert mo.var[0] == pytest.approx(N / (N - 1), rel=10 * N * np.finfo(float).eps)
    tol = Tolerance(rtol=0.1, atol=0.1)
    same = weak_error_check(x, x, order=2, tol=tol, dt=0.1, T=1.0)
    assert same.status == Status.SUCCESS and same.record["error"] == 0.0
    y = np.zeros((N, d))
    y[:, 0] = 1.0
    shifted = weak_error_check(y, x, order=1, tol=tol, dt=0.1, T=1.0)
    assert shifted.status == Status.INACCURATE
    se0 = shifted.record["moment_se"][0]
    # the ±1 run's variance (a sum of N squares) to ~N ε, the constant run's exactly 0
    assert se0 == pytest.approx(2 * np.sqrt(N / (N - 1) / N), rel=10 * N * np.finfo(float).eps)
    # sums of ±1 and of 1 are exact integers: e = 2·(1 − 0) exactly
    assert shifted.record["moment_error"][0] == 2.0
    assert shifted.record["z"] == Z_SCORE


# --------------------------------------------------------------- bit for bit, refusals
def test_no_tolerance_is_todays_run_and_the_judged_run_is_that_run():
    """``rtol = atol = None``: no ``accuracy`` check, the same tokens as before; a judged
    run's own tokens and history are that run's, bit for bit (the rerun is apart)."""
    x0, heads, attn = _pure(500)
    for name in ("em", "strang", "strang-heun"):
        kw = dict(T=0.5, dt=0.1, integrator=name, diffusion=D, seed=4, head_rates=False,
                  clusters=False)
        a = simulate(x0, heads, attn, options=ParticleOptions(**kw))
        b = simulate(x0, heads, attn, options=ParticleOptions(**kw, rtol=None, atol=None))
        j = simulate(x0, heads, attn, options=ParticleOptions(**kw, rtol=0.1, atol=0.05))
        assert "accuracy" not in a.checks and "accuracy" not in b.checks
        assert np.array_equal(a.x, b.x) and np.array_equal(a.x, j.x)
        assert np.array_equal(a.steps["E"], j.steps["E"])
        chk = j.checks["accuracy"]
        assert "chain" in j.checks  # still recorded; the tolerance decides the status
        assert chk["seed"] == 4 and chk["seed_half"] == half_step_seed(4) != 4
        assert chk["rerun_steps"] == 2 * chk["run_steps"] == 10


def test_half_step_seed_is_independent_and_fixed():
    """The rerun's seed: a function of the seed, none of the paths' seeds, non-negative."""
    seeds = {half_step_seed(s) for s in range(100)}
    assert len(seeds) == 100 and all(0 <= s < 2**63 for s in seeds)
    assert half_step_seed(7) == half_step_seed(7)
    assert not seeds & set(range(100))


def test_refusals_name_the_key():
    """Adaptive steps with D > 0, noisy weights, a deterministic integrator: by key."""
    x0, heads, attn = _pure(20)
    base = dict(T=0.1, dt=0.05, diffusion=0.1, head_rates=False, clusters=False)
    with pytest.raises(ScenarioError, match=r"particles\.adaptive.*rtol"):
        simulate(x0, heads, attn, options=ParticleOptions(integrator="em", adaptive=True,
                                                          **base))
    with pytest.raises(ScenarioError, match=r"particles\.integrator"):
        simulate(x0, heads, attn, options=ParticleOptions(integrator="rk4", rtol=0.1,
                                                          **base))
    rng = np.random.default_rng(0)
    Z = rng.standard_normal((1, d, d))
    param = Parametrisation("bilinear", np.ones(1), value_sign=-1.0)
    ou = OrnsteinUhlenbeck(param, Z + Z.swapaxes(1, 2), np.eye(d), kappa=1.0, sigma0=0.5)
    with pytest.raises(ScenarioError, match=r"particles\.atol.*noisy weights"):
        simulate(x0, ou, attn, options=ParticleOptions(integrator="em", atol=0.1, **base))
    with pytest.raises(ValueError, match=r"weak order"):
        weak_error_check(x0, x0, order=0, tol=Tolerance(), dt=0.1, T=1.0)
    # one token: refused before any run (no variance to judge by)
    with pytest.raises(ValueError, match=r"particles\.rtol.*two tokens"):
        simulate(x0[:1], heads, attn, options=ParticleOptions(integrator="em", rtol=0.1,
                                                              **base))
    two = simulate(x0[:2], heads, attn, options=ParticleOptions(integrator="em", rtol=0.1,
                                                                 **base))
    assert "accuracy" in two.checks  # the control: two tokens are judged


CLI_SCENARIO = """
seed = 3
[attention]
kind = "softmax"
beta = 1.0
d = 3
diffusion = 0.5
[tokens]
n = 400
sampler = "vmf"
means = [[1.0, 0.0, 0.2]]
kappas = [5.0]
[heads]
type = "matrices"
A = [[[1.5, 0.3, 0.0], [0.3, 0.5, 0.0], [0.0, 0.0, -0.5]]]
w = "mean"
[particles]
T = 0.3
dt = 0.05
integrator = "em"
rtol = 0.1
atol = 0.05
"""


def test_cli_reaches_the_estimate_and_documents_its_keys(tmp_path):
    """``wflow particles`` with ``[particles] rtol`` and ``[attention] diffusion``: the
    verdict is the run's status and every ``checks.accuracy.*`` key is in the table."""
    import json

    from wflow.apps.output_keys import contract_problems
    from wflow.cli import main

    sc = tmp_path / "noisy.toml"
    sc.write_text(CLI_SCENARIO, encoding="utf-8")
    main(["particles", str(sc), "--out", str(tmp_path / "out")])
    summary = json.loads((tmp_path / "out" / "summary.json").read_text(encoding="utf-8"))
    acc = summary["checks"]["accuracy"]
    assert summary["status"] == acc["verdict"]
    assert {"error", "floor", "z", "order", "dt_remedy", "n_needed", "moments", "seed_half",
            "rerun_steps", "moment_se"} <= set(acc)
    assert not contract_problems(summary, "particles"), contract_problems(summary, "particles")


def test_the_cost_estimate_counts_the_rerun():
    """A judged noisy run is estimated at three times the bare run's steps (dt and dt/2)."""
    from wflow.particles.estimate import estimate_run

    kw = dict(T=1.0, dt=0.1, integrator="em", diffusion=0.5)
    bare = estimate_run(ParticleOptions(**kw), n=1000, d=3, H=1, kind="usa")
    judged = estimate_run(ParticleOptions(**kw, rtol=0.1), n=1000, d=3, H=1, kind="usa")
    only_atol = estimate_run(ParticleOptions(**kw, atol=0.1), n=1000, d=3, H=1, kind="usa")
    assert judged.steps == only_atol.steps == 3 * bare.steps
    assert any("weak-error" in note for note in judged.notes)


def test_paths_are_pooled_and_the_remedy_is_per_path():
    """``n_paths = 2`` token-noise replicates: ``N = 2n`` tokens in each moment; the
    token count named is per path, ``⌈n F²⌉``."""
    x0, heads, attn = _pure(200)
    res = simulate(x0, heads, attn, options=ParticleOptions(
        T=0.5, dt=0.25, integrator="strang", diffusion=D, n_paths=2, head_rates=False,
        clusters=False, rtol=0.01, atol=0.001))
    chk = res.checks["accuracy"]
    assert res.x.shape[0] == 2 and chk["tokens"] == 400
    # Strang has no bias here; the floor of 400 tokens is far above this tolerance
    assert res.status == Status.INCONCLUSIVE, res.message
    assert chk["n_needed"] == int(np.ceil(200 * chk["floor"] ** 2))
    assert f"n >= {chk['n_needed']} tokens per path" in res.message
