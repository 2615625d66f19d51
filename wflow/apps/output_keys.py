"""Every key of every ``summary.json`` and every CSV column wflow writes: one table.

Each entry names a key pattern, its meaning, its unit and its sign convention
(:class:`~wflow.infra.output_keys.OutputKey`). A solver's own keys live in its package
(``wflow/<solver>/keys.py``, read here from its :class:`~wflow.infra.spec.SolverSpec`);
the keys several commands share (the contract of every output, the checks, the kernel log,
the balances), the main job's, the studies' and the reproductions' are here, and this
module assembles the one table, in the order where the first match explains a key. The
documentation's output-key reference is generated from it, and the test suite runs the
writers (``wflow run``, ``particles``, ``pde``, ``jko``, a study) and fails on a written
key that the table does not explain (``tests/test_output_keys.py``). Patterns and units:
:mod:`wflow.infra.output_keys` (the matcher).

Units
-----
``energy``: the energy ``E`` of docs/theory.md §3 (dimensionless, normalised by the
measure's mass 1); ``energy/time`` its rate; ``time``: the flow's time (depth);
``rad``: geodesic length on the unit sphere (every ``W_2``); ``1``: a pure number or ratio;
``s``: wall-clock seconds; ``count``; ``text``. Residuals named ``…relative`` are divided
by the dissipation or the energy budget of the run (unit ``1``); the others are absolute
(unit ``energy``).
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import replace
from typing import Any

from ..gaussian.spec import SPEC as GAUSSIAN
from ..infra.output_keys import CONTRACT, KeyTable, OutputKey, commands_of, flatten, written_by
from ..jko.spec import SPEC as JKO
from ..kinetic.keys import SHARED_SUMMARY_KEYS as _KINETIC_SHARED
from ..kinetic.spec import SPEC as KINETIC
from ..particles.spec import SPEC as PARTICLES
from ..pde.spec import SPEC as PDE

__all__ = ["OutputKey", "SUMMARY_KEYS", "CSV_COLUMNS", "CONTRACT", "TABLE", "flatten",
           "explain", "unexplained", "commands_of", "contract_problems"]

K = OutputKey
_ALL = "all"
_RUN = "wflow run"
_P = "wflow particles"
_D = "wflow pde"
_J = "wflow jko"
_SOLVERS = "wflow particles, pde, jko"
_EQ = "wflow verify"
_G = "wflow gaussian"
_R = "wflow reproduce"
_CHECKS = "wflow particles, pde, jko, gaussian, verify, reproduce"
_CHAIN_SIGN = "signed: ΔE − ∫∂_tE − ∫power − Itô − M (positive: the energy grew more)"
_EDI_SIGN = ("signed: ΔE − ∫∂_tE − Itô − M − sign·∫(½speed2 + ½slope2), sign = +1 for V = A "
             "(ascent), −1 for V = −A")
#: Entries written by one command (or the solvers): ``where`` named once.
RUN = written_by(_RUN)
SOLVERS = written_by(_SOLVERS)
VERIFY = written_by(_EQ)
REPRO = written_by(_R)

#: The keys of ``summary.json`` (flattened), first match wins.
SUMMARY_KEYS: tuple[OutputKey, ...] = (
    K("status", "the run's status: success, inaccurate, not_converged, locked, max_steps, "
      "failed (the worst phase for wflow run); a study (wflow verify, wflow reproduce): its "
      "verdict, PASS → success, INCONCLUSIVE → inconclusive, FAIL → failed "
      "(wflow.studies.base.VERDICT_STATUS); wflow gaussian: success (a blow-up is a "
      "result) or failed, reach: success or inaccurate (target missed)", "text",
      where=_ALL),
    K("message", "why the status is what it is ('' on success); every reason (a study: "
      "its verdict)", "text", where=_ALL),
    K("checks", "the run's checks, each {value, tolerance, passed, rule}; {} where the "
      "command judges no tolerance (wflow gaussian run: the moment ODE is integrated to "
      "its solver tolerances)", "as named", where=_ALL),
    K("scenario.**", "the scenario as read (every section and key of the TOML file, "
      "defaults not added)", "as in the scenario", where=_SOLVERS + ", run"),
    K("provenance.**", "versions of wflow, NumPy, SciPy, POT, Python; machine; start time",
      "text", where=_SOLVERS + ", run"),
    SOLVERS("solver", "the solver that wrote the file: particles, pde, jko or kinetic", "text"),
    K("seed", "the scenario's master seed (gaussian pretrained: the input samples' seed)",
      "count", where=_SOLVERS + ", gaussian"),
    SOLVERS("sign", "gradient-flow sign: +1 for V = A (ascent of E), −1 for V = −A (descent)",
            "1", "+1 ascent, −1 descent"),
    *PARTICLES.keys,
    SOLVERS("conventions.*", "the formula of the quantity named by the key, as computed",
            "text"),
    SOLVERS("outputs.**", "what the named output file holds (arrays, shapes, cell order)", "text"),
    SOLVERS("options.**", "the solver's options as used (PDEOptions / JKOOptions fields)",
            "as in the options"),
    *PDE.keys,
    *KINETIC.keys,
    K("checks.*.value", "the measured value of the named check (solvers: a relative "
      "residual; gaussian reach: a relative error at target.T; a study: its criterion's "
      "value)", "1", where=_CHECKS),
    K("checks.*.tolerance", "the tolerance the value is judged against (a study: the "
      "criterion's accepted range in words)", "1", where=_CHECKS),
    K("checks.*.passed", "value within tolerance", "bool", where=_CHECKS),
    K("checks.*.rule", "how the value is computed and why the tolerance", "text",
      where=_CHECKS),
    SOLVERS("checks.*.order", "the balance order q the tolerance 0.1^q comes from", "count"),
    SOLVERS("checks.*.scheme", "the scheme the order belongs to", "text"),
    *JKO.keys,
    K("checks.*.*.value", "(wflow verify: a criterion whose name holds a dot, as "
      "checks.*.value) the measured value of the phase's check: chain = relative "
      "chain-rule residual |chain| / energy budget; edi (JKO) = Σ_k|edi_k| / discrete "
      "dissipation, the JKO's summed |EDI| relative", "1", "≥ 0", _RUN + ", verify"),
    K("checks.*.*.tolerance", "the tolerance the value is judged against", "1",
      where=_RUN + ", verify"),
    K("checks.*.*.passed", "value within tolerance", "bool", where=_RUN + ", verify"),
    K("checks.*.*.rule", "how the value is computed and why the tolerance", "text",
      where=_RUN + ", verify"),
    RUN("checks.*.*.order", "the balance order q of the tolerance 0.1^q (None: JKO)", "count"),
    RUN("checks.*.*.scheme", "the scheme the order belongs to", "text"),
    RUN("checks.jko.locked_steps", "locked JKO steps", "count"),
    RUN("checks.jko.empty_cells_max", "most cells emptied by a JKO step", "count", "≥ 0"),
    SOLVERS("*kernel.calls.*", "calls of the attention kernel per back-end (direct, fastsum, …)",
            "count"),
    SOLVERS("*kernel.max_err_est", "largest estimated kernel error over the run", "1"),
    SOLVERS("*kernel.max_degree", "largest fast-summation degree used (−1: none)", "count"),
    SOLVERS("*kernel.last.*", "the last kernel call: backend used, backend requested, the reason, "
            "error estimate, tolerance, degrees per head, threads, kernel evaluations (triples)",
            "as named"),
    RUN("kernel.*.**", "the kernel log of a phase (as `kernel.*` of the solvers)", "as named"),
    K("d", "dimension of the ambient space (particles: tokens on S^{d-1}; gaussian: R^d)",
      "count", where=_P + ", " + _G),
    SOLVERS("n_heads", "number of heads H", "count"),
    K("integrator", "time integrator (particles: euler or rk4; pde: euler, ssprk2, ssprk3)",
      "text", where=_P + ", " + _D),
    K("diffusion", "token diffusion D of the run ([attention] diffusion or --diffusion; "
      "THEORY §8; 0: the noiseless model)", "radius²/time", "≥ 0", _P + ", " + _RUN),
    SOLVERS("balance.dE", "E(T) − E(0)", "energy", "positive: the energy grew"),
    SOLVERS("balance.work", "∫ ∂_tE dt, the work of the time-dependent weights", "energy"),
    SOLVERS("balance.power_int", "∫ power dt, power = ∫<∇ψ, v> dμ", "energy"),
    SOLVERS("balance.dissipation", "∫ (½ speed2 + ½ slope2) dt, the EDI's dissipation", "energy",
            "≥ 0"),
    SOLVERS("balance.G2_int", "∫ G2 dt", "energy", "≥ 0"),
    SOLVERS("balance.ito", "the Itô correction of noisy weights, integrated", "energy"),
    SOLVERS("balance.martingale", "the martingale term M of noisy weights", "energy"),
    SOLVERS("balance.chain", "chain-rule residual, absolute", "energy", _CHAIN_SIGN),
    SOLVERS("balance.edi", "EDI residual, absolute (a discretisation error for exact gradient "
            "flows, the defect of the transformer flow with several different softmax heads)",
            "energy", _EDI_SIGN),
    SOLVERS("balance.g2", "the G² balance residual, absolute: ΔE − ∫∂_tE − Itô − M − sign·∫G2 "
            "(equals the EDI residual for USA and one SA head only)", "energy", "signed"),
    K("mesh.spec", "the mesh as specified (shipped name, path, icosphere:N, gmsh:N)", "text",
      where=_D + ", " + _J + ", " + _RUN),
    K("mesh.cells", "number of cells", "count", where=_D + ", " + _J + ", " + _RUN),
    K("t_final", "the time reached", "time", where=_D + ", " + _J),
    K("final.*", "the history column at the last output time (see the CSV columns)",
      "as the column", where=_D + ", " + _J),
    K("*stats.steps", "time steps (PDE) or JKO steps taken", "count", where=_SOLVERS + ", run"),
    K("*stats.wall_time", "wall time of the solve", "s", where=_SOLVERS + ", run"),
    K("*stats.time_per_step", "wall time per step", "s", where=_SOLVERS + ", run"),
    K("*stats.mass_error_max", "max over time of |Σ m_K − 1|", "1", "≥ 0", _SOLVERS + ", run"),
    K("*stats.cells", "number of cells", "count", where=_SOLVERS + ", run"),
    # token diffusion D > 0 (THEORY §8): the PDE's Strang splitting and its counters
    K("*stats.diffusion", "token diffusion D of the PDE run", "radius²/time", "≥ 0",
      _D + ", " + _RUN),
    K("*stats.diffusion_solves", "Crank–Nicolson diffusion solves (Strang half-steps)",
      "count", where=_D + ", " + _RUN),
    K("*stats.diffusion_cg_iterations", "conjugate-gradient iterations of the diffusion "
      "solves", "count", where=_D + ", " + _RUN),
    K("*stats.diffusion_positive_step", "the largest Δt whose diffusion half-steps keep every "
      "mass >= 0 (2 h_+)", "time", "> 0", _D + ", " + _RUN),
    K("*stats.strang_extra_evals", "drift evaluations the Strang splitting adds", "count",
      where=_D + ", " + _RUN),
    RUN("checks.*.*.judged", "false: the phase's check is recorded, not judged (token "
        "diffusion: the noiseless chain rule or EDI; the free-energy EDI at a fixed mesh)",
        "bool"),
    RUN("checks.*.*.reason", "why the phase's check is not judged", "text"),
    RUN("checks.particles.ito_balance.*", "the particle phase's Itô energy balance check, "
        "field by field as checks.ito_balance.* of wflow particles (summarised in "
        "ito_balance.*)", "as named"),
    RUN("jko_refinement.ot_crosscheck", "null: no OT cross-check (token diffusion D > 0: the "
        "OT scheme has no entropy step)", "as named"),
    RUN("warnings", "[] when no phase logged a warning", "list"),
    RUN("statuses.*.status", "status of a phase (pde, particles, jko, pde_surrogate)", "text"),
    RUN("statuses.*.message", "why the phase's status is what it is", "text"),
    RUN("seeds.scenario", "the scenario's seed", "count"),
    RUN("seeds.particles_sampling", "the seed sequence of the particle sample", "count"),
    RUN("heads", "number of heads H", "count"),
    RUN("attention", "attention kind: softmax, usa, relu", "text"),
    RUN("free_edi.*.residual", "token diffusion D > 0: the free-energy EDI residual of the "
        "phase (F_D = D H − sE; balance.free_edi, softmax: free_edi_defect), absolute; null: "
        "not recorded (particles)", "energy", "signed"),
    RUN("free_edi.*.relative", "|free_edi.*.residual| / free_edi.*.dissipation", "1", "≥ 0"),
    RUN("free_edi.*.dissipation", "∫ I dt, the relative Fisher information integrated",
        "energy", "≥ 0"),
    RUN("free_edi.*.dF", "F_D(T) − F_D(0) of the phase", "energy", "signed"),
    RUN("free_edi.*.meaning", "identity (USA: a discretisation error), defect (softmax: a "
        "property of the model) or not recorded", "text"),
    RUN("ito_balance.mean", "token diffusion D > 0: the particles' Itô energy balance residual, "
        "E(T) − E(0) − ∫(power + ∂_tE) dt − D∫ΣΔ_S E dt, mean over paths (checks.ito_balance)",
        "energy", "signed"),
    RUN("ito_balance.tolerance", "z·SE + the weak bias bound + round-off: the bound on "
        "|ito_balance.mean|", "energy", "≥ 0"),
    RUN("ito_balance.stderr", "standard error of ito_balance.mean", "energy", "≥ 0"),
    RUN("ito_balance.bias_bound", "(κh)^q ∫(|power| + |∂_tE| + D|ΣΔ_S E|) dt: the weak bias "
        "bound", "energy", "≥ 0"),
    RUN("ito_balance.budget", "∫(|power| + |∂_tE| + D|ΣΔ_S E|) dt, mean over paths", "energy",
        "≥ 0"),
    RUN("ito_balance.paths", "token-noise paths in the mean", "count"),
    RUN("ito_balance.judged", "whether the balance is judged (false: ito_balance.reason)",
        "bool"),
    RUN("ito_balance.passed", "|ito_balance.mean| <= ito_balance.tolerance; null when not "
        "judged", "bool"),
    RUN("ito_balance.reason", "why the balance is not judged; null when it is", "text"),
    RUN("edi.*.residual", "EDI residual of the phase, absolute", "energy", _EDI_SIGN),
    RUN("edi.*.relative", "EDI residual of the phase, relative: |edi.*.residual| / "
        "edi.*.dissipation (JKO: of the signed sum over the steps; the JKO's check is the sum "
        "of |edi_k|, checks.jko.edi.value)", "1", "≥ 0"),
    RUN("edi.*.dissipation", "∫ (½ speed2 + ½ slope2) dt of the phase", "energy", "≥ 0"),
    RUN("edi.*.chain_residual", "chain-rule residual of the phase, absolute", "energy",
        _CHAIN_SIGN),
    RUN("edi.*.dE", "E(T) − E(0) of the phase", "energy", "positive: the energy grew"),
    RUN("edi.*.meaning", "identity (an exact gradient flow: the residual is a discretisation "
        "error) or defect (the transformer flow with different softmax heads)", "text"),
    RUN("w2.particles_vs_pde", "exact W₂ between the particles (all of them, or the subsample "
        "w2.points of them: w2.label says which) and the PDE's cell masses at T", "rad", "≥ 0"),
    RUN("w2.particles_vs_pde_initial", "the same at t = 0: the sampling error of the draw "
        "plus the mesh's quantisation", "rad", "≥ 0"),
    RUN("w2.particles_vs_pde_max", "max over the output times", "rad", "≥ 0"),
    RUN("w2.n_inv_sqrt", "n^{-1/2}, the rate of the sampling error", "1"),
    RUN("w2.label", "the one name of the particles' exact W₂, as on the terminal, in the "
        "report, its figure and the estimate: 'W₂ (all n particles)' or 'W₂ (subsample of m "
        "of n particles)'", "text"),
    RUN("w2.points", "m, the particles the exact W₂ uses: all n up to [run] max_ot_points, "
        "else that many, drawn uniformly at random without replacement (the same particles "
        "at every time)", "count"),
    RUN("w2.points_inv_sqrt", "m^{-1/2}, the sampling rate of the particles used", "1"),
    RUN("w2.subsampled", "the exact W₂ uses a subsample (m < n)", "bool"),
    RUN("w2.subsample_floor", "the subsample's sampling floor: exact W₂ between it and a "
        "second independent subsample of m of the same particles (larger of t = 0 and T); a "
        "difference of W₂ values below it is not evidence (the growth verdict is INCONCLUSIVE "
        "there); 0 when m = n", "rad", "≥ 0"),
    RUN("w2.subsample_seed", "the seed of the subsample and of the sliced W₂'s projections "
        "([scenario seed, 4343]); null when m = n", "count"),
    RUN("w2.sliced_all", "POT's sliced spherical W₂ (ot.sliced_wasserstein_sphere, p = 2, "
        "200 seeded projections) of ALL n particles against the PDE's cell masses at T; a "
        "different, smaller quantity than W₂; null when m = n (the exact W₂ covers them)",
        "rad", "≥ 0"),
    RUN("w2.sliced_all_initial", "the same at t = 0", "rad", "≥ 0"),
    RUN("w2.sliced_all_max", "the same, max over the output times", "rad", "≥ 0"),
    RUN("w2.growth_tolerance", "PASS while max_t W₂ ≤ this × its t = 0 level (the Grönwall "
        "allowance e^{LT})", "1"),
    RUN("w2.jko_vs_pde", "exact W₂ between the JKO measures and the reference PDE, max over "
        "the JKO times", "rad", "≥ 0"),
    RUN("w2.jko_vs_pde_final", "the same at the last JKO time", "rad", "≥ 0"),
    RUN("w2.jko_reference", "the PDE the JKO is compared with: pde, or pde_surrogate for "
        "flow = transformer", "text"),
    RUN("mass_error", "max over time of the PDE's |Σ m_K − 1|", "1", "≥ 0"),
    RUN("min_density", "smallest PDE cell density over the run", "1/area", "≥ 0"),
    RUN("n_particles", "number of particles sampled from the initial cell masses", "count"),
    RUN("moments.**", "particles vs PDE by spherical-harmonic moments (wflow.apps.main.moments): "
        "replicate systems, levels n/16, n/4, n; max |t| against its Šidák t(R−1) critical "
        "value, p-values, Monte Carlo and PDE errors, the smallest detectable moment error and "
        "its fitted rate in n; test_T / test_0: MomentTest.as_dict() at T and t = 0", "mixed"),
    RUN("wall_time_s.*", "wall time of a phase (pde, particles, jko, jko_refinement, "
        "compare) and the total", "s"),
    RUN("cpu_time_s.*", "CPU time of a phase (this process, every thread; a restored phase: "
        "as recorded) and their sum (total: the phases only, not the start-up)", "s"),
    RUN("jko_status", "status of the JKO phase", "text"),
    RUN("resumed.resumed", "the run continued a checkpoint (--resume)", "bool"),
    RUN("resumed.restored_phases", "the phases read from the checkpoint", "text"),
    RUN("resumed.restored_wall_s", "recorded wall time of the restored phases", "s"),
    RUN("resumed.this_session_wall_s", "wall time of this session", "s"),
    RUN("resumed.note", "how wall_time_s.total counts the restored phases", "text"),
    RUN("jko_tau.rule", "how τ was chosen (given, or the auto rule)", "text"),
    RUN("jko_tau.h", "mesh size √(mean cell area)", "rad"),
    RUN("jko_tau.vmax", "largest speed |v̂| at t = 0", "1/time"),
    RUN("jko_tau.tau", "the JKO step τ", "time"),
    RUN("jko_tau.steps", "JKO steps N = T/τ", "count"),
    RUN("jko_tau.cells_per_step", "τ |v̂|max / h: cells crossed per step (locking below ½)",
        "1"),
    RUN("jko_tau.eps", "entropic ε (0: exact OT)", "1"),
    RUN("jko_tau.what", "the choice of τ in words", "text"),
    RUN("jko_refinement.rows[].cells", "cells of the refinement row's icosphere", "count"),
    RUN("jko_refinement.rows[].h", "its mesh size", "rad"),
    RUN("jko_refinement.rows[].tau", "its JKO step", "time"),
    RUN("jko_refinement.rows[].steps", "its JKO steps", "count"),
    RUN("jko_refinement.rows[].eps", "its entropic ε", "1"),
    RUN("jko_refinement.rows[].cells_per_step", "its τ|v̂|max/h", "1"),
    RUN("jko_refinement.rows[].status", "its JKO status", "text"),
    RUN("jko_refinement.rows[].locked_steps", "its locked steps", "count"),
    RUN("jko_refinement.rows[].edi_abs_relative", "its JKO Σ_k|edi_k| relative (the check's "
        "value: sum of absolute step residuals over the discrete dissipation; token diffusion "
        "D > 0: of the free-energy EDI, checks.jko.free_edi.value)", "1", "≥ 0"),
    RUN("jko_refinement.rows[].edi_relative", "its JKO EDI residual relative: |Σ_k edi_k| over "
        "the dissipation (signed errors may cancel)", "1", "≥ 0"),
    RUN("jko_refinement.rows[].w2_max", "its W₂(JKO, PDE) max over the JKO times", "rad",
        "≥ 0"),
    RUN("jko_refinement.rows[].w2_final", "its W₂(JKO, PDE) at the last time", "rad", "≥ 0"),
    RUN("jko_refinement.rows[].scheme", "its JKO scheme: fv (two-point fluxes, the dynamic "
        "form) or ot (static transport cost)", "text"),
    RUN("jko_refinement.rows[].l1_max", "its L¹ distance of the JKO cell masses to the PDE's, "
        "Σ_K |m_K − m_K^PDE|, max over the JKO times", "1", "≥ 0"),
    RUN("jko_refinement.rows[].l1_final", "the same at the last time", "1", "≥ 0"),
    RUN("jko_refinement.order_l1", "fitted order of the L¹ distance in h ∝ τ", "1"),
    RUN("jko_refinement.rows[].empty_cells", "its most cells empty at one JKO time (mass < "
        "1e-9 of the cell's initial mass; 0 for the FV scheme, the OT scheme's speckle)",
        "count", "≥ 0"),
    RUN("warnings[].phase", "the main job's phase that logged the warning (pde, particles, "
        "jko, pde_surrogate, jko_refinement, compare)", "text"),
    RUN("warnings[].logger", "the wflow module that logged it", "text"),
    RUN("warnings[].level", "its logging level (WARNING or ERROR)", "text"),
    RUN("warnings[].message", "the warning as printed on the terminal (each distinct one "
        "once)", "text"),
    RUN("jko_refinement.ot_crosscheck.*", "the coarsest row run once more with the static OT "
        "scheme (not a row of the table): the same keys as a row", "as the row"),
    RUN("jko_refinement.order_w2", "fitted order of W₂(JKO, PDE) in h ∝ τ", "1"),
    RUN("jko_refinement.order_edi", "fitted order of the JKO Σ|edi_k| relative", "1"),
    RUN("jko_refinement.shrinks_w2", "W₂(JKO, PDE) decreases along the table", "bool"),
    RUN("jko_refinement.shrinks_edi", "the JKO Σ|edi_k| relative decreases along the table",
        "bool"),
    RUN("jko_refinement.rule", "how the rows are built", "text"),
    RUN("jko_refinement.rows[].time_error", "its max_k |t_k − kτ| / T over the JKO's recorded "
        "times (0: every iterate is compared with the PDE at its own time)", "1", "≥ 0"),
    RUN("jko_refinement.rows[].wall_s.*", "wall time of the row's surrogate PDE, JKO and W₂ "
        "(pde, jko, w2; not on the finest row, whose phases are timed in wall_time_s)", "s",
        "≥ 0"),
    RUN("jko_refinement.rows[].w2_uncertified", "largest dual violation of a sparse W₂ whose "
        "certificate failed (its plan's value, an upper bound, is used; 0: every W₂ dense or "
        "certified)", "rad²", "≥ 0"),
    RUN("jko_refinement.shrinks_l1", "the L¹ distance decreases along the table", "bool"),
    RUN("jko_refinement.time_error_max", "max over the rows of rows[].time_error", "1", "≥ 0"),
    RUN("jko_refinement.thresholds.*", "the verdicts' thresholds: smallest passing order_w2, "
        "order_l1, order_edi (measured, wflow/apps/main/verdicts.py ORDER_MIN_*) and largest "
        "time_error", "1"),
    RUN("verdicts[].quantity", "the number judged, named as in the report's first table",
        "text"),
    RUN("verdicts[].value", "its value", "as named"),
    RUN("verdicts[].tolerance", "what it is judged against", "text"),
    RUN("verdicts[].verdict", "PASS, FAIL, WARN or defect (expected)", "text"),
    RUN("verdicts[].meaning", "what the number means", "text"),
    RUN("jko.status", "a masked scenario (attention.mask): 'not applicable', the JKO phase is "
        "not run", "text"),
    RUN("jko.reason", "why not: the causal system is not a gradient flow (no energy identity, "
        "no JKO)", "text"),
    RUN("edi.status", "a masked scenario: 'not applicable', no EDI residual is computed",
        "text"),
    RUN("edi.reason", "why not (as jko.reason)", "text"),
    RUN("alibi.token_slope", "a masked scenario: the particles' ALiBi slope per token, λ/n "
        "(0: no bias)", "1", "≥ 0"),
    RUN("checks.kinetic", "a masked scenario: the kinetic phase's checks ({}: its mass and "
        "positivity are judged in its status)", "as named"),
    RUN("kinetic_stats.kernel_calls", "a masked scenario: the kinetic phase's kernel sums (S "
        "per velocity evaluation)", "count"),
    RUN("kinetic_stats.slices", "a masked scenario: the kinetic phase's slices S", "count"),
    RUN("causal_moments.bins", "a masked scenario: position bins B of consecutive tokens "
        "(the largest divisor of S with a square moment layout)", "count", "≥ 1"),
    RUN("causal_moments.slices_per_bin", "kinetic slices S/B averaged per bin", "count",
        "≥ 1"),
    RUN("causal_moments.degree", "largest harmonic degree L compared per bin ((L+1)² − 1 "
        "moments)", "count"),
    RUN("causal_moments.replicates", "independent causal particle systems R (the main run "
        "first)", "count"),
    RUN("causal_moments.alpha", "level of the moment tests (Šidák over the bins × moments)",
        "1"),
    RUN("causal_moments.cells_coarse", "cells of the coarse icosphere of the kinetic "
        "reference's Richardson error", "count"),
    RUN("causal_moments.max_t_T", "max |t| over the bins × moments at T: (particles' "
        "control-variate mean − kinetic) / (replicate s.e. ⊕ reference error)", "1", "≥ 0"),
    RUN("causal_moments.t_crit_T", "its Šidák critical value of t(R − 1) at alpha: the test "
        "passes when max_t_T ≤ t_crit_T", "1", "> 0"),
    RUN("causal_moments.p_T", "the Šidák p-value of max_t_T", "1", "in [0, 1]"),
    RUN("causal_moments.max_t_0", "max |t| at t = 0 (no reference error)", "1", "≥ 0"),
    RUN("causal_moments.t_crit_0", "its critical value", "1", "> 0"),
    RUN("causal_moments.p_0", "the Šidák p-value of max_t_0", "1", "in [0, 1]"),
    RUN("causal_moments.t_per_bin_T", "max |t| at T of each position bin, (B,)", "1", "≥ 0"),
    RUN("causal_moments.se_mc_median", "median replicate standard error of the moments at T",
        "1", "≥ 0"),
    RUN("causal_moments.ref_error_max", "largest error of the kinetic reference, mesh ⊕ "
        "slices", "1", "≥ 0"),
    RUN("causal_moments.mesh_error_max", "largest Richardson mesh error "
        "|μ^h − μ^coarse|/(r² − 1)", "1", "≥ 0"),
    RUN("causal_moments.slice_error_max", "largest slice error (4/3)|μ_S − μ_2S| (coarse mesh)",
        "1", "≥ 0"),
    RUN("causal_moments.detectable_T", "smallest moment error the test at T detects, "
        "t_crit (s² + e²)^{1/2}", "1", "≥ 0"),
    RUN("causal_moments.control_degree", "degree L_c of the control variates at T (the "
        "harmonics of each token's initial position)", "count"),
    RUN("causal_moments.controls", "number of controls, B((L_c+1)² − 1)", "count"),
    RUN("causal_moments.cv_se_ratio", "median ratio of the control-variate s.e. to the plain "
        "s.e. at T (< 1: the controls explain the initial draw's fluctuation)", "1", "> 0"),
    RUN("causal_moments.max_t_T_plain", "max |t| at T without control variates (reported, "
        "not judged)", "1", "≥ 0"),
    RUN("causal_moments.finite", "every t and every reference error finite", "bool"),
    RUN("causal_moments.passed", "finite, max_t_T ≤ t_crit_T and max_t_0 ≤ t_crit_0", "bool"),
    RUN("causal_moments.test_*.**", "the moment test at T (test_T) and at t = 0 (test_0), "
        "on the flat layout [mass, bin 0's moments, bin 1's, …]: replicates R, tokens n, "
        "layout degree L, level alpha; per entry the difference particles − kinetic (diff), "
        "the replicate s.e. (se_mc), the i.i.d. one (se_iid), the reference error (pde_err) "
        "and t; max_t, t_crit, p_max_t; Hotelling's T² (NaN when R ≤ entries); the MMD² "
        "(no meaning in this layout); detectable; se_ratio", "as named"),
    K("study", "the study's name", "text", where="wflow verify, wflow reproduce"),
    K("passed", "every criterion holds", "bool", where="wflow verify, wflow reproduce"),
    K("verdict", "the verdict in words: the criteria and the measured numbers", "text",
      where="wflow verify, wflow reproduce"),
    K("figures", "the figure files written", "text", where="wflow verify, wflow reproduce"),
    K("settings.**", "the study's settings (quick, seed, tolerances, sizes)", "as named",
      where="wflow verify, wflow reproduce"),
    K("criteria[].name", "a criterion's name (what --fault controls name)", "text",
      where="wflow verify, wflow reproduce"),
    K("criteria[].value", "the measured value", "as named", where="wflow verify"),
    K("criteria[].lo", "lower end of the accepted range (None: unbounded)", "as named",
      where="wflow verify"),
    K("criteria[].hi", "upper end of the accepted range (None: unbounded)", "as named",
      where="wflow verify"),
    K("criteria[].accepted", "the accepted range in words", "text", where="wflow verify"),
    K("criteria[].what", "what is measured", "text", where="wflow verify"),
    K("criteria[].why", "why the range", "text", where="wflow verify"),
    K("criteria[].ok", "the value lies in the range", "bool", where="wflow verify"),
    K("fault", "the injected fault (--fault), None for a normal run", "text",
      where="wflow verify"),
    K("fault_description", "what the fault changes", "text", where="wflow verify"),
    K("negative_controls.**", "every fault the study declares (FAULTS) and what it changes",
      "text", where="wflow verify"),
    K("fault_family", "the family of a sized fault (--fault FAMILY:S), None otherwise",
      "text", where="wflow verify"),
    K("fault_size", "the size S of a sized fault (velocity or time scaled by 1 + S, …)", "1",
      where="wflow verify"),
    K("fault_families", "the fault families the study accepts ({}: none)", "text",
      where="wflow verify"),
    K("fault_families.*", "every fault family the study accepts and what it scales (size "
      "and power: docs/studies_power.md)", "text", where="wflow verify"),
    K("seed_independent", "the criteria cannot depend on the seed (one run stands for all "
      "seeds)", "bool", where="wflow verify"),
    K("fits.**", "the study's fitted numbers (orders, rates, levels; see the study's module)",
      "as named", where="wflow verify, wflow reproduce"),
    VERIFY("cases[].n", "equiangular: tokens n of the case", "count"),
    VERIFY("cases[].d", "equiangular: dimension d", "count"),
    VERIFY("cases[].lambdas", "equiangular: the head eigenvalues λ_h", "1"),
    VERIFY("cases[].beta", "equiangular: inverse temperature β", "1"),
    VERIFY("cases[].T", "equiangular: final time", "time"),
    VERIFY("cases[].dt", "equiangular: time step", "time"),
    VERIFY("cases[].equiangular_spread", "equiangular: max over time of (max − min) of the "
           "off-diagonal Gram entries <x_i, x_j> (0: the configuration stays equiangular)",
           "1", "≥ 0"),
    VERIFY("cases[].ode_distance", "equiangular: max |γ_particles − γ_ODE| of the common inner "
           "product against the scalar ODE", "1", "≥ 0"),
    VERIFY("cases[].early_rate_formula", "equiangular: the predicted early rate of γ",
           "1/time"),
    VERIFY("cases[].early_rate_F0", "equiangular: the ODE's right side F(γ) at γ = 0", "1/time"),
    VERIFY("cases[].early_rate_fit", "equiangular: the early rate fitted on the particle run",
           "1/time"),
    VERIFY("cases[].early_fit_tau", "equiangular: the early fit's window [0, τ] (γ(τ) <~ 0.05)",
           "time"),
    VERIFY("cases[].early_rel_err", "equiangular: |fit − formula| / |formula| of the early rate",
           "1", "≥ 0"),
    VERIFY("cases[].late_rate_theory", "equiangular: the predicted late rate of 1 − γ, 2Λ "
           "(Λ = Σ_h λ_h)", "1/time"),
    VERIFY("cases[].late_rate_fit", "equiangular: the rate fitted on 1 − γ in [1e-8, 1e-4] "
           "(NaN: the run never enters the window)", "1/time"),
    VERIFY("cases[].late_fit_samples", "equiangular: samples in the late fit", "count"),
    VERIFY("cases[].late_rel_err", "equiangular: |fit − theory| / |theory| of the late rate", "1",
           "≥ 0"),
    VERIFY("cases[].series.*", "equiangular: the recorded series (t, γ of the particles, γ of the "
           "ODE)", "as named"),
    VERIFY("cases[].checks.*", "equiangular: the case's criterion values (as criteria[].value)",
           "1"),
    VERIFY("decay.*.*", "asymptotics: per schedule (ou, oscillating) G² early and late, their "
           "ratio, mean inner product and clusters at T", "as named"),
    VERIFY("G2_vs_H.*.*", "asymptotics: per schedule, H, the late-time mean of G² and its "
           "standard error (the fit of G² against H)", "as named"),
    VERIFY("series_part_a.*.*", "asymptotics: per schedule the series t, G²", "as named"),
    VERIFY("ok.*", "edi: each criterion's pass (orders of the EDI residual per solver; the "
           "transformer's defect persists)", "bool"),
    VERIFY("table.**", "a study's table of measured rows: edi: per solver and step (dt, flow, "
           "EDI and G² residuals, dissipation, …); gamma: per family (init, decay) ε, sup|E^ε − E| "
           "and sup W₂; mean-field: per n the W₂ of two particle samples at 0 and T (two0, twoT), "
           "particles vs PDE (xyT), PDE vs PDE (zzT) and the prediction predT = √(½(xyT² + zzT²))",
           "as named"),
    VERIFY("tests.*.*", "mean-field: the moment test at t = 0 (t0), at T on the control-variate "
           "moments (T; judged) and on the plain moments (T_plain; reported): replicates R, "
           "tokens per replicate n, degree L, level alpha; per moment the difference particles − "
           "PDE (diff), its replicate standard error (se_mc), the i.i.d.-formula one (se_iid) and "
           "their ratio (se_ratio), the PDE's Richardson error (pde_err) and t; max|t| (max_t) "
           "against its Šidák critical value (t_crit) with its p-value (p_max_t); Hotelling's T² "
           "(hotelling, hotelling_crit, p_hotelling); the MMD² of the moments (mmd2, p_mmd); the "
           "smallest moment difference the test detects (detectable)", "as named"),
    VERIFY("reported.*", "mean-field: cross-checks reported, not judged: the moments' MMD² and "
           "its p-value at 0 and T (mmd2_0, p_mmd_0, mmd2_T, p_mmd_T); POT's sliced W₂ on the "
           "sphere of particles vs PDE samples (ssw) and of two PDE samples (ssw_floor); exact "
           "W₂ (w2, w2_floor) on w2_points points", "as named"),
    VERIFY("general.**", "entropy: the entropy-production identity on general heads "
           "(symmetric, nonsymmetric): errors per dt (max absolute error, max rate) and the "
           "fitted order", "as named"),
    VERIFY("equiangular.**", "entropy: the equiangular closed form (n, λ, T, the smallest "
           "increment and rate, the closed form's error); relu-vs-softmax: per kind the "
           "collapse time of the particles and of the theory", "as named"),
    VERIFY("random.*[].*", "relu-vs-softmax: per kind, each random configuration (n, d, "
           "recorded times, status)", "as named"),
    VERIFY("random_summary.*.*", "relu-vs-softmax: per kind the median collapse time and the "
           "fraction of runs that collapsed", "as named"),
    VERIFY("ns", "gaussian-particles: the particle counts n", "count"),
    VERIFY("m_error", "gaussian-particles: |m̂ − m| per n and replicate", "1", "≥ 0"),
    VERIFY("Sigma_error", "gaussian-particles: ‖Σ̂ − Σ‖_F per n and replicate", "1", "≥ 0"),
    VERIFY("w2", "gaussian-particles: W₂(N(m̂, Σ̂), N(m, Σ)) per n and replicate", "1", "≥ 0"),
    VERIFY("reps", "gaussian-particles: replicates per n", "count"),
    VERIFY("bias", "gaussian-particles: the mean error per n and component", "1"),
    VERIFY("bias_stderr", "gaussian-particles: its standard error", "1", "≥ 0"),
    VERIFY("components", "gaussian-particles: the components of the error vector", "text"),
    VERIFY("blown_up", "gaussian-particles: replicates that blew up", "count"),
    VERIFY("expected_slope", "gaussian-particles: the predicted slope of the error in n", "1"),
    VERIFY("slope_tol", "gaussian-particles: the tolerance of the slope", "1"),
    VERIFY("extrapolated_bias.*", "gaussian-particles: the bias extrapolated to n → ∞ (b, "
           "stderr) and its χ² statistic", "1"),
    VERIFY("runs[].*", "head-monotonicity: one run per configuration (β/β* per block, β, "
           "δ_rel, head overlap, fractions monotone / dominant / certified, largest relative "
           "energy drop, …)", "as named"),
    VERIFY("by_dt.**", "noisy-edi: per β and dt the EDI residual over the paths (paths, mean, "
           "stderr, with and without the Itô term, raw)", "energy"),
    VERIFY("per_H.**", "radial-dominance: per H the critical β* (bound and exact), the β grid, "
           "the margins (raw, normalised, smallest) and whether dominance holds everywhere",
           "as named"),
    VERIFY("series.**", "stability: the recorded series (t, the spectral bounds λ_lo, λ_hi and "
           "their integrals, per case the coupling ratio and W₂)", "as named"),
    VERIFY("rows[].*", "superadditivity: one row per configuration (side convex/concave, λ̄, H, "
           "ε, heterogeneous λ, the rates of equal and heterogeneous heads by particles and "
           "formula, the gain)", "as named"),
    REPRO("experiments.*.d", "the experiment's dimension (tokens on S^{d-1})", "count"),
    REPRO("experiments.*.regime", "the weights' regime: oscillating or ou", "text"),
    REPRO("experiments.*.claim", "the published claim in words", "text"),
    REPRO("experiments.*.claim_slope", "the published slope b of G² ~ a·H^b", "1"),
    REPRO("experiments.*.paths", "Monte-Carlo paths per run", "count"),
    REPRO("experiments.*.fit.a", "the published fit's a (curve_fit of a·H^b on the late means)",
          "energy/time"),
    REPRO("experiments.*.fit.b", "the published fit's slope b", "1"),
    REPRO("experiments.*.fit.loglog", "the log–log least-squares slope (a referee of b)", "1"),
    REPRO("experiments.*.fit.u", "the uncertainty of b: max(u_bootstrap, u_window)", "1", "≥ 0"),
    REPRO("experiments.*.fit.u_bootstrap", "the bootstrap standard deviation of b over the paths",
          "1", "≥ 0"),
    REPRO("experiments.*.fit.u_window", "the largest change of b over the late windows "
          "[T/2, 3T/4] and [3T/4, T]", "1", "≥ 0"),
    REPRO("experiments.*.fit.b_windows", "b on those two windows", "1"),
    REPRO("experiments.*.fit.bootstrap_ci", "the 95 % bootstrap interval of b (None: one path)",
          "1"),
    REPRO("experiments.*.fit.verdict", "reproduced (|b − claim| + 2u ≤ tol), not reproduced "
          "(|b − claim| − 2u > tol) or inconclusive", "text"),
    REPRO("experiments.*.fit.control", "the same slope judged against the other regime's claim "
          "(the negative control: it must not be reproduced)", "text"),
    REPRO("experiments.*.runs[].H", "the run's head count H", "count"),
    REPRO("experiments.*.runs[].paths", "its Monte-Carlo paths", "count"),
    REPRO("experiments.*.runs[].wall_time_s", "its wall time", "s"),
    REPRO("experiments.*.runs[].status", "its status (the particle run's accuracy check)", "text"),
    REPRO("experiments.*.runs[].message", "why", "text"),
    REPRO("experiments.*.runs[].G2_late_mean.*", "the late-time mean of G² (over t ≥ T/2): mean "
          "and standard error over the paths", "energy/time"),
    REPRO("experiments.*.runs[].G2_late_per_path", "the late-time mean of G² of every path",
          "energy/time"),
    REPRO("experiments.*.runs[].E_0", "the energy at t = 0", "energy"),
    REPRO("experiments.*.runs[].E_T.*", "the energy at T: mean and standard error", "energy"),
    REPRO("experiments.*.runs[].G2_T.*", "G² at T: mean and standard error", "energy/time"),
    REPRO("experiments.*.runs[].G2_decay_ratio", "mean G² over [3T/4, T] over its mean over "
          "[T/4, T/2] (Monte-Carlo mean)", "1", "≥ 0"),
    REPRO("experiments.*.runs[].balance.*.*", "a term of the energy balance (dE, work_int_dtE, "
          "ito, martingale, G2_int, the G²-form EDI defect, the chain residual, the published "
          "form's residual): mean and standard error over the paths", "energy"),
    REPRO("paper", "the paper reproduced (authors, title, arXiv id)", "text"),
    REPRO("claim", "its claim, in words", "text"),
    REPRO("verdict_rule", "when the claim counts as reproduced, not reproduced, inconclusive",
          "text"),
    REPRO("reasons", "the measured numbers behind the verdict, one sentence each", "text"),
    REPRO("control_*", "the negative control's verdict: the claim judged on reversed or "
          "floored data, which must come out not reproduced", "text"),
    REPRO("n_steps", "glpr_phase: time steps of each run", "count"),
    REPRO("pair_evaluations", "glpr_phase: token-pair kernel evaluations over the runs", "count"),
    REPRO("kendall_tau", "glpr_phase: Kendall's τ between β and t_half (> 0: clustering slows "
          "as β grows)", "1"),
    REPRO("p_final_smallest_beta", "glpr_phase: the probability of one cluster at T for the "
          "smallest β", "1"),
    REPRO("p_final_largest_beta", "glpr_phase: the same for the largest β", "1"),
    REPRO("t_half.**", "glpr_phase: per β the time at which half the draws have clustered (inf: "
          "never before T)", "time"),
    REPRO("max_stderr", "glpr_phase: the largest standard error of a probability", "1", "≥ 0"),
    REPRO("wall_s_per_beta_sum", "glpr_phase: wall time summed over the β", "s"),
    REPRO("ranks", "MPI ranks of the run", "count"),
    REPRO("cases.*.*.*", "castin_ranks: per case and dimension d the draws (attempts, "
          "converged, exceptions, iterations), the rank histograms of the published and the "
          "exact solver, their disagreements, the unsettled draws, Euler steps and wall time",
          "as named"),
    REPRO("per_beta.*.*", "metastable_staircase: per β the records, the record of the full "
          "merge, f80, the plateau fraction and the largest fall over the rise", "as named"),
    REPRO("per_beta.*.plateaus[].*", "metastable_staircase: a plateau of the energy (t_start, "
          "t_end, E)", "as named"),
    REPRO("nan_from_step.*", "metastable_staircase: per β the first record whose angle is NaN "
          "(the published step divides 0 by 0 after the full merge)", "count"),
    REPRO("merges.*", "metastable_staircase: per β the merges [record, token i, token j]",
          "count"),
    REPRO("wall_s.*", "metastable_staircase: wall time per β", "s"),
    REPRO("finding", "metastable_staircase: what the reproduction found about the published "
          "code", "text"),
    REPRO("adaptive.*", "metastable_staircase --adaptive: the flow dθ/ds = log β·g/‖g‖ under "
          "error control against the published merge times (status, rtol, tolerance in "
          "rescaled time, rule, sentence)", "as named"),
    REPRO("adaptive.per_beta.*.*", "metastable_staircase --adaptive: per β the largest "
          "|Δ merge time| (rescaled time), accepted and rejected steps, evaluations, the "
          "published steps to the full merge, the flow's merges [s, token i, token j] and "
          "whether the β passed", "as named"),
    REPRO("differences_from_published", "what differs from the published code, and why", "text"),
    REPRO("run_wall_time_s", "wall time of all runs", "s", "≥ 0"),
    REPRO("t_crit.**", "lost_in_the_middle: per β the threshold t_crit(β) = 2(1 − e^{−λ}) "
          "Σ ω_n a_n / Σ ω_n a_n² of the published numerology", "time", "> 0"),
    REPRO("cluster_counts", "lost_in_the_middle: the number of clusters (gaps > 0.05 rad) of the "
          "ALiBi circle run at each record (every 0.2 time units)", "count", "≥ 1"),
    *GAUSSIAN.keys,
)


def _also_written_by(keys: tuple[OutputKey, ...], patterns: Iterable[str],
                     command: str) -> tuple[OutputKey, ...]:
    """``keys`` with ``command`` added to the ``where`` of the entries in ``patterns``."""
    shared = set(patterns)
    missing = shared - {k.pattern for k in keys}
    if missing:
        raise ValueError(f"output keys: {command} shares unknown entries {sorted(missing)}")
    return tuple(replace(k, where=f"{k.where}, {command}") if k.pattern in shared else k
                 for k in keys)


#: ``wflow kinetic`` writes these entries of the other solvers with the same meaning.
SUMMARY_KEYS = _also_written_by(SUMMARY_KEYS, _KINETIC_SHARED, "wflow kinetic")
#: ``wflow run`` of a masked scenario writes these entries of ``wflow kinetic`` and the
#: solvers with the same meaning (:mod:`wflow.apps.main.causal`).
SUMMARY_KEYS = _also_written_by(SUMMARY_KEYS, ("mask", "alibi.lambda", "alibi.source",
                                               "slices", "outputs.**"), "wflow run")

#: CSV columns (``diagnostics*.csv``, ``w2*.csv``), first match wins.
CSV_COLUMNS: tuple[OutputKey, ...] = (
    K("t", "time of the row", "time"),
    K("E", "energy E(μ_t, t) = Σ_h w_h E_h (under a causal mask: the exchangeable "
      "model's energy at the tokens; the causal system has none, and E is recorded, "
      "not judged)", "energy"),
    K("E_h*", "energy E_h of head h (unweighted)", "energy"),
    K("dEdt_w", "∂_tE: the rate of E through the weights at fixed μ", "energy/time"),
    K("power", "∫<∇ψ, v> dμ: dE/dt at fixed weights along the flow used", "energy/time"),
    K("slope2", "|∂E|² = ∫ b̂ |P∇ψ|² dμ, the squared metric slope (under a causal mask: "
      "the exchangeable model's)", "energy/time", "≥ 0"),
    K("speed2", "|μ'|²_b̂ = ∫ |v|²/b̂ dμ, the squared metric speed of the velocity used",
      "energy/time", "≥ 0"),
    K("G2", "G² = ∫ |v|² HM_h(Z_h) dμ, the published engine's record", "energy/time", "≥ 0"),
    K("ito", "the Itô correction rate of noisy weights", "energy/time"),
    K("bhat_mean", "mean of the effective mobility b̂ over the measure", "1", "> 0"),
    K("bhat_min", "smallest b̂", "1", "> 0"),
    K("bhat_max", "largest b̂", "1", "> 0"),
    K("mean_inner", "mean pairwise inner product <x_i, x_j> (1: one cluster)", "1"),
    K("n_clusters", "number of clusters (particles: cos ≥ cluster_cos; PDE: mass above "
      "cluster_level)", "count"),
    K("balance_chain", "running chain-rule residual from 0 to t, absolute", "energy",
      _CHAIN_SIGN),
    K("balance_edi", "running EDI residual from 0 to t, absolute (absent when the EDI is "
      "not applicable)", "energy", _EDI_SIGN),
    K("balance_g2", "running G² balance residual from 0 to t, absolute", "energy", "signed"),
    K("dEh_dt_h*", "dE_h/dt of head h along the flow", "energy/time"),
    K("dEh_own_h*", "the own (tangential) part of dE_h/dt", "energy/time"),
    K("dEh_cross_direct_h*", "the direct cross-head part of dE_h/dt", "energy/time"),
    K("dEh_cross_radial_h*", "the radial-shadow cross-head part of dE_h/dt", "energy/time"),
    K("radial_margin_h*", "own_h − R_h: the radial-dominance margin (holds where ≥ 0)",
      "energy/time"),
    K("radial_shadow_h*", "mean radial shadow a^h = <f_h, x>", "1"),
    K("entropy_h*", "mean attention entropy of head h (docs/theory.md §6)", "1", "≤ log n"),
    K("entropy_rate_fd_h*", "its rate from a central difference of the recorded entropies "
      "(the left side of the entropy-production identity)", "1/time"),
    K("entropy_rate_h*", "its rate from the identity's right side −β² Cov_p(s, ṡ)",
      "1/time"),
    K("mass", "total mass Σ_K m_K", "1"),
    K("rho_min", "smallest cell density", "1/area", "≥ 0"),
    K("rho_max", "largest cell density", "1/area"),
    *JKO.columns,
    *KINETIC.columns,
    K("w2_particles_vs_pde", "exact W₂ between the particles (all, or the subsample of "
      "summary.json w2.points: w2.label) and the PDE's cell masses", "rad", "≥ 0"),
    K("sliced_w2_all_particles_vs_pde", "POT's sliced spherical W₂ of all the particles "
      "against the PDE's cell masses (written when the exact W₂ uses a subsample)", "rad",
      "≥ 0"),
    K("w2_jko_vs_pde", "exact W₂ between the JKO measure and the reference PDE", "rad",
      "≥ 0"),
)

#: The one table and its matcher.
TABLE = KeyTable(SUMMARY_KEYS, CSV_COLUMNS)


def explain(key: str, *, csv: bool = False) -> OutputKey | None:
    """The table entry that explains a flattened summary key or a CSV column, or None."""
    return TABLE.explain(key, csv=csv)


def unexplained(keys: Iterable[str], *, csv: bool = False) -> list[str]:
    """The keys (or columns) that no entry of the table explains."""
    return TABLE.unexplained(keys, csv=csv)


def contract_problems(summary: Mapping[str, Any], command: str) -> list[str]:
    """What breaks the ``summary.json`` contract of ``wflow COMMAND`` (empty: none).

    A missing ``status``, ``message`` or ``checks`` (a mapping); a key no entry explains;
    a key whose entry does not name the command in ``where`` (``wflow COMMAND --help``
    lists the entries that name it, so the key would be missing there).
    """
    return TABLE.contract_problems(summary, command)
