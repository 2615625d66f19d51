"""Study ``equiangular``: equiangular tokens stay equiangular; early and late rates.

Theory (docs/theory.md §6, :mod:`wflow.multihead`): for scalar softmax heads ``λ_h I``
(``w_h = 1``) an equiangular configuration ``<x_i, x_j> = γ`` stays equiangular and
``γ̇ = F(γ) = 2κ(γ)(1−γ)(1+(n−1)γ)``; at ``γ = 0`` the rate is ``Σ_h φ(λ_h)``,
``φ(λ) = 2λ/(e^{λβ}+n−1)``, and ``1 − γ(t) ≈ C e^{−2Λt}``, ``Λ = Σ_h λ_h``.

Particle runs (RK4) from orthonormal tokens (``γ_0 = 0``, randomly rotated in ``d > n``)
measure: the spread of the off-diagonal Gram entries (equiangularity), the distance to
the 1-D ODE, the early rate (polynomial fit on ``[0, τ]``) and the late decay rate of
``1 − γ`` (log-linear fit on ``1e-8 <= 1 − γ <= 1e-4``). Each is a criterion with the
tolerance of :data:`TOL` (derived from the scheme's order and the fit windows).

Negative control ``no-mobility``: the particles run unnormalised attention
(kind ``usa``: the softmax mobility ``1/Z`` dropped; equiangular tokens stay equiangular
to round-off) against the softmax ODE and rates; it trips ``case0_ode_distance``,
``case0_early_rel`` and ``case0_late_rel`` (quick mode: docs/studies_power.md, generated
from ``bench/results/size_power.json``).
"""

from __future__ import annotations

import logging
from pathlib import Path

import numpy as np

from ..attention.heads import Attention, Heads
from ..geometry.sphere import equiangular_tokens
from ..multihead import early_rate, equiangular_rhs, solve_equiangular
from ..particles import simulate
from ..status import Status
from .base import Criterion, NegativeControls, StudyResult, parse_fault, save_figure, write_study
from .helpers import (
    VELOCITY_FAMILY,
    fit_decay_rate,
    fit_early_rate,
    no_mobility_fault,
    time_doubled_fault,
    value_scale,
)

logger = logging.getLogger(__name__)

NAME = "equiangular"

#: Tolerances of the verdict, with their reasons.
TOL = {
    # symmetry is exact: the Gram matrix stays equiangular up to round-off of the RK4 steps
    "equiangular_spread": 1e-12,
    # RK4 at dt = 0.01 on rates O(1): global error ~ dt⁴ · C ≈ 1e-9
    "ode_distance": 1e-7,
    # degree-6 polynomial on [0, τ ≈ 0.1]: truncation O(τ⁶) ≈ 1e-8 relative, plus the RK4
    # error (~1e-10) amplified by the fit (~1/τ)
    "early_rel": 1e-6,
    # F(γ)/(1−γ) − 2Λ = O(1 − γ) ≤ O(1e-4 · βΛ n) in the fit window
    "late_rel": 5e-3,
}


#: The criteria do not depend on the seed (it rotates the tokens; the result is
#: rotation invariant, measured identical at every seed): the tests run it once.
SEED_INDEPENDENT = True

#: Negative controls: ``run(fault=NAME)``.
FAULTS = {
    "euler": "the particles are integrated with explicit Euler (order 1) instead of RK4",
    "time-doubled": time_doubled_fault("while the ODE and the rates use the nominal strengths"),
    "no-mobility": no_mobility_fault("the particles drop",
                                     "while the ODE and the rates are those of softmax"),
}
#: Fault families ``run(fault="FAMILY:S")`` (sizes scanned by bench/size_power.py).
FAMILIES = dict(VELOCITY_FAMILY)
#: The study's faults, read (``run(fault=...)``) and reported (the verdict) in one place.
CONTROLS = NegativeControls(NAME, FAULTS, FAMILIES, seed_independent=SEED_INDEPENDENT)


