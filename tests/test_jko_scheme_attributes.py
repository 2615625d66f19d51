"""The JKO's cost model and option checks read the scheme objects, never their names."""

from __future__ import annotations

import pytest

from wflow.infra.schema import ScenarioError
from wflow.jko import SCHEMES, JKOOptions, check_applicable, jko_table_from_dict
from wflow.jko.estimate import estimate_jko
from wflow.jko.steppers import FVScheme, OTScheme


class _PairsFV(FVScheme):
    """A user's FV-like step that declares the OT step's cost model (candidate pairs)."""

    name = "pairs_fv"
    candidate_pairs = True


class _SmoothOT(OTScheme):
    """A user's OT-like step that declares a step smooth in τ (error control allowed)."""

    name = "smooth_ot"
    error_control = True


def test_the_cost_model_is_the_scheme_objects():
    kw = {"cells": 2420, "H": 1, "steps": 10, "verify_max_cells": 0}
    fv, ot = estimate_jko(scheme="fv", **kw), estimate_jko(scheme="ot", **kw)
    assert "candidate pairs" in ot.parts and "candidate pairs" not in fv.parts
    assert estimate_jko(scheme="auto", **kw).parts == fv.parts  # "auto" is "fv" on a mesh
    # an unregistered object: its attribute decides, whatever its class or name
    assert estimate_jko(scheme=_PairsFV(), **kw).parts == ot.parts
    assert estimate_jko(scheme=FVScheme(), **kw).parts == fv.parts  # negative control


def test_the_applicability_checks_read_the_scheme_objects():
    # error control: refused for a step without the attribute, accepted for one with it
    with pytest.raises(ScenarioError, match=r"jko\.rtol"):
        check_applicable(JKOOptions(scheme=OTScheme(), rtol=1e-3), {"rtol"})
    check_applicable(JKOOptions(scheme=_SmoothOT(), rtol=1e-3), {"rtol"})
    # an OT option with the FV scheme: refused unless the caller also runs the OT
    # cross-check (the main job), which reads the registered cross-check scheme
    with pytest.raises(ScenarioError, match=r"jko\.inner: applies only with"):
        check_applicable(JKOOptions(scheme="fv", inner="mirror"), {"inner"})
    check_applicable(JKOOptions(scheme="fv", inner="mirror"), {"inner"}, crosscheck=True)
    with pytest.raises(ScenarioError, match=r"'auto' is 'fv' on a mesh"):
        check_applicable(JKOOptions(inner="mirror"), {"inner"})


def test_a_scheme_registered_later_is_a_valid_override_and_a_wrong_one_names_the_flag():
    table = jko_table_from_dict({})
    with pytest.raises(ScenarioError, match=r"^--scheme: must be one of"):
        table.with_(scheme="smooth_ot")
    SCHEMES.register(_SmoothOT)
    try:
        assert table.with_(scheme="smooth_ot").settings["scheme"] == "smooth_ot"
        assert jko_table_from_dict({"scheme": "smooth_ot", "rtol": 1e-3}).options(0.1).rtol \
            == 1e-3
    finally:
        SCHEMES.unregister("smooth_ot")
    with pytest.raises(ScenarioError, match=r"^--ot: "):
        table.with_(ot="exact")
