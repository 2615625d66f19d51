"""Optimal transport between measures on the sphere (POT), with the geodesic cost.

``W_2(μ, ν)² = min_π Σ_ij π_ij d_S(x_i, y_j)²`` for discrete measures
``μ = Σ a_i δ_{x_i}``, ``ν = Σ b_j δ_{y_j}`` (particles, or cell masses at centroids).

* ``w2_sphere(..., method="dense")`` (default): exact network simplex (``ot.emd2``) on the
  dense ``n × m`` cost; limited to ``max_points`` per side (memory ``8 n m`` bytes).
* ``w2_sphere_sparse`` / ``method="sparse"``: the same exact LP solved by ``ot.emd`` on a
  sparse candidate graph (k nearest neighbours both ways), **certified** optimal for the
  full problem by a dual-feasibility check on all ``n m`` pairs that never forms the dense
  matrix (ball pruning on clusters of the target points). See :func:`w2_sphere_sparse`.
* ``method="auto"``: dense when ``max(n, m) <= max_points``, else sparse.
"""

from __future__ import annotations

import logging
import time
import warnings
from collections.abc import Callable
from dataclasses import dataclass

import numpy as np

from .sphere import SPHERE_TOL, check_masses, check_on_sphere, pairwise_geodesic

__all__ = ["w2_sphere", "w2_sphere_sparse", "W2Result", "uniform_weights"]

logger = logging.getLogger(__name__)

_EPS = float(np.finfo(np.float64).eps)
# Pairs evaluated per vectorised chunk of the certificate (bounds its memory: ~60 B/pair).
_CHUNK_PAIRS = 2_000_000


def uniform_weights(n: int) -> np.ndarray:
    """Weights ``1/n``."""
    return np.full(n, 1.0 / n)


@dataclass(frozen=True)
class W2Result:
    """Result of :func:`w2_sphere_sparse`.

    Attributes
    ----------
    value : float
        ``W_2`` in radians (geodesic cost ``d_S²``, as :func:`w2_sphere`).
    W2sq : float
        ``W_2²`` in rad²: cost ``Σ π_ij d_S(x_i, y_j)²`` of the returned plan.
    rounds : int
        Number of ``ot.emd`` solves (graph enlargements after an infeasible graph included).
    pairs : int
        Edges of the final candidate graph.
    max_violation : float
        ``max_ij (u_i + v_j − c_ij)`` over the pairs the last check examined (every pair that
        can violate dual feasibility; rad²). ``<= tol`` when certified.
    certified : bool
        ``True`` iff the last check found no pair with ``u_i + v_j > c_ij + tol``.
    time_s : float
        Wall time of the call.
    tol : float
        Dual-feasibility level of the certificate (rad²): ``tol`` of the check, or ``η'``
        of the tree duals when they gave the smaller bound.
    bound : float
        Certified bound ``0 <= W2sq − W_2²_exact <= bound`` (rad²) when ``certified``:
        duality gap of the returned primal/dual pair plus ``tol`` (``inf`` if not certified).
    """

    value: float
    W2sq: float
    rounds: int
    pairs: int
    max_violation: float
    certified: bool
    time_s: float
    tol: float = float("nan")
    bound: float = float("inf")


def _weights(w: np.ndarray | None, n: int, name: str) -> np.ndarray:
    if w is None:
        return uniform_weights(n)
    w = check_masses(w, n, name=f"w2_sphere: {name}", what="masses")
    if not w.sum() > 0:
        raise ValueError(f"w2_sphere: {name} has zero total mass")
    return w


def _points(x: np.ndarray, name: str) -> np.ndarray:
    x = np.asarray(x, dtype=np.float64)
    if x.ndim != 2 or x.shape[0] < 1:
        raise ValueError(f"w2_sphere: {name} must have shape (n, d); got {x.shape}")
    if not np.all(np.isfinite(x)):
        raise ValueError(f"w2_sphere: {name} contains NaN or Inf")
    return x


