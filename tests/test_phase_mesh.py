"""Stationary states of the noisy model on the full triangulated S² (d = 3).

The discrete equation (separable kernel, exact Jacobian), the continuation's thresholds
against the zonal ones under refinement, non-zonal starts, and the PDE's long-time runs.
Every check has a negative control put in through the public API (a kernel / K ↔ D
convention off by 2, a coarse mesh claimed as converged) that must make the check fail.
"""

from __future__ import annotations

import numpy as np
import pytest

from wflow.phase import (
    MeshModel,
    MeshOptions,
    funk_hecke_eigenvalues,
    k_sharp,
    mesh_phase_point,
    mesh_refinement,
    nonzonal_check,
    phase_point,
)

EPS = np.finfo(float).eps


def doubled(beta: float, d: int, lmax: int) -> np.ndarray:
    """The kernel's eigenvalues ×2: the ``K = 1/(2D)`` convention misread as ``K = 1/D``."""
    return 2.0 * funk_hecke_eigenvalues(beta, d, lmax)


# ------------------------------------------------------------------ the discrete equation
@pytest.mark.parametrize("beta", [3.0, 8.0])
def test_separable_kernel_is_the_direct_cell_sum(beta):
    """``Φ diag(κ) Φᵀ m`` equals ``Σ_L e^{β x_K·x_L} m_L`` (the PDE's centroid rule)."""
    model = MeshModel(beta, options=MeshOptions(frequency=3, symmetry="none"))
    rng = np.random.default_rng(0)
    m = rng.random(model.M)
    m /= m.sum()
    direct = np.exp(beta * (model.x @ model.x.T)) @ m
    sep = model.phi @ (model.kappa * model.moments_of(m))
    # R ~ 600-1200 terms of size up to e^β: round-off ~ R eps relative to the largest entry
    assert np.max(np.abs(sep - direct)) <= 1e4 * EPS * direct.max()
    # the spherical areas sum to one; the cells are the icosphere's 20 n²
    assert model.M == 180 and abs(model.sigma.sum() - 1.0) <= 10 * EPS


def test_jacobian_is_the_derivative_of_the_residual():
    model = MeshModel(3.0, options=MeshOptions(frequency=2, symmetry="none"))
    rng = np.random.default_rng(1)
    a = model.moments_of(model.sigma) + 0.05 * rng.standard_normal(model.R)
    K = 0.6
    G, m = model.residual(a, K)
    Ja, JK = model.jacobian(a, K, m)
    v = rng.standard_normal(model.R)
    eps = 1e-6  # central differences: error O(eps²) + O(eps_mach/eps) ~ 1e-10
    fd = (model.residual(a + eps * v, K)[0] - model.residual(a - eps * v, K)[0]) / (2 * eps)
    fdK = (model.residual(a, K + eps)[0] - model.residual(a, K - eps)[0]) / (2 * eps)
    assert np.max(np.abs(fd - Ja @ v)) < 1e-8
    assert np.max(np.abs(fdK - JK)) < 1e-8


def test_solution_is_a_critical_point_of_the_discrete_free_energy():
    """``log(m/σ) − (2K/β) W m`` is constant over the cells; at a wrong ``K`` it is not."""
    pt = phase_point(3.0, 3)
    zs = pt.branch.solve(pt.m_c)
    model = MeshModel(3.0, options=MeshOptions(frequency=4))
    st = model.solve(model.zonal_guess(zs.c, zs.K), zs.K)
    assert st.residual <= model.options.newton_tol

    def spread(K: float) -> float:
        g = np.log(st.m / model.sigma) - (2 * K / 3.0) * (model.phi @ (model.kappa * st.a))
        return float(np.ptp(g))

    assert spread(st.K) < 1e-9
    assert spread(1.01 * st.K) > 1e-3  # negative control: the wrong coupling is caught
    # the free energy is the general formula: a non-stationary perturbation raises it
    assert st.free_energy < model.free_energy(0.9 * st.m + 0.1 * model.sigma, st.K)


