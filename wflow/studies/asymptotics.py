"""Study ``asymptotics``: integrable (OU) vs oscillating weights on S² (THEORY.md §5).

What it checks — the two asymptotic claims of [TD], not the published experiments
(those are ``wflow reproduce``, exactly as published):

* Part A — decay: ``G²(μ_t, t) → 0`` for integrable weights, not for non-integrable
  ones. Integrable: OU ``dD = (I − D) dt + σ(t) dW_sym`` with decaying noise
  ``σ(t) = √2 e^{−t/2}`` (``∫|θ̇| < ∞``). Non-integrable: weights relaxing to an
  oscillating target whose *head average keeps oscillating*, wflow's rotating variant
  ``F_h(t) = 2I + 1.5 P(ω(t + 2πh/H))``, ``ω = 1/2`` (:meth:`Relaxed.rotating`: the phases
  span half a period). The published frames (:func:`~wflow.schedules.published_frames`)
  spread the phases over a whole period, so for ``H ≥ 3`` their head average is the
  constant ``2I``: a different question, measured by ``wflow reproduce``.
* Part B — head count: the time average of ``G²`` over ``[T/2, T]`` against ``H``
  (Monte-Carlo over independent head draws and noise paths), OU with ``σ² = 2`` vs the
  rotating variant: log–log slopes ``≈ −1`` (independent head fluctuations average out)
  and ``≈ 0`` (the driving survives the average), within ``±SLOPE_TOL``.

Everything else is the published setting: tokens from the published sampler (``n``
around the octahedron vertices, noise 0.05), heads :meth:`~wflow.heads.Heads.published`
(``D = Z + Zᵀ`` drawn with NumPy, score ``<x, D_h y>``, ``β = 1``, value ``−D_h``,
``w_h = 1/H``), OU :meth:`~wflow.schedules.OrnsteinUhlenbeck.published`, explicit Euler
for tokens and weights.

Verdict (every sentence from the numbers): Part A passes when the OU run loses ≥ 80 %
of its early ``G²`` (window ``[0.1T, 0.25T]`` → ``[0.75T, T]``) and ends ≥ 10× below the
oscillating run, whose late level stays within a factor 5 of its early one; Part B when
both slopes are within ``SLOPE_TOL`` of the theory. Negative controls (``fault=``, each
must turn the verdict to FAIL; tested): ``"ou_constant_noise"`` (Part A's OU keeps
``σ² = 2``: not integrable), ``"frozen_oscillation"`` (the oscillating weights frozen at
``D(0)``: integrable), ``"shared_noise"`` (Part B's OU heads all equal, driven by one
noise: nothing averages out).

Runs are independent and distributed over MPI ranks (:func:`wflow.parallel.parallel_map`).
"""

from __future__ import annotations

import functools
import logging
import math
import time
from pathlib import Path

import numpy as np

from ..heads import Attention, Heads
from ..parallel import parallel_map
from ..particles import simulate
from ..schedules import OrnsteinUhlenbeck, Relaxed, Schedule
from ..sphere import sample_published_clusters
from .base import StudyResult, fit_loglog, write_study

__all__ = ["run", "one_run", "FAULTS", "SLOPE_TOL"]

logger = logging.getLogger(__name__)

#: Tolerance of the verdict on the fitted slopes (Monte-Carlo noise of a few seeds).
SLOPE_TOL = 0.35
#: Injected faults (negative controls), each must make the study fail.
FAULTS = ("ou_constant_noise", "frozen_oscillation", "shared_noise")


class _SharedNoiseOU(OrnsteinUhlenbeck):
    """Fault ``shared_noise``: one noise increment drives every head (identical heads)."""

    def noise(self, shape: tuple[int, ...], rng: np.random.Generator) -> np.ndarray:
        z = super().noise((1, *shape[1:]), rng)
        return np.broadcast_to(z, shape).copy()


