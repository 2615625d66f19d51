"""Token diffusion in the PDE (issue 40, item 3): ``∂_t ρ + div(ρv) = D Δ_S ρ``.

Two-point fluxes on the circumcentric dual, Crank–Nicolson half-steps around the drift step
(Strang). Checked here, each with a negative control through the public API:

* ``D = 0`` is today's solver bit for bit (a tiny ``D`` is not);
* the option is validated naming the key;
* mass exact to round-off (a non-flux-form update with the same solve is caught), densities
  non-negative (the M-matrix sub-step under ``h <= h_+``, checked beyond);
* a mesh that is not well centred is refused;
* exact heat decay ``e^{−D l(l+1) t}`` of zonal harmonics at observed order 2 in joint
  refinement (and in time alone); ``D`` off by 1 % is caught;
* with the drift on, the growth rate ``l(l+1)(λ_l/β − D)`` of the uniform density's modes
  (THEORY §8) at observed order 2; ``D`` off by a factor 2 (the ``K = 1/(2D)`` convention
  misread) is caught;
* the free-energy EDI: present and shrinking for USA value-aligned heads, labelled a defect
  for softmax heads.
"""

from __future__ import annotations

import math

import numpy as np
import pytest
from scipy.special import gamma, iv

from wflow.attention.heads import Attention, Heads
from wflow.geometry.mesh import NotWellCentredError, load_mesh
from wflow.geometry.mesh.triangulation import Triangulation
from wflow.geometry.sphere import normalize
from wflow.infra.schema import ScenarioError
from wflow.pde import PDEOptions, rotation_velocity, solve_pde
from wflow.pde.diffusion import TokenDiffusion

from .conftest import EPS
from .test_jko_fv import _obtuse_mesh

_MESHES: dict[int, object] = {}


def mesh(n: int):
    """Cached icosphere of frequency ``n`` (``20 n²`` cells)."""
    if n not in _MESHES:
        _MESHES[n] = load_mesh(f"icosphere:{20 * n * n}")
    return _MESHES[n]


def centres(sm) -> np.ndarray:
    return normalize(sm.gather_owned(sm.centroids))


def legendre(l: int, z: np.ndarray) -> np.ndarray:
    return np.polynomial.legendre.Legendre.basis(l)(z)


def fitted_order(h: list[float], err: list[float]) -> float:
    return float(np.polyfit(np.log(h), np.log(np.abs(err)), 1)[0])


STILL = rotation_velocity((0.0, 0.0, 0.0))  # the drift off: the heat equation alone


# ----------------------------------------------------------------------------- the option
def test_zero_diffusion_is_todays_solver_bit_for_bit():
    """``diffusion = 0`` takes today's path (array_equal); a tiny ``D`` changes the result."""
    sm = mesh(6)
    heads, attn = Heads.bilinear(np.eye(3)), Attention("usa", 2.0)
    rho0 = {"type": "vmf", "means": [[0, 0, 1], [1, 0, 0]], "kappas": [3.0, 2.0]}
    kw = dict(T=0.2, dt=0.05, order=2, n_saves=3, clusters=False)
    today = solve_pde(rho0, heads, attn, mesh=sm, options=PDEOptions(**kw))
    zero = solve_pde(rho0, heads, attn, mesh=sm, options=PDEOptions(**kw, diffusion=0.0))
    assert np.array_equal(today.rho, zero.rho)
    assert np.array_equal(today.steps["t"], zero.steps["t"])
    assert today.balance == zero.balance
    assert "diffusion" not in zero.stats
    # negative control: the same run with D = 1e-9 is not bit for bit
    tiny = solve_pde(rho0, heads, attn, mesh=sm, options=PDEOptions(**kw, diffusion=1e-9))
    assert not np.array_equal(today.rho, tiny.rho)
    assert "edi" not in tiny.balance and "free_edi" in tiny.balance


@pytest.mark.parametrize("bad", [-0.1, math.nan, math.inf, True, "0.1"])
def test_diffusion_option_rejects_bad_values_naming_the_key(bad):
    with pytest.raises(ScenarioError, match=r"^pde\.diffusion: "):
        PDEOptions(diffusion=bad)
    assert PDEOptions(diffusion=0.25).diffusion == 0.25


