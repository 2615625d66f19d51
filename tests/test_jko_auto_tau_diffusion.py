"""The automatic JKO step with token diffusion ``D``, and the estimate naming the key."""

from __future__ import annotations

import math

import numpy as np
import pytest

from wflow.attention.heads import Attention, Heads
from wflow.geometry.mesh import dual_geometry, icosphere
from wflow.infra.estimate import EstimateError, check_estimate
from wflow.jko import JKOOptions, auto_step, jko_table_from_dict
from wflow.jko.estimate import STARTUP_SECONDS, estimate_run
from wflow.jko.options import auto_steps_bound, auto_tau


def test_auto_tau_adds_the_diffusive_steps():
    # D = 0: the noiseless rule, bit for bit (N = round(T|v|/(3h)))
    for T, h, v in ((2.0, 0.072, 0.431), (2.0, 0.132, 0.430), (1.0, 0.1, 0.0)):
        assert auto_tau(T, h, v, diffusion=0.0) == auto_tau(T, h, v) == \
            T / max(1, math.floor(T * v / (3.0 * h) + 0.5))
    # nothing moves but the heat flow: N = round(T·4D/(3h)²) = round(4.44) = 4, where the
    # noiseless rule takes one step of T (negative control)
    assert auto_tau(1.0, 0.1, 0.0, diffusion=0.1) == 0.25
    assert auto_tau(1.0, 0.1, 0.0) == 1.0
    tau = auto_tau(1.0, 0.1, 0.0, diffusion=0.1)
    assert math.sqrt(4 * 0.1 * tau) == pytest.approx(0.3, rel=0.1)  # the spread ≈ 3h
    # both: the rates add, N = round(10/3 + 4.44) = 8
    assert auto_tau(1.0, 0.1, 1.0, diffusion=0.1) == 1.0 / 8
    with pytest.raises(ValueError, match="diffusion"):
        auto_tau(1.0, 0.1, 1.0, diffusion=-1.0)
    # the bound before the mesh is known bounds the rule at unit speed, with D too
    for cells in (320, 2420, 40500):
        h = math.sqrt(4 * math.pi / cells)
        for D in (0.0, 0.01, 1.0):
            assert T / auto_tau(1.0, h, 1.0, diffusion=D) <= \
                auto_steps_bound(1.0, cells, diffusion=D)
        assert auto_steps_bound(1.0, cells, diffusion=0.0) == auto_steps_bound(1.0, cells)


def test_auto_step_records_the_diffusive_spread():
    tri = icosphere(4)
    g = dual_geometry(tri.points, tri.cells)
    m0 = g.areas / g.areas.sum()  # uniform: |v|max = 0 for USA heads
    heads, attn = Heads.bilinear(np.eye(3)), Attention("usa", 2.0)
    quiet, info0 = auto_step(g.centres, g.areas, m0, heads, attn,
                             options=JKOOptions(T=1.0, tau=1.0))
    noisy, info = auto_step(g.centres, g.areas, m0, heads, attn,
                            options=JKOOptions(T=1.0, tau=1.0, diffusion=0.5))
    assert quiet.tau == 1.0 and "diffusive_cells_per_step" not in info0
    assert noisy.steps > 1 and "token diffusion" in info["rule"]
    assert 2.0 < info["diffusive_cells_per_step"] < 4.5  # √(4Dτ)/h ≈ 3 (rounding of N)


def test_absurd_diffusive_cost_is_refused_naming_the_key():
    """D = 1e3 with tau = "auto" on 40 500 cells: 1.15e6 steps (346 GiB of densities)."""
    table = jko_table_from_dict({"T": 1.0}).with_(diffusion=1e3)
    est = estimate_run(table, cells=40500, H=1)
    assert "attention.diffusion" in est.what and est.steps > 1e6
    with pytest.raises(EstimateError, match=r"attention\.diffusion = 1000"):
        check_estimate(est, interactive=False, available=64 * 2.0**30)
    # negative controls: a small D, a given τ, and D = 0 name no key and fit
    for t in (jko_table_from_dict({"T": 1.0}).with_(diffusion=1e-3),
              jko_table_from_dict({"T": 1.0, "tau": 0.1}).with_(diffusion=1e3),
              jko_table_from_dict({"T": 1.0})):
        e = estimate_run(t, cells=40500, H=1)
        assert e.what == "jko"
        check_estimate(e, interactive=False, available=64 * 2.0**30)
    assert estimate_run(jko_table_from_dict({"T": 1.0}), cells=40500, H=1).steps == \
        auto_steps_bound(1.0, 40500)


def test_error_control_counts_in_the_estimate():
    def est(**kw):
        e = estimate_run(jko_table_from_dict({"T": 1.0, "tau": 0.1, "verify": False, **kw}),
                         cells=2420, H=1)
        return e.steps, e.seconds - STARTUP_SECONDS

    base, fixed, adaptive = est(), est(rtol=1e-3, adaptive=False), est(rtol=1e-3)
    assert fixed[0] == base[0] and fixed[1] == pytest.approx(3 * base[1])  # + the τ/2 run
    # the controller's steps, 0.75 T²/rtol (wflow.jko.estimate.adaptive_steps)
    assert adaptive[0] == 750 and adaptive[1] == pytest.approx(1.5 * 75 * base[1])


def test_a_given_tau_records_its_own_diffusive_spread():
    from wflow.jko.spec import resolve_step

    tri = icosphere(4)
    g = dual_geometry(tri.points, tri.cells)
    m0 = g.areas / g.areas.sum()
    heads, attn = Heads.bilinear(np.eye(3)), Attention("usa", 2.0)
    table = jko_table_from_dict({"T": 1.0, "tau": 0.5}).with_(diffusion=0.5)
    opts, info = resolve_step(table, g.centres, g.areas, m0, heads, attn)
    assert opts.tau == 0.5 and info["rule"] == "given"
    assert info["diffusive_cells_per_step"] == pytest.approx(math.sqrt(4 * 0.5 * 0.5) / info["h"])
