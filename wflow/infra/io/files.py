"""Atomic writers, JSON/CSV/NPZ outputs, finite checks, provenance and the errors of the outputs.

Part of :mod:`wflow.infra.io` (the package re-exports its names).
"""

from __future__ import annotations

import contextlib
import contextvars
import csv
import errno
import io
import json
import math
import os
import tempfile
import time
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any, Literal

import numpy as np

from .. import lock

#: The ``wflow`` command line being run (recorded in the output marker).
_COMMAND_LINE: contextvars.ContextVar[list[str] | None] = contextvars.ContextVar(
    "wflow_command_line", default=None)


class OutputError(ValueError):
    """An output location that wflow refuses to use (exit status 2 on the command line)."""


class OutputChangedError(OutputError):
    """The output location changed during the run; the results stay in staging (exit 1)."""


class DiskFullError(OSError):
    """No space left on the device while writing ``filename`` (exit status 1)."""

    def __init__(self, filename: str | Path) -> None:
        super().__init__(errno.ENOSPC, "no space left on device", str(filename))

    def __str__(self) -> str:
        return f"no space left on device while writing {self.filename}"


def is_disk_full(exc: BaseException) -> bool:
    """ENOSPC / EDQUOT, also where a library reports it only in its message (HDF5)."""
    if not isinstance(exc, OSError):
        return False
    if exc.errno in (errno.ENOSPC, errno.EDQUOT):
        return True
    text = str(exc)
    return "No space left on device" in text or "errno = 28" in text


def set_command_line(argv: Sequence[str]) -> None:
    """Record the ``wflow`` command line for the markers (and locks) written next."""
    _COMMAND_LINE.set(["wflow", *map(str, argv)])
    lock.set_command(["wflow", *map(str, argv)])


def current_umask() -> int:
    """The process's file-mode creation mask (read from ``/proc`` where possible)."""
    with contextlib.suppress(OSError, ValueError):
        with open("/proc/self/status", encoding="ascii") as fh:
            for line in fh:
                if line.startswith("Umask:"):
                    return int(line.split()[1], 8)
    old = os.umask(0o022)  # elsewhere: set and restore (not thread-safe, fine for a CLI)
    os.umask(old)
    return old


def atomic_write_bytes(path: str | Path, data: bytes) -> None:
    """Write ``data`` to ``path`` atomically (temp file + ``os.replace``).

    The file gets mode ``0o666 & ~umask`` (``mkstemp`` alone would give ``0o600``).
    """
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(prefix=f".{path.name}.", dir=path.parent)
    try:
        os.fchmod(fd, 0o666 & ~current_umask())
        with os.fdopen(fd, "wb") as fh:
            fh.write(data)
            fh.flush()
            os.fsync(fh.fileno())
        os.replace(tmp, path)
    except BaseException as exc:
        with contextlib.suppress(FileNotFoundError):
            os.unlink(tmp)
        if is_disk_full(exc) and not isinstance(exc, DiskFullError):
            raise DiskFullError(path) from exc
        raise


def atomic_write_text(path: str | Path, text: str) -> None:
    """Write text (UTF-8) atomically."""
    atomic_write_bytes(path, text.encode("utf-8"))


def to_jsonable(obj: Any, *, nonfinite: Literal["string", "null"] = "string") -> Any:
    """Convert NumPy scalars/arrays, paths and dataclass-like objects for ``json``.

    Objects with a ``to_dict()`` method are converted through it. Non-finite floats
    become the strings ``"nan"``, ``"inf"``, ``"-inf"`` (``nonfinite="string"``, wflow's
    convention) or ``None``, i.e. JSON ``null`` (``"null"``, the Gaussian outputs'), so
    the JSON stays standard either way; :func:`check_finite` is the guard that refuses
    them where a result must be finite.
    """
    if isinstance(obj, Mapping):
        return {str(k): to_jsonable(v, nonfinite=nonfinite) for k, v in obj.items()}
    if isinstance(obj, (list, tuple)):
        return [to_jsonable(v, nonfinite=nonfinite) for v in obj]
    if isinstance(obj, np.ndarray):
        return to_jsonable(obj.tolist(), nonfinite=nonfinite)
    if isinstance(obj, (np.bool_, bool)):
        return bool(obj)
    if isinstance(obj, (np.integer, int)):
        return int(obj)
    if isinstance(obj, (np.floating, float)):
        f = float(obj)
        if math.isfinite(f):
            return f
        if nonfinite == "null":
            return None
        return "nan" if math.isnan(f) else ("inf" if f > 0 else "-inf")
    if isinstance(obj, Path):
        return str(obj)
    if hasattr(obj, "to_dict"):
        return to_jsonable(obj.to_dict(), nonfinite=nonfinite)
    if hasattr(obj, "_asdict"):
        return to_jsonable(obj._asdict(), nonfinite=nonfinite)
    if hasattr(obj, "__dataclass_fields__"):
        return to_jsonable({k: getattr(obj, k) for k in obj.__dataclass_fields__},
                           nonfinite=nonfinite)
    return obj


