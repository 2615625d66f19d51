"""Run Gaussian scenarios and write their outputs (summary.json, trajectory.csv, plots).

Everything ``wflow gaussian`` does is a function here: :func:`run_gaussian_scenario`
→ :func:`write_gaussian_run`, :func:`reach_scenario` → :func:`write_reach`,
:func:`particle_check`. Plots use matplotlib, imported inside the plotting
functions (``Agg`` backend, no display needed).
"""

from __future__ import annotations

import logging
import math
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from ...gaussian.bures import bures_wasserstein_distance
from ...gaussian.classify import Classification, PhaseDiagram, classify, phase_diagram
from ...gaussian.moments import psd_factor
from ...gaussian.options import GaussianScenario
from ...gaussian.particles import simulate_particles
from ...gaussian.plots import plot_phase_diagram, plot_reach, plot_trajectory
from ...gaussian.reach import ReachResult, reach
from ...gaussian.riccati import blowup_time_closed_form, scalar_value
from ...gaussian.solver import GaussianTrajectory, integrate_moments
from ...gaussian.spec import SPEC
from ...gaussian.verdict import json_safe
from ...infra.io import run_directory, write_csv, write_json
from ...status import Reach, Status
from .runner import Job, run_job

__all__ = [
    "GaussianRun",
    "run_gaussian_scenario",
    "write_gaussian_run",
    "particle_check",
    "reach_scenario",
    "write_reach",
    "trajectory_columns",
    "JOB",
    "REACH_JOB",
    "run_gaussian_job",
]

logger = logging.getLogger(__name__)


@dataclass(frozen=True)
class GaussianRun:
    """Everything computed for one scenario.

    Attributes
    ----------
    scenario : GaussianScenario
        The scenario as read and validated.
    trajectory : GaussianTrajectory
        The moment ODE's solution ``(m(t), Σ(t))`` over ``[0, T]``.
    closed_form_blowup_time : float or None
        ``t*`` from the ``V = vI`` closed form (constant parameters only; ``inf``: none
        before ``closed_form_searched_to``; written to JSON as ``null``).
    closed_form_searched_to : float or None
        The end of the closed-form search (None: no closed form, ``V`` not scalar).
    classification : Classification or None
        Constant parameters only.
    particles : dict or None
        Particle check (:func:`particle_check`).
    phase : PhaseDiagram or None
        The phase diagram of the scenario's ``[phase]`` family (``None``: none asked).
    """

    scenario: GaussianScenario
    trajectory: GaussianTrajectory
    closed_form_blowup_time: float | None
    classification: Classification | None
    particles: dict[str, Any] | None
    phase: PhaseDiagram | None
    closed_form_searched_to: float | None = None

    def summary(self) -> dict[str, Any]:
        """The content of ``summary.json`` (standard JSON: non-finite numbers are ``null``)."""
        scn = self.scenario
        tr = self.trajectory
        out: dict[str, Any] = {
            # the contract of every command (a blow-up is a result: status success)
            "status": Status.FAILED if tr.status == Status.FAILED else Status.SUCCESS,
            "message": tr.message if tr.status == Status.FAILED else "",
            "checks": {},  # the moment ODE is integrated to its tolerances; no verdict
            "title": scn.title,
            "source": scn.source,
            "d": scn.d,
            "T": scn.T,
            "initial": {"m": scn.m0.tolist(), "Sigma": scn.Sigma0.tolist()},
            "parameters": (scn.constant_params.to_dict() if scn.constant_params is not None
                           else {"params_path": type(scn.params_path).__name__}),
            "run": scn.run,
            "result": self.trajectory.to_dict(),
            "closed_form_blowup_time": self.closed_form_blowup_time,
            "closed_form_searched_to": self.closed_form_searched_to,
        }
        if self.classification is not None:
            cl = self.classification
            out["classification"] = cl.to_dict()
            final = self.trajectory.final_Sigma
            dists = [bures_wasserstein_distance(np.zeros(scn.d), e.Sigma, np.zeros(scn.d), final)
                     for e in cl.equilibria]
            k = int(np.argmin(dists))
            out["nearest_equilibrium"] = {"index": k, "bures_distance": float(dists[k]),
                                          "stable": cl.equilibria[k].stable,
                                          "note": "isolated equilibria only (continua: "
                                                  "classification.families)"}
            if cl.limit is not None:
                out["distance_to_limit"] = bures_wasserstein_distance(
                    np.zeros(scn.d), cl.limit, np.zeros(scn.d), final)
        if self.particles is not None:
            out["particles"] = self.particles
        if self.phase is not None:
            out["phase_diagram"] = {"x_name": self.phase.x_name, "y_name": self.phase.y_name,
                                    "counts": self.phase.counts()}
        return json_safe(out)


