"""The measured numbers the documentation quotes, derived from ``bench/results/*.json``.

Every speed, memory or time figure on ``docs/guide/performance.md``, the README and the
other pages that quote a benchmark is produced here from the results file that recorded
it: the tables as Markdown, the numbers in the prose as phrases. The pages contain them
verbatim, and ``tests/test_doc_numbers.py`` fails when a page and its results file
disagree (a rerun benchmark, an edited page). To update a page after a rerun:
``.venv/bin/python bench/doc_numbers.py`` prints every table and phrase; paste them.

Formats: times and ratios with 2–3 significant digits as printed below; a number is
only ever rounded, never edited.
"""

from __future__ import annotations

import json
import sys
from collections.abc import Callable
from functools import partial
from pathlib import Path

HERE = Path(__file__).resolve().parent
ROOT = HERE.parent
RESULTS = HERE / "results"


def load(name: str) -> dict:
    """``bench/results/<name>.json``."""
    return json.loads((RESULTS / f"{name}.json").read_text(encoding="utf-8"))


def g(x: float, n: int = 3) -> str:
    """``x`` to ``n`` significant digits, without an exponent for 1e-3 ≤ |x| < 1e6."""
    if x == 0:
        return "0"
    if 1e-3 <= abs(x) < 1e6:
        from decimal import Decimal

        s = f"{Decimal(f'{x:.{n}g}'):f}"
        return s
    m, e = f"{x:.{n - 1}e}".split("e")
    return f"{m}e{int(e)}"


def ms(x: float) -> str:
    """Seconds as milliseconds below 1 s, else seconds; 3 significant digits."""
    return f"{g(x)} s" if x >= 1 else f"{g(x * 1e3)} ms"


def cells(n: int) -> str:
    """A count with a thin space between thousands: ``40 500``."""
    return f"{n:,}".replace(",", " ")


def _cand(data: dict, d: int, method_start: str) -> dict:
    return next(r for r in data["candidates"] if r["d"] == d
                and r["method"].startswith(method_start))


# --------------------------------------------------------------------------- tables
def kernel_table() -> str:
    """The kernel's two rows: NumPy reference against the fused numba pass."""
    w, c = load("bench_kernels"), load("bench_kernels_cpu")
    lines = ["| n = 10 000, H = 4 | NumPy blocked (reference) | numba fused (`direct`) | "
             "speed-up, wall (2 threads) | speed-up, CPU (1 thread) |",
             "|---|---|---|---|---|"]
    for d in (3, 64):
        ref, fused = _cand(w, d, "numpy blocked"), _cand(w, d, "numba fused")
        cfused = _cand(c, d, "numba fused")
        lines.append(f"| d = {d} | {g(ref['time_s'])} s | {g(fused['time_s'])} s "
                     f"({g(fused['ns_per_triple'], 2)} ns per triple) | "
                     f"{g(fused['speedup'], 2)}× | {g(cfused['speedup'], 2)}× |")
    return "\n".join(lines)


def pairs_table() -> str:
    """Pair interactions per second, ``direct`` against a naive single-einsum NumPy."""
    w = load("bench_kernels")
    lines = ["| n | H | d | wflow `direct` pairs/s | naive NumPy pairs/s |",
             "|---|---|---|---|---|"]
    for r in w["pairs"]:
        naive = g(r["naive_pairs_per_s"], 2) if r.get("naive_pairs_per_s") else \
            "– (needs > 4 GiB)"
        lines.append(f"| {cells(r['n'])} | {r['H']} | {r['d']} | "
                     f"{g(r['direct_pairs_per_s'], 2)} | {naive} |")
    return "\n".join(lines)


def published_table() -> str:
    """Fair run 1 of the published experiments: one thread per peer, process CPU time."""
    p = load("bench_published_cpu")
    lines = ["| experiment | faithful NumPy | published engine | wflow | floor (1 core) | "
             "wflow / floor | × engine | × faithful | 1-min load |",
             "|---|---|---|---|---|---|---|---|---|"]
    for r in p["rows"]:
        name = f"{r['kind']}, n = {r['n']}, H = {r['H']}" + (
            f", {r['P']} paths" if r["P"] > 1 else "") + (f", d = {r['d']}" if r["d"] != 3
                                                          else "")
        floor = ms(r["floor"]) if "floor" in r else "–"
        over = g(r["wflow_over_floor"], 3) if "wflow_over_floor" in r else "–"
        lines.append(f"| {name} | {ms(r['faithful'])} | {ms(r['engine'])} | "
                     f"{ms(r['wflow_rec5'])} | {floor} | {over} | "
                     f"{g(r['ratio_engine'], 3)}× | {g(r['ratio_faithful'], 3)}× | "
                     f"{g(r['load_min'], 3)}–{g(r['load_max'], 3)} |")
    return "\n".join(lines)


def jko_ot_table() -> str:
    """The OT scheme's step (``bench_jko.py``): exact and entropic GCG, warm starts."""
    j = load("bench_jko")
    rows = {(r["cells"], r["config"], r["warm"]): r for r in j["rows"]}
    lines = ["| cells | exact GCG | entropic GCG (ε = τ²) | POT `ot.emd2`, one dense solve |",
             "|---|---|---|---|"]
    for m in (720, 2420, 9680):
        ex, en = rows[(m, "exact gcg", "warm")], rows[(m, "entropic gcg", "warm")]
        pot = j["pot"][str(m)]

        def cell(r: dict) -> str:
            return (f"{g(r['per_step'], 2)} s ({g(r['per_iter'], 2)} s), "
                    f"{_mib(r['peak_mib'])}")
        lines.append(f"| {cells(m)} | {cell(ex)} | {cell(en)} | "
                     f"{g(pot['emd2_dense_s'], 2)} s |")
    return "\n".join(lines)


def _mib(x: float) -> str:
    return f"{g(x / 1024, 2)} GiB" if x >= 1024 else f"{round(x):d} MiB"


def jko_fv_table() -> str:
    """The default finite-volume step (``bench_jko_fv.py``), shared and quiet runs."""
    fv = load("bench_jko_fv")
    quiet = {r["cells"]: r for r in load("bench_jko_fv_quiet")["rows"]}
    lines = ["| cells | scheme | status | CPU s / step | wall s / step (load ≈ 13) | "
             "wall s / step (quiet) | peak RSS |",
             "|---|---|---|---|---|---|---|"]
    for r in fv["rows"]:
        cpu = g(r["cpu_step"], 2) if r["cpu_step"] == r["cpu_step"] else "–"
        q = quiet.get(r["cells"]) if r["scheme"] == "fv" else None
        qs = g(q["per_step_wall_s"], 2) if q else "–"
        status = r["status"] + (f", {r['empty']} empty cells" if r["empty"] else "")
        lines.append(f"| {cells(r['cells'])} | {r['scheme'].upper()} | {status} | {cpu} | "
                     f"{g(r['per_step'], 2)} | {qs} | {_mib(r['peak_rss_mib'])} |")
    return "\n".join(lines)


def _w2_rows() -> dict[tuple[str, str, int], dict]:
    return {(r["kind"], r["method"], r["cells"]): r for r in load("bench_w2_sparse")["rows"]}


