"""Certified sparse exact W₂ on the sphere (wflow.geometry.transport.w2_sphere_sparse)
against the dense POT referee ``w2_sphere``; negative controls of the certificate."""

from __future__ import annotations

from functools import cache
from pathlib import Path

import numpy as np
import pytest

from wflow.geometry.density import vmf_density
from wflow.geometry.mesh import load_mesh
from wflow.geometry.transport import (
    W2Result,
    _clusters,
    _dual_check,
    _geodesic_sq_pairs,
    w2_sphere,
    w2_sphere_sparse,
)

EPS = float(np.finfo(np.float64).eps)
MESHES = Path(__file__).resolve().parents[1] / "meshes"
MU = np.array([[0.3, 0.1, 1.0]])


@cache
def _cells(ncell: int) -> tuple[np.ndarray, np.ndarray]:
    m = load_mesh(MESHES / f"sphere_{ncell}.msh")
    c = m.centroids / np.linalg.norm(m.centroids, axis=1, keepdims=True)
    return c, np.asarray(m.areas)


def _rot(theta: float) -> np.ndarray:
    return np.array([[np.cos(theta), 0.0, np.sin(theta)], [0.0, 1.0, 0.0],
                     [-np.sin(theta), 0.0, np.cos(theta)]])


def _vmf_masses(c: np.ndarray, areas: np.ndarray, theta: float, kappa: float = 4.0) -> np.ndarray:
    """Cell masses of a vMF density whose mean is rotated by ``theta`` (rad) about e_y."""
    return vmf_density(c, MU @ _rot(theta).T, np.array([kappa]), np.array([1.0])) * areas


def _rtol(n: int, m: int) -> float:
    # Both solvers return an optimal cost Σ π_ij c_ij with at most n + m − 1 non-zero terms;
    # two summation orders of the same optimum differ by <= (n + m) ε relative in W₂², and
    # W₂ = sqrt(W₂²) halves a relative error: (n + m) ε covers W₂ with margin.
    return (n + m) * EPS


def _check(res: W2Result, dense: float, n: int, m: int) -> None:
    assert res.certified
    assert res.max_violation <= res.tol
    np.testing.assert_allclose(res.value, dense, rtol=_rtol(n, m), atol=0.0)
    # the certified bound holds against the referee: 0 <= W2sq − W₂² <= bound (+ round-off)
    assert res.W2sq - dense**2 <= res.bound + _rtol(n, m) * dense**2
    # and it is tight: the duals recomputed on the support tree are of the size of the costs
    # (<= π²) with reduced costs exact to a few roundings, so gap + their largest violation
    # stays at round-off of π² (64 ε π² ≈ 1.4e-13 rad²)
    assert res.bound <= 64 * EPS * np.pi**2


def test_cells_small_displacement_equals_dense():
    """JKO-vs-PDE-like pair: same support (2 420 cells), a vMF and a slightly rotated one."""
    c, A = _cells(2420)
    a, b = _vmf_masses(c, A, 0.0), _vmf_masses(c, A, 0.03)
    dense = w2_sphere(c, c, a, b)
    res = w2_sphere_sparse(c, c, a, b)
    _check(res, dense, len(c), len(c))
    assert res.pairs < 0.05 * len(c) ** 2  # sparse indeed
    # the public switch gives the same number
    np.testing.assert_allclose(w2_sphere(c, c, a, b, method="sparse"), dense,
                               rtol=_rtol(len(c), len(c)))


def test_particles_vs_cells_equals_dense():
    c, A = _cells(720)
    rng = np.random.default_rng(3)
    p = rng.normal(size=(500, 3)) + 1.5 * MU / np.linalg.norm(MU)
    p /= np.linalg.norm(p, axis=1, keepdims=True)
    b = _vmf_masses(c, A, 0.0)
    dense = w2_sphere(p, c, None, b)
    res = w2_sphere_sparse(p, c, None, b)
    _check(res, dense, len(p), len(c))


