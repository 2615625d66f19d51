"""``wflow reproduce metastable_staircase``: the energy staircase of 5 tokens on the circle.

The published experiment is ``staircase.py`` of ``HugoKoubbi/2024-transformers-dotm``
(Geshkovski–Koubbi–Polyanskiy–Rigollet, *Dynamic metastability in the self-attention
model*, commit ``4aa178a``): the figure ``time-rescale.pdf``. Conventions, term by term
(line numbers of the published file):

=======================  ==============================================================
convention               published (line)
=======================  ==============================================================
tokens                   ``n = 5`` angles on the circle (424), deterministic:
                         ``θ₀ = ½ (0, c/2, 2c, 4c, 7c) mod π`` (each entry ``mod π``
                         before the ½) with ``c = log β₀/√β₀``, ``β₀ = 2000`` for every β
                         (426, 436-442)
β                        500, 1000, 1500, 2000, 3000, 4000 (493)
gradient                 the second ``time_rescale_3`` (376, it replaces the first, 347):
                         ``g_i = n^{-2} Σ_j −sin(θ_i − θ_j) e^{β(cos(θ_i − θ_j) − 1)}``
                         (``grad_USA``, 121-126)
step                     normalised ascent ``θ ← θ + lr·log β · g/‖g‖₂`` (382-383),
                         ``lr = 10e-6`` (``= 1e-5``, 446)
merging                  when ``‖g‖ < 10e-6`` (``1e-5``, checked on the gradient just
                         used, 384), for ``j < k`` in order: ``θ_k ← θ_j`` if
                         ``|θ_j − θ_k| < 10e-4`` (``1e-3``, 385-388), applied in place
energy                   after every step, ``E = n^{-2} Σ_{ij} e^{β(cos(θ_i − θ_j) − 1)}``
                         (``energy_softmax``, 128-133, summed row by row from 0), 10⁶
                         steps (447)
time axis                ``lr · k`` for record ``k = 0, 1, …`` (496: "rescaled time")
=======================  ==============================================================

The arithmetic is NumPy's, elementwise and in the published order (rows summed with
``np.sum`` on length-``n`` rows, the row sums added one by one from ``0``), so the energies
agree with the published code's bit for bit with the same NumPy (the tests check it on a
short run of the published script). One shortcut, exact: once all tokens have merged,
``g = 0`` and the published step computes ``0/0``; from then on every angle and energy is
NaN (NaN propagates through every later operation and no merge test is true), so the rest
of the series is filled with NaN without computing it.

The claim (the paper's Figure: "under an appropriate rescaling of time, the energy has a
staircase profile, with the dynamics manifesting saddle-to-saddle-like behavior"):
*the energy rises in a staircase: long plateaus (metastable multi-cluster states, near
the levels* ``Σ_k m_k²/n²`` *of the cluster sizes* ``m_k``) *separated by sharp jumps.*
The verdict rule is :data:`RULE`.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from ..infra.parallel import parallel_map
from ..status import Claim
from .claims import ClaimOutcome, report_head, write_reproduction

__all__ = [
    "StaircaseOptions",
    "published_theta0",
    "staircase_energy",
    "plateau_levels",
    "judge_staircase",
    "run_staircase",
    "write_staircase",
]

logger = logging.getLogger(__name__)

PAPER = ("Geshkovski, Koubbi, Polyanskiy, Rigollet, Dynamic metastability in the "
         "self-attention model; code HugoKoubbi/2024-transformers-dotm, staircase.py")
CLAIM = ("under the rescaled time lr*k of normalised gradient ascent, the energy has a "
         "staircase profile: long plateaus (metastable multi-cluster states) separated by "
         "sharp jumps (saddle-to-saddle dynamics)")


@dataclass(frozen=True)
class StaircaseOptions:
    """Settings of :func:`run_staircase` (defaults: the published experiment).

    Parameters
    ----------
    betas : tuple of float
        Published 500, 1000, 1500, 2000, 3000, 4000.
    max_iter : int
        Steps per β (published 10⁶).
    lr : float
        Published ``10e-6``.
    beta0 : float
        β of the initial angles (published 2000 for every β).
    merge_grad, merge_dist : float
        Merging thresholds (published ``10e-6``, ``10e-4``).
    """

    betas: tuple[float, ...] = (500, 1000, 1500, 2000, 3000, 4000)
    max_iter: int = 1_000_000
    lr: float = 10e-6
    beta0: float = 2000
    merge_grad: float = 10e-6
    merge_dist: float = 10e-4

    def __post_init__(self) -> None:
        if self.max_iter < 1 or not self.betas or min(self.betas) <= 1:
            raise ValueError("metastable_staircase: max_iter >= 1 and betas > 1 required")

    @classmethod
    def quick(cls, **changes: Any) -> StaircaseOptions:
        """Seconds: two β (500, 4000), 20 000 steps (past the last merge at both)."""
        base: dict[str, Any] = {"betas": (500, 4000), "max_iter": 20_000}
        base.update(changes)
        return cls(**base)


def published_theta0(beta0: float = 2000, n: int = 5) -> np.ndarray:
    """``θ₀`` of lines 436-442 (``n = 5`` only: the published offsets 0, ½, 2, 4, 7)."""
    if n != 5:
        raise ValueError("metastable_staircase: the published initial angles are for n = 5")
    lb, sb = np.log(beta0), beta0 ** (1 / 2)  # (a·log β₀)/√β₀, in the published order
    return 0.5 * np.array([0, (0.5 * lb / sb) % np.pi, (2 * lb / sb) % np.pi,
                           (4 * lb / sb) % np.pi, (7 * lb / sb) % np.pi])


def _rows(theta: np.ndarray, beta: float) -> tuple[np.ndarray, np.ndarray]:
    D = theta[:, None] * np.ones_like(theta)[None, :] - theta[None, :]
    e = np.exp(beta * (np.cos(D) - 1))
    return D, e


def staircase_energy(theta0: np.ndarray, beta: float, *, lr: float, max_iter: int,
                     merge_grad: float = 10e-6, merge_dist: float = 10e-4
                     ) -> tuple[np.ndarray, dict[str, Any]]:
    """The published ``time_rescale_3`` (lines 376-390): energies after each step.

    Vectorised over pairs with the published elementwise operations; the interaction
    factor ``e^{β(cos(θ_i−θ_j)−1)}`` of the energy after step ``k`` is the one the
    gradient of step ``k + 1`` uses (same angles), so it is computed once.

    Returns
    -------
    E : (max_iter,) array
        ``E[k]``: energy after step ``k + 1`` (NaN after the published ``0/0``).
    info : dict
        ``merges`` (step, j, k of each merge), ``nan_from`` (first NaN record or -1),
        ``theta`` (final angles).
    """
    n = theta0.size
    inv_n2 = 1 / n ** 2
    step = lr * np.log(beta)
    theta = np.array(theta0, dtype=np.float64)
    E = np.full(max_iter, np.nan)
    merges: list[tuple[int, int, int]] = []
    D, e = _rows(theta, beta)
    nan_from = -1
    for it in range(max_iter):
        g = inv_n2 * np.sum(-np.sin(D) * e, axis=1)
        gn = np.linalg.norm(g)
        with np.errstate(invalid="ignore", divide="ignore"):  # the published 0/0
            theta = theta + step * g / gn
        if gn < merge_grad:
            for j in range(n):
                for k in range(j + 1, n):
                    if np.abs(theta[j] - theta[k]) < merge_dist:
                        if theta[k] != theta[j]:
                            merges.append((it, j, k))
                        theta[k] = theta[j]
        D, e = _rows(theta, beta)
        rows = np.sum(e, axis=1)
        acc = 0
        for r in rows:
            acc += r
        E[it] = acc / n ** 2
        if np.isnan(theta).all():
            nan_from = it
            break  # the rest stays NaN, exactly as published (see the module docstring)
    return E, {"merges": merges, "nan_from": nan_from, "theta": theta}


def plateau_levels(n: int = 5) -> np.ndarray:
    """Energies ``Σ_k m_k²/n²`` of the partitions ``m`` of ``n`` (sorted)."""
    levels = set()

    def parts(m: int, top: int) -> list[list[int]]:
        if m == 0:
            return [[]]
        return [[k, *p] for k in range(min(m, top), 0, -1) for p in parts(m - k, k)]

    for p in parts(n, n):
        levels.add(sum(k * k for k in p) / n**2)
    return np.array(sorted(levels))


RULE = ("over the records up to the first full merge (E = 1; or the last finite one), with "
        "increments dE_k and mean increment m = (E_end - E_0)/records: a plateau is a run of "
        ">= 1% of the records with dE_k < 0.05 m. REPRODUCED when, for every beta, there are "
        ">= 2 plateaus covering >= 25% of the records and the energy never falls by more than "
        "1e-6 of the rise; NOT REPRODUCED when, for some beta, there is no plateau (a smooth "
        "rise) or the energy falls by more; otherwise INCONCLUSIVE. f80 (the fraction of "
        "records carrying 80% of the rise) is reported beside it")


@dataclass(frozen=True)
class StaircaseVerdict(ClaimOutcome):
    """Per-β staircase measurements and the verdict (a :class:`ClaimOutcome`).

    ``verdict``: a :class:`~wflow.status.Claim` (``"reproduced"``, ``"inconclusive"``,
    ``"not reproduced"``).

    ``checks``: the three criteria of :data:`RULE` per β as ``summary.json`` checks
    ``{name: {value, tolerance, passed, rule}}`` (``beta_{β}_plateaus``,
    ``_plateau_fraction``, ``_max_fall_over_rise``): the claim is reproduced exactly when
    every check passes.
    """

    verdict: Claim
    per_beta: dict[str, dict[str, Any]]
    rule: str
    checks: dict[str, dict[str, Any]] = field(default_factory=dict)


def describe(E: np.ndarray, lr: float) -> dict[str, Any]:
    """Plateaus (rescaled start and end, energy), ``f80``, monotonicity of one series."""
    fin = np.isfinite(E)
    last = int(np.flatnonzero(fin)[-1]) + 1 if fin.any() else 0
    hit1 = np.flatnonzero(E[:last] >= 1 - 1e-12)
    stop = int(hit1[0]) + 1 if hit1.size else last
    x = E[:stop]
    out: dict[str, Any] = {"records": int(stop),
                           "full_merge_record": int(hit1[0]) if hit1.size else -1}
    if stop < 3:
        return {**out, "f80": 1.0, "plateaus": [], "plateau_fraction": 0.0,
                "max_fall_over_rise": 0.0}
    dE = np.diff(x)
    rise = float(x[-1] - x[0])
    pos = np.sort(np.clip(dE, 0, None))[::-1]
    k80 = int(np.searchsorted(np.cumsum(pos), 0.8 * rise)) + 1 if rise > 0 else dE.size
    slow = dE < 0.05 * max(rise, 0.0) / dE.size
    edges = np.flatnonzero(np.diff(np.concatenate([[0], slow.astype(np.int8), [0]])))
    runs = [(int(s0), int(s1)) for s0, s1 in zip(edges[0::2], edges[1::2], strict=True)
            if s1 - s0 >= 0.01 * dE.size]
    plateaus = [{"t_start": lr * s0, "t_end": lr * s1, "E": float(x[(s0 + s1) // 2])}
                for s0, s1 in runs]
    fall = float(-np.clip(dE, None, 0).sum())
    return {**out, "f80": k80 / dE.size, "plateaus": plateaus,
            "plateau_fraction": sum(s1 - s0 for s0, s1 in runs) / dE.size,
            "max_fall_over_rise": fall / rise if rise > 0 else float("inf")}


def judge_staircase(series: dict[float, np.ndarray], *, lr: float) -> StaircaseVerdict:
    """Judge :data:`CLAIM` on ``{β: E}`` (rule :data:`RULE`)."""
    per = {f"{b:g}": describe(np.asarray(E, float), lr) for b, E in series.items()}
    ok = all(len(p["plateaus"]) >= 2 and p["plateau_fraction"] >= 0.25
             and p["max_fall_over_rise"] <= 1e-6 for p in per.values())
    bad = any(not p["plateaus"] or p["max_fall_over_rise"] > 1e-6 for p in per.values())
    v = Claim.NOT_REPRODUCED if bad else (Claim.REPRODUCED if ok else Claim.INCONCLUSIVE)
    checks: dict[str, dict[str, Any]] = {}
    for b, p in per.items():
        key = "beta_" + b.replace(".", "_")  # a dot would read as a nested check
        checks[f"{key}_plateaus"] = {
            "value": len(p["plateaus"]), "tolerance": "≥ 2", "passed": len(p["plateaus"]) >= 2,
            "rule": f"plateaus of the energy over its {p['records']} records up to the full "
                    "merge (runs of >= 1% of the records with increments < 0.05 of the mean "
                    "one): a staircase has several; none (a smooth rise) refutes the claim"}
        checks[f"{key}_plateau_fraction"] = {
            "value": p["plateau_fraction"], "tolerance": "≥ 0.25",
            "passed": p["plateau_fraction"] >= 0.25,
            "rule": "fraction of the records on a plateau: long plateaus (metastable states)"}
        checks[f"{key}_max_fall_over_rise"] = {
            "value": p["max_fall_over_rise"], "tolerance": "≤ 1e-6",
            "passed": p["max_fall_over_rise"] <= 1e-6,
            "rule": "total fall of the energy over its rise: gradient ascent does not lower "
                    "the energy beyond round-off; more refutes the claim"}
    return StaircaseVerdict(v, per, RULE, checks)


def control_ramp(series: dict[float, np.ndarray], *, lr: float) -> StaircaseVerdict:
    """Negative control: each series replaced by a straight ramp; must not be reproduced.

    The ramp joins the first and the last energy before the full merge over the same
    records: the same rise, no plateaus.
    """
    ramps = {}
    for b, E in series.items():
        E = np.asarray(E, float)
        m = min(max(describe(E, lr)["records"], 3), E.size)  # a series of < 3 records
        ramps[b] = np.linspace(E[0], E[m - 1], m)
    return judge_staircase(ramps, lr=lr)


def _one(item: tuple[StaircaseOptions, float]) -> dict[str, Any]:
    opts, beta = item
    t0 = time.perf_counter()
    E, info = staircase_energy(published_theta0(opts.beta0), beta, lr=opts.lr,
                               max_iter=opts.max_iter, merge_grad=opts.merge_grad,
                               merge_dist=opts.merge_dist)
    return {"beta": beta, "E": E, "info": info, "wall_s": time.perf_counter() - t0}


def run_staircase(opts: StaircaseOptions | None = None) -> list[dict[str, Any]]:
    """Every β, spread over MPI ranks (:func:`~wflow.infra.parallel.parallel_map`)."""
    opts = opts or StaircaseOptions()
    return parallel_map(_one, [(opts, float(b)) for b in opts.betas])


def summarize(opts: StaircaseOptions, runs: list[dict[str, Any]], v: StaircaseVerdict,
              control: StaircaseVerdict) -> dict[str, Any]:
    """``summary.json`` content."""
    return {"paper": PAPER, "claim": CLAIM, "settings": asdict(opts), "verdict": v.verdict,
            "verdict_rule": v.rule, "per_beta": v.per_beta, "checks": v.checks,
            "control_ramp": control.verdict,
            "nan_from_step": {f"{r['beta']:g}": r["info"]["nan_from"] + 1
                              if r["info"]["nan_from"] >= 0 else None for r in runs},
            "merges": {f"{r['beta']:g}": r["info"]["merges"] for r in runs},
            "wall_s": {f"{r['beta']:g}": r["wall_s"] for r in runs},
            "finding": "once the five tokens have merged (E = 1) the published step divides "
                       "0 by 0: every later angle and energy is NaN, so only the first "
                       "records of the 10^6 carry the staircase",
            "differences_from_published": [
                "none in the arithmetic (NumPy, published order); the NaN tail after the "
                "full merge is filled instead of computed (exact)"]}


def write_staircase(stage: Path, opts: StaircaseOptions, runs: list[dict[str, Any]],
                    v: StaircaseVerdict, *, every: int = 10) -> list[str]:
    """Write ``metastable_staircase.npz``, ``.csv`` and ``.png`` into ``stage``.

    The npz holds each series up to its last finite record, the csv every ``every``-th
    record, the figure the published plot and the staircase window.
    """
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    from ..infra.io import save_npz, write_csv

    arrays: dict[str, np.ndarray] = {"betas": np.array([r["beta"] for r in runs]),
                                     "plateau_levels": plateau_levels(5)}
    cols: dict[str, np.ndarray] = {}
    colors = [(0.8, 0.2, 0.8), (0.2, 0.2, 0.8), (0.2, 0.6, 0.2), (0.8, 0.8, 0.0),
              (0.8, 0.4, 0.0), (0.8, 0.2, 0.2)]  # the published colour order (407-422)
    fig, axes = plt.subplots(1, 2, figsize=(11, 4))
    tmax = 0.0
    for i, r in enumerate(runs):
        E = r["E"]
        b = f"{r['beta']:g}"
        fin = np.flatnonzero(np.isfinite(E))
        m = int(fin[-1]) + 1 if fin.size else 0
        arrays[f"E_{b}"] = E[:m]
        arrays[f"nan_from_{b}"] = np.int64(m)
        t = opts.lr * np.arange(E.size)
        cols[f"E_{b}"] = E[::every]
        c = colors[i % len(colors)]
        axes[0].plot(t[::every], E[::every], color=c, label=f"β = {b}")
        axes[1].plot(t[:m], E[:m], color=c, label=f"β = {b}")
        tmax = max(tmax, opts.lr * m)
    cols = {"t": opts.lr * np.arange(opts.max_iter)[::every], **cols}
    for lv in plateau_levels(5):
        axes[1].axhline(lv, color="0.85", lw=0.6, zorder=0)
    axes[0].set_title("as published: E against lr·k (NaN after the full merge)", fontsize=9)
    axes[1].set_title(f"the staircase window, plateau levels Σm²/n² — {v.verdict.upper()}",
                      fontsize=9)
    axes[1].set_xlim(0, tmax * 1.02 if tmax > 0 else 1)
    for ax in axes:
        ax.set_xlabel("rescaled time lr·k")
        ax.set_ylabel("energy")
        ax.legend(fontsize=7)
    fig.suptitle("GKPR staircase — claim: " + CLAIM, fontsize=8, wrap=True)
    fig.tight_layout()
    fig.savefig(stage / "metastable_staircase.png", dpi=110)
    plt.close(fig)
    save_npz(stage / "metastable_staircase.npz", **arrays)
    write_csv(stage / "metastable_staircase.csv", cols)
    return ["metastable_staircase.npz", "metastable_staircase.csv", "metastable_staircase.png"]


def reproduce(*, out: str | Path, options: StaircaseOptions | None = None,
              overwrite: bool = True,
              adaptive: Callable[[StaircaseOptions], dict[str, Any]] | None = None) -> Any:
    """Run every β, judge and write ``out/``; returns the ``StudyResult``.

    ``adaptive``: a comparison run on the same options whose dict is added to
    ``summary.json`` under ``adaptive`` and named in the report (``wflow reproduce
    metastable_staircase --adaptive``:
    :func:`wflow.published.staircase_flow.adaptive_summary`, the flow's merge times against
    the published ones). The published runs, checks and verdict are unchanged by it.
    """
    from ..infra.io import prepare_output

    opts = options or StaircaseOptions()
    out = prepare_output(out, overwrite=overwrite)
    runs = run_staircase(opts)
    series = {r["beta"]: r["E"] for r in runs}
    v = judge_staircase(series, lr=opts.lr)
    ctl = control_ramp(series, lr=opts.lr)
    summary = summarize(opts, runs, v, ctl)
    extra = []
    if adaptive is not None:
        summary["adaptive"] = adaptive(opts)
        extra = ["", f"Adaptive flow: {summary['adaptive']['sentence']}"]
    per = "; ".join(f"β = {b}: {len(p['plateaus'])} plateaus over "
                    f"{100 * p['plateau_fraction']:.0f}% of {p['records']} records"
                    for b, p in v.per_beta.items())
    sentence = (f"metastable_staircase: published claim {v.verdict.upper()} ({per}); "
                f"control with straight ramps: {ctl.verdict}.")
    report = "\n".join([
        *report_head("metastable_staircase", v.verdict, paper=PAPER, claim=CLAIM, rule=RULE),
        f"Measured: {per}.", "",
        "| β | full merge at step | plateaus (t_start–t_end: E) | f80 |", "|---|---|---|---|",
        *[f"| {b} | {p['full_merge_record'] + 1} | "
          + ", ".join(f"{q['t_start']:.4f}–{q['t_end']:.4f}: {q['E']:.4f}"
                      for q in p["plateaus"]) + f" | {p['f80']:.3f} |"
          for b, p in v.per_beta.items()],
        "", f"Finding: {summary['finding']}.", "",
        f"Negative control (straight ramps): {ctl.verdict}.", *extra]) + "\n"
    return write_reproduction(out, "metastable_staircase", summary, sentence,
                              v.verdict == Claim.REPRODUCED, report=report,
                              files=lambda stage: write_staircase(stage, opts, runs, v))
