"""Study ``phase`` (docs/theory.md §9): the uniform density's growth rates and ``K_#``.

It passes in quick mode, and every documented negative control (injected through
``run(fault=...)``: β off by 1 %, the ``K ↔ D`` convention off by a factor 2, the PDE's
diffusion off by 2 %) FAILs, naming the criterion that catches it.
"""

from __future__ import annotations

import json

import pytest

from wflow.studies.registry import STUDIES, load_study


def test_phase_is_registered_under_the_noisy_section():
    assert STUDIES["phase"].section == "§9"


def test_phase_quick_passes(tmp_path):
    res = load_study("phase").run(out=tmp_path / "p", quick=True, seed=0)
    assert res.passed, res.verdict
    summary = json.loads((tmp_path / "p" / "summary.json").read_text())
    assert summary["fault"] is None and all(c["ok"] for c in summary["criteria"])


@pytest.mark.parametrize("fault, criterion", [
    ("beta:0.01", "k_sharp"), ("beta:-0.01", "k_sharp"),
    ("k-convention-x2", "k_sharp"), ("k-convention-half", "k_sharp"),
    ("diffusion:0.02", "growth_l3")])
def test_phase_negative_controls(fault, criterion, tmp_path):
    res = load_study("phase").run(out=tmp_path / "p", quick=True, seed=0, fault=fault)
    assert res.passed is False and res.verdict.startswith("FAIL"), res.verdict
    assert criterion in res.verdict.split(". ")[0], res.verdict
    assert f"Negative control {fault!r} injected" in res.verdict
