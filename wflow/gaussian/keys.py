"""Output keys of ``wflow gaussian``, read from ``wflow/data/output_keys/gaussian.toml``."""

from __future__ import annotations

from ..infra.output_keys import OutputKey, load_keys

__all__ = ["SUMMARY_KEYS", "CSV_COLUMNS"]

_TABLE = load_keys("gaussian.toml")
#: The ``summary.json`` keys only ``wflow gaussian`` writes (flattened; first match wins).
SUMMARY_KEYS: tuple[OutputKey, ...] = _TABLE.summary
#: The CSV columns only ``wflow gaussian`` writes.
CSV_COLUMNS: tuple[OutputKey, ...] = _TABLE.csv
