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
keeps the others; the ``edi`` study is measured into ``size_power_edi.json`` and the noisy
model's studies into ``size_power_noisy.json`` and the causal model's into
``size_power_causal.json`` (``--out``), whose studies override). Runs go
to a temporary directory. Not a timed benchmark: wall times are recorded only to plan the
runs.

The page docs/studies_power.md is generated whole from the four results files
(:func:`page`: fixed prose without measured numbers, and every number rendered from the
JSON), and so is the README's bullet "What a PASS rules out" (:func:`readme_bullet`).
After a measurement, regenerate both::

    PYTHONPATH=$PWD .venv/bin/python bench/size_power.py --write

``--page`` prints the page, ``--markdown`` its per-criterion table.
``tests/test_size_power.py`` fails when the page differs from the generated text and
``tests/test_doc_numbers.py`` when the README's bullet does. The generator takes whatever
the files hold: a mode with power but no size, families with or without ``recheck``
entries, modes whose controls were not run.
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
#: The noisy model's studies (``phase``, ``free-energy``, ``noisy-mean-field``), measured
#: separately (same schema; read after the two above).
NOISY_RESULTS = RESULTS.with_name("size_power_noisy.json")
#: The causal model's study (``causal-mean-field``), measured separately (same schema).
CAUSAL_RESULTS = RESULTS.with_name("size_power_causal.json")
#: Every results file the page and the README's bullet read, in override order.
ALL_RESULTS = (RESULTS, EDI_RESULTS, NOISY_RESULTS, CAUSAL_RESULTS)

#: Fault sizes scanned for power (absolute values; families with both signs get ``±s``).
#: The scan bisects this grid assuming that a larger fault of a family is caught when a
#: smaller one is (checked at the ends: the largest size first).
SIZES = (0.001, 0.002, 0.005, 0.01, 0.02, 0.05, 0.1, 0.2, 0.5, 1.0)
#: Families whose size is one-signed (a variance factor, a fraction of T cut off, ...).
ONE_SIDED = {"noise-var", "stop-short", "run-past", "ito-scale"}


#: A run's fitted numbers kept beside its criteria when the study reports them: a score's
#: centring can then be changed and the size recomputed from the record (``noisy-mean-field``:
#: the uncentred fitted ``D``, its standard error and the uncentred score).
RECORDED_FITS = ("D_fit", "D_fit_se", "score_t_raw", "particle_bias_rel", "particle_bias_se")


def _run(name: str, *, quick: bool, seed: int, fault: str | None, tmp: Path,
         parts: tuple[str, ...] | None = None) -> dict[str, Any]:
    mod = load_study(name)
    kw: dict[str, Any] = {}
    if fault is not None:
        kw["fault"] = fault
        if fault in getattr(mod, "FAULT_DTYPES", {}):  # a control of another precision
            kw["dtype"] = mod.FAULT_DTYPES[fault]
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
    rec = {"passed": bool(res.passed), "criteria": crit,
           "wall_s": round(time.perf_counter() - t0, 2)}
    fits = {k: res.summary.get("fits", {})[k] for k in RECORDED_FITS
            if k in res.summary.get("fits", {})}
    if fits:
        rec["fits"] = fits
    return rec


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
         save: Callable[[dict[str, Any]], None] | None = None,
         seed_from: int = 0) -> dict[str, Any]:
    """False-fail rate of study ``name`` over seeds ``0 … seeds−1`` (once if seed-independent).

    ``prev``: an earlier size entry of the same study and mode; its seeds are kept and not
    rerun (so an interrupted measurement resumes). ``save`` is called with the aggregate
    after every seed, so a run stopped by a timeout keeps what it measured.
    ``seed_from``: run only the seeds ``seed_from … seeds−1`` (two processes over two
    halves of the range, each to its own ``--out``; :func:`merge_sizes` joins them).
    """
    mod = load_study(name)
    once = bool(getattr(mod, "SEED_INDEPENDENT", False))
    # a study with seed-independent parts runs them at seed 0 only
    fixed = tuple(getattr(mod, "SEED_INDEPENDENT_PARTS", ()))
    rest = tuple(p for p in getattr(mod, "PARTS", ()) if p not in fixed) or None
    per_seed = _per_seed(prev) if prev else {}
    agg = _aggregate(per_seed, once=once) if per_seed else {}
    for s in range(0 if once else seed_from, 1 if once else seeds):
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


def merge_sizes(out: Path, others: list[Path], studies: list[str], modes: list[str]) -> None:
    """Join the size seeds of ``others`` (the same studies and modes) into ``out``.

    A seed measured in both keeps ``out``'s record; the aggregate is recomputed.
    """
    data = json.loads(out.read_text())
    for other in others:
        more = json.loads(other.read_text())["studies"]
        for name in studies:
            for mode in modes:
                sz = more.get(name, {}).get(mode, {}).get("size")
                if not sz:
                    continue
                entry = data["studies"].setdefault(name, {}).setdefault(mode, {})
                per = {**_per_seed(sz), **(_per_seed(entry["size"]) if "size" in entry else {})}
                entry["size"] = _aggregate(per, once=sz["seed_independent"])
    out.write_text(json.dumps(data, indent=1) + "\n")


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


