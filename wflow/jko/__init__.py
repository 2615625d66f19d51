"""JKO minimising movements on a sphere mesh with (weighted) optimal transport (docs/theory.md §4).

Two discretisations of the step (``JKOOptions.scheme``): the finite-volume dynamic form
(default where the mesh connectivity is given) and discrete OT between cell measures.
One step of size ``τ`` of the ascent of ``E`` (descent of ``F = −sE``)::

    μ_{k+1} ∈ argmin_ν  J_k(ν) = (1/2τ) W²_{b̂_k}(μ_k, ν) − s E(ν, t_{k+1}).

Rooms (the same in every solver package):

* :mod:`~wflow.jko.options` — :class:`JKOOptions` and the ``[jko]`` schema;
* :mod:`~wflow.jko.cost` — transport costs ``d_S²/b̂_ij`` and the candidate pairs;
* :mod:`~wflow.jko.energy` — ``E`` on cell measures and its gradient in the masses;
* :mod:`~wflow.jko.oracle` — the linear minimisation oracle and the optimality gap;
* :mod:`~wflow.jko.pot` — POT values, potentials and cross-checks;
* :mod:`~wflow.jko.inner` — the inner solvers (conditional gradient, mirror descent);
* :mod:`~wflow.jko.step` — one OT step (:func:`jko_step`);
* :mod:`~wflow.jko.fv` — the finite-volume (Benamou–Brenier) step (``scheme = "fv"``), on the
  circumcentric dual geometry of :mod:`wflow.geometry.mesh.dual`;
* :mod:`~wflow.jko.zonal` — the exact JKO step of zonal problems (a test reference);
* :mod:`~wflow.jko.solver` — :func:`iterate_jko` (generator) and :func:`solve_jko`;
* :mod:`~wflow.jko.result` — :class:`JKOResult` and the verdicts of a finished run;
* :mod:`~wflow.jko.accuracy` — error control: the step-doubling estimate against
  ``rtol``/``atol`` and the verdict of a run;
"""

from .cost import cost_matrix, pair_mobility
from .energy import energy_gradient
from .options import (
    INNER_SOLVERS,
    JKO_SPEC,
    LOCK_FRACTION,
    MOBILITY_MEANS,
    OT_METHODS,
    SCHEMES,
    AutoSteps,
    FixedTau,
    JKOOptions,
    JKOTable,
    JKOWarning,
    check_applicable,
    jko_table_from_dict,
)
from .solver import JKOResult, JKOState, auto_step, iterate_jko, solve_jko
from .step import JKOStepInfo, jko_step

__all__ = [
    "JKOOptions",
    "JKOStepInfo",
    "JKOState",
    "JKOResult",
    "JKOWarning",
    "MOBILITY_MEANS",
    "OT_METHODS",
    "SCHEMES",
    "LOCK_FRACTION",
    "INNER_SOLVERS",
    "pair_mobility",
    "cost_matrix",
    "energy_gradient",
    "jko_step",
    "auto_step",
    "iterate_jko",
    "solve_jko",
    "jko_table_from_dict",
    "JKOTable",
    "FixedTau",
    "AutoSteps",
    "check_applicable",
    "JKO_SPEC",
]

