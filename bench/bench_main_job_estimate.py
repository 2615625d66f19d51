"""The main job's cost estimate against measured runs at n = 10³, 10⁴, 10⁵ particles.

Runs ``wflow run SCENARIO --out DIR --yes`` in a fresh process per row (a warm-up run
first, so numba's cache is loaded, not compiled, in the rows), each the main job's test
scenario (two softmax heads, surrogate flow, 720 cells) at the row's sizes, and
records the child's CPU time (user + system: the machine is
shared, so the wall time is recorded beside it with the 1-min load before and after),
the phases' CPU and wall times (``summary.json`` ``cpu_time_s``, ``wall_time_s``) and the
inputs of :func:`wflow.apps.main.estimate.estimate_main_job` with the estimate of this
checkout. ``tests/test_estimates_main_job.py`` re-computes the estimate of every row and
requires it within 2× of the measured CPU time. Writes
``results/bench_main_job_estimate.json``.

Usage: ``.venv/bin/python bench/bench_main_job_estimate.py [--rows 1000,10000,100000]``.
"""

from __future__ import annotations

import argparse
import json
import os
import re
import resource
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from _common import ROOT, default_threads, load1, parent_machine, peer_env, write_json


def scenario(row: dict) -> str:
    """The main job's test scenario (``tests/test_main_job.py``: two softmax heads, the
    surrogate flow, 720 cells) at the row's sizes, no figures; a ``noisy`` row: the shipped
    noisy default (``wflow/data/noisy_run.toml``: one USA head, ``D = 0.05``, Euler–Maruyama
    particles, the JKO with the entropy and its 2-row table) at the row's ``n``."""
    if row.get("noisy"):
        text = (ROOT / "wflow" / "data" / "noisy_run.toml").read_text()
        text, k = re.subn(r"(?m)^n_particles = .*$", f"n_particles = {row['n']}", text)
        assert k == 1
        return text.replace("[run]\n", "[run]\nrender = false\n", 1)
    sys.path.insert(0, str(ROOT))
    from tests.test_main_job import SCENARIO

    text = SCENARIO.replace("JKO", str(row["jko"]).lower()).replace("RENDER", "false")
    for key, val in {"T": row["T"], "n_saves": row["n_saves"], "n_particles": row["n"],
                     "particle_steps_per_save": row["sps"]}.items():
        text, k = re.subn(rf"(?m)^{key} = .*$", f"{key} = {val}", text)
        assert k == 1, key
    return (text + f"jko_refinement = {2 if row['jko'] else 0}\n"
            f"[jko]\ntau = {row['T'] / 2}\n")

#: The rows: n, T, n_saves, particle steps per save, JKO (τ = T/2 and a 2-row table).
ROWS = {
    "1000": dict(n=1000, T=1.0, n_saves=5, sps=4, jko=False),
    "1000jko": dict(n=1000, T=1.0, n_saves=5, sps=4, jko=True),
    "10000": dict(n=10000, T=1.0, n_saves=5, sps=4, jko=False),
    "100000": dict(n=100000, T=0.25, n_saves=2, sps=2, jko=False),
    # the noisy default (its T, saves, steps and JKO are the shipped file's)
    "noisy1000": dict(n=1000, T=1.0, n_saves=5, sps=4, jko=True, noisy=True),
    "noisy10000": dict(n=10000, T=1.0, n_saves=5, sps=4, jko=True, noisy=True),
}


def estimate_inputs(row: dict) -> dict:
    """The keyword arguments of ``estimate_main_job`` for a row (as ``wflow run`` calls it)."""
    if row.get("noisy"):  # noisy_run.toml: one head, dt 0.02, τ = 0.25 (4 steps), D = 0.05
        from wflow.particles.estimate import fastsum_eligible

        return dict(cells=720, n=row["n"], H=1, T=1.0, dt=0.02, n_saves=5, steps_per_save=4,
                    jko=True, refinement=2, max_ot_points=6000, w2_dense_max_points=6000,
                    jko_steps=4, fastsum=fastsum_eligible("usa", 3, "auto"), diffusion=0.05,
                    integrator="em", jko_verify=False, error_control=False)
    return dict(cells=720, n=row["n"], H=2, T=row["T"], dt=0.05, n_saves=row["n_saves"],
                steps_per_save=row["sps"], jko=row["jko"], refinement=2 if row["jko"] else 0,
                max_ot_points=6000, w2_dense_max_points=6000,
                jko_steps=2 if row["jko"] else None, fastsum=True, error_control=False)


