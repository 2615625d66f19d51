"""The main job's verdicts: each key number's meaning, tolerance (measured thresholds), verdict.

Part of the main job (:mod:`wflow.apps.main`).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from ...status import Verdict

#: Particles vs PDE: ``W_2(T)`` may exceed the ``t = 0`` sampling level by the Grönwall
#: factor ``e^{LT}`` (docs/theory.md §5: measured ≈ 1.15–2.5 at T = 1); above 3× the particles
#: have left the PDE solution (or the flow is too unstable to compare at this ``n``).
W2_GROWTH_TOL = 3.0


#: The theoretical order in ``τ`` (``h ∝ τ``) of each fitted quantity of the τ/h table:
#: ``max_k W₂(JKO, PDE)``, ``max_k ‖m^JKO_k − m^PDE(kτ)‖₁`` and the JKO's ``Σ_k|EDI_k|``
#: (relative). The JKO step is first order in ``τ`` (docs/theory.md §4), the FV transport
#: first order in ``h``.
THEORY_ORDER = {"w2": 1.0, "l1": 1.0, "edi": 1.0}

#: How far below :data:`THEORY_ORDER` a fitted order (log–log against ``τ`` over the
#: table's four levels) may fall before its verdict fails: ``order >= THEORY_ORDER[k] −
#: ORDER_MARGIN[k]`` (and every level-to-level ratio is at most :data:`RISE_MAX`, the
#: finest value below the coarsest).
#:
#: Measured by ``bench/refinement_margin.py`` (``bench/results/refinement_margin.json``):
#: the fitted orders of 102 correct main jobs on the 980-cell icosphere (seeds 0–101, three
#: scenario families in turn: one USA head at β = 5, one softmax head at β = 2, and the
#: shipped default's two softmax heads perturbed, β ∈ [0.8, 1.2]; every initial density
#: drawn from the seed). Each margin is ``1 −`` the smallest order measured, rounded down to
#: 0.05, so no calibration run fails an order threshold: a false-fail rate of at most
#: 2.9 % (one-sided 95 % bound, 0 of 102). Smallest / median order: W₂ 0.72 / 1.06, L¹
#: 0.13 / 0.86, EDI 0.77 / 1.26; the lowest all on the default family, whose L¹ is far
#: from its asymptote at these meshes (the shipped default on 2 420 cells: 0.80, 0.63,
#: 1.55, ``bench/results/bench_main_job.json``).
#:
#: At held-out seeds (10 000, 10 001) the correct runs pass (6 of 6; 10 of 10 with the
#: softmax runs at 10 002–10 005) and faults injected
#: through the public API are caught: β × 1.03 and a JKO stepping 1.1τ while it reports τ
#: on the USA family (2 of 2 each, W₂ orders ≤ 0.14 and ≤ 0.36), the softmax mobility
#: ``b̂ → 1`` on both softmax families (4 of 4). β × 1.03 and the 1.1τ step are NOT caught
#: on the default family (0 of 2 each: W₂ orders 0.75–1.02), where the spatial error
#: dominates the fault at 980 cells.
ORDER_MARGIN = {"w2": 0.3, "l1": 0.9, "edi": 0.25}
#: The most each fitted quantity may grow from one level of the τ/h table to the next
#: finer one: every ratio ``v_{i+1}/v_i`` (finer over coarser) is at most ``RISE_MAX[k]``,
#: and the finest value is below the coarsest (``settles_k``), besides the order
#: threshold. "Shrinks at every level" (every ratio < 1) is reported, not judged: it is not
#: a property of a correct table at these meshes (it failed the L¹ verdict of 5 of 102
#: correct calibration runs, all on the default family, whose L¹ first rises from the
#: coarsest level).
#:
#: Measured by ``bench/refinement_margin.py`` over the same 102 correct runs as
#: :data:`ORDER_MARGIN`: the largest ratio observed, rounded up to 0.05, and at least 1
#: (a number that does not grow never fails: below 1 the bound would depend on the
#: table's level spacing — a first-order number falls by about ``τ_{k+1}/τ_k`` per level,
#: 0.80–0.86 here, closer to 1 on a table with more levels — which the calibration does
#: not cover).
#: Largest / median ratio: W₂ 0.93 / 0.85, L¹ 1.14 / 0.88, EDI 0.90 / 0.83, the largest all
#: on the default family; every run's finest value is below its coarsest. Under this rule
#: 0 of the 102 runs fail (the former "shrinks at every level": 5, all L¹), and the held-out
#: correct runs pass (10 of 10). A fault on one level, β × 1.1 in the JKO of the 720-cell
#: level only (softmax family, held-out seeds 10 000–10 005), passes every order (W₂
#: 0.84–1.07) and is caught by the W₂ rise in 4 of 6 (ratios 1.01–1.32 from the 500-cell
#: level; 0.89 and 0.99 at the other two; the unfloored 0.95 would catch 5 of 6).
RISE_MAX = {"w2": 1.0, "l1": 1.15, "edi": 1.0}
#: The thresholds :data:`THEORY_ORDER` − :data:`ORDER_MARGIN` of the three verdicts.
ORDER_MIN_W2 = THEORY_ORDER["w2"] - ORDER_MARGIN["w2"]
#: ... of ``max_k ‖m^JKO_k − m^PDE(kτ)‖₁``.
ORDER_MIN_L1 = THEORY_ORDER["l1"] - ORDER_MARGIN["l1"]
#: ... of the JKO's ``Σ_k|EDI_k|`` (relative; first order in ``τ`` on exact gradient flows).
ORDER_MIN_EDI = THEORY_ORDER["edi"] - ORDER_MARGIN["edi"]
#: Fewest levels whose fitted orders are judged PASS/FAIL: a slope through two points (a
#: scenario with few JKO steps, where the rule of :func:`_levels` leaves one coarser level)
#: is reported as WARN when it misses its threshold, never as PASS beside "every check
#: passed".
MIN_JUDGED_LEVELS = 3
#: Largest ``max_k |t_k − kτ| / T`` of the recorded JKO times (round-off: ``t_k = kτ``).
TIME_TOL = 1e-9


def _verdict(passed: bool) -> Verdict:
    return Verdict.of(bool(passed))


def _free_row(add, label: str, f: dict, D: float) -> None:
    """The verdict row of one solver's free-energy EDI (token diffusion ``D > 0``): reported."""
    if f["meaning"] == "not recorded":
        add(f"{label}: free-energy EDI residual (relative)", None, "—", Verdict.NOT_APPLICABLE,
            f"not defined: with D = {D:g} the {label} carry no entropy (an empirical "
            "measure), so F_D = D H − sE has no balance along them; their balance of noisy "
            "tokens is Itô's formula for E (the next row).")
        return
    what = ("a discretisation error (→ 0 at the scheme's order under refinement)"
            if f["meaning"] == "identity" else
            "a defect of the model (softmax heads: the plain Laplacian is not the gradient "
            "flow of F_D), never a discretisation error")
    add(f"{label}: free-energy EDI residual (relative)", f["relative"],
        "none (reported)", Verdict.REPORTED if f["meaning"] == "identity" else
        Verdict.EXPECTED_DEFECT,
        f"|F_D(T) − F_D(0) + s∫∂_tE + ∫I dt| / ∫I dt with F_D = D H − sE, D = {D:g}, I the "
        f"relative Fisher information (THEORY §8): {what}. Not judged at a fixed mesh.")


