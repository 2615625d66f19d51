"""Options dataclasses as the single source of their TOML table, key list and documentation.

An options class declares each option once, as a dataclass field whose metadata
(:func:`opt`) carries its meaning, its checker (from :mod:`wflow.infra.schema`) and
whether a scenario table may set it::

    @documented
    @dataclass(frozen=True)
    class PDEOptions:
        SECTION = "pde"                    # plain class attributes (not ClassVar fields)
        T: float = field(default=1.0, metadata=opt("Final time.",
                                                   check=number(0, strict_lo=True)))
        progress: bool | None = field(default=None, metadata=opt(
            "tqdm progress bar.", toml=False, reason="a command-line flag"))

        def __post_init__(self) -> None:
            validate(self)                 # the same checkers as the TOML table

Everything else is derived:

* :func:`schema_of` — the table's spec ``key -> (default, checker)`` for
  :func:`wflow.infra.schema.take` (fields with ``toml=True`` plus the class's
  ``TABLE_EXTRAS``: keys of the table that are not options of the solver, e.g. ``mesh``);
* :func:`keys_of` — the table's keys;
* :func:`docs_of` — ``(key, type, default, meaning)`` of every key (generated docs);
* :func:`from_table` — the validated options from a table (errors ``section.key: ...``,
  unknown keys rejected with the known keys named);
* :func:`validate` — the same checkers on an instance built in Python;
* :func:`documented` — appends the numpydoc ``Parameters`` section to the docstring;
* :func:`markdown_of` — the table's keys as a Markdown table (the scenario reference);
* :func:`audit` — what is wrong with a class's declarations (a field without metadata,
  an API-only field without a reason, a default its own checker refuses).
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Mapping
from typing import Any, NamedTuple

import numpy as np

from .schema import ScenarioError, Spec, take

__all__ = [
    "META_KEY",
    "SAME",
    "Option",
    "Extra",
    "KeyDoc",
    "opt",
    "schema_of",
    "keys_of",
    "choices_of",
    "docs_of",
    "from_table",
    "validate",
    "documented",
    "markdown_of",
    "audit",
]

#: Key of the field metadata that :func:`opt` fills.
META_KEY = "wflow.option"

Checker = Callable[[Any, str], Any]


class _Same:
    """Marker: the table's default is the field's default."""

    def __repr__(self) -> str:
        return "SAME"


SAME = _Same()


class Option(NamedTuple):
    """What :func:`opt` stores in a field's metadata."""

    doc: str
    check: Checker | None
    toml: bool
    reason: str
    type: str | None
    table_default: Any = SAME


class Extra(NamedTuple):
    """A key of the TOML table that is not a field of the options (``TABLE_EXTRAS``)."""

    default: Any
    check: Checker | None
    doc: str
    type: str


class KeyDoc(NamedTuple):
    """One documented key: name, type, default and meaning (``toml``: settable from TOML)."""

    key: str
    type: str
    default: Any
    doc: str
    toml: bool = True


def opt(doc: str, *, check: Checker | None = None, toml: bool = True, reason: str = "",
        type: str | None = None, table_default: Any = SAME) -> dict[str, Option]:
    """Field metadata of one option.

    Parameters
    ----------
    doc : str
        Meaning (units, conventions); the docstring's entry and the generated docs.
    check : callable, optional
        ``check(value, "section.key") -> value`` (:mod:`wflow.infra.schema`), used on the
        TOML value and, by :func:`validate`, on the value given in Python.
    toml : bool
        Settable from the scenario table. ``False`` marks an API-only option, which needs
        a ``reason`` (where its value comes from instead).
    type : str, optional
        The type as documented (default: the field's annotation).
    table_default : optional
        The table's default where it differs on purpose from the API's, e.g. ``"auto"``
        (resolved by the job) or ``None`` (taken from another section); the checker need
        not accept it. Without it the two defaults are one value.
    """
    if not toml and not reason:
        raise ValueError("opt: an API-only option (toml=False) needs a reason")
    return {META_KEY: Option(doc, check, toml, reason, type, table_default)}


