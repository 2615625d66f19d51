"""Help texts of the commands, generated from the sources the code runs on.

A command's ``--help`` lists its scenario tables and their keys from the schemas that
validate them (the options dataclasses' field metadata, :func:`wflow.infra.options.docs_of`;
the plain schemas of :mod:`wflow.apps.scenario` and :mod:`wflow.geometry.density`), and
the keys of the ``summary.json`` it writes from the output-key table
(:data:`wflow.apps.output_keys.SUMMARY_KEYS`, column ``where``). Nothing is written twice,
so a key added to an options class or to the table is in the help at once
(``tests/test_cli_help.py`` checks both directions).

Descriptions are callables, formatted only when ``--help`` is asked for
(:class:`Formatter`): building the parser imports none of the schemas.
"""

from __future__ import annotations

import argparse
import importlib
import re
import textwrap
from collections.abc import Callable, Iterable
from typing import Any

__all__ = ["Formatter", "SECTIONS", "section_keys", "scenario_tables", "summary_keys",
           "written_keys", "describe"]

WIDTH = 88

#: Scenario section -> ``module:attribute`` of its options class or plain schema.
SECTIONS = {
    "attention": "wflow.apps.scenario:ATTENTION_SCHEMA",
    "tokens": "wflow.apps.scenario:TOKENS_SCHEMA",
    "heads": "wflow.apps.scenario:HEADS_SCHEMA",
    "schedule": "wflow.apps.scenario:SCHEDULE_SCHEMA",
    "particles": "wflow.particles.options:ParticleOptions",
    "density": "wflow.geometry.density:DENSITY_SCHEMA",
    "pde": "wflow.pde.options:PDEOptions",
    "jko": "wflow.jko.options:JKOOptions",
    "kinetic": "wflow.kinetic.options:KineticOptions",
    "run": "wflow.apps.run_table:RunOptions",
    "gaussian.run": "wflow.gaussian.options:GaussianRunOptions",
    "gaussian.classify": "wflow.gaussian.options:ClassifyOptions",
    "gaussian.particles": "wflow.gaussian.options:GaussianParticleOptions",
}


class Formatter(argparse.RawDescriptionHelpFormatter):
    """Raw description (our own wrapping), evaluated when the help is printed."""

    def add_text(self, text: Any) -> None:  # noqa: D102
        super().add_text(text() if callable(text) else text)


def _get(ref: str) -> Any:
    mod, attr = ref.split(":")
    return getattr(importlib.import_module(mod), attr)


def _fill(text: str, indent: str = "  ", first: str | None = None) -> str:
    return textwrap.fill(" ".join(text.split()), WIDTH, initial_indent=indent if first is None
                         else first, subsequent_indent=indent, break_on_hyphens=False)


def _plain(doc: str) -> str:
    """RST markup out (``x`` -> x, :func:`~a.b` -> b)."""
    doc = re.sub(r":\w+:`~?([^`]*)`", lambda m: m.group(1).rsplit(".", 1)[-1], doc)
    return doc.replace("``", "")


def section_keys(section: str) -> list[tuple[str, Any, str, dict | None]]:
    """``(key, default, meaning, applies)`` of every key of a scenario section.

    Read from the options class (meanings and applicability from its field metadata) or
    the plain schema (keys and defaults) that validates the section.
    """
    from ..infra.options import META_KEY, Option, docs_of

    obj = _get(SECTIONS[section])
    if isinstance(obj, dict):
        return [(k, d, "", None) for k, (d, _check) in obj.items()]
    metas: dict[str, Option] = {
        name: f.metadata[META_KEY] for name, f in obj.__dataclass_fields__.items()
        if META_KEY in f.metadata}
    out = []
    for kd in docs_of(obj):
        m = metas.get(kd.key)
        doc = re.sub(r" \(Applies only with [^)]*\.\)$", "", kd.doc)
        out.append((kd.key, kd.default, doc, dict(m.applies) if m and m.applies else None))
    return out


def _default(v: Any) -> str:
    return "required" if v is ... else repr(v)


def scenario_tables(sections: Iterable[str], *, detailed: Iterable[str] = ()) -> str:
    """The scenario tables a command reads: every key with its default.

    ``detailed`` sections list one key a line with its meaning, grouped by where the
    keys apply (``opt(..., applies=...)``); the others list ``key = default`` only.
    """
    from ..infra.options import applies_text

    detailed = set(detailed)
    parts = ["scenario tables (every key, with its default; unknown keys are refused):"]
    for sec in sections:
        keys = section_keys(sec)
        title = f"[{sec.split('.')[-1]}]"
        if sec not in detailed:
            parts.append(_fill(", ".join(f"{k} = {_default(d)}" for k, d, _, _ in keys),
                               "      ", f"  {title} "))
            continue
        groups: dict[str, list] = {}
        for k, d, doc, applies in keys:
            where = "in every case" if not applies else f"only with {applies_text(applies)}"
            groups.setdefault(where, []).append((k, d, doc))
        parts.append(f"  {title}")
        for where, items in groups.items():
            if len(groups) > 1:
                parts.append(f"    keys that apply {where}:")
            for k, d, doc in items:
                parts.append(_fill(f"{k} = {_default(d)}: {_plain(doc)}", " " * 10,
                                   " " * 6))
    return "\n".join(parts)


def summary_keys(command: str) -> list[str]:
    """The patterns of the output-key table that ``wflow COMMAND`` writes (column where)."""
    from ..apps.output_keys import SUMMARY_KEYS, commands_of

    return [k.pattern for k in SUMMARY_KEYS
            if {"*", command} & commands_of(k.where)]


def written_keys(command: str, files: str) -> str:
    """``writes:`` the files, then every ``summary.json`` key the command writes."""
    keys = summary_keys(command)
    return "\n".join([_fill(f"writes: {files}", "  ", ""),
                      _fill("summary.json keys (meaning, unit and sign of each: the output-key "
                            "reference, `wflow.apps.output_keys`): " + ", ".join(keys),
                            "  ", "")])


def describe(intro: str, *, command: str, files: str, sections: Iterable[str] = (),
             detailed: Iterable[str] = (), extra: str = "") -> Callable[[], str]:
    """A command's description: intro, scenario tables, written files and keys (lazy)."""
    sections, detailed = tuple(sections), tuple(detailed)

    def text() -> str:
        parts = [_fill(intro, "", "")]
        if extra:
            parts.append(extra.rstrip("\n"))
        if sections:
            parts.append(scenario_tables(sections, detailed=detailed))
        parts.append(written_keys(command, files))
        return "\n\n".join(parts)

    return text
