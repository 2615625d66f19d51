"""How often the default ``rtol``'s verdict on a particle run is wrong, over 100 seeds.

``python bench/default_rtol_size.py [--out FILE] [--seeds N] [--first S]`` draws, per
seed ``s``, a random system: 64 uniform tokens on S², two random symmetric softmax heads
(scale uniform in [0.3, 1.0]), ``β`` uniform in [0.5, 4], ``T = 1``; the integrator
alternates between Euler (even seeds) and RK4 (odd), and ``dt`` cycles through
0.2, 0.1, 0.05, 0.02, 0.01 (so that about half the runs meet ``1e-3`` and half miss it).
Each system runs with the default ``rtol`` (:data:`wflow.infra.accuracy.DEFAULT_RTOL`:
judged by step doubling) and, as the reference, with RK4 at ``dt/64`` (its own error
below 1e-9 of the tolerance's scale at these steps). The true error of ``x(T)`` is
measured in the same scaled norm as the estimate (:func:`wflow.infra.accuracy.error_norm`
at ``rtol = 1e-3``, ``atol = 1e-6``). A verdict is wrong when the estimate's side of 1
differs from the true error's; "false success" is the harmful side. Writes
``bench/results/default_rtol_size.json``; ``tests/test_particles_accuracy.py`` pins it.
Seeds 0–99 measure the size; ``--first 100 --seeds 20`` gives held-out seeds.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
from pathlib import Path

import numpy as np

HERE = Path(__file__).resolve().parent
OUT = HERE / "results" / "default_rtol_size.json"
DTS = (0.2, 0.1, 0.05, 0.02, 0.01)


def one(seed: int) -> dict:
    """The default's verdict and the true error of one random system."""
    from wflow import Attention, Heads
    from wflow.geometry.sphere import sample_uniform
    from wflow.infra.accuracy import Tolerance, error_norm
    from wflow.particles import simulate

    rng = np.random.default_rng(seed)
    heads = Heads.random_symmetric(2, 3, rng, scale=float(rng.uniform(0.3, 1.0)))
    attn = Attention("softmax", float(rng.uniform(0.5, 4.0)))
    x0 = sample_uniform(64, 3, rng)
    integ = "euler" if seed % 2 == 0 else "rk4"
    dt = DTS[(seed // 2) % len(DTS)]
    kw = dict(T=1.0, head_rates=False, clusters=False, record_every=10**6)
    judged = simulate(x0, heads, attn, dt=dt, integrator=integ, **kw)
    ref = simulate(x0, heads, attn, dt=dt / 64, integrator="rk4", rtol=None, **kw)
    true = error_norm(judged.x[0] - ref.x[0], ref.x[0], judged.x[0], Tolerance())
    est = judged.checks["accuracy"]["error"]
    return {"seed": seed, "integrator": integ, "dt": dt, "beta": attn.beta,
            "status": str(judged.status), "estimate": est, "true": true,
            "wrong": bool((est <= 1.0) != (true <= 1.0)),
            "false_success": bool(est <= 1.0 < true)}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--out", default=str(OUT))
    ap.add_argument("--seeds", type=int, default=100)
    ap.add_argument("--first", type=int, default=0)
    args = ap.parse_args()
    sys.path.insert(0, str(HERE))
    from _common import parent_machine

    rows = [one(s) for s in range(args.first, args.first + args.seeds)]
    ratios = [r["true"] / r["estimate"] for r in rows if r["estimate"] > 0]
    summary = {"runs": len(rows), "wrong": sum(r["wrong"] for r in rows),
               "false_success": sum(r["false_success"] for r in rows),
               "inaccurate": sum(r["status"] == "inaccurate" for r in rows),
               "true_over_estimate": [min(ratios), max(ratios)]}
    print(json.dumps(summary))
    Path(args.out).write_text(json.dumps({"summary": summary, "rows": rows,
                                          "load1": os.getloadavg()[0],
                                          "machine": parent_machine()}, indent=1))


if __name__ == "__main__":
    main()
