"""``wflow run [SCENARIO.toml] --out DIR [--resume]``: the main job."""

from __future__ import annotations

import argparse


def register(sub: argparse._SubParsersAction) -> None:
    """Add the ``run`` subcommand."""
    p = sub.add_parser(
        "run",
        help="the main job: PDE, JKO and particles on one initial density, compared",
        description="Run the main job on SCENARIO (default: the scenario shipped with the "
        "package). On the same initial density and heads it solves the transformer PDE on "
        "the sphere mesh, the JKO scheme and the particle system sampled from the initial "
        "density; then writes DIR/summary.json (EDI residuals of the three solvers, W2 "
        "particles-vs-PDE and JKO-vs-PDE, mass error, minimum density, wall times, versions, "
        "seeds), DIR/report.md with figures, and the raw data (density.npz, trajectory.npz, "
        "diagnostics CSVs). Completed phases are checkpointed in DIR.ckpt/; after Ctrl-C or "
        "a crash, `wflow run --resume DIR` continues with the same result.",
    )
    p.add_argument("scenario", nargs="?", default=None,
                   help="scenario TOML (default: the shipped default scenario)")
    p.add_argument("--out", default="out/run", help="output directory [out/run]")
    p.add_argument("--resume", action="store_true",
                   help="continue an interrupted run from DIR.ckpt/ (scenario taken from there)")
    p.add_argument("--progress", action=argparse.BooleanOptionalAction, default=None,
                   help="progress bars (default: only on a terminal)")
    p.set_defaults(func=_main)


def _main(args: argparse.Namespace) -> int:
    from ..main_job import run_main_job

    res = run_main_job(args.scenario, args.out, resume=args.resume, progress=args.progress)
    s = res.summary
    e = s["edi"]
    msg = (f"run: {res.status} in {s['wall_time_s']['total']:.1f} s — EDI residual (rel.) "
           f"pde {e['pde']['relative']:.2e}, particles {e['particles']['relative']:.2e}")
    if "jko" in e:
        msg += f", jko {e['jko']['relative']:.2e}"
    msg += f"; W2 particles vs PDE {s['w2']['particles_vs_pde']:.4f}"
    if "jko_vs_pde" in s["w2"]:
        msg += f", JKO vs PDE {s['w2']['jko_vs_pde']:.4f}"
    print(msg + f"; report: {res.out}/report.md")
    return 0
