"""Pictures of a run: GIFs of tokens and densities on S², the per-run figure of E and G².

GIFs of tokens on S² and of a density on a sphere mesh, snapshots of token clouds, and
the per-run figure of ``E``, ``G²`` and the energy balance (report layer, matplotlib).

The GIFs follow the published experiments' animations: :data:`GIF_FRAMES` frames evenly
spaced over the recorded times, :data:`GIF_FRAME_MS` ms per frame, tokens coloured by
their initial azimuth (``hsv``), a faint wireframe sphere, the camera's azimuth turning
from −55° to 125° at elevation 18°. wflow adds two things: tokens on the far side of
the sphere are drawn faded (so the visible hemisphere reads at a glance), and the
density animation shows only the mesh cells that face the camera (back-face culling,
exact for the convex sphere; matplotlib has no depth buffer).

Every writer refuses non-finite data and returns the path it wrote. Only ``run.py``
modules and the ``reproduce`` study call them, on their staging directories.
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path
from typing import Any, NamedTuple

import numpy as np

__all__ = [
    "GIF_FRAMES",
    "GIF_FRAME_MS",
    "frame_indices",
    "token_gif",
    "token_snapshots",
    "density_gif",
    "RunSeries",
    "run_figure",
    "running_balance",
    "particle_pictures",
    "pde_pictures",
]

#: Frames per GIF and milliseconds per frame (the published animations' choice).
GIF_FRAMES = 60
GIF_FRAME_MS = 80
_DPI = 90
_ELEV = 18.0
_AZIM = (-55.0, 125.0)


def frame_indices(n_records: int, frames: int = GIF_FRAMES) -> np.ndarray:
    """``frames`` record indices evenly spaced over ``0 … n_records − 1``.

    First and last included; fewer, without repeats, when there are fewer records.
    """
    if n_records < 1:
        raise ValueError("frame_indices: need at least one recorded time")
    idx = np.round(np.linspace(0, n_records - 1, min(frames, n_records))).astype(int)
    return np.unique(idx)


def _save_gif(frames: list[np.ndarray], path: Path, ms: int) -> Path:
    from PIL import Image

    imgs = [Image.fromarray(f) for f in frames]
    imgs[0].save(path, save_all=True, append_images=imgs[1:], loop=0, duration=int(ms),
                 optimize=True)
    return path


def _canvas_rgb(fig: Any) -> np.ndarray:
    fig.canvas.draw()
    return np.asarray(fig.canvas.buffer_rgba())[..., :3].copy()


def _sphere_axes(fig: Any, rect: tuple[float, float, float, float] = (0, 0, 1, 0.94)) -> Any:
    ax = fig.add_axes(rect, projection="3d")
    ax.set_xlim(-0.72, 0.72)
    ax.set_ylim(-0.72, 0.72)
    ax.set_zlim(-0.72, 0.72)
    ax.set_box_aspect([1, 1, 1])
    ax.axis("off")
    return ax


def _view_dir(elev: float, azim: float) -> np.ndarray:
    e, a = np.radians(elev), np.radians(azim)
    return np.array([np.cos(e) * np.cos(a), np.cos(e) * np.sin(a), np.sin(e)])


def token_gif(traj: np.ndarray, t: np.ndarray, path: str | Path, *, title: str = "",
              frames: int = GIF_FRAMES, ms: int = GIF_FRAME_MS) -> Path:
    """Animate tokens on S²: ``traj`` of shape ``(K, n, 3)`` at the recorded times ``t``.

    Tokens keep the colour of their azimuth at ``t[0]``; the camera turns by 180° over
    the animation; tokens behind the sphere (``<x, view> < 0``) are drawn faded.
    """
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    traj = np.asarray(traj, float)
    t = np.asarray(t, float)
    if traj.ndim != 3 or traj.shape[2] != 3 or traj.shape[0] != t.shape[0]:
        raise ValueError(f"token_gif: need traj (K, n, 3) and t (K,), got {traj.shape}, "
                         f"{t.shape}")
    if not (np.all(np.isfinite(traj)) and np.all(np.isfinite(t))):
        raise ValueError("token_gif: non-finite tokens or times")
    idx = frame_indices(traj.shape[0], frames)
    colour = np.mod(np.arctan2(traj[0, :, 1], traj[0, :, 0]), 2 * np.pi) / (2 * np.pi)
    cmap = plt.get_cmap("hsv")
    u, v = np.mgrid[0:2 * np.pi:20j, 0:np.pi:12j]
    fig = plt.figure(figsize=(3.6, 3.6), dpi=_DPI)
    ax = _sphere_axes(fig)
    ax.plot_wireframe(np.cos(u) * np.sin(v), np.sin(u) * np.sin(v), np.cos(v), color="#bbbbbb",
                      linewidth=0.3, alpha=0.5)
    rgba = cmap(colour)
    sc = ax.scatter(*traj[0].T, c=rgba, s=16, depthshade=False, edgecolors="white",
                    linewidths=0.25)
    head = ax.set_title("", fontsize=8, pad=0)
    out = []
    for j, k in enumerate(idx):
        azim = _AZIM[0] + (_AZIM[1] - _AZIM[0]) * j / max(len(idx) - 1, 1)
        ax.view_init(elev=_ELEV, azim=azim)
        pts = traj[k]
        front = pts @ _view_dir(_ELEV, azim) >= 0
        c = rgba.copy()
        c[~front, 3] = 0.25
        sc._offsets3d = (pts[:, 0], pts[:, 1], pts[:, 2])
        sc.set_facecolors(c)
        sc.set_edgecolors(np.where(front[:, None], [[1, 1, 1, 1]], [[1, 1, 1, 0.2]]))
        head.set_text(f"{title}   t = {t[k]:.2f}" if title else f"t = {t[k]:.2f}")
        out.append(_canvas_rgb(fig))
    plt.close(fig)
    return _save_gif(out, Path(path), ms)


def _view_basis(elev: float, azim: float) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Orthonormal ``(right, up, towards the viewer)`` of a camera at ``(elev, azim)``."""
    view = _view_dir(elev, azim)
    right = np.array([-np.sin(np.radians(azim)), np.cos(np.radians(azim)), 0.0])
    return right, np.cross(view, right), view


