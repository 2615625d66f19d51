"""The one registry of wflow's methods: a name -> object table that also takes objects.

A :class:`Registry` maps a name (as written in a scenario, an options field or a command
line) to the one object that implements it: an attention kind, a particle or PDE time
integrator, a slope limiter, a schedule type, a JKO scheme, a verification study. Every
list of valid names (a TOML choice, an options check, a ``--kind`` choice, a docstring) is
read from the registry at each use (:meth:`Registry.view`), so a method registered later,
from a user's own module, is valid everywhere at once.

Where a name is accepted, the object is too, unregistered (as ``diffrax.diffeqsolve``
takes a solver instance): :meth:`Registry.resolve` returns the registered object of a
name, or an object of the registry's type as it is; anything else raises one error that
names the key. Registration stays the way a user's object reaches the scenario and the
command line.

Example::

    LIMITERS = Registry("limiter", Limiter, key="pde.limiter")

    @LIMITERS.register                 # one instance of the class, under its ``name``
    class BarthJespersen(Limiter):
        name = "barth_jespersen"
        ...

    LIMITERS.get("barth_jespersen")    # the registered instance
    LIMITERS.resolve(MyLimiter())      # an unregistered Limiter, as it is
    LIMITERS.get("minmod")             # UnknownName: pde.limiter: unknown limiter 'minmod' ...
    LIMITERS.resolve(3)                # WrongMethod: pde.limiter: expected ... got int
"""

from __future__ import annotations

import sys
from collections.abc import Callable, Iterator, Sequence
from typing import Any

from .schema import ScenarioError

__all__ = ["Registry", "UnknownName", "WrongMethod", "Names", "Method", "OrderedMethod"]


def _reimported(old: type, new: type) -> bool:
    """Whether ``new`` is ``old`` defined again by the same file executed once more."""
    def where(c: type) -> str:  # the file, else the module's name (a file's, by its path)
        return getattr(sys.modules.get(c.__module__), "__file__", None) or c.__module__
    return old is not new and old.__qualname__ == new.__qualname__ and where(old) == where(new)


def _same_class_again(old: Any, new: Any) -> bool:
    return _reimported(type(old), type(new))


class UnknownName(ScenarioError, LookupError):
    """A name that no registered object carries (the message lists the known names)."""


class WrongMethod(ScenarioError, TypeError):
    """A value that is neither a registered name nor an object of the registry's type."""


class Method:
    """Base of a method class (an integrator, a limiter, a scheme): its name, printed.

    A subclass sets ``name`` and inherits what messages and outputs read of it.

    Attributes
    ----------
    name : str
        The registered name: the value of its registry's scenario key (``schedule.type``,
        ``jko.scheme``, ``pde.limiter``, ...). Empty for an object used unregistered, then
        named by its class.
    """

    name: str = ""

    def __str__(self) -> str:
        """The name (the class's, for an unnamed method): what messages print."""
        return self.name or type(self).__qualname__

    def to_dict(self) -> dict[str, str]:
        """What outputs record of an object given in place of a name: name and class."""
        return {"name": str(self), "class": f"{type(self).__module__}.{type(self).__qualname__}"}


class OrderedMethod(Method):
    """A method with an order of accuracy, declared once per class.

    A subclass sets ``declared_order``; :meth:`order` returns it (one reading for every
    family of such methods). ``None``, the default: the subclass overrides :meth:`order`.
    """

    declared_order: int | None = None

    def order(self) -> int:
        """Order of accuracy in time: ``declared_order``."""
        if self.declared_order is None:
            raise NotImplementedError
        return self.declared_order


