"""The outcome of a published claim: the base of the published verdicts.

:class:`ClaimOutcome` is the :class:`~wflow.results.Outcome` of a reproduction's verdict
(:class:`~wflow.published.glpr_phase.PhaseVerdict`,
:class:`~wflow.published.metastable_staircase.StaircaseVerdict`,
:class:`~wflow.published.castin_ranks.RankVerdict`): ``status`` is its
:class:`~wflow.status.Claim` (``"reproduced"``, ``"inconclusive"``, ``"not reproduced"``,
the words written in ``summary.json``), ``checks`` the criteria of the paper's rule, the
message names the checks that did not pass.

Every reproduction writes its ``out/`` alike (:func:`write_reproduction`): ``report.md``,
opening with :func:`report_head`, the experiment's own files and ``summary.json``.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any

from ..results import EMPTY, Outcome
from ..status import Claim

__all__ = ["ClaimOutcome", "report_head", "write_reproduction"]


class ClaimOutcome(Outcome):
    """An :class:`~wflow.results.Outcome` judged by a :class:`~wflow.status.Claim`.

    A subclass is a frozen dataclass with the fields ``verdict`` (a
    :class:`~wflow.status.Claim`, or its string) and ``checks`` (``name → {value,
    tolerance, passed, rule}``). ``status`` is the verdict, ``message`` ``""`` when the
    claim is reproduced, else the verdict and the checks that did not pass, ``history``
    empty.
    """

    __slots__ = ()

    verdict: Claim
    checks: Mapping[str, Any]

    def __post_init__(self) -> None:
        """Read ``verdict`` as a :class:`~wflow.status.Claim` member."""
        if not isinstance(self.verdict, Claim):
            object.__setattr__(self, "verdict", Claim(self.verdict))

    @property
    def status(self) -> Claim:
        """The verdict (its :attr:`~wflow.status.Claim.status` is ``run_status``)."""
        return self.verdict

    @property
    def passed(self) -> bool:
        """Whether the claim is reproduced."""
        return self.verdict.passed

    @property
    def message(self) -> str:
        """``""`` when reproduced, else ``"<verdict>: checks not passed: a, b"``."""
        if self.passed:
            return ""
        bad = self.failed_checks()
        return f"{self.verdict}" + (f": checks not passed: {', '.join(bad)}" if bad else "")

    @property
    def history(self) -> Mapping[str, Any]:
        """Empty (the series are in the reproduction's ``summary.json``)."""
        return EMPTY


def report_head(name: str, verdict: str, *, paper: str, claim: str, rule: str) -> list[str]:
    """The first lines of a reproduction's ``report.md``: title and verdict, paper, claim, rule.

    ``# name — VERDICT``, then ``Paper: …``, ``Claim: ….`` and ``Rule: …``, each followed by
    an empty line.
    """
    return [f"# {name} — {verdict.upper()}", "", f"Paper: {paper}", "", f"Claim: {claim}.", "",
            f"Rule: {rule}", ""]


def write_reproduction(out: Path, name: str, summary: dict[str, Any], sentence: str,
                       passed: bool, *, report: str,
                       files: Callable[[Path], list[str]]) -> Any:
    """Write a reproduction's ``out/`` and return its result (``reproduce_<name>``).

    Parameters
    ----------
    out : the output folder, already checked (:func:`wflow.infra.io.prepare_output`,
        before the experiment ran).
    name : the experiment's name.
    summary, sentence, passed : the :class:`~wflow.studies.base.StudyResult`'s content.
    report : the text of ``report.md``.
    files : writes the experiment's own files into the staging folder; their names.

    Returns
    -------
    The :class:`~wflow.studies.base.StudyResult` written (:func:`wflow.studies.base.write_study`:
    ``summary.json``, then ``report.md`` and the files of ``files``).
    """
    from ..infra.io import atomic_write_text
    from ..studies.base import StudyResult, write_study

    def write(stage: Path) -> list[str]:
        atomic_write_text(stage / "report.md", report)
        return ["report.md", *files(stage)]

    return write_study(out, StudyResult(f"reproduce_{name}", summary, sentence, passed), write)
