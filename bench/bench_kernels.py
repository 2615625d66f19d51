"""Benchmark of the nonlocal attention sums (wflow.kernels): back-ends, pairs/s, fast summation.

    Z_h(x_i) = Σ_j m_j e^{β<Q_h x_i, K_h y_j>},   Y_h(x_i) = Σ_j m_j e^{β<Q_h x_i, K_h y_j>} y_j

Every ratio is measured in ONE run of this script (the machine is shared, absolute times
drift); every method ("peer": the NumPy references, the candidates, each wflow back-end)
runs in its own fresh process with an explicit, recorded environment and the same thread
count (``bench/_common.py``: no inherited ``OMP_*``/``MKL_*``/``NUMBA_*``/``OPENBLAS_*``),
on the same data (drawn from the same seed in each process), warmed up there; errors are
compared on the sums each process saves. Sections:

* ``candidates``  direct sums at n = 10 000, H = 4, d ∈ {3, 64}: the blocked NumPy
  reference, NumPy + a thread pool over blocks, the fused numba kernels;
* ``pairs``       pair interactions per second (``M·N·H / time``) of the direct
  back-end for n ∈ {1k, 10k}, H ∈ {1, 8}, d ∈ {3, 64}, against a naive
  single-einsum NumPy implementation;
* ``fastsum``     spherical-harmonic fast summation on S² over a grid of β‖A‖ and
  M = N: degree, estimated and actual error, time against the direct sums, the
  choice of ``backend="auto"``; plus the issue's target (40 000 points, 4 heads);
* ``memory``      n = 100 000 particles, H = 8, d = 3 (direct and auto) in a child
  process: time and peak resident memory;
* ``jit``         first-call compile time with an empty numba cache, and the
  cached start.

Usage::

    python bench/bench_kernels.py                 # all sections (~10 min on 2 cores)
    python bench/bench_kernels.py --quick         # small sizes, seconds
    python bench/bench_kernels.py --section fastsum --section pairs
    python bench/bench_kernels.py --cpu-time      # one thread, CPU time (shared machine)

Writes ``bench/results/bench_kernels[_quick][_cpu].json``.
"""

from __future__ import annotations

import argparse
import json
import math
import os
import subprocess
import sys
import tempfile
import time
from concurrent.futures import ThreadPoolExecutor
from functools import partial
from pathlib import Path
from types import SimpleNamespace

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent))
from _common import (  # noqa: E402
    CLOCK,
    RESULTS,
    best_time,
    call_peer,
    default_threads,
    parent_machine,
    peer_env,
    recorded_env,
    sphere,
    table,
    write_json,
)

#: Threads of every peer and its clock (set by ``main``).
RUN = {"threads": 1, "cpu_time": False, "tmp": None}

ROOT = Path(__file__).resolve().parents[1]


def symmetric_heads(rng, H, d, norm=None):
    """Random symmetric ``A_h = (Z + Zᵀ)/√(2d)`` (``Q = I``), optionally with ``‖A_h‖₂ = norm``."""
    Z = rng.standard_normal((H, d, d))
    A = (Z + np.swapaxes(Z, 1, 2)) / math.sqrt(2 * d)
    if norm is not None:
        A *= norm / np.linalg.norm(A, ord=2, axis=(1, 2))[:, None, None]
    Q = np.broadcast_to(np.eye(d), (H, d, d)).copy()
    return Q, A


def ks(x, m, Q, K, backend):
    """``kernel_sums`` at targets = sources ``x``, softmax, ``β = 1``, as a thunk."""
    from wflow import kernels as km

    return partial(km.kernel_sums, x, x, m, Q, K, beta=1.0, kind="softmax", backend=backend)


def rel_err(a, b):
    """Max over targets of ``max(|ΔZ|, |ΔY|∞) / Z`` (the kernels' error measure).

    ``a``, ``b``: results with ``.Z``, ``.Y``, or the ``.npz`` files peers saved.
    """
    a, b = (np.load(v) if isinstance(v, str) else {"Z": v.Z, "Y": v.Y} for v in (a, b))
    dz = np.abs(a["Z"] - b["Z"])
    dy = np.abs(a["Y"] - b["Y"]).max(axis=2)
    return float(np.max(np.maximum(dz, dy) / b["Z"]))


