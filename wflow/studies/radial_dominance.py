"""Study ``radial-dominance``: the margin of (RD) changes sign at the critical ``β*``.

Theory (docs/theory.md §6, :mod:`wflow.multihead`): for ``n <= d`` orthonormal tokens and ``H``
identical scalar heads ``αI`` the radial-dominance margin
``own_h − ∫|∇ψ_h| Σ_{h'≠h} |a^{h'}|`` is positive for ``β < β*`` and negative for
``β > β*``, ``β* = (1/2α) ln(c*(H)² (n−1)/(1 − c*(H)²))``; ``H = 1``: no cross term,
``β* = ∞``. The study sweeps ``β`` across ``β*`` for ``H = 1..4``, finds the root of the
margin with Brent's method and compares it with the formula; it also reports the root
of the sharp radial margin (vs ``β*_exact``) and of the block-head configuration
(vs ``β*_⊥``).

Criteria (per ``H``): the margin is positive at every sampled ``β < β*`` and negative at
every ``β > β*``; the three Brent roots equal the formulas to the root-finding tolerance
(:func:`_root_tol`). ``H = 1`` (no cross term) is reported, not judged: its normalised
margin ``(own − 0)/(own + 0)`` is 1 by construction at every ``β`` (no fault of the power
scan moves it: docs/studies_power.md), so it could not fail. Negative control
``alpha-mismatch``: the heads have strength ``1.1 α`` while the formulas use ``α``, so the
roots move by ≈ 10 %.

What a PASS rules out: not a missing mobility
---------------------------------------------
The study cannot see a dropped softmax mobility ``1/Z``, so ``no-mobility`` is
no negative control here. With identical scalar heads ``αI`` on orthonormal tokens (and
the block heads on spread tokens, which every head sees alike) the normaliser
``Z_h(x_i)`` is one number for every token and head, and both sides of the margin,
``own_h = w_h ∫|P∇ψ_h|²/Z_h`` and ``R_h = ∫|∇ψ_h| Σ_{h'≠h} w_h' |<∇ψ_h', x>|/Z_h'``, carry
the same ``1/Z``: the unnormalised margin is ``Z`` times the softmax one, with the same
sign and the same roots (the claim holds for both kinds in this setting; computed with
kind ``usa``, the margins and roots agree with softmax's to round-off, within the root
tolerance). A mobility that differed between heads or tokens would
move the roots, but ``β*`` is derived for identical heads on a symmetric configuration.
"""

from __future__ import annotations

import logging
from pathlib import Path

import numpy as np

from ..attention.heads import Attention, Heads
from ..geometry.sphere import orthonormal_tokens
from ..multihead import (
    beta_star,
    beta_star_blocks,
    beta_star_exact,
    dominance_root,
    radial_dominance,
)
from .base import Criterion, NegativeControls, StudyResult, save_figure, write_study
from .helpers import block_heads, spread_tokens

logger = logging.getLogger(__name__)

NAME = "radial-dominance"

#: Brent tolerance on the root (absolute, in β); the relative part is 4 eps.
XTOL = 1e-12

#: The criteria do not depend on the seed (it rotates the tokens; the result is
#: rotation invariant, measured identical at every seed): the tests run it once.
SEED_INDEPENDENT = True

#: Negative controls: ``run(fault=NAME)``.
FAULTS = {
    "alpha-mismatch": "the heads have strength 1.1 α while β*, β*_exact and β*_⊥ use α",
}
#: Fault families ``run(fault="FAMILY:S")`` (sizes scanned by bench/size_power.py).
FAMILIES = {"alpha": "the heads have strength (1 + s) α while β*, β*_exact and β*_⊥ use α"}
#: The study's faults, read (``run(fault=...)``) and reported (the verdict) in one place.
CONTROLS = NegativeControls(NAME, FAULTS, FAMILIES, seed_independent=SEED_INDEPENDENT)


