"""Every study reads and reports its faults through one ``NegativeControls`` (``CONTROLS``).

The object names the study's ``FAULTS``, ``FAMILIES`` and ``SEED_INDEPENDENT`` once; these
tests check that each study's ``CONTROLS`` carries exactly its module's tables, and that
``read``/``conclude`` are :func:`read_fault`/:func:`conclude` with those tables.
"""

from __future__ import annotations

import importlib

import pytest

from wflow.studies.base import (
    SEED_NOTE,
    Criterion,
    NegativeControls,
    conclude,
    read_fault,
)
from wflow.studies.registry import STUDIES


@pytest.mark.parametrize("name", list(STUDIES))
def test_study_controls_are_its_tables(name):
    mod = importlib.import_module(STUDIES[name].module)
    controls = mod.CONTROLS
    assert isinstance(controls, NegativeControls)
    assert controls.study == mod.NAME == name
    assert controls.faults is mod.FAULTS
    assert controls.families is getattr(mod, "FAMILIES", None)
    assert controls.seed_independent is getattr(mod, "SEED_INDEPENDENT", False)


FAULTS = {"frozen": "the solver is frozen"}
FAMILIES = {"velocity": "the velocity ×(1 + s)"}


def test_read_is_read_fault():
    c = NegativeControls("demo", FAULTS, FAMILIES)
    for fault in (None, "frozen", "velocity:-0.05"):
        assert c.read(fault) == read_fault("demo", fault, FAULTS, FAMILIES)
    assert c.read("velocity:-0.05") == ("velocity", -0.05)


def test_read_refuses_an_unknown_fault():
    # negative control: a fault outside FAULTS and FAMILIES is refused, naming the known ones
    with pytest.raises(ValueError, match="demo: unknown fault 'thawed'.*frozen"):
        NegativeControls("demo", FAULTS, FAMILIES).read("thawed")
    # without FAMILIES a family instance is unknown too
    with pytest.raises(ValueError, match="unknown fault 'velocity:-0.05'"):
        NegativeControls("demo", FAULTS).read("velocity:-0.05")


@pytest.mark.parametrize("fault", [None, "frozen", "velocity:0.1"])
@pytest.mark.parametrize("seed_independent", [False, True])
def test_conclude_is_conclude(fault, seed_independent):
    crit = [Criterion("x", 0.5, hi=1.0, what="x", why="test")]
    c = NegativeControls("demo", FAULTS, FAMILIES, seed_independent=seed_independent)
    got = c.conclude(crit, "Details.", fault)
    assert got == conclude(crit, "Details.", fault=fault, faults=FAULTS, families=FAMILIES,
                           seed_independent=seed_independent)
    # the flag is carried: the seed note ends the verdict exactly when it is set
    assert (SEED_NOTE in got[1]) is seed_independent
    assert got[2]["fault"] == fault


def test_conclude_fails_a_failing_criterion():
    # negative control: a criterion out of range FAILs the verdict, and the fault is named
    crit = [Criterion("x", 2.0, hi=1.0, what="x", why="test")]
    passed, text, entries = NegativeControls("demo", FAULTS, FAMILIES).conclude(
        crit, "Details.", "frozen")
    assert not passed and text.startswith("FAIL")
    assert "Negative control 'frozen' injected: the solver is frozen." in text
    assert entries["fault_description"] == FAULTS["frozen"]
