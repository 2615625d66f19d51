"""The attention sums of one particle system split over MPI ranks (targets = sources).

Rank ``r`` holds the tokens ``x^{(r)}`` (its contiguous block,
:func:`wflow.infra.parallel.split_range`) with masses ``m^{(r)}``; the measure is
``μ = Σ_r Σ_{j ∈ r} m_j δ_{x_j}``. :func:`split_sums` returns, on each rank, the sums
of :func:`wflow.kernels.kernel_sums` at that rank's tokens over ALL sources: the same
numbers as the serial call on the whole system, to round-off.

* **Fast summation** (S², exponential kernels): the plan is global (centre of the source
  cloud by the same candidates and Ritter iterations as the serial
  :func:`~wflow.kernels._fastsum.enclosing_centre`, the farthest points found by one
  ``allgather`` per iteration; the degree ``L`` from the global radius; the probe floor
  of :func:`~wflow.kernels._fastsum.estimate_floor` on the same global probe targets), so
  every rank expands the same heads to the same degree as the serial run. Each rank
  computes the harmonic coefficients ``C_lm`` of its own tokens; ONE
  :func:`~wflow.infra.parallel.ordered_sum` of ``H × 4 × 2 × (L+1)(L+2)/2`` numbers
  (all heads, real and imaginary parts, plus the error-estimate scales) gives every rank
  the coefficients of the whole measure, and each rank evaluates them at its own tokens.
  The a-posteriori error estimate uses the global smallest inner sum (one ``allreduce``
  of ``H`` minima), so the fall-back decision is the same on every rank.
* **Direct sums** (any ``d``, kernels without the expansion, heads that fall back): the
  sources travel around a ring (``P − 1`` ``Sendrecv_replace`` of one block), each rank
  adding the sums over the visiting block to its targets' sums. Memory per rank
  ``O(n/P · d)`` for the block and ``O(H n/P d)`` for the sums, never ``O(n)``.

Round-off. The serial and the split sums add the same terms in a different order (the
fast summation: ``P`` partial coefficient sums of the serial code's 8 blocks, added in
rank order; the ring: ``P`` partial sums per target). Each sum of ``N`` terms of one
sign is then within ``2 N ε`` relative of the serial one; signed sums (``Y``) within
``2 N ε Σ|terms|``. Every reduction has a fixed order, so a run with ``P`` ranks gives the
same bits each time, on every rank.
"""

from __future__ import annotations

import logging
import math
from typing import Any

import numpy as np

from ..attention.kinds import get_kind
from ..infra.parallel import ordered_sum

__all__ = ["split_sums", "split_count"]

logger = logging.getLogger(__name__)

_EPS = float(np.finfo(np.float64).eps)


def split_count(comm: Any, n_local: int) -> int:
    """Total number of tokens over the ranks (an exact integer sum)."""
    return int(comm.allreduce(int(n_local)))


def _gmax_vec(comm: Any, vals) -> np.ndarray:
    """Elementwise maximum over the ranks (exact in any order)."""
    from mpi4py import MPI

    v = np.ascontiguousarray(vals, dtype=np.float64)
    out = np.empty_like(v)
    comm.Allreduce(v, out, op=MPI.MAX)
    return out


def _gmin_vec(comm: Any, vals: np.ndarray) -> np.ndarray:
    from mpi4py import MPI

    out = np.empty_like(vals)
    comm.Allreduce(np.ascontiguousarray(vals), out, op=MPI.MIN)  # min is exact: any order
    return out


# ------------------------------------------------------------------ global plan
# Every step below handles all heads in one collective operation (so an evaluation costs
# a fixed number of them, whatever H); each head's numbers are those of the serial code.
def _farthest_split(comm: Any, us: list, cs: list, offset: int, active: list[int]) -> dict:
    """Global farthest source from ``cs[h]`` for each active head: ``h -> (point, distance)``.

    The serial :func:`~wflow.kernels._fastsum._farthest` keeps the first index with the
    largest squared distance; the squared distances are compared here too (recomputed in
    the same IEEE operations), ties going to the lowest global index: the serial point.
    """
    from ._fastsum import _farthest

    mine = {}
    for h in active:
        u, c = us[h], cs[h]
        if u.shape[0]:
            k, _ = _farthest(u, float(c[0]), float(c[1]), float(c[2]))
            d0, d1, d2 = (float(u[k, 0] - c[0]), float(u[k, 1] - c[1]), float(u[k, 2] - c[2]))
            mine[h] = (d0 * d0 + d1 * d1 + d2 * d2, offset + int(k), u[k].copy())
    parts = comm.allgather(mine)
    out = {}
    for h in active:
        best = min((p[h] for p in parts if h in p), key=lambda cc: (-cc[0], cc[1]))
        out[h] = (best[2], math.sqrt(best[0]))
    return out


