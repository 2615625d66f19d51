"""The main job's cost model (``wflow run``): its phases' estimates, one after the other.

Each phase is costed by its solver's own model (:mod:`wflow.particles.estimate`,
:mod:`wflow.pde.estimate`, :mod:`wflow.jko.estimate`) and the exact ``W₂`` of the
comparison by :func:`wflow.infra.estimate.estimate_w2`.
"""

from __future__ import annotations

import math
from typing import Any

from ...infra.estimate import Estimate, estimate_w2
from ...jko.estimate import estimate_jko
from ...jko.options import auto_steps_bound
from ...particles import estimate as particles_estimate
from ...particles.estimate import estimate_particles
from ...pde.estimate import estimate_pde
from .compare import w2_label

__all__ = ["BASELINE_BYTES", "STARTUP_SECONDS", "SSW_SECONDS_PER_PROJECTION",
           "SSW_SECONDS_PER_POINT", "RUN_SECONDS", "RUN_PAIR_SECONDS", "RUN_FASTSUM_SECONDS",
           "particle_run_seconds", "estimate_main_job", "estimate_compare", "check_run_estimate",
           "estimate_causal_job", "check_causal_estimate"]

#: Resident size (bytes) of the interpreter and the libraries ``wflow run`` loads.
BASELINE_BYTES = 330 * 2**20
#: Start-up seconds of ``wflow run``: the CPU seconds of the smallest runs of the grid.
STARTUP_SECONDS = 2.5
#: CPU seconds of POT's sliced spherical ``W₂`` (``ot.sliced_wasserstein_sphere``) per
#: projection, and per projection and support point: 0.85 s at 1 000 + 720 points and 2.64 s
#: at 10 000 + 720 with 200 projections.
SSW_SECONDS_PER_PROJECTION, SSW_SECONDS_PER_POINT = 2.5e-3, 1.0e-6


#: Fixed CPU seconds of one particle run of the main job (the phase, and each replicate of
#: the moment test): sampling the tokens, the set-up, the recorded diagnostics (0.097 s at
#: n = 62).
RUN_SECONDS = 0.08
#: CPU seconds per kernel pair and head of the direct sums in those runs (the surrogate
#: flow's field: 0.47–0.58 s at n = 1 000, 68 evaluations, two heads).
RUN_PAIR_SECONDS = 2.5e-9
#: CPU seconds per token and head of one fast-summation evaluation in those runs: 1.3e-6 to
#: 1.6e-6 at n = 2 500 and 4 000 (0.75 s and 0.92 s, 65 evaluations, two heads), 2.6e-6 at
#: n = 10⁵ (5.2 s, 10 evaluations; bench/results/bench_main_job_estimate.json).
RUN_FASTSUM_SECONDS = 2.2e-6


def particle_run_seconds(n: int, H: int, steps: int, records: int, fastsum: bool,
                         stages: int = 4) -> float:
    """CPU seconds of one particle run of the main job (RK4: ``stages = 4``).

    ``RUN_SECONDS + E c`` with ``E = stages·steps + records`` field evaluations and ``c``
    the cost of one: ``n² H RUN_PAIR_SECONDS`` (direct sums), or, where the kernel plan
    chooses the fast summation (``fastsum`` eligible and cheaper by the particle model's
    own constants, :func:`~wflow.particles.estimate.estimate_particles`),
    ``n H RUN_FASTSUM_SECONDS``. Measured in-process on the main job's test scenario
    (720 cells, two softmax heads at β = 1, the surrogate flow) under a load of 10–15 on
    2 cores (CPU time).
    """
    n, H = float(n), float(H)
    plan_fast = fastsum and n * H * particles_estimate.FASTSUM_SECONDS \
        < n * n * H * particles_estimate.PAIR_SECONDS
    c = n * H * RUN_FASTSUM_SECONDS if plan_fast else n * n * H * RUN_PAIR_SECONDS
    return RUN_SECONDS + (stages * steps + records) * c


