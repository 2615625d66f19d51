"""Phase diagram of the noisy transformer on S² (Mun & Rosenzweig; docs/guide/phase.md).

Maths (docs/theory.md §9, THEORY §8): one unnormalised head A = V = I with token
diffusion D, in the published coupling K = 1/(2D). The uniform density is linearly
unstable iff K > K_#(β) = β^{d/2} / (2^{d/2} Γ(d/2) I_{d/2}(β)). Below the tricritical
β*(d) (root of I_{d/2+1}/I_{d/2} = 1/d; β*(3) = 1.8161545) the transition is continuous at
K_#, the order parameter m = |∫x dμ| rising as (K − K_#)^{1/2} ((K − K_#)^{1/4} at β*);
above it the branch of zonal stationary states bends back to a fold K_f, and the
clustered state wins from K_c on (equal free energies), K_f < K_c < K_#.

The script continues the zonal branch in m (wflow.phase), prints K_#, K_c, K_f against β
for d = 3, the exponents, and the dichotomy at β* ± 2 % for d = 2, 3, 4, 8; with --out it
writes phase_diagram.png (K against β, the branches m against K/K_#, and the noisy
particles' order parameter against the stable branch) and phase_diagram.json (the raw
numbers).

Particle points: the stationary runs of ``bench/phase_particles.py points`` (section
``points`` of bench/results/phase_particles.json, or --points FILE), each checked against
the continuation's stable state m(K) (wflow.phase.particles.check_particle_point: |m̄ − m(K)|
within t(batches − 1) standard errors at level 0.003), printed as a table and drawn with
their standard errors. A missing file or section is said, and no point is drawn.

Run: python demos/phase_diagram.py [--quick] [--out DIR] [--points FILE]
"""

from __future__ import annotations

import argparse
import json
import math
from pathlib import Path

import numpy as np

from wflow.phase import (
    check_dichotomy,
    k_sharp,
    order_parameter_exponent,
    phase_diagram,
    tricritical_beta,
    zonal_branch,
)
from wflow.phase.particles import correct_dt, extrapolate_dt, load_particle_points

#: The particle points the demo draws (written by ``bench/phase_particles.py points``).
POINTS_FILE = Path(__file__).resolve().parents[1] / "bench" / "results" / "phase_particles.json"


def _nan_to_none(x):
    """JSON has no NaN: a continuous transition's fold is written as null."""
    if isinstance(x, float) and math.isnan(x):
        return None
    if isinstance(x, list):
        return [_nan_to_none(v) for v in x]
    if isinstance(x, dict):
        return {k: _nan_to_none(v) for k, v in x.items()}
    return x


def _with_limits(pts: list) -> list:
    """The points, each followed by its limit ``dt → 0`` where the records give one.

    A pair at ``dt`` and ``dt/2`` (one ``n`` and seed) is followed by its Richardson limit
    (:func:`~wflow.phase.particles.extrapolate_dt`); a run at ``dt`` with no ``dt/2`` of its
    own, by the run less the step's bias of every pair at its ``(β, K)`` and step with a
    smaller ``n`` (:func:`~wflow.phase.particles.correct_dt`).
    """
    def same(p, q):
        return (q.beta, q.K, q.n, q.seed) == (p.beta, p.K, p.n, p.seed)

    pairs = [(q, p) for p in pts for q in pts if same(p, q) and p.dt * 2.0 == q.dt]
    out = []
    for p in pts:
        out.append(p)
        for q, f in pairs:  # p the fine run of a pair
            if f is p:
                out.append(extrapolate_dt(q, p))
        if any(p is c or p is f for c, f in pairs):
            continue
        small = [(c, f) for c, f in pairs
                 if (c.beta, c.K, c.dt) == (p.beta, p.K, p.dt) and c.n < p.n]
        if small:
            out.append(correct_dt(p, small))
    return out


def particle_table(path: Path) -> list | None:
    """Print the particle points of ``path`` against the stable branch; ``None`` if absent.

    Each pair of runs at ``dt`` and ``dt/2`` is followed by its Richardson limit, and a
    larger run at ``dt`` alone by its step-bias correction (``dt = 0`` in the table;
    :func:`_with_limits`).
    """
    pts = load_particle_points(path)
    if pts is None:
        print(f"particle points: {path} has no 'points' section (run "
              "bench/phase_particles.py points); none drawn")
        return None
    pts = _with_limits(pts)
    print(f"particle points ({path.name}): order parameter against the stable branch m(K) "
          "(dt = 0: Richardson's limit of dt and dt/2, or a run at dt less the step's bias "
          "measured at n = bias n)")
    print(f"{'beta':>6} {'K':>6} {'n':>8} {'ranks':>5} {'dt':>7} {'seed':>4} "
          f"{'bias n':>7} {'m (particles)':>22} {'m(K) branch':>12} {'z':>7}  verdict")
    for p in pts:
        bn = "-" if p.bias_n is None else f"{p.bias_n:.0e}"
        print(f"{p.beta:6.3g} {p.K:6.3g} {p.n:8d} {p.ranks:5d} {p.dt:7.4g} {p.seed:4d} {bn:>7} "
              f"{p.mean:12.6f} ± {p.se:.1e} {p.branch_m:12.6f} {p.z:+7.2f}  "
              f"{'agrees' if p.passed else 'DIFFERS'} (|z| <= {p.t_crit:.2f})")
    return pts


