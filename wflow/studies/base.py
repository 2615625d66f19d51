"""Shared pieces of the verification studies: result type, criteria, fits, output writing.

A study is a module ``wflow.studies.<name>`` exposing
``run(*, out: Path, quick: bool, seed: int, fault: str | None = None) -> StudyResult``;
it computes, fits the quantities the theory predicts, compares them with the prediction
through named :class:`Criterion` objects (the *verdict*), and writes ``summary.json`` and
a plot into ``out`` (atomically).

Negative controls
-----------------
Every study declares ``FAULTS: dict[str, str]`` — the known faults it can inject through
its public ``run(fault=NAME)`` (a frozen solver, a wrong ``β``, a flipped value sign, a
biased integrator, a missing Itô term, doubled time, ...), each with what it does. A
faulted run must FAIL, naming the criterion that catches it; the test suite asserts it.
``summary.json`` records the criteria (value, accepted range, verdict), the fault
injected (``null`` for a plain run) and the descriptions of all negative controls. A
study names its tables once, in a :class:`NegativeControls` (``CONTROLS``), which reads a
run's ``fault`` and closes its verdict.

Parametrised faults
-------------------
A study may also declare ``FAMILIES: dict[str, str]``: fault families with a size ``s``,
injected as ``fault="FAMILY:S"`` (``"velocity:-0.05"``: the velocity scaled by
``1 − 0.05``). The documented controls of ``FAULTS`` may themselves be instances
(``"velocity:-0.5"``); ``bench/size_power.py`` scans ``s`` for the smallest size each
criterion catches (the study's *power*, docs/studies_power.md).

A study never raises on a wrong solver
--------------------------------------
:func:`never_raise` wraps a study's ``run`` (the registry installs it on every study it
loads: ``wflow verify`` and :func:`wflow.studies.registry.load_study`): the run executes
under ``np.errstate(over, invalid, divide = "raise")`` (an overflowing or non-finite
intermediate is an error, on the command line as in the test suite), and any exception
raised inside it — a ``FloatingPointError`` of a blown-up or mass-losing solver, a refusal
of :mod:`wflow.infra.guards` before a POT/SciPy call, a fit without enough finite points, a
``LinAlgError`` — becomes a FAIL of one named criterion (:func:`failed_criterion`:
``run_finite`` for non-finite/overflowing values, ``mass_conserved`` for a conservation
failure, ``run_completed`` otherwise) whose text carries the reason, written to
``summary.json`` like any verdict. Usage errors are refused before the run (an unknown
fault or part: ``ValueError``); the machine's errors (``MemoryError``, ``OSError``:
memory, disk) are no verdict on the solver and propagate.

Precision
---------
A study that can run its solvers in float32 declares ``DTYPES`` (``("float64",
"float32")``) and takes ``run(..., dtype=...)`` (``wflow verify STUDY --dtype float32``);
a study without ``DTYPES`` runs in float64 alone and refuses another precision before it
runs (:func:`check_dtype`). A fault that only a float32 run can show is named in the
study's ``FAULT_DTYPES`` (fault → the precision it needs). Every ``summary.json`` records
its ``dtype`` at the top level (``"float64"`` by default).

Seed-independent studies
------------------------
A study whose criteria cannot depend on the seed (deterministic inputs up to a rotation)
declares ``SEED_INDEPENDENT = True`` and says so in its verdict; running it at several
seeds repeats one test (the test suite and the size script run it once).
"""

from __future__ import annotations

import functools
import logging
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from ..infra.io import check_finite, run_directory, write_json
from ..infra.parallel import comm_rank_size
from ..kernels.validation import DTYPES
from ..results import EMPTY, Outcome
from ..status import Claim, Status, Verdict

__all__ = ["StudyResult", "Criterion", "judge", "verdict", "conclude", "check_fault",
           "parse_fault", "fault_description", "criteria_summary", "fit_loglog",
           "LogLogFit", "write_study", "SEED_NOTE", "never_raise", "failed_criterion",
           "VERDICT_STATUS", "study_status", "decide", "StudyOutcome", "NegativeControls",
           "check_dtype", "DEFAULT_DTYPE"]

