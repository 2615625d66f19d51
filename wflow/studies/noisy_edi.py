"""Study ``noisy-edi``: the energy balance with noisy (OU) weights (docs/theory.md §5).

With ``dA_h = −κ(A_h − I) dt + σ dW_sym`` the energy obeys
``dE = ∂_tE dt + power dt + Itô dt + dM`` with the Itô correction
``Itô = σ²β/8 Σ_h w_h ∫∫ e^{s}(1 + <x, y>²) dμ dμ`` and the martingale
``dM = Σ_h w_h <∂E/∂A_h, σ dW>``. The particle engine accumulates, per path, the discrete
residual ``r = ΔE − ∫∂_tE − ∫power − Itô − M`` (Euler–Maruyama for the weights, explicit
Euler for the tokens, Itô terms at the left point).

What is judged
--------------
``r`` is not mean-zero: it is an Itô–Taylor remainder whose expectation is a *bias* of
weak order 1, ``E r(dt) = c·dt + O(dt²)``. The study measures ``E r`` at several ``dt``
(Monte-Carlo over independent weight paths), fits the bias order ``p`` of
``E r ≈ c·dt^p`` (weighted least squares) and extrapolates the model
``E r ≈ b + c·dt`` (``+ e·dt²`` with four or more ``dt``) to ``dt → 0``. The balance is
right iff ``p ≈ 1`` and ``b = 0`` within :data:`Z_ACCEPT` standard errors. A missing Itô
term shifts ``b`` by ``−E∫Itô`` (the study reports how many standard errors that is: the
test's power).

Variance reduction: per path the residual is dominated by the second-order Itô–Taylor
fluctuation ``Q = Σ_k (β/4) Σ_h w_h ∫∫ e^{s}[(xᵀΔA_h y)² − E(xᵀΔA_h y)²] dμ_k dμ_k``
(``ΔA_h`` the realised noise increment of step ``k``, ``E(xᵀΔA y)² = σ²dt(1 + <x,y>²)/2``
for symmetric noise). Its expectation is exactly zero (left-point integrand, increment
independent of the past), so ``r − Q`` has the same mean as ``r`` with a standard deviation
``O(dt)`` instead of ``O(dt^{1/2})``: the bias is resolved at every ``dt`` with tens of
paths (a run's standard errors per ``dt`` are in its ``summary.json``).

What the control variate cannot see, and how it is judged
---------------------------------------------------------
``E Q = 0`` holds only if the realised increments have the second moments of the law
the Itô term assumes. With a wrong noise law (variance ×2, increments not
symmetrised) ``r − Q`` stays unbiased — ``Q`` then replaces the Itô term by the realised
quadratic variation, a pathwise identity that holds for *any* law — and only the raw
residual ``r`` sees the wrong Itô term. The study therefore judges three things about
the noise (and the drift, below):

* the variance-reduced residual ``r − Q``: weak order and ``b = 0`` (the pathwise
  balance: chain rule, drift, martingale);
* the raw residual ``r``: its extrapolation ``b_raw`` to ``dt → 0`` within
  :data:`Z_ACCEPT` standard errors (the balance with the Itô term of the stated law);
* the control variate's own premise, ``E Q = 0``: the mean of ``Q`` pooled over the
  ``dt`` levels within :data:`Z_ACCEPT` standard errors (``Q`` is exactly mean-zero at
  every ``dt`` under the stated law; a wrong variance or law shifts it by a fraction of
  the Itô integral).

β. The Itô term is linear in ``β`` (``β²`` from the second derivative of ``e^{β s}``, ``1/β``
from the energy's normalisation), so the study runs at ``β = 1`` *and* at
``β =`` :data:`BETA_ALT` (criteria with the suffix ``_beta0.5``): a ``β²`` in place of ``β``
is invisible at ``β = 1``.

Faults (``FAULTS``, ``FAMILIES``): the Itô term scaled (``no-ito``, ``ito-x2``,
``ito-scale:S``), raised to the wrong power of ``β`` (``ito-beta-squared``), noise with
variance ``×(1 + s)`` against the Itô term of the nominal variance (``noise-var:S``;
run with ``σ√(1+s)``, judged with ``σ``), noise that is not symmetrised
(``noise-nonsym``: ``dW`` with independent entries, judged with the symmetric law's Itô
term), the particles and the noise at ``β ×(1 + s)`` against the nominal Itô term
(``beta:S``); a drift other than the model's: the
particles without the softmax mobility (``no-mobility``: kind ``usa``) or with every value
matrix ×(1 + s) (``velocity:S``, documented ``velocity:-0.05``), against the model's
softmax drift with the nominal values.

The drift: judged against the stated model, not the engine's own power
----------------------------------------------------------------------
The balance is a pathwise chain rule: ``ΔE`` against the engine's own ``power =
∫<∇ψ, v> dμ`` with ``v`` the velocity the engine integrates, and an Itô term built from
``Φ'' = e^s``, which softmax and unnormalised attention share. It holds for any token
velocity: a solver that drops the softmax mobility ``1/Z`` (kind ``usa`` in
place of ``softmax`` at the same ``β``) or scales the velocity passes every criterion
above (the control ``no-mobility`` trips only the drift criteria below:
docs/studies_power.md, generated from ``bench/results/size_power.json``). Exactly as
the Itô term is judged against the stated noise law, the drift is therefore judged
against the stated dynamics (:func:`model_power`): along the saved path, ``power_model(t_k)
= ∫<∇ψ_k, v_model> dμ_k`` with ``v_model`` the softmax velocity of the stated heads
(the weights ``θ_k`` of that step, the nominal values and ``β``) at the recorded tokens,
integrated with the engine's rule (trapezoid). On a correct solver it is the same fused
pair sum (:func:`wflow.energy.particle_field`) of the same state as the engine's, so

* ``drift_matches_model``: ``max`` over paths and ``dt`` levels of ``|∫power_engine −
  ∫power_model| / ∫|power_model| dt`` at most :data:`DRIFT_RTOL` ``= 1e4·eps`` (a
  deterministic identity per path, round-off only: no Monte-Carlo standard error enters;
  also at ``β =`` :data:`BETA_ALT`, suffix ``_beta0.5``).

The engine's Itô term: judged against the stated law
----------------------------------------------------
The balance criteria above judge the residual built with the *study's* Itô term of the
stated law (``ito_stated``): an engine whose own Itô term is wrong — of the wrong sign, say,
with its chain-rule residual built from it — leaves ``r`` unchanged (``chain + Itô_engine``
is what enters), so they cannot see it. ``ito_engine_matches_stated`` compares the two per
path: ``max`` over paths and ``dt`` of ``|Itô_engine − Itô_stated| / Itô_stated`` at most
:data:`ITO_RTOL` (a deterministic identity per path: both are sums of the same positive
terms, round-off only). Negative control ``engine-ito-sign`` (the engine's Itô term of the
wrong sign, its residual built with it): relative 2 exactly (the correct solver's values:
docs/studies_power.md).

Family-wise size
----------------
The study judges eight Monte-Carlo statistics (per β: the bias order, ``b``, ``b_raw``,
``E Q``); the deterministic identities (drift, Itô) and the power check
(``ito_detectable``, far above its bound 10 on the correct solver: docs/studies_power.md)
add no false fails. Their
thresholds are set so that the *study's* false-fail rate is at most 1 %: Šidák across the
eight, ``α = 1 − 0.99^{1/8} = 1.26e-3`` per criterion; the ``|z|`` statistics (standard
errors from 24 paths: Student ``t₂₃`` tails) then need ``t₂₃`` two-sided at ``α``:
3.68, so :data:`Z_ACCEPT` = 4 holds it; the bias order, whose null distribution over seeds
is not centred by a standard error of its own (the fit's higher-order terms), takes the
band ``1 ± t₁₉(α)·s`` with ``s`` its standard deviation over 20 seeds
(bench/results/size_power.json, seeds 0–19: quick s = 0.174, ``t₁₉`` two-sided 3.78:
:data:`ORDER_RANGE_QUICK` = [0.35, 1.65]; full s = 0.028, the band [0.89, 1.11] lies
inside :data:`ORDER_RANGE` = [0.5, 1.5], kept). Measured at the held-out seeds:
docs/studies_power.md.

The family ``velocity:±s`` (values ×(1 + s)) shifts the power by exactly the relative
``s``, so ``drift_matches_model`` sees any ``|s|`` above its tolerance. Measured
(``bench/size_power.py``; docs/studies_power.md, generated from
``bench/results/size_power.json``): the study's size in both modes, the drift criterion
on the correct solver, the smallest ``velocity``, ``beta``, ``noise-var`` and
``ito-scale`` faults caught and the criteria each control trips. Cost: the model power is
one fused pass per recorded state.
"""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path

