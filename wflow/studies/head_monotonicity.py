"""Study ``head-monotonicity``: per-head energy monotonicity below / above ``β*``, δ sweep.

Theory (THEORY.md §6, :mod:`wflow.multihead`): with heads in orthogonal subspaces
(``A_{h'}A_h = 0``) the per-head rate is ``dE_h/dt = own_h + cross_radial_h``, and radial
dominance (RD) ``own_h ≥ ∫|∇ψ_h| Σ_{h'≠h}|a^{h'}|`` is sufficient for ``dE_h/dt ≥ 0``. For
approximately orthogonal heads (``‖A_{h'}A_h‖_op = δ``) a direct cross term of size
``O(δ)`` appears; ``own + cross_direct − R ≥ 0`` still certifies monotonicity.

Setting: ``H`` heads ``A_h = V_h = Hα U_h U_hᵀ`` (coordinate blocks for ``δ = 0``, see
:func:`~wflow.multihead.approx_orthogonal_heads`), ``n`` tokens spread over the blocks
(each head sees orthonormal tokens with strength ``α``, :func:`~wflow.multihead.spread_tokens`)
plus a seeded perturbation that breaks the symmetry between heads. For the unperturbed
tokens (RD) holds iff ``β ≤ β*_⊥ = (1/2α) ln(H c*² (n−1)/(1 − H c*²))``. Trajectories
(particle engine, RK4) at ``β`` below and above ``β*_⊥`` and for a sweep of ``δ`` record for
each head the fraction of time with ``dE_h/dt ≥ 0`` and with (RD), and check the certificate
(never ``dE_h/dt < 0`` while it holds).
"""

from __future__ import annotations

import logging
from pathlib import Path

import numpy as np

from ..heads import Attention
from ..multihead import (
    approx_orthogonal_heads,
    beta_star,
    beta_star_blocks,
    dominance_root,
    head_overlap,
    radial_dominance,
    spread_tokens,
)
from ..particles import simulate
from ..sphere import normalize
from .base import StudyResult, fit_loglog, write_study

logger = logging.getLogger(__name__)

NAME = "head-monotonicity"


def initial_tokens(n: int, H: int, eps: float, rng: np.random.Generator) -> np.ndarray:
    """Spread orthonormal tokens plus a Gaussian perturbation of size ``eps`` (renormalised)."""
    x = spread_tokens(n, H)
    return normalize(x + eps * rng.standard_normal(x.shape) / np.sqrt(x.shape[1]))