def _radii_split(comm: Any, us: list, cs: list) -> np.ndarray:
    """``max_j |u_j − c|`` of each (head, centre) pair over all ranks (one reduction)."""
    from ._fastsum import _radius

    loc = [_radius(u, float(c[0]), float(c[1]), float(c[2])) if u.shape[0] else 0.0
           for u, c in zip(us, cs, strict=True)]
    return _gmax_vec(comm, loc)


def _centres_split(comm: Any, us: list, offset: int) -> list[tuple[np.ndarray, float]]:
    """:func:`~wflow.kernels._fastsum.enclosing_centre` of each head's global ``u``."""
    H = len(us)
    lo = np.array([u.min(axis=0) if u.shape[0] else np.full(3, np.inf) for u in us])
    hi = np.array([u.max(axis=0) if u.shape[0] else np.full(3, -np.inf) for u in us])
    box = _gmax_vec(comm, np.concatenate([-lo.ravel(), hi.ravel()]))
    glo, ghi = -box[: 3 * H].reshape(H, 3), box[3 * H:].reshape(H, 3)
    origin = [np.zeros(3) for _ in range(H)]
    mid = [0.5 * (glo[h] + ghi[h]) for h in range(H)]
    r0 = _radii_split(comm, us + us, origin + mid)
    # Ritter's ball: the serial iterations, every head in step, with global farthest points
    first = comm.bcast([u[0].copy() for u in us] if (offset == 0 and us[0].shape[0]) else None,
                       root=0)
    heads = list(range(H))
    q = {h: p for h, (p, _) in _farthest_split(comm, us, first, offset, heads).items()}
    far = _farthest_split(comm, us, [q[h] for h in heads], offset, heads)
    c = [0.5 * (q[h] + far[h][0]) for h in heads]
    rad = [0.5 * far[h][1] for h in heads]
    active = list(heads)
    for _ in range(8):
        if not active:
            break
        far = _farthest_split(comm, us, c, offset, active)
        still = []
        for h in active:
            pt, dist = far[h]
            if dist <= rad[h] * (1.0 + 1e-12):
                continue
            new_rad = 0.5 * (rad[h] + dist)
            c[h] = c[h] + (dist - new_rad) / dist * (pt - c[h])
            rad[h] = new_rad
            still.append(h)
        active = still
    r1 = _radii_split(comm, us, c)
    out = []
    for h in heads:
        cands = [origin[h], mid[h], c[h]]
        radii = [float(r0[h]), float(r0[H + h]), float(r1[h])]
        best = int(np.argmin(radii))
        out.append((cands[best], radii[best]))
    return out


