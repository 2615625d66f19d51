"""Cost estimates before computing: memory, steps and wall time; refuse what cannot fit.

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

The estimate comes before anything whose cost grows with the run: the commands call it
from the scenario's numbers before sampling tokens and before generating or reading a mesh
(:func:`mesh_cells`: the cell count of ``icosphere:N``, ``gmsh:N``, the default mesh or a
gmsh file's header, without reading the mesh), so an absurd run is refused in about the
time the interpreter takes to start; ``wflow mesh --cells N`` is estimated too
(:func:`estimate_mesh`).

The models are calibrated against measured peak RSS (``/usr/bin/time -v``) and wall time
of every command on a grid of small sizes (``docs/guide/cli.md``, "Cost estimates";
``tests/test_estimates.py`` pins them on the recorded measurements): within a factor 2
there, order-of-magnitude beyond. **Memory** is the predicted peak resident size: the
interpreter and the libraries a command loads (:data:`BASELINE_BYTES`) plus the arrays
whose size grows with the run (time grids, recorded rows, trajectories, saved densities,
the JKO's candidate pairs and dense transport problems, the ``W₂`` distances of ``wflow
run``: dense ``n × m`` or sparse ``O(n + m)``); the refusal compares what the run adds
to the memory available now. **Time** is the start-up (:data:`STARTUP_SECONDS`: imports,
loading the compiled loops) plus the pair sums of the attention kernel
(:data:`PAIR_SECONDS` a pair and head for particles, :data:`PDE_PAIR_SECONDS` for the
PDE's cell sums), a fixed cost per step and per recorded row, and the transport problems.
"""

from __future__ import annotations

import contextvars
import logging
import math
import os
import sys
from dataclasses import dataclass, field

__all__ = ["Estimate", "EstimateError", "CONFIRM_SECONDS", "PAIR_SECONDS", "PDE_PAIR_SECONDS",
           "BASELINE_BYTES", "STARTUP_SECONDS", "estimate_w2", "current_rss",
           "available_memory", "estimate_particles", "estimate_pde", "estimate_jko",
           "estimate_main_job", "check_estimate", "dt_record", "format_seconds",
           "format_bytes", "current_estimate", "mesh_cells", "estimate_mesh",
           "check_mesh_estimate", "MESH_CELL_BYTES", "MESH_CELL_SECONDS", "MAX_MESH_CELLS"]

logger = logging.getLogger(__name__)

#: Above this estimated wall time (s) a run is refused without ``--yes`` (terminal or batch).
CONFIRM_SECONDS = 3600.0

#: Seconds per kernel pair, head and stage of the compiled particle loop (fused sums, pairs
#: once for symmetric heads, two threads; 5.2e-10 CPU seconds measured at 2 048 tokens).
PAIR_SECONDS = 5e-10

#: Fixed cost of one time step (s) and of one recorded row of diagnostics (s) — measured
#: on ``wflow particles`` with 30 tokens (≈ 2 ms per recorded step).
STEP_SECONDS, RECORD_SECONDS = 2e-5, 2e-3

#: Fixed cost of one stage of a PDE step (s): flux assembly and the PETSc vector updates —
#: measured on ``wflow pde`` with 80 cells, order 1 (≈ 2.5 ms a step).
PDE_STAGE_SECONDS = 2.5e-3

#: Seconds per cell pair, head and stage of the PDE's kernel sums (1e-10 CPU seconds
#: measured at 9 680 cells).
PDE_PAIR_SECONDS = 1e-10

#: Resident size (bytes) of the interpreter and the libraries each command loads, measured
#: on the smallest runs of the calibration grid (NumPy, numba and the compiled loops for
#: ``particles``; DOLFINx, PETSc and POT besides for the others).
BASELINE_BYTES = {"particles": 220 * 2**20, "pde": 290 * 2**20, "jko": 300 * 2**20,
                  "run": 330 * 2**20}

#: Start-up seconds of each command (interpreter, imports, loading the compiled loops), the
#: CPU seconds of the smallest runs of the calibration grid (an idle machine's wall time).
STARTUP_SECONDS = {"particles": 1.7, "pde": 1.4, "jko": 1.8, "run": 2.5}

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

