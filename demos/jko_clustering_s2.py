"""JKO minimising movements on S² with weighted-Wasserstein optimal transport (POT).

Maths (docs/theory.md §3–4): one step of size τ of the ascent of the attention energy
E(μ) = Σ_h w_h (1/2β) ∫∫ e^{β xᵀA_h y} dμ dμ is

    μ_{k+1} ∈ argmin_ν  (1/2τ) W²_{b̂_k}(μ_k, ν) − E(ν),

with the cost d_S(x, y)²/b̂ and the effective mobility b̂ = (Σ_h w̄_h Z_h[μ_k])^{-1}
lagged at μ_k. On a mesh of S² the measures live on cells; each step is solved by a
generalised conditional gradient on transport plans (exact first-order optimality gap,
checked against ot.emd2). The sequence is the minimising-movement discretisation of the
gradient flow ∂_t ρ + div(ρ v̂) = 0 with v̂ = b̂ P∇ δE/δμ, so it must agree with the
PDE solver run on the surrogate velocity at first order in τ (for τ|v| well above the
cell size h; below it the discrete JKO locks), E must increase along the sequence, and
each step satisfies E_{k+1} − E_k >= W²(μ_k, μ_{k+1})/(2τ).

Run: python demos/jko_clustering_s2.py [--quick] [--out DIR]
(the JKO part is `wflow jko demos/jko_clustering_s2.toml --out DIR`).
"""

from __future__ import annotations

import argparse
from dataclasses import replace
from pathlib import Path

import numpy as np

import wflow
from wflow.apps.scenario import load_scenario
from wflow.geometry.density import density_spec_from_scenario, initial_density
from wflow.geometry.mesh import load_mesh
from wflow.geometry.transport import w2_sphere
from wflow.jko import solve_jko
from wflow.pde import pde_options_from_dict, solve_pde

HERE = Path(__file__).resolve().parent


def main(quick: bool = False, out: Path | None = None) -> dict:
    sc = load_scenario(HERE / "jko_clustering_s2.toml")
    jko = sc.table("jko")  # the [jko] table, validated when the scenario loaded
    mesh_spec, jopts = jko.mesh, jko.options(jko.step.tau)
    _, popts = pde_options_from_dict(sc.sections["pde"], seed=sc.seed)
    if quick:
        mesh_spec = "sphere_720.msh"
        jopts = replace(jopts, T=0.4)
    popts = replace(popts, T=jopts.T, n_saves=jopts.steps + 1, progress=False)
    mesh = load_mesh(mesh_spec)
    rho0 = initial_density(mesh, density_spec_from_scenario(sc))
    schedule, attn = sc.build_schedule(), sc.attention_obj()
    cen, areas = mesh.gather_owned(mesh.centroids), mesh.gather_owned(mesh.areas)
    res = solve_jko(rho0 * areas, schedule, attn, points=cen, areas=areas, options=jopts)
    pde = solve_pde(rho0, schedule, attn, mesh=mesh, options=popts)
    x = res.centroids
    w2 = np.array([w2_sphere(x, x, res.masses[k], pde.masses[k], max_points=20000)
                   for k in range(len(res.t))])
    h = res.history
    result = {
        "status": res.status, "pde_status": pde.status, "cells": int(areas.size),
        "tau": jopts.tau, "E": h["E"].tolist(), "E_pde": pde.history["E"].tolist(),
        "monotone": bool(np.all(np.diff(h["E"]) >= 0)), "w2_vs_pde": w2.tolist(),
        "inner_iters": h["inner_iters"][1:].tolist(), "gap_rel": h["gap_rel"][1:].tolist(),
        "W2sq": h["W2sq"][1:].tolist(), "jko_ineq_min": float(h["jko_ineq"][1:].min()),
        "edi_sum": float(np.sum(h["edi_step"])),
    }
    print(f"wflow {wflow.__version__} JKO on {result['cells']} cells, τ = {jopts.tau:g}, "
          f"{res.stats['steps']} steps: {res.status}; E {h['E'][0]:.4f} -> {h['E'][-1]:.4f} "
          f"(PDE {pde.history['E'][-1]:.4f}), monotone: {result['monotone']}; inner iterations "
          f"{result['inner_iters']}, max relative gap {max(result['gap_rel']):.1e}; "
          f"min_k [E_(k+1) - E_k - W²/2τ] = {result['jko_ineq_min']:.2e} (>= 0); "
          f"sup_k W2(JKO, PDE) = {w2.max():.4f}; summed EDI residual {result['edi_sum']:.3e}")
    if out is not None:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt

        out.mkdir(parents=True, exist_ok=True)
        fig, ax = plt.subplots(1, 3, figsize=(12, 3.5))
        ax[0].plot(pde.t, pde.history["E"], "-", label="PDE (surrogate)")
        ax[0].plot(res.t, h["E"], "s:", label=f"JKO τ = {jopts.tau:g}")
        ax[0].set(xlabel="t", ylabel="E", title="energy")
        ax[0].legend()
        ax[1].plot(res.t, w2, "o-")
        ax[1].set(xlabel="t", ylabel="W₂", title="JKO vs PDE")
        ax[2].semilogy(res.t[1:], np.maximum(h["gap_rel"][1:], 1e-17), "o-", label="gap (rel.)")
        ax[2].plot(res.t[1:], h["inner_iters"][1:], "s--", label="inner iterations")
        ax[2].set(xlabel="t", title="inner solves")
        ax[2].legend()
        fig.tight_layout()
        fig.savefig(out / "jko_clustering_s2.png", dpi=120)
        plt.close(fig)
        print(f"figure: {out / 'jko_clustering_s2.png'}")
    return result


if __name__ == "__main__":
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--quick", action="store_true", help="small, fast run (seconds)")
    ap.add_argument("--out", type=Path, default=None, help="directory for the figure")
    a = ap.parse_args()
    main(quick=a.quick, out=a.out)
