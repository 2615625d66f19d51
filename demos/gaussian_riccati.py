"""Gaussian transformer dynamics: Riccati equilibria, blow-up, reachability, particles.

Maths (docs/theory.md §7): tokens in R^d follow ẋ = Ax + b + V ∫ y e^{<Bx,y>} dμ / ∫ e^{<Bx,y>} dμ.
For μ = N(m, Σ) the attention output is m + ΣBx, so Gaussians stay Gaussian with
    ṁ = (A + V)m + VΣBm + b,    Σ̇ = AΣ + ΣAᵀ + VΣBΣ + ΣBᵀΣVᵀ   (Riccati; rank Σ invariant).
* V, B of opposite definiteness (with expanding A): Σ → the PD equilibrium P*^{-1},
  AᵀP* + P*A = −v(B + Bᵀ) (Bernoulli substitution P = Σ^{-1}, V = vI).
* Same definiteness: finite-time blow-up, t* = 1/(2vb λ_max(Σ₀)) for A = 0, V = vI, B = bI.
* Any target N(m₁, Σ₁) with rank Σ₁ = rank Σ₀ is reached exactly at time T by
  A(t) = log(G)/T − VΣ(t)B (G the SPD Bures map, GΣ₀G = Σ₁) and a drift b(t).
* n particles from Gaussian samples track the moment ODE with error O(n^{-1/2}).
* A = 0, V ≻ 0, B ≺ 0: Σ → 0 like 1/t (tr V⁻¹Σ is a Lyapunov function); B = diag(−1, 0):
  the continuum {BΣ = 0} of equilibria, Σ → Q(QᵀΣ₀⁻¹Q)⁻¹Qᵀ (QᵀΣ⁻¹Q is conserved).

Run: python demos/gaussian_riccati.py [--quick] [--out DIR]
"""

from __future__ import annotations

import argparse
import dataclasses
import warnings
from pathlib import Path

import numpy as np

from wflow.apps.jobs.gaussian import (
    reach_scenario,
    run_gaussian_scenario,
    write_gaussian_run,
    write_reach,
)
from wflow.gaussian import (
    GaussianParams,
    blowup_time_isotropic,
    classify,
    load_gaussian_scenario,
    reach,
)
from wflow.studies.gaussian_particles import particle_errors

HERE = Path(__file__).resolve().parent


def main(quick: bool = False, out: Path | None = None) -> dict:
    out = Path(out) if out is not None else Path("out") / "gaussian_demo"
    results: dict = {}

    # 1. converging scenario: equilibrium, classification, particles, phase diagram
    scn = load_gaussian_scenario(HERE / "gaussian_riccati.toml")
    if quick:
        ph = dataclasses.replace(scn.phase, x=np.linspace(-1, 1, 9), y=np.linspace(-1, 1, 9))
        scn = dataclasses.replace(scn, phase=ph, particles={"n": 200, "seed": 0, "steps": 40})
    run = run_gaussian_scenario(scn)
    write_gaussian_run(run, out / "riccati")
    eq = [e for e in run.classification.equilibria if e.rank == scn.d]
    results["riccati"] = {
        "status": run.trajectory.status,
        "classification": run.classification.label,
        "distance_to_PD_equilibrium": float(np.linalg.norm(run.trajectory.final_Sigma
                                                           - eq[0].Sigma)) if eq else None,
        "particles_w2": run.particles.get("w2"),
        "phase_counts": run.phase.counts(),
    }

    # 2. blow-up scenario vs the closed form
    blow = load_gaussian_scenario(HERE / "gaussian_blowup.toml")
    brun = run_gaussian_scenario(blow)
    write_gaussian_run(brun, out / "blowup")
    p = blow.constant_params
    t_closed = blowup_time_isotropic(p.A[0, 0], p.V[0, 0], p.B[0, 0], blow.Sigma0)
    results["blowup"] = {"status": brun.trajectory.status,
                         "t_star_detected": brun.trajectory.blowup_time,
                         "t_star_closed_form": t_closed}

    # 3. reachability: full rank with attention kept, then rank 1 -> rank 1 in another direction
    res = reach_scenario(scn)
    write_reach(res, scn, out / "reach")
    u, w = np.array([1.0, 0.0]), np.array([0.6, 0.8])
    res1 = reach(np.zeros(2), 0.5 * np.outer(u, u), np.array([1.0, 1.0]), 2.0 * np.outer(w, w),
                 1.0, V=0.5, B=0.3)
    try:
        reach(np.zeros(2), np.outer(u, u), np.zeros(2), np.eye(2), 1.0)
        refused = "not refused"
    except ValueError as exc:
        refused = str(exc).split(";")[0]
    results["reach"] = {"full_rank": res.status, "full_rank_w2": res.w2_error,
                        "rank_1": res1.status, "rank_1_w2": res1.w2_error,
                        "rank_mismatch": refused}

    # 4. particles vs ODE, error vs n
    ns = (32, 64, 128, 256) if quick else (64, 128, 256, 512, 1024)
    pe = particle_errors(ns=ns, reps=8 if quick else 16, steps=4 if quick else 10)
    results["particles"] = pe.slopes

    # 5. long-time regimes decided from the structure, rates checked by a tail fit
    alg = classify(GaussianParams.make(2, V=np.diag([2.0, 1.0]), B=-1.0), Sigma0=np.eye(2),
                   horizon=1e3)
    S0 = np.array([[1.0, 0.5], [0.5, 1.0]])
    ker = classify(GaussianParams.make(2, V=1.0, B=np.diag([-1.0, 0.0])), Sigma0=S0,
                   horizon=1e4)
    results["regimes"] = {
        "algebraic": {"label": alg.label, "rate": alg.rate, "fitted": alg.rate_fit.rate,
                      "t_Sigma_limit": alg.details["t_Sigma_limit"]},
        "kernel": {"label": ker.label, "limit": ker.limit.tolist(), "rank": ker.limit_rank,
                   "rate": ker.rate, "fitted": ker.rate_fit.rate},
    }

    print(f"riccati scenario: {results['riccati']['status']}, "
          f"{results['riccati']['classification']}, |Σ(T) − Σ*|_F = "
          f"{results['riccati']['distance_to_PD_equilibrium']:.2e}, particle W2 = "
          f"{results['riccati']['particles_w2']:.3f}")
    print(f"phase diagram counts: {results['riccati']['phase_counts']}")
    print(f"blow-up: detected t* = {results['blowup']['t_star_detected']:.10f}, "
          f"closed form {t_closed:.10f}")
    print(f"reach: full rank {res.status} (W2 {res.w2_error:.1e}), rank 1 {res1.status} "
          f"(W2 {res1.w2_error:.1e}); rank mismatch: {refused}")
    print(f"particle error slopes vs n (theory −0.5, {pe.reps[-1]}–{pe.reps[0]} seeds): "
          + ", ".join(f"{k} {v:.2f} ± {pe.stderrs[k]:.2f}" for k, v in pe.slopes.items()))
    print(f"A = 0, V = diag(2, 1), B = −I: {alg.summary_line()} (fitted exponent "
          f"{alg.rate_fit.rate:.5f}); V = I, B = diag(−1, 0): {ker.summary_line()}, limit "
          f"{(np.round(ker.limit, 12) + 0.0).tolist()}")
    print(f"outputs in {out}")
    return results


if __name__ == "__main__":
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--quick", action="store_true", help="small sizes, runs in seconds")
    ap.add_argument("--out", type=Path, default=None, help="output directory")
    a = ap.parse_args()
    with warnings.catch_warnings():
        warnings.simplefilter("default")
        main(quick=a.quick, out=a.out)