def _span(seeds: list[int]) -> str:
    """``0–99`` for a contiguous run of seeds, ``0–2, 20–39`` for several."""
    return seeds_text(seeds).split(" ", 1)[1] if seeds else "?"


def load(paths: list[Path]) -> dict[str, Any]:
    """The studies of several results files; a later file's studies override an earlier's."""
    data: dict[str, Any] = {}
    for p in paths:
        if p.is_file():
            data.update(json.loads(p.read_text())["studies"])
    return data


def markdown(data: dict[str, Any]) -> str:
    """The per-criterion table: study | mode | runs | criterion | false fails (ranges).

    One row per criterion of every size entry (its false fails, its observed range on the
    correct solver, its accepted range) and a last row per study and mode with the study's
    own false fails, the 95 % bound and the wall time per run; a mode with power but no
    size gets one row saying so.
    """
    lines = ["| study | mode | runs | criterion | false fails (observed range, accepted) |",
             "|---|---|---|---|---|"]
    for name in STUDIES:
        for mode, m in data.get(name, {}).items():
            if "size" not in m:
                if m.get("power", {}).get("families"):
                    lines.append(f"| {name} | {mode} | — | (size not measured) | |")
                continue
            sz = m["size"]
            runs = f"{sz['runs']}" + (" (seed-independent)" if sz["seed_independent"] else "")
            first = True
            for c, e in sz["criteria"].items():
                rng = ("" if e["min"] is None else f" ({e['min']:.3g} … {e['max']:.3g}, "
                       f"accept {e['accepted']})")
                lines.append(f"| {name if first else ''} | {mode if first else ''} | "
                             f"{runs if first else ''} | {c} | {e['fails']}/{sz['runs']}{rng} |")
                first = False
            walls = [w for w in sz.get("wall_s_per_run", []) if w is not None]
            wall = (f"; {_sec(min(walls))}–{_sec(max(walls))} s per run" if walls else
                    f"; {_sec(sz['wall_s'] / sz['runs'])} s per run")
            ub = upper95(len(sz["failing_seeds"]), sz["runs"])
            seeds_run = _span(sz.get("seeds") or list(range(sz["runs"])))
            ub_txt = ("" if ub is None or sz["seed_independent"] else
                      f" (95 % upper bound {100 * ub:.2g} %; seeds {seeds_run})")
            lines.append(f"| | | | **study** | **{len(sz['failing_seeds'])}/{sz['runs']}**"
                         f"{ub_txt}{wall} |")
    return "\n".join(lines) + "\n"


# --------------------------------------------------------------------------- the page
#: The page generated from the results files (``--write``), and the README bullet.
PAGE = Path(__file__).resolve().parents[1] / "docs" / "studies_power.md"
README = PAGE.parents[1] / "README.md"
#: The command that regenerates the page and the README bullet (stated on both).
REGENERATE = "PYTHONPATH=$PWD .venv/bin/python bench/size_power.py --write"
#: The family-wise target of every study: a false-fail rate of at most 1 %.
TARGET = 0.01
MINUS = "\u2212"


def pct(s: float, *, sign: bool = True) -> str:
    """A relative fault size as a signed percentage: ``0.005`` → ``+0.5 %``."""
    txt = f"{100 * abs(s):.3g} %"
    return (("+" if s > 0 else MINUS) + txt) if sign and s != 0 else txt


def seeds_text(seeds: list[int] | set[int]) -> str:
    """``seed 0``, ``seeds 0–2, 20–39`` (contiguous runs joined by en dashes)."""
    s = sorted(set(seeds))
    if not s:
        return "no seed"
    runs: list[list[int]] = [[s[0], s[0]]]
    for k in s[1:]:
        if k == runs[-1][1] + 1:
            runs[-1][1] = k
        else:
            runs.append([k, k])
    parts = [f"{a}" if a == b else f"{a}, {b}" if b == a + 1 else f"{a}–{b}" for a, b in runs]
    return ("seed " if len(s) == 1 else "seeds ") + ", ".join(parts)


def _module(name: str) -> Any:
    try:
        return load_study(name)
    except Exception:  # a study renamed or removed since its measurement
        return None


def _once(name: str, m: dict[str, Any]) -> bool:
    mod = _module(name)
    if mod is not None:
        return bool(getattr(mod, "SEED_INDEPENDENT", False))
    return bool(m.get("size", {}).get("seed_independent", False))


def _sec(x: float) -> str:
    """Seconds to 3 significant digits, without an exponent."""
    return f"{x:.3g}" if x < 1000 else f"{x:.0f}"


