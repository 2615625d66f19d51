"""The PDE solver's cost model: memory, steps and time of ``wflow pde``.

Calibrated against measured peak RSS and CPU time (``tests/test_estimates.py`` pins it on
the recorded measurements, ``docs/guide/cli.md`` "Cost estimates"). The work of a step is
``stages()`` right-hand sides, read from the time-integrator object
(:class:`~wflow.pde.integrators.TimeIntegrator`), never from its name.

Token diffusion ``D > 0`` (:mod:`wflow.pde.diffusion`) adds two Crank–Nicolson sub-steps
of length ``Δt/2`` per step, each a CG solve whose iterations grow with the ratio
``q = Δt/Δt_+`` of the step to the positivity step ``Δt_+ ≈ C_+/(M D)``
(:data:`POSITIVE_STEP_MD`): :func:`diffusion_seconds`. Before computing,
:func:`check_diffusive_step` refuses a step beyond :data:`MAX_POSITIVITY_RATIO` times
``Δt_+`` (:class:`~wflow.infra.estimate.EstimateError`, naming ``pde.dt`` and
``attention.diffusion`` with a step that meets it).
"""

from __future__ import annotations

import math

from ..infra.estimate import Estimate, EstimateError, step_count
from .integrators import TIME_INTEGRATORS, TimeIntegrator
from .options import PDEOptions, PDETable

__all__ = ["PDE_STAGE_SECONDS", "PDE_PAIR_SECONDS", "BASELINE_BYTES", "STARTUP_SECONDS",
           "estimate_pde", "pde_steps", "time_integrator_of", "estimate_run",
           "POSITIVE_STEP_MD", "MAX_POSITIVITY_RATIO", "CN_CELL_SECONDS", "CG_CELL_SECONDS",
           "positive_step", "cg_iterations", "diffusion_seconds", "check_diffusive_step"]

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

#: ``C_+`` of the positivity step ``Δt_+ = 2 h_+ = C_+/(M D)`` of the Crank–Nicolson
#: diffusion on ``M`` cells (``h_+ = min_K 2A_K/(D Σ_σ T_σ)``,
#: :meth:`wflow.pde.diffusion.TokenDiffusion.positive_step`): measured ``M D Δt_+`` =
#: 7.07 (``sphere_720.msh``), 6.60 (``icosphere:1280``), 5.90 (``sphere_5120.msh``),
#: 5.46 (``sphere_40500.msh``); equilateral cells would give ``16π/(3√3)`` = 9.67. The
#: largest measured value: ``Δt_+`` of every shipped mesh is at most ``C_+/(M D)``, so a
#: step refused against it violates the bound on all of them.
POSITIVE_STEP_MD = 7.1

#: Largest ratio ``q = Δt/Δt_+`` of a PDE step with diffusion to the positivity step.
#: The solver rejects a step that leaves a negative mass and retries a shorter one, so a
#: step above ``Δt_+`` is allowed on smooth data; at ``q`` the Crank–Nicolson factor of
#: the grid-scale modes is ``≈ −(2q − 1)/(2q + 1)``: at ``q = 100`` they lose 1 % a step
#: where the flow damps them at once. Beyond it the diffusion is not resolved and the
#: positivity of every step rests on the data: refused.
MAX_POSITIVITY_RATIO = 100.0

#: CPU seconds per cell of one Crank–Nicolson sub-step besides its CG iterations
#: (right-hand side, flux-form update, gathers) and per cell and CG iteration: fitted on
#: ``sphere_40500.msh`` (one rank; 9.5 ms a sub-step at ``q = 1``, 20 iterations; 92 ms
#: at ``q = 1000``, 387 iterations) and within 30 % on 720, 1 280 and 5 120 cells.
CN_CELL_SECONDS, CG_CELL_SECONDS = 1.2e-7, 6e-9


