"""The kinetic solver's cost model: memory, steps and time of ``wflow kinetic``.

A step of :func:`~wflow.kinetic.solve_kinetic` is the PDE's step (:mod:`wflow.pde.estimate`:
the steps from ``T/dt`` and the CFL bound, ``stages()`` right-hand sides a step from the
time-integrator object) with every right-hand side done once per slice: one kernel sum of
the slice's own masses at the edge quadrature points (``M² H`` cell pairs, the PDE's
:data:`~wflow.pde.estimate.PDE_PAIR_SECONDS`), the slice's fluxes and the call's own
overhead, then the prefix sums over the slices. Calibrated on measured CPU times
(``tests/test_kinetic_cli.py`` pins the model on the recorded rows of
``bench/results/kinetic_estimate.json``).
"""

from __future__ import annotations

from ..infra.estimate import Estimate
from ..pde.estimate import (
    ADAPTIVE_NOTE,
    BASELINE_BYTES,
    PDE_PAIR_SECONDS,
    PDE_STAGE_SECONDS,
    pde_steps,
    step_evaluations,
    time_integrator_of,
)
from .options import KineticTable

__all__ = ["KINETIC_CALL_SECONDS", "KINETIC_CELL_SECONDS", "KINETIC_STARTUP_SECONDS",
           "estimate_kinetic", "estimate_run"]

#: Start-up CPU seconds of ``wflow kinetic`` (the interpreter, DOLFINx, the mesh, the
#: scenario, the compiled kernels from numba's cache): the smallest recorded run's CPU time
#: less its steps' model (a loaded 2-core machine; the PDE's own start-up is 1.4 s idle).
KINETIC_STARTUP_SECONDS = 3.0

#: Seconds of one slice's right-hand side besides its cell pairs: the kernel call's own
#: overhead (fitted on 1 280 … 9 680 cells, ``S`` = 16 … 64, one head).
KINETIC_CALL_SECONDS = 4e-3
#: Seconds per cell of one slice's right-hand side (fluxes, upwinding, prefix sums).
KINETIC_CELL_SECONDS = 4e-7


def estimate_kinetic(*, cells: int, S: int, H: int = 1, T: float, dt: float,
                     n_saves: int = 11, cfl: float = 0.9, order: int = 1,
                     integrator=None, max_steps: int = 1_000_000, vmax: float = 1.5,
                     what: str = "kinetic", startup: bool = True,
                     error_control: bool = False) -> Estimate:
    """Estimate of ``wflow kinetic`` on ``cells`` cells and ``S`` slices.

    Steps as the PDE's (:func:`~wflow.pde.estimate.pde_steps`); time
    ``STARTUP + steps · stages · (PDE_STAGE + S (CALL + CELL M + M² H PAIR))``
    (:data:`KINETIC_STARTUP_SECONDS`); memory: the
    libraries, the mesh and the solver's vectors (the PDE's 1.2 kB a cell), the slices'
    state and stage copies (``8 · 4 S M``), the cumulative sums at the edge quadrature
    points (``8 · 2 · 3 M · 4 H S``: numerator and normaliser per head) and the saved
    densities ``8 n_saves S M``. With ``error_control`` (``pde.rtol``/``atol``): the
    PDE's :func:`~wflow.pde.estimate.step_evaluations` right-hand sides a step, the steps
    counted at ``dt`` (a lower bound, noted), and in memory the full step and the two half
    steps (one gathered) held together, ``8 · 4 S M``.
    """
    M, S_ = float(cells), float(S)
    steps = pde_steps(M, T, dt, cfl, vmax, max_steps)
    stages = step_evaluations(time_integrator_of(integrator, order=order).stages(),
                              error_control)
    parts = {"libraries": float(BASELINE_BYTES)} if startup else {}
    parts.update({"mesh and solver": 1200.0 * M, "slices": 8.0 * 4 * S_ * M,
                  "cumulative sums": 8.0 * 2 * 3 * M * 4 * H * S_,
                  "saved densities": 8.0 * n_saves * S_ * M})
    if error_control:  # the step, the two half steps (one gathered) held at once
        parts["step doubling"] = 8.0 * 4 * S_ * M
    per_slice = KINETIC_CALL_SECONDS + KINETIC_CELL_SECONDS * M + M * M * H * PDE_PAIR_SECONDS
    secs = steps * stages * (PDE_STAGE_SECONDS + S_ * per_slice)
    secs += KINETIC_STARTUP_SECONDS if startup else 0.0
    return Estimate(what, sum(parts.values()), steps, secs, parts,
                    (ADAPTIVE_NOTE,) if error_control else ())


def estimate_run(table: KineticTable, *, cells: int, H: int) -> Estimate:
    """:func:`estimate_kinetic` of a run of the ``[kinetic]`` table on ``cells`` cells."""
    o, p = table.options, table.options.pde
    return estimate_kinetic(cells=int(cells), S=int(o.S), H=int(H), T=p.T, dt=p.dt,
                            n_saves=int(p.n_saves), cfl=p.cfl, order=int(p.order),
                            integrator=p.integrator, max_steps=int(p.max_steps),
                            error_control=p.tolerance is not None)
