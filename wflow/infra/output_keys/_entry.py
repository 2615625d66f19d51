"""One entry of an output-key table (:mod:`wflow.infra.output_keys`)."""

from __future__ import annotations

from dataclasses import dataclass

__all__ = ["OutputKey"]

_ALL = "all"


@dataclass(frozen=True)
class OutputKey:
    """One key pattern of the outputs.

    Attributes
    ----------
    pattern : str
        Flattened key (``summary.json``) or column name (CSV), with wildcards.
    meaning : str
        What the number is (its formula where one applies: docs/theory.md).
    unit : str
        ``energy``, ``energy/time``, ``time``, ``rad``, ``1``, ``s``, ``count``, ``text``, …
    sign : str
        The sign convention, where one applies ("" otherwise).
    where : str
        The outputs that write it.
    """

    pattern: str
    meaning: str
    unit: str = "1"
    sign: str = ""
    where: str = ""
