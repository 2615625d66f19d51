"""``wflow particles SCENARIO.toml --out DIR``: run the particle system."""

from __future__ import annotations

import argparse
import math

from . import add_output, add_yes, finish, prepare


def register(sub: argparse._SubParsersAction) -> None:
    """Add the ``particles`` subcommand."""
    p = sub.add_parser(
        "particles",
        help="simulate tokens as interacting particles on the sphere",
        description="Simulate n tokens on S^{d-1} under multi-head attention with (possibly "
        "time-dependent) weights, record energies, slopes, the energy balance, radial shadows, "
        "entropies and clustering. Writes DIR/summary.json, DIR/diagnostics.csv and, with "
        "--save-trajectory, DIR/trajectory.npz.",
    )
    p.add_argument("scenario", help="scenario TOML file (see wflow.apps.scenario for the schema)")
    add_output(p)
    p.add_argument("--save-trajectory", action="store_true",
                   help="also write trajectory.npz with t and x of shape (steps, n, d)")
    p.add_argument("--gif", action="store_true",
                   help="also write tokens.gif (tokens on S², 60 frames) and run.png (E, G², "
                        "energy balance)")
    p.add_argument("--progress", action=argparse.BooleanOptionalAction, default=None,
                   help="progress bar (default: only on a terminal)")
    add_yes(p)
    p.set_defaults(func=_main)


def _main(args: argparse.Namespace) -> int:
    from ..apps.jobs.particles import run_particles
    from ..apps.scenario import load_scenario

    out = prepare(args)
    sc = load_scenario(args.scenario)
    res = run_particles(sc, out, save_trajectory=args.save_trajectory,
                        progress=args.progress, gif=args.gif, confirm=args.yes)
    fin = res.final()
    rel = getattr(res, "checks", {}).get("chain", {}).get("value", float("nan"))
    adj, o = "", getattr(res, "options", None)
    if o is not None:  # no silent change: a dt that does not divide T (summary.json "dt")
        steps = max(1, math.ceil(o.T / o.dt - 1e-9))
        if abs(o.T / steps - o.dt) > 1e-9 * o.dt:
            adj = (f" (dt = {o.dt:g} does not divide T = {o.T:g}: {steps} steps of dt = "
                   f"{o.T / steps:.6g})")
    print(f"particles: {res.status} in {res.wall_time:.2f} s{adj}; E(T) = {fin['E']['mean']:.6g}, "
          f"G2(T) = {fin['G2']['mean']:.4g}, chain-rule residual (absolute) "
          f"{res.balance_summary()['chain']['mean']:.3e}, (relative) "
          f"{rel:.2e}; wrote {args.out}")
    return finish("particles", res.status, res.message)
