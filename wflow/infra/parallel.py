"""Work distributed over MPI ranks (``mpirun -n P wflow verify …``, ``wflow particles``).

:func:`parallel_map` evaluates ``fn(item)`` for every item, item ``i`` on rank
``i mod P``, and gathers the results in the original order on every rank. Each item
carries its own seed, so the numbers are identical to a serial run. Without MPI (or
with one rank) it is a plain loop.

One system split over ranks (the particle engine, :mod:`wflow.particles.split`):
:func:`split_range` (each rank's contiguous block), :func:`ordered_sum` (a sum over ranks
in a fixed order, bit-for-bit the same on every rank) and :func:`collective_check` (an
error on one rank raised on all, so none waits in a collective for a rank that left).
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

__all__ = ["parallel_map", "comm_rank_size", "launched_rank_size", "split_range", "ordered_sum",
           "collective_check"]

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


# ------------------------------------------------------------- one system over ranks
def split_range(n: int, size: int, rank: int) -> tuple[int, int]:
    """``[start, stop)`` of rank ``rank``'s block when ``n`` items are split over ``size`` ranks.

    Contiguous blocks in rank order, the first ``n mod size`` ranks one item longer (the
    layout of ``numpy.array_split``): concatenating the blocks in rank order gives the
    items in their original order.
    """
    base, extra = divmod(int(n), int(size))
    start = rank * base + min(rank, extra)
    return start, start + base + (1 if rank < extra else 0)


def ordered_sum(comm: Any, arr: Any) -> Any:
    """``Σ_r arr_r`` over the ranks of ``comm``, summed in rank order, identical on every rank.

    ``MPI_Allreduce`` may add the ranks' contributions in an order that depends on the
    implementation, the message size and (in principle) the rank, so it does not fix the
    rounding. Here the sum is a reduce-scatter by hand plus an all-gather: the flattened
    array is cut into ``P`` chunks, rank ``q`` receives chunk ``q`` of every rank
    (``Alltoall``) and adds them in the order ``0, 1, …, P−1``, then every rank receives
    every summed chunk (``Allgather``). Each element is rounded in one fixed order
    (``((a_0 + a_1) + a_2) + …``), computed on one rank and copied to all, so the result
    is bit-for-bit the same on every rank and in every run with the same ``P``; it
    differs from the serial sum only by the rounding of ``P − 1`` additions (relative
    ``≤ (P − 1) ε`` of the sum of absolute values). Communication: ``2 (P − 1)/P`` times
    the array's size sent and received per rank (bandwidth-optimal, like a ring
    allreduce). ``comm=None`` or one rank: the array itself (a float64 copy).

    Parameters
    ----------
    comm : mpi4py communicator or None
    arr : array_like of float64 (any shape, the same on every rank)

    Returns
    -------
    numpy.ndarray
        The sum, shape of ``arr``.
    """
    import numpy as np

    a = np.ascontiguousarray(arr, dtype=np.float64)
    if comm is None or comm.Get_size() == 1:
        return a.copy()
    P = comm.Get_size()
    flat = a.reshape(-1)
    chunk = -(-flat.size // P) if flat.size else 1
    send = np.zeros(P * chunk)
    send[: flat.size] = flat
    recv = np.empty((P, chunk))
    comm.Alltoall(send, recv)
    mine = recv[0].copy()
    for r in range(1, P):  # fixed order: rank 0, 1, ..., P-1
        mine += recv[r]
    full = np.empty(P * chunk)
    comm.Allgather(mine, full)
    return full[: flat.size].reshape(a.shape)


def collective_check[T](comm: Any, fn: Callable[[], T]) -> T:
    """Run ``fn()`` on every rank; if it raised on any rank, raise on every rank.

    A rank that raises (a softmax normaliser underflowed on its tokens, an overflow bound
    on its scores) would otherwise leave the others waiting in the next collective
    operation. The first failing rank's exception type and message are raised everywhere
    (``FloatingPointError`` and ``ValueError``; others propagate on their rank only).
    """
    err: tuple[str, str] | None = None
    out: Any = None
    try:
        out = fn()
    except (FloatingPointError, ValueError) as exc:
        err = (type(exc).__name__, str(exc))
    if comm is not None and comm.Get_size() > 1:
        errs = [e for e in comm.allgather(err) if e is not None]
        err = errs[0] if errs else None
    if err is not None:
        raise (FloatingPointError if err[0] == "FloatingPointError" else ValueError)(err[1])
    return out
