"""Benchmark of the mesh PDE solver: time per velocity evaluation and per time step.

For each mesh (2.5k, 10k, 40k cells by default) and head count H ∈ {1, 4}:

* ``eval``: one nonlocal velocity evaluation at the edge quadrature points
  (targets: the 1.5 M edge midpoints, sources: the M cell centroids with their
  masses) — what every time-stepping stage costs, through ``wflow.energy.evaluate``
  and the back-end chosen by ``wflow.kernels`` (reported);
* ``step o1``: one forward-Euler upwind step (one evaluation + flux assembly);
* ``step o2``: one SSP-RK2 step with limited reconstruction (two evaluations);
* ``measure``: the cell-level diagnostics evaluation (M targets, M sources) that the
  running EDI balance adds to every step (``balance = true``);
* ``direct``, ``numpy``: the same edge-velocity kernel sums forced onto the exact
  back-ends (fused numba direct sum; blocked NumPy reference, only up to
  ``--numpy-max-cells``), for comparison with the ``auto`` choice.

Memory of the NumPy back-end is O(block · M) (blocks of ``BLOCK_ELEMS`` scores); the
direct back-end uses O(1) per target. Peak RSS is reported.

Run: python bench/bench_pde.py [--cells 2420 9680 40500] [--heads 1 4] [--quick]
     [--json FILE]
"""

from __future__ import annotations

import argparse
import json
import resource
import time

import numpy as np

from wflow.attention.heads import Attention, Heads
from wflow.attention.schedules import Static
from wflow.energy import evaluate
from wflow.geometry.density import initial_density
from wflow.geometry.mesh import load_mesh
from wflow.kernels import kernel_sums, plan_kernel
from wflow.pde import PDEOptions, iterate_pde
from wflow.pde.solver import _Run


def timed(fn, repeat: int) -> float:
    best = np.inf
    for _ in range(repeat):
        t0 = time.perf_counter()
        fn()
        best = min(best, time.perf_counter() - t0)
    return best


def step_time(sm, rho0, heads, attn, order: int, steps: int) -> tuple[float, float]:
    """Seconds per accepted step (velocity + fluxes + update), and per measure call."""
    opts = PDEOptions(T=1.0, dt=1e-4, order=order, n_saves=2, balance=False, clusters=False,
                      max_steps=steps)
    run = _Run(sm, opts, Static.of(heads), attn, None)
    it = iterate_pde(sm, rho0, heads, attn, options=opts, measure=False, _run=run)
    next(it)  # initial state (includes the first right-hand side)
    t0 = time.perf_counter()
    n = 0
    for _ in it:
        n += 1
        if n >= steps:
            break
    dt_step = (time.perf_counter() - t0) / n
    m = rho0 * run.fv.areas_glob
    t1 = time.perf_counter()
    run.measure(m, 0.0, run.schedule.initial_theta())
    return dt_step, time.perf_counter() - t1


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--cells", type=int, nargs="+", default=[2420, 9680, 40500])
    ap.add_argument("--heads", type=int, nargs="+", default=[1, 4])
    ap.add_argument("--steps", type=int, default=2)
    ap.add_argument("--quick", action="store_true", help="2420 cells, H = 1 only")
    ap.add_argument("--json", default=None, help="also write the rows as JSON")
    ap.add_argument("--numpy-max-cells", type=int, default=10_000,
                    help="time the blocked NumPy back-end only up to this many cells")
    a = ap.parse_args()
    cells = [2420] if a.quick else a.cells
    heads_list = [1] if a.quick else a.heads
    attn = Attention("softmax", 1.0)
    rows = []
    print(f"{'cells':>7} {'H':>2} {'targets':>8} {'backend':>9} {'eval s':>8} "
          f"{'step o1 s':>10} {'step o2 s':>10} {'measure s':>10} {'direct s':>9} "
          f"{'numpy s':>8} {'RSS MiB':>8}")
    for M in cells:
        sm = load_mesh(f"sphere_{M}.msh")
        rho0 = initial_density(sm, {"type": "vmf", "means": [[1, 0, 0], [0, 0, 1]],
                                    "kappas": [3.0, 3.0]})
        for H in heads_list:
            heads = Heads.random_symmetric(H, 3, np.random.default_rng(0), scale=0.5)
            run = _Run(sm, PDEOptions(), Static.of(heads), attn, None)
            fv = run.fv
            m = rho0 * fv.areas_glob
            plan = plan_kernel(fv.qhat, fv.chat_glob, heads.Q, heads.K, beta=attn.beta,
                               kind=attn.kind)
            repeat = 3 if M * H <= 10_000 else 1
            evaluate(fv.qhat[:10], heads, attn, y=fv.chat_glob, m=m)  # JIT warm-up
            t_eval = timed(lambda fv=fv, heads=heads, m=m: evaluate(
                fv.qhat, heads, attn, y=fv.chat_glob, m=m), repeat)
            s1, t_meas = step_time(sm, rho0, heads, attn, 1, a.steps)
            s2, _ = step_time(sm, rho0, heads, attn, 2, a.steps)
            exact = {}
            for be in ("direct", "numpy"):
                if be == "numpy" and M > a.numpy_max_cells:
                    exact[be] = float("nan")
                    continue
                exact[be] = timed(lambda fv=fv, heads=heads, m=m, be=be: kernel_sums(
                    fv.qhat, fv.chat_glob, m, heads.Q, heads.K, beta=attn.beta,
                    kind=attn.kind, potential=True, backend=be), 1)
            rss = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
            row = {"cells": M, "H": H, "targets": int(fv.qhat.shape[0]),
                   "backend": plan.backend, "eval_s": t_eval, "step_order1_s": s1,
                   "step_order2_s": s2, "measure_s": t_meas, "direct_sums_s": exact["direct"],
                   "numpy_sums_s": exact["numpy"], "peak_rss_mib": rss}
            rows.append(row)
            print(f"{M:>7} {H:>2} {row['targets']:>8} {plan.backend:>9} {t_eval:>8.3f} "
                  f"{s1:>10.3f} {s2:>10.3f} {t_meas:>10.3f} {exact['direct']:>9.3f} "
                  f"{exact['numpy']:>8.3f} {rss:>8.0f}", flush=True)
    if a.json:
        with open(a.json, "w") as fh:
            json.dump(rows, fh, indent=2)


if __name__ == "__main__":
    main()