def w2_sparse_table() -> str:
    """The certified sparse ``W₂`` against the dense one (``bench_w2_sparse.py``)."""
    rows = _w2_rows()
    lines = ["| problem | cells | sparse CPU s | wall s | rounds | pairs | peak RSS MB | "
             "dense CPU s | dense peak RSS MB | certified bound (rad²) |",
             "|---|---|---|---|---|---|---|---|---|---|"]
    for kind, label in (("cells", "cells vs rotated cells"),
                        ("particles", f"{cells(load('bench_w2_sparse')['particles'])} "
                                      "particles vs cells")):
        for i, m in enumerate(sorted(c for k, meth, c in rows if k == kind and meth == "sparse")):
            r, d = rows[(kind, "sparse", m)], rows.get((kind, "dense", m))
            dense = (f"{g(d['cpu_s'], 3)} | {cells(round(d['peak_rss_mb']))}" if d else
                     ("– (13 GB cost) | –" if m == 40500 and kind == "cells" else "– | –"))
            lines.append(f"| {label if i == 0 else ''} | {cells(m)} | {g(r['cpu_s'], 3)} | "
                         f"{g(r['wall_s'], 3)} | {r['rounds']} | {cells(r['pairs'])} | "
                         f"{cells(round(r['peak_rss_mb']))} | {dense} | {r['bound']:.1e} |")
    return "\n".join(lines)


def jko_zonal_table() -> str:
    """FV against the exact zonal JKO step (``bench_jko_zonal.py``): errors at T, orders."""
    z = load("bench_jko_zonal")
    rows = {(r["cells"], r["tau"]): r for r in z["rows"]}
    lines = ["| cells | h | L¹ (τ = 0.1) | W₂ (τ = 0.1) | L¹ (τ = 0.05) | W₂ (τ = 0.05) |",
             "|---|---|---|---|---|---|"]
    for m in sorted({c for c, _ in rows}):
        a, b = rows[(m, 0.1)], rows[(m, 0.05)]
        lines.append(f"| {cells(m)} | {a['h']:.4f} | {a['l1']:.2e} | {a['w2']:.2e} | "
                     f"{b['l1']:.2e} | {b['w2']:.2e} |")
    o = z["orders"]
    lines.append(f"| fitted order | | {o['0.1']['l1']:.2f} | {o['0.1']['w2']:.2f} | "
                 f"{o['0.05']['l1']:.2f} | {o['0.05']['w2']:.2f} |")
    return "\n".join(lines)


def jko_fv_bench_table() -> str:
    """``docs/jko.md``'s benchmark table (``bench_jko_fv.json``, every column)."""
    lines = ["| cells | scheme | wall s/step (load ≈ 13) | CPU s/step (one step, all threads) "
             "| CCP iters | τ\\|v\\|max/h | status | locked | empty cells | peak RSS MiB "
             "(+ over baseline) |", "|---|---|---|---|---|---|---|---|---|---|"]
    for r in load("bench_jko_fv")["rows"]:
        cpu = g(r["cpu_step"], 2) if r["cpu_step"] == r["cpu_step"] else "–"
        lines.append(f"| {cells(r['cells'])} | {r['scheme']} | {g(r['per_step'], 2)} | {cpu} | "
                     f"{r['iters']} | {r['cfl']:.2f} | {r['status']} | {r['locked']} | "
                     f"{r['empty']} | {round(r['peak_rss_mib']):d} "
                     f"(+{round(r['rss_increase_mib']):d}) |")
    return "\n".join(lines)


TABLES: dict[str, Callable[[], str]] = {
    "kernel": kernel_table, "pairs": pairs_table, "published": published_table,
    "jko_ot": jko_ot_table, "jko_fv": jko_fv_table, "w2_sparse": w2_sparse_table,
    "jko_zonal": jko_zonal_table, "jko_fv_bench": jko_fv_bench_table,
}
#: Where each table stands.
TABLE_PAGES = {name: "docs/guide/performance.md" for name in TABLES}
TABLE_PAGES["w2_sparse"] = "docs/guide/transport.md"
TABLE_PAGES["jko_zonal"] = TABLE_PAGES["jko_fv_bench"] = "docs/jko.md"


# --------------------------------------------------------------------------- phrases
def _fastsum() -> dict:
    t = load("bench_kernels")["fastsum"]["target"]
    mem = {r["backend"]: r for r in load("bench_kernels")["memory"]}
    return {"n": cells(t["n"]), "auto": g(t["auto_s"], 2),
            "err": g(t["err_vs_reference"], 2), "ref": g(t["reference_s"], 2),
            "direct": g(t["direct_s"], 2),
            "m_auto": g(mem["auto"]["time_s"], 2), "m_auto_gib": g(mem["auto"]["peak_rss_GiB"], 2),
            "m_direct": g(mem["direct"]["time_s"], 2),
            "m_direct_gib": g(mem["direct"]["peak_rss_GiB"], 2)}


def _jit() -> dict:
    j = load("bench_kernels")["jit"]
    cold, warm = j["cold_cache_s"], j["warm_cache_s"]
    return {"pt_cold": g(cold["particle_terms"], 2), "pt_warm": g(warm["particle_terms"], 1),
            "fs_cold": g(cold["fastsum"], 2), "fs_warm": g(warm["fastsum"], 1),
            "d3_cold": g(cold["direct_d3"], 2), "d3_warm": g(warm["direct_d3"], 1)}


def _reproduce() -> dict:
    r = load("bench_reproduce")
    loads = [x["load"] for x in r["runs"]]
    return {"wall": g(r["total_wall_s"], 3), "cpu": g(sum(x["cpu_s"] for x in r["runs"]), 3),
            "lo": g(min(loads), 3), "hi": g(max(loads), 3)}


def _main_job() -> dict:
    m = load("bench_main_job")
    ok = [x for x in m["runs"] if x["status"] == "success"]
    loads = [v for x in ok for v in (x["load1_before"], x["load1_after"])]
    lo, hi = g(m["cpu_s_min"], 2), g(m["cpu_s_max"], 2)
    return {"cpu": lo if lo == hi else f"{lo}–{hi}",  # one number when the runs agree
            "wall_lo": g(m["wall_s_min"], 3), "wall_hi": g(m["wall_s_max"], 3),
            "load_lo": g(min(loads), 2), "load_hi": g(max(loads), 2)}


def _main_job_numbers() -> dict:
    m = load("bench_main_job")
    n = next(x["numbers"] for x in m["runs"] if x.get("numbers"))
    rows, ot = n["rows"], n["ot_crosscheck"]
    return {"status": n["status"], "edi": f"{n['jko_edi_check']:.3f}",
            "tol": f"{n['jko_edi_tolerance']:g}",
            "w2": f"{n['w2_particles_vs_pde']:.3f}",
            "w20": f"{n['w2_particles_vs_pde_initial']:.3f}",
            "locked": "no locked step" if not any(r.get("locked_steps") for r in rows)
            else "locked steps",
            "pass": "every verdict PASS" if not n.get("not_passed") else
            "verdicts not passed: " + ", ".join(n["not_passed"]),
            "w2rows": " / ".join(f"{r['w2_max']:.3f}" for r in rows),
            "l1rows": " / ".join(f"{r['l1_max']:.2f}" for r in rows),
            "edirows": " / ".join(f"{r['edi_abs_relative']:.3f}" for r in rows),
            "ow2": f"{n['orders']['w2']:.2f}", "ol1": f"{n['orders']['l1']:.2f}",
            "oedi": f"{n['orders']['edi']:.2f}", "otc": ot["cells"],
            "otw2": f"{ot['w2_max']:.3f}", "otl1": f"{ot['l1_max']:.2f}",
            "fvw2": f"{rows[0]['w2_max']:.3f}", "fvl1": f"{rows[0]['l1_max']:.2f}"}


