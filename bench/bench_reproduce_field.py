"""The field's published experiments: wflow's re-implementations against the published code.

Rows (issue 25), CPU time on one thread (``process_time``; robust on a shared machine):

* ``glpr_phase``: the published ``step_1`` and ``check_stats`` of ``phase-diagrams.py``
  (torch, float64, CPU, ``torch.set_num_threads(1)``) at the published size (2048 systems,
  n = 32, d = 2), against wflow's compiled loop (:func:`wflow.published.glpr_phase.
  phase_counts`, ``NUMBA_NUM_THREADS=1``) on 256 systems; both extrapolated to the
  published run, 90 β × (300 steps + 200 records).
* ``glpr_phase_ranks``: wall time of :func:`~wflow.published.glpr_phase.run_phase` on a
  mid-size case (256 systems of 32 tokens, 8 β, one numba thread per rank) serial and
  under ``mpirun -n 2`` (speed-up over ranks; the counts must be identical).
* ``glpr_phase_ranks_full`` (not in the default rows: ~15 min of wall on 2 cores): the
  command ``wflow reproduce glpr_phase`` at the published scale, serial and under
  ``mpirun -n 2``, one numba thread per rank, each in its own subprocess with its wall
  and CPU time (``getrusage`` of the children) and the load average around it; every
  array of the two ``glpr_phase.npz`` must be equal.
  ``--glpr-quick`` runs the command's ``--quick`` case instead (seconds: a check of
  the row, recorded under ``glpr_phase_ranks_quick``).
* ``castin_ranks``: one projected-Euler iteration, the published ``utils.evolution``
  against :func:`wflow.published.castin_ranks.projected_euler` (the same NumPy calls), and
  wflow's exact solver per draw.
* ``castin_engine``: the published attempt loop of the random-``V`` row at d = 5, the
  scalar loop against the batched engine (``RankOptions.lanes``), equal attempts.
* ``metastable_staircase``: one step of the published ``time_rescale_3`` against
  :func:`wflow.published.metastable_staircase.staircase_energy`; the published run is
  6 × 10⁶ steps, wflow's stops at the exact NaN tail (measured on the full run).

The published code is not part of wflow: pass the files of its checkouts (fetched
elsewhere) and a Python with torch::

    python bench/bench_reproduce_field.py --torch-python /path/python \\
        --glpr-src phase-diagrams.py --castin-src utils.py --staircase-src staircase.py

Without them the published rows are skipped. Writes
``bench/results/bench_reproduce_field.json`` (``--name`` another).
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import numpy as np

HERE = Path(__file__).resolve().parent
ROOT = HERE.parent
sys.path.insert(0, str(HERE))
from _common import machine, write_json  # noqa: E402

GLPR_DRIVER = r'''
import importlib.util, json, sys, time, types
import torch
torch.set_num_threads(1)
src = open(sys.argv[1]).read().replace("'cuda'", "'cpu'")
mod = types.ModuleType("pd")
exec(compile(src.split('if __name__ == "__main__":')[0], "pd", "exec"), mod.__dict__)
torch.set_default_dtype(torch.float64)
args = types.SimpleNamespace(batch=2048, ntokens=32, dmodel=2, use_softmax=True, rawstep=False,
    step=0.1, noanneal=0, randomKQ=0, randomV=0, plotdim=False, cluster_sizes=False)
mod.args = args
s = mod.simu_xform(args, torch.tensor(4.0))
for _ in range(3): s.step_1(0.0)
t0 = time.process_time()
for _ in range(30): s.step_1(0.0)
t1 = time.process_time()
for _ in range(10): s.check_stats()
t2 = time.process_time()
print(json.dumps({"step_s": (t1 - t0) / 30, "stats_s": (t2 - t1) / 10, "torch": torch.__version__}))
'''

CASTIN_DRIVER = r'''
import json, sys, time
sys.path.insert(0, sys.argv[1])
import numpy as np, utils
rng = np.random.RandomState(40); Q = rng.randn(2, 5); G = np.random.RandomState(41).randn(5, 5)
S0 = G @ G.T
t0 = time.process_time()
utils.evolution(S0.copy(), Q, -Q, np.eye(5), 5, rhs=utils.rhs_trad, max_iter=4000, step_size=0.02,
                tol_low=0.0, print_status=False)
print(json.dumps({"iteration_s": (time.process_time() - t0) / 4000, "numpy": np.__version__}))
'''

STAIR_DRIVER = r'''
import json, sys, time, types
import numpy as np
src = open(sys.argv[1]).read().split("np.random.seed(200)")[0]
for imp in ("import imageio", "import networkx as nx", "import seaborn as sns"):
    src = src.replace(imp, "")
mod = types.ModuleType("st"); exec(compile(src, "st", "exec"), mod.__dict__)
lb, sb = np.log(2000), 2000 ** (1 / 2)
theta0 = 0.5 * np.array([0] + [(a * lb / sb) % np.pi for a in (0.5, 2, 4, 7)])
t0 = time.process_time()
mod.time_rescale_3(theta0, 10e-6, 2000, 4000)
print(json.dumps({"iteration_s": (time.process_time() - t0) / 4000}))
'''


def _run_driver(python: str, code: str, *args: str) -> dict:
    with tempfile.NamedTemporaryFile("w", suffix=".py", delete=False) as fh:
        fh.write(code)
    env = dict(os.environ, OMP_NUM_THREADS="1", OPENBLAS_NUM_THREADS="1", MKL_NUM_THREADS="1")
    try:
        r = subprocess.run([python, fh.name, *args], capture_output=True, text=True, env=env,
                           timeout=1800)
    finally:
        os.unlink(fh.name)
    if r.returncode:
        raise RuntimeError(r.stderr[-2000:])
    return json.loads(r.stdout.strip().splitlines()[-1])


def bench_glpr(a: argparse.Namespace) -> dict:
    from wflow.published import glpr_phase as gp

    times = gp.torch_linspace(0, 30, 200)
    n_steps, rec = gp.record_steps(0.1, 30.0, times)
    o = gp.PhaseOptions(batch=256, n_beta=1)
    x0 = gp.initial_tokens(gp.PhaseOptions(batch=16, n_beta=1), 0)
    gp.phase_counts(x0, 4.0, step=0.1, rec=rec, threshold=0.999)  # compile / load cache
    x0 = gp.initial_tokens(o, 0)
    t0 = time.process_time()
    gp.phase_counts(x0, 4.0, step=0.1, rec=rec, threshold=0.999)
    per_system = (time.process_time() - t0) / o.batch
    row: dict = {"wflow_s_per_system": per_system,
                 "wflow_ns_per_pair": per_system / (n_steps * 32 * 32) * 1e9,
                 "wflow_full_s_one_thread": per_system * 2048 * 90}
    if a.torch_python and a.glpr_src:
        p = _run_driver(a.torch_python, GLPR_DRIVER, a.glpr_src)
        row["published_step_s"] = p["step_s"]
        row["published_stats_s"] = p["stats_s"]
        row["published_full_s_one_thread"] = 90 * (300 * p["step_s"] + 200 * p["stats_s"])
        row["torch"] = p["torch"]
        row["speedup_one_thread"] = (row["published_full_s_one_thread"]
                                     / row["wflow_full_s_one_thread"])
    return row


RANKS_DRIVER = r'''
import sys, time, numpy as np
from wflow.infra.parallel import comm_rank_size
from wflow.published import glpr_phase as gp
o = gp.PhaseOptions(batch=256, n_beta=8)
gp.run_phase(gp.PhaseOptions(batch=16, n_beta=2))  # load the compiled loop, warm the stream
t0 = time.perf_counter()
r = gp.run_phase(o)
dt = time.perf_counter() - t0
if comm_rank_size()[1] == 0:
    np.save(sys.argv[1], r.counts)
    print(dt)
'''


def bench_glpr_ranks(a: argparse.Namespace) -> dict:
    """Wall time of :func:`run_phase` (256 systems, n = 32, 8 β) on 1 and 2 MPI ranks."""
    out: dict = {}
    mpirun = Path(sys.executable).parent / "mpirun"
    env = dict(os.environ, PYTHONPATH=str(ROOT), NUMBA_NUM_THREADS="1", OMP_NUM_THREADS="1")
    with tempfile.TemporaryDirectory() as tmp:
        drv = Path(tmp) / "ranks.py"
        drv.write_text(RANKS_DRIVER)
        for ranks in (1, 2):
            cmd = ([str(mpirun), "-n", str(ranks)] if ranks > 1 else []) + [
                sys.executable, str(drv), f"{tmp}/c{ranks}.npy"]
            r = subprocess.run(cmd, check=True, capture_output=True, text=True, env=env,
                               cwd=ROOT)
            out[f"wall_s_{ranks}"] = float(r.stdout.strip().splitlines()[-1])
        out["identical_counts"] = bool(np.array_equal(np.load(f"{tmp}/c1.npy"),
                                                      np.load(f"{tmp}/c2.npy")))
    out["speedup_2_ranks"] = out["wall_s_1"] / out["wall_s_2"]
    out["case"] = "run_phase, 256 systems x 32 tokens, 8 beta, 300 steps; NUMBA 1 thread/rank"
    return out


def bench_glpr_ranks_full(a: argparse.Namespace) -> dict:
    """``wflow reproduce glpr_phase`` at the published scale on 1 and 2 MPI ranks."""
    import resource

    quick = ["--quick"] if a.glpr_quick else []
    out: dict = {"case": ("wflow reproduce glpr_phase --quick" if quick else
                          "wflow reproduce glpr_phase (90 beta x 2048 systems x 32 tokens x "
                          "300 steps)") + "; NUMBA_NUM_THREADS=1 per rank"}
    bindir = Path(sys.executable).parent
    env = dict(os.environ, PYTHONPATH=str(ROOT), NUMBA_NUM_THREADS="1", OMP_NUM_THREADS="1")
    out["env"] = {k: env[k] for k in ("NUMBA_NUM_THREADS", "OMP_NUM_THREADS")}
    with tempfile.TemporaryDirectory() as tmp:
        for ranks in (1, 2):
            cmd = ([str(bindir / "mpirun"), "-n", str(ranks)] if ranks > 1 else []) + [
                str(bindir / "wflow"), "reproduce", "glpr_phase", *quick, "--out",
                f"{tmp}/r{ranks}"]
            ru0 = resource.getrusage(resource.RUSAGE_CHILDREN)
            load0, t0 = os.getloadavg(), time.perf_counter()
            subprocess.run(cmd, check=True, capture_output=True, text=True, env=env, cwd=ROOT)
            wall = time.perf_counter() - t0
            ru1 = resource.getrusage(resource.RUSAGE_CHILDREN)
            out[f"ranks_{ranks}"] = {
                "command": " ".join(cmd[:-1] + ["DIR"]), "wall_s": wall,
                "cpu_s": (ru1.ru_utime - ru0.ru_utime) + (ru1.ru_stime - ru0.ru_stime),
                "load_average_start": load0, "load_average_end": os.getloadavg()}
        with np.load(f"{tmp}/r1/glpr_phase.npz") as z1, np.load(f"{tmp}/r2/glpr_phase.npz") as z2:
            out["identical_arrays"] = bool(set(z1.files) == set(z2.files) and all(
                np.array_equal(z1[k], z2[k]) for k in z1.files))
            out["counts_sum"] = int(z1["counts"].sum())
    out["speedup_2_ranks"] = out["ranks_1"]["wall_s"] / out["ranks_2"]["wall_s"]
    return out


def bench_castin(a: argparse.Namespace) -> dict:
    from wflow.published import castin_ranks as cr

    rng = np.random.RandomState(40)
    Q = rng.randn(2, 5)
    G = np.random.RandomState(41).randn(5, 5)
    S0 = G @ G.T
    t0 = time.process_time()
    cr.projected_euler(S0, Q, -Q, np.eye(5), step=0.02, tol=0.0, max_iter=4000)
    row: dict = {"wflow_iteration_s": (time.process_time() - t0) / 4000}
    t0 = time.process_time()
    cr.exact_limit(S0, Q, -Q, np.eye(5), identity=True)
    row["wflow_exact_identity_s"] = time.process_time() - t0
    W = np.random.RandomState(26).randn(5, 5)
    t0 = time.process_time()
    cr.exact_limit(S0, Q, -Q, W.T @ W, identity=False)
    row["wflow_exact_random_s"] = time.process_time() - t0
    if a.castin_src:
        p = _run_driver(sys.executable, CASTIN_DRIVER,
                        str(Path(a.castin_src).resolve().parent))
        row["published_iteration_s"] = p["iteration_s"]
        row["published_numpy"] = p["numpy"]
    return row


def bench_castin_engine(a: argparse.Namespace) -> dict:
    """The published attempt loop of one (row, d), scalar (``lanes=0``) and batched.

    Default: the random-``V`` row at d = 5 with ``n_per_dim = 3`` (25 attempts, 2.1·10⁶
    projected-Euler steps of the published loop). CPU time; the attempts must be equal.
    """
    from dataclasses import replace

    from wflow.published import castin_ranks as cr

    o = cr.RankOptions(n_per_dim=a.castin_n, cases=("random",), exact=False)
    row: dict = {"case": f"random V, d = 5, n_per_dim = {a.castin_n}, exact solver off"}
    sig = {}
    for lanes in (0, 128):
        t0 = time.process_time()
        r = cr.run_case_dim((replace(o, lanes=lanes), "random", 2))
        row[f"cpu_s_lanes_{lanes}"] = time.process_time() - t0
        row[f"euler_steps_lanes_{lanes}"] = r["lane_steps"]
        sig[lanes] = [(x["iterations"], x["converged"], x["eigenvalues"].tobytes())
                      for x in r["attempts"]]
    row["published_loop_steps"] = r["path_steps"]
    row["identical_attempts"] = sig[0] == sig[128]
    row["speedup"] = row["cpu_s_lanes_0"] / row["cpu_s_lanes_128"]
    return row


def bench_staircase(a: argparse.Namespace) -> dict:
    from wflow.published import metastable_staircase as ms

    th = ms.published_theta0(2000)
    t0 = time.process_time()
    ms.staircase_energy(th, 2000, lr=10e-6, max_iter=4000)
    row: dict = {"wflow_iteration_s": (time.process_time() - t0) / 4000}
    t0 = time.process_time()
    for b in (500, 1000, 1500, 2000, 3000, 4000):
        ms.staircase_energy(th, b, lr=10e-6, max_iter=1_000_000)
    row["wflow_full_s"] = time.process_time() - t0
    if a.staircase_src:
        p = _run_driver(sys.executable, STAIR_DRIVER, a.staircase_src)
        row["published_iteration_s"] = p["iteration_s"]
        row["published_full_s_extrapolated"] = p["iteration_s"] * 6_000_000
        row["speedup_full"] = row["published_full_s_extrapolated"] / row["wflow_full_s"]
    return row


def main(argv: list[str] | None = None) -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--torch-python", default=None)
    ap.add_argument("--glpr-src", default=None)
    ap.add_argument("--castin-src", default=None)
    ap.add_argument("--staircase-src", default=None)
    ap.add_argument("--castin-n", type=int, default=3, help="castin_engine: n_per_dim")
    ap.add_argument("--rows", nargs="+", default=["glpr_phase", "glpr_phase_ranks",
                                                  "castin_ranks", "castin_engine",
                                                  "metastable_staircase"])
    ap.add_argument("--name", default="bench_reproduce_field")
    ap.add_argument("--glpr-quick", action="store_true",
                    help="glpr_phase_ranks_full: the --quick case (a check of the row)")
    ap.add_argument("--merge", action="store_true",
                    help="keep the other rows of an existing results file")
    a = ap.parse_args(argv)
    fns = {"glpr_phase": bench_glpr, "glpr_phase_ranks": bench_glpr_ranks,
           "glpr_phase_ranks_full": bench_glpr_ranks_full,
           "castin_ranks": bench_castin, "castin_engine": bench_castin_engine,
           "metastable_staircase": bench_staircase}
    res = {"machine": machine(), "clock": "process_time, one thread (ranks row: wall)",
           "load_average_start": os.getloadavg(), "rows": {}}
    prev = HERE / "results" / f"{a.name}.json"
    if a.merge and prev.is_file():
        old = json.loads(prev.read_text())
        res["rows"] = dict(old.get("rows", {}))
        res["earlier_rows_measured"] = {k: old.get(k) for k in ("machine", "load_average_start")}
    for r in a.rows:
        t0 = time.perf_counter()
        key = "glpr_phase_ranks_quick" if (r == "glpr_phase_ranks_full" and a.glpr_quick) else r
        res["rows"][key] = fns[r](a)
        print(key, json.dumps(res["rows"][key]), f"({time.perf_counter() - t0:.1f} s)",
              flush=True)
    res["load_average_end"] = os.getloadavg()
    print("wrote", write_json(a.name, res))


if __name__ == "__main__":
    main()
