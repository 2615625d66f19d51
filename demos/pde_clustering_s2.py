"""The transformer PDE on S²: a density clusters under static softmax heads.

Maths: the token density ρ(t, ·) on S² solves the continuity equation
∂_t ρ + div_S(ρ v[μ_t]) = 0 with the transformer velocity
v[μ](x) = P_x Σ_h w_h ∫ e^{β xᵀA_h y} A_h y dμ(y) / ∫ e^{β xᵀA_h y} dμ(y)
(docs/theory.md §1–2). Finite volumes on a DOLFINx sphere mesh (order 2: limited linear
reconstruction + SSP-RK2, adaptive positivity-preserving steps) keep the mass equal to 1
to round-off and ρ >= 0, while the mass concentrates into clusters and the energy
E = Σ_h w_h (1/2β) ∫∫ e^{β xᵀA_h y} dμ dμ grows (value-aligned symmetric heads).

Run: python demos/pde_clustering_s2.py [--quick] [--out DIR]
(the same as `wflow pde demos/pde_clustering_s2.toml --out DIR --render`).
"""

from __future__ import annotations

import argparse
from pathlib import Path

import numpy as np

import wflow
from wflow.apps.jobs.pde import render_snapshots
from wflow.apps.scenario import load_scenario
from wflow.geometry.mesh import load_mesh
from wflow.pde import density_spec_from_scenario, pde_options_from_dict, solve_pde

HERE = Path(__file__).resolve().parent


def main(quick: bool = False, out: Path | None = None) -> dict:
    sc = load_scenario(HERE / "pde_clustering_s2.toml")
    mesh_spec, opts = pde_options_from_dict(sc.sections["pde"], seed=sc.seed)
    if quick:
        mesh_spec = "sphere_720.msh"
        opts = opts.__class__(**{**opts.__dict__, "T": 1.0, "n_saves": 3})
    mesh = load_mesh(mesh_spec)
    res = solve_pde(mesh, density_spec_from_scenario(sc), sc.build_schedule(),
                    sc.attention_obj(), options=opts)
    h = res.history
    result = {
        "status": res.status,
        "cells": mesh.num_global,
        "E0": float(h["E"][0]),
        "E_T": float(h["E"][-1]),
        "mass_error": res.stats["mass_error_max"],
        "rho_min": res.stats["rho_min"],
        "rho_max_T": float(h["rho_max"][-1]),
        "clusters_T": float(h["n_clusters"][-1]),
        "edi_residual": float(res.balance["edi"]),
        "steps": res.stats["steps"],
    }
    print(f"wflow {wflow.__version__} PDE on {result['cells']} cells: {res.status} in "
          f"{res.stats['steps']} steps; E {result['E0']:.4f} -> {result['E_T']:.4f}, "
          f"max ρ {result['rho_max_T']:.3g}, clusters {result['clusters_T']:.0f}, "
          f"mass error {result['mass_error']:.1e}, min ρ {result['rho_min']:.1e}, "
          f"EDI residual {result['edi_residual']:.2e}")
    if out is not None:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt

        out.mkdir(parents=True, exist_ok=True)
        st = res.steps
        fig, ax = plt.subplots(1, 3, figsize=(12, 3.5))
        ax[0].plot(st["t"], st["E"])
        ax[0].set(xlabel="t", ylabel="E", title="energy (every step)")
        ax[1].semilogy(st["t"], np.maximum(st["G2"], 1e-300), label="G²")
        ax[1].semilogy(st["t"], np.maximum(st["slope2"], 1e-300), "--", label="|∂E|²")
        ax[1].set(xlabel="t", title="slopes")
        ax[1].legend()
        ax[2].plot(res.t, h["rho_max"], "o-")
        ax[2].set(xlabel="t", ylabel="max ρ", title="concentration")
        fig.tight_layout()
        fig.savefig(out / "pde_clustering_s2.png", dpi=120)
        files = render_snapshots(mesh, res.t, res.rho, out / "render")
        print(f"figures: {out / 'pde_clustering_s2.png'}, {len(files)} renders in "
              f"{out / 'render'}")
    return result


if __name__ == "__main__":
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--quick", action="store_true", help="small, fast run (seconds)")
    ap.add_argument("--out", type=Path, default=None, help="directory for figures and renders")
    a = ap.parse_args()
    main(quick=a.quick, out=a.out)
