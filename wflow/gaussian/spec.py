"""The Gaussian dynamics' :class:`~wflow.infra.spec.SolverSpec`, registered once.

A scenario file of its own (``section = None``): parsed by
:func:`~wflow.gaussian.options.parse_gaussian_scenario`, costed by
:func:`~wflow.gaussian.estimate.estimate_gaussian`, solved by
:func:`~wflow.gaussian.solver.integrate_moments`.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from ..infra.spec import SOLVERS, SolverSpec
from .estimate import estimate_gaussian
from .keys import CSV_COLUMNS, SUMMARY_KEYS
from .options import GaussianScenario, parse_gaussian_scenario
from .solver import integrate_moments

__all__ = ["SPEC"]


def _parse(d: Mapping[str, Any] | None, sections: Mapping[str, Any],
           seed: int) -> GaussianScenario:
    return parse_gaussian_scenario(d or {})


#: The Gaussian moment solver's :class:`~wflow.infra.spec.SolverSpec` (registered in ``SOLVERS``).
SPEC = SOLVERS.register(SolverSpec(
    name="gaussian", section=None, options=GaussianScenario, parse=_parse,
    estimate=estimate_gaussian, solve=integrate_moments, keys=SUMMARY_KEYS,
    columns=CSV_COLUMNS))
