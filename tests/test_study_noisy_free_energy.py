"""Study ``free-energy`` (docs/theory.md §9): the EDI of ``F_D`` on the noisy PDE and JKO.

Quick mode passes (the PDE's order ≈ 2 and the JKO's ≈ 1 under joint refinement, the
rebuilt residuals equal to the solvers' own, the JKO's heat rate equal to ``2D``); the
PDE's Laplacian off by ±1 % (the solver at ``1.01 D``, the identity at ``D``, through
``run(fault=...)``), a noiseless PDE and the JKO's entropy weight off by ±1 % FAIL, naming
the criterion: tests/test_study_controls.py (every study's documented controls).
"""

from __future__ import annotations

import json

import numpy as np

from wflow.studies.registry import STUDIES, load_study


def test_free_energy_quick_passes_and_reports_the_softmax_defect(tmp_path):
    assert STUDIES["free-energy"].section == "§9"
    res = load_study("free-energy").run(out=tmp_path / "f", quick=True, seed=0)
    assert res.passed, res.verdict
    summary = json.loads((tmp_path / "f" / "summary.json").read_text())
    assert all(c["ok"] for c in summary["criteria"]) and summary["seed_independent"]
    # the softmax defect is reported, never judged
    assert np.isfinite(summary["reported"]["softmax_free_edi_defect"])
    assert not any("softmax" in c["name"] for c in summary["criteria"])
