"""The published multi-head experiments: time per step, wflow against the published step.

Rows (issue 13): tokens near the octahedron vertices on S² (or the cross-polytope in
d = 5), random symmetric ``D_h = Z + Zᵀ``, value ``−D_h``, ``w_h = 1/H``, softmax β = 1,
explicit Euler ``dt = 5e-3``, diagnostics recorded every 5 steps:

* ``osc``: weights relaxing to the published oscillating frames, ``dD/dt = F(t) − D``;
* ``ou``:  ``dD = (I − D) dt + √2 dW_sym``, Monte-Carlo over ``P`` paths.

Peers, each in its own fresh process with an explicit, recorded environment (no inherited
``OMP_*``, ``MKL_*``, ``NUMBA_*``, ``OPENBLAS_*``; the same thread count for every peer;
``bench/_common.py``), warmed up in that process, timed in alternating rounds
(``--repeats`` rounds, the peer order rotated each round; best and median per row):

* ``faithful``  ``bench/published_faithful.py``: the published step re-implemented in
  float64 NumPy, every diagnostic every step (E, ∂_tE with the Itô term, G², the
  martingale increment, the running integrals);
* ``engine``    the published engine itself (``attn_sphere.simulate_batch``, torch, CPU,
  float64, ``torch.set_num_threads(threads)``), recording every 5 steps as published (it
  computes every diagnostic every step); run by a Python with torch:
  ``--torch-python`` or ``$WFLOW_BENCH_TORCH_PYTHON``, from the checkout
  ``--engine-src`` or ``$WFLOW_BENCH_ENGINE_SRC``. Without both the engine rows are
  skipped, and the run says so;
* ``wflow_rec5`` / ``wflow_rec1``  ``wflow.particles.simulate(..., engine="compiled")``:
  E, E_h, ∂_tE, power, slope², speed², G², Itô, martingale and the running balances
  computed every step, recorded every 5 steps (as the engine) or every step.

With ``--passive-control`` the engine and wflow (rec 5) also run with
``OMP_WAIT_POLICY=PASSIVE`` set on purpose (what importing wflow used to put into the
environment of the engine's process, issue 26).

With the engine, the re-implementation is also run from the engine's own initial data and
normal draws (``--check-steps`` steps, every step recorded) and the largest differences of
``E, G2, dE_int, G2_int, add_int`` are reported: it reproduces the published numbers.

The floor: one core's cost of one kernel evaluation (score, ``exp``, the four row sums and
the per-row work) in wflow's state kernel, and of one ``exp`` (a fresh process with one
thread, process CPU time); a row's floor on ``c`` cores is
``P·H·n²·(ns per evaluation)/c``.

Usage::

    python bench/bench_published.py [--quick] [--repeats 3] [--rows 0 1 ...]
        [--threads 2] [--engine-src PATH] [--torch-python /path/to/python-with-torch]
        [--passive-control] [--cpu-time] [--merge] [--table JSON]

writes ``bench/results/bench_published[_quick][_cpu].json`` (``--cpu-time``: one thread
per peer, process CPU time: robust when other jobs load the machine).
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
from _common import (  # noqa: E402
    call_peer,
    default_threads,
    load1,
    parent_machine,
    peer_env,
    run_peer,
    table,
    write_json,
)

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
#: Peers of a row, in the order of round 0 (rotated by one each round).
PEERS = ("faithful", "wflow_rec5", "wflow_rec1", "engine")


def initial_data(n: int, H: int, d: int):
    """Published-style initial data: float32 tokens (seed 42), ``D = Z + Zᵀ`` (NumPy normals)."""
    x32 = pf.tokens_octahedral(n) if d == 3 else pf.tokens_cross_polytope(n, d)
    Z = np.random.default_rng(42 + H).standard_normal((H, d, d))
    return x32, Z + np.swapaxes(Z, 1, 2)


# --------------------------------------------------------------- peers (fresh processes)
def peer_faithful(kind: str, n: int, H: int, P: int, d: int, steps: int) -> dict:
    """In a fresh process: the NumPy re-implementation, one warm-up, one timed run."""
    x32, D0 = initial_data(n, H, d)
    drift = pf.ou_drift if kind == "ou" else pf.oscillating_drift
    nv = 2.0 if kind == "ou" else 0.0
    pf.simulate_batch(x32, D0, drift, nv, 2 * DT, DT, 5, n_paths=P)  # warm-up
    t0, c0 = time.perf_counter(), time.process_time()
    pf.simulate_batch(x32, D0, drift, nv, steps * DT, DT, 5, n_paths=P)
    return {"s_per_step": (time.perf_counter() - t0) / steps,
            "cpu_per_step": (time.process_time() - c0) / steps, "steps": steps}


def wflow_schedule(kind, H, D0):
    """The wflow schedule of a row: the published frames (``osc``) or the published OU."""
    from wflow.attention.schedules import OrnsteinUhlenbeck, Parametrisation
    from wflow.published.td import published_relaxed

    if kind == "osc":
        return published_relaxed(D0)
    param = Parametrisation("bilinear", np.full(H, 1.0 / H), value_sign=-1.0)
    return OrnsteinUhlenbeck(param, D0, np.eye(D0.shape[-1]), kappa=1.0,
                             sigma0=math.sqrt(2.0), symmetric_noise=True)


def peer_wflow(kind: str, n: int, H: int, P: int, d: int, steps: int,
               record_every: int = 5) -> dict:
    """In a fresh process: ``simulate(engine="compiled")``, one warm-up, one timed run.

    Also times a 1-step run (the per-call overhead: setup, first evaluation, results) so
    that the per-step time can be split into the loop and the call.
    """
    from wflow.attention.heads import Attention
    from wflow.particles import simulate

    x32, D0 = initial_data(n, H, d)
    x0 = x32.astype(np.float64)
    x0 /= np.linalg.norm(x0, axis=1, keepdims=True)
    sched = wflow_schedule(kind, H, D0)
    attn = Attention("softmax", 1.0)
    kw = dict(dt=DT, integrator="euler", record_every=record_every, n_paths=P, rtol=None,
              seed=2000 + H, head_rates=False, clusters=False, engine="compiled",
              progress=False)
    t0 = time.perf_counter()
    simulate(x0, sched, attn, T=10 * DT, **kw)  # warm-up (compile / cache load)
    first = time.perf_counter() - t0
    t0 = time.perf_counter()
    simulate(x0, sched, attn, T=DT, **kw)
    one = time.perf_counter() - t0
    t0, c0 = time.perf_counter(), time.process_time()
    r = simulate(x0, sched, attn, T=steps * DT, **kw)
    wall, cpu = time.perf_counter() - t0, time.process_time() - c0
    if r.status != "success":
        raise RuntimeError(f"wflow run failed: {r.message}")
    return {"s_per_step": wall / steps, "cpu_per_step": cpu / steps, "steps": steps,
            "record_every": record_every, "first_call_s": first, "one_step_call_s": one,
            "E_last": float(np.mean(r.steps["E"][..., -1]))}


def peer_floor() -> dict:
    """In a fresh one-thread process: ns per kernel evaluation of the d = 3 state kernel."""
    from wflow.kernels import _numba as kn
    from wflow.particles import _path_numba as pn

    rng = np.random.default_rng(0)
    out = {}
    for n, H, ito in ((200, 100, False), (200, 100, True), (200, 10, False),
                      (200, 1, False), (1000, 10, False)):
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
        reps = max(3, int(4e6 / (H * n * n)))
        best = math.inf
        for _ in range(5):
            c0 = time.process_time()
            for _ in range(reps):
                pn.state_ser(*args)
            best = min(best, (time.process_time() - c0) / reps)
        key = f"ns_per_eval_n{n}_H{H}" + ("_ito" if ito else "")
        out[key] = 1e9 * best / (H * n * n)
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


# ------------------------------------------------------------------------ the engine
def engine_setup(args) -> tuple[str | None, str]:
    """The Python with torch and the checkout, or ``None`` and why the rows are skipped."""
    if not args.engine_src:
        return None, ("published engine rows skipped: no checkout of attn_sphere "
                      "(--engine-src or $WFLOW_BENCH_ENGINE_SRC)")
    if not (Path(args.engine_src) / "attn_sphere" / "engine.py").is_file():
        return None, (f"published engine rows skipped: {args.engine_src} has no "
                      "attn_sphere/engine.py")
    py = args.torch_python
    if not py or not Path(py).exists():
        return None, ("published engine rows skipped: no Python with torch "
                      "(--torch-python or $WFLOW_BENCH_TORCH_PYTHON; e.g. a separate venv: "
                      "python3.12 -m venv V && V/bin/pip install torch numpy)")
    probe = subprocess.run([py, "-c", "import torch, numpy; print(torch.__version__)"],
                           env=peer_env(1), capture_output=True, text=True)
    if probe.returncode != 0:
        return None, (f"published engine rows skipped: {py} cannot import torch and numpy: "
                      f"{probe.stderr.strip().splitlines()[-1:]}")
    return py, f"published engine: torch {probe.stdout.strip()} in {py}"


def engine_cmd(args, kind, n, H, P, d, steps, *extra):
    return [args.torch_python, str(HERE / "_published_engine.py"), "--engine-src",
            args.engine_src, "--kind", kind, "--n", str(n), "--H", str(H), "--P", str(P),
            "--d", str(d), "--steps", str(steps), "--threads", str(args.threads), *extra]


def reproduction_check(args, kind, H, P, steps, tmp: Path) -> dict:
    """Engine vs re-implementation from the engine's initial data and normals, every step."""
    dump = tmp / f"engine_{kind}_H{H}_P{P}.npz"
    run_peer(engine_cmd(args, kind, 200, H, P, 3, steps, "--dump", str(dump)),
             threads=args.threads, label="engine dump")
    ref = np.load(dump)
    draws = iter(ref["normals"])
    drift = pf.ou_drift if kind == "ou" else pf.oscillating_drift
    nv = 2.0 if kind == "ou" else 0.0
    res = pf.simulate_batch(ref["x0"], ref["D0"], drift, nv, steps * DT, DT, 1, n_paths=P,
                            normals=lambda shape: next(draws))
    out = {"kind": kind, "H": H, "P": P, "steps": steps,
           "x0_float32": bool(ref["x0"].dtype == np.float32)}
    for key in ("E", "G2", "dE_int", "G2_int", "add_int"):
        out[f"max_abs_{key}"] = float(np.max(np.abs(res[key] - ref[key])))
        out[f"scale_{key}"] = float(np.max(np.abs(ref[key])))
    return out


