"""Output keys of ``wflow gaussian`` (assembled in :mod:`wflow.apps.output_keys`)."""

from __future__ import annotations

from ..infra.output_keys import OutputKey, written_by

__all__ = ["SUMMARY_KEYS", "CSV_COLUMNS"]

_G = "wflow gaussian"
#: An entry of this table: written by ``wflow gaussian`` unless it names its ``where``.
K = written_by(_G)


#: The ``summary.json`` keys only ``wflow gaussian`` writes (flattened; first match wins).
SUMMARY_KEYS: tuple[OutputKey, ...] = (
    K("model.**", "pretrained: the model read (name, source path) and its BERT config "
      "(hidden size, heads, layers, …)", "as named"),
    K("n_samples", "pretrained: Gaussian input samples", "count"),
    K("input", "pretrained: what the input samples are", "text"),
    K("pca_dim", "pretrained: the principal components of the projected space (None: none)",
      "count"),
    K("layers", "pretrained: the layers analysed", "count"),
    K("spaces", "pretrained: the spaces tested (full, pcaK)", "text"),
    K("wall_time", "pretrained: wall time", "s"),
    K("notes", "pretrained: notes (a plot skipped, …)", "text"),
    K("summary.*.*", "pretrained: per layer (input, layerN) the compact table: per space the "
      "Mardia kurtosis z (and of the Gaussian null), the skewness ratio to the null, the W₂ "
      "ratio to the null; the prediction errors one_layer_rel, open_loop_rel, attn_rel",
      "1"),
    K("layer_predictions.**", "pretrained: per layer the moment-ODE prediction of the layer "
      "(one layer from the measured input, open loop from the start: Bures–Wasserstein "
      "distance bw and relative error rel_scale) and the attention's entropy, largest score "
      "and log n", "as named"),
    K("stages[].*", "pretrained: one stage (layer, stage input/attn/ln1/ffn/out, mean norm, "
      "covariance trace, token norm)", "as named"),
    K("stages[].mardia.**", "pretrained: per space Mardia's skewness b1 and kurtosis b2 of "
      "the stage's tokens, their statistics, z-scores and p-values, dimension and samples",
      "as named"),
    K("stages[].mardia_null.**", "pretrained: the same for a Gaussian sample of the same "
      "moments (the null)", "as named"),
    K("stages[].w2.**", "pretrained: per space W₂ to the moment-matched Gaussian, its null, "
      "their ratio and excess, the scale, the OT sample size", "as named"),
    K("stages[].prediction.**", "pretrained: the moment-ODE prediction of the stage against "
      "the measured tokens (relative mean and covariance errors, Bures–Wasserstein "
      "distances predicted, moved and of sampling, the Mehler bound)", "as named"),
    K("title", "the scenario's title", "text"),
    K("source", "the scenario file read", "text"),
    K("T", "the final time of the moment ODE (gaussian-particles study: of its runs)", "time",
      where=_G + ", wflow verify"),
    K("initial.m", "initial mean m₀ (d,)", "1"),
    K("initial.Sigma", "initial covariance Σ₀ (d, d)", "1"),
    K("parameters.*", "the constant parameters A, b, V, B (matrices d × d, b (d,)), or "
      "params_path: the type of the piecewise-constant path ([[layers]])", "1"),
    K("run.*", "the [run] options as used (T, n_out, method, rtol, atol, blowup_factor)",
      "as in the options"),
    K("result.status", "the moment ODE's end: completed, blowup or failed", "text"),
    K("result.message", "why it ended there", "text"),
    K("result.t_final", "the time reached", "time"),
    K("result.rank", "rank of Σ (invariant along the flow)", "count"),
    K("result.blowup_time", "extrapolated blow-up time t* (None: no blow-up)", "time"),
    K("result.event_time", "the time tr Σ crossed the blow-up threshold (None: never)",
      "time"),
    K("result.blowup_threshold_trace", "the threshold of tr Σ: blowup_factor · max(tr Σ₀, 1)",
      "1"),
    K("result.final_m", "m at the last time", "1"),
    K("result.final_Sigma", "Σ at the last time", "1"),
    K("result.final_eigenvalues", "eigenvalues of the last Σ, ascending", "1"),
    K("result.n_times", "output times recorded", "count"),
    K("result.nfev", "right-hand-side evaluations of the ODE solver", "count"),
    K("closed_form_blowup_time", "t* from the V = vI closed form (None: no closed form; "
      "null: no blow-up before closed_form_searched_to)", "time"),
    K("closed_form_searched_to", "end of the closed-form search", "time"),
    K("classification.label", "long-time behaviour: converges_to_zero, converges, "
      "blows_up, depends_on_initial_data, unbounded, oscillates, undetermined", "text"),
    K("classification.method", "what decided it: exact (closed form / invariant), "
      "lyapunov, probe (integrations up to the horizon)", "text"),
    K("classification.reason", "the structure, invariant or fitted law that decided",
      "text"),
    K("classification.limit", "the limit covariance (converges), zeros (converges_to_zero), "
      "None otherwise", "1"),
    K("classification.limit_rank", "rank of the limit", "count"),
    K("classification.rate_kind", "exponential, algebraic or stationary (None: no rate)",
      "text"),
    K("classification.rate", "the rate: ‖Σ − limit‖ ~ e^{−rate·t} or t^{−rate} (structure "
      "when known, else fitted)", "1/time or 1"),
    K("classification.blowup_time", "blow-up time (blows_up with the given Σ₀)", "time"),
    K("classification.scope", "Sigma0 (the trajectory from Σ₀) or all (every full-rank Σ₀)",
      "text"),
    K("classification.equilibria[].*", "an isolated Riccati equilibrium (Σ = 0 first): m, "
      "Sigma, rank, stable, spectrum_real / spectrum_imag_max / mean_spectrum_real (of the "
      "linearisation), residual of the equilibrium equation, source (the rule that found "
      "it)", "as named"),
    K("classification.families", "continua of equilibria (empty list: none)", "as named"),
    K("classification.families[].*", "a continuum of equilibria: dimension, offset + span "
      "of basis, description, source", "as named"),
    K("classification.rate_fit", "the law fitted on the integration's tail (None: no fit)",
      "as named"),
    K("classification.rate_fit.**", "the fit: kind (exponential, algebraic), rate, t_range, "
      "reason, local exponential and algebraic slopes", "as named"),
    K("classification.details.**", "the deciding rule's data: eigen-structure "
      "(B_prime_eigenvalues, basis, kernel_dim, V_commutes_with_B), invariants (a, c, "
      "Sigma_K), Lyapunov certificate (level, rho, spectrum_real_max, value_at_entry), "
      "horizon, t_Sigma_limit, blowup_time_integrated", "as named"),
    K("nearest_equilibrium.index", "index of the isolated equilibrium nearest the final Σ",
      "count"),
    K("nearest_equilibrium.bures_distance", "its Bures–Wasserstein distance to the final Σ",
      "1", "≥ 0"),
    K("nearest_equilibrium.stable", "it is linearly stable", "bool"),
    K("nearest_equilibrium.note", "isolated equilibria only (continua: families)", "text"),
    K("distance_to_limit", "Bures–Wasserstein distance of the final Σ to the limit", "1",
      "≥ 0"),
    K("particles.status", "particle check: ok or skipped (with reason)", "text"),
    K("particles.reason", "why the particle check was skipped", "text"),
    K("particles.n", "particles sampled from N(m₀, Σ₀)", "count"),
    K("particles.seed", "their seed", "count"),
    K("particles.steps", "RK4 steps over [0, T]", "count"),
    K("particles.m_error", "|m̂ − m| at T (empirical vs moment ODE)", "1", "≥ 0"),
    K("particles.Sigma_error", "‖Σ̂ − Σ‖_F at T", "1", "≥ 0"),
    K("particles.w2", "W₂(N(m̂, Σ̂), N(m, Σ)) at T (expected O(n^{-1/2}))", "1", "≥ 0"),
    K("particles.n_to_minus_half", "n^{-1/2}, the scale of the sampling error", "1", "> 0"),
    K("particles.final_m_particles", "m̂ at T", "1"),
    K("particles.final_Sigma_particles", "Σ̂ at T", "1"),
    K("phase_diagram.x_name", "name of the first parameter of the family", "text"),
    K("phase_diagram.y_name", "name of the second", "text"),
    K("phase_diagram.counts.*", "grid points with each classification label", "count"),
    K("target.*", "the [target] table: m, Sigma, T, keep_attention (reach)", "as named"),
    K("reach.status", "reached or missed", "text"),
    K("reach.message", "why the target was missed ('' when reached)", "text"),
    K("reach.tol", "the tolerance of the relative errors", "1"),
    K("reach.m_error", "|m(T) − m₁| (absolute)", "1", "≥ 0"),
    K("reach.Sigma_error", "‖Σ(T) − Σ₁‖_F / max(‖Σ₁‖_F, 1)", "1", "≥ 0"),
    K("reach.w2_error", "W₂(N(m(T), Σ(T)), N(m₁, Σ₁)) (absolute)", "1", "≥ 0"),
    K("reach.T", "the steering time", "time"),
    K("reach.bures_map_G", "the Bures (OT) map between Σ₀ and Σ₁", "1"),
    K("reach.rotation", "the rotation of the plan", "1"),
    K("reach.phases[].*", "a phase of the controls: t0, t1, kind, L, c (A(t), b(t) on it)",
      "as named"),
    K("reach.integration.*", "the moment ODE integrated with the controls (as result.*)",
      "as result.*"),
)

#: The CSV columns only ``wflow gaussian`` writes.
CSV_COLUMNS: tuple[OutputKey, ...] = ()
