r"""Study ``noisy-mean-field``: noisy particles vs the Fokker–Planck PDE (docs/theory.md §9).

With token diffusion ``D > 0`` each token moves by ``dx = v dt + √(2D) P_x ∘ dW``
(Stratonovich; Itô drift ``−D(d−1)x``) and the empirical measure of ``n`` tokens drawn
i.i.d. from ``ρ_0`` converges to the solution of
``∂_t ρ + div_S(ρ v) = D Δ_S ρ`` (propagation of chaos with independent noises). The study
is :mod:`wflow.studies.mean_field` with the noise on, and uses its machinery unchanged:
the model (one softmax head ``A = V = diag(2.4, 1.2, −0.6)``, ``β = 1``), the initial
density, the sampler, the real spherical-harmonic moments of the tokens and of the PDE's
cells up to degree ``L``, the replicate standard errors, the control variates (the
harmonics of the *initial* tokens up to degree ``L_cv``, means exact under ``ρ_0``) and the
three tests at level :data:`~wflow.studies.mean_field.ALPHA`
(:func:`wflow.geometry.moment_test.moment_test`).

The run. The PDE (:func:`wflow.pde.solve_pde` with ``PDEOptions(diffusion=D)``, order 2,
Strang splitting with Crank–Nicolson diffusion) on two icospheres (well centred, as the
diffusion's two-point fluxes require); the fine one is the reference and
``e_k = |μ_k^{fine} − μ_k^{coarse}|/(r² − 1)`` its Richardson error estimate, added in
quadrature to the Monte Carlo standard error. ``R`` replicates of ``n`` tokens are evolved
to ``T`` by the weak-order-2 integrator ``"strang"`` (RK4 with exact heat-kernel
increments, :class:`wflow.particles.integrators.StrangHeat`; ``dt = T/32``), each with its
own keyed noise stream (``ParticleOptions.seed`` from the study's seed and the replicate).

The particles' own biases. The mean moments of ``n`` particles at step ``h`` differ from
the PDE's by ``a h² + b/n`` to leading order (weak order 2; propagation of chaos). Read
along ``∂μ_T/∂D`` as a relative error in ``D`` (bench/results/noisy_mean_field_bias.json:
5 configurations, ``n`` ∈ {250, 1000}, ``T/h`` ∈ {8, 16, 32}, 384 to 3072 replicates
each): ``a h² = 0.49 % ± 0.09 %`` at ``h = T/16`` and ``b/n = 0.20 % ± 0.06 %`` at
``n = 1000``; the PDE's own error, ``−0.03 %`` (mesh, Richardson) and ``−0.005 %`` (time
step), is negligible. At ``h = T/16`` the particles' bias was about 0.9 standard errors of
the quick mode's score (its size then: 2 false fails in 78 seeds, kept in
noisy_mean_field_bias.json); at
``h = T/32`` and ``n = 1000`` the fit gives ``a h² + b/n ≈ 0.3 %`` of ``D``. Rows it
was not fitted to, at the study's own step ``T/32`` and degree ``L = 4``
(``at_study_step`` in bench/results/noisy_mean_field_bias.json: ``n`` = 250, 1000, 8000,
fresh seeds), agree with it: ``χ² = 0.78`` on 3 degrees of freedom (measured 0.70 %,
0.30 %, 0.15 % of ``D``; predicted 0.93 %, 0.33 %, 0.15 %). The score test is centred on
it (:func:`particle_bias`, the fit's coefficients
:data:`BIAS_STEP`, :data:`BIAS_CHAOS`) with its standard error added in quadrature, so
that the quick mode's ``R = 256`` replicates (the score's standard error
``√(96/256) ≈ 0.61`` times that of ``R = 96``; ``fits.D_fit_se``) read a wrong ``D`` of
either sign alike;
the uncentred score is reported beside it (``fits.score_t_raw``). The particles run
without the Itô balance's terms (``ito_balance=False``: the study reads the tokens only).

Criteria (each at level ``α``; as ``mean-field``): ``moments_at_0``, ``moments_at_T``
(max ``|t|`` against the Šidák critical value of ``t(R − 1)``) and ``hotelling_at_T``
(Hotelling's ``T²`` against its ``F`` critical value); and ``score_D_at_T``, the moment
differences at ``T`` projected on ``g = ∂μ_T/∂D`` (a central difference of the PDE on the
coarse mesh), ``z = g·δ/(gᵀΣg/R + (|g|·e)²)^{1/2}`` against the two-sided ``t(R − 1)``
quantile at level ``α``: one degree of freedom in the direction a wrong ``D`` moves the
moments, where Hotelling's test spreads it over all ``(L+1)² − 1``.

Negative controls (``FAULTS``, ``FAMILIES``): the PDE's diffusion ``×(1 + s)``
(``pde-diffusion:S``; documented ``±0.05`` in the quick mode: the standard error of the
fitted ``D`` is in ``fits.D_fit_se``), the particles' diffusion ``×(1 + s)``
(``particles-diffusion:S``), the PDE without the noise (``pde-noiseless``), and particles
that **omit the Itô drift** (``particles-no-ito-drift``): a user integrator object
(:class:`NoItoDrift`, accepted unregistered by :func:`wflow.particles.simulate`) that steps
``x ← x + h v(x) + √(2Dh) P_x ξ`` in the ambient space without the drift ``−D(d−1)x`` and
without the projection that carries it, so ``|x|²`` grows by ``2D(d−1)h`` a step and the
angular diffusion slows down (the moments are taken of ``x/|x|``).
"""