def write_json(path: str | Path, obj: Any) -> None:
    """Write ``obj`` as indented JSON, atomically."""
    atomic_write_text(path, json.dumps(to_jsonable(obj), indent=2, sort_keys=False) + "\n")


def write_csv(path: str | Path, columns: Mapping[str, Sequence[float] | np.ndarray]) -> None:
    """Write equal-length columns as CSV (header = keys), atomically; full float precision."""
    names = list(columns)
    cols = [np.asarray(columns[k]) for k in names]
    n = {c.shape[0] for c in cols}
    if len(n) > 1:
        raise ValueError(f"write_csv: columns have different lengths {sorted(n)}")
    buf = io.StringIO()
    wr = csv.writer(buf)
    wr.writerow(names)
    for row in zip(*cols, strict=True):
        wr.writerow([repr(float(v)) if np.ndim(v) == 0 else v for v in row])
    atomic_write_text(path, buf.getvalue())


def save_npz(path: str | Path, **arrays: np.ndarray) -> None:
    """``np.savez_compressed`` atomically."""
    buf = io.BytesIO()
    np.savez_compressed(buf, **arrays)
    atomic_write_bytes(path, buf.getvalue())


def check_finite(name: str, value: Any) -> None:
    """Raise ``FloatingPointError`` naming ``name`` if ``value`` holds NaN/Inf (recursively)."""
    if isinstance(value, Mapping):
        for k, v in value.items():
            check_finite(f"{name}.{k}", v)
        return
    if isinstance(value, (list, tuple)):
        for i, v in enumerate(value):
            check_finite(f"{name}[{i}]", v)
        return
    if isinstance(value, (np.ndarray, float, np.floating)):
        arr = np.asarray(value)
        if arr.dtype.kind == "f" and not np.all(np.isfinite(arr)):
            raise FloatingPointError(f"{name}: non-finite value (NaN/Inf) in the result")


def finish_history(rows: Mapping[str, Sequence[Any]], status: str,
                   message: str) -> tuple[dict[str, np.ndarray], np.ndarray, str, str]:
    """End of a solver's run loop: recorded rows as arrays, and the final status.

    Returns ``(history, t, status, message)``: ``history`` holds every row but ``"t"`` as
    an array, ``t`` the recorded times. A non-finite value in any column turns a status
    other than ``"failed"`` into ``"failed"`` with a message naming the column: a run
    never reports success (or a softer status) with NaN/Inf in its diagnostics.
    """
    history = {k: np.asarray(v) for k, v in rows.items() if k != "t"}
    t = np.asarray(rows.get("t", []), dtype=np.float64)
    for name, arr in history.items():
        if status != "failed" and not np.all(np.isfinite(arr)):
            status, message = "failed", f"non-finite values in diagnostic {name!r}"
    return history, t, status, message

def provenance() -> dict[str, Any]:
    """Versions of wflow and its numerical dependencies, and the machine."""
    import platform

    import scipy

    from ..version import __version__

    out = {"wflow": __version__, "numpy": np.__version__, "scipy": scipy.__version__,
           "python": platform.python_version(), "machine": platform.machine(),
           "time": time.strftime("%Y-%m-%dT%H:%M:%S%z")}
    try:
        import ot

        out["pot"] = ot.__version__
    except ImportError:  # pragma: no cover
        pass
    return out


def history_columns(t: np.ndarray, history: dict[str, np.ndarray]) -> dict[str, np.ndarray]:
    """Flatten per-path histories into CSV columns.

    One path: ``name`` (scalars) or ``name_h{h}`` (per head; ``E_h`` becomes ``E_h0``,
    ``E_h1``, …). Several paths: the mean under the same names plus ``<name>_std``
    (Monte-Carlo standard deviation, ``ddof=1``).
    """
    cols: dict[str, np.ndarray] = {"t": t}
    for name, arr in history.items():
        P = arr.shape[0]
        mean = arr.mean(axis=0)
        std = arr.std(axis=0, ddof=1) if P > 1 else None
        if mean.ndim == 1:
            cols[name] = mean
            if std is not None:
                cols[f"{name}_std"] = std
        else:
            base = name[:-2] if name.endswith("_h") else name
            for h in range(mean.shape[1]):
                cols[f"{base}_h{h}"] = mean[:, h]
                if std is not None:
                    cols[f"{base}_h{h}_std"] = std[:, h]
    return cols
