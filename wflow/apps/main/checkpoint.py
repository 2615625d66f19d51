"""Checkpoints of the main job: ``DIR.ckpt/``, the scenario's fingerprint, one phase's run.

Part of the main job (:mod:`wflow.apps.main`).
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import pickle
import re
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from ...infra.io import (
    OutputError,
    atomic_write_bytes,
)
from .options import CHECKPOINT_MARKER, PHASES

#: A ``"package.module:function"`` reference in a scenario.
_CALLABLE_RE = re.compile(r"^[A-Za-z_][\w.]*:[A-Za-z_][\w.]*$")


def _callable_source(spec: str) -> tuple[str, str] | None:
    """``(module file, SHA-256 of its bytes + the qualified name)`` of ``"mod:fn"``, or None.

    The module is located without importing it (:func:`importlib.util.find_spec`; its
    parent packages are imported, as loading the callable would); ``None`` if it cannot
    be found or has no source file.
    """
    import importlib.util

    mod, qual = spec.split(":")
    try:
        found = importlib.util.find_spec(mod)
    except (ImportError, ValueError, AttributeError):
        return None
    origin = getattr(found, "origin", None)
    if not origin or not Path(origin).is_file():
        return None
    h = hashlib.sha256(Path(origin).read_bytes())
    h.update(b"\0" + qual.encode())
    return origin, h.hexdigest()


def _fingerprint(raw: dict, base_dir: Path) -> dict[str, str]:
    """SHA-256 of the scenario table, the files and the callables a string value names.

    Keys: ``"scenario"``, ``"file:<value>"`` (relative paths resolve against ``base_dir``,
    then the shipped ``meshes/``, as the solvers resolve them) and ``"callable:<value>"``
    for a ``"package.module:function"`` value: the bytes of the module's source file and
    the function's qualified name (an edited callable changes the fingerprint).
    """
    from ...geometry.mesh import MESH_DIR

    out = {"scenario": hashlib.sha256(json.dumps(raw, sort_keys=True, default=str).encode())
           .hexdigest()}

    def visit(v: Any) -> None:
        if isinstance(v, dict):
            for x in v.values():
                visit(x)
        elif isinstance(v, list):
            for x in v:
                visit(x)
        elif isinstance(v, str) and v and len(v) < 4096:
            if _CALLABLE_RE.match(v) and not v.startswith(("icosphere:", "gmsh:")):
                src = _callable_source(v)
                if src is not None:
                    out[f"callable:{v}"] = src[1]
                    out[f"callable_file:{v}"] = src[0]
                return
            p = Path(v).expanduser()
            for q in ((p,) if p.is_absolute() else (base_dir / p, MESH_DIR / p)):
                if q.is_file():
                    out[f"file:{v}"] = hashlib.sha256(q.read_bytes()).hexdigest()
                    break

    visit(raw)
    return out


def _flat(d: Any, prefix: str = "") -> dict[str, Any]:
    if not isinstance(d, dict):
        return {prefix: d}
    out: dict[str, Any] = {}
    for k, v in d.items():
        out.update(_flat(v, f"{prefix}.{k}" if prefix else str(k)))
    return out


def _differences(old_raw: dict, new_raw: dict, old_fp: dict, new_fp: dict) -> list[str]:
    """Human-readable differences between two scenarios (keys, then files)."""
    a, b = _flat(old_raw), _flat(new_raw)
    diff = [f"{k}: {a.get(k, '(unset)')!r} -> {b.get(k, '(unset)')!r}"
            for k in sorted(set(a) | set(b)) if a.get(k) != b.get(k)]
    diff += [f"file {k[5:]!r} changed" for k in sorted(set(old_fp) & set(new_fp))
             if k.startswith("file:") and old_fp[k] != new_fp[k]]
    for k in sorted(set(old_fp) | set(new_fp)):
        if k.startswith("callable:") and old_fp.get(k) != new_fp.get(k):
            spec = k[len("callable:"):]
            where = new_fp.get(f"callable_file:{spec}") or old_fp.get(f"callable_file:{spec}")
            diff.append(f"callable {spec!r} changed: module {spec.split(':')[0]!r}"
                        + (f" ({where})" if where else "") + " was edited")
    return diff


class _Checkpoint:
    """Phase results pickled into ``DIR.ckpt/`` (written atomically) with the scenario.

    ``scenario.json`` holds ``{"wflow_checkpoint": 1, "raw", "base_dir", "fingerprint"}``;
    :data:`CHECKPOINT_MARKER` is written first and removed last. A folder ``DIR.ckpt``
    that is not wflow's (marker or ``scenario.json``, and nothing but checkpoint files:
    ``scenario.json``, ``<phase>.pkl``, hidden temporary files) is never touched.
    """

    def __init__(self, out: Path) -> None:
        self.dir = out.with_name(out.name + ".ckpt")

    def meta(self) -> dict | None:
        """The checkpoint's ``scenario.json``, or ``None`` if there is no checkpoint."""
        try:
            meta = json.loads((self.dir / "scenario.json").read_text())
        except (OSError, ValueError):
            return None
        return meta if isinstance(meta, dict) and "raw" in meta else None

    def _ours(self) -> bool:
        """True if the folder is wflow's and holds nothing but a checkpoint's files."""
        try:
            entries = list(self.dir.iterdir())
        except OSError:
            return False
        marked = (self.dir / CHECKPOINT_MARKER).is_file() or self.meta() is not None
        only_ours = all(
            f.is_file() and (f.name in ("scenario.json", CHECKPOINT_MARKER)
                             or (f.suffix == ".pkl" and f.stem.split(".")[0] in PHASES)
                             or f.name.startswith(".")) for f in entries)
        # a leftover of an older wflow: phase pickles alone (no scenario.json, no marker)
        legacy = bool(entries) and all(f.is_file() and f.suffix == ".pkl" and f.stem in PHASES
                                       for f in entries)
        return only_ours and (marked or legacy)

    def check(self) -> None:
        """Refuse (``OutputError``) a ``DIR.ckpt`` that wflow did not write."""
        if (self.dir.exists() or self.dir.is_symlink()) and (
                self.dir.is_symlink() or not self.dir.is_dir() or not self._ours()):
            raise OutputError(f"{self.dir}: exists and is not a wflow checkpoint (the main job "
                              "keeps its checkpoints there): move it away or choose another --out")

    def exists(self) -> bool:
        return self.dir.is_dir() and not self.dir.is_symlink()

    def has(self, name: str) -> bool:
        return (self.dir / f"{name}.pkl").is_file()

    def phases(self) -> list[str]:
        """The phases checkpointed here, in order."""
        return [p for p in PHASES if self.has(p)]

    def load(self, name: str) -> Any:
        with open(self.dir / f"{name}.pkl", "rb") as fh:
            return pickle.load(fh)

    def save(self, name: str, obj: Any) -> None:
        atomic_write_bytes(self.dir / f"{name}.pkl", pickle.dumps(obj))

    def start(self, raw: dict, base_dir: Path, fingerprint: dict) -> None:
        """Start a fresh checkpoint (an old one of wflow's is cleared first)."""
        self.clear()
        self.dir.mkdir(parents=True, exist_ok=True)
        atomic_write_bytes(self.dir / CHECKPOINT_MARKER, b"wflow checkpoint of the main job\n")
        atomic_write_bytes(self.dir / "scenario.json", json.dumps(
            {"wflow_checkpoint": 1, "raw": raw, "base_dir": str(base_dir),
             "fingerprint": fingerprint}, default=str).encode())

    def clear(self) -> None:
        """Delete the checkpoint's own files (the marker last), then the empty folder."""
        if not self.dir.is_dir() or self.dir.is_symlink() or not self._ours():
            return
        for f in self.dir.iterdir():
            if f.name != CHECKPOINT_MARKER:
                f.unlink()
        with contextlib.suppress(FileNotFoundError):
            (self.dir / CHECKPOINT_MARKER).unlink()
        self.dir.rmdir()


