"""Token diffusion in the particle solver (THEORY §8, issue 40 item 2).

* ``diffusion = 0`` is today's run bit for bit; bad ``D`` and a deterministic integrator
  with ``D > 0`` are refused naming the key.
* The keyed noise streams (:mod:`wflow.particles.noise`) give every token the same numbers
  however the tokens are split into rows (the MPI property, checked here in one process;
  ``mpirun -n P`` in tests/test_particles_noise_mpi.py).
* The exact heat-kernel increment satisfies ``E[R_l(x_τ·x)] = e^{−D l(l+d−2)τ}``
  (``R_l = C_l/C_l(1)``), d = 2, 3, 8.
* Weak orders: projected Euler–Maruyama fitted ≈ 1 against the exact identity (pure
  diffusion, d = 2, 3, 8); the Strang scheme is exact for pure diffusion and fitted ≈ 2
  with a drift on (von Mises–Fisher drift ``κ P_x a``, exact reference by the
  generator's matrix exponential in the zonal harmonics, common random numbers across
  step sizes); Euler–Maruyama with the drift on fitted ≈ 1 the same way. The
  negative controls are a Lie splitting (weak order 1, refused as order 2) and a Strang
  scheme with ``D`` off by 2 % (caught by the limit). The drift-outside splitting
  ``strang-heun`` is exact for pure diffusion and fitted ≈ 2 with the drift on (its own
  Lie splitting and a short drift as controls); its ``D = 0`` step is order 2.
"""

from __future__ import annotations

from dataclasses import replace

import numpy as np
import pytest
from scipy.linalg import expm
from scipy.special import roots_jacobi

from wflow.attention.heads import Attention, Heads
from wflow.geometry.sphere import sample_uniform
from wflow.infra.schema import ScenarioError
from wflow.particles import ParticleOptions, simulate
from wflow.particles.integrators import (
    INTEGRATORS,
    StrangHeat,
    StrangHeun,
    _heun_halves,
    _rk4_step,
)
from wflow.particles.noise import HeatAngle, TokenNoise, heat_angle, heat_step, zonal_ratio


# ---------------------------------------------------------------------------- helpers
class _Field:
    """A token-wise drift ``v(x) = κ P_x a`` (duck-types the integrators' kernel)."""

    def __init__(self, a: np.ndarray, kappa: float) -> None:
        self.a, self.kappa = a, kappa

    def evaluate(self, x, heads, attn):
        return type("F", (), {"v": self.kappa * (self.a[None] - (x @ self.a)[:, None] * x)})


class _Composed:
    """The noise of one coarse step made of ``m`` fine draws (common random numbers).

    ``normals``: the fine normals' sum over ``√m`` (the same Brownian increment);
    ``heat``: the fine exact increments applied in turn (``B_{mτ} = B_τ^m`` in law).
    """

    def __init__(self, xi: list[list[np.ndarray]], th: list[list[np.ndarray]] | None) -> None:
        self.xi, self.th = xi, th

    def normals(self, draw: int = 0) -> np.ndarray:
        return sum(self.xi[draw]) / np.sqrt(len(self.xi[draw]))

    def heat(self, x: np.ndarray, s: float, draw: int = 0) -> np.ndarray:
        for xi, th in zip(self.xi[draw], self.th[draw], strict=True):
            x = heat_step(x, np.cos(th), np.sin(th), xi)
        return x


def _exact_vmf(l: int, T: float, D: float, kappa: float, d: int, z0: float,
               J: int = 48) -> float:
    """``E[R_l(a·x_T)]`` for ``dx = κ P_x a dt + √(2D) P_x∘dW`` from ``a·x_0 = z0``.

    The generator on zonal functions ``g(a·x)`` is ``κ(1−z²)g' + D((1−z²)g'' − (d−1)z g')``;
    in the basis ``R_0..R_J`` (Gauss–Jacobi projection, exact for these polynomials) it is
    a matrix ``M`` and ``E[R_l] = (e^{TM} e_l)·R(z0)``. The neglected coefficient of
    ``R_{J+1}`` is below 1e-15 for these parameters (``J = 48``, ``κT ≤ 2``).
    """
    al = 0.5 * (d - 3)
    zq, wq = roots_jacobi(J + 8, al, al)
    R = zonal_ratio(J + 1, zq, d)
    lam2 = d - 2
    dR = np.zeros_like(R)
    d2R = np.zeros_like(R)
    dR[1] = 1.0
    for j in range(1, J + 1):  # differentiate the recurrence of zonal_ratio
        dR[j + 1] = ((2 * j + lam2) * (R[j] + zq * dR[j]) - j * dR[j - 1]) / (j + lam2)
        d2R[j + 1] = ((2 * j + lam2) * (2 * dR[j] + zq * d2R[j]) - j * d2R[j - 1]) / (j + lam2)
    LR = kappa * (1 - zq**2) * dR + D * ((1 - zq**2) * d2R - (d - 1) * zq * dR)
    G = (R[: J + 1] * wq) @ R[: J + 1].T
    M = np.linalg.solve(G, (R[: J + 1] * wq) @ LR[: J + 1].T)
    c = expm(T * M)[:, l]
    return float(c @ zonal_ratio(J, np.array(z0), d))


