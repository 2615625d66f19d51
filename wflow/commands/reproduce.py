"""``wflow reproduce EXPERIMENT… --out DIR``: the published [TD] experiments, exactly."""

from __future__ import annotations

import argparse
import sys
from typing import Any

from ..status import Status
from . import add_output, finish, prepare
from ._help import Formatter, describe


def register(sub: argparse._SubParsersAction) -> None:
    """Add the ``reproduce`` subcommand."""
    from ..apps.reproduce import EXPERIMENTS, FIELD, GROUPS
    from ..attention.published import HEAD_GENERATORS

    names = [*EXPERIMENTS, *GROUPS, *FIELD]
    p = sub.add_parser(
        "reproduce",
        help="run the published [TD] Section-6 experiments exactly and judge their claims",
        formatter_class=Formatter,
        description=describe(
        "Run the published multi-head experiments with their conventions term by term "
        "(docs/theory.md §5): n = 200 tokens around the octahedron (S²) or cross-polytope "
        "(d = 5) vertices, H = 1, 10, 100 heads D_h(0) = Z + Zᵀ (value −D_h, w_h = 1/H, β = 1), "
        "weights relaxing to the published oscillating frames or Ornstein–Uhlenbeck with "
        "σ² = 2 (10 Monte-Carlo paths on S², 20 in d = 5), explicit Euler for tokens and "
        "weights, dt = 5e-3, T = 20. Records E, G², the energy balance with its Itô and "
        "martingale terms, fits the time-averaged G² against H as the published code does "
        "(a·H^b by curve_fit on the mean over t ∈ [T/2, T]) and says whether each published "
        "claim (OU: b ≈ −1, oscillating: b ≈ 0) is reproduced. Writes DIR/summary.json, "
        "DIR/report.md, per-experiment series (.npz), figures (.png) and with --gif "
        f"animations of the tokens on S². Experiments: {', '.join(EXPERIMENTS)}; groups: "
        + ", ".join(f"{g} = {' + '.join(v)}" for g, v in GROUPS.items()) + ". Independent "
        "runs are spread over MPI ranks under `mpirun -n P wflow reproduce ...`. Exit status "
        "as every command: 0 only for the status success (every claim judged as the paper "
        "says and every negative control caught), 1 for any other status (inconclusive, "
        "failed) with one line naming it, 2 for bad input. Other papers of the field (one per "
        "call, "
        "docs/reproduce_field.md): " + "; ".join(f"{k}: {v[1]}" for k, v in FIELD.items())
        + "; with --quick a version in seconds, --seed the glpr_phase token stream, --n its "
        "tokens, --published NPZ the published code's glpr_phase counts to compare. "
        "summary.json's status follows the verdict (PASS: success, INCONCLUSIVE: "
        "inconclusive, FAIL: failed), and so does the exit status.",
        command="reproduce", files="DIR/summary.json, DIR/report.md, per-experiment series "
        "(.npz), figures (.png); with --gif animations."),
    )
    p.add_argument("experiments", nargs="+", choices=names, metavar="EXPERIMENT",
                   help=f"one or more of: {', '.join(names)}")
    add_output(p)
    p.add_argument("--quick", action="store_true",
                   help="small version that runs in seconds (n = 48, H = 1 4 16, T = 6, "
                        "dt = 0.02, 4 OU paths)")
    p.add_argument("--gif", action="store_true",
                   help="also write GIFs of the tokens on S² (60 frames, 80 ms)")
    p.add_argument("--H", type=int, nargs="+", default=None, help="head counts [1 10 100]")
    p.add_argument("--n", type=int, default=None, help="tokens [200]")
    p.add_argument("--T", type=float, default=None, help="final time [20]")
    p.add_argument("--dt", type=float, default=None, help="Euler step [5e-3]")
    p.add_argument("--paths", type=int, default=None,
                   help="Monte-Carlo paths of the OU experiments [10 on S², 20 in d = 5]")
    p.add_argument("--seed", type=int, default=None,
                   help="token seed; head seeds are seed + H [42, as published]")
    p.add_argument("--heads-generator", choices=HEAD_GENERATORS, default=None,
                   help="draw D_h(0) from torch's CPU stream (the published matrices of a CPU "
                        "run; default) or from NumPy (the same law)")
    p.add_argument("--sigma2", type=float, default=None,
                   help="OU noise variance [2, as published]")
    p.add_argument("--tol", type=float, default=None,
                   help="tolerance of the verdict on a slope [0.25]")
    p.add_argument("--published", default=None, metavar="NPZ",
                   help="glpr_phase: the published code's counts at the same settings")
    p.add_argument("--adaptive", action="store_true",
                   help="metastable_staircase: also integrate its continuous limit "
                        "dθ/ds = log β·g/‖g‖ under error control and compare its merge times "
                        "with the published ones (summary.json's adaptive block)")
    p.add_argument("--rtol", type=float, default=None,
                   help="with --adaptive: the flow's relative tolerance [1e-6]")
    p.add_argument("--progress", action=argparse.BooleanOptionalAction, default=None,
                   help="progress bars (default: only on a terminal)")
    p.set_defaults(func=_main)