def token_snapshots(rows: list[tuple[str, np.ndarray]], t: np.ndarray, path: str | Path, *,
                    fractions: tuple[float, ...] = (0.0, 0.25, 0.5, 0.75, 1.0)) -> Path:
    """Grid of token clouds on S²: one row per run, one column per time.

    Rows are ``(label, traj (K, n, 3))``; columns the recorded times nearest to the
    ``fractions`` of the final time. Orthographic view from a fixed camera (the GIFs'
    first one), outline and a few meridians and parallels, tokens coloured by initial
    azimuth, the far hemisphere faded.
    """
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    t = np.asarray(t, float)
    cols = [int(np.argmin(np.abs(t - f * t[-1]))) for f in fractions]
    right, up, view = _view_basis(_ELEV, _AZIM[0])
    s = np.linspace(0, 2 * np.pi, 121)
    grid = [np.stack([np.cos(s) * np.cos(la), np.sin(s) * np.cos(la), np.full_like(s, np.sin(la))],
                     axis=1) for la in np.radians([-60, -30, 0, 30, 60])]
    grid += [np.stack([np.cos(lo) * np.cos(s), np.sin(lo) * np.cos(s), np.sin(s)], axis=1)
             for lo in np.radians(np.arange(0, 180, 30))]
    cmap = plt.get_cmap("hsv")
    fig, axes = plt.subplots(len(rows), len(cols), figsize=(2.0 * len(cols), 2.1 * len(rows)),
                             squeeze=False)
    for i, (label, traj) in enumerate(rows):
        traj = np.asarray(traj, float)
        if traj.ndim != 3 or traj.shape[0] != t.size or traj.shape[2] != 3 \
                or not np.all(np.isfinite(traj)):
            raise ValueError(f"token_snapshots: row {label!r} needs finite (K, n, 3) tokens")
        rgba = cmap(np.mod(np.arctan2(traj[0, :, 1], traj[0, :, 0]), 2 * np.pi) / (2 * np.pi))
        for j, k in enumerate(cols):
            ax = axes[i, j]
            ax.plot(np.cos(s), np.sin(s), color="0.5", lw=0.6)
            for g in grid:
                front = g @ view >= 0
                gx, gy = np.where(front, g @ right, np.nan), np.where(front, g @ up, np.nan)
                ax.plot(gx, gy, color="0.85", lw=0.4)
            p = traj[k]
            c = rgba.copy()
            c[p @ view < 0, 3] = 0.25
            order = np.argsort(p @ view)  # far side first
            ax.scatter((p @ right)[order], (p @ up)[order], c=c[order], s=7, linewidths=0)
            ax.set(xlim=(-1.05, 1.05), ylim=(-1.05, 1.05), aspect="equal")
            ax.axis("off")
            ax.set_title(f"{label}, t = {t[k]:.3g}", fontsize=8, pad=1)
    fig.subplots_adjust(left=0.01, right=0.99, bottom=0.01, top=0.93, wspace=0.02, hspace=0.12)
    path = Path(path)
    fig.savefig(path, dpi=100)
    plt.close(fig)
    return path


