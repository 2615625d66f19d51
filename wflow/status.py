"""Run statuses and the a-posteriori accuracy checks behind them (every solver).

A run's ``status`` says whether its numbers can be used, its ``message`` why not. It is
one :class:`Status` member (a :class:`~enum.StrEnum`, like diffrax's ``RESULTS``): it
compares equal to its string (``res.status == "success"`` keeps working, JSON writes the
string) and carries a sentence (:attr:`Status.message`) and what to do about it
(:attr:`Status.remedy`). Least to most severe (:func:`worst_status`):

``Status.SUCCESS`` (``"success"``)
    Every number finite and every accuracy check within its tolerance.
``Status.COMPLETED`` (``"completed"``)
    The final time was reached with finite numbers, but no a-posteriori accuracy check
    was judged, hence a word of its own: the Gaussian moment ODE (within ``solve_ivp``'s
    tolerances; it has no such check), and a particle or JKO run whose every check is
    recorded but not judged (:func:`unjudged_status`: token diffusion where the Itô
    balance is not recorded, a mask, ...; the message says why).
``Status.BLOWUP`` (``"blowup"``)
    Gaussian moment ODE: stopped at the covariance blow-up event (a terminating event,
    like diffrax's ``event_occurred``); the numbers hold up to the event time.
``Status.INACCURATE`` (``"inaccurate"``)
    Finite numbers, but an accuracy check failed: they do not approximate the flow
    (the message names the residual, its value and the tolerance). The file jobs still
    write the outputs, so that they can be inspected.
``Status.NOT_CONVERGED`` (``"not_converged"``)
    JKO: an inner solve missed its optimality-gap tolerance (the sequence is complete).
``Status.LOCKED`` (``"locked"``)
    JKO: every step left the measure where it was although the slope was not zero (the
    step is too small for the mesh, see :mod:`wflow.jko.solver`).
``Status.MAX_STEPS`` (``"max_steps"``)
    PDE: the step budget ran out before ``T``.
``Status.FAILED`` (``"failed"``)
    Non-finite values or a breakdown; the file jobs write nothing.

The accuracy check of a time-dependent run is the **chain-rule residual**
``chain = ΔE − ∫∂_tE − ∫power − Itô − M`` (:class:`~wflow.diagnostics.BalanceAccumulator`).
The chain rule ``dE/dt = ∂_tE + ∫<∇ψ, v> dμ`` holds along every exact solution of every
flow (gradient or not), so the residual measures the discretisation error alone. It is
judged relative to the energy budget of the run::

    rel_chain = |chain| / max(∫(|power| + |∂_tE| + |Itô|) dt, √eps · max_t |E|)

(``∫|power| dt`` for static heads; the floor keeps a run that does not move at round-off
level), against the tolerance :func:`chain_tolerance` ``= 0.1^q`` of the scheme's
*balance order* ``q = min(time order, space order, 2)`` — the balance is summed with
the trapezoidal rule, second order whatever the integrator. Where it comes from: with a
step ``Δt`` against the fastest rate ``L`` of the flow (``|Dv|``), one explicit Euler
step leaves ``½Δt²<∇ψ, Dv·v>`` of the energy unaccounted, summed ``≈ ½ Δt L ∫|power|``;
the trapezoidal quadrature of a higher-order solution leaves ``(Δt L)²/12``. ``0.1^q``
is therefore the residual of a run that resolves its fastest rate to ``Δt L ≈ 0.2``
(order 1) resp. ``≈ 0.35`` (order ≥ 2); beyond it the numbers describe the step, not the
flow. Measured margins are in the README (section "Statuses").

The JKO scheme has its own residual (:data:`JKO_EDI_RTOL`): the summed discrete EDI
residual relative to the dissipation, first order in ``τ``.
"""

from __future__ import annotations

import logging
import math
import warnings
from collections.abc import Mapping
from enum import StrEnum
from typing import Any, NamedTuple

import numpy as np

from .attention.kinds import get_kind