logger = logging.getLogger(__name__)

#: The precision of a study that declares no ``DTYPES`` (and every study's default).
DEFAULT_DTYPE = "float64"

#: The sentence a seed-independent study appends to its verdict.
SEED_NOTE = ("The criteria do not depend on the seed (it only rotates the inputs or draws "
             "reported, unjudged samples): every seed repeats one test.")


@dataclass(frozen=True)
class StudyResult(Outcome):
    """Outcome of one study (an :class:`~wflow.results.Outcome`).

    Attributes
    ----------
    name : str
        Study name (as in ``wflow verify <name>``).
    summary : dict
        Fitted quantities, raw series and settings (written to ``summary.json``).
    verdict : str
        One or two sentences comparing the fit with the theory.
    passed : bool
        Whether the fit agrees with the theory within the stated tolerance.
    figures : tuple of str
        Paths of the plots written.
    decision : Verdict
        ``PASS``, ``INCONCLUSIVE`` or ``FAIL`` (:func:`decide`; computed).
    status : Status
        ``decision.status`` (:data:`VERDICT_STATUS`; computed).
    message : str
        ``""`` when passed, else the verdict (computed).
    checks : dict
        The checks of ``summary.json`` (:func:`study_status`; computed).
    history : mapping
        Empty: a study's series are in ``summary``.
    """

    name: str
    summary: dict[str, Any]
    verdict: str
    passed: bool
    figures: tuple[str, ...] = field(default_factory=tuple)

    @property
    def decision(self) -> Verdict:
        """The verdict word: :func:`decide` of ``passed`` and the verdict's sentence."""
        return decide(self.passed, self.verdict)

    @property
    def status(self) -> Status:
        """``decision.status``: ``SUCCESS``, ``INCONCLUSIVE`` or ``FAILED``."""
        return self.decision.status

    @property
    def message(self) -> str:
        """``""`` when the study passed, else its verdict."""
        return "" if self.passed else self.verdict

    @property
    def checks(self) -> dict[str, Any]:
        """The checks written to ``summary.json`` (:func:`study_status`)."""
        return study_status(self)[2]

    @property
    def history(self) -> Mapping[str, Any]:
        """Empty (the series of a study are in :attr:`summary`)."""
        return EMPTY


class StudyOutcome(Outcome):
    """An :class:`~wflow.results.Outcome` that is its ``study``'s (a :class:`StudyResult`).

    The base of a result that carries a study beside its own data
    (:class:`~wflow.apps.reproduce.ReproduceResult`): ``status``, ``message`` and
    ``checks`` are the study's, ``history`` is empty.
    """

    __slots__ = ()

    study: StudyResult

    @property
    def status(self) -> Status:
        """The study's status."""
        return self.study.status

    @property
    def message(self) -> str:
        """The study's message (``""`` when it passed)."""
        return self.study.message

    @property
    def checks(self) -> dict[str, Any]:
        """The study's checks."""
        return self.study.checks

    @property
    def history(self) -> Mapping[str, Any]:
        """Empty (a study's series are in its summary)."""
        return EMPTY


