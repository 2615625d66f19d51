"""Output keys of ``wflow jko`` (assembled in :mod:`wflow.apps.output_keys`)."""

from __future__ import annotations

from ..infra.output_keys import OutputKey

__all__ = ["SUMMARY_KEYS", "CSV_COLUMNS"]

K = OutputKey
_J = "wflow jko"

#: The ``summary.json`` keys only ``wflow jko`` writes (flattened; first match wins).
SUMMARY_KEYS: tuple[OutputKey, ...] = (
    K("checks.locked_steps", "JKO steps that left the measure in place although "
      "τ|∂E|² > 1e-12|E|", "count", where=_J),
    K("checks.empty_cells_max", "most cells emptied by a JKO step (mass below 1e-9 of its "
      "initial mass: the speckle of the static scheme)", "count", "≥ 0", _J),
    K("stats.tau", "the JKO step τ", "time", where=_J),
    K("stats.eps", "entropic regularisation ε (0: exact OT)", "1", where=_J),
    K("stats.inner_iters_total", "inner iterations over all steps", "count", where=_J),
    K("stats.inner_iters_max", "most inner iterations of one step", "count", where=_J),
    K("stats.gap_rel_max", "largest relative optimality gap of an inner solve", "1",
      where=_J),
    K("stats.time_per_inner_iter", "wall time per inner iteration", "s", where=_J),
    K("stats.locked_steps", "locked JKO steps", "count", where=_J),
    K("stats.tau_rule.*", "how τ was chosen (as jko_tau.*)", "as named", where=_J),
    K("jko_tau.diffusive_cells_per_step", "token diffusion D > 0: √(4Dτ)/h, the heat "
      "flow's spread in one step, in cells (the automatic τ keeps it near 3)", "1", "≥ 0",
      _J + ", wflow run"),
    K("steps.*", "the history column of every JKO step (see the CSV columns)",
      "as the column", where=_J),
    K("edi_sum", "Σ_k edi_k, the JKO's summed EDI residual, absolute and signed (the "
      "check uses Σ_k |edi_k|, relative: checks.edi.value)", "energy", "signed", _J),
    # token diffusion D > 0 (THEORY §8): the free-energy EDI of F_D = D H − sE
    K("balance.free_edi", "token diffusion D > 0: the free-energy EDI residual of "
      "F_D = D H − sE, absolute (JKO: Σ_k of the steps' F_{k+1} − F_k + (τ/2)(I_k + "
      "I_{k+1}); PDE: F(T) − F(0) + s∫∂_tE + ∫I dt); a discretisation error for USA",
      "energy", "signed", _J + ", wflow pde"),
    K("balance.free_edi_defect", "token diffusion D > 0 with softmax heads: the same "
      "residual, a defect of the model (not judged)", "energy", "signed",
      _J + ", wflow pde"),
    K("balance.free_dF", "token diffusion D > 0: F_D(T) − F_D(0)", "energy",
      "negative: the free energy fell", _J + ", wflow pde"),
    K("balance.free_dissipation_int", "token diffusion D > 0: ∫ I dt, the relative Fisher "
      "information integrated (JKO: trapezoid of I_h over the steps)", "energy", "≥ 0",
      _J + ", wflow pde"),
    # error control (jko.rtol / jko.atol, wflow.jko.accuracy)
    K("stats.rtol", "with error control: the relative tolerance of the cell densities", "1",
      where=_J),
    K("stats.atol", "with error control: the absolute tolerance of the cell densities",
      "1/sr", where=_J),
    K("stats.adaptive", "with error control: the steps were the controller's (else τ, "
      "judged)", "bool", where=_J),
    K("stats.accepted_steps", "with error control: the steps kept", "count", where=_J),
    K("stats.error_rejected_steps", "with error control: step pairs the controller "
      "rejected", "count", where=_J),
    K("stats.error_estimate", "with error control: the estimated error of ρ(T) in units "
      "of the tolerance (≤ 1: met)", "1", "≥ 0", _J),
    K("checks.tolerance.*", "with error control: the verdict against rtol/atol (estimate, "
      "passed, order, tau_meeting: the step that would meet it)", "as named", where=_J),
    K("checks.*.judged", "false: the check is recorded, not judged (token diffusion: the "
      "noiseless EDI or chain rule; softmax heads: the free-energy defect)", "bool",
      where=_J + ", wflow pde, wflow particles"),
    K("checks.*.reason", "why a check is not judged", "text",
      where=_J + ", wflow pde, wflow particles"),
)

#: The CSV columns only ``wflow jko`` writes.
CSV_COLUMNS: tuple[OutputKey, ...] = (
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
    K("free_energy", "token diffusion D > 0: F_D = D Σ_K m_K log(m_K/σ(K)) − sE at t_k",
      "energy"),
    K("free_fisher_h", "token diffusion D > 0: I_h = Σ_σ w_σ θ_σ (g_K − g_L)², g = D log ρ "
      "− sψ, the relative Fisher information at t_k", "energy/time", "≥ 0"),
    K("free_edi_step", "token diffusion D > 0: the step's free-energy EDI F_{k+1} − F_k + "
      "(τ/2)(I_h(m^k) + I_h(m^{k+1})) (0 at t_0)", "energy", "signed"),
    K("W2sq_entropy", "token diffusion D > 0: W²_h of the step's entropy sub-step "
      "(included in W2sq)", "rad²", "≥ 0"),
    K("entropy_newton", "token diffusion D > 0: Newton iterations of the entropy sub-step",
      "count"),
    K("tau", "with error control: the step into t_k (0 at t_0)", "time", "≥ 0"),
    K("error_norm", "with error control: the local-error norm of the step pair ending at "
      "t_k, in units of the tolerance (0 on a pair's first half)", "1", "≥ 0"),
    K("support", "cells with positive mass", "count"),
    K("step_time", "wall time of the step", "s"),
)