def time_integrator_of(integrator: TimeIntegrator | str | None = None, *,
                       order: int = 1) -> TimeIntegrator:
    """The time-integrator object ``integrator`` stands for.

    An object is itself; a name, the one registered under it; ``None`` or ``"auto"``, the
    one :class:`~wflow.pde.PDEOptions` chooses for ``order``.
    """
    if isinstance(integrator, TimeIntegrator):
        return integrator
    name = PDEOptions(order=order, time_integrator=integrator or "auto").integrator
    return TIME_INTEGRATORS.resolve(name, "pde.time_integrator")


def pde_steps(cells: float, T: float, dt: float, cfl: float, vmax: float,
              max_steps: int) -> float:
    """Steps of the PDE: ``min(max_steps, max(T/dt, T vmax/(cfl h)))``, ``h = √(4π/M)``."""
    h = math.sqrt(4 * math.pi / max(cells, 1.0))
    return min(float(max_steps), max(step_count(T, dt), math.ceil(T * vmax / (cfl * h))))


def positive_step(cells: float, diffusion: float) -> float:
    """``Δt_+ = C_+/(M D)``: the positivity step of the diffusion (:data:`POSITIVE_STEP_MD`)."""
    return POSITIVE_STEP_MD / (max(float(cells), 1.0) * float(diffusion))


def cg_iterations(q: float, cells: float) -> float:
    """CG iterations of one sub-step at ``q = Δt/Δt_+``: ``4 + min(12 √q, 3.5 √M)``.

    Measured (rtol ``1e-13``, Jacobi): 8, 19–20, 52–55, 111–146 and 101–387 iterations
    at ``q`` = 0.1, 1, 10, 100, 1000 on 720–40 500 cells; the count saturates where the
    Laplacian's own condition number (``∝ M``) takes over.
    """
    return 4.0 + min(12.0 * math.sqrt(max(q, 0.0)), 3.5 * math.sqrt(max(cells, 1.0)))


def diffusion_seconds(cells: float, dt: float, diffusion: float) -> float:
    """CPU seconds of a step's two Crank–Nicolson sub-steps: ``2 M (a + b · its(q))``."""
    q = float(dt) / positive_step(cells, diffusion)
    return 2.0 * float(cells) * (CN_CELL_SECONDS + CG_CELL_SECONDS * cg_iterations(q, cells))


def check_diffusive_step(*, cells: float, dt: float, diffusion: float) -> float:
    """Refuse a PDE step more than :data:`MAX_POSITIVITY_RATIO` times the positivity step.

    Parameters
    ----------
    cells : float
        Cells ``M`` of the mesh.
    dt : float
        The step the solver takes first (``min(dt, cfl h/vmax)``).
    diffusion : float
        Token diffusion ``D >= 0``.

    Returns
    -------
    float
        ``q = Δt/Δt_+`` (``0`` for ``D = 0``).

    Raises
    ------
    EstimateError
        ``q > 100``: names ``pde.dt`` and ``attention.diffusion``, the positivity step and
        the largest step allowed.
    """
    if not diffusion > 0:
        return 0.0
    dtp = positive_step(cells, diffusion)
    q = float(dt) / dtp
    if q > MAX_POSITIVITY_RATIO:
        raise EstimateError(
            f"pde.dt: a step {dt:.3g} with attention.diffusion D = {diffusion:g} on "
            f"{int(cells)} cells is {q:.3g} times the diffusion's positivity step "
            f"{dtp:.3g} (> {MAX_POSITIVITY_RATIO:g}: the grid-scale modes are not damped "
            f"and positivity rests on the data); use dt <= "
            f"{MAX_POSITIVITY_RATIO * dtp:.3g}, a coarser mesh or a smaller D")
    return q


def step_evaluations(stages: int, error_control: bool) -> int:
    """Right-hand sides a step costs: ``stages``, or ``3 stages − 1`` with step doubling.

    A fixed step evaluates the velocity at its new state and at its ``stages − 1`` inner
    stages. Step doubling (``rtol``/``atol``, :func:`wflow.pde.accuracy.doubled_step`)
    takes the step and two half steps from the same state: the new state once, each of
    the three steps' inner stages, and the midpoint: ``1 + 3 (stages − 1) + 1``.
    """
    return 3 * int(stages) - 1 if error_control else int(stages)


