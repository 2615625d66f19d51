"""The JKO's cost estimate against measured ``wflow jko`` and ``wflow run`` runs.

Runs each row in a fresh process (``wflow jko SCENARIO --out DIR --yes`` or ``wflow run
…``; a warm-up run first, so numba's cache is loaded, not compiled, in the rows) and records
the child's CPU time (user + system: the machine is shared, so the wall time and the 1-min
load are recorded beside it), the steps the run took (``summary.json``: a given ``τ``, the
``"auto"`` rule's on the mesh, or the error controller's under ``rtol``) and the scenario
text, from which ``tests/test_estimates_jko.py`` recomputes the estimate of the checkout
(:func:`wflow.jko.estimate.estimate_run` on the scenario's ``[jko]`` table; the main
job's :func:`wflow.apps.main.estimate.check_run_estimate` inputs) and requires it within
2× of the measured CPU time.

Rows (``ROWS``): the shipped default scenario (``wflow/data/default_run.toml``: two softmax
heads, ``T = 2``) with its ``[jko]`` replaced — given ``τ`` on 720 and 2 420 cells,
``τ = "auto"``, adaptive ``τ`` at ``rtol`` 1e-2, 3e-3, 1e-3, the fixed step judged at
``τ/2``, the POT referee on; one USA head (``β = 2``, ``T = 0.4``: a slow flow, where the
controller takes fewer steps than ``T/rtol``); and ``wflow run`` of the shipped default
at ``n = 10³`` and ``10⁴`` particles.

Usage: ``PYTHONPATH=$PWD nice -n 10 .venv/bin/python bench/bench_jko_estimate.py
[--rows a,b]``. Writes ``results/bench_jko_estimate.json`` (rows not run are kept).
"""

from __future__ import annotations

import argparse
import json
import os
import re
import resource
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import numpy as np
from _common import ROOT, default_threads, load1, parent_machine, peer_env, toml_text, write_json

DEFAULT = (ROOT / "wflow" / "data" / "default_run.toml").read_text()

#: One USA head ``A = I``, ``β = 2``, two vMF bumps, ``T = 0.4`` (the mesh per row).
USA = {"seed": 0, "attention": {"kind": "usa", "beta": 2.0, "d": 3},
       "heads": {"type": "matrices", "A": [np.eye(3).tolist()], "value_sign": 1, "w": "mean"},
       "density": {"type": "vmf", "means": [[0.0, 0.0, 1.0], [1.0, 0.0, 0.0]],
                   "kappas": [3.0, 2.0], "weights": [0.5, 0.5]},
       "pde": {"mesh": "MESH", "T": 0.4}}


def jko_scenario(mesh: str, jko: str, base: str = "default") -> str:
    """The default scenario (or the USA one) on ``mesh`` with the ``[jko]`` table ``jko``."""
    if base == "usa":
        text = toml_text({**USA, "pde": {**USA["pde"], "mesh": mesh}})
        return text + "[jko]\n" + jko + "\nverify = false\n"
    text = DEFAULT.replace('mesh = "default"', f'mesh = "{mesh}"')
    return re.sub(r"(?ms)^\[jko\].*", "[jko]\n" + jko + "\n", text)


def run_scenario(n: int) -> str:
    """The shipped default of ``wflow run`` at ``n`` particles, no figures."""
    text, k = re.subn(r"(?m)^n_particles = .*$", f"n_particles = {n}", DEFAULT)
    assert k == 1
    return text.replace("[run]\n", "[run]\nrender = false\n", 1)


#: name: (command, scenario text).
ROWS = {
    "fixed 2420 tau 0.25": ("jko", jko_scenario("icosphere:2420", "tau = 0.25\nverify = false")),
    "auto 2420": ("jko", jko_scenario("icosphere:2420", 'tau = "auto"\nverify = false')),
    "fixed 720 tau 0.05": ("jko", jko_scenario("icosphere:720", "tau = 0.05\nverify = false")),
    "referee 2420 tau 0.25": ("jko", jko_scenario("icosphere:2420", "tau = 0.25\nverify = true")),
    "judged 720 rtol 1e-2": ("jko", jko_scenario(
        "icosphere:720", "tau = 0.05\nrtol = 1e-2\nadaptive = false\nverify = false")),
    "adaptive 720 rtol 1e-2": ("jko", jko_scenario(
        "icosphere:720", "tau = 0.25\nrtol = 1e-2\nverify = false")),
    "adaptive 720 rtol 3e-3": ("jko", jko_scenario(
        "icosphere:720", "tau = 0.25\nrtol = 3e-3\nverify = false")),
    "adaptive 320 rtol 1e-3": ("jko", jko_scenario(
        "icosphere:320", "tau = 0.25\nrtol = 1e-3\nverify = false")),
    "usa adaptive 320 rtol 1e-3": ("jko", jko_scenario(
        "icosphere:320", "tau = 0.1\nrtol = 1e-3", base="usa")),
    "usa adaptive 2420 rtol 1e-2": ("jko", jko_scenario(
        "icosphere:2420", "tau = 0.1\nrtol = 1e-2", base="usa")),
    "run default n 1000": ("run", run_scenario(1000)),
    "run default n 10000": ("run", run_scenario(10000)),
}


