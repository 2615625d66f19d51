"""Ctrl-C, SIGTERM and SIGHUP in the ``wflow`` command: never lost, never swallowed.

The command's handlers (installed by :func:`wflow.cli.main`, restored when it returns)
raise :class:`KeyboardInterrupt` (Ctrl-C) or :class:`Terminated` (SIGTERM, SIGHUP) and
*record* the signal first (:func:`handle`). Python runs a handler wherever the main
thread happens to be, and an exception raised inside a ctypes callback (numba's and
llvmlite's, while compiled code is loaded or compiled), a ``__del__`` method or a
weakref callback is printed as "Exception ignored" and dropped: the run went on and
exited 0. The record survives: long loops call :func:`check` between their compiled
blocks (:mod:`wflow.particles.compiled`), the CLI's watchdog delivers a dropped one again
a moment later (:func:`note_dropped`), and the CLI calls :func:`check` before it reports
success, so a swallowed signal still ends the command (one line, ``128 + signal``).
During an import (the command's own: DOLFINx, PETSc), inside numba's compiler or cache
loader, or in llvmlite, the handler raises nothing: an exception there broke the state of
a library (a cold compilation interrupted left ``RuntimeError: no compiled object yet`` at
2 of 16 delays; an extension module's initialisation interrupted ended 4 of 150 trials by
SIGSEGV or SIGABRT, without the line); it records the signal, and the watchdog delivers it
once the main thread is out (:func:`handle`).

Importing :mod:`wflow` takes one to three seconds (NumPy, numba, SciPy). A signal in that
window used to kill the command with the default action: no line, no cleanup, exit
status ``-15`` (``15`` from ``mpirun``). Imported first by ``wflow/__init__.py``, this
module installs, **only in the process of the** ``wflow`` **command** (the console script
``wflow``, or ``python -m wflow.cli``: :func:`is_cli_process`), handlers that hold the
signal; :func:`wflow.cli.main` takes it (:func:`take`) and ends the command as if the
signal had come a moment later. Anywhere else (``import wflow`` in a script, a notebook,
a test) importing this module changes nothing: no handler, no setting
(``tests/test_import_side_effects.py``).
"""

from __future__ import annotations

import os
import signal
import sys

__all__ = ["Terminated", "is_cli_process", "take", "installed", "handle", "check",
           "interrupted", "note_dropped", "take_dropped", "unwinding", "reset"]


class Terminated(KeyboardInterrupt):
    """SIGTERM or SIGHUP received: unwinds like Ctrl-C (staging removed, checkpoint kept)."""

    def __init__(self, signum: int, *args: object) -> None:
        super().__init__(*args)
        self.signum = int(signum)


#: Signals held while the command imports: Ctrl-C, SIGTERM, SIGHUP.
_HELD = tuple(getattr(signal, n) for n in ("SIGINT", "SIGTERM", "SIGHUP") if hasattr(signal, n))

_PENDING: list[int] = []
_ORIGINAL: dict[int, object] = {}
_SEEN: list[int] = []
_DROPPED: list[bool] = []
_UNWINDING: list[bool] = []


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
    """The handlers the import-time hold replaced (empty where it installed none)."""
    return dict(_ORIGINAL)


def take() -> int | None:
    """The first signal held during the imports (``None`` if none), forgotten afterwards."""
    return _PENDING.pop(0) if _PENDING else None


def _exception(signum: int) -> KeyboardInterrupt:
    return KeyboardInterrupt() if signum == signal.SIGINT else Terminated(signum)


#: Packages whose Python code must not be cut by an exception: llvmlite keeps its state
#: across ctypes callbacks and ``close()``/``__del__`` pairs (an LLVM object closed halfway
#: would be disposed again by its ``__del__``). numba's compiler and cache loader are
#: recognised by their lock instead: numba's other Python code (``numba.set_num_threads``,
#: on the stack of every direct-sum evaluation) is interruptible, and holding signals in
#: all of numba made 2 of 50 ``mpirun`` trials print the line twice.
_UNINTERRUPTIBLE = ("llvmlite",)