def _size_seeds(sz: dict[str, Any]) -> list[int]:
    return list(sz.get("seeds") or range(sz["runs"]))


def size_text(name: str, mode: str, m: dict[str, Any]) -> str:
    """The study's false fails in one mode: ``0 of 100 runs (seeds 0–99; 95 % upper bound 3 %)``."""
    sz = m.get("size")
    if not sz:
        return f"{mode} mode: size not measured"
    k, n = len(sz["failing_seeds"]), sz["runs"]
    if sz["seed_independent"]:
        return (f"{mode} mode: {'passes' if k == 0 else 'fails'} on the correct solver "
                f"(seed-independent: one run)")
    fail = "" if k == 0 else f": failing at {seeds_text(sz['failing_seeds'])}"
    ub = upper95(k, n)
    return (f"{mode} mode: {k} of {n} runs fail{fail} ({seeds_text(_size_seeds(sz))}; "
            f"95 % upper bound {100 * ub:.2g} %)")


def _size_notes(m: dict[str, Any]) -> list[str]:
    """The notes a size entry carries, and the earlier measurements kept beside it."""
    sz, out = m.get("size", {}), []
    if sz.get("rescored"):
        out.append(f"rescored: {sz['rescored']}")
    for key in ("measured", "note"):
        if sz.get(key):
            out.append(f"{key}: {sz[key]}")
    for key, e in m.items():
        if key.startswith("size_") and isinstance(e, dict):
            txt = (f"`{key}` (an earlier measurement kept in the results file): "
                   f"{len(e['failing_seeds'])} of {e['runs']} runs failed")
            if e["failing_seeds"]:
                txt += f" ({seeds_text(e['failing_seeds'])})"
            out.append(txt + (f"; {e['note']}" if e.get("note") else ""))
    return out


def _family_key(key: str) -> tuple[str, float]:
    fam, sgn = key.rsplit(":", 1)
    return fam, -1.0 if sgn == "-" else 1.0


def family_claim(v: dict[str, Any], rec: dict[str, Any] | None,
                 seeds: list[int]) -> dict[str, Any]:
    """What one family's scan and recheck show.

    Returns ``size`` (the size caught at every seed checked; ``None``: not caught at all of
    them), ``stated`` (the smallest caught at the scan's seeds), ``seeds`` (every seed
    checked), ``needs`` (size → the rechecked seeds that pass ``stated`` and are caught
    from that size on) and ``missed`` (rechecked seeds not caught up to the grid's end).
    """
    stated = v["smallest_caught"]
    out: dict[str, Any] = {"stated": stated, "size": stated, "seeds": sorted(seeds),
                           "needs": {}, "missed": [], "rechecked": False}
    if stated is None or rec is None:
        return out
    per = {int(k): r["smallest_from_stated"] for k, r in rec["per_seed"].items()}
    out["rechecked"] = True
    out["seeds"] = sorted(set(seeds) | set(per))
    for k, s in sorted(per.items()):
        if s is None:
            out["missed"].append(k)
        elif s != stated:
            out["needs"].setdefault(s, []).append(k)
    out["size"] = rec["reliable"]
    return out


def _needs_text(needs: dict[float, list[int]]) -> str:
    """``+0.5 % at seeds 2, 22; +1 % at seed 29`` (the larger sizes rechecked seeds need)."""
    return "; ".join(f"{pct(s)} at {seeds_text(ks)}"
                     for s, ks in sorted(needs.items(), key=lambda x: abs(x[0])))


def family_text(key: str, v: dict[str, Any], rec: dict[str, Any] | None, seeds: list[int],
                *, once: bool) -> str:
    """One family's line: the size caught at every seed checked, the seeds, the criteria."""
    fam, sign = _family_key(key)
    grid = [sign * s for s in v.get("grid") or _grid(fam, sign)]
    c = family_claim(v, rec, seeds)
    scope = "the one run (seed-independent)" if once else seeds_text(c["seeds"])
    if c["stated"] is None:
        txt = (f"not caught up to {pct(grid[-1])} ({scope}; sizes scanned: "
               f"{', '.join(pct(s) for s in grid)})")
    elif c["size"] is None:
        txt = (f"{pct(c['stated'])} caught at {seeds_text(seeds)}; not caught up to "
               f"{pct(grid[-1])} at {seeds_text(c['missed'])}")
        if c["needs"]:
            txt += "; caught from " + _needs_text(c["needs"])
    else:
        txt = f"**{pct(c['size'])}** caught at " + (
            scope if once or not c["rechecked"] else f"every seed checked ({scope})")
        if c["needs"]:
            n_ok = len(c["seeds"]) - sum(len(x) for x in c["needs"].values())
            txt += (f"; {pct(c['stated'])} at {n_ok} of these {len(c['seeds'])} seeds "
                    f"(the others are caught from {_needs_text(c['needs'])})")
        paren = []
        if not c["rechecked"] and not once and not c["needs"]:
            paren.append("not rechecked")
        if c["size"] == grid[0]:
            paren.append("the only size scanned" if len(grid) == 1 else
                         "the smallest size scanned")
        if paren:
            txt += f" ({'; '.join(paren)})"
    if v.get("tripped"):
        txt += f"; tripped: {', '.join(f'`{t}`' for t in v['tripped'])}"
    if v.get("measured"):
        txt += f"; measured {v['measured']}"
    return f"`{key}`: {txt}"