def _schedule(regime: str, part: str, H: int, rng: np.random.Generator,
              fault: str | None) -> Schedule:
    D0 = Heads.published(H, 3, rng=rng).A
    if regime == "oscillating":
        if fault == "frozen_oscillation":
            return Relaxed.rotating(D0, w=1.0 / H, kappa=0.0)
        return Relaxed.rotating(D0, w=1.0 / H)
    ou = OrnsteinUhlenbeck.published(D0)
    if part == "A" and fault != "ou_constant_noise":
        ou = OrnsteinUhlenbeck(ou.param, D0, ou.theta_inf, sigma0=math.sqrt(2.0), gamma=0.5,
                               symmetric_noise=True)
    if part == "B" and fault == "shared_noise":
        D0 = np.broadcast_to(D0[:1], D0.shape).copy()
        ou = _SharedNoiseOU(ou.param, D0, ou.theta_inf, sigma0=ou.sigma0,
                            symmetric_noise=True)
    return ou


def _affects(fault: str | None, part: str, regime: str) -> bool:
    """Whether ``fault`` changes the run ``(part, regime)`` (the others are the plain ones)."""
    return (fault == "ou_constant_noise" and (part, regime) == ("A", "ou")
            or fault == "frozen_oscillation" and regime == "oscillating"
            or fault == "shared_noise" and (part, regime) == ("B", "ou"))


@functools.lru_cache(maxsize=256)
def one_run(item: tuple) -> dict:
    """One trajectory: ``(part, regime, H, path, T, dt, n, seed, fault)`` -> ``G²`` series.

    Deterministic in ``item`` and cached (a negative control recomputes only the runs
    its fault changes; the caller never modifies the returned arrays).
    """
    part, regime, H, path, T, dt, n, seed, fault = item
    rng = np.random.default_rng([seed, H, path, 0 if regime == "ou" else 1])
    x0 = sample_published_clusters(n, 3, np.random.default_rng(seed))
    sch = _schedule(regime, part, H, rng, fault)
    res = simulate(x0, sch, Attention("softmax", 1.0), T=T, dt=dt, integrator="euler",
                   record_every=max(1, int(round(0.05 / dt))), head_rates=False,
                   seed=int(rng.integers(2**31)))
    if res.status != "success":
        raise FloatingPointError(f"asymptotics run {item}: {res.message}")
    return {"t": res.t, "G2": res.history["G2"][0], "mean_inner": res.history["mean_inner"][0],
            "n_clusters": res.history["n_clusters"][0]}