def _fields(cls: type) -> tuple[dataclasses.Field, ...]:
    if not dataclasses.is_dataclass(cls):
        raise TypeError(f"{cls!r} is not a dataclass")
    return tuple(f for f in dataclasses.fields(cls) if f.init)


def _meta(f: dataclasses.Field, cls: type) -> Option:
    m = f.metadata.get(META_KEY)
    if m is None:
        raise TypeError(f"{cls.__name__}.{f.name}: option without metadata (declare it with "
                        "field(default=..., metadata=opt(...)))")
    return m


def _default(f: dataclasses.Field) -> Any:
    if f.default is not dataclasses.MISSING:
        return f.default
    if f.default_factory is not dataclasses.MISSING:
        return f.default_factory()
    return ...  # required


def _section(cls: type) -> str:
    return getattr(cls, "SECTION", cls.__name__)


def schema_of(cls: type) -> Spec:
    """The TOML spec ``key -> (default, checker)`` of ``cls`` (TOML fields, then extras)."""
    spec: Spec = {}
    for f in _fields(cls):
        m = _meta(f, cls)
        if m.toml:
            spec[f.name] = (_default(f) if m.table_default is SAME else m.table_default,
                            m.check)
    for key, ex in getattr(cls, "TABLE_EXTRAS", {}).items():
        spec[key] = (ex.default, ex.check)
    return spec


def keys_of(cls: type) -> tuple[str, ...]:
    """Keys of the TOML table of ``cls``."""
    return tuple(schema_of(cls))


def _choices(check: Checker | None) -> tuple | None:
    ch = getattr(check, "choices", None)
    return tuple(ch()) if ch is not None else None


def choices_of(cls: type, name: str) -> tuple:
    """The allowed values of option ``name`` of ``cls`` (its check's ``choices``).

    What a command line offers for the option (``--ot``, ``--order``): the option's own
    check (:func:`~wflow.infra.schema.choice` or a :class:`~wflow.infra.registry.Registry`
    checker), so that the two never disagree. ``ValueError`` for an option without choices.
    """
    for f in _fields(cls):
        if f.name == name:
            ch = _choices(_meta(f, cls).check)
            if ch is None:
                raise ValueError(f"{cls.__name__}.{name}: not a choice of values")
            return ch
    raise ValueError(f"{cls.__name__}: no option {name!r}")


def docs_of(cls: type, *, api: bool = False) -> tuple[KeyDoc, ...]:
    """``(key, type, default, meaning)`` of every TOML key (``api``: API-only fields too).

    The type is the declared ``type`` or the annotation, with the allowed values of a
    choice appended.
    """
    out = []
    for f in _fields(cls):
        m = _meta(f, cls)
        if not (m.toml or api):
            continue
        typ = m.type or str(f.type)
        ch = _choices(m.check)
        if ch is not None and m.type is None:
            typ = "{" + ", ".join(repr(c) for c in ch) + "}"
        doc = m.doc if m.toml else f"{m.doc} (API only: {m.reason})"
        default = _default(f) if m.table_default is SAME else m.table_default
        out.append(KeyDoc(f.name, typ, default, doc, m.toml))
    for key, ex in getattr(cls, "TABLE_EXTRAS", {}).items():
        out.append(KeyDoc(key, ex.type, ex.default, ex.doc, True))
    return tuple(out)


def from_table(cls: type, table: Mapping[str, Any] | None, section: str | None = None,
               **api: Any) -> Any:
    """Validated options from a TOML table.

    Unknown keys, wrong types and values outside their range raise
    :class:`~wflow.infra.schema.ScenarioError` with ``"<section>.<key>: ..."`` (the known
    keys named for an unknown one); ``api`` sets API-only fields (e.g. ``seed``). A class
    with ``TABLE_EXTRAS`` needs :func:`wflow.infra.schema.take` with :func:`schema_of`
    (the extras are not options).
    """
    if getattr(cls, "TABLE_EXTRAS", None):
        raise TypeError(f"{cls.__name__} has table keys that are not options "
                        f"({sorted(cls.TABLE_EXTRAS)}): use take(table, schema_of(cls), ...)")
    vals = take(table, schema_of(cls), section or _section(cls))
    return cls(**vals, **api)


