"""``wflow run [SCENARIO.toml] --out DIR [--resume]``: the main job."""

from __future__ import annotations

import argparse

from . import add_output, finish, prepare


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
        "diagnostics CSVs). Every section of the scenario is validated before the first "
        "phase. Completed phases are checkpointed in DIR.ckpt/ with the scenario's "
        "fingerprint; after Ctrl-C or a crash, `wflow run --resume DIR` continues with the "
        "same result (a SCENARIO given with --resume must equal the checkpointed one; run "
        "without --resume to start over).",
    )
    p.add_argument("scenario", nargs="?", default=None,
                   help="scenario TOML (default: the shipped default scenario, or with --resume "
                   "the checkpointed one)")
    add_output(p, required=False, default="out/run")
    p.add_argument("--resume", nargs="?", const="", default=None, metavar="DIR",
                   help="continue an interrupted run from DIR.ckpt/ (DIR: the --out folder)")
    p.add_argument("--progress", action=argparse.BooleanOptionalAction, default=None,
                   help="progress bars (default: only on a terminal)")
    p.set_defaults(func=_main)


def _main(args: argparse.Namespace) -> int:
    from ..apps.main_job import run_main_job

    if args.resume:  # --resume DIR
        if args.out != "out/run" and args.out != args.resume:
            raise ValueError(f"--resume {args.resume}: differs from --out {args.out} (give the "
                             "output folder once)")
        args.out = args.resume
    out = prepare(args)
    res = run_main_job(args.scenario, out, resume=args.resume is not None,
                       progress=args.progress)
    s = res.summary
    e = s["edi"]

    def rel(block: dict) -> str:
        return "n/a" if block.get("relative") is None else f"{block['relative']:.2e}"

    msg = (f"run: {res.status} in {s['wall_time_s']['total']:.1f} s — EDI residual (rel.) "
           f"pde {rel(e['pde'])}, particles {rel(e['particles'])}")
    if "jko" in e:
        msg += f", jko {rel(e['jko'])}"
    msg += f"; W2 particles vs PDE {s['w2']['particles_vs_pde']:.4f}"
    if "jko_vs_pde" in s["w2"]:
        msg += f", JKO vs PDE {s['w2']['jko_vs_pde']:.4f}"
    print(msg + f"; report: {args.out}/report.md")
    return finish("run", res.status, s.get("message", ""))
