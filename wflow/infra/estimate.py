"""Cost estimates before computing: the generic machinery (no solver is named here).

Every command that computes calls :func:`check_estimate` after validating its input and
before the first step:

* **memory** above what the machine has (``MemAvailable`` of ``/proc/meminfo``, else
  ``os.sysconf`` physical pages) is refused at once (:class:`EstimateError`, a
  ``ValueError``: exit status 2), with the estimate and what dominates it;
* **wall time** above :data:`CONFIRM_SECONDS` (one hour) needs confirmation: ``--yes``
  (without it: refused, exit status 2, with the estimate and how to confirm) — on a
  terminal and in batch mode alike (stdin not a terminal: schedulers, scripts; a script
  that asks for 10⁸ tokens by mistake is stopped, not left running for years);
* a step adjusted to divide ``T`` is reported by :func:`dt_record` (logged, recorded in
  ``summary.json``).

Each solver owns its cost model, beside its options (``wflow/<solver>/estimate.py``),
registered with its :class:`~wflow.infra.spec.SolverSpec`; the stage counts come from the
method objects (``stages()`` of the integrators), never from a name. Here: the
:class:`Estimate` type, its check, the step count of a uniform grid (:func:`step_count`)
and the cost of an exact ``W₂`` (:func:`estimate_w2`, the referee every mesh solver calls).

The models are calibrated against measured peak RSS (``/usr/bin/time -v``) and wall time
of every command on a grid of small sizes (``docs/guide/cli.md``, "Cost estimates";
``tests/test_estimates.py`` pins them on the recorded measurements): within a factor 2
there, order-of-magnitude beyond. **Memory** is the predicted peak resident size: the
interpreter and the libraries a command loads plus the arrays whose size grows with the
run; the refusal compares what the run adds to the memory available now. **Time** is the
start-up plus the work of the steps.
"""

from __future__ import annotations

import contextvars
import logging
import math
import os
import sys
from dataclasses import dataclass, field

__all__ = ["Estimate", "EstimateError", "CONFIRM_SECONDS", "estimate_w2", "current_rss",
           "available_memory", "check_estimate", "dt_record", "format_seconds",
           "format_bytes", "current_estimate", "step_count", "W2_DENSE_BYTES",
           "W2_SPARSE_BYTES", "W2_DENSE_SECONDS", "W2_SPARSE_SECONDS_40500"]

logger = logging.getLogger(__name__)

#: Above this estimated wall time (s) a run is refused without ``--yes`` (terminal or batch).
CONFIRM_SECONDS = 3600.0
#: A run expected to take longer announces its estimate on stderr before it starts (once
#: per run, on a terminal and in batch mode alike).
ANNOUNCE_SECONDS = 60.0

#: Bytes per cost entry of a dense ``W₂`` (cost matrix and the network simplex's copies:
#: 1.13 GB at 5 120 × 5 120, ``bench/README.md`` §9).
W2_DENSE_BYTES = 45.0
#: Bytes per support point of the certified sparse ``W₂`` (k-NN graph, its enlargements,
#: the duals: 425 MB peak at 40 500 cells with the libraries, §9).
W2_SPARSE_BYTES = 8000.0
#: Seconds per cost entry of a dense ``W₂`` (fitted on ``wflow run``, whose measures are
#: close: 1.2e-7; 2.6e-7 for the bench's rotated measures, §9).
W2_DENSE_SECONDS = 1.2e-7
#: Seconds of a sparse cells-vs-cells ``W₂`` at 40 500 cells (36.6 s, growing like N^1.9).
W2_SPARSE_SECONDS_40500 = 36.6


#: The estimate of the run in progress (shown by the progress bars until they have a rate).
_CURRENT: contextvars.ContextVar[Estimate | None] = contextvars.ContextVar(
    "wflow_estimate", default=None)


def current_estimate() -> Estimate | None:
    """The estimate :func:`check_estimate` accepted last in this context (or ``None``)."""
    return _CURRENT.get()


class EstimateError(ValueError):
    """The run cannot fit (memory) or was not confirmed (time): exit status 2."""