#: Seconds per cell and step of the finite-volume JKO step (0.32 s per step at 40 500
#: cells, ``docs/jko.md``).
FV_CELL_SECONDS = 8e-6

#: Peak bytes per cell of ``wflow mesh --cells N`` (generation, validation, writing) above
#: the libraries, and its CPU seconds per cell, fitted on icospheres of 8 000 – 500 000
#: cells (peak RSS 89 – 356 MiB, CPU 0.87 – 5.76 s; ``tests/test_estimates_absurd.py``
#: pins them on the recorded measurements).
MESH_CELL_BYTES = 570.0
MESH_CELL_SECONDS = 1.0e-5
#: Resident size and start-up of ``wflow mesh`` (NumPy, meshio; no DOLFINx).
MESH_BASELINE_BYTES, MESH_STARTUP_SECONDS = 85 * 2**20, 0.8
#: ``wflow mesh`` refuses more cells than this without ``--yes``: the mesh itself is cheap
#: (10⁷ cells: ~100 s, 5.3 GiB) but no solver runs on it within hours — one order-2 PDE step
#: costs ``3 M² PDE_PAIR_SECONDS`` (300 s at 10⁶ cells, and a run to T = 1 needs ~470 CFL
#: steps: 39 h), the JKO's kernel sums the same.
MAX_MESH_CELLS = 1_000_000

#: Bytes per cell of a binary gmsh 4.1 surface mesh of triangles (the shipped meshes:
#: 48.0–48.1), used only where the header cannot be parsed.
MSH_BYTES_PER_CELL = 48.0

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


def current_rss() -> float:
    """Resident size of this process now (bytes; ``0`` where ``/proc`` is missing)."""
    try:
        with open("/proc/self/statm", encoding="ascii") as fh:
            return float(fh.read().split()[1]) * os.sysconf("SC_PAGE_SIZE")
    except (OSError, ValueError, IndexError, AttributeError):  # pragma: no cover
        return 0.0


def _base(cmd: str, what: str) -> dict[str, float]:
    return {"libraries": float(BASELINE_BYTES[cmd])}


def estimate_particles(*, n: int, d: int = 3, H: int = 1, T: float, dt: float,
                       paths: int = 1, record_every: int = 1, integrator: str = "rk4",
                       save_trajectory: bool = False, what: str = "particles") -> Estimate:
    """Estimate of ``wflow particles``: ``n`` tokens in ``d``, ``H`` heads, ``paths`` paths.

    Steps ``S = ceil(T/dt)``, rows ``R = S/record_every + 1`` per path; memory: the
    libraries, the time grid ``8 S``, the per-step integrands ``160 S`` and the recorded
    rows ``8 R (24 + 8 H)`` per path, the trajectory ``8 R n d`` per path (if saved); time:
    ``STARTUP + P (S (STEP + stages n² H PAIR) + R RECORD)``
    (``stages`` = 4 for RK4, 1 for Euler).
    """
    S = _steps(T, dt)
    R = S / max(1, record_every) + 1
    stages = 4 if integrator == "rk4" else 1
    pairs = float(n) * n * H
    parts = _base("particles", what)
    parts.update({"time grid": 8.0 * S, "per-step integrands": 160.0 * S * paths,
                  "recorded rows": 8.0 * R * (24 + 8 * H) * paths,
                  "tokens": 8.0 * n * max(d, 3) * 4 * paths})
    if save_trajectory:
        parts["trajectory"] = 8.0 * R * n * d * paths
    secs = STARTUP_SECONDS["particles"] + paths * (
        S * (STEP_SECONDS + stages * pairs * PAIR_SECONDS) + R * RECORD_SECONDS)
    return Estimate(what, sum(parts.values()), S * paths, secs, parts)


def _pde_steps(cells: float, T: float, dt: float, cfl: float, vmax: float,
               max_steps: int) -> float:
    h = math.sqrt(4 * math.pi / max(cells, 1.0))
    return min(float(max_steps), max(_steps(T, dt), math.ceil(T * vmax / (cfl * h))))


