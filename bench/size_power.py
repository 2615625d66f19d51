"""Operating characteristics of the verification studies: size and power of every criterion.

*Size* — the false-fail rate on the correct solver: each study runs at seeds
``0 … N−1`` (once when it declares ``SEED_INDEPENDENT``: its numbers do not depend on the
seed) and the script counts, per criterion and per study, the runs that fail. Every
criterion's observed range is recorded, so a threshold can be set from the measured null
distribution rather than from where the documented controls happen to fall.

*Power* — the smallest fault of each family that the study catches: for every family of
the study's ``FAMILIES`` (injected through the public ``run(fault="FAMILY:S")``) the
script scans the sizes of :data:`SIZES` (both signs where the family has them) from the
smallest up and records the first ``s`` whose run FAILS, with the criteria that trip;
the documented controls of ``FAULTS`` are run once each and their tripped criteria
recorded.

Usage (from the repository root)::

    PYTHONPATH=$PWD .venv/bin/python bench/size_power.py --studies gamma noisy-edi \\
        --seeds 20 --modes quick [--power] [--power-seeds 2] [--out FILE] [--merge]

Results: ``bench/results/size_power.json`` (``--merge`` updates the studies measured and
keeps the others); the table of docs/studies_power.md is written from it
(``--markdown``). Runs go to a temporary directory. Not a timed benchmark: wall times are
recorded only to plan the runs.
"""

from __future__ import annotations

import argparse
import json
import logging
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from wflow.studies.registry import STUDIES, load_study  # noqa: E402

logger = logging.getLogger(__name__)

RESULTS = Path(__file__).resolve().parent / "results" / "size_power.json"

#: Fault sizes scanned for power (absolute values; families with both signs get ``±s``).
#: The scan bisects this grid assuming that a larger fault of a family is caught when a
#: smaller one is (checked at the ends: the largest size first).
SIZES = (0.001, 0.002, 0.005, 0.01, 0.02, 0.05, 0.1, 0.2, 0.5, 1.0)
#: Families whose size is one-signed (a variance factor, a fraction of T cut off, ...).
ONE_SIDED = {"noise-var", "stop-short", "run-past", "ito-scale"}


def _run(name: str, *, quick: bool, seed: int, fault: str | None, tmp: Path,
         parts: tuple[str, ...] | None = None) -> dict[str, Any]:
    mod = load_study(name)
    kw: dict[str, Any] = {}
    if fault is not None:
        kw["fault"] = fault
    if parts is not None:
        kw["parts"] = parts
    t0 = time.perf_counter()
    try:
        res = mod.run(out=tmp / f"{name}-{seed}-{fault}", quick=quick, seed=seed, **kw)
    except Exception as e:  # a faulted run that raises gives no verdict: recorded as such
        if fault is None:
            raise
        logger.info("%s %s seed %d: %s", name, fault, seed, e)
        return {"passed": True, "criteria": {}, "error": f"{type(e).__name__}: {e}",
                "wall_s": round(time.perf_counter() - t0, 2)}
    crit = {c["name"]: {"value": c["value"], "ok": c["ok"], "accepted": c["accepted"]}
            for c in res.summary["criteria"]}
    return {"passed": bool(res.passed), "criteria": crit,
            "wall_s": round(time.perf_counter() - t0, 2)}