def _floors_split(comm: Any, x: np.ndarray, m: np.ndarray, us: list, cs: list, beta: float,
                  n: int, offset: int, heads: list[int], nprobe: int = 16) -> dict:
    """:func:`~wflow.kernels._fastsum.estimate_floor` of each listed head, whole system."""
    from ._fastsum import ROUNDOFF_KAPPA, _probe_min

    if n == 0 or not heads:
        return {h: 0.0 for h in heads}
    M = x.shape[0]
    qabs = np.abs(m) * np.maximum(1.0, np.max(np.abs(x), axis=1)) if M else np.zeros(0)
    ws = {h: us[h] - cs[h] for h in heads}
    part = []
    for h in heads:
        r = np.sqrt(np.einsum("ij,ij->i", ws[h], ws[h]))
        part += [[float(np.sum(qabs * np.exp(beta * r)))], m @ ws[h] if M else np.zeros(3)]
    tot = ordered_sum(comm, np.concatenate(part)).reshape(len(heads), 4)
    loc = {}
    if M:
        for a, h in enumerate(heads):
            k = int(np.argmin(x @ tot[a, 1:]))
            loc[h] = (float(x[k] @ tot[a, 1:]), offset + k)
    parts = comm.allgather(loc)
    base = np.linspace(0, n - 1, min(nprobe, n)).astype(np.int64)
    idxs, pts = {}, []
    for h in heads:
        arg = min((p[h] for p in parts if h in p), key=lambda cc: (cc[0], cc[1]))
        idx = np.unique(np.concatenate([base, [arg[1]]]))
        mine = (idx >= offset) & (idx < offset + M)
        pt = np.zeros((idx.size, 3))
        pt[mine] = x[idx[mine] - offset]
        idxs[h] = idx
        pts.append(pt)
    probes = ordered_sum(comm, np.concatenate(pts))  # each probe held by one rank: a copy
    mm = np.ascontiguousarray(m, dtype=np.float64)
    sums, pos = [], 0
    for h in heads:
        k = idxs[h].size
        pr = probes[pos:pos + k]
        pos += k
        bx = np.ascontiguousarray(beta * pr / np.linalg.norm(pr, axis=1, keepdims=True))
        wT = np.ascontiguousarray(ws[h].T)
        sums.append([_probe_min(bx[p:p + 1], wT, mm) if M else 0.0 for p in range(k)])
    allsums = ordered_sum(comm, np.concatenate(sums))
    out, pos = {}, 0
    for a, h in enumerate(heads):
        k = idxs[h].size
        gmin = float(np.min(allsums[pos:pos + k]))
        pos += k
        out[h] = math.inf if not gmin > 0 else ROUNDOFF_KAPPA * _EPS * float(tot[a, 0]) / gmin
    return out


def _plan(comm, x, m, A, spec, H, beta, backend, tol, n, offset, dev):
    """:func:`wflow.kernels.plan_kernel` for the whole system: its rules on global numbers.

    Returns ``(KernelPlan, centres)`` (the centre of each head's source cloud, where the
    plan asked for it).
    """
    from . import _fastsum as fs
    from .plan import plan_rules

    us = [x @ A[h].T for h in range(H)]
    cr: list = []

    def heads() -> list:
        cr.extend(_centres_split(comm, us, offset))
        return [(beta * R, fs.choose_degree(beta * R, tol)) for _, R in cr]

    def floors(hs: list[int]) -> dict:
        return _floors_split(comm, x, m, us, [c for c, _ in cr], beta, n, offset, hs)

    plan = plan_rules(spec, H=H, d=x.shape[1], M=n, N=n, backend=backend, tol=tol,
                      dev=lambda: dev, heads=heads, floors=floors)
    return plan, [c for c, _ in cr]


# ------------------------------------------------------------------ evaluation
def _ring_sums(comm, x, m, Q, K, beta, kind, backend, potential, scores, values=None,
               dtype="float64"):
    """Direct sums over all ranks' sources, the source blocks passed around a ring.

    Each visiting block is summed by :func:`wflow.kernels.kernel_sums` (by tiles at a
    model's width, in ``dtype``, values of rank ``r`` with ``values``); its float64 sums
    (unshifted) are added to this rank's.
    """
    from .sums import kernel_sums

    P, rank = comm.Get_size(), comm.Get_rank()
    M, d = x.shape
    H = Q.shape[0]
    counts = comm.allgather(M)
    cap = max(counts)
    bx = np.zeros((cap, d))
    bm = np.zeros(cap)
    bx[:M] = x
    bm[:M] = m
    spec = get_kind(kind)
    Z = np.zeros((H, M))
    Y = np.zeros((H, M, d if values is None else values.shape[1]))
    Phi = np.zeros((H, M)) if (potential and not spec.exponential) else None
    S = np.zeros((H, M)) if scores else None
    src = rank
    for step in range(P):
        cnt = counts[src]
        if cnt and M:
            s = kernel_sums(x, bx[:cnt], bm[:cnt], Q, K, beta=beta, kind=kind,
                            potential=Phi is not None, scores=scores, backend=backend,
                            values=values, dtype=dtype)
            Z += s.Z
            Y += s.Y
            if Phi is not None:
                Phi += s.Phi
            if S is not None:
                S += s.S
        if step < P - 1:
            comm.Sendrecv_replace(bx, dest=(rank + 1) % P, source=(rank - 1) % P)
            comm.Sendrecv_replace(bm, dest=(rank + 1) % P, source=(rank - 1) % P)
            src = (src - 1) % P
    if potential and spec.exponential:
        Phi = Z
    return Z, Y, Phi, S


