"""The fast summation's set-up cache (wflow.kernels._fastsum.PLAN_CACHE).

The recurrence tables depend on the degree only and each head's plan (centre, β R',
degree) on its points; the cache must return exactly what the computation returns (bit
for bit) and rebuild whenever anything the result depends on changes.
"""

from __future__ import annotations

import numpy as np
import pytest

from wflow.kernels import _fastsum as fs
from wflow.kernels import kernel_sums
from wflow.kernels._plan_cache import PlanCache


def _tokens(n, seed=1):
    rng = np.random.default_rng(seed)
    x = rng.standard_normal((n, 3))
    return x / np.linalg.norm(x, axis=1, keepdims=True)


@pytest.fixture
def cache():
    fs.PLAN_CACHE.clear()
    yield fs.PLAN_CACHE
    fs.PLAN_CACHE.enabled = True
    fs.PLAN_CACHE.clear()


def _sums(x):
    n = x.shape[0]
    return kernel_sums(x, x, np.full(n, 1.0 / n), np.eye(3)[None], np.eye(3)[None], beta=2.0,
                       kind="usa", backend="fastsum", scores=True)


def test_cached_sums_equal_uncached_bit_for_bit(cache):
    x = _tokens(3000)
    cache.enabled = False
    ref = _sums(x)
    assert cache.misses == cache.hits == cache.builds == 0  # off: nothing kept
    cache.enabled = True
    first = _sums(x)   # plan_kernel builds the plan, harmonic_sums reuses it
    again = _sums(x)   # every plan and table from the cache
    assert first.info.backend == "fastsum"
    assert cache.misses == 1 and cache.hits == 3 and cache.builds == 1
    for r in (first, again):
        for a, b in ((ref.Z, r.Z), (ref.Y, r.Y), (ref.S, r.S)):
            assert a.tobytes() == b.tobytes()


def test_split_sums_on_one_rank_equal_uncached(cache):
    from mpi4py import MPI

    from wflow.kernels.split import split_sums

    x = _tokens(2000, seed=4)
    m = np.full(2000, 1.0 / 2000)
    args = (x, m, np.eye(3)[None], np.eye(3)[None])
    kw = {"comm": MPI.COMM_SELF, "beta": 2.0, "kind": "usa", "backend": "fastsum"}
    cache.enabled = False
    ref = split_sums(*args, **kw)
    cache.enabled = True
    got = [split_sums(*args, **kw) for _ in range(2)]
    assert cache.builds == 1
    for r in got:
        assert ref.Z.tobytes() == r.Z.tobytes() and ref.Y.tobytes() == r.Y.tobytes()


def test_a_change_of_the_key_rebuilds_the_plan(cache):
    u = _tokens(500, seed=2)
    c0, z0, L0 = fs.plan_head(u, 2.0, 1e-10)
    assert (cache.misses, cache.hits) == (1, 0)
    c1, z1, L1 = fs.plan_head(u.copy(), 2.0, 1e-10)  # equal points, another array: a hit
    assert (cache.misses, cache.hits) == (1, 1)
    assert c1.tobytes() == c0.tobytes() and (z1, L1) == (z0, L0)
    v = u.copy()
    v[123, 0] = np.nextafter(v[123, 0], 2.0)  # one point moved by one ulp
    fs.plan_head(v, 2.0, 1e-10)
    fs.plan_head(u, 3.0, 1e-10)
    fs.plan_head(u, 2.0, 1e-8)
    fs.plan_head(u, 2.0, 1e-10, max_degree=10)
    fs.plan_head(u[:-1], 2.0, 1e-10)
    assert (cache.misses, cache.hits) == (6, 1)
    # each rebuilt plan is the computation's own
    cache.enabled = False
    for args, kw in (((u, 3.0, 1e-10), {}), ((u, 2.0, 1e-10), {"max_degree": 10})):
        want = fs.plan_head(*args, **kw)
        cache.enabled = True
        got = fs.plan_head(*args, **kw)
        cache.enabled = False
        assert got[0].tobytes() == want[0].tobytes() and got[1:] == want[1:]
    # tables: one build per degree, read-only
    cache.enabled = True
    t5, t6 = fs._tables(5), fs._tables(6)
    assert fs._tables(5) is t5 and cache.builds == 2 and t6[0].size == 8
    with pytest.raises(ValueError, match="read-only"):
        t5[1][0] = 1.0


def test_points_changed_in_place_are_not_taken_for_the_cached_ones(cache):
    # negative control: a cache keyed by the array object would return the old plan for
    # tokens moved in place between two stages; this one compares the points
    u = _tokens(400, seed=3)
    c0, z0, _ = fs.plan_head(u, 2.0, 1e-10)
    u *= 0.5  # the same array, every point moved
    c1, z1, _ = fs.plan_head(u, 2.0, 1e-10)
    assert (cache.misses, cache.hits) == (2, 0)
    assert z1 == pytest.approx(0.5 * z0, rel=1e-12)  # the radius of the moved cloud


def test_the_cache_keeps_at_most_its_bytes_and_heads():
    calls = []

    def plan(u, beta, tol, max_degree):
        calls.append(beta)
        return np.zeros(3), float(beta), 1

    pc = PlanCache(lambda L: (np.zeros(L + 2),), plan)
    pc.MAX_BYTES = 3 * 8 * 10  # ten points
    small, big = np.ones((10, 3)), np.ones((11, 3))
    pc.plan_head(big, 1.0, 1e-10, 5)
    pc.plan_head(big, 1.0, 1e-10, 5)  # too big to keep: built twice
    pc.plan_head(small, 1.0, 1e-10, 5)
    pc.plan_head(small, 1.0, 1e-10, 5)
    assert len(calls) == 3 and pc.hits == 1
    pc.MAX_BYTES = 1 << 20
    pc.MAX_HEADS = 2
    for b in (2.0, 3.0, 4.0):
        pc.plan_head(small, b, 1e-10, 5)
    pc.plan_head(small, 1.0, 1e-10, 5)  # pushed out by the two later heads: rebuilt
    assert len(calls) == 7
