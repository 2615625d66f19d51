"""The ``wflow`` command: parse arguments and dispatch to a subcommand.

Each subcommand lives in its own module under :mod:`wflow.commands` and
exposes ``register(subparsers)``, which adds its parser and sets
``func=<callable(args) -> int>``. Modules are discovered automatically, and
heavy dependencies are imported inside the handlers, so ``wflow --help`` is
fast. Everything a command does is a public function of the library.
"""

from __future__ import annotations

import argparse
import importlib
import logging
import pkgutil
import sys

from . import __version__, commands

__all__ = ["main", "build_parser"]


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
    names = sorted(m.name for m in pkgutil.iter_modules(commands.__path__))
    for name in names:
        mod = importlib.import_module(f"{commands.__name__}.{name}")
        mod.register(sub)
    return parser


def main(argv: list[str] | None = None) -> int:
    """Entry point of the ``wflow`` console script; returns the exit status."""
    parser = build_parser()
    args = parser.parse_args(argv)
    logging.basicConfig(
        level=logging.WARNING - 10 * min(args.verbose, 2),
        format="%(levelname)s %(name)s: %(message)s",
    )
    if not getattr(args, "func", None):
        parser.print_help()
        return 2
    try:
        return int(args.func(args) or 0)
    except (ValueError, FileNotFoundError, FloatingPointError, KeyError) as exc:
        # bad input: one clear line naming the cause, no traceback
        print(f"wflow {args.command}: error: {exc}", file=sys.stderr)
        return 2


if __name__ == "__main__":  # pragma: no cover
    sys.exit(main())