def _jko_fv_quiet() -> dict:
    q = {r["cells"]: r for r in load("bench_jko_fv_quiet")["rows"]}
    return {"s40": g(q[40500]["per_step_wall_s"], 2), "s162": g(q[162000]["per_step_wall_s"], 3)}


def _w2_sparse() -> dict:
    r = next(x for x in load("bench_w2_sparse")["rows"]
             if x["cells"] == 40500 and x["kind"] == "cells" and x["method"] == "sparse")
    return {"cpu": g(r["cpu_s"], 2), "mb": f"{round(r['peak_rss_mb']):d}"}


def _w2_prose() -> dict:
    """The prose of ``docs/guide/transport.md``'s measurements (``bench_w2_sparse.json``)."""
    import math

    data = load("bench_w2_sparse")
    rows = _w2_rows()
    rel = [abs(r["value"] - rows[(k, "dense", c)]["value"]) / rows[(k, "dense", c)]["value"]
           for (k, meth, c), r in rows.items() if meth == "sparse" and (k, "dense", c) in rows]
    loads = [v for r in data["rows"] for v in (r["load_before"], r["load_after"])]
    sp = [r for r in data["rows"] if r["method"] == "sparse"]
    ratio = [r["wall_s"] / r["cpu_s"] for r in sp]
    a, b = rows[("cells", "sparse", 9680)], rows[("cells", "sparse", 40500)]
    p = rows[("particles", "sparse", 40500)]
    expo = math.log(b["cpu_s"] / a["cpu_s"]) / math.log(40500 / 9680)
    return {"rel_lo": f"{min(rel):.1e}", "rel_hi": f"{max(rel):.1e}",
            "load_lo": f"{math.floor(min(loads)):d}", "load_hi": f"{math.ceil(max(loads)):d}",
            "r_lo": g(min(ratio), 2), "r_hi": g(max(ratio), 2),
            "rss0": f"{round(min(r['rss_before_mb'] for r in data['rows'])):d}",
            "c40": g(b["cpu_s"], 2), "mb40": f"{round(b['peak_rss_mb']):d}",
            "expo": f"{expo:.1f}", "ra": a["rounds"], "rb": b["rounds"],
            "pr": p["rounds"], "pc": g(p["cpu_s"], 1),
            "ext": g(b["cpu_s"] * (162000 / 40500) ** expo / 60, 1),
            "c9": g(a["cpu_s"], 2), "mb9": f"{round(a['peak_rss_mb']):d}"}


def _jko_page() -> dict:
    """The prose numbers of ``docs/jko.md`` (bench_jko, bench_jko_fv(_quiet), bench_jko_zonal)."""
    import math

    ot = {(r["cells"], r["config"], r["warm"]): r for r in load("bench_jko")["rows"]}
    a, b = ot[(2420, "exact gcg", "warm")], ot[(9680, "exact gcg", "warm")]
    fv = load("bench_jko_fv")
    rows = {(r["cells"], r["scheme"]): r for r in fv["rows"]}
    q = {r["cells"]: r for r in load("bench_jko_fv_quiet")["rows"]}
    z = load("bench_jko_zonal")
    loads = fv["machine"]["loadavg"][:1] + [r["loadavg_after"][0] for r in fv["rows"]]
    otr = [rows[(m, "ot")]["per_step"] / rows[(m, "fv")]["per_step"]
           for m, sch in rows if sch == "ot"]
    big = [r for r in fv["rows"] if r["cells"] >= 40500]
    margins = z["well_centred_margin_min"].values()
    return {"ot_exp": f"{math.log(b['per_step'] / a['per_step']) / math.log(4):.1f}",
            "ot_s": g(b["per_step"], 2), "ot_mem": _mib(b["peak_mib"]),
            "l1_lo": f"{min(o['l1'] for o in z['orders'].values()):.2f}",
            "l1_hi": f"{max(o['l1'] for o in z['orders'].values()):.2f}",
            "m_lo": f"{min(margins):.3f}", "m_hi": f"{max(margins):.3f}",
            "load_lo": g(min(loads), 3), "load_hi": g(max(loads), 3),
            "c40": g(rows[(40500, "fv")]["cpu_step"], 2),
            "c162": g(rows[(162000, "fv")]["cpu_step"], 2),
            "w40": g(rows[(40500, "fv")]["per_step"], 2),
            "w162": g(rows[(162000, "fv")]["per_step"], 2),
            "qw40": g(q[40500]["per_step_wall_s"], 2), "qw162": g(q[162000]["per_step_wall_s"], 3),
            "qc40": g(q[40500]["cpu_step_s"], 2), "qc162": g(q[162000]["cpu_step_s"], 3),
            "qm40": f"{round(q[40500]['rss_increase_mib']):d}",
            "qm162": f"{round(q[162000]['rss_increase_mib']):d}",
            "ql_lo": g(min(load("bench_jko_fv_quiet")["loadavg_1min"]), 2),
            "ql_hi": g(max(load("bench_jko_fv_quiet")["loadavg_1min"]), 2),
            "m40": f"{round(rows[(40500, 'fv')]['rss_increase_mib']):d}",
            "m162": f"{round(rows[(162000, 'fv')]['rss_increase_mib']):d}",
            "kib_lo": g(min(r["rss_per_cell_kib"] for r in big), 2),
            "kib_hi": g(max(r["rss_per_cell_kib"] for r in big), 2),
            "e51": rows[(5120, "ot")]["empty"], "e96": rows[(9680, "ot")]["empty"],
            "otx_lo": g(min(otr), 2), "otx_hi": g(max(otr), 2),
            "zcpu": f"{z['cpu_s']:.0f}", "zl0": f"{z['load1_before']:.1f}",
            "zl1": f"{z['load1_after']:.1f}"}


def _field() -> dict:
    f = load("bench_reproduce_field")["rows"]
    st, gl = f["metastable_staircase"], f["glpr_phase"]
    ranks = f["glpr_phase_ranks_full"]
    return {"st_pub": g(st["published_full_run"]["cpu_s"], 3), "st_wf": g(st["wflow_full_s"], 3),
            "gl_1": g(ranks["ranks_1"]["wall_s"], 3),
            "gl_pub": cells(round(gl["published_full_s_from_9beta"])),
            "gl_2": g(ranks["ranks_2"]["wall_s"], 3), "gl_x": g(ranks["speedup_2_ranks"], 3)}


