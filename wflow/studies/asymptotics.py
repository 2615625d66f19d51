"""Study ``asymptotics``: integrable (OU) vs oscillating weights on S² (THEORY.md §5).

Setting (the published experiments): ``n = 200`` tokens around the octahedron vertices
(noise 0.05), ``H`` heads with score ``<x, D_h y>`` (β = 1) and value ``−D_h``, ``w_h = 1/H``,
``D_h(0) = Z + Zᵀ``; explicit Euler with renormalisation, ``dt = 5e-3``, ``T = 20``.

* Part A — decay: OU with decaying noise ``σ(t) = √2 e^{−t/2}`` (integrable:
  ``∫|θ̇| < ∞``) against weights relaxing to the oscillating target
  ``F_h(t) = 2I + 1.5 P(ω(t + 2πh/H))`` (non-integrable). Theory: ``G²(t) → 0`` for the
  former, not for the latter.
* Part B — head count: the late-time average of ``G²`` over ``t ∈ [T/2, T]`` for
  ``H = 1 … 100`` (Monte-Carlo over seeds), OU with ``σ² = 2`` vs oscillating.
  Theory: log–log slope ``≈ −1`` (OU: independent head fluctuations average out) and
  ``≈ 0`` (oscillating: the driving survives the average).

Runs are independent and distributed over MPI ranks (:func:`wflow.parallel.parallel_map`).
"""

from __future__ import annotations

import logging
from pathlib import Path

import numpy as np

from ..heads import Attention, Heads
from ..parallel import parallel_map
from ..particles import simulate
from ..schedules import OrnsteinUhlenbeck, Parametrisation, Relaxed
from ..sphere import sample_polytope_clusters
from .base import StudyResult, fit_loglog, write_study

__all__ = ["run", "one_run"]

logger = logging.getLogger(__name__)

#: Tolerances of the verdict on the fitted slopes (Monte-Carlo noise of a few seeds).
SLOPE_TOL = 0.35


def one_run(item: tuple) -> dict:
    """One trajectory: ``(regime, H, path, T, dt, n, gamma, seed)`` -> G² and clustering series."""
    regime, H, path, T, dt, n, gamma, seed = item
    rng = np.random.default_rng([seed, H, path, 0 if regime == "ou" else 1])
    x0 = sample_polytope_clusters(n, 3, np.random.default_rng(seed), noise=0.05)
    heads = Heads.random_symmetric(H, 3, rng, value_sign=-1.0)
    param, theta0 = Parametrisation.from_heads(heads, kind="bilinear")
    if regime == "ou":
        sch = OrnsteinUhlenbeck(param, theta0, np.broadcast_to(np.eye(3), theta0.shape),
                                kappa=1.0, sigma0=np.sqrt(2.0), gamma=gamma,
                                symmetric_noise=True)
    else:
        sch = Relaxed.rotating(theta0, w=heads.w, value_sign=-1.0)
    res = simulate(x0, sch, Attention("softmax", 1.0), T=T, dt=dt, integrator="euler",
                   record_every=max(1, int(round(0.05 / dt))), head_rates=False,
                   seed=int(rng.integers(2**31)))
    if res.status != "success":
        raise FloatingPointError(f"asymptotics run {item}: {res.message}")
    return {"t": res.t, "G2": res.history["G2"][0], "mean_inner": res.history["mean_inner"][0],
            "n_clusters": res.history["n_clusters"][0]}