def _geodesic_sq_pairs(x: np.ndarray, y: np.ndarray, i: np.ndarray, j: np.ndarray) -> np.ndarray:
    """``d_S(x_i, y_j)²`` for index arrays ``i, j`` (same formula as ``pairwise_geodesic``)."""
    out = np.empty(i.shape[0])
    step = _CHUNK_PAIRS
    for s in range(0, i.shape[0], step):
        ii, jj = i[s:s + step], j[s:s + step]
        dot = np.einsum("ij,ij->i", x[ii], y[jj])
        th = 2.0 * np.arctan2(np.sqrt(np.maximum(2.0 - 2.0 * dot, 0.0)),
                              np.sqrt(np.maximum(2.0 + 2.0 * dot, 0.0)))
        out[s:s + step] = th * th
    return out


def _knn_pairs(x: np.ndarray, y: np.ndarray, k: int) -> np.ndarray:
    """Keys ``i m + j`` of the k-nearest-neighbour graph both ways (chords in R^d), sorted."""
    from scipy.spatial import cKDTree

    n, m = x.shape[0], y.shape[0]
    ky, kx = min(k, m), min(k, n)
    _, jy = cKDTree(y).query(x, k=ky)
    _, ix = cKDTree(x).query(y, k=kx)
    jy, ix = jy.reshape(n, ky), ix.reshape(m, kx)
    k1 = np.repeat(np.arange(n, dtype=np.int64), ky) * m + jy.ravel()
    k2 = ix.ravel().astype(np.int64) * m + np.repeat(np.arange(m, dtype=np.int64), kx)
    return np.unique(np.concatenate([k1, k2]))


def _solve_sparse(a: np.ndarray, b: np.ndarray, i: np.ndarray, j: np.ndarray, c: np.ndarray,
                  num_itermax: int, init: tuple[np.ndarray, np.ndarray] | None
                  ) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray, np.ndarray, int]:
    """One sparse network-simplex solve: ``(fi, fj, flow, u, v, result_code)``.

    Uses POT's sparse kernel directly when it takes warm-start potentials (POT >= 0.9.7
    ships them in ``emd_c_sparse`` but ``ot.emd`` does not forward them for sparse costs);
    otherwise the public ``ot.emd`` with a ``scipy.sparse.coo_array`` cost.
    """
    if init is not None:
        try:
            from ot.lp.emd_wrap import emd_c_sparse

            fi, fj, fv, _, u, v, code = emd_c_sparse(
                a, b, i.astype(np.uint64), j.astype(np.uint64), c, num_itermax,
                alpha_init=np.ascontiguousarray(init[0]), beta_init=np.ascontiguousarray(init[1]))
            return (fi.astype(np.int64), fj.astype(np.int64), np.asarray(fv), np.asarray(u),
                    np.asarray(v), int(code))
        except (ImportError, TypeError):  # pragma: no cover - other POT versions
            pass
    import ot
    import scipy.sparse as sp

    M = sp.coo_array((c, (i, j)), shape=(a.shape[0], b.shape[0]))
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", UserWarning)  # result_code is checked by the caller
        G, log = ot.emd(a, b, M, numItermax=num_itermax, log=True, center_dual=False)
    G = sp.coo_array(G)
    return (G.row.astype(np.int64), G.col.astype(np.int64), np.asarray(G.data),
            np.asarray(log["u"]), np.asarray(log["v"]), int(log["result_code"]))


def _tree_duals(n: int, m: int, fi: np.ndarray, fj: np.ndarray, cf: np.ndarray
                ) -> tuple[np.ndarray, np.ndarray] | None:
    """Duals recomputed from the plan's support when it is a spanning tree, else ``None``.

    The support of a non-degenerate basic plan is a spanning tree of the ``n + m`` nodes;
    ``u_i + v_j = c_ij`` on its arcs fixes the duals up to one constant (``u = 0`` at the
    root). Walking the tree from the root gives duals consistent with every arc to one
    rounding and of the size of the costs, free of the simplex's drift and of its large
    internal offsets (``ART_COST``).
    """
    import scipy.sparse as sp
    from scipy.sparse.csgraph import breadth_first_order

    nn = n + m
    if fi.size != nn - 1:
        return None
    g = sp.coo_array((np.ones(fi.size), (fi, fj + n)), shape=(nn, nn)).tocsr()
    g = (g + g.T).tocsr()
    order, pred = breadth_first_order(g, 0, directed=False, return_predecessors=True)
    if order.size != nn:
        return None  # a forest: the gauge between components is not fixed by the plan
    t = order[1:]
    p = pred[t]
    xi = np.where(t < n, t, p)          # the x end of the tree arc (t, parent)
    yj = np.where(t < n, p, t) - n      # its y end
    keys = fi.astype(np.int64) * m + fj
    srt = np.argsort(keys)
    cost = cf[srt][np.searchsorted(keys[srt], xi.astype(np.int64) * m + yj)]
    pot = [0.0] * nn                    # u_i at node i < n, v_j at node n + j
    for node, par, c in zip(t.tolist(), p.tolist(), cost.tolist(), strict=True):
        pot[node] = c - pot[par]
    arr = np.asarray(pot)
    return arr[:n], arr[n:]


