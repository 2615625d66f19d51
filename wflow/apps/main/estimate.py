"""The main job's cost model (``wflow run``): its phases' estimates, one after the other.

Each phase is costed by its solver's own model (:mod:`wflow.particles.estimate`,
:mod:`wflow.pde.estimate`, :mod:`wflow.jko.estimate`) and the exact ``W₂`` of the
comparison by :func:`wflow.infra.estimate.estimate_w2`.
"""

from __future__ import annotations

import math

from ...infra.estimate import Estimate, estimate_w2
from ...jko.estimate import estimate_jko
from ...jko.options import auto_steps_bound
from ...particles import estimate as particles_estimate
from ...particles.estimate import estimate_particles
from ...pde.estimate import estimate_pde

__all__ = ["BASELINE_BYTES", "STARTUP_SECONDS", "estimate_main_job"]

#: Resident size (bytes) of the interpreter and the libraries ``wflow run`` loads.
BASELINE_BYTES = 330 * 2**20
#: Start-up seconds of ``wflow run``: the CPU seconds of the smallest runs of the grid.
STARTUP_SECONDS = 2.5


def estimate_main_job(*, cells: int, n: int, H: int, T: float, dt: float, n_saves: int,
                      steps_per_save: int, jko: bool, refinement: int,
                      max_ot_points: int = 6000, w2_dense_max_points: float = math.inf,
                      jko_steps: int | None = None) -> Estimate:
    """Estimate of ``wflow run``: PDE (twice with the JKO), particles, JKO, its table, W₂.

    The phases run one after the other: the memory is the libraries plus the largest
    phase, the time the start-up plus the sum. The JKO step count is ``jko_steps`` when
    known (``T/τ``), else :func:`~wflow.jko.options.auto_steps_bound` (``tau = "auto"``'s
    rule with ``|v|max <= 1``: an upper bound). The ``τ/h`` table's
    row ``k`` (``1..refinement``) runs the JKO and the surrogate PDE with ``N_k ≈ N/1.5^k``
    steps on ``M_k ≈ M N_k²/N²`` cells and ``N_k + 1`` cell-vs-cell ``W₂``; the coarsest
    row once more with the OT scheme. The comparison computes ``n_saves`` particle-vs-cell
    ``W₂`` (at most ``max_ot_points`` particles) and ``N + 1`` cell-vs-cell ones. A ``W₂``
    is dense up to ``w2_dense_max_points`` support points, certified sparse beyond
    (:func:`estimate_w2`; the default, no limit: every ``W₂`` dense).
    """
    M = float(cells)
    base = float(BASELINE_BYTES)
    phases: list[Estimate] = [estimate_pde(cells=cells, H=H, T=T, dt=dt, n_saves=n_saves,
                                           what="pde", startup=False)]
    p_steps = max(1, n_saves - 1) * steps_per_save
    part = estimate_particles(n=n, H=H, T=T, dt=T / p_steps, record_every=steps_per_save,
                              save_trajectory=True)
    phases.append(Estimate("particles", part.memory - particles_estimate.BASELINE_BYTES,
                           part.steps, part.seconds - particles_estimate.STARTUP_SECONDS,
                           {k: v for k, v in part.parts.items() if k != "libraries"}))
    n_ot = min(int(n), int(max_ot_points))
    phases.append(estimate_w2(n_ot, cells, calls=n_saves, dense_max_points=w2_dense_max_points,
                              what="W2 particles vs PDE"))
    if jko:
        N = float(jko_steps) if jko_steps else float(auto_steps_bound(T, cells))
        phases.append(estimate_jko(cells=cells, H=H, steps=N, startup=False))
        phases.append(estimate_pde(cells=cells, H=H, T=T, dt=dt, n_saves=n_saves,
                                   what="pde_surrogate", startup=False))
        phases.append(estimate_w2(cells, cells, calls=int(N) + 1,
                                  dense_max_points=w2_dense_max_points,
                                  what="W2 JKO vs PDE"))
        seen, last = {N}, None
        for k in range(1, int(refinement) + 1):
            Nk = max(1, math.floor(N / 1.5 ** k + 0.5))
            if Nk in seen:
                continue
            seen.add(Nk)
            n_ico = max(2, math.floor(math.sqrt(M / 20.0) * Nk / N + 0.5))
            Mk = 20 * n_ico * n_ico
            phases.append(estimate_jko(cells=Mk, H=H, steps=Nk, startup=False,
                                       what=f"table row {k} jko"))
            phases.append(estimate_pde(cells=Mk, H=H, T=T, dt=T / Nk, n_saves=Nk + 1,
                                       what=f"table row {k} pde", startup=False))
            phases.append(estimate_w2(Mk, Mk, calls=Nk + 1, dense_max_points=w2_dense_max_points,
                                      what=f"W2 table row {k}"))
            last = (Mk, Nk)
        if last is not None:
            phases.append(estimate_jko(cells=last[0], H=H, steps=last[1], scheme="ot",
                                       startup=False, what="table OT cross-check"))
    big = max(phases, key=lambda e: e.memory)
    parts = {"libraries": base, **{f"{big.what}: {k}": v for k, v in big.parts.items()}}
    secs = STARTUP_SECONDS + sum(e.seconds for e in phases)
    return Estimate("run", base + big.memory, sum(e.steps for e in phases), secs, parts)
