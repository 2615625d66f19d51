"""The main job's ``summary.json`` and output files.

Part of the main job (:mod:`wflow.apps.main`).
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np

from ...infra.io import (
    check_finite,
    save_npz,
    write_csv,
    write_json,
)
from ...status import Status, Verdict, worst_status
from .refinement import _refinement_block
from .verdicts import W2_GROWTH_TOL, _verdicts


def _edi_block(bal: dict, kind: str) -> dict:
    """EDI residual (absolute and relative to the dissipation) of one solver.

    ``None`` where undefined: heads that are not value-aligned have no gradient-flow
    direction. ``meaning``: ``"identity"`` (a discretisation error), ``"defect"`` (of the
    transformer flow with different softmax heads) or ``"undefined"``
    (:func:`wflow.status.edi_kind`).
    """
    resid = float(bal.get("edi", float("nan")))
    diss = float(bal["dissipation"])
    defined = np.isfinite(resid)
    return {"residual": resid if defined else None,
            "relative": abs(resid) / abs(diss) if (defined and diss) else None,
            "dissipation": diss, "chain_residual": float(bal["chain"]), "dE": float(bal["dE"]),
            "meaning": kind if defined else "undefined"}


def _ito_block(check: dict | None) -> dict:
    """The particles' Itô energy balance (token diffusion ``D > 0``; ``checks.ito_balance``).

    ``mean`` (the mean over paths of ``E(T) − E(0) − ∫(power + ∂_tE) dt − D∫ΣΔ_SE dt``),
    ``tolerance`` (``z·SE`` + the weak bias bound + round-off), ``stderr``, ``bias_bound``,
    ``budget`` (``∫(|power| + |∂_tE| + D|ΣΔ_SE|) dt``), ``paths``, ``judged``,
    ``passed`` (null when not judged) and ``reason`` (why not judged).
    """
    check = check or {"judged": False, "reason": "not recorded by the particle phase"}
    keys = ("mean", "tolerance", "stderr", "bias_bound", "budget", "paths")
    return {**{k: check.get(k) for k in keys}, "judged": bool(check.get("judged")),
            "passed": check.get("passed") if check.get("judged") else None,
            "reason": check.get("reason")}


def _free_block(bal: dict | None, normalised: bool) -> dict:
    """The free-energy EDI of ``F_D = D H − sE`` of one solver (token diffusion ``D > 0``).

    ``residual`` (``balance.free_edi``, or ``free_edi_defect`` for softmax heads), ``dF``,
    ``dissipation`` (``∫ I dt``), ``relative = |residual| / dissipation``; ``meaning``:
    ``"identity"`` (a discretisation error, USA), ``"defect"`` (softmax: the plain
    Laplacian is not the gradient flow of ``F_D``) or ``"not recorded"`` (the solver keeps
    no free-energy balance: the particles carry no entropy; their balance of noisy tokens
    is Itô's formula for ``E``, :func:`_ito_block`).
    """
    bal = bal or {}
    resid = bal.get("free_edi_defect" if normalised else "free_edi")
    if resid is None:
        return {"residual": None, "relative": None, "dissipation": None, "dF": None,
                "meaning": "not recorded"}
    diss = float(bal.get("free_dissipation_int", float("nan")))
    return {"residual": float(resid), "dF": float(bal.get("free_dF", float("nan"))),
            "dissipation": diss,
            "relative": abs(float(resid)) / diss if diss and np.isfinite(diss) else None,
            "meaning": "defect" if normalised else "identity"}


def _subsample_block(pw) -> dict:
    """What the particles' exact ``W₂`` used: its label, points, floor, seed, sliced W₂ of all.

    ``pw``: :class:`~wflow.apps.main.compare.ParticleW2`.
    """
    sl = pw.sliced
    return {"label": pw.label, "points": int(pw.m), "points_inv_sqrt": float(pw.m ** -0.5),
            "subsampled": bool(pw.subsampled), "subsample_floor": float(pw.floor),
            "subsample_seed": list(pw.seed) if pw.subsampled else None,
            "sliced_all": None if sl is None else float(sl[-1]),
            "sliced_all_initial": None if sl is None else float(sl[0]),
            "sliced_all_max": None if sl is None else float(np.max(sl))}


def phases_status(statuses: dict[str, dict]) -> tuple[Status, list[str]]:
    """The job's status from its phases', and the reasons of those short of ``success``.

    A phase ``completed`` (its run judged no accuracy check of its own: the causal
    particles, the noisy JKO) counts as ``success`` here, as the job's verdict table
    judges it (particles against the PDE, the JKO against the PDE); ``statuses`` keeps
    its own word.
    """
    ok = (Status.SUCCESS, Status.COMPLETED)
    overall = worst_status(*(Status.SUCCESS if v["status"] in ok else v["status"]
                             for v in statuses.values()))
    reasons = [f"{k}: {v['status']} ({v['message']})" for k, v in statuses.items()
               if v["status"] not in ok]
    return overall, reasons


def _summary(sc, raw, pde, parts, jko, cmp_, timings, ropts, mesh, wall, *, jref=None,
             table=None) -> dict:
    from ...infra.io import provenance
    from ...status import edi_kind

    pres = parts["res"]
    pbal = {k: float(v[0]) for k, v in pres.balance.items()}
    heads0 = sc.build_schedule()
    heads0 = heads0.heads_at(heads0.initial_theta())
    kind = edi_kind(heads0, sc.attention_obj().kind, pde.options.flow)
    n = int(pres.x.shape[1])
    statuses = {"pde": {"status": pde.status, "message": pde.message},
                "particles": {"status": pres.status, "message": pres.message}}
    summary: dict[str, Any] = {
        "status": Status.SUCCESS,
        "message": "",
        "statuses": statuses,
        "scenario": raw,
        "provenance": provenance(),
        "seeds": {"scenario": sc.seed, "particles_sampling": [sc.seed, 4242]},
        "mesh": {"cells": int(pde.areas.size), "spec": str(sc.sections.get("pde", {}).get(
            "mesh", "default"))},
        "flow": pde.options.flow,
        "heads": int(heads0.H),
        "attention": sc.attention_obj().kind,
        "edi": {"pde": _edi_block(pde.balance, kind), "particles": _edi_block(pbal, kind)},
        "checks": {"pde": pde.checks, "particles": pres.checks},
        "w2": {"particles_vs_pde": float(cmp_["w2_particles_vs_pde"][-1]),
               "particles_vs_pde_initial": float(cmp_["w2_particles_vs_pde"][0]),
               "particles_vs_pde_max": float(np.max(cmp_["w2_particles_vs_pde"])),
               "n_inv_sqrt": float(n ** -0.5),
               "growth_tolerance": W2_GROWTH_TOL,
               **_subsample_block(cmp_["w2_particles"])},
        "mass_error": float(pde.stats["mass_error_max"]),
        "min_density": float(pde.stats["rho_min"]),
        "n_particles": n,
        "moments": cmp_["moments"],
        "wall_time_s": {**{k: float(v) for k, v in timings.items()}, "total": float(wall)},
        "pde_stats": pde.stats,
        "kernel": {"pde": pde.stats.get("kernel"), "particles": pres.extra.get("kernel")},
        "diffusion": float(sc.diffusion),
    }
    if sc.diffusion > 0:  # token diffusion: the free-energy EDI of each solver
        from ...attention.kinds import get_kind

        norm = get_kind(sc.attention_obj().kind).normalised
        summary["free_edi"] = {"pde": _free_block(pde.balance, norm),
                               "particles": _free_block(None, norm)}
        if jko is not None:
            summary["free_edi"]["jko"] = _free_block(jko.balance, norm)
    if sc.diffusion > 0:  # the particles' balance of noisy tokens: Itô's formula for E
        summary["ito_balance"] = _ito_block(pres.checks.get("ito_balance"))
    if jko is not None:
        summary["edi"]["jko"] = _edi_block(jko.balance, "identity")
        summary["checks"]["jko"] = jko.checks
        statuses["jko"] = {"status": jko.status, "message": jko.message}
        if jref is not None and jref is not pde:
            statuses["pde_surrogate"] = {"status": jref.status, "message": jref.message}
        w = cmp_.get("w2_jko_vs_pde", np.array([np.nan]))
        summary["w2"]["jko_vs_pde"] = float(np.max(w)) if w.size else float("nan")
        summary["w2"]["jko_vs_pde_final"] = float(w[-1]) if w.size else float("nan")
        summary["w2"]["jko_reference"] = ("pde_surrogate" if jref is not None
                                          and jref is not pde else "pde")
        summary["jko_status"] = jko.status
        rule = dict(jko.stats.get("tau_rule", {}))
        what = f"τ = {jko.options.tau:.4g} ({jko.stats['steps']} steps)"
        if rule.get("vmax") is not None:
            what += (f", τ|v|max/h = {jko.options.tau * rule['vmax'] / rule['h']:.2f} "
                     f"(h = {rule['h']:.4f}, |v|max = {rule['vmax']:.3f})")
        if rule.get("rule") and rule["rule"] != "given":
            what += f"; chosen by the rule {rule['rule']}"
        summary["jko_tau"] = {**rule, "tau": float(jko.options.tau),
                              "eps": float(jko.options.epsilon), "what": what}
        summary["jko_refinement"] = _refinement_block(jko, table, cmp_, ropts)
    summary["verdicts"] = _verdicts(summary, pde, pres, jko)
    overall, reasons = phases_status(statuses)
    failed = [v["quantity"] for v in summary["verdicts"] if v["verdict"] == Verdict.FAIL]
    if failed:
        overall = worst_status(overall, Status.INACCURATE)
        reasons.append("failed checks: " + ", ".join(failed))
    summary["status"], summary["message"] = overall, "; ".join(reasons)
    check_finite("summary.edi", summary["edi"])
    check_finite("summary.w2", {k: v for k, v in summary["w2"].items()
                                if k not in ("jko_reference", "label")})
    return summary


def _write_outputs(stage: Path, pde, parts, jko, cmp_, summary, ropts, mesh) -> None:
    from ...infra.io import history_columns
    from ..report import write_report

    pres = parts["res"]
    from ..jobs.pde import _balance_from_t0

    hist = {k: np.asarray(v)[None] for k, v in _balance_from_t0(pde).items()}
    write_csv(stage / "diagnostics_pde.csv", history_columns(pde.t, hist))
    write_csv(stage / "diagnostics_particles.csv", history_columns(pres.t, pres.history))
    sliced = cmp_["w2_particles"].sliced
    write_csv(stage / "w2.csv", {"t": cmp_["t"],
                                 "w2_particles_vs_pde": cmp_["w2_particles_vs_pde"],
                                 **({} if sliced is None else
                                    {"sliced_w2_all_particles_vs_pde": sliced})})
    save_npz(stage / "density.npz", t=pde.t, rho=pde.rho, centroids=pde.centroids,
             areas=pde.areas)
    save_npz(stage / "trajectory.npz", t=pres.t, x=pres.trajectory[0])
    if jko is not None:
        jh = {k: np.asarray(v)[None] for k, v in jko.history.items()}
        write_csv(stage / "diagnostics_jko.csv", history_columns(np.asarray(jko.t), jh))
        save_npz(stage / "density_jko.npz", t=np.asarray(jko.t), rho=np.asarray(jko.rho),
                 centroids=pde.centroids, areas=pde.areas)
        if "w2_jko_vs_pde" in cmp_:
            write_csv(stage / "w2_jko.csv", {"t": cmp_["t_jko"],
                                             "w2_jko_vs_pde": cmp_["w2_jko_vs_pde"]})
    write_report(stage, summary=summary, pde=pde, particles=pres, jko=jko, compare=cmp_,
                 mesh=mesh, render=ropts.render)
    write_json(stage / "summary.json", summary)  # last: a folder with it is complete