def _run_crn(integ, d: int, N: int, D: float, kappa: float, T: float, steps: list[int],
             seed: int = 0, l: int = 1, z0: float = 0.0) -> dict[int, np.ndarray]:
    """``R_l(a·x_T)`` per token for each step count, one Brownian path per token for all.

    Tokens start at ``a·x_0 = z0``; the fine draws of the finest grid build every coarser
    step (:class:`_Composed`).
    """
    rng = np.random.default_rng(seed)
    a = np.zeros(d)
    a[0] = 1.0
    x0 = np.zeros((N, d))
    x0[:, 0] = z0
    x0[:, 1] = np.sqrt(1.0 - z0 * z0)
    field = _Field(a, kappa)
    fine = max(steps)
    half = integ.draws == 2
    H = heat_angle(d, D * (T / fine) / 2) if half else None
    theta = np.zeros(1)  # static "weights": every stage reuses the heads object
    xs = {S: x0.copy() for S in steps}
    buf: dict[int, list] = {S: [] for S in steps}
    for _ in range(fine):  # all step sizes in lockstep over the fine draws
        if half:  # a fine step's two half increments, in order
            draw = [(rng.standard_normal((N, d)), H.sample(rng, N)) for _ in range(2)]
        else:
            draw = [(rng.standard_normal((N, d)), None)]
        for S in steps:
            buf[S].extend(draw)
            m = fine // S
            if len(buf[S]) < m * len(draw):
                continue
            seq, buf[S] = buf[S], []
            if half:  # coarse half step = m fine half steps
                noise = _Composed([[q[0] for q in seq[:m]], [q[0] for q in seq[m:]]],
                                  [[q[1] for q in seq[:m]], [q[1] for q in seq[m:]]])
            else:
                noise = _Composed([[q[0] for q in seq]], None)
            x = xs[S]
            v = field.evaluate(x, None, None).v
            xs[S] = integ.noisy_step(x, T / S, v, object(), theta, theta, theta, None, None,
                                     "transformer", field, diffusion=D, noise=noise)
    return {S: zonal_ratio(l, xs[S] @ a, d)[l] for S in steps}


def _slope(h: np.ndarray, err: np.ndarray) -> float:
    """Least-squares slope of ``log|err|`` against ``log h``."""
    return float(np.polyfit(np.log(h), np.log(np.abs(err)), 1)[0])


# ------------------------------------------------------------------- the model switch
def _system(n: int = 60, d: int = 3):
    rng = np.random.default_rng(3)
    return (sample_uniform(n, d, rng), Heads.random_symmetric(2, d, rng, scale=0.8),
            Attention("softmax", 1.0))


@pytest.mark.parametrize("engine", ["auto", "python"])
def test_zero_diffusion_is_todays_run_bit_for_bit(engine):
    x, h, at = _system()
    a = simulate(x, h, at, options=ParticleOptions(T=0.1, dt=0.025, engine=engine))
    b = simulate(x, h, at, options=ParticleOptions(T=0.1, dt=0.025, engine=engine,
                                                   diffusion=0.0))
    assert np.array_equal(a.x, b.x)
    for key in a.history:
        assert np.array_equal(a.history[key], b.history[key]), key
    # the stochastic integrators at D = 0 are their deterministic schemes, bit for bit
    e = simulate(x, h, at, options=ParticleOptions(T=0.1, dt=0.025, engine="python",
                                                   integrator="euler"))
    m = simulate(x, h, at, options=ParticleOptions(T=0.1, dt=0.025, engine="python",
                                                   integrator="em"))
    assert np.array_equal(e.x, m.x)
    # negative control: D > 0 moves the tokens (a switch that did nothing would pass above)
    c = simulate(x, h, at, options=ParticleOptions(T=0.1, dt=0.025, integrator="em",
                                                   diffusion=1e-3))
    assert not np.array_equal(m.x, c.x)