#: ``(page, phrase)``: each phrase, filled from its results file, stands on its page.
PHRASES: list[tuple[str, str, Callable[[], dict]]] = [
    ("docs/guide/performance.md",
     "{n} points, 4 heads, tol 1e-10: {auto} s, error {err}, against {ref} s for the NumPy "
     "reference and {direct} s for the fused direct sum", _fastsum),
    ("docs/guide/performance.md",
     "10⁵ particles with H = 8: {m_auto} s per evaluation, {m_auto_gib} GiB peak (direct: "
     "{m_direct} s, {m_direct_gib} GiB)", _fastsum),
    ("docs/guide/performance.md",
     "the particle kernels {pt_cold} s with an empty cache against {pt_warm} s from the "
     "cache, the fast summation {fs_cold} s against {fs_warm} s, the direct sums (d = 3) "
     "{d3_cold} s against {d3_warm} s", _jit),
    ("docs/troubleshooting.md",
     "the particle kernels {pt_cold} s with an empty cache against {pt_warm} s from the "
     "cache, the fast summation {fs_cold} s against {fs_warm} s", _jit),
    ("docs/guide/performance.md",
     "{wall} s of wall time ({cpu} s of CPU) at a 1-min load of {lo}–{hi}", _reproduce),
    ("docs/guide/performance.md",
     "{cpu} s of CPU time ({wall_lo}–{wall_hi} s of wall time at a 1-min load "
     "of {load_lo}–{load_hi}", _main_job),
    ("README.md", "{cpu} s of CPU time", _main_job),
    ("docs/guide/main_job.md",
     "{cpu} s of CPU time ({wall_lo}–{wall_hi} s of wall time at a 1-min load "
     "of {load_lo}–{load_hi}", _main_job),
    ("docs/guide/main_job.md",
     "status `{status}`; JKO Σ|EDI_k| (relative) {edi} (tolerance {tol}), {locked}; "
     "`W_2` particles vs PDE {w2} at `T` ({w20} at `t = 0`); the table: `W_2`(JKO, PDE) "
     "{w2rows} (order {ow2}), L¹ {l1rows} (order {ol1}), JKO Σ|EDI_k| {edirows} (order "
     "{oedi}), {pass}; OT cross-check on {otc} cells: `W_2` {otw2}, L¹ {otl1} "
     "(FV: {fvw2}, {fvl1})", _main_job_numbers),
    ("docs/guide/performance.md",
     "{s40} s of wall time per step at 40 500 cells and {s162} s at 162 000", _jko_fv_quiet),
    ("README.md", "one step takes {s40} s at 40 500 cells, {s162} s at 162 000", _jko_fv_quiet),
    ("README.md", "{cpu} s CPU and {mb} MB at 40 500 cells", _w2_sparse),
    ("README.md", "({st_pub} s CPU there, {st_wf} s here)", _field),
    ("README.md", "`glpr_phase` takes {gl_1} s on one thread (the published code {gl_pub} s, "
     "measured on 9 of its 90 β) and {gl_2} s under `mpirun -n 2`, every output array "
     "identical ({gl_x}×)", _field),
]

PHRASES += [
    ("docs/guide/transport.md",
     "Sparse and dense values agree to {rel_lo} … {rel_hi} (relative) where both ran. Load "
     "average {load_lo}–{load_hi} on the 2 cores during the run (other jobs): the wall times "
     "are {r_lo}–{r_hi}× the CPU times", _w2_prose),
    ("docs/guide/transport.md",
     "Peak RSS includes the ~{rss0} MB interpreter with NumPy/SciPy/POT. At 40 500 cells the "
     "cell-vs-cell W₂ (the JKO-vs-PDE comparison) costs {c40} s of CPU; the CPU time grows "
     "like N^{expo} from 9 680 to 40 500 cells (rounds {ra} → {rb}", _w2_prose),
    ("docs/guide/transport.md",
     "particles vs cells stay cheap ({pr} rounds, {pc} s at 40 500 cells). Extrapolated with "
     "that exponent, 162 000 cells would take ~{ext} min of CPU per W₂ (not measured)",
     _w2_prose),
    ("docs/jko.md", "certified sparse `W₂` solves, {c40} s CPU each", _w2_prose),
    ("docs/jko.md", "`bench/results/bench_main_job.json`: orders W₂ {ow2}, L¹ {ol1}, EDI {oedi}",
     _main_job_numbers),
    ("docs/jko.md", "the certified sparse solver on 9 680 cells (a vMF density against "
     "itself rotated by 0.01 rad) takes {c9} s CPU and {mb9} MB", _w2_prose),
]

PHRASES += [
    ("docs/jko.md", "| L¹ of densities | converges (order {l1_lo}–{l1_hi}) | does not converge |",
     _jko_page),
    ("docs/jko.md", "N^{ot_exp} (exact), {ot_s} s / {ot_mem} at 9 680 cells", _jko_page),
    ("docs/jko.md", "The shipped icospheres have margins {m_lo}–{m_hi}", _jko_page),
    ("docs/jko.md", "τ = 0.1: {e96} of 9 680 cells empty after two OT steps, none with FV",
     _jko_page),
    ("docs/jko.md", "`bench/results/bench_jko_zonal.json`, {zcpu} s of CPU at a 1-min load of "
     "{zl0}–{zl1}", _jko_page),
    ("docs/jko.md", "the 1-minute load average was {load_lo}–{load_hi} during the whole run",
     _jko_page),
    ("docs/jko.md", "(it grows like N^{ot_exp}: {ot_s} s and {ot_mem} per step there", _jko_page),
    ("docs/jko.md", "Measured in CPU time: {c40} s and {c162} s (met); wall time under load 13: "
     "{w40} s and {w162} s (not a measurement of the code)", _jko_page),
    ("docs/jko.md", "1-min load {ql_lo}–{ql_hi}, 2 numba threads, results in "
     "`bench/results/bench_jko_fv_quiet.json`): **{qw40} s wall per step at 40 500 cells and "
     "{qw162} s at 162 000** (CPU {qc40} s and {qc162} s; +{qm40} MiB and +{qm162} MiB)",
     _jko_page),
    ("docs/jko.md", "Memory O(N): +{m40} MiB at 40 500 cells, +{m162} MiB at 162 000 "
     "({kib_lo}–{kib_hi} KiB per cell)", _jko_page),
    ("docs/jko.md", "({e51} empty cells at 5 120, {e96} at 9 680 after two steps), "
     "{otx_lo}–{otx_hi}× the time of the FV step", _jko_page),
]

def _readme_jko() -> dict:
    z = load("bench_jko_zonal")["orders"]
    bmax = max(r["bound"] for r in load("bench_w2_sparse")["rows"] if r["method"] == "sparse")
    return {"w1": f"{z['0.1']['w2']:.2f}", "l1": f"{z['0.1']['l1']:.2f}",
            "w05": f"{z['0.05']['w2']:.2f}", "l05": f"{z['0.05']['l1']:.2f}",
            "bmax": f"{bmax:.1e}"}


PHRASES += [
    ("README.md", "W₂ and L¹ converge with orders {w1} / {l1} (τ = 0.1) and {w05} / {l05} "
     "(τ = 0.05)", _readme_jko),
    ("README.md", "(LP duality, bound ≤ {bmax} rad²)", _readme_jko),
    ("README.md", "correct runs): {ow2} / {ol1} / {oedi} by default;", _main_job_numbers),
]

def _pinned_field() -> object:
    """``tests/test_reproduce_field_full.py``: the full-scale results its slow tests pin."""
    sys.path.insert(0, str(ROOT / "tests"))
    import test_reproduce_field_full as pinned

    return pinned


