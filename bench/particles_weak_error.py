"""The weak-error estimate of noisy particles against the true weak error, and its cost.

``python bench/particles_weak_error.py [--n N] [--quick]`` writes
``bench/results/particles_weak_error.json``. ``n = 10⁴`` tokens on S² drawn from a vMF
law around ``e_1`` (``κ = 5``), ``D = 0.5``, ``T = 1``; every run is judged with
``rtol = 0.05``, ``atol = 0.01`` (:mod:`wflow.particles.weak_error`: the moments ``m_1``,
``m_2`` at ``T``, an independent run at ``dt/2``, Richardson at the declared weak order).

* **pure diffusion** (one head with ``V = 0``): the true weak error is closed form. By
  rotation invariance a step acts on degree-``l`` harmonics by a factor ``ρ_l``, so
  ``E m_1 = ρ_1^S m_1(0)`` and ``E m_2 = I/d + ρ_2^S (m_2(0) − I/d)``; exact (and Strang,
  whose half steps are exact heat-kernel increments): ``ρ_l^S = e^{−D l(l+d−2)T}``;
  Euler–Maruyama: ``ρ_1 = E[(1 + 2Dhq)^{−1/2}]``, ``ρ_2 = (d E[(1 + 2Dhq)^{−1}] − 1)/(d−1)``,
  ``q ~ χ²_{d−1}`` (quadrature).
* **drift** (two random symmetric softmax heads, ``β = 1``, scale 0.8): the reference is
  Strang at ``dt = 1/32`` from the run's own tokens each repeated 4 times (the same
  initial empirical law, ``4n`` tokens; weak order 2: its bias is ``(1/32)²`` times the
  constant of the coarse runs); the "true" error of a run is its own moments less the
  reference's, with the standard errors of both (one noise sample each).

Per case: the RMS over the 9 moments of the estimate ``e``, of the true error and of the
estimate's standard error; the scaled numbers of the verdict (``error``, ``floor``) and
the status; wall time of the bare run (the same options without ``rtol``) and of the
judged run, and their ratio (expected ≈ 3: ``dt`` and ``dt/2``, less where the bare run's
Itô balance costs more than the rerun's end-only record). Warm-up runs first (compiled
kernels); one thread.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import time
from pathlib import Path

import numpy as np

HERE = Path(__file__).resolve().parent
RESULTS = HERE / "results"

D, T, d, KAPPA = 0.5, 1.0, 3, 5.0
RTOL, ATOL = 0.05, 0.01
DTS = {"em": (0.25, 0.125, 0.0625), "strang": (0.5, 0.25, 0.125)}


def _system(n: int, drift: bool, seed: int = 0):
    from wflow.attention.heads import Attention, Heads
    from wflow.geometry.sphere import sample_vmf

    rng = np.random.default_rng(seed)
    x0 = sample_vmf(n, np.eye(d)[0], KAPPA, rng)
    if drift:
        heads = Heads.random_symmetric(2, d, np.random.default_rng(11), scale=0.8)
        return x0, heads, Attention("softmax", 1.0)
    heads = Heads(np.eye(d)[None], np.eye(d)[None], np.zeros((1, d, d)), np.ones(1))
    return x0, heads, Attention("usa", 1.0)


def _opts(integ: str, dt: float, seed: int = 0, **kw):
    from wflow.particles import ParticleOptions

    return ParticleOptions(T=T, dt=dt, integrator=integ, diffusion=D, seed=seed,
                           head_rates=False, clusters=False, **kw)


def _rho(h: float, l: int) -> float:
    from scipy import integrate, stats

    def f(q):
        c2 = 1.0 / (1.0 + 2.0 * D * h * q)
        r = np.sqrt(c2) if l == 1 else (d * c2 - 1.0) / (d - 1.0)
        return stats.chi2.pdf(q, d - 1) * r

    return integrate.quad(f, 0, np.inf, epsabs=1e-13)[0]


def _closed_form(x0: np.ndarray, l1: float, l2: float) -> np.ndarray:
    iu = np.triu_indices(d)
    m2 = np.eye(d) / d + l2 * (x0.T @ x0 / len(x0) - np.eye(d) / d)
    return np.concatenate([l1 * x0.mean(0), m2[iu]])


def _rms(v) -> float:
    return float(np.sqrt(np.mean(np.square(v))))


def _case(x0, heads, attn, integ: str, dt: float, true_of) -> dict:
    from wflow.particles import simulate
    from wflow.particles.weak_error import token_moments

    t0 = time.perf_counter()
    bare = simulate(x0, heads, attn, options=_opts(integ, dt))
    t_bare = time.perf_counter() - t0
    t0 = time.perf_counter()
    res = simulate(x0, heads, attn, options=_opts(integ, dt, rtol=RTOL, atol=ATOL))
    t_judged = time.perf_counter() - t0
    chk = res.checks["accuracy"]
    true, true_se = true_of(token_moments(res.x), integ, dt)
    est, se = np.asarray(chk["moment_error"]), np.asarray(chk["moment_se"])
    row = {"integrator": integ, "dt": dt, "order": chk["order"], "status": str(res.status),
           "estimate_rms": _rms(est), "true_rms": _rms(true), "se_rms": _rms(se),
           "true_se_rms": _rms(true_se),
           "max_abs_z_estimate_vs_true": float(np.max(np.abs(est - true)
                                                      / np.hypot(se, true_se))),
           "error": chk["error"], "floor": chk["floor"], "error_upper": chk["error_upper"],
           "error_lower": chk["error_lower"], "dt_remedy": chk["dt_remedy"],
           "n_needed": chk["n_needed"], "estimate": est.tolist(), "true": true.tolist(),
           "wall_bare_s": t_bare, "wall_judged_s": t_judged,
           "cost_ratio": t_judged / t_bare, "same_tokens": bool(np.array_equal(bare.x, res.x))}
    print(f"  {integ:6s} dt={dt:<7g} est {row['estimate_rms']:.4f}  true "
          f"{row['true_rms']:.4f} (±{row['true_se_rms']:.4f})  se {row['se_rms']:.4f}  "
          f"E={chk['error']:.3g} F={chk['floor']:.3g} {row['status']:12s} "
          f"cost x{row['cost_ratio']:.2f}", flush=True)
    return row


def run(n: int, quick: bool) -> dict:
    from wflow.particles import simulate
    from wflow.particles.weak_error import token_moments

    dts = {k: v[:2] if quick else v for k, v in DTS.items()}
    out = {"n": n, "D": D, "T": T, "d": d, "kappa": KAPPA, "rtol": RTOL, "atol": ATOL,
           "threads": os.environ.get("OMP_NUM_THREADS", ""), "cases": {}}
    for drift in (False, True):
        x0, heads, attn = _system(n, drift)
        for integ in DTS:  # warm-up: compile / load every kernel
            simulate(x0[:200], heads, attn, options=_opts(integ, 0.5, rtol=RTOL, atol=ATOL))
        if drift:
            n_ref, dt_ref = 4 * n, 1.0 / 32
            t0 = time.perf_counter()
            # the run's own initial tokens, each four times: the same initial empirical law
            ref = simulate(np.tile(x0, (4, 1)), heads, attn,
                           options=_opts("strang", dt_ref, seed=99))
            mr = token_moments(ref.x)
            ref_mean, ref_se = mr.mean, np.sqrt(mr.var / mr.count)
            out["reference"] = {"integrator": "strang", "dt": dt_ref, "n": n_ref,
                                "tokens": "x0 repeated 4 times", "wall_s":
                                time.perf_counter() - t0}

            def true_of(mo, integ, dt, ref_mean=ref_mean, ref_se=ref_se):
                return mo.mean - ref_mean, np.hypot(np.sqrt(mo.var / mo.count), ref_se)
        else:
            def true_of(mo, integ, dt, x0=x0):
                S = round(T / dt)
                l1, l2 = ((_rho(dt, 1) ** S, _rho(dt, 2) ** S) if integ == "em" else
                          (np.exp(-D * (d - 1) * T), np.exp(-2 * D * d * T)))
                exact = _closed_form(x0, np.exp(-D * (d - 1) * T), np.exp(-2 * D * d * T))
                return _closed_form(x0, l1, l2) - exact, np.zeros(mo.mean.size)
        name = "drift" if drift else "pure_diffusion"
        print(f"{name}:", flush=True)
        out["cases"][name] = [_case(x0, heads, attn, integ, dt, true_of)
                              for integ in DTS for dt in dts[integ]]
    return out


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--n", type=int, default=10_000)
    ap.add_argument("--quick", action="store_true", help="two steps per integrator")
    ap.add_argument("--out", type=Path, default=RESULTS / "particles_weak_error.json")
    args = ap.parse_args(argv)
    res = run(args.n, args.quick)
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps(res, indent=1) + "\n", encoding="utf-8")
    print(f"wrote {args.out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
