"""Benchmark of the JKO scheme: time per step and per inner iteration, memory.

Setting: one softmax head ``A = 2I`` (β = 1), two von Mises–Fisher bumps, ``τ = 0.1``,
``T = 0.2`` (two steps; the second reuses the caches of the first), meshes of 720, 2420
and 9680 cells (≈ 600, 2.5k, 10k). Configurations:

* ``exact gcg`` — exact OT, generalised conditional gradient on plans (default);
  ``warm`` keeps the candidate-pair list across inner iterations and steps, ``cold``
  rebuilds it every step;
* ``entropic gcg`` — ``OT_ε`` with ``ε = τ²`` (default rule), same solver;
* ``exact mirror`` / ``entropic mirror e=0.5`` — exponentiated gradient on ν with the POT
  potential (``ot.emd`` with ``potentials_init``, log-domain ``ot.sinkhorn`` with
  ``warmstart``) as the gradient, with and without warm starts; capped at
  ``--mirror-iters`` inner iterations and ``--sinkhorn-iters`` Sinkhorn iterations per
  solve (their convergence is reported, not forced); only up to ``--mirror-max-cells``
  (dense ``M × M`` POT problems); the entropic mirror runs at ``ε = 0.5`` (compare
  ``entropic gcg e=0.5``): at ``ε = τ²`` each log-domain Sinkhorn solve takes ~10⁴
  iterations on these costs;
* ``POT``: ``ot.emd2`` on the dense cost (the per-step cross-check), ``ot.emd`` on the
  sparse candidate graph, and log-domain Sinkhorn at ``ε = τ²`` on the dense cost (time
  per iteration; at 720 cells also the marginal error left after 1000 iterations).

Memory: ``tracemalloc`` peak of the Python/NumPy allocations during the run (NumPy
reports its buffers to tracemalloc; POT's C++ network simplex does not), and the
process peak RSS.

Run: python bench/bench_jko.py [--cells 720 2420 9680] [--quick]
"""

from __future__ import annotations

import argparse
import resource
import time
import tracemalloc
import warnings

import numpy as np
from _common import machine, table, write_json

from wflow.attention.heads import Attention, Heads
from wflow.geometry.density import initial_density
from wflow.geometry.mesh import load_mesh
from wflow.jko import JKOOptions, JKOWarning, cost_matrix, solve_jko

VMF2 = {"type": "vmf", "means": [[1.0, 0.0, 0.2], [-0.3, 1.0, 0.0]], "kappas": [5.0, 4.0],
        "weights": [0.6, 0.4]}
TAU = 0.1


def run_config(x, areas, m0, heads, attn, **kw) -> dict:
    opts = JKOOptions(T=2 * TAU, tau=TAU, scheme="ot", verify=False, **kw)
    tracemalloc.start()
    t0 = time.perf_counter()
    with warnings.catch_warnings(record=True) as wl:
        warnings.simplefilter("always", JKOWarning)
        res = solve_jko(m0, heads, attn, points=x, areas=areas, options=opts)
    wall = time.perf_counter() - t0
    _, peak = tracemalloc.get_traced_memory()
    tracemalloc.stop()
    h = res.history
    st = h["step_time"][1:]
    its = h["inner_iters"][1:]
    return {"status": res.status, "wall": wall, "step1": float(st[0]), "step2": float(st[1]),
            "per_step": float(st.mean()), "iters": its.tolist(),
            "per_iter": float(st.sum() / max(its.sum(), 1)),
            "gap_rel_max": float(h["gap_rel"][1:].max()),
            "warnings": len(wl), "peak_mib": peak / 2**20}


