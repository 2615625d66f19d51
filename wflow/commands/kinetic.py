"""``wflow kinetic SCENARIO.toml --out DIR``: the kinetic limit of causal attention."""

from __future__ import annotations

import argparse

from ..status import Status
from . import add_output, add_yes, finish, prepare
from ._help import Formatter, describe


def register(sub: argparse._SubParsersAction) -> None:
    """Add the ``kinetic`` subcommand."""
    p = sub.add_parser(
        "kinetic",
        help="solve the kinetic (mean-field) limit of causal attention on a sphere mesh",
        formatter_class=Formatter,
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
    p.add_argument("scenario", help="scenario TOML file")
    add_output(p)
    p.add_argument("--mesh", default=None, help="override [pde] mesh")
    p.add_argument("--S", type=int, default=None, help="override [kinetic] S (slices)")
    p.add_argument("--T", type=float, default=None, help="override [pde] T")
    p.add_argument("--dt", type=float, default=None, help="override [pde] dt")
    p.add_argument("--progress", action=argparse.BooleanOptionalAction, default=None,
                   help="progress bar (default: only on a terminal)")
    add_yes(p)
    p.set_defaults(func=_main)


def _main(args: argparse.Namespace) -> int:
    from mpi4py import MPI

    from ..apps.jobs.kinetic import run_kinetic
    from ..apps.scenario import load_scenario

    out = prepare(args)  # collective: rank 0 decides
    sc = load_scenario(args.scenario)
    res = run_kinetic(sc, out, progress=args.progress, confirm=args.yes,
                      overrides={"S": args.S, "T": args.T, "dt": args.dt, "mesh": args.mesh})
    if MPI.COMM_WORLD.rank == 0:
        st = res.stats
        print(f"kinetic: {res.status}, {st['slices']} slices × {st['cells']} cells, "
              f"{st['steps']} steps ({st['rejected_steps']} rejected) in "
              f"{st['wall_time']:.2f} s; mass error {st['mass_error_max']:.1e}, "
              f"smallest density {st['rho_min']:.3g}; wrote {args.out}")
        return finish("kinetic", res.status, res.message)
    return 0 if res.status == Status.SUCCESS else 1