from __future__ import annotations

import logging
from collections import OrderedDict
from pathlib import Path
from typing import Any

import numpy as np

from ..geometry.harmonics import cell_moments, token_cross_sums, token_moment_sums
from ..geometry.moment_test import control_variates, moment_test
from ..geometry.sphere import normalize
from ..infra.parallel import parallel_map
from ..particles import simulate
from ..particles.integrators import StochasticIntegrator
from ..status import Status
from .base import Criterion, NegativeControls, StudyResult, write_study
from .mean_field import ALPHA, RHO0, _draw, _model, moment_criteria

logger = logging.getLogger(__name__)

__all__ = ["run", "FAULTS", "FAMILIES", "MODES", "DIFFUSION", "NoItoDrift", "particle_bias",
           "score"]

NAME = "noisy-mean-field"

#: Token diffusion ``D`` of the study (radius² per unit time).
DIFFUSION = 0.15
#: Final time, particle steps (Strang, weak order 2), PDE step.
T_FINAL = 1.0
PARTICLE_STEPS = 32
PDE_DT = 0.05
#: Relative step of the central difference ``∂μ_T/∂D`` (the score test's direction).
DIFF_STEP = 0.05
#: The particles' own bias along ``∂μ_T/∂D`` as a relative error in ``D``,
#: ``a (16h/T)² + b (1000/n)``: ``(a, s.e. of a)`` and ``(b, s.e. of b)``, the weighted
#: fit of bench/results/noisy_mean_field_bias.json (``fit``; tested equal to it). The score
#: test is centred on it, its standard error added in quadrature.
BIAS_STEP = (0.004882083702846297, 0.0009434854528312618)
BIAS_CHAOS = (0.0020306172151058565, 0.0005532911579618281)

#: Settings per mode: tokens ``n``, replicates ``R``, moment degree ``L``, control-variate
#: degree ``L_cv``, the PDE's icospheres (coarse, fine; well centred). The full mode's
#: ``n R`` is sized for ``D`` off by ±1 %: the score's standard error is almost all Monte
#: Carlo (``∝ 1/√(nR)``; the PDE's error and the bias's standard error are a few % of its
#: variance), and ±1 % must be the critical value plus 2.33 null spreads of the score:
#: 99 % expected power (bench/noisy_mean_field_full.py ``--budget``).
MODES: dict[str, dict[str, Any]] = {
    "quick": {"n": 1000, "R": 256, "L": 4, "L_cv": 8,
              "meshes": ("icosphere:5120", "icosphere:20480")},
    "full": {"n": 8000, "R": 160, "L": 4, "L_cv": 8,
             "meshes": ("icosphere:9680", "icosphere:38720")},
}

