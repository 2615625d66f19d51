"""Validators of scenario tables: one checker per kind of value, errors that name the key.

Every solver's ``options.py`` declares its TOML table as a *spec*
``{key: (default, checker)}`` built from these checkers, and :func:`take` validates a
table against it (unknown keys, wrong types, NaN, out-of-range values raise
:class:`ScenarioError` with the message ``"<section>.<key>: <what is wrong>"``).
:mod:`wflow.apps.scenario` re-exports them; this module sits below the solvers so that their
options can use it.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Collection, Mapping
from typing import Any

import numpy as np

__all__ = ["ScenarioError", "Spec", "number", "choice", "choice_in", "boolean", "string", "array",
           "optional", "take"]


class ScenarioError(ValueError):
    """A scenario value is missing, unknown or invalid (message names the key)."""


Spec = dict[str, tuple[Any, Callable[[Any, str], Any] | None]]


def number(lo: float | None = None, hi: float | None = None, *, strict_lo: bool = False,
           strict_hi: bool = False, integer: bool = False) -> Callable[[Any, str], Any]:
    """Checker of a finite number in ``[lo, hi]`` (``strict_lo``, ``strict_hi``: open ends).

    ``integer``: the value must be integral (returned as ``int``, else ``float``).
    """

    def check(v: Any, key: str) -> Any:
        if isinstance(v, bool) or not isinstance(v, (int, float)):
            raise ScenarioError(f"{key}: expected a number, got {v!r}")
        if integer and not float(v).is_integer():
            raise ScenarioError(f"{key}: expected an integer, got {v!r}")
        if not math.isfinite(v):
            raise ScenarioError(f"{key}: must be finite, got {v!r}")
        if lo is not None and (v <= lo if strict_lo else v < lo):
            raise ScenarioError(f"{key}: must be {'>' if strict_lo else '>='} {lo}, got {v!r}")
        if hi is not None and (v >= hi if strict_hi else v > hi):
            raise ScenarioError(f"{key}: must be {'<' if strict_hi else '<='} {hi}, got {v!r}")
        return int(v) if integer else float(v)
    return check


def optional(check: Callable[[Any, str], Any]) -> Callable[[Any, str], Any]:
    """Checker of ``None`` (``"none"`` in a TOML table, which has no null) or a value of ``check``.

    For an option whose default is a value and which the user may switch off, as
    ``attention.mask = "none"`` does.
    """

    def opt_check(v: Any, key: str) -> Any:
        if v is None or (isinstance(v, str) and v == "none"):
            return None
        return check(v, key)
    return opt_check


def choice(*options: str) -> Callable[[Any, str], Any]:
    """Checker of a value among ``options``."""

    def check(v: Any, key: str) -> Any:
        if v not in options:
            raise ScenarioError(f"{key}: must be one of {list(options)}, got {v!r}")
        return v
    check.choices = lambda: options  # type: ignore[attr-defined]
    return check


def choice_in(options: Collection[str]) -> Callable[[Any, str], Any]:
    """Checker of a value in a live collection (a registry view), read at each call.

    Unlike :func:`choice`, which copies its options, a name added to ``options`` later
    (e.g. :func:`wflow.attention.kinds.register_kind`) is accepted.
    """

    def check(v: Any, key: str) -> Any:
        if not isinstance(v, str) or v not in options:
            raise ScenarioError(f"{key}: must be one of {list(options)}, got {v!r}")
        return v
    check.choices = lambda: tuple(options)  # type: ignore[attr-defined]
    return check


def boolean(v: Any, key: str) -> bool:
    """Checker of a TOML boolean (no truthy numbers or strings)."""
    if not isinstance(v, bool):
        raise ScenarioError(f"{key}: expected true or false, got {v!r}")
    return v


def string(v: Any, key: str) -> str:
    """Checker of a string."""
    if not isinstance(v, str):
        raise ScenarioError(f"{key}: expected a string, got {v!r}")
    return v


def array(ndim: int | tuple[int, ...]) -> Callable[[Any, str], np.ndarray]:
    """Checker of a finite numeric array with ``ndim`` dimensions (an int or a tuple)."""
    dims = (ndim,) if isinstance(ndim, int) else ndim

    def check(v: Any, key: str) -> np.ndarray:
        try:
            arr = np.asarray(v, dtype=np.float64)
        except (TypeError, ValueError) as exc:
            raise ScenarioError(f"{key}: expected a numeric array ({exc})") from exc
        if arr.ndim not in dims:
            raise ScenarioError(f"{key}: expected {' or '.join(map(str, dims))}-dimensional "
                                f"array, got shape {arr.shape}")
        if not np.all(np.isfinite(arr)):
            raise ScenarioError(f"{key}: contains NaN or Inf")
        return arr
    return check


def take(section: Mapping[str, Any] | None, spec: Spec, where: str) -> dict[str, Any]:
    """Validate ``section`` against ``spec`` (``key -> (default, checker)``).

    Unknown keys raise :class:`ScenarioError` naming ``where.key`` and the known keys;
    missing keys take the default (``...`` as default marks a required key).
    """
    section = dict(section or {})
    unknown = sorted(set(section) - set(spec))
    if unknown:
        raise ScenarioError(f"{where}.{unknown[0]}: unknown key (known keys: {sorted(spec)})")
    out = {}
    for key, (default, check) in spec.items():
        if key in section:
            val = section[key]
            out[key] = check(val, f"{where}.{key}") if check else val
        elif default is ...:
            raise ScenarioError(f"{where}.{key}: required key is missing")
        else:
            out[key] = default
    return out