def estimate_main_job(*, cells: int, n: int, H: int, T: float, dt: float, n_saves: int,
                      steps_per_save: int, jko: bool, refinement: int,
                      max_ot_points: int = 6000, w2_dense_max_points: float = math.inf,
                      jko_steps: int | None = None, fastsum: bool = False,
                      diffusion: float = 0.0, integrator: str = "rk4",
                      jko_verify: bool | None = None, error_control: bool = False
                      ) -> Estimate:
    """Estimate of ``wflow run``: PDE (twice with the JKO), particles, JKO, its table, W₂.

    The phases run one after the other: the memory is the libraries plus the largest phase,
    the time the start-up plus the sum. The JKO step count is ``jko_steps`` when known
    (``T/τ``), else :func:`~wflow.jko.options.auto_steps_bound` (``tau = "auto"``'s rule
    with ``|v|max <= 1``: an upper bound). The ``τ/h`` table's rows are its levels
    (:func:`~wflow.apps.main.refinement._levels`: ``M_k`` cells, ``N_k`` steps): each runs
    the JKO (the POT referee only with ``jko_verify``) and the surrogate PDE (the scenario's
    ``dt``) and ``N_k + 1`` cell-vs-cell ``W₂``; the coarsest row once more with the OT
    scheme. ``jko_verify``: the scenario's ``[jko] verify`` (``None``: the main JKO's
    referee up to 2 500 cells, as the solver's default). The comparison:
    :func:`estimate_compare` (its ``W₂``, their floor and sliced ``W₂``, the moment test's
    replicate particle systems and coarse PDE). A ``W₂`` is dense up to
    ``w2_dense_max_points`` support points, certified sparse beyond (:func:`estimate_w2`;
    the default, no limit: every ``W₂`` dense). ``fastsum``: the particles' kernel plan may
    choose the spherical-harmonic fast summation
    (:func:`~wflow.particles.estimate.fastsum_eligible`). ``diffusion``: the token diffusion
    ``D`` (the PDE's Crank–Nicolson solves, the particles' noise draws, and the refusal of a
    diffusive step that makes the run absurd, naming ``attention.diffusion``);
    ``integrator``: the particle phase's (``run.particle_integrator``); ``error_control``:
    ``[pde] rtol`` set, every PDE run with step doubling
    (:func:`~wflow.pde.estimate.step_evaluations`).
    """
    M = float(cells)
    base = float(BASELINE_BYTES)
    phases: list[Estimate] = [estimate_pde(cells=cells, H=H, T=T, dt=dt, n_saves=n_saves,
                                           what="pde", startup=False,
                                           diffusion=diffusion, error_control=error_control)]
    p_steps = max(1, n_saves - 1) * steps_per_save
    part = estimate_particles(n=n, H=H, T=T, dt=T / p_steps, record_every=steps_per_save,
                              save_trajectory=True, fastsum=fastsum, diffusion=diffusion,
                              integrator=integrator)
    phases.append(Estimate("particles", part.memory - particles_estimate.BASELINE_BYTES,
                           part.steps, particle_run_seconds(n, H, p_steps, n_saves, fastsum),
                           {k: v for k, v in part.parts.items() if k != "libraries"}))
    if jko:
        N = float(jko_steps) if jko_steps else float(auto_steps_bound(T, cells))
        phases.append(estimate_jko(cells=cells, H=H, steps=N, startup=False,
                                   verify_max_cells=(2500 if jko_verify is None else
                                                     cells if jko_verify else 0)))
        phases.append(estimate_pde(cells=cells, H=H, T=T, dt=dt, n_saves=n_saves,
                                   what="pde_surrogate", startup=False,
                                   diffusion=diffusion, error_control=error_control))
        last = None
        from .refinement import _levels

        # the table's own levels (icospheres n_k = n/r^k, N_k ≈ N n_k/n steps), the POT
        # referee off unless the scenario sets [jko] verify, the surrogate PDE at the
        # scenario's dt with an output at every JKO time
        for k, (Mk, Nk) in enumerate(_levels(int(M), max(1, round(N)), int(refinement)),
                                     start=1):
            phases.append(estimate_jko(cells=Mk, H=H, steps=Nk, startup=False,
                                       what=f"table row {k} jko",
                                       verify_max_cells=Mk if jko_verify else 0))
            phases.append(estimate_pde(cells=Mk, H=H, T=T, dt=dt, n_saves=Nk + 1,
                                       what=f"table row {k} pde", startup=False,
                                       diffusion=diffusion, error_control=error_control))
            phases.append(estimate_w2(Mk, Mk, calls=Nk + 1, dense_max_points=w2_dense_max_points,
                                      what=f"W2 table row {k}"))
            last = (Mk, Nk)
        if last is not None:
            phases.append(estimate_jko(cells=last[0], H=H, steps=last[1], scheme="ot",
                                       startup=False, what="table OT cross-check"))
    phases.append(estimate_compare(
        cells=cells, n=n, H=H, T=T, dt=dt, n_saves=n_saves, steps_per_save=steps_per_save,
        max_ot_points=max_ot_points, w2_dense_max_points=w2_dense_max_points,
        jko_steps=(float(jko_steps) if jko_steps else float(auto_steps_bound(T, cells)))
        if jko else None, fastsum=fastsum))
    big = max(phases, key=lambda e: e.memory)
    parts = {"libraries": base, **{f"{big.what}: {k}": v for k, v in big.parts.items()}}
    secs = STARTUP_SECONDS + sum(e.seconds for e in phases)
    return Estimate("run", base + big.memory, sum(e.steps for e in phases), secs, parts)