def castin_table() -> str:
    """The castin_ranks full-scale table: every number pinned by
    ``tests/test_reproduce_field_full.py`` (``CASTIN_PUBLISHED_FULL``, ``CASTIN_FULL``)."""
    t = _pinned_field()
    lines = ["| row | d | published solver: histogram (rank 0…d) | exceptions | converged of "
             "attempts | exact limit, settled directions (all attempts) | attempts unsettled "
             "at t = 10¹⁰ | Euler steps |", "|---|---|---|---|---|---|---|---|"]
    for (row, d), (hist, exc, att, conv, steps) in t.CASTIN_PUBLISHED_FULL.items():
        ex, uns = t.CASTIN_FULL["exact"][(row, d)]
        name = "V = I" if row == "identity" else "V random"
        e = f"**{exc}**" if exc else "0"
        lines.append(f"| {name} | {d} | {hist} | {e} | {conv} of {att} | {ex} | {uns} | "
                     f"{cells(steps)} |")
    return "\n".join(lines)


def staircase_table() -> str:
    """The staircase at full scale: pinned by ``tests/test_reproduce_field_full.py``
    (``STAIRCASE_FULL``: first NaN step, plateaus, their fraction of the records)."""
    t = _pinned_field()
    lines = ["| β | full merge (E = 1) at step | first NaN energy at step | plateaus | "
             "on plateaus |", "|---|---|---|---|---|"]
    for b, (nan, npl, frac) in t.STAIRCASE_FULL.items():
        lines.append(f"| {b} | {nan - 1} | {nan} | {npl} | {100 * frac:.0f}% |")
    return "\n".join(lines)


TABLES.update(castin=castin_table, staircase=staircase_table)
TABLE_PAGES.update(castin="docs/reproduce_field.md", staircase="docs/reproduce_field.md")


def weak_error_table() -> str:
    """The particles' weak-error estimate against the true weak error
    (``bench/particles_weak_error.py``): RMS over the moments, per case."""
    data = load("particles_weak_error")
    lines = ["| case | integrator | `dt` | estimate | true error | s.e. of the estimate | "
             "cost judged/bare |", "|---|---|---|---|---|---|---|"]
    for case, rows in data["cases"].items():
        for r in rows:
            true = "0" if r["true_rms"] == 0 else f"{r['true_rms']:.4f}"
            if r["true_se_rms"] > 0:
                true += f" ± {r['true_se_rms']:.4f}"
            lines.append(f"| {case.replace('_', ' ')} | `{r['integrator']}` | "
                         f"1/{round(1 / r['dt'])} | {r['estimate_rms']:.4f} | {true} | "
                         f"{r['se_rms']:.4f} | {r['cost_ratio']:.2f} |")
    return "\n".join(lines)


TABLES["weak_error"] = weak_error_table


def width_table() -> str:
    """Wide heads by tiles against the machine's floor (``bench/bench_width.py``)."""
    lines = ["| row | n | dtype | time (CPU, 1 thread) | floor | × floor | 1-min load |",
             "|---|---|---|---|---|---|---|"]
    for r in load("bench_width_cpu")["rows"]:
        lines.append(f"| {r['name']} | {r['n']} | {r['dtype']} | {ms(r['time'])} | "
                     f"{ms(r['floor'])} | {g(r['ratio'])} | {g(r['load_before'])} |")
    return "\n".join(lines)


def width_profile_table() -> str:
    """Each stage of the tiled sums against its own floor (``bench_width.py --profile``)."""
    lines = ["| row | score GEMM | exponential | value GEMM | outside the tiles | "
             "total × pair floor |", "|---|---|---|---|---|---|"]
    for p in load("bench_width_cpu")["profile"]:
        st = p["stages"]
        cells_ = [f"{ms(st[k]['time'])} ({g(st[k]['ratio'])}×)"
                  for k in ("score", "exp", "value", "outside")]
        lines.append(f"| {p['name']} | {' | '.join(cells_)} | {g(p['total_over_pair_floor'])} |")
    return "\n".join(lines)


TABLES.update(width=width_table, width_profile=width_profile_table)
TABLE_PAGES.update(width="docs/guide/performance.md",
                   width_profile="docs/guide/performance.md")


def _width() -> dict:
    """The targets' ratios of ``bench_width_cpu.json`` (``summary``)."""
    sm = load("bench_width_cpu")["summary"]
    return {"f32": g(sm["float32_over_float64"]), "bert_head": g(sm["bert_over_one_head_768"]),
            "f64": g(sm["float64_over_floor"]), "bert": g(sm["bert_over_float32_floor"])}


PHRASES += [("docs/guide/performance.md",
             "float32 takes {f32} of the float64 time (target ≤ 0.6) and the BERT layer "
             "{bert_head}× one head of width 768", _width),
            ("docs/guide/performance.md",
             "d = 64 in float64 runs at {f64}× its floor and BERT at {bert}×", _width)]
TABLE_PAGES["weak_error"] = "docs/guide/accuracy.md"


def noise_table() -> str:
    """Token noise in the particle step at ``n = 10⁶`` on 2 ranks
    (``bench_particles_noise.py --split --family rk4``)."""
    r = load("particles_noise_split_1e6_rk4")
    names = {"rk4": "`rk4`", "strang": "`strang` (noise outside RK4)",
             "strang-heun": "`strang-heun` (noise between Heun half steps)"}
    lines = ["| integrator | `D` | step (CPU s per rank) | × RK4 |", "|---|---|---|---|"]
    for k, label in names.items():
        ratio = r[k].get("cpu_ratio_vs_rk4", 1.0)
        lines.append(f"| {label} | {0 if k == 'rk4' else 0.1} | "
                     f"{r[k]['step_cpu_s_max']:.2f} | {g(ratio, 3) if k != 'rk4' else '1'} |")
    return "\n".join(lines)


def _noise() -> dict:
    """One process at ``n = 10⁵`` (``particles_noise.json``) and the split run's load."""
    s = load("particles_noise")["steps"]
    r = load("particles_noise_split_1e6_rk4")
    return {"st": f"{s['strang']['cpu_ratio_vs_rk4']:.2f}",
            "sh": f"{s['strang-heun']['cpu_ratio_vs_rk4']:.2f}",
            "em": f"{s['em']['cpu_ratio_vs_euler']:.2f}",
            "l0": f"{r['load1_start']:.1f}", "l1": f"{r['load1_end']:.1f}"}


#: The compiled loop's rows (bench_particles_noise.py --compiled) and their tokens.
COMPILED_NOISE = {1000: "particles_noise_compiled_1000", 4000: "particles_noise_compiled_4000"}


def noise_compiled_table() -> str:
    """Token noise in the compiled loop, one process and thread, direct sums
    (``bench_particles_noise.py --compiled`` at ``n`` = 1 000 and 4 000)."""
    runs = {n: load(name) for n, name in COMPILED_NOISE.items()}
    rows = (("euler", "`euler`", None), ("em", "`em`", "euler"), ("rk4", "`rk4`", None),
            ("strang", "`strang`", "rk4"), ("strang-heun", "`strang-heun`", "rk4"),
            ("strang-heun (D = 0)", "`strang-heun`", "rk4"))
    head = "| integrator | `D` |" + "".join(f" n = {n:,} (CPU ms) | × noiseless |"
                                         for n in runs).replace(",", " ")
    lines = [head, "|---|---|" + "---|---|" * len(runs)]
    for key, label, clean in rows:
        cells = []
        for r in runs.values():
            ratio = "1" if clean is None else g(r[key][f"cpu_ratio_vs_{clean}"], 3)
            cells.append(f" {1e3 * r[key]['step_cpu_s']:.1f} | {ratio} |")
        lines.append(f"| {label} | {g(runs[4000][key]['diffusion'])} |" + "".join(cells))
    return "\n".join(lines)


