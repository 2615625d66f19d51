"""The main job under ``mpirun -n P``: one job, rank 0 holding its files (private).

Only the causal main job (a scenario with ``[attention] mask``) runs over ranks: its
kinetic solves on meshes distributed over the ranks (:mod:`wflow.kinetic`, gathered each
stage), its particle systems with the tokens split over the ranks
(:func:`wflow.particles.simulate` with ``comm``: :mod:`wflow.particles.split`, the causal
sums of :mod:`wflow.kernels.causal`), every comparison on the gathered results, the
same on every rank. Rank 0 alone locks the output, writes the checkpoint and the files;
every other rank reads the checkpoint where rank 0 says a phase is there. The exchangeable
main job (PDE, JKO, particles) is one process: under mpirun it is refused
(:func:`refuse_unmasked`).

Part of the main job (:mod:`wflow.apps.main`).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

__all__ = ["world", "on_rank0", "RankCheckpoint", "refuse_unmasked"]


def world() -> Any:
    """``MPI.COMM_WORLD`` when launched by mpirun with several ranks, else ``None``.

    Read from the launcher's environment first, so a serial run never initialises MPI.
    """
    from ...infra.parallel import comm_rank_size, launched_rank_size

    if launched_rank_size()[1] <= 1:
        return None
    comm, _, size = comm_rank_size()
    return comm if size > 1 else None


def on_rank0[T](comm: Any, fn: Callable[[], T]) -> T | None:
    """``fn()`` on rank 0 only; an exception there is raised on every rank (same type).

    ``comm=None``: ``fn()``. The other ranks return ``None``.
    """
    if comm is None:
        return fn()
    err: BaseException | None = None
    out = None
    if comm.Get_rank() == 0:
        try:
            out = fn()
        except Exception as exc:  # noqa: BLE001 - re-raised on every rank below
            err = exc
    err = comm.bcast(err, root=0)
    if err is not None:
        raise err
    return out


def refuse_unmasked(comm: Any) -> None:
    """The exchangeable main job under several ranks: refused (``ValueError``, exit 2)."""
    if comm is not None:
        raise ValueError(
            f"run: under mpirun -n {comm.Get_size()} only a scenario with [attention] mask "
            "(the causal main job) is split over the ranks; the main job of an exchangeable "
            "scenario (PDE, JKO, particles) runs as one process: run it without mpirun")


class RankCheckpoint:
    """A :class:`~wflow.apps.main.checkpoint._Checkpoint` shared by the ranks of ``comm``.

    Rank 0 decides whether a phase (or piece) is checkpointed and broadcasts it, so every
    rank restores or computes the same phases (the computations are collective); every
    rank reads a restored phase from the files; only rank 0 writes or clears them.
    """

    def __init__(self, ck: Any, comm: Any) -> None:
        self.ck, self.comm, self.dir = ck, comm, ck.dir
        self.rank0 = comm.Get_rank() == 0

    def has(self, name: str) -> bool:
        """Whether phase ``name`` is checkpointed: rank 0's answer, on every rank."""
        return bool(self.comm.bcast(self.ck.has(name) if self.rank0 else None, root=0))

    def load(self, name: str) -> Any:
        """Phase ``name`` read from its file (every rank)."""
        return self.ck.load(name)

    def save(self, name: str, obj: Any) -> None:
        """Save phase ``name`` (rank 0; the others hold the same object)."""
        if self.rank0:
            self.ck.save(name, obj)

    def start(self, raw: dict, base_dir: Any, fingerprint: dict) -> None:
        """Start a fresh checkpoint (rank 0)."""
        on_rank0(self.comm, lambda: self.ck.start(raw, base_dir, fingerprint))

    def clear(self) -> None:
        """Delete the checkpoint (rank 0), once every rank has read it."""
        self.comm.barrier()  # every rank has read what it restores
        on_rank0(self.comm, self.ck.clear)

    def __getattr__(self, name: str) -> Any:  # meta, exists, phases, check: read only
        return getattr(self.ck, name)
