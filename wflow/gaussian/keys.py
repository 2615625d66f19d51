"""Output keys of ``wflow gaussian`` (assembled in :mod:`wflow.apps.output_keys`)."""

from __future__ import annotations

from ..infra.output_keys import OutputKey

__all__ = ["SUMMARY_KEYS", "CSV_COLUMNS"]

K = OutputKey
_G = "wflow gaussian"

#: The ``summary.json`` keys only ``wflow gaussian`` writes (flattened; first match wins).
SUMMARY_KEYS: tuple[OutputKey, ...] = (
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

#: The CSV columns only ``wflow gaussian`` writes.
CSV_COLUMNS: tuple[OutputKey, ...] = ()
