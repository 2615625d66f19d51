"""CPU seconds of noisy particle runs that judge the Itô balance, against their estimate.

``python bench/bench_ito_estimate.py [--out FILE]`` runs :func:`wflow.particles.simulate`
with token diffusion (``D = 0.1``, one softmax head ``A = V = I`` at ``β = 2`` on S², one
path, ``T = 0.2``, ``dt = 0.01``: 20 steps, no cluster count, no per-head rates) in this
process, one thread, with ``ito_balance`` unset and ``engine = "auto"``: the Python loop,
which records the Laplacian of the energy (``d`` more kernel sums per step and the control
variate's redrawn noise), at ``n`` = 1 000 and 4 000 (direct sums) and 20 000 (the fast
summation), for ``em`` and ``strang-heun``; and, as the rows the estimate must not
confuse them with, the same runs with ``ito_balance = false`` (the compiled loop where the
direct sums apply). Each run is timed after a warm-up on 64 tokens, the fastest of two,
CPU time. Each row holds the estimate's seconds less its start-up
(:func:`wflow.particles.estimate.estimate_run`: the run is timed in-process). Writes
``bench/results/bench_ito_estimate.json`` with the machine and the load;
``tests/test_estimates_diffusion.py`` holds every estimate within 2× of its row.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
from functools import partial
from pathlib import Path

import numpy as np

HERE = Path(__file__).resolve().parent
OUT = HERE / "results" / "bench_ito_estimate.json"
SIZES = (1000, 4000, 20_000)
INTEGRATORS = ("em", "strang-heun")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--out", default=str(OUT))
    args = ap.parse_args()
    sys.path.insert(0, str(HERE))
    from _common import best_cpu, parent_machine

    from wflow import Attention, Heads
    from wflow.particles import ParticleOptions, simulate
    from wflow.particles.estimate import STARTUP_SECONDS, estimate_run

    heads, attn = Heads.bilinear(np.eye(3)), Attention("softmax", 2.0)
    rows = []
    load0 = os.getloadavg()[0]
    for integ in INTEGRATORS:
        for n in SIZES:
            rng = np.random.default_rng(n)
            x = rng.normal(size=(n, 3))
            x /= np.linalg.norm(x, axis=1, keepdims=True)
            for ito in (None, False):
                opts = ParticleOptions(T=0.2, dt=0.01, integrator=integ, diffusion=0.1,
                                       seed=1, clusters=False, head_rates=False,
                                       ito_balance=ito, progress=False)
                simulate(x[:64], heads, attn, options=opts)  # warm-up (numba, plans)
                best, res = best_cpu(partial(simulate, x, heads, attn, options=opts))
                est = estimate_run(opts, n=n, d=3, H=1, kind="softmax", stochastic=False)
                rows.append({"integrator": integ, "n": n, "ito_balance": ito,
                             "engine": res.extra["engine"], "status": str(res.status),
                             "cpu_s": best, "estimate_s": est.seconds - STARTUP_SECONDS,
                             "ratio": (est.seconds - STARTUP_SECONDS) / best})
                print(f"{integ:11s} n = {n:6d} ito_balance = {ito!s:5s} "
                      f"({res.extra['engine']:8s}, {res.status}): {best:7.3f} s, "
                      f"estimate {est.seconds - STARTUP_SECONDS:7.3f} s", flush=True)
    res = {"rows": rows, "T": 0.2, "dt": 0.01, "diffusion": 0.1,
           "load1": [load0, os.getloadavg()[0]], "machine": parent_machine()}
    Path(args.out).write_text(json.dumps(res, indent=1))


if __name__ == "__main__":
    main()
