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

from .gaussian import (
    GaussianTrajectory,
    _scalar_value,
    blowup_time_closed_form,
    bures_wasserstein_distance,
    integrate_moments,
    psd_factor,
    simulate_particles,
)
from .gaussian_reach import ReachResult, reach
from .gaussian_riccati import LABELS, Classification, PhaseDiagram, classify, phase_diagram
from .gaussian_scenario import GaussianScenario
from .io import write_csv, write_json

__all__ = [
    "GaussianRun",
    "run_gaussian_scenario",
    "write_gaussian_run",
    "particle_check",
    "reach_scenario",
    "write_reach",
    "trajectory_columns",
    "plot_trajectory",
    "plot_phase_diagram",
    "plot_reach",
]

logger = logging.getLogger(__name__)


@dataclass(frozen=True)
class GaussianRun:
    """Everything computed for one scenario.

    Attributes
    ----------
    scenario : GaussianScenario
    trajectory : GaussianTrajectory
    closed_form_blowup_time : float or None
        ``t*`` from the ``V = vI`` closed form (constant parameters only; ``inf``: none
        before ``T``).
    classification : Classification or None
        Constant parameters only.
    particles : dict or None
        Particle check (:func:`particle_check`).
    phase : PhaseDiagram or None
    """

    scenario: GaussianScenario
    trajectory: GaussianTrajectory
    closed_form_blowup_time: float | None
    classification: Classification | None
    particles: dict[str, Any] | None
    phase: PhaseDiagram | None

    def summary(self) -> dict[str, Any]:
        """The content of ``summary.json``."""
        scn = self.scenario
        out: dict[str, Any] = {
            "title": scn.title,
            "source": scn.source,
            "d": scn.d,
            "T": scn.T,
            "initial": {"m": scn.m0.tolist(), "Sigma": scn.Sigma0.tolist()},
            "parameters": (scn.constant_params.to_dict() if scn.constant_params is not None
                           else {"schedule": type(scn.schedule).__name__}),
            "run": scn.run,
            "result": self.trajectory.to_dict(),
            "closed_form_blowup_time": self.closed_form_blowup_time,
        }
        if self.classification is not None:
            cl = self.classification
            out["classification"] = cl.to_dict()
            final = self.trajectory.final_Sigma
            dists = [bures_wasserstein_distance(np.zeros(scn.d), e.Sigma, np.zeros(scn.d), final)
                     for e in cl.equilibria]
            k = int(np.argmin(dists))
            out["nearest_equilibrium"] = {"index": k, "bures_distance": float(dists[k]),
                                          "stable": cl.equilibria[k].stable}
        if self.particles is not None:
            out["particles"] = self.particles
        if self.phase is not None:
            out["phase_diagram"] = {"x_name": self.phase.x_name, "y_name": self.phase.y_name,
                                    "counts": self.phase.counts()}
        return out


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
    if traj.status != "completed":
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
    traj = integrate_moments(scn.schedule, scn.m0, scn.Sigma0, scn.T, **scn.run)
    p = scn.constant_params
    t_closed = None
    if p is not None and _scalar_value(p.V) is not None:
        horizon = traj.blowup_time * 1.01 if traj.blowup_time is not None else scn.T
        t_closed = blowup_time_closed_form(p, scn.Sigma0, t_max=horizon)
    cl = None
    if p is not None and scn.classify is not None:
        cl = classify(p, method=scn.classify["method"], horizon=scn.classify["horizon"])
    parts = None
    if scn.particles is not None:
        parts = particle_check(scn.schedule, scn.m0, scn.Sigma0, scn.T, traj=traj,
                               **scn.particles)
    ph = None
    if scn.phase is not None:
        spec = scn.phase
        ph = phase_diagram(spec.family, spec.x, spec.y, x_name=spec.x_name, y_name=spec.y_name,
                           method=spec.method, horizon=spec.horizon)
    return GaussianRun(scenario=scn, trajectory=traj, closed_form_blowup_time=t_closed,
                       classification=cl, particles=parts, phase=ph)


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
    files.append(plot_trajectory(run.trajectory, out / "trajectory.png", title=run.scenario.title,
                                 closed_form_blowup=run.closed_form_blowup_time, equilibrium=eq))
    if run.phase is not None:
        files.append(plot_phase_diagram(run.phase, out / "phase_diagram.png",
                                        title=run.scenario.title))
    return files


