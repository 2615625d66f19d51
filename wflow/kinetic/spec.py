"""The kinetic solver's :class:`~wflow.infra.spec.SolverSpec`, registered once.

``[kinetic]`` (with the ``[pde]`` table its slices share) →
:class:`~wflow.kinetic.options.KineticTable`, its cost
(:func:`~wflow.kinetic.estimate.estimate_run`), its keys and its solve
(:func:`~wflow.kinetic.solve_kinetic`).
"""

from __future__ import annotations

from ..infra.spec import SOLVERS, SolverSpec
from .estimate import estimate_run
from .keys import CSV_COLUMNS, SUMMARY_KEYS
from .options import KineticOptions, kinetic_table_from_dict
from .solver import solve_kinetic

__all__ = ["SPEC"]

#: The kinetic solver's :class:`~wflow.infra.spec.SolverSpec` (registered in ``SOLVERS``).
SPEC = SOLVERS.register(SolverSpec(
    name="kinetic", section="kinetic", options=KineticOptions, parse=kinetic_table_from_dict,
    estimate=estimate_run, solve=solve_kinetic, keys=SUMMARY_KEYS, columns=CSV_COLUMNS))
