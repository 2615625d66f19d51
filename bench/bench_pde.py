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

Each of ``wflow`` (eval, steps, measure: the ``auto`` back-end), ``direct`` and ``numpy``
runs in its own fresh process with an explicit, recorded environment and the same thread
count (``bench/_common.py``: no inherited ``OMP_*``/``MKL_*``/``NUMBA_*``/``OPENBLAS_*``),
warmed up there; peak RSS is each process's own.

Memory of the NumPy back-end is O(block · M) (blocks of ``BLOCK_ELEMS`` scores); the
direct back-end uses O(1) per target. Peak RSS is reported.

Run: python bench/bench_pde.py [--cells 2420 9680 40500] [--heads 1 4] [--quick]
     [--threads 2] [--json FILE]
"""

from __future__ import annotations

import argparse
import json
import resource
import sys
import time
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent))
from _common import call_peer, default_threads, parent_machine  # noqa: E402


def timed(fn, repeat: int) -> float:
    best = np.inf
    for _ in range(repeat):
        t0 = time.perf_counter()
        fn()
        best = min(best, time.perf_counter() - t0)
    return best


def step_time(sm, rho0, heads, attn, order: int, steps: int) -> tuple[float, float]:
    """Seconds per accepted step (velocity + fluxes + update), and per measure call."""
    from wflow.attention.schedules import Static
    from wflow.pde import PDEOptions, iterate_pde
    from wflow.pde.solver import _Run

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


def _setup(M: int, H: int):
    from wflow.attention.heads import Attention, Heads
    from wflow.attention.schedules import Static
    from wflow.geometry.density import initial_density
    from wflow.geometry.mesh import load_mesh
    from wflow.pde import PDEOptions
    from wflow.pde.solver import _Run

    sm = load_mesh(f"sphere_{M}.msh")
    rho0 = initial_density(sm, {"type": "vmf", "means": [[1, 0, 0], [0, 0, 1]],
                                "kappas": [3.0, 3.0]})
    heads = Heads.random_symmetric(H, 3, np.random.default_rng(0), scale=0.5)
    attn = Attention("softmax", 1.0)
    run = _Run(sm, PDEOptions(), Static.of(heads), attn, None)
    return sm, rho0, heads, attn, run.fv, rho0 * run.fv.areas_glob


def peer_wflow(M: int, H: int, steps: int) -> dict:
    """In a fresh process: the ``auto`` evaluation, one step of each order, the measure."""
    from wflow.energy import evaluate
    from wflow.kernels import plan_kernel

    sm, rho0, heads, attn, fv, m = _setup(M, H)
    plan = plan_kernel(fv.qhat, fv.chat_glob, heads.Q, heads.K, beta=attn.beta,
                       kind=attn.kind)
    repeat = 3 if M * H <= 10_000 else 1
    evaluate(fv.qhat[:10], heads, attn, y=fv.chat_glob, m=m)  # JIT warm-up
    t_eval = timed(lambda: evaluate(fv.qhat, heads, attn, y=fv.chat_glob, m=m), repeat)
    s1, t_meas = step_time(sm, rho0, heads, attn, 1, steps)
    s2, _ = step_time(sm, rho0, heads, attn, 2, steps)
    return {"targets": int(fv.qhat.shape[0]), "backend": plan.backend, "eval_s": t_eval,
            "step_order1_s": s1, "step_order2_s": s2, "measure_s": t_meas,
            "peak_rss_mib": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024}


def peer_sums(M: int, H: int, backend: str) -> dict:
    """In a fresh process: the edge-velocity kernel sums on one exact back-end."""
    from wflow.kernels import kernel_sums

    _, _, heads, attn, fv, m = _setup(M, H)

    def call(n=None):
        q = fv.qhat if n is None else fv.qhat[:n]
        kernel_sums(q, fv.chat_glob, m, heads.Q, heads.K, beta=attn.beta, kind=attn.kind,
                    potential=True, backend=backend)

    call(10)  # warm-up (JIT / cache load)
    return {"time_s": timed(call, 1),
            "peak_rss_mib": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--cells", type=int, nargs="+", default=[2420, 9680, 40500])
    ap.add_argument("--heads", type=int, nargs="+", default=[1, 4])
    ap.add_argument("--steps", type=int, default=2)
    ap.add_argument("--quick", action="store_true", help="2420 cells, H = 1 only")
    ap.add_argument("--threads", type=int, default=default_threads())
    ap.add_argument("--json", default=None, help="also write the rows as JSON")
    ap.add_argument("--numpy-max-cells", type=int, default=10_000,
                    help="time the blocked NumPy back-end only up to this many cells")
    a = ap.parse_args()
    cells = [2420] if a.quick else a.cells
    heads_list = [1] if a.quick else a.heads
    rows = []
    meta = parent_machine()
    print(f"machine: {meta['cpu']}, {meta['cores']} cores, load {meta['loadavg']}, "
          f"{a.threads} threads per peer")
    print(f"{'cells':>7} {'H':>2} {'targets':>8} {'backend':>9} {'eval s':>8} "
          f"{'step o1 s':>10} {'step o2 s':>10} {'measure s':>10} {'direct s':>9} "
          f"{'numpy s':>8} {'RSS MiB':>8} {'load':>5}")
    for M in cells:
        for H in heads_list:
            w = call_peer("bench_pde:peer_wflow", threads=a.threads, M=M, H=H, steps=a.steps)
            exact = {}
            for be in ("direct", "numpy"):
                if be == "numpy" and M > a.numpy_max_cells:
                    exact[be] = {"time_s": float("nan")}
                    continue
                exact[be] = call_peer("bench_pde:peer_sums", threads=a.threads, M=M, H=H,
                                      backend=be)
            load = max(r.get("load_after", 0.0) for r in (w, *exact.values()))
            row = {"cells": M, "H": H, **{k: w[k] for k in (
                "targets", "backend", "eval_s", "step_order1_s", "step_order2_s",
                "measure_s", "peak_rss_mib")},
                "direct_sums_s": exact["direct"]["time_s"],
                "numpy_sums_s": exact["numpy"]["time_s"], "load": load,
                "env": {"wflow": w["env"], **{k: v.get("env") for k, v in exact.items()}}}
            rows.append(row)
            print(f"{M:>7} {H:>2} {row['targets']:>8} {row['backend']:>9} "
                  f"{row['eval_s']:>8.3f} {row['step_order1_s']:>10.3f} "
                  f"{row['step_order2_s']:>10.3f} {row['measure_s']:>10.3f} "
                  f"{row['direct_sums_s']:>9.3f} {row['numpy_sums_s']:>8.3f} "
                  f"{row['peak_rss_mib']:>8.0f} {load:>5.1f}", flush=True)
    if a.json:
        with open(a.json, "w") as fh:
            json.dump({"machine": meta, "threads": a.threads, "rows": rows}, fh, indent=2)


if __name__ == "__main__":
    main()