def _mono_text(pw: dict[str, Any]) -> str | None:
    mono = pw.get("monotonicity_check")
    if not mono:
        return None
    keys = sorted(mono, key=lambda k: (float(k) < 0, abs(float(k))))
    bad = [k for k in keys if not mono[k]["caught"]]
    head = ("monotonicity checked at the larger sizes "
            f"{', '.join(pct(float(k)) for k in keys)}: ")
    return head + ("every one caught" if not bad else
                   f"**not caught** at {', '.join(pct(float(k)) for k in bad)}")


def controls_lines(name: str, m: dict[str, Any]) -> list[str]:
    """The documented controls run for one mode (seed 0), each with the criteria it trips."""
    mod = _module(name)
    desc = dict(getattr(mod, "FAULTS", {})) if mod is not None else {}
    out = []
    for f, v in m.get("power", {}).get("controls", {}).items():
        what = f" ({desc[f]})" if f in desc else ""
        verdict = ("**FAIL**" if v["caught"] else "**passes: not caught**")
        crit = f": {', '.join(f'`{t}`' for t in v['tripped'])}" if v["tripped"] else ""
        out.append(f"`{f}`{what}: {verdict}{crit}")
    return out


def untripped(modes: dict[str, dict[str, Any]]) -> list[str]:
    """Criteria of a study's size runs that no scanned fault, recheck or control tripped.

    ``modes``: the study's entries by mode; a study with no control run in any mode gives
    ``[]`` (nothing was tried that could trip them).
    """
    if not any(m.get("power", {}).get("controls") for m in modes.values()):
        return []
    hit: set[str] = set()
    crit: dict[str, None] = {}
    for m in modes.values():
        crit.update(dict.fromkeys(m.get("size", {}).get("criteria", {})))
        pw = m.get("power", {})
        for v in pw.get("families", {}).values():
            hit.update(v.get("tripped", []))
            for t in v.get("tripped_at", {}).values():
                hit.update(t)
        for v in pw.get("controls", {}).values():
            hit.update(v["tripped"])
        for r in m.get("recheck", {}).values():
            for ps in r.get("per_seed", {}).values():
                for sc in ps.get("scanned", []):
                    hit.update(sc.get("tripped", []))
    return [c for c in crit if c not in hit]


def _modes(data: dict[str, Any], name: str) -> list[tuple[str, dict[str, Any]]]:
    return [(mode, data[name][mode]) for mode in ("quick", "full")
            if mode in data.get(name, {})]


def size_table(data: dict[str, Any]) -> str:
    """Every study and mode: false fails / runs, failing seeds, the 95 % bound, seeds, wall."""
    lines = ["| study | mode | false fails / runs | 95 % upper bound | seeds | s per run |",
             "|---|---|---|---|---|---|"]
    for name in STUDIES:
        for mode, m in _modes(data, name):
            sz = m.get("size")
            if not sz:
                lines.append(f"| `{name}` | {mode} | not measured | | | |")
                continue
            k, n = len(sz["failing_seeds"]), sz["runs"]
            fails = f"**{k}/{n}**" + (f" ({seeds_text(sz['failing_seeds'])})" if k else "")
            walls = [w for w in sz.get("wall_s_per_run", []) if w is not None]
            wall = (f"{_sec(min(walls))}–{_sec(max(walls))}" if len(walls) > 1 else
                    _sec(sz["wall_s"] / n))
            if sz["seed_independent"]:
                ub, seeds = "— (seed-independent)", "one run"
            else:
                ub, seeds = f"{100 * upper95(k, n):.2g} %", seeds_text(_size_seeds(sz))[6:]
            lines.append(f"| `{name}` | {mode} | {fails} | {ub} | {seeds} | {wall} |")
    return "\n".join(lines)


#: Where the documented controls that this script did not run are run.
_ELSEWHERE = ("the test suite runs every documented control: tests/test_study_controls.py, "
              "tests/test_study_full.py")


