"""Output-key tables as data: one TOML file a table (``wflow/data/output_keys/<name>.toml``).

A file holds a ``[summary]`` and a ``[csv]`` section, each with the ``where`` of its
entries (the commands that write them) and its entries in matching order::

    [summary]
    where = "wflow mysolver"

    [[summary.keys]]
    pattern = "stats.steps"
    meaning = "time steps taken"
    unit = "count"            # default "1"
    sign = "≥ 0"              # default ""
    where = "wflow mysolver, wflow run"   # default: the section's

An entry ``include = "<name>"`` stands for the entries of another table, passed by the
caller (the table that assembles others places them in order without naming them here).
A top-level ``also_writes`` lists patterns of other tables' entries that the file's
command writes as well, with the same meaning. This module names no solver: the file's
name comes from the package that owns the table.
"""

from __future__ import annotations

import tomllib
from collections.abc import Mapping, Sequence
from dataclasses import fields
from importlib import resources
from typing import Any, NamedTuple

from ._entry import OutputKey

__all__ = ["KeySource", "load_keys", "parse_keys", "KEYS_DIR"]

#: Where the tables lie in the package: ``wflow/data/output_keys/`` (package data).
KEYS_DIR = ("data", "output_keys")

_FIELDS = frozenset(f.name for f in fields(OutputKey))


class KeySource(NamedTuple):
    """One table as read from its file.

    Attributes
    ----------
    summary : tuple of OutputKey
        The ``summary.json`` key patterns, in matching order.
    csv : tuple of OutputKey
        The CSV column patterns, in matching order.
    also_writes : tuple of str
        Patterns of other tables' entries that this table's command writes as well.
    """

    summary: tuple[OutputKey, ...]
    csv: tuple[OutputKey, ...] = ()
    also_writes: tuple[str, ...] = ()


def _section(raw: Mapping[str, Any], where: str, name: str,
             include: Mapping[str, Sequence[OutputKey]]) -> tuple[OutputKey, ...]:
    default = raw.get("where", "")
    out: list[OutputKey] = []
    for i, entry in enumerate(raw.get("keys", ())):
        if "include" in entry:
            try:
                out += include[entry["include"]]
            except KeyError:
                raise ValueError(f"{where}: [{name}] entry {i} includes unknown table "
                                 f"{entry['include']!r} (given: {sorted(include)})") from None
            continue
        extra = set(entry) - _FIELDS
        if extra or "pattern" not in entry or "meaning" not in entry:
            raise ValueError(f"{where}: [{name}] entry {i} ({entry.get('pattern')!r}) needs "
                             f"pattern and meaning and takes only {sorted(_FIELDS)}; "
                             f"unknown: {sorted(extra)}")
        out.append(OutputKey(**{"where": default, **entry}))
    return tuple(out)


def parse_keys(text: str, source: str = "<string>",
               include: Mapping[str, Sequence[OutputKey]] | None = None) -> KeySource:
    """One output-key table from the text of its TOML file (the format: module docstring).

    Parameters
    ----------
    text : str
        The TOML text.
    source : str
        Its name in the error messages.
    include : mapping of str to sequence of OutputKey, optional
        The tables that ``include = "<key>"`` entries stand for.

    Returns
    -------
    KeySource
        The ``summary`` and ``csv`` entries and the ``also_writes`` patterns.

    Raises
    ------
    ValueError
        An entry without pattern or meaning, with an unknown field, or an unknown include.
    """
    raw = tomllib.loads(text)
    include = include or {}
    return KeySource(
        summary=_section(raw.get("summary", {}), source, "summary", include),
        csv=_section(raw.get("csv", {}), source, "csv", include),
        also_writes=tuple(raw.get("also_writes", ())))


def load_keys(name: str, include: Mapping[str, Sequence[OutputKey]] | None = None,
              *, package: str = "wflow") -> KeySource:
    """Read one output-key table from ``<package>/data/output_keys/<name>`` (package data).

    Parameters
    ----------
    name : str
        The file name (``"mysolver.toml"``), chosen by the package that owns the table.
    include : mapping of str to sequence of OutputKey, optional
        The tables that ``include = "<key>"`` entries stand for.
    package : str
        The package whose data folder holds the file.

    Returns
    -------
    KeySource
        As :func:`parse_keys`.
    """
    path = resources.files(package).joinpath(*KEYS_DIR, name)
    return parse_keys(path.read_text(encoding="utf-8"), name, include)