#: Negative controls: ``run(fault=NAME)``.
FAULTS = {
    "pde-diffusion:0.05": "the PDE's token diffusion ×1.05 (quick mode)",
    "pde-diffusion:-0.05": "the PDE's token diffusion ×0.95 (quick mode)",
    "pde-noiseless": "the PDE runs without the token diffusion (D = 0)",
    "particles-no-ito-drift": "the particles omit the Itô drift −D(d−1)x: Euler–Maruyama in "
                              "the ambient space without the projection that carries it "
                              "(a user integrator object)",
}
#: Fault families ``run(fault="FAMILY:S")``.
FAMILIES = {
    "pde-diffusion": "the PDE's token diffusion ×(1 + s)",
    "particles-diffusion": "the particles' token diffusion ×(1 + s)",
}
#: The study's faults, read (``run(fault=...)``) and reported (the verdict) in one place.
CONTROLS = NegativeControls(NAME, FAULTS, FAMILIES)


class NoItoDrift(StochasticIntegrator):
    r"""A *wrong* stochastic integrator (the negative control ``particles-no-ito-drift``).

    ``x ← x + h v(x) + √(2Dh) P_x ξ``: the Itô form without its drift ``−D(d−1)x`` and
    without a projection (which would carry that drift). Weak order 0 for the law on the
    sphere: ``E|x|²`` grows by ``2D(d−1)h`` per step.
    """

    name = "no-ito-drift"
    weights = "euler"
    draws = 1

    def order(self) -> int:  # noqa: D102
        return 1

    def step(self, x, h, k1, heads, theta, theta_mid, theta_new, schedule, attn, flow,
             kernel):
        """The noiseless step: ``x + h v`` (no projection either)."""
        return x + h * k1

    def noisy_step(self, x, h, k1, heads, theta, theta_mid, theta_new, schedule, attn, flow,
                   kernel, *, diffusion, noise):
        """``x + h v + √(2Dh) P_x ξ``: no Itô drift, no projection."""
        xi = noise.normals(0)
        u = x / np.sqrt(np.sum(x * x, axis=1))[:, None]
        xi -= np.sum(xi * u, axis=1)[:, None] * u
        return x + h * k1 + np.sqrt(2.0 * diffusion * h) * xi


#: In-process cache of the PDE levels (deterministic).
_PDE_CACHE: OrderedDict[tuple, dict[str, Any]] = OrderedDict()
_CACHE_SIZE = 8


def _pde_level(spec: str, D: float, T: float, L: int) -> dict[str, Any]:
    """One noisy PDE level: cell vertices, masses at 0 and T, moments (cached)."""
    key = (spec, float(D), float(T), int(L))
    if key in _PDE_CACHE:
        return _PDE_CACHE[key]
    from ..geometry.density import initial_density
    from ..geometry.mesh import load_mesh
    from ..pde import PDEOptions, solve_pde

    heads, attn = _model()
    mesh = load_mesh(spec)
    rho0 = initial_density(mesh, RHO0)
    pde = solve_pde(rho0, heads, attn, mesh=mesh,
                    options=PDEOptions(T=T, dt=PDE_DT, order=2, n_saves=2, diffusion=D,
                                       balance=False, clusters=False, progress=False))
    if pde.status not in (Status.SUCCESS, Status.COMPLETED):  # balance off: not judged
        raise FloatingPointError(f"{NAME}: PDE failed on {spec}: {pde.message}")
    verts = mesh.gather_owned(mesh.cell_vertices.reshape(-1, 9)).reshape(-1, 3, 3)
    masses = pde.masses
    level = {"verts": verts, "m0": masses[0], "mT": masses[-1],
             "m0_mom": cell_moments(verts, masses[0], L),
             "mT_mom": cell_moments(verts, masses[-1], L), "cells": int(verts.shape[0])}
    _PDE_CACHE[key] = level
    while len(_PDE_CACHE) > _CACHE_SIZE:
        _PDE_CACHE.popitem(last=False)
    return level


