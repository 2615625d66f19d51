"""Benchmark of the finite-volume JKO step (``scheme = "fv"``) against the OT scheme.

Problem (issue 20): one unnormalised head, ``A = V = I``, ``β = 2``,
``ρ₀ ∝ 1 + ½P₂(cos θ)``, ``τ = 0.1``, ``T = 0.2`` (two steps; the per-step time is the
mean of the two, after a warm-up run on 720 cells in the same process that compiles
the numba kernels). Meshes: the shipped icospheres 2 420 … 40 500 cells and an
icosphere of frequency 90 (162 000 cells, generated here, not shipped).

Each configuration runs in its own subprocess (``--one CELLS SCHEME``) so that the peak
RSS (``ru_maxrss``) is that configuration's: reported as the peak and as the increase
over the process after loading the mesh and the warm-up. Times: the wall time of each
step (``step_time``), the process CPU time of one more FV step alone (all threads; on an
idle machine with 2 cores the wall time is between half of it and all of it), and the
wall time of the whole run with its per-step diagnostics. The machine is shared: the
load average after each configuration is recorded beside it. The OT scheme (exact ``emd``,
GCG) runs up to ``--ot-max-cells`` (default 9 680: 7.7 s and 2.2 GB per step there; it
grows like N^2.2).

Run: python bench/bench_jko_fv.py [--cells 2420 9680 40500 162000] [--ot-max-cells 9680]
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import subprocess
import sys
import time
import warnings

import numpy as np
from _common import machine, table, write_json

TAU, T = 0.1, 0.2


def _mesh(cells: int):
    from wflow.geometry.mesh import MESH_DIR, icosphere, read_surface

    if cells == 162000:
        return icosphere(90)
    return read_surface(MESH_DIR / f"sphere_{cells}.msh")


def one(cells: int, scheme: str) -> dict:
    from wflow.attention.heads import Attention, Heads
    from wflow.geometry.mesh.dual import dual_geometry
    from wflow.jko import JKOOptions, JKOWarning, solve_jko

    heads, attn = Heads.bilinear(np.eye(3)), Attention("usa", 2.0)

    def problem(tri):
        geo = dual_geometry(tri.points, tri.cells)
        z = geo.centres[:, 2]
        m0 = (1.0 + 0.5 * (1.5 * z**2 - 0.5)) * geo.areas
        return geo, m0 / m0.sum()

    opts = JKOOptions(T=T, tau=TAU, scheme=scheme, verify=False)
    wt = _mesh(720) if cells != 720 else None
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", JKOWarning)
        if wt is not None:  # compile and warm caches
            g, m = problem(wt)
            solve_jko(m, heads, attn, points=g.centres, areas=g.areas, options=opts, mesh=wt)
        t0 = time.perf_counter()
        tri = _mesh(cells)
        geo, m0 = problem(tri)
        t_geo = time.perf_counter() - t0
        base = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
        t0, c0 = time.perf_counter(), time.process_time()
        res = solve_jko(m0, heads, attn, points=geo.centres, areas=geo.areas, options=opts,
                        mesh=tri)
        wall, cpu = time.perf_counter() - t0, time.process_time() - c0
        cpu_step = float("nan")
        if scheme == "fv":  # one more step alone: its process CPU time (all threads)
            from wflow.energy import evaluate as _ev
            from wflow.jko.fv import FVGraph, fv_step

            g = FVGraph.from_geometry(geo)
            b = _ev(geo.centres, heads, attn, m=m0).bhat
            c0 = time.process_time()
            fv_step(g, m0, heads, attn, tau=TAU, sign=1, bhat=b)
            cpu_step = time.process_time() - c0
    peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
    h = res.history
    from wflow.energy import evaluate

    fe = evaluate(geo.centres, heads, attn, m=m0)
    vmax = float(np.max(np.linalg.norm(fe.vhat, axis=1)))
    st = h["step_time"][1:]
    return {"cells": cells, "scheme": scheme, "status": res.status,
            "per_step": float(st.mean()), "steps": st.tolist(), "wall": wall,
            "cpu_run": cpu, "cpu_step": cpu_step,
            "geometry_s": t_geo, "iters": h["inner_iters"][1:].tolist(),
            "cfl": TAU * vmax / geo.h, "locked": int(res.stats["locked_steps"]),
            "empty": int(np.max(h["empty"])),
            "moved_fraction": h["moved_fraction"][1:].tolist(),
            "peak_rss_mib": peak, "rss_increase_mib": peak - base,
            "rss_per_cell_kib": (peak - base) * 1024 / cells}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--cells", type=int, nargs="+",
                    default=[2420, 5120, 9680, 20480, 40500, 162000])
    ap.add_argument("--ot-max-cells", type=int, default=9680)
    ap.add_argument("--one", nargs=2, metavar=("CELLS", "SCHEME"))
    a = ap.parse_args()
    if a.one:
        print(json.dumps(one(int(a.one[0]), a.one[1])))
        return
    rows = []
    here = os.path.dirname(os.path.abspath(__file__))
    for n in a.cells:
        for scheme in ("fv", "ot"):
            if scheme == "ot" and n > a.ot_max_cells:
                continue
            out = subprocess.run([sys.executable, os.path.join(here, "bench_jko_fv.py"),
                                  "--one", str(n), scheme], capture_output=True, text=True)
            if out.returncode != 0:
                print(out.stderr[-2000:], file=sys.stderr)
                rows.append({"cells": n, "scheme": scheme, "status": "bench error"})
                continue
            r = json.loads(out.stdout.strip().splitlines()[-1])
            r["loadavg_after"] = [round(v, 2) for v in os.getloadavg()]
            rows.append(r)
            print(f"{n:7d} {scheme}: {r['per_step']:.3f} s/step (CPU {r['cpu_step']:.3f} s), "
                  f"run {r['wall']:.1f} s wall / {r['cpu_run']:.1f} s CPU, iters {r['iters']}, "
                  f"τ|v|max/h {r['cfl']:.2f}, {r['status']}, locked {r['locked']}, "
                  f"empty {r['empty']}, peak RSS {r['peak_rss_mib']:.0f} MiB "
                  f"(+{r['rss_increase_mib']:.0f}), load {r['loadavg_after']}", flush=True)
            write_json("bench_jko_fv", {"machine": machine(), "tau": TAU, "T": T,
                                        "rows": rows, "complete": False})
    cols = [("cells", "cells", "{}"), ("scheme", "scheme", "{}"),
            ("per_step", "s/step (wall)", "{:.3f}"), ("cpu_step", "CPU s/step", "{:.3f}"),
            ("wall", "run wall s", "{:.1f}"), ("iters", "CCP/inner iters", "{}"),
            ("cfl", "τ|v|max/h", "{:.2f}"), ("status", "status", "{}"),
            ("locked", "locked", "{}"), ("empty", "empty cells", "{}"),
            ("peak_rss_mib", "peak RSS MiB", "{:.0f}"),
            ("rss_increase_mib", "+RSS MiB", "{:.0f}")]
    print(table(rows, cols))
    path = write_json("bench_jko_fv", {"machine": machine(), "tau": TAU, "T": T,
                                       "rows": rows, "complete": True})
    print(f"wrote {path}")


if __name__ == "__main__":
    main()
