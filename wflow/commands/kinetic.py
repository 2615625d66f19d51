"""``wflow kinetic SCENARIO.toml --out DIR``: the kinetic limit of causal attention."""

from __future__ import annotations

import argparse

from . import add_controls, add_override, add_scenario_command, finish, prepare_scenario
from . import time_error_phrase as time_error
from ._help import describe


def register(sub: argparse._SubParsersAction) -> None:
    """Add the ``kinetic`` subcommand."""
    p = add_scenario_command(
        sub, "kinetic",
        help="solve the kinetic (mean-field) limit of causal attention on a sphere mesh",
        description=describe(
            "Solve the family ∂_t ρ(s, ·) + div(ρ(s, ·) v_s) = 0, s ∈ [0, 1] the position, "
            "v_s the attention to the cumulative measure ∫_0^s e^{b(s, s')} ρ(s', ·) ds', "
            "the mean-field limit of the causal (decoder) system of [attention] mask "
            "(THEORY §9), by S slices in s, each a finite-volume density on the [pde] mesh. "
            "The ALiBi limit bias b(s, s') = −λ(s − s'): [kinetic] alibi, or from "
            "[attention] bias (λ = lam, or slope × [tokens] n). Runs unchanged under "
            "`mpirun -n P wflow kinetic ...`.",
            command="kinetic", sections=("attention", "tokens", "heads", "schedule",
                                         "kinetic", "pde", "density"),
            detailed=("kinetic",),
            files="DIR/summary.json; DIR/diagnostics.csv (one row per output time and "
            "slice); DIR/slices.npz (t, s, rho (saves, S, cells), mass, centroids, areas)."),
    )
    add_override(p, "mesh", "pde")
    add_override(p, "S", "kinetic", type=int, note=" (slices)")
    add_override(p, "T", "pde", type=float)
    add_override(p, "dt", "pde", type=float)
    add_controls(p, _main)


def _main(args: argparse.Namespace) -> int:
    from mpi4py import MPI

    from ..apps.jobs.kinetic import run_kinetic

    out, sc = prepare_scenario(args)  # collective: rank 0 decides
    res = run_kinetic(sc, out, progress=args.progress, confirm=args.yes,
                      overrides={"S": args.S, "T": args.T, "dt": args.dt, "mesh": args.mesh})
    rank = MPI.COMM_WORLD.rank
    if rank == 0:
        st = res.stats
        print(f"kinetic: {res.status}, {st['slices']} slices × {st['cells']} cells, "
              f"{st['steps']} steps ({st['rejected_steps']} rejected) in "
              f"{st['wall_time']:.2f} s; mass error {st['mass_error_max']:.1e}, "
              f"smallest density {st['rho_min']:.3g}; {time_error(st)}; "
              f"wrote {args.out}")
    return finish("kinetic", res.status, res.message, rank=rank)