import numpy as np

from ..attention.heads import Attention, Heads
from ..attention.schedules import OrnsteinUhlenbeck, Parametrisation
from ..energy import particle_field
from ..geometry.sphere import sample_uniform
from ..infra.guards import guard_finite
from ..infra.parallel import parallel_map
from ..particles import simulate
from ..status import Status
from .base import Criterion, NegativeControls, StudyResult, parse_fault, save_figure, write_study

__all__ = ["run", "FAULTS", "FAMILIES", "Z_ACCEPT", "Z_DETECT", "ORDER_RANGE", "BETA_ALT",
           "DRIFT_RTOL", "ITO_RTOL", "ORDER_RANGE_QUICK", "FAMILY_ALPHA", "N_STATISTICS",
           "model_power"]

NAME = "noisy-edi"

#: The study's family-wise false-fail rate, and the Monte-Carlo statistics it is shared by
#: (Šidák: each criterion at ``1 − (1 − FAMILY_ALPHA)^{1/N_STATISTICS}``; module docstring).
FAMILY_ALPHA, N_STATISTICS = 0.01, 8
#: Every ``|estimate|/se`` criterion accepts up to this many standard errors. The study
#: judges eight such numbers (four per β), each from tens of paths (Student-like tails):
#: a bound of 3 s.e. false-failed the correct solver; 4 s.e. keeps the family-wise rate
#: below 1 % (two-sided t₂₃ tail at 4: 6e-4 per criterion). Measured size and power:
#: docs/studies_power.md.
Z_ACCEPT = 4.0
#: Power: dropping the Itô term must move ``b`` by at least this many standard errors.
Z_DETECT = 10.0
#: Accepted fitted bias order, full mode: Euler–Maruyama has weak order 1; measured
#: (bench/results/size_power.json, full mode, seeds 0–19) p = 0.963–1.06 (s.d. 0.028):
#: the family-wise band 1 ± 3.78 s.d. = [0.89, 1.11] (module docstring) lies inside;
#: [0.5, 1.5] separates order 1 from a constant bias (p ≈ 0) and from order 2.
ORDER_RANGE = (0.5, 1.5)
#: Quick mode: the fit of three dt levels spreads more (bench/results/size_power.json,
#: quick mode, seeds 0–19: p = 0.70–1.39, s.d. 0.174; the former [0.5, 1.5] false-failed
#: at a held-out seed): ``1 ± t₁₉(α)·s.d.`` with the study's Šidák ``α = 1.26e-3``
#: (``t₁₉`` = 3.78), rounded out: [0.35, 1.65].
ORDER_RANGE_QUICK = (0.35, 1.65)

