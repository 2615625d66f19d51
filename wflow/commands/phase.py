"""``wflow phase``: the noisy model's phase transition (docs/guide/phase.md, THEORY §8).

Sub-commands: ``beta-star`` (the tricritical ``β*(d)``) and ``point`` (the thresholds
``K_#``, ``K_c``, ``K_f`` at given ``(β, d)``, with the token diffusions ``D = 1/(2K)``).
The figure and table of the whole diagram: ``demos/phase_diagram.py``.
"""

from __future__ import annotations

import argparse
import json


def register(sub: argparse._SubParsersAction) -> None:
    """Add the ``phase`` subcommand and its actions."""
    p = sub.add_parser(
        "phase",
        help="noisy model: tricritical β*, thresholds K_#, K_c, K_f (docs/guide/phase.md)",
        description="The phase transition of one unnormalised head A = V = I with token "
        "diffusion D on S^{d-1}, in the published coupling K = 1/(2D) (Mun & Rosenzweig; "
        "docs/guide/phase.md). The uniform density is linearly unstable for K > K_#(β); "
        "below the tricritical β*(d) the transition is continuous at K_#, above it "
        "discontinuous at K_c (equal free energies), with a fold K_f < K_c < K_# bounding "
        "the hysteresis window.",
    )
    hs = p.add_subparsers(dest="phase_command", metavar="ACTION")
    b = hs.add_parser("beta-star", help="β*(d), root of I_{d/2+1}(β)/I_{d/2}(β) = 1/d",
                      description="The tricritical inverse temperature β*(d) for each d.")
    b.add_argument("--d", type=int, nargs="+", required=True, help="dimension(s) d >= 2")
    b.add_argument("--json", action="store_true", help="emit a JSON list of records")
    b.set_defaults(func=_beta_star)
    q = hs.add_parser(
        "point", help="K_#, K_c, K_f (and D = 1/(2K)) at given β and d",
        description="Continues the zonal branch of stationary states from K_# in the order "
        "parameter m (wflow.phase.phase_point) and prints K_#, K_c, K_f, the order "
        "parameters m_c, m_f and the transition's type; D_# = 1/(2K_#) etc. are the same "
        "thresholds as token diffusions. A continuous transition has no fold (nan).")
    q.add_argument("--beta", type=float, nargs="+", required=True, help="β > 0")
    q.add_argument("--d", type=int, nargs="+", default=[3], help="dimension(s) (default 3)")
    q.add_argument("--json", action="store_true", help="emit a JSON list of records")
    q.set_defaults(func=_point)
    p.set_defaults(func=lambda args: (p.print_help(), 2)[1])


def _check(args: argparse.Namespace) -> None:
    """Every (β, d) valid before anything is computed (ValueError naming it: exit 2)."""
    from ..phase.thresholds import check_phase_args

    for d in args.d:
        for beta in getattr(args, "beta", None) or [1.0]:
            check_phase_args(beta, d)


def _beta_star(args: argparse.Namespace) -> int:
    from ..phase import tricritical_beta

    _check(args)
    recs = [{"d": int(d), "beta_star": tricritical_beta(int(d))} for d in args.d]
    if args.json:
        print(json.dumps(recs, indent=2))
        return 0
    print(f"{'d':>4} {'beta*':>16}")
    for r in recs:
        print(f"{r['d']:>4} {r['beta_star']:>16.10f}")
    return 0


def _point(args: argparse.Namespace) -> int:
    from ..infra.io import to_jsonable
    from ..phase import phase_point

    _check(args)
    recs = []
    for d in args.d:
        for beta in args.beta:
            pt = phase_point(float(beta), int(d))
            recs.append({**pt.as_dict(), **pt.diffusions()})
    if args.json:
        print(json.dumps(to_jsonable(recs), indent=2))
        return 0
    print(f"{'d':>3} {'beta':>8} {'K_#':>13} {'K_c':>13} {'K_f':>13} {'D_#':>11} {'D_c':>11}"
          "  transition")
    for r in recs:
        print(f"{r['d']:>3} {r['beta']:>8.4g} {r['k_sharp']:>13.8g} {r['k_c']:>13.8g} "
              f"{r['k_fold']:>13.8g} {r['D_sharp']:>11.6g} {r['D_c']:>11.6g}  "
              f"{r['transition']}")
    return 0
