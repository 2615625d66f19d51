"""The output keys of ``wflow verify``, ``wflow reproduce`` and ``wflow gaussian``.

Part of the one table of :mod:`wflow.infra.output_keys` (its ``SUMMARY_KEYS`` include
these entries, in this order, after the solvers' and the main job's).
"""

from __future__ import annotations

from ._entry import OutputKey

__all__ = ["COMMAND_KEYS"]

K = OutputKey
_P = "wflow particles"
_EQ = "wflow verify"
_G = "wflow gaussian"
_R = "wflow reproduce"

#: The keys of the studies, the reproductions and the Gaussian dynamics.
COMMAND_KEYS: tuple[OutputKey, ...] = (
    # --- studies (wflow verify) and wflow reproduce ----------------------------------------
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
    # --- wflow verify equiangular (one record per case) -----------------------------------
    K("cases[].n", "equiangular: tokens n of the case", "count", where=_EQ),
    K("cases[].d", "equiangular: dimension d", "count", where=_EQ),
    K("cases[].lambdas", "equiangular: the head eigenvalues λ_h", "1", where=_EQ),
    K("cases[].beta", "equiangular: inverse temperature β", "1", where=_EQ),
    K("cases[].T", "equiangular: final time", "time", where=_EQ),
    K("cases[].dt", "equiangular: time step", "time", where=_EQ),
    K("cases[].equiangular_spread", "equiangular: max over time of (max − min) of the "
      "off-diagonal Gram entries <x_i, x_j> (0: the configuration stays equiangular)",
      "1", "≥ 0", _EQ),
    K("cases[].ode_distance", "equiangular: max |γ_particles − γ_ODE| of the common inner "
      "product against the scalar ODE", "1", "≥ 0", _EQ),
    K("cases[].early_rate_formula", "equiangular: the predicted early rate of γ",
      "1/time",
      where=_EQ),
    K("cases[].early_rate_F0", "equiangular: the ODE's right side F(γ) at γ = 0", "1/time",
      where=_EQ),
    K("cases[].early_rate_fit", "equiangular: the early rate fitted on the particle run",
      "1/time", where=_EQ),
    K("cases[].early_fit_tau", "equiangular: the early fit's window [0, τ] (γ(τ) <~ 0.05)", "time",
      where=_EQ),
    K("cases[].early_rel_err", "equiangular: |fit − formula| / |formula| of the early rate",
      "1", "≥ 0", _EQ),
    K("cases[].late_rate_theory", "equiangular: the predicted late rate of 1 − γ, 2Λ "
      "(Λ = Σ_h λ_h)", "1/time", where=_EQ),
    K("cases[].late_rate_fit", "equiangular: the rate fitted on 1 − γ in [1e-8, 1e-4] "
      "(NaN: the run never enters the window)", "1/time",
      where=_EQ),
    K("cases[].late_fit_samples", "equiangular: samples in the late fit", "count", where=_EQ),
    K("cases[].late_rel_err", "equiangular: |fit − theory| / |theory| of the late rate", "1",
      "≥ 0", _EQ),
    K("cases[].series.*", "equiangular: the recorded series (t, γ of the particles, γ of the "
      "ODE)", "as named", where=_EQ),
    K("cases[].checks.*", "equiangular: the case's criterion values (as criteria[].value)",
      "1", where=_EQ),
    # --- wflow verify: the measured tables of each study (see the study's module) ---------
    K("decay.*.*", "asymptotics: per schedule (ou, oscillating) G² early and late, their "
      "ratio, mean inner product and clusters at T", "as named", where=_EQ),
    K("G2_vs_H.*.*", "asymptotics: per schedule, H, the late-time mean of G² and its "
      "standard error (the fit of G² against H)", "as named", where=_EQ),
    K("series_part_a.*.*", "asymptotics: per schedule the series t, G²", "as named",
      where=_EQ),
    K("ok.*", "edi: each criterion's pass (orders of the EDI residual per solver; the "
      "transformer's defect persists)", "bool", where=_EQ),
    K("table.**", "a study's table of measured rows: edi: per solver and step (dt, flow, "
      "EDI and G² residuals, dissipation, …); gamma: per family (init, decay) ε, sup|E^ε − E| "
      "and sup W₂; mean-field: per n the W₂ of two particle samples at 0 and T (two0, twoT), "
      "particles vs PDE (xyT), PDE vs PDE (zzT) and the prediction predT = √(½(xyT² + zzT²))",
      "as named", where=_EQ),
    K("tests.*.*", "mean-field: the moment test at t = 0 (t0), at T on the control-variate "
      "moments (T; judged) and on the plain moments (T_plain; reported): replicates R, "
      "tokens per replicate n, degree L, level alpha; per moment the difference particles − "
      "PDE (diff), its replicate standard error (se_mc), the i.i.d.-formula one (se_iid) and "
      "their ratio (se_ratio), the PDE's Richardson error (pde_err) and t; max|t| (max_t) "
      "against its Šidák critical value (t_crit) with its p-value (p_max_t); Hotelling's T² "
      "(hotelling, hotelling_crit, p_hotelling); the MMD² of the moments (mmd2, p_mmd); the "
      "smallest moment difference the test detects (detectable)", "as named", where=_EQ),
    K("reported.*", "mean-field: cross-checks reported, not judged: the moments' MMD² and "
      "its p-value at 0 and T (mmd2_0, p_mmd_0, mmd2_T, p_mmd_T); POT's sliced W₂ on the "
      "sphere of particles vs PDE samples (ssw) and of two PDE samples (ssw_floor); exact "
      "W₂ (w2, w2_floor) on w2_points points", "as named", where=_EQ),
    K("general.**", "entropy: the entropy-production identity on general heads "
      "(symmetric, nonsymmetric): errors per dt (max absolute error, max rate) and the "
      "fitted order", "as named", where=_EQ),
    K("equiangular.**", "entropy: the equiangular closed form (n, λ, T, the smallest "
      "increment and rate, the closed form's error); relu-vs-softmax: per kind the "
      "collapse time of the particles and of the theory", "as named", where=_EQ),
    K("random.*[].*", "relu-vs-softmax: per kind, each random configuration (n, d, "
      "recorded times, status)", "as named", where=_EQ),
    K("random_summary.*.*", "relu-vs-softmax: per kind the median collapse time and the "
      "fraction of runs that collapsed", "as named", where=_EQ),
    K("ns", "gaussian-particles: the particle counts n", "count", where=_EQ),
    K("m_error", "gaussian-particles: |m̂ − m| per n and replicate", "1", "≥ 0", _EQ),
    K("Sigma_error", "gaussian-particles: ‖Σ̂ − Σ‖_F per n and replicate", "1", "≥ 0", _EQ),
    K("w2", "gaussian-particles: W₂(N(m̂, Σ̂), N(m, Σ)) per n and replicate", "1", "≥ 0",
      _EQ),
    K("reps", "gaussian-particles: replicates per n", "count", where=_EQ),
    K("bias", "gaussian-particles: the mean error per n and component", "1", where=_EQ),
    K("bias_stderr", "gaussian-particles: its standard error", "1", "≥ 0", _EQ),
    K("components", "gaussian-particles: the components of the error vector", "text",
      where=_EQ),
    K("blown_up", "gaussian-particles: replicates that blew up", "count", where=_EQ),
    K("expected_slope", "gaussian-particles: the predicted slope of the error in n", "1",
      where=_EQ),
    K("slope_tol", "gaussian-particles: the tolerance of the slope", "1", where=_EQ),
    K("extrapolated_bias.*", "gaussian-particles: the bias extrapolated to n → ∞ (b, "
      "stderr) and its χ² statistic", "1", where=_EQ),
    K("runs[].*", "head-monotonicity: one run per configuration (β/β* per block, β, "
      "δ_rel, head overlap, fractions monotone / dominant / certified, largest relative "
      "energy drop, …)", "as named", where=_EQ),
    K("by_dt.**", "noisy-edi: per β and dt the EDI residual over the paths (paths, mean, "
      "stderr, with and without the Itô term, raw)", "energy", where=_EQ),
    K("per_H.**", "radial-dominance: per H the critical β* (bound and exact), the β grid, "
      "the margins (raw, normalised, smallest) and whether dominance holds everywhere",
      "as named", where=_EQ),
    K("series.**", "stability: the recorded series (t, the spectral bounds λ_lo, λ_hi and "
      "their integrals, per case the coupling ratio and W₂)", "as named", where=_EQ),
    K("rows[].*", "superadditivity: one row per configuration (side convex/concave, λ̄, H, "
      "ε, heterogeneous λ, the rates of equal and heterogeneous heads by particles and "
      "formula, the gain)", "as named", where=_EQ),
    # --- wflow reproduce (the [TD] experiments; one record per experiment) ---------------
    K("experiments.*.d", "the experiment's dimension (tokens on S^{d-1})", "count", where=_R),
    K("experiments.*.regime", "the weights' regime: oscillating or ou", "text", where=_R),
    K("experiments.*.claim", "the published claim in words", "text", where=_R),
    K("experiments.*.claim_slope", "the published slope b of G² ~ a·H^b", "1", where=_R),
    K("experiments.*.paths", "Monte-Carlo paths per run", "count", where=_R),
    K("experiments.*.fit.a", "the published fit's a (curve_fit of a·H^b on the late means)",
      "energy/time", where=_R),
    K("experiments.*.fit.b", "the published fit's slope b", "1", where=_R),
    K("experiments.*.fit.loglog", "the log–log least-squares slope (a referee of b)", "1",
      where=_R),
    K("experiments.*.fit.u", "the uncertainty of b: max(u_bootstrap, u_window)", "1", "≥ 0",
      _R),
    K("experiments.*.fit.u_bootstrap", "the bootstrap standard deviation of b over the paths",
      "1", "≥ 0", _R),
    K("experiments.*.fit.u_window", "the largest change of b over the late windows "
      "[T/2, 3T/4] and [3T/4, T]", "1", "≥ 0", _R),
    K("experiments.*.fit.b_windows", "b on those two windows", "1", where=_R),
    K("experiments.*.fit.bootstrap_ci", "the 95 % bootstrap interval of b (None: one path)",
      "1", where=_R),
    K("experiments.*.fit.verdict", "reproduced (|b − claim| + 2u ≤ tol), not reproduced "
      "(|b − claim| − 2u > tol) or inconclusive", "text", where=_R),
    K("experiments.*.fit.control", "the same slope judged against the other regime's claim "
      "(the negative control: it must not be reproduced)", "text", where=_R),
    K("experiments.*.runs[].H", "the run's head count H", "count", where=_R),
    K("experiments.*.runs[].paths", "its Monte-Carlo paths", "count", where=_R),
    K("experiments.*.runs[].wall_time_s", "its wall time", "s", where=_R),
    K("experiments.*.runs[].status", "its status (the particle run's accuracy check)", "text",
      where=_R),
    K("experiments.*.runs[].message", "why", "text", where=_R),
    K("experiments.*.runs[].G2_late_mean.*", "the late-time mean of G² (over t ≥ T/2): mean "
      "and standard error over the paths", "energy/time", where=_R),
    K("experiments.*.runs[].G2_late_per_path", "the late-time mean of G² of every path",
      "energy/time", where=_R),
    K("experiments.*.runs[].E_0", "the energy at t = 0", "energy", where=_R),
    K("experiments.*.runs[].E_T.*", "the energy at T: mean and standard error", "energy",
      where=_R),
    K("experiments.*.runs[].G2_T.*", "G² at T: mean and standard error", "energy/time",
      where=_R),
    K("experiments.*.runs[].G2_decay_ratio", "mean G² over [3T/4, T] over its mean over "
      "[T/4, T/2] (Monte-Carlo mean)", "1", "≥ 0", _R),
    K("experiments.*.runs[].balance.*.*", "a term of the energy balance (dE, work_int_dtE, "
      "ito, martingale, G2_int, the G²-form EDI defect, the chain residual, the published "
      "form's residual): mean and standard error over the paths", "energy", where=_R),
    # the field's papers (wflow reproduce glpr_phase | castin_ranks | metastable_staircase)
    K("paper", "the paper reproduced (authors, title, arXiv id)", "text", where=_R),
    K("claim", "its claim, in words", "text", where=_R),
    K("verdict_rule", "when the claim counts as reproduced, not reproduced, inconclusive",
      "text", where=_R),
    K("reasons", "the measured numbers behind the verdict, one sentence each", "text",
      where=_R),
    K("control_*", "the negative control's verdict: the claim judged on reversed or "
      "floored data, which must come out not reproduced", "text", where=_R),
    K("n_steps", "glpr_phase: time steps of each run", "count", where=_R),
    K("pair_evaluations", "glpr_phase: token-pair kernel evaluations over the runs", "count",
      where=_R),
    K("kendall_tau", "glpr_phase: Kendall's τ between β and t_half (> 0: clustering slows "
      "as β grows)", "1", where=_R),
    K("p_final_smallest_beta", "glpr_phase: the probability of one cluster at T for the "
      "smallest β", "1", where=_R),
    K("p_final_largest_beta", "glpr_phase: the same for the largest β", "1", where=_R),
    K("t_half.**", "glpr_phase: per β the time at which half the draws have clustered (inf: "
      "never before T)", "time", where=_R),
    K("max_stderr", "glpr_phase: the largest standard error of a probability", "1", "≥ 0",
      _R),
    K("wall_s_per_beta_sum", "glpr_phase: wall time summed over the β", "s", where=_R),
    K("ranks", "MPI ranks of the run", "count", where=_R),
    K("cases.*.*.*", "castin_ranks: per case and dimension d the draws (attempts, "
      "converged, exceptions, iterations), the rank histograms of the published and the "
      "exact solver, their disagreements, the unsettled draws, Euler steps and wall time",
      "as named", where=_R),
    K("per_beta.*.*", "metastable_staircase: per β the records, the record of the full "
      "merge, f80, the plateau fraction and the largest fall over the rise", "as named",
      where=_R),
    K("per_beta.*.plateaus[].*", "metastable_staircase: a plateau of the energy (t_start, "
      "t_end, E)", "as named", where=_R),
    K("nan_from_step.*", "metastable_staircase: per β the first record whose angle is NaN "
      "(the published step divides 0 by 0 after the full merge)", "count", where=_R),
    K("merges.*", "metastable_staircase: per β the merges [record, token i, token j]",
      "count", where=_R),
    K("wall_s.*", "metastable_staircase: wall time per β", "s", where=_R),
    K("finding", "metastable_staircase: what the reproduction found about the published "
      "code", "text", where=_R),
    K("differences_from_published", "what differs from the published code, and why", "text",
      where=_R),
    K("run_wall_time_s", "wall time of all runs", "s", "≥ 0", _R),
    # --- wflow gaussian pretrained (per-layer Gaussianity of a real transformer) ---------
    K("model.**", "pretrained: the model read (name, source path) and its BERT config "
      "(hidden size, heads, layers, …)", "as named", where=_G),
    K("n_samples", "pretrained: Gaussian input samples", "count", where=_G),
    K("input", "pretrained: what the input samples are", "text", where=_G),
    K("pca_dim", "pretrained: the principal components of the projected space (None: none)",
      "count", where=_G),
    K("layers", "pretrained: the layers analysed", "count", where=_G),
    K("spaces", "pretrained: the spaces tested (full, pcaK)", "text", where=_G),
    K("wall_time", "pretrained: wall time", "s", where=_G),
    K("notes", "pretrained: notes (a plot skipped, …)", "text", where=_G),
    K("summary.*.*", "pretrained: per layer (input, layerN) the compact table: per space the "
      "Mardia kurtosis z (and of the Gaussian null), the skewness ratio to the null, the W₂ "
      "ratio to the null; the prediction errors one_layer_rel, open_loop_rel, attn_rel",
      "1", where=_G),
    K("layer_predictions.**", "pretrained: per layer the moment-ODE prediction of the layer "
      "(one layer from the measured input, open loop from the start: Bures–Wasserstein "
      "distance bw and relative error rel_scale) and the attention's entropy, largest score "
      "and log n", "as named", where=_G),
    K("stages[].*", "pretrained: one stage (layer, stage input/attn/ln1/ffn/out, mean norm, "
      "covariance trace, token norm)", "as named", where=_G),
    K("stages[].mardia.**", "pretrained: per space Mardia's skewness b1 and kurtosis b2 of "
      "the stage's tokens, their statistics, z-scores and p-values, dimension and samples",
      "as named", where=_G),
    K("stages[].mardia_null.**", "pretrained: the same for a Gaussian sample of the same "
      "moments (the null)", "as named", where=_G),
    K("stages[].w2.**", "pretrained: per space W₂ to the moment-matched Gaussian, its null, "
      "their ratio and excess, the scale, the OT sample size", "as named", where=_G),
    K("stages[].prediction.**", "pretrained: the moment-ODE prediction of the stage against "
      "the measured tokens (relative mean and covariance errors, Bures–Wasserstein "
      "distances predicted, moved and of sampling, the Mehler bound)", "as named", where=_G),
    # --- wflow gaussian (run; reach; the scenario echo) -----------------------------------
    K("title", "the scenario's title", "text", where=_G),
    K("source", "the scenario file read", "text", where=_G),
    K("T", "the final time of the moment ODE (gaussian-particles study: of its runs)", "time",
      where=_G + ", wflow verify"),
    K("initial.m", "initial mean m₀ (d,)", "1", where=_G),
    K("initial.Sigma", "initial covariance Σ₀ (d, d)", "1", where=_G),
    K("parameters.*", "the constant parameters A, b, V, B (matrices d × d, b (d,)), or "
      "params_path: the type of the piecewise-constant path ([[layers]])", "1", where=_G),
    K("run.*", "the [run] options as used (T, n_out, method, rtol, atol, blowup_factor)",
      "as in the options", where=_G),
    K("result.status", "the moment ODE's end: completed, blowup or failed", "text",
      where=_G),
    K("result.message", "why it ended there", "text", where=_G),
    K("result.t_final", "the time reached", "time", where=_G),
    K("result.rank", "rank of Σ (invariant along the flow)", "count", where=_G),
    K("result.blowup_time", "extrapolated blow-up time t* (None: no blow-up)", "time",
      where=_G),
    K("result.event_time", "the time tr Σ crossed the blow-up threshold (None: never)",
      "time", where=_G),
    K("result.blowup_threshold_trace", "the threshold of tr Σ: blowup_factor · max(tr Σ₀, 1)",
      "1", where=_G),
    K("result.final_m", "m at the last time", "1", where=_G),
    K("result.final_Sigma", "Σ at the last time", "1", where=_G),
    K("result.final_eigenvalues", "eigenvalues of the last Σ, ascending", "1", where=_G),
    K("result.n_times", "output times recorded", "count", where=_G),
    K("result.nfev", "right-hand-side evaluations of the ODE solver", "count", where=_G),
    K("closed_form_blowup_time", "t* from the V = vI closed form (None: no closed form; "
      "null: no blow-up before closed_form_searched_to)", "time", where=_G),
    K("closed_form_searched_to", "end of the closed-form search", "time", where=_G),
    K("classification.label", "long-time behaviour: converges_to_zero, converges, "
      "blows_up, depends_on_initial_data, unbounded, oscillates, undetermined", "text",
      where=_G),
    K("classification.method", "what decided it: exact (closed form / invariant), "
      "lyapunov, probe (integrations up to the horizon)", "text", where=_G),
    K("classification.reason", "the structure, invariant or fitted law that decided",
      "text", where=_G),
    K("classification.limit", "the limit covariance (converges), zeros (converges_to_zero), "
      "None otherwise", "1", where=_G),
    K("classification.limit_rank", "rank of the limit", "count", where=_G),
    K("classification.rate_kind", "exponential, algebraic or stationary (None: no rate)",
      "text", where=_G),
    K("classification.rate", "the rate: ‖Σ − limit‖ ~ e^{−rate·t} or t^{−rate} (structure "
      "when known, else fitted)", "1/time or 1", where=_G),
    K("classification.blowup_time", "blow-up time (blows_up with the given Σ₀)", "time",
      where=_G),
    K("classification.scope", "Sigma0 (the trajectory from Σ₀) or all (every full-rank Σ₀)",
      "text", where=_G),
    K("classification.equilibria[].*", "an isolated Riccati equilibrium (Σ = 0 first): m, "
      "Sigma, rank, stable, spectrum_real / spectrum_imag_max / mean_spectrum_real (of the "
      "linearisation), residual of the equilibrium equation, source (the rule that found "
      "it)", "as named", where=_G),
    K("classification.families", "continua of equilibria (empty list: none)", "as named",
      where=_G),
    K("classification.families[].*", "a continuum of equilibria: dimension, offset + span "
      "of basis, description, source", "as named", where=_G),
    K("classification.rate_fit", "the law fitted on the integration's tail (None: no fit)",
      "as named", where=_G),
    K("classification.rate_fit.**", "the fit: kind (exponential, algebraic), rate, t_range, "
      "reason, local exponential and algebraic slopes", "as named", where=_G),
    K("classification.details.**", "the deciding rule's data: eigen-structure "
      "(B_prime_eigenvalues, basis, kernel_dim, V_commutes_with_B), invariants (a, c, "
      "Sigma_K), Lyapunov certificate (level, rho, spectrum_real_max, value_at_entry), "
      "horizon, t_Sigma_limit, blowup_time_integrated", "as named", where=_G),
    K("nearest_equilibrium.index", "index of the isolated equilibrium nearest the final Σ",
      "count", where=_G),
    K("nearest_equilibrium.bures_distance", "its Bures–Wasserstein distance to the final Σ",
      "1", "≥ 0", _G),
    K("nearest_equilibrium.stable", "it is linearly stable", "bool", where=_G),
    K("nearest_equilibrium.note", "isolated equilibria only (continua: families)", "text",
      where=_G),
    K("distance_to_limit", "Bures–Wasserstein distance of the final Σ to the limit", "1",
      "≥ 0", _G),
    K("particles.status", "particle check: ok or skipped (with reason)", "text", where=_G),
    K("particles.reason", "why the particle check was skipped", "text", where=_G),
    K("particles.n", "particles sampled from N(m₀, Σ₀)", "count", where=_G),
    K("particles.seed", "their seed", "count", where=_G),
    K("particles.steps", "RK4 steps over [0, T]", "count", where=_G),
    K("particles.m_error", "|m̂ − m| at T (empirical vs moment ODE)", "1", "≥ 0", _G),
    K("particles.Sigma_error", "‖Σ̂ − Σ‖_F at T", "1", "≥ 0", _G),
    K("particles.w2", "W₂(N(m̂, Σ̂), N(m, Σ)) at T (expected O(n^{-1/2}))", "1", "≥ 0", _G),
    K("particles.n_to_minus_half", "n^{-1/2}, the scale of the sampling error", "1", "> 0",
      _G),
    K("particles.final_m_particles", "m̂ at T", "1", where=_G),
    K("particles.final_Sigma_particles", "Σ̂ at T", "1", where=_G),
    K("phase_diagram.x_name", "name of the first parameter of the family", "text", where=_G),
    K("phase_diagram.y_name", "name of the second", "text", where=_G),
    K("phase_diagram.counts.*", "grid points with each classification label", "count",
      where=_G),
    K("target.*", "the [target] table: m, Sigma, T, keep_attention (reach)", "as named",
      where=_G),
    K("reach.status", "reached or missed", "text", where=_G),
    K("reach.message", "why the target was missed ('' when reached)", "text", where=_G),
    K("reach.tol", "the tolerance of the relative errors", "1", where=_G),
    K("reach.m_error", "|m(T) − m₁| (absolute)", "1", "≥ 0", _G),
    K("reach.Sigma_error", "‖Σ(T) − Σ₁‖_F / max(‖Σ₁‖_F, 1)", "1", "≥ 0", _G),
    K("reach.w2_error", "W₂(N(m(T), Σ(T)), N(m₁, Σ₁)) (absolute)", "1", "≥ 0", _G),
    K("reach.T", "the steering time", "time", where=_G),
    K("reach.bures_map_G", "the Bures (OT) map between Σ₀ and Σ₁", "1", where=_G),
    K("reach.rotation", "the rotation of the plan", "1", where=_G),
    K("reach.phases[].*", "a phase of the controls: t0, t1, kind, L, c (A(t), b(t) on it)",
      "as named", where=_G),
    K("reach.integration.*", "the moment ODE integrated with the controls (as result.*)",
      "as result.*", where=_G),
)
