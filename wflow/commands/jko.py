"""``wflow jko SCENARIO.toml --out DIR``: JKO minimising movements on a sphere mesh."""

from __future__ import annotations

import argparse

from . import add_output, add_yes, finish, prepare


def register(sub: argparse._SubParsersAction) -> None:
    """Add the ``jko`` subcommand."""
    from ..infra.options import choices_of
    from ..jko.options import JKOOptions

    p = sub.add_parser(
        "jko",
        help="JKO minimising movements with (weighted) optimal transport on a sphere mesh",
        description="Compute the gradient flow of the scenario's energy as JKO steps "
        "μ_{k+1} = argmin_ν (1/2τ) W²_{b̂_k}(μ_k, ν) − sE(ν, t_{k+1}) on a triangulated S² "
        "(cost d_S²/b̂ with the lagged effective mobility; exact OT or entropic; "
        "generalised conditional-gradient inner solver with an optimality-gap stopping "
        "rule; POT cross-checks). Heads must be symmetric and value-aligned (V = ±A); the "
        "schedule deterministic. Scenario tables: [jko] (mesh [default: [pde] mesh, else "
        "meshes/sphere_2420.msh], T [default: [pde] T, else 1; a multiple of tau], tau, "
        "ot = 'emd' | 'sinkhorn', inner = 'gcg' | 'mirror', eps [default eps_scale·tau^"
        "eps_power], eps_scale, eps_power, mobility_mean = 'conformal' | 'arithmetic' | "
        "'geometric' | 'harmonic', gap_rtol, max_inner, warm_start, verify, "
        "verify_max_cells, neighbourhood, compare_pde) and [density] (as for `wflow pde`). "
        "Writes DIR/summary.json, DIR/diagnostics.csv (one row per t_k: E, E_h*, dEdt_w, "
        "slope2, W2sq = W²(μ_{k-1}, μ_k), inner_iters, gap, gap_rel, edi_step, ...; "
        "w2_vs_pde with compare_pde) and DIR/density.npz (t, rho (steps+1, cells), "
        "centroids, areas), the same files as `wflow pde`.",
    )
    p.add_argument("scenario", help="scenario TOML file")
    add_output(p)
    p.add_argument("--mesh", default=None, help="override [jko] mesh")
    p.add_argument("--tau", type=float, default=None, help="override [jko] tau")
    p.add_argument("--T", type=float, default=None, help="override [jko] T")
    p.add_argument("--ot", choices=choices_of(JKOOptions, "ot"), default=None,
                   help="override [jko] ot")
    p.add_argument("--progress", action=argparse.BooleanOptionalAction, default=None,
                   help="progress bar (default: only on a terminal)")
    add_yes(p)
    p.set_defaults(func=_main)


def _main(args: argparse.Namespace) -> int:
    from ..apps.jobs.jko import run_jko
    from ..apps.scenario import load_scenario

    out = prepare(args)
    sc = load_scenario(args.scenario)
    if args.mesh is not None:
        sc.sections["jko"] = dict(sc.sections.get("jko", {}), mesh=args.mesh)
    res = run_jko(sc, out, progress=args.progress,
                  overrides={"tau": args.tau, "T": args.T, "ot": args.ot}, confirm=args.yes)
    st = res.stats
    rel = getattr(res, "checks", {}).get("edi", {}).get("value", float("nan"))
    print(f"jko: {res.status}, {st['cells']} cells, {st['steps']} steps of tau = {st['tau']:g} "
          f"({st['inner_iters_total']} inner iterations, max relative gap "
          f"{st['gap_rel_max']:.1e}) in {st['wall_time']:.2f} s; E {res.history['E'][0]:.6g} -> "
          f"{res.history['E'][-1]:.6g}, EDI residual (absolute, summed over the steps) "
          f"{float(res.history['edi_step'].sum()):.3e}, Σ|EDI_k| (relative) "
          f"{rel:.2e}; wrote {args.out}")
    return finish("jko", res.status, res.message)
