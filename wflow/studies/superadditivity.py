"""Study ``superadditivity``: heterogeneous vs equal head strengths at equal total.

Theory (docs/theory.md §6, :mod:`wflow.multihead`): the early clustering rate of scalar
softmax heads from orthonormal tokens is ``Σ_h φ(λ_h)``, ``φ(λ) = 2λ/(e^{λβ} + n − 1)``.
``φ`` is concave for ``λ < λ_c`` and convex for ``λ > λ_c`` (``λ_c`` from
``(s−2)e^s = (n−1)(s+2)``, ``s = βλ``). By Jensen, heads ``λ̄(1 ± ε)`` with the same total
as equal heads ``λ̄`` cluster strictly faster when all strengths lie in the convex region
(``λ̄ > λ_c``) and strictly slower in the concave region.

The study measures the early rate ``γ̇(0)`` from particle runs (RK4, polynomial fit of the
mean inner product on ``[0, τ]``) for both sides of ``λ_c`` and compares with the formula.
Criteria per configuration: the sign of the gain ``rate(het)/rate(equal) − 1`` (predicted
``+`` on the convex side, ``−`` on the concave side, measured by the particles) and the
particle rates equal to ``Σ_h φ(λ_h)`` to :data:`REL_TOL`; and ``particle_accuracy``: every
run passes the engine's chain-rule check (:func:`~wflow.studies.helpers.run_accuracy`; an
inaccurate run FAILs the verdict rather than stopping the study).

Negative control ``no-mobility``: the particles run unnormalised attention
(kind ``usa``: the softmax mobility ``1/Z`` dropped) against ``Σ_h φ(λ_h)`` of softmax.
It trips the gain signs, the rate matches and ``particle_accuracy`` (quick mode:
docs/studies_power.md, generated from ``bench/results/size_power.json``).
"""

from __future__ import annotations

import logging
from pathlib import Path

import numpy as np

from ..attention.heads import Attention, Heads
from ..geometry.sphere import orthonormal_tokens
from ..multihead import early_rate, equiangular_rate, lambda_c
from ..particles import simulate
from .base import Criterion, NegativeControls, StudyResult, save_figure, write_study
from .helpers import VELOCITY_FAMILY, accuracy_criterion, fit_early_rate, run_accuracy, value_scale

logger = logging.getLogger(__name__)

NAME = "superadditivity"

#: degree-6 fit on [0, τ] (γ(τ) <~ 0.05, 11 RK4 samples): truncation ~1e-8 relative,
#: integrator error ~1e-10 amplified ~1/τ (see the equiangular study); allow 1e-6.
REL_TOL = 1e-6

#: The criteria do not depend on the seed (it rotates the tokens; the result is
#: rotation invariant, measured identical at every seed): the tests run it once.
SEED_INDEPENDENT = True

#: Negative controls: ``run(fault=NAME)``.
FAULTS = {
    "time-doubled": "the particle heads have doubled value matrices (time runs twice as "
                    "fast) while the formula uses the nominal strengths",
    "equal-heads": "the 'heterogeneous' particle runs use the equal strengths (no "
                   "heterogeneity), so the measured gain vanishes",
    "no-mobility": "the particles drop the softmax mobility 1/Z (unnormalised attention, "
                   "kind 'usa', same β) while the formula Σφ(λ_h) is that of softmax",
}
#: Fault families ``run(fault="FAMILY:S")`` (sizes scanned by bench/size_power.py).
FAMILIES = dict(VELOCITY_FAMILY)
#: The study's faults, read (``run(fault=...)``) and reported (the verdict) in one place.
CONTROLS = NegativeControls(NAME, FAULTS, FAMILIES, seed_independent=SEED_INDEPENDENT)


def _measure(x0: np.ndarray, lambdas: list[float], beta: float, vscale: float = 1.0,
             kind: str = "softmax") -> tuple[float, float]:
    """Early rate ``γ̇(0)`` of a particle run and its :func:`run_accuracy`."""
    # window: γ(τ) <~ 0.05 (early phase), 11 samples for the degree-6 fit
    tau = min(0.1, 0.05 / early_rate(lambdas, beta, x0.shape[0]))
    dt = tau / 10
    heads = Heads.scalar(lambdas, x0.shape[1])
    heads = heads.with_(V=vscale * heads.V)
    # rtol = None: judged by the study's criteria, not by the solver's tolerance
    res = simulate(x0, heads, Attention(kind, beta), T=tau, dt=dt, clusters=False,
                   head_rates=False, rtol=None)
    return (fit_early_rate(res.t, res.history["mean_inner"][0], tau=tau),
            run_accuracy(res, NAME))


