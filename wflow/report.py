"""Figures and the Markdown report of the main job (plotting imported lazily).

* :func:`write_report` — ``report.md`` with the density snapshots, energy and ``G²`` vs
  time, the EDI balance terms vs time and ``W_2`` particles-vs-PDE vs time.
"""

from __future__ import annotations

import logging
from pathlib import Path
from typing import Any

import numpy as np

from .io import atomic_write_text

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
        from .pde.run import render_snapshots

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
    ts = np.asarray(st["t"])

    def energy(plt):
        fig, ax = plt.subplots(1, 2, figsize=(10, 3.6))
        ax[0].plot(pde.t, pde.history["E"], "o-", label="PDE")
        ax[0].plot(particles.t, particles.history["E"][0], "--", label="particles")
        if jko is not None:
            ax[0].plot(jko.t, jko.history["E"], "s:", label="JKO")
        ax[0].set(xlabel="t", ylabel="E", title="energy")
        ax[0].legend()
        ax[1].semilogy(pde.t, pde.history["G2"], "o-", label="PDE")
        ax[1].semilogy(particles.t, particles.history["G2"][0], "--", label="particles")
        ax[1].set(xlabel="t", ylabel="G²", title="slope G²")
        ax[1].legend()
        return fig

    figs.append(_fig(stage / "energy.png", energy))

    def edi(plt):
        fig, ax = plt.subplots(figsize=(6.4, 3.8))
        E = np.asarray(st["E"])
        diss = _cumtrapz(ts, 0.5 * (np.asarray(st["speed2"]) + np.asarray(st["slope2"])))
        work = _cumtrapz(ts, np.asarray(st["dEdt_w"]))
        sign = pde.sign or 1
        ax.plot(ts, E - E[0], label="E(t) − E(0)")
        ax.plot(ts, work, label="∫ ∂_tE")
        ax.plot(ts, sign * diss, label="±∫ (½|μ'|² + ½|∂E|²)")
        ax.plot(ts, E - E[0] - work - sign * diss, "k", lw=0.8, label="EDI residual")
        ax.set(xlabel="t", title="EDI balance (PDE)")
        ax.legend(fontsize=8)
        return fig

    figs.append(_fig(stage / "edi_balance.png", edi))

    def w2(plt):
        fig, ax = plt.subplots(figsize=(6.4, 3.6))
        ax.plot(compare["t"], compare["w2_particles_vs_pde"], "o-", label="particles vs PDE")
        if "w2_jko_vs_pde" in compare:
            ax.plot(compare["t_jko"], compare["w2_jko_vs_pde"], "s--", label="JKO vs PDE")
        ax.set(xlabel="t", ylabel="W₂ (rad)", title="Wasserstein distances")
        ax.legend()
        return fig

    figs.append(_fig(stage / "w2.png", w2))
    _write_md(stage, summary, snaps)
    return figs


def _write_md(stage: Path, s: dict, snaps: list[tuple[float, str]]) -> None:
    e = s["edi"]
    lines = [
        "# wflow run report", "",
        f"Flow: `{s['flow']}` on a mesh of {s['mesh']['cells']} cells; "
        f"{s['n_particles']} particles; wflow {s['provenance']['wflow']}.", "",
        "## Key numbers", "",
        "| quantity | value |", "|---|---|",
        f"| EDI residual, PDE (abs / rel. to dissipation) | {e['pde']['residual']:.3e} / "
        f"{e['pde']['relative']:.3e} |",
        f"| EDI residual, particles | {e['particles']['residual']:.3e} / "
        f"{e['particles']['relative']:.3e} |",
    ]
    if "jko" in e:
        lines.append(f"| EDI residual, JKO | {e['jko']['residual']:.3e} / "
                     f"{e['jko']['relative']:.3e} |")
    lines += [
        f"| W₂ particles vs PDE at T (at t = 0) | {s['w2']['particles_vs_pde']:.4f} "
        f"({s['w2']['particles_vs_pde_initial']:.4f}) |",
    ]
    if "jko_vs_pde" in s["w2"]:
        lines.append(f"| max W₂ JKO vs PDE | {s['w2']['jko_vs_pde']:.4f} |")
    lines += [
        f"| relative mass error (max over the run) | {s['mass_error']:.2e} |",
        f"| minimum density | {s['min_density']:.3e} |",
        f"| wall time (s) | {s['wall_time_s']['total']:.1f} |", "",
    ]
    if snaps:
        lines += ["## Density on the sphere", ""]
        lines += [f"![density at t = {t:.3g}]({name})" for t, name in snaps] + [""]
    lines += ["## Energy and slope", "", "![energy and G²](energy.png)", "",
              "## Energy–dissipation balance", "", "![EDI balance](edi_balance.png)", "",
              "## Particles vs PDE", "", "![W2](w2.png)", "",
              "Raw data: `density.npz`, `trajectory.npz`, `diagnostics_*.csv`, `w2*.csv`; "
              "every number above is in `summary.json`.", ""]
    atomic_write_text(stage / "report.md", "\n".join(lines))