def _case(n: int, d: int, lambdas: list[float], beta: float, T: float, dt: float,
          rng: np.random.Generator, fault: str | None = None) -> dict:
    x0 = equiangular_tokens(n, 0.0, d=d, rng=rng)
    heads = Heads.scalar(lambdas, d)
    fam, size = parse_fault(fault, FAMILIES)
    if fault == "time-doubled" or fam == "velocity":
        heads = heads.with_(V=value_scale(fault, fam, size) * heads.V)
    kind = "usa" if fault == "no-mobility" else "softmax"
    # rtol = None: judged by the study's criteria, not by the solver's tolerance
    res = simulate(x0, heads, Attention(kind, beta), T=T, dt=dt, save_trajectory=True,
                   clusters=False, head_rates=False,
                   integrator="euler" if fault == "euler" else "rk4", rtol=None)
    if res.status != Status.SUCCESS:
        raise FloatingPointError(f"{NAME}: particle run failed: {res.message}")
    t = res.t
    gamma = res.history["mean_inner"][0]
    X = res.trajectory[0]
    G = np.einsum("kid,kjd->kij", X, X)
    iu = np.triu_indices(n, 1)
    off = G[:, iu[0], iu[1]]
    spread = float(np.max(off.max(axis=1) - off.min(axis=1)))
    ode = solve_equiangular(0.0, lambdas, beta, n, t)
    dist = float(np.max(np.abs(gamma - ode.gamma)))
    r0 = early_rate(lambdas, beta, n)
    tau = max(10 * dt, min(0.1, 0.05 / max(r0, 1e-12)))  # γ(τ) <~ 0.05, >= 11 samples
    r_fit = fit_early_rate(t, gamma, tau=tau)
    Lam = float(np.sum(lambdas))
    try:
        k_fit, used = fit_decay_rate(t, 1.0 - gamma, lo=1e-8, hi=1e-4)
    except ValueError:  # the run never enters the fit window: no late rate
        k_fit, used = float("nan"), 0
    return {"n": n, "d": d, "lambdas": lambdas, "beta": beta, "T": T, "dt": dt,
            "equiangular_spread": spread, "ode_distance": dist,
            "early_rate_formula": r0, "early_rate_F0": float(equiangular_rhs(0.0, lambdas,
                                                                             beta, n)),
            "early_rate_fit": r_fit, "early_fit_tau": tau,
            "early_rel_err": abs(r_fit - r0) / r0,
            "late_rate_theory": 2 * Lam, "late_rate_fit": k_fit, "late_fit_samples": used,
            "late_rel_err": abs(k_fit - 2 * Lam) / (2 * Lam),
            "series": {"t": t, "gamma": gamma, "gamma_ode": ode.gamma}}


