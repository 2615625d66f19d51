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
from collections.abc import Callable
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from wflow.studies.registry import STUDIES, load_study  # noqa: E402

logger = logging.getLogger(__name__)

RESULTS = Path(__file__).resolve().parent / "results" / "size_power.json"
#: The ``edi`` study's results, measured separately (same schema; its studies override).
EDI_RESULTS = RESULTS.with_name("size_power_edi.json")

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
    crit = {c["name"]: {"value": c["value"], "ok": bool(c["ok"]), "accepted": c["accepted"]}
            for c in res.summary["criteria"]}
    return {"passed": bool(res.passed), "criteria": crit,
            "wall_s": round(time.perf_counter() - t0, 2)}


def _per_seed(sz: dict[str, Any]) -> dict[str, Any]:
    """The per-seed records of a size entry (rebuilt from an aggregate written without them).

    An entry without ``per_seed`` ran the seeds ``0 … runs−1`` in order (one value per seed
    in each criterion's ``values``); its wall time is known only in total and is split
    evenly over the seeds.
    """
    if "per_seed" in sz:
        return dict(sz["per_seed"])
    out: dict[str, Any] = {}
    for i in range(sz["runs"]):
        crit = {c: {"value": e["values"][i], "ok": i not in e["failing_seeds"],
                    "accepted": e["accepted"]}
                for c, e in sz["criteria"].items() if i < len(e["values"])}
        out[str(i)] = {"passed": i not in sz["failing_seeds"], "criteria": crit,
                       "wall_s": round(sz["wall_s"] / sz["runs"], 2)}
    return out


def _aggregate(per_seed: dict[str, Any], *, once: bool) -> dict[str, Any]:
    """Per criterion and per study: false fails, failing seeds and the observed range."""
    seeds = sorted(int(k) for k in per_seed)
    per: dict[str, Any] = {}
    for s in seeds:
        for c, v in per_seed[str(s)]["criteria"].items():
            e = per.setdefault(c, {"fails": 0, "values": [], "accepted": v["accepted"],
                                   "failing_seeds": []})
            e["fails"] += 0 if v["ok"] else 1
            e["values"].append(v["value"])
            if not v["ok"]:
                e["failing_seeds"].append(s)
    for e in per.values():
        vals = [float(x) for x in e["values"] if isinstance(x, (int, float))]
        e["min"], e["max"] = (min(vals), max(vals)) if vals else (None, None)
        e["rate"] = e["fails"] / len(seeds)
    fails = [s for s in seeds if not per_seed[str(s)]["passed"]]
    walls = [per_seed[str(s)]["wall_s"] for s in seeds]
    return {"seed_independent": once, "runs": len(seeds), "seeds": seeds,
            "failing_seeds": fails, "false_fail_rate": len(fails) / max(len(seeds), 1),
            "false_fail_upper95": upper95(len(fails), len(seeds)),
            "criteria": per, "wall_s": round(float(sum(walls)), 1),
            "wall_s_per_run": walls, "per_seed": per_seed}


def upper95(fails: int, runs: int) -> float | None:
    """One-sided 95 % Clopper–Pearson upper bound of a false-fail rate (``k`` of ``N``).

    The study as a whole: ``0/100`` bounds the rate by 3.0 %, ``0/20`` only by 13.9 %, so a
    target of ≤ 1 % is *shown* only from ~300 clean seeds; the table states the bound.
    """
    if runs <= 0:
        return None
    if fails >= runs:
        return 1.0
    from scipy.stats import beta

    return float(beta.ppf(0.95, fails + 1, runs - fails))


def size(name: str, *, quick: bool, seeds: int, tmp: Path, prev: dict[str, Any] | None = None,
         save: Callable[[dict[str, Any]], None] | None = None) -> dict[str, Any]:
    """False-fail rate of study ``name`` over seeds ``0 … seeds−1`` (once if seed-independent).

    ``prev``: an earlier size entry of the same study and mode; its seeds are kept and not
    rerun (so an interrupted measurement resumes). ``save`` is called with the aggregate
    after every seed, so a run stopped by a timeout keeps what it measured.
    """
    mod = load_study(name)
    once = bool(getattr(mod, "SEED_INDEPENDENT", False))
    # a study with seed-independent parts runs them at seed 0 only
    fixed = tuple(getattr(mod, "SEED_INDEPENDENT_PARTS", ()))
    rest = tuple(p for p in getattr(mod, "PARTS", ()) if p not in fixed) or None
    per_seed = _per_seed(prev) if prev else {}
    agg = _aggregate(per_seed, once=once) if per_seed else {}
    for s in range(1 if once else seeds):
        if str(s) in per_seed:
            continue
        per_seed[str(s)] = _run(name, quick=quick, seed=s, fault=None, tmp=tmp,
                                parts=rest if (s > 0 and fixed) else None)
        logger.info("%s %s seed %d: %s (%.1f s)", name, "quick" if quick else "full", s,
                    "PASS" if per_seed[str(s)]["passed"] else "FAIL",
                    per_seed[str(s)]["wall_s"])
        agg = _aggregate(per_seed, once=once)
        if save is not None:
            save(agg)
    return agg


