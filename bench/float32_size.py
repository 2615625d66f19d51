"""Size and power of ``wflow verify mean-field --dtype float32`` over seeds.

*Size*: the quick study in float32 at seeds ``0 … N−1`` on the correct solver; per
criterion the runs that fail, and the largest ratio of the float32 moment difference to its
derived tolerance (``float32.max_moment_difference / float32.tolerance``: how far inside
the bound the correct float32 run stays). *Power*: the negative control ``float32-beta``
(the float32 replicates at ``β × 1.005``, their float64 control at ``β``) at held-out seeds
``N … N+P−1``, never used to set the tolerance (the tolerance is derived, not fitted).

Usage (from the repository root)::

    PYTHONPATH=$PWD .venv/bin/python bench/float32_size.py --seeds 100 --power-seeds 5

Writes ``bench/results/float32_size.json``; ``tests/test_study_float32.py`` reads it (the
size, the margin and the power). Not a timed benchmark: wall times only plan the runs.
"""

from __future__ import annotations

import argparse
import json
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from _common import parent_machine, write_json  # noqa: E402

from wflow.studies.registry import verify  # noqa: E402

CRITERION = "float32_vs_float64"


def one(seed: int, fault: str | None, tmp: Path) -> dict:
    """One quick float32 run: status, the criteria that failed, the control's ratio."""
    t0 = time.perf_counter()
    res = verify("mean-field", out=tmp / f"s{seed}_{fault}", quick=True, seed=seed,
                 fault=fault, dtype="float32")
    s = json.loads((tmp / f"s{seed}_{fault}" / "summary.json").read_text())
    f32 = s["float32"]
    failed = sorted(k for k, c in s["checks"].items() if isinstance(c, dict)
                    and c.get("passed") is False)
    return {"seed": seed, "fault": fault, "status": s["status"], "passed": bool(res.passed),
            "failed": failed, "dtype": s["dtype"],
            "difference": f32["max_moment_difference"], "tolerance": f32["tolerance"],
            "ratio": f32["max_moment_difference"] / f32["tolerance"],
            "wall_s": round(time.perf_counter() - t0, 2)}


def main(argv: list[str] | None = None) -> int:
    """Run the seeds and write the JSON."""
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--seeds", type=int, default=100)
    p.add_argument("--power-seeds", type=int, default=5)
    a = p.parse_args(argv)
    size, power = [], []
    with tempfile.TemporaryDirectory(prefix="wflow-f32-") as d:
        tmp = Path(d)
        for seed in range(a.seeds):
            size.append(one(seed, None, tmp))
            r = size[-1]
            print(f"seed {seed}: {r['status']} {r['failed']} ratio {r['ratio']:.3g} "
                  f"({r['wall_s']} s)", flush=True)
        for seed in range(a.seeds, a.seeds + a.power_seeds):
            power.append(one(seed, "float32-beta", tmp))
            r = power[-1]
            print(f"float32-beta seed {seed}: {r['status']} {r['failed']} ratio "
                  f"{r['ratio']:.3g}", flush=True)
    fails = {}
    for r in size:
        for k in r["failed"]:
            fails[k] = fails.get(k, 0) + 1
    summary = {"runs": len(size), "failed_runs": sum(not r["passed"] for r in size),
               "failed_by_criterion": fails,
               "max_ratio": max(r["ratio"] for r in size),
               "power_caught": sum(CRITERION in r["failed"] for r in power),
               "power_runs": len(power),
               "power_min_ratio": min((r["ratio"] for r in power), default=None)}
    path = write_json("float32_size", {"study": "mean-field", "mode": "quick",
                                       "dtype": "float32", "machine": parent_machine(),
                                       "summary": summary, "size": size, "power": power})
    print(json.dumps(summary, indent=1))
    print(f"wrote {path}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
