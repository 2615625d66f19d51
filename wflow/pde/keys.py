"""Output keys of ``wflow pde`` (assembled in :mod:`wflow.apps.output_keys`)."""

from __future__ import annotations

from ..infra.output_keys import OutputKey

__all__ = ["SUMMARY_KEYS", "CSV_COLUMNS"]

K = OutputKey
_RUN = "wflow run"
_D = "wflow pde"

#: The ``summary.json`` keys only ``wflow pde`` writes (flattened; first match wins).
SUMMARY_KEYS: tuple[OutputKey, ...] = (
    K("density.**", "the initial density as specified (only the keys of its type)",
      "as in the scenario", where=_D),
    K("*stats.kernel.**", "the kernel log of the PDE (as `kernel.*`)", "as named",
      where=_D + ", " + _RUN),
    K("mesh.min_area", "smallest flat cell area |K|", "area", where=_D),
    K("mesh.max_area", "largest flat cell area |K|", "area", where=_D),
    K("*stats.rejected_steps", "PDE steps rejected by the positivity check and retried",
      "count", where=_D + ", " + _RUN),
    K("*stats.velocity_evals", "evaluations of the nonlocal velocity", "count",
      where=_D + ", " + _RUN),
    K("*stats.time_per_velocity_eval", "wall time per velocity evaluation", "s",
      where=_D + ", " + _RUN),
    K("*stats.rhs_time", "wall time in the finite-volume right-hand side", "s",
      where=_D + ", " + _RUN),
    K("*stats.measure_time", "wall time of the diagnostics at the output times", "s",
      where=_D + ", " + _RUN),
    K("*stats.rho_min", "smallest cell density over the run", "1/area", "≥ 0 (positivity)",
      _D + ", " + _RUN),
    K("*stats.dt_min", "smallest PDE step taken", "time", where=_D + ", " + _RUN),
    K("*stats.dt_max", "largest PDE step taken", "time", where=_D + ", " + _RUN),
    K("*stats.max_normal_speed", "largest |v·n| at the edge quadrature points", "1/time",
      where=_D + ", " + _RUN),
    K("*stats.ranks", "MPI ranks", "count", where=_D + ", " + _RUN),
    K("*stats.edge_quadrature_points", "Gauss–Legendre points per edge", "count",
      where=_D + ", " + _RUN),
)

#: The CSV columns only ``wflow pde`` writes.
CSV_COLUMNS: tuple[OutputKey, ...] = ()