#: The logarithmic colour scales of the density pictures span at most this many decades
#: below the largest density shown (:func:`log_colour_range`).
RENDER_DECADES = 6


def log_colour_range(rho: np.ndarray, decades: int = RENDER_DECADES) -> tuple[float, float]:
    """``(lo, hi)`` of a logarithmic colour scale for the cell densities ``rho``.

    ``hi = max ρ``; ``lo`` the smallest positive value, raised to ``hi · 10^-decades``
    where it lies further below, and lowered to ``hi / 10`` for a (nearly) constant
    density. A clustered density spans decades: on a linear ``[0, max ρ]`` scale every cell
    away from the clusters gets the lowest colour. Values below ``lo`` are drawn in it.
    """
    rho = np.asarray(rho, float)
    hi = float(np.max(rho)) if rho.size else 0.0
    if not hi > 0:
        return 1e-300, 1.0
    lo = max(float(rho[rho > 0].min()), hi * 10.0 ** -decades)
    return min(lo, hi / 10.0), hi


def density_gif(cell_vertices: np.ndarray, rho: np.ndarray, t: np.ndarray, path: str | Path, *,
                title: str = "", frames: int = GIF_FRAMES, ms: int = GIF_FRAME_MS) -> Path:
    """Animate a cell density on a sphere mesh: ``cell_vertices (M, 3, 3)``, ``rho (K, M)``.

    One logarithmic colour scale for all frames (:func:`log_colour_range`, viridis); cells
    facing away from the camera are not drawn.
    """
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    from matplotlib.colors import LogNorm
    from mpl_toolkits.mplot3d.art3d import Poly3DCollection

    verts = np.asarray(cell_vertices, float)
    rho = np.asarray(rho, float)
    t = np.asarray(t, float)
    if verts.ndim != 3 or verts.shape[1:] != (3, 3) or rho.ndim != 2 \
            or rho.shape != (t.shape[0], verts.shape[0]):
        raise ValueError(f"density_gif: need cell_vertices (M, 3, 3), rho (K, M), t (K,); got "
                         f"{verts.shape}, {rho.shape}, {t.shape}")
    if not (np.all(np.isfinite(rho)) and np.all(np.isfinite(verts))):
        raise ValueError("density_gif: non-finite density or vertices")
    centre = verts.mean(axis=1)
    centre /= np.linalg.norm(centre, axis=1, keepdims=True)
    norm = LogNorm(*log_colour_range(rho), clip=True)
    cmap = plt.get_cmap("viridis")
    fig = plt.figure(figsize=(4.6, 3.6), dpi=_DPI)
    ax = _sphere_axes(fig, (0, 0, 0.76, 0.94))  # the colour bar, its ticks and label beside
    sm = plt.cm.ScalarMappable(norm=norm, cmap=cmap)
    fig.colorbar(sm, cax=fig.add_axes((0.77, 0.2, 0.03, 0.56)), label="density (log)")
    head = ax.set_title("", fontsize=8, pad=0)
    coll: Poly3DCollection | None = None
    idx = frame_indices(rho.shape[0], frames)
    out = []
    for j, k in enumerate(idx):
        azim = _AZIM[0] + (_AZIM[1] - _AZIM[0]) * j / max(len(idx) - 1, 1)
        ax.view_init(elev=_ELEV, azim=azim)
        front = centre @ _view_dir(_ELEV, azim) > -0.05
        if coll is not None:
            coll.remove()
        fc = cmap(norm(rho[k, front]))
        coll = Poly3DCollection(verts[front], facecolors=fc, edgecolors=fc, linewidths=0.3)
        ax.add_collection3d(coll)
        head.set_text(f"{title}   t = {t[k]:.3g}" if title else f"t = {t[k]:.3g}")
        out.append(_canvas_rgb(fig))
    plt.close(fig)
    return _save_gif(out, Path(path), ms)


