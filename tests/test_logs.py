"""The warnings of a run are collected with their phase (``wflow.infra.logs``)."""

from __future__ import annotations

import logging

from wflow.infra.logs import collect_warnings


def test_warnings_of_wflow_loggers_are_collected_with_the_phase():
    log = logging.getLogger("wflow.jko.solver")
    with collect_warnings("jko") as found:
        log.warning("jko: up to %d cells empty", 12)
        log.warning("jko: up to %d cells empty", 12)  # repeated: listed once
        log.info("not a warning")
        logging.getLogger("numba.core").warning("not wflow's")
    assert found == [{"phase": "jko", "logger": "wflow.jko.solver", "level": "WARNING",
                      "message": "jko: up to 12 cells empty"}]
    # negative control: after the block nothing more is collected and the handler is gone
    log.warning("later")
    assert len(found) == 1
    assert not any(type(h).__name__ == "_Collector" for h in logging.getLogger("wflow").handlers)


def test_phases_append_to_one_list():
    found: list[dict] = []
    with collect_warnings("pde", found):
        logging.getLogger("wflow.pde").warning("a")
    with collect_warnings("compare", found):
        logging.getLogger("wflow.apps").error("b")
    assert [(w["phase"], w["message"], w["level"]) for w in found] == [
        ("pde", "a", "WARNING"), ("compare", "b", "ERROR")]
