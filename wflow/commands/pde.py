"""``wflow pde SCENARIO.toml --out DIR``: the transformer PDE on a sphere mesh."""

from __future__ import annotations

import argparse
import math

from . import add_controls, add_override, add_scenario_command, finish, prepare_scenario
from . import time_error_phrase as time_error
from ._help import describe


def register(sub: argparse._SubParsersAction) -> None:
    """Add the ``pde`` subcommand."""
    from ..infra.options import choices_of
    from ..pde.options import PDEOptions

    p = add_scenario_command(
        sub, "pde", help="solve the transformer PDE on a sphere mesh (finite volumes, DOLFINx)",
        switches={"--render": "write PNG snapshots of the density at every output time "
                  "(pyvista)"},
        gif="density.gif (the density on the mesh at the output times)", description=describe(
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
    add_override(p, "mesh", "pde")
    add_override(p, "order", "pde", type=int, choices=choices_of(PDEOptions, "order"))
    add_override(p, "T", "pde", type=float)
    add_override(p, "dt", "pde", type=float)
    add_controls(p, _main, diffusion="the Fokker–Planck term D Δ_S ρ")


def _main(args: argparse.Namespace) -> int:
    from mpi4py import MPI

    from ..apps.jobs.pde import run_pde

    out, sc = prepare_scenario(args)  # collective: rank 0 decides
    res = run_pde(sc, out, render=args.render, progress=args.progress,
                  overrides={"order": args.order, "T": args.T, "dt": args.dt,
                             "mesh": args.mesh, "diffusion": args.diffusion}, gif=args.gif,
                  confirm=args.yes)
    rank = MPI.COMM_WORLD.rank
    if rank == 0:
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
              f"{res.stats['mass_error_max']:.1e}, {edi_s}; {time_error(res.stats)}; "
              f"wrote {args.out}")
    return finish("pde", res.status, res.message, rank=rank)