def test_axial_basis_gives_the_full_basis_state():
    """The C5v-invariant harmonics lose nothing: the full basis solves to the same state."""
    pt = phase_point(4.0, 3)
    zs = pt.branch.solve(pt.m_c)
    ax = MeshModel(4.0, options=MeshOptions(frequency=4))
    full = MeshModel(4.0, options=MeshOptions(frequency=4, symmetry="none"))
    s1 = ax.solve(ax.zonal_guess(zs.c, zs.K), zs.K)
    s2 = full.solve(full.zonal_guess(zs.c, zs.K), zs.K)
    assert ax.R < full.R / 5
    assert np.max(np.abs(s1.m - s2.m)) < 1e-10
    assert abs(s1.free_energy - s2.free_energy) < 1e-12


def test_options_validated_naming_the_field():
    with pytest.raises(ValueError, match="frequency"):
        MeshOptions(frequency=0)
    with pytest.raises(ValueError, match="symmetry"):
        MeshOptions(symmetry="cubic")


def test_richardson_step_is_exact_for_a_pure_power():
    from wflow.phase.mesh.checks import _richardson

    h = np.array([0.4, 0.2, 0.1])
    p, v = _richardson(h, 0.6 + 0.3 * h ** 2 - 0.1 * h ** 2)
    assert abs(p - 2.0) < 1e-9 and abs(v - 0.6) < 1e-12
    # fewer than three meshes: no order, the finest value
    p1, v1 = _richardson(h[:2], 0.6 + h[:2] ** 2)
    assert np.isnan(p1) and v1 == 0.6 + 0.2 ** 2


# ------------------------------------------------------------------ thresholds on coarse meshes
def test_coarse_mesh_thresholds_approach_the_zonal_ones_at_order_two():
    ref = phase_point(3.0, 3)
    p4, p8 = (mesh_phase_point(3.0, options=MeshOptions(frequency=n)) for n in (4, 8))
    for p in (p4, p8):
        assert p.k_fold < p.k_c < p.k_sharp
        assert p.m_fold < p.m_c
    e4, e8 = (abs(p.k_c / ref.k_c - 1) for p in (p4, p8))
    order = np.log(e4 / e8) / np.log(p4.h / p8.h)
    print(f"beta=3: K_c rel errors {e4:.3e} (n=4), {e8:.3e} (n=8), order {order:.3f}")
    assert 1.5 < order < 2.5 and e8 < 5e-4
    # the linear threshold of the near-uniform state: the closed form to the mesh error
    assert abs(p8.k_sharp / k_sharp(3.0, 3) - 1) < 1e-6
    assert abs(p8.k_fold / ref.k_fold - 1) < 6e-4


def test_a_coarse_mesh_claimed_as_converged_fails():
    """One coarse mesh: no observed order, and ``K_c`` misses the zonal one by ~1e-3."""
    res = mesh_refinement(3.0, (4,))
    assert not res.passed
    assert res.rel_error["k_c"] > 1e-4 and np.isnan(res.order["k_c"])


# ------------------------------------------------------------------ non-zonal perturbations
def test_nonzonal_starts_converge_to_rotations_of_the_zonal_state():
    chk = nonzonal_check(3.0, frequency=4, seeds=(0, 1, 2))
    print(f"order parameters {chk.order_parameters} axial {chk.axial_order_parameter} zonal "
          f"{chk.zonal_order_parameter}; shape errors {chk.shape_error}; torques "
          f"{chk.torque}; K_# modes {chk.k_sharp_modes}")
    assert chk.passed
    # axis arbitrary: the three states point in different directions
    cos = chk.axes @ chk.axes.T
    assert np.max(np.abs(cos[np.triu_indices(3, 1)])) < 0.99
    # the degree-1 triplet: every order m goes unstable together (icosahedral symmetry)
    assert np.ptp(chk.k_sharp_modes) < 1e-10
    # negative control: the K <-> D convention off by 2 fails the same check
    assert not nonzonal_check(3.0, frequency=4, seeds=(0,), eigenvalues=doubled).passed


# ------------------------------------------------------------------ the 1e-4 target (slow)
@pytest.mark.slow
@pytest.mark.parametrize("beta", [3.0, 4.0, 8.0])
def test_richardson_extrapolated_k_c_agrees_with_the_zonal_one(beta):
    res = mesh_refinement(beta, (8, 16, 32), rtol=1e-4)
    for row in res.table():
        print(row)
    print(f"beta={beta}: extrapolated {res.extrapolated} order {res.order} rel {res.rel_error}")
    assert res.passed
    assert res.rel_error["k_fold"] < 1e-4
    wrong = mesh_refinement(beta, (8, 16, 32), eigenvalues=doubled)
    assert not wrong.passed


