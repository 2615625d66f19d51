"""Noisy particles at their stationary state against the zonal branch (wflow.phase.particles).

The model: one USA head A = V = I on S², token diffusion D = 1/(2K). Above the transition
the particles' time-averaged order parameter |mean x_i| must equal the stable zonal
state's m(K) within its batch-means standard error (t(batches − 1) at level 0.003); the
negative controls run the same particles with a wrong diffusion through the public API.
"""

from __future__ import annotations

import math
from pathlib import Path

import numpy as np
import pytest

from wflow.phase import k_sharp, phase_point, zonal_branch
from wflow.phase.particles import (
    CHECK_CONFIG,
    batch_means_se,
    check_particle_point,
    correct_dt,
    extrapolate_dt,
    load_particle_points,
    particle_order_parameter,
    stable_order_parameter,
    vmf_kappa_of,
)

#: The small stationary run whose size bench/phase_particles.py measures (β = 1, a
#: continuous transition, K = 2.2 ≈ 1.62 K_#), without β and K.
SMALL = {k: v for k, v in CHECK_CONFIG.items() if k not in ("beta", "K")}


def test_stable_order_parameter_is_the_branch_state_at_k():
    beta, K = 1.0, 1.6
    m = stable_order_parameter(beta, K)
    # the branch's own state at that m has coupling K (Brent's method to its default tol)
    assert zonal_branch(beta, 3).solve(m).K == pytest.approx(K, rel=1e-9)
    assert 0.6 < m < 0.63
    # below the linear threshold of a continuous transition: the uniform state
    assert stable_order_parameter(beta, 0.99 * k_sharp(beta, 3)) == 0.0


def test_stable_order_parameter_takes_the_upper_branch_past_the_fold():
    pp = phase_point(3.0, 3)
    K = 0.5 * (pp.k_fold + pp.k_sharp)
    m = stable_order_parameter(3.0, K)
    assert m > pp.m_fold
    assert stable_order_parameter(3.0, 0.99 * pp.k_fold) == 0.0


def test_vmf_kappa_inverts_the_langevin_function():
    for m in (0.05, 0.3, 0.6158, 0.95):
        k = vmf_kappa_of(m)
        assert 1.0 / math.tanh(k) - 1.0 / k == pytest.approx(m, rel=1e-10)
    assert vmf_kappa_of(0.0) == 0.0
    with pytest.raises(ValueError, match="m:"):
        vmf_kappa_of(1.0)


def test_batch_means_se_of_independent_draws():
    rng = np.random.default_rng(3)
    x = rng.standard_normal(40000)
    # 20 batch means of 2000 independent N(0, 1): the s.e. is 1/√40000 = 5e-3 to within
    # the chi distribution of 19 degrees of freedom (a 40 % window is 4.4 of its s.d.)
    assert batch_means_se(x, 20) == pytest.approx(5e-3, rel=0.4)
    with pytest.raises(ValueError, match="batches"):
        batch_means_se(x[:3], 4)


def test_particles_reach_the_branch_order_parameter():
    run = particle_order_parameter(1.0, 2.2, seed=1, **SMALL)
    assert run.passed(), (run.mean, run.se, run.branch_m, run.z)
    assert run.order_parameter.shape == (33,)
    assert run.t[-1] == pytest.approx(32.0)
    rec = run.as_dict()
    assert rec["passed"] is True and rec["n"] == 1000


@pytest.mark.parametrize("factor", [2.0, 1.1])
def test_a_wrong_diffusion_is_caught(factor):
    # the negative control: the published convention off by 2 (D = 1/K: the branch at
    # K/2 = 1.1 < K_#, where the cluster dissolves) and a 10 % error in D (the branch at
    # K/1.1, m 0.80 against 0.837)
    run = particle_order_parameter(1.0, 2.2, seed=1, diffusion=factor / 4.4, **SMALL)
    assert not run.passed(), (factor, run.mean, run.se, run.branch_m, run.z)


def test_mpi_split_equals_serial_on_one_rank():
    from mpi4py import MPI

    a = particle_order_parameter(1.0, 1.6, seed=2, n=400, T=1.0, burn=0.5, every=0.25,
                                 batches=2)
    b = particle_order_parameter(1.0, 1.6, seed=2, n=400, T=1.0, burn=0.5, every=0.25,
                                 batches=2, comm=MPI.COMM_SELF)
    np.testing.assert_array_equal(a.order_parameter, b.order_parameter)


@pytest.mark.parametrize("kw, name", [
    ({"n": 50}, "n"), ({"dt": -1.0}, "dt"), ({"every": 0.33}, "every"),
    ({"burn": 32.0}, "burn"), ({"T": 32.5}, "T"), ({"diffusion": float("nan")}, "diffusion"),
])
def test_bad_input_is_refused_naming_it(kw, name):
    args = {**SMALL, **kw}
    with pytest.raises(ValueError, match=f"^{name}:"):
        particle_order_parameter(1.0, 2.2, **args)


FIXTURE = Path(__file__).resolve().parent / "data" / "phase_particles_points.json"


def test_a_recorded_point_is_checked_against_the_recomputed_branch():
    m = stable_order_parameter(1.0, 2.2)
    rec = {"beta": 1.0, "K": 2.2, "n": 100000, "dt": 0.05, "batches": 10, "mean": m + 2e-4,
           "se": 1e-4, "branch_m": -1.0}  # the record's own branch_m is never read
    p = check_particle_point(rec)
    # z from the same four numbers: exact up to the rounding of m + 2e-4 (|m| eps / se)
    assert p.z == pytest.approx(2.0, abs=1e-11) and p.passed and p.ranks == 1
    assert p.t_crit == pytest.approx(4.0240, abs=1e-4)  # t(9) at 0.9985
    assert not check_particle_point({**rec, "mean": m + 5e-4}).passed  # z = 5 > 4.02
    # negative controls: β off by 5 % (the branch moves by 1.2e-2, 120 s.e.) and a record
    # without a usable standard error
    off = check_particle_point({**rec, "beta": 1.05})
    assert not off.passed and abs(off.z) > 50
    assert not check_particle_point({**rec, "se": 0.0}).passed
    assert not check_particle_point({**rec, "se": float("nan")}).passed


