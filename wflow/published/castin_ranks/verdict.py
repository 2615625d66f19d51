"""The reproduction's runs, its verdict on the rank claim, its negative control and its files.

Part of :mod:`wflow.published.castin_ranks` (the package re-exports its names).
"""

from __future__ import annotations

from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from ...infra.parallel import parallel_map
from ...status import Claim
from ..claims import ClaimOutcome, report_head, write_reproduction
from .batched import run_case_dim
from .options import CLAIM, PAPER, RankOptions


def run_ranks(opts: RankOptions | None = None) -> dict[str, dict[int, dict[str, Any]]]:
    """Every case and dimension, spread over MPI ranks; ``{case: {d: run_case_dim(...)}}``."""
    opts = opts or RankOptions()
    items = [(opts, c, j) for c in opts.cases for j in range(len(opts.dims))]
    out: dict[str, dict[int, dict[str, Any]]] = {}
    for r in parallel_map(run_case_dim, items):
        out.setdefault(r["case"], {})[r["d"]] = r
    return out


RULE = ("over the converged draws of the published solver, and over every attempted draw "
        "of wflow's exact solver: REPRODUCED when no draw has rank > ceil(d/2) with either "
        "solver (published rank: eigenvalues > 0.1; exact: the limit's settled directions); "
        "NOT REPRODUCED when the exact limit has more than ceil(d/2) settled directions for "
        "some draw; INCONCLUSIVE when only the published solver finds such draws "
        "(exceptions of a finite stopping time), when a draw's exact rank may exceed "
        "ceil(d/2) through directions not settled by t = 1e10, or a dimension has fewer "
        "converged draws than asked")


@dataclass(frozen=True)
class RankVerdict(ClaimOutcome):
    """Verdict on the claim; ``reasons`` lists the counts it rests on (a :class:`ClaimOutcome`).

    ``verdict``: a :class:`~wflow.status.Claim` (``"reproduced"``, ``"inconclusive"``,
    ``"not reproduced"``).

    ``checks``: the counts of :data:`RULE` per case and dimension as ``summary.json``
    checks ``{name: {value, tolerance, passed, rule}}`` (``{case}_d{d}_exact_rank``,
    ``_published_rank``, ``_unsettled``: draws above the bound, none allowed;
    ``_converged``: converged draws, at least the asked number): the claim is reproduced
    exactly when every check passes.
    """

    verdict: Claim
    reasons: tuple[str, ...]
    rule: str
    checks: dict[str, dict[str, Any]] = field(default_factory=dict)


