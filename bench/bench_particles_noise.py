"""Cost of token diffusion in the particle step: noisy against noiseless (issue 40 item 2).

``python bench/bench_particles_noise.py [--n N] [--noise-n M] [--out FILE]`` writes
``bench/results/particles_noise.json`` with:

* **steps**: ``simulate`` on ``n`` uniform tokens on S² (2 random symmetric softmax heads,
  ``kernel_backend="auto"``: the fast summation at this size), the Python loop for every
  integrator (the loop a noisy run takes), diagnostics other than the chain-rule balance
  off (the Itô balance too: its Laplacian is ``d`` more kernel sums per state), run
  once to warm up, then with ``S = 1`` and ``S = 3`` steps: ``(t(3) − t(1))/2`` is one
  step with its state evaluation. Pairs: ``euler`` / ``em`` and ``rk4`` / ``strang``,
  ``strang-heun``;
  wall and CPU time.
* **noise**: the token-noise work alone at ``M/2`` tokens (``M = 10⁶`` by default, the
  issue's size, on 2 ranks: each holds ``M/2``): the keyed normals with the projection
  and the Euler–Maruyama update (``em``), and two exact heat-kernel increments
  (``strang`` and ``strang-heun`` draw the same two), wall and CPU time per step.
* **ratio at M**: ``1 + noise(M/2) / step(M/2 per rank)`` with the noiseless step of
  ``bench/results/particles_mpi_idle.json`` (``n = 10⁶``, 2 ranks, RK4, CPU time per
  rank; Euler's step: that times the Euler/RK4 CPU ratio measured at ``n``), plus, for
  ``strang``, its extra field evaluation (measured at ``n`` in **steps**).

``mpirun -n 2 python bench/bench_particles_noise.py --split --n 1000000 --out FILE
[--family euler|rk4]`` measures the steps themselves split over the ranks
(``simulate(comm=...)``): Euler and EM, or RK4, Strang and Strang–Heun.

``python bench/bench_particles_noise.py --compiled --n 4000 --out FILE`` measures the
compiled loop (``engine="compiled"``, direct sums, one process): every integrator's step
with and without noise, and each noisy step's CPU ratio to its noiseless one (``em`` /
``euler``, ``strang`` and ``strang-heun`` / ``rk4``). The keyed noise is drawn in Python
block by block, so this is the noise's cost beside O(n²) compiled sums.

The 1-min load is recorded before and after: on a shared machine compare CPU times.
"""

from __future__ import annotations

import argparse
import json
import os
import time
from pathlib import Path

import numpy as np

HERE = Path(__file__).resolve().parent
RESULTS = HERE / "results"


def _machine() -> dict:
    """CPU, cores, load, date and the thread variables of this process (bench/_common)."""
    import sys

    sys.path.insert(0, str(HERE))
    from _common import parent_machine

    return parent_machine()


def _timed(fn):
    w0, c0 = time.perf_counter(), time.process_time()
    out = fn()
    return out, time.perf_counter() - w0, time.process_time() - c0