def _main(args: argparse.Namespace) -> int:
    from ..apps.reproduce import FIELD, ReproduceOptions, reproduce
    from ..infra.parallel import comm_rank_size

    if set(args.experiments) & set(FIELD):
        return _field(args)

    given = {"H": None if args.H is None else tuple(args.H), "n": args.n, "T": args.T,
             "dt": args.dt, "paths": args.paths, "seed": args.seed,
             "heads_generator": args.heads_generator, "sigma2": args.sigma2, "tol": args.tol}
    changes = {k: v for k, v in given.items() if v is not None}
    changes.update(gif=args.gif, progress=args.progress)
    comm_rank_size()  # MPI first: under mpirun rank 0 decides on the output location
    opts = ReproduceOptions.quick(**changes) if args.quick else ReproduceOptions(**changes)
    out = prepare(args)  # bad options are refused above, before the location is checked
    res = reproduce(args.experiments, out=out, options=opts)
    if comm_rank_size()[1] == 0:
        for name, f in res.fits.items():
            print(f"reproduce {name}: G² ~ H^{f.b:.3f} ± {f.u:.3f} (log–log {f.loglog:.3f}) — "
                  f"published claim {f.verdict}")
        print(res.study.verdict)
        print(f"wrote {args.out}/summary.json, report.md and {len(res.study.figures) - 1} "
              f"other files in {res.wall_s:.1f} s")
        return finish("reproduce", res.status, res.message)
    return 0 if res.status == Status.SUCCESS else 1


def _field(args: argparse.Namespace) -> int:
    """One experiment of :data:`wflow.reproduce.FIELD` ."""
    import importlib

    from ..apps.reproduce import FIELD
    from ..infra.parallel import comm_rank_size

    if len(args.experiments) != 1:
        print(f"wflow reproduce: run {', '.join(FIELD)} one per call, without other "
              "experiments", file=sys.stderr)
        return 2
    name = args.experiments[0]
    if (args.adaptive or args.rtol is not None) and name != "metastable_staircase":
        print("wflow reproduce: --adaptive and --rtol are options of metastable_staircase",
              file=sys.stderr)
        return 2
    if args.rtol is not None and not args.adaptive:
        print("wflow reproduce: --rtol is the tolerance of --adaptive", file=sys.stderr)
        return 2
    mod = importlib.import_module(FIELD[name][0])
    opts_cls = {"glpr_phase": "PhaseOptions", "castin_ranks": "RankOptions",
                "metastable_staircase": "StaircaseOptions",
                "lost_in_the_middle": "LostInTheMiddleOptions",
                "mun_rosenzweig": "MunRosenzweigOptions"}[name]
    cls = getattr(mod, opts_cls)
    changes = {}
    if name == "glpr_phase":
        changes = {k: v for k, v in {"seed": args.seed, "n": args.n}.items() if v is not None}
    comm_rank_size()
    opts = cls.quick(**changes) if args.quick else cls(**changes)
    out = prepare(args)
    kw: dict[str, Any] = {"published": args.published} if name == "glpr_phase" else {}
    if args.adaptive:
        from functools import partial

        from ..published.staircase_flow import StaircaseFlowOptions, adaptive_summary

        rtol = 1e-6 if args.rtol is None else args.rtol
        StaircaseFlowOptions(rtol=rtol)  # a bad rtol is refused before the output is touched
        kw["adaptive"] = partial(adaptive_summary, rtol=rtol)
    res = mod.reproduce(out=out, options=opts, **kw)
    if comm_rank_size()[1] == 0:
        print(res.verdict)
        if "adaptive" in res.summary:
            print(f"adaptive flow: {res.summary['adaptive']['sentence']}")
        print(f"wrote {args.out}/summary.json, report.md and {len(res.figures) - 1} other files")
        return finish("reproduce", res.status, res.message)
    return 0 if res.status == Status.SUCCESS else 1
