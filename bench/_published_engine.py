"""Runs the published [TD] engine for ``bench_published.py`` (in a Python with torch).

Not part of wflow: started as a subprocess by ``bench_published.py --engine-src PATH``,
it imports the published package ``attn_sphere`` from ``PATH`` (the user's checkout; no
published code lives in this repository) and either

* ``--time``: times ``simulate_batch`` for one row (float64, CPU, ``--threads`` torch
  threads, diagnostics computed every step and recorded every ``--rec`` steps, 5 as
  published; one warm-up run of 2-10 steps first) and prints one JSON line with the
  process's thread counts (``_common.peer_info``); or
* ``--dump FILE``: runs ``--steps`` steps recording every step and saves the initial data,
  the standard normals the engine drew (regenerated from the same seeded generator) and
  the recorded ``E, G2, dE_int, G2_int, add_int`` to ``FILE`` (``.npz``), so that the
  re-implementation can be run from the same data and compared.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import time


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--engine-src", required=True)
    ap.add_argument("--kind", choices=["osc", "ou"], required=True)
    ap.add_argument("--n", type=int, default=200)
    ap.add_argument("--H", type=int, default=10)
    ap.add_argument("--d", type=int, default=3)
    ap.add_argument("--P", type=int, default=1)
    ap.add_argument("--steps", type=int, default=100)
    ap.add_argument("--dt", type=float, default=5e-3)
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--seed", type=int, default=2010)
    ap.add_argument("--rec", type=int, default=5, help="record every REC steps")
    ap.add_argument("--time", action="store_true")
    ap.add_argument("--dump")
    a = ap.parse_args()
    sys.path.insert(0, os.path.abspath(a.engine_src))
    sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
    import numpy as np
    import torch
    from _common import peer_info

    torch.set_num_threads(a.threads)
    import attn_sphere as eng
    from attn_sphere.engine import simulate_batch

    cpu = torch.device("cpu")
    x0 = (eng.tokens_s2_octahedral(n=a.n, seed=42) if a.d == 3
          else eng.tokens_sd_clustered(n=a.n, d=a.d, seed=42))
    D0 = eng.symmetric_random_weights(a.H, d=a.d, seed=42 + a.H, device=cpu)
    ou = a.kind == "ou"
    drift = eng.ou_drift if ou else eng.make_drift_oscillating(a.d)
    noise_var = 2.0 if ou else 0.0

    def run(steps: int, rec: int) -> dict:
        return simulate_batch(x0, D0, drift, noise_var, cpu, steps * a.dt, a.dt, rec,
                              n_paths=a.P, seed=a.seed)

    if a.dump:
        res = run(a.steps, 1)
        normals = np.zeros((a.steps, a.P, a.H, a.d, a.d))
        if ou:  # the engine's generator: seeded once, one [P, H, d, d] draw per step
            gen = torch.Generator(device=cpu)
            gen.manual_seed(a.seed)
            for k in range(a.steps):
                normals[k] = torch.randn((a.P, a.H, a.d, a.d), dtype=torch.float64,
                                         generator=gen).numpy()
        np.savez(a.dump, x0=np.asarray(x0), D0=D0.numpy(), normals=normals,
                 **{k: np.asarray(res[k]) for k in ("t", "E", "G2", "dE_int", "G2_int",
                                                    "add_int")})
        print(json.dumps({"dump": a.dump, "peer": peer_info()}))
        return 0
    run(min(10, max(2, a.steps // 4)), a.rec)  # warm-up (first-call allocations)
    load0 = os.getloadavg()
    t0, c0 = time.perf_counter(), time.process_time()
    res = run(a.steps, a.rec)
    wall, cpu_s = time.perf_counter() - t0, time.process_time() - c0
    print(json.dumps({"s_per_step": wall / a.steps, "cpu_per_step": cpu_s / a.steps,
                      "steps": a.steps, "record_every": a.rec, "load_in_before": load0,
                      "load_in_after": os.getloadavg(), "torch": torch.__version__,
                      "threads": torch.get_num_threads(),
                      "E_last": float(np.mean(res["E"][:, -1])), "peer": peer_info()}))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
