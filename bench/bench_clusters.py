"""CPU seconds per token of the cluster count (the particle estimate's ``CLUSTER_SECONDS``).

``python bench/bench_clusters.py [--out FILE]`` times
:func:`wflow.diagnostics.count_clusters` (``cos_threshold = 0.99``, the particles'
default) in this process, one thread, on tokens on S²: uniform (nearly every token its own
group at small ``n``: the pairs of small groups decided at once) and in 40 tight clusters
(few large groups: the k-d tree path), ``n`` = 500 … 10⁵, the fastest of three calls
after a warm-up, CPU time. Writes ``bench/results/bench_clusters.json`` with the machine
and the load; ``tests/test_estimates.py`` holds ``CLUSTER_SECONDS`` within 2× of every row.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import time
from pathlib import Path

import numpy as np

HERE = Path(__file__).resolve().parent
OUT = HERE / "results" / "bench_clusters.json"
SIZES = (500, 2000, 10_000, 30_000, 100_000)


def _tokens(kind: str, n: int) -> np.ndarray:
    rng = np.random.default_rng(n)
    x = rng.normal(size=(n, 3))
    if kind == "clustered":
        cent = rng.normal(size=(40, 3))
        cent /= np.linalg.norm(cent, axis=1, keepdims=True)
        x = cent[rng.integers(0, 40, n)] + 1e-3 * x
    return x / np.linalg.norm(x, axis=1, keepdims=True)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--out", default=str(OUT))
    args = ap.parse_args()
    sys.path.insert(0, str(HERE))
    from _common import parent_machine

    from wflow.diagnostics import count_clusters

    rows = []
    load0 = os.getloadavg()[0]
    for kind in ("uniform", "clustered"):
        for n in SIZES:
            x = _tokens(kind, n)
            count = count_clusters(x)  # warm-up (SciPy's first k-d tree)
            best = float("inf")
            for _ in range(3):
                t = time.process_time()
                count_clusters(x)
                best = min(best, time.process_time() - t)
            rows.append({"tokens": kind, "n": n, "clusters": int(count), "cpu_s": best,
                         "cpu_s_per_token": best / n})
            print(f"{kind:9s} n = {n:6d}: {count:5d} clusters, {best * 1e3:8.2f} ms, "
                  f"{best / n:.2e} s per token")
    res = {"rows": rows, "cos_threshold": 0.99, "load1": [load0, os.getloadavg()[0]],
           "machine": parent_machine()}
    Path(args.out).write_text(json.dumps(res, indent=1))


if __name__ == "__main__":
    main()