@dataclass(frozen=True)
class Criterion:
    """One pass criterion of a verdict: a measured ``value`` and its accepted range.

    The criterion holds iff ``value`` is finite and ``lo <= value <= hi`` (a missing bound
    is open). ``what`` says what the number is; ``why`` where the range comes from.
    """

    name: str
    value: float
    lo: float | None = None
    hi: float | None = None
    what: str = ""
    why: str = ""

    @property
    def ok(self) -> bool:
        """Whether the value lies in the accepted range (NaN never does)."""
        v = float(self.value)
        if not np.isfinite(v):
            return False
        return (self.lo is None or v >= self.lo) and (self.hi is None or v <= self.hi)

    def accepted(self) -> str:
        """The accepted range in words (``≤ 0.1``, ``≥ 3``, ``in [0.6, 1.4]``)."""
        if self.lo is not None and self.hi is not None:
            return f"in [{self.lo:.3g}, {self.hi:.3g}]"
        if self.hi is not None:
            return f"≤ {self.hi:.3g}"
        if self.lo is not None:
            return f"≥ {self.lo:.3g}"
        return "finite"

    def text(self) -> str:
        """``name: what = value (accept ...)``."""
        what = f"{self.what} = " if self.what else ""
        return f"{self.name}: {what}{float(self.value):.3g} (accept {self.accepted()})"

    def as_dict(self) -> dict[str, Any]:
        """Plain dict for JSON (``value`` NaN/Inf written as a string)."""
        v = float(self.value)
        return {"name": self.name, "value": v if np.isfinite(v) else str(v), "lo": self.lo,
                "hi": self.hi, "accepted": self.accepted(), "what": self.what,
                "why": self.why, "ok": self.ok}


#: A passing verdict lists the criteria's values up to this many (then only their names).
MAX_LISTED = 6


def judge(criteria: Sequence[Criterion]) -> tuple[bool, str]:
    """``(passed, sentence)``: every criterion holds, or the list of those that fail.

    The sentence is computed from the criteria: ``"All 3 criteria hold: ..."`` or
    ``"FAIL — 1 of 3 criteria not met: name: what = value (accept ...)."``.
    """
    if not criteria:
        raise ValueError("judge: a verdict needs at least one criterion")
    bad = [c for c in criteria if not c.ok]
    if not bad:
        if len(criteria) > MAX_LISTED:
            return True, (f"All {len(criteria)} criteria hold ("
                          + ", ".join(c.name for c in criteria) + "; values in summary.json).")
        return True, (f"All {len(criteria)} criteria hold: "
                      + "; ".join(c.text() for c in criteria) + ".")
    return False, (f"{Verdict.FAIL} — {len(bad)} of {len(criteria)} criteria not met: "
                   + "; ".join(c.text() for c in bad) + ".")


def verdict(criteria: Sequence[Criterion], details: str = "", *, fault: str | None = None,
            faults: Mapping[str, str] | None = None,
            families: Mapping[str, str] | None = None) -> tuple[bool, str]:
    """:func:`judge` followed by the study's computed ``details`` and the fault injected."""
    passed, head = judge(criteria)
    note = ""
    if fault is not None:
        desc = fault_description(fault, faults or {}, families)
        note = f" Negative control {fault!r} injected" + (f": {desc}." if desc else ".")
    return passed, head + (" " + details.strip() if details.strip() else "") + note


def conclude(criteria: Sequence[Criterion], details: str = "", *, fault: str | None,
             faults: Mapping[str, str], families: Mapping[str, str] | None = None,
             seed_independent: bool = False) -> tuple[bool, str, dict[str, Any]]:
    """``(passed, verdict, summary entries)``: :func:`verdict` + :func:`criteria_summary`.

    ``seed_independent`` appends :data:`SEED_NOTE` to the details.
    """
    if seed_independent:
        details = (details.strip() + " " + SEED_NOTE).strip()
    passed, text = verdict(criteria, details, fault=fault, faults=faults, families=families)
    entries = criteria_summary(criteria, faults, fault, families)
    entries["seed_independent"] = bool(seed_independent)
    return passed, text, entries


def parse_fault(fault: str | None, families: Mapping[str, str] | None = None
                ) -> tuple[str | None, float | None]:
    """``(family, size)`` of ``"FAMILY:S"`` with ``FAMILY`` in ``families``, else ``(fault, None)``.

    ``parse_fault("velocity:-0.05", {"velocity": ...}) == ("velocity", -0.05)``;
    a plain name (or ``None``) comes back with size ``None``.
    """
    if fault is None or ":" not in fault:
        return fault, None
    fam, _, size = fault.partition(":")
    if families is None or fam not in families:
        return fault, None
    try:
        s = float(size)
    except ValueError:
        return fault, None
    if not np.isfinite(s):
        return fault, None
    return fam, s


