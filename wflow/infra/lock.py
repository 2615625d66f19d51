"""Exclusive locks on output locations: two wflow processes never write one ``--out``.

A lock is an OS file lock (``fcntl.flock``, exclusive, non-blocking) on a lock file
beside the location: ``.DIR.wflow-lock`` for ``DIR`` (and ``.DIR.ckpt.wflow-lock`` for
the main job's checkpoint ``DIR.ckpt``). The file holds JSON naming the holder::

    {"wflow_lock": 1, "pid": 1234, "host": "node7", "command": ["wflow", "run", ...],
     "started": "2026-12-01T09:00:00+0000"}

* A second process asking for a held lock is refused at once with :class:`LockedError`
  (an :class:`~wflow.infra.io.OutputError`, exit status 2 on the command line) naming the
  holder: PID, host, command, start time.
* The kernel releases an ``flock`` when its process dies (``kill -9`` included), so a lock
  file left by a dead process can be locked again: it is *stale*, and taken over with a
  warning naming the dead holder.
* Locks are held by the process (a registry keyed by the location), re-entrant within it,
  and released (the file removed) by :func:`release` / :func:`release_all` or at exit.

The lock file is removed only while it is held and only if it is still the locked file
(the inode is compared after locking, so a process that opened a file that was then
removed retries on the new one: no two holders ever coexist).
"""

from __future__ import annotations

import atexit
import contextlib
import errno
import fcntl
import json
import logging
import os
import socket
import sys
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

__all__ = ["LockedError", "OutputLock", "lock_path", "acquire", "release", "release_all",
           "held", "LOCK_SUFFIX", "is_lock_file", "read_lock", "pid_alive", "set_command"]

logger = logging.getLogger(__name__)

#: Lock file of ``DIR``: ``.DIR`` + this suffix, beside ``DIR``.
LOCK_SUFFIX = ".wflow-lock"


class LockedError(ValueError):
    """The location is locked by another running wflow process (exit status 2)."""


def lock_path(location: str | Path) -> Path:
    """The lock file of ``location``: ``.NAME.wflow-lock`` in the same folder."""
    p = Path(os.path.abspath(Path(location).expanduser()))
    return p.with_name(f".{p.name}{LOCK_SUFFIX}")


def is_lock_file(path: str | Path) -> bool:
    """True for a wflow lock file (the name and the JSON content)."""
    p = Path(path)
    return p.name.startswith(".") and p.name.endswith(LOCK_SUFFIX) and read_lock(p) is not None


