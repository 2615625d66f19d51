"""How many tokens × replicates the ``causal-mean-field`` study needs to see its ALiBi slope.

The study's negative control ``bias-slope:S`` scales the kinetic limit's slope ``λ`` by
``1 + S``. Its criteria (max ``|t|`` and Hotelling's ``T²`` over the binned moments)
catch ``S = 0.2`` in the quick mode and not ``S = 0.02`` in the full mode. This script
measures the best a moment test can do: the one-dimensional score of the binned moment
differences along ``g = ∂μ_T/∂λ`` (a central difference of the kinetic solution at
``λ(1 ± 0.05)`` on the coarse mesh; :func:`wflow.studies.noisy_mean_field.score`, the
noisy study's statistic), i.e. the fitted ``λ̂ = λ + g·δ/|g|²`` and its standard error
``σ_λ`` (Monte Carlo and the reference's error). A slope off by ``S`` moves that score by
``S λ/σ_λ`` standard errors; it is caught with probability about ``Φ(S λ/σ_λ − t_c)``,
so 90 % power needs ``S λ/σ_λ ≥ t_c + 1.28`` and 99 % ``t_c + 2.33``. ``σ_λ² ∝ 1/(nR)``
(the Monte Carlo part), which gives the tokens × replicates and the CPU time each power
needs, from the measured CPU per replicate.

Usage (from the repository root; about 1 min of CPU per quick seed)::

    PYTHONPATH=$PWD .venv/bin/python bench/causal_slope_budget.py --seeds 5000 5001 5002

Writes ``bench/results/causal_slope_budget.json``. Not a timed benchmark.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import time
from pathlib import Path
from typing import Any

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from wflow.geometry.harmonics import cell_moments  # noqa: E402
from wflow.geometry.moment_test import control_variates  # noqa: E402
from wflow.kinetic.binned import bin_means  # noqa: E402
from wflow.studies import causal_mean_field as cmf  # noqa: E402
from wflow.studies.mean_field import ALPHA  # noqa: E402
from wflow.studies.noisy_mean_field import score  # noqa: E402

RESULTS = Path(__file__).resolve().parent / "results" / "causal_slope_budget.json"
#: Relative step of the central difference ``∂μ_T/∂λ``.
STEP = 0.05
#: The slope error the study should catch.
TARGET = 0.02


def reference(mode: str) -> tuple[np.ndarray, np.ndarray, np.ndarray, dict[str, Any]]:
    """The kinetic reference of ``mode``: bin moments, their error estimate, ``g = ∂μ/∂λ``."""
    m = cmf.MODES[mode]
    B, S, L = (int(m[k]) for k in ("B", "S", "L"))
    heads, _ = cmf._model()
    lam, quad = cmf.LAMBDA, "midpoint"
    coarse, fine = (cmf._kinetic_level(s, S, heads, lam, quad, L) for s in m["meshes"])
    half = cmf._kinetic_level(m["meshes"][0], 2 * S, heads, lam, quad, L)
    e_h = np.abs(bin_means(fine["mom"], B) - bin_means(coarse["mom"], B)) / (
        fine["cells"] / coarse["cells"] - 1.0)
    e_S = (4.0 / 3.0) * np.abs(bin_means(coarse["mom"], B) - bin_means(half["mom"], B))
    lo, hi = (bin_means(cmf._kinetic_level(m["meshes"][0], S, heads, lam * (1 + s * STEP),
                                           quad, L)["mom"], B) for s in (-1, 1))
    g = (hi - lo) / (2.0 * STEP * lam)
    return bin_means(fine["mom"], B), np.hypot(e_h, e_S), g, fine


def reference_se(mode: str) -> float:
    """The reference's error along ``g`` as a relative error in ``λ``: ``|g|·e/|g|²/λ``
    (the part of the slope's standard error that no number of particles reduces)."""
    _, err, g, _ = reference(mode)
    return float(np.abs(g[1:]) @ err[1:]) / float(g[1:] @ g[1:]) / cmf.LAMBDA


def measure(mode: str, seed: int) -> dict[str, Any]:
    """The slope score of one run of the study's ``mode`` at ``seed`` (no fault)."""
    m = cmf.MODES[mode]
    n, R, B, S, L, L_cv = (int(m[k]) for k in ("n", "R", "B", "S", "L", "L_cv"))
    lam = cmf.LAMBDA
    ref, err, g, fine = reference(mode)
    c0 = time.process_time()
    rows = [cmf._replicate((n, r, seed, B, L, L_cv, fine["verts"], fine["mA"], fine["mB"],
                            lam / n, False)) for r in range(R)]
    cpu = time.process_time() - c0
    nu = bin_means(np.array([cell_moments(fine["verts"], x, L_cv) for x in fine["m0"]]), B)
    cv = control_variates([r["cv"] for r in rows], nu[1:], n=n)
    s = score(g[1:], cv.adjusted, ref, err, lam)
    return {"mode": mode, "seed": seed, "n": n, "R": R, "z": s["z"],
            "lambda_fit": s["D_fit"], "lambda_se_rel": s["D_se"] / lam,
            "shift_at_target_in_se": TARGET * lam / s["D_se"], "t_crit": s["t_crit"],
            "cpu_per_replicate_s": cpu / R}


def needs(rows: list[dict[str, Any]], ref_se: dict[str, float]) -> dict[str, Any]:
    """Tokens × replicates (at the mode's ``n``) and CPU for 90 % and 99 % power at ±2 %.

    The slope's standard error is ``σ² = σ_MC² + σ_ref²``: the reference's error
    ``σ_ref`` (``ref_se``, :func:`reference_se`) stays, only ``σ_MC² ∝ 1/(nR)`` falls. Power
    ``p`` needs ``σ ≤ S/(t_c + z_p)``; where ``σ_ref`` alone exceeds that, no number of
    particles reaches it (``reference_limited``). The spread of ``λ̂`` over the seeds is
    recorded beside ``σ_MC`` as its check.
    """
    from scipy.stats import norm

    out = {}
    for mode in sorted({r["mode"] for r in rows}):
        mine = [r for r in rows if r["mode"] == mode]
        se = float(np.sqrt(np.mean([r["lambda_se_rel"] ** 2 for r in mine])))
        ref = ref_se[mode]
        mc = float(np.sqrt(max(se ** 2 - ref ** 2, 0.0)))
        n, R, tc = mine[0]["n"], mine[0]["R"], mine[0]["t_crit"]
        cpu = float(np.median([r["cpu_per_replicate_s"] for r in mine]))
        lam = np.array([r["lambda_fit"] for r in mine]) / cmf.LAMBDA - 1.0
        entry = {"n": n, "R": R, "lambda_se_rel": se, "reference_se_rel": ref, "mc_se_rel": mc,
                 "seed_spread_rel": float(np.std(lam, ddof=1)) if len(mine) > 1 else None,
                 "lambda_bias_rel": float(np.mean(lam)),
                 "shift_at_target_in_se": TARGET / se,
                 "power_now": float(norm.cdf(TARGET / se - tc)), "seeds": len(mine)}
        for p in (0.9, 0.99):
            room = (TARGET / (tc + norm.ppf(p))) ** 2 - ref ** 2
            key = f"for_{round(100 * p)}pc"
            if room <= 0:
                entry[key] = {"reference_limited": True,
                              "reference_se_needed_rel": TARGET / (tc + norm.ppf(p))}
                continue
            factor = mc ** 2 / room
            entry[key] = {"reference_limited": False, "nR_factor": factor,
                          "replicates_at_n": int(np.ceil(factor * R)),
                          "particles_cpu_s": factor * R * cpu}
        out[mode] = entry
    return out


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--seeds", type=int, nargs="+", default=[5000, 5001, 5002])
    p.add_argument("--modes", nargs="+", default=["quick"], choices=("quick", "full"))
    p.add_argument("--out", type=Path, default=RESULTS)
    args = p.parse_args(argv)
    data = json.loads(args.out.read_text()) if args.out.is_file() else {"rows": []}
    done = {(r["mode"], r["seed"]) for r in data["rows"]}
    refs = data.setdefault("reference_se_rel", {})
    for mode in args.modes:
        if mode not in refs:
            refs[mode] = reference_se(mode)
    for mode in args.modes:
        for seed in args.seeds:
            if (mode, seed) in done:
                continue
            data["rows"].append(measure(mode, seed))
            print(json.dumps(data["rows"][-1]), flush=True)
            data["needs"] = needs(data["rows"], refs)
            data.update(target=TARGET, alpha=ALPHA, load=os.getloadavg(),
                        machine=f"{os.cpu_count()} shared cores, one thread")
            args.out.write_text(json.dumps(data, indent=1) + "\n")
    data["needs"] = needs(data["rows"], refs)
    args.out.write_text(json.dumps(data, indent=1) + "\n")
    print(json.dumps(data["needs"], indent=1))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