def fault_description(fault: str, faults: Mapping[str, str],
                      families: Mapping[str, str] | None = None) -> str:
    """The description of a documented fault, or of its family with ``s`` filled in."""
    if fault in faults:
        return faults[fault]
    fam, s = parse_fault(fault, families)
    if s is None or families is None:
        return ""
    return f"{families[fam]} (s = {s:g})"


def check_fault(study: str, fault: str | None, faults: Mapping[str, str],
                families: Mapping[str, str] | None = None) -> str | None:
    """Validate ``fault`` against a study's ``FAULTS`` and ``FAMILIES``.

    Accepted: a name of ``faults`` or ``"FAMILY:S"`` (``S`` a finite number) with
    ``FAMILY`` in ``families``; else ``ValueError`` naming the known ones.
    """
    if fault is not None and fault not in faults and parse_fault(fault, families)[1] is None:
        fam = f"; families: {sorted(families)} as FAMILY:S" if families else ""
        raise ValueError(f"{study}: unknown fault {fault!r} (negative controls: "
                         f"{sorted(faults)}{fam})")
    return fault


def read_fault(study: str, fault: str | None, faults: Mapping[str, str],
               families: Mapping[str, str] | None = None) -> tuple[str | None, float | None]:
    """A study's ``fault`` validated (:func:`check_fault`) and parsed (:func:`parse_fault`).

    Returns ``(family, size)`` for ``"FAMILY:S"``, ``(name, None)`` for a named fault and
    ``(None, None)`` without one; an unknown fault raises ``ValueError`` naming the known ones.
    """
    check_fault(study, fault, faults, families)
    return parse_fault(fault, families)


def check_dtype(study: str, dtype: str, dtypes: Sequence[str] | None = None, *,
                fault: str | None = None,
                fault_dtypes: Mapping[str, str] | None = None) -> str:
    """``dtype`` if study ``study`` runs at that precision, else ``ValueError`` saying why.

    Parameters
    ----------
    study : str
        The study's name (in the message).
    dtype : str
        The precision asked for (``wflow verify --dtype``).
    dtypes : sequence of str, optional
        The study's ``DTYPES``; ``None``: float64 alone.
    fault : str, optional
        The fault of the run: one named in ``fault_dtypes`` needs that precision.
    fault_dtypes : mapping of str to str, optional
        The study's ``FAULT_DTYPES``, fault → the precision it needs.

    Returns
    -------
    str
        ``dtype``, accepted.
    """
    if dtype not in DTYPES:
        raise ValueError(f"{dtype!r} is not a precision (known: {', '.join(DTYPES)})")
    allowed = tuple(dtypes) if dtypes is not None else (DEFAULT_DTYPE,)
    if dtype not in allowed:
        raise ValueError(f"{study} runs in {', '.join(allowed)} only, not {dtype} (the "
                         f"studies that take {dtype} declare it in their DTYPES)")
    need = (fault_dtypes or {}).get(fault) if fault is not None else None
    if need is not None and need != dtype:
        raise ValueError(f"{study}: the negative control {fault!r} needs {need} (it perturbs "
                         f"the {need} run alone), not {dtype}")
    return dtype


def criteria_summary(criteria: Sequence[Criterion], faults: Mapping[str, str],
                     fault: str | None, families: Mapping[str, str] | None = None
                     ) -> dict[str, Any]:
    """The ``summary.json`` entries every study writes: criteria, fault, negative controls."""
    fam, size = parse_fault(fault, families)
    return {"criteria": [c.as_dict() for c in criteria], "fault": fault,
            "fault_description": fault_description(fault, faults, families) if fault else None,
            "fault_family": fam if size is not None else None, "fault_size": size,
            "negative_controls": dict(faults), "fault_families": dict(families or {})}