__all__ = [
    "Status",
    "STATUSES",
    "CHAIN_THETA",
    "JKO_EDI_RTOL",
    "Check",
    "balance_order",
    "budget_integral",
    "chain_tolerance",
    "chain_check",
    "judge_steps",
    "relative_check",
    "worst_status",
    "edi_kind",
    "Verdict",
    "VERDICTS",
    "Claim",
    "Reach",
    "as_status",
    "failed_run",
    "unjudged_status",
]

def _member(cls: type, value: str, **attrs: Any) -> Any:
    """A string-enum member ``value`` carrying ``attrs`` (the ``__new__`` of the enums below)."""
    obj = str.__new__(cls, value)
    obj._value_ = value
    for name, attr in attrs.items():
        setattr(obj, name, attr)
    return obj


class Status(StrEnum):
    """The status of a run: one type for every solver, least to most severe.

    A :class:`~enum.StrEnum`: a member *is* its string (``Status.SUCCESS == "success"``,
    ``json.dumps`` writes ``"success"``, ``f"{status}"`` formats as ``success``). Each
    member carries :attr:`message` (what the status says about the numbers) and
    :attr:`remedy` (what to do; empty where nothing is to be done). :attr:`usable` is
    ``True`` where the numbers approximate the model (``SUCCESS``, ``COMPLETED``,
    ``BLOWUP``). Severity is the order of definition (:attr:`severity`,
    :func:`worst_status`).

    Examples
    --------
    >>> Status("inaccurate") is Status.INACCURATE
    True
    >>> Status.MAX_STEPS.remedy
    'raise pde.max_steps, or dt (pde.dt is the largest step the controller takes)'
    """

    message: str
    remedy: str
    usable: bool

    def __new__(cls, value: str, message: str, remedy: str, usable: bool) -> Status:
        """A member from ``(value, message, remedy, usable)``."""
        return _member(cls, value, message=message, remedy=remedy, usable=usable)

    SUCCESS = ("success",
               "every number is finite and every accuracy check is within its tolerance",
               "", True)
    COMPLETED = ("completed",
                 "the run reached the final time with finite numbers, but no a-posteriori "
                 "accuracy check was judged (the Gaussian moment ODE has none; a particle or "
                 "JKO run's checks were recorded, not judged: the message says why)",
                 "", True)
    BLOWUP = ("blowup",
              "the Gaussian moment ODE stopped at the covariance blow-up event; the numbers "
              "hold up to the event time and t* is extrapolated from the Riccati asymptotics",
              "nothing for a true blow-up; for a sharper t* lower rtol or raise blowup_factor",
              True)
    INACCURATE = ("inaccurate",
                  "the numbers are finite, but an accuracy check (chain-rule or EDI "
                  "residual) exceeds its tolerance: they do not approximate the flow",
                  "lower dt (particles: or use a higher-order integrator); PDE: lower dt "
                  "or refine the mesh; JKO: lower jko.tau or refine the mesh", False)
    NOT_CONVERGED = ("not_converged",
                     "JKO: an inner solve missed its optimality-gap tolerance (the sequence "
                     "is complete)",
                     "raise jko.max_inner (or jko.ccp_max), or use inner = 'gcg'", False)
    LOCKED = ("locked",
              "JKO: every step left the measure where it was although the slope was not "
              "zero: the step is too short for the mesh",
              "raise jko.tau to >~ 3h/|v|_max, use scheme = 'fv', or refine the mesh", False)
    MAX_STEPS = ("max_steps",
                 "PDE: the step budget ran out before the final time",
                 "raise pde.max_steps, or dt (pde.dt is the largest step the controller "
                 "takes)", False)
    INCONCLUSIVE = ("inconclusive",
                    "a study's verdict (wflow verify, wflow reproduce) could not decide: an "
                    "interval straddles the tolerance, or a negative control did not fail; "
                    "particles with token diffusion and rtol/atol: the weak-error estimate's "
                    "interval straddles the tolerance",
                    "run the full study (without --quick), more paths or seeds; particles: "
                    "more tokens (the message names how many); the message is the verdict",
                    False)
    FAILED = ("failed",
              "non-finite values or a breakdown (conservation, positivity, the integrator)",
              "lower dt and check the inputs (initial state, weights, tolerances); the "
              "message names the first non-finite quantity", False)

    @property
    def severity(self) -> int:
        """Rank in :data:`STATUSES` (0 = ``SUCCESS``, the largest = ``FAILED``)."""
        return _SEVERITY[self]

    def explain(self, message: str = "") -> str:
        """One line: the status, the run's ``message`` (or :attr:`message`), the remedy."""
        line = f"{self.value}: {message or self.message}"
        return f"{line} (remedy: {self.remedy})" if self.remedy else line


