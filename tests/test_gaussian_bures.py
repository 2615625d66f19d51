"""Bures–Wasserstein distance without cancellation; reach's input checks and miss messages."""

from __future__ import annotations

import logging
import math
import warnings

import numpy as np
import pytest

from wflow.gaussian import bures_wasserstein_distance, reach
from wflow.gaussian.bures import bures_distance

from .conftest import EPS


def _trace_formula_w2(m0, S0, m1, S1):
    """The textbook formula |Δm|² + tr Σ₀ + tr Σ₁ − 2 tr(Σ₀^{1/2}Σ₁Σ₀^{1/2})^{1/2} (cancels)."""
    lam, U = np.linalg.eigh(S0)
    R0 = (U * np.sqrt(np.clip(lam, 0, None))) @ U.T
    cross = np.linalg.eigvalsh(R0 @ S1 @ R0)
    b2 = np.trace(S0) + np.trace(S1) - 2 * np.sum(np.sqrt(np.clip(cross, 0, None)))
    return math.sqrt(max(float(np.sum((m0 - m1) ** 2)) + b2, 0.0))


def test_w2_resolves_a_tiny_mean_shift():
    S = np.array([[1.0, 0.5], [0.5, 1.0]])
    m0, m1 = np.zeros(2), np.array([1e-10, 0.0])  # |Δm| = 1e-10 exactly
    w2 = bures_wasserstein_distance(m0, S, m1, S)
    # the Bures term is ~ a few ε‖Σ^{1/2}‖ ≈ 1e-15 and enters W2 = hypot(|Δm|, b)
    # quadratically: relative effect (1e-15/1e-10)² ≈ 1e-10
    np.testing.assert_allclose(w2, 1e-10, rtol=1e-9)
    # negative control: the trace formula loses |Δm| in the round-off of tr Σ (~ε)
    old = _trace_formula_w2(m0, S, m1, S)
    assert abs(old - 1e-10) > 0.1e-10, old


def test_bures_term_of_nearby_commuting_covariances():
    """Diagonal Σ₀, Σ₁: b = ‖Σ₀^{1/2} − Σ₁^{1/2}‖_F, here (√a − √(a+δ)) computed stably."""
    a, delta = 2.0, 1e-12
    S0, S1 = np.diag([1.0, a]), np.diag([1.0, a + delta])
    exact = delta / (math.sqrt(a) + math.sqrt(a + delta))
    b = bures_distance(S0, S1)
    # absolute accuracy ~ ε‖Σ^{1/2}‖ (square roots by eigh), far below √ε
    assert abs(b - exact) <= 10 * EPS * math.sqrt(a), (b, exact)
    assert abs(_trace_formula_w2(np.zeros(2), S0, np.zeros(2), S1) - exact) > 0.1 * exact


def test_bures_distance_rank_deficient_and_symmetric():
    u = np.array([[1.0], [2.0]])
    S0, S1 = u @ u.T, 4 * u @ u.T
    assert bures_distance(S0, S1) == pytest.approx(math.sqrt(5.0), rel=1e-14)
    rng = np.random.default_rng(0)
    X, Y = rng.standard_normal((3, 3)), rng.standard_normal((3, 3))
    P, Q = X @ X.T, Y @ Y.T
    assert bures_distance(P, Q) == pytest.approx(bures_distance(Q, P), rel=1e-12)
    assert bures_distance(P, P) <= 10 * EPS * math.sqrt(np.linalg.norm(P, 2))


def test_reach_refuses_non_symmetric_target_in_python():
    bad = np.array([[1.0, 0.3], [0.2, 1.0]])
    with pytest.raises(ValueError, match=r"Sigma1 \(target covariance\): not symmetric"):
        reach(np.zeros(2), np.eye(2), np.ones(2), bad, 1.0)
    with pytest.raises(ValueError, match="Sigma0: not symmetric"):
        reach(np.zeros(2), bad, np.ones(2), np.eye(2), 1.0)
    # round-off asymmetry (ε relative) is accepted
    ok = np.array([[1.0, 0.3], [0.3 * (1 + 4 * EPS), 1.0]])
    assert reach(np.zeros(2), np.eye(2), np.ones(2), ok, 1.0).status == "reached"


def test_reach_w2_is_consistent_with_the_mean_error():
    res = reach(np.zeros(2), np.eye(2), np.array([1.0, -1.0]),
                np.array([[1.0, -0.4], [-0.4, 0.5]]), 1.0, V=0.5, B=0.3)
    assert res.status == "reached" and res.message == ""
    # W2 ≥ |Δm| always; the trace formula could return 0 here (its round-off ~1e-8)
    assert res.w2_error >= res.m_error > 0


def test_reach_miss_is_a_message_not_a_warning(caplog):
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        with caplog.at_level(logging.WARNING, logger="wflow.gaussian.reach"):
            res = reach(np.zeros(2), np.eye(2), np.ones(2), 2 * np.eye(2), 1.0, tol=1e-300)
    assert res.status == "missed" and "target missed" in res.message
    assert any("target missed" in r.getMessage() for r in caplog.records)