def bench_steps(n: int) -> dict:
    from wflow.attention.heads import Attention, Heads
    from wflow.geometry.sphere import sample_uniform
    from wflow.particles import ParticleOptions, simulate

    rng = np.random.default_rng(0)
    x = sample_uniform(n, 3, rng)
    heads = Heads.random_symmetric(2, 3, rng, scale=0.8)
    attn = Attention("softmax", 1.0)
    rows = {}
    for integ, D in (("euler", 0.0), ("em", 0.1), ("rk4", 0.0), ("strang", 0.1),
                     ("strang-heun", 0.1)):
        quiet = {"ito_balance": False} if D > 0 else {}  # a diagnostic, not the step
        warm = ParticleOptions(T=0.01, dt=0.01, integrator=integ, diffusion=D,
                               engine="python", head_rates=False, clusters=False, **quiet)
        simulate(x, heads, attn, options=warm)  # compile / load every kernel first
        t = {}
        for S in (1, 3):
            opts = ParticleOptions(T=0.01 * S, dt=0.01, integrator=integ, diffusion=D,
                                   engine="python", head_rates=False, clusters=False,
                                   **quiet)
            r, wall, cpu = _timed(lambda opts=opts: simulate(x, heads, attn, options=opts))
            # the Itô balance off: a noisy run judges no check (completed)
            assert r.status == ("completed" if D > 0 else "success"), r.message
            t[S] = (wall, cpu, r.extra["kernel"])
        rows[integ] = {"diffusion": D, "step_wall_s": (t[3][0] - t[1][0]) / 2,
                       "step_cpu_s": (t[3][1] - t[1][1]) / 2, "kernel": t[3][2]}
    for noisy, clean in (("em", "euler"), ("strang", "rk4"), ("strang-heun", "rk4")):
        rows[noisy]["cpu_ratio_vs_" + clean] = rows[noisy]["step_cpu_s"] / rows[clean]["step_cpu_s"]
    return rows


#: The integrators of a split run: the noiseless step first, then the noisy ones.
SPLIT_SETS = {"euler": (("euler", 0.0), ("em", 0.1)),
              "rk4": (("rk4", 0.0), ("strang", 0.1), ("strang-heun", 0.1))}


def bench_split(n: int, out: str, repeats: int = 2, family: str = "euler") -> None:
    """Under ``mpirun -n P``: one step of each integrator of ``family`` at ``n`` tokens.

    ``family``: ``"euler"`` (Euler and EM) or ``"rk4"`` (RK4, Strang and Strang–Heun;
    :data:`SPLIT_SETS`). ``simulate(comm=COMM_WORLD)``, ``S = 1`` and ``S = 3`` after a
    warm-up, as :func:`bench_steps`, the integrators alternating ``repeats`` times and the
    fastest of each kept (MPI waits spin, so a rank descheduled by the load inflates the
    other's CPU time too); rank 0 writes the per-rank CPU and wall times (max over ranks)
    and each noisy step's CPU ratio to the family's noiseless one. The Itô balance is
    off (``ito_balance=False``): its Laplacian is a diagnostic, ``d`` more kernel sums per
    state, not the step.
    """
    from mpi4py import MPI

    from wflow.attention.heads import Attention, Heads
    from wflow.geometry.sphere import sample_uniform
    from wflow.particles import ParticleOptions, simulate

    comm = MPI.COMM_WORLD
    rng = np.random.default_rng(0)
    x = sample_uniform(n, 3, rng)
    heads = Heads.random_symmetric(2, 3, rng, scale=0.8)
    attn = Attention("softmax", 1.0)
    rows: dict = {"n": n, "ranks": comm.Get_size(), "load1_start": os.getloadavg()[0],
                  "repeats": repeats}
    pairs = SPLIT_SETS[family]
    rows["family"] = family
    t: dict = {(i, S): [] for i, _ in pairs for S in (1, 3)}
    for S in (0,) + (1, 3) * repeats:  # S = 0: the warm-up; then alternating, min kept
        for integ, D in pairs:
            opts = ParticleOptions(T=0.01 * max(S, 1), dt=0.01, integrator=integ,
                                   diffusion=D, head_rates=False, clusters=False,
                                   ito_balance=False if D > 0 else None)
            comm.Barrier()
            r, wall, cpu = _timed(lambda opts=opts: simulate(x, heads, attn, options=opts,
                                                              comm=comm))
            # the Itô balance off: a noisy run judges no check (completed)
            assert r.status == ("completed" if D > 0 else "success"), r.message
            if S:
                t[integ, S].append((comm.allreduce(wall, op=MPI.MAX),
                                    comm.allreduce(cpu, op=MPI.MAX)))
    for integ, _ in pairs:
        best = {S: np.min(np.array(t[integ, S]), axis=0) for S in (1, 3)}
        rows[integ] = {"step_wall_s_max": float(best[3][0] - best[1][0]) / 2,
                       "step_cpu_s_max": float(best[3][1] - best[1][1]) / 2}
    clean = pairs[0][0]
    for integ, _ in pairs[1:]:
        rows[integ][f"cpu_ratio_vs_{clean}"] = (rows[integ]["step_cpu_s_max"]
                                               / rows[clean]["step_cpu_s_max"])
    rows["load1_end"] = os.getloadavg()[0]
    if comm.Get_rank() == 0:
        rows["machine"] = _machine()
        Path(out).write_text(json.dumps(rows, indent=1))
        print(json.dumps(rows, indent=1))