def mobility_table(data: dict[str, Any]) -> str:
    """Every study's controls that drop or scale the softmax mobility, per mode run."""
    lines = ["| study | mode | control | caught | criteria tripped |", "|---|---|---|---|---|"]
    for name in STUDIES:
        mod = _module(name)
        declared = [f for f in getattr(mod, "FAULTS", {}) if "mobility" in f]
        rows = [(mode, f, v) for mode, m in _modes(data, name)
                for f, v in m.get("power", {}).get("controls", {}).items() if "mobility" in f]
        for mode, f, v in rows:
            lines.append(f"| `{name}` | {mode} | `{f}` | "
                         f"{'FAIL' if v['caught'] else '**passes**'} | "
                         f"{', '.join(f'`{t}`' for t in v['tripped'])} |")
        if not rows and name in data:
            why = ("no mobility control" if not declared else
                   f"{', '.join(f'`{f}`' for f in declared)}: not run by this script "
                   f"({_ELSEWHERE})")
            lines.append(f"| `{name}` | | — | | {why} |")
    return "\n".join(lines)


#: What a study's criteria see that its list of faults does not show (fixed text: no
#: measured number; the fault sizes named are those of the tests cited).
STUDY_NOTES = {
    "stability": "The engine's first RK4 step is compared with the stated field's "
                 "(`first_step_matches_model`, judged to round-off): a softmax normaliser off "
                 "by a constant (`Z + 1e-3`), inside `first_step_growth`'s bound, is caught "
                 "there (tests/test_study_controls.py).",
    "noisy-edi": "`ito_engine_matches_stated` (judged to round-off) compares the engine's Itô "
                 "term with the stated law's: it catches an engine whose Itô correction has "
                 "the wrong sign (`engine-ito-sign`), which the balance criteria cannot see "
                 "(the engine's chain rule with its own Itô term still balances), and a noise "
                 "of the wrong variance or law. `drift_matches_model` compares the engine's "
                 "drift with the model's: the balance holds for any drift, so only it sees a "
                 "wrong velocity or a dropped mobility.",
    "radial-dominance": "Blind to a dropped softmax mobility by construction (see "
                        "\"A missing mobility factor\").",
}


def study_section(name: str, data: dict[str, Any]) -> str:
    """``### name``: its size per mode, the smallest caught fault per family, its controls."""
    mod = _module(name)
    fam_desc = dict(getattr(mod, "FAMILIES", {})) if mod is not None else {}
    modes = _modes(data, name)
    out = [f"### `{name}`", ""]
    if STUDIES[name].section:
        out += [f"Checks the claims of docs/theory.md {STUDIES[name].section}.", ""]
    out += ["**Size** (false fails on the correct solver):", ""]
    for mode, m in modes:
        out.append(f"* {size_text(name, mode, m)}.")
        out += [f"  * {n}" for n in _size_notes(m)]
    out.append("")
    fams = {mode: m.get("power", {}).get("families", {}) for mode, m in modes}
    if any(fams.values()):
        out += ["**Smallest fault caught**, per family (`FAMILY:S`, the size `s` as a "
                "percentage):", ""]
        names = list(dict.fromkeys(_family_key(k)[0] for f in fams.values() for k in f))
        for fam in names:
            what = f": {fam_desc[fam]}" if fam in fam_desc else ""
            out.append(f"* `{fam}`{what}.")
            for mode, m in modes:
                pw = m.get("power", {})
                seeds = pw.get("seeds") or [0]
                for key, v in fams[mode].items():
                    if _family_key(key)[0] == fam:
                        fs = v.get("seeds") or seeds
                        out.append(f"  * {mode}: " + family_text(
                            key, v, m.get("recheck", {}).get(key), fs,
                            once=_once(name, m)) + ".")
        out.append("")
    elif getattr(mod, "FAMILIES", None) is None:
        out += ["No fault family with a size: only the documented controls below.", ""]
    if STUDY_NOTES.get(name):
        out += [STUDY_NOTES[name], ""]
    notes = [(mode, f"scan note: {m['power']['note']}") for mode, m in modes
             if m.get("power", {}).get("note")]
    notes += [(mode, t) for mode, m in modes if (t := _mono_text(m.get("power", {})))]
    if notes:
        out += [f"* {mode}: {t}." for mode, t in notes] + [""]
    out += ["**Documented controls** (`FAULTS`, seed 0):", ""]
    for mode, m in modes:
        lines = controls_lines(name, m)
        if not lines:
            out.append(f"* {mode}: not run by this script in {mode} mode ({_ELSEWHERE}).")
            continue
        out.append(f"* {mode}:")
        out += [f"  * {t}." for t in lines]
    out.append("")
    quiet = untripped(dict(modes))
    if quiet:
        out += ["**Criteria that no scanned fault or control tripped** in either mode (they "
                "judge properties that none of the injected faults breaks): "
                + ", ".join(f"`{c}`" for c in quiet) + ".", ""]
    return "\n".join(out)


def _cp_numbers() -> dict[str, str]:
    """The Clopper–Pearson bounds the method prose quotes (computed, not measured)."""
    import math

    clean = math.ceil(math.log(0.05) / math.log(1 - TARGET))  # (1 − p)^N ≤ 5 % at p = 1 %
    return {"u20": f"{100 * upper95(0, 20):.2g} %", "u100": f"{100 * upper95(0, 100):.2g} %",
            "clean": str(clean), "target": f"{100 * TARGET:g} %", "p": f"{TARGET:g}",
            "a8": f"{1 - (1 - TARGET) ** (1 / 8):.3g}"}


