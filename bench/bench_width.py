"""Direct sums at a model's width (issue 41): tiles of GEMMs against the machine's floor.

Rows (one process, the floors measured in the same run):

* ``d = 64, H = 4, k = 64, n = 10⁴`` float64 against the float64 floor: 256 flops per
  (target, source, head) triple (scores ``2k``, values ``2d``) at the rate of a square
  DGEMM measured here (target ≤ 1.3×);
* the same in float32: time against the float64 time (target ≤ 0.6×) and against the
  float32 floor (SGEMM rate);
* ``d = 64, H = 4``, heads and values of rank 16 (64 flops per triple), float64;
* BERT width ``d = 768, H = 12, k = 64``, values of rank 64, ``n = 4096``, float32 (256
  flops per triple: 1.2e5 flops per pair over the heads), against one head of width 768
  with a full value (the same flops: 3 072 per pair) and against the float32 floor;
* the crossover of the direct back-end: the fused numba kernel against the tiles, at
  ``k = d = r`` from 3 to 32 (``H = 2``): the smallest width where the tiles win, which
  :data:`wflow.kernels.direct.WIDE` should be.

``--profile``: the stages of the ``d64`` float64 and float32 rows and of the BERT row,
timed inside one call (CPU time of the one thread, :func:`profile_row`), each against its
own floor: the score GEMM (``2 w`` flops per triple) and the value GEMM (``2 r``) at the
square-GEMM rate, the exponential pass against a plain ``np.exp(out=)`` over the same
count on a tile held in cache, and what runs outside the tiles (the projections
``Q_h x``, ``K_h y``, ``W_{V,h} y`` and the checks) against the projections' flops at the
square rate; written into the same JSON (``"profile"``).

Every row records wall and process CPU time (all threads) and the 1-min load before and
after. ``--cpu-time``: one thread, CPU time (robust when other jobs load the machine),
``results/bench_width_cpu.json``; ``--quick``: small sizes (a smoke run, not recorded
unless ``--write``).

``--peers PYTHON``: the same output (``Σ_h W_{O,h} softmax_j(β <Q_h x_i, K_h x_j>) W_{V,h}
x_j``, ``d = 64``, ``H = 4`` heads of rank 16, float32) by wflow and by torch's
``scaled_dot_product_attention`` on the CPU, each in its own clean process
(:func:`_common.call_peer`; torch from the interpreter ``PYTHON``, a separate bench venv,
never a wflow dependency), and by pykeops 2.3's CPU ``sumsoftmaxweight`` reduction (the
same interpreter; it compiles its C++ on first use, in the warm-up), the outputs
compared, ``results/bench_width_peers[_cpu].json``.

    python bench/bench_width.py [--quick] [--cpu-time] [--profile] [--threads T]
                                [--peers PYTHON]
"""

from __future__ import annotations

import argparse
import os
import sys
import time

import numpy as np
from _common import (
    CLOCK,
    best_time,
    call_peer,
    ensure_clean,
    load1,
    machine,
    sphere,
    table,
    write_json,
)


def _commit() -> str:
    """The git commit of the code measured (``""`` outside a checkout)."""
    import subprocess

    try:
        return subprocess.run(["git", "rev-parse", "--short", "HEAD"], capture_output=True,
                              text=True, cwd=os.path.dirname(__file__), check=True).stdout.strip()
    except (OSError, subprocess.CalledProcessError):
        return ""


def gemm_rate(dtype, n: int = 2000, repeat: int = 3) -> float:
    """Flop rate of a square GEMM ``(n × n)(n × n)`` in ``dtype`` (best of ``repeat``)."""
    rng = np.random.default_rng(0)
    a = rng.standard_normal((n, n)).astype(dtype)
    b = rng.standard_normal((n, n)).astype(dtype)
    t, _ = best_time(lambda: a @ b, repeat=repeat)
    return 2.0 * n ** 3 / t