def _ito_row(add, b: dict, D: float) -> None:
    """The particles' Itô energy balance (token diffusion ``D > 0``): judged when recorded."""
    label = "particles: Itô energy balance residual (mean over paths)"
    if not b["judged"]:
        add(label, b["mean"], "—", Verdict.NOT_APPLICABLE if b["mean"] is None
            else Verdict.REPORTED, f"not judged: {b['reason']}.")
        return
    add(label, b["mean"], f"|·| <= {b['tolerance']:.3g}", _verdict(bool(b["passed"])),
        f"E(T) − E(0) − ∫(power + ∂_tE) dt − D∫Σ_iΔ_S E dt with D = {D:g}: Itô's formula "
        "for the energy along the noisy tokens leaves a martingale of mean zero, so the "
        f"mean over {b['paths']} path(s) is a discretisation error plus sampling noise; "
        f"tolerance = z·SE ({b['stderr']:.3g}) + the weak bias bound "
        f"({b['bias_bound']:.3g}) + round-off.")


def _verdicts(s: dict, pde, pres, jko) -> list[dict]:
    """Every key number with its meaning, tolerance and verdict (for summary and report)."""
    rows: list[dict] = []

    def add(quantity: str, value: Any, tolerance: str, verdict: Verdict, meaning: str) -> None:
        rows.append({"quantity": quantity, "value": value, "tolerance": tolerance,
                     "verdict": verdict, "meaning": meaning})

    flow_what = {"surrogate": "the surrogate flow v̂ = b̂P∇ψ",
                 "transformer": "the transformer flow v = PΣ_h w_h f_h"}[s["flow"]]
    for name, res, label in (("pde", pde, "PDE"), ("particles", pres, "particles")):
        ch = res.checks.get("chain")
        if ch is not None:
            add(f"{label}: chain-rule residual (relative)", ch["value"],
                f"<= {ch['tolerance']:.3g}",
                Verdict.REPORTED if ch.get("judged") is False else _verdict(ch["passed"]),
                f"|ΔE − ∫∂_tE − ∫<∇ψ, v>dμ dt| relative to the energy budget "
                f"∫(|power| + |∂_tE|) dt, along {flow_what}. The chain rule dE/dt = ∂_tE + "
                "∫<∇ψ, v>dμ holds along every exact solution of any flow, so this is the "
                f"discretisation error of the {label} run — its accuracy check. Tolerance "
                f"0.1^q, q = {ch['order']} the scheme's balance order ({ch['scheme']}).")
        e = s["edi"][name]
        if s.get("diffusion", 0.0) > 0:  # token diffusion: the free-energy EDI instead
            _free_row(add, label, s["free_edi"][name], s["diffusion"])
            if name == "particles":
                _ito_row(add, s["ito_balance"], s["diffusion"])
        elif e["meaning"] == "identity":
            tol = ch["tolerance"] if ch is not None else float("nan")
            add(f"{label}: EDI residual (relative)", e["relative"], f"<= {tol:.3g}",
                _verdict(e["relative"] <= tol),
                "|E(T) − E(0) − ∫∂_tE − s∫(½|μ'|² + ½|∂E|²)| / dissipation. This flow is an "
                "exact (weighted) gradient flow, so the energy–dissipation identity holds "
                "with equality: the residual is a discretisation error, judged like the "
                "chain-rule residual.")
        elif e["meaning"] == "defect":
            add(f"{label}: EDI defect (relative)", e["relative"], "none (a property of the model)",
                Verdict.EXPECTED_DEFECT,
                "|E(T) − E(0) − ∫∂_tE − s∫(½|μ'|² + ½|∂E|²)| / dissipation along the "
                "transformer flow with several different softmax heads. This flow is NOT a "
                "gradient flow of E (docs/theory.md §3): the number measures how far the model is "
                "from one; it does not shrink under refinement and says nothing about the "
                "solver's accuracy (that is the chain-rule residual above).")
        else:
            add(f"{label}: EDI residual (relative)", None, "—", Verdict.NOT_APPLICABLE,
                "undefined: the heads are not symmetric and value-aligned (V = ±A), so "
                "there is no gradient-flow direction.")
    add("PDE: relative mass error", s["mass_error"], "<= 1e-10",
        _verdict(s["mass_error"] <= 1e-10),
        "max_t |Σ_K m_K(t) − 1|: the finite-volume scheme is conservative (round-off).")
    add("PDE: minimum density", s["min_density"], ">= 0", _verdict(s["min_density"] >= 0),
        "the upwind/limited scheme keeps ρ >= 0 under its positivity (CFL) bound.")
    w = s["w2"]
    w = s["w2"]
    _w2_row(add, w, int(s["n_particles"]))
    m = s.get("moments")
    if m is not None:
        R, lv = m["R"], m["levels"]
        rate = ("not fitted (one level)" if m["rate"] is None else
                f"n^{m['rate']:.2f}" + ("" if m["rate_stderr"] is None else
                                        f" ± {m['rate_stderr']:.2f}"))
        add("Particles vs PDE: moments at T (max |t|)", m["max_t"],
            f"<= {m['t_crit']:.2f} (Šidák over {(m['L'] + 1) ** 2 - 1} t({R - 1}) at level "
            f"{m['alpha']:g}; t = 0: {m['max_t_0']:.2f})", _verdict(m["passed"]),
            f"spherical-harmonic moments up to degree {m['L']} of {R} independent particle "
            f"systems of {lv[-1]} tokens (the main run and {R - 1} more) against the PDE's cell "
            f"moments (integrated over the cells): max |t| = {m['max_t']:.2f}, p = {m['p']:.3g} "
            f"(null: t({R - 1}) per moment, Šidák-combined; t = 0: p = {m['p_0']:.3g}). Monte "
            f"Carlo s.e. (from the replicates) median {m['se_mc_median']:.2e} (the i.i.d. "
            f"formula {m['se_iid_median']:.2e}), PDE error (Richardson against "
            f"{m['cells_coarse']} cells) max {m['pde_error_max']:.2e}. Smallest detectable "
            f"moment error {m['detectable_at_n']:.2e}; it shrinks with n as {rate} (fitted over "
            f"n = {', '.join(map(str, lv))}; theory n^-0.5). W₂ above only sees the sampling "
            f"floor (log n / n)^1/2.")
    if s.get("diffusion", 0.0) > 0:
        add("Token diffusion D", s["diffusion"], "—", Verdict.REPORTED,
            "every phase runs the noisy model (THEORY §8): Brownian tokens with generator "
            "D Δ_S in the particles, D Δ_S ρ in the PDE, the entropy D Σ m log(m/σ) in the "
            "JKO ([attention] diffusion; Mun & Rosenzweig's K = 1/(2D)).")
    if jko is not None and s.get("diffusion", 0.0) > 0:
        _free_row(add, "JKO", s["free_edi"]["jko"], s["diffusion"])
    if jko is not None:
        ch = jko.checks["edi"]
        add("JKO: Σ|EDI_k| (relative)", ch["value"], f"<= {ch['tolerance']:.3g}",
            Verdict.REPORTED if ch.get("judged") is False else _verdict(ch["passed"]),
            "Σ_k |s(E_k+1 − E_k) − sτ∂_tE − W²/2τ − τ/4(|∂E|²_k + |∂E|²_k+1)| / dissipation: "
            "the discrete EDI of the JKO steps (first order in τ; on a mesh it also carries "
            "the error of snapping the transported mass to the cells). The JKO scheme "
            "discretises the surrogate flow v̂, an exact gradient flow.")
        nl, ns = int(jko.stats.get("locked_steps", 0)), int(jko.stats["steps"])
        add("JKO: locked steps", f"{nl} of {ns}", "0",
            Verdict.of(nl == 0, judged=nl == ns),
            f"steps that left μ unchanged although |∂E|² > 0: the exact JKO on a mesh locks "
            f"when τ|v| <~ h/2. Step: {s['jko_tau']['what']}.")
        ref = ("the PDE of the surrogate flow (solved for this comparison: the JKO scheme "
               "discretises v̂, while the main PDE solves the transformer flow)"
               if s["w2"]["jko_reference"] == "pde_surrogate" else "the PDE (same flow)")
        tab = s.get("jko_refinement")
        surr = s["w2"]["jko_reference"] == "pde_surrogate"
        pde_name = f"{'surrogate ' if surr else ''}PDE"
        if tab is not None and len(tab["rows"]) > 1:
            _refinement_verdicts(add, tab, pde_name)
            verdict = _table_verdict(order_passes(tab, "w2", min_order=ORDER_MIN_W2),
                                     len(tab["rows"]))
            tol = (f"order >= {ORDER_MIN_W2:g} under h ∝ τ, level-to-level rise <= "
                   f"{RISE_MAX['w2']:g}, the finest below the coarsest (table below)")
        elif tab is not None:  # asked for, but one row: nothing shows convergence
            verdict, tol = Verdict.WARN, "— (the refinement table has one row: not judged)"
        else:
            verdict, tol = Verdict.NOT_APPLICABLE, "— (no refinement table)"
        add(f"W₂ JKO vs {pde_name} (max over the JKO times)",
            w["jko_vs_pde"], tol, verdict,
            f"exact W₂ between the JKO measures and {ref}. The JKO scheme agrees with it at "
            "first order in τ (docs/theory.md §4): the number is the O(τ) error of the step the "
            "mesh allows, and must shrink under joint refinement of τ and h (its verdict is "
            "the refinement table's W₂ order).")
    return rows


