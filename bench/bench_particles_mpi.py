"""Time and memory of the particle system split over MPI ranks (issue 31).

``python bench/bench_particles_mpi.py [--quick] [--rows ROW ...]`` runs every row in its
own clean process (``mpirun -n P python bench/_peer.py ...`` for ``P > 1``, the explicit
environment of :func:`_common.peer_env`, one thread per rank) and writes
``bench/results/particles_mpi.json``.

Each row runs ``simulate(x0, heads, softmax, comm=...)`` on ``n`` uniform tokens with ``H``
random symmetric heads, RK4, the DEFAULT diagnostics (cluster count, per-head rates,
every step recorded), twice: ``S = 1`` and ``S = 3`` steps. ``t(S) = init + (S + 1) rec +
S step``, so ``(t(3) − t(1))/2`` is the cost of one RK4 step with its record. Measured per
rank: wall and CPU time, the time spent inside MPI calls (a proxy communicator times
every collective and ring exchange: communication plus waiting for the slower rank),
peak RSS (``getrusage``) and the RSS before the run (imports, compiled kernels, ``x0``).
Recorded: the 1-min load before and after, the environment, the kernel back-end and
degree. On a shared machine the load decides how much of the 1 → 2 rank speed-up shows:
compare the CPU time (work) with the wall time (work plus waiting for a core).

The memory rows (:data:`MEMORY_ROWS`, ``--out bench/results/particles_mpi_ranks.json
--rows mem_...``) run one step only (no step cost: ``None``): the largest rank's peak RSS
at n = 10⁵ and 10⁶ on 1, 2 and 4 ranks, unmasked and causal; ``--table`` prints them
beside the per-rank memory estimate (:func:`rank_memory_table`, quoted in
``docs/guide/cli.md``).
"""

from __future__ import annotations

import argparse
import json
import resource
import sys
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))

from _common import RESULTS, call_peer, load1, parent_machine  # noqa: E402

_TIMED = ("Alltoall", "Allgather", "allgather", "allreduce", "Allreduce", "bcast",
          "Sendrecv_replace", "sendrecv", "barrier")


class TimedComm:
    """A communicator whose MPI calls are timed (``seconds``, ``calls``); the rest delegated."""

    def __init__(self, comm) -> None:
        self._comm = comm
        self.seconds = 0.0
        self.calls = 0

    def __getattr__(self, name):
        attr = getattr(self._comm, name)
        if name not in _TIMED:
            return attr

        def timed(*args, **kwargs):
            t0 = time.perf_counter()
            try:
                return attr(*args, **kwargs)
            finally:
                self.seconds += time.perf_counter() - t0
                self.calls += 1

        return timed


def _rss_mb() -> float:
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024.0


