"""Signals that arrive while the ``wflow`` command is still importing: held, not lost.

Importing :mod:`wflow` takes one to three seconds (NumPy, numba, SciPy). A SIGTERM,
SIGHUP or Ctrl-C in that window used to kill the command with the default action: no
line, no cleanup, exit status ``-15`` (``15`` from ``mpirun``) instead of ``128 + 15``.
Imported first by ``wflow/__init__.py``, this module installs, **only in the process of
the** ``wflow`` **command** (the console script ``wflow``, or ``python -m wflow.cli``),
handlers that record the signal; :func:`wflow.cli.main` takes it with :func:`take` and
ends the command as if the signal had come a moment later (one line, ``128 + signal``).

Anywhere else (``import wflow`` in a script, a notebook, a test) importing this module
changes nothing: no handler, no setting (``tests/test_import_side_effects.py``).
"""

from __future__ import annotations

import os
import signal
import sys

__all__ = ["is_cli_process", "take", "installed"]

#: Signals held while the command imports: Ctrl-C, SIGTERM, SIGHUP.
_HELD = tuple(getattr(signal, n) for n in ("SIGINT", "SIGTERM", "SIGHUP") if hasattr(signal, n))

_PENDING: list[int] = []
_ORIGINAL: dict[int, object] = {}


def is_cli_process() -> bool:
    """True in the process of the ``wflow`` command (console script or ``-m wflow.cli``)."""
    if sys.argv and os.path.basename(sys.argv[0]) in ("wflow", "wflow.exe"):
        return True
    if sys.argv and sys.argv[0] == "-m":  # python -m X, while X's packages are imported
        orig = list(getattr(sys, "orig_argv", []))
        i = orig.index("-m") if "-m" in orig else -1
        return 0 <= i < len(orig) - 1 and orig[i + 1] in ("wflow.cli", "wflow")
    return False


def _hold(signum: int, frame: object) -> None:
    if not _PENDING:
        _PENDING.append(int(signum))


def installed() -> dict[int, object]:
    """The handlers this module replaced (empty where it installed none)."""
    return dict(_ORIGINAL)


def take() -> int | None:
    """The first signal held during the imports (``None`` if none), forgotten afterwards."""
    return _PENDING.pop(0) if _PENDING else None


if is_cli_process():
    for _s in _HELD:
        try:
            _ORIGINAL[_s] = signal.signal(_s, _hold)
        except (ValueError, OSError):  # pragma: no cover - not the main thread
            pass
