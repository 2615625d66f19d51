"""Subcommands of the ``wflow`` CLI: one module each, exposing ``register(subparsers)``.

The parsers of the solver commands (one scenario in, one output folder out) are built by
:func:`add_scenario_command` (``SCENARIO``, ``--out``, ``--overwrite``), their
``--KEY`` overrides of a scenario key by :func:`add_override` and their common tail by
:func:`add_controls` (``--diffusion``, ``--progress``, ``--yes`` and the handler); the
commands made of actions (``wflow heads beta-star``) by :func:`add_action_command` and
:func:`add_action`.

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
from collections.abc import Callable, Iterable, Mapping, Sequence
from pathlib import Path
from typing import Any

from ..status import Status

__all__ = ["add_output", "add_yes", "prepare", "finish", "add_scenario_command", "add_override",
           "add_controls", "prepare_scenario", "add_action_command", "add_action", "add_gif",
           "print_records"]

#: Help of ``--diffusion`` (every solver that takes token diffusion), followed by how it
#: enters that solver.
DIFFUSION_HELP = "token diffusion D >= 0 (THEORY §8; overrides [attention] diffusion)"


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


def add_scenario_command(sub: argparse._SubParsersAction, name: str, *, help: str,
                         description: Any, scenario: str = "scenario TOML file",
                         switches: Mapping[str, str] | None = None,
                         gif: str | None = None) -> argparse.ArgumentParser:
    """Parser of a solver command: ``wflow NAME SCENARIO --out DIR [--overwrite] [...]``.

    Parameters
    ----------
    sub : the CLI's subparsers.
    name, help : the command and its one-line help.
    description : its ``--help`` text, usually :func:`wflow.commands._help.describe`
        (formatted only when the help is printed).
    scenario : the help of the positional ``SCENARIO`` argument.
    switches : the command's optional extra outputs, ``--FLAG → help`` (on/off flags).
    gif : with ``--gif`` (:func:`add_gif`): its animation, file name and what it shows.

    Returns
    -------
    The parser; the command's own arguments follow, then :func:`add_controls`.
    """
    from ._help import Formatter

    p = sub.add_parser(name, help=help, formatter_class=Formatter, description=description)
    p.add_argument("scenario", help=scenario)
    add_output(p)
    for flag, what in (switches or {}).items():
        p.add_argument(flag, action="store_true", help=what)
    if gif is not None:
        add_gif(p, gif)
    return p


def add_override(p: argparse.ArgumentParser, key: str, section: str, *,
                 type: Callable[[str], Any] | None = None, note: str = "",
                 **kwargs: Any) -> None:
    """Add ``--KEY``, overriding the scenario's ``[section] key`` (default ``None``: not).

    ``note`` is appended to the help (``override [section] key{note}``); ``kwargs`` go to
    :meth:`argparse.ArgumentParser.add_argument` (``choices``, ``metavar``).
    """
    p.add_argument(f"--{key}", type=type, default=None,
                   help=f"override [{section}] {key}{note}", **kwargs)


def add_controls(p: argparse.ArgumentParser, func: Callable[[argparse.Namespace], int], *,
                 diffusion: str | None = None, progress: str = "progress bar") -> None:
    """Add the arguments a solver command ends with, and its handler ``func``.

    ``--diffusion D`` where the solver takes token diffusion (``diffusion``: how the term
    enters it, appended to :data:`DIFFUSION_HELP`), ``--progress`` / ``--no-progress``
    (``progress``: what is shown) and ``--yes`` (:func:`add_yes`).
    """
    if diffusion is not None:
        p.add_argument("--diffusion", type=float, default=None, metavar="D",
                       help=f"{DIFFUSION_HELP}: {diffusion}")
    p.add_argument("--progress", action=argparse.BooleanOptionalAction, default=None,
                   help=f"{progress} (default: only on a terminal)")
    add_yes(p)
    p.set_defaults(func=func)


def add_action_command(sub: argparse._SubParsersAction, name: str, *, help: str,
                       description: str) -> argparse._SubParsersAction:
    """A command made of actions (``wflow NAME ACTION ...``); returns its action subparsers.

    Without an action the command prints its help and exits with status 2.
    """
    p = sub.add_parser(name, help=help, description=description)
    actions = p.add_subparsers(dest=f"{name}_command", metavar="ACTION")
    p.set_defaults(func=lambda args: (p.print_help(), 2)[1])
    return actions


def add_action(actions: argparse._SubParsersAction, name: str,
               func: Callable[[argparse.Namespace], int], *, help: str, description: str,
               arguments: dict[str, dict[str, Any]], json: str = "emit JSON") -> None:
    """Add the action ``name`` of an action command, its handler ``func`` and ``--json``.

    ``arguments`` maps each flag to the keywords of
    :meth:`argparse.ArgumentParser.add_argument`, in the order of the help; ``--json``
    (help ``json``) comes last: the action prints a table, or JSON with it.
    """
    a = actions.add_parser(name, help=help, description=description)
    for flag, kwargs in arguments.items():
        a.add_argument(flag, **kwargs)
    a.add_argument("--json", action="store_true", help=json)
    a.set_defaults(func=func)


def print_records(records: list[dict[str, Any]], *, as_json: bool,
                  columns: Sequence[tuple[str, str, int, str]], note: str | None = None,
                  jsonable: bool = True) -> int:
    """Print an action's records, as a JSON list or as a table; exit status 0.

    Parameters
    ----------
    records : one dict per row.
    as_json : the action's ``--json``: ``json.dumps(records, indent=2)``, the values
        through :func:`wflow.infra.io.to_jsonable` (non-finite as strings) if ``jsonable``.
    columns : ``(title, key, width, format)`` of each column of the table, right-aligned
        in ``width`` characters: the title in the header, ``format(record[key],
        f">{width}{format}")`` in the rows.
    note : the key of a free-text last column (titled by the key itself), after two spaces.
    """
    import json

    if as_json:
        if jsonable:
            from ..infra.io import to_jsonable

            records = to_jsonable(records)
        print(json.dumps(records, indent=2))
        return 0

    def line(cells: Iterable[str], last: Any) -> str:
        return " ".join(cells) + ("" if note is None else f"  {last}")

    print(line((f"{title:>{width}}" for title, _key, width, _fmt in columns), note))
    for r in records:
        print(line((f"{r[key]:>{width}{fmt}}" for _title, key, width, fmt in columns),
                   r.get(note)))
    return 0


def add_gif(p: argparse.ArgumentParser, animation: str) -> None:
    """Add ``--gif``: also write ``animation`` (its file and what it shows) and ``run.png``."""
    p.add_argument("--gif", action="store_true",
                   help=f"also write {animation} and run.png (E, G², energy balance)")


def prepare(args: argparse.Namespace) -> Path:
    """Check and lock ``args.out`` before computing (exit status 2 on refusal); absolute path.

    The lock is held until the command returns (:func:`wflow.infra.lock.release_all`).
    """
    from ..infra.io import claim_output

    return claim_output(args.out, overwrite=args.overwrite)


def prepare_scenario(args: argparse.Namespace) -> tuple[Path, Any]:
    """:func:`prepare` ``args.out``, then load ``args.scenario``: ``(out, scenario)``.

    The output location is checked and locked first (collective under mpirun: rank 0
    decides), so a refused location costs no scenario loading.
    """
    from ..apps.scenario import load_scenario

    out = prepare(args)
    return out, load_scenario(args.scenario)


def time_error_phrase(stats: dict[str, Any], section: str = "pde") -> str:
    """The summary line's words for a finite-volume run's time-discretisation error.

    ``stats["error_estimate"]`` (the step-doubling estimate, in units of the tolerance) with
    ``rtol``, or that it was not estimated (``<section>.rtol`` unset).
    """
    if "error_estimate" not in stats:
        return f"time error not estimated ({section}.rtol unset)"
    return (f"time-error estimate {stats['error_estimate']:.2g} of the tolerance "
            f"(rtol {stats['rtol']:g}; {stats['error_rejected_steps']} rejected by the error "
            "controller)")


def finish(command: str, status: str, message: str = "", *, rank: int = 0) -> int:
    """Exit status of a run: 0 for ``"success"``, else 1 with one line naming status and reason.

    Every other status (``failed``, ``inaccurate``, ``locked``, ``not_converged``,
    ``max_steps``, ...) is a run whose numbers must not be taken at face value. On an
    mpirun rank other than 0 (``rank``) the same status, silently: rank 0 reports.
    """
    if status == Status.SUCCESS:
        return 0
    if rank != 0:
        return 1
    print(f"wflow {command}: run {status}" + (f": {message}" if message else ""),
          file=sys.stderr)
    return 1