_INTRO = """\
<!-- Generated from bench/results/size_power.json, bench/results/size_power_edi.json and
bench/results/size_power_noisy.json by bench/size_power.py; do not edit by hand. After a
measurement, regenerate this page and the README's "What a PASS rules out" bullet with:
    {regen}
tests/test_size_power.py fails when this page differs from the generated text. -->

# What a PASS rules out: size and power of the verification studies

Every `wflow verify STUDY` verdict is a set of named criteria (a measured value and its
accepted range). This page states, for every study and mode, two measured operating
characteristics, and every measured number on it is generated from the results files
`bench/results/size_power.json`, `bench/results/size_power_edi.json` (the `edi` study) and
`bench/results/size_power_noisy.json` (the noisy model's studies):

* **size**: how often the study FAILS the *correct* solver (false fails over the seeds
  run, with the one-sided 95 % upper bound of the rate);
* **power**: the smallest fault of each family that the study catches, at the seeds
  where that was checked, and the documented controls with the criteria they trip.

So a PASS of study X rules out, with the false-fail rate stated under X, each fault of
X's list at the size stated there or larger. How both are measured: the last section but
one.

## The size of each study

A verdict is every criterion at once, so the rate that matters is the *study's*: the
chance that any of its criteria fails on a correct solver. The target is at most
{target}. A count of clean seeds shows only a bound: no failure in `N` seeds bounds the
rate by the one-sided 95 % Clopper–Pearson bound (0 of 20: {u20}; 0 of 100: {u100};
showing ≤ {target} takes {clean} clean seeds). A seed-independent study runs once (another
seed repeats one test).

"""

_PER_STUDY = """\
## What a PASS rules out, study by study

For each family, the size stated in bold is caught at every seed listed: the scan's seed
and every seed the family was rechecked at. Where a rechecked seed passes the size caught
at seed 0, the larger size that seed needs is the claim, and the seeds that need it are
named. A size marked "the smallest size scanned" may be an upper bound of what is
caught.

"""

_MOBILITY = """\
## A missing mobility factor

The softmax head's mobility is `m = 1/Z` (docs/theory.md §3); a bug that drops it turns
softmax attention into unnormalised attention. The softmax studies have a control that
drops it (`no-mobility`; for `mean-field` two, `pde-no-mobility` and
`particles-no-mobility`): the solver under test runs kind `usa` at the same `β` while the
theory side, the reference and the bounds keep softmax (`edi`: its JKO metric drops `b̂`,
and the family `mobility:S` scales it). Seed 0, from the results files:

{table}

`radial-dominance` is blind to it by construction: with identical heads on a symmetric
configuration `Z_h(x_i)` is one number for every token and head, and both sides of the
margin carry the same `1/Z` (its module docstring). `gamma`, `head-monotonicity`,
`superadditivity` and `asymptotics` judge the particle engine's own chain-rule check as
the criterion `particle_accuracy`, and `gaussian-particles` a run that blows up as
`particles_finite`: a fault that makes a run inaccurate or diverge fails the study instead
of raising.

"""

