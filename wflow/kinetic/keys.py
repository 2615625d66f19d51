"""Output keys of ``wflow kinetic`` (assembled in :mod:`wflow.apps.output_keys`)."""

from __future__ import annotations

from ..infra.output_keys import OutputKey

__all__ = ["SUMMARY_KEYS", "CSV_COLUMNS", "SHARED_SUMMARY_KEYS"]

K = OutputKey
_K = "wflow kinetic"

#: The ``summary.json`` keys only ``wflow kinetic`` writes (flattened; first match wins).
SUMMARY_KEYS: tuple[OutputKey, ...] = (
    K("slices", "number S of slices in the position s ∈ [0, 1]", "count", "≥ 1", _K),
    K("alibi.lambda", "slope λ of the limit bias b(s, s') = −λ(s − s') the run used", "1",
      "≥ 0", _K),
    K("alibi.source", "where λ came from: [kinetic] alibi, [attention] bias (λ = slope × "
      "[tokens] n, or its lam), or none", "text", where=_K),
    K("mask", "the causal mask of the scenario (both masks have the same limit)", "text",
      where=_K),
    K("final_slices.mean", "the first moment ∫ x ρ(s_k, x) dx of each slice at T, (S, 3)",
      "1 (unit vectors)", where=_K),
    K("final_slices.rho_min", "smallest cell density of each slice at T, (S,)", "1/area",
      "≥ 0 (positivity)", _K),
    K("final_slices.rho_max", "largest cell density of each slice at T, (S,)", "1/area",
      where=_K),
    K("stats.kernel_calls", "kernel sums: S per velocity evaluation", "count", where=_K),
    K("stats.slices", "number S of slices", "count", where=_K),
)

#: The CSV columns only ``wflow kinetic`` writes (``diagnostics.csv``, one row per output
#: time and slice; its ``mass`` column is the slice's ``Σ_K m_kK``, ``1/S`` to round-off).
CSV_COLUMNS: tuple[OutputKey, ...] = (
    K("s", "slice centre s_k = (k + ½)/S", "1", "in (0, 1)", _K),
    K("slice", "slice index k", "count", where=_K),
    K("mean_x", "first moment of the slice's density, x component", "1", where=_K),
    K("mean_y", "first moment of the slice's density, y component", "1", where=_K),
    K("mean_z", "first moment of the slice's density, z component", "1", where=_K),
)

#: The entries of other solvers' keys that ``wflow kinetic`` writes as well (same meaning:
#: the assembled table adds it to their ``where``, :mod:`wflow.apps.output_keys`).
SHARED_SUMMARY_KEYS: tuple[str, ...] = (
    "scenario.**", "provenance.**", "solver", "seed", "n_heads", "outputs.**", "mesh.spec",
    "mesh.cells", "mesh.min_area", "mesh.max_area", "density.**", "*stats.steps",
    "*stats.rejected_steps", "*stats.velocity_evals", "*stats.wall_time",
    "*stats.time_per_step", "*stats.rhs_time", "*stats.time_per_velocity_eval",
    "*stats.rho_min", "*stats.dt_min", "*stats.dt_max", "*stats.max_normal_speed",
    "*stats.cells", "*stats.ranks", "*stats.kernel.**", "t_final", "*stats.mass_error_max",
)