#: The compiled integrators: (name, D); the noiseless ones first.
COMPILED_SET = (("euler", 0.0), ("rk4", 0.0), ("em", 0.1), ("strang", 0.1),
                ("strang-heun", 0.1), ("strang-heun", 0.0))


def bench_compiled(n: int, out: str, repeats: int = 3) -> None:
    """One step of each of :data:`COMPILED_SET` in the compiled loop at ``n`` tokens.

    Static heads as :func:`bench_steps`, ``kernel_backend="direct"`` (the compiled loop's
    sums), ``engine="compiled"``; ``S = 2`` and ``S = 6`` steps after a warm-up,
    ``(t(6) − t(2))/4`` per step, the integrators alternating ``repeats`` times and the
    fastest kept. Writes the per-step wall and CPU times and the CPU ratios.
    """
    from wflow.attention.heads import Attention, Heads
    from wflow.geometry.sphere import sample_uniform
    from wflow.particles import ParticleOptions, simulate

    rng = np.random.default_rng(0)
    x = sample_uniform(n, 3, rng)
    heads = Heads.random_symmetric(2, 3, rng, scale=0.8)
    attn = Attention("softmax", 1.0)
    rows: dict = {"n": n, "repeats": repeats, "load1_start": os.getloadavg()[0],
                  "engine": "compiled", "kernel_backend": "direct"}
    t: dict = {(i, D, S): [] for i, D in COMPILED_SET for S in (2, 6)}
    for S in (0,) + (2, 6) * repeats:  # S = 0: the warm-up (compile or load the loop)
        for integ, D in COMPILED_SET:
            opts = ParticleOptions(T=0.01 * max(S, 1), dt=0.01, integrator=integ,
                                   diffusion=D, engine="compiled", kernel_backend="direct",
                                   head_rates=False, clusters=False, progress=False)
            r, wall, cpu = _timed(lambda opts=opts: simulate(x, heads, attn, options=opts))
            assert r.status == ("completed" if D > 0 else "success"), r.message
            assert r.extra["engine"] == "compiled"
            if S:
                t[integ, D, S].append((wall, cpu))
    for integ, D in COMPILED_SET:
        best = {S: np.min(np.array(t[integ, D, S]), axis=0) for S in (2, 6)}
        key = integ if D > 0 or integ in ("euler", "rk4") else f"{integ} (D = 0)"
        rows[key] = {"diffusion": D, "step_wall_s": float(best[6][0] - best[2][0]) / 4,
                     "step_cpu_s": float(best[6][1] - best[2][1]) / 4}
    for noisy, clean in (("em", "euler"), ("strang", "rk4"), ("strang-heun", "rk4"),
                         ("strang-heun (D = 0)", "rk4")):
        rows[noisy][f"cpu_ratio_vs_{clean}"] = (rows[noisy]["step_cpu_s"]
                                               / rows[clean]["step_cpu_s"])
    rows["load1_end"] = os.getloadavg()[0]
    rows["machine"] = _machine()
    Path(out).write_text(json.dumps(rows, indent=1))
    print(json.dumps(rows, indent=1))


