"""Every ``wflow verify`` study in quick mode at seed 0: its criteria and its CPU time.

The numbers ``docs/guide/studies.md`` quotes for the quick mode (each criterion's measured
value and whether it holds, the CPU seconds of one run with warm imports and compiled
kernels). One process, studies in the registry's order, each run once after a warm-up of
the imports. Writes ``bench/results/bench_studies_quick.json`` (the 1-min load recorded).

    python bench/bench_studies_quick.py
"""

from __future__ import annotations

import json
import os
import sys
import tempfile
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent


def main() -> int:
    """Run every study (quick, seed 0) and write the results file."""
    from wflow.studies.registry import STUDIES, load_study

    rows = {}
    load0 = os.getloadavg()[0]
    with tempfile.TemporaryDirectory() as tmp:
        for name in STUDIES:
            mod = load_study(name)
            t0 = time.process_time()
            res = mod.run(out=Path(tmp) / name, quick=True, seed=0)
            cpu = time.process_time() - t0
            crit = [{"name": c["name"], "value": c["value"], "ok": bool(c["ok"])}
                    for c in res.summary.get("criteria", [])]
            rows[name] = {"passed": bool(res.passed), "cpu_s": cpu, "criteria": crit,
                          "load1_after": os.getloadavg()[0]}
            print(name, res.passed, f"{cpu:.1f} s", len(crit), flush=True)
    out = {"bench": "studies_quick", "mode": "quick, seed 0, one process (warm imports)",
           "load1_before": load0, "rows": rows}
    (HERE / "results" / "bench_studies_quick.json").write_text(
        json.dumps(out, indent=1, default=float) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
