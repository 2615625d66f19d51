"""CPU time of the reference runs, this tree against another one, in one session.

A refactor should move code, not cost: each reference run of ``bench/reference_runs.py``
runs alternately on the peer tree (``--peer DIR``, e.g. a ``git worktree`` of the commit
before the refactor) and on this tree, each time in its own clean subprocess
(``PYTHONPATH`` set to the tree, nothing else changed), ``--repeat`` times; the CPU seconds
(user + system, the run's command subprocess included) of each and their ratio are
written to ``--json``, with the machine's load and environment. The minimum over repeats
is reported: CPU time on a shared machine only grows with interference.

Usage::

    git worktree add /tmp/wflow-base 823527f
    .venv/bin/python bench/bench_refactor.py --peer /tmp/wflow-base \\
        --json bench/results/bench_refactor.json
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
REF = ROOT / "bench" / "reference_runs.py"


def _one(tree: Path, name: str) -> float:
    """CPU seconds of reference run ``name`` on ``tree`` (its own subprocess)."""
    env = {**os.environ, "PYTHONPATH": str(tree)}
    r = subprocess.run([sys.executable, str(REF), "--cpu-json", "--only", name], env=env,
                       capture_output=True, text=True, cwd=tree)
    if r.returncode != 0:
        raise RuntimeError(f"{name} on {tree}: exit {r.returncode}\n{r.stderr[-1500:]}")
    return float(json.loads(r.stdout.strip().splitlines()[-1])[name])


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--peer", type=Path, required=True, help="the other tree (its root)")
    ap.add_argument("--json", type=Path, required=True)
    ap.add_argument("--repeat", type=int, default=2)
    ap.add_argument("--only", default="", help="comma-separated run names")
    args = ap.parse_args()
    names = subprocess.run([sys.executable, str(REF), "--list"], capture_output=True,
                           text=True, check=True).stdout.split()
    if args.only:
        names = [n for n in args.only.split(",") if n]
    rows, load = {}, []
    for name in names:
        peer, this = [], []
        for _ in range(args.repeat):
            load.append(os.getloadavg()[0])
            peer.append(_one(args.peer.resolve(), name))
            this.append(_one(ROOT, name))
        rows[name] = {"peer_cpu_s": min(peer), "this_cpu_s": min(this),
                      "ratio": min(this) / min(peer) if min(peer) > 0 else None}
        print(f"{name:28s} peer {min(peer):6.2f} s  this {min(this):6.2f} s  "
              f"x{rows[name]['ratio'] or float('nan'):.3f}", flush=True)
    tp = sum(r["peer_cpu_s"] for r in rows.values())
    tt = sum(r["this_cpu_s"] for r in rows.values())
    out = {"what": "CPU seconds of bench/reference_runs.py runs, min over repeats",
           "peer": str(args.peer), "repeat": args.repeat, "rows": rows,
           "total": {"peer_cpu_s": tp, "this_cpu_s": tt, "ratio": tt / tp},
           "machine": {"platform": platform.platform(), "cpus": os.cpu_count(),
                       "load_1min": {"min": min(load), "max": max(load)},
                       "OPENBLAS_CORETYPE": os.environ.get("OPENBLAS_CORETYPE")},
           "date": time.strftime("%Y-%m-%d %H:%M:%S")}
    args.json.write_text(json.dumps(out, indent=1) + "\n")
    print(f"total: peer {tp:.1f} s, this {tt:.1f} s CPU (x{tt / tp:.3f}); wrote {args.json}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