# ----------------------------------------------------------------------- peers
def peer_sums(method: str, n: int, H: int, d: int, seed: int, norm: float | None = None,
              repeat: int = 1, save: str | None = None, cpu_time: bool = False,
              plan: bool = False) -> dict:
    """In a fresh process: the sums of one method on the data of ``seed``; time, info.

    Methods: ``numpy`` / ``direct`` / ``fastsum`` / ``auto`` (``wflow.kernels`` back-ends),
    ``threads`` (NumPy + a thread pool), ``generic`` (chunked numba), ``naive`` (one
    einsum). ``repeat``: timed calls after one warm-up (0: one untimed-warm-up-free call).
    """
    if cpu_time:
        CLOCK.update(timer=time.process_time, name="cpu, 1 thread")
    rng = np.random.default_rng(seed)
    x = sphere(rng, n, d)
    m = np.full(n, 1.0 / n)
    Q, K = symmetric_heads(rng, H, d, norm=norm)
    threads = int(os.environ.get("OMP_NUM_THREADS") or os.cpu_count() or 1)
    fn = {"threads": partial(threads_numpy, x, x, m, Q, K, 1.0, threads),
          "generic": partial(generic_numba, x, x, m, Q, K, 1.0),
          "naive": partial(naive_einsum, x, x, m, Q, K, 1.0)}.get(method)
    fn = fn or ks(x, m, Q, K, method)
    out = {"method": method}
    try:
        t, r = best_time(fn, repeat=repeat)
    except ValueError as exc:  # fastsum refused (tolerance unreachable)
        return out | {"refused": str(exc)}
    out["time_s"] = t
    if save:
        np.savez(save, Z=r.Z, Y=r.Y)
    if getattr(r, "info", None) is not None:
        out.update(degree=[int(v) for v in r.info.degree], err_est=r.info.err_est,
                   backend=r.info.backend)
    if plan:
        from wflow import kernels as km

        p = km.plan_kernel(x, x, Q, K, beta=1.0, kind="softmax", m=m)
        out["auto"] = p.backend + (f" ({sum(p.fast_heads)}/{H} heads)"
                                   if p.backend == "fastsum" else "")
    return out


def sums(method: str, n: int, H: int, d: int, seed: int, **kw) -> dict:
    """:func:`peer_sums` in a fresh process; the sums saved under the run's temp folder."""
    save = str(Path(RUN["tmp"]) / f"{method}_{n}_{H}_{d}_{seed}_{kw.get('norm')}.npz")
    rec = call_peer("bench_kernels:peer_sums", threads=RUN["threads"], method=method, n=n,
                    H=H, d=d, seed=seed, save=save, cpu_time=RUN["cpu_time"], **kw)
    rec["file"] = save
    return rec


def _peer_fields(rec: dict) -> dict:
    return {"env": rec["env"], "load": max(rec["load_before"], rec["load_after"]),
            "peer_threads": {k: rec["peer"].get(k) for k in ("numba_threads", "threadpools")}}