class _Pieces:
    """The finished pieces of one phase, each pickled as ``DIR.ckpt/<phase>.<piece>.pkl``.

    A mutable mapping as far as :func:`wflow.apps.main.compare._piece` needs it: ``in``,
    ``[]`` and assignment (written atomically at once). A phase that is interrupted keeps
    its finished pieces; a resumed run restores them instead of computing them again. A
    fresh run starts from an empty checkpoint (:meth:`_Checkpoint.start`), so it never
    reads another run's pieces.
    """

    def __init__(self, ck: _Checkpoint, phase: str) -> None:
        self.ck, self.phase = ck, phase

    def _name(self, piece: str) -> str:
        if not re.fullmatch(r"[A-Za-z0-9_]+", piece):
            raise ValueError(f"checkpoint piece name {piece!r}: letters, digits and _ only")
        return f"{self.phase}.{piece}"

    def __contains__(self, piece: str) -> bool:
        return self.ck.has(self._name(piece))

    def __getitem__(self, piece: str) -> Any:
        return self.ck.load(self._name(piece))

    def __setitem__(self, piece: str, value: Any) -> None:
        self.ck.save(self._name(piece), value)

    def names(self) -> list[str]:
        """The pieces saved so far."""
        pre = f"{self.phase}."
        return sorted(f.name[len(pre):-4] for f in self.ck.dir.glob(f"{pre}*.pkl"))