#: Negative controls: ``run(fault=NAME)``.
FAULTS = {
    "no-ito": "the balance omits the Itô correction (residual ΔE − ∫∂_tE − ∫power − M)",
    "ito-x2": "the balance uses twice the Itô correction",
    "ito-beta-squared": "the Itô correction carries β² instead of β (visible at β ≠ 1)",
    "noise-var:1": "the noise increments have twice the variance of the law the Itô term "
                   "is computed with",
    "noise-nonsym": "the noise is not symmetrised (dW with independent entries) while the "
                    "Itô term is that of the symmetrised law",
    "no-mobility": "the particles run with unnormalised attention (the softmax mobility 1/Z "
                   "dropped: kind 'usa', same β) while the model's drift is softmax",
    "velocity:-0.05": "the particles run with every value matrix ×0.95 (a drift 5 % slow) "
                      "while the model's drift uses the nominal values",
    "engine-ito-sign": "the engine's Itô correction has the wrong sign (its chain-rule "
                       "residual built with it), while the stated law's is positive",
}
#: Fault families ``run(fault="FAMILY:S")`` (sizes scanned by bench/size_power.py).
FAMILIES = {
    "ito-scale": "the Itô correction scaled by 1 + s",
    "noise-var": "the noise increments have variance ×(1 + s) against the Itô term of the "
                 "nominal variance",
    "beta": "the particles and the noise run at β ×(1 + s) while the balance's Itô term "
            "uses the nominal β",
    "velocity": "the particles run with every value matrix ×(1 + s) (the token velocity "
                "×(1 + s)) while the model's drift uses the nominal values",
}

SIGMA2, KAPPA, BETA, A_NORM = 2.0, 1.0, 1.0, 2.0
#: The second inverse temperature (β-dependent identity: β vs β² faults show at β ≠ 1).
BETA_ALT = 0.5