@pytest.mark.parametrize("bad", [-0.1, float("nan"), float("inf"), "0.1", True])
def test_bad_diffusion_names_the_key(bad):
    with pytest.raises(ScenarioError, match="particles.diffusion"):
        ParticleOptions(diffusion=bad)


def test_deterministic_integrator_with_noise_is_refused():
    x, h, at = _system()
    with pytest.raises(ScenarioError, match="particles.integrator: 'rk4' is deterministic"):
        simulate(x, h, at, options=ParticleOptions(T=0.1, dt=0.05, diffusion=0.1))


def test_noisy_runs_repeat_and_stay_on_the_sphere():
    x, h, at = _system()
    for name in ("em", "strang", "strang-heun"):
        opts = ParticleOptions(T=0.1, dt=0.05, integrator=name, diffusion=0.2, seed=5)
        a, b = simulate(x, h, at, options=opts), simulate(x, h, at, options=opts)
        assert a.status == "success", a.message
        # the default judges the Itô balance, recorded by the Python loop; without it
        # (ito_balance = false) every built-in noisy step runs compiled, the same path
        assert a.extra["engine"] == "python" and a.checks["ito_balance"]["judged"]
        c = simulate(x, h, at, options=replace(opts, ito_balance=False))
        assert c.extra["engine"] == "compiled" and c.status == "completed"
        assert np.max(np.abs(c.x - a.x)) <= 1e-12
        assert np.array_equal(a.x, b.x)
        # one normalisation per step: |x| = 1 within a few ulps
        assert np.max(np.abs(np.linalg.norm(a.x, axis=-1) - 1)) <= 8 * np.finfo(float).eps
        other = simulate(x, h, at, options=ParticleOptions(T=0.1, dt=0.05, integrator=name,
                                                           diffusion=0.2, seed=6))
        assert not np.array_equal(a.x, other.x)  # the seed keys the streams
    assert INTEGRATORS["em"].order() == 1 and INTEGRATORS["strang"].order() == 2
    assert INTEGRATORS["strang-heun"].order() == 2
    # field evaluations per step (the estimate's work): the drift-outside splitting
    # shares its first stage with the state, as RK4 does; "strang" evaluates once more
    assert [INTEGRATORS[k].stages() for k in ("rk4", "strang", "strang-heun")] == [4, 5, 4]


# ------------------------------------------------------------------------ keyed streams
@pytest.mark.parametrize("P", [1, 2, 3, 5])
def test_streams_are_keyed_by_token_block_not_by_rows(P):
    n, d, block = 1000, 3, 128  # blocks straddle the row splits
    full = TokenNoise(9, n, d, block=block)
    x = sample_uniform(n, d, np.random.default_rng(1))
    ref_n = full.at(7).normals(0)
    ref_h = full.at(7).heat(x, 0.01, 1)
    cuts = np.linspace(0, n, P + 1).astype(int)
    parts_n, parts_h = [], []
    for a, b in zip(cuts[:-1], cuts[1:], strict=True):
        part = TokenNoise(9, n, d, first=a, count=b - a, block=block)
        parts_n.append(part.at(7).normals(0))
        parts_h.append(part.at(7).heat(x[a:b], 0.01, 1))
    assert np.array_equal(np.concatenate(parts_n), ref_n)
    assert np.array_equal(np.concatenate(parts_h), ref_h)
    # negative control: rows drawn as if keyed by the rank (each rank's rows from 0)
    if P > 1:
        a, b = cuts[1], cuts[2]
        by_rank = TokenNoise(9, b - a, d, block=block).at(7).normals(0)
        assert not np.array_equal(by_rank, ref_n[a:b])
    # steps, draws and paths are separate streams
    assert not np.array_equal(full.at(8).normals(0), ref_n)
    assert not np.array_equal(full.at(7).normals(1), ref_n)
    assert not np.array_equal(TokenNoise(9, n, d, block=block, path=1).at(7).normals(0), ref_n)