def particle_check(schedule: Any, m0: np.ndarray, Sigma0: np.ndarray, T: float, *, n: int,
                   seed: int, steps: int, traj: GaussianTrajectory | None = None
                   ) -> dict[str, Any]:
    """Run ``n`` particles from ``N(m₀, Σ₀)`` (RK4) and compare with the moment ODE at ``T``.

    Returns a dict with ``m_error = |m̂ − m|``, ``Sigma_error = ‖Σ̂ − Σ‖_F``,
    ``w2 = W2(N(m̂, Σ̂), N(m, Σ))`` (expected ``O(n^{-1/2})``), or ``status =
    "skipped"`` with the reason (blow-up before ``T``, attention scores too large).
    """
    if traj is None:
        traj = integrate_moments(schedule, m0, Sigma0, T, n_out=2)
    if traj.status != Status.COMPLETED:
        return {"status": "skipped", "reason": f"the moment ODE did not reach T ({traj.status})"}
    rng = np.random.default_rng(seed)
    L = psd_factor(Sigma0, name="Sigma0")
    x0 = m0 + rng.standard_normal((n, L.shape[1])) @ L.T
    try:
        run = simulate_particles(schedule, x0, T, steps=steps)
    except FloatingPointError as exc:
        return {"status": "skipped", "reason": str(exc)}
    m, S = traj.final_m, traj.final_Sigma
    mh, Sh = run.m[-1], run.Sigma[-1]
    return {
        "status": "ok", "n": n, "seed": seed, "steps": steps,
        "m_error": float(np.linalg.norm(mh - m)),
        "Sigma_error": float(np.linalg.norm(Sh - S)),
        "w2": bures_wasserstein_distance(mh, Sh, m, S),
        "n_to_minus_half": 1.0 / math.sqrt(n),
        "final_m_particles": mh.tolist(), "final_Sigma_particles": Sh.tolist(),
    }


def run_gaussian_scenario(scn: GaussianScenario) -> GaussianRun:
    """Integrate the moment ODE of a scenario, classify, check particles, phase diagram."""
    traj = integrate_moments(scn.params_path, scn.m0, scn.Sigma0, scn.T, **scn.run)
    p = scn.constant_params
    t_closed = searched = None
    if p is not None and scalar_value(p.V) is not None:
        searched = traj.blowup_time * 1.01 if traj.blowup_time is not None else scn.T
        t_closed = blowup_time_closed_form(p, scn.Sigma0, t_max=searched)
    cl = None
    if p is not None and scn.classify is not None:
        ck = scn.classify
        cl = classify(p, Sigma0=scn.Sigma0 if ck["scope"] == "initial" else None,
                      method=ck["method"], horizon=ck["horizon"])
    parts = None
    if scn.particles is not None:
        parts = particle_check(scn.params_path, scn.m0, scn.Sigma0, scn.T, traj=traj,
                               **scn.particles)
    ph = None
    if scn.phase is not None:
        spec = scn.phase
        ph = phase_diagram(spec.family, spec.x, spec.y, x_name=spec.x_name, y_name=spec.y_name,
                           method=spec.method, horizon=spec.horizon)
    return GaussianRun(scenario=scn, trajectory=traj, closed_form_blowup_time=t_closed,
                       classification=cl, particles=parts, phase=ph,
                       closed_form_searched_to=searched)


def trajectory_columns(traj: GaussianTrajectory) -> dict[str, np.ndarray]:
    """CSV columns: ``t``, ``m_i``, ``Sigma_i_j`` (``i <= j``), ``trace``, eigenvalue range."""
    d = traj.m.shape[1]
    cols: dict[str, np.ndarray] = {"t": traj.t}
    for i in range(d):
        cols[f"m_{i}"] = traj.m[:, i]
    for i in range(d):
        for j in range(i, d):
            cols[f"Sigma_{i}_{j}"] = traj.Sigma[:, i, j]
    lam = np.linalg.eigvalsh(traj.Sigma)
    cols["trace"] = np.trace(traj.Sigma, axis1=1, axis2=2)
    cols["lambda_min"] = lam[:, 0]
    cols["lambda_max"] = lam[:, -1]
    return cols


def write_gaussian_run(run: GaussianRun, out_dir: str | Path) -> list[Path]:
    """Write ``summary.json``, ``trajectory.csv``, ``trajectory.png`` (+ ``phase_diagram.png``)."""
    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    write_json(out / "summary.json", run.summary())
    write_csv(out / "trajectory.csv", trajectory_columns(run.trajectory))
    files = [out / "summary.json", out / "trajectory.csv"]
    eq = None
    if run.classification is not None:
        stable_pd = [e for e in run.classification.equilibria if e.stable and e.rank > 0]
        if stable_pd:
            eq = (stable_pd[0].m, stable_pd[0].Sigma)
        elif run.classification.label == "converges" and run.classification.limit is not None:
            eq = (None, run.classification.limit)  # a point of a continuum of equilibria
    files.append(plot_trajectory(run.trajectory, out / "trajectory.png", title=run.scenario.title,
                                 closed_form_blowup=run.closed_form_blowup_time, equilibrium=eq))
    if run.phase is not None:
        files.append(plot_phase_diagram(run.phase, out / "phase_diagram.png",
                                        title=run.scenario.title))
    return files