def _noise_compiled() -> dict:
    """Loads and the heat increments' share of the step (``strang-heun`` over RK4 − 1)."""
    r1, r4 = (load(COMPILED_NOISE[n]) for n in (1000, 4000))
    pct = {n: f"{100 * (r['strang-heun']['cpu_ratio_vs_rk4'] - 1):.0f}"
           for n, r in ((1000, r1), (4000, r4))}
    loads = [r[k] for r in (r1, r4) for k in ("load1_start", "load1_end")]
    return {"p1": pct[1000], "p4": pct[4000], "l0": f"{min(loads):.1f}",
            "l1": f"{max(loads):.1f}"}


TABLES["noise"] = noise_table
TABLES["noise_compiled"] = noise_compiled_table
TABLE_PAGES["noise"] = TABLE_PAGES["noise_compiled"] = "docs/guide/performance.md"
PHRASES += [("docs/guide/performance.md", text, numbers) for text, numbers in (
    ("`strang` {st}×, `strang-heun` {sh}× the RK4 step, and projected Euler–Maruyama "
     "{em}× the Euler step", _noise),
    ("`results/particles_noise_split_1e6_rk4.json`, load {l0}–{l1}", _noise),
    ("at `n = 1 000` the two heat increments add {p1} % to `strang-heun`'s step, at "
     "`n = 4 000` {p4} %", _noise_compiled),
    ("`results/particles_noise_compiled_*.json`, load {l0}–{l1}", _noise_compiled))]


def _field_page() -> dict:
    """``docs/reproduce_field.md``: bench_reproduce_field.json, bench_castin_step.json and
    the values pinned by ``tests/test_reproduce_field_full.py``."""
    t = _pinned_field()
    f = load("bench_reproduce_field")["rows"]
    gl, rk, rq = f["glpr_phase"], f["glpr_phase_ranks_full"], f["glpr_phase_ranks"]
    st = f["metastable_staircase"]
    cs = load("bench_castin_step")
    G, C, S = t.GLPR_FULL, t.CASTIN_PUBLISHED_FULL, t.STAIRCASE_FULL
    steps_by = {r: sum(v[4] for (row, _), v in C.items() if row == r) for r in ("identity",
                                                                                 "random")}
    merge = [v[0] - 1 for v in S.values()]
    step_ms = [x[0] for v in gl["published_step_ms_by_beta"].values()
               if isinstance(v, list) for x in v]
    pub_step = f["castin_ranks"]["published_iteration_s"]
    ours = cs["rows"]["castin_ranks"]["wflow_iteration_s"]
    return {
        "p_small": g(G["p_final_smallest_beta"], 3), "t_half": g(G["t_half_smallest_beta"], 3),
        "p_large": g(G["p_final_largest_beta"], 3), "tau": g(G["kendall_tau"], 3),
        "se": g(G["max_stderr"], 2),
        "r1": g(rk["ranks_1"]["wall_s"], 3), "r2": g(rk["ranks_2"]["wall_s"], 3),
        "rx": g(rk["speedup_2_ranks"], 3), "rc1": g(rk["ranks_1"]["cpu_s"], 3),
        "rc2": g(rk["ranks_2"]["cpu_s"], 3), "rb1": g(rk["wall_s_per_beta_sum"]["ranks_1"], 3),
        "rb2": g(rk["wall_s_per_beta_sum"]["ranks_2"], 3),
        "rmin1": g(rk["ranks_1"]["wall_s"] / 60, 2),
        "q1": g(rq["wall_s_1"], 3), "q2": g(rq["wall_s_2"], 3), "qx": g(rq["speedup_2_ranks"], 3),
        "s_id": f"{steps_by['identity'] / 1e6:.2f}·10⁶",
        "s_rd": f"{steps_by['random'] / 1e6:.2f}·10⁶",
        "s_id_n": cells(steps_by["identity"]), "s_rd_n": cells(steps_by["random"]),
        "attempts": cells(sum(v[2] for v in C.values())),
        "unsettled": ", ".join(str(t.CASTIN_FULL["exact"][("random", d)][1]) for d in (3, 4)) +
                     f" and {t.CASTIN_FULL['exact'][('random', 5)][1]}",
        "ex3": t.CASTIN_FULL["exact"][("random", 3)][0],
        "ex4": t.CASTIN_FULL["exact"][("random", 4)][0],
        "ex5": t.CASTIN_FULL["exact"][("random", 5)][0],
        "t_lo": g(min(merge) * 1e-5, 2), "t_hi": g(max(merge) * 1e-5, 2),
        "nan_lo": f"{100 * (1 - max(merge) / 1e6):.1f}",
        "nan_hi": f"{100 * (1 - min(merge) / 1e6):.1f}",
        "pub9": g(gl["published_9beta_run"]["cpu_s"], 4),
        "pubx": cells(round(gl["published_full_s_from_9beta"])),
        "ms_lo": g(min(step_ms), 3), "ms_hi": g(max(step_ms), 3),
        "est_step": g(gl["published_step_s"] * 1e3, 3),
        "est_rec": g(gl["published_stats_s"] * 1e3, 3),
        "est": cells(round(gl["published_full_s_one_thread"])),
        "wf": g(gl["wflow_full_s_one_thread_measured"], 3), "ns": g(gl["wflow_ns_per_pair"], 2),
        "glx": g(gl["speedup_one_thread_measured"], 2),
        "c_pub": g(pub_step * 1e6, 3), "c_wf": g(ours * 1e6, 3), "c_x": g(pub_step / ours, 2),
        "c_load": g(cs["load_average_start"][0], 2),
        "c_pload": g(load("bench_reproduce_field")["earlier_rows_measured"]
                     ["load_average_start"][0], 3),
        "st_pub": g(st["published_full_run"]["cpu_s"], 3),
        "st_wall": g(st["published_full_run"]["wall_s"], 3),
        "st_b_lo": g(min(st["published_full_run"]["wall_s_per_beta"]), 3),
        "st_b_hi": g(max(st["published_full_run"]["wall_s_per_beta"]), 3),
        "st_est": g(st["published_full_s_extrapolated"], 3),
        "st_wf": g(st["wflow_full_s"], 3), "st_x": g(st["speedup_full_measured"], 3),
    }