def run(*, out: Path, quick: bool = False, seed: int = 0) -> StudyResult:
    """Run both parts, fit, write ``summary.json`` and ``asymptotics.png`` into ``out``."""
    if quick:
        T, dt, n, Hs, paths, HA = 6.0, 0.02, 100, [1, 4, 16], 2, 4
    else:
        T, dt, n, Hs, paths, HA = 20.0, 5e-3, 200, [1, 3, 10, 30, 100], 3, 10
    items_a = [(r, HA, 0, T, dt, n, 0.5, seed) for r in ("ou", "oscillating")]
    items_b = [(r, H, p, T, dt, n, 0.0, seed) for r in ("ou", "oscillating") for H in Hs
               for p in range(paths)]
    results = parallel_map(one_run, items_a + items_b)
    ra, rb = results[:2], results[2:]

    # Part A: decay of G² (late vs early window averages)
    decay = {}
    for item, r in zip(items_a, ra, strict=True):
        t, g = r["t"], r["G2"]
        early = float(np.mean(g[(t >= 0.1 * T) & (t <= 0.25 * T)]))
        late = float(np.mean(g[t >= 0.75 * T]))
        decay[item[0]] = {"G2_early": early, "G2_late": late, "ratio": late / early,
                          "mean_inner_T": float(r["mean_inner"][-1]),
                          "n_clusters_T": float(r["n_clusters"][-1])}
    # Part B: late time-average of G² vs H
    late_avg: dict[str, dict[int, list[float]]] = {"ou": {}, "oscillating": {}}
    for item, r in zip(items_b, rb, strict=True):
        regime, H = item[0], item[1]
        t, g = r["t"], r["G2"]
        late_avg[regime].setdefault(H, []).append(float(np.mean(g[t >= 0.5 * T])))
    fits, table = {}, {}
    for regime, by_h in late_avg.items():
        hs = np.array(sorted(by_h))
        mean = np.array([np.mean(by_h[h]) for h in hs])
        sem = np.array([np.std(by_h[h], ddof=1) / np.sqrt(len(by_h[h])) if len(by_h[h]) > 1
                        else 0.0 for h in hs])
        fit = fit_loglog(hs, mean)
        fits[regime] = fit.as_dict()
        table[regime] = {"H": hs.tolist(), "G2_late_mean": mean.tolist(), "sem": sem.tolist()}
    # "decays vs does not": OU loses ≥ 80% of its early G² and ends ≥ 10x below the
    # oscillating case, whose late level stays within a factor 5 of its early level
    ok_decay = (decay["ou"]["ratio"] < 0.2
                and decay["ou"]["G2_late"] < 0.1 * decay["oscillating"]["G2_late"]
                and decay["oscillating"]["ratio"] > 0.2)
    ok_ou = abs(fits["ou"]["slope"] + 1.0) < SLOPE_TOL
    ok_osc = abs(fits["oscillating"]["slope"]) < SLOPE_TOL
    verdict = (
        f"Part A: G² late/early ratio {decay['ou']['ratio']:.2e} with integrable OU weights "
        f"(late level {decay['ou']['G2_late']:.1e}) vs {decay['oscillating']['ratio']:.2f} "
        f"with oscillating weights (late level {decay['oscillating']['G2_late']:.1e}) "
        f"({'decays vs does not, as predicted' if ok_decay else 'NOT as predicted'}). "
        f"Part B: late-time mean G² ~ H^{fits['ou']['slope']:.2f} (OU, theory −1) and "
        f"H^{fits['oscillating']['slope']:.2f} (oscillating, theory 0)"
        f"{'' if (ok_ou and ok_osc) else ' — outside ±' + str(SLOPE_TOL)}."
    )
    summary = {
        "settings": {"T": T, "dt": dt, "n": n, "H_values": Hs, "paths": paths, "H_part_a": HA,
                     "seed": seed, "quick": quick, "integrator": "euler",
                     "ou": "dD = (I − D)dt + σ(t) dW_sym, σ² = 2 (part A: σ(t) = √2 e^{−t/2})",
                     "oscillating": "dD_h/dt = F_h(t) − D_h, F_h = 2I + 1.5 P(ω(t + 2πh/H)), "
                                    "ω = 1/2"},
        "fits": {"G2_vs_H": fits, "decay_ratio": {k: v["ratio"] for k, v in decay.items()}},
        "decay": decay,
        "G2_vs_H": table,
        "series_part_a": {item[0]: {"t": r["t"].tolist(), "G2": r["G2"].tolist()}
                          for item, r in zip(items_a, ra, strict=True)},
    }
    result = StudyResult("asymptotics", summary, verdict, bool(ok_decay and ok_ou and ok_osc))

    def plot(stage: Path) -> list[str]:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt

        fig, ax = plt.subplots(1, 2, figsize=(10, 3.8))
        for item, r in zip(items_a, ra, strict=True):
            ax[0].semilogy(r["t"], r["G2"], label=f"{item[0]} (H = {HA})")
        ax[0].set(xlabel="t (depth)", ylabel="G²", title="A: integrable vs oscillating")
        ax[0].legend()
        for regime, tab in table.items():
            ax[1].errorbar(tab["H"], tab["G2_late_mean"], yerr=tab["sem"], marker="o",
                           label=f"{regime}: slope {fits[regime]['slope']:.2f}")
        hs = np.array(Hs, float)
        ax[1].loglog(hs, table["ou"]["G2_late_mean"][0] / hs, "k--", lw=0.8, label="H^-1")
        ax[1].set(xscale="log", yscale="log", xlabel="H", ylabel="late mean G²",
                  title="B: head averaging")
        ax[1].legend(fontsize=8)
        fig.tight_layout()
        fig.savefig(stage / "asymptotics.png", dpi=120)
        plt.close(fig)
        return ["asymptotics.png"]

    return write_study(out, result, plot)
