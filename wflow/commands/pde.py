"""``wflow pde SCENARIO.toml --out DIR``: the transformer PDE on a sphere mesh."""

from __future__ import annotations

import argparse
import math

from ..status import Status
from . import add_output, add_yes, finish, prepare
from ._help import Formatter, describe


def register(sub: argparse._SubParsersAction) -> None:
    """Add the ``pde`` subcommand."""
    from ..infra.options import choices_of
    from ..pde.options import PDEOptions

    p = sub.add_parser(
        "pde",
        help="solve the transformer PDE on a sphere mesh (finite volumes, DOLFINx)",
        formatter_class=Formatter,
        description=describe(
            "Solve ∂_t ρ + div(ρ v[μ_t, Θ_t]) = 0 on a triangulated S² by finite volumes "
            "(DOLFINx) with the heads, attention and weight schedule of the scenario (the "
            "schema shared with `wflow particles`); [density] gives the initial density "
            "(default: the law of [tokens]). Runs unchanged under `mpirun -n P wflow pde ...`.",
            command="pde", sections=("attention", "tokens", "heads", "schedule", "pde",
                                     "density"), detailed=("pde",),
            files="DIR/summary.json; DIR/diagnostics.csv; DIR/density.npz (t, rho (saves, "
            "cells), centroids, areas); DIR/density.xdmf + .h5 (ParaView time series); with "
            "--render DIR/render/rho_XXXX.png; with --gif DIR/density.gif and DIR/run.png."),
    )
    p.add_argument("scenario", help="scenario TOML file")
    add_output(p)
    p.add_argument("--render", action="store_true",
                   help="write PNG snapshots of the density at every output time (pyvista)")
    p.add_argument("--gif", action="store_true",
                   help="also write density.gif (the density on the mesh at the output times) "
                        "and run.png (E, G², energy balance)")
    p.add_argument("--mesh", default=None, help="override [pde] mesh")
    p.add_argument("--order", type=int, choices=choices_of(PDEOptions, "order"), default=None,
                   help="override [pde] order")
    p.add_argument("--T", type=float, default=None, help="override [pde] T")
    p.add_argument("--dt", type=float, default=None, help="override [pde] dt")
    p.add_argument("--diffusion", type=float, default=None, metavar="D",
                   help="token diffusion D >= 0 (THEORY §8; overrides [attention] diffusion)"
                   ": the Fokker–Planck term D Δ_S ρ")
    p.add_argument("--progress", action=argparse.BooleanOptionalAction, default=None,
                   help="progress bar (default: only on a terminal)")
    add_yes(p)
    p.set_defaults(func=_main)


def _main(args: argparse.Namespace) -> int:
    from mpi4py import MPI

    from ..apps.jobs.pde import run_pde
    from ..apps.scenario import load_scenario

    out = prepare(args)  # collective: rank 0 decides
    sc = load_scenario(args.scenario)
    res = run_pde(sc, out, render=args.render, progress=args.progress,
                  overrides={"order": args.order, "T": args.T, "dt": args.dt,
                             "mesh": args.mesh, "diffusion": args.diffusion}, gif=args.gif,
                  confirm=args.yes)
    if MPI.COMM_WORLD.rank == 0:
        fin = res.summary()["final"]
        edi = res.balance.get("edi", math.nan)
        diss = res.balance.get("dissipation", math.nan)
        rel = abs(edi) / diss if math.isfinite(edi) and diss > 0 else math.nan
        fe, fd = res.balance.get("free_edi"), res.balance.get("free_dissipation_int")
        edi_s = (f"EDI residual (absolute) {edi:.3e}, (relative) {rel:.2e}"
                 if math.isfinite(edi) else
                 f"D = {res.options.diffusion:g}: free-energy EDI residual (absolute) "
                 f"{fe:.3e}, (relative) {abs(fe) / fd if fd else math.nan:.2e}"
                 if fe is not None and fd is not None else
                 "EDI not applicable (heads not value-aligned)" if res.sign == 0 else
                 "EDI not recorded")
        print(f"pde: {res.status}, {res.stats['cells']} cells, {res.stats['steps']} steps "
              f"({res.stats['rejected_steps']} rejected) in {res.stats['wall_time']:.2f} s; "
              f"E(T) = {fin.get('E', math.nan):.6g}, mass error "
              f"{res.stats['mass_error_max']:.1e}, {edi_s}; wrote {args.out}")
        return finish("pde", res.status, res.message)
    return 0 if res.status == Status.SUCCESS else 1