class Names(Sequence[str]):
    """The names of a registry, read from it at each use (a live view, never a copy).

    Behaves like the tuple of names (iteration, ``in``, indexing, ``len``, ``==`` with a
    tuple or list, ``+``), but a name registered later is in it.
    """

    __slots__ = ("_registry",)

    def __init__(self, registry: Registry) -> None:
        self._registry = registry

    def _names(self) -> tuple[str, ...]:
        return self._registry.names()

    def __getitem__(self, i):  # noqa: D105
        return self._names()[i]

    def __len__(self) -> int:  # noqa: D105
        return len(self._registry)

    def __iter__(self) -> Iterator[str]:  # noqa: D105
        return iter(self._names())

    def __contains__(self, name: object) -> bool:  # noqa: D105
        return isinstance(name, str) and name in self._registry

    def __eq__(self, other: object) -> bool:  # noqa: D105
        if isinstance(other, (tuple, list, Names)):
            return self._names() == tuple(other)
        return NotImplemented

    __hash__ = None  # type: ignore[assignment]  # mutable contents

    def __add__(self, other: Sequence[str]) -> tuple[str, ...]:  # noqa: D105
        return self._names() + tuple(other)

    def __radd__(self, other: Sequence[str]) -> tuple[str, ...]:  # noqa: D105
        return tuple(other) + self._names()

    def __repr__(self) -> str:  # noqa: D105
        return repr(self._names())