# -------------------------------------------------------------- exact heat increments
@pytest.mark.parametrize("d", [2, 3, 8])
@pytest.mark.parametrize("s", [1e-3, 0.02, 0.7])
def test_heat_increment_matches_the_heat_kernel_identity(d, s):
    """``E[R_l(x_τ·x)] = e^{−l(l+d−2)s}``, l = 1..4, within 4.5 standard errors.

    60 000 samples; 12 (l, s) moments per d, so 4.5 σ keeps the false-fail rate of the
    whole parametrisation below 1e-3. The envelope's margin is 1e-12: far below the SE.
    Negative control: samples of ``s(1 + 4 %)`` fail the same test (where the moments
    are not all ≈ 0: ``e^{−(d−1)s} > 0.3``).
    """
    N = 60_000
    x = np.zeros((N, d))
    x[:, 0] = 1.0
    noise = TokenNoise(11, N, d)
    y = noise.at(0).heat(x, s, 0)
    ll = np.arange(1, 5)
    R = zonal_ratio(4, y[:, 0], d)[1:]
    z = (R.mean(1) - np.exp(-ll * (ll + d - 2) * s)) / (R.std(1) / np.sqrt(N))
    assert np.all(np.abs(z) < 4.5), z
    if np.exp(-(d - 1) * s) <= 0.3:
        return
    wrong = HeatAngle(d, 1.04 * s).sample(np.random.default_rng(2), N)
    Rw = zonal_ratio(4, np.cos(wrong), d)[1:]
    zw = (Rw.mean(1) - np.exp(-ll * (ll + d - 2) * s)) / (Rw.std(1) / np.sqrt(N))
    assert np.max(np.abs(zw)) > 4.5, zw


def _series_by_arrays(coef: np.ndarray, z: np.ndarray, d: int) -> np.ndarray:
    """The heat-kernel series in array form (the sampler's former ``kernel``): the oracle."""
    out = np.zeros(z.shape)
    lam2 = float(d - 2)
    r0, r1 = np.ones(z.shape), z.copy()
    out += coef[0] * r0
    if coef.size > 1:
        out += coef[1] * r1
    for ll in range(1, coef.size - 1):
        r0, r1 = r1, ((2 * ll + lam2) * z * r1 - ll * r0) / (ll + lam2)
        out += coef[ll + 1] * r1
    return out


@pytest.mark.parametrize("d", [2, 3, 8, 65])
def test_compiled_heat_series_is_the_array_form_bit_for_bit(d):
    """The compiled series equals the array form bit for bit, so the accept decisions and
    the keyed draws are the ones the array form made (5 000 angles, ``s`` from a small
    step, ``l ≈ 300`` terms, to ``s = 2``). Negative control: the first coefficient (the
    constant term, 1) changed by one ulp is seen."""
    z = np.cos(np.random.default_rng(d).uniform(0.0, np.pi, 5000))
    for s in (1e-5, 5e-4, 0.02, 0.7, 2.0):
        h = HeatAngle(d, s)
        assert np.array_equal(h.kernel(z), _series_by_arrays(h.coef, z, d)), s
    coef = h.coef.copy()
    coef[0] = np.nextafter(coef[0], 2.0)
    assert not np.array_equal(h.kernel(z), _series_by_arrays(coef, z, d))


# ------------------------------------------------------------------------ weak orders
def _fit(r: dict[int, np.ndarray], steps: list[int], T: float, exact: float):
    """Differences ``E_h − E_{h/2}`` with their SE, their fitted slope, the finest error."""
    N = r[steps[0]].size
    pairs = list(zip(steps[:-1], steps[1:], strict=True))
    diffs = np.array([r[a].mean() - r[b].mean() for a, b in pairs])
    dse = np.array([(r[a] - r[b]).std() / np.sqrt(N) for a, b in pairs])
    q = _slope(T / np.array(steps[:-1]), diffs)
    fin = r[steps[-1]]
    return q, diffs, dse, fin.mean() - exact, fin.std() / np.sqrt(N)


