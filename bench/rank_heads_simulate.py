"""``simulate`` with heads of value rank ``r`` (summed at rank) against the same heads by ``V``.

``python bench/rank_heads_simulate.py [n] [d] [H] [k] [steps]`` (defaults 2000 64 4 16 2):
two RK4 steps of each, wall and CPU time, the load, and the largest difference of ``x(T)``.
"""

from __future__ import annotations

import os
import sys
import time

import numpy as np

from wflow import Attention, Heads, simulate


def main(n: int = 2000, d: int = 64, H: int = 4, k: int = 16, steps: int = 2) -> None:
    rng = np.random.default_rng(0)
    heads = Heads.random_rank(H, d, k, rng, scale=1.5)
    full = Heads(heads.Q, heads.K, heads.V, heads.w)
    x = rng.standard_normal((n, d))
    x /= np.linalg.norm(x, axis=1)[:, None]
    attn = Attention("softmax", 1.0)
    dt = 0.01
    out = {}
    simulate(x[:50], heads, attn, T=dt, dt=dt, engine="python", rtol=None)  # compile first
    simulate(x[:50], full, attn, T=dt, dt=dt, engine="python", rtol=None)
    for name, h in (("rank", heads), ("full", full)) * 3:
        w0, c0 = time.perf_counter(), time.process_time()
        res = simulate(x, h, attn, T=steps * dt, dt=dt, integrator="rk4", engine="python",
                       head_rates=False, clusters=False, rtol=None)  # the bare run
        wall, cpu = time.perf_counter() - w0, time.process_time() - c0
        if name in out:  # the best of three runs
            wall, cpu = min(wall, out[name][0]), min(cpu, out[name][1])
        out[name] = (wall, cpu, res)
        print(f"{name}: wall {out[name][0]:.2f} s, cpu {out[name][1]:.2f} s, "
              f"status {res.status}, engine {res.extra['engine']}")
    diff = float(np.max(np.abs(out["rank"][2].x - out["full"][2].x)))
    print(f"n={n} d={d} H={H} k={k} r={k} steps={steps}: rank/full wall "
          f"{out['rank'][0] / out['full'][0]:.2f}, cpu {out['rank'][1] / out['full'][1]:.2f}; "
          f"max |x_rank - x_full| = {diff:.2e}; load {os.getloadavg()}")


if __name__ == "__main__":
    main(*(int(a) for a in sys.argv[1:]))
