"""The published multi-head experiments: time per step, wflow against the published step.

Rows (issue 13): tokens near the octahedron vertices on S² (or the cross-polytope in
d = 5), random symmetric ``D_h = Z + Zᵀ``, value ``−D_h``, ``w_h = 1/H``, softmax β = 1,
explicit Euler ``dt = 5e-3``, diagnostics recorded every 5 steps:

* ``osc``: weights relaxing to the published oscillating frames, ``dD/dt = F(t) − D``;
* ``ou``:  ``dD = (I − D) dt + √2 dW_sym``, Monte-Carlo over ``P`` paths.

Implementations, timed in one run, interleaved, ``--repeats`` rounds (best per row):

* ``faithful``  ``bench/published_faithful.py``: the published step re-implemented in
  float64 NumPy, every diagnostic every step (E, ∂_tE with the Itô term, G², the
  martingale increment, the running integrals);
* ``engine``    the published engine itself (``--engine-src PATH`` to its checkout, run by
  ``--torch-python`` in a subprocess; optional);
* ``wflow``     ``wflow.particles.simulate(..., engine="compiled")``: E, E_h, ∂_tE, power,
  slope², speed², G², Itô, martingale and the running balances every step.

With the engine, the re-implementation is also run from the engine's own initial data and
normal draws (``--check-steps`` steps, every step recorded) and the largest differences of
``E, G2, dE_int, G2_int, add_int`` are reported: it reproduces the published numbers.

The floor: one core's cost of one kernel evaluation (score, ``exp``, the four row sums)
in wflow's state kernel at n = 200, and of one ``exp``; a row's floor on ``c`` cores is
``P·H·n²·(ns per evaluation)/c``.

Usage::

    python bench/bench_published.py [--quick] [--repeats 2] [--rows 0 1 ...]
        [--engine-src PATH --torch-python /path/to/python-with-torch]

writes ``bench/results/bench_published[_quick].json``.
"""

from __future__ import annotations

import argparse
import json
import math
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import numpy as np

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))
import published_faithful as pf  # noqa: E402
from _common import machine, table, write_json  # noqa: E402

from wflow.attention.heads import Attention  # noqa: E402
from wflow.attention.schedules import OrnsteinUhlenbeck, Parametrisation  # noqa: E402
from wflow.particles import simulate  # noqa: E402
from wflow.published.td import published_relaxed  # noqa: E402

