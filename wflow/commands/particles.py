"""``wflow particles SCENARIO.toml --out DIR``: run the particle system."""

from __future__ import annotations

import argparse
import math

from . import add_controls, add_scenario_command, finish, prepare_scenario
from ._help import describe


def register(sub: argparse._SubParsersAction) -> None:
    """Add the ``particles`` subcommand."""
    p = add_scenario_command(
        sub, "particles", help="simulate tokens as interacting particles on the sphere",
        scenario="scenario TOML file (its tables: below)",
        switches={"--save-trajectory": "also write trajectory.npz with t and x of shape "
                  "(steps, n, d)"},
        gif="tokens.gif (tokens on S², 60 frames)", description=describe(
            "Simulate n tokens on S^{d-1} under multi-head attention with (possibly "
            "time-dependent, possibly noisy) weights, dx_i/dt = Σ_h w_h P_{x_i} V_h f_h(x_i), "
            "and record energies, slopes, the energy balance, radial shadows, entropies and "
            "clustering, with the mean and spread over the Monte-Carlo weight paths. Under "
            "`mpirun -n P wflow particles ...` the run is split over the ranks (noisy paths "
            "over ranks, else the tokens of the one system) and equals the serial run to "
            "round-off; rank 0 writes.",
            command="particles", sections=("attention", "tokens", "heads", "schedule",
                                           "particles"), detailed=("particles",),
            files="DIR/summary.json; DIR/diagnostics.csv (one row per output time, the "
            "columns of the output-key reference); with --save-trajectory DIR/trajectory.npz "
            "(t (steps+1,), x (steps+1, n, d)); with --gif DIR/tokens.gif and DIR/run.png."),
    )
    add_controls(p, _main, diffusion="Brownian tokens; needs a stochastic integrator (em, "
                 "strang)")


def _main(args: argparse.Namespace) -> int:
    from ..apps.jobs.particles import run_particles
    from ..infra.parallel import comm_rank_size, launched_rank_size

    # under mpirun: MPI first (rank 0 decides on the output), the run split over the ranks
    comm, rank, size = comm_rank_size() if launched_rank_size()[1] > 1 else (None, 0, 1)
    out, sc = prepare_scenario(args)
    res = run_particles(sc, out, save_trajectory=args.save_trajectory,
                        progress=args.progress, gif=args.gif, confirm=args.yes,
                        comm=comm if size > 1 else None, diffusion=args.diffusion)
    if rank != 0:
        return finish("particles", res.status, rank=rank)
    fin = res.final()
    chain = getattr(res, "checks", {}).get("chain", {})
    rel = chain.get("value", float("nan"))
    # a residual that does not decide the status says so (a mask, token diffusion)
    unjudged = " (recorded, not judged)" if chain.get("judged", True) is False else ""
    acc, tol = getattr(res, "checks", {}).get("accuracy"), ""
    if acc:  # the requested tolerance decides (the default rtol = 1e-3 included)
        unjudged = " (recorded; the tolerance decides)"
        err = acc.get("error")
        tol = (f", error estimate {err:.2g} of the tolerance (rtol {acc['rtol']:g})"
               if err is not None else f", within the tolerance (rtol {acc['rtol']:g})")
    elif "accuracy_default" in getattr(res, "extra", {}):
        tol = f" ({res.extra['accuracy_default']})"
    adj, o = "", getattr(res, "options", None)
    if o is not None:  # no silent change: a dt that does not divide T (summary.json "dt")
        steps = max(1, math.ceil(o.T / o.dt - 1e-9))
        if abs(o.T / steps - o.dt) > 1e-9 * o.dt:
            adj = (f" (dt = {o.dt:g} does not divide T = {o.T:g}: {steps} steps of dt = "
                   f"{o.T / steps:.6g})")
    print(f"particles: {res.status} in {res.wall_time:.2f} s{adj}; E(T) = {fin['E']['mean']:.6g}, "
          f"G2(T) = {fin['G2']['mean']:.4g}, chain-rule residual (absolute) "
          f"{res.balance_summary()['chain']['mean']:.3e}, (relative) "
          f"{rel:.2e}{unjudged}{tol}; wrote {args.out}")
    return finish("particles", res.status, res.message)