def _w2_row(add: Callable[..., None], w: dict, n: int) -> None:
    """The verdict row of the particles' ``W₂`` against the PDE (its growth over time).

    ``PASS`` while ``max_t W₂ <= G × W₂(0)`` (``G`` = :data:`W2_GROWTH_TOL`) by more than
    the subsample's sampling floor, ``FAIL`` beyond it by more than the floor, else
    ``INCONCLUSIVE`` (:func:`~wflow.apps.main.compare.resolve_w2`); with every particle in
    the exact solve the floor is 0 and the row is ``max_t W₂ <= G × W₂(0)``.
    """
    from .compare import resolve_w2

    label = w.get("label", "W₂")
    m = int(w.get("points", n))
    floor = float(w.get("subsample_floor") or 0.0)
    init, tol = w["particles_vs_pde_initial"], W2_GROWTH_TOL * w["particles_vs_pde_initial"]
    verdict = resolve_w2(w["particles_vs_pde_max"], tol, floor)
    sub = ""
    if m < n:
        sub = (f" Computed on a uniformly random subsample of {m} of the {n} particles (the "
               f"same particles at every time; seed {w.get('subsample_seed')}): its sampling "
               f"floor, the exact W₂ between two independent subsamples of {m} of the same "
               f"particles, is {floor:.4f}, so a difference from the tolerance below it is "
               f"not evidence (INCONCLUSIVE; raise [run] max_ot_points to {n} for every "
               f"particle). POT's sliced spherical W₂ of all {n} particles against the PDE "
               f"(a smaller, different quantity: the mean over circle projections): "
               f"{_fmt(w.get('sliced_all_initial'))} at t = 0, {_fmt(w.get('sliced_all'))} "
               f"at T.")
    rate = "m" if m < n else "n"
    add(f"{label} vs PDE (max over t)", w["particles_vs_pde_max"],
        f"<= {W2_GROWTH_TOL:g} × {init:.4f} (t = 0)"
        + (f", ± the floor {floor:.4f}" if floor > 0 else ""), verdict,
        f"exact W₂ (POT, geodesic cost) between the {m} particles and the PDE cell masses. "
        f"At t = 0 it is the sampling error of the initial draw (plus the mesh's "
        f"quantisation): {init:.4f}, against the rate {rate}^(-1/2) = "
        f"{float(w.get('points_inv_sqrt', w['n_inv_sqrt'])):.4f} (up to logs and a "
        f"constant). Mean-field theory keeps it at that level up to the Grönwall factor "
        f"e^(Lt) (docs/theory.md §5); at T it is {w['particles_vs_pde']:.4f} "
        f"({w['particles_vs_pde'] / init:.2f}× the t = 0 level).{sub}")


