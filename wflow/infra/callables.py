"""``"package.module:function"`` references in scenarios (densities, schedules, drifts)."""

from __future__ import annotations

import importlib
from collections.abc import Callable

__all__ = ["load_callable"]


def load_callable(spec: str, *, name: str = "callable") -> Callable:
    """Import ``"package.module:function"`` and return the function.

    Raises ``ValueError`` naming ``name`` when the spec is malformed or the import fails.
    """
    if not isinstance(spec, str) or spec.count(":") != 1:
        raise ValueError(f"{name}: expected 'package.module:function', got {spec!r}")
    mod_name, fn_name = spec.split(":")
    try:
        mod = importlib.import_module(mod_name)
    except ImportError as exc:
        raise ValueError(f"{name}: cannot import module {mod_name!r} ({exc})") from exc
    fn = getattr(mod, fn_name, None)
    if not callable(fn):
        raise ValueError(f"{name}: {mod_name!r} has no callable {fn_name!r}")
    return fn