#: The note of an estimate with error control: its steps are a lower bound.
ADAPTIVE_NOTE = ("error control: step doubling, 3·stages − 1 right-hand sides a step, the "
                 "steps counted at the largest step dt (a lower bound: the controller takes "
                 "smaller ones where the tolerance needs them)")


def estimate_pde(*, cells: int, H: int = 1, T: float, dt: float, n_saves: int = 11,
                 cfl: float = 0.9, order: int = 2,
                 integrator: TimeIntegrator | str | None = None,
                 max_steps: int = 1_000_000, vmax: float = 1.5, what: str = "pde",
                 startup: bool = True, diffusion: float = 0.0,
                 error_control: bool = False) -> Estimate:
    """Estimate of ``wflow pde`` on ``cells`` cells.

    Steps ``min(max_steps, max(T/dt, T vmax/(cfl h)))`` with ``h = sqrt(4π/M)`` (the CFL
    bound with ``|v| ≈ vmax``); memory: the libraries, the mesh, its connectivity and the
    solver's vectors (~1.2 kB a cell, measured), the saved densities ``16 n_saves M``; time:
    ``STARTUP + stages (PDE_STAGE + M² H PDE_PAIR)`` a step, ``stages`` the time
    integrator's right-hand sides per step (``integrator.stages()``: an object, a
    registered name, or ``None``: the one ``order`` chooses, Euler for 1, SSP-RK2 for 2).
    ``startup=False``: a phase of a longer job (no libraries, no start-up).

    With token diffusion ``diffusion = D > 0``: the step ``min(dt, cfl h/vmax)`` is
    checked first (:func:`check_diffusive_step`), each step adds its two Crank–Nicolson
    sub-steps (:func:`diffusion_seconds`) and the memory the diffusion operator (its
    dual geometry, the matrix and the CG vectors: 0.54 kB a cell resident after
    the first sub-step on 40 500 cells, counted as 0.6 kB). ``D = 0``: the
    noiseless estimate, bit for bit.

    With ``error_control`` (``rtol``/``atol``): :func:`step_evaluations` right-hand sides a
    step, the steps counted at ``dt`` (a lower bound, noted: :data:`ADAPTIVE_NOTE`).
    """
    M = float(cells)
    noisy = diffusion > 0
    if noisy:
        h = math.sqrt(4 * math.pi / max(M, 1.0))
        check_diffusive_step(cells=M, dt=min(float(dt), cfl * h / vmax), diffusion=diffusion)
    S = pde_steps(M, T, dt, cfl, vmax, max_steps)
    stages = step_evaluations(time_integrator_of(integrator, order=order).stages(),
                              error_control)
    parts = {"libraries": float(BASELINE_BYTES)} if startup else {}
    parts.update({"mesh and solver": 1200.0 * M, "saved densities": 8.0 * n_saves * M * 2})
    secs = S * stages * (PDE_STAGE_SECONDS + M * M * H * PDE_PAIR_SECONDS)
    if noisy:
        parts["diffusion operator"] = 600.0 * M
        step = T / S if S > 0 else float(dt)
        secs += S * diffusion_seconds(M, step, diffusion)
    secs += STARTUP_SECONDS if startup else 0.0
    return Estimate(what, sum(parts.values()), S, secs, parts,
                    (ADAPTIVE_NOTE,) if error_control else ())


def estimate_run(table: PDETable, *, cells: int, H: int) -> Estimate:
    """:func:`estimate_pde` of a run of the ``[pde]`` table on ``cells`` cells, ``H`` heads."""
    o = table.options
    return estimate_pde(cells=int(cells), H=int(H), T=o.T, dt=o.dt, n_saves=int(o.n_saves),
                        cfl=o.cfl, order=int(o.order), integrator=o.integrator,
                        max_steps=int(o.max_steps),
                        diffusion=float(getattr(o, "diffusion", 0.0)),
                        error_control=o.tolerance is not None)
