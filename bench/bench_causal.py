"""Benchmark of the causal sums (issue 43 item 2) against the non-causal step.

    Z_h(i) = Σ_{j ≤ i} m_j e^{β<Q_h x_i, K_h x_j> + b(i, j)},   Y_h(i) = Σ_{j ≤ i} (…) x_j

Rows (each ratio measured in ONE run, both peers in this process, warmed up, best of
``repeat``, CPU time of the process beside the wall time and the 1-min load):

* ``direct``   n = 10⁴, d = k = 64, H = 1, softmax: ``causal_sums(backend="direct")``
  (lower triangle only, BLAS score blocks) against ``kernel_sums(backend="direct")``
  (the full square). Target: causal ≤ 0.6× non-causal. Also d = 3 (fused kernels).
* ``fastsum``  n = 10⁶ tokens on S², β = 4, ``Q = K = I`` (the published decoder
  setting of Karagodin et al.), H = 1, softmax, tol 1e-10: ``causal_sums(backend=
  "fastsum")`` (prefix sums of the coefficients + the pairs inside each block) against
  ``kernel_sums(backend="fastsum")``. Target: causal ≤ 1.5× non-causal. Also with ALiBi.
  Accuracy: the causal fast sum against the causal direct sum at 200 probe targets
  (the last tokens, the longest sums; direct sums of the full prefix, NumPy).
* ``rank`` (``--rank``: only these rows) n = 10⁴, d = 64, H = 4, values of rank r = 16,
  softmax, causal direct: ``causal_sums(values=W_V)`` (``W_V y_j`` accumulated at width
  ``r``) against the full-width sums projected after, ``W_V Σ k y`` (what the compiled
  causal sums did before: ``values=None``, then ``W_V`` applied once per target). Score
  width k = 64 (``w + r = 80`` against ``w + d = 128`` a pair) and k = 16 (``d/H``, as a
  trained layer's heads: 32 against 80). Also the largest difference of the two outputs
  relative to their largest entry. Target: rank r ≤ 0.9× full width.

Usage::

    python bench/bench_causal.py            # n = 10⁴ and 10⁶ (a few minutes on 2 cores)
    python bench/bench_causal.py --quick    # n = 2000 and 10⁵
    python bench/bench_causal.py --threads 1
    python bench/bench_causal.py --rank     # the rank-r rows only

Writes ``bench/results/bench_causal[_rank][_quick][_threads<N>].json``.
"""

from __future__ import annotations

import argparse
import os
import sys
import time
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent))
from _common import parent_machine, write_json  # noqa: E402


def _timed(fn, repeat: int) -> dict:
    """Best wall and CPU time over ``repeat`` calls after one warm-up call."""
    fn()
    walls, cpus = [], []
    for _ in range(repeat):
        load = os.getloadavg()[0]
        c0, w0 = time.process_time(), time.perf_counter()
        out = fn()
        walls.append(time.perf_counter() - w0)
        cpus.append(time.process_time() - c0)
    return {"wall_s": min(walls), "cpu_s": min(cpus), "walls": walls, "cpus": cpus,
            "load1": round(load, 2), "info": getattr(out, "info", None) and out.info.as_dict(),
            "out": out}


def _tokens(n: int, d: int, seed: int) -> np.ndarray:
    x = np.random.default_rng(seed).normal(size=(n, d))
    return x / np.linalg.norm(x, axis=1, keepdims=True)


def row_direct(n: int, d: int, repeat: int) -> dict:
    from wflow import causal_sums, kernel_sums

    x = _tokens(n, d, 0)
    m = np.full(n, 1.0 / n)
    rng = np.random.default_rng(1)
    Q = rng.normal(size=(1, d, d)) / np.sqrt(d)
    K = rng.normal(size=(1, d, d)) / np.sqrt(d)
    full = _timed(lambda: kernel_sums(x, x, m, Q, K, beta=1.0, kind="softmax",
                                      backend="direct"), repeat)
    causal = _timed(lambda: causal_sums(x, m, Q, K, beta=1.0, kind="softmax",
                                        backend="direct"), repeat)
    return _ratio("direct", dict(n=n, d=d, k=d, H=1, kind="softmax"), full, causal, 0.6)


def row_rank(n: int, d: int, k: int, H: int, r: int, repeat: int) -> dict:
    from wflow import causal_sums

    x = _tokens(n, d, 3)
    m = np.full(n, 1.0 / n)
    rng = np.random.default_rng(4)
    Q = rng.normal(size=(H, k, d)) / np.sqrt(d)
    K = rng.normal(size=(H, k, d)) / np.sqrt(d)
    W = rng.normal(size=(H, r, d)) / np.sqrt(d)
    kw = dict(beta=1.0, kind="softmax", backend="direct")

    def full_width():  # the sums at width d, W_V applied once per target after
        s = causal_sums(x, m, Q, K, **kw)
        return type(s)(s.Z, np.matmul(s.Y, np.swapaxes(W, 1, 2)), s.Phi, s.S, s.info)

    full = _timed(full_width, repeat)
    rank = _timed(lambda: causal_sums(x, m, Q, K, values=W, **kw), repeat)
    Yf, Yr = full["out"].Y, rank["out"].Y
    row = _ratio("rank", dict(n=n, d=d, k=k, H=H, r=r, kind="softmax"), full, rank, 0.9,
                 labels=("full_width", "rank_r"))
    row["rel_diff"] = float(np.max(np.abs(Yr - Yf)) / np.max(np.abs(Yf)))
    row["rank_r"].pop("out", None)
    return row


