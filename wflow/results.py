"""The result shape shared by every solver (like POT's ``OTResult``).

Every solve function returns a frozen dataclass derived from :class:`SolverResult`:
:class:`~wflow.particles.ParticleResult` (:func:`~wflow.particles.simulate`),
:class:`~wflow.pde.PDEResult` (:func:`~wflow.pde.solve_pde`),
:class:`~wflow.jko.JKOResult` (:func:`~wflow.jko.solve_jko`) and
:class:`~wflow.gaussian.GaussianTrajectory` (:func:`~wflow.gaussian.integrate_moments`).
Code that only needs to know whether a run can be used, and why not, reads the base
fields and works for all four::

    res = solve(...)
    if res.status != Status.SUCCESS:
        print(res.status.explain(res.message))
    print(status_summary(res))   # {"status", "message", "remedy", "checks"}

The solver-specific fields (``t``, ``rho``, ``x``, ``balance``, ...) are documented on
each result.

Every other public outcome shares the base :class:`Outcome` with the solvers' results:
``status``, ``message``, ``checks`` and ``history``, whatever computed it. It is the base
of :class:`SolverResult`, :class:`~wflow.studies.base.StudyResult` (``wflow verify``,
``wflow reproduce``), :class:`~wflow.apps.main.MainJobResult` (``wflow run``),
:class:`~wflow.gaussian.ReachResult` and the published verdicts
(:class:`~wflow.published.glpr_phase.PhaseVerdict`,
:class:`~wflow.published.metastable_staircase.StaircaseVerdict`,
:class:`~wflow.published.castin_ranks.RankVerdict`), so one function reads them all::

    def report(outcome: Outcome) -> str:
        return outcome.explain()      # "failed: FAIL — 1 of 3 criteria ... (remedy: ...)"
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import KW_ONLY, dataclass, field
from types import MappingProxyType
from typing import Any, ClassVar

import numpy as np

from .status import Claim, Reach, Status, Verdict, as_status

__all__ = ["Outcome", "SolverResult", "finish_history", "status_summary"]

#: An empty, read-only mapping: the ``checks`` or ``history`` of an outcome that has none.
EMPTY: Mapping[str, Any] = MappingProxyType({})


class Outcome:
    """The base of every public outcome type: ``status``, ``message``, ``checks``, ``history``.

    Not a dataclass itself: each subclass (a frozen dataclass) provides the four
    attributes as fields or as properties computed from its own fields, so the
    constructors, ``dataclasses.asdict`` and the files written are those of the subclass.
    A subclass that lacks one of them is refused when it is defined (``TypeError``).

    Attributes
    ----------
    status : Status, Verdict, Claim or Reach
        Whether the outcome can be used. A :class:`~wflow.status.Status` for the solvers,
        the studies and the main job; the word of its own output for a published verdict
        (:class:`~wflow.status.Claim`, e.g. ``"reproduced"``) and a reachability target
        (:class:`~wflow.status.Reach`, ``"reached"``), each of which maps to a
        :class:`Status` (:attr:`run_status`). Every one is a string enum: it compares
        equal to the string written in ``summary.json``.
    message : str
        Why not (empty when nothing is wrong).
    checks : mapping
        The checks behind ``status``: ``name → {value, tolerance, passed, rule}``
        (:meth:`wflow.status.Check.as_dict`; empty where there are none).
    history : mapping
        Series recorded along the computation (time first; empty where there are none).
    """

    __slots__ = ()

    #: The attributes every outcome provides (checked on each subclass).
    FIELDS: ClassVar[tuple[str, ...]] = ("status", "message", "checks", "history")

    def __init_subclass__(cls, **kwargs: Any) -> None:
        """Refuse a subclass that provides neither a field nor an attribute per name."""
        super().__init_subclass__(**kwargs)
        ann: set[str] = set()
        for k in cls.__mro__[:cls.__mro__.index(Outcome)]:
            ann.update(k.__dict__.get("__annotations__", {}))
        missing = [n for n in cls.FIELDS if n not in ann and not hasattr(cls, n)]
        if missing:
            raise TypeError(f"{cls.__name__}: an Outcome provides {', '.join(cls.FIELDS)}; "
                            f"missing {', '.join(missing)}")

    # provided by each subclass (fields or properties); annotations only, no class
    # attributes (a dataclass subclass would read them as defaults)
    status: Status | Verdict | Claim | Reach
    message: str
    checks: Mapping[str, Any]
    history: Mapping[str, Any]

    @property
    def run_status(self) -> Status:
        """``status`` as a :class:`~wflow.status.Status` (:func:`~wflow.status.as_status`)."""
        return as_status(self.status)

    @property
    def usable(self) -> bool:
        """Whether the outcome's numbers can be used (``run_status.usable``)."""
        return self.run_status.usable

    def failed_checks(self) -> list[str]:
        """Names of the checks that did not pass, in order."""
        return [name for name, c in self.checks.items()
                if isinstance(c, Mapping) and c.get("passed") is False]

    def explain(self) -> str:
        """One line: the status, the message (or the status' own sentence), the remedy."""
        return self.run_status.explain(self.message)