def _refinement_verdicts(add: Callable[..., None], tab: dict, pde_name: str) -> None:
    """The ``τ/h`` table's verdicts: the three fitted orders, the JKO times, the OT check."""
    rows = tab["rows"]
    what = (f"{len(rows)} levels, {rows[0]['cells']} to {rows[-1]['cells']} cells, "
            f"τ = {rows[0]['tau']:.3g} to {rows[-1]['tau']:.3g}")
    for key, label, tol, meaning in (
            ("w2", f"max_k W₂(JKO, {pde_name})", ORDER_MIN_W2,
             "the exact W₂ (POT) between the JKO iterate and the PDE on the same mesh at the "
             "JKO times, max over the times."),
            ("l1", f"max_k L¹(JKO, {pde_name})", ORDER_MIN_L1,
             "the L¹ distance Σ_K|m^JKO_K − m^PDE_K| of the cell masses on the same mesh at the "
             "JKO times, max over the times (the densities, not only their transport)."),
            ("edi", "JKO Σ|EDI_k| (relative)", ORDER_MIN_EDI,
             "the discrete EDI residual in the scheme's own metric, summed over the steps, "
             "relative to the dissipation: first order in τ on an exact gradient flow.")):
        p, rise, settles = tab[f"order_{key}"], tab[f"rise_{key}"], tab[f"settles_{key}"]
        ok = order_passes(tab, key, min_order=tol)
        add(f"JKO refinement: order of {label} in τ", p,
            f">= {tol:g}; every level-to-level ratio <= {RISE_MAX[key]:g}, the finest below "
            "the coarsest"
            + ("" if len(rows) >= MIN_JUDGED_LEVELS else
               f" (only {len(rows)} levels: a miss is a WARN; judged from "
               f"{MIN_JUDGED_LEVELS} levels)"),
            _table_verdict(ok, len(rows)),
            f"log–log slope against τ (h ∝ τ; {what}) of {meaning} The threshold is the "
            f"theoretical order {THEORY_ORDER[key]:g} minus the margin "
            f"{ORDER_MARGIN[key]:g} measured over correct runs (wflow/apps/main/"
            "verdicts.py, ORDER_MARGIN; bench/results/refinement_margin.json): a table that "
            "does not shrink, or shrinks slower, is not converging to the PDE (a wrong "
            "mobility, β or τ in the JKO step). Level to level (finer / coarser) the number "
            f"may grow at most ×{RISE_MAX[key]:g} (RISE_MAX: the largest ratio over the same "
            f"correct runs rounded up to 0.05, at least 1; here {_fmt(rise)}), and the "
            "finest value must be below the "
            f"coarsest ({'yes' if settles else 'NO'}): a fault on one level shows there."
            + ("" if rise is None or rise <= RISE_MAX[key] else
               f" A level-to-level ratio {rise:.3g} exceeds {RISE_MAX[key]:g}."))
    te = tab["time_error_max"]
    add("JKO refinement: recorded times t_k = kτ", te, f"<= {TIME_TOL:g} (relative to T)",
        _verdict(te <= TIME_TOL),
        "max_k |t_k − kτ| / T over every row: the JKO's recorded times are its steps, so "
        "every iterate is compared with the PDE at its own time (a mislabelled τ shows "
        "here).")
    ot = tab.get("ot_crosscheck")
    if ot is not None:
        add(f"OT cross-check: max_k W₂(JKO, {pde_name}) with scheme = \"ot\" "
            f"({ot.get('cells')} cells)", ot.get("w2_max"),
            "— (reported, not judged)", Verdict.REPORTED,
            f"the coarsest level run once more with the discrete-OT step (status "
            f"{ot.get('status')}, {ot.get('locked_steps', '?')} locked steps"
            + (f", up to {ot['empty_cells']} of {ot.get('cells')} cells empty (the OT density "
               "speckles; the logged warning)" if ot.get("empty_cells") else "")
            + "; L¹ "
            f"{_fmt(ot.get('l1_max'))}, FV on the same level: W₂ {_fmt(rows[0]['w2_max'])}, "
            f"L¹ {_fmt(rows[0]['l1_max'])}). Not a row of the fit: the OT step moves mass in "
            "whole-cell jumps and locks when τ|v|max <~ h/2 (docs/jko.md).")


