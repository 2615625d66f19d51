"""Plots of Gaussian runs: trajectory ellipses, phase diagrams, reachability (matplotlib)."""

from __future__ import annotations

import math
from pathlib import Path

import numpy as np

from ..status import Status
from .bures import bures_wasserstein_distance
from .classify import LABELS, PhaseDiagram
from .reach import ReachResult
from .solver import GaussianTrajectory

__all__ = [
    "plot_trajectory",
    "plot_phase_diagram",
    "plot_reach",
]


def _ellipse(m: np.ndarray, S: np.ndarray, n: int = 120) -> np.ndarray:
    """1-σ ellipse of the first two coordinates, (n, 2)."""
    lam, U = np.linalg.eigh(0.5 * (S[:2, :2] + S[:2, :2].T))
    th = np.linspace(0, 2 * np.pi, n)
    circ = np.stack([np.cos(th), np.sin(th)])
    return (m[:2, None] + (U * np.sqrt(np.clip(lam, 0, None))) @ circ).T


def _pyplot():
    """``matplotlib.pyplot`` on the Agg backend (files only; imported when a plot is made)."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    return plt


def _save(fig, path: str | Path) -> Path:
    """Lay out ``fig``, write it to ``path`` (PNG, 110 dpi), close it; the path."""
    fig.tight_layout()
    path = Path(path)
    fig.savefig(path, dpi=110)
    _pyplot().close(fig)
    return path


def plot_trajectory(traj: GaussianTrajectory, path: str | Path, *, title: str = "",
                    closed_form_blowup: float | None = None,
                    equilibrium: tuple[np.ndarray | None, np.ndarray] | None = None) -> Path:
    """Mean, covariance spectrum (log scale) and covariance ellipses along a trajectory.

    ``equilibrium = (m*, Σ*)`` (``m*`` may be None) is drawn dotted for reference.
    """
    plt = _pyplot()

    d = traj.m.shape[1]
    fig, ax = plt.subplots(1, 3, figsize=(15, 4.4))
    for i in range(min(d, 6)):
        ax[0].plot(traj.t, traj.m[:, i], label=f"m_{i}")
    ax[0].set_xlabel("t (depth)")
    ax[0].set_title("mean")
    if traj.status == Status.BLOWUP:  # the mean follows the blow-up: keep the early part visible
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
        if traj.status == Status.BLOWUP:  # the last point is at tr Σ ~ 1e8: skip it for the view
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
        # beside the axes: inside, the legend covers the ellipses it names
        ax[2].legend(fontsize=7, loc="upper left", bbox_to_anchor=(1.02, 1.0),
                     borderaxespad=0.0)
    else:
        inv = 1.0 / np.clip(traj.Sigma[:, 0, 0], 1e-300, None)
        ax[2].plot(traj.t, inv)
        ax[2].axhline(0, color="k", lw=0.5)
        ax[2].set_xlabel("t (depth)")
        ax[2].set_title("1/σ(t) (Bernoulli variable; hits 0 at blow-up)")
    fig.suptitle(title)
    return _save(fig, path)


_COLORS = {"converges_to_zero": "#2e6f95", "converges": "#4c9f70", "blows_up": "#d1495b",
           "depends_on_initial_data": "#edae49", "unbounded": "#8e6c8a", "oscillates": "#66a0d9",
           "undetermined": "#bbbbbb"}


def plot_phase_diagram(pd: PhaseDiagram, path: str | Path, *, title: str = "") -> Path:
    """Categorical map of the classifier labels over the 2-parameter family."""
    plt = _pyplot()
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
    return _save(fig, path)


def plot_reach(result: ReachResult, path: str | Path, *, title: str = "") -> Path:
    """Planned vs integrated path (ellipses), control sizes, and the distance to the target."""
    plt = _pyplot()

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
    return _save(fig, path)