def run(*, out: Path, quick: bool = False, seed: int = 0, fault: str | None = None
        ) -> StudyResult:
    """Run both parts, fit, write ``summary.json`` and ``asymptotics.png`` into ``out``.

    ``fault`` injects one of :data:`FAULTS` (negative controls: the study must fail).
    """
    if fault is not None and fault not in FAULTS:
        raise ValueError(f"asymptotics: unknown fault {fault!r} (known: {FAULTS})")
    if quick:
        T, dt, n, Hs, paths, HA = 8.0, 0.02, 64, [1, 4, 16], 4, 4
    else:
        T, dt, n, Hs, paths, HA = 20.0, 5e-3, 200, [1, 3, 10, 30, 100], 3, 10
    t0 = time.perf_counter()
    items_a = [("A", r, HA, 0, T, dt, n, seed, fault if _affects(fault, "A", r) else None)
               for r in ("ou", "oscillating")]
    items_b = [("B", r, H, p, T, dt, n, seed, fault if _affects(fault, "B", r) else None)
               for r in ("ou", "oscillating") for H in Hs for p in range(paths)]
    results = parallel_map(one_run, items_a + items_b)
    ra, rb = results[:2], results[2:]

    # Part A: decay of G² (late vs early window averages)
    decay = {}
    for item, r in zip(items_a, ra, strict=True):
        t, g = r["t"], r["G2"]
        early = float(np.mean(g[(t >= 0.1 * T) & (t <= 0.25 * T)]))
        late = float(np.mean(g[t >= 0.75 * T]))
        decay[item[1]] = {"G2_early": early, "G2_late": late, "ratio": late / early,
                          "mean_inner_T": float(r["mean_inner"][-1]),
                          "n_clusters_T": float(r["n_clusters"][-1])}
    # Part B: late time-average of G² vs H
    late_avg: dict[str, dict[int, list[float]]] = {"ou": {}, "oscillating": {}}
    for item, r in zip(items_b, rb, strict=True):
        regime, H = item[1], item[2]
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
    da, do = decay["ou"], decay["oscillating"]
    checks_a = {"OU loses >= 80 % of its early G²": da["ratio"] < 0.2,
                "OU ends >= 10x below the oscillating run": da["G2_late"] < 0.1 * do["G2_late"],
                "oscillating late level within 5x of its early level": do["ratio"] > 0.2}
    ok_decay = all(checks_a.values())
    ok_ou = abs(fits["ou"]["slope"] + 1.0) < SLOPE_TOL
    ok_osc = abs(fits["oscillating"]["slope"]) < SLOPE_TOL
    failed_a = [k for k, v in checks_a.items() if not v]
    verdict = (
        f"Part A: G² late/early ratio {da['ratio']:.2e} with integrable OU weights "
        f"(late level {da['G2_late']:.1e}) vs {do['ratio']:.2f} with oscillating weights "
        f"(late level {do['G2_late']:.1e}): "
        + ("decays vs does not, as predicted. " if ok_decay else
           "NOT as predicted (fails: " + "; ".join(failed_a) + "). ")
        + f"Part B: late-time mean G² ~ H^{fits['ou']['slope']:.2f} (OU, theory −1: "
        f"{'within' if ok_ou else 'OUTSIDE'} ±{SLOPE_TOL}) and "
        f"H^{fits['oscillating']['slope']:.2f} (oscillating, theory 0: "
        f"{'within' if ok_osc else 'OUTSIDE'} ±{SLOPE_TOL})."
        + (f" Injected fault: {fault}." if fault else "")
    )
    summary = {
        "settings": {"T": T, "dt": dt, "n": n, "H_values": Hs, "paths": paths, "H_part_a": HA,
                     "seed": seed, "quick": quick, "integrator": "euler (tokens and weights)",
                     "fault": fault,
                     "tokens": "published sampler (octahedron, noise 0.05), seed",
                     "heads": "D = Z + Zᵀ (NumPy), value −D, w = 1/H, β = 1",
                     "ou": "dD = (I − D)dt + σ(t) dW_sym, σ² = 2 (part A: σ(t) = √2 e^{−t/2})",
                     "oscillating": "wflow's rotating variant dD_h/dt = F_h(t) − D_h, "
                                    "F_h = 2I + 1.5 P(ω(t + 2πh/H)), ω = 1/2 (not the "
                                    "published frames: see wflow reproduce)"},
        "fits": {"G2_vs_H": fits, "decay_ratio": {k: v["ratio"] for k, v in decay.items()}},
        "checks": {"part_a": checks_a, "ou_slope": ok_ou, "oscillating_slope": ok_osc},
        "decay": decay,
        "G2_vs_H": table,
        "series_part_a": {item[1]: {"t": r["t"].tolist(), "G2": r["G2"].tolist()}
                          for item, r in zip(items_a, ra, strict=True)},
        "wall_time_s": time.perf_counter() - t0,
    }
    result = StudyResult("asymptotics", summary, verdict, bool(ok_decay and ok_ou and ok_osc))

    def plot(stage: Path) -> list[str]:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt

        fig, ax = plt.subplots(1, 2, figsize=(10, 3.8))
        for item, r in zip(items_a, ra, strict=True):
            ax[0].semilogy(r["t"], r["G2"], label=f"{item[1]} (H = {HA})")
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