def reach_scenario(scn: GaussianScenario, **kw: Any) -> ReachResult:
    """Steer the initial Gaussian to the ``[target]`` (:func:`~wflow.gaussian.reach.reach`).

    The attention ``V, B`` are the scenario's constant ones when
    ``target.keep_attention`` (default), else zero.
    """
    if scn.target is None:
        raise ValueError(f"{scn.source}: `wflow gaussian reach` needs a [target] table "
                         "(m, Sigma, T)")
    tg = scn.target
    V = B = 0.0
    if tg["keep_attention"]:
        p = scn.constant_params
        if p is None:
            raise ValueError("target.keep_attention: needs constant [params] (no [[layers]])")
        V, B = p.V, p.B
    return reach(scn.m0, scn.Sigma0, tg["m"], tg["Sigma"], tg["T"], V=V, B=B, **kw)


def write_reach(result: ReachResult, scn: GaussianScenario, out_dir: str | Path) -> list[Path]:
    """Write ``summary.json``, ``trajectory.csv`` (with the controls) and ``reach.png``."""
    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    # the reach criterion of wflow.gaussian.reach.reach, value by value (relative errors)
    scale = max(float(np.linalg.norm(result.target_m)),
                float(np.linalg.norm(result.target_Sigma)), 1.0)
    rel = {"m_error": (result.m_error / scale, "|m(T) − m₁| / s"),
           "Sigma_error": (result.Sigma_error, "‖Σ(T) − Σ₁‖_F / max(‖Σ₁‖_F, 1)"),
           "w2_error": (result.w2_error / scale, "W₂(N(m(T), Σ(T)), N(m₁, Σ₁)) / s")}
    checks = {name: {"value": float(v), "tolerance": float(result.tol),
                     "passed": bool(v <= result.tol),
                     "rule": f"{what} at target.T, the planned controls integrated "
                             f"(s = max(|m₁|, ‖Σ₁‖_F, 1) = {scale:.6g}); reached when all "
                             "three are within the tolerance"}
              for name, (v, what) in rel.items()}
    summary = {"status": Status.SUCCESS if result.status is Reach.REACHED else Status.INACCURATE,
               "message": "" if result.status is Reach.REACHED else result.message,
               "checks": checks,
               "title": scn.title, "source": scn.source, "d": scn.d,
               "initial": {"m": scn.m0.tolist(), "Sigma": scn.Sigma0.tolist()},
               "target": {k: (v.tolist() if isinstance(v, np.ndarray) else v)
                          for k, v in (scn.target or {}).items()},
               "reach": result.to_dict()}
    write_json(out / "summary.json", json_safe(summary))
    cols = trajectory_columns(result.trajectory)
    d = scn.d
    ctrl = [result.plan.controls(float(t)) for t in result.trajectory.t]
    for i in range(d):
        cols[f"b_{i}"] = np.array([c.b[i] for c in ctrl])
    for i in range(d):
        for j in range(d):
            cols[f"A_{i}_{j}"] = np.array([c.A[i, j] for c in ctrl])
    write_csv(out / "trajectory.csv", cols)
    png = plot_reach(result, out / "reach.png", title=scn.title)
    return [out / "summary.json", out / "trajectory.csv", png]


def _write_run(scn: GaussianScenario, table: Any, problem: Any, run: GaussianRun,
               out: str | Path, comm: Any) -> None:
    with run_directory(out) as stage:
        write_gaussian_run(run, stage)


def _write_reach(scn: GaussianScenario, table: Any, problem: Any, res: ReachResult,
                 out: str | Path, comm: Any) -> None:
    with run_directory(out) as stage:
        write_reach(res, scn, stage)


def _same(scn: GaussianScenario, *a: Any) -> GaussianScenario:
    return scn


def _no_size(*a: Any) -> dict:
    return {}


#: ``wflow gaussian SCENARIO``: the moment ODE and its checks (a blow-up, or a failed
#: integration, is a result: written with its status).
JOB = Job(spec=SPEC, table=_same, size=_no_size, build=_same, size_of=_no_size,
          solve=lambda scn, table, comm: run_gaussian_scenario(scn), write=_write_run,
          failure_is_a_result=True)
#: ``wflow gaussian reach SCENARIO``: steering to the ``[target]``.
REACH_JOB = Job(spec=SPEC, table=_same, size=_no_size, build=_same, size_of=_no_size,
                solve=lambda scn, table, comm: reach_scenario(scn), write=_write_reach,
                failure_is_a_result=True)


def run_gaussian_job(scn: GaussianScenario, out: str | Path, *, reach: bool = False,
                     confirm: bool = False) -> GaussianRun | ReachResult:
    """``wflow gaussian [reach]``: estimate, solve and write ``out/`` (the job runner)."""
    return run_job(REACH_JOB if reach else JOB, scn, out, confirm=confirm)