DT = 5e-3
#: (kind, n, H, P, d, faithful steps, wflow steps, engine steps)
ROWS = [
    ("osc", 200, 1, 1, 3, 400, 4000, 400),
    ("osc", 200, 10, 1, 3, 100, 2000, 100),
    ("osc", 200, 100, 1, 3, 20, 400, 20),
    ("osc", 1000, 10, 1, 3, 8, 200, 8),
    ("ou", 200, 10, 10, 3, 20, 400, 20),
    ("ou", 200, 100, 10, 3, 4, 40, 4),
    ("osc", 200, 10, 1, 5, 100, 1000, 100),
    ("ou", 200, 10, 10, 5, 10, 200, 10),
]
QUICK = [(k, n, H, P, d, max(2, f // 10), max(20, w // 10), max(2, e // 10))
         for k, n, H, P, d, f, w, e in (ROWS[0], ROWS[1], ROWS[4])]


def initial_data(n: int, H: int, d: int):
    """Published-style initial data: float32 tokens (seed 42), ``D = Z + Zᵀ`` (NumPy normals)."""
    x32 = pf.tokens_octahedral(n) if d == 3 else pf.tokens_cross_polytope(n, d)
    Z = np.random.default_rng(42 + H).standard_normal((H, d, d))
    return x32, Z + np.swapaxes(Z, 1, 2)


def time_faithful(kind, n, H, P, d, steps):
    x32, D0 = initial_data(n, H, d)
    drift = pf.ou_drift if kind == "ou" else pf.oscillating_drift
    nv = 2.0 if kind == "ou" else 0.0
    pf.simulate_batch(x32, D0, drift, nv, 2 * DT, DT, 5, n_paths=P)  # warm-up
    t0, c0 = time.perf_counter(), time.process_time()
    pf.simulate_batch(x32, D0, drift, nv, steps * DT, DT, 5, n_paths=P)
    return (time.perf_counter() - t0) / steps, (time.process_time() - c0) / steps


def wflow_schedule(kind, H, D0):
    if kind == "osc":
        return published_relaxed(D0)
    param = Parametrisation("bilinear", np.full(H, 1.0 / H), value_sign=-1.0)
    return OrnsteinUhlenbeck(param, D0, np.eye(D0.shape[-1]), kappa=1.0,
                             sigma0=math.sqrt(2.0), symmetric_noise=True)


def time_wflow(kind, n, H, P, d, steps):
    x32, D0 = initial_data(n, H, d)
    x0 = x32.astype(np.float64)
    x0 /= np.linalg.norm(x0, axis=1, keepdims=True)
    sched = wflow_schedule(kind, H, D0)
    kw = dict(dt=DT, integrator="euler", record_every=5, n_paths=P, seed=2000 + H,
              head_rates=False, clusters=False, engine="compiled", progress=False)
    simulate(x0, sched, Attention("softmax", 1.0), T=10 * DT, **kw)  # warm-up (compile / cache)
    t0, c0 = time.perf_counter(), time.process_time()
    r = simulate(x0, sched, Attention("softmax", 1.0), T=steps * DT, **kw)
    wall, cpu = time.perf_counter() - t0, time.process_time() - c0
    if r.status != "success":
        raise RuntimeError(f"wflow run failed: {r.message}")
    return wall / steps, cpu / steps


def engine_cmd(args, kind, n, H, P, d, steps, *extra):
    return [args.torch_python, str(HERE / "_published_engine.py"), "--engine-src",
            args.engine_src, "--kind", kind, "--n", str(n), "--H", str(H), "--P", str(P),
            "--d", str(d), "--steps", str(steps), *extra]


def time_engine(args, kind, n, H, P, d, steps):
    out = subprocess.run(engine_cmd(args, kind, n, H, P, d, steps, "--time"), check=True,
                         capture_output=True, text=True).stdout
    rec = json.loads(out.strip().splitlines()[-1])
    return rec["s_per_step"], rec["cpu_per_step"], rec


def reproduction_check(args, kind, H, P, steps, tmp: Path) -> dict:
    """Engine vs re-implementation from the engine's initial data and normals, every step."""
    dump = tmp / f"engine_{kind}_H{H}_P{P}.npz"
    subprocess.run(engine_cmd(args, kind, 200, H, P, 3, steps, "--dump", str(dump)),
                   check=True, capture_output=True, text=True)
    ref = np.load(dump)
    draws = iter(ref["normals"])
    drift = pf.ou_drift if kind == "ou" else pf.oscillating_drift
    nv = 2.0 if kind == "ou" else 0.0
    res = pf.simulate_batch(ref["x0"], ref["D0"], drift, nv, steps * DT, DT, 1, n_paths=P,
                            normals=lambda shape: next(draws))
    out = {"kind": kind, "H": H, "P": P, "steps": steps,
           "x0_float32": bool(ref["x0"].dtype == np.float32)}
    for key in ("E", "G2", "dE_int", "G2_int", "add_int"):
        diff = float(np.max(np.abs(res[key] - ref[key])))
        out[f"max_abs_{key}"] = diff
        out[f"scale_{key}"] = float(np.max(np.abs(ref[key])))
    return out


def floor_ns() -> dict:
    """One core: ns per kernel evaluation of the d = 3 state kernel (n = 200), per exp."""
    import numba

    from wflow.kernels import _numba as kn
    from wflow.particles import _path_numba as pn

    old = numba.get_num_threads()
    numba.set_num_threads(1)
    try:
        rng = np.random.default_rng(0)
        out = {}
        for H, ito in ((100, False), (100, True), (1, False)):
            n = 200
            x = rng.standard_normal((n, 3))
            x /= np.linalg.norm(x, axis=1, keepdims=True)
            xT = np.ascontiguousarray(x.T)
            nx = np.sum(xT * xT, axis=0)
            Z = rng.standard_normal((H, 3, 3))
            A = Z + np.swapaxes(Z, 1, 2)
            QK = np.broadcast_to(np.eye(3), (H, 3, 3)).copy()
            w = np.full(H, 1.0 / H)
            m = np.full(n, 1.0 / n)
            BUF, PE, PG, PI, PT = pn._workspace(H, 3, n)
            vel = np.zeros((3, n))
            nblk = -(-n // pn.PROWS)
            args = (nblk, True, ito, 1.0, xT, nx, A, -A, QK, A, w, w, m, 1.0, 0, True, True,
                    False, vel, PE, PG, PI, PT, BUF)
            pn.state_ser(*args)
            reps = max(3, 200 // H)
            best = math.inf
            for _ in range(5):
                c0 = time.process_time()
                for _ in range(reps):
                    pn.state_ser(*args)
                best = min(best, (time.process_time() - c0) / reps)
            out[f"ns_per_eval_H{H}" + ("_ito" if ito else "")] = 1e9 * best / (H * n * n)
        s = rng.uniform(-5.0, 5.0, 100_000)
        e = np.empty_like(s)
        kn.fexp_array(s, e)
        best = math.inf
        for _ in range(5):
            c0 = time.process_time()
            for _ in range(20):
                kn.fexp_array(s, e)
            best = min(best, (time.process_time() - c0) / 20)
        out["ns_per_exp"] = 1e9 * best / s.size
        return out
    finally:
        numba.set_num_threads(old)


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--quick", action="store_true")
    ap.add_argument("--repeats", type=int, default=2)
    ap.add_argument("--rows", type=int, nargs="*")
    ap.add_argument("--engine-src", help="checkout of the published engine (attn_sphere)")
    ap.add_argument("--torch-python", default=os.environ.get("TORCH_PYTHON", sys.executable))
    ap.add_argument("--check-steps", type=int, default=40)
    args = ap.parse_args()
    rows = QUICK if args.quick else ROWS
    if args.rows:
        rows = [rows[i] for i in args.rows]
    meta = machine()
    print(f"machine: {meta['cpu']}, {meta['cores']} cores, numba threads "
          f"{meta['numba_threads']}, load {meta['loadavg']}", flush=True)
    checks = []
    if args.engine_src:
        with tempfile.TemporaryDirectory() as tmp:
            for kind, H, P in (("osc", 10, 1), ("ou", 10, 10)):
                checks.append(reproduction_check(args, kind, H, P, args.check_steps, Path(tmp)))
                print("reproduction:", checks[-1], flush=True)
    results = []
    for kind, n, H, P, d, fs, ws, es in rows:
        rec = {"kind": kind, "n": n, "H": H, "P": P, "d": d, "rounds": []}
        for _ in range(args.repeats):
            rnd = {"load_before": os.getloadavg()[0]}
            rnd["faithful"], rnd["faithful_cpu"] = time_faithful(kind, n, H, P, d, fs)
            rnd["wflow"], rnd["wflow_cpu"] = time_wflow(kind, n, H, P, d, ws)
            if args.engine_src:
                rnd["engine"], rnd["engine_cpu"], info = time_engine(args, kind, n, H, P, d, es)
                rec["torch"] = info["torch"]
            rnd["load_after"] = os.getloadavg()[0]
            rec["rounds"].append(rnd)
        for key in ("faithful", "wflow", "engine"):
            vals = [r[key] for r in rec["rounds"] if key in r]
            if vals:
                rec[key] = min(vals)
        rec["vs_faithful"] = rec["faithful"] / rec["wflow"]
        if "engine" in rec:
            rec["vs_engine"] = rec["engine"] / rec["wflow"]
        rec["load"] = max(max(r["load_before"], r["load_after"]) for r in rec["rounds"])
        results.append(rec)
        print(f"{kind} n={n} H={H} P={P} d={d}: faithful {1e3 * rec['faithful']:.3f} ms, "
              f"wflow {1e3 * rec['wflow']:.3f} ms, engine "
              f"{1e3 * rec['engine']:.3f} ms" if "engine" in rec else
              f"{kind} n={n} H={H} P={P} d={d}: faithful {1e3 * rec['faithful']:.3f} ms, "
              f"wflow {1e3 * rec['wflow']:.3f} ms", f"(load {rec['load']:.1f})", flush=True)
    floor = floor_ns()
    for rec in results:
        ns = floor["ns_per_eval_H100_ito" if rec["kind"] == "ou" else "ns_per_eval_H100"]
        if rec["d"] == 3:
            rec["floor_2cores"] = rec["P"] * rec["H"] * rec["n"] ** 2 * ns * 1e-9 / 2
    print()
    print(table(results, [("kind", "kind", "{}"), ("n", "n", "{}"), ("H", "H", "{}"),
                          ("P", "paths", "{}"), ("d", "d", "{}"),
                          ("faithful", "faithful s/step", "{:.3e}"),
                          ("engine", "engine s/step", "{:.3e}"),
                          ("wflow", "wflow s/step", "{:.3e}"),
                          ("vs_faithful", "x faithful", "{:.1f}"),
                          ("vs_engine", "x engine", "{:.1f}"),
                          ("floor_2cores", "floor (2 cores)", "{:.2e}"),
                          ("load", "load", "{:.1f}")]))
    print("floor (one core):", {k: round(v, 3) for k, v in floor.items()})
    path = write_json("bench_published" + ("_quick" if args.quick else ""),
                      {"machine": meta, "rows": results, "floor": floor,
                       "reproduction": checks, "dt": DT, "record_every": 5})
    print(f"wrote {path}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
