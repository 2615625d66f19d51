"""``wflow verify STUDY --out DIR [--quick] [--dtype float32]``: verification of the theory."""

from __future__ import annotations

import argparse
import sys

from ..status import Verdict
from . import add_output, prepare
from ._help import Formatter, describe


def register(sub: argparse._SubParsersAction) -> None:
    """Add the ``verify`` subcommand."""
    from ..studies.registry import all_studies

    names = sorted(all_studies())
    p = sub.add_parser(
        "verify",
        help="run a verification study: fit what the theory predicts, write a verdict",
        formatter_class=Formatter,
        description=describe(
            "Run one verification study of docs/theory.md (§5, §6, §7): it computes and fits "
            "the predicted quantities (orders, rates, slopes) and judges them by named "
            "criteria; the verdict gives summary.json's status (PASS: success; "
            "INCONCLUSIVE: inconclusive; FAIL: failed; exit status 0 only for success). "
            "Independent runs are distributed over MPI ranks under `mpirun -n P wflow "
            f"verify ...` with identical numbers. Studies: {', '.join(names)}.",
            command="verify",
            files="DIR/summary.json (the criteria as checks, fits, verdict, raw series) and "
            "the study's plots."),
    )
    p.add_argument("study", choices=names, metavar="STUDY", help=f"one of: {', '.join(names)}")
    add_output(p)
    p.add_argument("--quick", action="store_true",
                   help="small version that runs in seconds (used by the test suite)")
    p.add_argument("--seed", type=int, default=0, help="master seed [0]")
    p.add_argument("--fault", default=None, metavar="NAME",
                   help="inject one of the study's documented negative controls (its FAULTS) "
                        "or a fault of a family with a size, FAMILY:S (its FAMILIES, e.g. "
                        "velocity:-0.05); a documented control must FAIL")
    p.add_argument("--dtype", default="float64", metavar="DTYPE",
                   help="precision of the study's attention sums: float64 (default) or "
                        "float32 where the study declares it (mean-field: the replicates in "
                        "float32 beside a float64 control, judged against float32's "
                        "rounding; summary.json records the dtype)")
    p.set_defaults(func=_main)


def _main(args: argparse.Namespace) -> int:
    from ..infra.parallel import comm_rank_size
    from ..studies.registry import check_dtype, check_fault, verify

    comm_rank_size()  # MPI first: under mpirun rank 0 decides on the output location
    if args.fault is not None:  # bad input: refused before the output location is touched
        try:
            check_fault(args.study, args.fault)
        except ValueError as exc:
            print(f"wflow verify: error: --fault: {exc}", file=sys.stderr)
            return 2
    try:  # a precision the study has no path for: refused before the output is touched
        check_dtype(args.study, args.dtype, args.fault)
    except ValueError as exc:
        print(f"wflow verify: error: --dtype: {exc}", file=sys.stderr)
        return 2
    out = prepare(args)
    res = verify(args.study, out=out, quick=args.quick, seed=args.seed, fault=args.fault,
                 dtype=args.dtype)
    if comm_rank_size()[1] == 0:
        # a failing verdict starts with "FAIL — k of N criteria not met": not repeated
        head = ("" if res.verdict.startswith(Verdict.FAIL)
                else f"{Verdict.PASS} — " if res.passed else f"{Verdict.FAIL} — ")
        print(f"verify {res.name}: {head}{res.verdict}")
        print(f"wrote {args.out}/summary.json" + "".join(f", {f}" for f in res.figures))
    return 0 if res.passed else 1