@dataclass(frozen=True)
class NegativeControls:
    """A study's fault injection, declared once: its name, ``FAULTS`` and ``FAMILIES``.

    A study module builds one (``CONTROLS = NegativeControls(NAME, FAULTS, FAMILIES)``)
    and reads a run's ``fault`` with :meth:`read` and closes its verdict with
    :meth:`conclude`, so that its tables are named in one place.

    Attributes
    ----------
    study : str
        The study's name (``wflow verify NAME``), in the error of an unknown fault.
    faults : mapping of str to str
        The documented negative controls, name → what the fault does.
    families : mapping of str to str, optional
        The fault families ``"FAMILY:S"``, family → what a fault of size ``s`` does.
    seed_independent : bool
        The criteria do not depend on the seed: :data:`SEED_NOTE` ends the verdict.
    """

    study: str
    faults: Mapping[str, str]
    families: Mapping[str, str] | None = None
    seed_independent: bool = False

    def read(self, fault: str | None) -> tuple[str | None, float | None]:
        """``(family, size)`` of ``fault``, validated and parsed (:func:`read_fault`)."""
        return read_fault(self.study, fault, self.faults, self.families)

    def conclude(self, criteria: Sequence[Criterion], details: str, fault: str | None
                 ) -> tuple[bool, str, dict[str, Any]]:
        """``(passed, verdict, summary entries)`` of a run with ``fault`` (:func:`conclude`)."""
        return conclude(criteria, details, fault=fault, faults=self.faults,
                        families=self.families, seed_independent=self.seed_independent)


@dataclass(frozen=True)
class LogLogFit:
    """Least-squares fit ``log y = slope · log x + intercept`` with the slope's standard error.

    ``stderr`` is ``None`` for a two-point fit (no residual degrees of freedom).
    """

    slope: float
    intercept: float
    stderr: float | None

    def as_dict(self) -> dict[str, float | None]:
        """Plain dict for JSON."""
        return {"slope": self.slope, "intercept": self.intercept, "stderr": self.stderr}


def fit_loglog(x: np.ndarray, y: np.ndarray) -> LogLogFit:
    """Fit a power law ``y ≈ C x^slope`` on a log–log scale (needs ≥ 2 positive points)."""
    x, y = np.asarray(x, float), np.abs(np.asarray(y, float))
    ok = (x > 0) & (y > 0) & np.isfinite(x) & np.isfinite(y)
    if ok.sum() < 2:
        raise ValueError("fit_loglog: need at least two positive, finite points")
    lx, ly = np.log(x[ok]), np.log(y[ok])
    A = np.vstack([lx, np.ones_like(lx)]).T
    coef, res, *_ = np.linalg.lstsq(A, ly, rcond=None)
    n = lx.size
    if n > 2:
        s2 = float(np.sum((ly - A @ coef) ** 2) / (n - 2))
        se = float(np.sqrt(s2 / np.sum((lx - lx.mean()) ** 2)))
    else:
        se = None
    return LogLogFit(float(coef[0]), float(coef[1]), se)


#: The ``status`` of a study's ``summary.json`` from its verdict, defined once (``wflow
#: verify`` and ``wflow reproduce``): a verdict that passed is ``"success"``; a failing one
#: that says ``INCONCLUSIVE`` (the study could not decide: a negative control that did not
#: fail, an interval that straddles the tolerance) and refutes nothing (no ``FAIL …`` head,
#: no ``NOT REPRODUCED``) is ``"inconclusive"``; every other failing verdict is ``"failed"``.
#: ``wflow verify`` and ``wflow reproduce`` exit 0 only for ``"success"`` and 1 for every
#: other status (``"inconclusive"`` included: one code everywhere), as every command.
#: (:attr:`Verdict.status <wflow.status.Verdict>` of each word, :func:`decide`.)
VERDICT_STATUS = {v: v.status for v in (Verdict.PASS, Verdict.INCONCLUSIVE, Verdict.FAIL)}


