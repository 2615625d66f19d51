"""Size and power of the ``causal-mean-field`` quick study (a plain loop over seeds).

Writes bench/results/size_power_causal.json after every run: the null's false fails over
seeds ``0 … N−1`` and, with ``--power``, the family sizes caught at held-out seeds.
"""

from __future__ import annotations

import argparse
import json
import tempfile
import time
from pathlib import Path

from wflow.studies import causal_mean_field as study

OUT = Path(__file__).parent / "results" / "size_power_causal.json"


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__)
    ap.add_argument("--seeds", type=int, default=100)
    ap.add_argument("--deadline", type=float, default=1e18, help="stop after this epoch time")
    ap.add_argument("--power", nargs="*", default=[], help="FAMILY:S faults, held-out seeds")
    ap.add_argument("--power-seeds", type=int, nargs="*", default=[1000])
    ap.add_argument("--out", type=Path, default=OUT)
    a = ap.parse_args()
    data = json.loads(a.out.read_text()) if a.out.exists() else {}
    data.setdefault("study", study.NAME)
    data.setdefault("mode", "quick")
    data.setdefault("settings", study.MODES["quick"])
    size = data.setdefault("size", {"runs": [], "false_fails": []})
    power = data.setdefault("power", {})
    jobs = [(s, None) for s in range(a.seeds) if s not in size["runs"]]
    jobs += [(s, f) for f in a.power for s in a.power_seeds]
    for seed, fault in jobs:
        if time.time() > a.deadline:
            break
        t = time.time()
        res = study.run(out=Path(tempfile.mkdtemp()), quick=True, seed=seed, fault=fault)
        wall = time.time() - t
        if fault is None:
            size["runs"].append(seed)
            if not res.passed:
                size["false_fails"].append(seed)
        else:
            power.setdefault(fault, {})[str(seed)] = {
                "caught": not res.passed, "max_t_T": res.summary["fits"]["max_t_T"],
                "hotelling_T": res.summary["fits"]["hotelling_T"]}
        data.setdefault("wall_s", []).append(round(wall, 1))
        a.out.write_text(json.dumps(data, indent=1) + "\n")
        print(seed, fault, res.passed, round(wall, 1), flush=True)


if __name__ == "__main__":
    main()