def test_zero_mass_points_equals_dense():
    c, A = _cells(720)
    a, b = _vmf_masses(c, A, 0.0), _vmf_masses(c, A, 0.05)
    a[c[:, 0] > 0.6] = 0.0   # a cap with no mass on one side, a band on the other
    b[np.abs(c[:, 2]) < 0.1] = 0.0
    dense = w2_sphere(c, c, a, b)
    res = w2_sphere_sparse(c, c, a, b)
    _check(res, dense, int((a > 0).sum()), int((b > 0).sum()))


@pytest.mark.parametrize(("theta", "kappa", "k"), [(0.05, 4.0, 4), (0.8, 8.0, 2)])
def test_certificate_adds_pairs_when_knn_graph_is_not_optimal(theta, kappa, k):
    """A small k: the first graph's plan is not optimal ((0.05, 4, 4): feasible, 6e-4 too
    costly) or infeasible (far displacement, k = 2); the certificate must add pairs over
    several rounds and end at the dense value."""
    from wflow.geometry.transport import _knn_pairs

    c, A = _cells(720)
    a, b = _vmf_masses(c, A, 0.0, kappa=kappa), _vmf_masses(c, A, theta, kappa=kappa)
    dense = w2_sphere(c, c, a, b)
    res = w2_sphere_sparse(c, c, a, b, neighbours=k)
    assert res.rounds > 1
    assert res.pairs > _knn_pairs(c, c, k).size
    _check(res, dense, len(c), len(c))


def test_negative_control_uncertified_is_reported_or_raised():
    """A too small graph with a single round: the check must see the sub-optimal plan."""
    c, A = _cells(720)
    a, b = _vmf_masses(c, A, 0.0), _vmf_masses(c, A, 0.05)
    dense = w2_sphere(c, c, a, b)
    res = w2_sphere_sparse(c, c, a, b, neighbours=4, max_rounds=1, raise_uncertified=False)
    assert not res.certified and res.bound == np.inf
    assert res.max_violation > 1e6 * res.tol
    assert res.W2sq > dense**2 * (1 + 1e-6)  # the uncertified plan is indeed sub-optimal
    with pytest.raises(RuntimeError, match="not certified"):
        w2_sphere_sparse(c, c, a, b, neighbours=4, max_rounds=1)


def test_dual_check_pruning_never_misses_a_violation():
    """The cluster/ball pruning against the brute-force dense check, with duals perturbed so
    that violations exist (negative control of the check itself)."""
    c, A = _cells(720)
    rng = np.random.default_rng(0)
    p = rng.normal(size=(300, 3))
    p /= np.linalg.norm(p, axis=1, keepdims=True)
    u = rng.uniform(-0.05, 0.05, size=len(p))
    v = -u[rng.integers(0, len(p), size=len(c))] + rng.uniform(-0.02, 0.05, size=len(c))
    tol = 16 * EPS
    ii, jj = np.meshgrid(np.arange(len(p)), np.arange(len(c)), indexing="ij")
    C = _geodesic_sq_pairs(p, c, ii.ravel(), jj.ravel()).reshape(len(p), len(c))
    viol = u[:, None] + v[None, :] - C
    expected = np.flatnonzero(viol.ravel() > tol)
    assert expected.size > 100
    for size in (4, 16, 64):
        keys, worst, examined = _dual_check(p, c, u, v, tol, _clusters(c, size), max_new=10**7)
        np.testing.assert_array_equal(keys, expected)
        assert worst == pytest.approx(viol.max(), abs=tol)
        assert examined < len(p) * len(c)


