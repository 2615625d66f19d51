"""Every key of every ``summary.json`` and every CSV column wflow writes: one table.

Each entry names a key pattern, its meaning, its unit and its sign convention
(:class:`~wflow.infra.output_keys.OutputKey`). The tables are data: a solver's own keys in
``wflow/data/output_keys/<solver>.toml`` (read by ``wflow/<solver>/keys.py``, here from its
:class:`~wflow.infra.spec.SolverSpec`); the keys several commands share (the contract of
every output, the checks, the kernel log, the balances), the main job's, the studies' and
the reproductions' in ``wflow/data/output_keys/apps.toml``, which places the solvers'
tables (``include``) in the order where the first match explains a key; this module
assembles the one table. The documentation's output-key reference is generated from it,
and the test suite runs the writers (``wflow run``, ``particles``, ``pde``, ``jko``, a
study) and fails on a written key that the table does not explain
(``tests/test_output_keys.py``). Patterns, units and the file format:
:mod:`wflow.infra.output_keys` (the matcher and the loader).

Units
-----
``energy``: the energy ``E`` of docs/theory.md §3 (dimensionless, normalised by the
measure's mass 1); ``energy/time`` its rate; ``time``: the flow's time (depth);
``rad``: geodesic length on the unit sphere (every ``W_2``); ``1``: a pure number or ratio;
``s``: wall-clock seconds; ``count``; ``text``. Residuals named ``…relative`` are divided
by the dissipation or the energy budget of the run (unit ``1``); the others are absolute
(unit ``energy``).
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import replace
from typing import Any

from ..gaussian.spec import SPEC as GAUSSIAN
from ..infra.output_keys import (
    CONTRACT,
    KeyTable,
    OutputKey,
    commands_of,
    flatten,
    load_keys,
)
from ..jko.spec import SPEC as JKO
from ..kinetic.keys import SHARED_SUMMARY_KEYS as _KINETIC_SHARED
from ..kinetic.spec import SPEC as KINETIC
from ..particles.spec import SPEC as PARTICLES
from ..pde.spec import SPEC as PDE

__all__ = ["OutputKey", "SUMMARY_KEYS", "CSV_COLUMNS", "CONTRACT", "TABLE", "flatten",
           "explain", "unexplained", "commands_of", "contract_problems"]

#: The solvers' own tables, placed where ``apps.toml`` includes them (first match wins).
_SOLVER_TABLES = {name: table for spec in (PARTICLES, PDE, KINETIC, JKO, GAUSSIAN)
                  for name, table in ((spec.name, spec.keys), (f"{spec.name}.columns",
                                                               spec.columns))}
_TABLE = load_keys("apps.toml", include=_SOLVER_TABLES)
#: The keys of ``summary.json`` (flattened), first match wins.
SUMMARY_KEYS: tuple[OutputKey, ...] = _TABLE.summary


def _also_written_by(keys: tuple[OutputKey, ...], patterns: Iterable[str],
                     command: str) -> tuple[OutputKey, ...]:
    """``keys`` with ``command`` added to the ``where`` of the entries in ``patterns``."""
    shared = set(patterns)
    missing = shared - {k.pattern for k in keys}
    if missing:
        raise ValueError(f"output keys: {command} shares unknown entries {sorted(missing)}")
    return tuple(replace(k, where=f"{k.where}, {command}") if k.pattern in shared else k
                 for k in keys)


#: ``wflow kinetic`` writes these entries of the other solvers with the same meaning.
SUMMARY_KEYS = _also_written_by(SUMMARY_KEYS, _KINETIC_SHARED, "wflow kinetic")
#: ``wflow run`` of a masked scenario writes these entries of ``wflow kinetic`` and the
#: solvers with the same meaning (:mod:`wflow.apps.main.causal`).
SUMMARY_KEYS = _also_written_by(SUMMARY_KEYS, ("mask", "alibi.lambda", "alibi.source",
                                               "slices", "outputs.**"), "wflow run")

#: CSV columns (``diagnostics*.csv``, ``w2*.csv``), first match wins.
CSV_COLUMNS: tuple[OutputKey, ...] = _TABLE.csv

#: The one table and its matcher.
TABLE = KeyTable(SUMMARY_KEYS, CSV_COLUMNS)


def explain(key: str, *, csv: bool = False) -> OutputKey | None:
    """The table entry that explains a flattened summary key or a CSV column, or None."""
    return TABLE.explain(key, csv=csv)


def unexplained(keys: Iterable[str], *, csv: bool = False) -> list[str]:
    """The keys (or columns) that no entry of the table explains."""
    return TABLE.unexplained(keys, csv=csv)


def contract_problems(summary: Mapping[str, Any], command: str) -> list[str]:
    """What breaks the ``summary.json`` contract of ``wflow COMMAND`` (empty: none).

    A missing ``status``, ``message`` or ``checks`` (a mapping); a key no entry explains;
    a key whose entry does not name the command in ``where`` (``wflow COMMAND --help``
    lists the entries that name it, so the key would be missing there).
    """
    return TABLE.contract_problems(summary, command)