def _root_tol(beta: float) -> float:
    # Brent brackets the root to xtol + 4 eps |β|; the margin is evaluated to ~1e-16 with
    # an O(1) slope near the root, so round-off moves the root by ~1e-15: allow 10x.
    return 10.0 * (XTOL + 4 * np.finfo(float).eps * abs(beta)) + 1e-13


def run(*, out: Path, quick: bool = False, seed: int = 0,
        fault: str | None = None) -> StudyResult:
    """Sweep ``β`` across ``β*`` for ``H = 1..4`` and locate the sign change of the margin."""
    fam, size = CONTROLS.read(fault)
    n = 16 if quick else 32
    alpha = 1.0
    strength = 1.1 * alpha if fault == "alpha-mismatch" else alpha  # of the heads
    if fam == "alpha":
        strength = (1.0 + size) * alpha
    n_beta = 9 if quick else 33
    rng = np.random.default_rng(seed)
    x = orthonormal_tokens(n, n, rng)  # random rotation: the result must not depend on it
    rows, curves = {}, {}
    criteria: list[Criterion] = []
    for H in (1, 2, 3, 4):
        heads = Heads.scalar([strength] * H, n)
        bs = float(beta_star(H, n, alpha))
        be = float(beta_star_exact(H, n, alpha))
        ref = bs if np.isfinite(bs) else 1.0
        betas = ref * np.geomspace(0.25, 4.0, n_beta)
        margins, rel = [], []
        for b in betas:
            rd = radial_dominance(x, heads, Attention("softmax", float(b)))
            margins.append(float(np.min(rd.margin)))
            # normalised margin (own − R)/(own + R) ∈ [−1, 1]
            rel.append(float(np.min(rd.margin / (rd.own + rd.cross_bound))))
        curves[H] = (betas, np.asarray(rel))
        row = {"beta_star": bs, "beta_star_exact": be, "betas": betas,
               "margin": margins, "normalised_margin": rel}
        if H == 1:
            # information, not a criterion: without a cross term the normalised margin is
            # own/own = 1 at every β (it cannot fail; docs/studies_power.md)
            row["holds_everywhere"] = bool(np.all(np.asarray(margins) > 0))
            row["smallest_normalised_margin"] = float(np.min(rel))
        else:
            root = dominance_root(x, heads, bracket=(bs / 4, 4 * bs), xtol=XTOL)
            root_e = dominance_root(x, heads, bracket=(be / 4, 4 * be), which="margin_exact",
                                    xtol=XTOL)
            xb, hb = spread_tokens(n, H), block_heads(H, H * n, strength)
            bb = float(beta_star_blocks(H, n, alpha))
            root_b = dominance_root(xb, hb, bracket=(bb / 4, 4 * bb), xtol=XTOL)
            m = np.asarray(rel)
            below, above = float(np.min(m[betas < bs])), float(np.max(m[betas > bs]))
            sign_ok = below > 0 > above
            errs = {"root": abs(root - bs), "root_exact": abs(root_e - be),
                    "root_blocks": abs(root_b - bb)}
            tols = {"root": _root_tol(bs), "root_exact": _root_tol(be),
                    "root_blocks": _root_tol(bb)}
            row.update({"root": root, "root_exact": root_e, "beta_star_blocks": bb,
                        "root_blocks": root_b, "abs_err": errs, "tol": tols,
                        "sign_change_at_beta_star": sign_ok})
            criteria.append(Criterion(f"H{H}_margin_below_beta_star", below, lo=0.0,
                                      what=f"H = {H}: smallest normalised margin at β < β*",
                                      why="(RD) holds below β*"))
            criteria.append(Criterion(f"H{H}_margin_above_beta_star", -above, lo=0.0,
                                      what=f"H = {H}: minus the largest normalised margin "
                                           "at β > β*", why="(RD) fails above β*"))
            for k, ref in (("root", "β*"), ("root_exact", "β*_exact"),
                           ("root_blocks", "β*_⊥")):
                criteria.append(Criterion(f"H{H}_{k}", errs[k], hi=tols[k],
                                          what=f"H = {H}: |Brent root − {ref}|",
                                          why="root-finding tolerance (round-off of the "
                                              "margin included)"))
        rows[f"H={H}"] = row
        logger.info("H=%d: beta*=%.6g root=%s", H, bs, row.get("root"))
    fits = {k: {"beta_star": v["beta_star"], "root": v.get("root", v["beta_star"]),
                "abs_err": v.get("abs_err", {}).get("root", 0.0)} for k, v in rows.items()}
    fits = {k: {kk: (vv if np.isfinite(vv) else 0.0) for kk, vv in v.items()}
            for k, v in fits.items()}
    worst = max(v.get("abs_err", {}).get("root", 0.0) for v in rows.values())
    worst_e = max(v.get("abs_err", {}).get("root_exact", 0.0) for v in rows.values())
    worst_b = max(v.get("abs_err", {}).get("root_blocks", 0.0) for v in rows.values())
    ex = [rows[f"H={H}"]["beta_star_exact"] / rows[f"H={H}"]["beta_star"] for H in (2, 3, 4)]
    details = (f"n = {n}, α = {alpha}, heads of strength {strength:g}: Brent roots of the "
               f"margin vs β*(H), max |Δβ| = {worst:.1e} (sharp margin vs β*_exact "
               f"{worst_e:.1e}; block heads vs β*_⊥ {worst_b:.1e}); β*_exact/β* = "
               + ", ".join(f"{v:.3f}" for v in ex) + " for H = 2, 3, 4; H = 1: smallest "
               f"normalised margin {min(curves[1][1]):.3f} over β (1 by construction: "
               f"reported, not judged).")
    passed, text, entries = CONTROLS.conclude(criteria, details, fault)
    summary = {"settings": {"n": n, "d": n, "alpha": alpha, "head_strength": strength,
                            "quick": quick, "seed": seed, "xtol": XTOL},
               **entries,
               "fits": fits, "per_H": rows}

    def plot(stage: Path) -> list[str]:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
        import matplotlib.ticker

        fig, ax = plt.subplots(1, 2, figsize=(10, 4))
        for H, (b, r) in curves.items():
            bs = rows[f"H={H}"]["beta_star"]
            if np.isfinite(bs):
                ax[0].semilogx(b / bs, r, "o-", ms=3, color=f"C{H - 1}", label=f"H={H}")
            else:
                ax[0].axhline(r.min(), color=f"C{H - 1}", lw=1.5,
                              label=f"H={H} (no cross term, every β)")
        ax[0].axhline(0, color="k", lw=0.8)
        ax[0].axvline(1, color="gray", ls="--", lw=0.8)
        ax[0].set(xlabel="β / β*(H)", ylabel="(own − R) / (own + R)",
                  title=f"radial-dominance margin, orthonormal tokens n={n}")
        ax[0].set_xticks([0.25, 0.5, 1, 2, 4], labels=["1/4", "1/2", "1", "2", "4"])
        ax[0].xaxis.set_minor_formatter(matplotlib.ticker.NullFormatter())
        ax[0].legend(fontsize=8)
        Hs = [H for H in curves if H > 1]
        ax[1].plot(Hs, [rows[f"H={H}"]["beta_star"] for H in Hs], "s-", label="β* formula")
        ax[1].plot(Hs, [rows[f"H={H}"]["root"] for H in Hs], "x", ms=10,
                   label="Brent root of the margin")
        ax[1].plot(Hs, [rows[f"H={H}"]["beta_star_exact"] for H in Hs], "^--",
                   label="β*_exact (sharp radial term)")
        ax[1].plot(Hs, [rows[f"H={H}"]["root_exact"] for H in Hs], "+", ms=10,
                   label="root of sharp margin")
        ax[1].set(xlabel="H", ylabel="β", title=f"critical β (α = {alpha})", xticks=Hs)
        ax[1].legend(fontsize=8)
        return save_figure(fig, stage, "radial_dominance.png")

    return write_study(out, StudyResult(NAME, summary, text, passed), plot)
