"""Benchmark of the certified sparse exact W₂ (``w2_sphere_sparse``) against the dense one.

Problems (issue 20, "POT stays the referee" at scale), on the shipped meshes
(2 420 … 40 500 cells; cell masses at the normalised centroids):

* ``cells``: two cell measures on the same support, a vMF density (κ = 4) and the same
  density rotated by ``--theta`` rad (default 0.01: sub-cell at 40 500 cells), like
  ``W₂(μ^JKO_k, μ^PDE(t_k))`` at one time;
* ``particles``: ``--particles`` points (default 2 000) sampled from the vMF vs its cell
  masses, like ``W₂(particles, μ^PDE)``;
* ``dense``: the dense ``w2_sphere`` on the same two problems where ``max(n, m) <=
  --dense-max`` (default 6 000).

Each configuration runs in its own subprocess (``--one KIND CELLS``, one thread:
``run_peer(threads=1)``; POT's network simplex is serial) so that its peak RSS
(``ru_maxrss``) is its own; the increase over the process after reading the mesh is
reported too. Times: wall and process CPU time of the W₂ call (the machine is shared:
the CPU time is what the process actually got; the 1-min load before/after is recorded).
The mesh is read with meshio (no DOLFINx) so the RSS is the transport's.

Run: nice -n 15 python bench/bench_w2_sparse.py [--cells 2420 9680 20480 40500]
"""

from __future__ import annotations

import argparse
import json
import resource
import sys
import time
from pathlib import Path

import numpy as np

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))
sys.path.insert(0, str(HERE.parent))

from _common import peer_info, run_peer, table, write_json  # noqa: E402


def _cells(ncell: int) -> tuple[np.ndarray, np.ndarray]:
    """Normalised centroids and flat areas of ``meshes/sphere_<ncell>.msh``."""
    from wflow.geometry.mesh.io import read_surface

    tri = read_surface(HERE.parent / "meshes" / f"sphere_{ncell}.msh")
    p = tri.points[tri.cells]
    c = p.mean(axis=1)
    areas = 0.5 * np.linalg.norm(np.cross(p[:, 1] - p[:, 0], p[:, 2] - p[:, 0]), axis=1)
    return c / np.linalg.norm(c, axis=1, keepdims=True), areas


def _problem(kind: str, ncell: int, theta: float, nparticles: int, seed: int = 0):
    from wflow.geometry.density import vmf_density

    c, areas = _cells(ncell)
    mu = np.array([[0.3, 0.1, 1.0]])
    rot = np.array([[np.cos(theta), 0.0, np.sin(theta)], [0.0, 1.0, 0.0],
                    [-np.sin(theta), 0.0, np.cos(theta)]])
    a = vmf_density(c, mu, np.array([4.0]), np.array([1.0])) * areas
    if kind == "cells":
        b = vmf_density(c, mu @ rot.T, np.array([4.0]), np.array([1.0])) * areas
        return c, c, a, b
    rng = np.random.default_rng(seed)
    idx = rng.choice(len(c), size=nparticles, p=a / a.sum())
    return c[idx], c, None, a  # particles at centroids drawn with the cell masses


def one(kind: str, ncell: int, theta: float, nparticles: int, dense: bool) -> dict:
    from wflow.geometry.transport import w2_sphere, w2_sphere_sparse

    x, y, a, b = _problem(kind, ncell, theta, nparticles)
    if kind == "particles":  # distinct points: jitter inside the cell (1e-3 rad)
        rng = np.random.default_rng(1)
        x = x + 1e-3 * rng.normal(size=x.shape)
        x /= np.linalg.norm(x, axis=1, keepdims=True)
    rss0 = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
    t0, c0 = time.perf_counter(), time.process_time()
    if dense:
        value = w2_sphere(x, y, a, b)
        rec = {"value": value}
    else:
        r = w2_sphere_sparse(x, y, a, b)
        rec = {"value": r.value, "W2sq": r.W2sq, "rounds": r.rounds, "pairs": r.pairs,
               "max_violation": r.max_violation, "tol": r.tol, "bound": r.bound,
               "certified": r.certified}
    rec.update(wall_s=time.perf_counter() - t0, cpu_s=time.process_time() - c0,
               kind=kind, method="dense" if dense else "sparse", cells=ncell,
               n=len(x), m=len(y), theta=theta,
               peak_rss_mb=resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024,
               rss_before_mb=rss0, peer=peer_info())
    return rec


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n", 1)[0])
    ap.add_argument("--cells", type=int, nargs="+", default=[2420, 9680, 20480, 40500])
    ap.add_argument("--kinds", nargs="+", default=["cells", "particles"])
    ap.add_argument("--theta", type=float, default=0.01)
    ap.add_argument("--particles", type=int, default=2000)
    ap.add_argument("--dense-max", type=int, default=6000)
    ap.add_argument("--timeout", type=float, default=1200.0)
    ap.add_argument("--out", default="bench_w2_sparse")
    ap.add_argument("--one", nargs=2, metavar=("KIND", "CELLS"))
    ap.add_argument("--dense", action="store_true")
    args = ap.parse_args(argv)
    if args.one:
        print(json.dumps(one(args.one[0], int(args.one[1]), args.theta, args.particles,
                             args.dense), default=float))
        return 0
    rows = []
    for ncell in args.cells:
        for kind in args.kinds:
            n = ncell if kind == "cells" else args.particles
            for dense in ([False, True] if max(n, ncell) <= args.dense_max else [False]):
                cmd = [sys.executable, str(Path(__file__).resolve()), "--one", kind, str(ncell),
                       "--theta", str(args.theta), "--particles", str(args.particles)]
                cmd += ["--dense"] if dense else []
                try:
                    rec = run_peer(cmd, threads=1, timeout=args.timeout,
                                   label=f"{kind} {ncell}")
                except Exception as exc:  # noqa: BLE001 - record the failure, go on
                    rec = {"kind": kind, "cells": ncell, "method": "dense" if dense
                           else "sparse", "error": str(exc)[-500:]}
                rows.append(rec)
                write_json(args.out, {"bench": "w2_sparse", "theta": args.theta,
                                      "particles": args.particles, "rows": rows,
                                      "partial": True})  # what finished survives a timeout
                print(json.dumps({k: rec.get(k) for k in ("kind", "method", "cells", "wall_s",
                                                          "cpu_s", "rounds", "pairs",
                                                          "peak_rss_mb", "value", "error")}),
                      flush=True)
    payload = {"bench": "w2_sparse", "date": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
               "theta": args.theta, "particles": args.particles, "rows": rows}
    path = write_json(args.out, payload)
    print(table([r for r in rows if "error" not in r],
                [("kind", "kind", "{}"), ("method", "method", "{}"), ("cells", "cells", "{}"),
                 ("wall_s", "wall s", "{:.2f}"), ("cpu_s", "cpu s", "{:.2f}"),
                 ("rounds", "rounds", "{}"), ("pairs", "pairs", "{}"),
                 ("peak_rss_mb", "peak MB", "{:.0f}"), ("value", "W2", "{:.6g}")]))
    print(path)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