def _phase(ck: _Checkpoint, name: str, fn: Callable[[], Any], timings: dict,
           restored: list[str], *, resume: bool, warned: list[dict] | None = None,
           cpu: dict | None = None) -> Any:
    """Run phase ``name`` (and checkpoint it), or with ``resume`` restore its checkpoint.

    ``cpu``: the phase's CPU seconds (this process, every thread) are recorded there.
    ``warned``: the warnings the phase logs are appended there, tagged with ``name``
    (:func:`wflow.infra.logs.collect_warnings`), and checkpointed with the phase, so a
    resumed run lists them too.
    """
    from ...infra.logs import collect_warnings

    if resume and ck.has(name):
        print(f"run: phase {name} restored from the checkpoint", flush=True)
        obj = ck.load(name)
        timings[name] = obj.get("_wall", 0.0) if isinstance(obj, dict) else 0.0
        if cpu is not None:
            cpu[name] = float(obj.get("_cpu", 0.0)) if isinstance(obj, dict) else 0.0
        restored.append(name)
        if warned is not None and isinstance(obj, dict):
            warned.extend(obj.get("_warnings", []))
        return obj
    print(f"run: phase {name} ...", flush=True)
    t0, c0 = time.perf_counter(), time.process_time()
    with collect_warnings(name) as found:
        obj = fn()
    wall, used = time.perf_counter() - t0, time.process_time() - c0
    if cpu is not None:
        cpu[name] = used
    if warned is not None:
        warned.extend(found)
    if isinstance(obj, dict):
        obj["_wall"] = wall
        obj["_cpu"] = used
        obj["_warnings"] = found
    timings[name] = wall
    ck.save(name, obj)
    print(f"run: phase {name} done in {wall:.1f} s", flush=True)
    return obj


def _session_record(warned: list[dict], cpu: dict[str, float], restored: list[str],
                    restored_wall: float, session: float) -> dict[str, Any]:
    """The summary's ``warnings``, ``cpu_time_s`` and ``resumed`` blocks of a run."""
    return {"warnings": warned,
            "cpu_time_s": {**cpu, "total": float(sum(cpu.values()))},
            "resumed": {"resumed": bool(restored), "restored_phases": restored,
                        "restored_wall_s": restored_wall, "this_session_wall_s": session,
                        "note": "wall_time_s.total counts the restored phases' recorded "
                                "wall times plus this session's"}}
