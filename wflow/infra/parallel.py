"""Independent runs distributed over MPI ranks (``mpirun -n P wflow verify …``).

:func:`parallel_map` evaluates ``fn(item)`` for every item, item ``i`` on rank
``i mod P``, and gathers the results in the original order on every rank. Each item
carries its own seed, so the numbers are identical to a serial run. Without MPI (or
with one rank) it is a plain loop.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

__all__ = ["parallel_map", "comm_rank_size", "launched_rank_size"]

#: Environment variables of MPI launchers: (rank, size) — MPICH/Hydra, Intel MPI, Slurm's
#: PMI (``PMI_*``) and Open MPI (``OMPI_COMM_WORLD_*``).
_LAUNCHER_ENV = (("PMI_RANK", "PMI_SIZE"), ("OMPI_COMM_WORLD_RANK", "OMPI_COMM_WORLD_SIZE"),
                 ("PMIX_RANK", "PMIX_SIZE"))


def launched_rank_size() -> tuple[int, int]:
    """``(rank, size)`` this process was started with by ``mpirun`` (from its environment).

    Read without importing :mod:`mpi4py` (so without initialising MPI): the CLI uses it to
    refuse commands that are not MPI-aware before they start. ``(0, 1)`` outside mpirun.
    """
    import os

    for rk, sz in _LAUNCHER_ENV:
        if sz in os.environ:
            try:
                return int(os.environ.get(rk, "0")), int(os.environ[sz])
            except ValueError:
                continue
    return 0, 1


def comm_rank_size() -> tuple[Any, int, int]:
    """``(comm, rank, size)`` of ``MPI.COMM_WORLD`` (``(None, 0, 1)`` without mpi4py)."""
    try:
        from mpi4py import MPI
    except ImportError:  # pragma: no cover
        return None, 0, 1
    comm = MPI.COMM_WORLD
    return comm, comm.Get_rank(), comm.Get_size()


def parallel_map[T](fn: Callable[[Any], T], items: Sequence[Any]) -> list[T]:
    """``[fn(it) for it in items]``, split over MPI ranks; results on every rank, in order."""
    comm, rank, size = comm_rank_size()
    if size == 1:
        return [fn(it) for it in items]
    mine = {i: fn(it) for i, it in enumerate(items) if i % size == rank}
    parts = comm.allgather(mine)
    out: dict[int, T] = {}
    for p in parts:
        out.update(p)
    return [out[i] for i in range(len(items))]
