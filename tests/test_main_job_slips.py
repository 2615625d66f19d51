"""Small promises of the main job: the OT cross-check's warnings name the cross-check."""

from __future__ import annotations

import logging

from wflow.apps.main.refinement import _labelled_logs
from wflow.infra.logs import collect_warnings


def test_ot_crosscheck_warning_names_its_run(caplog):
    """A JKO warning logged during the cross-check says it comes from the OT cross-check on
    its cells (terminal and the summary's warnings); the same warning outside does not
    (negative control: the label is not added to every JKO warning)."""
    import wflow.jko.solver  # noqa: F401  (its logger exists, as in a run)

    log = logging.getLogger("wflow.jko.solver")
    caplog.set_level(logging.WARNING)
    with collect_warnings("jko_refinement") as found, _labelled_logs(
            "OT cross-check of the τ/h table (scheme = \"ot\" on 320 cells, τ = 0.6667; "
            "not the main JKO): "):
        log.warning("jko: %s", "up to 206 cells empty")
    msg = found[0]["message"]
    assert msg.startswith("OT cross-check") and "320 cells" in msg and "not the main JKO" in msg
    assert msg.endswith("jko: up to 206 cells empty")
    assert "OT cross-check" in caplog.records[-1].getMessage()
    log.warning("jko: %s", "up to 3 cells empty")
    assert caplog.records[-1].getMessage() == "jko: up to 3 cells empty"
