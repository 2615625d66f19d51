"""``wflow phase``: the noisy model's phase transition (docs/guide/phase.md, THEORY §8).

Sub-commands: ``beta-star`` (the tricritical ``β*(d)``), ``point`` (the thresholds
``K_#``, ``K_c``, ``K_f`` at given ``(β, d)``, with the token diffusions ``D = 1/(2K)``) and
``mesh`` (the same thresholds on the full triangulated ``S²``, under refinement, against the
zonal ones).
The figure and table of the whole diagram: ``demos/phase_diagram.py``.
"""

from __future__ import annotations

import argparse
import json

from . import add_action, add_action_command, print_records

#: ``--json`` of every action.
_JSON = "emit a JSON list of records"


def register(sub: argparse._SubParsersAction) -> None:
    """Add the ``phase`` subcommand and its actions."""
    hs = add_action_command(
        sub, "phase",
        help="noisy model: tricritical β*, thresholds K_#, K_c, K_f (docs/guide/phase.md)",
        description="The phase transition of one unnormalised head A = V = I with token "
        "diffusion D on S^{d-1}, in the published coupling K = 1/(2D) (Mun & Rosenzweig; "
        "docs/guide/phase.md). The uniform density is linearly unstable for K > K_#(β); "
        "below the tricritical β*(d) the transition is continuous at K_#, above it "
        "discontinuous at K_c (equal free energies), with a fold K_f < K_c < K_# bounding "
        "the hysteresis window.")
    add_action(hs, "beta-star", _beta_star,
               help="β*(d), root of I_{d/2+1}(β)/I_{d/2}(β) = 1/d",
               description="The tricritical inverse temperature β*(d) for each d.",
               arguments={"--d": dict(type=int, nargs="+", required=True,
                                      help="dimension(s) d >= 2")}, json=_JSON)
    add_action(
        hs, "point", _point, help="K_#, K_c, K_f (and D = 1/(2K)) at given β and d",
        description="Continues the zonal branch of stationary states from K_# in the order "
        "parameter m (wflow.phase.phase_point) and prints K_#, K_c, K_f, the order "
        "parameters m_c, m_f and the transition's type; D_# = 1/(2K_#) etc. are the same "
        "thresholds as token diffusions. A continuous transition has no fold (nan).",
        arguments={"--beta": dict(type=float, nargs="+", required=True, help="β > 0"),
                   "--d": dict(type=int, nargs="+", default=[3],
                               help="dimension(s) (default 3)")}, json=_JSON)
    add_action(
        hs, "mesh", _mesh,
        help="K_#, K_c, K_f on the full S² mesh under refinement (d = 3)",
        description="Solves the stationary equation on geodesic icospheres of the given "
        "frequencies (20 n² cells) by Newton's method with pseudo-arclength continuation "
        "through the fold (wflow.phase.mesh_refinement), and prints K_#, K_c, K_f per mesh, "
        "their relative errors against the zonal continuation, the observed order in h "
        "and the Richardson-extrapolated values (three or more meshes). Exit 1 if the "
        "extrapolated K_c misses the zonal one by more than --rtol or the order is not 2.",
        arguments={"--beta": dict(type=float, nargs="+", required=True,
                                  help="β > β*(3) = 1.816 (discontinuous transitions)"),
                   "--refine": dict(type=int, nargs="+", default=[8, 16, 32],
                                    help="icosphere frequencies, increasing (default 8 16 32)"),
                   "--rtol": dict(type=float, default=1e-4,
                                  help="agreement demanded of the extrapolated K_c "
                                  "(default 1e-4)")}, json=_JSON)


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
    return print_records(recs, as_json=args.json, jsonable=False,
                         columns=(("d", "d", 4, ""), ("beta*", "beta_star", 16, ".10f")))


def _point(args: argparse.Namespace) -> int:
    from ..phase import phase_point

    _check(args)
    recs = []
    for d in args.d:
        for beta in args.beta:
            pt = phase_point(float(beta), int(d))
            recs.append({**pt.as_dict(), **pt.diffusions()})
    return print_records(recs, as_json=args.json, note="transition", columns=(
        ("d", "d", 3, ""), ("beta", "beta", 8, ".4g"), ("K_#", "k_sharp", 13, ".8g"),
        ("K_c", "k_c", 13, ".8g"), ("K_f", "k_fold", 13, ".8g"), ("D_#", "D_sharp", 11, ".6g"),
        ("D_c", "D_c", 11, ".6g")))


def _mesh(args: argparse.Namespace) -> int:
    from ..infra.io import to_jsonable
    from ..phase import mesh_refinement, tricritical_beta
    from ..phase.thresholds import check_phase_args

    bstar = tricritical_beta(3)
    for beta in args.beta:
        check_phase_args(beta, 3)
        if beta <= bstar:
            raise ValueError(f"beta: the mesh continuation needs β > β*(3) = {bstar:.6f} "
                             f"(a fold), got {beta!r}")
    if any(n < 1 for n in args.refine) or sorted(set(args.refine)) != list(args.refine):
        raise ValueError(f"refine: expected increasing frequencies >= 1, got {args.refine}")
    results = [mesh_refinement(float(b), tuple(args.refine), rtol=args.rtol)
               for b in args.beta]
    if args.json:
        print(json.dumps(to_jsonable([
            {"beta": r.beta, "rows": r.table(), "reference": r.reference, "order": r.order,
             "extrapolated": r.extrapolated, "rel_error": r.rel_error, "passed": r.passed}
            for r in results]), indent=2))
    else:
        for r in results:
            print(f"beta = {r.beta:g}: zonal K_# = {r.reference['k_sharp']:.10g}, "
                  f"K_c = {r.reference['k_c']:.10g}, K_f = {r.reference['k_fold']:.10g}")
            print(f"{'n':>4} {'cells':>7} {'h':>8} {'K_c':>14} {'err K_c':>10} "
                  f"{'K_f':>14} {'err K_f':>10} {'err K_#':>10} {'s':>7}")
            for row in r.table():
                print(f"{row['frequency']:>4} {row['cells']:>7} {row['h']:>8.5f} "
                      f"{row['k_c']:>14.10f} {row['err_k_c']:>10.2e} "
                      f"{row['k_fold']:>14.10f} {row['err_k_fold']:>10.2e} "
                      f"{row['err_k_sharp']:>10.2e} {row['seconds']:>7.1f}")
            print(f"  Richardson: K_c = {r.extrapolated['k_c']:.10g} (rel {r.rel_error['k_c']:.2e},"
                  f" order {r.order['k_c']:.3f}); K_f = {r.extrapolated['k_fold']:.10g} "
                  f"(rel {r.rel_error['k_fold']:.2e}, order {r.order['k_fold']:.3f}); "
                  f"{'PASS' if r.passed else 'FAIL'} at rtol {r.rtol:g}")
    return 0 if all(r.passed for r in results) else 1