# ----------------------------------------------------------------------------- mass, sign
def test_mass_exact_and_densities_non_negative_for_a_cap():
    """A discontinuous cap (zeros next to mass), rotated and diffused with long steps.

    Tolerance: every step rounds each cell's update once per sub-step (two diffusion
    half-steps and the drift's SSP stages, ≤ 4 operations) and the sum itself rounds
    ``log₂ M`` times, so ``|Δmass| ≤ (4·4·steps + log₂ M) eps · mass``.
    """
    sm = mesh(8)
    opts = PDEOptions(T=0.5, dt=0.1, order=2, diffusion=2.0, n_saves=6, clusters=False)
    res = solve_pde({"type": "cap", "center": [1, 0, 0], "radius": 0.5}, mesh=sm,
                    velocity=rotation_velocity((0.0, 0.0, 2.0)), options=opts)
    assert res.status == "completed", res.message
    steps = res.stats["steps"]
    tol = (16 * steps + math.log2(sm.num_global)) * EPS
    assert np.max(np.abs(res.mass - res.mass[0])) <= tol * res.mass[0]
    assert res.stats["rho_min"] >= 0.0
    # steps beyond the M-matrix guarantee (Δt/2 > h_+) were taken, each checked >= 0
    assert res.stats["dt_max"] > 2 * res.stats["diffusion_positive_step"]
    # negative control: the same Crank–Nicolson solves turned into masses as ``A ρ'``
    # (not the flux form) lose mass at the solver tolerance, far above the bound
    td = TokenDiffusion(sm, 0.05, rtol=1e-6)
    m = res.masses[0]
    naive = td.areas * td.solve(m, 0.05)
    exact = sm.gather_owned(td.step(m, 0.05))
    assert abs(exact.sum() - m.sum()) <= (4 + math.log2(sm.num_global)) * EPS * m.sum()
    assert abs(naive.sum() - m.sum()) > 1e3 * tol * m.sum()


def test_positive_step_is_the_m_matrix_bound():
    """Below ``h_+`` a sub-step maps any non-negative masses to non-negative ones.

    Negative control: a step 4 h_+ long on a single occupied cell (the roughest data)
    produces negative masses, so the bound is not vacuous.
    """
    sm = mesh(6)
    td = TokenDiffusion(sm, 0.3)
    hp = td.positive_step()
    m = np.zeros(sm.num_global)
    m[17] = 1.0
    ok = sm.gather_owned(td.step(m, hp))
    # the solver residual (rtol 1e-13 of the data) is the only source of a negative value
    assert ok.min() >= -1e-12
    bad = sm.gather_owned(td.step(m, 4.0 * hp))
    assert bad.min() < -1e-6


def test_a_mesh_that_is_not_well_centred_is_refused():
    pts, cells = _obtuse_mesh()  # the JKO's obtuse icosphere
    bad = load_mesh(Triangulation(pts, cells))
    with pytest.raises(NotWellCentredError, match="not well centred"):
        solve_pde("uniform", mesh=bad, velocity=STILL, options=PDEOptions(T=0.1, diffusion=0.1))
    # control: the noiseless solver needs no orthogonality and runs on it
    res = solve_pde("uniform", mesh=bad, velocity=STILL, options=PDEOptions(T=0.1))
    assert res.status == "completed"


# ----------------------------------------------------------------------------- heat decay
def heat_error(n: int, l: int, D: float, T: float, dt: float, D_run: float | None = None
               ) -> float:
    """``a_l(T)/a_l(0) − e^{−D l(l+1) T}`` for ``ρ₀ = 1 + ½ P_l(z)``, the drift off."""
    sm = mesh(n)
    z = centres(sm)[:, 2]
    P = legendre(l, z)
    res = solve_pde(1.0 + 0.5 * P, mesh=sm, velocity=STILL,
                    options=PDEOptions(T=T, dt=dt, diffusion=D if D_run is None else D_run,
                                       n_saves=2, clusters=False))
    assert res.status == "completed", res.message
    a = res.masses @ P
    return float(a[-1] / a[0] - math.exp(-D * l * (l + 1) * T))


@pytest.mark.parametrize("l", [1, 2, 3])
def test_heat_decay_of_zonal_harmonics_second_order(l):
    """Joint refinement ``n = 6, 12, 24``, ``Δt = 0.3/n``: observed order ≈ 2."""
    D, T = 0.1, 0.5
    ns = [6, 12, 24]
    err = [heat_error(n, l, D, T, 0.3 / n) for n in ns]
    p = fitted_order([1.0 / n for n in ns], err)
    print(f"heat decay l={l}: errors {err}, observed order {p:.3f}")
    assert 1.8 <= p <= 2.3, (err, p)
    # negative control: D off by 1 % at the finest mesh shows far above the scheme's error
    wrong = heat_error(ns[-1], l, D, T, 0.3 / ns[-1], D_run=1.01 * D)
    assert abs(wrong) > 5 * abs(err[-1]), (wrong, err[-1])


def test_heat_decay_second_order_in_time():
    """Fixed mesh, ``Δt`` halved: the error against the finest step falls at order 2."""
    D, T, l, n = 0.5, 0.5, 2, 8
    ref = heat_error(n, l, D, T, 0.5 / 64)
    dts = [0.25, 0.125, 0.0625]
    err = [heat_error(n, l, D, T, dt) - ref for dt in dts]
    p = fitted_order(dts, err)
    print(f"heat decay in time: errors {err}, observed order {p:.3f}")
    assert 1.8 <= p <= 2.3, (err, p)


