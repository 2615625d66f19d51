"""Moved to :mod:`wflow.particles.run` (the particle file job); kept so imports work."""

from .io import history_columns, provenance
from .particles.run import run_particles

__all__ = ["run_particles", "history_columns", "provenance"]