@pytest.mark.parametrize("d", [2, 3, 8])
def test_euler_maruyama_weak_order_one_pure_diffusion(d):
    """EM with ``v = 0`` against ``E[R_1(x_T·x_0)] = e^{−(d−1)DT}``: fitted order ≈ 1.

    ``D = 0.25``, ``T = 1``, ``h = 1/8 … 1/64``, 30 000 tokens, every step size driven by
    the same Brownian paths (the fine normals summed): the differences ``E_h − E_{h/2}``
    are asserted ≥ 10 of their standard errors (slope error ≤ 0.1). Their slope is the
    weak order; the exact one-step law (a quadrature over ``χ²_{d−1}``) gives
    pre-asymptotic slopes 0.80–0.89 over this range, so the tolerance is
    ``|q − 1| ≤ 0.3``. The limit: the finest mean is within ``4.5 SE + 2|E_h − E_{h/2}|``
    of the exact identity (the bias left by an order-1 scheme is about its last
    difference). The exact reference of the drift test reproduces the identity at
    ``κ = 0`` to 1e-12 (checked here).
    """
    D, T, N = 0.25, 1.0, 30_000
    steps = [8, 16, 32, 64]
    exact = np.exp(-D * (d - 1) * T)
    assert abs(_exact_vmf(1, T, D, 0.0, d, 1.0) - exact) <= 1e-12
    r = _run_crn(INTEGRATORS["em"], d, N, D, 0.0, T, steps, z0=1.0)
    q, diffs, dse, err, se = _fit(r, steps, T, exact)
    print(f"EM pure diffusion d={d}: differences {diffs}, fitted weak order {q:.3f}, "
          f"error at h=1/64 {err:.2e} (SE {se:.1e})")
    assert np.all(np.abs(diffs) >= 10 * dse), (diffs, dse)
    assert abs(q - 1.0) <= 0.3, q
    assert abs(err) <= 4.5 * se + 2 * abs(diffs[-1]), (err, se, diffs)


@pytest.mark.parametrize("name", ["strang", "strang-heun"])
@pytest.mark.parametrize("d", [2, 3, 8])
def test_strang_is_exact_for_pure_diffusion(d, name):
    """With ``v = 0`` a Strang step is two exact increments: no bias at any ``h``.

    ``h = T, T/4``; each mean within 4.5 SE of ``e^{−l(l+d−2)DT}`` (l = 1, 2).
    """
    D, T, N = 0.3, 1.0, 60_000
    st = INTEGRATORS[name]
    x0 = np.zeros((N, d))
    x0[:, 0] = 1.0
    zero_field = _Field(np.eye(d)[0], 0.0)
    theta = np.zeros(1)
    ll = np.array([1, 2])
    for S in (1, 4):
        noise = TokenNoise(200 + S, N, d)
        x = x0.copy()
        for k in range(S):
            x = st.noisy_step(x, T / S, np.zeros((N, d)), object(), theta, theta, theta, None,
                              None, "transformer", zero_field, diffusion=D, noise=noise.at(k))
        R = zonal_ratio(2, x[:, 0], d)[1:]
        z = (R.mean(1) - np.exp(-ll * (ll + d - 2) * D * T)) / (R.std(1) / np.sqrt(N))
        assert np.all(np.abs(z) < 4.5), (S, z)


class _Lie(StrangHeat):
    """Negative control: Lie splitting ``B_h ∘ Φ_h`` (weak order 1), not registered."""

    def noisy_step(self, x, h, k1, heads, theta, theta_mid, theta_new, schedule, attn, flow,
                   kernel, *, diffusion, noise):
        y = _rk4_step(x, h, k1, heads, theta, theta_mid, theta_new, schedule, attn, flow,
                      kernel)
        return noise.heat(noise.heat(y, 0.5 * diffusion * h, 0), 0.5 * diffusion * h, 1)


class _SlowDrift(StrangHeat):
    """Negative control: the Strang scheme whose drift step is 10 % short (``Φ_{0.9h}``)."""

    def noisy_step(self, x, h, k1, heads, theta, theta_mid, theta_new, schedule, attn, flow,
                   kernel, *, diffusion, noise):
        s = 0.5 * diffusion * h
        y = noise.heat(x, s, 0)
        k1y = kernel.evaluate(y, heads, attn).v
        y = _rk4_step(y, 0.9 * h, k1y, heads, theta, theta_mid, theta_new, schedule, attn,
                      flow, kernel)
        return noise.heat(y, s, 1)