PHRASES += [(page, text, _field_page) for page, text in (
    ("docs/reproduce_field.md", "on one thread of the idle machine {r1} s of wall ({rmin1} min), "
     "on 2 MPI ranks {r2} s"),
    ("docs/reproduce_field.md", "`P(T) = {p_small}` at β = 0.1 (every pair of every system "
     "merged), `t_½ = {t_half}`"),
    ("docs/reproduce_field.md", "`P(T) = {p_large}` at β = 9; Kendall τ(β, t_½) = {tau}; the "
     "largest standard error of `P` is {se}"),
    ("docs/reproduce_field.md", "**{r1} s of wall on 1 rank, {r2} s on 2 ranks, a {rx}× "
     "speed-up** (CPU {rc1} s and {rc2} s; the per-β compute sums are {rb1} s and {rb2} s"),
    ("docs/reproduce_field.md", "The published loop integrates {s_id} projected-Euler steps for "
     "the `V = I` row and {s_rd} for the random-`V` row"),
    ("docs/reproduce_field.md", "its six histograms, its exception and its {attempts} attempts' "
     "step counts ({s_id_n} and {s_rd_n}) are wflow's exactly"),
    ("docs/reproduce_field.md", "d = 3 {ex3}, d = 4 {ex4}, d = 5 {ex5} — no draw above ⌈d/2⌉. "
     "{unsettled} attempts keep directions unsettled at t = 10¹⁰"),
    ("docs/reproduce_field.md", "every series reaches E = 1 exactly at rescaled time "
     "{t_lo}–{t_hi}: **the remaining {nan_lo}–{nan_hi}% of the published 10⁶ steps are NaN**"),
    ("docs/reproduce_field.md", "The published run (6 β × 10⁶ steps) in {st_wf} s of CPU"),
    ("docs/reproduce_field.md", "bit for bit, {c_wf} µs per step at d = 5"),
    ("docs/reproduce_field.md", "**The published code was run in full too** ({st_pub} s of CPU"),
    ("docs/reproduce_field.md", "| `glpr_phase`, full run (90 β) | **extrapolated** {pubx} s of "
     "CPU from a **measured** tenth of the run: 9 of the 90 β at the published size (2048 × 32, "
     "300 steps, 200 records each; `--betas 9 --maxtime 30 --use_softmax`), {pub9} s of CPU, "
     "torch 2.14, one thread (the cost per β does not depend on β: {ms_lo}–{ms_hi} ms per step "
     "at β = 0.1, 4, 9). The per-call estimate ({est_step} ms per step + {est_rec} ms per "
     "record × 90 × (300 + 200)) had given {est} s | **measured**: {wf} s of CPU (and of wall) "
     "on one thread of the idle machine, {ns} ns per pair | {glx}× |"),
    ("docs/reproduce_field.md", "| — | **measured** {r1} s wall on 1 rank, {r2} s on 2 ranks, "
     "every output array identical | **{rx}× on 2 ranks** |"),
    ("docs/reproduce_field.md", "| — | **measured** {q1} s wall on 1 rank, {q2} s on 2 ranks, "
     "identical counts | {qx}× on 2 ranks |"),
    ("docs/reproduce_field.md", "| `castin_ranks`, one projected-Euler step (d = 5) | "
     "**measured** {c_pub} µs (4000 steps, load {c_pload}) | **measured** {c_wf} µs (the "
     "default loop, bit for bit; `bench_castin_step.json`, load {c_load}) | {c_x}× |"),
    ("docs/reproduce_field.md", "| `metastable_staircase`, full run (6 β × 10⁶ steps) | "
     "**measured** {st_pub} s of CPU ({st_wall} s of wall at load ~3; {st_b_lo}–{st_b_hi} s per "
     "β; NumPy 2.4.6): its 6·10⁶ energies equal wflow's bit for bit where finite, with the same "
     "NaN tail from the same step (the per-step estimate had given {st_est} s) | **measured** "
     "{st_wf} s (stops at the exact NaN tail) | {st_x}× |"),
)]

def _estimates() -> object:
    """``tests/test_estimates.py``: the calibration grid its test pins (``MEASURED``)."""
    if str(ROOT) not in sys.path:
        sys.path.insert(0, str(ROOT))
    from tests import test_estimates  # a package module (relative imports)

    return test_estimates


def estimates_table() -> str:
    """``docs/guide/cli.md``: each estimate (``wflow/<solver>/estimate.py``) beside the measurement
    ``tests/test_estimates.py::MEASURED`` pins (peak RSS, CPU and wall seconds)."""
    t = _estimates()
    lines = ["| run | estimated memory | peak RSS | ratio | estimated time | CPU time | ratio | "
             "wall (shared machine) |", "|---|---|---|---|---|---|---|---|"]
    for name, cmd, kw, rss, cpu, wall in t.MEASURED:
        e = t._estimate(cmd, kw)
        mem = e.memory / 2**20
        lines.append(f"| `{name}` | {mem:.0f} MiB | {rss} MiB | {mem / rss:.2f} | "
                     f"{e.seconds:.2g} s | {cpu:.2f} s | {e.seconds / cpu:.2f} | {wall} s |")
    return "\n".join(lines)


TABLES["estimates"] = estimates_table
TABLE_PAGES["estimates"] = "docs/guide/cli.md"


def _estimates_prose() -> dict:
    from wflow.infra.estimate import format_bytes, format_seconds

    t = _estimates()
    rm, rt, rw = [], [], []
    for _name, cmd, kw, rss, cpu, wall in t.MEASURED:
        e = t._estimate(cmd, kw)
        rm.append(e.memory / (rss * 2**20))
        rt.append(e.seconds / cpu)
        rw.append(wall / cpu)
    big = max(m[3] for m in t.MEASURED)
    kw = dict(cells=40500, n=2000, H=2, T=2.0, dt=0.02, n_saves=9, steps_per_save=4,
              jko=True, refinement=3, jko_steps=4)  # test_estimates.py's 40 500-cell job
    dense = t.main_est.estimate_main_job(**kw)
    sparse = t.main_est.estimate_main_job(**kw, w2_dense_max_points=6000)
    return {"m_lo": f"{min(rm):.2f}", "m_hi": f"{max(rm):.2f}", "t_lo": f"{min(rt):.2f}",
            "t_hi": f"{max(rt):.2f}", "w_lo": g(min(rw), 2), "w_hi": g(max(rw), 2),
            "big": g(big / 1024, 2), "dense": format_bytes(dense.memory),
            "sp_mem": format_bytes(sparse.memory), "sp_t": format_seconds(sparse.seconds)}


PHRASES += [
    ("docs/guide/cli.md", "every estimate is within **2×** of the measurement (memory "
     "{m_lo}–{m_hi}, time {t_lo}–{t_hi})", _estimates_prose),
    ("docs/guide/cli.md", "the wall times, listed too, were {w_lo}–{w_hi}× the CPU time",
     _estimates_prose),
    ("docs/guide/cli.md", "JKO on 2 420 and 5 120 cells, up to {big} GiB", _estimates_prose),
    ("docs/guide/cli.md", "Its dense `W₂` are now estimated at {dense} (the comparison's, "
     "40 500 × 40 500): refused on this machine; with the certified sparse `W₂` above 6 000 "
     "points (`w2_dense_max_points`) the estimate is {sp_mem}, {sp_t}", _estimates_prose),
]

def _controls() -> object:
    """``tests/test_study_controls.py``: every quick-mode fault and the criterion it must fail."""
    if str(ROOT) not in sys.path:
        sys.path.insert(0, str(ROOT))
    from tests import test_study_controls

    return test_study_controls


def study_columns(name: str) -> str:
    """The last two columns of a study's row in ``docs/guide/studies.md``: its negative
    controls (pinned by ``tests/test_study_controls.py``: fault → the criterion, or the part
    of its name, asserted to fail) and its quick run (``bench_studies_quick.json``)."""
    t = _controls()
    ctl = "; ".join(f"`{f}` → `{c}`" for s, f, c in t.CONTROLS if s == name)
    full = sorted(f for s, f in t.FULL_ONLY if s == name)
    if full:
        ctl += "; full mode only: " + ", ".join(f"`{f}`" for f in full)
    r = load("bench_studies_quick")["rows"][name]
    ok = sum(c["ok"] for c in r["criteria"])
    verdict = "PASS" if r["passed"] else "FAIL"
    return (f"| {ctl} | {verdict}: {ok} of {len(r['criteria'])} criteria hold; "
            f"{g(r['cpu_s'], 2)} s CPU |")


