"""A free error estimate of a fixed-step JKO run, from its own trajectory (a measurement).

Not used by wflow yet: it measures whether a fixed-step run with no ``rtol`` could be
judged against the default tolerance (``rtol = 1e-3``, ``atol = 1e-6``) without running
again. For a first-order scheme the local error of step ``k`` is about ``½τ²ρ''``, and the
second difference of the stored densities ``ρ_{k+1} − 2ρ_k + ρ_{k−1} ≈ τ²ρ''``; the estimate
is ``Σ_k ½‖ρ_{k+1} − 2ρ_k + ρ_{k−1}‖`` (the scaled RMS norm of
:func:`wflow.infra.accuracy.error_norm`, in tolerances) times ``(K + 1)/(K − 1)`` for the
two ends. It is compared with the error of ``ρ(T)`` against the Richardson reference of
``tests/test_jko_accuracy.py`` (one USA head, β = 2, 320 cells, ``T = 0.4``).

Usage: ``PYTHONPATH=$PWD .venv/bin/python bench/jko_trajectory_estimate.py``. Writes
``results/jko_trajectory_estimate.json`` (CPU and wall time per row).
"""

from __future__ import annotations

import sys
import time
import warnings

from _common import ROOT, parent_machine, write_json


def main() -> int:
    sys.path.insert(0, str(ROOT))
    sys.path.insert(0, str(ROOT / "tests"))
    import test_jko_accuracy as problem

    from wflow.infra.accuracy import Tolerance, error_norm

    tol = Tolerance(rtol=1e-3, atol=1e-6)
    ref = problem.reference()
    rows = []
    for tau in (0.1, 0.05, 0.025, 0.0125):
        c0, t0 = time.process_time(), time.perf_counter()
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            rho = problem.run(tau=tau).rho
        d2 = rho[2:] - 2.0 * rho[1:-1] + rho[:-2]
        est = sum(0.5 * error_norm(d, rho[k + 1], rho[k + 1], tol) for k, d in enumerate(d2))
        est *= len(rho) / max(len(rho) - 2, 1)
        true = error_norm(rho[-1] - ref, ref, rho[-1], tol)
        rows.append({"tau": tau, "steps": len(rho) - 1, "error_over_tol": true,
                     "estimate_over_tol": est, "ratio": est / true,
                     "cpu_s": time.process_time() - c0, "wall_s": time.perf_counter() - t0})
        print(rows[-1], flush=True)
    write_json("jko_trajectory_estimate", {
        "what": "second-difference estimate of a fixed-step JKO run against its true error "
                "(rtol 1e-3, atol 1e-6; tests/test_jko_accuracy.py's problem)",
        "machine": parent_machine(), "rows": rows})
    return 0


if __name__ == "__main__":
    sys.exit(main())
