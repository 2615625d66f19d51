"""Cost estimates before computing: memory, steps and wall time; refuse what cannot fit.

Every command that computes calls :func:`check_estimate` after validating its input and
before the first step:

* **memory** above what the machine has (``MemAvailable`` of ``/proc/meminfo``, else
  ``os.sysconf`` physical pages) is refused at once (:class:`EstimateError`, a
  ``ValueError``: exit status 2), with the estimate and what dominates it;
* **wall time** above :data:`CONFIRM_SECONDS` (one hour) is printed and needs
  confirmation: ``--yes`` on a terminal (without it: refused, exit status 2, saying how
  long and how to confirm); in batch mode (stdin not a terminal: schedulers, scripts) a
  warning is printed and the run goes on;
* a step adjusted to divide ``T`` is reported by :func:`dt_record` (logged, recorded in
  ``summary.json``).

The models are order-of-magnitude (a factor of a few on a 2-core laptop-class machine):
the pair sums of the attention kernel cost :data:`PAIR_SECONDS` per pair and head (direct
fused sums), every step and every recorded row a fixed overhead; arrays are float64.
Memory counts the arrays whose size grows with the run (time grids, recorded rows,
trajectories, saved densities, candidate pairs and dense transport problems of the JKO
scheme), not the interpreter and libraries already loaded (``MemAvailable`` excludes them).
"""

from __future__ import annotations

import contextvars
import logging
import math
import os
import sys
from dataclasses import dataclass, field

__all__ = ["Estimate", "EstimateError", "CONFIRM_SECONDS", "PAIR_SECONDS",
           "available_memory", "estimate_particles", "estimate_pde", "estimate_jko",
           "estimate_main_job", "check_estimate", "dt_record", "format_seconds",
           "format_bytes", "current_estimate"]

logger = logging.getLogger(__name__)

#: Above this estimated wall time (s) a run asks for ``--yes`` (warns in batch mode).
CONFIRM_SECONDS = 3600.0

#: Seconds per kernel pair and head of a direct fused sum (order of magnitude; numba, one
#: core: ~1–3 ns measured by ``bench/bench_kernels.py``, rounded up).
PAIR_SECONDS = 3e-9

#: Fixed cost of one time step (s) and of one recorded row of diagnostics (s) — measured
#: on ``wflow particles`` with 30 tokens (≈ 2 ms per recorded step).
STEP_SECONDS, RECORD_SECONDS = 2e-5, 2e-3

#: Fixed cost of one stage of a PDE step (s): flux assembly and the PETSc vector updates —
#: measured on ``wflow pde`` with 80 cells, order 1 (≈ 2.5 ms a step).
PDE_STAGE_SECONDS = 2.5e-3

#: Doubles in one score block of the kernel sums (:data:`wflow.kernels.BLOCK_ELEMS`: a block
#: of targets holds about this many, at least one row of ``n`` sources).
KERNEL_BLOCK = 1 << 22


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


def _steps(T: float, dt: float) -> float:
    return max(1.0, math.ceil(T / dt - 1e-9)) if dt > 0 and math.isfinite(T / dt) else math.inf


def estimate_particles(*, n: int, d: int = 3, H: int = 1, T: float, dt: float,
                       paths: int = 1, record_every: int = 1, integrator: str = "rk4",
                       save_trajectory: bool = False, what: str = "particles") -> Estimate:
    """Estimate of :func:`wflow.particles.simulate`: ``n`` tokens in ``d``, ``H`` heads.

    Steps ``S = ceil(T/dt)``, rows ``R = S/record_every + 1`` per path; memory: the time
    grid ``8 S``, the recorded rows ``8 R (24 + 8 H)`` per path, the trajectory
    ``8 R n d`` per path (if saved), kernel score blocks ``32 max(KERNEL_BLOCK, n) H`` (a
    block and its work arrays); time:
    ``P (S (STEP + stages n² H PAIR) + R (RECORD + 4 n² H PAIR))``.
    """
    S = _steps(T, dt)
    R = S / max(1, record_every) + 1
    stages = 4 if integrator == "rk4" else 1
    pairs = float(n) * n * H
    parts = {"time grid": 8.0 * S, "recorded rows": 8.0 * R * (24 + 8 * H) * paths,
             "kernel blocks": 32.0 * max(KERNEL_BLOCK, n) * H}
    if save_trajectory:
        parts["trajectory"] = 8.0 * R * n * d * paths
    secs = paths * (S * (STEP_SECONDS + stages * pairs * PAIR_SECONDS)
                    + R * (RECORD_SECONDS + 4 * pairs * PAIR_SECONDS))
    return Estimate(what, sum(parts.values()), S * paths, secs, parts)


def estimate_pde(*, cells: int, H: int = 1, T: float, dt: float, n_saves: int = 11,
                 cfl: float = 0.9, order: int = 2, max_steps: int = 1_000_000,
                 vmax: float = 1.0, what: str = "pde") -> Estimate:
    """Estimate of :func:`wflow.pde.solve_pde` on ``cells`` cells.

    Steps ``min(max_steps, max(T/dt, T vmax/(cfl h)))`` with ``h = sqrt(4π/M)`` (the
    CFL bound with ``|v| ≈ vmax``); memory: the mesh and its connectivity (~400 bytes a
    cell), the saved densities ``8 n_saves M``; time: ``stages (PDE_STAGE + M² H PAIR)``
    a step (``stages`` = 1 upwind, 3 SSP-RK).
    """
    M = float(cells)
    h = math.sqrt(4 * math.pi / max(M, 1.0))
    S = min(float(max_steps), max(_steps(T, dt), math.ceil(T * vmax / (cfl * h))))
    stages = 1 if order == 1 else 3
    parts = {"mesh": 400.0 * M, "saved densities": 8.0 * n_saves * M * 2}
    secs = S * stages * (PDE_STAGE_SECONDS + M * M * H * PAIR_SECONDS)
    return Estimate(what, sum(parts.values()), S, secs, parts)


