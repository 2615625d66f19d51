"""The ``[run]`` table of a scenario: the main job's options, validated when the scenario loads.

:class:`RunOptions` sits below :mod:`wflow.apps.scenario`, which parses ``[run]`` once at
load for every command (a typo is refused by ``wflow particles`` as by ``wflow run``);
:mod:`wflow.apps.main` reads the parsed table.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from ..infra.options import documented, keys_of, opt, schema_of, validate
from ..infra.schema import Spec, boolean, number
from ..particles.integrators import INTEGRATORS

__all__ = ["RunOptions", "RUN_SCHEMA", "RUN_SPEC"]


@documented
@dataclass(frozen=True)
class RunOptions:
    """Validated ``[run]`` section of the main job (keys, defaults: the fields below)."""

    SECTION = "run"

    n_particles: int = field(default=2000, metadata=opt(
        "Tokens sampled from the initial cell density for the particle phase.",
        check=number(10, integer=True)))
    particle_integrator: str = field(default="rk4", metadata=opt(
        "Integrator of the particle phase (:data:`wflow.particles.integrators.INTEGRATORS`).",
        check=INTEGRATORS.checker()))
    particle_steps_per_save: int = field(default=4, metadata=opt(
        "Particle steps between two PDE output times (``dt = ΔT_save / steps``).",
        check=number(1, integer=True)))
    jko: bool = field(default=True, metadata=opt(
        "Run the JKO phases (``jko``, ``pde_surrogate``, ``jko_refinement``).", check=boolean))
    render: bool = field(default=True, metadata=opt(
        "Draw the figures of ``report.md``.", check=boolean))
    max_ot_points: int = field(default=6000, metadata=opt(
        "Largest number of support points of a dense exact ``W_2`` (POT network simplex on "
        "the ``n × m`` cost); larger cell measures use the certified sparse exact solver "
        "(:func:`wflow.geometry.transport.w2_sphere`, ``method = \"auto\"``). With more "
        "particles the exact ``W_2`` uses a seeded random subsample of this many, named "
        "``W₂ (subsample of m of n particles)``, with its sampling floor and POT's sliced "
        "``W_2`` of all the particles (:func:`wflow.apps.main.particles_w2`; "
        "``summary.json`` ``w2``).", check=number(100, integer=True)))
    jko_refinement: int = field(default=2, metadata=opt(
        "Coarser icospheres of the ``τ/h`` table (JKO and surrogate PDE with ``h ∝ τ``); "
        "0: no table.", check=number(0, 4, integer=True)))

    def __post_init__(self) -> None:
        validate(self)


#: The ``[run]`` table: ``key -> (default, checker)`` (derived from :class:`RunOptions`).
RUN_SCHEMA: Spec = schema_of(RunOptions)
#: Keys of the ``[run]`` table.
RUN_SPEC: tuple[str, ...] = keys_of(RunOptions)
