"""Benchmark of the token diffusion in the PDE: one step with ``D > 0`` against ``D = 0``.

Issue 40 (item 3): at 40 500 cells a noisy step must cost at most 1.5× the noiseless one.
Problem: one USA head, ``A = V = I``, ``β = 2``, a two-bump von Mises–Fisher density,
order 2 (SSP-RK2, limited reconstruction), the adaptive step (``dt <= 0.05``, CFL 0.9),
no running balance (the measure is the same for both and would only dilute the ratio).
The noisy step is the Strang step ``CN(Δt/2) ∘ drift(Δt) ∘ CN(Δt/2)``: the same two
velocity evaluations (the drift rates at the next step's ``m*`` are prepared at the end of
the step, replacing the noiseless solver's rates at ``m``) plus two Crank–Nicolson solves
(CG, Jacobi) and, when ``Δt`` changes, one matrix reassembly.

Both configurations run in this one process after a warm-up step each (numba compiled,
the kernel back-end planned, PETSc loaded), alternating ``D = 0`` / ``D > 0`` for
``--repeat`` rounds of ``--steps`` steps; the per-step time of each is the minimum over
the rounds (wall time, and the process CPU time over all threads beside it). The machine
is shared: the 1-minute load before and after is recorded. The diffusion's own time per
step (the two sub-steps) is measured separately.

Run: python bench/bench_pde_diffusion.py [--cells 40500] [--steps 3] [--repeat 2]
     [--diffusion 0.1] [--quick]   (--quick: 5 120 cells, 2 steps, 1 round)
"""

from __future__ import annotations

import argparse
import os
import sys
import time
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent))
from _common import parent_machine, write_json  # noqa: E402

RHO0 = {"type": "vmf", "means": [[0, 0, 1], [1, 0, 0]], "kappas": [3.0, 2.0]}


def _load() -> float:
    return round(os.getloadavg()[0], 2)


class _Timed:
    """Wraps ``TokenDiffusion.step`` to add up its wall time."""

    def __init__(self, diff) -> None:
        self.inner = diff.step
        self.total = 0.0
        diff.step = self

    def __call__(self, *a, **k):
        t0 = time.perf_counter()
        out = self.inner(*a, **k)
        self.total += time.perf_counter() - t0
        return out


def runner(sm, D: float):
    """A generator of accepted steps (after one warm-up step) and its diffusion timer."""
    from wflow.attention.heads import Attention, Heads
    from wflow.attention.schedules import Static
    from wflow.geometry.density import initial_density
    from wflow.pde import PDEOptions, iterate_pde
    from wflow.pde.solver import _Run

    heads, attn = Heads.bilinear(np.eye(3)), Attention("usa", 2.0)
    opts = PDEOptions(T=100.0, dt=0.05, order=2, n_saves=2, balance=False, clusters=False,
                      diffusion=D)
    run = _Run(sm, opts, Static.of(heads), attn, None)
    timer = _Timed(run.diff) if run.diff is not None else None
    it = iterate_pde(sm, initial_density(sm, RHO0), heads, attn, options=opts, measure=False,
                     _run=run)
    next(it)  # the initial state
    next(it)  # one warm-up step
    return it, run, timer


def timed_steps(it, timer, steps: int) -> dict:
    d0 = timer.total if timer else 0.0
    w0, c0 = time.perf_counter(), time.process_time()
    last = None
    for _ in range(steps):
        last = next(it)
    wall = (time.perf_counter() - w0) / steps
    cpu = (time.process_time() - c0) / steps
    return {"wall_s": wall, "cpu_s": cpu, "dt": float(last.dt),
            "diffusion_s": ((timer.total - d0) / steps) if timer else 0.0}


def main(argv: list[str] | None = None) -> dict:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--cells", type=int, default=40500)
    ap.add_argument("--steps", type=int, default=3)
    ap.add_argument("--repeat", type=int, default=2)
    ap.add_argument("--diffusion", type=float, default=0.1)
    ap.add_argument("--quick", action="store_true")
    args = ap.parse_args(argv)
    if args.quick:
        args.cells, args.steps, args.repeat = 5120, 2, 1
    from mpi4py import MPI  # noqa: F401  (DOLFINx's order)

    from wflow.geometry.mesh import load_mesh

    load_before = _load()
    sm = load_mesh(f"sphere_{args.cells}.msh")
    noiseless = runner(sm, 0.0)
    noisy = runner(sm, args.diffusion)
    rows: dict[str, list[dict]] = {"D0": [], "D": []}
    for _ in range(args.repeat):
        rows["D0"].append(timed_steps(noiseless[0], noiseless[2], args.steps))
        rows["D"].append(timed_steps(noisy[0], noisy[2], args.steps))
    best = {k: min(v, key=lambda r: r["wall_s"]) for k, v in rows.items()}
    run = noisy[1]
    ratio = best["D"]["wall_s"] / best["D0"]["wall_s"]
    out = {
        "problem": {"cells": sm.num_global, "heads": "usa, A = V = I, beta = 2",
                    "order": 2, "integrator": "ssprk2", "diffusion": args.diffusion,
                    "steps_per_round": args.steps, "rounds": args.repeat},
        "noiseless": best["D0"], "noisy": best["D"], "rounds": rows,
        "ratio_wall": ratio, "ratio_cpu": best["D"]["cpu_s"] / best["D0"]["cpu_s"],
        "target_ratio": 1.5, "passed": bool(ratio <= 1.5),
        "cg_iterations_per_solve": run.diff.iterations / max(run.diff.solves, 1),
        "strang_extra_evals": run.extra_evals,
        "positive_step_dt": 2.0 * run.diff.positive_step(),
        "kernel_backend": run.vel.backend,
        "load_before": load_before, "load_after": _load(), "machine": parent_machine(),
    }
    print(f"{sm.num_global} cells, D = {args.diffusion}: step {best['D0']['wall_s']:.3f} s "
          f"(cpu {best['D0']['cpu_s']:.3f} s) noiseless, {best['D']['wall_s']:.3f} s "
          f"(cpu {best['D']['cpu_s']:.3f} s, diffusion {best['D']['diffusion_s']:.3f} s) "
          f"noisy: ratio {ratio:.3f} (target <= 1.5); load {load_before} -> {out['load_after']}")
    if not args.quick:
        print("wrote", write_json("bench_pde_diffusion", out))
    return out


if __name__ == "__main__":
    main()