def _grid(fam: str, sign: float, sizes: tuple[float, ...] = SIZES) -> list[float]:
    """The sizes scanned for one sign of a family (absolute values, ascending)."""
    # a zero or negative velocity, β or time (or a run stopped at 0) is another fault
    return [s for s in sorted(sizes) if not ((sign < 0 or fam in ONE_SIDED or "stop-short" in fam)
                                     and s >= 1.0)]


def _keys(mod: Any, families: list[str] | None) -> list[tuple[str, str, float]]:
    """``(key, family, sign)`` for the study's families (all, or those named in ``families``)."""
    out = []
    for fam in getattr(mod, "FAMILIES", {}):
        for sign in (1.0,) if fam in ONE_SIDED else (1.0, -1.0):
            key = f"{fam}:{'+' if sign > 0 else '-'}"
            if families is None or key in families or fam in families:
                out.append((key, fam, sign))
    return out


def power(name: str, *, quick: bool, seeds: int, tmp: Path, families: list[str] | None = None,
          controls: bool = True, prev: dict[str, Any] | None = None,
          save: Callable[[dict[str, Any]], None] | None = None,
          sizes: tuple[float, ...] = SIZES) -> dict[str, Any]:
    """Smallest caught size per fault family, and the documented controls' tripped criteria.

    A size counts as caught when the faulted run fails at each of the first ``seeds`` seeds
    (one for a seed-independent study). ``families``: only these keys (``"pde-velocity:+"``)
    or families; ``prev``: an earlier power entry whose other families are kept; ``save`` is
    called after every family; ``sizes``: the grid (a coarser one than :data:`SIZES` where a
    run is expensive; the entry records it).
    """
    mod = load_study(name)
    once = bool(getattr(mod, "SEED_INDEPENDENT", False))
    seed_list = range(1 if once else seeds)
    out: dict[str, Any] = {"families": dict((prev or {}).get("families", {})),
                           "controls": dict((prev or {}).get("controls", {}))}
    out["seeds"] = list(seed_list)
    fams = out["families"]
    for key, fam, sign in _keys(mod, families):
        grid = _grid(fam, sign, sizes)
        found: dict[str, Any] = {"smallest_caught": None, "tripped": [], "scanned": [],
                                 "seeds": list(seed_list), "grid": grid}
        tried: dict[int, bool] = {}

        def caught_at(i: int, fam=fam, sign=sign, grid=grid, found=found,
                      tried=tried) -> bool:
            if i not in tried:
                fault = f"{fam}:{sign * grid[i]:g}"
                rs = [_run(name, quick=quick, seed=k, fault=fault, tmp=tmp)
                      for k in seed_list]
                tried[i] = all(not r["passed"] for r in rs)
                found["scanned"].append({"s": sign * grid[i], "caught": tried[i],
                                         "wall_s": round(sum(r["wall_s"] for r in rs), 1)})
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
        logger.info("%s %s power %s: %s", name, "quick" if quick else "full", key,
                    found["smallest_caught"])
        if save is not None:
            save(out)
    if controls:
        for f in getattr(mod, "FAULTS", {}):
            r = _run(name, quick=quick, seed=0, fault=f, tmp=tmp)
            out["controls"][f] = {"caught": not r["passed"], "tripped": sorted(
                c for c, v in r["criteria"].items() if not v["ok"])}
        if save is not None:
            save(out)
    return out