class Registry[T]:
    """Name -> registered object of one concept, in registration order.

    Parameters
    ----------
    concept : str
        What the objects are (``"limiter"``, ``"particle integrator"``), used in messages.
    base : type, optional
        The type of the objects: ``add`` refuses others, ``resolve`` and ``checker``
        accept an unregistered instance of it in place of a name.
    key : str, optional
        The scenario key of the concept (``"pde.limiter"``), the default prefix of
        error messages.
    same : callable, optional
        ``same(old, new)``: whether ``new`` is ``old`` defined again (a user's module
        imported once more), which then replaces it; default: the same class of the same
        file. A name registered twice otherwise raises ``ValueError``.
    admit : callable, optional
        ``admit(obj)``: raises ``ValueError`` for an object this registry must refuse
        beyond its type (e.g. a kernel claiming another kernel's compiled code).
    """

    def __init__(self, concept: str, base: type | None = None, *, key: str | None = None,
                 same: Callable[[T, T], bool] | None = None,
                 admit: Callable[[T], None] | None = None) -> None:
        self.concept = concept
        self.base = base
        self.key = key
        self._same = same or _same_class_again
        self._admit = admit
        self._items: dict[str, T] = {}
        self._builtin: set[str] = set()
        # unregistered objects admitted since the registry last changed (id -> object,
        # held so that the id stays theirs): a look-up in a hot loop stays a dict look-up
        self._admitted: dict[int, T] = {}

    # registration -----------------------------------------------------------------
    def add(self, obj: T, *, builtin: bool = False) -> T:
        """Register ``obj`` under ``obj.name``; returns the registered object.

        Registering an equal object again returns the one registered; the same
        definition executed again (``same``) replaces it. ``builtin``: wflow's own
        object, never replaced nor removed.

        Raises
        ------
        TypeError
            ``obj`` is not a ``base`` or has no ``name`` (non-empty ``str``).
        ValueError
            The name is taken by another definition, or ``admit`` refuses ``obj``.
        """
        if self.base is not None and not isinstance(obj, self.base):
            raise TypeError(f"a registered {self.concept} must be a {self.base.__name__}, "
                            f"got {type(obj).__name__}")
        name = getattr(obj, "name", None)
        if not isinstance(name, str) or not name:
            raise TypeError(f"{type(obj).__name__}: a registered {self.concept} needs an "
                            "attribute `name` (non-empty str)")
        old = self._items.get(name)
        if old is not None:
            if type(old) is type(obj) and old == obj:
                return old
            if name in self._builtin or not self._same(old, obj):
                raise ValueError(f"{self.concept} {name!r} is already registered (registered "
                                 f"twice: {old!r}); unregister it first")
        if self._admit is not None:
            self._admit(obj)
        self._items[name] = obj
        self._admitted.clear()
        if builtin:
            self._builtin.add(name)
        return obj

    def register(self, obj: Any) -> Any:
        """:meth:`add` an object; as a class decorator, one instance of the class.

        A class (built without arguments) is returned unchanged, so that
        ``@REGISTRY.register`` leaves the class in its module; an object is returned as
        :meth:`add` returns it (the registered one).
        """
        if isinstance(obj, type):
            self.add(obj())
            return obj
        return self.add(obj)

    def unregister(self, name: str) -> T:
        """Remove and return the object registered as ``name`` (a user's method).

        Raises :class:`UnknownName` for a name that is not registered and
        ``ValueError`` for a built-in one.
        """
        obj = self.get(name)
        if name in self._builtin:
            raise ValueError(f"{name!r} is a built-in {self.concept}: it is never removed")
        del self._items[name]
        self._admitted.clear()
        return obj

    def is_builtin(self, name: str) -> bool:
        """Whether ``name`` is one of wflow's own objects (``add(..., builtin=True)``)."""
        return name in self._builtin

    # look-ups ---------------------------------------------------------------------
    def _where(self, key: str | None) -> str:
        k = key or self.key
        return f"{k}: " if k else ""

    def get(self, name: str, key: str | None = None) -> T:
        """The object registered as ``name``.

        Raises :class:`UnknownName` (a :class:`~wflow.infra.schema.ScenarioError`) whose
        message starts with ``key`` (default: the registry's key) and lists the known
        names.
        """
        try:
            return self._items[name]
        except (KeyError, TypeError):
            raise UnknownName(f"{self._where(key)}unknown {self.concept} {name!r}: must be "
                              f"one of {list(self._items)}") from None

    def resolve(self, value: str | T, key: str | None = None) -> T:
        """The method a value means: a registered name's object, or an object as it is.

        ``value`` is a registered name or an instance of ``base`` (used unregistered, after
        the same ``admit`` check as :meth:`add`: an object that could not be registered
        does not run either). Raises :class:`UnknownName` for an unknown name and
        :class:`WrongMethod` for any other value, each naming ``key``.
        """
        if isinstance(value, str):
            return self.get(value, key)
        if self.base is not None and isinstance(value, self.base):
            if self._admit is not None and self._admitted.get(id(value)) is not value and \
                    self._items.get(getattr(value, "name", None)) is not value:
                self._admit(value)
                if len(self._admitted) >= 64:
                    self._admitted.clear()
                self._admitted[id(value)] = value
            return value
        what = f" or an object of type {self.base.__name__}" if self.base is not None else ""
        raise WrongMethod(f"{self._where(key)}expected the name of a registered "
                          f"{self.concept} (one of {list(self._items)}){what}, got "
                          f"{type(value).__name__} {value!r}")

    def name_of(self, value: str | T, key: str | None = None) -> str:
        """The name of a method given by name or by object (what outputs record).

        An unregistered object without a ``name`` is named by its class.
        """
        obj = self.resolve(value, key)
        name = getattr(obj, "name", None)
        return name if isinstance(name, str) and name else type(obj).__qualname__

    def names(self) -> tuple[str, ...]:
        """Registered names, in registration order (a copy: see :meth:`view`)."""
        return tuple(self._items)

    def view(self) -> Names:
        """A live view of the names (what a choice list, a ``--kind`` or a test reads)."""
        return Names(self)

    def checker(self, *also: str) -> Callable[[Any, str], Any]:
        """Checker (:mod:`wflow.infra.schema` style): a registered name, ``also``, a ``base``.

        A value passes as a registered name, one of ``also`` or an object of ``base``.
        The names are read at each call, so a method registered later is accepted.
        """

        def check(v: Any, key: str) -> Any:
            if isinstance(v, str) and v in also:
                return v
            try:
                self.resolve(v, key)
            except (UnknownName, WrongMethod):
                raise ScenarioError(f"{key}: must be one of {[*also, *self._items]}"
                                    + (f" or an object of type {self.base.__name__}"
                                       if self.base is not None else "")
                                    + f", got {v!r}") from None
            return v
        check.choices = lambda: (*also, *self._items)  # type: ignore[attr-defined]
        return check

    # container protocol (read-only) -----------------------------------------------
    def __getitem__(self, name: str) -> T:
        return self.get(name)

    def __contains__(self, name: object) -> bool:
        return isinstance(name, str) and name in self._items

    def __iter__(self) -> Iterator[str]:
        return iter(tuple(self._items))

    def __len__(self) -> int:
        return len(self._items)

    def keys(self) -> tuple[str, ...]:
        """Registered names (as a mapping's ``keys``)."""
        return self.names()

    def values(self) -> tuple[T, ...]:
        """Registered objects, in registration order."""
        return tuple(self._items.values())

    def items(self) -> tuple[tuple[str, T], ...]:
        """``(name, object)`` pairs, in registration order."""
        return tuple(self._items.items())

    def __repr__(self) -> str:
        return f"Registry({self.concept!r}, {list(self._items)})"