_METHOD = """\
## How size and power are measured

* **Size.** The study runs on the correct solver at seeds `0 … N−1` (the seeds column of
  the size table) and `bench/size_power.py` counts, per criterion and for the study as a
  whole, the runs that fail. A study whose criteria cannot depend on the seed
  (`SEED_INDEPENDENT`: the seed only rotates the tokens or draws reported, unjudged
  samples) runs once. The parts of a study that are seed-independent
  (`SEED_INDEPENDENT_PARTS`: `edi`'s PDE and JKO parts) run at seed 0 only; the other
  seeds run its remaining parts.
* **Thresholds from the null, family-wise.** A study judging `k` statistics sets each
  criterion's level by Šidák, `α = 1 − (1 − {p})^{{1/k}}` (for `k` = 8: {a8}), and takes
  the threshold from that criterion's null distribution (a stated law, or the values
  measured on the correct solver; the study's module docstring says which).
  Deterministic identities (a model step against the engine's, an Itô term against the
  stated one) are judged to round-off and add no false fails.
* **Power.** Faults are injected through the public API, `run(fault="FAMILY:S")` or
  `wflow verify STUDY --fault FAMILY:S`, with the families that a real bug produces:
  velocity or time scaled by `1 + s`, `β` off by `1 + s`, the noise variance `×(1 + s)`
  against the Itô term, an Itô term scaled by `1 + s`, a PDE that stops at `(1 − s)T`,
  head strengths `×(1 + s)`, a fraction `s` of the tokens drawn off `ρ_0`. The scan
  bisects the sizes
  {sizes}
  (both signs where the family has them; a coarser grid, named in the family's line,
  for the expensive scans) at seed 0, assuming that a larger
  fault of a family is caught when a smaller one is (the largest is checked first).
  `--recheck-seeds` then runs each stated size at more seeds and, where a seed passes it,
  the next larger sizes until that seed fails. The documented controls of each study's
  `FAULTS` (a dropped head, Euler instead of RK4, the first-order PDE scheme,
  non-symmetrised noise, ...) run once each, at seed 0.
* **Held-out seeds.** Where a threshold was fitted to measured values, the size runs at
  further seeds and the rechecks test it on data it was not fitted to; a claim that
  fails at a rechecked seed is stated at the size that seed needs.

The measurements (from the repository root; the script saves after every seed and every
family, so a run stopped by `timeout` keeps what it measured and `--merge` resumes it):

```sh
PYTHONPATH=$PWD .venv/bin/python bench/size_power.py --seeds 100 --modes quick --power
PYTHONPATH=$PWD .venv/bin/python bench/size_power.py --merge --no-size --recheck-seeds 1 2
PYTHONPATH=$PWD .venv/bin/python bench/size_power.py --merge --modes full --seeds 20 \\
    --studies gamma                          # resumes: the seeds already measured are kept
{regen}   # this page and the README bullet
```

`tests/test_size_power.py` checks that this page is the generated text, and (slow suite)
reruns a small grid (five studies, seeds 0–4, the stated smallest sizes) and fails when a
study fails at one of those seeds or a stated size is no longer caught.

## The per-criterion table

Each criterion's false fails over the size runs, with its observed range on the correct
solver and its accepted range; the last row of each study and mode is the study's own
count. Generated by `bench/size_power.py --markdown`.

"""


def page(data: dict[str, Any]) -> str:
    """The whole of docs/studies_power.md, from the results ``data`` (:func:`load`).

    Fixed prose that holds no measured number, and every measured number rendered from
    ``data``: the size table, one section per study (size, smallest caught fault per
    family with its seeds and rechecks, documented controls), the mobility controls and
    the per-criterion table (:func:`markdown`).
    """
    cp = _cp_numbers()
    sizes = ", ".join(f"{s:g}" for s in SIZES)
    parts = [_INTRO.format(regen=REGENERATE, **cp), size_table(data), ""]
    parts.append(_PER_STUDY)
    parts += [study_section(name, data) for name in STUDIES if name in data]
    parts.append(_MOBILITY.format(table=mobility_table(data)))
    parts.append(_METHOD.format(regen=REGENERATE, sizes=sizes, **cp))
    parts.append(markdown(data))
    return "\n".join(parts)


def page_diff(text: str, data: dict[str, Any]) -> list[str]:
    """The unified diff from the page ``text`` to the page generated from ``data``
    (empty: the page is exactly the generated text)."""
    import difflib

    return list(difflib.unified_diff(text.splitlines(), page(data).splitlines(),
                                     "docs/studies_power.md", "generated", lineterm="", n=0))


# --------------------------------------------------------------------------- the README
#: The README's examples of the smallest fault caught: (study, mode, family).
README_FAULTS = (("gamma", "quick", "velocity"), ("gamma", "full", "velocity"),
                 ("stability", "quick", "beta"), ("noisy-edi", "quick", "velocity"),
                 ("edi", "quick", "mobility"), ("mean-field", "quick", "pde-velocity"),
                 ("mean-field", "full", "pde-velocity"))
#: Why a softmax study has no mobility control (fixed text, no number).
NO_MOBILITY_CONTROL = {"radial-dominance": "blind by symmetry"}
#: The first words of the README's bullet that :func:`readme_bullet` writes.
README_HEAD = "* **What a PASS rules out**"


def _readme_size(data: dict[str, Any]) -> str:
    """Every study's false fails in both modes, as one clause: ranges and exceptions."""
    clauses, odd, once = [], [], set()
    for mode in ("quick", "full"):
        clean = []
        for name in STUDIES:
            m = data.get(name, {}).get(mode)
            if m is None:
                continue
            sz = m.get("size")
            if not sz:
                odd.append(f"`{name}` {mode}: not measured")
            elif sz["failing_seeds"]:
                odd.append(f"`{name}` {mode}: {len(sz['failing_seeds'])} of {sz['runs']}")
            elif sz["seed_independent"]:
                once.add(name)
            else:
                clean.append(sz["runs"])
        if clean:
            lo, hi = min(clean), max(clean)
            clauses.append(f"{lo}–{hi} seeds per study in {mode} mode" if lo < hi else
                           f"{lo} seeds per study in {mode} mode")
    txt = "no false fail in " + " and ".join(clauses)
    if once:
        txt += f" (one run for the {len(once)} seed-independent studies)"
    if odd:
        txt += ", except " + "; ".join(odd)
    return txt