def test_method_switch_and_validation():
    c, A = _cells(720)
    a, b = _vmf_masses(c, A, 0.0), _vmf_masses(c, A, 0.05)
    dense = w2_sphere(c, c, a, b)
    assert w2_sphere(c, c, a, b, method="auto") == dense  # n <= max_points: the dense path
    np.testing.assert_allclose(w2_sphere(c, c, a, b, method="auto", max_points=100), dense,
                               rtol=_rtol(len(c), len(c)))
    with pytest.raises(ValueError, match="max_points"):
        w2_sphere(c, c, a, b, max_points=100)
    with pytest.raises(ValueError, match="method"):
        w2_sphere(c, c, a, b, method="lazy")
    bad = a.copy()
    bad[3] = -1e-3
    for meth in ("dense", "sparse"):
        with pytest.raises(ValueError, match="non-negative"):
            w2_sphere(c, c, bad, b, method=meth)
    bad[3] = np.nan
    with pytest.raises(ValueError, match="NaN"):
        w2_sphere_sparse(c, c, bad, b)
    with pytest.raises(ValueError, match="shape"):
        w2_sphere_sparse(c, c, a[:-1], b)
    with pytest.raises(ValueError):
        w2_sphere_sparse(c * 1.01, c, a, b)  # off the sphere
    # unequal totals are normalised, as in the dense path
    np.testing.assert_allclose(w2_sphere_sparse(c, c, 3 * a, b).value, dense,
                               rtol=_rtol(len(c), len(c)))


@pytest.mark.slow
def test_40500_cells_certified():
    """sphere_40500.msh vs a rotated copy: certified, and W₂ within the rotation angle."""
    c, A = _cells(40500)
    theta = 0.01
    a, b = _vmf_masses(c, A, 0.0), _vmf_masses(c, A, theta)
    res = w2_sphere_sparse(c, c, a, b)
    assert res.certified and res.bound < 1e-9 * res.W2sq + 1e-12
    # W₂ <= transport by the rotation itself (cell masses at centroids: + O(h) mismatch)
    h = np.sqrt(4 * np.pi / len(c))
    assert 0.5 * theta < res.value <= theta + h


def test_identical_measures_are_certified_at_zero():
    """Degenerate problem (zero-cost plan, duals with a large null space): the simplex
    solves it to ~1e-12 on its graph, and the certificate accepts that level (the bound
    stays rigorous: W₂² ∈ [cost − bound, cost])."""
    from wflow.geometry.mesh import load_mesh
    from wflow.geometry.transport import w2_sphere_sparse

    mesh = load_mesh("sphere_2420.msh")
    x = mesh.gather_owned(mesh.centroids)
    x = x / np.linalg.norm(x, axis=1, keepdims=True)
    w = np.random.default_rng(3).uniform(0.5, 1.5, x.shape[0])
    r = w2_sphere_sparse(x, x, w, w)
    assert r.certified
    assert r.W2sq <= r.bound <= 1e-9, (r.W2sq, r.bound)


def test_weighted_cost_equals_the_dense_weighted_problem_and_checks_its_bound():
    """``pair_weight`` (the JKO referee's ``W²_{b̂}``, ``c_ij = d²/b̂_ij``) against POT on
    the dense weighted matrix; a ``weight_min`` that is not a lower bound is refused."""
    import ot

    from wflow.jko.cost import cost_matrix, pair_mobility

    mesh = load_mesh("sphere_2420.msh")
    x = mesh.gather_owned(mesh.centroids)
    x = x / np.linalg.norm(x, axis=1, keepdims=True)
    rng = np.random.default_rng(5)
    b = 0.5 + np.exp(x[:, 2])                    # a smooth mobility field, 0.87 … 3.2
    a1 = rng.uniform(0.5, 1.5, x.shape[0])
    a2 = a1 * (1 + 0.3 * x[:, 0])
    res = w2_sphere_sparse(x, x, a1, a2,
                           pair_weight=lambda i, j: 1.0 / pair_mobility(b[i], b[j]),
                           weight_min=1.0 / b.max())
    C = cost_matrix(x, b)
    dense = ot.emd2(a1 / a1.sum(), a2 / a2.sum(), C, numItermax=10_000_000)
    assert res.certified
    # both solve the same LP to round-off: (n + m) eps relative (sums of n + m terms)
    np.testing.assert_allclose(res.W2sq, dense, rtol=2 * x.shape[0] * np.finfo(float).eps)
    with pytest.raises(ValueError, match="weight_min"):
        w2_sphere_sparse(x, x, a1, a2, pair_weight=lambda i, j: 1.0 / pair_mobility(b[i], b[j]),
                         weight_min=2.0 / b.max())