def _current_rss_mb() -> float:
    for line in Path("/proc/self/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return float(line.split()[1]) / 1024.0
    return float("nan")


def step_peer(n: int, d: int = 3, H: int = 4, beta: float = 1.0, steps: tuple = (1, 3),
              backend: str = "auto", seed: int = 0, engine: str = "auto",
              mask: str = "none") -> dict:
    """In the peer process (every rank): the two runs of the row, per-rank measurements.

    ``mask = "causal"``: the decoder system (token ``i`` attends to ``j ≤ i``, the tokens in
    their order; the causal fast sums and their exclusive scan over ranks).
    """
    import numpy as np
    from mpi4py import MPI

    from wflow.attention.heads import Attention, Heads
    from wflow.attention.mask import get_mask
    from wflow.geometry.sphere import sample_uniform
    from wflow.particles import simulate

    world = MPI.COMM_WORLD
    P = world.Get_size()
    rng = np.random.default_rng(seed)
    heads = Heads.random_symmetric(H, d, rng, scale=0.5)
    attn = Attention("softmax", beta, mask=get_mask(mask, "mask"))
    dt = 0.01
    # warm-up: compile / load every kernel on a small system with the same settings (and
    # the fast sums, which "auto" leaves out at this size: else compiled in the first run)
    xw = sample_uniform(2000, d, np.random.default_rng(1))
    for kb in dict.fromkeys([backend] + (["fastsum"] if d == 3 and backend == "auto" else [])):
        simulate(xw, heads, attn, T=dt, dt=dt, kernel_backend=kb,
                 comm=world if P > 1 else None, engine=engine, rtol=None)
    x0 = sample_uniform(n, d, rng)
    rss0 = _current_rss_mb()
    runs = []
    for S in steps:
        comm = TimedComm(world) if P > 1 else None
        w0, c0 = time.perf_counter(), time.process_time()
        res = simulate(x0, heads, attn, T=S * dt, dt=dt, kernel_backend=backend, comm=comm,
                       engine=engine, rtol=None)  # the bare run's cost
        wall, cpu = time.perf_counter() - w0, time.process_time() - c0
        runs.append({"steps": S, "wall_s": wall, "cpu_s": cpu, "status": res.status,
                     "comm_s": comm.seconds if comm else 0.0,
                     "comm_calls": comm.calls if comm else 0,
                     "kernel": res.extra.get("kernel", {}).get("calls"),
                     "degree": res.extra.get("kernel", {}).get("max_degree"),
                     "n_clusters": float(res.history["n_clusters"][0, -1]),
                     "E_T": float(res.history["E"][0, -1])})
        del res
    me = {"rank": world.Get_rank(), "rss_before_mb": rss0, "peak_rss_mb": _rss_mb(),
          "runs": runs}
    ranks = world.allgather(me)
    a, b = ranks[0]["runs"][0], ranks[0]["runs"][-1]
    ds = b["steps"] - a["steps"]
    # one run (a memory row): no step cost (the difference of two runs), None
    per = {k: (max((r["runs"][-1][k] - r["runs"][0][k]) / ds for r in ranks) if ds else None)
           for k in ("wall_s", "cpu_s", "comm_s")}
    if world.Get_rank() != 0:  # one JSON line per row: rank 0's (it holds every rank's)
        import os

        sys.stdout = open(os.devnull, "w")  # noqa: SIM115
    return {"n": n, "d": d, "H": H, "beta": beta, "mask": mask, "ranks": P, "backend": backend,
            "engine": "python (split over ranks)" if P > 1 else engine,
            "step_wall_s": per["wall_s"], "step_cpu_s": per["cpu_s"],
            "step_comm_s": per["comm_s"], "peak_rss_mb_max": max(r["peak_rss_mb"] for r in ranks),
            "rss_before_mb_max": max(r["rss_before_mb"] for r in ranks),
            "per_rank": ranks, "load1_end": load1()}


ROWS = {
    # d = 3, H = 4, the fast summation (auto)
    "n1e5_p1": dict(n=100_000, ranks=1), "n1e5_p2": dict(n=100_000, ranks=2),
    "n1e6_p1": dict(n=1_000_000, ranks=1), "n1e6_p2": dict(n=1_000_000, ranks=2),
    # 10⁷ tokens split over 2 ranks (≈ 5.4 GB per rank): one and two steps
    "n1e7_p2": dict(n=10_000_000, ranks=2, steps=(1, 2)),
    # the same system in one process (≈ 10.7 GB by the estimate)
    "n1e7_p1": dict(n=10_000_000, ranks=1, steps=(1, 2)),
    # d = 64, direct sums (the ring)
    "d64_n1e4_p1": dict(n=10_000, d=64, ranks=1, steps=(1, 2)),
    # the same one-process run on the Python loop (the split engine's loop: BLAS score
    # blocks for wide heads, no pair-once), the like-for-like 1-rank reference
    "d64_n1e4_p1_python": dict(n=10_000, d=64, ranks=1, steps=(1, 2), engine="python"),
    "d64_n1e4_p2": dict(n=10_000, d=64, ranks=2, steps=(1, 2)),
    "d64_n2e4_p1_python": dict(n=20_000, d=64, ranks=1, steps=(1, 2), engine="python"),
    "d64_n2e4_p2": dict(n=20_000, d=64, ranks=2, steps=(1, 2)),
    "d64_n1e5_p2": dict(n=100_000, d=64, ranks=2, steps=(1, 2)),
    # the decoder system at 10⁶ tokens on S² over 2 ranks (β = 4, H = 4, RK4, the default
    # diagnostics; target ≤ 1.3 GB per rank), beside the same system without the mask
    "causal_b4_n1e6_p2": dict(n=1_000_000, beta=4.0, mask="causal", ranks=2, steps=(1, 2)),
    "b4_n1e6_p2": dict(n=1_000_000, beta=4.0, ranks=2, steps=(1, 2)),
    # the same pair at 10⁵ tokens, on one rank and on two (the causal step's cost against
    # the unmasked one; ``--code`` runs a row on another checkout, e.g. the code before)
    "causal_b4_n1e5_p1": dict(n=100_000, beta=4.0, mask="causal", ranks=1, steps=(1, 2)),
    "b4_n1e5_p1": dict(n=100_000, beta=4.0, ranks=1, steps=(1, 2)),
    "causal_b4_n1e5_p2": dict(n=100_000, beta=4.0, mask="causal", ranks=2, steps=(1, 2)),
    "b4_n1e5_p2": dict(n=100_000, beta=4.0, ranks=2, steps=(1, 2)),
}
#: Peak memory per rank against the rank count (``particles_mpi_ranks.json``, the per-rank
#: memory estimate's rows): one RK4 step each (memory, not time: no step cost), n = 10⁵
#: and 10⁶ on P = 1, 2, 4 ranks, unmasked (β = 1) and causal (β = 4: the kept coefficients
#: of the causal fast sums, :func:`wflow.kernels.memory.causal_kept_bytes`).
MEMORY_ROWS = {
    f"mem_{tag}n{n}_p{P}": dict(n=int(float(n)), ranks=P, steps=(1,), **kw)
    for tag, kw in (("", {}), ("causal_b4_", dict(beta=4.0, mask="causal")))
    for n in ("1e5", "1e6") for P in (1, 2, 4)
}
ROWS.update(MEMORY_ROWS)
QUICK = ("n1e5_p1", "n1e5_p2")


#: CPU-detection overrides of this machine's OpenBLAS passed to every peer when set (without
#: ``OPENBLAS_L2_SIZE`` the d = 64 BLAS score blocks crash in OpenBLAS on this VM, measured).
_KEEP = ("OPENBLAS_L2_SIZE",)


def run_row(name: str, spec: dict, threads: int = 1, code: str | None = None) -> dict:
    """One row in its own process (``mpirun -n P`` for ``P > 1``).

    ``code``: a folder holding the ``wflow`` package to import instead of this checkout's
    (a copy of an earlier commit: ``git archive REV wflow | tar -x -C DIR``).
    """
    import os

    extra = {k: os.environ[k] for k in _KEEP if k in os.environ}
    if code is not None:
        extra["PYTHONPATH"] = os.pathsep.join([str(Path(code).resolve()), str(HERE)])
    spec = dict(spec)
    P = int(spec.pop("ranks"))
    python = sys.executable
    mpirun = str(Path(sys.executable).parent / "mpirun")
    if P == 1:
        rec = call_peer("bench_particles_mpi:step_peer", threads=threads, timeout=7200,
                        extra_env=extra, **spec)
    else:
        from _common import peer_env, recorded_env

        env = peer_env(threads, extra)
        cmd = [mpirun, "-n", str(P), python, str(HERE / "_peer.py"),
               "bench_particles_mpi:step_peer", json.dumps(spec)]
        import subprocess

        l0, t0 = load1(), time.perf_counter()
        out = subprocess.run(cmd, env=env, capture_output=True, text=True, timeout=7200,
                             cwd=HERE.parent)
        if out.returncode != 0:
            raise RuntimeError(f"row {name} failed:\n{out.stderr[-3000:]}")
        line = [ln for ln in out.stdout.splitlines() if ln.startswith("{")][-1]
        rec = json.loads(line)
        rec.update(env=recorded_env(env), cmd=cmd, load_before=l0, load_after=load1(),
                   wall_process_s=time.perf_counter() - t0)
    rec["row"] = name
    return rec


#: The results file of :data:`MEMORY_ROWS`.
RANKS_FILE = RESULTS / "particles_mpi_ranks.json"


def rank_memory(rows: dict | None = None, *, ignore_ranks: bool = False) -> list[dict]:
    """The per-rank memory estimate beside each measured row of :data:`RANKS_FILE`.

    The estimate (:func:`wflow.particles.estimate.estimate_particles`, one RK4 step as
    measured) with the row's rank count, mask and the fast degree the job computes
    (:func:`~wflow.kernels.memory.fast_degree` of the row's heads, ``kernel_tol``
    1e-10); ``ignore_ranks``: the estimate of one process (``ranks = 1``), the model
    before ranks were counted. Per row: ``est_mib`` and ``meas_mib`` (the largest rank's
    peak RSS, MiB) with their ``ratio``; the same above the libraries, ``est_above_mib``
    (the estimate less its ``libraries`` part) against ``meas_above_mib`` (peak less the
    RSS before the run: interpreter, libraries, compiled kernels, the initial tokens) and
    ``ratio_above``; ``degree`` (estimated) and ``degree_run`` (the kernel plan's, recorded).
    """
    import numpy as np

    from wflow.attention.heads import Heads
    from wflow.kernels.memory import fast_degree
    from wflow.particles.estimate import estimate_particles

    if rows is None:
        rows = json.loads(RANKS_FILE.read_text())["rows"]
    out = []
    for name, r in rows.items():
        mask = None if r.get("mask", "none") == "none" else r["mask"]
        heads = Heads.random_symmetric(r["H"], r["d"], np.random.default_rng(0), scale=0.5)
        degree = fast_degree(heads.A, r["beta"], 1e-10) if mask is not None else None
        steps = max(run["steps"] for run in r["per_rank"][0]["runs"])
        e = estimate_particles(n=r["n"], d=r["d"], H=r["H"], T=0.01 * steps, dt=0.01,
                               fastsum=r["d"] == 3, ranks=1 if ignore_ranks else r["ranks"],
                               mask=mask, degree=degree)
        est, above = e.memory / 2**20, (e.memory - e.parts["libraries"]) / 2**20
        meas = r["peak_rss_mb_max"]
        meas_above = max(p["peak_rss_mb"] - p["rss_before_mb"] for p in r["per_rank"])
        out.append({"row": name, "n": r["n"], "ranks": r["ranks"], "mask": mask or "none",
                    "est_mib": est, "meas_mib": meas, "ratio": est / meas,
                    "est_above_mib": above, "meas_above_mib": meas_above,
                    "ratio_above": above / meas_above, "degree": degree,
                    "degree_run": max((run["degree"] or 0) for p in r["per_rank"]
                                      for run in p["runs"]),
                    "parts": {k: v / 2**20 for k, v in e.parts.items()}})
    return out


def rank_memory_table(rows: dict | None = None) -> str:
    """The Markdown table of :func:`rank_memory` (``docs/guide/cli.md``, "Cost estimates")."""
    def n_of(n: int) -> str:  # 10⁵, 10⁶ (powers of ten)
        return "10" + str(len(str(n)) - 1).translate(str.maketrans("0123456789",
                                                                    "⁰¹²³⁴⁵⁶⁷⁸⁹"))

    flat = {r["row"]: r for r in rank_memory(rows, ignore_ranks=True)}
    lines = ["| n | ranks | mask | estimated per rank | peak RSS per rank | ratio | "
             "above the libraries: estimated | measured | ratio | ranks ignored |",
             "|---|---|---|---|---|---|---|---|---|---|"]
    for r in sorted(rank_memory(rows), key=lambda r: (r["mask"], r["n"], r["ranks"])):
        lines.append(f"| {n_of(r['n'])} | {r['ranks']} | {r['mask']} | {r['est_mib']:.0f} MiB "
                     f"| {r['meas_mib']:.0f} MiB | {r['ratio']:.2f} | "
                     f"{r['est_above_mib']:.0f} MiB | {r['meas_above_mib']:.0f} MiB | "
                     f"{r['ratio_above']:.2f} | {flat[r['row']]['ratio_above']:.2f} |")
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--quick", action="store_true", help="only the n = 1e5 rows")
    ap.add_argument("--rows", nargs="*", default=None, help=f"rows to run ({', '.join(ROWS)})")
    ap.add_argument("--out", default=str(RESULTS / "particles_mpi.json"))
    ap.add_argument("--code", default=None,
                    help="folder of the wflow package to run (default: this checkout)")
    ap.add_argument("--tag", default="", help="suffix of the rows' names in the results")
    ap.add_argument("--table", action="store_true",
                    help=f"print the per-rank memory table of {RANKS_FILE.name} and exit")
    args = ap.parse_args(argv)
    if args.table:
        print(rank_memory_table())
        return 0
    names = args.rows or (list(QUICK) if args.quick else list(ROWS))
    path = Path(args.out)
    old = json.loads(path.read_text()) if path.is_file() else {}
    rows = dict(old.get("rows", {}))
    for name in names:
        rec = run_row(name, ROWS[name], code=args.code)
        rec["code"] = args.code or "this checkout"
        rows[name + args.tag] = rec
        step = (f"step {rec['step_wall_s']:8.2f} s wall, {rec['step_cpu_s']:8.2f} s cpu, "
                f"{rec['step_comm_s']:6.2f} s in MPI" if rec["step_cpu_s"] is not None
                else "memory only")
        print(f"{name:14s} n={rec['n']:>8d} d={rec['d']:<3d} P={rec['ranks']} "
              f"{step}; peak RSS {rec['peak_rss_mb_max']:7.0f} MB "
              f"(before {rec['rss_before_mb_max']:6.0f}); load {rec['load_before']}"
              f"->{rec['load_after']}", flush=True)
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(json.dumps({"machine": parent_machine(), "rows": rows}, indent=1,
                                   default=float) + "\n")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
