"""The ``wflow`` command: parse arguments and dispatch to a subcommand.

Each subcommand lives in its own module under :mod:`wflow.commands` and
exposes ``register(subparsers)``, which adds its parser and sets
``func=<callable(args) -> int>``. Modules are discovered automatically, and
heavy dependencies are imported inside the handlers, so ``wflow --help`` is
fast. Everything a command does is a public function of the library.

Exit status (the same for every command):

* 0 — the run finished with status ``success`` (``wflow verify``: the verdict passed);
* 1 — the run failed or is not to be trusted (status ``failed``, ``inaccurate``,
  ``locked``, ``not_converged``, ``max_steps``, non-finite numbers; a study's verdict
  failed): one line ``wflow CMD: run STATUS: reason`` on stderr; an unexpected error
  (a bug) also exits 1, with its traceback;
* 2 — bad input (scenario, arguments, files, output location): one line
  ``wflow CMD: error: ...`` on stderr, nothing computed and nothing written;
* 130 — interrupted (Ctrl-C): one line, no traceback; the staging folder is removed
  (``wflow run`` keeps its checkpoint and prints how to resume).

``-vv`` also logs the traceback of the errors reported in one line.
"""

from __future__ import annotations

import argparse
import importlib
import logging
import os
import pkgutil
import sys

from . import commands
from .infra.version import __version__

__all__ = ["main", "build_parser", "EXIT_OK", "EXIT_FAILED", "EXIT_BAD_INPUT", "EXIT_INTERRUPTED"]

EXIT_OK, EXIT_FAILED, EXIT_BAD_INPUT, EXIT_INTERRUPTED = 0, 1, 2, 130

#: Exceptions that mean bad input: reported in one line, exit status 2.
BAD_INPUT = (ValueError, KeyError, FileNotFoundError, FileExistsError, NotADirectoryError,
             IsADirectoryError, PermissionError)

logger = logging.getLogger("wflow.cli")


def build_parser() -> argparse.ArgumentParser:
    """Build the argument parser with every registered subcommand."""
    parser = argparse.ArgumentParser(
        prog="wflow",
        description="Mean-field dynamics of transformers: particles on S^{d-1}, the transformer "
        "PDE on sphere meshes, JKO schemes, and numerical verification of the theory "
        "(see THEORY.md).",
    )
    parser.add_argument("--version", action="version", version=f"wflow {__version__}")
    parser.add_argument("-v", "--verbose", action="count", default=0,
                        help="more logging (-v info, -vv debug)")
    sub = parser.add_subparsers(dest="command", metavar="COMMAND")
    names = sorted(m.name for m in pkgutil.iter_modules(commands.__path__)
                   if not m.name.startswith("_"))
    for name in names:
        mod = importlib.import_module(f"{commands.__name__}.{name}")
        mod.register(sub)
    return parser


def main(argv: list[str] | None = None) -> int:
    """Entry point of the ``wflow`` console script; returns the exit status."""
    if argv is None:  # the command's own process (not a call from Python): idle OpenMP
        # workers sleep at once instead of spinning (a shared machine); the user's value wins
        os.environ.setdefault("OMP_WAIT_POLICY", "PASSIVE")
    parser = build_parser()
    argv = sys.argv[1:] if argv is None else list(argv)
    args = parser.parse_args(argv)
    logging.basicConfig(
        level=logging.WARNING - 10 * min(args.verbose, 2),
        format="%(levelname)s %(name)s: %(message)s",
    )
    if not getattr(args, "func", None):
        parser.print_help()
        return EXIT_BAD_INPUT
    from .infra.io import set_command_line

    set_command_line(argv)
    name = f"wflow {args.command}"

    def say(line: str) -> None:
        # under mpirun these errors are collective (rank 0 decides, results are reduced):
        # rank 0 prints the line once
        if "mpi4py.MPI" not in sys.modules or sys.modules["mpi4py.MPI"].COMM_WORLD.rank == 0:
            print(line, file=sys.stderr)

    try:
        return int(args.func(args) or 0)
    except KeyboardInterrupt as exc:
        # one line, no traceback; the message (if any) says how to resume
        say(f"{name}: interrupted" + (f"; {exc}" if str(exc) else ""))
        return EXIT_INTERRUPTED
    except FloatingPointError as exc:
        # a run that produced NaN/Inf or failed: its numbers are not to be trusted
        logger.debug("traceback", exc_info=True)
        say(f"{name}: " + (str(exc) if "failed" in str(exc) else f"run failed: {exc}"))
        return EXIT_FAILED
    except BAD_INPUT as exc:
        # bad input: one clear line naming the cause, no traceback
        logger.debug("traceback", exc_info=True)
        msg = exc.args[0] if isinstance(exc, KeyError) and exc.args else exc
        say(f"{name}: error: {msg}")
        return EXIT_BAD_INPUT


if __name__ == "__main__":  # pragma: no cover
    sys.exit(main())