# ------------------------------------------------------------------------ the table
def markdown(payload: dict) -> str:
    """The README table of a results file: times, ratios, the floor and what bounds them."""
    th = payload["threads"]
    peers = payload["peers"]
    head = ["row", "faithful", "engine", "wflow (rec 5)", "wflow (rec 1)",
            f"floor ({th} core{'s' if th > 1 else ''})", "wflow / floor", "× engine",
            "× engine (rec 1)", "engine / floor", "× faithful", "load"]
    if "engine_passive" in peers:
        head.insert(-1, "× engine, both PASSIVE")
    lines = ["| " + " | ".join(head) + " |", "|" + "---|" * len(head)]

    def ms(v):
        return "–" if v is None else (f"{1e3 * v:.3g} ms" if v < 1 else f"{v:.3g} s")

    def x(v, nd=1):
        return "–" if v is None else f"{v:.{nd}f}×"

    for r in payload["rows"]:
        name = (f"{r['kind']} n={r['n']} H={r['H']}" + (f" P={r['P']}" if r["P"] > 1 else "")
                + (f" d={r['d']}" if r["d"] != 3 else ""))
        fl = r.get("floor")
        cells = [name, ms(r.get("faithful")), ms(r.get("engine")), ms(r.get("wflow_rec5")),
                 ms(r.get("wflow_rec1")), ms(fl),
                 "–" if fl is None else f"{r['wflow_rec5'] / fl:.2f}",
                 x(r.get("ratio_engine")), x(r.get("ratio_engine_rec1")),
                 "–" if fl is None or "engine" not in r else x(r["engine"] / fl),
                 x(r.get("ratio_faithful")), f"{r['load_min']:.1f}–{r['load_max']:.1f}"]
        if "engine_passive" in peers:
            cells.insert(-1, x(r.get("ratio_passive_both")))
        lines.append("| " + " | ".join(cells) + " |")
    return "\n".join(lines)


