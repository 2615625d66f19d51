"""Wall time of the complete published S² workload through the compiled particle loop.

Both regimes of the published S² experiments — weights relaxing to the oscillating
frames (one path) and OU weights with noise (10 Monte-Carlo paths) — for H ∈ {1, 10, 100},
n = 200 tokens, T = 20, explicit Euler dt = 5e-3 (4 000 steps), the published diagnostics
recorded every 5 steps (E, E_h, ∂_tE, power, slopes, G², Itô, martingale and balances are
computed every step), through ``wflow.particles.simulate(..., engine="compiled")``: the
workload of ``wflow reproduce`` for S² (target: ≤ 3 minutes on 2 cores; by the published
engine's per-step times it needs about 2 hours on the same machine).

The script re-executes itself in the clean environment of ``_common.peer_env`` (no
inherited ``OMP_*``/``NUMBA_*``/``OPENBLAS_*``/``MKL_*`` variables, ``--threads`` for
every library), recorded in the JSON with the CPU and the load of every run. It sets
``OMP_WAIT_POLICY=PASSIVE`` on purpose, as the ``wflow`` command does for its own process
(``--wait-policy default`` leaves it unset: the library's behaviour).

Usage: ``python bench/bench_reproduce.py [--T 20] [--heads 1 10 100] [--threads 2]``; writes
``bench/results/bench_reproduce.json`` (``_T<T>`` appended for other horizons).
"""

from __future__ import annotations

import argparse
import os
import sys
import time
from pathlib import Path

import numpy as np

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))
from _common import default_threads, ensure_clean, machine, table, write_json  # noqa: E402
from bench_published import DT, initial_data, wflow_schedule  # noqa: E402


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--T", type=float, default=20.0)
    ap.add_argument("--heads", type=int, nargs="+", default=[1, 10, 100])
    ap.add_argument("--paths", type=int, default=10)
    ap.add_argument("--threads", type=int, default=default_threads())
    ap.add_argument("--wait-policy", default="PASSIVE",
                    help="OMP_WAIT_POLICY of the run (PASSIVE: as the wflow command; "
                    "'default': unset)")
    args = ap.parse_args()
    ensure_clean(args.threads, None if args.wait_policy == "default"
                 else {"OMP_WAIT_POLICY": args.wait_policy})
    from wflow.attention.heads import Attention
    from wflow.particles import simulate

    meta = machine()
    print(f"machine: {meta['cpu']}, {meta['cores']} cores, load {meta['loadavg']}", flush=True)
    # compile (or load the on-disk cache) outside the timed runs
    x32, D0 = initial_data(200, 1, 3)
    x0 = x32.astype(np.float64)
    x0 /= np.linalg.norm(x0, axis=1, keepdims=True)
    for kind, P in (("osc", 1), ("ou", 2)):
        simulate(x0, wflow_schedule(kind, 1, D0), Attention("softmax", 1.0), T=5 * DT, dt=DT,
                 integrator="euler", n_paths=P, engine="compiled", rtol=None)
    runs = []
    t_all = time.perf_counter()
    for kind, P in (("osc", 1), ("ou", args.paths)):
        for H in args.heads:
            x32, D0 = initial_data(200, H, 3)
            x0 = x32.astype(np.float64)
            x0 /= np.linalg.norm(x0, axis=1, keepdims=True)
            load0 = os.getloadavg()[0]
            t0, c0 = time.perf_counter(), time.process_time()
            r = simulate(x0, wflow_schedule(kind, H, D0), Attention("softmax", 1.0), T=args.T,
                         dt=DT, integrator="euler", record_every=5, n_paths=P, seed=2000 + H,
                         head_rates=False, clusters=False, engine="compiled", progress=False)
            wall, cpu = time.perf_counter() - t0, time.process_time() - c0
            runs.append({"kind": kind, "H": H, "paths": P, "steps": r.steps["t"].size - 1,
                         "wall_s": wall, "cpu_s": cpu, "status": r.status,
                         "load": max(load0, os.getloadavg()[0])})
            print(runs[-1], flush=True)
    total = time.perf_counter() - t_all
    print()
    print(table(runs, [("kind", "regime", "{}"), ("H", "H", "{}"), ("paths", "paths", "{}"),
                       ("steps", "steps", "{}"), ("wall_s", "wall s", "{:.1f}"),
                       ("cpu_s", "cpu s", "{:.1f}"), ("load", "load", "{:.1f}")]))
    print(f"total wall {total:.1f} s ({total / 60:.2f} min), load now {os.getloadavg()[0]:.1f}")
    name = ("bench_reproduce" + ("" if args.T == 20.0 else f"_T{args.T:g}")
            + ("" if args.wait_policy == "PASSIVE" else f"_{args.wait_policy}"))
    path = write_json(name, {"machine": meta, "runs": runs, "total_wall_s": total,
                             "T": args.T, "dt": DT, "n": 200, "record_every": 5})
    print(f"wrote {path}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
