"""Registries of named schemes: one object per name, lookups that reject unknown names.

A :class:`Registry` maps a name (as written in a scenario or an options field) to the
one object that implements it — a limiter, a time integrator, a schedule type. Every
list of valid names (a TOML choice, an options check, a docstring) is read from the
registry, so adding a scheme is one class plus its ``register`` line, and a name that
is not registered raises :class:`UnknownName` naming the known ones instead of falling
through to some default branch.

Example::

    LIMITERS = Registry("limiter")

    @LIMITERS.register
    class BarthJespersen:
        name = "barth_jespersen"
        ...

    LIMITERS["barth_jespersen"]        # the instance
    LIMITERS["minmod"]                 # UnknownName: unknown limiter 'minmod' (known: [...])
"""

from __future__ import annotations

import sys
from collections.abc import Callable, Iterator, Mapping
from typing import Any

from .schema import ScenarioError

__all__ = ["Registry", "UnknownName"]

def _reimported(old: type, new: type) -> bool:
    """Whether ``new`` is ``old`` defined again by the same file executed once more."""
    def where(c: type) -> str:  # the file, else the module's name (a file's, by its path)
        return getattr(sys.modules.get(c.__module__), "__file__", None) or c.__module__
    return old is not new and old.__qualname__ == new.__qualname__ and where(old) == where(new)


class UnknownName(ScenarioError, LookupError):
    """A name that no registered object carries (the message lists the known names)."""


class Registry[T](Mapping[str, T]):
    """Name -> registered object of one concept, in registration order.

    Parameters
    ----------
    concept : str
        What the objects are (``"limiter"``, ``"time integrator"``), used in messages.
    """

    def __init__(self, concept: str) -> None:
        self.concept = concept
        self._items: dict[str, T] = {}

    def register(self, cls: type) -> type:
        """Class decorator: register one instance of ``cls`` under ``cls.name``.

        The class must be constructible without arguments; registering a name twice
        raises ``ValueError``, except for the same class of a module executed again (a
        scenario's ``modules`` file, imported on each load), which replaces it.
        """
        name = getattr(cls, "name", None)
        if not isinstance(name, str) or not name:
            raise TypeError(f"{cls.__name__}: a registered {self.concept} needs a class "
                            "attribute `name` (str)")
        old = self._items.get(name)
        if old is not None and not _reimported(type(old), cls):
            raise ValueError(f"{self.concept} {name!r} is already registered "
                             f"({type(old).__name__})")
        self._items[name] = cls()
        return cls

    def unregister(self, name: str) -> T:
        """Remove and return the object registered as ``name`` (a user's scheme, in tests).

        Raises :class:`UnknownName` for a name that is not registered.
        """
        obj = self.lookup(name)
        del self._items[name]
        return obj

    def names(self) -> tuple[str, ...]:
        """Registered names, in registration order."""
        return tuple(self._items)

    def lookup(self, name: Any, key: str | None = None) -> T:
        """The object registered as ``name``.

        Raises :class:`UnknownName` (a ``ValueError``) whose message starts with ``key``
        (e.g. ``"pde.limiter"``) when given, and lists the known names.
        """
        try:
            return self._items[name]
        except (KeyError, TypeError):
            where = f"{key}: " if key else ""
            raise UnknownName(f"{where}unknown {self.concept} {name!r} "
                              f"(known: {list(self._items)})") from None

    def checker(self, *also: str) -> Callable[[Any, str], Any]:
        """Checker (:mod:`wflow.infra.schema` style) of a registered name or one of ``also``.

        The names are read at each call, so a scheme registered later is accepted.
        """

        def check(v: Any, key: str) -> Any:
            if isinstance(v, str) and (v in also or v in self._items):
                return v
            raise ScenarioError(f"{key}: must be one of {[*also, *self._items]}, got {v!r}")
        check.choices = lambda: (*also, *self._items)  # type: ignore[attr-defined]
        return check

    # Mapping protocol -------------------------------------------------------------
    def __getitem__(self, name: str) -> T:
        return self.lookup(name)

    def __contains__(self, name: object) -> bool:
        return name in self._items

    def __iter__(self) -> Iterator[str]:
        return iter(self._items)

    def __len__(self) -> int:
        return len(self._items)

    def __repr__(self) -> str:
        return f"Registry({self.concept!r}, {list(self._items)})"