def recheck(name: str, *, quick: bool, seeds: list[int], tmp: Path, entry: dict[str, Any],
            save: Callable[[dict[str, Any]], None] | None = None,
            sizes: tuple[float, ...] = SIZES) -> dict[str, Any]:
    """Recheck the stated smallest caught sizes of ``entry`` (a power entry) at more seeds.

    For every family with a stated size ``s₀`` (caught at seed 0) and every seed ``k`` of
    ``seeds`` the faulted study runs at ``s₀`` and, while it passes, at the next larger size
    of :data:`SIZES`: ``smallest[k]`` is the first size caught at seed ``k`` from ``s₀`` up
    (``None``: not caught up to the grid's end). The size caught at seed 0 and at every
    rechecked seed is ``reliable`` (the largest of them). A seed-independent study is not
    rechecked (another seed repeats one test).
    """
    mod = load_study(name)
    out = dict(entry.get("recheck", {}))
    if getattr(mod, "SEED_INDEPENDENT", False):
        return out
    for key, fam, sign in _keys(mod, None):
        stated = entry.get("families", {}).get(key, {}).get("smallest_caught")
        if stated is None:
            continue
        grid = _grid(fam, sign, sizes)
        i0 = min(range(len(grid)), key=lambda i: abs(grid[i] - abs(stated)))
        rec = dict(out.get(key, {}).get("per_seed", {}))
        for k in seeds:
            if str(k) in rec:
                continue
            got, scanned = None, []
            for i in range(i0, len(grid)):
                r = _run(name, quick=quick, seed=k, fault=f"{fam}:{sign * grid[i]:g}", tmp=tmp)
                scanned.append({"s": sign * grid[i], "caught": not r["passed"],
                                "tripped": sorted(c for c, v in r["criteria"].items()
                                                  if not v["ok"]),
                                "wall_s": r["wall_s"]})
                if not r["passed"]:
                    got = sign * grid[i]
                    break
            rec[str(k)] = {"smallest_from_stated": got, "scanned": scanned}
            logger.info("%s %s recheck %s seed %d: %s", name, "quick" if quick else "full",
                        key, k, got)
        vals = [rec[str(k)]["smallest_from_stated"] for k in sorted(int(x) for x in rec)]
        reliable = (None if any(v is None for v in vals)
                    else max([stated, *vals], key=abs))
        out[key] = {"stated": stated, "per_seed": rec, "reliable": reliable,
                    "seeds": [0, *sorted(int(x) for x in rec)]}
        if save is not None:
            save(out)
    return out


def _family_text(key: str, v: dict[str, Any], rec: dict[str, Any] | None) -> str:
    """One family's cell: the smallest size caught at seed 0, its criteria, the recheck."""
    if v["smallest_caught"] is None:
        return f"{key}: none ≤ {max(v.get('grid', SIZES)):g}"
    seeds = v.get("seeds", [0])
    txt = f"{key}: {v['smallest_caught']:+g} ({', '.join(v['tripped'])})"
    if rec is None:
        return txt + (f" [seed {seeds[0]}]" if len(seeds) == 1 else
                      f" [seeds {seeds[0]}–{seeds[-1]}]")
    rs = rec["seeds"]
    span = f"{rs[0]}–{rs[-1]}" if rs == list(range(rs[0], rs[-1] + 1)) else ", ".join(map(str, rs))
    if rec["reliable"] is None:
        bad = [k for k, r in rec["per_seed"].items() if r["smallest_from_stated"] is None]
        return txt + (f" [seed 0; not caught ≤ {max(v.get('grid', SIZES)):g} at seed "
                      f"{', '.join(bad)}]")
    if rec["reliable"] == rec["stated"]:
        return txt + f" [caught at seeds {span}]"
    return txt + f" [seed 0; caught at seeds {span} from {rec['reliable']:+g}]"


def _span(seeds: list[int]) -> str:
    """``0–99`` for a contiguous run of seeds, else the list."""
    if not seeds:
        return "?"
    if seeds == list(range(seeds[0], seeds[-1] + 1)):
        return f"{seeds[0]}–{seeds[-1]}"
    return ", ".join(map(str, seeds))


def load(paths: list[Path]) -> dict[str, Any]:
    """The studies of several results files; a later file's studies override an earlier's."""
    data: dict[str, Any] = {}
    for p in paths:
        if p.is_file():
            data.update(json.loads(p.read_text())["studies"])
    return data