def run(*, out: Path, quick: bool = False, seed: int = 0) -> StudyResult:
    """Trajectories below/above ``β*_⊥`` for orthogonal and approximately orthogonal heads."""
    H, n, alpha, eps = 2, 8, 1.0, 0.3
    d = H * n
    factors = (0.5, 2.5) if quick else (0.25, 0.5, 1.5, 2.5, 4.0)
    deltas = (0.0, 0.05) if quick else (0.0, 0.01, 0.03, 0.1)  # relative to (Hα)²
    T, dt, rec = (2.0, 0.04, 1) if quick else (6.0, 0.02, 2)
    rng = np.random.default_rng(seed)
    x0 = initial_tokens(n, H, eps, rng)
    bsb = float(beta_star_blocks(H, n, alpha))
    scale = H * alpha
    heads_by_delta = {}
    for dl in deltas:
        heads_by_delta[dl] = approx_orthogonal_heads(H, d, scale=scale, delta=dl * scale**2,
                                                     rng=np.random.default_rng(seed + 1))
    root0 = dominance_root(x0, heads_by_delta[0.0], bracket=(bsb / 8, 8 * bsb))
    runs = []
    violations = 0
    below_ok = True
    for f in factors:
        beta = f * bsb
        attn = Attention("softmax", beta)
        for dl, heads in heads_by_delta.items():
            res = simulate(x0, heads, attn, T=T, dt=dt, record_every=rec, save_trajectory=True,
                           head_rates=True, clusters=False)
            if res.status != "success":
                raise FloatingPointError(f"{NAME}: particle run failed: {res.message}")
            traj = res.trajectory[0]
            rate = res.history["dEh_dt"][0]  # (K, H) from the particle diagnostics
            rds = [radial_dominance(xk, heads, attn) for xk in traj]
            margin = np.array([r.margin for r in rds])
            cert = np.array([r.margin_general for r in rds])
            own = np.array([r.own for r in rds])
            cd = np.array([r.cross_direct for r in rds])
            tol = 1e-12 * max(1.0, float(np.max(np.abs(rate))))  # round-off of the rates
            mono = rate >= -tol
            viol = int(np.sum((cert >= 0) & ~mono))
            violations += viol
            E_h = res.history["E_h"][0]
            gain = np.maximum(E_h[-1] - E_h[0], 1e-300)
            drop = (np.maximum.accumulate(E_h, axis=0) - E_h).max(axis=0) / gain
            row = {
                "beta_over_beta_star_blocks": f, "beta": beta, "delta_rel": dl,
                "overlap": head_overlap(heads),
                "frac_monotone": mono.mean(axis=0).tolist(),
                "max_relative_energy_drop": drop.tolist(),
                "frac_dominance": (margin >= 0).mean(axis=0).tolist(),
                "dominance_at_t0": (margin[0] >= 0).tolist(),
                "certificate_violations": viol,
                "min_rate_over_max_own": float(np.min(rate) / np.max(own)),
                "cross_direct_over_own_t0": float(np.max(np.abs(cd[0]) / own[0])),
                "final_mean_inner": float(res.history["mean_inner"][0, -1]),
            }
            if f < 1 and dl == 0.0:
                below_ok &= bool(np.all(mono)) and bool(np.all(drop == 0))
            runs.append(row)
            logger.info("beta/beta*=%.2f delta=%.3g: frac monotone %s", f, dl,
                        row["frac_monotone"])
    # O(δ) scaling of the direct cross term (at the smallest β, over δ > 0)
    pos = [r for r in runs if r["delta_rel"] > 0 and r["beta_over_beta_star_blocks"] == factors[0]]
    fits = {"beta_star_blocks": bsb, "dominance_root_x0": root0,
            "certificate_violations": float(violations)}
    if len(pos) >= 2:
        fit = fit_loglog([r["delta_rel"] for r in pos],
                         [r["cross_direct_over_own_t0"] for r in pos])
        fits["cross_direct_vs_delta_slope"] = fit.slope
    above = [r for r in runs if r["beta_over_beta_star_blocks"] > 1 and r["delta_rel"] == 0]
    lost_above = any(min(r["frac_monotone"]) < 1 for r in above)
    below_drop = {f"{dl:g}": max(max(r["max_relative_energy_drop"]) for r in runs
                                 if r["delta_rel"] == dl and r["beta_over_beta_star_blocks"] < 1)
                  for dl in deltas}
    fits["max_relative_energy_drop_below"] = {k: float(v) for k, v in below_drop.items()}
    passed = violations == 0 and below_ok
    verdict = (f"Certificate own + cross_direct − R ≥ 0 ⇒ dE_h/dt ≥ 0: {violations} violations "
               f"over all recorded states. Below β*_⊥ = {bsb:.3f} (orthogonal heads) every head's "
               f"energy is non-decreasing: {below_ok}. Above β*_⊥ per-head monotonicity is "
               f"{'lost for some head' if lost_above else 'still observed'} (RD is only "
               "sufficient). Approximately orthogonal heads below β*_⊥: largest per-head energy "
               "drop relative to its gain " + ", ".join(f"{v:.1e} (δ/(Hα)²={k})"
                                                         for k, v in below_drop.items())
               + "; the O(δ) direct term wins once the own power has decayed near consensus.")
    if not passed:
        verdict = "MISMATCH: " + verdict
    summary = {"settings": {"H": H, "n": n, "d": d, "alpha": alpha, "eps": eps, "T": T,
                            "dt": dt, "factors": factors, "deltas_rel": deltas,
                            "quick": quick, "seed": seed,
                            "beta_star_shared_space": float(beta_star(H, n, alpha))},
               "fits": fits, "runs": runs}

    def plot(stage: Path) -> list[str]:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
        import matplotlib.ticker

        fig, ax = plt.subplots(1, 2, figsize=(10, 4))
        for j, dl in enumerate(deltas):
            rs = [r for r in runs if r["delta_rel"] == dl]
            fx = [r["beta_over_beta_star_blocks"] for r in rs]
            ax[0].plot(fx, [min(r["frac_monotone"]) for r in rs], "o-", color=f"C{j}",
                       label=f"δ/(Hα)² = {dl:g}: min_h frac dE_h/dt ≥ 0")
            ax[0].plot(fx, [min(r["frac_dominance"]) for r in rs], "x--", color=f"C{j}",
                       label=f"δ/(Hα)² = {dl:g}: min_h frac (RD)")
        ax[0].axvline(1, color="gray", ls=":")
        ax[0].set(xscale="log", xlabel="β / β*_⊥", ylabel="fraction of time",
                  title=f"H={H} heads, n={n} tokens")
        ax[0].legend(fontsize=6, loc="center left")
        for j, dl in enumerate(deltas):
            rs = [r for r in runs if r["delta_rel"] == dl]
            ax[1].plot([r["beta_over_beta_star_blocks"] for r in rs],
                       [max(r["max_relative_energy_drop"]) + 1e-17 for r in rs], "o-",
                       color=f"C{j}", label=f"δ/(Hα)² = {dl:g}")
        ax[1].axvline(1, color="gray", ls=":")
        ax[1].set(xscale="log", yscale="log", xlabel="β / β*_⊥",
                  ylabel="max_h (largest drop of E_h) / (E_h(T) − E_h(0))",
                  title="per-head energy decrease (1e-17 = none)")
        ax[1].legend(fontsize=8)
        for a in ax:
            a.set_xticks(list(factors), labels=[f"{f:g}" for f in factors])
            a.xaxis.set_minor_formatter(matplotlib.ticker.NullFormatter())
        fig.tight_layout()
        fig.savefig(stage / "head_monotonicity.png", dpi=120)
        plt.close(fig)
        return ["head_monotonicity.png"]

    return write_study(out, StudyResult(NAME, summary, verdict, bool(passed)), plot)