#: Every status, least to most severe (:func:`worst_status` combines them).
STATUSES = tuple(Status)
_SEVERITY = {s: i for i, s in enumerate(STATUSES)}


class Verdict(StrEnum):
    """The judgement of a criterion or a study: the one verdict vocabulary of wflow.

    A :class:`~enum.StrEnum` beside :class:`Status`: a member *is* the word written in
    ``summary.json`` and the reports (``Verdict.PASS == "PASS"``), so outputs read the
    same as before the enum; code compares members, never strings. Each member carries
    :attr:`status` (the :class:`Status` of an outcome judged so: a study's
    ``summary.json``, :data:`wflow.studies.base.VERDICT_STATUS`), :attr:`passed` (the
    criterion holds or is not judged) and :attr:`meaning` (one line, for reports).

    ``PASS``, ``WARN``, ``INCONCLUSIVE``, ``FAIL`` are judgements; ``REPORTED``,
    ``NOT_APPLICABLE`` and ``EXPECTED_DEFECT`` mark rows of the main job's verdict table
    that are shown but not judged. The spellings of other outputs are enums whose members
    name their verdict: :class:`Claim` (a published claim: ``"reproduced"``) and
    :class:`Reach` (a Gaussian reachability target: ``"reached"``).

    Examples
    --------
    >>> Verdict("FAIL") is Verdict.FAIL
    True
    >>> Verdict.INCONCLUSIVE.status
    <Status.INCONCLUSIVE: 'inconclusive'>
    >>> Verdict.of(False)
    <Verdict.FAIL: 'FAIL'>
    """

    status: Status
    passed: bool
    meaning: str

    def __new__(cls, value: str, status: Status, passed: bool, meaning: str) -> Verdict:
        """A member from ``(value, status, passed, meaning)``."""
        return _member(cls, value, status=status, passed=passed, meaning=meaning)

    PASS = ("PASS", Status.SUCCESS, True, "the criterion holds")
    WARN = ("WARN", Status.SUCCESS, True,
            "a criterion missed on too little evidence to judge (the main job: a fitted "
            "order through fewer than three levels; some locked JKO steps)")
    INCONCLUSIVE = ("INCONCLUSIVE", Status.INCONCLUSIVE, False,
                    "the evidence cannot decide: an interval straddles the tolerance, or a "
                    "negative control did not fail")
    FAIL = ("FAIL", Status.FAILED, False, "the criterion does not hold")
    REPORTED = ("reported", Status.SUCCESS, True, "a number shown, not judged")
    NOT_APPLICABLE = ("n/a", Status.SUCCESS, True,
                      "the criterion does not apply to this run (e.g. an undefined EDI)")
    EXPECTED_DEFECT = ("defect (expected)", Status.SUCCESS, True,
                       "a property of the model, not an error of the solver (the EDI defect "
                       "of a flow that is not a gradient flow)")

    @classmethod
    def of(cls, passed: bool, *, judged: bool = True) -> Verdict:
        """``PASS`` if ``passed``, else ``FAIL`` (``WARN`` when not ``judged``)."""
        if passed:
            return cls.PASS
        return cls.FAIL if judged else cls.WARN


#: The judgements (not the unjudged markers) of :class:`Verdict`, best to worst.
VERDICTS = (Verdict.PASS, Verdict.WARN, Verdict.INCONCLUSIVE, Verdict.FAIL)


