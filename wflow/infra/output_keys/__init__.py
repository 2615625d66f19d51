"""Every key of every ``summary.json`` and every CSV column wflow writes: one table.

Each entry names a key pattern, its meaning, its unit and its sign convention. The
documentation's output-key reference is generated from this table, and the test suite
runs the writers (``wflow run``, ``particles``, ``pde``, ``jko``, a study) and fails on
a written key that the table does not explain (``tests/test_output_keys.py``).

Patterns
--------
Keys of ``summary.json`` are flattened with ``.`` between levels (``edi.jko.relative``);
a list of records adds ``[]`` (``verdicts[].value``). In a pattern ``*`` stands for one
level (any name without a dot) and ``**`` for any number of levels; CSV column patterns
match a whole column name, ``*`` standing for any characters (``E_h*`` is ``E_h0``,
``E_h1``, …). The first matching entry explains a key.

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

import fnmatch
import re
from collections.abc import Iterable, Mapping
from typing import Any

__all__ = ["OutputKey", "SUMMARY_KEYS", "CSV_COLUMNS", "CONTRACT", "flatten", "explain",
           "unexplained", "commands_of", "contract_problems"]


from ._commands import COMMAND_KEYS
from ._entry import _ALL, _RUN, OutputKey

K = OutputKey
_P, _D, _J = "wflow particles", "wflow pde", "wflow jko"
_SOLVERS = "wflow particles, pde, jko"
_EQ = "wflow verify"
_G = "wflow gaussian"
_R = "wflow reproduce"
_CHECKS = "wflow particles, pde, jko, gaussian, verify, reproduce"
_CHAIN_SIGN = "signed: ΔE − ∫∂_tE − ∫power − Itô − M (positive: the energy grew more)"
_EDI_SIGN = ("signed: ΔE − ∫∂_tE − Itô − M − sign·∫(½speed2 + ½slope2), sign = +1 for V = A "
             "(ascent), −1 for V = −A")

#: The keys of ``summary.json`` (flattened), first match wins.
SUMMARY_KEYS: tuple[OutputKey, ...] = (
    # --- every output -------------------------------------------------------------------
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
    K("solver", "the solver that wrote the file: particles, pde or jko", "text",
      where=_SOLVERS),
    K("seed", "the scenario's master seed (gaussian pretrained: the input samples' seed)",
      "count", where=_SOLVERS + ", gaussian"),
    K("sign", "gradient-flow sign: +1 for V = A (ascent of E), −1 for V = −A (descent)",
      "1", "+1 ascent, −1 descent", _SOLVERS),
    K("gradient_flow_sign", "as `sign`: +1 for V = A (ascent of E), −1 for V = −A", "1",
      "+1 ascent, −1 descent", _P),
    K("conventions.*", "the formula of the quantity named by the key, as computed",
      "text", where=_SOLVERS),
    K("outputs.**", "what the named output file holds (arrays, shapes, cell order)", "text",
      where=_SOLVERS),
    K("options.**", "the solver's options as used (PDEOptions / JKOOptions fields)",
      "as in the options", where=_SOLVERS),
    K("density.**", "the initial density as specified (only the keys of its type)",
      "as in the scenario", where=_D),
    # --- checks (every solver; the main job per phase) -------------------------------------
    K("checks.*.value", "the measured value of the named check (solvers: a relative "
      "residual; gaussian reach: a relative error at target.T; a study: its criterion's "
      "value)", "1", where=_CHECKS),
    K("checks.*.tolerance", "the tolerance the value is judged against (a study: the "
      "criterion's accepted range in words)", "1", where=_CHECKS),
    K("checks.*.passed", "value within tolerance", "bool", where=_CHECKS),
    K("checks.*.rule", "how the value is computed and why the tolerance", "text",
      where=_CHECKS),
    K("checks.*.order", "the balance order q the tolerance 0.1^q comes from", "count",
      where=_SOLVERS),
    K("checks.*.scheme", "the scheme the order belongs to", "text", where=_SOLVERS),
    K("checks.locked_steps", "JKO steps that left the measure in place although "
      "τ|∂E|² > 1e-12|E|", "count", where=_J),
    K("checks.empty_cells_max", "most cells emptied by a JKO step (mass below 1e-9 of its "
      "initial mass: the speckle of the static scheme)", "count", "≥ 0", _J),
    K("checks.*.*.value", "(wflow verify: a criterion whose name holds a dot, as "
      "checks.*.value) the measured value of the phase's check: chain = relative "
      "chain-rule residual |chain| / energy budget; edi (JKO) = Σ_k|edi_k| / discrete "
      "dissipation, the JKO's summed |EDI| relative", "1", "≥ 0", _RUN + ", verify"),
    K("checks.*.*.tolerance", "the tolerance the value is judged against", "1",
      where=_RUN + ", verify"),
    K("checks.*.*.passed", "value within tolerance", "bool", where=_RUN + ", verify"),
    K("checks.*.*.rule", "how the value is computed and why the tolerance", "text",
      where=_RUN + ", verify"),
    K("checks.*.*.order", "the balance order q of the tolerance 0.1^q (None: JKO)", "count",
      where=_RUN),
    K("checks.*.*.scheme", "the scheme the order belongs to", "text", where=_RUN),
    K("checks.jko.locked_steps", "locked JKO steps", "count", where=_RUN),
    K("checks.jko.empty_cells_max", "most cells emptied by a JKO step", "count", "≥ 0",
      _RUN),
    # --- kernels ---------------------------------------------------------------------------
    K("*kernel.calls.*", "calls of the attention kernel per back-end (direct, fastsum, …)",
      "count", where=_SOLVERS),
    K("*kernel.max_err_est", "largest estimated kernel error over the run", "1",
      where=_SOLVERS),
    K("*kernel.max_degree", "largest fast-summation degree used (−1: none)", "count",
      where=_SOLVERS),
    K("*kernel.last.*", "the last kernel call: backend used, backend requested, the reason, "
      "error estimate, tolerance, degrees per head, threads, kernel evaluations (triples)",
      "as named", where=_SOLVERS),
    K("kernel.*.**", "the kernel log of a phase (as `kernel.*` of the solvers)", "as named",
      where=_RUN),
    K("*stats.kernel.**", "the kernel log of the PDE (as `kernel.*`)", "as named",
      where=_D + ", " + _RUN),
    # --- particles -------------------------------------------------------------------------
    K("n_tokens", "number of tokens n", "count", where=_P),
    K("d", "dimension of the ambient space (particles: tokens on S^{d-1}; gaussian: R^d)",
      "count", where=_P + ", " + _G),
    K("n_heads", "number of heads H", "count", where=_SOLVERS),
    K("n_paths", "Monte-Carlo weight-noise paths P", "count", where=_P),
    K("integrator", "time integrator (particles: euler or rk4; pde: euler, ssprk2, ssprk3)",
      "text", where=_P + ", " + _D),
    K("integrator_order", "order of the particle integrator", "count", where=_P),
    K("engine", "the particle time loop that ran: compiled or python", "text", where=_P),
    K("engine_reason", "why the Python loop ran (engine 'auto': what the compiled loop "
      "lacks, e.g. a user's integrator or kind without compiled code)", "text", where=_P),
    K("flow", "transformer (v) or surrogate (v̂ = b̂ P∇ψ, the weighted gradient flow)",
      "text", where=_P + ", " + _RUN),
    K("steps", "time steps taken (gaussian-particles study: RK4 steps)", "count",
      where=_P + ", wflow verify"),
    K("dt.requested", "the time step asked for", "time", where=_P),
    K("dt.used", "the step used: T / ceil(T/dt), so that the steps end at T", "time",
      where=_P),
    K("dt.steps", "number of steps of dt.used", "count", where=_P),
    K("dt.adjusted", "dt.used differs from dt.requested (the command's line says so)",
      "bool", where=_P),
    K("wall_time_s", "wall time of the solve (a study: of the study)", "s",
      where=_P + ", wflow verify"),
    K("final.*.mean", "the history column at T, mean over paths (see the CSV columns)",
      "as the column", where=_P),
    K("final.*.std", "its standard deviation over paths", "as the column", where=_P),
    K("balance.*.mean", "a term of the energy balance over [0, T] (see balance.*), mean over "
      "paths", "energy", where=_P),
    K("balance.*.stderr", "its standard error over paths", "energy", where=_P),
    K("balance.*.paths", "the term for every path", "energy", where=_P),
    # --- balances (pde, jko; particles through .mean) -------------------------------------
    K("balance.dE", "E(T) − E(0)", "energy", "positive: the energy grew", _SOLVERS),
    K("balance.work", "∫ ∂_tE dt, the work of the time-dependent weights", "energy",
      where=_SOLVERS),
    K("balance.power_int", "∫ power dt, power = ∫<∇ψ, v> dμ", "energy", where=_SOLVERS),
    K("balance.dissipation", "∫ (½ speed2 + ½ slope2) dt, the EDI's dissipation", "energy",
      "≥ 0", _SOLVERS),
    K("balance.G2_int", "∫ G2 dt", "energy", "≥ 0", _SOLVERS),
    K("balance.ito", "the Itô correction of noisy weights, integrated", "energy",
      where=_SOLVERS),
    K("balance.martingale", "the martingale term M of noisy weights", "energy",
      where=_SOLVERS),
    K("balance.chain", "chain-rule residual, absolute", "energy", _CHAIN_SIGN, _SOLVERS),
    K("balance.edi", "EDI residual, absolute (a discretisation error for exact gradient "
      "flows, the defect of the transformer flow with several different softmax heads)",
      "energy", _EDI_SIGN, _SOLVERS),
    K("balance.g2", "the G² balance residual, absolute: ΔE − ∫∂_tE − Itô − M − sign·∫G2 "
      "(equals the EDI residual for USA and one SA head only)", "energy", "signed",
      _SOLVERS),
    K("balance.*_simpson", "the same residual with Simpson's rule in time (fourth-order "
      "checks)", "energy", "signed", _P),
    # --- pde -------------------------------------------------------------------------------
    K("mesh.spec", "the mesh as specified (shipped name, path, icosphere:N, gmsh:N)", "text",
      where=_D + ", " + _J + ", " + _RUN),
    K("mesh.cells", "number of cells", "count", where=_D + ", " + _J + ", " + _RUN),
    K("mesh.min_area", "smallest flat cell area |K|", "area", where=_D),
    K("mesh.max_area", "largest flat cell area |K|", "area", where=_D),
    K("t_final", "the time reached", "time", where=_D + ", " + _J),
    K("final.*", "the history column at the last output time (see the CSV columns)",
      "as the column", where=_D + ", " + _J),
    K("*stats.steps", "time steps (PDE) or JKO steps taken", "count", where=_SOLVERS + ", run"),
    K("*stats.rejected_steps", "PDE steps rejected by the positivity check and retried",
      "count", where=_D + ", " + _RUN),
    K("*stats.velocity_evals", "evaluations of the nonlocal velocity", "count",
      where=_D + ", " + _RUN),
    K("*stats.wall_time", "wall time of the solve", "s", where=_SOLVERS + ", run"),
    K("*stats.time_per_step", "wall time per step", "s", where=_SOLVERS + ", run"),
    K("*stats.time_per_velocity_eval", "wall time per velocity evaluation", "s",
      where=_D + ", " + _RUN),
    K("*stats.rhs_time", "wall time in the finite-volume right-hand side", "s",
      where=_D + ", " + _RUN),
    K("*stats.measure_time", "wall time of the diagnostics at the output times", "s",
      where=_D + ", " + _RUN),
    K("*stats.mass_error_max", "max over time of |Σ m_K − 1|", "1", "≥ 0", _SOLVERS + ", run"),
    K("*stats.rho_min", "smallest cell density over the run", "1/area", "≥ 0 (positivity)",
      _D + ", " + _RUN),
    K("*stats.dt_min", "smallest PDE step taken", "time", where=_D + ", " + _RUN),
    K("*stats.dt_max", "largest PDE step taken", "time", where=_D + ", " + _RUN),
    K("*stats.max_normal_speed", "largest |v·n| at the edge quadrature points", "1/time",
      where=_D + ", " + _RUN),
    K("*stats.cells", "number of cells", "count", where=_SOLVERS + ", run"),
    K("*stats.ranks", "MPI ranks", "count", where=_D + ", " + _RUN),
    K("*stats.edge_quadrature_points", "Gauss–Legendre points per edge", "count",
      where=_D + ", " + _RUN),
    # --- jko -------------------------------------------------------------------------------
    K("stats.tau", "the JKO step τ", "time", where=_J),
    K("stats.eps", "entropic regularisation ε (0: exact OT)", "1", where=_J),
    K("stats.inner_iters_total", "inner iterations over all steps", "count", where=_J),
    K("stats.inner_iters_max", "most inner iterations of one step", "count", where=_J),
    K("stats.gap_rel_max", "largest relative optimality gap of an inner solve", "1",
      where=_J),
    K("stats.time_per_inner_iter", "wall time per inner iteration", "s", where=_J),
    K("stats.locked_steps", "locked JKO steps", "count", where=_J),
    K("stats.tau_rule.*", "how τ was chosen (as jko_tau.*)", "as named", where=_J),
    K("steps.*", "the history column of every JKO step (see the CSV columns)",
      "as the column", where=_J),
    K("edi_sum", "Σ_k edi_k, the JKO's summed EDI residual, absolute and signed (the "
      "check uses Σ_k |edi_k|, relative: checks.edi.value)", "energy", "signed", _J),
    # --- the main job ----------------------------------------------------------------------
    K("statuses.*.status", "status of a phase (pde, particles, jko, pde_surrogate)", "text",
      where=_RUN),
    K("statuses.*.message", "why the phase's status is what it is", "text", where=_RUN),
    K("seeds.scenario", "the scenario's seed", "count", where=_RUN),
    K("seeds.particles_sampling", "the seed sequence of the particle sample", "count",
      where=_RUN),
    K("heads", "number of heads H", "count", where=_RUN),
    K("attention", "attention kind: softmax, usa, relu", "text", where=_RUN),
    K("edi.*.residual", "EDI residual of the phase, absolute", "energy", _EDI_SIGN, _RUN),
    K("edi.*.relative", "EDI residual of the phase, relative: |edi.*.residual| / "
      "edi.*.dissipation (JKO: of the signed sum over the steps; the JKO's check is the sum "
      "of |edi_k|, checks.jko.edi.value)", "1", "≥ 0", _RUN),
    K("edi.*.dissipation", "∫ (½ speed2 + ½ slope2) dt of the phase", "energy", "≥ 0", _RUN),
    K("edi.*.chain_residual", "chain-rule residual of the phase, absolute", "energy",
      _CHAIN_SIGN, _RUN),
    K("edi.*.dE", "E(T) − E(0) of the phase", "energy", "positive: the energy grew", _RUN),
    K("edi.*.meaning", "identity (an exact gradient flow: the residual is a discretisation "
      "error) or defect (the transformer flow with different softmax heads)", "text",
      where=_RUN),
    K("w2.particles_vs_pde", "exact W₂ between the particles and the PDE's cell masses at T",
      "rad", "≥ 0", _RUN),
    K("w2.particles_vs_pde_initial", "the same at t = 0: the sampling error of the draw "
      "plus the mesh's quantisation", "rad", "≥ 0", _RUN),
    K("w2.particles_vs_pde_max", "max over the output times", "rad", "≥ 0", _RUN),
    K("w2.n_inv_sqrt", "n^{-1/2}, the rate of the sampling error", "1", where=_RUN),
    K("w2.growth_tolerance", "PASS while max_t W₂ ≤ this × its t = 0 level (the Grönwall "
      "allowance e^{LT})", "1", where=_RUN),
    K("w2.jko_vs_pde", "exact W₂ between the JKO measures and the reference PDE, max over "
      "the JKO times", "rad", "≥ 0", _RUN),
    K("w2.jko_vs_pde_final", "the same at the last JKO time", "rad", "≥ 0", _RUN),
    K("w2.jko_reference", "the PDE the JKO is compared with: pde, or pde_surrogate for "
      "flow = transformer", "text", where=_RUN),
    K("mass_error", "max over time of the PDE's |Σ m_K − 1|", "1", "≥ 0", _RUN),
    K("min_density", "smallest PDE cell density over the run", "1/area", "≥ 0", _RUN),
    K("n_particles", "number of particles sampled from the initial cell masses", "count",
      where=_RUN),
    K("moments.**", "particles vs PDE by spherical-harmonic moments (wflow.apps.main.moments): "
      "replicate systems, levels n/16, n/4, n; max |t| against its Šidák t(R−1) critical "
      "value, p-values, Monte Carlo and PDE errors, the smallest detectable moment error and "
      "its fitted rate in n; test_T / test_0: MomentTest.as_dict() at T and t = 0", "mixed",
      where=_RUN),
    K("wall_time_s.*", "wall time of a phase (pde, particles, jko, jko_refinement, "
      "compare) and the total", "s", where=_RUN),
    K("jko_status", "status of the JKO phase", "text", where=_RUN),
    K("resumed.resumed", "the run continued a checkpoint (--resume)", "bool", where=_RUN),
    K("resumed.restored_phases", "the phases read from the checkpoint", "text", where=_RUN),
    K("resumed.restored_wall_s", "recorded wall time of the restored phases", "s",
      where=_RUN),
    K("resumed.this_session_wall_s", "wall time of this session", "s", where=_RUN),
    K("resumed.note", "how wall_time_s.total counts the restored phases", "text",
      where=_RUN),
    K("jko_tau.rule", "how τ was chosen (given, or the auto rule)", "text", where=_RUN),
    K("jko_tau.h", "mesh size √(mean cell area)", "rad", where=_RUN),
    K("jko_tau.vmax", "largest speed |v̂| at t = 0", "1/time", where=_RUN),
    K("jko_tau.tau", "the JKO step τ", "time", where=_RUN),
    K("jko_tau.steps", "JKO steps N = T/τ", "count", where=_RUN),
    K("jko_tau.cells_per_step", "τ |v̂|max / h: cells crossed per step (locking below ½)",
      "1", where=_RUN),
    K("jko_tau.eps", "entropic ε (0: exact OT)", "1", where=_RUN),
    K("jko_tau.what", "the choice of τ in words", "text", where=_RUN),
    K("jko_refinement.rows[].cells", "cells of the refinement row's icosphere", "count",
      where=_RUN),
    K("jko_refinement.rows[].h", "its mesh size", "rad", where=_RUN),
    K("jko_refinement.rows[].tau", "its JKO step", "time", where=_RUN),
    K("jko_refinement.rows[].steps", "its JKO steps", "count", where=_RUN),
    K("jko_refinement.rows[].eps", "its entropic ε", "1", where=_RUN),
    K("jko_refinement.rows[].cells_per_step", "its τ|v̂|max/h", "1", where=_RUN),
    K("jko_refinement.rows[].status", "its JKO status", "text", where=_RUN),
    K("jko_refinement.rows[].locked_steps", "its locked steps", "count", where=_RUN),
    K("jko_refinement.rows[].edi_abs_relative", "its JKO Σ_k|edi_k| relative (the check's "
      "value: sum of absolute step residuals over the discrete dissipation)", "1", "≥ 0",
      _RUN),
    K("jko_refinement.rows[].edi_relative", "its JKO EDI residual relative: |Σ_k edi_k| over "
      "the dissipation (signed errors may cancel)", "1", "≥ 0", _RUN),
    K("jko_refinement.rows[].w2_max", "its W₂(JKO, PDE) max over the JKO times", "rad",
      "≥ 0", _RUN),
    K("jko_refinement.rows[].w2_final", "its W₂(JKO, PDE) at the last time", "rad", "≥ 0",
      _RUN),
    K("jko_refinement.rows[].scheme", "its JKO scheme: fv (two-point fluxes, the dynamic "
      "form) or ot (static transport cost)", "text", where=_RUN),
    K("jko_refinement.rows[].l1_max", "its L¹ distance of the JKO cell masses to the PDE's, "
      "Σ_K |m_K − m_K^PDE|, max over the JKO times", "1", "≥ 0", _RUN),
    K("jko_refinement.rows[].l1_final", "the same at the last time", "1", "≥ 0", _RUN),
    K("jko_refinement.order_l1", "fitted order of the L¹ distance in h ∝ τ", "1",
      where=_RUN),
    K("jko_refinement.rows[].empty_cells", "its most cells empty at one JKO time (mass < "
      "1e-9 of the cell's initial mass; 0 for the FV scheme, the OT scheme's speckle)",
      "count", "≥ 0", _RUN),
    K("warnings[].phase", "the main job's phase that logged the warning (pde, particles, "
      "jko, pde_surrogate, jko_refinement, compare)", "text", where=_RUN),
    K("warnings[].logger", "the wflow module that logged it", "text", where=_RUN),
    K("warnings[].level", "its logging level (WARNING or ERROR)", "text", where=_RUN),
    K("warnings[].message", "the warning as printed on the terminal (each distinct one "
      "once)", "text", where=_RUN),
    K("jko_refinement.ot_crosscheck.*", "the coarsest row run once more with the static OT "
      "scheme (not a row of the table): the same keys as a row", "as the row", where=_RUN),
    K("jko_refinement.order_w2", "fitted order of W₂(JKO, PDE) in h ∝ τ", "1", where=_RUN),
    K("jko_refinement.order_edi", "fitted order of the JKO Σ|edi_k| relative", "1",
      where=_RUN),
    K("jko_refinement.shrinks_w2", "W₂(JKO, PDE) decreases along the table", "bool",
      where=_RUN),
    K("jko_refinement.shrinks_edi", "the JKO Σ|edi_k| relative decreases along the table",
      "bool", where=_RUN),
    K("jko_refinement.rule", "how the rows are built", "text", where=_RUN),
    K("jko_refinement.rows[].time_error", "its max_k |t_k − kτ| / T over the JKO's recorded "
      "times (0: every iterate is compared with the PDE at its own time)", "1", "≥ 0", _RUN),
    K("jko_refinement.rows[].wall_s.*", "wall time of the row's surrogate PDE, JKO and W₂ "
      "(pde, jko, w2; not on the finest row, whose phases are timed in wall_time_s)", "s",
      "≥ 0", _RUN),
    K("jko_refinement.rows[].w2_uncertified", "largest dual violation of a sparse W₂ whose "
      "certificate failed (its plan's value, an upper bound, is used; 0: every W₂ dense or "
      "certified)", "rad²", "≥ 0", _RUN),
    K("jko_refinement.shrinks_l1", "the L¹ distance decreases along the table", "bool",
      where=_RUN),
    K("jko_refinement.time_error_max", "max over the rows of rows[].time_error", "1", "≥ 0",
      _RUN),
    K("jko_refinement.thresholds.*", "the verdicts' thresholds: smallest passing order_w2, "
      "order_l1, order_edi (measured, wflow/apps/main/verdicts.py ORDER_MIN_*) and largest "
      "time_error", "1", where=_RUN),
    K("verdicts[].quantity", "the number judged, named as in the report's first table",
      "text", where=_RUN),
    K("verdicts[].value", "its value", "as named", where=_RUN),
    K("verdicts[].tolerance", "what it is judged against", "text", where=_RUN),
    K("verdicts[].verdict", "PASS, FAIL, WARN or defect (expected)", "text", where=_RUN),
    K("verdicts[].meaning", "what the number means", "text", where=_RUN),
    *COMMAND_KEYS,
)

#: CSV columns (``diagnostics*.csv``, ``w2*.csv``), first match wins.
CSV_COLUMNS: tuple[OutputKey, ...] = (
    K("t", "time of the row", "time"),
    K("E", "energy E(μ_t, t) = Σ_h w_h E_h", "energy"),
    K("E_h*", "energy E_h of head h (unweighted)", "energy"),
    K("dEdt_w", "∂_tE: the rate of E through the weights at fixed μ", "energy/time"),
    K("power", "∫<∇ψ, v> dμ: dE/dt at fixed weights along the flow used", "energy/time"),
    K("slope2", "|∂E|² = ∫ b̂ |P∇ψ|² dμ, the squared metric slope", "energy/time", "≥ 0"),
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
    K("W2sq", "W²_{b̂_k}(μ_k, μ_{k+1}) of the step into t_k (0 at t_0); the FV scheme: its "
      "one-step Benamou–Brenier cost τ² Σ_σ |σ| d_σ F_σ²/θ_σ", "rad²", "≥ 0"),
    K("W2", "√W2sq", "rad", "≥ 0"),
    K("ot_value", "the OT solver's value of the step's transport problem", "rad²", "≥ 0"),
    K("locked", "1 if the step left the measure in place although τ|∂E|² > 1e-12|E|",
      "bool"),
    K("moved_fraction", "mass moved by the step relative to the first-order prediction "
      "τ²½(|∂E|²_k + |∂E|²_{k+1}); locked below jko.lock_fraction", "1", "≥ 0"),
    K("empty", "cells emptied by the step (mass below 1e-9 of their initial mass)", "count",
      "≥ 0"),
    K("slope2_h", "|∂E|²_h = Σ_σ w_σ θ_σ (ψ_L − ψ_K)², the slope in the FV scheme's own metric",
      "energy/time", "≥ 0"),
    K("newton_iters", "Newton iterations of the FV step (over substeps and CCP iterations)",
      "count"),
    K("min_ratio", "min_K m^{k+1}_K / m^k_K over occupied cells (> 0: no cell emptied)", "1",
      "> 0"),
    K("ccp_monotone", "1 if the FV step's objective never increased along its convex–concave "
      "iterations", "bool"),
    K("inner_iters", "inner iterations of the step", "count"),
    K("gap", "the inner solve's first-order optimality gap", "energy", "≥ 0"),
    K("gap_rel", "the gap relative to the step's objective scale", "1", "≥ 0"),
    K("converged", "1 if the inner solve met gap_rtol", "bool"),
    K("W2sq_pot", "W² of the step from POT's dual potentials (a referee of W2sq)", "rad²",
      "≥ 0"),
    K("edi_step", "the step's discrete EDI residual, absolute: s(E_{k+1} − E_k) − τ s ∂_tE "
      "− W²/2τ − (τ/4)(|∂E|²_k + |∂E|²_{k+1})", "energy", "signed"),
    K("jko_ineq", "E_{k+1} − E_k − W²/2τ (≥ 0: the minimising-movement inequality)",
      "energy", "≥ 0 expected"),
    K("support", "cells with positive mass", "count"),
    K("step_time", "wall time of the step", "s"),
    K("w2_particles_vs_pde", "exact W₂ between the particles and the PDE's cell masses",
      "rad", "≥ 0"),
    K("w2_jko_vs_pde", "exact W₂ between the JKO measure and the reference PDE", "rad",
      "≥ 0"),
)


def flatten(summary: Mapping[str, Any], prefix: str = "") -> list[str]:
    """The flattened keys of a ``summary.json`` mapping (``a.b``, lists of records ``a[].b``)."""
    out: list[str] = []
    for k, v in summary.items():
        key = f"{prefix}.{k}" if prefix else str(k)
        if isinstance(v, Mapping):
            out += flatten(v, key) if v else [key]
        elif isinstance(v, list) and v and all(isinstance(x, Mapping) for x in v):
            seen: list[str] = []
            for rec in v:
                seen += [s for s in flatten(rec, key + "[]") if s not in seen]
            out += seen
        else:
            out.append(key)
    return out


def _regex(pattern: str) -> re.Pattern[str]:
    parts = re.split(r"(\*\*|\*)", pattern)
    rx = "".join(".*" if p == "**" else "[^.]*" if p == "*" else re.escape(p) for p in parts)
    return re.compile(rx + r"\Z")


_SUMMARY_RX = tuple((_regex(k.pattern), k) for k in SUMMARY_KEYS)


def explain(key: str, *, csv: bool = False) -> OutputKey | None:
    """The table entry that explains a flattened summary key or a CSV column, or None."""
    if csv:
        return next((k for k in CSV_COLUMNS if fnmatch.fnmatchcase(key, k.pattern)), None)
    return next((k for rx, k in _SUMMARY_RX if rx.match(key)), None)


def unexplained(keys: Iterable[str], *, csv: bool = False) -> list[str]:
    """The keys (or columns) that no entry of the table explains."""
    return [k for k in keys if explain(k, csv=csv) is None]


#: The keys every command's ``summary.json`` carries (README): its status, why, and checks.
CONTRACT = ("status", "message", "checks")


def commands_of(where: str) -> set[str]:
    """The commands of an entry's ``where`` (``"all"``: ``{"*"}``).

    ``"wflow particles, pde, jko"`` -> ``{particles, pde, jko}``.
    """
    if where.strip() == _ALL:
        return {"*"}
    return {w.strip().removeprefix("wflow").strip() for w in where.split(",")} - {""}


def contract_problems(summary: Mapping[str, Any], command: str) -> list[str]:
    """What breaks the ``summary.json`` contract of ``wflow COMMAND`` (empty: none).

    A missing ``status``, ``message`` or ``checks`` (a mapping); a key no entry explains;
    a key whose entry does not name the command in ``where`` (``wflow COMMAND --help``
    lists the entries that name it, so the key would be missing there).
    """
    bad = [f"no {k}" for k in CONTRACT if k not in summary]
    if not isinstance(summary.get("checks"), Mapping):
        bad.append("checks: not a mapping")
    for key in flatten(summary):
        entry = explain(key)
        if entry is None:
            bad.append(f"undocumented {key}")
        elif not ({"*", command} & commands_of(entry.where)):
            bad.append(f"{key}: its entry {entry.pattern!r} has where = {entry.where!r}")
    return bad