def size(name: str, *, quick: bool, seeds: int, tmp: Path) -> dict[str, Any]:
    """False-fail rate of study ``name`` over ``seeds`` seeds (once if seed-independent)."""
    mod = load_study(name)
    once = bool(getattr(mod, "SEED_INDEPENDENT", False))
    # a study with seed-independent parts runs them at seed 0 only
    fixed = tuple(getattr(mod, "SEED_INDEPENDENT_PARTS", ()))
    rest = tuple(p for p in getattr(mod, "PARTS", ()) if p not in fixed) or None
    runs = {s: _run(name, quick=quick, seed=s, fault=None, tmp=tmp,
                    parts=rest if (s > 0 and fixed) else None)
            for s in range(1 if once else seeds)}
    per: dict[str, Any] = {}
    for s, r in runs.items():
        for c, v in r["criteria"].items():
            e = per.setdefault(c, {"fails": 0, "values": [], "accepted": v["accepted"],
                                   "failing_seeds": []})
            e["fails"] += 0 if v["ok"] else 1
            e["values"].append(v["value"])
            if not v["ok"]:
                e["failing_seeds"].append(s)
    for e in per.values():
        vals = [float(x) for x in e["values"] if isinstance(x, (int, float))]
        e["min"], e["max"] = (min(vals), max(vals)) if vals else (None, None)
        e["rate"] = e["fails"] / len(runs)
    fails = [s for s, r in runs.items() if not r["passed"]]
    return {"seed_independent": once, "runs": len(runs), "failing_seeds": fails,
            "false_fail_rate": len(fails) / len(runs), "criteria": per,
            "wall_s": round(sum(r["wall_s"] for r in runs.values()), 1)}


def power(name: str, *, quick: bool, seeds: int, tmp: Path) -> dict[str, Any]:
    """Smallest caught size per fault family, and the documented controls' tripped criteria.

    A size counts as caught when the faulted run fails at each of the first ``seeds`` seeds
    (one for a seed-independent study).
    """
    mod = load_study(name)
    once = bool(getattr(mod, "SEED_INDEPENDENT", False))
    seed_list = range(1 if once else seeds)
    fams: dict[str, Any] = {}
    for fam in getattr(mod, "FAMILIES", {}):
        signs = (1.0,) if fam in ONE_SIDED else (1.0, -1.0)
        for sign in signs:
            key = f"{fam}:{'+' if sign > 0 else '-'}"
            found: dict[str, Any] = {"smallest_caught": None, "tripped": [], "scanned": []}
            # a zero or negative velocity, β or time (or a run stopped at 0) is another fault
            grid = [s for s in SIZES if not ((sign < 0 or fam in ONE_SIDED
                                              or "stop-short" in fam) and s >= 1.0)]
            tried: dict[int, bool] = {}

            def caught_at(i: int, fam=fam, sign=sign, grid=grid, found=found,
                          tried=tried) -> bool:
                if i not in tried:
                    fault = f"{fam}:{sign * grid[i]:g}"
                    rs = [_run(name, quick=quick, seed=k, fault=fault, tmp=tmp)
                          for k in seed_list]
                    tried[i] = all(not r["passed"] for r in rs)
                    found["scanned"].append({"s": sign * grid[i], "caught": tried[i]})
                    if tried[i]:
                        found.setdefault("tripped_at", {})[f"{sign * grid[i]:g}"] = sorted(
                            {c for r in rs for c, v in r["criteria"].items() if not v["ok"]})
                return tried[i]

            if caught_at(len(grid) - 1):
                lo, hi = -1, len(grid) - 1  # grid[hi] caught; grid[lo] (if any) not
                while hi - lo > 1:
                    mid = (lo + hi) // 2
                    if caught_at(mid):
                        hi = mid
                    else:
                        lo = mid
                found["smallest_caught"] = sign * grid[hi]
                found["tripped"] = found["tripped_at"][f"{sign * grid[hi]:g}"]
            fams[key] = found
    controls = {}
    for f in getattr(mod, "FAULTS", {}):
        r = _run(name, quick=quick, seed=0, fault=f, tmp=tmp)
        controls[f] = {"caught": not r["passed"],
                       "tripped": sorted(c for c, v in r["criteria"].items() if not v["ok"])}
    return {"families": fams, "controls": controls}