def estimate_jko(*, cells: int, H: int = 1, steps: float, inner: int = 20,
                 max_pairs: int = 50_000_000, dense_ot_max_cells: int = 6000,
                 what: str = "jko") -> Estimate:
    """Estimate of the JKO scheme: ``steps`` steps of ``inner`` oracle calls on ``cells``.

    Memory: the candidate pairs ``24 min(M², max_pairs)``, a dense transport problem
    ``24 M²`` (cost, plan, work) when ``M <= dense_ot_max_cells``; time per oracle call
    ``min(M², max_pairs)`` pair costs plus ``M² H`` kernel pairs.
    """
    M = float(cells)
    pairs = min(M * M, float(max_pairs))
    parts = {"candidate pairs": 24.0 * pairs}
    if M <= dense_ot_max_cells:
        parts["dense transport problem"] = 24.0 * M * M
    secs = steps * inner * (pairs * 10 * PAIR_SECONDS + M * M * H * PAIR_SECONDS)
    return Estimate(what, sum(parts.values()), steps, secs, parts)


def estimate_main_job(*, cells: int, n: int, H: int, T: float, dt: float, n_saves: int,
                      steps_per_save: int, jko: bool, refinement: int) -> Estimate:
    """Estimate of ``wflow run``: PDE (twice with the JKO), particles, JKO and its table.

    The JKO step count is taken as ``ceil(T / (3 h / vmax))`` (``tau = "auto"``'s rule,
    ``vmax ≈ 1``); the refinement rows are coarser and add at most the main JKO's cost.
    """
    est = estimate_pde(cells=cells, H=H, T=T, dt=dt, n_saves=n_saves, what="run")
    p_steps = max(1, n_saves - 1) * steps_per_save
    est = est + estimate_particles(n=n, H=H, T=T, dt=T / p_steps, record_every=steps_per_save,
                                   save_trajectory=True)
    if jko:
        h = math.sqrt(4 * math.pi / max(cells, 1))
        k = max(1.0, math.ceil(T / (3 * h)))
        j = estimate_jko(cells=cells, H=H, steps=k)
        est = est + j + estimate_pde(cells=cells, H=H, T=T, dt=dt, n_saves=n_saves)
        if refinement:
            est = est + j
    return Estimate("run", est.memory, est.steps, est.seconds, est.parts, est.notes)


def _interactive() -> bool:
    try:
        return sys.stdin.isatty() and sys.stderr.isatty()
    except (AttributeError, ValueError):  # pragma: no cover
        return False


def check_estimate(est: Estimate, *, confirm: bool = False, interactive: bool | None = None,
                   available: float | None = None) -> Estimate:
    """Refuse a run that cannot fit; ask for ``--yes`` above :data:`CONFIRM_SECONDS`.

    Parameters
    ----------
    est : Estimate
    confirm : bool
        ``--yes`` was given: run whatever the time estimate.
    interactive : bool, optional
        Default: stdin and stderr are terminals. Not interactive (batch): a long run is
        warned about and goes on.
    available : float, optional
        Bytes available (default :func:`available_memory`).

    Raises
    ------
    EstimateError
        Memory above ``available``; or time above :data:`CONFIRM_SECONDS` on a terminal
        without ``confirm``.
    """
    avail = available_memory() if available is None else available
    logger.info("estimate of %s: %s", est.what, est.describe())
    if not math.isfinite(est.memory) or est.memory > avail:
        raise EstimateError(
            f"{est.what}: would need {est.describe()}, more memory than this machine has "
            f"available ({format_bytes(avail)}); reduce the size (tokens, cells, T/dt, "
            "paths, saved trajectories)")
    if est.seconds > CONFIRM_SECONDS:
        msg = (f"{est.what}: {est.describe()} — above {format_seconds(CONFIRM_SECONDS)} "
               "(order-of-magnitude estimate)")
        if confirm:
            print(f"wflow: estimate {msg}; running (--yes)", file=sys.stderr, flush=True)
        elif _interactive() if interactive is None else interactive:
            raise EstimateError(f"{msg}; pass --yes to run it anyway, or reduce the size")
        else:
            print(f"wflow: warning: estimate {msg}; running (batch mode: no terminal)",
                  file=sys.stderr, flush=True)
    _CURRENT.set(est)
    return est


def dt_record(T: float, dt: float, *, what: str = "particles") -> dict[str, float | int | bool]:
    """The step actually used for a requested ``dt``: ``T / ceil(T/dt)`` (divides ``T``).

    Returns ``{"requested", "used", "steps", "adjusted"}``; an adjustment (relative change
    above ``1e-9``, round-off of ``T/dt``) is logged as a warning: no silent changes.
    """
    steps = int(_steps(T, dt)) if math.isfinite(_steps(T, dt)) else 0
    used = T / steps if steps else dt
    adjusted = abs(used - dt) > 1e-9 * max(abs(dt), 1e-300)
    if adjusted:
        logger.warning("%s: dt = %g does not divide T = %g: using %d steps of dt = %.6g",
                       what, dt, T, steps, used)
    return {"requested": float(dt), "used": float(used), "steps": steps,
            "adjusted": bool(adjusted)}