def _replicate(item: tuple) -> dict[str, Any]:
    """One replicate of ``n`` noisy tokens: moments at 0 and T and the control sums."""
    n, r, seed, T, L, L_cv, verts, m0, D, no_ito = item
    heads, attn = _model()
    rng = np.random.default_rng([seed, n, r, 11])
    x0 = _draw(verts, m0, n, rng, off=0.0)
    noise_seed = int(np.random.SeedSequence([seed, r, 12]).generate_state(1)[0])
    integ = NoItoDrift() if no_ito else "strang"
    # the compiled loop where it applies (direct sums: the quick mode's n); the fault's
    # integrator object, and the fast summation of the full mode's n, run the Python loop
    # rtol = None: judged by the study's criteria, not by the solver's tolerance
    res = simulate(x0, heads, attn, T=T, dt=T / PARTICLE_STEPS, integrator=integ,
                   diffusion=D, seed=noise_seed, head_rates=False, clusters=False,
                   record_every=PARTICLE_STEPS, engine="python" if no_ito else "auto",
                   ito_balance=False, rtol=None)
    if res.status == Status.FAILED:
        raise FloatingPointError(f"{NAME}: particle run failed: {res.message}")
    xT = normalize(res.x[0])
    s0, q0 = token_moment_sums(x0, L, squares=True)
    sT, qT = token_moment_sums(xT, L, squares=True)
    return {"m0": s0 / n, "q0": q0 / n, "mT": sT / n, "qT": qT / n,
            "cv": token_cross_sums(x0, xT, L_cv, L)}


def particle_bias(n: int, steps: int) -> tuple[float, float]:
    r"""The particles' expected relative error in ``D`` and its standard error.

    ``b_D = a (16/S)² + b (1000/n)`` (``S = T/h`` steps, ``n`` tokens; :data:`BIAS_STEP`,
    :data:`BIAS_CHAOS`), its standard error ``(s_a² (16/S)⁴ + s_b² (1000/n)²)^{1/2}``
    (the two fitted coefficients taken as independent).
    """
    fs, fn = (16.0 / steps) ** 2, 1000.0 / n
    return (BIAS_STEP[0] * fs + BIAS_CHAOS[0] * fn,
            float(np.hypot(BIAS_STEP[1] * fs, BIAS_CHAOS[1] * fn)))


def _score_test(adjusted: np.ndarray, ref: np.ndarray, err: np.ndarray, spec: str, D: float,
                T: float, L: int, bias: tuple[float, float] = (0.0, 0.0)) -> dict[str, float]:
    """The moment differences at ``T`` projected on ``g = ∂μ_T/∂D``: a one-dimensional test.

    ``g`` by a central difference of the PDE at ``D(1 ± DIFF_STEP)`` on the coarse mesh
    (its direction only matters: an error there costs power, not level). The statistic
    ``z = (g·δ − b_D D |g|²) / (gᵀΣg/R + (|g|·e)² + (s_b D |g|²)²)^{1/2}`` (``δ`` the mean
    difference, ``Σ`` the replicate covariance, ``e`` the PDE's error estimate,
    ``bias = (b_D, s_b)`` the particles' expected relative error in ``D`` and its standard
    error, :func:`particle_bias`; ``(0, 0)``: the raw score) is ``t(R − 1)`` under the
    null; the fitted ``D̂ = D + g·δ / |g|²`` (uncorrected) is reported with its standard
    error (Monte Carlo and PDE error; the bias's apart).
    """
    lo, hi = (_pde_level(spec, D * (1.0 + s * DIFF_STEP), T, L)["mT_mom"] for s in (-1, 1))
    return score(((hi - lo) / (2.0 * DIFF_STEP * D))[1:], adjusted, ref, err, D, bias=bias)