def pot_timings(x, areas, m0, heads, attn, res_masses) -> dict:
    import ot
    import scipy.sparse as sp

    from wflow.energy import evaluate
    from wflow.jko import energy_gradient
    from wflow.jko.cost import _Geometry
    from wflow.jko.oracle import _Oracle

    out = {}
    mu, nu = res_masses[0], res_masses[1]
    bhat = evaluate(x, heads, attn, m=mu).bhat
    rows = np.flatnonzero(mu > 0)
    t0 = time.perf_counter()
    C = cost_matrix(x, bhat, rows=rows)
    out["cost_matrix_s"] = time.perf_counter() - t0
    out["cost_matrix_mib"] = C.nbytes / 2**20
    t0 = time.perf_counter()
    w = ot.emd2(mu[rows], nu, C, numItermax=10_000_000)
    out["emd2_dense_s"] = time.perf_counter() - t0
    # sparse: the candidate graph of the final GCG oracle call
    geo = _Geometry(x, areas, JKOOptions(T=TAU, tau=TAU, scheme="ot"))
    orc = _Oracle(geo, bhat, TAU, 0.0, "conformal")
    g = energy_gradient(x, nu, heads, attn)
    orc(mu, g)
    p = geo.pairs
    M = x.shape[0]
    rr = np.repeat(np.arange(M), np.diff(p.indptr))
    from wflow.jko import pair_mobility

    Cs = sp.csr_array((p.d2 / pair_mobility(bhat[rr], bhat[p.J]) + 1e-300, p.J, p.indptr),
                      shape=(M, M))[rows]
    t0 = time.perf_counter()
    _, log = ot.emd(mu[rows], nu, Cs, numItermax=10_000_000, log=True)
    out["emd_sparse_s"] = time.perf_counter() - t0
    out["emd_sparse_pairs"] = int(Cs.nnz)
    out["emd_sparse_vs_dense_rel"] = abs(float(log["cost"]) - w) / w
    # log-domain Sinkhorn at ε = τ²: time per iteration (a fixed number of iterations),
    # and, where affordable, the marginal error left after 1000 iterations (it needs
    # ~10⁴ to reach 1e-9 on these costs: 33 ms per iteration at 720 cells)
    eps = TAU**2
    t0 = time.perf_counter()
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        ot.sinkhorn(mu[rows], nu + 1e-300, C, eps, method="sinkhorn_log", numItermax=20,
                    stopThr=0.0)
    out["sinkhorn_log_per_iter_s"] = (time.perf_counter() - t0) / 20
    if M <= 800:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            _, lg = ot.sinkhorn(mu[rows], nu + 1e-300, C, eps, method="sinkhorn_log",
                                log=True, numItermax=1000, stopThr=1e-9)
        out["sinkhorn_log_err_after_1000"] = float(lg["err"][-1])
    return out


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--cells", type=int, nargs="+", default=[720, 2420, 9680])
    ap.add_argument("--mirror-max-cells", type=int, default=720)
    ap.add_argument("--mirror-iters", type=int, default=20)
    ap.add_argument("--sinkhorn-iters", type=int, default=20000,
                    help="log-domain Sinkhorn iterations per OT solve of the mirror runs")
    ap.add_argument("--pot-max-cells", type=int, default=9680)
    ap.add_argument("--quick", action="store_true", help="720 cells only")
    a = ap.parse_args()
    cells = [720] if a.quick else a.cells
    heads, attn = Heads.scalar([2.0], 3), Attention("softmax", 1.0)
    rows, pot = [], {}
    for n in cells:
        sm = load_mesh(f"sphere_{n}.msh")
        cen, areas = sm.gather_owned(sm.centroids), sm.gather_owned(sm.areas)
        x = cen / np.linalg.norm(cen, axis=1, keepdims=True)
        m0 = initial_density(sm, VMF2) * areas
        configs = [("exact gcg", "warm", {}), ("exact gcg", "cold", {"warm_start": False}),
                   ("entropic gcg", "warm", {"ot": "sinkhorn"}),
                   ("entropic gcg", "cold", {"ot": "sinkhorn", "warm_start": False})]
        if n <= a.mirror_max_cells:
            configs.append(("entropic gcg e=0.5", "warm", {"ot": "sinkhorn", "eps": 0.5}))
            for ot_ in ("emd", "sinkhorn"):
                for warm in (True, False):
                    # entropic mirror at ε = 0.5: at ε = τ² every log-domain Sinkhorn solve
                    # needs ~10⁴ iterations (see "POT" below), hours per step
                    kw = {"ot": ot_, "inner": "mirror", "warm_start": warm,
                          "max_inner": a.mirror_iters, "sinkhorn_max_iter": a.sinkhorn_iters}
                    if ot_ == "sinkhorn":
                        kw["eps"] = 0.5
                    configs.append((("exact mirror" if ot_ == "emd" else "entropic mirror "
                                     "e=0.5"), "warm" if warm else "cold", kw))
        # warm-up (imports, JIT caches) outside the timings
        first = solve_jko(m0, heads, attn, points=x, areas=areas,
                          options=JKOOptions(T=TAU, tau=TAU, scheme="ot", verify=False)).masses
        solve_jko(m0, heads, attn, points=x, areas=areas,
                  options=JKOOptions(T=TAU, tau=TAU, scheme="ot", verify=False, ot="sinkhorn",
                                     max_inner=1))
        for name, warm, kw in configs:
            r = run_config(x, areas, m0, heads, attn, **kw)
            r.update(cells=n, config=name, warm=warm)
            rows.append(r)
            print(f"{n:6d} {name:16s} {warm:4s}: {r['per_step']:.3f} s/step "
                  f"({r['step1']:.3f}, {r['step2']:.3f}), {r['per_iter']:.3f} s/iter, "
                  f"iters {r['iters']}, gap {r['gap_rel_max']:.1e}, {r['status']}, "
                  f"peak {r['peak_mib']:.0f} MiB", flush=True)
        if n <= a.pot_max_cells:
            pot[n] = pot_timings(x, areas, m0, heads, attn, first)
            print(f"{n:6d} POT: {pot[n]}", flush=True)
        # partial results survive an interrupted run
        write_json("bench_jko", {"machine": machine(), "tau": TAU, "rows": rows, "pot": pot,
                                 "complete": False})
    cols = [("cells", "cells", "{}"), ("config", "config", "{}"), ("warm", "warm", "{}"),
            ("per_step", "s/step", "{:.3f}"), ("step1", "step 1", "{:.3f}"),
            ("step2", "step 2", "{:.3f}"), ("per_iter", "s/iter", "{:.3f}"),
            ("iters", "inner iters", "{}"), ("gap_rel_max", "max gap", "{:.1e}"),
            ("status", "status", "{}"), ("peak_mib", "peak MiB", "{:.0f}")]
    print(table(rows, cols))
    rss = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
    path = write_json("bench_jko", {"machine": machine(), "tau": TAU, "rows": rows,
                                    "pot": pot, "peak_rss_mib": rss, "complete": True})
    print(f"peak RSS {rss:.0f} MiB; wrote {path}")


if __name__ == "__main__":
    main()
