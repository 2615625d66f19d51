"""CPU seconds of particle runs judged by the default ``rtol``, against their estimate.

``python bench/bench_default_rtol_estimate.py [--out FILE]`` runs
:func:`wflow.particles.simulate` on uniform tokens on S² with two random symmetric softmax
heads (``β = 1``, RK4, ``T = 1``, ``dt = 0.05``: 20 steps, every step recorded, no
cluster count, no per-head rates) in this process (re-executed in the explicit
one-thread environment of ``_common.ensure_clean``, recorded as ``env``), twice per size: with the default
``rtol`` (:data:`wflow.infra.accuracy.DEFAULT_RTOL`: the run, then the run repeated at
``dt/2`` recording only its end, judged by step doubling) and with ``rtol = None`` (the
bare run). ``n`` = 1 000 and 4 000 (direct sums) and 100 000 (the fast summation). Each
run is timed after a warm-up on 64 tokens, the fastest of two, CPU time. Each row holds
the estimate's seconds less its start-up (:func:`wflow.particles.estimate.estimate_run`:
the run is timed in-process) and the measured cost of the default over the bare run.
Writes ``bench/results/default_rtol_estimate.json`` with the machine and the load;
``tests/test_particles_accuracy.py`` holds every estimate within 2× of its row.
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
OUT = HERE / "results" / "default_rtol_estimate.json"
SIZES = (1000, 4000, 100_000)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--out", default=str(OUT))
    args = ap.parse_args()
    sys.path.insert(0, str(HERE))
    from _common import best_cpu, ensure_clean, parent_machine, recorded_env

    ensure_clean(1)  # re-executes in the explicit one-thread environment (recorded below)

    from wflow import Attention, Heads
    from wflow.infra.accuracy import DEFAULT_RTOL
    from wflow.particles import ParticleOptions, simulate
    from wflow.particles.estimate import STARTUP_SECONDS, estimate_run

    attn = Attention("softmax", 1.0)
    rows = []
    load0 = os.getloadavg()[0]
    for n in SIZES:
        rng = np.random.default_rng(n)
        heads = Heads.random_symmetric(2, 3, rng, scale=0.5)
        x = rng.normal(size=(n, 3))
        x /= np.linalg.norm(x, axis=1, keepdims=True)
        cpu = {}
        for label, rtol in (("default", DEFAULT_RTOL), ("bare", None)):
            opts = ParticleOptions(T=1.0, dt=0.05, integrator="rk4", seed=1, clusters=False,
                                   head_rates=False, progress=False, rtol=rtol)
            simulate(x[:64], heads, attn, options=opts)  # warm-up (numba, plans)
            best, res = best_cpu(partial(simulate, x, heads, attn, options=opts))
            est = estimate_run(opts, n=n, d=3, H=2, kind="softmax", stochastic=False)
            cpu[label] = best
            rows.append({"n": n, "rtol": label, "engine": res.extra["engine"],
                         "status": str(res.status), "cpu_s": best,
                         "estimate_s": est.seconds - STARTUP_SECONDS,
                         "ratio": (est.seconds - STARTUP_SECONDS) / best})
            print(f"n = {n:6d} rtol {label:7s} ({res.extra['engine']:8s}, {res.status}): "
                  f"{best:7.3f} s, estimate {est.seconds - STARTUP_SECONDS:7.3f} s", flush=True)
        rows[-2]["cost_over_bare"] = cpu["default"] / cpu["bare"]
    res = {"rows": rows, "T": 1.0, "dt": 0.05, "H": 2, "integrator": "rk4",
           "load1": [load0, os.getloadavg()[0]], "machine": parent_machine(),
           "env": recorded_env(dict(os.environ))}
    Path(args.out).write_text(json.dumps(res, indent=1))


if __name__ == "__main__":
    main()