def _child_cpu() -> float:
    """User + system CPU seconds of the finished children so far."""
    ru = resource.getrusage(resource.RUSAGE_CHILDREN)
    return ru.ru_utime + ru.ru_stime


def one_run(name: str, cmd: str, text: str, tmp: Path, env: dict[str, str]) -> dict:
    """One ``wflow CMD`` of the row in a fresh process: CPU, wall, load, steps."""
    safe = re.sub(r"[^A-Za-z0-9]+", "_", name)
    (tmp / f"{safe}.toml").write_text(text)
    row: dict = {"name": name, "command": cmd, "scenario": text, "load1_before": load1()}
    c0, t0 = _child_cpu(), time.perf_counter()
    r = subprocess.run([sys.executable, "-m", "wflow.cli", cmd, str(tmp / f"{safe}.toml"),
                        "--out", str(tmp / safe), "--yes"], env=env, cwd=ROOT,
                       capture_output=True, text=True, check=False)
    row.update(wall_s=round(time.perf_counter() - t0, 2), cpu_s=round(_child_cpu() - c0, 2),
               load1_after=load1(), exit=r.returncode, stderr_tail=r.stderr[-400:],
               date=time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()))
    # exit 1 is a written run whose status is not success (e.g. inaccurate): its summary
    summ = tmp / safe / "summary.json"
    s = json.loads(summ.read_text()) if r.returncode in (0, 1) and summ.is_file() else {}
    stats = s.get("stats", {}) if cmd == "jko" else {}
    row.update(status=s.get("status"), steps=stats.get("steps"),
               rejected=stats.get("error_rejected_steps"),
               cells=(s.get("mesh") or {}).get("cells"),
               phases_cpu_s={k: round(float(v), 2) for k, v in s.get("cpu_time_s", {}).items()})
    return row


def main(argv: list[str] | None = None) -> int:
    """Run the rows (after a warm-up run) and write their JSON, keeping rows not run now."""
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--rows", default=",".join(ROWS))
    ap.add_argument("--threads", type=int, default=default_threads())
    args = ap.parse_args(argv)
    env = {**peer_env(args.threads), "PYTHONPATH": os.pathsep.join(
        p for p in (str(ROOT), os.environ.get("PYTHONPATH")) if p)}
    names = args.rows.split(",")
    with tempfile.TemporaryDirectory(prefix="wflow-bench-jko-est-") as tmpdir:
        tmp = Path(tmpdir)
        warm = one_run("warm", "jko", jko_scenario("icosphere:320", "tau = 0.5\nrtol = 1e-2"),
                       tmp, env)
        runs = {}
        for name in names:
            runs[name] = r = one_run(name, *ROWS[name], tmp, env)
            print(f"{name}: exit {r['exit']} {r['status']}: CPU {r['cpu_s']} s, wall "
                  f"{r['wall_s']} s, load {r['load1_before']}-{r['load1_after']}, steps "
                  f"{r['steps']} ({r['rejected']} rejected)", flush=True)
    old = ROOT / "bench" / "results" / "bench_jko_estimate.json"
    kept = json.loads(old.read_text()).get("runs", []) if old.is_file() else []
    for r in kept:  # each row carries its own load and date
        runs.setdefault(r["name"], r)
    rows = [runs[k] for k in ROWS if k in runs]
    payload = {"command": "wflow jko|run SCENARIO --out DIR --yes (scenario per row)",
               "threads": args.threads, "machine": parent_machine(), "warm_up": warm,
               "runs": rows}
    print(f"wrote {write_json('bench_jko_estimate', payload)}")
    return 0 if all(r["status"] for r in rows if r["name"] in names) else 1


if __name__ == "__main__":
    sys.exit(main())
