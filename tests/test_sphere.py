"""Geometry of the sphere: tangent projection, exponential map, distances, validation, samplers."""

from __future__ import annotations

import numpy as np
import pytest

from wflow.geometry.sphere import (
    check_on_sphere,
    equiangular_tokens,
    exp_map,
    geodesic_distance,
    normalize,
    orthonormal_tokens,
    pairwise_geodesic,
    polytope_vertices,
    project_tangent,
    sample_cells,
    sample_uniform,
    sample_vmf,
)

from .conftest import EPS


@pytest.mark.parametrize("d", [2, 3, 5])
def test_tangent_projection_is_an_orthogonal_projector(rng, d):
    x = sample_uniform(50, d, rng)
    v = rng.standard_normal((50, d))
    p = project_tangent(x, v)
    # P_x v ⟂ x, P_x² = P_x, and v − P_x v ∥ x: identities up to a few ulps of |v| ≈ √d
    np.testing.assert_allclose(np.sum(p * x, axis=1), 0.0, atol=20 * EPS * np.sqrt(d))
    np.testing.assert_allclose(project_tangent(x, p), p, atol=20 * EPS * np.sqrt(d))
    resid = v - p
    np.testing.assert_allclose(resid - np.sum(resid * x, axis=1, keepdims=True) * x, 0.0,
                               atol=20 * EPS * np.sqrt(d))


@pytest.mark.parametrize("d", [2, 3, 6])
def test_exp_map_is_the_unit_speed_geodesic(rng, d):
    """``exp_x(v)`` lies on the sphere at geodesic distance ``|v|`` (for ``|v| < π``) and
    its derivative at ``s = 0`` is ``v`` (central difference, error ``O(s²)``)."""
    x = sample_uniform(40, d, rng)
    v = project_tangent(x, rng.standard_normal((40, d)))
    v *= (rng.uniform(0.05, 3.0, 40) / np.linalg.norm(v, axis=1))[:, None]
    y = exp_map(x, v)
    np.testing.assert_allclose(np.linalg.norm(y, axis=1), 1.0, atol=4 * EPS)
    # |v| < π: the geodesic is minimising; atan2-based distance is accurate to ~1e-15 rad
    np.testing.assert_allclose(geodesic_distance(x, y), np.linalg.norm(v, axis=1), atol=1e-13)
    s = 1e-5
    deriv = (exp_map(x, s * v) - exp_map(x, -s * v)) / (2 * s)
    np.testing.assert_allclose(deriv, v, atol=1e-9)  # O(s² |v|³) + round-off O(EPS/s)


def test_exp_map_of_zero_is_the_identity(rng):
    x = sample_uniform(10, 3, rng)
    # exp_x(0) = x, up to the renormalisation's rounding (an ulp per coordinate)
    np.testing.assert_allclose(exp_map(x, np.zeros_like(x)), x, rtol=0, atol=2 * EPS)


def test_geodesic_distance_is_accurate_near_and_antipodal(rng):
    x = sample_uniform(20, 3, rng)
    tiny = 1e-9
    t = project_tangent(x, rng.standard_normal((20, 3)))
    t /= np.linalg.norm(t, axis=1, keepdims=True)
    y = exp_map(x, tiny * t)
    # arccos would lose half the digits here (relative error ~1e-8 at 1e-9 rad)
    np.testing.assert_allclose(geodesic_distance(x, y), tiny, rtol=1e-6)
    np.testing.assert_allclose(geodesic_distance(x, -x), np.pi, atol=4 * EPS)
    np.testing.assert_allclose(pairwise_geodesic(x, x[:5]),
                               geodesic_distance(x[:, None, :], x[None, :5, :]), atol=1e-7)


def test_check_on_sphere_names_the_problem():
    good = np.array([[1.0, 0.0, 0.0], [0.0, 1.0, 0.0]])
    assert check_on_sphere(good).dtype == np.float64
    with pytest.raises(ValueError, match="tokens: row 1 is not on the unit sphere"):
        check_on_sphere(np.array([[1.0, 0.0], [2.0, 0.0]]), name="tokens")
    with pytest.raises(ValueError, match="NaN or Inf"):
        check_on_sphere(np.array([[np.nan, 1.0]]))
    with pytest.raises(ValueError, match="expected an array of shape"):
        check_on_sphere(np.ones(3))
    with pytest.raises(ValueError, match="zero vector"):
        normalize(np.zeros((1, 3)))


def test_vmf_mean_resultant_length(rng):
    """``E<μ, x> = coth κ − 1/κ`` for the von Mises–Fisher law on S² (Monte-Carlo, 5 s.e.)."""
    kappa, n = 4.0, 20000
    mu = np.array([0.0, 0.0, 1.0])
    c = sample_vmf(n, mu, kappa, rng) @ mu
    expected = 1 / np.tanh(kappa) - 1 / kappa
    assert abs(c.mean() - expected) < 5 * c.std() / np.sqrt(n)
    # negative control: another κ is rejected by the same criterion
    other = 1 / np.tanh(1.1 * kappa) - 1 / (1.1 * kappa)
    assert abs(c.mean() - other) > 5 * c.std() / np.sqrt(n)


def test_token_layouts(rng):
    x = equiangular_tokens(6, 0.3, d=8, rng=rng)
    G = x @ x.T
    np.testing.assert_allclose(G[~np.eye(6, dtype=bool)], 0.3, atol=1e-14)
    q = orthonormal_tokens(4, 5, rng)
    np.testing.assert_allclose(q @ q.T, np.eye(4), atol=1e-14)
    v = polytope_vertices("octahedron")
    np.testing.assert_allclose(np.linalg.norm(v, axis=1), 1.0)
    with pytest.raises(ValueError):
        equiangular_tokens(4, 1.0)


def test_sample_cells_follows_the_masses(rng):
    """Cell frequencies match the masses (χ² at 5 s.e. per cell); a zero-mass cell is never hit."""
    verts = np.array([[[1, 0, 0], [0, 1, 0], [0, 0, 1]],
                      [[-1, 0, 0], [0, -1, 0], [0, 0, 1]]], dtype=float)
    m = np.array([3.0, 1.0])
    x = sample_cells(verts, m, 8000, rng)
    first = np.all(x >= 0, axis=1)
    p = first.mean()
    assert abs(p - 0.75) < 5 * np.sqrt(0.75 * 0.25 / 8000)
    only = sample_cells(verts, np.array([0.0, 1.0]), 100, rng)
    assert not np.any(np.all(only > 0, axis=1))
    with pytest.raises(ValueError, match="one non-negative mass per cell"):
        sample_cells(verts, np.array([-1.0, 1.0]), 5, rng)