def _strang_fit(integ, d: int, N: int):
    """The Strang problem (vMF drift, d, N tokens): :func:`_fit`'s numbers."""
    D, kappa, T = 0.5, 1.5, 1.0
    steps = [2, 4, 8, 16]
    r = _run_crn(integ, d, N, D, kappa, T, steps)
    return _fit(r, steps, T, _exact_vmf(1, T, D, kappa, d, 0.0))


def test_strang_weak_order_two_with_drift():
    """Strang with the von Mises–Fisher drift, d = 3: fitted weak order ≈ 2.

    ``D = 0.5``, ``κ = 1.5``, ``T = 1``, ``h = 1/2 … 1/16``, 50 000 tokens; every step
    size is driven by the same Brownian paths (the fine exact increments composed), so
    the differences ``E_h − E_{h/2}`` carry little Monte-Carlo error: each is asserted
    ≥ 4 of its standard errors (log error ≤ 0.25, slope error ≤ 0.18 over the three
    differences). The slope of ``|E_h − E_{h/2}|`` is the weak order; pre-asymptotic
    slopes here are 1.8–2.1. Tolerance ``|q − 2| ≤ 0.35``. The limit: the finest mean is
    within ``4.5 SE + 2|E_{h} − E_{h/2}|`` of the exact generator value (the remaining
    bias of an order ≥ 1 scheme is below its last difference).

    Negative controls (30 000 tokens): the Lie splitting fits order < 1.5 (refused as
    order 2); a drift step 10 % short misses the exact limit (by ≈ 0.04, against a
    tolerance ≈ 0.015).
    """
    d, N = 3, 50_000
    q, diffs, dse, err, se = _strang_fit(INTEGRATORS["strang"], d, N)
    print(f"Strang + drift d={d}: differences {diffs}, fitted weak order {q:.3f}, "
          f"limit error {err:.2e} (SE {se:.1e})")
    assert np.all(np.abs(diffs) >= 4 * dse), (diffs, dse)
    assert abs(q - 2.0) <= 0.35, q
    assert abs(err) <= 4.5 * se + 2 * abs(diffs[-1]), (err, se, diffs)
    q_lie, *_ = _strang_fit(_Lie(), d, 30_000)
    assert q_lie < 1.5, q_lie
    _, diffs_w, _, err_w, se_w = _strang_fit(_SlowDrift(), d, 30_000)
    assert abs(err_w) > 4.5 * se_w + 2 * abs(diffs_w[-1]), (err_w, se_w, diffs_w)


class _LieHeun(StrangHeun):
    """Negative control: ``B_h ∘ Φ^{Heun}_{h/2} ∘ Φ^{Heun}_{h/2}`` (weak order 1)."""

    def noisy_step(self, x, h, k1, heads, theta, theta_mid, theta_new, schedule, attn, flow,
                   kernel, *, diffusion, noise):
        s = 0.5 * diffusion * h
        y = _heun_halves(x, h, k1, heads, theta, theta_mid, theta_new, schedule, attn, flow,
                         kernel)
        return noise.heat(noise.heat(y, s, 0), s, 1)


class _ShortHeun(StrangHeun):
    """Negative control: the drift-outside splitting whose drift is 10 % short."""

    def noisy_step(self, x, h, k1, heads, theta, theta_mid, theta_new, schedule, attn, flow,
                   kernel, *, diffusion, noise):
        return super().noisy_step(x, 0.9 * h, k1, heads, theta, theta_mid, theta_new,
                                  schedule, attn, flow, kernel, diffusion=diffusion / 0.9,
                                  noise=noise)


