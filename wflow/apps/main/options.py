"""The main job's ``[run]`` options, its result and the shipped default scenario.

Part of the main job (:mod:`wflow.apps.main`).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from importlib import resources
from pathlib import Path
from typing import Any

from ...infra.options import documented, keys_of, opt, schema_of, validate
from ...infra.schema import Spec
from ...particles.integrators import INTEGRATORS
from ...results import EMPTY, Outcome
from ...status import Status
from ..scenario import Scenario, boolean, load_scenario, number

#: Marker file of a checkpoint folder ``DIR.ckpt`` (written first, removed last).
CHECKPOINT_MARKER = ".wflow-checkpoint"

#: The phases of the main job, in order (their checkpoints are ``<phase>.pkl``).
PHASES = ("pde", "particles", "jko", "pde_surrogate", "jko_refinement", "compare")


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


@dataclass(frozen=True)
class MainJobResult(Outcome):
    """Outcome of :func:`run_main_job` (an :class:`~wflow.results.Outcome`).

    Attributes
    ----------
    status : Status
        The worst status of the phases, ``INACCURATE`` at least when a verdict of the
        summary is ``FAIL`` (a string naming a status is read as one).
    summary : dict
        What ``summary.json`` holds.
    out : Path
        The output folder.
    message : str
        The summary's message: the phases not successful and the failed verdicts (computed).
    checks : dict
        The accuracy checks of the phases, ``phase → {name → check}`` (computed).
    history : mapping
        Empty: the series are in the output files (``diagnostics_*.csv``).
    verdicts : list of dict
        The summary's verdict table (``quantity``, ``value``, ``tolerance``, ``verdict``:
        a :class:`~wflow.status.Verdict`, ``meaning``; computed).
    """

    status: Status
    summary: dict[str, Any]
    out: Path

    def __post_init__(self) -> None:
        """Read ``status`` as a :class:`Status` (a string naming one is accepted)."""
        if not isinstance(self.status, Status):
            object.__setattr__(self, "status", Status(self.status))

    @property
    def message(self) -> str:
        """The summary's ``message`` (empty on success)."""
        return str(self.summary.get("message", ""))

    @property
    def checks(self) -> dict[str, Any]:
        """The summary's ``checks`` (per phase)."""
        return dict(self.summary.get("checks", {}))

    @property
    def history(self) -> Mapping[str, Any]:
        """Empty (the series are in the output files)."""
        return EMPTY

    @property
    def verdicts(self) -> list[dict[str, Any]]:
        """The rows of the summary's verdict table."""
        return list(self.summary.get("verdicts", []))


def default_run_scenario():
    """The scenario shipped with the package for ``wflow run`` without arguments."""
    return resources.files("wflow") / "data" / "default_run.toml"


def _load(path: Path | None) -> Scenario:
    """The scenario at ``path`` (:func:`~wflow.apps.scenario.load_scenario`), else the default."""
    if path is None:
        with resources.as_file(default_run_scenario()) as p:
            return load_scenario(p)
    return load_scenario(path)