def main(quick: bool = False, out: Path | None = None, points: Path = POINTS_FILE) -> dict:
    d = 3
    bs = tricritical_beta(d)
    betas = (np.array([1.0, 1.5, bs, 2.0, 2.5, 3.0, 4.0, 5.0, 6.0]) if quick else
             np.unique(np.concatenate([np.linspace(0.5, bs, 14), np.linspace(bs, 10.0, 40)[1:],
                                       [3.0, 4.0, 5.0, 8.0]])))
    diag = phase_diagram(d, betas)
    print(f"d = {d}: beta* = {bs:.10f}")
    print(f"{'beta':>8} {'K_#':>14} {'K_c':>14} {'K_f':>14}  transition")
    for i, b in enumerate(diag.beta):
        print(f"{b:8.4f} {diag.k_sharp[i]:14.10f} {diag.k_c[i]:14.10f} "
              f"{diag.k_fold[i]:14.10f}  {diag.transition[i]}")
    i3 = int(np.nonzero(diag.beta == 3.0)[0][0])
    exps = {"below": order_parameter_exponent(0.5 * bs, d).exponent,
            "at": order_parameter_exponent(bs, d).exponent}
    print(f"order-parameter exponent: {exps['below']:.5f} at beta*/2, {exps['at']:.5f} at beta*")
    dims = (3,) if quick else (2, 3, 4, 8)
    dich = {}
    for dd in dims:
        c = check_dichotomy(dd)
        dich[str(dd)] = {"beta_star": c.beta_star, "holds": c.holds, "message": c.message}
        print(f"d = {dd}: beta* = {c.beta_star:.7f}, dichotomy at ±2 %: "
              f"{'holds' if c.holds else 'FAILS'} ({c.message})")
    result = {"d": d, "beta_star": bs, "k_sharp_beta3": float(diag.k_sharp[i3]),
              "k_c_beta3": float(diag.k_c[i3]), "k_fold_beta3": float(diag.k_fold[i3]),
              "exponent_below": exps["below"], "exponent_at": exps["at"],
              "discontinuous": int(sum(t == "discontinuous" for t in diag.transition)),
              "dichotomy": dich, "diagram": diag.as_dict()}
    pts = particle_table(Path(points))
    result["particle_points"] = None if pts is None else [vars(p) for p in pts]
    if out is not None:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt

        out.mkdir(parents=True, exist_ok=True)
        branches = {}
        for label, b in (("0.6 β*", 0.6 * bs), ("β*", bs), ("β = 3", 3.0), ("β = 5", 5.0)):
            br = zonal_branch(b, d, m=np.linspace(0.002, 0.95, 120 if quick else 400))
            branches[label] = {"beta": b, "m": br.m.tolist(),
                               "K_over_K_sharp": (br.K * 2 * br.model.lam[1] / b).tolist(),
                               "free_energy_gap": br.free_energy_gap.tolist()}
        for b in sorted({p.beta for p in pts or []} - {br["beta"] for br in branches.values()}):
            br = zonal_branch(b, d, m=np.linspace(0.002, 0.95, 120 if quick else 400))
            branches[f"β = {b:g}"] = {"beta": b, "m": br.m.tolist(),
                                      "K_over_K_sharp": (br.K * 2 * br.model.lam[1] / b).tolist(),
                                      "free_energy_gap": br.free_energy_gap.tolist()}
        fig, ax = plt.subplots(1, 3, figsize=(16, 4.2))
        # from the tricritical point on (K_f = K_c = K_# at β*), the curves of the
        # discontinuous side; K_c = K_# on the continuous side
        up = diag.beta >= bs
        kf = np.where(diag.beta == bs, diag.k_sharp, diag.k_fold)
        ax[0].fill_between(diag.beta[up], kf[up], diag.k_sharp[up], color="C1", alpha=0.15,
                           label="bistable: $K_f < K < K_\\#$ (hysteresis)")
        ax[0].semilogy(diag.beta, diag.k_sharp, "k-", label="$K_\\#$ (linear threshold)")
        ms = 3 if quick else 0
        ax[0].semilogy(diag.beta, diag.k_c, "C3o-", ms=ms,
                       label="$K_c$ (transition; $= K_\\#$ below β*)")
        ax[0].semilogy(diag.beta[up], kf[up], "C0s--", ms=ms, label="$K_f$ (fold)")
        ax[0].axvline(bs, color="gray", ls=":", label=f"β* = {bs:.4f}")
        ax[0].set(xlabel="β", ylabel="K = 1/(2D)",
                  title="noisy transformer on S²: phase diagram (d = 3)")
        ax[0].text(0.04, 0.06, "uniform (disordered)", transform=ax[0].transAxes, fontsize=8)
        ax[0].text(0.6, 0.9, "clustered", transform=ax[0].transAxes, fontsize=8)
        ax[0].legend(fontsize=7, loc="lower left", bbox_to_anchor=(0.0, 0.1))
        for k, (label, br) in enumerate(branches.items()):
            ax[1].plot(br["K_over_K_sharp"], br["m"], f"C{k}-", label=label)
        for b, col in ((3.0, "C2"), (5.0, "C3")):
            p = diag.points[int(np.argmin(np.abs(diag.beta - b)))] if b in diag.beta else None
            if p is not None:
                ax[1].plot([p.k_c / p.k_sharp] * 2, [0, p.m_c], color=col, ls="--", lw=0.8)
                ax[1].plot(p.k_fold / p.k_sharp, p.m_fold, "o", color=col, ms=4)
        kmax = _draw_particles(ax, pts, d)
        ax[1].axvline(1.0, color="gray", lw=0.6)
        ax[1].set(xlabel="K / K_#", ylabel="order parameter m = |∫x dμ|",
                  xlim=(0.4, max(1.6, kmax + 0.05)), ylim=(0, 1),
                  title="zonal branches (dots: folds, dashed: K_c)")
        ax[1].legend(fontsize=8)
        fig.tight_layout()
        fig.savefig(out / "phase_diagram.png", dpi=120)
        (out / "phase_diagram.json").write_text(
            json.dumps(_nan_to_none({**result, "branches": branches}), indent=1))
        print(f"figure: {out / 'phase_diagram.png'}; data: {out / 'phase_diagram.json'}")
    return result