def reach_scenario(scn: GaussianScenario, **kw: Any) -> ReachResult:
    """Steer the initial Gaussian to the ``[target]`` (:func:`~wflow.gaussian_reach.reach`).

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
    summary = {"title": scn.title, "source": scn.source, "d": scn.d,
               "initial": {"m": scn.m0.tolist(), "Sigma": scn.Sigma0.tolist()},
               "target": {k: (v.tolist() if isinstance(v, np.ndarray) else v)
                          for k, v in (scn.target or {}).items()},
               "reach": result.to_dict()}
    write_json(out / "summary.json", summary)
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


# ---------------------------------------------------------------------------------------------
# plots
# ---------------------------------------------------------------------------------------------


def _ellipse(m: np.ndarray, S: np.ndarray, n: int = 120) -> np.ndarray:
    """1-σ ellipse of the first two coordinates, (n, 2)."""
    lam, U = np.linalg.eigh(0.5 * (S[:2, :2] + S[:2, :2].T))
    th = np.linspace(0, 2 * np.pi, n)
    circ = np.stack([np.cos(th), np.sin(th)])
    return (m[:2, None] + (U * np.sqrt(np.clip(lam, 0, None))) @ circ).T


def plot_trajectory(traj: GaussianTrajectory, path: str | Path, *, title: str = "",
                    closed_form_blowup: float | None = None,
                    equilibrium: tuple[np.ndarray | None, np.ndarray] | None = None) -> Path:
    """Mean, covariance spectrum (log scale) and covariance ellipses along a trajectory.

    ``equilibrium = (m*, Σ*)`` (``m*`` may be None) is drawn dotted for reference.
    """
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    d = traj.m.shape[1]
    fig, ax = plt.subplots(1, 3, figsize=(15, 4.4))
    for i in range(min(d, 6)):
        ax[0].plot(traj.t, traj.m[:, i], label=f"m_{i}")
    ax[0].set_xlabel("t (depth)")
    ax[0].set_title("mean")
    if traj.status == "blowup":  # the mean follows the blow-up: keep the early part visible
        ax[0].set_yscale("symlog", linthresh=max(1.0, float(np.abs(traj.m[0]).max())))
        ax[0].set_title("mean (symlog)")
    ax[0].legend(fontsize=8)
    lam = np.linalg.eigvalsh(traj.Sigma)[:, ::-1][:, :max(traj.rank, 1)]
    for k in range(lam.shape[1]):
        ax[1].semilogy(traj.t, np.clip(lam[:, k], 1e-300, None), label=f"λ_{k + 1}(Σ)")
    if traj.blowup_time is not None:
        ax[1].axvline(traj.blowup_time, color="r", ls="--", label=f"t* = {traj.blowup_time:.6g}")
    if closed_form_blowup is not None and math.isfinite(closed_form_blowup):
        ax[1].axvline(closed_form_blowup, color="k", ls=":",
                      label=f"closed form {closed_form_blowup:.6g}")
    if equilibrium is not None:
        for k, lam_eq in enumerate(np.linalg.eigvalsh(equilibrium[1])[::-1][:lam.shape[1]]):
            if lam_eq > 0:
                ax[1].axhline(lam_eq, color="gray", ls=":", lw=1,
                              label="equilibrium Σ*" if k == 0 else None)
    ax[1].set_xlabel("t (depth)")
    ax[1].set_title(f"covariance eigenvalues (rank {traj.rank}, {traj.status})")
    ax[1].legend(fontsize=8)
    if d >= 2:
        idx = np.unique(np.linspace(0, traj.t.size - 1, 7).round().astype(int))
        if traj.status == "blowup":  # the last point is at tr Σ ~ 1e8: skip it for the view
            idx = idx[idx < traj.t.size - 1] if idx.size > 1 else idx
            lim_i = idx[-1]
        else:
            lim_i = traj.t.size - 1
        cmap = plt.get_cmap("viridis")
        for j, i in enumerate(idx):
            e = _ellipse(traj.m[i], traj.Sigma[i])
            ax[2].plot(e[:, 0], e[:, 1], color=cmap(j / max(len(idx) - 1, 1)),
                       label=f"t = {traj.t[i]:.3g}")
            ax[2].plot(*traj.m[i, :2], ".", color=cmap(j / max(len(idx) - 1, 1)))
        ax[2].plot(traj.m[: lim_i + 1, 0], traj.m[: lim_i + 1, 1], "k-", lw=0.6)
        if equilibrium is not None:
            m_eq = equilibrium[0] if equilibrium[0] is not None else traj.m[lim_i]
            e = _ellipse(np.asarray(m_eq), equilibrium[1])
            ax[2].plot(e[:, 0], e[:, 1], color="gray", ls=":", lw=2, label="equilibrium")
        ax[2].set_aspect("equal", adjustable="datalim")
        ax[2].set_title("1-σ ellipses (coordinates 0, 1)")
        ax[2].legend(fontsize=7)
    else:
        inv = 1.0 / np.clip(traj.Sigma[:, 0, 0], 1e-300, None)
        ax[2].plot(traj.t, inv)
        ax[2].axhline(0, color="k", lw=0.5)
        ax[2].set_xlabel("t (depth)")
        ax[2].set_title("1/σ(t) (Bernoulli variable; hits 0 at blow-up)")
    fig.suptitle(title)
    fig.tight_layout()
    path = Path(path)
    fig.savefig(path, dpi=110)
    plt.close(fig)
    return path


_COLORS = {"converges": "#4c9f70", "blows_up": "#d1495b", "depends_on_initial_data": "#edae49",
           "grows_exponentially": "#8e6c8a", "bounded": "#66a0d9", "undetermined": "#bbbbbb"}


def plot_phase_diagram(pd: PhaseDiagram, path: str | Path, *, title: str = "") -> Path:
    """Categorical map of the classifier labels over the 2-parameter family."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    from matplotlib.colors import ListedColormap
    from matplotlib.patches import Patch

    code = {lab: i for i, lab in enumerate(LABELS)}
    Z = np.vectorize(code.__getitem__)(pd.labels).astype(float)
    cmap = ListedColormap([_COLORS[lab] for lab in LABELS])
    fig, ax = plt.subplots(figsize=(6.8, 5.2))
    dx = (pd.x[1] - pd.x[0]) / 2 if pd.x.size > 1 else 0.5
    dy = (pd.y[1] - pd.y[0]) / 2 if pd.y.size > 1 else 0.5
    ax.imshow(Z, origin="lower", cmap=cmap, vmin=-0.5, vmax=len(LABELS) - 0.5, aspect="auto",
              extent=(pd.x[0] - dx, pd.x[-1] + dx, pd.y[0] - dy, pd.y[-1] + dy),
              interpolation="nearest")
    ax.axhline(0, color="k", lw=0.5)
    ax.axvline(0, color="k", lw=0.5)
    ax.set_xlabel(pd.x_name)
    ax.set_ylabel(pd.y_name)
    present = [lab for lab in LABELS if np.any(pd.labels == lab)]
    ax.legend(handles=[Patch(color=_COLORS[lab], label=lab.replace("_", " ")) for lab in present],
              loc="upper left", bbox_to_anchor=(1.01, 1.0), fontsize=8)
    methods = sorted(set(pd.methods.ravel().tolist()))
    ax.set_title(f"{title}\nclassifier: {', '.join(methods)}", fontsize=10)
    fig.tight_layout()
    path = Path(path)
    fig.savefig(path, dpi=110)
    plt.close(fig)
    return path