def split_sums(x: np.ndarray, m: np.ndarray, Q: np.ndarray, K: np.ndarray, *, comm: Any,
               beta: float, kind: str, potential: bool = False, scores: bool = False,
               backend: str = "auto", tol: float | None = None,
               values: np.ndarray | None = None, dtype: str = "float64"):
    """:func:`wflow.kernels.kernel_sums` with targets = sources split over the ranks of ``comm``.

    Parameters
    ----------
    x : (M_r, d) array
        This rank's tokens (targets and sources); the system is the union over ranks in
        rank order (rank ``r`` holding the global indices ``offset_r … offset_r + M_r``).
    m : (M_r,) array
        Their masses.
    Q, K : (H, k, d) arrays
        Heads (the same on every rank).
    comm : mpi4py communicator
    beta, kind, potential, scores, backend, tol, values, dtype
        As in :func:`wflow.kernels.kernel_sums` (``dtype="float32"``: the ring of direct
        sums, each block by tiles in float32).

    Returns
    -------
    KernelSums
        Sums at this rank's tokens over all sources, ``.info`` naming the back-end (with
        ``"split over P ranks"`` in the reason). Collective: every rank must call it.
    """
    from . import _fastsum as fs
    from .direct import threads
    from .results import KernelInfo, KernelSums
    from .sums import _require_float32, err_float32
    from .validation import DEFAULT_TOL, _scores_A, _validate_sums, max_rownorm, raise_bound

    tol = DEFAULT_TOL if tol is None else tol
    x, _, m, Q, K, spec, values, dtype = _validate_sums(x, x, m, Q, K, beta, kind, backend,
                                                        tol, values, dtype)
    P = comm.Get_size()
    M, d = x.shape
    H = Q.shape[0]
    counts = comm.allgather(M)
    n = int(sum(counts))
    offset = int(sum(counts[: comm.Get_rank()]))
    expo = spec.exponential
    nx = np.sqrt(np.einsum("ij,ij->i", x, x))
    # the score bound and the distance of the targets from the sphere: one reduction
    bq = bk = 0.0
    if expo and n and H and spec.compiled and M:
        bq, bk = max_rownorm(Q, x), max_rownorm(K, x)
    bq, bk, dev = _gmax_vec(comm, [bq, bk, float(np.max(np.abs(nx - 1.0))) if M else 0.0])
    if expo and n and H and spec.compiled:
        raise_bound(beta * bq * bk)
    triples = n * n * H
    err_direct = max(n, 1) * _EPS
    where = f"; split over {P} ranks"
    if dtype == "float32":
        _require_float32(backend, spec)
        Z, Y, Phi, S = _ring_sums(comm, x, m, Q, K, beta, kind, "direct", potential, scores,
                                  values, dtype)
        return KernelSums(Z, Y, Phi, S, KernelInfo(
            "direct", backend, "float32 requested: by tiles in float32" + where
            + " (sources passed around a ring)", err_float32(beta * bq * bk, n), tol, (),
            threads(), triples, "float32"))
    A = _scores_A(Q, K)
    plan, centres = _plan(comm, x, m, A, spec, H, beta, backend, tol, n, offset, float(dev))
    if plan.backend in ("numpy", "direct"):
        Z, Y, Phi, S = _ring_sums(comm, x, m, Q, K, beta, kind, plan.backend, potential, scores,
                                  values)
        return KernelSums(Z, Y, Phi, S, KernelInfo(
            plan.backend, backend, plan.reason + where + " (sources passed around a ring)",
            err_direct, tol, (), threads() if plan.backend == "direct" else 1, triples))
    # --- fast summation: local coefficients, one ordered sum, local evaluation
    xhat = x / nx[:, None] if M else x
    xT = np.ascontiguousarray(xhat.T)
    q = np.ascontiguousarray(np.vstack([m[None, :], (m[:, None] * x).T]))  # (4, M)
    qabs = np.abs(q).max(axis=0) if M else np.zeros(0)
    heads = [h for h in range(H) if plan.fast_heads[h]]
    tabs, parts, geo = {}, [], {}
    for h in heads:
        L = plan.degree[h]
        c = centres[h]
        u = x @ A[h].T
        w = u - c
        r = np.sqrt(np.einsum("ij,ij->i", w, w))
        uhat = np.where(r[:, None] > 0, w / np.where(r > 0, r, 1.0)[:, None], [0.0, 0.0, 1.0])
        zj = beta * r
        tabs[h] = fs._tables(L)
        off = tabs[h][0]
        Pn = int(off[L + 1])
        Cr = np.empty((fs._NBLK, 4, Pn))
        Ci = np.empty((fs._NBLK, 4, Pn))
        if M:
            fs._coefficients(np.ascontiguousarray(uhat.T), np.ascontiguousarray(zj), q, L,
                             *tabs[h], fs._NBLK, Cr, Ci)
        else:
            Cr[:] = 0.0
            Ci[:] = 0.0
        parts += [Cr.sum(axis=0).ravel(), Ci.sum(axis=0).ravel(),
                  [float(np.sum(qabs * np.exp(zj)))]]
        geo[h] = Pn
    parts.append([float(np.sum(qabs))])
    tot = ordered_sum(comm, np.concatenate(parts))  # THE reduction of this evaluation
    Z = np.zeros((H, M))
    Y = np.zeros((H, M, 3))
    S = np.zeros((H, M)) if scores else None
    degree = np.full(H, -1, dtype=np.int64)
    inner_min = np.full(H, np.inf)
    outs, pos = {}, 0
    sum_qabs = float(tot[-1])
    scales = {}
    for h in heads:
        L, Pn = plan.degree[h], geo[h]
        Cr = tot[pos:pos + 4 * Pn].reshape(4, Pn)
        Ci = tot[pos + 4 * Pn:pos + 8 * Pn].reshape(4, Pn)
        scales[h] = float(tot[pos + 8 * Pn])
        pos += 8 * Pn + 1
        eps_m = np.full(Pn, 2.0)
        eps_m[: L + 1] = 1.0
        Cr = 4.0 * math.pi * eps_m * Cr
        Ci = 4.0 * math.pi * eps_m * Ci
        out = np.empty((4, M))
        if M:
            fs._evaluate(xT, L, *tabs[h], np.ascontiguousarray(Cr), np.ascontiguousarray(Ci), out)
            inner_min[h] = float(np.min(out[0]))
        outs[h] = out
    gmin = _gmin_vec(comm, inner_min)  # the smallest inner sum of each head, all ranks
    err = np.full(H, np.inf)
    for h in heads:
        L, zR = plan.degree[h], plan.radius[h]
        tail = fs.bessel_tail(zR, L)
        abs_err = tail * sum_qabs + fs.ROUNDOFF_KAPPA * _EPS * scales[h]
        zmin = float(gmin[h])
        err[h] = np.inf if not zmin > 0 else abs_err / zmin + zR * dev * math.exp(zR * dev)
        degree[h] = L
        out = outs[h]
        fac = np.exp(beta * (x @ centres[h]))
        Z[h] = fac * out[0]
        Y[h] = (fac * out[1:]).T
        if scores:
            S[h] = beta * np.einsum("mi,ij,mj->m", x, A[h], Y[h])
    from .sums import _fast_fallback

    name, reason, err_max, degs = _fast_fallback(
        Z, Y, S, err <= tol, err, degree, plan.fast_heads,
        plan.reason + where + " (one ordered sum of the coefficients)", tol, err_direct,
        lambda idx: _ring_sums(comm, x, m, Q[idx], K[idx], beta, kind, "direct", False, scores))
    if values is not None:  # Σ k W y = W Σ k y (d = 3: the full sums cost the same)
        Y = np.matmul(Y, np.swapaxes(values, 1, 2))
    return KernelSums(Z, Y, Z if potential else None, S,
                      KernelInfo(name, backend, reason, err_max, tol, degs, threads(), triples))