def running_balance(steps: dict[str, np.ndarray], t_rec: np.ndarray, chain: np.ndarray, *,
                    stochastic: bool) -> dict[str, np.ndarray]:
    """Energy-balance terms at the recorded times, from the per-step integrands.

    Same rules as :class:`wflow.diagnostics.BalanceAccumulator` (trapezoid; with noisy
    weights ``∂_tE`` and the Itô drift at the left point): ``dE = E − E(0)``,
    ``work = ∫∂_tE``, ``ito``, ``G2_int = ∫G²``, ``power_int``, and the martingale from the
    recorded chain residual, ``M = dE − work − power_int − ito − chain``.

    Parameters
    ----------
    steps : dict
        Per-step integrands ``E, dEdt_w, ito, G2, power`` of shape ``(P, S+1)`` (or
        ``(S+1,)`` for one path) and ``t`` of shape ``(S+1,)`` (``ParticleResult.steps``).
    t_rec : (K,) array
        Recorded times (a subset of ``steps["t"]``).
    chain : (P, K) or (K,) array
        The recorded chain residual (``history["balance_chain"]``).

    Returns
    -------
    dict of (P, K) arrays
    """
    ts = np.asarray(steps["t"], float)
    dt = np.diff(ts)
    k = np.searchsorted(ts, np.asarray(t_rec, float))
    zero = np.zeros((np.atleast_2d(steps["E"]).shape[0], 1))

    def trap(key: str) -> np.ndarray:
        f = np.atleast_2d(steps[key])
        return np.concatenate([zero, np.cumsum(0.5 * dt * (f[:, 1:] + f[:, :-1]), axis=1)],
                              axis=1)[:, k]

    def left(key: str) -> np.ndarray:
        f = np.atleast_2d(steps[key])
        return np.concatenate([zero, np.cumsum(dt * f[:, :-1], axis=1)], axis=1)[:, k]

    E = np.atleast_2d(steps["E"])
    out = {"dE": (E - E[:, :1])[:, k],
           "work": left("dEdt_w") if stochastic else trap("dEdt_w"),
           "ito": left("ito"), "G2_int": trap("G2"), "power_int": trap("power")}
    out["martingale"] = (out["dE"] - out["work"] - out["power_int"] - out["ito"]
                         - np.atleast_2d(np.asarray(chain, float)))
    return out


def particle_pictures(res: Any, stage: str | Path, *, stochastic: bool,
                      title: str = "particles") -> list[str]:
    """The pictures of a particle run: ``tokens.gif`` (S², path 0) and ``run.png``.

    ``res`` is a :class:`~wflow.particles.ParticleResult` (with its trajectory for the
    GIF); returns the file names written into ``stage``.
    """
    stage = Path(stage)
    files = []
    if res.trajectory is not None and res.trajectory.shape[-1] == 3:
        token_gif(res.trajectory[0], res.t, stage / "tokens.gif", title=title)
        files.append("tokens.gif")
    bal = running_balance(res.steps, res.t, res.history["balance_chain"], stochastic=stochastic)
    run_figure([RunSeries(title, res.t, res.history["E"], res.history["G2"], bal, res.sign)],
               stage / "run.png")
    return files + ["run.png"]


def pde_pictures(cell_vertices: np.ndarray, res: Any, stage: str | Path, *, stochastic: bool,
                 title: str = "pde") -> list[str]:
    """The pictures of a PDE run: ``density.gif`` and ``run.png``.

    ``run.png`` has the balance panel when the run measured it. ``res`` is a
    :class:`~wflow.pde.PDEResult`; returns the file names written into ``stage``.
    """
    stage = Path(stage)
    density_gif(cell_vertices, res.rho, res.t, stage / "density.gif", title=title)
    h = res.history
    if "E" in res.steps and "balance_chain" in h:
        bal = running_balance(res.steps, res.t, h["balance_chain"], stochastic=stochastic)
    else:
        bal = None
    run_figure([RunSeries(title, res.t, h["E"], h["G2"], bal, res.sign)], stage / "run.png")
    return ["density.gif", "run.png"]


class RunSeries(NamedTuple):
    """One run for :func:`run_figure`.

    Recorded times, ``E`` and ``G²`` ``(P, K)`` (or ``(K,)``), the balance terms of
    :func:`running_balance` (``None``: no balance panel) and the flow's sign (``−1``
    descent: the published experiments; ``+1`` ascent; ``0``: not a gradient flow).
    """

    label: str
    t: np.ndarray
    E: np.ndarray
    G2: np.ndarray
    balance: dict[str, np.ndarray] | None
    sign: int = -1


