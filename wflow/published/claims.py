"""The outcome of a published claim: the base of the published verdicts.

:class:`ClaimOutcome` is the :class:`~wflow.results.Outcome` of a reproduction's verdict
(:class:`~wflow.published.glpr_phase.PhaseVerdict`,
:class:`~wflow.published.metastable_staircase.StaircaseVerdict`,
:class:`~wflow.published.castin_ranks.RankVerdict`): ``status`` is its
:class:`~wflow.status.Claim` (``"reproduced"``, ``"inconclusive"``, ``"not reproduced"``,
the words written in ``summary.json``), ``checks`` the criteria of the paper's rule, the
message names the checks that did not pass.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from ..results import EMPTY, Outcome
from ..status import Claim

__all__ = ["ClaimOutcome"]


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
