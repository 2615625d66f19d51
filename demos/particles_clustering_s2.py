"""Clustering of tokens on S² under static softmax heads.

Maths: tokens x_i ∈ S² follow ẋ_i = P_{x_i} Σ_h w_h f_h[μ](x_i) with softmax heads
f_h = ∫ e^{β xᵀA_h y} A_h y dμ(y) / ∫ e^{β xᵀA_h y} dμ(y) (value-aligned, V_h = A_h).
Tokens collapse into a few clusters, G² → 0, and the chain-rule energy balance
ΔE − ∫ power dt vanishes at the integrator's order (docs/theory.md §2–3).

Run: python demos/particles_clustering_s2.py [--quick] [--out DIR]
"""

from __future__ import annotations

import argparse
from pathlib import Path

import wflow
from wflow.apps.scenario import load_scenario
from wflow.particles import simulate

HERE = Path(__file__).resolve().parent


def main(quick: bool = False, out: Path | None = None) -> dict:
    sc = load_scenario(HERE / "particles_clustering_s2.toml")
    x0 = sc.build_tokens()
    opts = sc.particle_options()
    if quick:
        x0 = x0[:100]
        opts = sc.particle_options(T=4.0, record_every=1)
    res = simulate(x0, sc.build_schedule(), sc.attention_obj(), options=opts)
    fin = res.final()
    result = {
        "status": res.status,
        "E0": float(res.history["E"][0, 0]),
        "E_T": fin["E"]["mean"],
        "G2_T": fin["G2"]["mean"],
        "clusters_T": fin["n_clusters"]["mean"],
        "balance_chain": float(res.balance["chain"][0]),
    }
    print(f"wflow {wflow.__version__}: E {result['E0']:.4f} -> {result['E_T']:.4f}, "
          f"G² {result['G2_T']:.2e}, clusters {result['clusters_T']:.0f}, "
          f"balance residual {result['balance_chain']:.2e}")
    if out is not None:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt

        out.mkdir(parents=True, exist_ok=True)
        fig, ax = plt.subplots(1, 2, figsize=(9, 3.5))
        ax[0].plot(res.t, res.history["E"][0])
        ax[0].set(xlabel="t", ylabel="E", title="energy")
        ax[1].semilogy(res.t, res.history["G2"][0] + 1e-300)
        ax[1].set(xlabel="t", ylabel="G²", title="slope G²")
        fig.tight_layout()
        fig.savefig(out / "clustering_s2.png", dpi=120)
        print(f"figure: {out / 'clustering_s2.png'}")
    return result


if __name__ == "__main__":
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--quick", action="store_true", help="small, fast run (seconds)")
    ap.add_argument("--out", type=Path, default=None, help="directory for the figure")
    a = ap.parse_args()
    main(quick=a.quick, out=a.out)