def estimate_compare(*, cells: int, n: int, H: int, T: float, dt: float, n_saves: int,
                     steps_per_save: int, max_ot_points: int = 6000,
                     w2_dense_max_points: float = math.inf, jko_steps: float | None = None,
                     fastsum: bool = False, error_control: bool = False) -> Estimate:
    """Estimate of the main job's ``compare`` phase (no libraries, no start-up).

    * ``n_saves`` exact ``W₂`` of ``m = min(n, max_ot_points)`` particles against the
      cells (:func:`estimate_w2`); with a subsample (``n > max_ot_points``) also its floor
      (two ``m × m`` solves) and the sliced ``W₂`` of all particles at every output time
      (``P (SSW_SECONDS_PER_PROJECTION + SSW_SECONDS_PER_POINT (n + M))`` each, ``P`` the
      projections);
    * with the JKO (``jko_steps = N``), ``N + 1`` cell-vs-cell ``W₂``;
    * the moment test (:mod:`wflow.apps.main.moments`): :data:`~.moments.REPLICATES`
      particle systems at each level ``n, n/4, n/16`` (less the main run, reused), each
      costed as the particle phase (:func:`particle_run_seconds`), and the PDE on the
      coarse icosphere of about half the frequency.
    """
    from .compare import SSW_PROJECTIONS
    from .moments import REPLICATES, coarse_cells, levels

    M = int(cells)
    m = min(int(n), int(max_ot_points))
    parts: list[Estimate] = [estimate_w2(m, M, calls=n_saves,
                                         dense_max_points=w2_dense_max_points,
                                         what=f"{w2_label(m, n)} vs PDE")]
    if m < n:
        parts.append(estimate_w2(m, m, calls=2, dense_max_points=w2_dense_max_points,
                                 what="its sampling floor"))
        ssw = (SSW_SECONDS_PER_PROJECTION + SSW_SECONDS_PER_POINT * (n + M)) \
            * SSW_PROJECTIONS * n_saves
        parts.append(Estimate("sliced W₂ of all particles", 8.0 * 4 * (n + M), 0.0, ssw,
                              {"sliced W₂ of all particles": 8.0 * 4 * (n + M)}))
    if jko_steps is not None:
        parts.append(estimate_w2(M, M, calls=int(jko_steps) + 1,
                                 dense_max_points=w2_dense_max_points, what="W2 JKO vs PDE"))
    p_steps = max(1, n_saves - 1) * steps_per_save
    runs = sum((REPLICATES - (1 if nk == int(n) else 0))
               * particle_run_seconds(nk, H, p_steps, n_saves, fastsum)
               for nk in levels(int(n)))
    coarse = estimate_pde(cells=coarse_cells(M), H=H, T=T, dt=dt, n_saves=n_saves,
                          what="moments: coarse pde", startup=False,
                          error_control=error_control)
    secs = sum(e.seconds for e in parts) + runs + coarse.seconds
    big = max([*parts, coarse], key=lambda e: e.memory)
    return Estimate("compare", big.memory, coarse.steps, secs, dict(big.parts))


def check_run_estimate(sc: Any, cells: int, popts: Any, ropts: Any, *, confirm: bool) -> None:
    """Cost estimate of the phases on ``cells`` cells before any runs (refuses what cannot fit).

    Called before the mesh is generated or read when its spec names the cell count
    (:func:`wflow.geometry.mesh.estimate.mesh_cells`), else (or where the loaded mesh has
    other cells) on the loaded mesh: once per run.
    """
    from ...infra.estimate import check_estimate
    from ...particles.estimate import fastsum_eligible
    from .phases import _jko_table

    H = int(sc.build_heads().H)
    jko_steps, jko_verify = None, None
    if ropts.jko:  # a given τ: its step count, else the most steps of the "auto" rule
        table = _jko_table(sc, popts).check(crosscheck=bool(ropts.jko_refinement))
        jko_steps = table.steps_bound(int(cells))
        jko_verify = table.settings["verify"]
    est = estimate_main_job(cells=int(cells), n=ropts.n_particles, H=H,
                            T=float(popts.T), dt=float(popts.dt), n_saves=int(popts.n_saves),
                            steps_per_save=ropts.particle_steps_per_save, jko=ropts.jko,
                            refinement=ropts.jko_refinement, max_ot_points=ropts.max_ot_points,
                            w2_dense_max_points=ropts.max_ot_points, jko_steps=jko_steps,
                            fastsum=fastsum_eligible(sc.attention_obj().kind, 3, "auto"),
                            diffusion=float(sc.diffusion),
                            integrator=ropts.particle_integrator, jko_verify=jko_verify,
                            error_control=popts.tolerance is not None)
    check_estimate(est, confirm=confirm)


