"""OU (integrable) vs oscillating (non-integrable) head weights on S².

Maths (docs/theory.md §5; a variant of the published experiment, see the two scenario files):
H heads D_h(t), score <x, D_h y>, value −D_h, w_h = 1/H, tokens around the octahedron
vertices. With OU weights dD = (I − D) dt + σ dW_sym the path is integrable in the
mean-field sense and G²(μ_t, t) → 0 (clustering); with weights relaxing to wflow's
rotating target F_h(t) = 2I + 1.5 P(½(t + 2πh/H)) (phases over half a period, so the head
average keeps oscillating) the slope G² does not decay and tokens do not cluster. The
published experiments, exactly: `wflow reproduce` and demos/published_experiments.py.

Run: python demos/particles_ou_vs_oscillating.py [--quick] [--out DIR]
"""

from __future__ import annotations

import argparse
from pathlib import Path

import numpy as np

from wflow.apps.scenario import load_scenario
from wflow.particles import simulate

HERE = Path(__file__).resolve().parent


def run(name: str, quick: bool):
    sc = load_scenario(HERE / f"particles_{name}_s2.toml")
    over = {"T": 3.0, "dt": 0.01, "record_every": 10} if quick else {}
    x0 = sc.build_tokens()
    return simulate(x0, sc.build_schedule(), sc.attention_obj(),
                    options=sc.particle_options(**over))


def main(quick: bool = False, out: Path | None = None) -> dict:
    res = {name: run(name, quick) for name in ("ou", "oscillating")}
    result = {}
    for name, r in res.items():
        g2 = r.history["G2"][0]
        half = len(g2) // 2
        result[name] = {"G2_late_mean": float(np.mean(g2[half:])),
                        "G2_initial": float(g2[0]),
                        "mean_inner_T": float(r.history["mean_inner"][0, -1])}
        print(f"{name:12s} G²(0) = {g2[0]:.3e}, late mean G² = {np.mean(g2[half:]):.3e}, "
              f"mean <x_i, x_j>(T) = {result[name]['mean_inner_T']:.3f}")
    if out is not None:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt

        out.mkdir(parents=True, exist_ok=True)
        fig, ax = plt.subplots(figsize=(6, 3.5))
        for name, r in res.items():
            ax.semilogy(r.t, r.history["G2"][0], label=name)
        ax.set(xlabel="t (depth)", ylabel="G²", title="OU vs oscillating weights")
        ax.legend()
        fig.tight_layout()
        fig.savefig(out / "ou_vs_oscillating.png", dpi=120)
        print(f"figure: {out / 'ou_vs_oscillating.png'}")
    return result


if __name__ == "__main__":
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--quick", action="store_true", help="small, fast run (seconds)")
    ap.add_argument("--out", type=Path, default=None, help="directory for the figure")
    a = ap.parse_args()
    main(quick=a.quick, out=a.out)