def estimate_pde(*, cells: int, H: int = 1, T: float, dt: float, n_saves: int = 11,
                 cfl: float = 0.9, order: int = 2, max_steps: int = 1_000_000,
                 vmax: float = 1.5, what: str = "pde", startup: bool = True) -> Estimate:
    """Estimate of ``wflow pde`` on ``cells`` cells.

    Steps ``min(max_steps, max(T/dt, T vmax/(cfl h)))`` with ``h = sqrt(4π/M)`` (the CFL
    bound with ``|v| ≈ vmax``); memory: the libraries, the mesh, its connectivity and the
    solver's vectors (~1.2 kB a cell, measured), the saved densities ``16 n_saves M``; time:
    ``STARTUP + stages (PDE_STAGE + M² H PDE_PAIR)`` a step (``stages`` = 1 upwind, 3
    SSP-RK). ``startup=False``: a phase of a longer job (no libraries, no start-up).
    """
    M = float(cells)
    S = _pde_steps(M, T, dt, cfl, vmax, max_steps)
    stages = 1 if order == 1 else 3
    parts = _base("pde", what) if startup else {}
    parts.update({"mesh and solver": 1200.0 * M, "saved densities": 8.0 * n_saves * M * 2})
    secs = S * stages * (PDE_STAGE_SECONDS + M * M * H * PDE_PAIR_SECONDS)
    secs += STARTUP_SECONDS["pde"] if startup else 0.0
    return Estimate(what, sum(parts.values()), S, secs, parts)


def estimate_jko(*, cells: int, H: int = 1, steps: float, inner: int = 20,
                 max_pairs: int = 50_000_000, dense_ot_max_cells: int = 6000,
                 scheme: str = "fv", verify_max_cells: int = 2500, what: str = "jko",
                 startup: bool = True) -> Estimate:
    """Estimate of ``wflow jko``: ``steps`` steps on ``cells`` cells.

    Every scheme keeps the density of every step: ``8 M (steps + 1)`` bytes (at ``T/τ =
    10⁷`` steps on 2 420 cells, 194 GB). ``scheme="fv"`` (the default scheme): memory, the
    libraries and the finite-volume
    graph (~2 kB a cell); time per step ``FV_CELL M`` plus ``inner / 3`` potential
    evaluations of ``M² H`` cell pairs; up to ``verify_max_cells`` cells the POT referee
    (a ``W²`` between consecutive steps, :func:`estimate_w2`: dense up to
    ``dense_ot_max_cells``, certified sparse beyond). ``scheme="ot"``:
    memory, the candidate pairs ``24 min(M², max_pairs)`` and a dense transport problem
    ``24 M²`` (cost, plan, work) when ``M <= dense_ot_max_cells``; time per step
    ``inner`` oracle calls of ``min(M², max_pairs)`` pair costs plus ``M² H`` kernel pairs.
    """
    M = float(cells)
    parts = _base("jko", what) if startup else {}
    # the density of every step is kept (history, density.npz): 8 M bytes a step
    parts["stored densities"] = 8.0 * M * (float(steps) + 1.0)
    if scheme == "ot":
        pairs = min(M * M, float(max_pairs))
        parts["candidate pairs"] = 24.0 * pairs
        if M <= dense_ot_max_cells:
            parts["dense transport problem"] = 24.0 * M * M
        secs = steps * inner * (pairs * 10 * PAIR_SECONDS + M * M * H * PAIR_SECONDS)
    else:
        parts["finite-volume graph"] = 2000.0 * M
        secs = steps * (FV_CELL_SECONDS * M + inner / 3 * M * M * H * PDE_PAIR_SECONDS)
        if M <= verify_max_cells:
            ref = estimate_w2(int(M), int(M), calls=int(steps), what="referee W2",
                              dense_max_points=dense_ot_max_cells)
            parts.update(ref.parts)
            secs += ref.seconds
    secs += STARTUP_SECONDS["jko"] if startup else 0.0
    return Estimate(what, sum(parts.values()), steps, secs, parts)


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


