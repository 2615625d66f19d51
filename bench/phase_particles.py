"""Noisy particles on the phase diagram: the check's size and power, and large-n points.

``python bench/phase_particles.py size [--seeds 100]`` runs
:func:`wflow.phase.particle_order_parameter` at the small configuration of the tests
(:data:`wflow.phase.particles.CHECK_CONFIG`) over seeds 0 … S − 1 on the correct model
(false fails at level 0.003) and its power: the particles' diffusion ``D × (1 + s)`` at
held-out seeds 1000 … 1004.

``python bench/phase_particles.py points [--n N] [--ranks P]`` runs the large-``n``
stationary points (β = 1, K = 2.2, continuous; β = 3, K = 0.9 > K_#, discontinuous), each
``mpirun -n P`` over ranks when ``P > 1``, with the time step halved once as the check of
the step's bias, and writes the records the phase-diagram demo plots
(``demos/phase_diagram.py``).

``python bench/phase_particles.py step [--n N] [--reps R]`` times one Strang step at
``n`` tokens (one process, one thread; the fast summation on S²) with the fast
summation's set-up cache off and on (:data:`wflow.kernels._fastsum.PLAN_CACHE`),
alternating ``R`` times in one process, and checks the tokens agree bit for bit.

``python bench/phase_particles.py cost [--n N] [--ranks P] [--steps S]`` runs each point
for ``S`` steps only, and records the seconds per step and the CPU estimate of a full
point (``dt`` and ``dt/2``).

Results: ``bench/results/phase_particles.json`` (merged by section; one process at a time
holds it, a second exits 2 before any work). CPU and wall time and the 1-min load are
recorded beside every row.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))

from _common import RESULTS, load1, parent_machine  # noqa: E402

OUT = RESULTS / "phase_particles.json"
POINTS = [(1.0, 2.2), (3.0, 0.9)]
POINT_RUN = {"T": 24.0, "burn": 4.0, "every": 0.5, "batches": 10}


def _merge(section: str, payload: dict) -> None:
    data = json.loads(OUT.read_text()) if OUT.exists() else {}
    data[section] = payload
    data["machine"] = parent_machine()
    OUT.write_text(json.dumps(data, indent=1) + "\n")
    print(f"wrote {OUT} [{section}]")


def size(seeds: int) -> None:
    """False fails over ``seeds`` seeds, and the power against a wrong diffusion."""
    from wflow.phase.particles import CHECK_CONFIG, particle_order_parameter

    t0, c0, l0 = time.perf_counter(), time.process_time(), load1()
    zs, fails = [], []
    for s in range(seeds):
        r = particle_order_parameter(seed=s, **CHECK_CONFIG)
        zs.append(r.z)
        if not r.passed():
            fails.append(s)
        print(f"seed {s}: z = {r.z:+.2f} (t_crit {r.t_crit():.2f})", flush=True)
    power = {}
    for frac in (-0.1, -0.05, -0.02, 0.02, 0.05, 0.1):
        caught = []
        for s in range(1000, 1005):
            r = particle_order_parameter(seed=s, diffusion=(1 + frac) / 4.4,
                                         **CHECK_CONFIG)
            caught.append(not r.passed())
        power[f"{frac:+g}"] = sum(caught) / len(caught)
        print(f"D x (1 {frac:+g}): caught {sum(caught)}/5", flush=True)
    from wflow.phase.particles import ALPHA

    _merge("size", {"config": CHECK_CONFIG, "alpha": ALPHA,
                    "seeds": seeds, "false_fails": fails, "z": zs,
                    "power_heldout_1000_1004": power,
                    "wall_s": time.perf_counter() - t0, "cpu_s": time.process_time() - c0,
                    "load1": [l0, load1()]})


def _point(beta: float, K: float, n: int, dt: float, ranks: int,
           run: dict | None = None, seed: int = 0) -> dict:
    """One stationary point in a clean process (``mpirun`` over ranks when ``P > 1``)."""
    run = POINT_RUN if run is None else run
    code = ("import json,sys,time,resource;from mpi4py import MPI;"
            "from wflow.phase.particles import particle_order_parameter as p;"
            "c=MPI.COMM_WORLD;t=time.process_time();"
            f"r=p({beta},{K},n={n},dt={dt},seed={seed},comm=c if c.Get_size()>1 else None,"
            f"**{run!r});"
            "cpu=c.allreduce(time.process_time()-t);"
            "rss=c.allreduce(resource.getrusage(resource.RUSAGE_SELF).ru_maxrss,op=MPI.MAX);"
            "c.Get_rank()==0 and print('JSON'+json.dumps({**r.as_dict(),'cpu_s':cpu,"
            "'max_rss_mb':rss/1024}))")
    py = sys.executable
    cmd = [py, "-c", code]
    if ranks > 1:
        cmd = [str(Path(py).with_name("mpirun")), "-n", str(ranks), *cmd]
    env = {**os.environ, "OMP_NUM_THREADS": "1", "OPENBLAS_NUM_THREADS": "1",
           "NUMBA_NUM_THREADS": "1", "PYTHONPATH": str(HERE.parent)}
    out = subprocess.run(cmd, env=env, capture_output=True, text=True, check=True).stdout
    line = next(ln for ln in out.splitlines() if ln.startswith("JSON"))
    return json.loads(line[4:])


def points(n: int, ranks: int, dt: float, only: list[int] | None = None, seed: int = 0,
           halve: bool = True) -> None:
    """The large-``n`` points at ``dt`` and ``dt/2`` (the step's bias).

    Each row is merged into section ``points`` as soon as it is done (a run cut short
    keeps its finished rows); a row replaces an earlier one of the same
    ``(beta, K, n, dt, ranks, seed)``. ``halve=False`` runs ``dt`` only (another seed's
    replicate).
    """
    for i, (beta, K) in enumerate(POINTS):
        if only is not None and i not in only:
            continue
        for h in (dt, dt / 2) if halve else (dt,):
            l0 = load1()
            r = _point(beta, K, n, h, ranks, seed=seed)
            r["load1"] = [l0, load1()]
            print(f"beta={beta} K={K} n={n} dt={h}: m = {r['mean']:.6f} ± {r['se']:.1e} "
                  f"(branch {r['branch_m']:.6f}, z = {r['z']:+.2f}, {r['seconds']:.0f} s, "
                  f"CPU {r['cpu_s']:.0f} s)", flush=True)
            data = json.loads(OUT.read_text()) if OUT.exists() else {}
            key = (r["beta"], r["K"], r["n"], r["dt"], r["ranks"], r["seed"])
            rows = [q for q in data.get("points", {}).get("rows", [])
                    if (q["beta"], q["K"], q["n"], q["dt"], q["ranks"], q["seed"]) != key]
            _merge("points", {"run": POINT_RUN, "rows": [*rows, r]})


def cost(n: int, ranks: int, steps: int) -> None:
    """Seconds per Strang step of each point at ``n`` tokens: a short run of ``steps`` steps.

    The cost of a full point is ``(T/dt)(1 + 2)`` such steps (``dt`` and ``dt/2``); the
    short run includes the start (initial draw, the branch, numba's cache load).
    """
    dt = 0.05
    run = {"T": steps * dt, "burn": 0.0, "every": steps * dt / 2, "batches": 2}
    rows = []
    for beta, K in POINTS:
        l0 = load1()
        r = _point(beta, K, n, dt, ranks, run)
        row = {k: r[k] for k in ("beta", "K", "n", "dt", "ranks", "seconds", "cpu_s",
                                 "max_rss_mb")}
        row.update(steps=steps, load1=[l0, load1()], wall_per_step_s=r["seconds"] / steps,
                   cpu_per_step_s=r["cpu_s"] / steps)
        full = POINT_RUN["T"] / dt * 3
        row["full_point_cpu_s_estimate"] = row["cpu_per_step_s"] * full
        rows.append(row)
        print(f"beta={beta} n={n} ranks={ranks}: {row['wall_per_step_s']:.2f} s wall, "
              f"{row['cpu_per_step_s']:.2f} s CPU (all ranks) per step; a point at dt and "
              f"dt/2: ~{row['full_point_cpu_s_estimate']:.0f} CPU s", flush=True)
    data = json.loads(OUT.read_text()) if OUT.exists() else {}
    old = [q for q in data.get("cost", {}).get("rows", []) if q["n"] != n]
    _merge("cost", {"rows": [*old, *rows]})


def step(n: int, reps: int) -> None:
    """One Strang step at ``n`` tokens, the set-up cache off and on, alternating."""
    import numpy as np

    from wflow.attention.heads import Attention, Heads
    from wflow.geometry.sphere import sample_vmf
    from wflow.kernels import _fastsum as fs
    from wflow.particles import simulate
    from wflow.phase.particles import stable_order_parameter, vmf_kappa_of

    rows = []
    for beta, K in POINTS:
        x0 = sample_vmf(n, np.array([0.0, 0.0, 1.0]),
                        vmf_kappa_of(stable_order_parameter(beta, K)),
                        np.random.default_rng([n, 77]))
        kw = {"integrator": "strang", "diffusion": 1.0 / (2.0 * K), "seed": 1,
              "head_rates": False, "clusters": False, "progress": False,
              "ito_balance": False, "engine": "python", "T": 0.05, "dt": 0.05}
        heads, attn = Heads.bilinear(np.eye(3)), Attention("usa", beta)
        simulate(x0, heads, attn, **kw)  # compile / cache load, both table layouts
        fs.PLAN_CACHE.enabled = False
        simulate(x0, heads, attn, **kw)
        times = {"off": [], "on": []}
        outs = {}
        for _ in range(reps):
            for mode in ("off", "on"):
                fs.PLAN_CACHE.enabled = mode == "on"
                fs.PLAN_CACHE.clear()
                l0, t0, c0 = load1(), time.perf_counter(), time.process_time()
                res = simulate(x0, heads, attn, **kw)
                times[mode].append({"wall_s": time.perf_counter() - t0,
                                    "cpu_s": time.process_time() - c0, "load1": l0})
                outs[mode] = np.asarray(res.x[-1])
                if mode == "on":
                    hits, misses = fs.PLAN_CACHE.hits, fs.PLAN_CACHE.misses
        fs.PLAN_CACHE.enabled = True
        same = outs["off"].tobytes() == outs["on"].tobytes()
        row = {"beta": beta, "K": K, "n": n, "dt": 0.05, "reps": reps, "bitwise_equal": same,
               "plan_hits": hits, "plan_misses": misses, **{
                   f"{k}_{mode}": float(np.median([t[k] for t in times[mode]]))
                   for mode in times for k in ("wall_s", "cpu_s")}, "samples": times}
        row["cpu_ratio_off_on"] = row["cpu_s_off"] / row["cpu_s_on"]
        rows.append(row)
        print(f"beta={beta} n={n}: step CPU {row['cpu_s_off']:.3f} s (cache off) / "
              f"{row['cpu_s_on']:.3f} s (on) = {row['cpu_ratio_off_on']:.2f}x, wall "
              f"{row['wall_s_off']:.3f} / {row['wall_s_on']:.3f} s, bitwise equal {same}, "
              f"plan hits {hits} misses {misses}", flush=True)
    _merge("step", {"threads": 1, "rows": rows})


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    sub = ap.add_subparsers(dest="what", required=True)
    a = sub.add_parser("size")
    a.add_argument("--seeds", type=int, default=100)
    b = sub.add_parser("points")
    b.add_argument("--n", type=int, default=100_000)
    b.add_argument("--ranks", type=int, default=1)
    b.add_argument("--dt", type=float, default=0.05)
    b.add_argument("--only", type=int, nargs="*", help="indices into POINTS (default all)")
    b.add_argument("--seed", type=int, default=0)
    b.add_argument("--no-halve", action="store_true", help="dt only (a replicate)")
    e = sub.add_parser("cost")
    e.add_argument("--n", type=int, default=1_000_000)
    e.add_argument("--ranks", type=int, default=2)
    e.add_argument("--steps", type=int, default=10)
    c = sub.add_parser("step")
    c.add_argument("--n", type=int, default=100_000)
    c.add_argument("--reps", type=int, default=5)
    args = ap.parse_args()
    from wflow.infra.lock import LockedError, acquire

    try:  # one process per results file: sections are merged by read-modify-write
        acquire(OUT)
    except LockedError as e:
        print(e, file=sys.stderr)
        raise SystemExit(2) from None
    if args.what == "size":
        size(args.seeds)
    elif args.what == "cost":
        cost(args.n, args.ranks, args.steps)
    elif args.what == "step":
        step(args.n, args.reps)
    else:
        points(args.n, args.ranks, args.dt, args.only, args.seed, not args.no_halve)


if __name__ == "__main__":
    main()