# ------------------------------------------------------------------ the PDE's long-time runs
@pytest.mark.slow
def test_pde_long_time_run_reaches_the_mesh_branch():
    from wflow.phase import pde_relaxation_check

    chk = pde_relaxation_check(4.0, 0.45, frequency=4, T=15.0)
    print(f"pde |m| = {chk.run.final:.6f}, mesh {chk.mesh_order_parameter:.6f}, zonal "
          f"{chk.zonal_order_parameter:.6f}, {chk.run.seconds:.1f} s")
    assert chk.passed
    # negative control: D = 1/K (the convention misread by 2): the uniform start stays
    assert not pde_relaxation_check(4.0, 0.45, frequency=4, T=15.0, diffusion=1 / 0.45).passed


@pytest.mark.slow
def test_pde_hysteresis_above_beta_star_and_none_below():
    from wflow.phase import hysteresis_check

    above = hysteresis_check(4.0, 0.9, frequency=4, T=20.0)
    # below β* there is no fold: at K = 0.75 K_# both starts relax to the uniform state
    # (the degree-1 decay rate (1/K_#)(1 − K_#/K) makes 0.9 K_# too slow for T = 20)
    below = hysteresis_check(1.5, 0.75, frequency=4, T=20.0)
    print(f"beta=4: up {above.up.final:.3e} down {above.down.final:.6f} branch "
          f"{above.branch_order_parameter:.6f}; beta=1.5: {below.up.final:.3e} "
          f"{below.down.final:.3e}")
    assert above.passed and above.hysteresis
    assert below.passed and not below.hysteresis
    # negative control: D halved (K = 1/D) puts K above K_#: the uniform start clusters
    assert not hysteresis_check(4.0, 0.9, frequency=4, T=20.0, diffusion_factor=0.5).passed


# ------------------------------------------------------------------ the command
def test_cli_mesh_prints_the_api_numbers_and_fails_a_single_coarse_mesh(capsys):
    import json

    from wflow.cli import main

    assert main(["phase", "mesh", "--beta", "3", "--refine", "4", "--json"]) == 1  # coarse
    (rec,) = json.loads(capsys.readouterr().out)
    p = mesh_phase_point(3.0, options=MeshOptions(frequency=4))
    assert rec["rows"][0]["k_c"] == pytest.approx(p.k_c, rel=1e-12)
    assert rec["reference"]["k_c"] == phase_point(3.0, 3).k_c and rec["passed"] is False


@pytest.mark.parametrize("args, key", [(("--beta", "1.5"), "beta"),
                                       (("--beta", "nan"), "beta"),
                                       (("--beta", "3", "--refine", "8", "4"), "refine")])
def test_cli_mesh_bad_input_exits_2_naming_the_key(capsys, args, key):
    from wflow.cli import main

    assert main(["phase", "mesh", *args]) == 2
    assert key in capsys.readouterr().err


@pytest.mark.slow
def test_pde_sweep_up_and_down_loops_only_between_the_fold_and_k_sharp():
    """β = 4: K = 0.7, 0.85, 1.3 K_# up then down; a loop at 0.85 only (K_f = 0.79 K_#).
    β = 1.5 < β*: the same sweep (0.7, 1.3) has no loop."""
    from wflow.phase import hysteresis_sweep

    above = hysteresis_sweep(4.0, (0.7, 0.85, 1.3), frequency=4, T=25.0)
    below = hysteresis_sweep(1.5, (0.7, 1.3), frequency=4, T=25.0)
    print(f"beta=4: up {above.up} down {above.down}; beta=1.5: up {below.up} down {below.down}")
    assert above.passed and list(above.bistable) == [False, True, False]
    assert below.passed and not below.bistable.any()
    # negative control: a claimed fold above 0.85 K_# makes the observed loop fall outside
    from dataclasses import replace

    assert not replace(above, k_fold=0.9 * above.k_sharp).passed