def markdown(data: dict[str, Any]) -> str:
    """The table study | criterion | false-fail rate | smallest caught fault per family."""
    lines = ["| study | mode | runs | criterion | false-fail rate (observed range) "
             "| smallest caught fault per family (criteria tripped) |",
             "|---|---|---|---|---|---|"]
    for name in STUDIES:
        for mode, m in data.get(name, {}).items():
            if "size" not in m:
                continue
            sz = m["size"]
            pw = m.get("power", {}).get("families", {})
            pw_txt = "; ".join(
                f"{k}: {v['smallest_caught']:+g} ({', '.join(v['tripped'])})"
                if v["smallest_caught"] is not None else f"{k}: none ≤ {SIZES[-1]:g}"
                for k, v in pw.items()) or "—"
            runs = f"{sz['runs']}" + (" (seed-independent)" if sz["seed_independent"] else "")
            first = True
            for c, e in sz["criteria"].items():
                rng = ("" if e["min"] is None else f" ({e['min']:.3g} … {e['max']:.3g}, "
                       f"accept {e['accepted']})")
                lines.append(f"| {name if first else ''} | {mode if first else ''} | "
                             f"{runs if first else ''} | {c} | {e['fails']}/{sz['runs']}{rng} | "
                             f"{pw_txt if first else ''} |")
                first = False
            lines.append(f"| | | | **study** | **{len(sz['failing_seeds'])}/{sz['runs']}** | |")
    lines += ["", "Documented controls (`FAULTS`, quick mode, seed 0):", "",
              "| study | control | caught | criteria tripped |", "|---|---|---|---|"]
    for name in STUDIES:
        ctl = data.get(name, {}).get("quick", {}).get("power", {}).get("controls", {})
        for f, v in ctl.items():
            lines.append(f"| {name} | `{f}` | {'FAIL' if v['caught'] else '**passes**'} | "
                         f"{', '.join(v['tripped'])} |")
    return "\n".join(lines) + "\n"


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--studies", nargs="+", default=sorted(STUDIES), choices=sorted(STUDIES))
    p.add_argument("--seeds", type=int, default=20, help="seeds for the size [20]")
    p.add_argument("--modes", nargs="+", default=["quick"], choices=("quick", "full"))
    p.add_argument("--power", action="store_true", help="also scan the fault families")
    p.add_argument("--power-seeds", type=int, default=1,
                   help="a size is caught when it fails at each of this many seeds [1]")
    p.add_argument("--no-size", action="store_true", help="only the power scan")
    p.add_argument("--out", type=Path, default=RESULTS)
    p.add_argument("--merge", action="store_true", help="update an existing results file")
    p.add_argument("--markdown", action="store_true", help="print the table from --out")
    args = p.parse_args(argv)
    if args.markdown:
        print(markdown(json.loads(args.out.read_text())["studies"]))
        return 0
    logging.basicConfig(level=logging.INFO, format="%(message)s")
    # the engines' own warnings (coarse levels of a sweep are inaccurate by design)
    logging.getLogger("wflow").setLevel(logging.ERROR)
    import warnings

    warnings.filterwarnings("ignore")
    data: dict[str, Any] = {}
    if args.merge and args.out.is_file():
        data = json.loads(args.out.read_text())["studies"]
    with tempfile.TemporaryDirectory(prefix="size_power_") as d:
        tmp = Path(d)
        for name in args.studies:
            for mode in args.modes:
                quick = mode == "quick"
                entry = data.setdefault(name, {}).setdefault(mode, {})
                if not args.no_size:
                    entry["size"] = size(name, quick=quick, seeds=args.seeds, tmp=tmp)
                    logger.info("%s %s: false-fail %d/%d %s", name, mode,
                                len(entry["size"]["failing_seeds"]), entry["size"]["runs"],
                                entry["size"]["failing_seeds"])
                if args.power:
                    entry["power"] = power(name, quick=quick, seeds=args.power_seeds, tmp=tmp)
                    logger.info("%s %s: power %s", name, mode, json.dumps(
                        {k: v["smallest_caught"] for k, v in entry["power"]["families"].items()}))
                args.out.parent.mkdir(parents=True, exist_ok=True)
                args.out.write_text(json.dumps({"sizes": list(SIZES), "studies": data},
                                               indent=1) + "\n")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