def test_strang_heun_weak_order_two_with_drift():
    """The drift-outside splitting with the von Mises–Fisher drift, d = 3: weak order ≈ 2.

    ``D = 1``, ``κ = 2``, ``T = 1``, ``h = 1 … 1/8``, 200 000 tokens, every step size
    driven by the same Brownian paths. Its differences ``E_h − E_{h/2}`` are smaller than
    ``"strang"``'s at the Strang test's ``D = 0.5, κ = 1.5`` (there the last one is below
    its Monte-Carlo error), so this problem is stronger and the steps coarser: measured
    differences 6.8e-2, 1.7e-2, 4.6e-3 (15–100 standard errors), ratios 4.0 and 3.8,
    fitted order 1.96. Asserted as for ``"strang"``: each difference ≥ 4 standard errors,
    ``|q − 2| ≤ 0.35``, and the finest mean within ``4.5 SE + 2|E_h − E_{h/2}|`` of the
    exact generator value. Negative controls (100 000 tokens): the Lie splitting
    ``B_h ∘ Φ_h`` fits order 0.66 (< 1.5, refused as order 2); a drift 10 % short misses
    the exact limit (by 0.039, against a tolerance of 0.016).
    """
    D, kappa, T, d, steps = 1.0, 2.0, 1.0, 3, [1, 2, 4, 8]
    exact = _exact_vmf(1, T, D, kappa, d, 0.0)

    def fit(integ, N):
        return _fit(_run_crn(integ, d, N, D, kappa, T, steps), steps, T, exact)

    q, diffs, dse, err, se = fit(INTEGRATORS["strang-heun"], 200_000)
    print(f"Strang-Heun + drift: differences {diffs}, fitted weak order {q:.3f}, "
          f"limit error {err:.2e} (SE {se:.1e})")
    assert np.all(np.abs(diffs) >= 4 * dse), (diffs, dse)
    assert abs(q - 2.0) <= 0.35, q
    assert abs(err) <= 4.5 * se + 2 * abs(diffs[-1]), (err, se, diffs)
    q_lie, *_ = fit(_LieHeun(), 100_000)
    assert q_lie < 1.5, q_lie
    _, diffs_w, _, err_w, se_w = fit(_ShortHeun(), 100_000)
    assert abs(err_w) > 4.5 * se_w + 2 * abs(diffs_w[-1]), (err_w, se_w, diffs_w)


def test_strang_heun_without_noise_is_second_order():
    """``D = 0``: two Heun half steps, order 2 against the exact drift flow.

    ``dx = κ P_x a dt`` moves ``z = a·x`` by ``ż = κ(1 − z²)``, so
    ``z(T) = tanh(κT + artanh z₀)``. ``κ = 2``, ``T = 1``, ``z₀ = −0.5``, ``h = 1/4 … 1/32``:
    the errors' fitted slope is within 0.1 of 2 (measured 2.02, errors 4.3e-3 … 6.5e-5).
    Negative control: RK4's step (order 4) on the same grid fits 4.02, above 3.5.
    """
    kappa, T, z0 = 2.0, 1.0, -0.5
    a = np.array([1.0, 0.0, 0.0])
    x0 = np.array([[z0, np.sqrt(1 - z0 * z0), 0.0]])
    field, theta = _Field(a, kappa), np.zeros(1)
    exact = np.tanh(kappa * T + np.arctanh(z0))

    def errors(integ):
        out = []
        for S in (4, 8, 16, 32):
            x = x0.copy()
            for _ in range(S):
                v = field.evaluate(x, None, None).v
                x = integ.step(x, T / S, v, object(), theta, theta, theta, None, None,
                               "transformer", field)
            out.append(x[0] @ a - exact)
        return np.array(out)

    h = T / np.array([4, 8, 16, 32])
    e = errors(INTEGRATORS["strang-heun"])
    assert abs(_slope(h, e) - 2.0) <= 0.1, e
    assert _slope(h, errors(INTEGRATORS["rk4"])) > 3.5


def test_euler_maruyama_weak_order_one_with_drift():
    """EM with the von Mises–Fisher drift, d = 3: fitted weak order ≈ 1.

    ``D = 0.1``, ``κ = 3``, ``T = 1``, ``h = 1/16 … 1/128``, 30 000 tokens on common
    Brownian paths (fine normals summed). The differences are asserted ≥ 6 of their SE
    (slope error ≤ 0.15). The second-order term is large for this drift: the measured
    slope falls from 1.31 (h = 1/8 … 1/64) to 1.16–1.36 here (two seeds), so the
    assertion is ``0.7 ≤ q ≤ 1.6`` — order 1, and not 2 (the tight check of EM's order is
    the pure-diffusion test); the finest mean is within ``4.5 SE + 2|E_h − E_{h/2}|`` of
    the exact generator value.
    """
    d, N = 3, 30_000
    D, kappa, T = 0.1, 3.0, 1.0
    steps = [16, 32, 64, 128]
    r = _run_crn(INTEGRATORS["em"], d, N, D, kappa, T, steps)
    q, diffs, dse, err, se = _fit(r, steps, T, _exact_vmf(1, T, D, kappa, d, 0.0))
    print(f"EM + drift d={d}: differences {diffs}, fitted weak order {q:.3f}, "
          f"limit error {err:.2e} (SE {se:.1e})")
    assert np.all(np.abs(diffs) >= 6 * dse), (diffs, dse)
    assert 0.7 <= q <= 1.6, q
    assert abs(err) <= 4.5 * se + 2 * abs(diffs[-1]), (err, se, diffs)


