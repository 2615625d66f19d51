"""The output-key matcher: which entry of a key table explains a ``summary.json`` key.

A key table is a sequence of :class:`OutputKey` entries, each naming a key pattern, its
meaning, its unit and its sign convention, and the commands that write it (``where``).
Each solver owns its entries: a data file (``wflow/data/output_keys/<solver>.toml``, read
by :func:`load_keys` from ``wflow/<solver>/keys.py``); the one table of every key wflow
writes is assembled above the solvers (:mod:`wflow.apps.output_keys`). This module is the
generic machinery only: it names no solver.

Patterns
--------
Keys of ``summary.json`` are flattened with ``.`` between levels (``edi.<phase>.relative``);
a list of records adds ``[]`` (``verdicts[].value``). In a pattern ``*`` stands for one
level (any name without a dot) and ``**`` for any number of levels; CSV column patterns
match a whole column name, ``*`` standing for any characters (``E_h*`` is ``E_h0``,
``E_h1``, …). The first matching entry explains a key.
"""

from __future__ import annotations

import fnmatch
import re
from collections.abc import Iterable, Mapping, Sequence
from typing import Any

from ._entry import _ALL, OutputKey
from ._load import KEYS_DIR, KeySource, load_keys, parse_keys

__all__ = ["OutputKey", "KeyTable", "KeySource", "CONTRACT", "KEYS_DIR", "flatten",
           "commands_of", "load_keys", "parse_keys"]


def flatten(summary: Mapping[str, Any], prefix: str = "") -> list[str]:
    """The flattened keys of a ``summary.json`` mapping (``a.b``, lists of records ``a[].b``)."""
    out: list[str] = []
    for k, v in summary.items():
        key = f"{prefix}.{k}" if prefix else str(k)
        if isinstance(v, Mapping):
            out += flatten(v, key) if v else [key]
        elif isinstance(v, list) and v and all(isinstance(x, Mapping) for x in v):
            seen: list[str] = []
            for rec in v:
                seen += [s for s in flatten(rec, key + "[]") if s not in seen]
            out += seen
        else:
            out.append(key)
    return out


def _regex(pattern: str) -> re.Pattern[str]:
    parts = re.split(r"(\*\*|\*)", pattern)
    rx = "".join(".*" if p == "**" else "[^.]*" if p == "*" else re.escape(p) for p in parts)
    return re.compile(rx + r"\Z")


#: The keys every command's ``summary.json`` carries (README): its status, why, and checks.
CONTRACT = ("status", "message", "checks")


def commands_of(where: str) -> set[str]:
    """The commands of an entry's ``where`` (``"all"``: ``{"*"}``).

    ``"wflow a, b, c"`` -> ``{a, b, c}``.
    """
    if where.strip() == _ALL:
        return {"*"}
    return {w.strip().removeprefix("wflow").strip() for w in where.split(",")} - {""}


class KeyTable:
    """A table of output keys: ``summary`` entries and ``csv`` columns, first match wins.

    Parameters
    ----------
    summary : sequence of OutputKey
        Patterns of flattened ``summary.json`` keys, in matching order.
    csv : sequence of OutputKey
        Patterns of CSV column names (``fnmatch``), in matching order.
    """

    def __init__(self, summary: Sequence[OutputKey], csv: Sequence[OutputKey] = ()) -> None:
        self.summary = tuple(summary)
        self.csv = tuple(csv)
        self._rx = tuple((_regex(k.pattern), k) for k in self.summary)

    def explain(self, key: str, *, csv: bool = False) -> OutputKey | None:
        """The entry that explains a flattened summary key or a CSV column, or None."""
        if csv:
            return next((k for k in self.csv if fnmatch.fnmatchcase(key, k.pattern)), None)
        return next((k for rx, k in self._rx if rx.match(key)), None)

    def unexplained(self, keys: Iterable[str], *, csv: bool = False) -> list[str]:
        """The keys (or columns) that no entry explains."""
        return [k for k in keys if self.explain(k, csv=csv) is None]

    def contract_problems(self, summary: Mapping[str, Any], command: str) -> list[str]:
        """What breaks the ``summary.json`` contract of ``wflow COMMAND`` (empty: none).

        A missing ``status``, ``message`` or ``checks`` (a mapping); a key no entry
        explains; a key whose entry does not name the command in ``where``.
        """
        bad = [f"no {k}" for k in CONTRACT if k not in summary]
        if not isinstance(summary.get("checks"), Mapping):
            bad.append("checks: not a mapping")
        for key in flatten(summary):
            entry = self.explain(key)
            if entry is None:
                bad.append(f"undocumented {key}")
            elif not ({"*", command} & commands_of(entry.where)):
                bad.append(f"{key}: its entry {entry.pattern!r} has where = {entry.where!r}")
        return bad
