"""The JKO scheme's cost model: memory, steps and time of ``wflow jko``.

Calibrated against measured peak RSS and CPU time (``tests/test_estimates.py`` pins it on
the recorded measurements). The step count of ``tau = "auto"`` before the mesh is known
is :func:`~wflow.jko.options.auto_steps_bound` (the one definition of that bound).
"""

from __future__ import annotations

from ..infra.accuracy import Tolerance
from ..infra.estimate import Estimate, estimate_w2
from ..particles.estimate import PAIR_SECONDS
from ..pde.estimate import PDE_PAIR_SECONDS
from .options import AutoSteps, JKOTable
from .schemes import SCHEMES, JKOScheme

__all__ = ["FV_CELL_SECONDS", "BASELINE_BYTES", "STARTUP_SECONDS", "ADAPTIVE_STEPS",
           "adaptive_steps", "estimate_jko", "estimate_run"]

#: CPU seconds per cell and step of the finite-volume JKO step: 4.7 ms a step solve on 320
#: cells and 12 ms on 720 (two softmax heads; the adaptive rows of
#: ``bench/results/bench_jko_estimate.json``, where the steps dominate the start-up; the
#: earlier 8e-6 came from 0.32 s a step at 40 500 cells and ran 1.7–1.9× low on these).
FV_CELL_SECONDS = 1.4e-5

#: The adaptive JKO's kept steps, ``N ≈ ADAPTIVE_STEPS · T²/rtol`` (:func:`adaptive_steps`).
#: The controller keeps each pair's local error ``e ≈ C h²`` (tolerances) within ``h/T``
#: (:mod:`wflow.jko.accuracy`), so ``h ≈ rtol/(C' T)`` and ``N = T/h ∝ T²/rtol``, with
#: ``C'`` the squared rate ``(|v|/ℓ)²`` of the flow (``ℓ`` the density's length scale), of
#: order 1 for heads of unit norm. Measured ``N·rtol/T²``: 0.60–0.77 on the shipped
#: default's two softmax heads (``T = 2``, 320 and 720 cells, rtol 1e-2 to 1e-3), 0.76–0.88
#: on one USA head at β = 2 (``T = 0.4``, 320 and 2 420 cells;
#: ``bench/results/bench_jko_estimate.json``), 1.0–1.09 on the accuracy test's problem
#: (tests/test_jko_accuracy.py: 16 to 1 610 steps at rtol 1e-2 to 1e-4). The former
#: ``T/rtol`` ran 0.3× to 1.5× the steps (linear in ``T``, where the controller is
#: quadratic).
ADAPTIVE_STEPS = 0.75

#: Resident size (bytes) of the interpreter and the libraries ``wflow jko`` loads (NumPy,
#: numba, DOLFINx, PETSc, POT), measured on the smallest runs of the calibration grid.
BASELINE_BYTES = 300 * 2**20

#: Start-up seconds of ``wflow jko``: the CPU seconds of the smallest runs of the grid.
STARTUP_SECONDS = 1.8


def estimate_jko(*, cells: int, H: int = 1, steps: float, inner: int = 20,
                 max_pairs: int = 50_000_000, dense_ot_max_cells: int = 6000,
                 scheme: str | JKOScheme = "fv", verify_max_cells: int = 2500, what: str = "jko",
                 startup: bool = True, work: float = 1.0) -> Estimate:
    """Estimate of ``wflow jko``: ``steps`` steps on ``cells`` cells.

    Every scheme keeps the density of every step: ``8 M (steps + 1)`` bytes (at ``T/τ =
    10⁷`` steps on 2 420 cells, 194 GB). ``scheme="fv"`` (the default scheme): memory, the
    libraries and the finite-volume
    graph (~2 kB a cell); time per step ``FV_CELL M`` plus ``inner / 3`` potential
    evaluations of ``M² H`` cell pairs; up to ``verify_max_cells`` cells the POT referee
    (a ``W²`` between consecutive steps, :func:`estimate_w2`: dense up to
    ``dense_ot_max_cells``, certified sparse beyond). ``scheme="ot"``:
    memory, the candidate pairs ``24 min(M², max_pairs)`` and a dense transport problem
    ``24 M²`` (cost, plan, work) when ``M <= dense_ot_max_cells``; time per step
    ``inner`` oracle calls of ``min(M², max_pairs)`` pair costs plus ``M² H`` kernel pairs.
    ``work``: step solves per kept step (error control: 1.5 adaptive, 3 for fixed steps
    judged by the run at ``τ/2``; :func:`estimate_run`).
    """
    M = float(cells)
    parts = {"libraries": float(BASELINE_BYTES)} if startup else {}
    # the density of every step is kept (history, density.npz): 8 M bytes a step
    parts["stored densities"] = 8.0 * M * (float(steps) + 1.0)
    # the scheme's own cost model: transport over candidate pairs (the OT step) or the
    # finite-volume step; "auto" is the FV step (the scenario jobs always give the mesh)
    if SCHEMES.resolve(scheme, "jko.scheme").resolve(mesh_given=True).candidate_pairs:
        pairs = min(M * M, float(max_pairs))
        parts["candidate pairs"] = 24.0 * pairs
        if M <= dense_ot_max_cells:
            parts["dense transport problem"] = 24.0 * M * M
        secs = work * steps * inner * (pairs * 10 * PAIR_SECONDS + M * M * H * PAIR_SECONDS)
    else:
        parts["finite-volume graph"] = 2000.0 * M
        secs = work * steps * (FV_CELL_SECONDS * M + inner / 3 * M * M * H * PDE_PAIR_SECONDS)
        if M <= verify_max_cells:
            ref = estimate_w2(int(M), int(M), calls=int(steps), what="referee W2",
                              dense_max_points=dense_ot_max_cells)
            parts.update(ref.parts)
            secs += ref.seconds
    secs += STARTUP_SECONDS if startup else 0.0
    return Estimate(what, sum(parts.values()), steps, secs, parts)