def read_lock(path: str | Path) -> dict[str, Any] | None:
    """The holder recorded in a lock file, or ``None`` (missing, empty or not wflow's)."""
    try:
        data = json.loads(Path(path).read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return None
    return data if isinstance(data, dict) and data.get("wflow_lock") == 1 else None


def pid_alive(pid: int) -> bool:
    """True if a process ``pid`` exists on this machine (``kill(pid, 0)``)."""
    try:
        os.kill(int(pid), 0)
    except ProcessLookupError:
        return False
    except PermissionError:  # exists, owned by someone else
        return True
    except (OSError, ValueError, OverflowError):
        return False
    return True


def _describe(info: dict[str, Any] | None) -> str:
    if not info:
        return "another process (no details recorded)"
    cmd = " ".join(map(str, info.get("command", []))) or "?"
    return (f"PID {info.get('pid', '?')} on {info.get('host', '?')}, started "
            f"{info.get('started', '?')}: {cmd}")


#: The command line recorded in lock files (set by :func:`wflow.infra.io.set_command_line`).
_COMMAND: list[str] | None = None


def set_command(argv: list[str] | None) -> None:
    """Record the command line that lock files name (``None``: ``python`` + ``sys.argv``)."""
    global _COMMAND
    _COMMAND = None if argv is None else list(argv)


def _command() -> list[str]:
    return list(_COMMAND) if _COMMAND is not None else ["python", *sys.argv]


@dataclass
class OutputLock:
    """A held lock: the location, the lock file and its open descriptor."""

    location: Path
    path: Path
    fd: int
    created: tuple[Path, ...] = ()
    count: int = 1

    def release(self) -> None:
        """Remove the lock file (still ours) and drop the lock."""
        with contextlib.suppress(OSError):
            st, fst = os.stat(self.path), os.fstat(self.fd)
            if (st.st_ino, st.st_dev) == (fst.st_ino, fst.st_dev):
                os.unlink(self.path)
        with contextlib.suppress(OSError):
            os.close(self.fd)
        for q in reversed(self.created):  # parents made for the lock, if left empty
            with contextlib.suppress(OSError):
                q.rmdir()


_HELD: dict[Path, OutputLock] = {}


def held(location: str | Path) -> bool:
    """True if this process holds the lock of ``location``."""
    return lock_path(location) in _HELD


def acquire(location: str | Path, *, what: str = "--out") -> OutputLock:
    """Lock ``location`` for this process (re-entrant); refuse at once if another holds it.

    Creates the lock file ``.NAME.wflow-lock`` beside ``location`` (and the missing
    parent folders, removed again on :func:`release` if still empty). A stale lock file
    (its process died, so the kernel dropped its ``flock``) is taken over with a warning.

    Raises
    ------
    LockedError
        Another live process holds the lock; the message names it and ``what``.
    """
    lp = lock_path(location)
    if lp in _HELD:
        _HELD[lp].count += 1
        return _HELD[lp]
    created = []
    q = lp.parent
    while not q.exists():
        created.append(q)
        q = q.parent
    for q in reversed(created):
        q.mkdir(mode=0o777, exist_ok=True)
    created.reverse()
    for _ in range(20):
        fd = os.open(lp, os.O_RDWR | os.O_CREAT, 0o666)
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except OSError as exc:
            os.close(fd)
            if exc.errno in (errno.ENOLCK, errno.EOPNOTSUPP, errno.ENOSYS, errno.EINVAL):
                logger.warning("%s %s: this file system does not support locks (%s); "
                               "running without one", what, location, exc.strerror)
                with contextlib.suppress(OSError):
                    os.unlink(lp)
                lock = OutputLock(Path(os.path.abspath(location)), lp, os.open(
                    os.devnull, os.O_RDONLY), tuple(created))
                _HELD[lp] = lock
                return lock
            if exc.errno not in (errno.EWOULDBLOCK, errno.EAGAIN, errno.EACCES):
                raise
            info = read_lock(lp)
            raise LockedError(
                f"{what} {location}: in use by another wflow process ({_describe(info)}); "
                f"wait for it to finish, or give another path (lock file {lp})") from None
        try:
            st, fst = os.stat(lp), os.fstat(fd)
        except FileNotFoundError:
            os.close(fd)
            continue
        if (st.st_ino, st.st_dev) != (fst.st_ino, fst.st_dev):
            os.close(fd)  # the file we locked was removed and replaced meanwhile: retry
            continue
        break
    else:  # pragma: no cover - 20 races in a row
        raise LockedError(f"{what} {location}: cannot lock {lp} (it keeps changing)")
    old = read_lock(lp)
    if old is not None and old.get("pid") != os.getpid():
        same_host = old.get("host") == socket.gethostname()
        state = ("no longer running" if same_host and not pid_alive(old.get("pid", -1))
                 else "its lock was released")
        logger.warning("%s %s: taking over the stale lock of a wflow process that ended "
                       "without releasing it (%s; %s)", what, location, _describe(old), state)
    info = {"wflow_lock": 1, "pid": os.getpid(), "host": socket.gethostname(),
            "command": _command(), "started": time.strftime("%Y-%m-%dT%H:%M:%S%z"),
            "location": str(Path(os.path.abspath(location)))}
    data = (json.dumps(info) + "\n").encode()
    os.ftruncate(fd, 0)
    os.pwrite(fd, data, 0)  # the file's mode: 0o666 & ~umask (os.open applies the umask)
    lock = OutputLock(Path(os.path.abspath(location)), lp, fd, tuple(created))
    _HELD[lp] = lock
    return lock


def release(location: str | Path) -> None:
    """Release this process's lock of ``location`` (once per :func:`acquire`)."""
    lp = lock_path(location)
    lock = _HELD.get(lp)
    if lock is None:
        return
    lock.count -= 1
    if lock.count <= 0:
        del _HELD[lp]
        lock.release()


def release_all() -> None:
    """Release every lock this process holds (the CLI calls it before exiting)."""
    for lp in list(_HELD):
        _HELD.pop(lp).release()


atexit.register(release_all)
