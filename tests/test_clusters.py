"""The cluster count at the solver's scale: ``O(n)`` memory, the former pair-list count exactly."""

from __future__ import annotations

import numpy as np
import pytest
from scipy.sparse import coo_matrix
from scipy.sparse.csgraph import connected_components
from scipy.spatial import cKDTree

from wflow.diagnostics import _sqdist, count_clusters


def pair_list_count(x: np.ndarray, c: float) -> int:
    """The former count: every pair within the chordal radius listed (``O(pairs)``)."""
    n = x.shape[0]
    r = np.sqrt(max(0.0, 2.0 - 2.0 * c))
    pairs = cKDTree(x).query_pairs(r, output_type="ndarray")
    if pairs.size == 0:
        return n
    g = coo_matrix((np.ones(len(pairs)), (pairs[:, 0], pairs[:, 1])), shape=(n, n))
    return int(connected_components(g, directed=False)[0])


def dense_count(x: np.ndarray, c: float) -> int:
    """The graph definition, every pair tested with the count's own link test."""
    n = x.shape[0]
    r = np.sqrt(max(0.0, 2.0 - 2.0 * c))
    i, j = np.triu_indices(n, 1)
    link = _sqdist(x[i], x[j]) <= r * r
    g = coo_matrix((np.ones(int(link.sum())), (i[link], j[link])), shape=(n, n))
    return int(connected_components(g, directed=False)[0])


def _unit(v: np.ndarray) -> np.ndarray:
    return v / np.linalg.norm(v, axis=-1, keepdims=True)


@pytest.mark.parametrize("d", [2, 3, 4, 7, 64])
def test_equals_pair_list_count_on_random_clusters(d):
    rng = np.random.default_rng(d)
    for _ in range(40):
        n = int(rng.integers(1, 300))
        k = int(rng.integers(1, 10))
        cent = _unit(rng.normal(size=(k, d)))
        spread = 10 ** rng.uniform(-3, -0.5)
        x = _unit(cent[rng.integers(0, k, n)] + spread * rng.normal(size=(n, d)))
        c = float(rng.choice([0.5, 0.9, 0.99, 0.999]))
        assert count_clusters(x, cos_threshold=c) == pair_list_count(x, c) == dense_count(x, c)


def test_near_threshold_chains_and_group_radius():
    """Adversarial: links exactly at the radius, tokens at the leader's group radius."""
    c = 0.99
    r = np.sqrt(2.0 - 2.0 * c)
    theta = 2.0 * np.arcsin(r / 2.0)  # geodesic angle of chordal distance r
    rng = np.random.default_rng(0)
    for scale in (1.0 - 1e-15, 1.0, 1.0 + 1e-15, 1.0 - 4e-16, 1.0 + 4e-16, 0.5, 0.5 + 1e-12,
                  0.25, 1.0 - 1e-9):
        t = np.arange(40) * theta * scale  # a chain whose steps sit at the threshold
        x = np.stack([np.cos(t), np.sin(t), np.zeros_like(t)], axis=1)
        x = x @ np.linalg.qr(rng.normal(size=(3, 3)))[0]
        assert count_clusters(x, cos_threshold=c) == dense_count(x, c), scale
    # tokens on the rim of the first leader's group, antipodal on it: 2ρ apart ≈ r
    for eps in (-1e-12, 0.0, 1e-12, 1e-9):
        a = theta / 2 * (1 + eps)
        ring = np.array([[np.cos(a), np.sin(a) * np.cos(p), np.sin(a) * np.sin(p)]
                         for p in np.linspace(0, 2 * np.pi, 9)[:-1]])
        x = np.vstack([[1.0, 0.0, 0.0], ring, _unit(np.array([[np.cos(3 * a), np.sin(3 * a),
                                                                 0.0]]))])
        assert count_clusters(x, cos_threshold=c) == dense_count(x, c), eps


def test_bridge_between_dense_clusters_and_its_removal():
    """Two dense clusters joined by one pair at the threshold; moving it apart splits them.

    The negative control: a change of the graph by one link changes the count.
    """
    rng = np.random.default_rng(3)
    c = 0.99
    r = np.sqrt(2.0 - 2.0 * c)
    theta = 2.0 * np.arcsin(r / 2.0)
    a = _unit(np.array([1.0, 0, 0]) + 1e-4 * rng.normal(size=(3000, 3)))
    a[0] = [1.0, 0.0, 0.0]
    far = 0.2 + 3 * theta
    b = _unit(np.array([np.cos(far), np.sin(far), 0]) + 1e-4 * rng.normal(size=(3000, 3)))
    b[0] = [np.cos(far), np.sin(far), 0.0]
    steps = np.arange(1, int(far / (0.9 * theta)) + 1) * (far / (int(far / (0.9 * theta)) + 1))
    chain = np.stack([np.cos(steps), np.sin(steps), np.zeros_like(steps)], axis=1)
    x = np.vstack([a, chain, b])
    assert count_clusters(x, cos_threshold=c) == pair_list_count(x, c) == 1
    broken = np.vstack([a, chain[:-1], b])
    gap = count_clusters(broken, cos_threshold=c)
    assert gap == pair_list_count(broken, c) == 2


def test_collapsed_tokens_need_no_pair_list():
    """10⁵ coincident tokens: 5·10⁹ pairs for a pair list, one group here."""
    x = np.tile(np.array([[0.0, 0.6, 0.8]]), (100_000, 1))
    assert count_clusters(x, cos_threshold=0.99) == 1
    y = np.vstack([x, -x[:10]])
    assert count_clusters(y, cos_threshold=0.99) == 2


def test_empty_and_single():
    assert count_clusters(np.zeros((0, 3))) == 0
    assert count_clusters(np.array([[1.0, 0.0, 0.0]])) == 1


@pytest.mark.parametrize("small,pairs", [(0, 1 << 20), (64, 1 << 20), (10**9, 1 << 20),
                                         (64, 7), (10**9, 1)])
def test_small_groups_at_once_and_by_trees_agree(monkeypatch, small, pairs):
    """Pairs of small groups are tested at once (every member pair, in chunks), larger
    ones by trees: with every pair by trees (``SMALL = 0``), the default, every pair at
    once, and tiny chunks (one pair of groups per chunk), the count is the graph's, on
    spread and clustered tokens (both paths exercised)."""
    from wflow import diagnostics

    monkeypatch.setattr(diagnostics._Cover, "SMALL", small)
    monkeypatch.setattr(diagnostics._Cover, "PAIRS", pairs)
    rng = np.random.default_rng(11)
    for _ in range(30):
        d = int(rng.choice([2, 3, 5]))
        n = int(rng.integers(2, 400))
        k = int(rng.integers(1, 12))
        cent = _unit(rng.normal(size=(k, d)))
        spread = 10 ** rng.uniform(-3, 0.5)
        x = _unit(cent[rng.integers(0, k, n)] + spread * rng.normal(size=(n, d)))
        c = float(rng.choice([0.9, 0.99, 0.999]))
        assert count_clusters(x, cos_threshold=c) == dense_count(x, c)