def estimate_main_job(*, cells: int, n: int, H: int, T: float, dt: float, n_saves: int,
                      steps_per_save: int, jko: bool, refinement: int,
                      max_ot_points: int = 6000, w2_dense_max_points: float = math.inf,
                      jko_steps: int | None = None) -> Estimate:
    """Estimate of ``wflow run``: PDE (twice with the JKO), particles, JKO, its table, W₂.

    The phases run one after the other: the memory is the libraries plus the largest
    phase, the time the start-up plus the sum. The JKO step count is ``jko_steps`` when
    known (``T/τ``), else ``N = ceil(T / (3 h))`` (``tau = "auto"``'s rule with
    ``vmax ≈ 1``: an upper bound). The ``τ/h`` table's
    row ``k`` (``1..refinement``) runs the JKO and the surrogate PDE with ``N_k ≈ N/1.5^k``
    steps on ``M_k ≈ M N_k²/N²`` cells and ``N_k + 1`` cell-vs-cell ``W₂``; the coarsest
    row once more with the OT scheme. The comparison computes ``n_saves`` particle-vs-cell
    ``W₂`` (at most ``max_ot_points`` particles) and ``N + 1`` cell-vs-cell ones. A ``W₂``
    is dense up to ``w2_dense_max_points`` support points, certified sparse beyond
    (:func:`estimate_w2`; the default, no limit: every ``W₂`` dense).
    """
    M = float(cells)
    base = float(BASELINE_BYTES["run"])
    phases: list[Estimate] = [estimate_pde(cells=cells, H=H, T=T, dt=dt, n_saves=n_saves,
                                           what="pde", startup=False)]
    p_steps = max(1, n_saves - 1) * steps_per_save
    part = estimate_particles(n=n, H=H, T=T, dt=T / p_steps, record_every=steps_per_save,
                              save_trajectory=True)
    phases.append(Estimate("particles", part.memory - BASELINE_BYTES["particles"],
                           part.steps, part.seconds - STARTUP_SECONDS["particles"],
                           {k: v for k, v in part.parts.items() if k != "libraries"}))
    n_ot = min(int(n), int(max_ot_points))
    phases.append(estimate_w2(n_ot, cells, calls=n_saves, dense_max_points=w2_dense_max_points,
                              what="W2 particles vs PDE"))
    if jko:
        h = math.sqrt(4 * math.pi / max(M, 1.0))
        N = float(jko_steps) if jko_steps else max(1.0, math.ceil(T / (3 * h)))
        phases.append(estimate_jko(cells=cells, H=H, steps=N, startup=False))
        phases.append(estimate_pde(cells=cells, H=H, T=T, dt=dt, n_saves=n_saves,
                                   what="pde_surrogate", startup=False))
        phases.append(estimate_w2(cells, cells, calls=int(N) + 1,
                                  dense_max_points=w2_dense_max_points,
                                  what="W2 JKO vs PDE"))
        seen, last = {N}, None
        for k in range(1, int(refinement) + 1):
            Nk = max(1, math.floor(N / 1.5 ** k + 0.5))
            if Nk in seen:
                continue
            seen.add(Nk)
            n_ico = max(2, math.floor(math.sqrt(M / 20.0) * Nk / N + 0.5))
            Mk = 20 * n_ico * n_ico
            phases.append(estimate_jko(cells=Mk, H=H, steps=Nk, startup=False,
                                       what=f"table row {k} jko"))
            phases.append(estimate_pde(cells=Mk, H=H, T=T, dt=T / Nk, n_saves=Nk + 1,
                                       what=f"table row {k} pde", startup=False))
            phases.append(estimate_w2(Mk, Mk, calls=Nk + 1, dense_max_points=w2_dense_max_points,
                                      what=f"W2 table row {k}"))
            last = (Mk, Nk)
        if last is not None:
            phases.append(estimate_jko(cells=last[0], H=H, steps=last[1], scheme="ot",
                                       startup=False, what="table OT cross-check"))
    big = max(phases, key=lambda e: e.memory)
    parts = {"libraries": base, **{f"{big.what}: {k}": v for k, v in big.parts.items()}}
    secs = STARTUP_SECONDS["run"] + sum(e.seconds for e in phases)
    return Estimate("run", base + big.memory, sum(e.steps for e in phases), secs, parts)


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
    _CURRENT.set(est)
    return est


#: The ``--yes`` note printed last in this context (printed once per run).
_NOTED: contextvars.ContextVar[str | None] = contextvars.ContextVar("wflow_estimate_noted",
                                                                    default=None)