# ----------------------------------------------------------------------------- growth
def growth_rate_error(n: int, D: float, beta: float = 1.0, l: int = 1, T: float = 0.5,
                      D_run: float | None = None, eps: float = 1e-3) -> float:
    """Fitted growth of ``ε P_l`` on the uniform density minus ``l(l+1)(λ_l/β − D)``.

    The base run (``ρ₀ = 1``) is subtracted so that the perturbation's moment is measured
    alone; ``l`` odd: the quadratic self-interaction has no degree-``l`` part, so the
    nonlinearity enters at ``O(ε²)``.
    """
    sm = mesh(n)
    z = centres(sm)[:, 2]
    P = legendre(l, z)
    heads, attn = Heads.bilinear(np.eye(3)), Attention("usa", beta)
    opts = PDEOptions(T=T, dt=0.6 / n, order=2, diffusion=D if D_run is None else D_run,
                      n_saves=2, clusters=False, balance=False)
    base = solve_pde(np.ones_like(z), heads, attn, mesh=sm, options=opts)
    pert = solve_pde(1.0 + eps * P, heads, attn, mesh=sm, options=opts)
    assert base.status == pert.status == "completed"
    a = (pert.masses - base.masses) @ P
    lam = gamma(1.5) * (2.0 / beta) ** 0.5 * iv(l + 0.5, beta)
    exact = l * (l + 1) * (lam / beta - D)
    return float(math.log(a[-1] / a[0]) / T - exact)


def test_growth_rate_of_the_uniform_density_second_order():
    """THEORY §8: rate ``l(l+1)(λ_l/β − D)``; joint refinement at observed order ≈ 2."""
    D = 0.1
    ns = [6, 12, 24]
    err = [growth_rate_error(n, D) for n in ns]
    p = fitted_order([1.0 / n for n in ns], err)
    print(f"growth rate l=1: errors {err}, observed order {p:.3f}")
    assert 1.8 <= p <= 2.3, (err, p)
    assert abs(err[-1]) < 5e-4
    # negative control: the K = 1/(2D) convention misread (D doubled) is caught
    wrong = growth_rate_error(ns[0], D, D_run=2 * D)
    assert abs(wrong) > 100 * abs(err[-1])


# ----------------------------------------------------------------------------- free energy
def test_free_energy_edi_reported_for_usa_and_labelled_a_defect_for_softmax():
    sm = mesh(6)
    rho0 = {"type": "vmf", "means": [[0, 0, 1], [1, 0, 0]], "kappas": [2.0, 3.0]}
    heads = Heads.bilinear(np.eye(3))
    opts = PDEOptions(T=0.5, dt=0.025, order=2, diffusion=0.1, n_saves=3, clusters=False)
    usa = solve_pde(rho0, heads, Attention("usa", 2.0), mesh=sm, options=opts)
    sm_ = solve_pde(rho0, heads, Attention("softmax", 2.0), mesh=sm, options=opts)
    assert usa.status == sm_.status == "success"
    # the EDI of E alone is not the noisy model's identity: absent, as is a defect for USA
    assert "edi" not in usa.balance and "free_edi_defect" not in usa.balance
    assert "free_edi" not in sm_.balance and "edi" not in sm_.balance
    b, d = usa.balance, sm_.balance
    # USA: the free energy decreases and its EDI closes to the scheme's error (< 1 % of ΔF)
    assert b["free_dF"] < 0
    assert abs(b["free_edi"]) < 0.01 * abs(b["free_dF"]), b
    # softmax: the plain Laplacian is not the weighted flow of F_D; the defect is of the
    # size of the dissipation itself (a property of the model, reported, not judged)
    assert abs(d["free_edi_defect"]) > 0.2 * d["free_dissipation_int"], d
    assert "free_energy" in usa.history and "free_dissipation" in usa.steps


def test_free_energy_edi_shrinks_under_refinement():
    """USA value-aligned heads: the free-energy EDI residual falls under refinement."""
    rho0 = {"type": "vmf", "means": [[0, 0, 1], [1, 0, 0]], "kappas": [2.0, 3.0]}
    heads, attn = Heads.bilinear(np.eye(3)), Attention("usa", 2.0)
    res = []
    for n in (6, 12):
        r = solve_pde(rho0, heads, attn, mesh=mesh(n),
                      options=PDEOptions(T=0.5, dt=0.0375 / n, order=2, diffusion=0.1,
                                         n_saves=2, clusters=False))
        res.append(r.balance["free_edi"])
    print(f"free-energy EDI residuals {res}")
    assert abs(res[1]) < 0.5 * abs(res[0]), res