def _readme_fault(data: dict[str, Any], name: str, mode: str, fam: str) -> str | None:
    """``velocity +2 % / −1 % (`gamma` quick, seeds 0–2, 20–39)`` (``None``: not measured)."""
    m = data.get(name, {}).get(mode, {})
    fams = m.get("power", {}).get("families", {})
    claims = {}
    for key, v in fams.items():
        if _family_key(key)[0] == fam:
            seeds = v.get("seeds") or m["power"].get("seeds") or [0]
            claims[_family_key(key)[1]] = family_claim(v, m.get("recheck", {}).get(key), seeds)
    if not claims:
        return None
    sizes = {sg: c["size"] for sg, c in claims.items()}
    if len(sizes) == 2 and None not in sizes.values() and abs(sizes[1.0]) == abs(sizes[-1.0]):
        txt = f"±{pct(sizes[1.0], sign=False)}"
    else:
        txt = " / ".join(pct(s) if s is not None else
                         f"{'+' if sg > 0 else MINUS}: not caught at every seed"
                         for sg, s in sorted(sizes.items(), reverse=True))
    seeds = sorted({k for c in claims.values() for k in c["seeds"]})
    return f"{fam} {txt} (`{name}` {mode}, {seeds_text(seeds)})"


def readme_bullet(data: dict[str, Any]) -> str:
    """The README's bullet "What a PASS rules out", every number from ``data``."""
    faults = [t for s in README_FAULTS if (t := _readme_fault(data, *s))]
    missed = [name for name in STUDIES
              for f, v in data.get(name, {}).get("quick", {}).get("power", {})
              .get("controls", {}).items() if "mobility" in f and not v["caught"]]
    none = [f"`{n}` has none: {why}" for n, why in NO_MOBILITY_CONTROL.items() if n in data]
    mob = ("A dropped softmax mobility fails every study's mobility control run"
           + (f" except {', '.join(f'`{n}`' for n in missed)}" if missed else "")
           + (f" ({'; '.join(none)})" if none else "") + ".")
    return (f"{README_HEAD} ([`docs/studies_power.md`](docs/studies_power.md)): every "
            f"`wflow verify` study's false-fail rate on the correct solver, at its "
            f"thresholds: {_readme_size(data)}. Smallest faults caught at every seed "
            f"checked: {'; '.join(faults)}. {mob}")


def write_docs(data: dict[str, Any], *, page_path: Path = PAGE,
               readme: Path = README) -> None:
    """Write docs/studies_power.md (:func:`page`) and the README bullet (:func:`readme_bullet`).

    The bullet replaces the README's lines from the one starting with :data:`README_HEAD`
    to the next bullet or blank line; it is wrapped at 92 columns.
    """
    import textwrap

    page_path.write_text(page(data), encoding="utf-8")
    lines = readme.read_text(encoding="utf-8").split("\n")
    i = next(k for k, ln in enumerate(lines) if ln.startswith(README_HEAD))
    j = next(k for k in range(i + 1, len(lines)) if lines[k].startswith("* ") or not lines[k])
    new = textwrap.wrap(readme_bullet(data), width=92, subsequent_indent="  ",
                        break_long_words=False, break_on_hyphens=False)
    readme.write_text("\n".join(lines[:i] + new + lines[j:]), encoding="utf-8")


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--studies", nargs="+", default=sorted(STUDIES), choices=sorted(STUDIES))
    p.add_argument("--seeds", type=int, default=20,
                   help="the size runs seeds --seed-from … --seeds − 1 [20]")
    p.add_argument("--seed-from", type=int, default=0,
                   help="the size's first seed [0] (the other half of the range in a second "
                        "process with its own --out; --join-size merges it)")
    p.add_argument("--join-size", type=Path, nargs="+", default=None, metavar="FILE",
                   help="merge these files' size seeds of --studies/--modes into --out")
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
                        f"{', '.join(p.name for p in ALL_RESULTS[1:])} (their studies "
                        "override)")
    p.add_argument("--page", action="store_true",
                   help="print docs/studies_power.md as generated from the results files")
    p.add_argument("--write", action="store_true",
                   help="write docs/studies_power.md and the README's bullet from the "
                        "results files")
    args = p.parse_args(argv)
    if not args.no_size and not args.join_size and args.seed_from >= args.seeds:
        p.error(f"--seed-from {args.seed_from} >= --seeds {args.seeds}: no seed to run (the "
                "size runs seeds --seed-from … --seeds − 1)")
    if args.markdown or args.page or args.write:
        data = load([args.out, *ALL_RESULTS[1:]])
        if args.write:
            write_docs(data)
        else:
            print(markdown(data) if args.markdown else page(data), end="")
        return 0
    if args.join_size:
        merge_sizes(args.out, args.join_size, args.studies, args.modes)
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
                                         prev=prev, save=lambda v, put=put: put("size", v),
                                         seed_from=args.seed_from)
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
