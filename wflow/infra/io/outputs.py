"""Output folders: markers, claims, staging folders, their atomic installation (run_directory).

Part of :mod:`wflow.infra.io` (the package re-exports its names).
"""

from __future__ import annotations

import contextlib
import errno
import json
import logging
import os
import shutil
import stat
import sys
import tempfile
import time
from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from .. import lock
from .files import (
    _COMMAND_LINE,
    DiskFullError,
    OutputChangedError,
    OutputError,
    current_umask,
    is_disk_full,
    provenance,
    save_npz,
    write_csv,
    write_json,
)

logger = logging.getLogger(__name__)


#: Marker file of a finished wflow output folder (JSON: command, time, versions, files).
OUTPUT_MARKER = ".wflow-output.json"

#: Marker of a staging folder ``.DIR.partial-XXXX`` (JSON: incomplete, PID, host, command).
STAGING_MARKER = ".wflow-staging.json"

def read_output_marker(path: str | Path) -> dict[str, Any] | None:
    """The marker of a wflow output folder (see :data:`OUTPUT_MARKER`), or ``None``."""
    try:
        data = json.loads((Path(path) / OUTPUT_MARKER).read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return None
    if not isinstance(data, dict) or data.get("wflow_output") != 1 \
            or not isinstance(data.get("files"), list):
        return None
    return data


def _listing(root: Path) -> list[str]:
    """Every file (and link) below ``root`` as a POSIX path relative to it, sorted."""
    out = []
    for dirpath, dirnames, filenames in os.walk(root):
        base = Path(dirpath).relative_to(root)
        links = [d for d in dirnames if (Path(dirpath) / d).is_symlink()]
        out.extend((base / f).as_posix() for f in (*filenames, *links))
    return sorted(f for f in out if f != OUTPUT_MARKER)


def _foreign_entries(root: Path, marker: Mapping[str, Any]) -> list[str]:
    """Entries below ``root`` that its marker does not list (files wflow did not write)."""
    files = set(map(str, marker.get("files", [])))
    dirs = {p.as_posix() for f in files for p in Path(f).parents if p != Path(".")}
    extra = [f for f in _listing(root) if f not in files]
    for dirpath, dirnames, _ in os.walk(root):
        base = Path(dirpath).relative_to(root)
        extra += [(base / d).as_posix() for d in dirnames
                  if (base / d).as_posix() not in dirs and not (Path(dirpath) / d).is_symlink()]
    return sorted(set(extra))


def _check_location(out: str | Path, *, overwrite: bool, probe: bool) -> Path:
    """Absolute output path after the checks of :func:`prepare_output` (raises OutputError)."""
    raw = str(out)
    if not raw.strip():
        raise OutputError("--out: empty path")
    path = Path(os.path.abspath(Path(raw).expanduser()))
    cwd = Path(os.path.realpath(os.getcwd()))
    real = Path(os.path.realpath(path.parent)) / path.name
    if real == cwd or real in cwd.parents or path.parent == path:
        raise OutputError(f"--out {raw}: is the current folder or contains it; wflow writes "
                          "its results as a new folder: give a new path, e.g. "
                          f"--out {Path(raw) / 'run1'}")
    if path.is_symlink():
        raise OutputError(f"--out {raw}: is a symbolic link; wflow does not replace links: "
                          "give a new path")
    if path.exists():
        if not path.is_dir():
            raise OutputError(f"--out {raw}: exists and is a file, not a folder; wflow never "
                              "replaces files it did not write: give a new path")
        try:
            names = sorted(e.name for e in path.iterdir())
        except OSError as exc:
            raise OutputError(f"--out {raw}: cannot read the folder ({exc.strerror})") from None
        if names:
            marker = read_output_marker(path)
            if marker is None:
                raise OutputError(
                    f"--out {raw}: folder exists, is not empty and is not a wflow output "
                    f"({len(names)} entries, e.g. {names[0]!r}); wflow never deletes what it "
                    "did not write: give a new or empty folder")
            if not overwrite:
                raise OutputError(f"--out {raw}: holds a previous wflow output (written "
                                  f"{marker.get('created', '?')}); pass --overwrite to "
                                  "replace it, or give a new path")
            extra = _foreign_entries(path, marker)
            if extra:
                raise OutputError(
                    f"--out {raw}: the previous wflow output there also holds "
                    f"{len(extra)} entries wflow did not write (e.g. {extra[0]!r}), which "
                    "--overwrite would delete: move them out or give a new path")
    check_parent(path, probe=probe, name=f"--out {raw}")
    return path


def check_parent(path: Path, *, probe: bool = True, name: str | None = None) -> None:
    """Check that ``path`` can be created: its nearest existing parent is a writable folder.

    ``probe``: create and remove a folder there (the only reliable test, e.g. as root or
    on a read-only file system). Creates nothing. Raises :class:`OutputError`.
    """
    name = str(path) if name is None else name
    anc = path.parent
    while not anc.exists() and anc.parent != anc:
        anc = anc.parent
    if not anc.is_dir():
        raise OutputError(f"{name}: cannot create it, {anc} is not a folder")
    if probe:
        try:
            os.rmdir(tempfile.mkdtemp(prefix=".wflow-probe-", dir=anc))
        except OSError as exc:
            raise OutputError(f"{name}: cannot write in {anc} ({exc.strerror or exc})") from None


def prepare_output(out: str | Path, *, overwrite: bool = False) -> Path:
    """Check an output location before computing; returns it as an absolute path.

    Refuses (:class:`OutputError`, naming the reason): an empty path; the current folder
    or one containing it (``.``, ``..``, ``~`` when run from below it); a symbolic link;
    a regular file; an existing folder that is not empty and not a wflow output; a wflow
    output without ``overwrite``; a wflow output holding entries its marker does not list;
    a location whose parent cannot be created or written (probed by creating and removing
    a folder in the nearest existing parent). ``~`` is expanded. Creates nothing.

    Under MPI (when :mod:`mpi4py` is loaded) rank 0 decides and every rank gets the same
    answer.
    """
    return _rank0_decides(lambda: _check_location(out, overwrite=overwrite, probe=True))


def write_run_files(stage: Path, summary: Mapping[str, Any], columns: Mapping[str, Any],
                    arrays: Mapping[str, Mapping[str, Any]] | None = None) -> None:
    """Write a run's files into its staging folder ``stage`` (of :func:`run_directory`).

    ``summary.json`` (``summary``), ``diagnostics.csv`` (``columns``, one row per
    output time) and, for each ``name → {key: array}`` of ``arrays``, the archive
    ``name`` (:func:`~wflow.infra.io.save_npz`), in this order.
    """
    write_json(stage / "summary.json", summary)
    write_csv(stage / "diagnostics.csv", columns)
    for name, npz in (arrays or {}).items():
        save_npz(stage / name, **npz)


def _rank0_decides(decide: Callable[[], Path]) -> Path:
    """``decide()``; under MPI (:mod:`mpi4py` loaded, several ranks) on rank 0 only.

    Rank 0's answer, or the message of its :class:`OutputError` (raised again as an
    :class:`OutputError`), is broadcast, so every rank returns or raises alike.
    """
    if "mpi4py.MPI" not in sys.modules:
        return decide()
    from ..parallel import comm_rank_size

    comm, rank, size = comm_rank_size()
    if size == 1:
        return decide()
    path = err = None
    if rank == 0:
        try:
            path = decide()
        except OutputError as exc:
            err = str(exc)
    path, err = comm.bcast((path, err), root=0)
    if err is not None:
        raise OutputError(err)
    return path


@dataclass(frozen=True)
class _Claim:
    """What :func:`claim_output` found at a location (compared again at the final move)."""

    overwrite: bool
    state: tuple | None


_CLAIMS: dict[Path, _Claim] = {}


def _state(path: Path) -> tuple | None:
    """Identity of what is at ``path``: ``None`` (nothing), else type, inode, marker, names.

    A wflow output is identified by its folder's inode and its marker's inode, mtime and
    size (every output writes a fresh marker, atomically: a new inode); anything else by
    its inode and its entries.
    """
    try:
        st = os.lstat(path)
    except FileNotFoundError:
        return None
    marker = None
    with contextlib.suppress(OSError):
        ms = os.stat(path / OUTPUT_MARKER)
        marker = (ms.st_ino, ms.st_mtime_ns, ms.st_size)
    names: tuple[str, ...] = ()
    if marker is None and stat.S_ISDIR(st.st_mode):
        with contextlib.suppress(OSError):
            names = tuple(sorted(os.listdir(path)))
    return (stat.S_IFMT(st.st_mode), st.st_ino, st.st_dev, marker, names)


def _what(path: Path, state: tuple | None) -> str:
    """Words for a :func:`_state`: "nothing", "an empty folder", "the wflow output of ..."."""
    if state is None:
        return "nothing"
    if not stat.S_ISDIR(state[0]):
        return "a file"
    if state[3] is None:
        return "an empty folder" if not state[4] else f"a folder of {len(state[4])} entries"
    return "a wflow output"


def _describe_now(path: Path) -> str:
    state = _state(path)
    what = _what(path, state)
    if state is not None and state[3] is not None:
        m = read_output_marker(path) or {}
        cmd = " ".join(map(str, m.get("command", [])))
        what += f" written {m.get('created', '?')}" + (f" by `{cmd}`" if cmd else "")
    return what


def claim_output(out: str | Path, *, overwrite: bool = False) -> Path:
    """Check, lock and record an output location before computing (what commands call).

    The checks of :func:`prepare_output`; then an exclusive lock on the location
    (:func:`wflow.infra.lock.acquire`: another running wflow process on it is refused at
    once, :class:`~wflow.infra.lock.LockedError`, naming it), the checks again under the
    lock, and a record of what is there for :func:`run_directory`'s final move (which
    replaces only that, and only with ``overwrite``). Stale staging folders of dead wflow
    processes beside it are removed (:func:`remove_stale_staging`). The lock is held
    until :func:`release_output` (or the end of the process). Creates only the lock file
    (and the missing parent folders, removed with it if left empty).

    Under MPI rank 0 claims and every rank gets the same answer.
    """
    return _rank0_decides(lambda: _claim(out, overwrite=overwrite))


def _claim(out: str | Path, *, overwrite: bool) -> Path:
    path = _check_location(out, overwrite=overwrite, probe=True)
    try:
        lock.acquire(path)
    except lock.LockedError as exc:
        raise OutputError(str(exc)) from None
    try:
        path = _check_location(out, overwrite=overwrite, probe=True)  # again, under the lock
        remove_stale_staging(path)
        _CLAIMS[path] = _Claim(overwrite=overwrite, state=_state(path))
    except BaseException:
        lock.release(path)
        raise
    return path


def release_output(out: str | Path) -> None:
    """Forget the claim on ``out`` and release its lock (removes the lock file)."""
    path = Path(os.path.abspath(Path(str(out)).expanduser()))
    if _CLAIMS.pop(path, None) is not None:
        lock.release(path)


#: Staging folders being written by this process (removed by :func:`abandon_outputs`).
_STAGES: set[Path] = set()


def abandon_outputs() -> None:
    """Remove this process's staging folders and release its claims.

    For a process that must end at once (the CLI under mpirun, when a signal found a rank
    stuck in MPI).
    """
    for stage in list(_STAGES):
        shutil.rmtree(stage, ignore_errors=True)
    _STAGES.clear()
    release_all_outputs()


def release_all_outputs() -> None:
    """Forget every claim and release every lock of this process (end of a command)."""
    _CLAIMS.clear()
    lock.release_all()


def stale_staging(out: str | Path) -> list[Path]:
    """Staging folders of ``out`` left by dead wflow processes (their marker says so).

    ``.NAME.partial-*`` folders beside ``out`` holding :data:`STAGING_MARKER` whose PID
    no longer runs on this host. Folders without the marker are not wflow's to judge.
    """
    path = Path(os.path.abspath(Path(str(out)).expanduser()))
    host = _hostname()
    found = []
    with contextlib.suppress(OSError):
        for q in path.parent.glob(f".{glob_escape(path.name)}.partial-*"):
            try:
                info = json.loads((q / STAGING_MARKER).read_text(encoding="utf-8"))
            except (OSError, ValueError):
                continue
            if not isinstance(info, dict) or info.get("wflow_staging") != 1:
                continue
            if info.get("host") == host and not lock.pid_alive(info.get("pid", -1)):
                found.append(q)
    return sorted(found)


def glob_escape(name: str) -> str:
    """``name`` with the glob metacharacters escaped (``glob.escape``)."""
    import glob

    return glob.escape(name)


def _hostname() -> str:
    import socket

    return socket.gethostname()


def remove_stale_staging(out: str | Path) -> list[Path]:
    """Remove :func:`stale_staging` folders of ``out`` (with a warning naming each)."""
    gone = stale_staging(out)
    for q in gone:
        logger.warning("removing %s: an incomplete output of a wflow process that ended "
                       "without cleaning up", q)
        shutil.rmtree(q, ignore_errors=True)
    return gone


def _marker(stage: Path) -> dict[str, Any]:
    cmd = _COMMAND_LINE.get()
    return {"wflow_output": 1,
            "note": "written by wflow; `--overwrite` replaces this folder only while it holds "
                    "nothing but the files listed here",
            "command": cmd if cmd is not None else ["python", *sys.argv],
            "cwd": os.getcwd(), "created": time.strftime("%Y-%m-%dT%H:%M:%S%z"),
            "provenance": provenance(), "files": _listing(stage)}


def _exchange(a: Path, b: Path) -> bool:
    """Swap two paths atomically (Linux ``renameat2(RENAME_EXCHANGE)``); False if unsupported."""
    if not sys.platform.startswith("linux"):
        return False
    import ctypes

    try:
        fn = ctypes.CDLL(None, use_errno=True).renameat2
    except (OSError, AttributeError):
        return False
    fn.argtypes = [ctypes.c_int, ctypes.c_char_p, ctypes.c_int, ctypes.c_char_p, ctypes.c_uint]
    at_fdcwd, rename_exchange = -100, 2
    if fn(at_fdcwd, os.fsencode(a), at_fdcwd, os.fsencode(b), rename_exchange) == 0:
        return True
    code = ctypes.get_errno()
    if code in (errno.ENOSYS, errno.EINVAL, errno.EOPNOTSUPP):
        return False
    raise OSError(code, os.strerror(code), str(b))


def _remove_output(path: Path) -> None:
    """Delete a wflow output: the files its marker lists, then the folders left empty."""
    marker = read_output_marker(path)
    files = [] if marker is None else [str(f) for f in marker["files"]]
    for f in (*files, OUTPUT_MARKER):
        p = path / f
        if p.is_symlink() or p.is_file():
            with contextlib.suppress(FileNotFoundError):
                p.unlink()
    for dirpath, _, _ in sorted(os.walk(path, topdown=False), key=lambda w: -len(w[0])):
        with contextlib.suppress(OSError):
            os.rmdir(dirpath)  # only succeeds on empty folders
    if path.exists():
        logger.warning("kept %s: it holds files wflow did not write", path)


def _install(stage: Path, path: Path, *, overwrite: bool, claim: _Claim | None = None) -> None:
    """Move a finished staging folder to ``path`` (checks of :func:`prepare_output` again).

    With a ``claim`` the location must still be what was claimed (else
    :class:`OutputChangedError`).
    """
    if claim is not None and _state(path) != claim.state:
        raise OutputChangedError(
            f"{path}: changed during the run (it was {_what(path, claim.state)} when the "
            f"run started, it is now {_describe_now(path)}); wflow keeps what is there")
    _check_location(path, overwrite=overwrite, probe=False)
    if not path.exists():
        os.rename(stage, path)
        return
    if not any(path.iterdir()):
        os.rmdir(path)  # an empty folder (fails if something appeared meanwhile)
        os.rename(stage, path)
        return
    if _exchange(stage, path):  # atomic: `path` is the new output, `stage` the old one
        _remove_output(stage)
        return
    old = Path(tempfile.mkdtemp(prefix=f".{path.name}.old-", dir=path.parent))
    os.rename(path, old / path.name)
    os.rename(stage, path)
    _remove_output(old / path.name)
    with contextlib.suppress(OSError):
        os.rmdir(old)


def _make_parents(folder: Path) -> list[Path]:
    """``mkdir -p folder``; returns the folders it created (outermost first)."""
    missing = []
    p = folder
    while not p.exists():
        missing.append(p)
        p = p.parent
    for q in reversed(missing):
        q.mkdir(mode=0o777)  # the umask applies
    return list(reversed(missing))


@contextlib.contextmanager
def run_directory(out: str | Path, *, overwrite: bool | None = None) -> Iterator[Path]:
    """All-or-nothing output folder that never replaces what wflow did not write.

    Yields a fresh staging folder beside ``out`` holding :data:`STAGING_MARKER`. On
    normal exit the staging marker is replaced by :data:`OUTPUT_MARKER` (command line,
    time, versions, list of files) and the folder is moved to ``out``: a missing or empty
    ``out`` is simply replaced, a previous wflow output is swapped atomically and deleted
    (only with ``overwrite``, and only the files its marker lists).

    If ``out`` was claimed (:func:`claim_output`, what the commands do), ``overwrite``
    defaults to the claim's and the move happens only if ``out`` is still what the claim
    found; otherwise (library use) ``overwrite`` defaults to ``True``, the location is
    locked for the duration (:mod:`wflow.infra.lock`) and checked again at the end. A
    refused move raises :class:`OutputChangedError` and the results stay in the staging
    folder named in the message. On an exception (Ctrl-C and SIGTERM included) the
    staging folder and any parent folders created for it are removed and ``out`` is left
    untouched; a full disk is :class:`DiskFullError` naming the file.
    """
    path = Path(os.path.abspath(Path(str(out)).expanduser())) if str(out).strip() else None
    claim = _CLAIMS.get(path) if path is not None else None
    if claim is not None:
        ow = claim.overwrite if overwrite is None else overwrite
    else:
        ow = True if overwrite is None else overwrite
        path = _check_location(out, overwrite=ow, probe=False)
    own_lock = not lock.held(path)
    if own_lock:
        try:
            lock.acquire(path)
        except lock.LockedError as exc:
            raise OutputError(str(exc)) from None
    try:
        yield from _staged(path, ow, claim)
    finally:
        if own_lock:
            lock.release(path)


def _staged(path: Path, overwrite: bool, claim: _Claim | None) -> Iterator[Path]:
    created = _make_parents(path.parent)
    try:
        stage = Path(tempfile.mkdtemp(prefix=f".{path.name}.partial-", dir=path.parent))
        _STAGES.add(stage)
        os.chmod(stage, 0o777 & ~current_umask())
        cmd = _COMMAND_LINE.get()
        write_json(stage / STAGING_MARKER, {
            "wflow_staging": 1, "incomplete": True,
            "note": "an output wflow was writing; not a result (removed by the next run "
                    "on this location once its process has ended)",
            "pid": os.getpid(), "host": _hostname(), "target": str(path),
            "command": cmd if cmd is not None else ["python", *sys.argv],
            "created": time.strftime("%Y-%m-%dT%H:%M:%S%z")})
    except BaseException as exc:
        with contextlib.suppress(NameError):
            shutil.rmtree(stage, ignore_errors=True)
        for q in reversed(created):
            with contextlib.suppress(OSError):
                q.rmdir()
        if is_disk_full(exc) and not isinstance(exc, DiskFullError):
            raise DiskFullError(path.parent) from exc
        raise
    try:
        yield stage
        os.unlink(stage / STAGING_MARKER)
        write_json(stage / OUTPUT_MARKER, _marker(stage))
    except BaseException as exc:
        shutil.rmtree(stage, ignore_errors=True)
        for q in reversed(created):
            with contextlib.suppress(OSError):
                q.rmdir()
        if is_disk_full(exc) and not isinstance(exc, DiskFullError):
            raise DiskFullError(getattr(exc, "filename", None) or f"a file in {path}") \
                from exc
        raise
    finally:
        _STAGES.discard(stage)
    try:
        _install(stage, path, overwrite=overwrite, claim=claim)
    except OutputChangedError as exc:
        raise OutputChangedError(f"{exc}; the new results are kept in {stage}") from None
    except (OSError, OutputError) as exc:
        raise OutputChangedError(f"{exc}; the results are kept in {stage}") from None
    if claim is not None:  # the new output is this process's own: it may replace it again
        _CLAIMS[path] = _Claim(overwrite=True, state=_state(path))
