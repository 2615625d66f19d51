"""Noisy tokens: clustering below the diffusion threshold, uniform above it.

Maths (docs/theory.md §9): tokens on S² move by one unnormalised head A = V = I and a
Brownian motion with generator D Δ_S,

    dx_i = P_{x_i} ∫ e^{β x_i·y} y dμ(y) dt + √(2D) P_{x_i} ∘ dW_i .

The uniform density is linearly stable iff D > D_# = λ_1/β (λ_1 the Funk–Hecke eigenvalue
of e^{β x·y} on the degree-1 harmonics; in the coupling K = 1/(2D) of Mun & Rosenzweig,
K < K_#). At β = 1 < β*(3) = 1.816 the transition is continuous: below D_# the tokens
settle at a clustered stationary state whose order parameter m = |∫ x dμ| is the zonal
branch's m*(K) (wflow.phase); above it they stay uniform, the order parameter at the
finite-n fluctuation level E|m|² = D/(n(D − D_#)) (independent tokens give 1/n; the
attraction slows the restoring rate of the degree-1 mode from 2D to 2(D − D_#)), so
E|m| ≈ √(8/(3π)) √(D/(n(D − D_#))) for a Gaussian vector in R³. Two particle runs from
the same uniform sample, at D = D_#/2 and D = 3D_#/2 with the Strang integrator (exact
heat-kernel increments, weak order 2), show both: the order parameter over time, against
m* and that fluctuation level.

Run: python demos/noisy_clustering.py [--quick] [--out DIR]
"""

from __future__ import annotations

import argparse
import math
from pathlib import Path

import numpy as np

import wflow
from wflow.attention.heads import Attention, Heads
from wflow.geometry.sphere import normalize
from wflow.particles import ParticleOptions, simulate
from wflow.phase import k_sharp, tricritical_beta, zonal_branch

BETA, D_FACTORS = 1.0, (0.5, 1.5)


def stationary_order_parameter(beta: float, coupling: float) -> float:
    """``m*`` of the zonal stationary state at coupling ``K`` (continuous branch, ``K > K_#``)."""
    from scipy.optimize import brentq

    br = zonal_branch(beta, 3, m=np.linspace(0.01, 0.97, 25))
    return float(brentq(lambda m: br.solve(m).K - coupling, 0.01, 0.97, xtol=1e-13))


def main(quick: bool = False, out: Path | None = None) -> dict:
    n, T, dt, every = (800, 15.0, 0.1, 1) if quick else (20000, 25.0, 0.05, 4)
    k_sh = k_sharp(BETA, 3)
    d_sharp = 1.0 / (2.0 * k_sh)
    x0 = normalize(np.random.default_rng(3).standard_normal((n, 3)))
    heads, attn = Heads.scalar([1.0], 3), Attention("usa", BETA)
    runs = {}
    for f in D_FACTORS:
        D = f * d_sharp
        res = simulate(x0, heads, attn, options=ParticleOptions(
            T=T, dt=dt, integrator="strang", engine="python", diffusion=D, seed=11,
            save_trajectory=True, record_every=every,
            head_rates=False, clusters=False))
        m = np.linalg.norm(res.trajectory[0].mean(axis=1), axis=1)
        late = res.t >= 2.0 * T / 3.0
        runs[f] = {"D": D, "K": 1.0 / (2.0 * D), "status": str(res.status), "t": res.t,
                   "m": m, "m_late": float(m[late].mean()), "m_late_sd": float(m[late].std())}
    below, above = runs[D_FACTORS[0]], runs[D_FACTORS[1]]
    m_star = stationary_order_parameter(BETA, below["K"])
    result = {
        "status": "success" if all(r["status"] == "success" for r in runs.values())
        else "failed",
        "beta_star": tricritical_beta(3),
        "D_sharp": d_sharp,
        "m_star": m_star,
        "m_late_below": below["m_late"],
        "m_late_above": above["m_late"],
        "fluctuation_above": math.sqrt(8.0 / (3.0 * math.pi))
        * math.sqrt(above["D"] / (n * (above["D"] - d_sharp))),
    }
    print(f"wflow {wflow.__version__}: beta = {BETA} < beta* = {result['beta_star']:.4f}, "
          f"D_# = {d_sharp:.4f} (K_# = {k_sh:.4f}), n = {n}")
    print(f"  D = {below['D']:.4f} (K = {below['K']:.3f} > K_#): late order parameter "
          f"{below['m_late']:.4f} ± {below['m_late_sd']:.4f}, stationary m* = {m_star:.4f}")
    print(f"  D = {above['D']:.4f} (K = {above['K']:.3f} < K_#): late order parameter "
          f"{above['m_late']:.4f} ± {above['m_late_sd']:.4f}, uniform with fluctuations "
          f"E|m| = {result['fluctuation_above']:.4f}")
    if out is not None:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt

        out.mkdir(parents=True, exist_ok=True)
        fig, ax = plt.subplots(figsize=(6.4, 4.0))
        for f, r in runs.items():
            side = "below" if f < 1 else "above"
            ax.plot(r["t"], r["m"], label=f"D = {f:g} D_# ({side} the threshold)")
        ax.axhline(m_star, color="C0", ls="--", lw=1,
                   label=f"stationary m* = {m_star:.3f} (zonal branch)")
        ax.axhline(result["fluctuation_above"], color="C1", ls=":", lw=1,
                   label="uniform: E|m| = (8/3π)^½ (D/(n(D − D_#)))^½")
        ax.set(xlabel="t", ylabel="order parameter |mean of x_i|", ylim=(0, 1),
               title=f"noisy tokens on S², β = {BETA:g}, n = {n}, D_# = {d_sharp:.3f}")
        ax.legend(fontsize=8)
        fig.tight_layout()
        fig.savefig(out / "noisy_clustering.png", dpi=120)
        plt.close(fig)
        print(f"figure: {out / 'noisy_clustering.png'}")
    return result


if __name__ == "__main__":
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--quick", action="store_true", help="small, fast run (seconds)")
    ap.add_argument("--out", type=Path, default=None, help="directory for the figure")
    a = ap.parse_args()
    main(quick=a.quick, out=a.out)