def adaptive_steps(T: float, rtol: float) -> float:
    """Kept steps of the adaptive JKO at ``rtol`` over ``[0, T]``: ``ADAPTIVE_STEPS·T²/rtol``.

    Parameters
    ----------
    T : float
        Final time (the scenario's time units).
    rtol : float
        The requested relative tolerance.

    Returns
    -------
    float
        The step count (at least 1); see :data:`ADAPTIVE_STEPS` for its measured range.
    """
    return max(1.0, ADAPTIVE_STEPS * float(T) ** 2 / float(rtol))


def estimate_run(table: JKOTable, *, cells: int, H: int) -> Estimate:
    """:func:`estimate_jko` of a run of the ``[jko]`` table on ``cells`` cells, ``H`` heads.

    Steps: the table's step rule on this mesh (``T/τ``, or the bound of ``tau = "auto"``,
    :func:`~wflow.jko.options.auto_steps_bound`, with the token diffusion's steps); the POT
    referee as ``verify`` says (``None``: up to ``verify_max_cells``).

    * **Token diffusion** ``D > 0`` under ``tau = "auto"``: the heat flow's steps
      ``T·4D/(3h)²`` (:func:`~wflow.jko.options.auto_tau`). Where they more than double the
      noiseless rule's, the estimate names ``attention.diffusion`` (and ``jko.tau``), so
      that a run refused for its cost (:func:`~wflow.infra.estimate.check_estimate`: memory,
      or above an hour in batch mode) says which key made it absurd.
    * **Error control** (``rtol``/``atol``): fixed steps cost ``3×`` (the run at ``τ/2``
      judges it); adaptive steps are the controller's, at least the rule's and
      :func:`adaptive_steps` (``≈ 0.75 T²/rtol``, measured 0.6–1.1× of it), at ``1.5``
      step solves a kept step.
    """
    s = table.settings
    verify = s["verify"]
    steps = float(table.steps_bound(cells))
    what, work = "jko", 1.0
    D = table.diffusion
    if D > 0 and isinstance(table.step, AutoSteps):
        quiet = float(table.step.steps_bound(table.T, cells))
        if steps > 2.0 * quiet:
            what = (f"jko (tau = \"auto\" with the token diffusion attention.diffusion = "
                    f"{D:g}: {steps:.3g} steps, {steps / quiet:.3g}x the noiseless rule's; "
                    "give jko.tau or a smaller D)")
    if s.get("rtol") is not None or s.get("atol") is not None:
        if s.get("adaptive", True):
            rtol = s.get("rtol") or Tolerance().rtol
            steps, work = max(steps, adaptive_steps(table.T, float(rtol))), 1.5
        else:
            work = 3.0
    return estimate_jko(cells=int(cells), H=int(H), steps=steps, what=what, work=work,
                        max_pairs=s["max_pairs"], dense_ot_max_cells=s["dense_ot_max_cells"],
                        scheme=s["scheme"],
                        verify_max_cells=(0 if verify is False else
                                          int(cells) if verify else s["verify_max_cells"]))
