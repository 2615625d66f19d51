"""The particle solver's :class:`~wflow.infra.spec.SolverSpec`, registered once.

``[particles]`` → :class:`~wflow.particles.ParticleOptions` (with the scenario's seed),
its cost (:func:`~wflow.particles.estimate.estimate_run`: memory per MPI rank), its keys
and its solve (:func:`~wflow.particles.simulate`).
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from ..infra.schema import take
from ..infra.spec import SOLVERS, SolverSpec
from .estimate import estimate_run
from .keys import CSV_COLUMNS, SUMMARY_KEYS
from .options import PARTICLES_SCHEMA, ParticleOptions
from .solver import simulate

__all__ = ["SPEC", "particle_options_from_dict"]


def particle_options_from_dict(d: Mapping[str, Any] | None, sections: Mapping[str, Any]
                               | None = None, seed: int = 0) -> ParticleOptions:
    """Validate a ``[particles]`` table (errors ``particles.<key>: ...``) with ``seed``."""
    return ParticleOptions(**take(d or {}, PARTICLES_SCHEMA, "particles"), seed=seed)


#: The particle solver's :class:`~wflow.infra.spec.SolverSpec` (registered in ``SOLVERS``).
SPEC = SOLVERS.register(SolverSpec(
    name="particles", section="particles", options=ParticleOptions,
    parse=particle_options_from_dict, estimate=estimate_run, solve=simulate,
    keys=SUMMARY_KEYS, columns=CSV_COLUMNS))
