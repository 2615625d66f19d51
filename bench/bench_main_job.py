"""Wall and CPU time of the main job (`wflow run` on its shipped default: what `make run` runs).

Runs ``wflow run --out DIR`` ``--repeats`` times, each in a fresh process with the clean
environment of every bench peer (``_common.peer_env``), after one warm-up run (numba's
cache loaded or compiled, so the first-run compile is not counted: see
``docs/guide/performance.md``, "First run"). Records per run the wall time, the child's
CPU time (user + system), the 1-min load before and after, the status and the phases'
wall times (``summary.json`` ``wall_time_s``); writes ``results/bench_main_job.json``.
The README and the main job's guide quote these numbers (``tests/test_doc_numbers.py``).

Usage: ``.venv/bin/python bench/bench_main_job.py [--repeats N] [--threads T]``.
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from _common import ROOT, default_threads, load1, parent_machine, peer_env, write_json


def _wflow() -> list[str]:
    exe = Path(sys.executable).with_name("wflow")
    return [str(exe)] if exe.exists() else [sys.executable, "-m", "wflow.cli"]


def key_numbers(summary: dict) -> dict:
    """The numbers of the run the guide quotes (``docs/guide/main_job.md``), from its summary.

    The run is deterministic (seeded): these are the same on every repeat of one machine.
    """
    tab = summary.get("jko_refinement") or {}
    keep = ("cells", "tau", "w2_max", "l1_max", "edi_abs_relative", "status", "locked_steps",
            "empty_cells")
    return {"status": summary.get("status"),
            "w2_particles_vs_pde": summary["w2"]["particles_vs_pde"],
            "w2_particles_vs_pde_initial": summary["w2"]["particles_vs_pde_initial"],
            "jko_edi_check": summary["checks"]["jko"]["edi"]["value"],
            "jko_edi_tolerance": summary["checks"]["jko"]["edi"]["tolerance"],
            "rows": [{k: r[k] for k in keep if k in r} for r in tab.get("rows", [])],
            "orders": {k: tab.get(f"order_{k}") for k in ("w2", "l1", "edi")},
            "ot_crosscheck": {k: v for k, v in (tab.get("ot_crosscheck") or {}).items()
                              if k in keep},
            "not_passed": [v["quantity"] for v in summary.get("verdicts", [])
                           if v["verdict"] in ("FAIL", "WARN")],
            "warnings": summary.get("warnings", [])}


def one_run(out: Path, env: dict[str, str]) -> dict:
    """One ``wflow run --out out`` in a fresh process: times, load, status, phases."""
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    load0 = load1()
    t0 = time.perf_counter()
    r = subprocess.run([*_wflow(), "run", "--out", str(out)], env=env, cwd=ROOT,
                       capture_output=True, text=True, check=False)
    wall = time.perf_counter() - t0
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    summary = json.loads((out / "summary.json").read_text()) if r.returncode == 0 else {}
    return {"exit": r.returncode, "wall_s": round(wall, 2),
            "cpu_s": round((after.ru_utime - before.ru_utime)
                           + (after.ru_stime - before.ru_stime), 2),
            "load1_before": load0, "load1_after": load1(),
            "status": summary.get("status"),
            "phases_wall_s": {k: round(float(v), 2)
                              for k, v in summary.get("wall_time_s", {}).items()},
            "numbers": key_numbers(summary) if summary else None,
            "stderr_tail": r.stderr[-400:] if r.returncode else ""}


def main(argv: list[str] | None = None) -> int:
    """Run the benchmark and write its JSON."""
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--repeats", type=int, default=2)
    ap.add_argument("--threads", type=int, default=default_threads())
    args = ap.parse_args(argv)
    env = peer_env(args.threads)
    env["PYTHONPATH"] = os.pathsep.join(filter(None, [str(ROOT), os.environ.get("PYTHONPATH")]))
    tmp = Path(tempfile.mkdtemp(prefix="wflow-bench-main-"))
    try:
        warm = one_run(tmp / "warm", env)
        runs = [one_run(tmp / f"run{i}", env) for i in range(args.repeats)]
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    ok = [r for r in runs if r["exit"] == 0 and r["status"] == "success"]
    payload = {"command": "wflow run --out DIR (the shipped default, as `make run`)",
               "threads": args.threads, "machine": parent_machine(), "warm_up": warm,
               "runs": runs,
               "wall_s_min": min(r["wall_s"] for r in ok) if ok else None,
               "wall_s_max": max(r["wall_s"] for r in ok) if ok else None,
               "cpu_s_min": min(r["cpu_s"] for r in ok) if ok else None,
               "cpu_s_max": max(r["cpu_s"] for r in ok) if ok else None}
    path = write_json("bench_main_job", payload)
    for r in runs:
        print(f"exit {r['exit']} {r['status']}: wall {r['wall_s']} s, CPU {r['cpu_s']} s, "
              f"load {r['load1_before']}-{r['load1_after']}")
    print(f"wrote {path}")
    return 0 if len(ok) == len(runs) else 1


if __name__ == "__main__":
    sys.exit(main())