class Claim(StrEnum):
    """The verdict on a published claim (``wflow reproduce``, :mod:`wflow.published`).

    The words written in ``summary.json`` (``Claim.REPRODUCED == "reproduced"``); each
    member names its :class:`Verdict` (:attr:`verdict`), hence its :attr:`status`.

    Examples
    --------
    >>> Claim("not reproduced").verdict
    <Verdict.FAIL: 'FAIL'>
    """

    verdict: Verdict

    def __new__(cls, value: str, verdict: Verdict) -> Claim:
        """A member from ``(value, verdict)``."""
        return _member(cls, value, verdict=verdict)

    REPRODUCED = ("reproduced", Verdict.PASS)
    INCONCLUSIVE = ("inconclusive", Verdict.INCONCLUSIVE)
    NOT_REPRODUCED = ("not reproduced", Verdict.FAIL)

    @property
    def status(self) -> Status:
        """The :class:`Status` of a study with this verdict (``verdict.status``)."""
        return self.verdict.status

    @property
    def passed(self) -> bool:
        """``True`` for :attr:`REPRODUCED` only."""
        return self.verdict.passed


class Reach(StrEnum):
    """Whether controls reached a Gaussian target (:func:`wflow.gaussian.reach`).

    ``Reach.REACHED == "reached"``; :attr:`status` is the :class:`Status` the ``wflow
    gaussian`` job writes for it (a missed target: ``INACCURATE``), :attr:`verdict` its
    :class:`Verdict`.
    """

    status: Status
    verdict: Verdict

    def __new__(cls, value: str, status: Status, verdict: Verdict) -> Reach:
        """A member from ``(value, status, verdict)``."""
        return _member(cls, value, status=status, verdict=verdict)

    REACHED = ("reached", Status.SUCCESS, Verdict.PASS)
    MISSED = ("missed", Status.INACCURATE, Verdict.FAIL)

    @property
    def passed(self) -> bool:
        """``True`` for :attr:`REACHED`."""
        return self.verdict.passed


def as_status(value: Status | Verdict | Claim | Reach | str) -> Status:
    """The :class:`Status` of an outcome's ``status``: itself, or what a word maps to.

    A :class:`Status` (or its string) is returned as a :class:`Status`; a
    :class:`Verdict`, :class:`Claim` or :class:`Reach` member gives its ``status``.

    Raises
    ------
    ValueError
        For a string that names no status.
    """
    if isinstance(value, (Verdict, Claim, Reach)):
        return value.status
    return Status(value)

#: Resolved-step parameter of the chain-rule tolerance ``CHAIN_THETA ** q``.
CHAIN_THETA = 0.1

#: Tolerance of the JKO scheme's summed EDI residual relative to its dissipation
#: (first order in τ: ``CHAIN_THETA ** 1``).
JKO_EDI_RTOL = CHAIN_THETA


class Check(NamedTuple):
    """One accuracy check: a relative residual against its tolerance.

    Attributes
    ----------
    name : str
        What is checked (``"chain"``, ``"jko_edi"``, ...).
    value : float
        The relative residual (worst path for several Monte-Carlo paths).
    tolerance : float
    passed : bool
        ``value <= tolerance``.
    rule : str
        How the value and the tolerance are defined (one line, for reports).
    order : int or None
        Balance order ``q`` behind the tolerance (chain-rule checks).
    scheme : str
        The scheme and step the check judged (e.g. ``"rk4, dt = 0.1"``).
    """

    name: str
    value: float
    tolerance: float
    passed: bool
    rule: str
    order: int | None = None
    scheme: str = ""

    def as_dict(self) -> dict[str, Any]:
        """JSON-ready form."""
        return {"value": self.value, "tolerance": self.tolerance, "passed": self.passed,
                "rule": self.rule, "order": self.order, "scheme": self.scheme}

    def failure(self) -> str:
        """The sentence a ``Status.INACCURATE`` status carries."""
        return (f"{self.name} residual {self.value:.3g} exceeds its tolerance "
                f"{self.tolerance:.3g} ({self.rule})")


