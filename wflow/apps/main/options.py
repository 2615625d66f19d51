"""The main job's ``[run]`` options, its result and the shipped default scenario.

Part of the main job (:mod:`wflow.apps.main`).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from importlib import resources
from pathlib import Path
from typing import Any

from ...results import EMPTY, Outcome
from ...status import Status
from ..run_table import RUN_SCHEMA, RUN_SPEC, RunOptions
from ..scenario import Scenario, load_scenario

#: ``[run]``'s options live in :mod:`wflow.apps.run_table` (below the scenario, which parses
#: them at load); re-exported here, their former home.
__all__ = ["RUN_SCHEMA", "RUN_SPEC", "RunOptions", "MainJobResult", "CHECKPOINT_MARKER",
           "PHASES", "default_run_scenario"]

#: Marker file of a checkpoint folder ``DIR.ckpt`` (written first, removed last).
CHECKPOINT_MARKER = ".wflow-checkpoint"

#: The phases of the main job, in order (their checkpoints are ``<phase>.pkl``).
#: A masked scenario runs ``kinetic``, ``particles``, ``compare``
#: (:mod:`wflow.apps.main.causal`).
PHASES = ("pde", "kinetic", "particles", "jko", "pde_surrogate", "jko_refinement", "compare")




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