def bench_noise(M: int) -> dict:
    from wflow.geometry.sphere import sample_uniform
    from wflow.particles.integrators import INTEGRATORS
    from wflow.particles.noise import TokenNoise

    x = sample_uniform(M, 3, np.random.default_rng(1))
    v = np.zeros_like(x)
    noise = TokenNoise(0, M, 3)
    em = INTEGRATORS["em"]
    out = {}
    theta = np.zeros(1)
    _, wall, cpu = _timed(lambda: em.noisy_step(x, 0.01, v, None, theta, theta, theta, None,
                                                None, "transformer", None, diffusion=0.1,
                                                noise=noise.at(0)))
    _, w0, c0 = _timed(lambda: em.step(x, 0.01, v, None, theta, theta, theta, None, None,
                                       "transformer", None))
    out["em"] = {"tokens": M, "noisy_step_wall_s": wall, "noisy_step_cpu_s": cpu,
                 "plain_update_cpu_s": c0, "noise_cpu_s": cpu - c0}
    step = noise.at(1)
    _, wall, cpu = _timed(lambda: step.heat(step.heat(x, 0.0005, 0), 0.0005, 1))
    out["strang"] = {"tokens": M, "two_heat_increments_wall_s": wall,
                     "noise_cpu_s": cpu}
    return out


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--n", type=int, default=100_000)
    ap.add_argument("--noise-n", type=int, default=1_000_000)
    ap.add_argument("--out", default=str(RESULTS / "particles_noise.json"))
    ap.add_argument("--split", action="store_true",
                    help="under mpirun: the --family's steps at --n split over the ranks "
                         "(writes --out)")
    ap.add_argument("--family", choices=sorted(SPLIT_SETS), default="euler",
                    help="with --split: euler (Euler, EM) or rk4 (RK4, Strang, Strang-Heun)")
    ap.add_argument("--compiled", action="store_true",
                    help="the compiled loop's steps at --n, one process (writes --out)")
    args = ap.parse_args()
    if args.compiled:
        bench_compiled(args.n, args.out)
        return
    if args.split:
        bench_split(args.n, args.out, family=args.family)
        return
    res = {"load1_start": os.getloadavg()[0], "cores": os.cpu_count(),
           "date": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())}
    res["steps"] = bench_steps(args.n)
    res["steps_n"] = args.n
    per_rank = args.noise_n // 2
    res["noise"] = bench_noise(per_rank)
    ref = RESULTS / "particles_mpi_idle.json"
    if ref.exists():
        step = json.loads(ref.read_text())["rows"]["n1e6_p2"]["step_cpu_s"]
        s = res["steps"]
        extra = (s["strang"]["step_cpu_s"] - s["rk4"]["step_cpu_s"]) / s["rk4"]["step_cpu_s"]
        extra_h = ((s["strang-heun"]["step_cpu_s"] - s["rk4"]["step_cpu_s"])
                   / s["rk4"]["step_cpu_s"])
        res["ratio_at_1e6_2ranks"] = {
            "noiseless_rk4_step_cpu_s_per_rank": step,
            "source": "bench/results/particles_mpi_idle.json n1e6_p2",
            "em_vs_rk4": 1 + res["noise"]["em"]["noise_cpu_s"] / step,
            # Euler's step: RK4's scaled by their CPU ratio measured at n
            "em_vs_euler": 1 + res["noise"]["em"]["noise_cpu_s"] / (
                step * s["euler"]["step_cpu_s"] / s["rk4"]["step_cpu_s"]),
            "strang": 1 + extra + res["noise"]["strang"]["noise_cpu_s"] / step,
            "strang_extra_evaluation_fraction": extra,
            # the drift-outside splitting: RK4's evaluations, the same two increments
            "strang-heun": 1 + extra_h + res["noise"]["strang"]["noise_cpu_s"] / step,
            "strang-heun_extra_fraction": extra_h,
        }
    res["load1_end"] = os.getloadavg()[0]
    res["machine"] = _machine()
    Path(args.out).write_text(json.dumps(res, indent=1))
    print(json.dumps(res, indent=1))


if __name__ == "__main__":
    main()
