"""Figures and the Markdown report of the main job (plotting imported lazily).

* :func:`write_report` — ``report.md``: the overall status and every phase's status with
  its reason; a table of every key number with its meaning, its tolerance and its
  verdict (PASS / FAIL / WARN / "defect (expected)", from ``summary["verdicts"]``); what
  the flow is and what its EDI residual means (an error for an exact gradient flow, the
  model's defect for the transformer flow with different softmax heads); the JKO step
  and the ``τ/h`` refinement table; figures: density snapshots, energy and ``G²`` vs
  time, the balance terms vs time, ``W_2`` vs time against the sampling baseline and
  ``n^{-1/2}``, and the refinement orders.
"""

from __future__ import annotations

import logging
from pathlib import Path
from typing import Any

import numpy as np

from ..infra.io import atomic_write_text
from ..status import Status, Verdict

__all__ = ["write_report"]

logger = logging.getLogger(__name__)


def _fig(path: Path, draw) -> str:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig = draw(plt)
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)
    return path.name


def _cumtrapz(t: np.ndarray, y: np.ndarray) -> np.ndarray:
    out = np.zeros_like(t, dtype=float)
    out[1:] = np.cumsum(0.5 * np.diff(t) * (y[1:] + y[:-1]))
    return out


def write_report(stage: Path, *, summary: dict, pde: Any, particles: Any, jko: Any,
                 compare: dict, mesh: Any, render: bool = True) -> list[str]:
    """Write figures and ``report.md`` into ``stage``; returns the figure file names."""
    figs: list[str] = []
    # density snapshots (first, middle, last output time), shared colour range
    snaps: list[tuple[float, str]] = []
    if render:
        from .jobs.pde import render_snapshots

        idx = sorted({0, len(pde.t) // 2, len(pde.t) - 1})
        try:
            files = render_snapshots(mesh, pde.t[idx], pde.rho[idx], stage, prefix="density",
                                     shared_range=True)
        except Exception as exc:  # noqa: BLE001 - a missing GL stack must not kill a run
            logger.warning("render: pyvista snapshots failed (%s); skipping", exc)
            files = []
        for k, f in zip(idx, files, strict=False):
            snaps.append((float(pde.t[k]), f.name))
            figs.append(f.name)
    st = pde.steps

    def energy(plt):
        fig, ax = plt.subplots(1, 2, figsize=(10, 3.6))
        ax[0].plot(pde.t, pde.history["E"], "o-", label="PDE")
        ax[0].plot(particles.t, particles.history["E"][0], "--", label="particles")
        if jko is not None:
            ax[0].plot(jko.t, jko.history["E"], "s:", label="JKO" if pde.options.flow ==
                       "surrogate" else "JKO (surrogate flow)")
        ax[0].set(xlabel="t", ylabel="E", title="energy")
        ax[0].legend()
        ax[1].semilogy(pde.t, pde.history["G2"], "o-", label="PDE")
        ax[1].semilogy(particles.t, particles.history["G2"][0], "--", label="particles")
        ax[1].set(xlabel="t", ylabel="G²", title="slope G²")
        ax[1].legend()
        return fig

    if not render:  # no figure at all: report.md says so instead of linking them
        _write_md(stage, summary, snaps, figures=False)
        return figs
    figs.append(_fig(stage / "energy.png", energy))

    defect = summary["edi"]["pde"]["meaning"] == "defect"
    figs.append(_fig(stage / "edi_balance.png",
                     lambda plt: edi_figure(plt, st, sign=pde.sign or 1, defect=defect)))

    figs.append(_fig(stage / "w2.png", lambda plt: w2_figure(plt, compare, summary["w2"])))
    tab = summary.get("jko_refinement")
    if tab is not None and len(tab["rows"]) > 1:
        tol = summary["checks"]["jko"]["edi"]["tolerance"]
        figs.append(_fig(stage / "jko_refinement.png",
                         lambda plt: refinement_figure(plt, tab, tolerance=tol)))
    _write_md(stage, summary, snaps)
    return figs


def edi_figure(plt, st: dict, *, sign: int, defect: bool):
    """The PDE's energy–dissipation balance: its terms above, ``|residual|`` below (log).

    ``st``: the PDE's per-step records (``t``, ``E``, ``speed2``, ``slope2``, ``dEdt_w``).
    """
    ts = np.asarray(st["t"])
    # two panels: the balance's terms are O(E), the residual is orders of magnitude
    # smaller (invisible on their scale): |residual| on its own log axis below
    fig, ax = plt.subplots(2, 1, figsize=(6.4, 5.4), sharex=True,
                           gridspec_kw={"height_ratios": [3, 2]})
    E = np.asarray(st["E"])
    diss = _cumtrapz(ts, 0.5 * (np.asarray(st["speed2"]) + np.asarray(st["slope2"])))
    work = _cumtrapz(ts, np.asarray(st["dEdt_w"]))
    ax[0].plot(ts, E - E[0], lw=3, alpha=0.5, label="E(t) − E(0)")
    ax[0].plot(ts, work, label="∫ ∂_tE")
    ax[0].plot(ts, sign * diss, "--", label="±∫ (½|μ'|² + ½|∂E|²)")
    res = np.abs(E - E[0] - work - sign * diss)
    what = "|EDI defect| (model, absolute)" if defect else "|EDI residual| (absolute)"
    ax[0].set(title="EDI balance (PDE): defect of the transformer flow"
              if defect else "EDI balance (PDE)")
    ax[0].legend(fontsize=8)
    pos = res > 0
    if pos.any():
        ax[1].semilogy(ts[pos], res[pos], "k", lw=0.9, label=what)
    scale = np.abs(diss)
    if (scale > 0).any():
        ax[1].semilogy(ts[scale > 0], scale[scale > 0], color="C2", ls=":", lw=0.9,
                       label="∫ (½|μ'|² + ½|∂E|²) (its scale)")
    ax[1].set(xlabel="t", ylabel="absolute")
    ax[1].legend(fontsize=8)
    return fig


def w2_figure(plt, compare: dict, w: dict):
    """W₂ of the particles against the PDE and, in its own panel, of the JKO.

    The particles' panel carries their sampling level, its tolerance and ``n^(-1/2)``;
    ``w``: ``summary["w2"]``.
    """
    # one panel per comparison: the sampling level, its tolerance and n^(-1/2) belong
    # to the particles, not to the JKO
    jko_cmp = "w2_jko_vs_pde" in compare
    fig, axs = plt.subplots(1, 2 if jko_cmp else 1, figsize=(10, 3.8) if jko_cmp
                            else (6.4, 3.8), squeeze=False)
    ax = axs[0, 0]
    label = w.get("label", "W₂ particles")
    ax.plot(compare["t"], compare["w2_particles_vs_pde"], "o-", label=f"{label} vs PDE")
    if w.get("subsample_floor"):
        ax.axhline(w["subsample_floor"], color="C3", ls=":", lw=0.8,
                   label="the subsample's sampling floor")
    pw = compare.get("w2_particles")
    if pw is not None and pw.sliced is not None:
        ax.plot(compare["t"], pw.sliced, "^-", color="C2", ms=3, lw=0.8,
                label=f"sliced W₂ (all {pw.n} particles) vs PDE")
    ax.axhline(w["particles_vs_pde_initial"], color="C0", ls=":", lw=1,
               label="sampling level at t = 0")
    ax.axhline(w["growth_tolerance"] * w["particles_vs_pde_initial"], color="C0",
               ls="--", lw=0.8, label=f"tolerance ({w['growth_tolerance']:g}× t = 0)")
    sub = w.get("points", 0) and w.get("subsampled")
    ax.axhline(w.get("points_inv_sqrt", w["n_inv_sqrt"]), color="grey", ls="-.", lw=1,
               label="m^(-1/2), m the particles used" if sub else "n^(-1/2)")
    ax.set(xlabel="t", ylabel="W₂ (rad)", title=f"{label} against the PDE", ylim=(0, None))
    ax.legend(fontsize=7, loc="lower right")
    if jko_cmp:
        ref = ("surrogate PDE" if w.get("jko_reference") == "pde_surrogate" else "PDE")
        ax = axs[0, 1]
        ax.plot(compare["t_jko"], compare["w2_jko_vs_pde"], "s--", color="C1",
                label=f"JKO vs {ref}")
        ax.set(xlabel="t", ylabel="W₂ (rad)", title=f"JKO against the {ref}",
               ylim=(0, None))
        ax.legend(fontsize=7, loc="lower right")
    return fig


def refinement_figure(plt, tab: dict, *, tolerance: float):
    """The ``τ/h`` table: errors against the PDE, and the EDI check with its tolerance.

    ``tab``: ``summary["jko_refinement"]``; ``tolerance``: the JKO EDI check's.
    """
    # the errors against the PDE (left) and the EDI check with its tolerance
    # (right): a tolerance applies to one curve only
    fig, ax = plt.subplots(1, 2, figsize=(9.6, 3.8))
    tau = [r["tau"] for r in tab["rows"]]
    ax[0].loglog(tau, [r["w2_max"] for r in tab["rows"]], "s-",
                 label=f"max W₂(JKO, PDE) (order {_fmt_order(tab['order_w2'])})")
    l1 = [r.get("l1_max", float("nan")) for r in tab["rows"]]
    if all(np.isfinite(l1)):
        ax[0].loglog(tau, l1, "^-", label="max L¹(JKO, PDE) (order "
                     f"{_fmt_order(tab.get('order_l1'))})")
    ax[0].loglog(tau, [tau_ / tau[0] * tab["rows"][0]["w2_max"] for tau_ in tau], "k:",
                 lw=0.8, label="slope 1")
    ax[0].set(xlabel="τ (h ∝ τ)", title="JKO against the PDE")
    ax[0].legend(fontsize=8)
    ax[1].loglog(tau, [r["edi_abs_relative"] for r in tab["rows"]], "o-", color="C2",
                 label=f"JKO Σ|EDI_k| relative (order {_fmt_order(tab['order_edi'])})")
    ax[1].axhline(tolerance, color="C2", ls="--", lw=0.8, label="its tolerance")
    ax[1].set(xlabel="τ (h ∝ τ)", title="JKO energy–dissipation check")
    ax[1].legend(fontsize=8)
    return fig


def _fmt_order(p: float | None) -> str:
    return "n/a" if p is None else f"{p:.2f}"


def _cell(text: str) -> str:
    """Table-cell text: a ``|`` (as in ``|∂E|²``) would end the Markdown cell."""
    return str(text).replace("|", "\\|")


def _num(v: Any) -> str:
    if v is None:
        return "—"
    if isinstance(v, str):
        return v
    return f"{v:.3g}" if abs(v) >= 1e-3 or v == 0 else f"{v:.2e}"


def _flow_statement(s: dict) -> list[str]:
    """What the flow is and what its EDI residual means (the words differ by flow)."""
    kind = s["edi"]["pde"]["meaning"]
    heads = f"{s['heads']} {s['attention']} head{'s' if s['heads'] > 1 else ''}"
    if s["flow"] == "surrogate":
        out = [f"**Flow: `surrogate`** — the effective-mobility flow v̂ = b̂ P∇ψ of {heads} "
               "(docs/theory.md §3), an exact weighted-Wasserstein gradient flow of E. The "
               "energy–dissipation identity (EDI) holds with equality, so every EDI "
               "residual below is a discretisation error and must be small; the JKO scheme "
               "discretises the same flow and is compared with the same PDE."]
    elif kind == "defect":
        out = [f"**Flow: `transformer`** — the transformer velocity v = P Σ_h w_h f_h of "
               f"{heads} with different normalisers. This flow is **not** a gradient flow "
               "of E (docs/theory.md §3): its EDI residual is the *defect* of the model — a "
               "measured "
               "property that does not shrink under refinement, not an error of the "
               "solvers. The accuracy of the PDE and particle runs is judged by the "
               "chain-rule residual instead. The JKO scheme always discretises the "
               "surrogate flow v̂ = b̂ P∇ψ, so it is compared with a second PDE run on v̂, "
               "not with the transformer PDE."]
    else:
        out = [f"**Flow: `transformer`** — the transformer velocity v = P Σ_h w_h f_h of "
               f"{heads}, which is here an exact gradient flow of E (one softmax "
               "normaliser, or USA/ReLU heads): the EDI residual is a discretisation "
               "error."]
        if kind == "undefined":
            out = [f"**Flow: `{s['flow']}`** with {heads} that are not value-aligned: the "
                   "EDI is not defined; the chain-rule residual is the accuracy check."]
    return out + [""]


def _yes_no(shrinks: bool | None) -> str:
    return "not judged (one row)" if shrinks is None else ("yes" if shrinks else "NO")


def _refinement_lines(tab: dict, *, figures: bool = True) -> list[str]:
    """The ``τ/h`` table of ``report.md``: rows, fitted orders, the OT cross-check."""
    thr = tab.get("thresholds", {})
    lines = [f"Joint refinement ({tab['rule']}): W₂ and L¹ of the JKO against the PDE and the "
             "JKO Σ|EDI_k| (relative) must shrink, at first order in τ.", "",
             "| cells | h | τ | steps | τ\\|v\\|max/h | status | locked | "
             "JKO Σ\\|EDI_k\\| (relative) | max W₂(JKO, PDE) | max L¹(JKO, PDE) |",
             "|---|---|---|---|---|---|---|---|---|---|"]
    for r in tab["rows"]:
        lines.append(f"| {r['cells']} | {r['h']:.4f} | {r['tau']:.4g} | {r['steps']} | "
                     f"{_num(r['cells_per_step'])} | {r['status']} | {r['locked_steps']} | "
                     f"{_num(r['edi_abs_relative'])} | {_num(r['w2_max'])} | "
                     f"{_num(r.get('l1_max'))} |")

    def order(key: str) -> str:
        t = thr.get(f"order_{key}")
        return _fmt_order(tab.get(f"order_{key}")) + (f" (pass >= {t:g})" if t else "")

    def rise(key: str) -> str:
        t = thr.get(f"rise_{key}")
        return _num(tab.get(f"rise_{key}")) + (f" (pass <= {t:g})" if t else "")

    def each(f) -> str:
        return f"W₂ {f('w2')}, L¹ {f('l1')}, JKO Σ|EDI_k| {f('edi')}"

    lines += ["", f"Fitted orders in τ (log–log, h ∝ τ): {each(order)}. Largest "
              f"level-to-level ratio (finer / coarser): {each(rise)}. Finest below the "
              f"coarsest: {each(lambda k: _yes_no(tab.get(f'settles_{k}')))}. Shrinking at "
              f"every level (reported, not judged): "
              f"{each(lambda k: _yes_no(tab.get(f'shrinks_{k}')))}. The verdicts above judge "
              "each order and the rise <= RISE_MAX with the finest below the coarsest.", ""]
    ot = tab.get("ot_crosscheck")
    if ot is not None:
        if ot.get("status") == Status.FAILED:
            lines += [f"OT cross-check on {ot['cells']} cells: failed ({_cell(ot['message'])}).",
                      ""]
        else:
            fv = tab["rows"][0]
            lines += [f"OT cross-check (the coarsest level once more with `scheme = \"ot\"`, "
                      f"not a row of the fit): {ot['cells']} cells, τ = {ot['tau']:.4g}, "
                      f"status {ot['status']}, {ot['locked_steps']} locked steps, "
                      + (f"up to {ot['empty_cells']} of {ot['cells']} cells empty "
                         "(the OT density speckles), " if "empty_cells" in ot else "")
                      + f"max W₂ "
                      f"{_num(ot['w2_max'])}, max L¹ {_num(ot['l1_max'])}, Σ|EDI_k| "
                      f"{_num(ot['edi_abs_relative'])} (FV on the same level: W₂ "
                      f"{_num(fv['w2_max'])}, L¹ {_num(fv.get('l1_max'))}).", ""]
    if figures and len(tab["rows"]) > 1:
        lines += ["![JKO refinement](jko_refinement.png)", ""]
    return lines


def _write_md(stage: Path, s: dict, snaps: list[tuple[float, str]], *,
              figures: bool = True) -> None:
    status = s["status"]
    warns = [v["quantity"] for v in s.get("verdicts", [])
             if v["verdict"] in (Verdict.WARN, Verdict.INCONCLUSIVE)]
    logged = s.get("warnings") or []
    head = (f" — {s['message']}" if s["message"] else
            f" — with warnings: {'; '.join(warns)} (see the verdicts below)." if warns else
            " — every check below passed.")
    if logged:
        head += (f" {len(logged)} warning{'s were' if len(logged) > 1 else ' was'} logged "
                 "during the run: see \"Warnings logged\" below.")
    lines = ["# wflow run report", "",
             f"**Status: {status.upper()}**" + head, "",
             f"Mesh of {s['mesh']['cells']} cells; {s['n_particles']} particles; "
             f"T = {s['scenario'].get('pde', {}).get('T', '?')}; wflow "
             f"{s['provenance']['wflow']}; wall time {s['wall_time_s']['total']:.1f} s.", ""]
    lines += _flow_statement(s)
    if logged:
        lines += ["## Warnings logged", "",
                  "Every warning a phase logged (also printed on the terminal), with the "
                  "phase that logged it; a warning is not a failed check, but says where a "
                  "number needs care.", "", "| phase | warning |", "|---|---|"]
        lines += [f"| {w['phase']} | {_cell(w['message'])} |" for w in logged] + [""]
    lines += ["## Phase statuses", "", "| phase | status | reason |", "|---|---|---|"]
    for name, st in s["statuses"].items():
        lines.append(f"| {name} | {st['status']} | {_cell(st['message'] or '—')} |")
    lines += ["", "Statuses: `success` (finite, every accuracy check within tolerance), "
              "`inaccurate` (finite, but an accuracy check failed: do not use the numbers), "
              "`locked` (JKO: no step moved the measure), `not_converged` (JKO: an inner "
              "solve missed its gap tolerance), `failed` (non-finite; nothing written). "
              "Tolerances: chain-rule residual 0.1^q for a scheme of balance order q "
              "(docs/guide/main_job.md, section \"Statuses and tolerances\").", ""]
    lines += ["## Key numbers: meaning, tolerance, verdict", "",
              "| quantity | value | tolerance | verdict |", "|---|---|---|---|"]
    for v in s["verdicts"]:
        verdict = (f"**{v['verdict']}**" if v["verdict"] in (Verdict.FAIL, Verdict.WARN)
                   else v["verdict"])
        lines.append(f"| {_cell(v['quantity'])} | {_num(v['value'])} | "
                     f"{_cell(v['tolerance'])} | {verdict} |")
    lines += ["", "What each number means:", ""]
    lines += [f"* **{v['quantity']}** — {v['meaning']}" for v in s["verdicts"]]
    lines += [""]
    tab = s.get("jko_refinement")
    if "jko_tau" in s:
        lines += ["## JKO step and refinement", "", f"JKO step: {s['jko_tau']['what']}.", ""]
    if tab is not None:
        lines += _refinement_lines(tab, figures=figures)
    if snaps:
        lines += ["## Density on the sphere", ""]
        lines += [f"![density at t = {t:.3g}]({name})" for t, name in snaps] + [""]
    if figures:
        lines += ["## Energy and slope", "", "![energy and G²](energy.png)", "",
                  "## Energy–dissipation balance", "", "![EDI balance](edi_balance.png)", "",
                  "## Wasserstein distances", "", "![W2](w2.png)", ""]
    else:
        lines += ["No figures: `[run] render = false`.", ""]
    lines += ["Raw data: `density.npz`, `trajectory.npz`, `diagnostics_*.csv`, `w2*.csv`; "
              "every number above is in `summary.json` (`status`, `statuses`, `verdicts`, "
              "`checks`, `edi`, `w2`, `jko_refinement`).", ""]
    atomic_write_text(stage / "report.md", "\n".join(lines))