# ------------------------------------------------------------------------------ main
def measure(args, peer: str, row) -> dict:
    """One timed run of ``peer`` on ``row`` in a fresh process (see the module docstring)."""
    kind, n, H, P, d, fs, ws, es = row
    case = dict(kind=kind, n=n, H=H, P=P, d=d)
    passive = {"OMP_WAIT_POLICY": "PASSIVE"} if peer.endswith("_passive") else None
    base = peer.removesuffix("_passive")
    if base == "faithful":
        return call_peer("bench_published:peer_faithful", threads=args.threads, steps=fs,
                         **case)
    if base.startswith("wflow"):
        rec = 1 if base == "wflow_rec1" else 5
        return call_peer("bench_published:peer_wflow", threads=args.threads, steps=ws,
                         record_every=rec, extra_env=passive, **case)
    return run_peer(engine_cmd(args, kind, n, H, P, d, es, "--time"), threads=args.threads,
                    extra_env=passive, label="engine")


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--quick", action="store_true")
    ap.add_argument("--repeats", type=int, default=3, help="alternating rounds per row")
    ap.add_argument("--rows", type=int, nargs="*")
    ap.add_argument("--threads", type=int, default=default_threads(),
                    help="threads of every peer (default: $WFLOW_BENCH_THREADS or the cores)")
    ap.add_argument("--engine-src", default=os.environ.get("WFLOW_BENCH_ENGINE_SRC"),
                    help="checkout of the published engine (attn_sphere)")
    ap.add_argument("--torch-python", default=os.environ.get(
        "WFLOW_BENCH_TORCH_PYTHON", os.environ.get("TORCH_PYTHON")),
        help="a Python with torch and numpy (a separate venv; torch is no wflow dependency)")
    ap.add_argument("--passive-control", action="store_true",
                    help="also run engine and wflow with OMP_WAIT_POLICY=PASSIVE set")
    ap.add_argument("--cpu-time", action="store_true",
                    help="one thread per peer, process CPU time (robust when other jobs load "
                    "the machine); writes bench_published[_quick]_cpu.json")
    ap.add_argument("--check-steps", type=int, default=40)
    ap.add_argument("--out", help="result name (default bench_published[_quick])")
    ap.add_argument("--merge", action="store_true",
                    help="with --rows: replace those rows in the existing results file "
                    "(rerun rows measured under load); the file keeps each row's own loads")
    ap.add_argument("--table", metavar="JSON", help="print the markdown table of a results "
                    "file and exit")
    args = ap.parse_args()
    if args.table:
        print(markdown(json.loads(Path(args.table).read_text())))
        return 0
    if args.cpu_time:
        args.threads = 1
    clock = "cpu_per_step" if args.cpu_time else "s_per_step"
    rows = QUICK if args.quick else ROWS
    if args.rows:
        rows = [rows[i] for i in args.rows]
    meta = parent_machine()
    print(f"machine: {meta['cpu']}, {meta['cores']} cores, load {meta['loadavg']}, "
          f"{args.threads} threads per peer", flush=True)
    py, why = engine_setup(args)
    print(why, flush=True)
    peers = [p for p in PEERS if p != "engine" or py]
    if args.passive_control:
        peers += ["wflow_rec5_passive"] + (["engine_passive"] if py else [])
    checks = []
    if py:
        with tempfile.TemporaryDirectory() as tmp:
            for kind, H, P in (("osc", 10, 1), ("ou", 10, 10)):
                checks.append(reproduction_check(args, kind, H, P, args.check_steps, Path(tmp)))
                print("reproduction:", {k: v for k, v in checks[-1].items()
                                        if k.startswith("max")}, flush=True)
    print("floor (one core) ...", flush=True)
    floor_rec = call_peer("bench_published:peer_floor", threads=1)
    floor = {k: v for k, v in floor_rec.items() if k.startswith("ns_")}
    print({k: round(v, 3) for k, v in floor.items()}, flush=True)
    results = []
    for row in rows:
        kind, n, H, P, d = row[:5]
        rec = {"kind": kind, "n": n, "H": H, "P": P, "d": d, "rounds": []}
        for r in range(args.repeats):
            order = peers[r % len(peers):] + peers[:r % len(peers)]
            rnd = {"order": order}
            for peer in order:
                rnd[peer] = measure(args, peer, row)
            rec["rounds"].append(rnd)
        for peer in peers:
            vals = [rnd[peer][clock] for rnd in rec["rounds"]]
            rec[peer] = min(vals)
            rec[peer + "_median"] = float(np.median(vals))
            rec[peer + "_cpu"] = min(rnd[peer]["cpu_per_step"] for rnd in rec["rounds"])
        loads = [v for rnd in rec["rounds"] for p in peers
                 for v in (rnd[p]["load_before"], rnd[p]["load_after"])]
        rec["load_min"], rec["load_max"] = min(loads), max(loads)
        for peer in peers:
            if peer not in ("wflow_rec5", "wflow_rec1", "wflow_rec5_passive"):
                rec[f"ratio_{peer}"] = rec[peer] / rec["wflow_rec5"]
                rec[f"ratio_{peer}_rec1"] = rec[peer] / rec["wflow_rec1"]
        if "engine_passive" in peers:
            rec["ratio_passive_both"] = rec["engine_passive"] / rec["wflow_rec5_passive"]
        key = f"ns_per_eval_n{n}_H{H}" if d == 3 else None
        if d == 3:
            ns = floor.get(key, floor["ns_per_eval_n200_H100"])
            if kind == "ou":
                ns *= floor["ns_per_eval_n200_H100_ito"] / floor["ns_per_eval_n200_H100"]
            rec["evals_per_step"] = P * H * n * n
            rec["ns_per_eval"] = ns
            rec["floor"] = P * H * n * n * ns * 1e-9 / args.threads
            rec["wflow_over_floor"] = rec["wflow_rec5"] / rec["floor"]
        results.append(rec)
        print(f"{kind} n={n} H={H} P={P} d={d}: "
              + ", ".join(f"{p} {1e3 * rec[p]:.3f} ms" for p in peers)
              + (f", floor {1e3 * rec['floor']:.3f} ms" if "floor" in rec else "")
              + f" (load {rec['load_min']:.1f}-{rec['load_max']:.1f})", flush=True)
    print()
    cols = [("kind", "kind", "{}"), ("n", "n", "{}"), ("H", "H", "{}"), ("P", "paths", "{}"),
            ("d", "d", "{}")]
    cols += [(p, f"{p} s/step", "{:.3e}") for p in peers]
    cols += [(f"ratio_{p}", f"x {p}", "{:.1f}") for p in peers if not p.startswith("wflow")]
    cols += [("floor", f"floor ({args.threads} cores)", "{:.2e}"),
             ("load_max", "load max", "{:.1f}")]
    print(table(results, cols))
    name = args.out or ("bench_published" + ("_quick" if args.quick else "")
                        + ("_cpu" if args.cpu_time else ""))
    payload = {
        "machine": meta, "machine_end_load1": load1(), "threads": args.threads,
        "engine": why, "rows": results, "floor": floor, "floor_peer": floor_rec,
        "clock": "cpu, 1 thread" if args.cpu_time else "wall",
        "reproduction": checks, "dt": DT, "peers": peers,
        "command": " ".join(["python bench/bench_published.py", *sys.argv[1:]])}
    prev = HERE / "results" / f"{name}.json"
    if args.merge and prev.is_file():
        old = json.loads(prev.read_text())
        key = ("kind", "n", "H", "P", "d")
        new = {tuple(r[k] for k in key): r for r in results}
        if old.get("peers") == peers and old.get("threads") == args.threads:
            merged = [new.pop(tuple(r[k] for k in key), r) for r in old["rows"]]
            cmd = payload["command"]
            payload = old | {"rows": merged + list(new.values())}
            payload.setdefault("reruns", []).append(
                {"machine": meta, "rows": [list(r[:5]) for r in rows], "command": cmd,
                 "floor": floor})
        else:
            print("--merge: peers or threads differ from the existing file; not merged")
    print()
    print(markdown(payload))
    path = write_json(name, payload)
    print(f"wrote {path}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
