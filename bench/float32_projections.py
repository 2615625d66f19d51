"""Error budget of float32 head projections at a BERT layer's width (the kernels' float32 path).

``python bench/float32_projections.py [--n N] [--out FILE]`` measures, at ``d = 768``,
``H = 12`` heads of rank ``k = 64`` (values of rank 64) and ``n`` tokens on
``S^{767}``, the relative error of every head's normalised value sum ``Y_h/Z_h`` (the
velocity's per-head factor, before ``W_O``) of the float32 tiles
(:func:`wflow.kernels._tiled.tiled_sums`, ``dtype="float32"``) against the float64
tiles, with the projections ``β Q_h x``, ``K_h y``, ``W_{V,h} y``:

* ``"float64 projections"``: computed in float64 and rounded to float32 once (what
  ``kernel_sums(dtype="float32")`` does today);
* ``"float32 projections"``: computed in float32 from float32 tokens and factors (an
  SGEMM of inner width 768, the candidate speed-up).

At ``β‖A_h‖₂ = 1, 3, 10`` (``A_h = Q_hᵀ K_h``; the float32 target is ≤ 1e-6 relative in the
velocity at ``β‖A‖ ≤ 10``), with tokens uniform on the sphere (scores ``|s| ≤ 0.4``) and
tokens near the top singular pair of head 0 (``|s| ≈ β‖A‖``). Two draws per row; the
error is the largest over targets and heads of ``|Y/Z − Y₆₄/Z₆₄| / max_i |Y₆₄/Z₆₄|``. Writes
``bench/results/float32_projections.json``; one thread.
"""

from __future__ import annotations

import argparse
import json
import time
from pathlib import Path

import numpy as np

HERE = Path(__file__).resolve().parent
OUT = HERE / "results" / "float32_projections.json"


def _heads(rng: np.random.Generator, H: int, k: int, d: int, norm: float):
    """``Q, K, W_V`` (H, k, d) with ``‖Q_hᵀ K_h‖₂ = norm`` for every head."""
    Q = rng.standard_normal((H, k, d)) / np.sqrt(d)
    K = rng.standard_normal((H, k, d)) / np.sqrt(d)
    for h in range(H):
        a = np.linalg.norm(Q[h].T @ K[h], 2)
        Q[h] *= np.sqrt(norm / a)
        K[h] *= np.sqrt(norm / a)
    V = rng.standard_normal((H, k, d)) / np.sqrt(d)
    return Q, K, V


def _ratio(x, Q, K, V, dtype: str, proj: str) -> np.ndarray:
    """``Y_h/Z_h`` (H, n, k) of the tiles, projections in ``proj`` precision."""
    from wflow.attention.kinds import CODE_EXP
    from wflow.kernels._tiled import tiled_sums

    ft = np.float32 if proj == "float32" else np.float64
    xs = x.astype(ft)

    def apply(W):  # (H, n, k): one GEMM, as wflow.kernels.validation._apply
        H, k, d = W.shape
        out = W.astype(ft).reshape(H * k, d) @ xs.T
        return np.ascontiguousarray(np.swapaxes(out.reshape(H, k, -1), 1, 2))

    qx, ky, vy = apply(Q), apply(K), apply(V)
    H, n, k = qx.shape
    m = np.full(n, 1.0 / n)
    Z, P = np.empty((H, n)), np.empty((H, n))
    Y = np.empty((H, n, k))
    tiled_sums(qx, ky, list(vy), m, CODE_EXP, dtype, Z, Y, P, None, threads=1, serial=True)
    return Y / Z[:, :, None]


def _row(tokens: str, norm: float, seed: int, d: int, H: int, k: int, n: int) -> dict:
    """One case: the errors of both projections against the float64 tiles."""
    rng = np.random.default_rng([seed, int(norm * 10)])
    Q, K, V = _heads(rng, H, k, d, norm)
    x = rng.standard_normal((n, d))
    if tokens == "aligned":  # near the top singular pair of head 0: |s| ≈ β‖A‖
        u, _, vt = np.linalg.svd(Q[0].T @ K[0])
        c = rng.choice([-1.0, 1.0], n)[:, None]
        x = 0.05 * x / np.sqrt(d) + np.where(c > 0, u[:, 0], vt[0])
    x /= np.linalg.norm(x, axis=1)[:, None]
    ref = _ratio(x, Q, K, V, "float64", "float64")
    scale = np.max(np.linalg.norm(ref, axis=2))
    row = {"tokens": tokens, "beta_norm_A": norm, "seed": seed,
           "max_abs_score_head0": float(np.max(np.abs((x @ Q[0].T) @ (x @ K[0].T).T)))}
    for proj in ("float64", "float32"):
        err = np.linalg.norm(_ratio(x, Q, K, V, "float32", proj) - ref, axis=2) / scale
        row[f"{proj}_projections"] = {"max": float(err.max()),
                                      "rms": float(np.sqrt(np.mean(err ** 2)))}
    print(f"{tokens} beta|A| = {norm:g}, seed {seed} (max |s| head 0 "
          f"{row['max_abs_score_head0']:.2f}): float32 tiles, float64 projections "
          f"{row['float64_projections']['max']:.2e}; float32 projections "
          f"{row['float32_projections']['max']:.2e}", flush=True)
    return row


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--n", type=int, default=2048)
    ap.add_argument("--out", default=str(OUT))
    args = ap.parse_args()
    from threadpoolctl import threadpool_limits

    d, H, k, n = 768, 12, 64, args.n
    rows = []
    t0, c0 = time.perf_counter(), time.process_time()
    cases = [(t, b, s) for t in ("uniform", "aligned") for b in (1.0, 3.0, 10.0)
             for s in (0, 1)]
    with threadpool_limits(1):
        for tokens, norm, seed in cases:
            rows.append(_row(tokens, norm, seed, d, H, k, n))
    import sys

    sys.path.insert(0, str(HERE))
    from _common import parent_machine

    res = {"d": d, "H": H, "k": k, "n": n, "target": 1e-6, "rows": rows,
           "wall_s": time.perf_counter() - t0, "cpu_s": time.process_time() - c0,
           "machine": parent_machine()}
    Path(args.out).write_text(json.dumps(res, indent=1) + "\n")
    print(f"wrote {args.out}")


if __name__ == "__main__":
    main()