#: The import system's frames: an exception raised in Python code that an extension
#: module's initialisation calls (nanobind creating DOLFINx's enums) crossed C++ frames
#: that cannot carry it: ``terminate called after throwing an instance of
#: 'nanobind::python_error'`` (SIGABRT) or SIGSEGV, without the line (4 of 150 trials at
#: random delays under load).
_IMPORT_FILES = ("<frozen importlib._bootstrap>", "<frozen importlib._bootstrap_external>")


def _uninterruptible(frame: object) -> bool:
    """True while the main thread imports, compiles with numba or runs llvmlite.

    Either numba's global compiler lock is held by this thread (compiling, loading from
    or saving to the cache), or a frame on the stack belongs to the import system
    (:data:`_IMPORT_FILES`) or to :data:`_UNINTERRUPTIBLE`.
    """
    lock = sys.modules.get("numba.core.compiler_lock")
    try:
        if lock is not None and lock.global_compiler_lock.is_locked():
            return True
    except Exception:  # pragma: no cover - another numba's lock
        pass
    seps = ("/", "\\")
    marks = tuple(f"{a}{p}{b}" for p in _UNINTERRUPTIBLE for a in seps for b in seps)
    f = frame if frame is not None else sys._getframe(1)
    while f is not None:
        name = getattr(getattr(f, "f_code", None), "co_filename", "")
        if name in _IMPORT_FILES or any(m in name for m in marks):
            return True
        f = getattr(f, "f_back", None)
    return False


def handle(signum: int, frame: object = None) -> None:
    """The CLI's handler: record the signal, then raise (:class:`Terminated`, Ctrl-C's).

    During an import, inside numba's compiler or in llvmlite (:func:`_uninterruptible`) it
    only records the signal and notes it dropped: the CLI's watchdog delivers it again
    every 0.1 s until it lands outside (a compilation takes up to a minute), and
    :func:`check` raises it too.
    """
    if not _SEEN:
        _SEEN.append(int(signum))
    if _UNWINDING:  # the command is ending: a second exception would cut its clean-up
        return
    if _uninterruptible(frame):
        note_dropped()
        return
    _DROPPED.clear()  # raised now: nothing left for the watchdog to deliver again
    raise _exception(signum)


def interrupted() -> int | None:
    """The signal the CLI's handler received during this command (``None`` if none)."""
    return _SEEN[0] if _SEEN else None


def check() -> None:
    """Raise the interruption again if a signal was received (its exception may be lost).

    Cheap (a list test): call it between blocks of work that runs outside the
    interpreter, and before reporting success.
    """
    if _SEEN:
        _DROPPED.clear()  # raised now: nothing left for the watchdog to deliver again
        raise _exception(_SEEN[0])


def note_dropped() -> None:
    """The interruption's exception was dropped (the CLI's :data:`sys.unraisablehook`)."""
    _DROPPED.append(True)


def take_dropped() -> bool:
    """True once for each :func:`note_dropped` (the CLI's watchdog delivers it again)."""
    return bool(_DROPPED) and _DROPPED.pop() is True


def unwinding() -> None:
    """The CLI caught the interruption and cleans up: further signals are only recorded.

    A signal held during an import and raised by :func:`check` had left its note for the
    watchdog, whose delivery then cut the clean-up of an ``mpirun`` rank (a second
    traceback in 4 of 4 trials of ``wflow verify`` at 0.7-0.9 s).
    """
    _UNWINDING.append(True)
    _DROPPED.clear()


def reset() -> None:
    """Forget the recorded signal (the CLI, when a command ends)."""
    _SEEN.clear()
    _DROPPED.clear()
    _UNWINDING.clear()


if is_cli_process():
    for _s in _HELD:
        try:
            _ORIGINAL[_s] = signal.signal(_s, _hold)
        except (ValueError, OSError):  # pragma: no cover - not the main thread
            pass
