"""Output keys of ``wflow kinetic``, read from ``wflow/data/output_keys/kinetic.toml``."""

from __future__ import annotations

from ..infra.output_keys import OutputKey, load_keys

__all__ = ["SUMMARY_KEYS", "CSV_COLUMNS", "SHARED_SUMMARY_KEYS"]

_TABLE = load_keys("kinetic.toml")
#: The ``summary.json`` keys only ``wflow kinetic`` writes (flattened; first match wins).
SUMMARY_KEYS: tuple[OutputKey, ...] = _TABLE.summary
#: The CSV columns only ``wflow kinetic`` writes.
CSV_COLUMNS: tuple[OutputKey, ...] = _TABLE.csv
#: The entries of other solvers' keys that ``wflow kinetic`` writes as well (same meaning:
#: the assembled table adds it to their ``where``, :mod:`wflow.apps.output_keys`).
SHARED_SUMMARY_KEYS: tuple[str, ...] = _TABLE.also_writes