def score(g: np.ndarray, adjusted: np.ndarray, ref: np.ndarray, err: np.ndarray, D: float, *,
          bias: tuple[float, float] = (0.0, 0.0)) -> dict[str, float]:
    r"""The score statistic of :func:`_score_test` for a given direction ``g``.

    Parameters
    ----------
    g : (K − 1,) array
        ``∂μ_T/∂D`` without the constant harmonic (moments per unit of ``D``).
    adjusted : (R, K) array
        The replicates' (control-variate adjusted) moments at ``T``; column 0 (the
        constant) is dropped.
    ref, err : (K,) arrays
        The PDE's moments and their error estimate.
    D : float
        The diffusion ``g`` is taken at.
    bias : (float, float)
        The particles' expected relative error in ``D`` and its standard error.

    Returns
    -------
    dict
        ``z`` (centred), ``z_raw`` (uncentred), ``t_crit`` (two-sided ``t(R − 1)`` at
        level :data:`ALPHA`), ``D_fit`` and ``D_se`` (uncorrected fit).
    """
    from scipy.stats import t as student

    X = adjusted[:, 1:]
    R = X.shape[0]
    delta = X.mean(axis=0) - ref[1:]
    cov = np.cov(X.T) / R
    var = float(g @ cov @ g) + float(np.abs(g) @ err[1:]) ** 2
    gg = float(g @ g)
    shift, shift_se = bias[0] * D * gg, bias[1] * D * gg
    z = (float(g @ delta) - shift) / np.sqrt(var + shift_se ** 2)
    return {"z": z, "t_crit": float(student.ppf(1.0 - ALPHA / 2.0, R - 1)),
            "D_fit": D + float(g @ delta) / gg, "D_se": np.sqrt(var) / gg,
            "z_raw": float(g @ delta) / np.sqrt(var)}