@dataclass(frozen=True)
class Estimate:
    """Predicted cost of a run: ``memory`` (bytes), ``steps``, ``seconds`` and the parts."""

    what: str
    memory: float
    steps: float
    seconds: float
    parts: dict[str, float] = field(default_factory=dict)
    notes: tuple[str, ...] = ()

    def describe(self) -> str:
        """One line: memory, steps, time and the biggest memory part."""
        big = max(self.parts.items(), key=lambda kv: kv[1]) if self.parts else None
        s = (f"about {format_bytes(self.memory)} of memory, "
             f"{self.steps:.3g} steps, {format_seconds(self.seconds)}")
        if big is not None:
            s += f" (largest: {big[0]}, {format_bytes(big[1])})"
        return s

    def __add__(self, other: Estimate) -> Estimate:
        parts = dict(self.parts)
        for k, v in other.parts.items():
            parts[k] = parts.get(k, 0.0) + v
        return Estimate(self.what, max(self.memory, other.memory), self.steps + other.steps,
                        self.seconds + other.seconds, parts, self.notes + other.notes)


def format_bytes(b: float) -> str:
    """``1.5 GiB``-style size."""
    if not math.isfinite(b):
        return "inf B"
    for unit in ("B", "KiB", "MiB", "GiB", "TiB", "PiB"):
        if abs(b) < 1024 or unit == "PiB":
            return f"{b:.3g} {unit}"
        b /= 1024
    return f"{b:.3g} PiB"  # pragma: no cover


def format_seconds(s: float) -> str:
    """``45 s``, ``12 min``, ``3.2 h``, ``4.1 days``, ``2e+05 years``."""
    if not math.isfinite(s):
        return "forever"
    if s < 120:
        return f"{s:.2g} s"
    if s < 7200:
        return f"{s / 60:.3g} min"
    if s < 3 * 86400:
        return f"{s / 3600:.3g} h"
    if s < 730 * 86400:
        return f"{s / 86400:.3g} days"
    return f"{s / (365 * 86400):.3g} years"