def estimate_causal_job(*, cells: int, S: int, n: int, H: int, T: float, dt: float,
                        n_saves: int, steps_per_save: int, replicates: int, cfl: float = 0.9,
                        order: int = 1, integrator=None, max_steps: int = 1_000_000,
                        particle_integrator: str = "rk4",
                        error_control: bool = False) -> Estimate:
    """Estimate of the causal main job (``wflow run`` with ``[attention] mask``).

    Its phases, one after the other (:mod:`wflow.apps.main.causal`): the kinetic solve
    (:func:`~wflow.kinetic.estimate.estimate_kinetic`: ``S`` slices on ``cells`` cells);
    ``replicates`` causal particle systems of ``n`` tokens, each costed as the main job's
    particle phase with direct sums (:func:`particle_run_seconds`, the causal sums
    cost the full ``n² H`` pairs in the Python loop: a bound, the mask halves them);
    the reference's error, the kinetic solve on the coarse icosphere of about half the
    frequency with ``S`` and with ``2S`` slices (each with ``error_control``, ``pde.rtol``:
    step doubling, its steps a lower bound). Memory: the libraries plus the largest
    phase; time: the start-up plus the sum.
    """
    from ...kinetic.estimate import estimate_kinetic
    from .moments import coarse_cells

    kw = {"H": H, "T": T, "dt": dt, "n_saves": n_saves, "cfl": cfl, "order": order,
          "integrator": integrator, "max_steps": max_steps, "startup": False,
          "error_control": error_control}
    Mc = coarse_cells(int(cells))
    phases: list[Estimate] = [
        estimate_kinetic(cells=int(cells), S=S, what="kinetic", **kw),
        estimate_kinetic(cells=Mc, S=S, what="kinetic (coarse mesh)", **kw),
        estimate_kinetic(cells=Mc, S=2 * S, what="kinetic (2S slices)", **kw)]
    p_steps = max(1, n_saves - 1) * steps_per_save
    part = estimate_particles(n=n, H=H, T=T, dt=T / p_steps, record_every=steps_per_save,
                              save_trajectory=True, integrator=particle_integrator)
    phases.append(Estimate(
        "particles", part.memory - particles_estimate.BASELINE_BYTES, part.steps * replicates,
        replicates * particle_run_seconds(n, H, p_steps, n_saves, False),
        {k: v for k, v in part.parts.items() if k != "libraries"}))
    big = max(phases, key=lambda e: e.memory)
    parts = {"libraries": float(BASELINE_BYTES),
             **{f"{big.what}: {k}": v for k, v in big.parts.items()}}
    secs = STARTUP_SECONDS + sum(e.seconds for e in phases)
    return Estimate("run", float(BASELINE_BYTES) + big.memory, sum(e.steps for e in phases),
                    secs, parts)


def check_causal_estimate(sc: Any, table: Any, cells: int, ropts: Any, *, replicates: int,
                          confirm: bool) -> None:
    """:func:`estimate_causal_job` of the scenario on ``cells`` cells; refuses what cannot fit.

    ``table``: the ``[kinetic]`` table as the run uses it
    (:class:`~wflow.kinetic.options.KineticTable`).
    """
    from ...infra.estimate import check_estimate

    o = table.options
    p = o.pde
    est = estimate_causal_job(cells=int(cells), S=int(o.S), n=int(ropts.n_particles),
                              H=int(sc.build_heads().H), T=float(p.T), dt=float(p.dt),
                              n_saves=int(p.n_saves),
                              steps_per_save=int(ropts.particle_steps_per_save),
                              replicates=int(replicates), cfl=float(p.cfl),
                              order=int(p.order), integrator=p.integrator,
                              max_steps=int(p.max_steps),
                              particle_integrator=ropts.particle_integrator,
                              error_control=p.tolerance is not None)
    check_estimate(est, confirm=confirm)