def timed(fn, repeat: int) -> dict:
    """Best time of ``fn`` (the bench clock), process CPU time per call, load around it."""
    l0 = load1()
    c0 = time.process_time()
    w0 = time.perf_counter()
    t, _ = best_time(fn, repeat=repeat)
    calls = repeat + 1  # best_time warms up once
    cpu = (time.process_time() - c0) / calls
    wall = (time.perf_counter() - w0) / calls
    return {"time": t, "cpu_per_call": cpu, "wall_per_call": wall,
            "load_before": l0, "load_after": load1()}


def heads(rng, H: int, d: int, k: int, r: int | None):
    """``Q, K`` (H, k, d) with ``‖A_h‖ ≈ 2`` and value factors of rank ``r`` (or None)."""
    Q = rng.standard_normal((H, k, d)) / np.sqrt(d)
    K = rng.standard_normal((H, k, d)) / np.sqrt(d)
    scale = np.sqrt(2.0 / max(np.linalg.norm(Q[h].T @ K[h], 2) for h in range(H)))
    WV = None if r is None else rng.standard_normal((H, r, d)) / np.sqrt(d)
    return Q * scale, K * scale, WV


def row(name, n, d, H, k, r, dtype, flops, rate, repeat, rng):
    """Time one ``kernel_sums`` call (targets = sources) against the floor ``flops / rate``.

    ``rate``: the GEMM rate of the run's start; the best of it and the rates measured right
    before and after this row is the floor's.
    """
    from wflow.kernels import kernel_sums

    x = sphere(rng, n, d)
    m = np.full(n, 1.0 / n)
    Q, K, WV = heads(rng, H, d, k, r)

    def call():
        return kernel_sums(x, x, m, Q, K, beta=1.0, kind="softmax", backend="direct",
                           values=WV, dtype=dtype)

    # the floor's GEMM rate measured right before and after the row (the best of the two:
    # on a machine shared with other jobs the rate moves with the load)
    rate_before = gemm_rate(np.float32 if dtype == "float32" else np.float64)
    out = timed(call, repeat)
    rate = max(rate, rate_before, gemm_rate(np.float32 if dtype == "float32" else np.float64))
    out["gemm_rate"] = rate
    triples = n * n * H
    floor = flops * triples / rate
    out.update(name=name, n=n, d=d, H=H, k=k, r=r or d, dtype=dtype, triples=triples,
               flops_per_triple=flops, floor=floor, ratio=out["time"] / floor,
               ns_per_triple=out["time"] / triples * 1e9, reason=call().info.reason)
    print(f"  {name}: {out['time']:.3f} s ({out['ns_per_triple']:.2f} ns/triple), floor "
          f"{floor:.3f} s, {out['ratio']:.2f}x, load {out['load_before']}->{out['load_after']}",
          flush=True)
    return out