def available_memory() -> float:
    """Bytes this process may use: ``MemAvailable`` (``/proc/meminfo``), else physical RAM.

    A cgroup limit (``/sys/fs/cgroup/memory.max``) is respected where it is smaller.
    """
    avail = math.inf
    try:
        with open("/proc/meminfo", encoding="ascii") as fh:
            for line in fh:
                if line.startswith("MemAvailable:"):
                    avail = float(line.split()[1]) * 1024
                    break
    except OSError:
        pass
    if not math.isfinite(avail):
        try:
            avail = float(os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES"))
        except (ValueError, OSError, AttributeError):  # pragma: no cover
            pass
    try:
        with open("/sys/fs/cgroup/memory.max", encoding="ascii") as fh:
            v = fh.read().strip()
        if v.isdigit():
            avail = min(avail, float(v))
    except OSError:
        pass
    return avail


def step_count(T: float, dt: float) -> float:
    """Steps of a uniform grid of ``dt`` ending at ``T``: ``max(1, ⌈T/dt − 1e-9⌉)`` (``inf``: none).

    The ``1e-9`` absorbs the round-off of ``T/dt`` (``0.3/0.1 = 2.9999999999999996``).
    """
    return max(1.0, math.ceil(T / dt - 1e-9)) if dt > 0 and math.isfinite(T / dt) else math.inf


def current_rss() -> float:
    """Resident size of this process now (bytes; ``0`` where ``/proc`` is missing)."""
    try:
        with open("/proc/self/statm", encoding="ascii") as fh:
            return float(fh.read().split()[1]) * os.sysconf("SC_PAGE_SIZE")
    except (OSError, ValueError, IndexError, AttributeError):  # pragma: no cover
        return 0.0


def estimate_w2(n: int, m: int, *, calls: int = 1, dense_max_points: float = math.inf,
                what: str = "W2") -> Estimate:
    """Estimate of ``calls`` exact ``W₂`` distances between ``n`` and ``m`` points.

    Dense (``max(n, m) <= dense_max_points``): ``W2_DENSE_BYTES n m`` bytes and
    ``W2_DENSE_SECONDS n m`` seconds each; sparse (certified, ``O(n + m)`` memory):
    ``W2_SPARSE_BYTES max(n, m)`` bytes, ``36.6 s (max(n, m) / 40 500)^1.9`` each.
    """
    big = float(max(n, m))
    if big <= dense_max_points:
        mem, secs, kind = W2_DENSE_BYTES * n * m, W2_DENSE_SECONDS * n * m, "dense"
    else:
        mem = W2_SPARSE_BYTES * big
        secs, kind = W2_SPARSE_SECONDS_40500 * (big / 40500.0) ** 1.9, "sparse"
    return Estimate(what, mem, 0.0, calls * secs, {f"{what} ({kind}, {n} x {m})": mem})


def _interactive() -> bool:
    try:
        return sys.stdin.isatty() and sys.stderr.isatty()
    except (AttributeError, ValueError):  # pragma: no cover
        return False


def check_estimate(est: Estimate, *, confirm: bool = False, interactive: bool | None = None,
                   available: float | None = None) -> Estimate:
    """Refuse a run that cannot fit; ask for ``--yes`` above :data:`CONFIRM_SECONDS`.

    A run estimated above :data:`ANNOUNCE_SECONDS` prints its estimate on stderr (one line,
    once per run) before it starts, in batch mode too.

    Parameters
    ----------
    est : Estimate
    confirm : bool
        ``--yes`` was given: run whatever the time estimate.
    interactive : bool, optional
        Default: stdin and stderr are terminals. Only the message differs: a long run
        without ``confirm`` is refused on a terminal and in batch mode alike.
    available : float, optional
        Bytes available (default :func:`available_memory`).

    Raises
    ------
    EstimateError
        Memory the run adds to this process (the estimate less the resident size now)
        above ``available``; or time above :data:`CONFIRM_SECONDS` without ``confirm``.
    """
    avail = available_memory() if available is None else available
    logger.info("estimate of %s: %s", est.what, est.describe())
    # what the run adds to this process (already resident: the libraries loaded so far)
    adds = est.memory - (current_rss() if available is None else 0.0)
    if not math.isfinite(est.memory) or adds > avail:
        raise EstimateError(
            f"{est.what}: would need {est.describe()}, more memory than this machine has "
            f"available ({format_bytes(avail)}); reduce the size (tokens, cells, T/dt, "
            "paths, saved trajectories)")
    if est.seconds > CONFIRM_SECONDS:
        msg = (f"{est.what}: {est.describe()} — above {format_seconds(CONFIRM_SECONDS)} "
               "(order-of-magnitude estimate)")
        if confirm:
            if _NOTED.get() != msg:  # once per run (a command's pre-check, then the solver)
                print(f"wflow: estimate {msg}; running (--yes)", file=sys.stderr, flush=True)
                _NOTED.set(msg)
        else:
            tty = _interactive() if interactive is None else interactive
            where = "" if tty else " (batch mode: no terminal, refused all the same)"
            raise EstimateError(f"{msg}; pass --yes to run it anyway, or reduce the "
                                f"size{where}")
    elif est.seconds > ANNOUNCE_SECONDS:
        msg = (f"{est.what}: {est.describe()} — over {format_seconds(ANNOUNCE_SECONDS)} "
               "(order-of-magnitude estimate)")
        if _NOTED.get() != msg:  # once per run (a command's pre-check, then the solver)
            print(f"wflow: estimate {msg}; starting", file=sys.stderr, flush=True)
            _NOTED.set(msg)
    _CURRENT.set(est)
    return est


#: The ``--yes`` note printed last in this context (printed once per run).
_NOTED: contextvars.ContextVar[str | None] = contextvars.ContextVar("wflow_estimate_noted",
                                                                    default=None)


def dt_record(T: float, dt: float, *, what: str = "run") -> dict[str, float | int | bool]:
    """The step actually used for a requested ``dt``: ``T / ceil(T/dt)`` (divides ``T``).

    Returns ``{"requested", "used", "steps", "adjusted"}``; an adjustment (relative change
    above ``1e-9``, round-off of ``T/dt``) is logged as a warning: no silent changes.
    """
    steps = int(step_count(T, dt)) if math.isfinite(step_count(T, dt)) else 0
    used = T / steps if steps else dt
    adjusted = abs(used - dt) > 1e-9 * max(abs(dt), 1e-300)
    if adjusted:
        logger.warning("%s: dt = %g does not divide T = %g: using %d steps of dt = %.6g",
                       what, dt, T, steps, used)
    return {"requested": float(dt), "used": float(used), "steps": steps,
            "adjusted": bool(adjusted)}
