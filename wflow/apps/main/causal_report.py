"""The causal main job's files: ``report.md``, the figure and the raw data (private).

Part of :mod:`wflow.apps.main.causal` (its docstring describes the job; the degree and the
reason the JKO is not computed are read from the summary, so this module does not import
it); rank 0 writes.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np

__all__: list[str] = []


def _figure(plt, mom: dict):
    """Per position bin: the particles' mean moments (± 2 s.e.) and the kinetic ones at T."""
    arr = mom["_arrays"]
    B, K = mom["bins"], (mom["degree"] + 1) ** 2
    pT = arr["particles_T"]  # (R, B, K)
    mean, se = pT.mean(axis=0), pT.std(axis=0, ddof=1) / np.sqrt(pT.shape[0])
    kin_T = arr["kinetic_T"][1:].reshape(B, K - 1)
    kin_0 = arr["kinetic_0"][1:].reshape(B, K - 1)
    fig, axes = plt.subplots(1, B, figsize=(min(3.2 * B, 16), 3.4), squeeze=False,
                             sharey=True)
    k = np.arange(1, K)
    for b, ax in enumerate(axes[0]):
        ax.plot(k, kin_0[b], "s", color="0.7", ms=4, label="kinetic, t = 0")
        ax.plot(k, kin_T[b], "o", mfc="none", color="C0", label="kinetic, T")
        ax.errorbar(k + 0.15, mean[b, 1:], yerr=2 * se[b, 1:], fmt=".", color="C3",
                    label=f"particles, T (mean ± 2 s.e., R = {pT.shape[0]})")
        ax.set_title(f"bin {b}: s ∈ ({b / B:.2f}, {(b + 1) / B:.2f}]", fontsize=9)
        ax.set_xlabel("moment k (real Y_k, degree ≤ 2)")
        ax.axhline(0.0, color="0.85", lw=0.8)
    axes[0][0].set_ylabel("moment")
    axes[0][0].legend(fontsize=7)
    return fig


def _write(stage: Path, summary: dict, p: dict, kin: Any, parts: dict, mom: dict, *,
           render: bool) -> None:
    from ...infra.io import history_columns, save_npz, write_csv, write_json
    from ..report import _fig

    pres = parts["res"]
    write_csv(stage / "diagnostics_particles.csv", history_columns(pres.t, pres.history))
    mean = np.asarray(kin.history["mean"])  # (n_t, S, 3)
    nt, S = kin.mass.shape
    write_csv(stage / "diagnostics_kinetic.csv", {
        "t": np.repeat(kin.t, S), "slice": np.tile(np.arange(S), nt), "s": np.tile(kin.s, nt),
        "mass": kin.mass.ravel(), "mean_x": mean[..., 0].ravel(),
        "mean_y": mean[..., 1].ravel(), "mean_z": mean[..., 2].ravel()})
    save_npz(stage / "slices.npz", t=kin.t, s=kin.s, rho=kin.rho, mass=kin.mass,
             centroids=kin.centroids, areas=kin.areas)
    save_npz(stage / "trajectory.npz", t=pres.t, x=pres.trajectory[0])
    arr = mom["_arrays"]
    save_npz(stage / "causal_moments.npz", **arr)
    figs = [_fig(stage / "causal_moments.png", lambda plt: _figure(plt, mom))] if render else []
    summary["outputs"] = {
        "slices.npz": "kinetic: t (n,), s (S,), rho (n, S, M) the density of each slice "
                      "(Σ_K ρ_K |K| = 1), mass (n, S), centroids (M, 3), areas (M,)",
        "trajectory.npz": "the main particle run: t (n,), x (n, N, 3), tokens in array "
                          "(position) order",
        "causal_moments.npz": "particles_T, particles_0 (R, B, (L+1)²): each replicate's "
                              "per-bin mean moments; particles_T_cv (R, 1 + B((L+1)² − 1)): "
                              "their control-variate values at T (flat); kinetic_T, "
                              "kinetic_0, kinetic_error_T (1 + B((L+1)² − 1),): the bins' "
                              "kinetic moments (mass first) and the reference's error",
        "diagnostics_kinetic.csv": "one row per output time and slice",
        "diagnostics_particles.csv": "the main particle run's records",
        "report.md": "the report", **({"causal_moments.png": "the figure"} if figs else {})}
    _report(stage, summary, figs)
    write_json(stage / "summary.json", summary)  # last: a folder with it is complete


def _report(stage: Path, s: dict, figs: list[str]) -> None:
    from ...infra.io import atomic_write_text
    from ..report import _cell, _num

    m = s["causal_moments"]
    lines = [
        "# wflow run — causal attention: particles vs the kinetic limit", "",
        f"**Status: {s['status']}**" + (f" — {s['message']}" if s["message"] else ""), "",
        f"Mask `{s['mask']}`, ALiBi limit slope λ = {s['alibi']['lambda']:g} "
        f"({s['alibi']['source']}; token slope {s['alibi']['token_slope']:g}), "
        f"{s['attention']} attention, {s['heads']} head(s); {s['n_particles']} tokens, "
        f"{s['slices']} slices on {s['mesh']['cells']} cells.", "",
        f"JKO and EDI: not computed — {s['jko']['reason']}.", "",
        "| phase | status | message |", "|---|---|---|",
        *(f"| {k} | {v['status']} | {_cell(v['message']) or '—'} |"
          for k, v in s["statuses"].items()), "",
        "| quantity | value | tolerance | verdict | meaning |", "|---|---|---|---|---|",
        *(f"| {_cell(v['quantity'])} | {_num(v['value'])} | {v['tolerance']} | "
          f"{v['verdict']} | {_cell(v['meaning'])} |" for v in s["verdicts"]), "",
        f"The moment test: {m['bins']} position bins ({m['slices_per_bin']} slices each) × "
        f"{(m['degree'] + 1) ** 2 - 1} moments, {m['replicates']} replicates; at T "
        f"max|t| = {m['max_t_T']:.2f} (critical {m['t_crit_T']:.2f}; per bin "
        f"{', '.join(f'{x:.2f}' for x in m['t_per_bin_T'])}), at t = 0 "
        f"{m['max_t_0']:.2f} (critical {m['t_crit_0']:.2f}). Control variates "
        f"({m['controls']}, degree ≤ {m['control_degree']}) scale the s.e. at T by "
        f"{m['cv_se_ratio']:.2f} (without them max|t| = {m['max_t_T_plain']:.2f}). Monte "
        f"Carlo s.e. median "
        f"{m['se_mc_median']:.2e}; the kinetic reference's error max {m['ref_error_max']:.2e} "
        f"(mesh {m['mesh_error_max']:.2e} against {m['cells_coarse']} cells, slices "
        f"{m['slice_error_max']:.2e} against {2 * s['slices']} slices); smallest detectable "
        f"moment error {m['detectable_T']:.2e}.", "",
        *(f"![{f}]({f})" for f in figs), "",
        f"Wall time {s['wall_time_s']['total']:.1f} s.", ""]
    atomic_write_text(stage / "report.md", "\n".join(lines))