def one_run(name: str, row: dict, tmp: Path, env: dict[str, str]) -> dict:
    """One ``wflow run`` of the row in a fresh process: CPU, wall, load, phases."""
    sc = tmp / f"{name}.toml"
    sc.write_text(scenario(row))
    out = tmp / name
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    load0 = load1()
    t0 = time.perf_counter()
    r = subprocess.run([sys.executable, "-m", "wflow.cli", "run", str(sc), "--out", str(out),
                        "--yes"], env=env, cwd=ROOT, capture_output=True, text=True,
                       check=False)
    wall = time.perf_counter() - t0
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    s = json.loads((out / "summary.json").read_text()) if r.returncode == 0 else {}
    return {"name": name, "row": row, "exit": r.returncode, "wall_s": round(wall, 2),
            "cpu_s": round((after.ru_utime - before.ru_utime)
                           + (after.ru_stime - before.ru_stime), 2),
            "load1_before": load0, "load1_after": load1(), "status": s.get("status"),
            "phases_cpu_s": {k: round(float(v), 2) for k, v in s.get("cpu_time_s", {}).items()},
            "phases_wall_s": {k: round(float(v), 2)
                              for k, v in s.get("wall_time_s", {}).items()},
            "estimate_inputs": estimate_inputs(row), "stderr_tail": r.stderr[-400:],
            "date": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())}


def main(argv: list[str] | None = None) -> int:
    """Run the rows and write their JSON."""
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--rows", default=",".join(ROWS))
    ap.add_argument("--threads", type=int, default=default_threads())
    args = ap.parse_args(argv)
    env = peer_env(args.threads)
    env["PYTHONPATH"] = os.pathsep.join(filter(None, [str(ROOT), os.environ.get("PYTHONPATH")]))
    sys.path.insert(0, str(ROOT))
    from wflow.apps.main.estimate import estimate_main_job

    tmp = Path(tempfile.mkdtemp(prefix="wflow-bench-est-"))
    runs = []
    try:
        # every compiled path (direct sums, the fast summation, the JKO) loaded, not
        # compiled, in the rows
        warm = one_run("warm", dict(n=4000, T=0.2, n_saves=2, sps=1, jko=True), tmp, env)
        for name in args.rows.split(","):
            r = one_run(name, ROWS[name], tmp, env)
            est = estimate_main_job(**r["estimate_inputs"])
            r["estimate_s"] = round(est.seconds, 2)
            r["ratio"] = round(est.seconds / r["cpu_s"], 3) if r["cpu_s"] else None
            runs.append(r)
            print(f"{name}: exit {r['exit']} {r['status']}: CPU {r['cpu_s']} s, wall "
                  f"{r['wall_s']} s, load {r['load1_before']}-{r['load1_after']}; estimate "
                  f"{r['estimate_s']} s (ratio {r['ratio']}); phases CPU {r['phases_cpu_s']}",
                  flush=True)
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    old = ROOT / "bench" / "results" / "bench_main_job_estimate.json"
    if old.is_file():  # the rows not run now are kept (each carries its own load and date)
        done = {r["name"] for r in runs}
        runs += [r for r in json.loads(old.read_text()).get("runs", []) if r["name"] not in done]
    order = list(ROWS)
    runs.sort(key=lambda r: order.index(r["name"]) if r["name"] in order else len(order))
    payload = {"command": "wflow run SCENARIO --out DIR --yes (tests/test_main_job.py's "
                          "scenario, sizes per row)",
               "threads": args.threads, "machine": parent_machine(), "warm_up": warm,
               "runs": runs}
    path = write_json("bench_main_job_estimate", payload)
    print(f"wrote {path}")
    return 0 if all(r["exit"] == 0 for r in runs) else 1


if __name__ == "__main__":
    sys.exit(main())
