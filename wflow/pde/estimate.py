"""The PDE solver's cost model: memory, steps and time of ``wflow pde``.

Calibrated against measured peak RSS and CPU time (``tests/test_estimates.py`` pins it on
the recorded measurements, ``docs/guide/cli.md`` "Cost estimates"). The work of a step is
``stages()`` right-hand sides, read from the time-integrator object
(:class:`~wflow.pde.integrators.TimeIntegrator`), never from its name.
"""

from __future__ import annotations

import math

from ..infra.estimate import Estimate, step_count
from .integrators import TIME_INTEGRATORS, TimeIntegrator
from .options import PDEOptions, PDETable

__all__ = ["PDE_STAGE_SECONDS", "PDE_PAIR_SECONDS", "BASELINE_BYTES", "STARTUP_SECONDS",
           "estimate_pde", "pde_steps", "time_integrator_of", "estimate_run"]

#: Fixed cost of one stage of a PDE step (s): flux assembly and the PETSc vector updates —
#: measured on ``wflow pde`` with 80 cells, order 1 (≈ 2.5 ms a step).
PDE_STAGE_SECONDS = 2.5e-3

#: Seconds per cell pair, head and stage of the PDE's kernel sums (1e-10 CPU seconds
#: measured at 9 680 cells).
PDE_PAIR_SECONDS = 1e-10

#: Resident size (bytes) of the interpreter and the libraries ``wflow pde`` loads (NumPy,
#: numba, DOLFINx, PETSc), measured on the smallest runs of the calibration grid.
BASELINE_BYTES = 290 * 2**20

#: Start-up seconds of ``wflow pde``: the CPU seconds of the smallest runs of the grid.
STARTUP_SECONDS = 1.4


def time_integrator_of(integrator: TimeIntegrator | str | None = None, *,
                       order: int = 1) -> TimeIntegrator:
    """The time-integrator object ``integrator`` stands for.

    An object is itself; a name, the one registered under it; ``None`` or ``"auto"``, the
    one :class:`~wflow.pde.PDEOptions` chooses for ``order``.
    """
    if isinstance(integrator, TimeIntegrator):
        return integrator
    name = PDEOptions(order=order, time_integrator=integrator or "auto").integrator
    return TIME_INTEGRATORS.lookup(name, "pde.time_integrator")


def pde_steps(cells: float, T: float, dt: float, cfl: float, vmax: float,
              max_steps: int) -> float:
    """Steps of the PDE: ``min(max_steps, max(T/dt, T vmax/(cfl h)))``, ``h = √(4π/M)``."""
    h = math.sqrt(4 * math.pi / max(cells, 1.0))
    return min(float(max_steps), max(step_count(T, dt), math.ceil(T * vmax / (cfl * h))))


def estimate_pde(*, cells: int, H: int = 1, T: float, dt: float, n_saves: int = 11,
                 cfl: float = 0.9, order: int = 2,
                 integrator: TimeIntegrator | str | None = None,
                 max_steps: int = 1_000_000, vmax: float = 1.5, what: str = "pde",
                 startup: bool = True) -> Estimate:
    """Estimate of ``wflow pde`` on ``cells`` cells.

    Steps ``min(max_steps, max(T/dt, T vmax/(cfl h)))`` with ``h = sqrt(4π/M)`` (the CFL
    bound with ``|v| ≈ vmax``); memory: the libraries, the mesh, its connectivity and the
    solver's vectors (~1.2 kB a cell, measured), the saved densities ``16 n_saves M``; time:
    ``STARTUP + stages (PDE_STAGE + M² H PDE_PAIR)`` a step, ``stages`` the time
    integrator's right-hand sides per step (``integrator.stages()``: an object, a
    registered name, or ``None``: the one ``order`` chooses, Euler for 1, SSP-RK2 for 2).
    ``startup=False``: a phase of a longer job (no libraries, no start-up).
    """
    M = float(cells)
    S = pde_steps(M, T, dt, cfl, vmax, max_steps)
    stages = time_integrator_of(integrator, order=order).stages()
    parts = {"libraries": float(BASELINE_BYTES)} if startup else {}
    parts.update({"mesh and solver": 1200.0 * M, "saved densities": 8.0 * n_saves * M * 2})
    secs = S * stages * (PDE_STAGE_SECONDS + M * M * H * PDE_PAIR_SECONDS)
    secs += STARTUP_SECONDS if startup else 0.0
    return Estimate(what, sum(parts.values()), S, secs, parts)


def estimate_run(table: PDETable, *, cells: int, H: int) -> Estimate:
    """:func:`estimate_pde` of a run of the ``[pde]`` table on ``cells`` cells, ``H`` heads."""
    o = table.options
    return estimate_pde(cells=int(cells), H=int(H), T=o.T, dt=o.dt, n_saves=int(o.n_saves),
                        cfl=o.cfl, order=int(o.order), integrator=o.integrator,
                        max_steps=int(o.max_steps))
