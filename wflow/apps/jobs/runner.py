"""The one job runner: a scenario → files job is ``options → estimate → solve → write``.

Every single-solver command (``wflow particles``, ``pde``, ``jko``, ``gaussian``) runs
:func:`run_job` on its :class:`Job`, which holds the solver's
:class:`~wflow.infra.spec.SolverSpec` and only what differs between the solvers:

1. **table** — the solver's section as the scenario parsed it when it loaded
   (:meth:`wflow.apps.scenario.Scenario.table`), with the command line's overrides;
2. **estimate** — the spec's cost model, *once*: before anything whose cost grows with
   the run when :attr:`Job.size` knows the size from the scenario's numbers (the token
   count, the mesh's cell count from its spec: :func:`wflow.geometry.mesh.estimate.mesh_cells`),
   else — or when the problem built differs from that size — on the built problem
   (:attr:`Job.size_of`). A run that cannot fit is refused, one above an hour needs
   ``--yes`` (:func:`wflow.infra.estimate.check_estimate`; under MPI rank 0 decides and
   every rank raises the same error);
3. **build** — the problem: tokens, or the mesh and the initial density;
4. **solve** — the spec's solve function; a failed run raises ``FloatingPointError`` and
   writes nothing;
5. **write** — the output folder, atomically (:func:`wflow.infra.io.run_directory`).
"""

from __future__ import annotations

import sys
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from ...infra.estimate import EstimateError, check_estimate
from ...infra.spec import SolverSpec
from ...status import Status

__all__ = ["Job", "run_job", "check_collective", "heads_of"]


@dataclass(frozen=True, kw_only=True)
class Job:
    """What one solver's job does beyond the runner (the rest is :func:`run_job`).

    Attributes
    ----------
    spec : SolverSpec
        The solver's spec (its section, parser, estimate, keys and solve function).
    table : callable
        ``table(scenario, overrides) -> typed table``: the scenario's parsed section with
        the command line's overrides (``None`` values: not given).
    size : callable
        ``size(scenario, table) -> dict or None``: the keyword sizes of ``spec.estimate``
        known before the problem is built (``None``: not known without building it).
    build : callable
        ``build(scenario, table, comm) -> problem``.
    size_of : callable
        ``size_of(problem) -> dict``: the sizes of the built problem.
    solve : callable
        ``solve(problem, table, comm) -> result`` (calls ``spec.solve``).
    write : callable
        ``write(scenario, table, problem, result, out, comm, **flags)``: the files.
    label : str
        The run's name in the one line of a failure (default: the spec's name).
    failure_is_a_result : bool
        A failed run is written (its status in ``summary.json``) instead of raising.
    unjudged : callable, optional
        ``unjudged(problem, table) -> str or None``: why no accuracy check of the run will
        be judged (it will end ``completed``, exit 1), known before it computes; printed
        as one note before the run, so that a long run does not end so by surprise.
    """

    spec: SolverSpec
    table: Callable[[Any, Mapping[str, Any]], Any]
    size: Callable[[Any, Any], dict | None]
    build: Callable[[Any, Any, Any], Any]
    size_of: Callable[[Any], dict]
    solve: Callable[[Any, Any, Any], Any]
    write: Callable[..., None]
    label: str = ""
    failure_is_a_result: bool = False
    unjudged: Callable[[Any, Any], str | None] | None = None


def heads_of(schedule: Any) -> int:
    """The head count ``H`` of a schedule at its start (every estimate's ``H``)."""
    return int(schedule.heads_at(schedule.initial_theta()).H)


def check_collective(est: Any, *, confirm: bool, comm: Any = None) -> None:
    """:func:`check_estimate` on rank 0; every rank raises the same :class:`EstimateError`."""
    size = 1 if comm is None else comm.Get_size()
    rank = 0 if comm is None else comm.Get_rank()
    err = None
    if rank == 0:  # rank 0 decides (it alone may ask on a terminal); every rank raises
        try:
            check_estimate(est, confirm=confirm)
        except EstimateError as exc:
            err = str(exc)
    if size > 1:
        err = comm.bcast(err, root=0)
    if err is not None:
        raise EstimateError(err)


def run_job(job: Job, scenario: Any, out: str | Path, *,
            overrides: Mapping[str, Any] | None = None, confirm: bool = False,
            comm: Any = None, **flags: Any) -> Any:
    """Run ``job`` on ``scenario`` and write ``out/``: options → estimate → solve → write.

    Returns the solver's result (its ``status`` may be ``"inaccurate"``, written all the
    same).

    Raises
    ------
    FloatingPointError
        The run failed (status ``"failed"``; nothing is written).
    EstimateError
        The run cannot fit in memory, or was not confirmed (nothing computed).
    """
    table = job.table(scenario, dict(overrides or {}))
    size = job.size(scenario, table)
    if size is not None:  # before anything whose cost grows with the run
        check_collective(job.spec.estimate(table, **size), confirm=confirm, comm=comm)
    problem = job.build(scenario, table, comm)
    built = job.size_of(problem)
    if built != size:  # not known before, or the problem differs (a mesh generator's count)
        check_collective(job.spec.estimate(table, **built), confirm=confirm, comm=comm)
    note = job.unjudged(problem, table) if job.unjudged is not None else None
    if note and (comm is None or comm.Get_rank() == 0):
        print(f"wflow {job.spec.name}: note: {note}", file=sys.stderr, flush=True)
    res = job.solve(problem, table, comm)
    if not job.failure_is_a_result and res.status == Status.FAILED:
        raise FloatingPointError(f"{job.label or job.spec.name} run failed: {res.message}")
    job.write(scenario, table, problem, res, out, comm, **flags)
    return res