def order_passes(tab: dict, key: str, *, min_order: float | None = None,
                 rise_max: float | None = None) -> bool:
    """Whether the τ/h table's verdict of quantity ``key`` passes (before the level count).

    ``order_key >= min_order`` and ``rise_key <= rise_max`` (every level-to-level ratio,
    finer over coarser) and ``settles_key`` (the finest value below the coarsest), the
    inputs of :func:`wflow.apps.main.refinement.level_ratios`.

    Parameters
    ----------
    tab : dict
        The table block (``order_*``, ``rise_*``, ``settles_*``).
    key : {"w2", "l1", "edi"}
        The fitted quantity.
    min_order, rise_max : float, optional
        The thresholds; default the shipped ``THEORY_ORDER[key] − ORDER_MARGIN[key]`` and
        ``RISE_MAX[key]`` (the calibration passes its own).
    """
    p, rise = tab[f"order_{key}"], tab[f"rise_{key}"]
    lo = THEORY_ORDER[key] - ORDER_MARGIN[key] if min_order is None else min_order
    hi = RISE_MAX[key] if rise_max is None else rise_max
    return (p is not None and p >= lo and rise is not None and bool(rise <= hi)
            and bool(tab[f"settles_{key}"]))


def _table_verdict(ok: bool, levels: int) -> Verdict:
    """PASS / FAIL of an order verdict; WARN instead of FAIL below ``MIN_JUDGED_LEVELS``."""
    return Verdict.of(ok, judged=levels >= MIN_JUDGED_LEVELS)


def _fmt(v: Any) -> str:
    return "—" if v is None or not isinstance(v, (int, float)) else f"{v:.3g}"