def plot_reach(result: ReachResult, path: str | Path, *, title: str = "") -> Path:
    """Planned vs integrated path (ellipses), control sizes, and the distance to the target."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    traj = result.trajectory
    plan = result.plan
    d = plan.d
    m1, S1 = result.target_m, result.target_Sigma
    fig, ax = plt.subplots(1, 3, figsize=(15, 4.4))
    if d >= 2:
        idx = np.unique(np.linspace(0, traj.t.size - 1, 7).round().astype(int))
        cmap = plt.get_cmap("viridis")
        for j, i in enumerate(idx):
            e = _ellipse(traj.m[i], traj.Sigma[i])
            ax[0].plot(e[:, 0], e[:, 1], color=cmap(j / max(len(idx) - 1, 1)), lw=1.2,
                       label=f"t = {traj.t[i]:.3g}")
        et = _ellipse(m1, S1)
        ax[0].plot(et[:, 0], et[:, 1], "r--", lw=2, label="target")
        ax[0].plot(traj.m[:, 0], traj.m[:, 1], "k-", lw=0.6)
        ax[0].set_aspect("equal", adjustable="datalim")
        ax[0].legend(fontsize=7)
        ax[0].set_title("integrated path, 1-σ ellipses (coords 0, 1)")
    else:
        ax[0].plot(traj.t, traj.m[:, 0], label="m")
        ax[0].plot(traj.t, np.sqrt(traj.Sigma[:, 0, 0]), label="σ")
        ax[0].legend()
        ax[0].set_title("integrated path")
    ctrl = [plan.controls(float(t)) for t in traj.t]
    ax[1].plot(traj.t, [np.linalg.norm(c.A) for c in ctrl], label="‖A(t)‖_F")
    ax[1].plot(traj.t, [np.linalg.norm(c.b) for c in ctrl], label="|b(t)|")
    for ph in plan.phases[:-1]:
        ax[1].axvline(ph.t1, color="k", ls=":", lw=0.8)
    ax[1].set_xlabel("t (depth)")
    ax[1].legend()
    ax[1].set_title("controls")
    dist = [bures_wasserstein_distance(traj.m[i], traj.Sigma[i], m1, S1)
            for i in range(traj.t.size)]
    ax[2].semilogy(traj.t, np.clip(dist, 1e-16, None))
    ax[2].set_xlabel("t (depth)")
    ax[2].set_title(f"W2 to the target (final {result.w2_error:.2e}, {result.status})")
    fig.suptitle(title)
    fig.tight_layout()
    path = Path(path)
    fig.savefig(path, dpi=110)
    plt.close(fig)
    return path
