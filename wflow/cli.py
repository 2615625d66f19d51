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
* 1 also for a run that cannot finish writing: ``run failed: no space left on device
  while writing FILE`` (a full disk; ``wflow run`` keeps its checkpoint), or an output
  location that changed during the run (what appeared there is kept, the new results stay
  in the staging folder named in the message);
* 2 also for an output location in use by another running wflow process (the message
  names it: PID, host, command, start time; :mod:`wflow.infra.lock`), and for a command
  that is not MPI-aware started under ``mpirun -n P`` with ``P > 1`` (only ``pde``,
  ``verify``, ``reproduce`` and ``particles`` distribute their work, rank 0 writing);
* 128 + signal — interrupted: Ctrl-C (SIGINT, 130), SIGTERM (143) and SIGHUP (129) all
  behave alike: one line, no traceback; the staging folder is removed (``wflow run``
  keeps its checkpoint and prints how to resume). PETSc's own signal handler is turned
  off for the CLI's process (``PETSC_OPTIONS=-no_signal_handler``), so no PETSc banner;
  importing :mod:`wflow` changes no signal handler, only :func:`main` does, and
  restores them when it returns.

``-vv`` also logs the traceback of the errors reported in one line.
"""

from __future__ import annotations

import argparse
import contextlib
import importlib
import logging
import math
import os
import pkgutil
import signal
import sys
import threading
import time
from collections.abc import Callable

from . import commands
from .infra import interrupts
from .infra.interrupts import Terminated
from .infra.version import __version__

__all__ = ["main", "build_parser", "EXIT_OK", "EXIT_FAILED", "EXIT_BAD_INPUT", "EXIT_INTERRUPTED",
           "Terminated", "MPI_AWARE"]

EXIT_OK, EXIT_FAILED, EXIT_BAD_INPUT, EXIT_INTERRUPTED = 0, 1, 2, 130

#: Exceptions that mean bad input: reported in one line, exit status 2.
BAD_INPUT = (ValueError, KeyError, FileNotFoundError, FileExistsError, NotADirectoryError,
             IsADirectoryError, PermissionError)

logger = logging.getLogger("wflow.cli")

#: Commands that distribute their work under ``mpirun -n P`` (rank 0 writes); every other
#: command refuses to start under mpirun with more than one rank.
MPI_AWARE = frozenset({"pde", "verify", "reproduce", "particles", "kinetic", "run"})

#: Commands that load MPI (DOLFINx meshes, PETSc): MPI is initialised before the CLI
#: installs its signal handlers, because MPI's initialisation replaces the SIGHUP handler.
_USES_MPI = frozenset({"pde", "verify", "reproduce", "run", "jko", "kinetic"})

#: Signals handled like Ctrl-C (exit status 128 + signal).
_SIGNALS = tuple(getattr(signal, n) for n in ("SIGTERM", "SIGHUP") if hasattr(signal, n))


#: Seconds a rank of an mpirun job gets to unwind normally after SIGTERM/SIGHUP.
MPI_SIGNAL_GRACE = 2.0

#: Seconds after the signal at which a rank other than 0 concludes that rank 0 cannot end
#: the job (stuck in MPI holding the interpreter lock) and ends itself, rank 1 printing
#: the line on rank 0's behalf.
MPI_FALLBACK = 3 * MPI_SIGNAL_GRACE

#: ``(signum, time.monotonic())`` of the first signal a rank other than 0 received.
_DEFERRED: list[tuple[int, float]] = []

#: Taken by the thread that ends the rank: the line is printed once per rank.
_LEAVING = threading.Lock()


def _leave_mpi_job(code: int, rank: int, line: str, *, say: bool = False) -> None:
    """End this rank now, after its clean-up (staging removed, lock released).

    A signal reaches the ranks of an ``mpirun`` job at different points. Only rank 0
    unwinds (it holds the lock and the staging folder, and prints the line: ``say``);
    the other ranks hold the signal and keep computing (:func:`_on_signal_deferred`), so
    that no collective operation rank 0 is in can lose its partner: a rank blocked in
    one while holding the interpreter lock could run neither its handler nor
    :func:`_mpi_watchdog`, and ``mpirun`` would kill it (lock file left, line lost) when
    another rank ended first. Rank 0 leaves without MPI's finalisation (which would wait
    for the others); ``mpirun`` then ends the other ranks, ``128 + signal`` its exit
    status. A rank other than 0 still running :data:`MPI_FALLBACK` seconds after its
    signal leaves by itself (rank 0 is stuck), rank 1 printing the line for rank 0; a
    rank that never initialised MPI leaves at once, silently (nothing can be stuck).

    Under ``mpirun``, ``mpirun`` ends a job when one rank ends only if every rank has
    initialised MPI (a rank waiting in ``MPI_Init`` for one that left never returns):
    :func:`main` initialises MPI first of all for the MPI-aware commands, and takes a
    signal that came during the imports only afterwards.
    """
    from .infra.io import abandon_outputs

    if not _LEAVING.acquire(blocking=False):  # the other thread is ending the rank
        time.sleep(3600)
    say = say and rank == 0
    if rank != 0 and "mpi4py.MPI" in sys.modules:  # (without MPI, nothing can be stuck)
        t0 = _DEFERRED[0][1] if _DEFERRED else time.monotonic()
        time.sleep(max(0.0, t0 + MPI_FALLBACK - time.monotonic()))
        say = rank == 1
    abandon_outputs()
    if say:
        print(line, file=sys.stderr)
    with contextlib.suppress(Exception):
        sys.stdout.flush()
        sys.stderr.flush()
    time.sleep(0.5)  # mpirun forwards what was printed before it ends the job
    os._exit(code)


def _redeliver_dropped(signum: int, seconds: float, stopped: threading.Event) -> None:
    """For ``seconds``: deliver ``signum`` to the main thread again whenever it was dropped.

    An interruption raised inside a ctypes callback (numba's, llvmlite's) is dropped by
    Python; :func:`_signals_like_ctrl_c`'s hook notes it
    (:func:`wflow.infra.interrupts.note_dropped`), and it is delivered again here a
    moment later, when the main thread is most likely out of the callback; one that came
    during an import, inside numba's compiler or in llvmlite is held there
    (:func:`wflow.infra.interrupts.handle`) and delivered the same way. Only a dropped or
    held one: one that propagates is unwinding, and a second exception would cut its
    clean-up.
    """
    import _thread

    end = time.monotonic() + seconds
    while time.monotonic() < end and not stopped.wait(REDELIVER_SECONDS):
        if interrupts.take_dropped():
            _thread.interrupt_main(signum)


#: Seconds between a dropped interruption and its delivery again.
REDELIVER_SECONDS = 0.1


def _signal_watchdog(name: str, rank: int, size: int) -> Callable[[], None]:
    """A thread that follows every signal up; returns its stopper.

    Python runs signal handlers between bytecodes of the main thread. The C-level handler
    also writes the signal number to a wake-up pipe (:func:`signal.set_wakeup_fd`); this
    thread reads it and delivers the interruption again if its exception was dropped
    (:func:`_redeliver_dropped`). Under mpirun a rank blocked in a collective operation
    would never run the handler: if the main thread has not ended the rank within
    :data:`MPI_SIGNAL_GRACE` seconds (rank 0) or :data:`MPI_FALLBACK` seconds (the
    others), this thread ends it: :func:`_leave_mpi_job`.
    """
    if threading.current_thread() is not threading.main_thread():  # main() from a thread
        return lambda: None
    rfd, wfd = os.pipe()
    os.set_blocking(wfd, False)
    old = signal.set_wakeup_fd(wfd, warn_on_full_buffer=False)
    stopped = threading.Event()

    def watch() -> None:
        while True:
            try:
                data = os.read(rfd, 1)
            except OSError:
                return
            if not data:
                return
            signum = data[0]
            if signum not in (*_SIGNALS, signal.SIGINT):
                continue
            if size == 1:  # until the command ends: a compilation may hold it a minute
                _redeliver_dropped(signum, math.inf, stopped)
                continue
            line = _interrupted_line(name, signum, "")
            if rank == 0:  # the main thread had its chance to unwind: it is stuck in MPI
                _redeliver_dropped(signum, MPI_SIGNAL_GRACE, stopped)
                if stopped.is_set():  # the command ended meanwhile
                    return
            _leave_mpi_job(128 + signum, rank, line, say=True)

    threading.Thread(target=watch, name="wflow-signal-watchdog", daemon=True).start()

    def stop() -> None:
        stopped.set()
        signal.set_wakeup_fd(old)
        os.close(wfd)

    return stop


def _on_signal_deferred(signum: int, frame: object) -> None:
    """Rank ≠ 0 of an mpirun job: hold the signal, rank 0 ends the job."""
    if not _DEFERRED:
        _DEFERRED.append((int(signum), time.monotonic()))


def _ignore_late_signals() -> None:
    """The work done and reported: ignore SIGTERM, SIGHUP and Ctrl-C until the exit.

    MPI's finalisation (which waits for the other ranks) runs at the interpreter's exit,
    after Python has reset the handlers it installed to the defaults: a SIGTERM that came
    as the job ended killed the rank (``mpirun`` exit status 15, no line). Ignored
    signals are left alone by the interpreter's exit; one that comes now comes after the
    results were written and reported.
    """
    for s in (*_SIGNALS, signal.SIGINT):
        with contextlib.suppress(ValueError, OSError):
            signal.signal(s, signal.SIG_IGN)


def _interrupted_line(name: str, signum: int, detail: str) -> str:
    what = "interrupted" if signum == signal.SIGINT else \
        f"interrupted by {signal.Signals(signum).name}"
    return f"{name}: {what}" + (f"; {detail}" if detail else "")


def _install_handlers(rank: int, size: int) -> None:
    """SIGTERM/SIGHUP raise :class:`Terminated`, Ctrl-C :class:`KeyboardInterrupt`.

    Both recorded first (:func:`wflow.infra.interrupts.handle`: an exception raised where
    Python drops it, in a ctypes callback say, is raised again by
    :func:`~wflow.infra.interrupts.check`). Ranks other than 0 of an mpirun job hold all
    three (:func:`_on_signal_deferred`).
    """
    leader = size == 1 or rank == 0
    for s in (*_SIGNALS, signal.SIGINT):
        handler = interrupts.handle if leader else _on_signal_deferred
        with contextlib.suppress(ValueError, OSError):  # not the main thread
            signal.signal(s, handler)


@contextlib.contextmanager
def _signals_like_ctrl_c(rank: int = 0, size: int = 1, *, mpi: bool = False):
    """SIGTERM/SIGHUP raise :class:`Terminated` while the command runs; PETSc stays quiet.

    ``mpi``: initialise MPI first (:mod:`mpi4py`), whose start-up installs a SIGHUP
    handler of its own, then install the CLI's handlers again, so that they are the ones
    in force. An interruption Python would report as "Exception ignored" (raised in a
    ctypes callback) is silent (:data:`sys.unraisablehook`): it is recorded, and raised
    again by :func:`wflow.infra.interrupts.check`. The handlers and the hook found on
    entry are restored on exit.
    """
    old_env = os.environ.get("PETSC_OPTIONS")
    if "-no_signal_handler" not in (old_env or ""):
        os.environ["PETSC_OPTIONS"] = f"{old_env or ''} -no_signal_handler".strip()
    old = {}
    for s in (*_SIGNALS, signal.SIGINT):
        with contextlib.suppress(ValueError, OSError):
            old[s] = signal.getsignal(s)
    old_hook = sys.unraisablehook

    def unraisable(info: object) -> None:
        # the interruption raised where Python drops it (a ctypes callback): recorded and
        # raised again by interrupts.check(), so no "Exception ignored" traceback
        if isinstance(getattr(info, "exc_value", None), KeyboardInterrupt) and \
                interrupts.interrupted() is not None:
            interrupts.note_dropped()  # delivered again by the watchdog
            return
        old_hook(info)

    sys.unraisablehook = unraisable
    try:
        _install_handlers(rank, size)
        if mpi:
            with contextlib.suppress(ImportError):
                from mpi4py import MPI  # noqa: F401
            _install_handlers(rank, size)
        yield
    finally:
        sys.unraisablehook = old_hook
        for s, h in old.items():
            with contextlib.suppress(ValueError, OSError, TypeError):
                signal.signal(s, h)
        if old_env is None:
            os.environ.pop("PETSC_OPTIONS", None)
        else:
            os.environ["PETSC_OPTIONS"] = old_env


def build_parser() -> argparse.ArgumentParser:
    """Build the argument parser with every registered subcommand."""
    parser = argparse.ArgumentParser(
        prog="wflow",
        description="Mean-field dynamics of transformers: particles on S^{d-1}, the transformer "
        "PDE on sphere meshes, JKO schemes, and numerical verification of the theory "
        "(see docs/theory.md).",
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
    from .infra.parallel import launched_rank_size

    from_shell = argv is None
    if argv is None:  # the command's own process (not a call from Python): idle OpenMP
        # workers sleep at once instead of spinning (a shared machine); the user's value wins
        os.environ.setdefault("OMP_WAIT_POLICY", "PASSIVE")
    argv = sys.argv[1:] if argv is None else list(argv)
    rank, size = launched_rank_size()
    words = [a for a in argv if not a.startswith("-")]
    name = f"wflow {words[0]}" if words else "wflow"
    mpi_first = size > 1 and bool(words) and words[0] in MPI_AWARE
    # from here on a signal is one line (held by every rank until MPI is initialised)
    with contextlib.ExitStack() as stack, _signals_like_ctrl_c(1 if mpi_first else rank, size):
        stop_watchdog = _signal_watchdog(name, rank, size)
        try:
            if mpi_first:
                # every rank initialises MPI before it may leave (a rank waiting in MPI_Init
                # for one that left waits forever): rank 0 holds a signal meanwhile too
                with contextlib.suppress(ImportError):
                    from mpi4py import MPI  # noqa: F401
                _install_handlers(rank, size)  # (MPI's start-up replaced SIGHUP's)
                if rank == 0 and _DEFERRED:
                    interrupts.handle(_DEFERRED.pop()[0])
            early = interrupts.take()  # arrived while the package imported
            if early is not None:
                if size > 1 and rank != 0:
                    _on_signal_deferred(early, None)
                    _leave_mpi_job(128 + early, rank, _interrupted_line(name, early, ""))
                raise Terminated(early) if early != signal.SIGINT else KeyboardInterrupt
            code = _main(argv, rank, size)
            if from_shell and "mpi4py.MPI" in sys.modules:
                stack.callback(_ignore_late_signals)  # after the handlers are restored
            return code
        except KeyboardInterrupt as exc:
            interrupts.unwinding()  # a signal now is recorded, never raised into the clean-up
            # one line, no traceback; the message (if any) says how to resume
            signum = getattr(exc, "signum", signal.SIGINT)
            line = _interrupted_line(name, signum, str(exc))
            if size > 1:
                _leave_mpi_job(128 + int(signum), rank, line, say=rank == 0)
            print(line, file=sys.stderr)
            if from_shell:  # the command's process: end now, without the interpreter's
                # finalisation (an interruption inside numba's compiler or loader left
                # state that crashed it at exit: SIGSEGV, or death by the signal)
                logging.shutdown()
                with contextlib.suppress(Exception):
                    sys.stdout.flush()
                    sys.stderr.flush()
                os._exit(128 + int(signum))
            return 128 + int(signum)
        finally:
            interrupts.reset()
            if stop_watchdog is not None:
                stop_watchdog()


def _main(argv: list[str], rank: int, size: int) -> int:
    """:func:`main` once the signal handlers are in place."""
    parser = build_parser()
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
        if "mpi4py.MPI" in sys.modules:
            if sys.modules["mpi4py.MPI"].COMM_WORLD.rank == 0:
                print(line, file=sys.stderr)
        elif rank == 0:
            print(line, file=sys.stderr)

    if size > 1 and args.command not in MPI_AWARE:
        say(f"{name}: error: not MPI-aware: under mpirun -n {size} every rank would run the "
            f"same job into one output; run it as one process (without mpirun); MPI-aware "
            f"commands: {', '.join(sorted(MPI_AWARE))}")
        return EXIT_BAD_INPUT
    from .infra.io import OutputChangedError, is_disk_full, release_all_outputs

    try:
        with _signals_like_ctrl_c(rank, size, mpi=args.command in _USES_MPI):
            try:
                code = int(args.func(args) or 0)
            except BaseException:
                if _DEFERRED:  # rank ≠ 0 after a signal: rank 0 reports; this rank leaves
                    _leave_mpi_job(128 + _DEFERRED[0][0], rank,
                                   _interrupted_line(name, _DEFERRED[0][0], ""))
                raise
            if _DEFERRED:
                _leave_mpi_job(128 + _DEFERRED[0][0], rank,
                               _interrupted_line(name, _DEFERRED[0][0], ""))
            interrupts.check()  # a signal whose exception was dropped is not a success
            return code
    except OutputChangedError as exc:
        # the location changed during the run: kept, the results are in staging
        logger.debug("traceback", exc_info=True)
        say(f"{name}: run failed: {exc}")
        return EXIT_FAILED
    except OSError as exc:
        if not is_disk_full(exc):
            if isinstance(exc, BAD_INPUT):
                logger.debug("traceback", exc_info=True)
                say(f"{name}: error: {exc}")
                return EXIT_BAD_INPUT
            raise
        logger.debug("traceback", exc_info=True)
        where = exc.filename if exc.filename else "the output"
        say(f"{name}: run failed: no space left on device while writing {where}"
            + (f"; {exc.__notes__[0]}" if getattr(exc, "__notes__", None) else ""))
        return EXIT_FAILED
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
    finally:
        release_all_outputs()


if __name__ == "__main__":  # pragma: no cover
    sys.exit(main())