def np_exp_rate(dtype, tm: int, tn: int, repeat: int = 5) -> float:
    """Seconds per element of ``np.exp(a, out=b)`` on a ``(tm, tn)`` tile held in cache."""
    a = np.random.default_rng(1).uniform(-2.0, 2.0, (tm, tn)).astype(dtype)
    b = np.empty_like(a)
    inner = max(1, 2**22 // a.size)

    def run():
        for _ in range(inner):
            np.exp(a, out=b)

    t, _ = best_time(run, repeat=repeat)
    return t / (inner * a.size)


def profile_row(name, n, d, H, k, r, dtype, rate, rng, repeat: int = 2,
                exp_rate: float = float("inf")) -> dict:
    """The stages of one ``kernel_sums`` call (targets = sources), each against its floor.

    The tiles' own stage clock (:func:`wflow.kernels._tiled.tiled_sums`, ``stages=``: the
    CPU time of the calling thread, the jobs in sequence); ``outside``: the call's CPU time
    less the tiles' (projections, checks, output). Floors: ``flops / rate`` for the GEMMs
    (``rate``: the best square-GEMM rate of this dtype measured in this run, right after
    the profiled calls included), the count of exponentials at the ``np.exp`` rate of
    :func:`np_exp_rate` (on the tile of this dtype: the fastest of ``exp_rate``, seconds
    per element measured at the run's start, and measurements before and after the
    profiled calls), the projections' flops at
    ``rate`` for ``outside``. The best of ``repeat`` profiled calls (by total).
    """
    from wflow.kernels import _tiled, kernel_sums

    x = sphere(rng, n, d)
    m = np.full(n, 1.0 / n)
    Q, K, WV = heads(rng, H, d, k, r)
    kw = {"beta": 1.0, "kind": "softmax", "backend": "direct", "values": WV, "dtype": dtype}
    kernel_sums(x, x, m, Q, K, **kw)  # compile, warm caches
    ft = np.float32 if dtype == "float32" else np.float64
    tm, tn = _tiled.TM, (_tiled.TN if dtype == "float32" else _tiled.TN // 2)
    exp_el = min(exp_rate, np_exp_rate(ft, min(tm, n), min(tn, n)))
    orig = _tiled.tiled_sums
    best = None
    for _ in range(repeat):
        st: dict[str, float] = {}

        def traced(*a, st=st, **kwa):
            t0 = time.process_time()
            orig(*a, stages=st, **kwa)
            st["tiles"] = time.process_time() - t0

        _tiled.tiled_sums = traced
        try:
            t0 = time.process_time()
            kernel_sums(x, x, m, Q, K, **kw)
            st["total"] = time.process_time() - t0
        finally:
            _tiled.tiled_sums = orig
        if best is None or st["total"] < best["total"]:
            best = st
    exp_el = min(exp_el, np_exp_rate(ft, min(tm, n), min(tn, n)))
    rate = max(rate, gemm_rate(ft))  # as the rows: the best of the run's and this one
    w = min(k, d)
    rv = r or d
    triples = n * n * H
    proj = 2 * n * d * d * H if k >= d else 2 * n * d * (2 * k + (r or 0)) * H
    floors = {"score": 2 * w * triples / rate, "exp": exp_el * triples,
              "value": 2 * rv * triples / rate, "outside": proj / rate}
    best["outside"] = best["total"] - best["tiles"]
    stages = {}
    for key in ("prep", "score", "exp", "value", "rest", "outside"):
        s = {"time": best.get(key, 0.0)}
        if key in floors:
            s.update(floor=floors[key], ratio=s["time"] / floors[key])
        stages[key] = s
    pair_floor = 2 * (w + rv) * triples / rate
    out = {"name": name, "n": n, "d": d, "H": H, "k": k, "r": rv, "dtype": dtype,
           "tile": [tm, tn], "gemm_rate": rate, "np_exp_ns_per_element": exp_el * 1e9,
           "total": best["total"], "tiles": best["tiles"], "stages": stages,
           "pair_floor": pair_floor, "total_over_pair_floor": best["total"] / pair_floor,
           "projection_flops": proj, "load": load1()}
    print(f"  profile {name}: total {best['total']:.3f} s = {out['total_over_pair_floor']:.2f}x "
          f"the pair floor {pair_floor:.3f} s; " + ", ".join(
              f"{key} {v['time']:.3f} s" + (f" ({v['ratio']:.2f}x)" if "ratio" in v else "")
              for key, v in stages.items()), flush=True)
    return out


def crossover(n: int, repeat: int, rng) -> list[dict]:
    """Fused kernel vs tiles (float64) at ``k = d = r``, ``H = 2``."""
    from wflow.kernels import direct, kernel_sums

    rows = []
    for d in (3, 4, 8, 12, 16, 24, 32):
        x = sphere(rng, n, d)
        m = np.full(n, 1.0 / n)
        Q, K, _ = heads(rng, 2, d, d, None)
        res = {"d": d, "width": 2 * d}
        orig = direct.tiled
        for label, rule in (("fused", lambda *a: False), ("tiled", lambda *a: True)):
            direct.tiled = rule
            try:
                t = timed(lambda x=x, m=m, Q=Q, K=K: kernel_sums(
                    x, x, m, Q, K, beta=1.0, kind="softmax", backend="direct"), repeat)
            finally:
                direct.tiled = orig
            res[label] = t["time"]
        res["tiled_over_fused"] = res["tiled"] / res["fused"]
        print(f"  crossover d={d}: fused {res['fused']:.4f} s, tiled {res['tiled']:.4f} s "
              f"({res['tiled_over_fused']:.2f}x)", flush=True)
        rows.append(res)
    return rows


def _peer_inputs(n: int, d: int, H: int, k: int, seed: int = 0):
    """The inputs every peer builds from the same seed (float64, cast by each peer)."""
    rng = np.random.default_rng(seed)
    x = sphere(rng, n, d)
    Q, K, WV = (rng.standard_normal((H, k, d)) / np.sqrt(d) for _ in range(3))
    WO = rng.standard_normal((H, d, k)) / np.sqrt(k)
    return x, Q, K, WV, WO


def _peer_clock(cpu: bool) -> None:
    if cpu:
        CLOCK["timer"] = time.process_time
        CLOCK["name"] = "cpu, 1 thread"


def peer_wflow(n: int, d: int, H: int, k: int, beta: float, repeat: int,
               cpu: bool = False) -> dict:
    """wflow: ``kernel_sums(values=W_V, dtype="float32")``, then ``W_O Y / Z`` summed."""
    from wflow.kernels import kernel_sums

    _peer_clock(cpu)
    x, Q, K, WV, WO = _peer_inputs(n, d, H, k)
    m = np.full(n, 1.0 / n)

    def run():
        s = kernel_sums(x, x, m, Q, K, beta=beta, kind="softmax", values=WV, dtype="float32")
        return np.einsum("hdr,hmr->md", WO, s.Y / s.Z[..., None])

    t = timed(run, repeat)
    out = run()
    return {"name": "wflow", **t, "sample": out[:3, :4].tolist(),
            "norm": float(np.linalg.norm(out))}


def peer_torch_sdpa(n: int, d: int, H: int, k: int, beta: float, repeat: int,
                    cpu: bool = False) -> dict:
    """torch ``scaled_dot_product_attention`` (CPU, float32), then ``W_O`` summed over heads."""
    import torch

    _peer_clock(cpu)
    torch.set_num_threads(int(os.environ.get("OMP_NUM_THREADS", "1")))
    x, Q, K, WV, WO = _peer_inputs(n, d, H, k)
    xt = torch.from_numpy(x.astype(np.float32))
    q = torch.einsum("hkd,nd->hnk", torch.from_numpy(Q.astype(np.float32)), xt)
    kk = torch.einsum("hkd,nd->hnk", torch.from_numpy(K.astype(np.float32)), xt)
    v = torch.einsum("hkd,nd->hnk", torch.from_numpy(WV.astype(np.float32)), xt)
    wo = torch.from_numpy(WO.astype(np.float32))

    def run():
        with torch.no_grad():
            o = torch.nn.functional.scaled_dot_product_attention(
                q[None], kk[None], v[None], scale=beta)[0]
            return torch.einsum("hdr,hmr->md", wo, o)

    t = timed(run, repeat)
    out = run().numpy().astype(np.float64)
    return {"name": "torch_sdpa", "torch": torch.__version__, **t,
            "sample": out[:3, :4].tolist(), "norm": float(np.linalg.norm(out))}


def peer_pykeops(n: int, d: int, H: int, k: int, beta: float, repeat: int,
                 cpu: bool = False) -> dict:
    """pykeops 2.3 (CPU): ``sumsoftmaxweight`` per head on LazyTensors, then ``W_O``."""
    import pykeops
    from pykeops.numpy import LazyTensor

    _peer_clock(cpu)
    x, Q, K, WV, WO = _peer_inputs(n, d, H, k)
    f32 = np.float32
    q = [np.ascontiguousarray(x @ Q[h].T, dtype=f32) for h in range(H)]
    kk = [np.ascontiguousarray(x @ K[h].T, dtype=f32) for h in range(H)]
    v = [np.ascontiguousarray(x @ WV[h].T, dtype=f32) for h in range(H)]

    def run():
        out = np.zeros((n, d))
        for h in range(H):
            qi, kj = LazyTensor(q[h][:, None, :]), LazyTensor(kk[h][None, :, :])
            vj = LazyTensor(v[h][None, :, :])
            o = (beta * (qi * kj).sum(-1)).sumsoftmaxweight(vj, axis=1)
            out += o.astype(np.float64) @ WO[h].T
        return out

    t = timed(run, repeat)
    out = run()
    return {"name": "pykeops", "pykeops": pykeops.__version__, **t,
            "sample": out[:3, :4].tolist(), "norm": float(np.linalg.norm(out))}


def peers(python: str, threads: int, quick: bool, cpu: bool = False) -> dict:
    """wflow and torch SDPA on the same inputs, each in a clean process (module docstring).

    ``cpu``: one thread each, process CPU time.
    """
    kw = {"n": 2000 if quick else 10_000, "d": 64, "H": 4, "k": 16, "beta": 4.0,
          "repeat": 1 if quick else 3, "cpu": cpu}
    threads = 1 if cpu else threads
    recs = {}
    for rnd in range(1 if quick else 2):  # alternating rounds
        for name, py in (("wflow", sys.executable), ("torch_sdpa", python),
                         ("pykeops", python)):
            rec = call_peer(f"bench_width:peer_{name}", threads=threads, python=py, **kw)
            if name not in recs or rec["time"] < recs[name]["time"]:
                recs[name] = rec
            print(f"  peer {name} (round {rnd}): {rec['time']:.3f} s, load "
                  f"{rec['load_before']}", flush=True)
    a = np.array(recs["wflow"]["sample"])
    diff = {p: float(np.max(np.abs(a - np.array(recs[p]["sample"])))
                     / np.max(np.abs(np.array(recs[p]["sample"]))))
            for p in ("torch_sdpa", "pykeops")}
    return {"inputs": kw, "peers": recs, "threads": threads, "max_rel_diff_sample": diff,
            "wflow_over_torch": recs["wflow"]["time"] / recs["torch_sdpa"]["time"],
            "wflow_over_pykeops": recs["wflow"]["time"] / recs["pykeops"]["time"]}


def main(argv: list[str] | None = None) -> None:  # noqa: D103
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--quick", action="store_true")
    ap.add_argument("--cpu-time", action="store_true")
    ap.add_argument("--threads", type=int, default=None)
    ap.add_argument("--write", action="store_true", help="write the JSON also with --quick")
    ap.add_argument("--profile", action="store_true",
                    help="also time the stages of the d64 and BERT rows (profile_row)")
    ap.add_argument("--peers", default=None, metavar="PYTHON",
                    help="run the torch SDPA comparison with this interpreter (has torch)")
    args = ap.parse_args(argv)
    if args.peers:
        threads = args.threads or os.cpu_count() or 1
        res = peers(args.peers, threads, args.quick, args.cpu_time)
        print({k: v for k, v in res.items() if k != "peers"})
        if not args.quick or args.write:
            name = "bench_width_peers" + ("_cpu" if args.cpu_time else "")
            print(f"wrote {write_json(name, {**res, 'commit': _commit()})}")
        return
    if args.cpu_time:
        ensure_clean(1)
        CLOCK["timer"] = time.process_time
        CLOCK["name"] = "cpu, 1 thread"
    else:
        ensure_clean(args.threads or os.cpu_count() or 1)
    rng = np.random.default_rng(0)
    q = args.quick
    rep = 1 if q else 2
    rep_short = 1 if q else 5  # the 1-s rows: more calls, the best (their ratio is a target)
    n64, nb, nx = (2000, 1024, 1000) if q else (10_000, 4096, 3000)
    print(f"machine: {os.cpu_count()} cores, load {load1()}, clock {CLOCK['name']}", flush=True)
    r64 = gemm_rate(np.float64)
    r32 = gemm_rate(np.float32)
    print(f"  square GEMM: float64 {r64 / 1e9:.1f} GF/s, float32 {r32 / 1e9:.1f} GF/s",
          flush=True)
    if args.profile:  # the exponential's floor at the start too (the profile takes the best)
        from wflow.kernels import _tiled

        e64 = np_exp_rate(np.float64, _tiled.TM, _tiled.TN // 2)
        e32 = np_exp_rate(np.float32, _tiled.TM, _tiled.TN)
    rows = [
        row("d64_H4_float64", n64, 64, 4, 64, None, "float64", 256, r64, rep, rng),
        row("d64_H4_float32", n64, 64, 4, 64, None, "float32", 256, r32, rep, rng),
        row("d64_H4_rank16_float64", n64, 64, 4, 16, 16, "float64", 64, r64, rep, rng),
        row("bert_d768_H12_k64_float32", nb, 768, 12, 64, 64, "float32", 256, r32, rep_short,
            rng),
        row("one_head_d768_float32", nb, 768, 1, 768, None, "float32", 3072, r32, rep_short,
            rng),
    ]
    by = {r["name"]: r for r in rows}
    summary = {
        "float64_over_floor": by["d64_H4_float64"]["ratio"],
        "float32_over_float64": by["d64_H4_float32"]["time"] / by["d64_H4_float64"]["time"],
        "float32_over_float32_floor": by["d64_H4_float32"]["ratio"],
        "rank16_over_full_rank": (by["d64_H4_rank16_float64"]["time"]
                                  / by["d64_H4_float64"]["time"]),
        "bert_over_one_head_768": (by["bert_d768_H12_k64_float32"]["time"]
                                   / by["one_head_d768_float32"]["time"]),
        "bert_over_float32_floor": by["bert_d768_H12_k64_float32"]["ratio"],
        "targets": {"float64_over_floor": 1.3, "float32_over_float64": 0.6,
                    "bert_over_one_head_768": 1.2, "bert_over_float32_floor": 1.3},
    }
    cross = crossover(nx, rep, rng)
    wins = [c["width"] for c in cross if c["tiled_over_fused"] < 1.0]
    summary["crossover_width"] = min(wins) if wins else None
    from wflow.kernels.direct import WIDE

    summary["WIDE"] = WIDE
    prof = []
    if args.profile:
        prof = [profile_row("d64_H4_float64", n64, 64, 4, 64, None, "float64", r64, rng,
                            exp_rate=e64),
                profile_row("d64_H4_float32", n64, 64, 4, 64, None, "float32", r32, rng,
                            exp_rate=e32),
                profile_row("bert_d768_H12_k64_float32", nb, 768, 12, 64, 64, "float32", r32,
                            rng, exp_rate=e32)]
    print(table(rows, [("name", "row", "{}"), ("n", "n", "{}"), ("time", "time s", "{:.3f}"),
                       ("cpu_per_call", "cpu s", "{:.2f}"), ("floor", "floor s", "{:.3f}"),
                       ("ratio", "x floor", "{:.2f}"), ("load_before", "load", "{:.2f}")]))
    print({k: (round(v, 3) if isinstance(v, float) else v) for k, v in summary.items()})
    if not q or args.write:
        name = "bench_width_cpu" if args.cpu_time else "bench_width"
        path = write_json(name + ("_quick" if q else ""), {
            "machine": machine(), "gemm_rate": {"float64": r64, "float32": r32},
            "rows": rows, "crossover": cross, "summary": summary, "argv": sys.argv[1:],
            "commit": _commit(), **({"profile": prof} if prof else {})})
        print(f"wrote {path}")


if __name__ == "__main__":
    main()
