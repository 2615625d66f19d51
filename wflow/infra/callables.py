"""``"package.module:function"`` references in scenarios (densities, schedules, drifts).

:func:`load_module` imports a scenario's ``modules`` (a user's file or package that
registers its own attention kinds, integrators or schedule types at import).
"""

from __future__ import annotations

import hashlib
import importlib
import importlib.util
from collections.abc import Callable
from pathlib import Path

__all__ = ["load_callable", "load_module", "resolve_callable"]


def resolve_callable(spec: str, base_dir: str | Path | None) -> str:
    """Point ``"module:function"`` at a module file beside the scenario, if there is one.

    A scenario's relative paths resolve against its folder; so does the module of a
    callable. When ``base_dir/<module path>.py`` exists (``mydens:f`` →
    ``base_dir/mydens.py``, ``pkg.mod:f`` → ``base_dir/pkg/mod.py``) the spec becomes
    ``"/abs/path/module.py:function"``; otherwise it is returned unchanged and imported
    from the Python path. Specs that are not strings are returned as they are.
    """
    if base_dir is None or not isinstance(spec, str) or spec.count(":") != 1:
        return spec
    mod_name, fn_name = spec.split(":")
    if mod_name.endswith(".py"):
        p = Path(mod_name)
        p = p if p.is_absolute() else Path(base_dir) / p
        return f"{p.resolve()}:{fn_name}"
    p = Path(base_dir, *mod_name.split(".")).with_suffix(".py")
    return f"{p.resolve()}:{fn_name}" if p.is_file() else spec


def _import_file(path: Path, name: str):
    if not path.is_file():
        raise ValueError(f"{name}: module file not found: {path}")
    key = "_wflow_user_" + hashlib.sha256(str(path).encode()).hexdigest()[:16]
    spec = importlib.util.spec_from_file_location(key, path)
    mod = importlib.util.module_from_spec(spec)
    try:
        spec.loader.exec_module(mod)
    except Exception as exc:  # noqa: BLE001 - any failure of the user's module, named
        raise ValueError(f"{name}: cannot import {path} ({type(exc).__name__}: {exc})") from exc
    return mod


def load_callable(spec: str, *, name: str = "callable") -> Callable:
    """Import ``"package.module:function"`` (or ``"path/to/module.py:function"``).

    Raises ``ValueError`` naming ``name`` when the spec is malformed or the import fails.
    """
    if not isinstance(spec, str) or spec.count(":") != 1:
        raise ValueError(f"{name}: expected 'package.module:function', got {spec!r}")
    mod_name, fn_name = spec.split(":")
    if mod_name.endswith(".py"):
        mod = _import_file(Path(mod_name), name)
    else:
        try:
            mod = importlib.import_module(mod_name)
        except ImportError as exc:
            raise ValueError(f"{name}: cannot import module {mod_name!r} ({exc})") from exc
    fn = getattr(mod, fn_name, None)
    if not callable(fn):
        raise ValueError(f"{name}: {mod_name!r} has no callable {fn_name!r}")
    return fn


def load_module(spec: str, *, base_dir: str | Path | None = None, name: str = "modules"):
    """Import a module given as ``"path/to/file.py"`` or ``"package.module"``.

    A relative file path, and a dotted name with a file ``base_dir/<package>/<module>.py``,
    resolve against ``base_dir`` (the scenario's folder), as :func:`resolve_callable`;
    other dotted names are imported from the Python path. A file is executed on each
    call (its registrations must be idempotent:
    :func:`wflow.attention.kinds.register_kind` is); a package module once.

    Raises ``ValueError`` naming ``name`` when the module is not found or fails to import.
    """
    if not isinstance(spec, str) or not spec or ":" in spec:
        raise ValueError(f"{name}: expected 'path/to/module.py' or 'package.module', "
                         f"got {spec!r}")
    resolved = resolve_callable(f"{spec}:_", base_dir).rsplit(":", 1)[0]
    if resolved.endswith(".py"):
        return _import_file(Path(resolved), name)
    try:
        return importlib.import_module(resolved)
    except ImportError as exc:
        raise ValueError(f"{name}: cannot import module {resolved!r} ({exc})") from exc
    except Exception as exc:  # noqa: BLE001 - any failure of the user's module, named
        raise ValueError(f"{name}: cannot import {resolved!r} ({type(exc).__name__}: "
                         f"{exc})") from exc
