"""Outputs: JSON / CSV / NPZ written atomically, and run directories that are all-or-nothing.

A run writes into ``DIR.partial-XXXX`` and renames it to ``DIR`` only after
every file is complete, so a killed or failed run never leaves a directory
that looks finished. Single files are written to a temporary sibling and
``os.replace``-d into place.
"""

from __future__ import annotations

import contextlib
import csv
import io
import json
import math
import os
import shutil
import tempfile
from collections.abc import Iterator, Mapping, Sequence
from pathlib import Path
from typing import Any

import numpy as np

__all__ = [
    "atomic_write_bytes",
    "atomic_write_text",
    "write_json",
    "write_csv",
    "save_npz",
    "run_directory",
    "to_jsonable",
    "check_finite",
    "finish_history",
    "history_columns",
    "provenance",
]


def atomic_write_bytes(path: str | Path, data: bytes) -> None:
    """Write ``data`` to ``path`` atomically (temp file + ``os.replace``)."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(prefix=f".{path.name}.", dir=path.parent)
    try:
        with os.fdopen(fd, "wb") as fh:
            fh.write(data)
            fh.flush()
            os.fsync(fh.fileno())
        os.replace(tmp, path)
    except BaseException:
        with contextlib.suppress(FileNotFoundError):
            os.unlink(tmp)
        raise


def atomic_write_text(path: str | Path, text: str) -> None:
    """Write text (UTF-8) atomically."""
    atomic_write_bytes(path, text.encode("utf-8"))


def to_jsonable(obj: Any) -> Any:
    """Convert NumPy scalars/arrays, paths and dataclass-like objects for ``json``.

    Non-finite floats become the strings ``"nan"``, ``"inf"``, ``"-inf"`` so the
    JSON stays standard; :func:`check_finite` is the guard that refuses them
    where a result must be finite.
    """
    if isinstance(obj, Mapping):
        return {str(k): to_jsonable(v) for k, v in obj.items()}
    if isinstance(obj, (list, tuple)):
        return [to_jsonable(v) for v in obj]
    if isinstance(obj, np.ndarray):
        return to_jsonable(obj.tolist())
    if isinstance(obj, (np.bool_, bool)):
        return bool(obj)
    if isinstance(obj, (np.integer, int)):
        return int(obj)
    if isinstance(obj, (np.floating, float)):
        f = float(obj)
        if math.isfinite(f):
            return f
        return "nan" if math.isnan(f) else ("inf" if f > 0 else "-inf")
    if isinstance(obj, Path):
        return str(obj)
    if hasattr(obj, "_asdict"):
        return to_jsonable(obj._asdict())
    if hasattr(obj, "__dataclass_fields__"):
        return to_jsonable({k: getattr(obj, k) for k in obj.__dataclass_fields__})
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


@contextlib.contextmanager
def run_directory(out: str | Path, *, overwrite: bool = True) -> Iterator[Path]:
    """All-or-nothing output directory.

    Yields a fresh staging directory next to ``out``; on normal exit it replaces
    ``out`` (an existing ``out`` is removed first when ``overwrite``), on an
    exception the staging directory is deleted and ``out`` is left untouched.
    """
    out = Path(out)
    out.parent.mkdir(parents=True, exist_ok=True)
    if out.exists() and not overwrite:
        raise FileExistsError(f"output directory exists: {out}")
    stage = Path(tempfile.mkdtemp(prefix=f".{out.name}.partial-", dir=out.parent))
    try:
        yield stage
    except BaseException:
        shutil.rmtree(stage, ignore_errors=True)
        raise
    if out.exists():
        old = out.with_name(f".{out.name}.old-{os.getpid()}")
        os.replace(out, old)
        os.replace(stage, out)
        shutil.rmtree(old, ignore_errors=True)
    else:
        os.replace(stage, out)


def provenance() -> dict[str, Any]:
    """Versions of wflow and its numerical dependencies, and the machine."""
    import platform
    import time

    import scipy

    from . import __version__

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
