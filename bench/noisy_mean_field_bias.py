"""The particles' own bias in the study ``noisy-mean-field``: time step and number of tokens.

The study compares the mean moments of ``n`` noisy particles (Strang, step ``h``) with
the noisy PDE's. Those means differ from the PDE's by the integrator's weak error and by
the propagation-of-chaos bias, ``a h² + b/n`` to leading order. This script measures both
along the study's own score direction ``g = ∂μ_T/∂D``: each configuration ``(n, T/h, R,
seed)`` runs ``R`` replicates exactly as the study does (its ``_replicate``, control
variates and ``_score_test``) and records the fitted relative error
``(D̂ − D)/D`` and its standard error; a weighted least-squares fit of
``(D̂ − D)/D = a (16h/T)² + b (1000/n)`` over the configurations gives ``a`` (the time-step
bias at ``h = T/16``) and ``b`` (the chaos bias at ``n = 1000``), with the fit's χ².

Usage (from the repository root; about 25 min of CPU for the default five rows)::

    PYTHONPATH=$PWD .venv/bin/python bench/noisy_mean_field_bias.py \\
        [--rows 1000,16,384,900 ...] [--out bench/results/noisy_mean_field_bias.json]

A row is ``n,steps,R,seed``. Not a timed benchmark; the PDE levels are cached in-process.
``--degree L --meshes COARSE FINE --out PART`` measures rows at another moment degree and
reference (one process per row, each to its own file); ``--merge PART ...`` puts them into
``--out``'s ``--section`` (default ``at_study_step``) with their fit at that one step
(:func:`fit_at_step`) and the study's centring checked against them (:func:`check`).
``--pde-only`` adds the PDE's own errors to an existing results file; ``--power SEED ...
[--faults F ...]`` runs the quick study under each fault at those (held-out) seeds and
writes ``bench/results/noisy_mean_field_power.json`` (caught or not, the score and the
fitted ``D`` with its standard error).
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path
from typing import Any

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

import wflow.studies.noisy_mean_field as nmf  # noqa: E402
from wflow.geometry.harmonics import cell_moments  # noqa: E402
from wflow.geometry.moment_test import control_variates  # noqa: E402
from wflow.infra.parallel import parallel_map  # noqa: E402

RESULTS = Path(__file__).resolve().parent / "results" / "noisy_mean_field_bias.json"
#: The configurations measured (n, particle steps over T, replicates, seed).
ROWS = ("1000,16,384,900", "1000,8,384,901", "250,16,1536,902", "1000,32,768,910",
        "250,32,3072,911")
#: Moment degree and control-variate degree of the measurement (the study's quick mode
#: at the time of the measurement: L = 3).
L, L_CV = 3, 8
MESHES = ("icosphere:5120", "icosphere:20480")


def _replicate(item: tuple) -> dict[str, Any]:
    """The study's replicate at ``steps`` particle steps (the last entry of ``item``).

    The study's step count is restored afterwards, so a later study run in this process
    (``--power``) takes the study's own ``dt``.
    """
    saved, nmf.PARTICLE_STEPS = nmf.PARTICLE_STEPS, item[-1]
    try:
        return nmf._replicate(item[:-1])
    finally:
        nmf.PARTICLE_STEPS = saved


def measure(row: str, degree: int = L, meshes: tuple[str, str] = MESHES) -> dict[str, Any]:
    """One configuration ``n,steps,R,seed``: the fitted relative error of ``D``.

    ``degree``: the moment degree of the score (the study's ``L``); ``meshes``: the PDE's
    (coarse, fine) icospheres, the fine one the reference.
    """
    n, steps, R, seed = (int(v) for v in row.split(","))
    D, T = nmf.DIFFUSION, nmf.T_FINAL
    coarse, fine = (nmf._pde_level(s, D, T, degree) for s in meshes)
    err = np.abs(fine["mT_mom"] - coarse["mT_mom"]) / (fine["cells"] / coarse["cells"] - 1)
    nu = cell_moments(fine["verts"], fine["m0"], L_CV)
    t0, c0 = time.perf_counter(), time.process_time()
    rows = parallel_map(_replicate, [(n, r, seed, T, degree, L_CV, fine["verts"], fine["m0"],
                                      D, False, steps) for r in range(R)])
    cv = control_variates([r["cv"] for r in rows], nu, n=n)
    s = nmf._score_test(cv.adjusted, fine["mT_mom"], err, meshes[0], D, T, degree)
    return {"n": n, "steps": steps, "R": R, "seed": seed, "degree": degree,
            "meshes": list(meshes), "z": s["z"],
            "dD_rel": (s["D_fit"] - D) / D, "se_rel": s["D_se"] / D,
            "wall_s": time.perf_counter() - t0, "cpu_s": time.process_time() - c0}


def pde_errors() -> dict[str, float]:
    """The PDE's own errors along the score direction, as relative errors in ``D``.

    ``mesh``: the Richardson estimate of the fine icosphere's error (``(fine − coarse)/3``);
    ``time``: the fine mesh at CFL 0.225 against the study's 0.9 (the step is the CFL
    bound's; ``dt`` is only its upper bound).
    """
    from wflow.geometry.density import initial_density
    from wflow.geometry.mesh import load_mesh
    from wflow.pde import PDEOptions, solve_pde
    from wflow.studies.mean_field import RHO0, _model

    D, T = nmf.DIFFUSION, nmf.T_FINAL
    coarse, fine = (nmf._pde_level(s, D, T, L) for s in MESHES)
    lo, hi = (nmf._pde_level(MESHES[0], D * (1 + s * nmf.DIFF_STEP), T, L)["mT_mom"]
              for s in (-1, 1))
    g = ((hi - lo) / (2 * nmf.DIFF_STEP * D))[1:]
    heads, attn = _model()
    mesh = load_mesh(MESHES[1])
    pde = solve_pde(initial_density(mesh, RHO0), heads, attn, mesh=mesh,
                    options=PDEOptions(T=T, dt=nmf.PDE_DT, cfl=0.225, order=2, n_saves=2,
                                       diffusion=D, balance=False, clusters=False,
                                       progress=False))
    small = cell_moments(fine["verts"], pde.masses[-1], L)

    def rel(v: np.ndarray) -> float:
        return float(g @ v[1:]) / float(g @ g) / D

    return {"mesh": rel((fine["mT_mom"] - coarse["mT_mom"]) / 3.0),
            "time": rel(small - fine["mT_mom"])}


_MEMO: dict[tuple, dict[str, Any]] = {}


def _memo_replicate(item: tuple) -> dict[str, Any]:
    """The study's replicate, remembered: the particles of a seed are the same under every
    PDE fault (the PDE's ``D`` enters no replicate; the initial masses are the fine mesh's
    at ``t = 0``, keyed by their bytes)."""
    n, r, seed, T, L_, L_cv, verts, m0, D, no_ito = item
    key = (n, r, seed, T, L_, L_cv, D, no_ito, nmf.PARTICLE_STEPS, hash(m0.tobytes()),
           hash(verts.tobytes()))
    if key not in _MEMO:
        _MEMO[key] = _STUDY_REPLICATE(item)
    return _MEMO[key]


_STUDY_REPLICATE = nmf._replicate


def power(seeds: list[int], faults: list[str], out: Path) -> dict[str, Any]:
    """The quick study under each fault at held-out ``seeds``: caught or not, with its score.

    ``fault`` ``none``: the study without a fault (a null run at a held-out seed). Runs of
    another configuration (replicates ``R``, the score's centring) in ``out`` move to
    ``before`` first. The seeds' particles are computed once for every PDE fault
    (:func:`_memo_replicate`). Written to ``out`` after every run (a partial run keeps
    what it measured).
    """
    import tempfile

    from wflow.studies.registry import load_study

    study = load_study("noisy-mean-field")
    R = int(nmf.MODES["quick"]["R"])
    centre = nmf.particle_bias(int(nmf.MODES["quick"]["n"]), nmf.PARTICLE_STEPS)
    config = {"R": R, "n": int(nmf.MODES["quick"]["n"]), "steps": nmf.PARTICLE_STEPS,
              "bias_centre": list(centre)}
    data: dict[str, Any] = json.loads(out.read_text()) if out.is_file() else {}
    if data.get("config") != config and data.get("runs"):
        data.setdefault("before", []).append({k: data.pop(k) for k in ("config", "runs",
                                                                        "caught", "note")
                                              if k in data})
    data["config"] = config
    runs = data.setdefault("runs", {})
    nmf._replicate = _memo_replicate
    try:
        with tempfile.TemporaryDirectory(prefix="nmf_power_") as d:
            for seed in seeds:
                for fault in faults:
                    key = f"{fault}@{seed}"
                    if key in runs:
                        continue
                    t0, c0 = time.perf_counter(), time.process_time()
                    res = study.run(out=Path(d) / key.replace(":", "_"), quick=True,
                                    seed=seed, fault=None if fault == "none" else fault)
                    fits = json.loads((Path(d) / key.replace(":", "_") / "summary.json")
                                      .read_text())["fits"]
                    runs[key] = {"fault": fault, "seed": seed, "caught": res.passed is False,
                                 "verdict": res.verdict.split(". ")[0],
                                 "score_t": fits["score_t"],
                                 "score_t_raw": fits["score_t_raw"], "D_fit": fits["D_fit"],
                                 "D_fit_se": fits["D_fit_se"],
                                 "wall_s": time.perf_counter() - t0,
                                 "cpu_s": time.process_time() - c0}
                    print(json.dumps(runs[key]), flush=True)
                    out.write_text(json.dumps(data, indent=1) + "\n")
    finally:
        nmf._replicate = _STUDY_REPLICATE
    every = sorted({r["fault"] for r in runs.values()})
    data["caught"] = {f: f"{sum(r['caught'] for r in runs.values() if r['fault'] == f)}/"
                         f"{sum(1 for r in runs.values() if r['fault'] == f)}" for f in every}
    out.write_text(json.dumps(data, indent=1) + "\n")
    return data


def fit(rows: list[dict[str, Any]]) -> dict[str, Any]:
    """Weighted least squares of ``dD_rel = a (16/steps)² + b (1000/n)``."""
    A = np.array([[(16.0 / r["steps"]) ** 2, 1000.0 / r["n"]] for r in rows])
    y = np.array([r["dD_rel"] for r in rows])
    s = np.array([r["se_rel"] for r in rows])
    W = A / s[:, None]
    coef = np.linalg.lstsq(W, y / s, rcond=None)[0]
    se = np.sqrt(np.diag(np.linalg.inv(W.T @ W)))
    resid = (A @ coef - y) / s
    return {"a_at_h_T_over_16": float(coef[0]), "a_se": float(se[0]),
            "b_at_n_1000": float(coef[1]), "b_se": float(se[1]),
            "chi2": float(resid @ resid), "dof": len(rows) - 2,
            "model": "dD_rel = a (16 h / T)^2 + b (1000 / n)"}


def fit_at_step(rows: list[dict[str, Any]]) -> dict[str, Any]:
    """Weighted least squares of ``dD_rel = c + b (1000/n)`` at one particle step.

    The study runs at one step, ``T/PARTICLE_STEPS``; there the time-step bias is a
    constant ``c`` and only the propagation-of-chaos term ``b/n`` varies with the mode.
    """
    steps = {r["steps"] for r in rows}
    if len(steps) != 1:
        raise ValueError(f"rows at one particle step expected, got {sorted(steps)}")
    A = np.array([[1.0, 1000.0 / r["n"]] for r in rows])
    y = np.array([r["dD_rel"] for r in rows])
    s = np.array([r["se_rel"] for r in rows])
    W = A / s[:, None]
    coef = np.linalg.lstsq(W, y / s, rcond=None)[0]
    cov = np.linalg.inv(W.T @ W)
    resid = (A @ coef - y) / s
    return {"c": float(coef[0]), "c_se": float(np.sqrt(cov[0, 0])),
            "b_at_n_1000": float(coef[1]), "b_se": float(np.sqrt(cov[1, 1])),
            "cov_cb": float(cov[0, 1]), "chi2": float(resid @ resid),
            "dof": len(rows) - 2, "steps": steps.pop(),
            "model": "dD_rel = c + b (1000 / n) at h = T / steps"}


def check(rows: list[dict[str, Any]]) -> dict[str, Any]:
    """The study's centring (:func:`wflow.studies.noisy_mean_field.particle_bias`) against
    rows it was not fitted to: per row ``z = (measured − predicted)/(se² + se_pred²)^{1/2}``
    and their ``χ²`` (``len(rows)`` degrees of freedom under the model)."""
    out = []
    for r in rows:
        pred, pred_se = nmf.particle_bias(r["n"], r["steps"])
        z = (r["dD_rel"] - pred) / float(np.hypot(r["se_rel"], pred_se))
        out.append({"n": r["n"], "steps": r["steps"], "measured": r["dD_rel"],
                    "predicted": pred, "z": z})
    chi2 = float(sum(c["z"] ** 2 for c in out))
    from scipy.stats import chi2 as chi2_dist

    return {"rows": out, "chi2": chi2, "dof": len(out),
            "p_value": float(chi2_dist.sf(chi2, len(out)))}


def merge(parts: list[Path], out: Path, section: str, note: str) -> dict[str, Any]:
    """Rows written by separate processes (``--rows ... --out PART``) merged into ``out``'s
    ``section``, with their fit at one step (:func:`fit_at_step`)."""
    rows = [r for p in parts for r in json.loads(p.read_text())["rows"]]
    data = json.loads(out.read_text()) if out.is_file() else {}
    data[section] = {"rows": rows, "fit": fit_at_step(rows), "check": check(rows),
                     "note": note}
    out.write_text(json.dumps(data, indent=1) + "\n")
    return data[section]


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--rows", nargs="+", default=list(ROWS), help="n,steps,R,seed")
    p.add_argument("--out", type=Path, default=RESULTS)
    p.add_argument("--power", type=int, nargs="+", default=None, metavar="SEED",
                   help="run the quick study under --faults at these (held-out) seeds")
    p.add_argument("--faults", nargs="+", default=["pde-diffusion:0.02",
                                                   "pde-diffusion:-0.02"])
    p.add_argument("--power-out", type=Path, default=RESULTS.with_name(
        "noisy_mean_field_power.json"))
    p.add_argument("--degree", type=int, default=L, help="the score's moment degree")
    p.add_argument("--meshes", nargs=2, default=list(MESHES), metavar=("COARSE", "FINE"))
    p.add_argument("--merge", type=Path, nargs="+", default=None, metavar="PART",
                   help="merge the rows of these files into --out's --section")
    p.add_argument("--section", default="at_study_step")
    p.add_argument("--note", default="")
    p.add_argument("--pde-only", action="store_true",
                   help="only the PDE's errors, merged into an existing --out")
    args = p.parse_args(argv)
    if args.power:
        print(json.dumps(power(args.power, args.faults, args.power_out)["caught"]))
        return 0
    if args.pde_only:
        out = json.loads(args.out.read_text())
        out["pde"] = pde_errors()
        args.out.write_text(json.dumps(out, indent=1) + "\n")
        print(json.dumps(out["pde"]))
        return 0
    if args.merge:
        print(json.dumps(merge(args.merge, args.out, args.section, args.note)["fit"]))
        return 0
    measured = []
    for row in args.rows:
        measured.append(measure(row, args.degree, tuple(args.meshes)))
        print(json.dumps(measured[-1]), flush=True)
    out = {"study": "noisy-mean-field", "diffusion": nmf.DIFFUSION, "degree": args.degree,
           "rows": measured, "fit": fit(measured) if len(measured) >= 3 else None,
           "pde": pde_errors() if args.degree == L else None}
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps(out, indent=1) + "\n")
    print(json.dumps(out["fit"]))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
