"""The main job's phases (PDE, particles, JKO) and their checks before any runs.

Part of the main job (:mod:`wflow.apps.main`).
"""

from __future__ import annotations

import numpy as np

from ...status import Status
from ..run_table import RunOptions
from ..scenario import Scenario


def _check_noise(sc: Scenario, ropts: RunOptions) -> None:
    """Refuse a token diffusion ``D > 0`` that a phase would drop, before any phase runs.

    The particle phase needs a stochastic integrator (``run.particle_integrator``: ``em``
    or ``strang``); the JKO phase the FV scheme (checked by :func:`_check_jko`). Errors
    name ``attention.diffusion`` (exit status 2).
    """
    from types import SimpleNamespace

    from ..jobs.noise import check_particles_diffusion

    check_particles_diffusion(SimpleNamespace(diffusion=sc.diffusion,
                                              integrator=ropts.particle_integrator),
                              integrator_key="run.particle_integrator")


def _jko_table(sc: Scenario, popts):
    """The ``[jko]`` table as the main job runs it: ``T`` of ``[pde]`` unless it sets one."""
    from dataclasses import replace

    table = sc.table("jko")
    return table if "T" in table.given else replace(table, T=float(popts.T))


def _check_jko(mesh, rho0, schedule, attn, sc: Scenario, popts) -> None:
    """Validate the ``[jko]`` phase before any phase runs (as :func:`_run_jko` will run it).

    The options (keys, ``T`` a multiple of ``τ``) and the JKO scheme's own checks of its
    input (value-aligned symmetric heads, jump times of the schedule on the ``τ`` grid):
    the scheme's first state is computed (one energy evaluation) and discarded.
    """
    from dataclasses import replace

    from ...jko.solver import iterate_jko

    opts = _jko_table(sc, popts).unresolved_options(
        **({"diffusion": sc.diffusion} if sc.diffusion > 0 else {}))
    gen = iterate_jko(mesh.gather_owned(mesh.centroids), mesh.gather_owned(mesh.areas),
                      np.asarray(rho0) * mesh.gather_owned(mesh.areas), schedule, attn,
                      options=replace(opts, progress=False), mesh=mesh)
    try:
        next(gen)
    finally:
        gen.close()


# --------------------------------------------------------------------------- phases
def _run_pde(mesh, rho0, schedule, attn, popts):
    from ...pde import solve_pde

    res = solve_pde(rho0, schedule, attn, mesh=mesh, options=popts)
    # an inaccurate PDE is reported (status and reason in the summary); a failed one, or
    # one that stopped before T, leaves nothing to compare with
    if res.status in (Status.FAILED, Status.MAX_STEPS):
        raise FloatingPointError(f"pde phase {res.status}: {res.message}")
    return res


def _surrogate_options(popts, steps: int):
    """PDE options of the JKO's reference: the surrogate flow, an output at every JKO time."""
    from dataclasses import replace

    n = int(popts.n_saves) - 1
    n_saves = n + 1 if n % steps == 0 else steps + 1
    return replace(popts, flow="surrogate", n_saves=n_saves, entropy=False, head_rates=False)


def _run_particles(mesh, pde, schedule, attn, popts, ropts: RunOptions, sc: Scenario,
                   progress, *, rep: tuple[int, int] | None = None) -> dict:
    """The particle phase; ``rep = (n, r)``: the moment test's replicate ``r`` at ``n``."""
    from ...geometry.density import sample_particles
    from ...particles import simulate

    rng = np.random.default_rng([sc.seed, 4242] if rep is None else [sc.seed, 4242, *rep])
    x0 = sample_particles(mesh, pde.masses[0], ropts.n_particles, rng)
    nsave = len(pde.t) - 1
    steps = nsave * ropts.particle_steps_per_save
    # rtol = None: judged by the main job's verdict table, not by the solver's tolerance
    res = simulate(x0, schedule, attn, T=popts.T, dt=popts.T / steps,
                   integrator=ropts.particle_integrator, flow=popts.flow,
                   record_every=ropts.particle_steps_per_save, save_trajectory=True,
                   head_rates=False, seed=sc.seed, progress=progress,
                   **({"diffusion": sc.diffusion,
                       # the main phase judges the Itô energy balance of the noisy tokens
                       # (the Python loop records the Laplacian of E); replicates need not
                       # (the compiled loop; their status ``completed``: nothing judged)
                       "ito_balance": True if rep is None else False}
                      if sc.diffusion > 0 else {}), rtol=None)
    if res.status == Status.FAILED:
        raise FloatingPointError(f"particle phase failed: {res.message}")
    return {"res": res, "x0": x0}


def _run_jko(mesh, rho0, schedule, attn, sc: Scenario, popts, progress, tau=None,
             scheme=None):
    from ..jobs.jko import run_jko_scenario

    res = run_jko_scenario(mesh, rho0, schedule, attn, sc, T=popts.T, progress=progress,
                           tau=tau, scheme=scheme)
    if res.status == Status.FAILED:  # locked / inaccurate / not converged: reported
        raise FloatingPointError(f"jko phase failed: {res.message}")
    return res


#: Largest ratio of successive icosphere frequencies (``h``, and ``τ`` with it) in the
#: refinement table.