#: Relative tolerance of ``drift_matches_model``: ``max_p |∫power_engine − ∫power_model|``
#: over ``∫|power_model| dt``. On a correct solver both integrands are the same fused
#: pair sum (:func:`wflow.energy.particle_field`) of the same recorded state, so they differ
#: only by round-off: ``n²`` pair terms summed in a possibly different order (≤ ``n·eps``
#: relative per step, the bound the fused kernel is tested to) and ``K`` trapezoid terms
#: (≤ ``K·eps``). With ``n ≤ 100``, ``K ≤ 200`` that is ≤ 300·eps ≈ 7e-14; ×100 margin for
#: cancellation between the heads' powers: 1e4·eps ≈ 2.2e-12. Any drift error is a
#: relative error of the integrand itself (a velocity ×(1 + s) shifts it by ``s``), so the
#: criterion is deterministic per path, not a Monte-Carlo statistic.
DRIFT_RTOL = 1e4 * float(np.finfo(np.float64).eps)
#: Relative tolerance of ``ito_engine_matches_stated``: ``max_p |Itô_engine − Itô_stated| /
#: Itô_stated``. Both are ``Σ_k Σ_h (β/4) w_h ⟨e^{s}σ²dt(1 + <x, y>²)/2⟩`` over the same
#: recorded states: sums of *positive* terms (no cancellation), each of the ``K·H`` pair
#: means to ≤ ``n·eps`` (the blocked order the fused kernel is tested to), their sum to
#: ≤ ``K·H·eps``: with ``n ≤ 100``, ``K ≤ 200``, ``H ≤ 4`` at most 900 eps ≈ 2e-13;
#: ×10 margin: 1e4·eps ≈ 2.2e-12 (the correct solver's values: docs/studies_power.md).
ITO_RTOL = 1e4 * float(np.finfo(np.float64).eps)
#: The study's faults, read (``run(fault=...)``) and reported (the verdict) in one place.
CONTROLS = NegativeControls(NAME, FAULTS, FAMILIES)


def model_power(trajectory: np.ndarray, theta_trajectory: np.ndarray, t: np.ndarray,
                param: Parametrisation, attn: Attention) -> tuple[np.ndarray, np.ndarray]:
    """Per-path ``∫ power_model dt`` of the stated dynamics along saved trajectories.

    ``power_model(t_k) = ∫ <∇ψ_k, v_model> dμ_k`` with ``v_model`` the transformer velocity
    of the stated model (heads ``param.heads(θ_k)``, attention ``attn``) at the recorded
    tokens ``x_k`` (:func:`wflow.energy.particle_field`, the engine's own fused pass),
    integrated with the engine's rule for the power (trapezoid,
    :class:`wflow.diagnostics.BalanceAccumulator`).

    Parameters
    ----------
    trajectory : (P, K+1, n, d) array
        Tokens of every path and step.
    theta_trajectory : (P, K+1, H, d, d) array
        Weights ``θ_k`` of every path and step.
    t : (K+1,) array
        Step times.
    param : Parametrisation
        The stated model's map ``θ → heads``.
    attn : Attention
        The stated attention kind and ``β``.

    Returns
    -------
    integral : (P,) array
        ``Σ_k (t_{k+1} − t_k)(power_k + power_{k+1})/2`` (energy units).
    scale : (P,) array
        ``Σ_k (t_{k+1} − t_k)(|power_k| + |power_{k+1}|)/2``, the integral's magnitude
        (the round-off scale of the identity with the engine).
    """
    P, K1, n = trajectory.shape[:3]
    m = np.full(n, 1.0 / n)
    pw = np.empty((P, K1))
    for p in range(P):
        for k in range(K1):
            pw[p, k] = particle_field(trajectory[p, k], m, param.heads(theta_trajectory[p, k]),
                                      attn)[1].power
    h = np.diff(t)
    integral = np.sum(0.5 * h * (pw[:, :-1] + pw[:, 1:]), axis=1)
    scale = np.sum(0.5 * h * (np.abs(pw[:, :-1]) + np.abs(pw[:, 1:])), axis=1)
    return integral, scale


def _fluctuation(res, heads_w: np.ndarray, sigma: float, beta: float
                 ) -> tuple[np.ndarray, np.ndarray]:
    """Per-path ``Q`` (module docstring) and the Itô term of the stated law.

    ``Q = Σ_k (β/4) Σ_h w_h ∫∫ e^{s}[(xᵀΔA_h y)² − σ²dt(1 + <x, y>²)/2] dμ_k dμ_k`` from the
    saved tokens and weights of every step; the Itô term
    ``Σ_k (β/4) Σ_h w_h ∫∫ e^{s} σ²dt(1 + <x, y>²)/2 dμ_k dμ_k`` is that of symmetrised noise
    of variance ``σ²`` (left point), whatever noise the engine drew.
    """
    X, Th, t = res.trajectory, res.theta_trajectory, res.t
    dt = np.diff(t)
    eye = np.eye(X.shape[-1])
    Q = np.zeros(X.shape[0])
    Q2 = np.zeros(X.shape[0])  # Σ_k Q_k²: the martingale differences' squares
    ito = np.zeros(X.shape[0])
    for p in range(X.shape[0]):
        x, th = X[p, :-1], Th[p]  # (K, n, d), (K+1, H, d, d)
        dA = th[1:] - th[:-1] + dt[:, None, None, None] * KAPPA * (th[:-1] - eye)
        G = np.einsum("kid,kjd->kij", x, x)
        expect = sigma**2 * dt[:, None, None] * (1.0 + G**2) / 2.0
        Qk = np.zeros(x.shape[0])
        for h in range(th.shape[1]):
            s = beta * np.einsum("kid,kde,kje->kij", x, th[:-1, h], x)
            q = np.einsum("kid,kde,kje->kij", x, dA[:, h], x)
            es = np.exp(s)
            Qk += beta / 4 * heads_w[h] * np.mean(es * (q**2 - expect), axis=(1, 2))
            ito[p] += beta / 4 * heads_w[h] * float(np.sum(np.mean(es * expect, axis=(1, 2))))
        Q[p], Q2[p] = float(np.sum(Qk)), float(np.sum(Qk**2))
    return Q, Q2, ito


