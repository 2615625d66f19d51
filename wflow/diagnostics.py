"""Diagnostics shared by every solver (docs/theory.md §3, §5, §6).

Clustering, radial shadows, attention entropies, per-head energy rates, and the
running energy-balance accumulator.

Conventions
-----------
* Clustering: ``mean_inner = Σ_{i≠j} m_i m_j <x_i, x_j> / Σ_{i≠j} m_i m_j`` (1 when all
  tokens coincide, ≈ 0 for uniform tokens), and the number of clusters: connected
  components of the graph ``<x_i, x_j> >= cos_threshold``.
* Radial shadow of head ``h`` at token ``i``: ``a^h_i = <f_h(x_i), x_i>``.
* Per-head rates: ``dE_h/dt = ∫ <∇ψ_h, v> dμ`` split into the own part
  ``∫ <∇ψ_h, P w_h f_h>``, the cross part through the other heads' outputs
  ``∫ <∇ψ_h, Σ_{h'≠h} w_h' f_h'>`` (``cross_direct``, zero for orthogonal head subspaces)
  and through their radial shadows ``−∫ <∇ψ_h, x> Σ_{h'≠h} w_h' a^{h'}`` (``cross_radial``).
  Radial dominance: ``|cross_radial| <= own`` (margin ``own − |cross_radial|``).
* Attention entropy of row ``i`` of head ``h``: ``H^h_i = −Σ_j p_ij log p_ij`` with
  ``p_ij = m_j e^{β s_ij} / Z_i`` and ``s_ij = <x_i, A_h x_j>``; for ``n`` tokens with
  ``m_j = 1/n`` it is the entropy of the softmax row, between 0 and ``log n``.
  Entropy production: ``dH^h_i/dt = −β² Cov_{p_i}(s, ṡ)``,
  ``ṡ_ij = <ẋ_i, A_h x_j> + <x_i, A_h ẋ_j>``.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, NamedTuple

import numpy as np
from scipy.integrate import simpson

from .attention.heads import Attention, Heads
from .energy import FieldEval
from .geometry.sphere import project_tangent
from .kernels import kernel_sums

__all__ = [
    "mean_inner_product",
    "count_clusters",
    "radial_shadows",
    "HeadRates",
    "head_rates",
    "attention_entropy",
    "entropy_production",
    "BalanceAccumulator",
    "simpson_balance",
]


def mean_inner_product(x: np.ndarray, m: np.ndarray | None = None) -> float:
    """Mass-weighted mean of ``<x_i, x_j>`` over pairs ``i ≠ j`` (``O(n d)``)."""
    n = x.shape[0]
    m = np.full(n, 1.0 / n) if m is None else m
    s = m @ x
    off = float(s @ s - np.sum(m * m * np.sum(x * x, axis=1)))
    return off / float(m.sum() ** 2 - np.sum(m * m))


def _sqdist(a: np.ndarray, b: np.ndarray) -> np.ndarray:
    """Squared distances ``|a_i − b_i|²`` row by row, in the arithmetic of SciPy's k-d tree.

    Four partial sums over the components ``k ≡ 0, 1, 2, 3 (mod 4)`` of the full groups of
    four, added left to right, then the remaining components one by one
    (``sqeuclidean_distance_double`` of ``scipy.spatial``): the link test of
    :func:`count_clusters` is then the one of the former ``cKDTree.query_pairs`` count.
    """
    diff = a - b
    d = diff.shape[1]
    q = d - d % 4
    if q:
        acc = [np.zeros(diff.shape[0]) for _ in range(4)]
        for i in range(0, q, 4):
            for lane in range(4):
                acc[lane] = acc[lane] + diff[:, i + lane] * diff[:, i + lane]
        s = ((acc[0] + acc[1]) + acc[2]) + acc[3]
    else:
        s = np.zeros(diff.shape[0])
    for i in range(q, d):
        s = s + diff[:, i] * diff[:, i]
    return s


class _Cover:
    """Tokens grouped around leaders (radius ``ρ``), the groups linked by union-find.

    Leaders are picked greedily (the first token not yet in a group, in index order); a
    group holds the tokens within ``ρ = (r/2)(1 − 10⁻⁹)`` of its leader that no earlier
    group holds, so any two tokens of one group are within ``r`` (triangle inequality, the
    margin covering the rounding): each group lies in one cluster without looking at its
    pairs. Two groups can be linked only if their leaders are within ``2ρ + r < 2r``;
    for each such pair not yet in one component, the link test looks for one token of
    the first group whose nearest token of the second (a k-d tree of that group) is
    within ``r`` — by the explicit test :func:`_sqdist` ``≤ r²``, chunk by chunk, stopping
    at the first link. Leaders are ``ρ``-separated, so on S² a leader has a bounded
    number of neighbouring leaders (a packing number, about 80 within ``2r``).

    Memory ``O(n d)`` (the tokens sorted by group and one tree per group built when first
    needed) plus the leader pairs; no pair of tokens is ever stored.
    """

    CHUNK = 256
    #: Token lists returned at once by the k-d tree while building the groups.
    BUDGET = 1 << 22

    def __init__(self, x: np.ndarray, r: float) -> None:
        from scipy.spatial import cKDTree

        self.r = float(r)
        self.r2 = self.r * self.r
        self.rc = self.r * (1.0 + 1e-9)  # candidate radius of the k-d tree queries
        n = x.shape[0]
        rho = 0.5 * self.r * (1.0 - 1e-9)
        group = np.full(n, -1, dtype=np.int64)
        leaders: list[int] = []
        if n:
            tree = cKDTree(x)
            nxt = 0  # every token before nxt is in a group
            while nxt < n:
                free = np.flatnonzero(group[nxt:nxt + (1 << 14)] < 0)
                if free.size == 0:
                    nxt += 1 << 14
                    continue
                cand = nxt + free[:1024]
                nxt = int(cand[0]) + 1  # cand[0] leads the next group
                lens = tree.query_ball_point(x[cand], rho, return_length=True)
                take = max(1, int(np.searchsorted(np.cumsum(lens), self.BUDGET, "right")))
                balls = tree.query_ball_point(x[cand[:take]], rho)
                for c, ball in zip(cand[:take], balls, strict=True):
                    if group[c] >= 0:
                        continue
                    members = np.asarray(ball, dtype=np.int64)
                    members = members[group[members] < 0]
                    group[members] = len(leaders)  # (c itself is in its ball)
                    leaders.append(int(c))
        self.k = len(leaders)
        order = np.argsort(group, kind="stable")
        self.pts = np.ascontiguousarray(x[order])
        self.off = np.searchsorted(group[order], np.arange(self.k + 1))
        self.lead = np.ascontiguousarray(x[np.asarray(leaders, dtype=np.int64)]) if self.k \
            else np.zeros((0, x.shape[1]))
        self.parent = np.arange(self.k)
        self._trees: dict[int, object] = {}

    def members(self, g: int) -> np.ndarray:
        """Tokens of group ``g``."""
        return self.pts[self.off[g]:self.off[g + 1]]

    def tree(self, g: int):
        """k-d tree of group ``g`` (built once)."""
        from scipy.spatial import cKDTree

        t = self._trees.get(g)
        if t is None:
            t = self._trees[g] = cKDTree(self.members(g))
        return t

    def find(self, a: int) -> int:
        """Root of ``a`` (path halving)."""
        p = self.parent
        while p[a] != a:
            p[a] = p[p[a]]
            a = int(p[a])
        return a

    def linked(self, pts: np.ndarray, other: np.ndarray, tree) -> bool:
        """Whether some token of ``pts`` is within ``r`` of a token of ``other`` (its tree)."""
        for i0 in range(0, pts.shape[0], self.CHUNK):
            chunk = pts[i0:i0 + self.CHUNK]
            dist, j = tree.query(chunk, k=1)
            near = dist <= self.rc
            if not np.any(near):
                continue
            if np.any(_sqdist(chunk[near], other[j[near]]) <= self.r2):
                return True
            # the nearest candidate failed the exact test only at the rounding level:
            # every candidate of those tokens is tested
            for p in chunk[near]:
                cand = np.asarray(tree.query_ball_point(p, self.rc), dtype=np.int64)
                if cand.size and np.any(
                        _sqdist(np.broadcast_to(p, (cand.size, p.size)), other[cand]) <= self.r2):
                    return True
        return False

    def link_all(self) -> None:
        """Union the groups of this cover that hold a linked pair of tokens."""
        from scipy.spatial import cKDTree

        if self.k < 2:
            return
        pairs = cKDTree(self.lead).query_pairs(2.0 * self.rc, output_type="ndarray")
        if pairs.size == 0:
            return
        dl = _sqdist(self.lead[pairs[:, 0]], self.lead[pairs[:, 1]])
        # pairs of small groups (spread tokens: most of them) are decided at once, every
        # member pair tested (the same predicate as `linked`: some pair within r², the
        # test symmetric in its arguments), without a tree per group
        small = self._link_small(pairs)
        pairs, dl = pairs[~small], dl[~small]
        for a, b in pairs[np.argsort(dl, kind="stable")]:
            ra, rb = self.find(int(a)), self.find(int(b))
            if ra == rb:
                continue
            a, b = int(a), int(b)
            size_a, size_b = self.off[a + 1] - self.off[a], self.off[b + 1] - self.off[b]
            small, big = (a, b) if size_a <= size_b else (b, a)
            if self.linked(self.members(small), self.members(big), self.tree(big)):
                self.parent[ra] = rb

    #: Largest product of two groups' sizes whose member pairs are all tested at once.
    SMALL = 64
    #: Member pairs (times ``d``) tested per vectorised chunk: tens of MiB at most.
    PAIRS = 1 << 20

    def _link_small(self, pairs: np.ndarray) -> np.ndarray:
        """Union the linked pairs of groups with ``|a||b| ≤ SMALL``; which pairs were small.

        Every member pair of those groups is tested with :func:`_sqdist` ``≤ r²``,
        vectorised in chunks of about ``PAIRS / d`` member pairs (``Σ|a||b|`` distances in
        all), a pair of groups linked when any of its member pairs is.
        """
        size = np.diff(self.off)
        sa, sb = size[pairs[:, 0]], size[pairs[:, 1]]
        small = sa * sb <= self.SMALL
        if not np.any(small):
            return small
        pa, pb, sa, sb = pairs[small, 0], pairs[small, 1], sa[small], sb[small]
        cnt = sa * sb
        hit = np.zeros(cnt.size, dtype=bool)
        # in chunks of about PAIRS // d member pairs: memory O(PAIRS), not O(Σ|a||b|)
        ends = np.cumsum(cnt)
        step = max(1, self.PAIRS // max(1, self.pts.shape[1]))
        cuts = np.searchsorted(ends, np.arange(step, int(ends[-1]), step), side="right")
        for lo, hi in zip(np.r_[0, cuts], np.r_[cuts, cnt.size], strict=True):
            if hi <= lo:
                continue
            c = cnt[lo:hi]
            pid = np.repeat(np.arange(lo, hi), c)
            k = np.arange(pid.size) - np.repeat(np.cumsum(c) - c, c)
            ia = self.off[pa[pid]] + k // sb[pid]
            ib = self.off[pb[pid]] + k % sb[pid]
            near = _sqdist(self.pts[ia], self.pts[ib]) <= self.r2
            hit[np.unique(pid[near])] = True
        for a, b in zip(pa[hit], pb[hit], strict=True):
            ra, rb = self.find(int(a)), self.find(int(b))
            if ra != rb:
                self.parent[ra] = rb
        return small

    def components(self) -> np.ndarray:
        """Component root of every group."""
        return np.array([self.find(g) for g in range(self.k)], dtype=np.int64)


def count_clusters(x: np.ndarray, *, cos_threshold: float = 0.99, comm: Any = None) -> int:
    """Number of clusters: components of the graph ``<x_i, x_j> >= cos_threshold``.

    Two tokens are linked when their chordal distance is within
    ``r = √(2 − 2 cos_threshold)`` (``|x − y|² = 2 − 2<x, y>`` on the unit sphere), the
    squared distance computed as SciPy's k-d tree does (:func:`_sqdist`) and compared
    with ``r²``. Memory ``O(n d)``: tokens are grouped around leaders within ``r/2``
    (a group is inside one cluster), and only neighbouring groups are tested for a link
    (:class:`_Cover`), so no list of pairs is ever held (the former
    ``cKDTree.query_pairs`` held all of them: ``O(n²)`` for collapsed tokens).

    Parameters
    ----------
    x : (n, d) array
        Tokens (this rank's block when ``comm`` is given).
    cos_threshold : float
        Inner-product threshold of a link.
    comm : mpi4py communicator, optional
        Tokens split over its ranks (rank order = token order): each rank groups and
        links its own tokens, the blocks then travel around a ring and each rank tests
        its groups against the visiting ones; the links between components
        (``O(components)`` integers) are gathered and joined by union-find. The same
        count as the serial call on the concatenated tokens, on every rank (collective).
    """
    r = float(np.sqrt(max(0.0, 2.0 - 2.0 * cos_threshold)))
    x = np.ascontiguousarray(x, dtype=np.float64)
    if comm is None or comm.Get_size() == 1:
        cover = _Cover(x, r)
        cover.link_all()
        return int(np.unique(cover.components()).size) if cover.k else 0
    return _count_clusters_split(x, r, comm)


def _count_clusters_split(x: np.ndarray, r: float, comm: Any) -> int:
    """:func:`count_clusters` with the tokens split over the ranks of ``comm``."""
    from scipy.spatial import cKDTree

    P, rank = comm.Get_size(), comm.Get_rank()
    cover = _Cover(x, r)
    cover.link_all()
    comp = cover.components()
    # local components, renumbered 0..c-1
    roots, label = np.unique(comp, return_inverse=True) if cover.k else (np.zeros(0), comp)
    nloc = int(roots.size)
    label = np.asarray(label, dtype=np.int64)
    edges: set[tuple[int, int, int]] = set()  # (my component, other rank, its component)
    mine = (cover.pts, cover.off, cover.lead, label)
    visit = mine
    src = rank
    lead_tree = cKDTree(cover.lead) if cover.k else None
    for _ in range(P - 1):
        visit = comm.sendrecv(visit, dest=(rank + 1) % P, source=(rank - 1) % P)
        src = (src - 1) % P
        pts, off, lead, vlab = visit
        if lead_tree is None or lead.shape[0] == 0:
            continue
        pairs = lead_tree.sparse_distance_matrix(cKDTree(lead), 2.0 * cover.rc,
                                                 output_type="ndarray")
        if pairs.size == 0:
            continue
        # candidate group pairs grouped by the component pair they would link, nearest
        # leaders first: a component pair needs one link, so its other candidates are
        # never tested (the loop runs over component pairs, not over group pairs)
        ga, gb = pairs["i"].astype(np.int64), pairs["j"].astype(np.int64)
        kk = label[ga] * (int(vlab.max()) + 1) + vlab[gb]
        order = np.lexsort((pairs["v"], kk))
        ga, gb, kk = ga[order], gb[order], kk[order]
        starts = np.flatnonzero(np.r_[True, kk[1:] != kk[:-1]])
        ends = np.r_[starts[1:], kk.size]
        trees: dict[int, object] = {}
        for s0, s1 in zip(starts.tolist(), ends.tolist(), strict=True):
            for a, b in zip(ga[s0:s1].tolist(), gb[s0:s1].tolist(), strict=True):
                ob = pts[off[b]:off[b + 1]]
                tb = trees.get(b)
                if tb is None:
                    tb = trees[b] = cKDTree(ob)
                if cover.linked(cover.members(a), ob, tb):
                    edges.add((int(label[a]), src, int(vlab[b])))
                    break
    counts = comm.allgather(nloc)
    base = np.concatenate([[0], np.cumsum(counts)]).astype(np.int64)
    all_edges = comm.allgather(sorted(edges))
    parent = np.arange(int(base[-1]))

    def find(a: int) -> int:
        while parent[a] != a:
            parent[a] = parent[parent[a]]
            a = int(parent[a])
        return a

    for rk, es in enumerate(all_edges):
        for ca, s, cb in es:
            ra, rb = find(int(base[rk] + ca)), find(int(base[s] + cb))
            if ra != rb:
                parent[ra] = rb
    return int(sum(1 for i in range(parent.size) if find(i) == i))


def radial_shadows(x: np.ndarray, field_: FieldEval) -> np.ndarray:
    """Radial shadows ``a^h_i = <f_h(x_i), x_i>``, shape ``(H, n)``."""
    return np.einsum("hnd,nd->hn", field_.f, x)


class HeadRates(NamedTuple):
    """Per-head energy rates and their split (shapes ``(H,)``)."""

    total: np.ndarray
    own: np.ndarray
    cross_direct: np.ndarray
    cross_radial: np.ndarray

    @property
    def margin(self) -> np.ndarray:
        """Radial-dominance margin ``own − |cross_radial|`` (>= 0: dominance holds)."""
        return self.own - np.abs(self.cross_radial)


def head_rates(x: np.ndarray, m: np.ndarray, field_: FieldEval, heads: Heads) -> HeadRates:
    """``dE_h/dt`` along the transformer velocity, split into own / cross parts (static heads)."""
    w = heads.w
    wf = w[:, None, None] * field_.f  # (H, n, d)
    total_f = wf.sum(axis=0)
    gp = field_.grad_psi
    radial_g = np.einsum("hnd,nd->hn", gp, x)  # <∇ψ_h, x>
    a = radial_shadows(x, field_)  # (H, n)
    wa = w[:, None] * a
    # own: <∇ψ_h, P w_h f_h> = <∇ψ_h, w_h f_h> − <∇ψ_h, x> w_h a_h
    # own = <∇ψ_h, P w_h f_h> in the projected form <P∇ψ_h, P w_h f_h>: no cancellation
    # between two nearly equal radial terms when the outputs are almost radial (large β)
    own = np.einsum("hnd,hnd->hn", project_tangent(x[None], gp), project_tangent(x[None], wf))
    cross_direct = np.einsum("hnd,nd->hn", gp, total_f) - np.einsum("hnd,hnd->hn", gp, wf)
    cross_radial = -radial_g * (wa.sum(axis=0)[None, :] - wa)
    own_i, cd, cr = own @ m, cross_direct @ m, cross_radial @ m
    return HeadRates(own_i + cd + cr, own_i, cd, cr)


def attention_entropy(x: np.ndarray, heads: Heads, attn: Attention,
                      m: np.ndarray | None = None) -> np.ndarray:
    """Softmax attention entropies ``H^h_i``, shape ``(H, n)`` (see module docstring)."""
    n = x.shape[0]
    m = np.full(n, 1.0 / n) if m is None else m
    sums = kernel_sums(x, x, m, heads.Q, heads.K, beta=attn.beta, kind="softmax", scores=True)
    ent = np.log(sums.Z) - sums.S / sums.Z
    if np.allclose(m, m[0]):
        return ent - np.log(m[0])
    # general masses: −Σ p log m_j needs Σ_j m_j e^{s} log m_j
    logm = np.log(np.where(m > 0, m, 1.0))
    extra = np.empty_like(ent)
    for h in range(heads.H):
        qx = x @ heads.Q[h].T
        ky = x @ heads.K[h].T
        kern = np.exp(attn.beta * (qx @ ky.T)) * m
        extra[h] = (kern @ logm) / sums.Z[h]
    return ent - extra


def entropy_production(x: np.ndarray, xdot: np.ndarray, heads: Heads,
                       attn: Attention, A_dot: np.ndarray | None = None) -> np.ndarray:
    """Right side of the entropy identity ``dH^h_i/dt = −β² Cov_{p_i}(s, ṡ)``, shape ``(H, n)``.

    ``ṡ_ij = <ẋ_i, A x_j> + <x_i, A ẋ_j> (+ <x_i, Ȧ x_j>`` when ``A_dot`` is given, for
    moving weights). Direct blocked ``O(H n² d)`` evaluation for empirical measures
    (uniform masses).
    """
    n = x.shape[0]
    out = np.empty((heads.H, n))
    B = max(1, (1 << 21) // n)
    for h in range(heads.H):
        A = heads.A[h]
        Ax, Axd = x @ A.T, xdot @ A.T  # rows A x_j, A ẋ_j
        for i0 in range(0, n, B):
            i1 = min(n, i0 + B)
            s = x[i0:i1] @ Ax.T  # s_ij = <x_i, A x_j>
            sd = xdot[i0:i1] @ Ax.T + x[i0:i1] @ Axd.T  # ṡ_ij
            if A_dot is not None:
                sd += x[i0:i1] @ (x @ A_dot[h].T).T
            z = attn.beta * s
            p = np.exp(z - z.max(axis=1, keepdims=True))
            p /= p.sum(axis=1, keepdims=True)
            es = np.sum(p * s, axis=1)
            esd = np.sum(p * sd, axis=1)
            out[h, i0:i1] = -attn.beta**2 * (np.sum(p * s * sd, axis=1) - es * esd)
    return out


@dataclass
class BalanceAccumulator:
    """Running energy balance of one trajectory (one accumulator for every solver).

    Per step ``[t_k, t_{k+1}]`` the solver calls :meth:`add` with the integrands at both
    ends. Accumulated (trapezoid for deterministic integrands, left point for the Itô
    terms of noisy weights)::

        ΔE = E(t) − E(0)
        W  = ∫ ∂_t E dt + Σ jumps            (work done by the weights)
        P  = ∫ power dt                        (chain rule: ∫ <∇ψ, v> dμ dt)
        D  = ∫ (½|μ'|² + ½|∂E|²) dt            (EDI dissipation)
        G  = ∫ G² dt
        I  = ∫ Itô dt,  M = Σ <∂E/∂θ, σ dW>   (noisy weights)

    Residuals (``sign`` = +1 ascent, −1 descent, 0 not a gradient flow):
    ``chain = ΔE − W − P − I − M`` (→ 0 at the scheme's order, any flow),
    ``edi = ΔE − W − I − M − sign·D`` and ``g2 = ΔE − W − I − M − sign·G`` (NaN when
    ``sign = 0``: heads that are not value-aligned define no gradient-flow direction).
    """

    sign: float
    E0: float
    E: float = 0.0
    W: float = 0.0
    P: float = 0.0
    D: float = 0.0
    G: float = 0.0
    I: float = 0.0
    M: float = 0.0
    steps: int = 0
    _series: dict[str, list[float]] = field(default_factory=dict, repr=False)

    def __post_init__(self) -> None:
        self.E = self.E0

    def add(self, dt: float, left: dict[str, float], right: dict[str, float], *,
            E_new: float, ito: float = 0.0, martingale: float = 0.0) -> None:
        """Add one step. ``left``/``right`` hold ``dEdt_w, power, speed2, slope2, G2``."""
        def trap(key: str) -> float:
            return 0.5 * dt * (left[key] + right[key])

        self.W += trap("dEdt_w")
        self.P += trap("power")
        self.D += 0.5 * (trap("speed2") + trap("slope2"))
        self.G += trap("G2")
        self.I += dt * ito
        self.M += martingale
        self.E = E_new
        self.steps += 1

    def step(self, dt: float, left: dict[str, float], right: dict[str, float], *,
             pre_jump: dict[str, float] | None = None, stochastic: bool = False,
             martingale: float = 0.0) -> None:
        """Add the step ``[t_k, t_{k+1}]`` from the integrands at its two ends.

        ``pre_jump``: integrands at ``t_{k+1}⁻`` when the weights jump at ``t_{k+1}``
        (``right`` then holds ``θ⁺``): the trapezoid uses the left limit and the energy
        jump ``E(θ⁺) − E(θ⁻)`` enters the work. ``stochastic``: Itô convention — the weight
        terms (``dEdt_w``, Itô drift) at the left point; ``martingale`` is
        ``<∂E/∂θ(t_k), σ ΔW_k>``.
        """
        end = dict(pre_jump if pre_jump is not None else right)
        if stochastic:
            end["dEdt_w"] = left["dEdt_w"]
        self.add(dt, left, end, E_new=end["E"], ito=left["ito"], martingale=martingale)
        if pre_jump is not None:
            self.jump(right["E"] - pre_jump["E"])

    def jump(self, dE: float) -> None:
        """Record an energy jump caused by a jump of the weights (layers)."""
        self.W += dE
        self.E += dE

    @property
    def dE(self) -> float:
        """``E(t) − E(0)``."""
        return self.E - self.E0

    def residuals(self) -> dict[str, float]:
        """Balance residuals and the terms they are made of."""
        base = self.dE - self.W - self.I - self.M
        nan = float("nan")
        return {
            "dE": self.dE, "work": self.W, "power_int": self.P, "dissipation": self.D,
            "G2_int": self.G, "ito": self.I, "martingale": self.M,
            "chain": base - self.P,
            # EDI forms need a gradient-flow direction (value-aligned heads): NaN otherwise
            "edi": base - self.sign * self.D if self.sign else nan,
            "g2": base - self.sign * self.G if self.sign else nan,
        }


def simpson_balance(t: np.ndarray, E: np.ndarray, integrands: dict[str, np.ndarray], *,
                    sign: float = 0.0) -> dict[str, float]:
    """The balance residuals with composite Simpson quadrature in time.

    ``chain = ΔE − ∫(∂_tE + power) dt`` for any flow, and for a gradient-flow direction
    (``sign = ±1``, value-aligned symmetric heads, deterministic weights) the EDI forms of
    :class:`BalanceAccumulator` with the same quadrature:
    ``edi = ΔE − ∫∂_tE − sign ∫(½|μ'|² + ½|∂E|²) dt`` and
    ``g2 = ΔE − ∫∂_tE − sign ∫G² dt`` (``sign = 0``: only ``chain``).

    Fourth-order quadrature (SciPy's Simpson with Cartwright's correction for an even
    number of samples), for checking 4th-order integrators: with RK4 the three residuals
    vanish at order 4 where the identity is exact (``edi`` on exact gradient flows, ``g2``
    where ``G² = |∂E|²``, docs/theory.md §3); the trapezoid forms stop at order 2. Needs every
    step recorded.
    """
    work = simpson(integrands["dEdt_w"], x=t)
    dE = float(E[-1] - E[0])
    out = {"chain": float(dE - work - simpson(integrands["power"], x=t))}
    if sign:
        diss = simpson(0.5 * (integrands["speed2"] + integrands["slope2"]), x=t)
        out["edi"] = float(dE - work - sign * diss)
        out["g2"] = float(dE - work - sign * simpson(integrands["G2"], x=t))
    return out
