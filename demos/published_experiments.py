"""The published [TD] Section-6 experiments on S², exactly, with wflow (`wflow reproduce`).

Maths (docs/theory.md §5): n = 200 tokens around the octahedron vertices, H heads D_h with
score <x, D_h y> (β = 1), value −D_h, w_h = 1/H, D_h(0) = Z + Zᵀ; weights relaxing to the
published oscillating frames F_h(t) (dD_h/dt = F_h − D_h) or Ornstein–Uhlenbeck
dD = (I − D) dt + σ dW_sym with σ² = 2; explicit Euler for tokens and weights, dt = 5e-3,
T = 20. The published claim: the time average of G² over [T/2, T] scales like H^-1 for
OU weights and like H^0 for oscillating ones; wflow fits a·H^b as the published code
does and says whether each claim is reproduced.

Run: python demos/published_experiments.py [--quick] [--gif] [--out DIR]
(the full scale is `wflow reproduce s2 --out DIR`; the d = 5 experiments: `hd`)
"""

from __future__ import annotations

import argparse
import tempfile
from pathlib import Path

from wflow.apps.reproduce import ReproduceOptions, reproduce


def main(quick: bool = False, out: Path | None = None, gif: bool = False) -> dict:
    # quick: a small version of the same experiments (n = 32, H = 1, 4, 16, T = 4, 3 paths)
    opts = (ReproduceOptions.quick(n=32, T=4.0, paths=3, gif=gif) if quick
            else ReproduceOptions(gif=gif))
    out = Path(tempfile.mkdtemp(prefix="wflow-published-")) if out is None else out
    res = reproduce("s2", out=out / "published_s2", options=opts)
    for name, fit in res.fits.items():
        print(f"{name:15s} G² ~ H^{fit.b:+.2f} ± {fit.u:.2f} (log–log {fit.loglog:+.2f}): "
              f"published claim {fit.verdict}")
    print(f"wrote {out / 'published_s2'} (summary.json, report.md, figures) in {res.wall_s:.0f} s")
    return {name: fit.b for name, fit in res.fits.items()}


if __name__ == "__main__":
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--quick", action="store_true", help="small, fast run (seconds)")
    ap.add_argument("--gif", action="store_true", help="also write GIFs of the tokens")
    ap.add_argument("--out", type=Path, default=None, help="output directory")
    a = ap.parse_args()
    main(quick=a.quick, out=a.out, gif=a.gif)