def run(*, out: Path, quick: bool = False, seed: int = 0,
        fault: str | None = None) -> StudyResult:
    """Particle runs from ``γ_0 = 0`` compared with the equiangular ODE and its rates."""
    CONTROLS.read(fault)
    rng = np.random.default_rng(seed)
    cases = [(6, 8, [0.7, 1.5], 1.0)] if quick else [(6, 8, [0.7, 1.5], 1.0),
                                                     (10, 12, [0.5, 1.0, 2.0], 2.0),
                                                     (4, 4, [3.0], 1.0)]
    rows = []
    criteria: list[Criterion] = []
    what = {"equiangular_spread": ("max spread of the off-diagonal Gram entries",
                                   "symmetry: equiangular tokens stay equiangular"),
            "ode_distance": ("max |γ_particles − γ_ODE|", "RK4 error ~1e-9 at dt = 0.01"),
            "early_rel": ("relative error of the early rate vs Σφ(λ_h)",
                          "degree-6 fit on [0, τ], RK4 error amplified ~1/τ"),
            "late_rel": ("relative error of the late decay rate of 1 − γ vs 2Λ",
                         "F(γ)/(1 − γ) − 2Λ = O(1 − γ) in the fit window")}
    value = {"equiangular_spread": "equiangular_spread", "ode_distance": "ode_distance",
             "early_rel": "early_rel_err", "late_rel": "late_rel_err"}
    for i, (n, d, lam, beta) in enumerate(cases):
        Lam = float(np.sum(lam))
        T = 12.0 / (2 * Lam) + 3.0  # well past 1 − γ = 1e-8 (≈ e^{−18})
        row = _case(n, d, lam, beta, T, 0.01, rng, fault)
        for key, (w, why) in what.items():
            criteria.append(Criterion(f"case{i}_{key}", row[value[key]], hi=TOL[key],
                                      what=f"n = {n}, λ = {lam}: {w}", why=why))
        row["checks"] = {c.name: c.ok for c in criteria[-len(what):]}
        rows.append(row)
        logger.info("n=%d λ=%s: spread %.1e, ode %.1e, early %.2e, late %.2e", n, lam,
                    row["equiangular_spread"], row["ode_distance"], row["early_rel_err"],
                    row["late_rel_err"])
    fits = {f"case{i}": {k: r[k] for k in ("equiangular_spread", "ode_distance",
                                           "early_rate_formula", "early_rate_fit",
                                           "late_rate_theory", "late_rate_fit")}
            for i, r in enumerate(rows)}
    fits = {k: {kk: (vv if np.isfinite(vv) else str(vv)) for kk, vv in v.items()}
            for k, v in fits.items()}
    details = ("Max Gram spread "
               f"{max(r['equiangular_spread'] for r in rows):.1e}; particles vs the 1-D ODE "
               f"γ̇ = F(γ): {max(r['ode_distance'] for r in rows):.1e}; early rate vs "
               f"Σφ(λ_h): max rel. err {max(r['early_rel_err'] for r in rows):.1e}; late decay "
               f"of 1 − γ vs 2Λ: max rel. err {max(r['late_rel_err'] for r in rows):.1e}.")
    passed, text, entries = CONTROLS.conclude(criteria, details, fault)
    summary = {"settings": {"quick": quick, "seed": seed, "tolerances": TOL},
               **entries,
               "fits": fits, "cases": rows}

    def plot(stage: Path) -> list[str]:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt

        fig, ax = plt.subplots(1, 2, figsize=(10, 4))
        for i, r in enumerate(rows):
            s = {k: np.asarray(v) for k, v in r["series"].items()}
            lab = f"n={r['n']}, λ={r['lambdas']}, β={r['beta']}"
            ax[0].plot(s["t"], s["gamma"], color=f"C{i}", label=lab)
            ax[0].plot(s["t"], s["gamma_ode"], "k:", lw=1)
            tt = s["t"][s["t"] <= 0.5 / max(r["early_rate_formula"], 1e-3)]
            ax[0].plot(tt, r["early_rate_formula"] * tt, "--", color=f"C{i}", lw=1)
            ax[1].semilogy(s["t"], np.maximum(1 - s["gamma"], 1e-17), color=f"C{i}", label=lab)
            t_ref = s["t"]
            j = np.argmin(np.abs(1 - s["gamma"] - 1e-6))
            ax[1].semilogy(t_ref, 1e-6 * np.exp(-r["late_rate_theory"] * (t_ref - t_ref[j])),
                           "k:", lw=1)
        ax[0].set(xlabel="t", ylabel="γ(t)",
                  title="particles (colour), ODE (dotted), slope Σφ(λ_h) (dashed)")
        ax[0].legend(fontsize=7)
        ax[1].set(xlabel="t", ylabel="1 − γ", ylim=(1e-14, 2),
                  title="late decay vs exp(−2Λt) (dotted)")
        return save_figure(fig, stage, "equiangular.png")

    for r in rows:  # keep series in the summary as plain lists
        r["series"] = {k: np.asarray(v).tolist() for k, v in r["series"].items()}
    return write_study(out, StudyResult(NAME, summary, text, passed), plot)
