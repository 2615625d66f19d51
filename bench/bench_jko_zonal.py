"""The FV JKO scheme against the exact zonal JKO step: the table of ``docs/jko.md``.

The problem and the helpers are those of ``tests/test_jko_fv.py`` (USA, ``A = V = I``,
``β = 2``, ``ρ₀ ∝ 1 + ½P₂(cos θ)``, ``T = 0.4``): per shipped mesh and ``τ`` the L¹ of the
cell masses and the 1-D ``W₂`` of the polar marginals against the exact step at ``T``, the
fitted orders in ``h``; the well-centredness margins of the shipped icospheres. Writes
``bench/results/bench_jko_zonal.json`` (CPU time and the 1-min load recorded).

    python bench/bench_jko_zonal.py
"""

from __future__ import annotations

import json
import os
import sys
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE.parent / "tests"))

import test_jko_fv as t  # noqa: E402  (the test's problem, reference and error measures)

LEVELS = (2420, 5120, 9680, 20480, 40500)
T_END = 0.4


def main() -> int:
    """Measure every row and write the results file."""
    from wflow.geometry.mesh import read_surface, shipped_meshes
    from wflow.geometry.mesh.dual import dual_geometry

    load0, cpu0 = os.getloadavg()[0], time.process_time()
    rows = []
    for tau in (0.1, 0.05):
        steps = int(round(T_END / tau))
        for cells in LEVELS:
            res = t.run_fv(cells, tau, T_END)
            l1, w2 = t.errors_at_T(cells, res, tau, steps)
            rows.append({"cells": cells, "tau": tau, "h": float(t.geometry(cells)[1].h),
                         "l1": l1, "w2": w2, "status": str(res.status)})
            print(rows[-1], flush=True)
    orders = {}
    for tau in (0.1, 0.05):
        r = [x for x in rows if x["tau"] == tau]
        h = [x["h"] for x in r]
        orders[str(tau)] = {"l1": t.fitted_order(h, [x["l1"] for x in r]),
                            "w2": t.fitted_order(h, [x["w2"] for x in r])}
    margins = {}
    for path in shipped_meshes():
        tri = read_surface(path)
        margins[path.name] = float(dual_geometry(tri.points, tri.cells).margin.min())
    out = {"bench": "jko_zonal", "problem": "tests/test_jko_fv.py: USA, A = V = I, beta = 2, "
           "rho0 ~ 1 + P2/2, T = 0.4, FV pointwise Hamiltonian, n_s = 1",
           "rows": rows, "orders": orders, "well_centred_margin_min": margins,
           "cpu_s": time.process_time() - cpu0, "load1_before": load0,
           "load1_after": os.getloadavg()[0]}
    (HERE / "results" / "bench_jko_zonal.json").write_text(json.dumps(out, indent=1) + "\n")
    print(json.dumps(orders), out["cpu_s"])
    return 0


if __name__ == "__main__":
    sys.exit(main())
