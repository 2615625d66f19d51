"""Moved to :mod:`wflow.gaussian.run` and :mod:`wflow.gaussian.plots`; kept so imports work."""

from .gaussian.plots import plot_phase_diagram, plot_reach, plot_trajectory
from .gaussian.run import (
    GaussianRun,
    particle_check,
    reach_scenario,
    run_gaussian_scenario,
    trajectory_columns,
    write_gaussian_run,
    write_reach,
)

__all__ = ["GaussianRun", "run_gaussian_scenario", "write_gaussian_run", "particle_check",
           "reach_scenario", "write_reach", "trajectory_columns", "plot_trajectory",
           "plot_phase_diagram", "plot_reach"]