def run(*, out: Path, quick: bool = False, seed: int = 0,
        fault: str | None = None) -> StudyResult:
    """Early rates of heterogeneous vs equal heads on both sides of ``λ_c``."""
    fam, size = CONTROLS.read(fault)
    vscale = value_scale(fault, fam, size)
    kind = "usa" if fault == "no-mobility" else "softmax"  # of the particles
    n, beta = 8, 1.0
    lc = float(lambda_c(n, beta))
    rng = np.random.default_rng(seed)
    x0 = orthonormal_tokens(n, n, rng)
    sides = {"concave": 0.5, "convex": 2.0}
    spreads = (0.4,) if quick else (0.2, 0.4)
    Hs = (2,) if quick else (2, 3)
    rows = []
    criteria: list[Criterion] = []
    worst_acc = 0.0
    for side, fac in sides.items():
        lbar = fac * lc
        for H in Hs:
            equal = [lbar] * H
            r_eq, acc = _measure(x0, equal, beta, vscale, kind)
            worst_acc = max(worst_acc, acc)
            f_eq = early_rate(equal, beta, n)
            for eps in spreads:
                het = list(lbar * (1 + eps * np.linspace(-1, 1, H)))
                r_het, acc = _measure(x0, equal if fault == "equal-heads" else het, beta,
                                      vscale, kind)
                worst_acc = max(worst_acc, acc)
                f_het = early_rate(het, beta, n)
                pred_sign = 1 if side == "convex" else -1
                row = {"side": side, "lambda_bar": lbar, "H": H, "eps": eps,
                       "lambdas_het": het, "rate_equal_particles": r_eq,
                       "rate_equal_formula": f_eq, "rate_het_particles": r_het,
                       "rate_het_formula": f_het,
                       "gain_particles": r_het / r_eq - 1, "gain_formula": f_het / f_eq - 1,
                       "rel_err_equal": abs(r_eq - f_eq) / f_eq,
                       "rel_err_het": abs(r_het - f_het) / f_het,
                       "predicted_sign": pred_sign}
                row["sign_ok"] = bool(np.sign(r_het - r_eq) == pred_sign
                                      and np.sign(f_het - f_eq) == pred_sign)
                row["match_ok"] = bool(max(row["rel_err_equal"], row["rel_err_het"]) <= REL_TOL)
                tag = f"{side}_H{H}_eps{eps}"
                # the measured gain in the predicted direction, relative to the predicted
                # gain: 1 when particles and formula agree, <= 0 for the wrong sign
                criteria.append(Criterion(
                    f"{tag}_gain_sign", row["gain_particles"] / row["gain_formula"], lo=0.5,
                    what=f"{side} side, H = {H}, ε = {eps}: measured gain / predicted gain",
                    why=f"Jensen: heterogeneity {'speeds up' if pred_sign > 0 else 'slows'} "
                        "clustering on this side"))
                criteria.append(Criterion(
                    f"{tag}_rates_match", max(row["rel_err_equal"], row["rel_err_het"]),
                    hi=REL_TOL, what=f"{side} side, H = {H}, ε = {eps}: relative error of the "
                                     "particle early rates vs Σφ(λ_h)",
                    why="degree-6 fit on [0, τ] with RK4 samples"))
                rows.append(row)
                logger.info("%s H=%d eps=%.2f: gain %.3e (formula %.3e)", side, H, eps,
                            row["gain_particles"], row["gain_formula"])
    criteria.append(accuracy_criterion(worst_acc))
    fits = {"lambda_c": lc,
            **{f"{r['side']}_H{r['H']}_eps{r['eps']}": {"gain_particles": r["gain_particles"],
                                                       "gain_formula": r["gain_formula"]}
               for r in rows}}
    worst = max(max(r["rel_err_equal"], r["rel_err_het"]) for r in rows)
    conv = [r["gain_particles"] for r in rows if r["side"] == "convex"]
    conc = [r["gain_particles"] for r in rows if r["side"] == "concave"]

    def word(g: list[float]) -> str:
        return "faster" if min(g) > 0 else "slower" if max(g) < 0 else "mixed"

    details = (f"λ_c = {lc:.4f} (n = {n}, β = {beta}). Convex side λ̄ = 2λ_c: heterogeneous "
               f"heads cluster {word(conv)}, gains {min(conv):+.3f}..{max(conv):+.3f}; concave "
               f"side λ̄ = λ_c/2: {word(conc)}, gains {min(conc):+.3f}..{max(conc):+.3f}; "
               f"particle early rates match Σφ(λ_h) to {worst:.1e} (rel).")
    passed, text, entries = CONTROLS.conclude(criteria, details, fault)
    summary = {"settings": {"n": n, "beta": beta, "quick": quick, "seed": seed,
                            "window": "tau = min(0.1, 0.05/rate), dt = tau/10",
                            "rel_tol": REL_TOL},
               **entries,
               "fits": fits, "rows": rows}

    def plot(stage: Path) -> list[str]:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt

        fig, ax = plt.subplots(1, 2, figsize=(10, 4))
        lam = np.linspace(1e-3, 3.2 * lc, 400)
        ax[0].plot(lam, equiangular_rate(lam, beta, n), "k-", label="φ(λ)")
        ax[0].axvline(lc, color="gray", ls="--", label=f"λ_c = {lc:.3f}")
        for i, r in enumerate(r for r in rows if r["H"] == 2):
            het = np.asarray(r["lambdas_het"])
            ax[0].plot(het, equiangular_rate(het, beta, n), "o-", color=f"C{i}", ms=4,
                       label=f"{r['side']} ε={r['eps']}: chord")
            ax[0].plot([r["lambda_bar"]], [equiangular_rate(r["lambda_bar"], beta, n)], "s",
                       color=f"C{i}")
        ax[0].set(xlabel="λ", ylabel="φ(λ) = 2λ/(exp(λβ)+n−1)", title=f"n={n}, β={beta}")
        ax[0].legend(fontsize=7)
        labels = [f"{r['side'][:4]} H{r['H']} ε{r['eps']}" for r in rows]
        xs = np.arange(len(rows))
        ax[1].bar(xs - 0.2, [r["gain_formula"] for r in rows], 0.4, label="formula")
        ax[1].bar(xs + 0.2, [r["gain_particles"] for r in rows], 0.4, label="particles")
        ax[1].axhline(0, color="k", lw=0.8)
        ax[1].set_xticks(xs, labels=labels, rotation=45, ha="right", fontsize=7)
        ax[1].set(ylabel="rate(het)/rate(equal) − 1", title="early-rate gain of heterogeneity")
        ax[1].legend(fontsize=8)
        return save_figure(fig, stage, "superadditivity.png")

    return write_study(out, StudyResult(NAME, summary, text, passed), plot)