def _batch(item: tuple) -> dict:
    n, H, T, dt, paths, seed, batch, beta, fault = item
    fam, size = parse_fault(fault, FAMILIES)
    rng = np.random.default_rng([seed, 17])
    x0 = sample_uniform(n, 3, rng)
    # random symmetric heads of operator norm A_NORM (the seed draws their directions):
    # every seed then sits in the same asymptotic regime of the dt sweep
    A = Heads.random_symmetric(H, 3, rng).A
    A = A_NORM * A / np.linalg.norm(A, 2, axis=(1, 2))[:, None, None]
    heads = Heads.bilinear(A, w=1.0 / H, value_sign=-1.0)
    param, theta0 = Parametrisation.from_heads(heads, kind="bilinear")
    sigma = float(np.sqrt(SIGMA2))
    # the noise the engine draws: nominal, or (faults) another variance or law
    sig_run = sigma * (np.sqrt(1.0 + size) if fam == "noise-var" else 1.0)
    beta_run = beta * (1.0 + size) if fam == "beta" else beta
    kind_run = "usa" if fault == "no-mobility" else "softmax"
    # the particles' values ×(1 + s) (tied values V = value_sign·A): the velocity scales,
    # the energy, its weight derivative and the Itô term do not
    vfac = 1.0 + size if fam == "velocity" else 1.0
    param_run = replace(param, value_sign=param.value_sign * vfac) if vfac != 1.0 else param
    sch = OrnsteinUhlenbeck(param_run, theta0, np.broadcast_to(np.eye(3), theta0.shape),
                            kappa=KAPPA, sigma0=sig_run,
                            symmetric_noise=fault != "noise-nonsym")
    # rtol = None: judged by the study's fits, not by the solver's tolerance
    res = simulate(x0, sch, Attention(kind_run, beta_run), T=T, dt=dt, integrator="euler",
                   n_paths=paths, seed=seed * 1000 + batch, head_rates=False, clusters=False,
                   record_every=1, save_trajectory=True, rtol=None)
    # the coarse levels of a refinement sweep are "inaccurate" by design (their residual
    # is what the study fits); only a failed (non-finite) run stops it
    if res.status == Status.FAILED:
        raise FloatingPointError(f"{NAME}: particle run failed: {res.message}")
    out = {k: res.balance[k] for k in ("chain", "ito", "martingale", "dE", "work",
                                       "power_int")}
    if fault == "engine-ito-sign":  # an engine whose Itô term has the wrong sign: its
        # residual chain = ΔE − W − P − Itô_engine − M is built with −Itô
        out["chain"] = out["chain"] + 2.0 * out["ito"]
        out["ito"] = -out["ito"]
    # Q and the Itô term of the stated law (σ, β, symmetrised): the balance is judged with
    # these, so that a wrong noise in the engine shows
    out["Q"], out["Q2"], out["ito_stated"] = _fluctuation(res, heads.w, sigma, beta)
    # the drift of the stated model (softmax, nominal values and β) along the same path:
    # the engine's power is only a chain rule for whatever velocity it integrated
    out["power_model"], out["power_scale"] = model_power(
        res.trajectory, res.theta_trajectory, res.t, param, Attention("softmax", beta))
    return out


def _wls_poly(x: np.ndarray, y: np.ndarray, se: np.ndarray, degree: int
              ) -> tuple[float, float, float]:
    """Weighted least squares ``y = b + c x (+ e x²)``: ``(b, se_b, c)``."""
    W = 1.0 / se**2
    A = np.vstack([x**k for k in range(degree + 1)]).T
    cov = np.linalg.inv(A.T @ (W[:, None] * A))
    coef = cov @ (A.T @ (W * y))
    return float(coef[0]), float(np.sqrt(cov[0, 0])), float(coef[1])