def balance_order(time_order: int, space_order: int | None = None) -> int:
    """Order ``q`` of the chain-rule residual: ``min(time order, space order, 2)``.

    The balance integrals are trapezoid sums (second order), so a fourth-order
    integrator still shows a second-order residual.
    """
    q = min(int(time_order), 2)
    return q if space_order is None else min(q, int(space_order))


def chain_tolerance(order: int) -> float:
    """Tolerance ``CHAIN_THETA ** order`` of the relative chain-rule residual."""
    return float(f"{CHAIN_THETA ** max(1, int(order)):.12g}")


def relative_check(name: str, residual: np.ndarray | float, scale: np.ndarray | float,
                   energy_scale: np.ndarray | float, *, tolerance: float, rule: str) -> Check:
    """``|residual| / max(scale, √eps · energy_scale)`` against ``tolerance`` (worst path).

    The floor at ``√eps · max_t |E|`` keeps a run whose budget vanishes (nothing moves)
    at round-off level instead of dividing by zero.
    """
    res = np.atleast_1d(np.asarray(residual, dtype=np.float64))
    floor = math.sqrt(np.finfo(float).eps) * np.abs(
        np.atleast_1d(np.asarray(energy_scale, dtype=np.float64)))
    sc = np.maximum(np.atleast_1d(np.asarray(scale, dtype=np.float64)), floor)
    rel = np.abs(res) / np.where(sc > 0, sc, np.finfo(float).tiny)
    worst = float(np.max(rel))
    if rel.size > 1:
        rule = f"{rule}; worst of {rel.size} paths"
    return Check(name, worst, float(tolerance), bool(worst <= tolerance), rule)


def chain_check(chain: np.ndarray | float, budget: np.ndarray | float,
                energy_scale: np.ndarray | float, *, order: int, scheme: str) -> Check:
    """Judge the chain-rule residual of one run (per path for several paths).

    Parameters
    ----------
    chain : float or (P,) array
        Chain-rule residuals ``ΔE − ∫∂_tE − ∫power − Itô − M`` (per path).
    budget : float or (P,) array
        ``∫(|power| + |∂_tE| + |Itô|) dt`` of the same paths (:func:`budget_integral`).
    energy_scale : float or (P,) array
        ``max_t |E|`` (floor of the budget at ``√eps`` of it).
    order : int
        Balance order :func:`balance_order` of the scheme.
    scheme : str
        Named in the rule (e.g. ``"rk4, dt = 0.1"``).

    Returns
    -------
    Check
        ``value`` is the worst path's relative residual.
    """
    rule = (f"|chain| / ∫(|power| + |∂_tE| + |Itô|) dt; tolerance 0.1^{order} for balance "
            f"order {order} ({scheme})")
    return relative_check("chain-rule", chain, budget, energy_scale,
                          tolerance=chain_tolerance(order), rule=rule)._replace(
                              order=int(order), scheme=scheme)


def judge_steps(t: np.ndarray, steps: Mapping[str, np.ndarray], chain: np.ndarray | float, *,
                order: int, scheme: str) -> Check:
    """:func:`chain_check` from a run's per-step integrands (the last axis is time).

    ``steps`` holds ``power``, ``dEdt_w``, ``ito`` and ``E`` at the times ``t`` (shape
    ``(S+1,)`` or ``(P, S+1)`` for ``P`` paths); the budget is their trapezoid integral.
    """
    budget = budget_integral(t, steps["power"], steps["dEdt_w"], steps["ito"])
    scale = np.max(np.abs(np.asarray(steps["E"], dtype=np.float64)), axis=-1)
    return chain_check(chain, budget, scale, order=order, scheme=scheme)