def decide(passed: bool, text: str) -> Verdict:
    """The :class:`~wflow.status.Verdict` of a study from ``passed`` and its sentence.

    ``PASS`` when passed; else ``INCONCLUSIVE`` when the sentence says so and refutes
    nothing (it neither starts with ``FAIL`` nor says ``NOT REPRODUCED``); else ``FAIL``.
    """
    if passed:
        return Verdict.PASS
    text = text.lstrip()
    refuted = text.startswith(Verdict.FAIL) or Claim.NOT_REPRODUCED.upper() in text
    return (Verdict.INCONCLUSIVE if Verdict.INCONCLUSIVE in text and not refuted
            else Verdict.FAIL)


def study_status(result: StudyResult) -> tuple[Status, str, dict[str, Any]]:
    """``(status, message, checks)`` of a study's summary (:data:`VERDICT_STATUS`).

    ``message`` is ``""`` on success, else the verdict; ``checks`` are the summary's own
    ``checks`` when it states them (``wflow reproduce``: one per experiment), else the
    criteria as ``{name: {value, tolerance, passed, rule}}`` (``tolerance``: the accepted
    range in words, ``rule``: why that range), the ``checks`` every command writes.
    """
    checks = result.summary.get("checks")  # a study that states its checks itself
    if not isinstance(checks, Mapping):
        checks = {c["name"]: {"value": c["value"], "tolerance": c["accepted"],
                              "passed": c["ok"], "rule": c["why"]}
                  for c in result.summary.get("criteria", []) if isinstance(c, Mapping)}
    return VERDICT_STATUS[result.decision], "" if result.passed else result.verdict, checks


def save_figure(fig: Any, stage: Path, name: str, *, dpi: int = 120) -> list[str]:
    """Lay out ``fig``, save it as ``stage / name`` at ``dpi`` and close it: ``[name]``.

    The last step of every study's plot callback (the list :func:`write_study` records).
    """
    import matplotlib.pyplot as plt

    fig.tight_layout()
    fig.savefig(stage / name, dpi=dpi)
    plt.close(fig)
    return [name]


def write_study(out: str | Path, result: StudyResult, make_plot=None) -> StudyResult:
    """Write ``summary.json`` (+ plot via ``make_plot(stage_dir) -> list of filenames``).

    ``summary.json`` holds ``dtype`` at the top level: the summary's own (a float32 run's)
    or :data:`DEFAULT_DTYPE`.

    Refuses non-finite fitted numbers in a passing result (``FloatingPointError``), so a
    study never reports success with NaN/Inf; a failing one is written with them (as the
    strings ``"nan"``/``"inf"``), its verdict naming the criterion they fail. Under MPI
    only rank 0 writes. Returns the result with the figure paths filled in.
    """
    if result.passed:
        check_finite(f"{result.name}.fits", result.summary.get("fits", {}))
    if comm_rank_size()[1] != 0:  # under MPI only rank 0 writes
        return result
    out = Path(out)
    with run_directory(out) as stage:
        figs = tuple(make_plot(stage) if make_plot is not None else ())
        result = StudyResult(result.name, result.summary, result.verdict, result.passed,
                             tuple(str(out / f) for f in figs))
        status, message, checks = study_status(result)
        write_json(stage / "summary.json", {"status": status, "message": message,
                                            "checks": checks, "study": result.name,
                                            "passed": result.passed,
                                            "verdict": result.verdict, "figures": list(figs),
                                            "dtype": DEFAULT_DTYPE, **result.summary})
    return result


#: Exceptions that say nothing about the solver (the machine: memory, disk): propagated.
MACHINE_ERRORS: tuple[type[BaseException], ...] = (MemoryError, OSError)


