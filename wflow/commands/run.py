"""``wflow run [SCENARIO.toml] --out DIR [--resume]``: the main job."""

from __future__ import annotations

import argparse

from . import add_output, add_yes, finish, prepare
from ._help import Formatter, describe


def register(sub: argparse._SubParsersAction) -> None:
    """Add the ``run`` subcommand."""
    p = sub.add_parser(
        "run",
        help="the main job: PDE, JKO and particles on one initial density, compared (with a "
             "causal mask: particles vs the kinetic limit)",
        formatter_class=Formatter,
        description=describe(
        "Run the main job on SCENARIO (default: the scenario shipped with the package). On "
        "the same initial density and heads it solves the transformer PDE on the sphere mesh, "
        "the JKO scheme and the particle system sampled from the initial density, and "
        "compares them (EDI residuals of the three solvers, W2 particles-vs-PDE and "
        "JKO-vs-PDE, mass error, minimum density, wall times, versions, seeds). A scenario "
        "with [attention] mask (a decoder, THEORY §9) runs instead the causal particles "
        "(tokens in array order) against the kinetic mean-field limit ([kinetic] slices, as "
        "`wflow kinetic`) and compares the spherical-harmonic moments of the tokens binned by "
        "position with the slices' (16 replicates, Šidák max|t|); its JKO and EDI are not "
        "computed, the causal system being no gradient flow (one line says so; [run] jko = "
        "true is refused); it runs under `mpirun -n P wflow run` too (the kinetic meshes "
        "and the tokens split over the ranks, the serial numbers to round-off, rank 0 "
        "writing; an exchangeable scenario exits 2 there). Every section of the scenario is "
        "validated before the first phase. "
        "Completed phases are checkpointed in DIR.ckpt/ with the scenario's fingerprint (the "
        "files and the source of the callables it names); after Ctrl-C, SIGTERM or a crash, "
        "`wflow run --resume DIR` continues with the same result, naming the restored phases "
        "(a SCENARIO given with --resume must equal the checkpointed one). Checkpoints are "
        "read only with --resume: without it a checkpoint of the same scenario is discarded, "
        "one of another scenario is refused (or discarded with --overwrite).",
        command="run", sections=("attention", "tokens", "heads", "schedule", "particles",
                                 "density", "pde", "jko", "kinetic", "run"),
        detailed=("run",),
        files="DIR/summary.json; DIR/report.md with figures; the raw data (density.npz, "
        "trajectory.npz, diagnostics CSVs; with a mask slices.npz, trajectory.npz, "
        "causal_moments.npz, diagnostics CSVs)."),
    )
    p.add_argument("scenario", nargs="?", default=None,
                   help="scenario TOML (default: the shipped default scenario, or with --resume "
                   "the checkpointed one)")
    add_output(p, required=False, default="out/run")
    p.add_argument("--resume", nargs="?", const="", default=None, metavar="DIR",
                   help="continue an interrupted run from DIR.ckpt/ (DIR: the --out folder)")
    p.add_argument("--progress", action=argparse.BooleanOptionalAction, default=None,
                   help="progress bars (default: only on a terminal)")
    add_yes(p)
    p.set_defaults(func=_main)


def _main(args: argparse.Namespace) -> int:
    import contextlib
    import io

    from ..apps.main import run_main_job
    from ..infra.parallel import launched_rank_size

    if args.resume:  # --resume DIR
        if args.out != "out/run" and args.out != args.resume:
            raise ValueError(f"--resume {args.resume}: differs from --out {args.out} (give the "
                             "output folder once)")
        args.out = args.resume
    out = prepare(args)  # collective under mpirun: rank 0 decides
    rank = launched_rank_size()[0]
    with contextlib.redirect_stdout(io.StringIO()) if rank else contextlib.nullcontext():
        # under mpirun (a masked scenario only) every rank runs the job; rank 0 speaks
        res = run_main_job(args.scenario, out, resume=args.resume is not None,
                           progress=args.progress, overwrite=args.overwrite,
                           confirm=args.yes)
    if rank:
        return finish("run", res.status, rank=rank)
    s = res.summary
    if "causal_moments" in s:  # a masked scenario: particles vs the kinetic limit
        m = s["causal_moments"]
        print(f"run: {res.status} in {s['wall_time_s']['total']:.1f} s — causal particles vs "
              f"the kinetic limit ({m['bins']} position bins × {m['replicates']} replicates "
              f"of {s['n_particles']} tokens, {s['slices']} slices): binned moments max|t| "
              f"{m['max_t_T']:.2f} at T (critical {m['t_crit_T']:.2f}), {m['max_t_0']:.2f} "
              f"at t = 0 (critical {m['t_crit_0']:.2f}); report: {args.out}/report.md")
        return finish("run", res.status, s.get("message", ""))
    e = s["edi"]

    def rel(block: dict) -> str:
        return "n/a" if block.get("relative") is None else f"{block['relative']:.2e}"

    rs = s.get("resumed", {})
    restored = (f" (restored from the checkpoint: {', '.join(rs['restored_phases'])}, "
                f"{rs['restored_wall_s']:.1f} s; this session {rs['this_session_wall_s']:.1f} s)"
                if rs.get("restored_phases") else "")
    msg = (f"run: {res.status} in {s['wall_time_s']['total']:.1f} s{restored} — EDI residual "
           f"(relative) pde {rel(e['pde'])}, particles {rel(e['particles'])}")
    if s.get("diffusion", 0.0) > 0:  # token diffusion: the free-energy EDI of each solver
        f = s["free_edi"]
        msg = (f"run: {res.status} in {s['wall_time_s']['total']:.1f} s{restored} — token "
               f"diffusion D = {s['diffusion']:g}; free-energy EDI residual (relative) pde "
               f"{rel(f['pde'])}, particles {rel(f['particles'])} ({f['particles']['meaning']})"
               + (f", jko {rel(f['jko'])}" if "jko" in f else ""))
    elif "jko" in e:
        msg += f", jko {rel(e['jko'])}"
        ch = s.get("checks", {}).get("jko", {}).get("edi")
        if ch is not None:
            msg += f" (JKO Σ|EDI_k| (relative) {ch['value']:.2e}, tolerance {ch['tolerance']:g})"
    msg += f"; {s['w2'].get('label', 'W₂')} vs PDE {s['w2']['particles_vs_pde']:.4f}"
    if "jko_vs_pde" in s["w2"]:
        msg += f", JKO vs PDE {s['w2']['jko_vs_pde']:.4f}"
    print(msg + f"; report: {args.out}/report.md")
    return finish("run", res.status, s.get("message", ""))