def budget_integral(t: np.ndarray, *integrands: np.ndarray) -> np.ndarray:
    """``∫ Σ|f| dt`` by the trapezoidal rule along the last axis (the budget of a run)."""
    t = np.asarray(t, dtype=np.float64)
    f = sum(np.abs(np.asarray(g, dtype=np.float64)) for g in integrands)
    if t.size < 2:
        return np.zeros(np.shape(f)[:-1])
    return np.sum(0.5 * np.diff(t) * (f[..., 1:] + f[..., :-1]), axis=-1)


def worst_status(*statuses: Status | str) -> Status:
    """The most severe of ``statuses`` (order :data:`STATUSES`; ``SUCCESS`` for none).

    Strings are read as :class:`Status` (``"failed"`` is ``Status.FAILED``).

    Raises
    ------
    ValueError
        For a string that names no status.
    """
    return max((Status(s) for s in statuses), key=_SEVERITY.__getitem__,
               default=Status.SUCCESS)


def failed_run(exc: BaseException, what: str, log: logging.Logger,
               category: type[Warning] | None = None) -> tuple[Status, str]:
    """The status and message of a run that ``exc`` stopped, reported once.

    Logged as an error on the solver's ``log`` (``"<what> run failed: <exc>"``) and, with
    a ``category``, warned with the same text, attributed to the caller of the solver
    (as its own ``warnings.warn(..., stacklevel=2)``).

    Returns
    -------
    tuple
        ``(Status.FAILED, str(exc))``.
    """
    log.error("%s run failed: %s", what, exc)
    if category is not None:
        warnings.warn(f"{what} run failed: {exc}", category, stacklevel=3)
    return Status.FAILED, str(exc)


def edi_kind(heads: Any, attn_kind: str, flow: str) -> str:
    """What the EDI residual of a run means (docs/theory.md §3), from the heads at ``t = 0``.

    * ``"identity"`` — an exact (weighted) gradient flow: ``flow = "surrogate"``, or the
      transformer flow with USA/ReLU heads, one softmax head, or softmax heads with equal
      ``A_h`` (one normaliser). The EDI holds with equality; its residual is a
      discretisation error.
    * ``"defect"`` — the transformer flow with several *different* softmax heads: not a
      gradient flow of ``E``; the residual is the model's EDI defect (it does not vanish
      under refinement), and the accuracy check is the chain-rule residual.
    * ``"undefined"`` — heads that are not symmetric and value-aligned (``V_h = ±A_h``)
      define no gradient-flow direction.
    """
    sign = heads.value_alignment() if heads.is_symmetric() else 0
    if sign == 0:
        return "undefined"
    A = np.asarray(heads.A)
    one_normaliser = heads.H == 1 or bool(np.allclose(A, A[:1], rtol=1e-12, atol=0.0))
    if flow == "surrogate" or not get_kind(attn_kind).normalised or one_normaliser:
        return "identity"
    return "defect"


def unjudged_status(status: Status | str, message: str, checks: Mapping[str, Any], *,
                    remedy: str = "") -> tuple[Status, str]:
    """``COMPLETED`` for a ``SUCCESS`` that no accuracy check backs; else unchanged.

    ``success`` means "every accuracy check within its tolerance": a run whose checks
    are all recorded but not judged (each a dict with ``judged: False`` and its
    ``reason``) has no such check, and ends ``completed``, its message naming every
    reason. A check without a ``judged`` key is judged; non-dict entries (counters) are
    not checks. A run without any check dict, or any other status, is returned as is.

    Parameters
    ----------
    status, message
        The run's verdict so far.
    checks : mapping
        The run's ``checks`` (name -> dict or counter).
    remedy : str
        How to have the run judged (appended to the message).

    Returns
    -------
    tuple
        ``(status, message)``.
    """
    status = Status(status)
    found = {k: c for k, c in checks.items() if isinstance(c, Mapping)}
    if status != Status.SUCCESS or not found or any(
            c.get("judged", True) for c in found.values()):
        return status, message
    why = "; ".join(f"{k}: {c.get('reason', 'not judged')}" for k, c in found.items())
    tail = f"; {remedy}" if remedy else ""
    return Status.COMPLETED, f"no accuracy check was judged ({why}){tail}"