def test_the_verdict_of_a_run_record_is_the_runs_own():
    run = particle_order_parameter(1.0, 1.6, seed=2, n=400, T=2.0, burn=0.5, every=0.25,
                                   batches=2)
    p = check_particle_point(run.as_dict())
    assert p.passed == run.passed() and p.z == run.z and p.branch_m == run.branch_m


def test_points_are_loaded_and_checked_from_a_results_file(tmp_path):
    pts = load_particle_points(FIXTURE)
    assert [p.passed for p in pts] == [True, False]  # the second row is 7.9 s.e. off
    assert pts[1].z == pytest.approx((0.9490 - stable_order_parameter(3.0, 0.9)) / 1e-4)
    assert load_particle_points(tmp_path / "missing.json") is None
    (tmp_path / "other.json").write_text('{"size": {}}')
    assert load_particle_points(tmp_path / "other.json") is None


def test_the_step_bias_is_extrapolated_away():
    m = stable_order_parameter(3.0, 0.9)
    se, bias = 1e-4, 4e-3  # a bias c dt² of 40 s.e. at dt = 0.05, 10 at dt/2
    rec = {"beta": 3.0, "K": 0.9, "n": 100000, "batches": 10, "se": se}
    coarse = check_particle_point({**rec, "dt": 0.05, "mean": m + bias})
    fine = check_particle_point({**rec, "dt": 0.025, "mean": m + bias / 4})
    assert not coarse.passed and not fine.passed
    lim = extrapolate_dt(coarse, fine)
    # (4 (m + b/4) − (m + b)) / 3 = m up to the rounding of the four numbers (|m| eps / se)
    assert lim.passed and abs(lim.z) < 1e-9 and lim.dt == 0.0
    assert lim.se == pytest.approx(math.sqrt(17) * se / 3, rel=1e-12)
    # equal batch variances: Welch–Satterthwaite gives 289/257 · 9 = 10.1 → 10 d.o.f.
    assert lim.batches == 11
    # negative control: the wrong order (a first-order bias assumed) misses the branch
    assert not extrapolate_dt(coarse, fine, order=1).passed
    with pytest.raises(ValueError, match="^dt:"):
        extrapolate_dt(coarse, check_particle_point({**rec, "dt": 0.02, "mean": m}))
    with pytest.raises(ValueError, match="^points:"):
        extrapolate_dt(coarse, check_particle_point({**rec, "dt": 0.025, "mean": m,
                                                     "K": 0.95}))


def test_a_large_run_takes_the_step_bias_measured_at_a_smaller_n():
    m = stable_order_parameter(3.0, 0.9)
    se, bias = 1e-4, 4e-3  # the step's bias at dt = 0.05 (40 s.e.); b/4 at dt/2
    small = {"beta": 3.0, "K": 0.9, "n": 100000, "batches": 10, "se": se}
    pairs = [(check_particle_point({**small, "dt": 0.05, "mean": m + bias + e, "seed": s}),
              check_particle_point({**small, "dt": 0.025, "mean": m + bias / 4 + e,
                                    "seed": s}))
             for s, e in ((0, 2e-4), (1, -2e-4))]  # seed offsets cancel in each pair
    big = check_particle_point({**small, "n": 1000000, "se": se / 3, "dt": 0.05,
                                "mean": m + bias})
    assert not big.passed  # 120 s.e. of the large run: the bias, not the particles
    p = correct_dt(big, pairs)
    # m + b − (4/3)(3b/4) = m up to the rounding of the numbers (|m| eps / se)
    assert p.passed and abs(p.z) < 1e-9
    assert (p.dt, p.n, p.bias_n, p.seed) == (0.0, 1000000, 100000, 0)
    # se² = (se/3)² + (4/3 · 1/2)² · 4 se²: the two pairs' four runs, each weighted 2/3
    assert p.se == pytest.approx(se * math.sqrt(1 / 9 + 16 / 9), rel=1e-12)
    # one pair alone: its own offset e = 2e-4 stays in the run (m + b − (4/3)(3b/4) exact)
    one = correct_dt(big, pairs[:1])
    assert one.se == pytest.approx(se * math.sqrt(1 / 9 + 32 / 9), rel=1e-12)
    # negative controls: the wrong order (a first-order bias) and a large run whose
    # particles are off by 10 of its own s.e. beyond the bias both fail
    assert not correct_dt(big, pairs, order=1).passed
    off = check_particle_point({**small, "n": 1000000, "se": 3e-5, "dt": 0.05,
                                "mean": m + bias + 2e-3})
    assert not correct_dt(off, pairs).passed
    with pytest.raises(ValueError, match="^pairs:"):
        correct_dt(big, [])
    with pytest.raises(ValueError, match="^dt:"):  # pairs at another step
        correct_dt(check_particle_point({**small, "n": 1000000, "dt": 0.1, "mean": m}), pairs)
    with pytest.raises(ValueError, match="^points:"):  # pairs of another (β, K)
        correct_dt(check_particle_point({**small, "K": 0.95, "dt": 0.05, "mean": m}), pairs)
    with pytest.raises(ValueError, match="^dt:"):  # a pair that is not dt and dt/2
        correct_dt(big, [(pairs[0][0], pairs[0][0])])