def _probe_err(x, m, Q, K, beta, bias, got, probes: int) -> float:
    """``max |ΔZ_i|, |ΔY_i| / Z_i`` of the fast sum at the last ``probes`` tokens (NumPy)."""
    n = x.shape[0]
    kx = x @ K[0].T
    worst = 0.0
    for i0 in range(n - probes, n, 8):  # 8 rows at a time: O(8 n) memory
        idx = np.arange(i0, min(n, i0 + 8))
        s = beta * (x[idx] @ Q[0].T) @ kx.T
        allowed = np.arange(n)[None, :] <= idx[:, None]
        if bias is not None:
            s = s + bias(idx[:, None], np.arange(n)[None, :])
        w = np.where(allowed, np.exp(np.where(allowed, s, 0.0)), 0.0) * m
        Z, Y = w.sum(axis=1), w @ x
        worst = max(worst, float(np.max(np.abs(got.Z[0, idx] - Z) / Z)),
                    float(np.max(np.abs(got.Y[0, idx] - Y).max(axis=1) / Z)))
    return worst


def row_fast(n: int, repeat: int, probes: int, slope: float) -> dict:
    from wflow import ALiBi, causal_sums, kernel_sums

    x = _tokens(n, 3, 2)
    m = np.full(n, 1.0 / n)
    Q = np.eye(3)[None]
    K = np.eye(3)[None]
    beta = 4.0
    bias = ALiBi(slope) if slope else None
    full = _timed(lambda: kernel_sums(x, x, m, Q, K, beta=beta, kind="softmax",
                                      backend="fastsum"), repeat)
    causal = _timed(lambda: causal_sums(x, m, Q, K, beta=beta, kind="softmax", bias=bias,
                                        backend="fastsum"), repeat)
    out = _ratio("fastsum", dict(n=n, d=3, H=1, beta=beta, kind="softmax", heads="Q=K=I",
                                 tol=1e-10, alibi_slope=slope), full, causal, 1.5)
    out["probe_err"] = _probe_err(x, m, Q, K, beta, bias, causal["out"], probes)
    out["probes"] = probes
    return out


def _ratio(name, setting, full, causal, target, labels=("noncausal", "causal")) -> dict:
    """The row: both peers' times under ``labels`` (baseline, measured) and their ratio."""
    full.pop("out", None)
    causal_out = causal.pop("out", None)
    r_cpu = causal["cpu_s"] / full["cpu_s"]
    r_wall = causal["wall_s"] / full["wall_s"]
    row = {"row": name, **setting, labels[0]: full, labels[1]: causal,
           "ratio_cpu": r_cpu, "ratio_wall": r_wall, "target": target,
           "holds_cpu": bool(r_cpu <= target)}
    print(f"{name:8s} {setting}: {labels[0]} {full['wall_s']:.3f} s wall / {full['cpu_s']:.3f} s "
          f"CPU, {labels[1]} {causal['wall_s']:.3f} s / {causal['cpu_s']:.3f} s; ratio CPU "
          f"{r_cpu:.2f} wall {r_wall:.2f} (target ≤ {target}), load {causal['load1']}",
          flush=True)
    causal["out"] = causal_out
    return row


def main(argv: list[str] | None = None) -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--quick", action="store_true")
    ap.add_argument("--threads", type=int, default=None)
    ap.add_argument("--n-fast", type=int, default=None)
    ap.add_argument("--rank", action="store_true", help="the rank-r rows only")
    args = ap.parse_args(argv)
    import numba

    if args.threads:  # numba's threads and BLAS's (CPU time counts every spinning thread)
        numba.set_num_threads(args.threads)
        try:
            from threadpoolctl import threadpool_limits

            threadpool_limits(args.threads)
        except ImportError:  # pragma: no cover - optional
            pass
    n_dir = 2000 if args.quick else 10_000
    if args.rank:
        rows = [row_rank(n_dir, 64, k, 4, 16, 5) for k in (64, 16)]
    else:
        n_fast = args.n_fast or (100_000 if args.quick else 1_000_000)
        rows = [row_direct(n_dir, 64, 3), row_direct(n_dir, 3, 3)]
        for slope in (0.0, 1.0 / n_fast):
            r = row_fast(n_fast, 2 if n_fast >= 500_000 else 3, 200, slope)
            r["causal"].pop("out", None)
            rows.append(r)
        for r in rows[:2]:
            r["causal"].pop("out", None)
    payload = {"machine": parent_machine(), "threads": numba.get_num_threads(), "rows": rows}
    name = "bench_causal" + ("_rank" if args.rank else "") + ("_quick" if args.quick else "") + (
        f"_threads{args.threads}" if args.threads else "")
    path = write_json(name, payload)
    print(f"wrote {path}")


if __name__ == "__main__":
    main()