@dataclass(frozen=True)
class SolverResult(Outcome):
    """Fields every solver's result carries (an :class:`Outcome`).

    ``status``, ``message`` and ``options`` are positional; the rest are keyword-only
    (each solver adds its own fields between them).

    Attributes
    ----------
    status : Status
        Whether the numbers can be used (:class:`wflow.status.Status`; compares equal to
        its string, e.g. ``"success"``).
    message : str
        Why not (empty on success); the remedy is ``status.remedy``.
    options : Any
        The options the run used (:class:`~wflow.particles.ParticleOptions`,
        :class:`~wflow.pde.PDEOptions`, :class:`~wflow.jko.JKOOptions`; the Gaussian
        moment ODE: a dict of :func:`~wflow.gaussian.integrate_moments`' arguments).
    history : dict of arrays
        Diagnostics at the recorded times (time is the first axis, after the path axis of
        the particles: ``(P, K)``).
    checks : dict
        The a-posteriori accuracy checks behind ``status`` (name → value, tolerance,
        passed, rule; :meth:`wflow.status.Check.as_dict`). Empty where the solver has none
        (the Gaussian moment ODE, a PDE run without the running balance).
    stats : dict
        Work and timing counters (steps, evaluations, ...).
    engine : str
        The loop that ran: ``"python"`` or ``"compiled"`` (particles), ``"python"`` (the
        PDE and the JKO), ``"scipy"`` (the Gaussian moment ODE, ``solve_ivp``).
    wall_time : float
        Seconds of the time loop.
    order : int or None
        Order of accuracy in the step of the time discretisation: the integrator's order
        in ``dt`` (particles, PDE), ``1`` in ``τ`` (JKO); ``None`` for an adaptive,
        tolerance-controlled integration (the Gaussian moment ODE).
    """

    status: Status
    message: str
    options: Any
    _: KW_ONLY
    history: dict[str, Any] = field(default_factory=dict)
    checks: dict[str, Any] = field(default_factory=dict)
    stats: dict[str, Any] = field(default_factory=dict)
    engine: str = "python"
    wall_time: float = 0.0
    order: int | None = None

    def __post_init__(self) -> None:
        """Read ``status`` as a :class:`Status` (a string naming one is accepted)."""
        if not isinstance(self.status, Status):
            object.__setattr__(self, "status", Status(self.status))

    @property
    def success(self) -> bool:
        """``status == Status.SUCCESS``."""
        return self.status == Status.SUCCESS

    def status_summary(self) -> dict[str, Any]:
        """:func:`status_summary` of this result."""
        return status_summary(self)


def status_summary(res: Outcome) -> dict[str, Any]:
    """JSON-ready status block of any solver's result (of any :class:`Outcome`).

    Returns
    -------
    dict
        ``{"status": str, "message": str, "remedy": str, "checks": dict}``: the status as
        its string, the run's message (or the status' own sentence when the run gave
        none and the status is not a success), what to do about it
        (:attr:`Status.remedy`, empty on success) and the accuracy checks.
    """
    status = as_status(res.status)
    message = res.message or ("" if status.usable else status.message)
    return {"status": status.value, "message": message, "remedy": status.remedy,
            "checks": dict(res.checks)}


def finish_history(rows: Mapping[str, Sequence[Any]], status: Status | str,
                   message: str) -> tuple[dict[str, np.ndarray], np.ndarray, Status, str]:
    """End of a solver's run loop: recorded rows as arrays, and the final status.

    Returns ``(history, t, status, message)``: ``history`` holds every row but ``"t"`` as
    an array, ``t`` the recorded times. A non-finite value in any column turns a status
    other than ``FAILED`` into ``FAILED`` with a message naming the column: a run never
    reports success (or a softer status) with NaN/Inf in its diagnostics.
    """
    status = Status(status)
    history = {k: np.asarray(v) for k, v in rows.items() if k != "t"}
    t = np.asarray(rows.get("t", []), dtype=np.float64)
    for name, arr in history.items():
        if status != Status.FAILED and not np.all(np.isfinite(arr)):
            status, message = Status.FAILED, f"non-finite values in diagnostic {name!r}"
    return history, t, status, message