def mesh_cells(spec: str, *, path: str | os.PathLike[str] | None = None,
               default_cells: int = 2420) -> int | None:
    """Cells of the mesh ``spec`` names, without generating or reading the mesh.

    ``"icosphere:N"``: ``20 k²`` with ``k = max(1, round(√(N/20)))`` (the generator's
    rule); ``"gmsh:N"``: ``N`` (the generator's target); ``"default"``: ``default_cells``;
    a file (``path``, resolved by the caller): the element count of a gmsh 4 header
    (``$Elements``, found by a memory-mapped search: milliseconds for a 500 MB file), else
    ``None`` (another format: estimated after loading).
    """
    import math as _m

    name, _, arg = str(spec).partition(":")
    if name in ("icosphere", "gmsh") and arg:
        try:
            N = int(float(arg))
        except ValueError:
            return None  # the loader refuses it with its own message
        if N < 1:
            return None
        return 20 * max(1, round(_m.sqrt(N / 20.0))) ** 2 if name == "icosphere" else N
    if spec == "default":
        return int(default_cells)
    if path is None:
        return None
    return _gmsh_cells(path)


def _gmsh_cells(path: str | os.PathLike[str]) -> int | None:
    """Element count of a gmsh 4.x file from its ``$Elements`` header (``None``: not one)."""
    import mmap
    import struct

    try:
        with open(path, "rb") as fh:
            head = fh.read(64)
            if not head.startswith(b"$MeshFormat"):
                return None
            fmt = head.split(b"\n")[1].split() if b"\n" in head else []
            if len(fmt) < 3 or not fmt[0].startswith(b"4"):
                return None
            binary, size_t = fmt[1] == b"1", int(fmt[2])
            with mmap.mmap(fh.fileno(), 0, access=mmap.ACCESS_READ) as mm:
                i = mm.find(b"\n$Elements\n")
                if i < 0:
                    return None
                j = i + len(b"\n$Elements\n")
                if binary:
                    if size_t != 8 or j + 16 > len(mm):
                        return None
                    return int(struct.unpack("<2Q", mm[j:j + 16])[1])
                line = mm[j:mm.find(b"\n", j)].split()
                return int(line[1]) if len(line) >= 2 else None
    except (OSError, ValueError, IndexError):
        return None


def estimate_mesh(*, cells: int, method: str = "icosphere", what: str = "mesh") -> Estimate:
    """Estimate of ``wflow mesh --cells N``: generation, validation and writing.

    Memory ``MESH_BASELINE + MESH_CELL_BYTES M``; time ``MESH_STARTUP + MESH_CELL_SECONDS
    M`` (``M`` the cells generated: :func:`mesh_cells` of ``method:N``); gmsh meshes are
    costed like icospheres (the same arrays; the generator's own time comes on top).
    """
    M = float(mesh_cells(f"{method}:{int(cells)}") or cells)
    parts = {"libraries": float(MESH_BASELINE_BYTES),
             "points, cells and checks": MESH_CELL_BYTES * M}
    return Estimate(what, sum(parts.values()), 1.0,
                    MESH_STARTUP_SECONDS + MESH_CELL_SECONDS * M, parts)


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


def check_mesh_estimate(*, cells: int, method: str = "icosphere", confirm: bool = False,
                        available: float | None = None) -> Estimate:
    """:func:`estimate_mesh` checked: memory, time, and :data:`MAX_MESH_CELLS` (``--yes``).

    Raises
    ------
    EstimateError
        More memory than available; or, without ``confirm``, more than
        :data:`CONFIRM_SECONDS` or more cells than :data:`MAX_MESH_CELLS`.
    """
    est = estimate_mesh(cells=cells, method=method)
    M = mesh_cells(f"{method}:{int(cells)}") or int(cells)
    if M > MAX_MESH_CELLS and not confirm:
        one_step = 3.0 * float(M) ** 2 * PDE_PAIR_SECONDS
        raise EstimateError(
            f"mesh: {M} cells ({est.describe()}) is above {MAX_MESH_CELLS:.0e} cells: one PDE "
            f"step on it is estimated at {format_seconds(one_step)} (no solver runs on it "
            "within hours); pass --yes to generate it anyway, or ask for fewer cells")
    return check_estimate(est, confirm=confirm, available=available)