def failed_criterion(exc: BaseException) -> Criterion:
    """The criterion an exception inside a study's run fails, its text naming the reason.

    ``mass_conserved`` for a conservation failure (a message on mass or conservation),
    ``run_finite`` for any other ``FloatingPointError`` (NaN/Inf, overflow, a guard of
    :mod:`wflow.infra.guards`), ``run_completed`` for the rest. The value is NaN (a
    criterion that cannot hold); ``what`` carries ``Type: message``.
    """
    msg = " ".join(str(exc).split()) or type(exc).__name__
    if len(msg) > 400:
        msg = msg[:397] + "..."
    low = msg.lower()
    if "conservation" in low or "mass drift" in low or "mass drifted" in low:
        name, why = "mass_conserved", "the solver conserves mass (a conservative scheme)"
    elif isinstance(exc, FloatingPointError):
        name, why = "run_finite", "every intermediate of a correct run is finite and bounded"
    else:
        name, why = "run_completed", "a correct solver runs to the end of the study"
    return Criterion(name, float("nan"), what=f"raised {type(exc).__name__}: {msg}", why=why)


def never_raise(run: Callable[..., StudyResult], *, name: str, faults: Mapping[str, str],
                families: Mapping[str, str] | None = None,
                parts: Sequence[str] | None = None, dtypes: Sequence[str] | None = None,
                fault_dtypes: Mapping[str, str] | None = None) -> Callable[..., StudyResult]:
    """Wrap a study's ``run`` so that a wrong or diverging solver FAILs and never raises.

    Parameters
    ----------
    run : callable
        ``run(*, out, quick, seed, fault=None, **kw) -> StudyResult``.
    name : str
        The study (``wflow verify`` name).
    faults, families : mapping
        Its ``FAULTS`` and ``FAMILIES``: an unknown fault is refused before the run
        (``ValueError``, a usage error).
    parts : sequence of str, optional
        Its ``PARTS``, if it takes ``parts=``: an unknown part is refused before the run.
    dtypes : sequence of str, optional
        Its ``DTYPES``, if it takes ``dtype=``; without them ``dtype="float64"`` is accepted
        and not passed on, any other refused (:func:`check_dtype`, before the run).
    fault_dtypes : mapping of str to str, optional
        Its ``FAULT_DTYPES``: a fault run at another precision is refused before the run.

    Returns
    -------
    callable
        The same signature (and ``dtype``); the run executes under ``np.errstate(over,
        invalid, divide = "raise")``; an exception inside it (but ``MemoryError``,
        ``OSError``) gives a FAIL of :func:`failed_criterion`, written to
        ``out/summary.json``.
    """
    if getattr(run, "__never_raise__", False):
        return run

    @functools.wraps(run)
    def wrapped(*, out: Path, quick: bool = False, seed: int = 0, fault: str | None = None,
                **kw: Any) -> StudyResult:
        check_fault(name, fault, faults, families)
        if parts is not None and "parts" in kw:
            got = tuple(kw["parts"])
            if not got or any(p not in parts for p in got):
                raise ValueError(f"{name}: parts must be a non-empty subset of "
                                 f"{tuple(parts)}, got {got}")
        dtype = check_dtype(name, kw.pop("dtype", DEFAULT_DTYPE), dtypes, fault=fault,
                            fault_dtypes=fault_dtypes)
        if dtypes is not None:
            kw["dtype"] = dtype
        if fault is not None:
            kw["fault"] = fault
        try:
            with np.errstate(over="raise", invalid="raise", divide="raise"):
                return run(out=out, quick=quick, seed=seed, **kw)
        except MACHINE_ERRORS:
            raise
        except Exception as exc:  # noqa: BLE001 - every other error is a verdict: FAIL
            logger.warning("%s: the run raised %s: %s (a FAIL)", name, type(exc).__name__,
                           exc)
            crit = failed_criterion(exc)
            passed, text, entries = conclude(
                [crit], "The study did not reach its fits: a correct solver does not raise.",
                fault=fault, faults=faults, families=families)
            summary: dict[str, Any] = {"quick": bool(quick), "seed": int(seed),
                                       "dtype": dtype, **entries,
                                       "error": {"type": type(exc).__name__,
                                                 "message": str(exc)}}
            return write_study(out, StudyResult(name, summary, text, False))

    wrapped.__never_raise__ = True  # type: ignore[attr-defined]
    return wrapped