def test_compiled_em_equals_the_python_loop():
    """``em`` with ``D > 0`` runs compiled (the noise added in the compiled Euler step).

    Same keyed normals, same arithmetic: the compiled and Python loops agree to 1e-12
    (the field sums are added in another order: ``2 n ε`` per evaluation over 8 steps,
    amplified by less than ``e^{0.4}``). Noisy weights too (OU schedule, two paths: one
    token stream per path). Negative control: another seed differs by far more. The
    splittings' compiled steps: ``tests/test_compiled_noisy.py``.
    """
    from wflow.attention.schedules import OrnsteinUhlenbeck, Parametrisation

    x, h, at = _system(n=50)
    rng = np.random.default_rng(4)
    param, th0 = Parametrisation.from_heads(Heads.random_symmetric(2, 3, rng, scale=0.7),
                                            kind="bilinear")
    ou = OrnsteinUhlenbeck(param, th0, np.broadcast_to(np.eye(3), th0.shape), kappa=1.0,
                           sigma0=0.5)
    for heads, paths in ((h, 1), (ou, 2)):
        kw = dict(T=0.2, dt=0.025, integrator="em", diffusion=0.4, seed=2, n_paths=paths)
        c = simulate(x, heads, at, options=ParticleOptions(engine="compiled", **kw))
        p = simulate(x, heads, at, options=ParticleOptions(engine="python", **kw))
        assert c.extra["engine"] == "compiled" and p.extra["engine"] == "python"
        assert np.max(np.abs(c.x - p.x)) <= 1e-12
        assert np.max(np.abs(c.history["E"] - p.history["E"])) <= 1e-12
        other = simulate(x, heads, at, options=ParticleOptions(engine="compiled",
                                                               **{**kw, "seed": 3}))
        assert np.max(np.abs(c.x - other.x)) > 1e-3


@pytest.mark.parametrize("name", ["em", "strang"])
def test_simulate_pure_diffusion_has_the_scheme_law(name):
    """Through ``simulate``: heads with ``V = 0`` (no drift), 6000 tokens, d = 3.

    Token ``i`` after ``S`` steps has ``E[x_T·x_0] = μ^S`` with, for EM, the one-step
    mean ``μ = E[(1 + 2Dh q)^{−1/2}]``, ``q ~ χ²_2`` (rotation invariance: the step acts on
    degree-1 harmonics by this factor; a quadrature to 1e-12), and for Strang the exact
    ``e^{−2DT}``. Within 4.5 SE of the token mean. Negative control: ``D`` 10 % larger
    moves the mean by ``≈ 2DT · 0.1 · e^{−2DT} ≈ 0.03`` ≈ 7 SE; asserted ≥ 5 SE.
    """
    from scipy import integrate, stats

    n, d, D, T, dt = 6000, 3, 0.5, 0.5, 0.1
    rng = np.random.default_rng(5)
    x0 = sample_uniform(n, d, rng)
    heads = Heads(np.eye(d)[None], np.eye(d)[None], np.zeros((1, d, d)), np.ones(1))
    attn = Attention("usa", 1.0)
    S = round(T / dt)
    if name == "em":
        mu = integrate.quad(lambda q: stats.chi2.pdf(q, d - 1) / np.sqrt(1 + 2 * D * dt * q),
                            0, np.inf, epsabs=1e-13)[0]
        expect = mu**S
    else:
        expect = np.exp(-(d - 1) * D * T)

    def mean_z(diffusion: float) -> tuple[float, float]:
        r = simulate(x0, heads, attn, options=ParticleOptions(
            T=T, dt=dt, integrator=name, diffusion=diffusion, seed=8, head_rates=False,
            clusters=False))
        assert r.status == "success", r.message
        z = np.sum(r.x[0] * x0, axis=1)
        return float(z.mean()), float(z.std() / np.sqrt(n))

    m, se = mean_z(D)
    assert abs(m - expect) <= 4.5 * se, (m, expect, se)
    m_wrong, _ = mean_z(1.10 * D)
    assert abs(m_wrong - expect) >= 5 * se, (m_wrong, expect, se)