def markdown(data: dict[str, Any]) -> str:
    """The table study | criterion | false-fail rate | smallest caught fault per family."""
    lines = ["| study | mode | runs | criterion | false-fail rate (observed range) "
             "| smallest caught fault per family (criteria tripped) [seeds] |",
             "|---|---|---|---|---|---|"]
    for name in STUDIES:
        for mode, m in data.get(name, {}).items():
            if "size" not in m:
                continue
            sz = m["size"]
            pw = m.get("power", {}).get("families", {})
            rc = m.get("recheck", {})
            pw_txt = "; ".join(_family_text(k, v, rc.get(k)) for k, v in pw.items()) or "—"
            runs = f"{sz['runs']}" + (" (seed-independent)" if sz["seed_independent"] else "")
            first = True
            for c, e in sz["criteria"].items():
                rng = ("" if e["min"] is None else f" ({e['min']:.3g} … {e['max']:.3g}, "
                       f"accept {e['accepted']})")
                lines.append(f"| {name if first else ''} | {mode if first else ''} | "
                             f"{runs if first else ''} | {c} | {e['fails']}/{sz['runs']}{rng} | "
                             f"{pw_txt if first else ''} |")
                first = False
            walls = [w for w in sz.get("wall_s_per_run", []) if w is not None]
            wall = (f"; {min(walls):.3g}–{max(walls):.3g} s per run" if walls else
                    f"; {sz['wall_s'] / sz['runs']:.3g} s per run")
            ub = upper95(len(sz["failing_seeds"]), sz["runs"])
            seeds_run = _span(sz.get("seeds") or list(range(sz["runs"])))
            ub_txt = ("" if ub is None or sz["seed_independent"] else
                      f" (95 % upper bound {100 * ub:.2g} %; seeds {seeds_run})")
            lines.append(f"| | | | **study** | **{len(sz['failing_seeds'])}/{sz['runs']}**"
                         f"{ub_txt}{wall} | |")
    for mode in ("quick", "full"):
        rows = [(name, f, v) for name in STUDIES
                for f, v in data.get(name, {}).get(mode, {}).get("power", {})
                .get("controls", {}).items()]
        if not rows:
            continue
        lines += ["", f"Documented controls (`FAULTS`, {mode} mode, seed 0):", "",
                  "| study | control | caught | criteria tripped |", "|---|---|---|---|"]
        for name, f, v in rows:
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
    p.add_argument("--families", nargs="+", default=None,
                   help="scan only these families or keys (pde-velocity, pde-velocity:+)")
    p.add_argument("--sizes", type=float, nargs="+", default=list(SIZES),
                   help="the grid of fault sizes scanned [SIZES]")
    p.add_argument("--no-controls", action="store_true",
                   help="do not run the documented controls in the power scan")
    p.add_argument("--recheck-seeds", type=int, nargs="+", default=None,
                   help="recheck the stated smallest caught sizes at these seeds")
    p.add_argument("--no-size", action="store_true", help="no size measurement")
    p.add_argument("--out", type=Path, default=RESULTS)
    p.add_argument("--merge", action="store_true",
                   help="update an existing results file (seeds measured there are kept)")
    p.add_argument("--fresh", action="store_true",
                   help="with --merge: rerun the seeds of the studies measured")
    p.add_argument("--markdown", action="store_true",
                   help="print the table from --out and, if present, "
                        f"{EDI_RESULTS.name} (its studies override)")
    args = p.parse_args(argv)
    if args.markdown:
        print(markdown(load([args.out, EDI_RESULTS])))
        return 0
    logging.basicConfig(level=logging.INFO, format="%(message)s")
    # the engines' own warnings (coarse levels of a sweep are inaccurate by design)
    logging.getLogger("wflow").setLevel(logging.ERROR)
    import warnings

    warnings.filterwarnings("ignore")
    data: dict[str, Any] = {}
    if args.merge and args.out.is_file():
        data = json.loads(args.out.read_text())["studies"]

    def write() -> None:
        args.out.parent.mkdir(parents=True, exist_ok=True)
        tmp_out = args.out.with_suffix(".tmp")
        tmp_out.write_text(json.dumps({"sizes": list(SIZES), "studies": data}, indent=1) + "\n")
        tmp_out.replace(args.out)

    with tempfile.TemporaryDirectory(prefix="size_power_") as d:
        tmp = Path(d)
        for name in args.studies:
            for mode in args.modes:
                quick = mode == "quick"
                entry = data.setdefault(name, {}).setdefault(mode, {})

                def put(key: str, value: dict[str, Any], entry=entry) -> None:
                    entry[key] = value
                    write()

                if not args.no_size:
                    prev = None if args.fresh else entry.get("size")
                    entry["size"] = size(name, quick=quick, seeds=args.seeds, tmp=tmp,
                                         prev=prev, save=lambda v, put=put: put("size", v))
                    logger.info("%s %s: false-fail %d/%d %s", name, mode,
                                len(entry["size"]["failing_seeds"]), entry["size"]["runs"],
                                entry["size"]["failing_seeds"])
                if args.power:
                    entry["power"] = power(
                        name, quick=quick, seeds=args.power_seeds, tmp=tmp,
                        families=args.families, controls=not args.no_controls,
                        prev=None if args.fresh else entry.get("power"),
                        save=lambda v, put=put: put("power", v), sizes=tuple(args.sizes))
                    logger.info("%s %s: power %s", name, mode, json.dumps(
                        {k: v["smallest_caught"] for k, v in entry["power"]["families"].items()}))
                if args.recheck_seeds:
                    entry["recheck"] = recheck(
                        name, quick=quick, seeds=args.recheck_seeds, tmp=tmp,
                        entry={**entry.get("power", {}), "recheck": entry.get("recheck", {})},
                        save=lambda v, put=put: put("recheck", v), sizes=tuple(args.sizes))
                write()
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
