"""Critical temperature of multi-head attention and radial shadows.

Maths (docs/theory.md §6): with H heads the per-head energy rate is
dE_h/dt = own_h + cross_direct_h + cross_radial_h, where the other heads enter through
their radial shadows a^{h'} = <f_{h'}(x), x> even when the head subspaces are orthogonal.
Radial dominance, own_h ≥ ∫|∇ψ_h| Σ_{h'≠h} |a^{h'}|, is sufficient for dE_h/dt ≥ 0. For
n orthonormal tokens and H scalar heads αI it holds iff β ≤ β*, with
β* = (1/2α) ln(c*(H)² (n−1)/(1 − c*(H)²)), c*(H) = (√((H−1)²+4) − (H−1))/2 (c*(2) = 1/φ).

The script prints β* for H = 1..4, locates the sign change of the margin numerically, and
runs two heads in orthogonal blocks below and above their threshold β*_⊥, printing the
most negative per-head energy rate along each trajectory.

Run: python demos/multihead_critical_temperature.py [--quick] [--out DIR]
"""

from __future__ import annotations

import argparse
from pathlib import Path

import numpy as np

from wflow.attention.heads import Attention, Heads
from wflow.geometry.sphere import normalize, orthonormal_tokens
from wflow.multihead import beta_star, beta_star_blocks, c_star, dominance_root, radial_dominance
from wflow.particles import simulate
from wflow.studies.helpers import block_heads, spread_tokens


def main(quick: bool = False, out: Path | None = None) -> dict:
    n, alpha = (16, 1.0) if quick else (32, 1.0)
    x = orthonormal_tokens(n, n)
    table = []
    for H in (1, 2, 3, 4):
        bs = float(beta_star(H, n, alpha))
        root = (dominance_root(x, Heads.scalar([alpha] * H, n), bracket=(bs / 4, 4 * bs))
                if np.isfinite(bs) else float("inf"))
        table.append((H, float(c_star(H)), bs, root))
        print(f"H={H}: c*={table[-1][1]:.6f}  beta*={bs:.6g}  numerical root={root:.6g}")
    # two heads in orthogonal blocks, perturbed spread tokens, below / above beta*_perp
    Hb, m = 2, 8
    rng = np.random.default_rng(0)
    x0 = spread_tokens(m, Hb)
    x0 = normalize(x0 + 0.3 * rng.standard_normal(x0.shape) / np.sqrt(x0.shape[1]))
    heads = block_heads(Hb, Hb * m, alpha)
    bsb = float(beta_star_blocks(Hb, m, alpha))
    runs = {}
    for f in (0.5, 2.5):
        attn = Attention("softmax", f * bsb)
        res = simulate(x0, heads, attn, T=2.0 if quick else 6.0, dt=0.04 if quick else 0.02,
                       head_rates=True, clusters=False)
        rate = res.history["dEh_dt"][0]
        rd0 = radial_dominance(x0, heads, attn)
        runs[f] = {"t": res.t, "rate": rate, "dominance_t0": rd0.holds.tolist(),
                   "min_rate": float(rate.min())}
        print(f"blocks, beta = {f} beta*_perp = {f * bsb:.3f}: dominance at t=0 "
              f"{rd0.holds.tolist()}, min_t,h dE_h/dt = {rate.min():.3e}")
    result = {"table": table, "beta_star_blocks": bsb,
              "min_rate_below": runs[0.5]["min_rate"], "min_rate_above": runs[2.5]["min_rate"]}
    if out is not None:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
        import matplotlib.ticker

        out.mkdir(parents=True, exist_ok=True)
        fig, ax = plt.subplots(1, 2, figsize=(10, 3.8))
        for H in (2, 3, 4):
            bs = float(beta_star(H, n, alpha))
            betas = bs * np.geomspace(0.25, 4, 25)
            marg = []
            for b in betas:
                rd = radial_dominance(x, Heads.scalar([alpha] * H, n), Attention("softmax", b))
                marg.append(float(np.min(rd.margin / (rd.own + rd.cross_bound))))
            ax[0].semilogx(betas / bs, marg, label=f"H={H}")
        ax[0].axhline(0, color="k", lw=0.8)
        ax[0].axvline(1, color="gray", ls="--")
        ax[0].set(xlabel="β/β*", ylabel="(own − R)/(own + R)", title="radial-dominance margin")
        ax[0].set_xticks([0.25, 0.5, 1, 2, 4], labels=["1/4", "1/2", "1", "2", "4"])
        ax[0].xaxis.set_minor_formatter(matplotlib.ticker.NullFormatter())
        ax[0].legend()
        for f, r in runs.items():
            for h in range(Hb):
                ax[1].plot(r["t"], r["rate"][:, h], label=f"β={f}β*_⊥, head {h}")
        ax[1].axhline(0, color="k", lw=0.8)
        ax[1].set(xlabel="t", ylabel="dE_h/dt", title="per-head energy rates (block heads)")
        ax[1].legend(fontsize=8)
        fig.tight_layout()
        fig.savefig(out / "multihead_critical_temperature.png", dpi=120)
        print(f"figure: {out / 'multihead_critical_temperature.png'}")
    return result


if __name__ == "__main__":
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--quick", action="store_true", help="small, runs in seconds")
    ap.add_argument("--out", type=Path, default=None, help="directory for the figure")
    a = ap.parse_args()
    main(quick=a.quick, out=a.out)