def _fit_order(x: np.ndarray, y: np.ndarray, se: np.ndarray) -> tuple[float, float]:
    """Weighted fit ``y = c x^p``: ``(p, se_p)`` (NaN when it does not converge)."""
    from scipy.optimize import curve_fit

    guard_finite("noisy-edi: mean residuals", y)  # guards before SciPy's fit
    guard_finite("noisy-edi: standard errors", se)
    if not np.all(se > 0):
        return float("nan"), float("nan")  # no spread: no fit (the criterion fails)
    try:
        (c, p), cov = curve_fit(lambda z, c, p: c * z**p, x, y, p0=(y[0] / x[0], 1.0),
                                sigma=se, absolute_sigma=True, maxfev=10_000)
    except RuntimeError:
        return float("nan"), float("nan")
    return float(p), float(np.sqrt(cov[1, 1]))


def _sweep(rows_of: dict, dts: list[float], key: str, se_key: str, degree: int
           ) -> tuple[float, float]:
    """Extrapolated ``b`` and its standard error of the per-dt means ``key``."""
    x = np.array(dts)
    m = np.array([rows_of[d][key] for d in dts])
    se = np.array([rows_of[d][se_key] for d in dts])
    b, se_b, _ = _wls_poly(x, m, se, degree)
    return b, se_b


def _stats(v: np.ndarray) -> tuple[float, float]:
    return float(v.mean()), float(v.std(ddof=1) / np.sqrt(v.size))


def _at_beta(beta: float, name: str, value: float, lo: float | None = None,
             hi: float | None = None, *, what: str, why: str) -> Criterion:
    """The criterion ``name`` judged at ``β`` (its ``what`` prefixed by ``β = …:``).

    Named ``name`` at the study's :data:`BETA`, ``name_beta{β}`` at the other β.
    """
    sfx = "" if beta == BETA else f"_beta{beta:g}"
    return Criterion(f"{name}{sfx}", value, lo, hi, what=f"β = {beta:g}: {what}", why=why)


