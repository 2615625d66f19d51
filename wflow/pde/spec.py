"""The PDE solver's :class:`~wflow.infra.spec.SolverSpec`, registered once.

``[pde]`` → :class:`~wflow.pde.options.PDETable` (mesh spec and
:class:`~wflow.pde.PDEOptions`), its cost (:func:`~wflow.pde.estimate.estimate_run`), its
keys and its solve (:func:`~wflow.pde.solve_pde`).
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from ..infra.spec import SOLVERS, SolverSpec
from .estimate import estimate_run
from .keys import CSV_COLUMNS, SUMMARY_KEYS
from .options import PDEOptions, PDETable, pde_table_from_dict
from .solver import solve_pde

__all__ = ["SPEC"]


def _parse(d: Mapping[str, Any] | None, sections: Mapping[str, Any], seed: int) -> PDETable:
    return pde_table_from_dict(d, seed=seed)


#: The PDE solver's :class:`~wflow.infra.spec.SolverSpec` (registered in ``SOLVERS``).
SPEC = SOLVERS.register(SolverSpec(
    name="pde", section="pde", options=PDEOptions, parse=_parse, estimate=estimate_run,
    solve=solve_pde, keys=SUMMARY_KEYS, columns=CSV_COLUMNS))
