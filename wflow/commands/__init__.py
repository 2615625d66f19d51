"""Subcommands of the ``wflow`` CLI: one module each, exposing ``register(subparsers)``.

Shared by the commands that write an output folder: :func:`add_output` (``--out`` and
``--overwrite``), :func:`prepare` (checks and locks the location before any computation,
see :func:`wflow.infra.io.claim_output`: a second wflow process on the same ``--out`` is
refused at once, and the final move replaces only what was there at the start) and
:func:`finish` (the exit status of a run: 0 only for
``status == "success"``).
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from ..status import Status

__all__ = ["add_output", "add_yes", "prepare", "finish"]


def add_output(p: argparse.ArgumentParser, *, required: bool = True,
               default: str | None = None) -> None:
    """Add ``--out DIR`` and ``--overwrite`` to a command's parser."""
    dflt = f" [{default}]" if default is not None else ""
    p.add_argument("--out", required=required, default=default, metavar="DIR",
                   help="output folder, written all-or-nothing; must be new, empty or a "
                   f"previous wflow output (with --overwrite){dflt}")
    p.add_argument("--overwrite", action="store_true",
                   help="replace a previous wflow output at --out (never a folder wflow did not "
                   "write, nor files added to it)")


def add_yes(p: argparse.ArgumentParser, *, mesh: bool = False) -> None:
    """Add ``--yes``: run even if the cost estimate is above an hour (``mesh``: its size)."""
    from ..apps.jobs.mesh import MAX_MESH_CELLS
    from ..infra.estimate import CONFIRM_SECONDS

    what = (f"generate a mesh of more than {MAX_MESH_CELLS:.0e} cells (no solver runs on it "
            "within hours) or one estimated above "
            if mesh else "run even if the estimated wall time exceeds ")
    p.add_argument("--yes", action="store_true",
                   help=f"{what}{CONFIRM_SECONDS / 3600:g} h (without it, such a run is "
                   "refused, on a terminal and in batch mode alike, exit status 2); a run "
                   "that cannot fit in memory is refused regardless")


def prepare(args: argparse.Namespace) -> Path:
    """Check and lock ``args.out`` before computing (exit status 2 on refusal); absolute path.

    The lock is held until the command returns (:func:`wflow.infra.lock.release_all`).
    """
    from ..infra.io import claim_output

    return claim_output(args.out, overwrite=args.overwrite)


def finish(command: str, status: str, message: str = "") -> int:
    """Exit status of a run: 0 for ``"success"``, else 1 with one line naming status and reason.

    Every other status (``failed``, ``inaccurate``, ``locked``, ``not_converged``,
    ``max_steps``, ...) is a run whose numbers must not be taken at face value.
    """
    if status == Status.SUCCESS:
        return 0
    print(f"wflow {command}: run {status}" + (f": {message}" if message else ""),
          file=sys.stderr)
    return 1