def _draw_particles(ax, pts: list | None, d: int) -> float:
    """The particle points: on the diagram, on the branches, and against the branch.

    Returns the largest ``K/K_#`` of the points (0 without points).
    """
    if not pts:
        ax[2].text(0.5, 0.5, "no particle points\n(bench/phase_particles.py points)",
                   ha="center", va="center", transform=ax[2].transAxes)
        ax[2].set_axis_off()
        return 0.0
    runs = [p for p in pts if p.dt > 0]
    ax[0].plot([p.beta for p in runs], [p.K for p in runs], "k*", ms=9, label="particles")
    ax[0].legend(fontsize=7, loc="lower left", bbox_to_anchor=(0.0, 0.1))
    kk = [p.K / k_sharp(p.beta, d) for p in runs]
    ax[1].errorbar(kk, [p.mean for p in runs], yerr=[p.se for p in runs], fmt="k*", ms=7,
                   capsize=3, label="particles (± s.e.)", zorder=5)
    for i, p in enumerate(pts):
        mk = ("D" if p.dt == 0 else "o") if p.passed else "x"
        ax[2].errorbar([i], [p.mean - p.branch_m], yerr=[p.se], fmt=mk,
                       color="C2" if p.passed else "C3", capsize=4)
        ax[2].errorbar([i], [p.mean - p.branch_m], yerr=[p.t_crit * p.se], fmt="none",
                       color="C2" if p.passed else "C3", alpha=0.35, lw=4)
    ax[2].axhline(0.0, color="k", lw=0.8)
    many = len({p.n for p in pts}) > 1

    def tens(n: int) -> str:  # 100000 -> "10⁵" for powers of ten, else the integer
        e = round(math.log10(n))
        sup = str(e).translate(str.maketrans("0123456789", "⁰¹²³⁴⁵⁶⁷⁸⁹"))
        return f"10{sup}" if 10 ** e == n else str(n)

    ax[2].set_xticks(range(len(pts)),
                     [f"β={p.beta:g}\nK={p.K:g}\n" + (f"dt={p.dt:g}" if p.dt else "dt→0")
                      + (f"\nn={tens(p.n)}" if many else "")
                      + (f"\nseed {p.seed}" if p.seed else "") for p in pts],
                     fontsize=6 if many else 7)
    ns = ", ".join(tens(n) for n in sorted({p.n for p in pts}))
    ax[2].set(ylabel="m̄ (particles) − m(K) (stable branch)", xlim=(-0.5, len(pts) - 0.5),
              title=f"particles − branch (n = {ns})\n(bars: s.e.; bands: t_crit · s.e.; "
                    "◆: dt → 0)")
    return max(kk)


if __name__ == "__main__":
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--quick", action="store_true", help="small, runs in seconds")
    ap.add_argument("--out", type=Path, default=None, help="directory for the figure and data")
    ap.add_argument("--points", type=Path, default=POINTS_FILE,
                    help="results file with the particle points (section 'points')")
    a = ap.parse_args()
    main(quick=a.quick, out=a.out, points=a.points)
