"""Token diffusion wired into the JKO solver (issue 40, items 1 and 4).

``JKOOptions.diffusion = D`` reaches the FV step's entropy sub-step
(:func:`wflow.jko.fv.fv_step`), the per-step free-energy EDI is recorded in the history
(``free_edi_step``) and the balance (``free_edi``), and judged; the OT scheme refuses
``D > 0`` naming ``attention.diffusion`` before computing; ``D = 0`` is today's JKO bit
for bit. Each check has a negative control through the public API.
"""

from __future__ import annotations

import numpy as np
import pytest

from wflow.attention.heads import Attention, Heads
from wflow.geometry.mesh import dual_geometry, icosphere
from wflow.infra.schema import ScenarioError
from wflow.jko import JKOOptions, solve_jko
from wflow.jko.options import check_diffusion_scheme

_TRI = icosphere(6)  # 720 cells: a step costs ~0.1 s
GEO = dual_geometry(_TRI.points, _TRI.cells)
USA = (Heads.bilinear(np.eye(3)), Attention("usa", 2.0))


def two_bumps() -> np.ndarray:
    x = GEO.centres
    m = (np.exp(3.0 * x[:, 2]) + np.exp(2.0 * x[:, 0])) * GEO.areas
    return m / m.sum()


def run(step_mobility=None, **kw):
    return solve_jko(two_bumps(), *USA, points=GEO.centres, areas=GEO.areas, mesh=GEO,
                     options=JKOOptions(T=0.1, tau=0.025, **kw), step_mobility=step_mobility)


def test_zero_diffusion_is_todays_jko_bit_for_bit():
    a = run()
    b = run(diffusion=0.0)
    assert np.array_equal(a.masses, b.masses)
    assert a.history.keys() == b.history.keys() and "free_edi_step" not in b.history
    assert all(np.array_equal(a.history[k], b.history[k]) for k in a.history
               if k != "step_time")
    assert a.balance == b.balance and "free_edi" not in b.balance
    c = run(diffusion=1e-9)  # negative control: the smallest noise changes the masses
    assert not np.array_equal(a.masses, c.masses)


def test_free_energy_edi_recorded_per_step():
    r = run(diffusion=0.1)
    # no check is judged with token diffusion (the EDI of E and the free-energy EDI are
    # recorded, not judged): the run is completed, its message naming both reasons
    assert r.status == "completed" and "free_edi" in r.message and "edi:" in r.message
    edi = r.history["free_edi_step"]
    assert edi.shape == (5,) and edi[0] == 0.0 and np.all(np.isfinite(edi[1:]))
    # the balance sums the steps: free_edi = free_dF + ∫I (static heads, no work);
    # round-off of 4 steps of O(1) sums: 1e3 eps is ample
    bal = r.balance
    assert bal["free_edi"] == pytest.approx(float(np.sum(edi)), abs=1e-14)
    assert abs(bal["free_dF"] + bal["free_dissipation_int"] - bal["free_edi"]) <= 1e-12
    chk = r.checks["free_edi"]  # measured and recorded (a spatial error at fixed h)
    assert not chk["judged"] and chk["passed"] and chk["value"] < chk["tolerance"]
    assert r.checks["edi"]["judged"] is False  # the EDI of E alone: recorded only
    # the mass stays exact and every cell positive with the entropy sub-step
    assert np.max(np.abs(r.masses.sum(axis=1) - 1.0)) <= 1e-13
    assert r.masses.min() > 0
    # negative control: a step metric with twice the mobility (a wrong transport cost)
    # breaks the free-energy identity: the measured residual is 10x past the tolerance
    bad = run(diffusion=0.1, step_mobility=lambda b: 2.0 * b)
    assert not bad.checks["free_edi"]["passed"]
    assert bad.checks["free_edi"]["value"] > 5 * bad.checks["free_edi"]["tolerance"]


def test_ot_scheme_refuses_diffusion_naming_the_key(monkeypatch):
    import wflow.jko.solver as solver

    def boom(*a, **k):  # the refusal comes before any computing
        raise AssertionError("computed before refusing")

    monkeypatch.setattr(solver, "iterate_jko", boom)
    with pytest.raises(ScenarioError, match=r"^attention\.diffusion: .*'ot'"):
        run(scheme="ot", diffusion=0.1)
    with pytest.raises(ScenarioError, match=r"^attention\.diffusion: "):  # 'auto' without mesh
        check_diffusion_scheme(JKOOptions(diffusion=0.1), mesh_given=False)
    # negative controls: D = 0 with OT, and D > 0 with FV, pass the check
    check_diffusion_scheme(JKOOptions(scheme="ot"))
    check_diffusion_scheme(JKOOptions(scheme="fv", diffusion=0.1))
    check_diffusion_scheme(JKOOptions(diffusion=0.1), mesh_given=True)


@pytest.mark.parametrize("bad", [-1.0, float("nan"), float("inf")])
def test_bad_diffusion_option_refused(bad):
    with pytest.raises(ScenarioError, match=r"diffusion: "):
        JKOOptions(diffusion=bad)