def validate(obj: Any, section: str | None = None) -> None:
    """Run every field's checker on an instance (errors ``section.key: ...``).

    Values are checked as given (NumPy scalars as their Python value) and not converted;
    ``None`` passes where it is the default (an optional option left unset).
    """
    cls = type(obj)
    where = section or _section(cls)
    for f in _fields(cls):
        m = _meta(f, cls)
        if m.check is None:
            continue
        v = getattr(obj, f.name)
        if v is None and _default(f) is None:  # an optional option left unset
            continue
        if isinstance(v, np.generic):
            v = v.item()
        m.check(v, f"{where}.{f.name}")


def _fmt(v: Any) -> str:
    return "required" if v is ... else repr(v)


def documented(cls: type) -> type:
    """Class decorator: append the numpydoc ``Parameters`` section derived from the fields."""
    lines = ["", "    Parameters", "    ----------"]
    for d in docs_of(cls, api=True):
        where = f"``[{_section(cls)}] {d.key}``" if d.toml else "API only"
        lines.append(f"    {d.key} : {d.type}, default {_fmt(d.default)}")
        lines.append(f"        {d.doc} ({where})")
    extras = getattr(cls, "TABLE_EXTRAS", {})
    if extras:
        lines.append("")
        lines.append(f"    The ``[{_section(cls)}]`` table also takes "
                     + ", ".join(f"``{k}``" for k in extras) + " (not options of the solver).")
    cls.__doc__ = (cls.__doc__ or "").rstrip() + "\n" + "\n".join(lines) + "\n"
    return cls


def markdown_of(cls: type) -> str:
    """The ``[section]`` keys of ``cls`` as a Markdown table: key, type, default, meaning."""
    rows = [f"`[{_section(cls)}]` | type | default | meaning", "--- | --- | --- | ---"]
    for d in docs_of(cls):
        cells = (f"`{d.key}`", d.type, "required" if d.default is ... else f"`{d.default!r}`",
                 d.doc)
        rows.append(" | ".join(c.replace("|", "\\|") for c in cells))
    return "\n".join(rows) + "\n"


def audit(cls: type) -> list[str]:
    """Problems of an options class's declarations (empty when it is sound).

    Every init field carries :func:`opt` metadata with a meaning; an API-only field says
    why; every TOML field has a checker that accepts its own default (the default of the
    table and of the dataclass are then one value); extras are :class:`Extra`.
    """
    probs = []
    for f in _fields(cls):
        m = f.metadata.get(META_KEY)
        if m is None:
            probs.append(f"{cls.__name__}.{f.name}: no option metadata (not reachable from "
                         "TOML, not marked API-only, not documented)")
            continue
        if not m.doc.strip():
            probs.append(f"{cls.__name__}.{f.name}: no meaning documented")
        if not m.toml and not m.reason:
            probs.append(f"{cls.__name__}.{f.name}: API-only without a reason")
        default = _default(f)
        if m.toml and m.check is not None and default not in (None, ...):
            try:
                back = m.check(default, f"{_section(cls)}.{f.name}")
            except ScenarioError as exc:
                probs.append(f"{cls.__name__}.{f.name}: its checker refuses the default "
                             f"({exc})")
            else:
                if not _equal(back, default):
                    probs.append(f"{cls.__name__}.{f.name}: the checker turns the default "
                                 f"{default!r} into {back!r}")
    for key, ex in getattr(cls, "TABLE_EXTRAS", {}).items():
        if not isinstance(ex, Extra):
            probs.append(f"{cls.__name__}.TABLE_EXTRAS[{key!r}]: not an Extra")
    return probs


def _equal(a: Any, b: Any) -> bool:
    try:
        return bool(np.all(np.asarray(a) == np.asarray(b))) and type(a) is type(b)
    except (TypeError, ValueError):
        return False