def run(*, out: Path, quick: bool = False, seed: int = 0,
        fault: str | None = None) -> StudyResult:
    """Monte-Carlo bias of the balance at several ``dt`` and two ``β``: order, extrapolation."""
    fam, size = CONTROLS.read(fault)
    n, H, T, batches, per = (40, 2, 0.3, 3, 8) if quick else (100, 4, 1.0, 8, 8)
    dts = [0.06, 0.03, 0.015] if quick else [0.04, 0.02, 0.01, 0.005]
    betas = (BETA, BETA_ALT)
    ito_factor = {"no-ito": 0.0, "ito-x2": 2.0}.get(fault or "", 1.0)
    if fam == "ito-scale":
        ito_factor = 1.0 + size
    # extrapolation to dt → 0: linear with 3 levels, quadratic with 4 or more (so that the
    # O(dt²) part of the bias does not leak into b when the paths resolve it)
    degree = 2 if len(dts) >= 4 else 1
    # every dt level draws its own noise (batch index 100·level + b): the levels' means are
    # independent, as the weighted fits and the pooled E Q assume (with one noise seed for
    # all levels they were correlated: measured, seed 16, E Q at −3, −2.3, −2.6 s.e. on
    # the three levels, pooled 4.4 s.e.)
    items = [(n, H, T, dt, per, seed, 100 * j + b, beta, fault) for beta in betas
             for j, dt in enumerate(dts) for b in range(batches)]
    parts_all = parallel_map(_batch, items)
    criteria: list[Criterion] = []
    fits: dict = {}
    by_beta: dict = {}
    notes: list[str] = []
    for beta in betas:
        # the Itô term as judged: that of the stated law, with the fault's factor / power
        fac = ito_factor * (beta if fault == "ito-beta-squared" else 1.0)
        rows = {}

        for dt in dts:
            parts = [p for it, p in zip(items, parts_all, strict=True)
                     if it[3] == dt and it[7] == beta]
            bal = {k: np.concatenate([p[k] for p in parts]) for k in parts[0]}
            P = bal["chain"].size
            # chain = ΔE − W − P − Itô_engine − M; raw = ΔE − W − P − fac·Itô_stated − M
            raw = bal["chain"] + bal["ito"] - fac * bal["ito_stated"]
            r = raw - bal["Q"]
            r_no = bal["chain"] + bal["ito"] - bal["Q"]  # without the Itô term (power check)
            mean, se = _stats(r)
            (m_no, se_no), (m_raw, se_raw) = _stats(r_no), _stats(raw)
            # E Q: Q = Σ_k Q_k is a sum of martingale differences (uncorrelated, mean zero
            # under the stated law), so Var Q = E Σ_k Q_k²: the standard error from the
            # K·P step terms, not from P path sums (Student tails of 24 paths)
            m_q = float(bal["Q"].mean())
            se_q = float(np.sqrt(np.sum(bal["Q2"])) / P)
            rows[dt] = {"paths": P, "mean": mean, "stderr": se, "mean_without_ito": m_no,
                        "stderr_without_ito": se_no, "raw_mean": m_raw, "raw_stderr": se_raw,
                        "Q_mean": m_q, "Q_stderr": se_q,
                        "ito_mean": float(bal["ito_stated"].mean()),
                        "ito_engine_vs_stated": float(np.max(np.abs(
                            bal["ito"] - bal["ito_stated"]))),
                        "ito_engine_rel": float(np.max(np.abs(bal["ito"] - bal["ito_stated"])
                                                       / np.abs(bal["ito_stated"]))),
                        "martingale_rms": float(np.sqrt(np.mean(bal["martingale"] ** 2))),
                        "fluctuation_rms": float(np.sqrt(np.mean(bal["Q"] ** 2))),
                        "dE_rms": float(np.sqrt(np.mean(bal["dE"] ** 2))),
                        "drift_mean": float(bal["power_model"].mean()),
                        "drift_engine_minus_model": (bal["power_int"]
                                                     - bal["power_model"]).tolist(),
                        "drift_rel": float(np.max(np.abs(bal["power_int"] - bal["power_model"])
                                                  / bal["power_scale"])),
                        "residuals": r.tolist()}
        x = np.array(dts)
        m = np.array([rows[d]["mean"] for d in dts])
        se = np.array([rows[d]["stderr"] for d in dts])
        p, se_p = _fit_order(x, m, se)
        b, se_b, c = _wls_poly(x, m, se, degree)
        b_no, se_b_no = _sweep(rows, dts, "mean_without_ito", "stderr_without_ito", degree)
        b_raw, se_b_raw = _sweep(rows, dts, "raw_mean", "raw_stderr", degree)
        # E Q = 0 at every dt: the levels' means pooled with inverse-variance weights
        wq = np.array([1.0 / rows[d]["Q_stderr"] ** 2 for d in dts])
        q_mean = float(np.sum(wq * np.array([rows[d]["Q_mean"] for d in dts])) / wq.sum())
        q_se = float(1.0 / np.sqrt(wq.sum()))
        z_b, z_no, z_raw, z_q = (abs(b) / se_b, abs(b_no) / se_b_no, abs(b_raw) / se_b_raw,
                                 abs(q_mean) / q_se)
        ito_int = rows[dts[-1]]["ito_mean"]
        # the engine's drift against the stated model's, path by path (deterministic given
        # the path: round-off on a correct solver, DRIFT_RTOL); the pooled mean difference
        # and its standard error are reported for scale
        drift_rel = max(rows[d]["drift_rel"] for d in dts)
        ito_rel = max(rows[d]["ito_engine_rel"] for d in dts)
        dd = np.concatenate([rows[d]["drift_engine_minus_model"] for d in dts])
        dd_mean, dd_se = _stats(dd)
        criteria += [
            _at_beta(beta, "bias_order", p, *(ORDER_RANGE_QUICK if quick else ORDER_RANGE),
                     what="fitted order p of the mean residual E(r − Q) ≈ c·dt^p",
                     why="Euler–Maruyama is of weak order 1"),
            _at_beta(beta, "bias_at_dt0", z_b, hi=Z_ACCEPT,
                     what="|b|/se(b), b the extrapolation of E(r − Q) = b + c·dt (+ e·dt²) to "
                          "dt → 0",
                     why="the balance with Itô and martingale terms is exact in the limit"),
            _at_beta(beta, "raw_bias_at_dt0", z_raw, hi=Z_ACCEPT,
                     what="|b_raw|/se(b_raw) of the raw residual r (no control variate)",
                     why="the Itô term of the stated noise law balances the realised "
                         "noise (the control variate cannot see a wrong law)"),
            _at_beta(beta, "noise_law", z_q, hi=Z_ACCEPT,
                     what="|mean Q|/se, Q the control variate (pooled over dt; se from the "
                          "step terms Σ_k Q_k²)",
                     why="E Q = 0 exactly under the stated noise law"),
            _at_beta(beta, "drift_matches_model", drift_rel, hi=DRIFT_RTOL,
                     what="max over paths and dt of |∫power_engine − ∫power_model| / "
                          "∫|power_model| dt, power_model = ∫<∇ψ, v> dμ with v the stated "
                          "softmax velocity at the recorded tokens",
                     why="the balance is a chain rule for any velocity; only this ties the "
                         "drift to the stated model (round-off on a correct solver)"),
            _at_beta(beta, "ito_engine_matches_stated", ito_rel, hi=ITO_RTOL,
                     what="max over paths and dt of |Itô_engine − Itô_stated| / Itô_stated",
                     why="the engine's Itô correction is the stated law's (the balance "
                         "criteria use the study's own; round-off on a correct solver)"),
            _at_beta(beta, "ito_detectable", z_no, lo=Z_DETECT,
                     what="|b|/se(b) of the same extrapolation without the Itô term",
                     why="power: the study must see a missing Itô term"),
        ]
        fits[f"beta={beta:g}"] = {
            "order": p, "order_stderr": se_p, "b": b, "b_stderr": se_b, "slope": c,
            "z_b": z_b, "b_without_ito": b_no, "z_without_ito": z_no, "b_raw": b_raw,
            "b_raw_stderr": se_b_raw, "z_raw": z_raw, "Q_mean": q_mean, "Q_stderr": q_se,
            "z_Q": z_q, "extrapolation_degree": degree, "ito_integral": ito_int,
            "drift_rel": drift_rel, "drift_integral": rows[dts[-1]]["drift_mean"],
            "ito_engine_rel": ito_rel,
            "drift_difference_mean": dd_mean, "drift_difference_stderr": dd_se}
        by_beta[f"beta={beta:g}"] = {str(k): v for k, v in rows.items()}
        notes.append(
            f"β = {beta:g}: mean residual (control variate subtracted) at dt = "
            + ", ".join(f"{d:g}: {rows[d]['mean']:.2e} ± {rows[d]['stderr']:.1e}" for d in dts)
            + f" ({rows[dts[0]]['paths']} paths each); order p = {p:.2f} ± {se_p:.2f}; "
            f"b = {b:.2e} ± {se_b:.1e} ({z_b:.1f} s.e.); raw residual b_raw = {b_raw:.2e} ± "
            f"{se_b_raw:.1e} ({z_raw:.1f} s.e.); E Q = {q_mean:.1e} ± {q_se:.1e} "
            f"({z_q:.1f} s.e.); drift vs the model's {drift_rel:.1e} relative (engine − "
            f"model {dd_mean:.1e} ± {dd_se:.1e} per path); without the Itô term b = "
            f"{b_no:.2e} ({z_no:.0f} s.e.; mean Itô "
            f"integral {ito_int:.3f}); residual s.d. "
            f"{rows[dts[-1]]['stderr'] * np.sqrt(rows[dts[-1]]['paths']):.1e} vs "
            f"{rows[dts[-1]]['raw_stderr'] * np.sqrt(rows[dts[-1]]['paths']):.1e} raw at "
            f"dt = {dts[-1]:g}.")
    passed, text, entries = CONTROLS.conclude(criteria, " ".join(notes), fault)
    summary = {"settings": {"n": n, "H": H, "T": T, "dts": dts, "paths": batches * per,
                            "seed": seed, "quick": quick, "sigma2": SIGMA2, "kappa": KAPPA,
                            "betas": list(betas), "head_norm": A_NORM,
                            "ito_factor": ito_factor},
               **entries, "fits": fits, "by_dt": by_beta}
    result = StudyResult(NAME, summary, text, passed)
    rows = by_beta[f"beta={BETA:g}"]
    fb = fits[f"beta={BETA:g}"]
    x = np.array(dts)
    m = np.array([rows[str(d)]["mean"] for d in dts])
    se = np.array([rows[str(d)]["stderr"] for d in dts])
    p, b, se_b = fb["order"], fb["b"], fb["b_stderr"]

    def plot(stage: Path) -> list[str]:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt

        fig, ax = plt.subplots(1, 2, figsize=(10, 3.8))
        ax[0].errorbar(x, m, yerr=2 * se, fmt="o", label="mean residual ± 2 s.e.")
        xx = np.linspace(0, x.max() * 1.05, 50)
        ax[0].plot(xx, np.polyval(np.polyfit(x, m, degree, w=1 / se), xx), "C1-",
                   label=f"fit, b = {b:.1e} ± {se_b:.1e}")
        mr = np.array([rows[str(d)]["raw_mean"] for d in dts])
        ser = np.array([rows[str(d)]["raw_stderr"] for d in dts])
        ax[0].errorbar(x * 1.02, mr, yerr=2 * ser, fmt="s", color="C2", ms=3,
                       label="raw residual ± 2 s.e.")
        ax[0].axhline(0, color="k", lw=0.8)
        ax[0].set(xlabel="dt", ylabel="E r (bias)", title=f"β = {BETA:g}: bias order p = "
                  f"{p:.2f}")
        ax[0].legend(fontsize=8)
        r = np.asarray(rows[str(dts[-1])]["residuals"])
        ax[1].hist(r, bins=max(5, r.size // 4), alpha=0.8)
        ax[1].axvline(0, color="k", lw=0.8)
        ax[1].axvline(rows[str(dts[-1])]["mean"], color="C1", label="mean")
        ax[1].set(xlabel="per-path residual (control variate subtracted)", ylabel="paths",
                  title=f"dt = {dts[-1]:g}")
        ax[1].legend(fontsize=8)
        return save_figure(fig, stage, "noisy_edi.png")

    return write_study(out, result, plot)
