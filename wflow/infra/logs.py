"""The warnings a run logged, collected so that its report can list them with their phase.

A run's phases log warnings (``logger.warning`` in wflow's modules: a JKO step that
locked, a speckled OT density, a fallback) that scroll past on the terminal; a report that
says "every check passed" must still name them. :func:`collect_warnings` records every
record of level WARNING or above that a ``wflow.*`` logger emits while it is active;
records are kept as plain dictionaries (JSON-ready: ``summary.json`` ``warnings[]``)::

    with collect_warnings("jko") as found:
        solve_jko(...)
    found  # [{"phase": "jko", "logger": "wflow.jko.solver", "message": "jko: ..."}]

The handler only records: the records still reach the terminal as before, no logger's
level is changed (a program that silenced wflow's warnings gets none collected either),
and the handler is removed when the block exits.
"""

from __future__ import annotations

import contextlib
import logging
from collections.abc import Iterator

__all__ = ["collect_warnings", "filtered_logs"]


class _Collector(logging.Handler):
    """Records the WARNING+ records of ``wflow.*`` loggers (no formatting, no output)."""

    def __init__(self, phase: str, out: list[dict]) -> None:
        super().__init__(level=logging.WARNING)
        self.phase, self.out = phase, out

    def emit(self, record: logging.LogRecord) -> None:
        try:
            msg = record.getMessage()
        except Exception:  # noqa: BLE001 - a malformed record must not break the run
            msg = str(record.msg)
        entry = {"phase": self.phase, "logger": record.name, "level": record.levelname,
                 "message": msg}
        if entry not in self.out:  # the same warning repeated (per step) is listed once
            self.out.append(entry)


@contextlib.contextmanager
def collect_warnings(phase: str, into: list[dict] | None = None) -> Iterator[list[dict]]:
    """Collect the warnings wflow logs inside the block, tagged with ``phase``.

    Parameters
    ----------
    phase : str
        The name recorded with every warning (a phase of the main job, a command).
    into : list of dict, optional
        Append to this list (default: a new one); the list is also what the block yields.

    Yields
    ------
    list of dict
        ``{"phase", "logger", "level", "message"}`` per distinct warning, in order.
    """
    out: list[dict] = [] if into is None else into
    root = logging.getLogger("wflow")
    handler = _Collector(phase, out)
    root.addHandler(handler)  # no level is changed: what is logged is what is collected
    try:
        yield out
    finally:
        root.removeHandler(handler)


@contextlib.contextmanager
def filtered_logs(logger_name: str, flt: logging.Filter) -> Iterator[None]:
    """Add ``flt`` to the logger ``logger_name`` and every logger under it, for the block.

    A filter on a logger sees only that logger's own records, so it is added to each
    existing logger of the tree (``wflow.jko``, ``wflow.jko.solver``, ...); the loggers'
    levels and handlers are left alone, and the filter is removed when the block exits.
    """
    loggers = [logging.getLogger(logger_name)]
    loggers += [lg for name, lg in logging.root.manager.loggerDict.items()
                if name.startswith(logger_name + ".") and isinstance(lg, logging.Logger)]
    for lg in loggers:
        lg.addFilter(flt)
    try:
        yield
    finally:
        for lg in loggers:
            lg.removeFilter(flt)