def studies_quick_list() -> str:
    """Every criterion's value in quick mode at seed 0 (``bench_studies_quick.json``)."""
    d = load("bench_studies_quick")
    lines = []
    for name, r in d["rows"].items():
        vals = ", ".join(f"`{c['name']}` {g(c['value'], 3)}" + ("" if c["ok"] else " (FAIL)")
                         for c in r["criteria"])
        lines.append(f"* `{name}` ({g(r['cpu_s'], 2)} s CPU): {vals}")
    return "\n".join(lines)


TABLES["studies_quick"] = studies_quick_list
TABLE_PAGES["studies_quick"] = "docs/guide/studies.md"


def _studies_load() -> dict:
    d = load("bench_studies_quick")
    loads = [d["load1_before"]] + [r["load1_after"] for r in d["rows"].values()]
    return {"lo": g(min(loads), 2), "hi": g(max(loads), 2),
            "total": g(sum(r["cpu_s"] for r in d["rows"].values()), 2)}


def _study_cols(name: str) -> dict:
    return {"cols": study_columns(name)}


PHRASES += [("docs/guide/studies.md", "{total} s of CPU in all, at a 1-min load of {lo}–{hi}",
             _studies_load)]
#: each study's row ends with its controls and its quick run (the fault names make it unique)
PHRASES += [("docs/guide/studies.md", "{cols}", partial(_study_cols, name))
            for name in json.loads((RESULTS / "bench_studies_quick.json").read_text(
                encoding="utf-8"))["rows"]]

def reproduce_table() -> str:
    """``docs/guide/reproduce.md``: the full-scale fits ``tests/test_reproduce_full.py``
    pins (``README``: b of the published fit, the log–log slope, the verdict)."""
    if str(ROOT) not in sys.path:
        sys.path.insert(0, str(ROOT))
    from tests.test_reproduce_full import README

    claim = {"ou": "`b ≈ −1`", "oscillating": "`b ≈ 0`"}
    lines = ["| experiment | `b` (published fit) | log–log slope | published claim | verdict |",
             "|---|---|---|---|---|"]
    for name in ("s2_ou", "s2_oscillating", "hd_oscillating", "hd_ou"):
        b, loglog, verdict = README[name]
        bb, ll = (f"{x:.2f}".replace("-", "−") for x in (b, loglog))  # the page's minus
        lines.append(f"| `{name}` | {bb} | {ll} | {claim[name.split('_')[1]]} | "
                     f"**{verdict}** |")
    return "\n".join(lines)


TABLES["reproduce"] = reproduce_table
TABLE_PAGES["reproduce"] = "docs/guide/reproduce.md"
PHRASES += [("docs/guide/reproduce.md", "the six runs of `wflow reproduce s2` took {wall} s of "
             "wall time ({cpu} s of CPU) at a 1-min load of {lo}–{hi}", _reproduce)]

def _n1e6() -> dict:
    r = load("particles_mpi_late")["rows"]["n1e6_p1"]
    return {"mb": cells(round(r["peak_rss_mb_max"])), "lo": g(r["load_after"], 3),
            "hi": g(r["load_before"], 4)}


PHRASES += [("docs/guide/solvers.md", "runs in one process within {mb} MB peak RSS", _n1e6)]

def _flat_mesh() -> dict:
    """docs/theory.md §8: the flat triangles of the shipped ``sphere_2420.msh`` (computed from
    the mesh file: areas, centroid radii)."""
    import numpy as np

    from wflow.geometry.mesh import MESH_DIR, read_surface

    t = read_surface(MESH_DIR / "sphere_2420.msh")
    p = t.points[t.cells]
    area = 0.5 * np.linalg.norm(np.cross(p[:, 1] - p[:, 0], p[:, 2] - p[:, 0]), axis=1).sum()
    r = np.linalg.norm(p.mean(axis=1), axis=1)
    return {"a": f"{area:.3f}", "s": f"{4 * np.pi:.3f}", "rlo": f"{r.min():.4f}",
            "rhi": f"{r.max():.4f}", "ratio": f"{4 * np.pi / area:.4f}"}


PHRASES += [("docs/theory.md", "({a} against {s} on the default mesh of 2 420 cells), and "
             "`mesh.centroids` are the flat centroids, inside the sphere ($|c_K|$ from {rlo} "
             "to {rhi})", _flat_mesh),
            ("docs/theory.md", "a constant close to one (about $4\\pi / \\sum_K |K| = "
             "{ratio}$ on that mesh)", _flat_mesh)]

def _faithful() -> dict:
    rep = load("bench_published_cpu")["reproduction"]
    return {"x": g(max(v for r in rep for k, v in r.items() if k.startswith("max_abs")), 1)}


PHRASES += [("docs/guide/performance.md", "which reproduces the engine's numbers to {x}",
             _faithful)]

def _size_power() -> dict:
    """The README's bullet "What a PASS rules out": every number from the size and power
    measurements (``size_power.json``, ``size_power_edi.json``, ``size_power_noisy.json``;
    written by ``bench/size_power.py --write``, with docs/studies_power.md)."""
    if str(HERE) not in sys.path:
        sys.path.insert(0, str(HERE))
    import size_power

    data = size_power.load([RESULTS / p.name for p in size_power.ALL_RESULTS])
    return {"bullet": size_power.readme_bullet(data)}


PHRASES += [("README.md", "{bullet}", _size_power)]

#: Numbers that were withdrawn (bench/README.md §8) and must not stand on any page.
WITHDRAWN = ("21–66×", "20× target is met", "22–65×", "(21–22×)")


def expected() -> list[tuple[str, str, str]]:
    """Every ``(page, what, text)`` the pages must contain."""
    out = [(TABLE_PAGES[n], f"table {n}", f()) for n, f in TABLES.items()]
    out += [(page, f"phrase {i}", phrase.format(**vals()))
            for i, (page, phrase, vals) in enumerate(PHRASES)]
    return out


def _flat(text: str) -> str:
    """Whitespace collapsed (a phrase may wrap over lines of the page)."""
    return " ".join(text.split())


def mismatches(root: Path = ROOT) -> list[str]:
    """What the pages under ``root`` miss or still state (empty: every number agrees)."""
    bad = []
    for page, what, text in expected():
        if _flat(text) not in _flat((root / page).read_text(encoding="utf-8")):
            bad.append(f"{page}: {what} differs from bench/results:\n{text}")
    for page in sorted({p for p, _, _ in expected()}):
        body = (root / page).read_text(encoding="utf-8")
        bad += [f"{page}: withdrawn number {w!r}" for w in WITHDRAWN if w in body]
    return bad


def main(argv: list[str] | None = None) -> int:
    """Print every table and phrase (``--check``: the pages' mismatches, exit 1 if any)."""
    argv = sys.argv[1:] if argv is None else argv
    if "--check" in argv:
        bad = mismatches()
        print("\n\n".join(bad) or "every quoted number agrees with bench/results")
        return 1 if bad else 0
    for page, what, text in expected():
        print(f"--- {page}: {what}\n{text}\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