def judge_ranks(runs: dict[str, dict[int, dict[str, Any]]], n_per_dim: int,
                *, bound: Any = None) -> RankVerdict:
    """Judge :data:`CLAIM` (rule :data:`RULE`); ``bound(d)`` defaults to ``⌈d/2⌉``."""
    bound = bound or (lambda d: (d + 1) // 2)
    exc_pub = exc_exact = short = undetermined = 0
    reasons = []
    checks: dict[str, dict[str, Any]] = {}
    for cname, per_d in runs.items():
        for d, r in per_d.items():
            conv = [a for a in r["attempts"] if a["converged"]]
            hi_pub = sum(1 for a in conv if a["rank"] > bound(d))
            hi_ex = sum(1 for a in r["attempts"] if a.get("exact_rank", 0) > bound(d))
            undet = sum(1 for a in r["attempts"] if a.get("exact_rank", 0) <= bound(d)
                        < a.get("exact_rank", 0) + a.get("exact_unsettled", 0))
            exc_pub += hi_pub
            exc_exact += hi_ex
            undetermined += undet
            short += len(conv) < n_per_dim
            reasons.append(f"{cname} d={d}: {len(conv)} converged of {len(r['attempts'])} "
                           f"attempts, {hi_pub} with published rank > {bound(d)}, "
                           f"{hi_ex} with exact rank > {bound(d)}, {undet} whose exact "
                           f"rank may exceed {bound(d)} (directions not settled by "
                           "t = 1e10)")
            b, key = bound(d), f"{cname}_d{d}"
            checks[f"{key}_exact_rank"] = {
                "value": hi_ex, "tolerance": "0 draws", "passed": hi_ex == 0,
                "rule": f"attempted draws whose exact limit (wflow's solver) has more than "
                        f"{b} settled directions; one refutes the claim (rank <= {b})"}
            checks[f"{key}_published_rank"] = {
                "value": hi_pub, "tolerance": "0 draws", "passed": hi_pub == 0,
                "rule": f"converged draws of the published projected Euler with rank > {b} "
                        "(eigenvalues > tol_rank): exceptions of its finite stopping time "
                        "(inconclusive, not a refutation)"}
            checks[f"{key}_unsettled"] = {
                "value": undet, "tolerance": "0 draws", "passed": undet == 0,
                "rule": f"draws whose exact rank may exceed {b} through directions not "
                        "settled by t = 1e10 (inconclusive)"}
            checks[f"{key}_converged"] = {
                "value": len(conv), "tolerance": f"≥ {n_per_dim} draws",
                "passed": len(conv) >= n_per_dim,
                "rule": "converged draws of the published solver (published rule: "
                        "||R||_F < tol within max_iter steps) against the draws asked; "
                        "fewer: inconclusive"}
    if exc_exact:
        v = Claim.NOT_REPRODUCED
    elif exc_pub or short or undetermined:
        v = Claim.INCONCLUSIVE
    else:
        v = Claim.REPRODUCED
    return RankVerdict(v, tuple(reasons), RULE, checks)


def summarize(opts: RankOptions, runs: dict[str, dict[int, dict[str, Any]]],
              v: RankVerdict, control: RankVerdict) -> dict[str, Any]:
    """``summary.json`` content: histograms of both solvers, counts, verdict."""
    table: dict[str, Any] = {}
    for cname, per_d in runs.items():
        table[cname] = {}
        for d, r in per_d.items():
            conv = [a for a in r["attempts"] if a["converged"]]
            hist = np.bincount(r["ranks"], minlength=d + 1).tolist()
            ex = [a["exact_rank"] for a in r["attempts"] if "exact_rank" in a]
            ext = [a["exact_rank_threshold"] for a in conv if "exact_rank_threshold" in a]
            differ = sum(1 for a in conv if "exact_rank_threshold" in a
                         and a["exact_rank_threshold"] != a["rank"])
            table[cname][str(d)] = {
                "published_histogram": hist,
                "exceptions": r["exceptions"],
                "attempts": len(r["attempts"]),
                "converged": len(conv),
                "iterations_total": int(sum(a["iterations"] for a in r["attempts"])),
                "exact_rank_histogram_all_attempts":
                    np.bincount(ex, minlength=d + 1).tolist() if ex else None,
                "exact_threshold_histogram_converged":
                    np.bincount(ext, minlength=d + 1).tolist() if ext else None,
                "published_vs_exact_threshold_rank_differ": differ,
                "exact_unsettled_attempts": sum(1 for a in r["attempts"]
                                                if a.get("exact_unsettled", 0)),
                "wall_s": r["wall_s"],
                "euler_steps_published_loop": r.get("path_steps"),
                "euler_steps_integrated": r.get("lane_steps"),
            }
    return {"paper": PAPER, "claim": CLAIM, "settings": asdict(opts), "verdict": v.verdict,
            "verdict_rule": v.rule, "reasons": list(v.reasons), "checks": v.checks,
            "control_bound_floor_d_over_2": control.verdict, "cases": table,
            "differences_from_published": [
                "none in the projected-Euler part (same NumPy operations and streams; "
                "RandomState(seed) instead of the global np.random.seed, the same stream)",
                "wflow's exact solver added: closed-form limit for V = I, LSODA to t = 1e6 "
                "for random V",
                "the L2 self-attention rows of histograms.py are not reproduced here"]}


def control(runs: dict[str, dict[int, dict[str, Any]]], n_per_dim: int) -> RankVerdict:
    """Negative control: the rule with the false bound ``⌊d/2⌋`` instead of ``⌈d/2⌉``.

    For odd ``d`` the exact rank is ``⌈d/2⌉ > ⌊d/2⌋``: the control must not be reproduced.
    """
    return judge_ranks(runs, n_per_dim, bound=lambda d: d // 2)


def write_ranks(stage: Path, opts: RankOptions, runs: dict[str, dict[int, dict[str, Any]]],
                v: RankVerdict) -> list[str]:
    """``castin_ranks.npz``, ``castin_ranks.csv`` (one row per attempt) and the figure."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    from ...infra.io import save_npz, write_csv

    cols: dict[str, list[Any]] = {k: [] for k in ("case", "d", "index", "iterations",
                                                 "converged", "rank", "exact_rank",
                                                 "exact_rank_threshold", "exact_unsettled",
                                                 "lambda_max")}
    arrays: dict[str, np.ndarray] = {}
    for cname, per_d in runs.items():
        for d, r in per_d.items():
            arrays[f"{cname}_d{d}_ranks"] = np.asarray(r["ranks"], np.int64)
            arrays[f"{cname}_d{d}_iterations"] = np.asarray(
                [a["iterations"] for a in r["attempts"]], np.int64)
            arrays[f"{cname}_d{d}_eigenvalues"] = np.asarray(
                [a["eigenvalues"] for a in r["attempts"]])
            for a in r["attempts"]:
                cols["case"].append(0 if cname == "identity" else 1)
                cols["d"].append(d)
                cols["index"].append(a["index"])
                cols["iterations"].append(a["iterations"])
                cols["converged"].append(int(a["converged"]))
                cols["rank"].append(a.get("rank", -1))
                cols["exact_rank"].append(a.get("exact_rank", -1))
                cols["exact_rank_threshold"].append(a.get("exact_rank_threshold", -1))
                cols["exact_unsettled"].append(a.get("exact_unsettled", -1))
                cols["lambda_max"].append(float(np.max(a["eigenvalues"])))
    save_npz(stage / "castin_ranks.npz", **arrays)
    write_csv(stage / "castin_ranks.csv", {k: np.asarray(c) for k, c in cols.items()})
    cases = list(runs)
    fig, axes = plt.subplots(len(cases), len(opts.dims),
                             figsize=(3.4 * len(opts.dims), 2.9 * len(cases)), squeeze=False)
    for a_row, cname in zip(axes, cases, strict=True):
        for ax, d in zip(a_row, opts.dims, strict=True):
            r = runs[cname][d]
            bins = np.arange(0, d + 1.5) - 0.5
            ax.hist(r["ranks"], bins=bins, alpha=0.6, label="published solver")
            ex = [a["exact_rank"] for a in r["attempts"] if "exact_rank" in a]
            if ex:
                ax.hist(ex, bins=bins, histtype="step", color="k", lw=1.5,
                        label="exact limit (all attempts)")
            ax.set_xticks(bins[:-1] + 0.5)
            ax.set_title(f"V {cname}, d = {d}", fontsize=9)
            ax.set_xlabel("rank")
    axes[0, 0].legend(fontsize=7)
    fig.suptitle(f"Castin et al. rank histograms — claim: {CLAIM} — {v.verdict.upper()}",
                 fontsize=8, wrap=True)
    fig.tight_layout()
    fig.savefig(stage / "castin_ranks.png", dpi=110)
    plt.close(fig)
    return ["castin_ranks.npz", "castin_ranks.csv", "castin_ranks.png"]


def reproduce(*, out: str | Path, options: RankOptions | None = None,
              overwrite: bool = True) -> Any:
    """Run both solvers, judge and write ``out/``; returns the ``StudyResult``."""
    from ...infra.io import prepare_output

    opts = options or RankOptions()
    out = prepare_output(out, overwrite=overwrite)
    runs = run_ranks(opts)
    v = judge_ranks(runs, opts.n_per_dim)
    ctl = control(runs, opts.n_per_dim)
    summary = summarize(opts, runs, v, ctl)
    sentence = (f"castin_ranks: published claim {v.verdict.upper()} ({'; '.join(v.reasons)}); "
                f"control with the false bound floor(d/2): {ctl.verdict}.")
    report = "\n".join([
        *report_head("castin_ranks", v.verdict, paper=PAPER, claim=CLAIM, rule=RULE), "Measured:",
        *[f"- {r}" for r in v.reasons], "",
        "| case | d | published histogram (rank 0..d) | exact limit ranks (all attempts) |",
        "|---|---|---|---|",
        *[f"| {c} | {d} | {t['published_histogram']} | "
          f"{t['exact_rank_histogram_all_attempts']} |"
          for c, per in summary["cases"].items() for d, t in per.items()],
        "", f"Negative control (bound floor(d/2)): {ctl.verdict}."]) + "\n"
    return write_reproduction(out, "castin_ranks", summary, sentence,
                              v.verdict == Claim.REPRODUCED, report=report,
                              files=lambda stage: write_ranks(stage, opts, runs, v))