def run(*, out: Path, quick: bool = False, seed: int = 0,
        fault: str | None = None) -> StudyResult:
    """Noisy particles vs the noisy PDE's moments at 0 and T; judge; write the summary."""
    fam, size = CONTROLS.read(fault)
    mode = MODES["quick" if quick else "full"]
    n, R, L, L_cv = int(mode["n"]), int(mode["R"]), int(mode["L"]), int(mode["L_cv"])
    T, D = T_FINAL, DIFFUSION
    D_pde = D * (1.0 + size) if fam == "pde-diffusion" else D
    if fault == "pde-noiseless":
        D_pde = 0.0
    D_part = D * (1.0 + size) if fam == "particles-diffusion" else D
    no_ito = fault == "particles-no-ito-drift"
    coarse, fine = (_pde_level(s, D_pde, T, L) for s in mode["meshes"])
    rich = 1.0 / (fine["cells"] / coarse["cells"] - 1.0)
    errT = rich * np.abs(fine["mT_mom"] - coarse["mT_mom"])
    items = [(n, r, seed, T, L, L_cv, fine["verts"], fine["m0"], D_part, no_ito)
             for r in range(R)]
    rows = parallel_map(_replicate, items)
    M0 = np.array([r["m0"] for r in rows])
    MT = np.array([r["mT"] for r in rows])
    var0 = np.mean([r["q0"] for r in rows], axis=0) - M0.mean(axis=0) ** 2
    varT = np.mean([r["qT"] for r in rows], axis=0) - MT.mean(axis=0) ** 2
    t0 = moment_test(M0, fine["m0_mom"], n=n, alpha=ALPHA, L=L, token_var=var0)
    nu = cell_moments(fine["verts"], fine["m0"], L_cv)
    cv = control_variates([r["cv"] for r in rows], nu, n=n)
    tT = moment_test(cv.adjusted, fine["mT_mom"], n=n, alpha=ALPHA, L=L, ref_error=errT,
                     token_var=cv.token_var)
    plain = moment_test(MT, fine["mT_mom"], n=n, alpha=ALPHA, L=L, ref_error=errT,
                        token_var=varT)
    bias = particle_bias(n, PARTICLE_STEPS)
    score = _score_test(cv.adjusted, fine["mT_mom"], errT, mode["meshes"][0], D, T, L,
                        bias=bias)
    cv_ratio = float(np.median(tT.se_mc / plain.se_mc))
    criteria = [
        *moment_criteria(t0, tT, R=R, n=n, T=T),
        Criterion("score_D_at_T", score["z"], lo=-score["t_crit"], hi=score["t_crit"],
                  what="t-score of the control-variate moment differences at T projected on "
                       "∂μ_T/∂D (the locally most powerful direction against a wrong D), "
                       "centred on the particles' expected bias",
                  why=f"two-sided level {ALPHA} of t({R - 1}); PDE error and the bias's "
                      "standard error added in quadrature"),
    ]
    mc_med = float(np.median(tT.se_mc))
    details = (
        f"Token diffusion D = {D:g}: {R} replicates × {n} tokens (Strang, dt = "
        f"{T / PARTICLE_STEPS:g}) against the noisy PDE on {fine['cells']} cells (order 2; "
        f"error from {coarse['cells']} cells). At T max|t| = {tT.max_t:.2f} (critical "
        f"{tT.t_crit:.2f}), Hotelling T² = {tT.hotelling:.1f} (critical "
        f"{tT.hotelling_crit:.1f}); at t = 0 max|t| = {t0.max_t:.2f}. Control variates scale "
        f"the replicate s.e. by {cv_ratio:.2f} (without them max|t| = {plain.max_t:.2f}, "
        f"T² = {plain.hotelling:.1f}); Monte Carlo s.e. median {mc_med:.2e}, PDE error max "
        f"{float(np.max(tT.pde_err)):.2e}. Score along ∂μ/∂D: t = {score['z']:.2f} "
        f"(critical {score['t_crit']:.2f}; centred on the particles' expected bias "
        f"{100 * bias[0]:.2f} % ± {100 * bias[1]:.2f} % of D, uncentred t = "
        f"{score['z_raw']:.2f}), D fitted {score['D_fit']:.5g} ± {score['D_se']:.2g}.")
    passed, text, entries = CONTROLS.conclude(criteria, details, fault)
    summary = {"settings": {"n": n, "replicates": R, "degree": L, "T": T, "diffusion": D,
                            "diffusion_pde": D_pde, "diffusion_particles": D_part,
                            "particle_dt": T / PARTICLE_STEPS, "integrator": "strang",
                            "cells": [coarse["cells"], fine["cells"]],
                            "meshes": list(mode["meshes"]), "quick": quick, "seed": seed,
                            "alpha": ALPHA, "control_variate_degree": L_cv, "rho0": RHO0},
               **entries,
               "fits": {"max_t_T": tT.max_t, "t_crit": tT.t_crit, "p_max_t_T": tT.p_max_t,
                        "hotelling_T": tT.hotelling, "hotelling_crit": tT.hotelling_crit,
                        "p_hotelling_T": tT.p_hotelling, "max_t_0": t0.max_t,
                        "se_mc_median": mc_med, "cv_se_ratio": cv_ratio,
                        "pde_error_max": float(np.max(tT.pde_err)),
                        "max_t_T_plain": plain.max_t, "hotelling_T_plain": plain.hotelling,
                        "score_t": score["z"], "score_t_crit": score["t_crit"],
                        "D_fit": score["D_fit"], "D_fit_se": score["D_se"],
                        "score_t_raw": score["z_raw"], "particle_bias_rel": bias[0],
                        "particle_bias_se": bias[1]},
               "tests": {"t0": t0.as_dict(), "T": tT.as_dict(), "T_plain": plain.as_dict()}}
    return write_study(out, StudyResult(NAME, summary, text, passed))