def run_figure(runs: Sequence[RunSeries], path: str | Path, *, title: str = "") -> Path:
    """Per-run figure: one row per run, columns ``E(t)``, ``G²(t)`` (semilogy), balance, residual.

    Several Monte-Carlo paths: the mean and the band between the 16 % and 84 % quantiles
    over paths. The balance panel shows ``ΔE``, ``∫∂_tE``, Itô, ``M`` and ``sign·∫G²``
    (the published ``G²`` form; for ``sign = 0``, ``∫power``). The last column is the
    chain-rule residual ``ΔE − ∫∂_tE − Itô − M − ∫power``, the accuracy check that decides
    the run's status (:mod:`wflow.status`), on its own log axis (it is orders of
    magnitude smaller than the balance's terms); never the ``G²`` balance residual, which
    is not a check (it differs from the EDI for several or normalised heads).
    """
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    if not runs:
        raise ValueError("run_figure: no run given")
    ncol = 4 if any(r.balance is not None for r in runs) else 2
    fig, axes = plt.subplots(len(runs), ncol, figsize=(4.2 * ncol, 3.3 * len(runs)),
                             squeeze=False)
    for ax, run in zip(axes, runs, strict=True):
        t = np.asarray(run.t, float)

        def band(a: Any, y: np.ndarray, label: str | None, log: bool = False,
                 t: np.ndarray = t, **kw: Any) -> None:
            y = np.atleast_2d(y)
            line = (a.semilogy if log else a.plot)(t, y.mean(axis=0), label=label, **kw)[0]
            if y.shape[0] > 1:  # Monte-Carlo paths: the 16–84 % band
                lo, hi = np.quantile(y, [0.16, 0.84], axis=0)
                a.fill_between(t, lo, hi, color=line.get_color(), alpha=0.2, lw=0)

        band(ax[0], run.E, None)
        ax[0].set(xlabel="t (depth)", ylabel="E", title=f"{run.label}: energy")
        band(ax[1], run.G2, None, log=True)
        ax[1].set(xlabel="t (depth)", ylabel="G²", title="G² = ∫|v|² HM_h(Z_h) dμ")
        bal = run.balance
        if ncol == 2:
            continue
        if bal is None:
            ax[2].axis("off")
            ax[3].axis("off")
            continue
        for key, lab in (("dE", "ΔE"), ("work", "∫∂_tE"), ("ito", "Itô"), ("martingale", "M")):
            if key in ("ito", "martingale") and not np.any(bal[key]):
                continue
            band(ax[2], bal[key], lab)
        base = bal["dE"] - bal["work"] - bal["ito"] - bal["martingale"]
        if run.sign:
            band(ax[2], run.sign * bal["G2_int"], f"{'+' if run.sign > 0 else '−'}∫G²")
            what = "G² balance: ΔE − ∫∂_tE − Itô − M ∓ ∫G² (not the EDI, not a check)"
        else:
            band(ax[2], bal["power_int"], "∫power")
            what = "chain rule: ΔE − ∫∂_tE − Itô − M − ∫power"
        # the residual column: the chain-rule residual, the accuracy check that decides the
        # status (wflow.status), whatever the balance panel shows
        res = base - bal["power_int"]
        ax[2].axhline(0.0, color="0.6", lw=0.6)
        ax[2].set(xlabel="t (depth)", title=what)
        ax[2].title.set_fontsize(8)
        ax[2].legend(fontsize=7, ncol=2)
        # its own log axis: beside the terms (O(E)) the residual is a flat line at zero
        mag = np.abs(np.atleast_2d(res))
        mag = np.where(mag > 0, mag, np.nan)  # exactly 0 at t = 0: not drawn on a log axis
        band(ax[3], mag, "|chain-rule residual| (absolute)", log=True, color="k", lw=1.0)
        ax[3].set(xlabel="t (depth)",
                  title="chain-rule residual ΔE − ∫∂_tE − Itô − M − ∫power: the accuracy "
                        "check of the status")
        ax[3].title.set_fontsize(8)
        ax[3].legend(fontsize=7)
    if title:
        fig.suptitle(title, fontsize=10)
    fig.tight_layout()
    path = Path(path)
    fig.savefig(path, dpi=100)
    plt.close(fig)
    return path