# ------------------------------------------------------------------ candidates
def threads_numpy(x, y, m, Q, K, beta, nthreads):
    """Candidate: NumPy with a thread pool over (head, block) (exp and BLAS release the GIL)."""
    H = Q.shape[0]
    M, d = x.shape
    N = y.shape[0]
    qx = beta * np.einsum("hkd,md->hmk", Q, x)
    kyT = np.ascontiguousarray(np.einsum("hkd,nd->hkn", K, y))
    Z = np.empty((H, M))
    Y = np.empty((H, M, d))
    B = max(1, (1 << 19) // N)  # 4 MiB blocks: L3-resident, few BLAS calls

    def work(job):
        h, i0 = job
        i1 = min(M, i0 + B)
        s = qx[h, i0:i1] @ kyT[h]
        np.exp(s, out=s)
        s *= m
        Z[h, i0:i1] = s.sum(axis=1)
        Y[h, i0:i1] = s @ y

    with ThreadPoolExecutor(nthreads) as ex:
        list(ex.map(work, [(h, i0) for h in range(H) for i0 in range(0, M, B)]))
    return SimpleNamespace(Z=Z, Y=Y, info=None)


def generic_numba(x, y, m, Q, K, beta):
    """Candidate for wide heads: the chunked all-numba kernel (no BLAS)."""
    from wflow import kernels as km
    from wflow.kernels import _numba as kn

    H = Q.shape[0]
    M, d = x.shape
    qx, ky = km.direct._score_factors(x, y, Q, K, beta)
    Z = np.empty((H, M))
    Y = np.empty((H, M, d))
    P = np.empty((H, M))
    kn.direct_generic(np.ascontiguousarray(qx), np.ascontiguousarray(np.swapaxes(ky, 1, 2)),
                      np.ascontiguousarray(y.T), m, 0, False, Z, Y, P, P)
    return km.KernelSums(Z, Y, None, None)


def section_candidates(quick: bool) -> list[dict]:
    n = 2000 if quick else 10_000
    H = 4
    rows = []
    for d in (3, 64):
        ref = sums("numpy", n, H, d, seed=1 + d, repeat=1)
        reps = 1 if n >= 10_000 else 2
        cands = {"numpy blocked (reference)": ref,
                 "numpy + thread pool": sums("threads", n, H, d, seed=1 + d, repeat=reps),
                 "numba fused (backend='direct')": sums("direct", n, H, d, seed=1 + d,
                                                        repeat=reps)}
        if d > 3:
            cands["numba chunked, no BLAS"] = sums("generic", n, H, d, seed=1 + d, repeat=reps)
        for name, rec in cands.items():
            t = rec["time_s"]
            rows.append({"d": d, "n": n, "H": H, "method": name, "time_s": t,
                         "ns_per_triple": t / (n * n * H) * 1e9,
                         "speedup": ref["time_s"] / t,
                         "rel_err": rel_err(rec["file"], ref["file"])} | _peer_fields(rec))
    return rows


# ----------------------------------------------------------------------- pairs
def naive_einsum(x, y, m, Q, K, beta):
    """The naive NumPy implementation: one einsum for all scores, full (H, M, N) matrices."""
    s = beta * np.einsum("hmk,hnk->hmn", np.einsum("hkd,md->hmk", Q, x),
                         np.einsum("hkd,nd->hnk", K, y), optimize=True)
    E = np.exp(s)
    return SimpleNamespace(Z=np.einsum("hmn,n->hm", E, m, optimize=True),
                           Y=np.einsum("hmn,n,nd->hmd", E, m, y, optimize=True), info=None)


def section_pairs(quick: bool) -> list[dict]:
    rows = []
    for n in ((500, 1000) if quick else (1000, 10_000)):
        for H in (1, 8):
            for d in (3, 64):
                triples = n * n * H
                seed = 2 + n + 10 * H + d
                rep = 1 if n >= 10_000 else 3
                r_dir = sums("direct", n, H, d, seed=seed, repeat=rep)
                t_dir = r_dir["time_s"]
                row = {"n": n, "H": H, "d": d, "direct_s": t_dir,
                       "direct_pairs_per_s": triples / t_dir, "env": r_dir["env"],
                       "load": max(r_dir["load_before"], r_dir["load_after"])}
                if triples * 8 * 2 <= 4 * 2**30:  # the naive (H, n, n) matrices fit in 4 GiB
                    r_nv = sums("naive", n, H, d, seed=seed, repeat=rep)
                    t_nv = r_nv["time_s"]
                    row.update(naive_s=t_nv, naive_pairs_per_s=triples / t_nv,
                               speedup=t_nv / t_dir, rel_err=rel_err(r_dir["file"],
                                                                     r_nv["file"]),
                               naive_env=r_nv["env"],
                               load=max(row["load"], r_nv["load_before"], r_nv["load_after"]))
                rows.append(row)
    return rows


# --------------------------------------------------------------------- fastsum
def section_fastsum(quick: bool) -> dict:
    H = 4
    sizes = (1000, 2500) if quick else (2500, 10_000, 40_000)
    norms = (0.5, 2.0, 8.0) if quick else (0.5, 1.0, 2.0, 4.0, 8.0, 16.0, 32.0)
    grid = []
    for n in sizes:
        for lam in norms:
            seed = 3 + n + int(100 * lam)
            r_dir = sums("direct", n, H, 3, seed=seed, norm=lam, repeat=1)
            t_dir = r_dir["time_s"]
            row = {"n": n, "H": H, "beta_normA": lam, "direct_s": t_dir, "env": r_dir["env"]}
            r_fs = sums("fastsum", n, H, 3, seed=seed, norm=lam, repeat=1, plan=True)
            if "refused" in r_fs:
                row.update(fast_backend=f"refused: {r_fs['refused']}")
            else:
                row.update(fast_s=r_fs["time_s"], speedup_vs_direct=t_dir / r_fs["time_s"],
                           degree=max(r_fs["degree"]), err_est=r_fs["err_est"],
                           err=rel_err(r_fs["file"], r_dir["file"]),
                           fast_backend=r_fs["backend"])
            row["auto"] = r_fs.get("auto", "-")
            row["load"] = max(r["load_after"] for r in (r_dir, r_fs))
            grid.append(row)
            print(f"  fastsum n={n} β‖A‖={lam}: {row.get('speedup_vs_direct', float('nan')):.1f}x"
                  f" err {row.get('err', float('nan')):.1e}", flush=True)
    # the target: 40 000 points on S², 4 random symmetric heads, against the
    # blocked NumPy reference (and the fused direct sum)
    n = 4000 if quick else 40_000
    ref = sums("numpy", n, H, 3, seed=3, repeat=0)
    r_dir = sums("direct", n, H, 3, seed=3, repeat=1)
    r_auto = sums("auto", n, H, 3, seed=3, repeat=2)
    t_ref, t_dir, t_auto = ref["time_s"], r_dir["time_s"], r_auto["time_s"]
    rng = np.random.default_rng(3)
    sphere(rng, n, 3)
    _, A = symmetric_heads(rng, H, 3)
    target = {"n": n, "H": H, "beta": 1.0,
              "normA": [float(v) for v in np.linalg.norm(A, ord=2, axis=(1, 2))],
              "reference_s": t_ref, "direct_s": t_dir, "auto_s": t_auto,
              "auto_backend": r_auto["backend"], "degree": r_auto["degree"],
              "err_est": r_auto["err_est"], "err_vs_reference": rel_err(r_auto["file"],
                                                                         ref["file"]),
              "direct_err_vs_reference": rel_err(r_dir["file"], ref["file"]),
              "speedup_vs_reference": t_ref / t_auto, "speedup_vs_direct": t_dir / t_auto,
              "env": ref["env"], "load": max(r["load_after"] for r in (ref, r_dir, r_auto))}
    return {"grid": grid, "target": target}


# ---------------------------------------------------------------------- memory
_MEM_CHILD = r"""
import json, resource, sys, time
import numpy as np
from wflow import kernels as km
n, H, backend = int(sys.argv[1]), int(sys.argv[2]), sys.argv[3]
rng = np.random.default_rng(4)
x = rng.standard_normal((n, 3)); x /= np.linalg.norm(x, axis=1, keepdims=True)
Z = rng.standard_normal((H, 3, 3)); A = (Z + Z.transpose(0, 2, 1)) / np.sqrt(6)
Q = np.broadcast_to(np.eye(3), (H, 3, 3)).copy()
m = np.full(n, 1.0 / n)
km.kernel_sums(x[:1000], x[:1000], m[:1000], Q, A, beta=1.0, kind="softmax", backend=backend)
t = time.perf_counter()
r = km.kernel_sums(x, x, m, Q, A, beta=1.0, kind="softmax", potential=True, scores=True,
                   backend=backend)
t = time.perf_counter() - t
# VmHWM (peak resident set of this process image); ru_maxrss would include the parent's
# peak inherited through fork + exec on Linux
hwm = [ln for ln in open("/proc/self/status") if ln.startswith("VmHWM")]
rss = (int(hwm[0].split()[1]) / 2**20 if hwm
       else resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 2**20)
print(json.dumps({"n": n, "H": H, "backend": backend, "ran": r.info.backend, "time_s": t,
                  "peak_rss_GiB": rss, "degree": list(r.info.degree)}))
"""


def _child(code: str, *args: str, env: dict | None = None) -> dict:
    penv = peer_env(RUN["threads"], env)
    out = subprocess.run([sys.executable, "-c", code, *args], capture_output=True, text=True,
                         cwd=ROOT, env=penv, check=True)
    return json.loads(out.stdout.strip().splitlines()[-1]) | {"env": recorded_env(penv)}


def section_memory(quick: bool) -> list[dict]:
    n = 20_000 if quick else 100_000
    rows = [_child(_MEM_CHILD, str(n), "8", "auto")]
    rows.append(_child(_MEM_CHILD, str(n), "8", "direct"))
    return rows


# ------------------------------------------------------------------------- jit
_JIT_CHILD = r"""
import json, time
t0 = time.perf_counter()
import numpy as np
from wflow import kernels as km
t_imp = time.perf_counter() - t0
km.direct._busy = lambda: False  # compile the parallel kernels even on a busy machine
rng = np.random.default_rng(5)
out = {"import_s": t_imp}
def first(name, d, backend, n=300):
    x = rng.standard_normal((n, d)); x /= np.linalg.norm(x, axis=1, keepdims=True)
    Q = np.broadcast_to(np.eye(d), (2, d, d)).copy()
    t = time.perf_counter()
    km.kernel_sums(x, x, np.full(n, 1 / n), Q, 0.5 * Q, beta=1.0, kind="softmax",
                   backend=backend)
    out[name] = time.perf_counter() - t
first("direct_d3", 3, "direct", 1000)
first("direct_generic", 8, "direct", 1000)
first("direct_blas", 32, "direct", 300)
first("fastsum", 3, "fastsum", 300)
t = time.perf_counter()
x = rng.standard_normal((300, 3)); x /= np.linalg.norm(x, axis=1, keepdims=True)
Q = np.broadcast_to(np.eye(3), (8, 3, 3)).copy()
km.particle_terms(x, np.full(300, 1 / 300), Q, Q, Q, np.full(8, 1 / 8), beta=1.0,
                  kind="softmax")
out["particle_terms"] = time.perf_counter() - t
print(json.dumps(out))
"""


def section_jit(quick: bool) -> dict:
    with tempfile.TemporaryDirectory() as cache:
        env = {"NUMBA_CACHE_DIR": cache}
        cold = _child(_JIT_CHILD, env=env)
        warm = _child(_JIT_CHILD, env=env)
    return {"cold_cache_s": cold, "warm_cache_s": warm}


# ------------------------------------------------------------------------ main
def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--quick", action="store_true", help="small sizes (seconds)")
    ap.add_argument("--cpu-time", action="store_true",
                    help="one thread, process CPU time (robust on a shared machine)")
    ap.add_argument("--section", action="append",
                    choices=["candidates", "pairs", "fastsum", "memory", "jit"],
                    help="run only these sections (repeatable)")
    ap.add_argument("--threads", type=int, default=default_threads(),
                    help="threads of every peer (default: $WFLOW_BENCH_THREADS or the cores)")
    args = ap.parse_args(argv)
    RUN.update(threads=1 if args.cpu_time else args.threads, cpu_time=args.cpu_time)
    tmpdir = tempfile.TemporaryDirectory()
    RUN["tmp"] = tmpdir.name
    sections = args.section or ["jit", "candidates", "pairs", "fastsum", "memory"]
    flags = (" --quick" if args.quick else "") + (" --cpu-time" if args.cpu_time else "")
    flags += "".join(f" --section {sec}" for sec in (args.section or []))
    out = {"machine_start": parent_machine(), "quick": args.quick, "threads": RUN["threads"],
           "clock": "cpu, 1 thread" if args.cpu_time else "wall",
           "command": "python bench/bench_kernels.py" + flags}
    t0 = time.perf_counter()
    if "jit" in sections:
        out["jit"] = section_jit(args.quick)
        print("\nJIT compile (s), empty cache -> cached:")
        for k, v in out["jit"]["cold_cache_s"].items():
            print(f"  {k:20s} {v:7.2f} -> {out['jit']['warm_cache_s'][k]:.3f}")
    if "candidates" in sections:
        rows = out["candidates"] = section_candidates(args.quick)
        print("\nDirect sums, targets = sources, H = 4 (speed-up vs the blocked NumPy reference)")
        print(table(rows, [("d", "d", "{}"), ("method", "method", "{}"),
                           ("time_s", "time [s]", "{:.3f}"),
                           ("ns_per_triple", "ns/triple", "{:.2f}"),
                           ("speedup", "speed-up", "{:.2f}x"), ("rel_err", "rel err", "{:.1e}")]))
    if "pairs" in sections:
        rows = out["pairs"] = section_pairs(args.quick)
        print("\nPair interactions per second, backend='direct' vs naive single-einsum NumPy")
        print(table(rows, [("n", "n", "{}"), ("H", "H", "{}"), ("d", "d", "{}"),
                           ("direct_pairs_per_s", "direct pairs/s", "{:.3g}"),
                           ("naive_pairs_per_s", "naive pairs/s", "{:.3g}"),
                           ("speedup", "ratio", "{:.1f}x"), ("rel_err", "rel err", "{:.1e}")]))
    if "fastsum" in sections:
        res = out["fastsum"] = section_fastsum(args.quick)
        print("\nFast summation on S² (H = 4, M = N = n, tol 1e-10) vs fused direct sums")
        print(table(res["grid"], [("n", "n", "{}"), ("beta_normA", "β‖A‖", "{:g}"),
                                  ("degree", "L", "{}"), ("err_est", "err est", "{:.1e}"),
                                  ("err", "err", "{:.1e}"), ("fast_s", "fast [s]", "{:.3f}"),
                                  ("direct_s", "direct [s]", "{:.3f}"),
                                  ("speedup_vs_direct", "speed-up", "{:.1f}x"),
                                  ("auto", "auto picks", "{}")]))
        tg = res["target"]
        print(f"\nTarget: n = {tg['n']}, H = {tg['H']}, ‖A_h‖ = "
              f"{', '.join(f'{v:.2f}' for v in tg['normA'])}: auto -> {tg['auto_backend']} "
              f"(L = {tg['degree']}) {tg['auto_s']:.3f} s, err {tg['err_vs_reference']:.1e} "
              f"(est {tg['err_est']:.1e}); numpy reference {tg['reference_s']:.1f} s "
              f"({tg['speedup_vs_reference']:.0f}x), fused direct {tg['direct_s']:.2f} s "
              f"({tg['speedup_vs_direct']:.0f}x)")
    if "memory" in sections:
        rows = out["memory"] = section_memory(args.quick)
        print("\nLarge particle system, d = 3 (child process, peak RSS)")
        print(table(rows, [("n", "n", "{}"), ("H", "H", "{}"), ("backend", "backend", "{}"),
                           ("ran", "ran", "{}"), ("time_s", "time [s]", "{:.2f}"),
                           ("peak_rss_GiB", "peak RSS [GiB]", "{:.2f}")]))
    out["machine_end"] = parent_machine()
    tmpdir.cleanup()
    out["wall_s"] = time.perf_counter() - t0
    name = "bench_kernels" + ("_quick" if args.quick else "") + ("_cpu" if args.cpu_time else "")
    load_start, load_end = out["machine_start"]["loadavg"], out["machine_end"]["loadavg"]
    previous = RESULTS / f"{name}.json"
    if args.section and previous.is_file():  # a partial run updates the sections it ran
        merged = json.loads(previous.read_text())
        merged.setdefault("section_runs", []).append(
            {k: out[k] for k in ("machine_start", "machine_end", "command") if k in out}
            | {"sections": sections})
        merged.update({k: v for k, v in out.items() if k in sections})
        out = merged
    path = write_json(name, out)
    print(f"\nload average start {load_start} end {load_end}; wrote {path.relative_to(ROOT)}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
