"""``wflow jko SCENARIO.toml --out DIR``: the JKO scheme (FV or OT steps) on a sphere mesh."""

from __future__ import annotations

import argparse

from . import add_controls, add_override, add_scenario_command, finish, prepare_scenario
from ._help import describe


def register(sub: argparse._SubParsersAction) -> None:
    """Add the ``jko`` subcommand."""
    from ..infra.options import choices_of
    from ..jko.options import JKOOptions

    p = add_scenario_command(
        sub, "jko",
        help="JKO scheme on a sphere mesh: finite-volume Benamou–Brenier steps (default) or "
        "discrete optimal-transport steps",
        description=describe(
            "Compute the gradient flow of the scenario's energy as JKO (minimising-movement) "
            "steps μ_{k+1} = argmin_ν (1/2τ) W²_{b̂_k}(μ_k, ν) − sE(ν, t_{k+1}) on a "
            "triangulated S², b̂_k the lagged effective mobility. Two discretisations of the "
            "step ([jko] scheme, --scheme): 'fv' (the default; 'auto' is 'fv' on a mesh), "
            "the finite-volume Benamou–Brenier step with two-point fluxes across the cell "
            "edges (pseudo-time substeps, the energy implicit by convex–concave iterations "
            "or lagged; no locking, no empty cells); 'ot', discrete optimal transport "
            "between cell measures with the cost d_S²/b̂ (exact or entropic OT, a "
            "generalised conditional-gradient or mirror inner solver with an "
            "optimality-gap stopping rule; it locks when τ|v|_max <~ h/2). A key that does "
            "not apply to the scheme run is refused (exit status 2) when set to another "
            "value than its default, and warned about otherwise. Both schemes are "
            "cross-checked with POT (exact W² between consecutive iterates) up to "
            "verify_max_cells cells. Heads must be symmetric and value-aligned (V = ±A); "
            "the schedule deterministic.",
            command="jko", sections=("jko", "density"), detailed=("jko",),
            files="DIR/summary.json; DIR/diagnostics.csv (one row per t_k: E, E_h*, dEdt_w, "
            "slope2, W2sq = W²(μ_{k-1}, μ_k), edi_step, the scheme's own columns; w2_jko_vs_pde "
            "with compare_pde); DIR/density.npz (t (steps+1,), rho (steps+1, cells), "
            "centroids, areas; cells in the mesh file's order). No XDMF (`wflow pde` writes "
            "one)."),
    )
    add_override(p, "mesh", "jko")
    add_override(p, "tau", "jko", type=float)
    add_override(p, "T", "jko", type=float)
    # no argparse choice list: a scheme registered by the scenario's modules is valid too,
    # and the [jko] table checks the value under this flag's name (exit 2 naming --scheme)
    add_override(p, "scheme", "jko", metavar="|".join(choices_of(JKOOptions, "scheme")),
                 note=": fv (finite-volume Benamou–Brenier), ot (discrete optimal "
                 "transport), auto (fv on a mesh), or a scheme registered by the scenario's "
                 "modules")
    add_override(p, "ot", "jko", choices=choices_of(JKOOptions, "ot"),
                 note=" (the OT scheme only: refused with scheme fv)")
    add_controls(p, _main, diffusion="the entropy D Σ m log(m/σ) in the FV step; refused "
                 "with scheme ot")


def _free(res) -> str:
    """With token diffusion D > 0: the free-energy EDI of the run (``balance.free_edi``)."""
    D = getattr(res.options, "diffusion", 0.0)
    f = res.checks.get("free_edi") if D > 0 else None
    return "" if f is None else (f"; D = {D:g}: free-energy EDI Σ|edi^F_k| (relative) "
                                 f"{f['value']:.2e} (reported)")


def _main(args: argparse.Namespace) -> int:
    from ..apps.jobs.jko import run_jko

    out, sc = prepare_scenario(args)
    res = run_jko(sc, out, progress=args.progress,
                  overrides={"tau": args.tau, "T": args.T, "ot": args.ot,
                             "scheme": args.scheme, "mesh": args.mesh,
                             "diffusion": args.diffusion}, confirm=args.yes)
    st = res.stats
    rel = getattr(res, "checks", {}).get("edi", {}).get("value", float("nan"))
    adaptive = getattr(res.options, "adaptive", False) and getattr(res.options, "rtol", None)
    steps = (f"{st['steps']} adaptive steps (rtol {res.options.rtol:g}, first tau = "
             f"{st['tau']:g})" if adaptive else f"{st['steps']} steps of tau = {st['tau']:g}")
    print(f"jko: {res.status}, {st['cells']} cells, {steps} "
          f"({st['inner_iters_total']} inner iterations, max relative gap "
          f"{st['gap_rel_max']:.1e}) in {st['wall_time']:.2f} s; E {res.history['E'][0]:.6g} -> "
          f"{res.history['E'][-1]:.6g}, EDI residual (absolute, summed over the steps) "
          f"{float(res.history['edi_step'].sum()):.3e}, Σ|EDI_k| (relative) "
          f"{rel:.2e}{_free(res)}; wrote {args.out}")
    return finish("jko", res.status, res.message)
