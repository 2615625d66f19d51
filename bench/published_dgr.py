"""[DGR] faithfulness: run the published scripts and compare wflow with them in full.

Usage::

    python bench/published_dgr.py PATH/TO/2026-lost-in-the-middle [--out bench/results]

``PATH`` is a checkout of ``borjanG/2026-lost-in-the-middle`` (commit c7e12ba). The two
scripts are imported unchanged from there (their plotting is not run). Written to
``published_dgr.json``: the largest differences of the ALiBi run (every step, 64 tokens,
4000 RK4 steps), of ``t_crit`` over the published β grid and of the profiles over the
full 800-point grid, each beside float64's ε. ``tests/test_published_dgr.py`` checks the
same against the stored subsample of these outputs.
"""

from __future__ import annotations

import argparse
import importlib.util
import json
import resource
import sys
import time
from pathlib import Path

import numpy as np

from wflow.published.lost_in_the_middle import (
    ALIBI_PUBLISHED,
    NUMEROLOGY_PUBLISHED,
    alibi_circle_dynamics,
    alibi_initial_configuration,
    t_crit,
    u_profile,
)


def _load(path: Path, name: str):
    spec = importlib.util.spec_from_file_location(name, path)
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("repo", type=Path)
    ap.add_argument("--out", type=Path, default=Path(__file__).parent / "results")
    a = ap.parse_args()
    alibi = _load(a.repo / "generate_alibi_particle_circle_dynamics.py", "dgr_alibi")
    numer = _load(a.repo / "generate_u_shape_numerology_data.py", "dgr_numer")
    p = ALIBI_PUBLISHED
    c0 = time.process_time()
    times, hist, _, labels = alibi.simulate(n_tokens=p["n"], beta=p["beta"], lam=p["lam"],
                                            t_max=p["T"], dt=p["dt"], seed=p["seed"],
                                            initial_mode=p["mode"])
    c_pub = time.process_time() - c0
    th0, lab = alibi_initial_configuration(p["n"], p["seed"], p["mode"])
    c0 = time.process_time()
    t, th = alibi_circle_dynamics(th0, beta=p["beta"], lam=p["lam"], T=p["T"], dt=p["dt"])
    c_ours = time.process_time() - c0
    num = NUMEROLOGY_PUBLISHED
    lam, M, n_max = num["lam"], num["M"], num["n_max"]
    betas = NUMEROLOGY_PUBLISHED["betas"]
    tc_pub = np.array([numer.t_crit(b, lam, M, n_max) for b in betas])
    tc_ours = np.array([t_crit(b, lam=lam, M=M, n_max=n_max) for b in betas])
    grid = np.array([0.02 + j * (0.96 / 799.0) for j in range(800)])
    prof = {}
    for t_ in (0.25, 0.5, 1.0, 1.5, 2.0, 5.0):
        pub = np.array([numer.profile_value(s, 1.0, t_, lam, M, n_max) for s in grid])
        ours = u_profile(grid, beta=1.0, t=t_, lam=lam, M=M, n_max=n_max)
        prof[str(t_)] = float(np.max(np.abs(ours - pub) / np.max(np.abs(pub))))
    res = {
        "code": "borjanG/2026-lost-in-the-middle@c7e12ba",
        "eps": float(np.finfo(np.float64).eps),
        "alibi_initial_equal": bool(np.array_equal(th0, hist[0]) and np.array_equal(lab, labels)),
        "alibi_times_equal": bool(np.array_equal(t, times)),
        "alibi_max_abs_diff_all_steps": float(np.max(np.abs(th - hist))),
        "alibi_cpu_s": {"published": c_pub, "wflow": c_ours},
        "t_crit_max_rel_diff": float(np.max(np.abs(tc_ours / tc_pub - 1))),
        "profile_max_rel_diff": prof,
        "load": list(__import__("os").getloadavg()),
        "maxrss_mib": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024,
    }
    a.out.mkdir(parents=True, exist_ok=True)
    (a.out / "published_dgr.json").write_text(json.dumps(res, indent=1) + "\n")
    json.dump(res, sys.stdout, indent=1)


if __name__ == "__main__":
    main()