def _clusters(y: np.ndarray, size: int, seed: int = 0
              ) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
    """Partition ``y`` into ~``m/size`` clusters around random centres (nearest centre).

    Returns ``(centres, radius, order, starts, label)``: ``radius_K = max_{j∈K} d_S(y_j, z_K)``
    (rad), members of cluster ``K`` are ``order[starts[K]:starts[K+1]]``.
    """
    from scipy.spatial import cKDTree

    m = y.shape[0]
    nk = max(1, -(-m // size))
    rng = np.random.default_rng(seed)
    centres = y[np.sort(rng.choice(m, size=nk, replace=False))]
    _, label = cKDTree(centres).query(y, k=1)
    label = np.asarray(label, dtype=np.int64)
    d = _geodesic_sq_pairs(y, centres, np.arange(m), label)
    radius = np.zeros(nk)
    np.maximum.at(radius, label, np.sqrt(d))
    order = np.argsort(label, kind="stable")
    starts = np.zeros(nk + 1, dtype=np.int64)
    np.cumsum(np.bincount(label, minlength=nk), out=starts[1:])
    return centres, radius, order, starts, label


def _dual_check(x: np.ndarray, y: np.ndarray, u: np.ndarray, v: np.ndarray, tol: float,
                clusters: tuple, *, max_new: int, cost: Callable | None = None,
                wmin: float = 1.0) -> tuple[np.ndarray, float, int]:
    """Every pair ``(i, j)`` with ``u_i + v_j > c_ij + tol``, without the dense matrix.

    A pair can violate only if ``c_ij < u_i + v_j + ...``; with clusters ``K`` of the ``y``
    (centre ``z_K``, geodesic radius ``R_K``, ``V_K = max_{j∈K} v_j``) the triangle inequality
    gives ``d_S(x_i, y_j) >= max(d_S(x_i, z_K) − R_K, 0) =: ℓ_iK`` for ``j ∈ K``, so the whole
    cluster is safe when ``ℓ_iK² >= u_i + V_K + tol`` (``w_min ℓ_iK²`` for a weighted cost
    ``c_ij = d² w_ij``, ``w >= w_min``). Only the surviving ``(i, K)`` are expanded into
    pairs and tested exactly (with ``cost``, default the geodesic ``d²``).

    Returns ``(keys of violating pairs, max_violation over examined pairs, examined)``.
    """
    centres, radius, order, starts, label = clusters
    n, nk = x.shape[0], centres.shape[0]
    m = y.shape[0]
    vmax = np.full(nk, -np.inf)
    np.maximum.at(vmax, label, v)
    sizes = np.diff(starts)
    rows = max(1, _CHUNK_PAIRS // max(nk, 1))
    found: list[np.ndarray] = []
    worst, examined, nfound = -np.inf, 0, 0
    for s in range(0, n, rows):
        xi = x[s:s + rows]
        dot = xi @ centres.T
        th = 2.0 * np.arctan2(np.sqrt(np.maximum(2.0 - 2.0 * dot, 0.0)),
                              np.sqrt(np.maximum(2.0 + 2.0 * dot, 0.0)))
        # Conservative lower bound (slack 1e-12 rad >> round-off of θ, R): never prunes a
        # cluster that may hold a violating pair; it only costs a few extra exact tests.
        low = np.maximum(th - radius[None, :] - 1e-12, 0.0)
        keep = wmin * low * low < u[s:s + rows, None] + vmax[None, :] + tol
        ci, ck = np.nonzero(keep)
        if ci.size == 0:
            continue
        # expand (i, K) into (i, j) for j in K, in sub-chunks bounded by _CHUNK_PAIRS pairs
        cnt = sizes[ck]
        cum = np.cumsum(cnt)
        lo = 0
        while lo < ci.size:
            base = cum[lo - 1] if lo else 0
            hi = int(np.searchsorted(cum, base + _CHUNK_PAIRS, side="right"))
            hi = max(hi, lo + 1)
            c_n = cnt[lo:hi]
            tot = int(c_n.sum())
            ii = np.repeat(ci[lo:hi] + s, c_n)
            first = np.repeat(starts[ck[lo:hi]] - (np.cumsum(c_n) - c_n), c_n)
            jj = order[first + np.arange(tot)]
            viol = u[ii] + v[jj] - (cost(ii, jj) if cost is not None
                                    else _geodesic_sq_pairs(x, y, ii, jj))
            examined += tot
            if tot:
                worst = max(worst, float(viol.max()))
            bad = viol > tol
            if np.any(bad):
                found.append(ii[bad].astype(np.int64) * m + jj[bad])
                nfound += int(bad.sum())
                if nfound > max_new:
                    raise RuntimeError(f"w2_sphere_sparse: the dual check found more than "
                                       f"{max_new} violating pairs (max_pairs); raise "
                                       f"`neighbours` or `max_pairs`")
            lo = hi
    keys = np.unique(np.concatenate(found)) if found else np.zeros(0, dtype=np.int64)
    return keys, worst, examined


def w2_sphere_sparse(x: np.ndarray, y: np.ndarray, a: np.ndarray | None = None,
                     b: np.ndarray | None = None, *, neighbours: int = 8,
                     max_pairs: int = 50_000_000, max_rounds: int = 50,
                     rtol: float | None = None, raise_uncertified: bool = True,
                     num_itermax: int = 1_000_000_000, warm_start: bool = True,
                     cluster_size: int | None = None,
                     pair_weight: Callable[[np.ndarray, np.ndarray], np.ndarray] | None = None,
                     weight_min: float | None = None) -> W2Result:
    r"""Exact ``W_2`` on the sphere for large discrete measures, certified, with POT.

    Solves the same LP as :func:`w2_sphere` (``c_ij = d_S(x_i, y_j)²``, masses normalised to
    1, zero-mass points dropped) without the dense ``n × m`` cost matrix:

    1. candidate graph ``E``: the ``neighbours`` nearest ``y`` of each ``x_i`` and nearest
       ``x`` of each ``y_j`` (``scipy.spatial.cKDTree`` on chords, which order like ``d_S``);
    2. solve the LP restricted to ``E`` with ``ot.emd`` (network simplex, sparse COO cost);
       an infeasible graph doubles ``neighbours``;
    3. **certificate**: with the simplex duals ``(u, v)`` check dual feasibility
       ``u_i + v_j <= c_ij + tol`` on *all* pairs; a pair can violate only where
       ``c_ij < u_i + max v``, which a cluster/ball bound prunes (see ``_dual_check``);
    4. add the violating pairs to ``E`` and re-solve (warm start from ``(u, v)``) until none;
    5. tighten the bound: recompute the duals ``(u', v')`` on the support tree of the final
       plan (when it is a spanning tree) and take their largest violation ``η'`` over all
       pairs with the same check: ``W_2² >= Σ a u' + Σ b v' − η'`` as well.

    What is proven (LP duality). The restricted plan ``π`` is feasible for the full problem,
    so ``W_2² <= ⟨π, c⟩``. If ``u_i + v_j <= c_ij + tol`` for **all** ``(i, j)``, then
    ``(u, v − tol)`` is dual feasible for the full problem and weak duality gives
    ``W_2² >= Σ a_i u_i + Σ b_j v_j − tol``. Hence
    ``0 <= ⟨π, c⟩ − W_2² <= gap + tol =: bound`` with ``gap = ⟨π, c⟩ − Σ a u − Σ b v``
    (zero up to round-off at a simplex optimum): the returned value is the exact optimum of
    the full problem to that certified accuracy. ``certified`` is ``True`` only then.
    Step 5 replaces ``bound`` by ``gap' + max(η', 16 ε S')`` when smaller (measured:
    ~1e-15 rad², i.e. ~1e-12 of ``W_2²``, where step 3 alone gives ~1e-10).

    Tolerance. ``tol = max(rtol · S, 2 δ, 2 δ_E)``. ``S = max(max|u| + max|v|, max c_E)`` is the
    magnitude of the terms of a reduced cost; the default ``rtol = 16 ε`` (``ε`` = float64
    machine epsilon) covers POT's own stopping test (reduced costs ``>= −ε·S``, its
    ``EPSILON``) and the ~3 roundings of ``c − u − v`` re-evaluated here (``c_ij`` is
    recomputed by the same float formula every time). ``δ = max |u_i + v_j − c_ij|`` over
    the plan's support, where LP theory gives exactly 0: the simplex updates its potentials
    incrementally and they drift by accumulated round-off (measured ``δ ~ 10⁴ ε`` at
    ~10⁴ cells), so reduced costs below ``2 δ`` carry no information. ``δ_E`` is the largest
    violation ``u_i + v_j − c_ij`` over the graph's own arcs: the level to which the simplex
    solved its problem (about ``1e-12`` on degenerate problems such as two identical
    measures, where the plan has zero cost and the duals a large null space; ``0`` up to
    round-off otherwise). Whatever ``tol`` is,
    the bound above is rigorous (up to the round-off of the check itself); ``tol`` only sets
    how tight it is. A genuine sub-optimality of the plan shows as a violation far above
    ``tol`` and its pair is added.

    Complexity. Memory ``O((n + m) k)`` for the graph plus the pairs added by the check
    (never ``n m``), and ``O(n m / s + P)`` time per check for clusters of ``s`` target points
    (``P`` = pairs surviving the bound, ``~n·s·O(1)`` for smooth potentials). The network
    simplex is the dominant cost: empirically super-linear in the number of edges
    (bench/results/bench_w2_sparse.json).

    Parameters
    ----------
    x : (n, d) array, y : (m, d) array
        Support points on the unit sphere (checked to ``SPHERE_TOL``).
    a : (n,) array, b : (m,) array, optional
        Non-negative finite masses (normalised to 1 here; default uniform).
    neighbours : int
        ``k`` of the initial k-NN graph (both ways).
    max_pairs : int
        Refuse to let the graph grow beyond this many edges (raises ``RuntimeError``).
    max_rounds : int
        Maximal number of ``ot.emd`` solves.
    rtol : float, optional
        Relative dual-feasibility tolerance (default ``16 ε``, see above).
    raise_uncertified : bool
        If ``True`` (default) raise ``RuntimeError`` when no certificate is obtained within
        ``max_rounds``; if ``False`` return the result with ``certified=False`` (its
        ``value`` is then only an upper bound on ``W_2``).
    num_itermax : int
        Network-simplex iteration limit per solve.
    warm_start : bool
        Warm-start later rounds from the previous duals.
    cluster_size : int, optional
        Target points per cluster of the check (default ``clip(sqrt(m/8), 16, 256)``).
    pair_weight : callable, optional
        A weighted cost ``c_ij = d_S(x_i, y_j)² · w(i, j)`` (e.g. ``1/b̂_ij``, the weighted
        ``W²_{b̂}`` of the JKO step): ``pair_weight(i, j)`` takes integer index arrays into
        the *given* ``x`` and ``y`` and returns ``w > 0`` elementwise. The certificate then
        prunes with ``c_ij >= weight_min · ℓ_iK²``, so it stays exact.
    weight_min : float, optional
        A lower bound of ``w`` over all pairs (required with ``pair_weight``; a wrong bound
        is caught: every examined pair's weight is checked against it).

    Returns
    -------
    W2Result
    """
    t0 = time.perf_counter()
    x, y = _points(x, "x"), _points(y, "y")
    if x.shape[1] != y.shape[1]:
        raise ValueError(f"w2_sphere: x and y have dimensions {x.shape[1]} and {y.shape[1]}")
    a = _weights(a, x.shape[0], "a")
    b = _weights(b, y.shape[0], "b")
    check_on_sphere(x, name="x", tol=SPHERE_TOL)
    check_on_sphere(y, name="y", tol=SPHERE_TOL)
    # drop zero-mass points (they carry no constraint); normalise as w2_sphere does
    ia, ib = np.flatnonzero(a > 0), np.flatnonzero(b > 0)
    x, y = np.ascontiguousarray(x[ia]), np.ascontiguousarray(y[ib])
    if pair_weight is None:
        wmin = 1.0

        def pair_cost(i: np.ndarray, j: np.ndarray) -> np.ndarray:
            return _geodesic_sq_pairs(x, y, i, j)
    else:
        if weight_min is None or not np.isfinite(weight_min) or weight_min <= 0:
            raise ValueError("w2_sphere_sparse: pair_weight needs weight_min > 0, a lower "
                             "bound of the weights")
        # a bound computed from the same numbers (e.g. 1/max b̂ for 1/b̂_ij) may exceed the
        # weights by a rounding: 64 ε of slack, kept in the pruning too
        wmin = float(weight_min) * (1.0 - 64.0 * _EPS)

        def pair_cost(i: np.ndarray, j: np.ndarray) -> np.ndarray:
            w = np.asarray(pair_weight(ia[i], ib[j]), dtype=float)
            if w.size and not (np.all(np.isfinite(w)) and float(w.min()) >= wmin):
                raise ValueError(f"w2_sphere_sparse: pair_weight below weight_min = {wmin:g} "
                                 f"(min {float(np.min(w)):g}) or not finite")
            return _geodesic_sq_pairs(x, y, i, j) * w
    a, b = a[ia] / a[ia].sum(), b[ib] / b[ib].sum()
    b = b * (a.sum() / b.sum())  # equal totals to the last bit (as ot.emd does)
    n, m = x.shape[0], y.shape[0]
    rtol = 16.0 * _EPS if rtol is None else float(rtol)
    k = max(1, int(neighbours))

    keys = _knn_pairs(x, y, k)
    clusters = None
    init = None
    rounds, worst, certified = 0, float("nan"), False
    tol, bound, cost = float("nan"), float("inf"), float("nan")
    while rounds < max_rounds:
        if keys.size > max_pairs:
            raise RuntimeError(f"w2_sphere_sparse: candidate graph has {keys.size} > max_pairs="
                               f"{max_pairs} edges")
        i, j = keys // m, keys % m
        c = pair_cost(i, j)
        fi, fj, fv, u, v, code = _solve_sparse(a, b, i, j, c, num_itermax,
                                               init if warm_start else None)
        rounds += 1
        if code == 0:  # infeasible restricted graph: enlarge k
            if k >= max(n, m):
                raise RuntimeError("w2_sphere_sparse: infeasible on the complete graph")
            k = min(2 * k, max(n, m))
            logger.info("w2_sphere_sparse: graph infeasible, neighbours -> %d", k)
            keys = np.union1d(keys, _knn_pairs(x, y, k))
            init = None
            continue
        if code != 1:
            raise RuntimeError(f"w2_sphere_sparse: ot.emd result_code={code} "
                               "(unbounded or numItermax reached)")
        cf = pair_cost(fi, fj)
        cost = float(np.dot(fv, cf))
        scale = max(float(np.max(np.abs(u)) + np.max(np.abs(v))), float(c.max()), _EPS)
        # drift: on the plan's support (basic arcs) LP theory gives u_i + v_j = c_ij exactly;
        # the simplex updates its potentials incrementally, so they drift by round-off
        # accumulated over the pivots. Reduced costs below that level carry no information.
        drift = float(np.max(np.abs(u[fi] + v[fj] - cf))) if fi.size else 0.0
        # the simplex's own optimality level on its graph: it stops pivoting once every
        # reduced cost is above about −1e-12 of its internal scale, so on a degenerate
        # problem (identical measures: a plan of zero cost, duals defined up to a large
        # null space) graph arcs violate u_i + v_j <= c_ij by ~1e-12 although the plan is
        # optimal to that level. Off-graph pairs below the same level carry no more
        # information; the bound gap + tol stays rigorous whatever tol is.
        on_graph = float(np.max(u[i] + v[j] - c)) if c.size else 0.0
        tol = max(rtol * scale, 2.0 * drift, 2.0 * max(on_graph, 0.0))
        if clusters is None:
            s = cluster_size or int(np.clip(np.sqrt(m / 8.0), 16, 256))
            clusters = _clusters(y, s)
        new, worst, examined = _dual_check(x, y, u, v, tol, clusters,
                                           max_new=max(max_pairs - keys.size, 0),
                                           cost=pair_cost, wmin=wmin)
        logger.info("w2_sphere_sparse: round %d, %d edges, cost %.17g, %d pairs examined, "
                    "%d violations (max %.3g, tol %.3g)", rounds, keys.size, cost, examined,
                    new.size, worst, tol)
        if new.size == 0:
            certified = True
            bound = abs(cost - float(a @ u) - float(b @ v)) + tol
            # tighten: any duals (u', v') give W₂² >= a·u' + b·v' − η' with η' their largest
            # violation over all pairs ((u', v' − η') is dual feasible). The duals recomputed
            # on the support tree are free of the simplex's drift δ and of its internal
            # offsets, so η' is usually far below tol; kept only when the bound is smaller.
            tree = _tree_duals(n, m, fi, fj, cf)
            if tree is not None:
                ut, vt = tree
                scale_t = max(float(np.max(np.abs(ut)) + np.max(np.abs(vt))),
                              float(c.max()), _EPS)
                tol_t = rtol * scale_t
                try:
                    _, worst_t, _ = _dual_check(x, y, ut, vt, tol_t, clusters,
                                                max_new=max(max_pairs, 1),
                                                cost=pair_cost, wmin=wmin)
                    eta = max(worst_t, tol_t)
                    bound_t = abs(cost - float(a @ ut) - float(b @ vt)) + eta
                    if bound_t < bound:
                        tol, worst, bound = eta, worst_t, bound_t
                except RuntimeError:  # too many tiny violations: keep the first certificate
                    pass
            break
        grown = np.union1d(keys, new)
        if grown.size == keys.size:  # all violators already in the graph: no progress
            logger.warning("w2_sphere_sparse: violations only on graph edges (max %.3g, "
                           "tol %.3g); not certified", worst, tol)
            break
        keys = grown
        init = (u, v)
    if not certified and raise_uncertified:
        raise RuntimeError(f"w2_sphere_sparse: not certified after {rounds} rounds "
                           f"(max dual violation {worst:.3g} > tol {tol:.3g}); raise "
                           "max_rounds or neighbours")
    return W2Result(value=float(np.sqrt(max(cost, 0.0))), W2sq=cost, rounds=rounds,
                    pairs=int(keys.size), max_violation=float(worst), certified=certified,
                    time_s=time.perf_counter() - t0, tol=tol, bound=bound)


def w2_sphere(x: np.ndarray, y: np.ndarray, a: np.ndarray | None = None,
              b: np.ndarray | None = None, *, max_points: int = 6000,
              num_itermax: int = 10_000_000, method: str = "dense") -> float:
    """Exact ``W_2`` distance on the sphere between two discrete measures.

    Parameters
    ----------
    x : (n, d) array, y : (m, d) array
        Support points on the unit sphere.
    a : (n,) array, b : (m,) array, optional
        Non-negative masses (normalised to 1 here; default uniform).
    max_points : int
        ``"dense"``: refuse larger problems (the dense ``n × m`` cost would not fit
        comfortably). ``"auto"``: the dense/sparse switch.
    method : {"dense", "sparse", "auto"}
        ``"dense"`` (default): ``ot.emd2`` on the dense cost. ``"sparse"``: the certified
        sparse solver :func:`w2_sphere_sparse` (raises unless certified). ``"auto"``: dense
        when ``max(n, m) <= max_points``, else sparse.

    Returns
    -------
    float
        ``W_2`` in radians (geodesic cost ``d_S²``).
    """
    import ot

    if method not in ("dense", "sparse", "auto"):
        raise ValueError(f"w2_sphere: method must be 'dense', 'sparse' or 'auto'; got {method!r}")
    x, y = _points(x, "x"), _points(y, "y")
    if method == "sparse" or (method == "auto" and max(x.shape[0], y.shape[0]) > max_points):
        return w2_sphere_sparse(x, y, a, b).value
    if max(x.shape[0], y.shape[0]) > max_points:
        raise ValueError(f"w2_sphere: {x.shape[0]} x {y.shape[0]} points exceeds max_points="
                         f"{max_points}; subsample or raise the limit")
    a = _weights(a, x.shape[0], "a")
    b = _weights(b, y.shape[0], "b")
    a, b = a / a.sum(), b / b.sum()
    C = pairwise_geodesic(x, y) ** 2
    val = ot.emd2(a, b, C, numItermax=num_itermax)
    return float(np.sqrt(max(float(val), 0.0)))
