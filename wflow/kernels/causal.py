r"""Causal attention sums: the decoder's masked, biased sums over tokens in order (THEORY §9).

For tokens ``x_0, …, x_{n−1}`` in order (targets = sources), masses ``m_j``, heads
``(Q_h, K_h)``, scores ``s^h_ij = β⟨Q_h x_i, K_h x_j⟩``, a positional bias ``b(i, j)``
(:mod:`wflow.attention.mask`) and the logit ``ℓ^h_ij = s^h_ij + b(i, j)``::

    Z_h(i) = Σ_{j ≤ i} m_j k(ℓ^h_ij)               (j < i with a strict mask)
    Y_h(i) = Σ_{j ≤ i} m_j k(ℓ^h_ij) x_j           (d-vector; f_h = V_h Y_h [/ Z_h])
    Φ_h(i) = Σ_{j ≤ i} m_j Φ(ℓ^h_ij)               (optional; Z for exponential kernels)
    S_h(i) = Σ_{j ≤ i} m_j k(ℓ^h_ij) ℓ^h_ij        (optional)

:func:`causal_sums` returns them as a :class:`~wflow.kernels.KernelSums`, the type of
:func:`wflow.kernels.kernel_sums`, so a solver switches on the mask by calling one or the
other; with ``mask=None`` it IS :func:`~wflow.kernels.kernel_sums` (or
:func:`~wflow.kernels.split.split_sums` over ranks), bit for bit.

Back-ends (``backend=``):

``"numpy"``
    Blocked NumPy reference: rows in blocks of ``block`` targets against the sources
    before the block's end only, the mask and bias applied in the block (memory
    ``O(block · n)``, never ``(n, n)``).
``"direct"``
    Compiled (:mod:`wflow.kernels._causal_numba`): each row sums its ``lim_i = i + 1``
    (``i``) sources only, the rows grouped into work items of equal pair counts so the
    triangle is balanced over the threads; ``d ≤ 3`` unrolled, other widths chunked,
    wide heads (score width + value width ``w + r ≥`` :data:`~wflow.kernels.direct.WIDE`,
    ``d > 3``) by BLAS score blocks of ``(rows, lim)`` (the triangle plus a strip of
    ``rows/n`` of it) and a compiled masked exponential. With ``values`` (rank ``r``) the
    chunked rows and the BLAS blocks sum ``W_h y_j`` at width ``r``. A callable bias is
    evaluated block by block (``O(block · n)`` memory).
``"fastsum"``
    S² (``d = 3``), ``k = e^s``, no bias or ALiBi: the harmonic expansion of
    :mod:`wflow.kernels._fastsum` by prefix sums of the coefficients ``C_lm`` over blocks of
    :data:`FAST_BLOCK` tokens (``O(n K)`` for ``K = (L+1)(L+2)/2`` coefficients, memory
    ``O(K)`` per block in flight), with the pairs inside each block summed directly and
    ALiBi's ``e^{−slope(i−j)} = e^{−slope(i−bB)} e^{−slope(bB−j)}`` rescaled per block
    (every factor ``≤ 1``: no overflow). A-posteriori estimate per head as the non-causal
    fast sum; heads above ``tol`` fall back to the direct sums.
``"auto"``
    ``"fastsum"`` where it applies and its model cost is below half the direct sum's,
    else ``"direct"`` (``"numpy"`` for kinds without compiled code).

Over MPI ranks (``comm``: each rank holds a contiguous run of the tokens, in rank order):
the fast sum computes each rank's coefficient sums (a coefficients-only pass, which keeps
every block's coefficients for the full pass when they fit in
:data:`~wflow.kernels._causal_fast.KEEP_BYTES`: one coefficient pass, as in the serial
run), gathers them and forms, in rank order, the exclusive scan up to the rank's first
block (the prefix of every earlier rank); tokens of an earlier rank inside that block travel as a
halo of ``< B`` tokens and are summed directly, as in the serial run. The direct sums pass
source runs down a pipeline (rank ``q`` to ``q + 1``), each rank adding only the runs of
ranks ``q ≤ r`` (the fully masked runs above the diagonal are neither sent nor summed).
Round-off: the serial and split runs add the same terms in another order (``2 n ε``
relative of the positive sums, see :mod:`wflow.kernels.split`).
"""

from __future__ import annotations

import logging
import math
from typing import Any

import numpy as np

from ..attention.kinds import AttentionKind
from ..attention.mask import ALiBi, Bias, Causal, check_mask_bias
from ._causal_fast import FAST_BLOCK, _fast_causal
from .direct import WIDE, _pad3, _score_factors, aligned, aligned_empty, team, threads
from .plan import (
    _COST_DIRECT3,
    _COST_FAST,
    _COST_FAST_FIXED,
    _COST_FAST_POINT,
    FASTSUM_MIN_TRIPLES,
)
from .reference import BLOCK_ELEMS
from .results import KernelInfo, KernelSums
from .validation import (
    DEFAULT_TOL,
    _max_norm,
    _scores_A,
    _validate,
    _validate_values,
    raise_bound,
)

__all__ = ["causal_sums", "plan_causal", "FAST_BLOCK"]

logger = logging.getLogger(__name__)

_EPS = float(np.finfo(np.float64).eps)
# ----------------------------------------------------------------------- helpers
def _bias_mode(bias: ALiBi | Bias | None) -> tuple[int, float]:
    if bias is None:
        return 0, 0.0
    if isinstance(bias, ALiBi):
        return 1, float(bias.slope)
    return 2, 0.0


def _limits(M: int, N: int, dpos: int, shift: int) -> np.ndarray:
    """Sources per target row: ``clip(i + dpos + shift, 0, N)`` (``dpos`` = target − source)."""
    return np.clip(np.arange(M, dtype=np.int64) + (dpos + shift), 0, N).astype(np.int64)


def _items(lim: np.ndarray, nitems: int) -> np.ndarray:
    """Row boundaries of ``≤ nitems`` contiguous work items of (nearly) equal pair counts."""
    M = lim.shape[0]
    if M == 0:
        return np.zeros(1, dtype=np.int64)
    work = np.cumsum(lim + 16, dtype=np.float64)  # 16: per-row overhead, in pairs
    cuts = np.searchsorted(work, np.linspace(0.0, work[-1], nitems + 1)[1:-1], side="left") + 1
    return np.unique(np.concatenate([[0], np.clip(cuts, 0, M), [M]])).astype(np.int64)


def _pos_row(slope: float, N: int) -> np.ndarray:
    """``slope · j``, ``j < N``, as a ``(1, N)`` row (the ALiBi term of the compiled loops)."""
    return aligned(slope * np.arange(N, dtype=np.float64)[None, :])


def _bias_block(bias: Bias, i0: int, i1: int, ncol: int, tpos: int, spos: int) -> np.ndarray:
    gi = np.arange(tpos + i0, tpos + i1, dtype=np.int64)[:, None]
    gj = np.arange(spos, spos + ncol, dtype=np.int64)[None, :]
    return np.ascontiguousarray(bias(gi, gj), dtype=np.float64)


def _bias_bound(b: np.ndarray, lim: np.ndarray) -> float:
    """Largest bias on the allowed entries of a block (``−inf`` if none)."""
    if b.size == 0:
        return -math.inf
    cols = np.arange(b.shape[1])[None, :] < lim[:, None]
    return float(np.max(np.where(cols, b, -np.inf), initial=-np.inf))


# ----------------------------------------------------------------------- NumPy
def _numpy_causal(xt, ys, m, Q, K, beta, spec: AttentionKind, mask: Causal, bias, tpos, spos,
                  potential, scores, block, values=None):
    """The blocked NumPy reference of the causal sums (module docstring).

    ``values`` ``(H, r, d)``: each head accumulates ``W_h y_j`` (width ``r``), formed once
    per head, instead of ``y_j`` (width ``d``).
    """
    H = Q.shape[0]
    M, d = xt.shape
    vals = None if values is None else np.einsum("hrd,nd->hnr", values, ys)
    w = d if values is None else values.shape[1]
    N = ys.shape[0]
    kern = spec.kernel
    expo = kern.exponential
    lim = _limits(M, N, tpos - spos, mask.shift)
    qx = np.einsum("hkd,md->hmk", Q, xt)
    ky = np.einsum("hkd,nd->hnk", K, ys)
    bound = beta * _max_norm(qx) * _max_norm(ky)
    if expo and not isinstance(bias, Bias):
        raise_bound(bound)  # ALiBi ≤ 0 under the mask
    Z = np.zeros((H, M))
    Y = np.zeros((H, M, w))
    Phi = np.zeros((H, M)) if (potential and not expo) else None
    S = np.zeros((H, M)) if scores else None
    B = max(1, min(max(M, 1), (BLOCK_ELEMS // max(N, 1)) if block is None else int(block)))
    for i0 in range(0, M, B):
        i1 = min(M, i0 + B)
        nl = int(lim[i1 - 1])
        if nl == 0:
            continue
        allowed = np.arange(nl)[None, :] < lim[i0:i1, None]
        if bias is None:
            bb = 0.0
        else:
            bb = bias(np.arange(tpos + i0, tpos + i1)[:, None], np.arange(spos, spos + nl)[None, :])
            if expo and isinstance(bias, Bias):
                raise_bound(bound + max(0.0, _bias_bound(bb, lim[i0:i1])))
        for h in range(H):
            s = (beta * qx[h, i0:i1]) @ ky[h, :nl].T + bb
            s = np.where(allowed, s, 0.0)
            kmat = kern.dphi(s) * allowed
            if Phi is not None:
                Phi[h, i0:i1] = (kern.phi_of(s, kmat) * allowed) @ m[:nl]
            if S is not None:
                S[h, i0:i1] = (kmat * s) @ m[:nl]
            kmat *= m[:nl]
            Z[h, i0:i1] = kmat.sum(axis=1)
            Y[h, i0:i1] = kmat @ (ys[:nl] if vals is None else vals[h, :nl])
    if potential and expo:
        Phi = Z
    return Z, Y, Phi, S


# ---------------------------------------------------------------------- direct
def _direct_causal(xt, ys, m, Q, K, beta, spec: AttentionKind, mask: Causal, bias, tpos, spos,
                   potential, scores, values=None):
    """Compiled masked sums (the lower triangle only; module docstring).

    ``values`` ``(H, r, d)``: ``Y`` ``(H, M, r)``, each head summing ``vy_j = W_h y_j``
    formed once per call (``O(w + r)`` a pair: the generic rows and the BLAS blocks;
    ``H r N`` doubles held, the sources' ``d N`` without ``values``);
    at ``d ≤ 3`` the fused rows sum ``y_j`` and ``W_h`` is applied once per target
    (``Σ k W y = W Σ k y``: the full sums cost the same), as in
    :func:`wflow.kernels.kernel_sums`. ``None``: ``Y`` ``(H, M, d)`` of the sources.
    """
    from . import _causal_numba as cn

    H = Q.shape[0]
    M, d = xt.shape
    N = ys.shape[0]
    r = d if values is None else values.shape[1]
    kcode = spec.require_compiled("backend='direct'")
    expo = spec.exponential
    lim = _limits(M, N, tpos - spos, mask.shift)
    Z = np.zeros((H, M))
    Y = np.zeros((H, M, r))
    P = np.zeros((H, M))
    S = np.zeros((H, M))
    pairs = int(lim.sum())
    if M and N and H and pairs:
        mode, slope = _bias_mode(bias)
        qx, ky = _score_factors(xt, ys, Q, K, beta)
        w = qx.shape[2]
        bound = beta * _max_norm(np.matmul(xt, np.swapaxes(Q, 1, 2))) * \
            _max_norm(np.matmul(ys, np.swapaxes(K, 1, 2)))
        if expo and mode != 2:
            raise_bound(bound)
        if w + r >= WIDE and d > 3:
            vy = [ys] * H if values is None else [aligned(ys @ W.T) for W in values]
            _blas_causal(qx, ky, vy, m, lim, kcode, mode, slope, bias, tpos, spos, expo, bound,
                         Z, Y, P, S)
        else:
            if d <= 3:
                qx3, ky3, my = _pad3(qx, ky, m, ys)
                Y3 = np.zeros((H, M, 3))
                args = (qx3, ky3, my, aligned(m))
                kern = cn.causal_rows3
            else:
                Y3 = Y
                # (1, d, N) shared sources, or (H, r, N) each head's W_h y_j
                vyT = aligned(ys.T)[None] if values is None else aligned(values @ ys.T)
                args = (np.ascontiguousarray(qx), aligned(np.swapaxes(ky, 1, 2)), vyT,
                        aligned(m))
                kern = cn.causal_rows_generic
            nitems = max(1, min(M, 8 * threads()))
            if mode != 2:
                with team(pairs * H * (1 if d <= 3 else (w + r) / 4)):
                    kern(*args, lim, _items(lim, nitems), kcode, mode, slope, tpos - spos,
                         _pos_row(slope, N), Z, Y3, P, S)
            else:
                RB = max(1, min(M, BLOCK_ELEMS // max(N, 1)))
                for i0 in range(0, M, RB):
                    i1 = min(M, i0 + RB)
                    lb = np.ascontiguousarray(lim[i0:i1])
                    nl = int(lb[-1])
                    if nl == 0:
                        continue
                    bb = _bias_block(bias, i0, i1, nl, tpos, spos)
                    if expo:
                        raise_bound(bound + max(0.0, _bias_bound(bb, lb)))
                    qb = np.ascontiguousarray(args[0][:, i0:i1])
                    Zb, Pb, Sb = (np.zeros((H, i1 - i0)) for _ in range(3))
                    Yb = np.zeros((H, i1 - i0, Y3.shape[2]))
                    with team(int(lb.sum()) * H):
                        kern(qb, *args[1:], lb, _items(lb, nitems), kcode, 2, 0.0, 0, bb,
                             Zb, Yb, Pb, Sb)
                    Z[:, i0:i1], Y3[:, i0:i1], P[:, i0:i1], S[:, i0:i1] = Zb, Yb, Pb, Sb
            if d <= 3 and values is not None:  # Σ k W y = W Σ k y, once per target
                Y[:] = np.matmul(Y3[:, :, :d], np.swapaxes(values, 1, 2))
            elif d < 3:
                Y[:] = Y3[:, :, :d]
            elif d == 3:
                Y[:] = Y3
    Phi = (Z if expo else P) if potential else None
    return Z, Y, Phi, (S if scores else None)


def _blas_causal(qx, ky, vy, m, lim, kcode, mode, slope, bias, tpos, spos, expo, bound,
                 Z, Y, P, S):
    """Wide heads: score blocks ``(rows, lim)`` and ``Y`` by BLAS, masked exponential compiled.

    ``vy``: per head the ``(N, r)`` values summed (the sources, or ``W_h y_j``): the
    block's ``Y = E vy`` is a ``(rows, lim) × (lim, r)`` GEMM.
    """
    from . import _causal_numba as cn

    H, M, _ = qx.shape
    N = vy[0].shape[0]
    # rows per block: a (rows, N) block in cache, and at most 1/32 of the rows (the strip
    # computed above the diagonal is rows/M of the triangle: ≤ 3 %)
    B = max(1, min(M, (1 << 21) // max(N, 1), max(16, -(-M // 32))))
    kyT = [np.ascontiguousarray(ky[h].T) for h in range(H)]
    m = aligned(m)
    dpos = tpos - spos
    pos = _pos_row(slope, N)

    def block(job: tuple[int, int], buf: np.ndarray) -> None:
        h, i0 = job
        i1 = min(M, i0 + B)
        lb = lim[i0:i1]
        nl = int(lb[-1])
        if nl == 0:
            return
        sc = buf[: (i1 - i0) * nl].reshape(i1 - i0, nl)
        np.matmul(qx[h, i0:i1], kyT[h][:, :nl], out=sc)
        bb = pos
        if mode == 2:
            bb = _bias_block(bias, i0, i1, nl, tpos, spos)
            if expo:
                raise_bound(bound + max(0.0, _bias_bound(bb, lb)))
        cn.masked_weigh_block(sc, m[:nl], lb, kcode, mode, slope, dpos + i0, bb,
                              Z[h, i0:i1], P[h, i0:i1], S[h, i0:i1])
        np.matmul(sc, vy[h][:nl], out=Y[h, i0:i1])

    # largest blocks first (the rows near the end carry the most pairs): dynamic balance
    jobs = sorted(((h, i0) for h in range(H) for i0 in range(0, M, B)),
                  key=lambda jb: -int(lim[min(M, jb[1] + B) - 1]))
    nt = min(threads(), len(jobs))
    try:
        from threadpoolctl import threadpool_limits
    except ImportError:  # pragma: no cover - optional
        threadpool_limits = None
    from .direct import _serial

    if nt <= 1 or threadpool_limits is None or _serial(int(lim.sum()) * H * qx.shape[2]):
        buf = aligned_empty((B * N,))
        for job in jobs:
            block(job, buf)
        return
    import threading
    from concurrent.futures import ThreadPoolExecutor

    local = threading.local()

    def run(job: tuple[int, int]) -> None:
        if not hasattr(local, "buf"):
            local.buf = aligned_empty((B * N,))
        block(job, local.buf)

    with threadpool_limits(1, user_api="blas"), ThreadPoolExecutor(nt) as ex:
        list(ex.map(run, jobs))


# --------------------------------------------------------------------- fast sum
def plan_causal(spec: AttentionKind, mask: Causal, bias, *, H: int, d: int, n: int,
                backend: str, tol: float, scores: bool, dev, heads) -> tuple[str, str, list]:
    """The back-end of :func:`causal_sums`: ``(backend, reason, [(β R', L) per head])``.

    ``dev()``: ``max ||x| − 1|``; ``heads()``: ``(centre, β R', L or None)`` per head (asked
    only when the fast sum applies). ``auto`` takes the fast sum for the heads where its
    model cost (both sides of the expansion plus the pairs inside the blocks) is below
    half of the causal direct sum's ``n²/2`` pairs.
    """
    if backend == "numpy":
        return "numpy", "requested", []
    if not spec.compiled:
        if backend != "auto":
            spec.require_compiled(f"backend={backend!r}")
        return "numpy", f"kind {spec.name!r} has no compiled kernel", []
    if backend == "direct":
        return "direct", "requested", []
    why = None
    if d != 3:
        why = f"fast summation needs d = 3 (S²), got d = {d}"
    elif not spec.fastsum:
        why = f"fast summation needs the exponential kernel, got {spec.label}"
    elif isinstance(bias, Bias):
        why = "a callable bias b(i, j) does not factorise: summed directly"
    elif scores and isinstance(bias, ALiBi) and bias.slope > 0:
        why = "the score moment with a bias is summed directly"
    else:
        dv = dev()
        if dv > 1e-6:
            why = f"targets are not on the unit sphere (max ||x| - 1| = {dv:.1e})"
    pairs = n * (n + 1) // 2 * H
    if why is None and backend == "auto" and pairs < FASTSUM_MIN_TRIPLES:
        why = f"small problem (causal pairs·H = {pairs} < {FASTSUM_MIN_TRIPLES})"
    if why is not None:
        if backend == "fastsum":
            raise ValueError(f"backend='fastsum' not applicable: {why}")
        return "direct", why, []
    hs = heads()
    fast = []
    for _, _zR, L in hs:
        if L is None:
            fast.append(False)
            continue
        K = (L + 1) * (L + 2) / 2
        c_fast = (2 * n * (_COST_FAST_POINT + _COST_FAST * K) + _COST_FAST_FIXED
                  + _COST_DIRECT3 * n * FAST_BLOCK / 2)
        fast.append(backend == "fastsum" or c_fast < 0.5 * _COST_DIRECT3 * n * n / 2)
    if not any(fast):
        if backend == "fastsum":
            raise ValueError("backend='fastsum' not applicable: the expansion cannot meet "
                             f"tol={tol:g} (β R' up to {max(h[1] for h in hs):.3g})")
        return "direct", "fast summation would not pay off", [h + (False,) for h in hs]
    reason = "requested" if backend == "fastsum" else "fast summation predicted cheaper"
    return "fastsum", reason, [h + (f,) for h, f in zip(hs, fast, strict=True)]


# ------------------------------------------------------------------------- ring
def _ring_causal(comm, x, m, Q, K, beta, spec, mask, bias, offset, backend, potential, scores,
                 block, values=None):
    """Direct sums over ranks: runs of sources passed down a pipeline, masked runs skipped.

    ``values``: ``Y`` of width ``r``, each run's ``W_h y_j`` formed by the receiving rank
    (both back-ends: :func:`_numpy_causal`, :func:`_direct_causal`).
    """
    P, rank = comm.Get_size(), comm.Get_rank()
    M, d = x.shape
    fn = _numpy_causal if backend == "numpy" else _direct_causal
    extra = {"values": values, **({"block": block} if backend == "numpy" else {})}
    Z, Y, Phi, S = fn(x, x, m, Q, K, beta, spec, mask, bias, offset, offset, potential, scores,
                      **extra)
    Z, Y = Z.copy(), Y.copy()
    Phi = None if Phi is None else (Z if (potential and spec.exponential) else Phi.copy())
    held = (offset, x, m)
    for step in range(1, P):
        # rank r sends the run it holds (of rank r - step + 1) to r + 1 while that one needs it
        if rank + 1 < P and rank >= step - 1:
            comm.send(held, dest=rank + 1, tag=step)
        if rank >= step:
            held = comm.recv(source=rank - 1, tag=step)
            so, sx, sm = held
            if sx.shape[0] and M:
                z, y, ph, s = fn(x, sx, sm, Q, K, beta, spec, mask, bias, offset, so,
                                 potential, scores, **extra)
                Z += z
                Y += y
                if ph is not None and not spec.exponential:
                    Phi += ph
                if S is not None:
                    S += s
    if potential and spec.exponential:
        Phi = Z
    return Z, Y, Phi, S


# ----------------------------------------------------------------------- public
def causal_sums(
    x: np.ndarray,
    m: np.ndarray,
    Q: np.ndarray,
    K: np.ndarray,
    *,
    beta: float,
    kind: str | AttentionKind,
    mask: Causal | str | None = "causal",
    bias: ALiBi | Bias | Any = None,
    potential: bool = False,
    scores: bool = False,
    block: int | None = None,
    backend: str = "auto",
    tol: float = DEFAULT_TOL,
    comm: Any = None,
    values: np.ndarray | None = None,
) -> KernelSums:
    r"""The causal attention sums of tokens in order (module docstring).

    .. math::

        Z_h(i) = \sum_{j \le i} m_j\, k\big(s_h(x_i, x_j) + b(i, j)\big),\quad
        Y_h(i) = \sum_{j \le i} m_j\, k\big(s_h(x_i, x_j) + b(i, j)\big)\, x_j,

    so that the softmax head output is ``f_h(x_i) = V_h Y_h(i) / Z_h(i)`` (THEORY §9).

    Parameters
    ----------
    x : (n, d) array
        Tokens in order (targets and sources; position = row index, plus the rank's
        offset under ``comm``).
    m : (n,) array
        Token masses (``1/n`` for the empirical measure).
    Q, K : (H, k, d) arrays
        Query and key matrices.
    beta : float
        Inverse temperature ``β > 0``.
    kind : str or AttentionKind
        A registered attention kind (kernel ``k``).
    mask : Causal, "causal", "causal_strict", "none" or None
        ``None``/``"none"``: the non-causal sums of :func:`wflow.kernels.kernel_sums`
        (bit for bit; :func:`wflow.kernels.split.split_sums` under ``comm``).
    bias : ALiBi, Bias, callable, alibi table or None
        Positional bias ``b(i, j)`` (:func:`wflow.attention.mask.get_bias`); needs the mask.
    potential, scores : bool
        Also return ``Φ_h`` resp. ``S_h`` (with the logit ``ℓ``).
    block : int, optional
        Target rows per block of the ``"numpy"`` back-end.
    backend : {"auto", "numpy", "direct", "fastsum"}
    tol : float
        Relative tolerance of the fast sum (per target, relative to ``Z_i``).
    comm : mpi4py communicator, optional
        Tokens split over its ranks in rank order (collective: every rank calls).
    values : (H, r, d) array, optional
        Value factors ``W_h``: ``Y_h(i) = Σ_{j ≤ i} m_j k(·) W_h x_j``, shape ``(H, n, r)``
        (heads of value rank ``r``, as :func:`wflow.kernels.kernel_sums`). The NumPy and
        the compiled direct sums (serial or over ranks) accumulate ``W_h x_j`` at width
        ``r`` (``O(n² (w + r))`` a head, ``w = min(k, d)``); at ``d ≤ 3`` (fused rows, the
        fast sum) the full-width sums cost the same and ``W_h`` is applied once per target
        (``Σ k W y = W Σ k y``), as ``.info.reason`` says.

    Returns
    -------
    KernelSums
        ``Z (H, n)``, ``Y (H, n, d)`` (``(H, n, r)`` with ``values``), ``Phi``, ``S``;
        ``.info`` names the back-end. With a strict mask token 0 has ``Z = Y = 0`` (it
        attends to nothing).

    Raises
    ------
    ScenarioError
        Unknown mask, invalid bias, a bias without the mask (naming ``attention.mask`` /
        ``attention.bias``).
    ValueError
        Shapes, kind, back-end (as :func:`wflow.kernels.kernel_sums`).
    FloatingPointError
        Logits that could overflow ``e^ℓ``.
    """
    mk, bs = check_mask_bias(mask, bias)
    P = 1 if comm is None else comm.Get_size()
    if mk is None:
        vkw = {} if values is None else {"values": values}  # (None: today's call)
        if P > 1:
            from .split import split_sums

            return split_sums(x, m, Q, K, comm=comm, beta=beta, kind=kind, potential=potential,
                              scores=scores, backend=backend, tol=tol, **vkw)
        from .sums import kernel_sums

        return kernel_sums(x, x, m, Q, K, beta=beta, kind=kind, potential=potential,
                           scores=scores, block=block, backend=backend, tol=tol, **vkw)
    x, _, m, Q, K, spec = _validate(x, x, m, Q, K, beta, kind, backend, tol)
    H = Q.shape[0]
    M, d = x.shape
    values = _validate_values(values, H, d)

    def project(Y: np.ndarray) -> np.ndarray:  # the fast sum's Σ k W y = W Σ k y (d = 3)
        return Y if values is None else np.matmul(Y, np.swapaxes(values, 1, 2))
    if P > 1:
        counts = comm.allgather(M)
        n = int(sum(counts))
        offset = int(sum(counts[: comm.Get_rank()]))
    else:
        n, offset = M, 0
    nx = np.sqrt(np.einsum("ij,ij->i", x, x)) if M else np.zeros(0)
    dev_loc = float(np.max(np.abs(nx - 1.0))) if M else 0.0
    dev = dev_loc if P == 1 else float(comm.allreduce(dev_loc, op=_mpi_max()))
    pairs = (n * (n + 1) // 2 if not mk.strict else n * (n - 1) // 2) * H
    err_direct = max(n, 1) * _EPS
    A = _scores_A(Q, K)

    def heads() -> list:
        if P == 1:
            from ._fastsum import plan_head

            out = []
            for h in range(H):
                c, zR, L = plan_head(x @ A[h].T, beta, tol)
                out.append((c, zR, L))
            return out
        from ._fastsum import choose_degree
        from .split import _centres_split

        us = [x @ A[h].T for h in range(H)]
        return [(c, beta * R, choose_degree(beta * R, tol)) for c, R in
                _centres_split(comm, us, offset)]

    name, reason, hs = plan_causal(spec, mk, bs, H=H, d=d, n=n, backend=backend, tol=tol,
                                   scores=scores, dev=lambda: dev, heads=heads)
    where = "" if P == 1 else f"; split over {P} ranks"
    if values is not None:  # d ≤ 3: the full sums cost the same, W applied once per target
        at_rank = name == "numpy" or (name == "direct" and d > 3)
        where += (f"; values accumulated at rank {values.shape[1]}" if at_rank else
                  f"; values of rank {values.shape[1]} applied to the full-width sums")
    if name in ("numpy", "direct"):
        if P > 1:
            Z, Y, Phi, S = _ring_causal(comm, x, m, Q, K, beta, spec, mk, bs, offset, name,
                                        potential, scores, block, values)
            where += " (source runs down a pipeline, masked runs skipped)"
        elif name == "numpy":
            Z, Y, Phi, S = _numpy_causal(x, x, m, Q, K, beta, spec, mk, bs, 0, 0, potential,
                                         scores, block, values)
        else:
            Z, Y, Phi, S = _direct_causal(x, x, m, Q, K, beta, spec, mk, bs, 0, 0, potential,
                                          scores, values)
        return KernelSums(Z, Y, Phi, S, KernelInfo(
            name, backend, reason + where, err_direct, tol, (),
            threads() if name == "direct" else 1, pairs))
    # --- fast sum (exponential kernels, S²): the guard on the scores, then the expansion
    if n and H:
        from . import _numba as kn

        bq, bk = (kn.max_rownorm(Q, x), kn.max_rownorm(K, x)) if M else (0.0, 0.0)
        if P > 1:
            bq, bk = (float(comm.allreduce(v, op=_mpi_max())) for v in (bq, bk))
        raise_bound(beta * bq * bk)
    slope = float(bs.slope) if isinstance(bs, ALiBi) else 0.0
    K_ = [(L + 1) * (L + 2) / 2 for _, _, L, f in hs if f]
    with team(2 * n * max(K_) * len(K_)):
        Z, Y, err = _fast_causal(x, m, A, beta, tol, mk, slope, hs, comm, offset, dev)
    if P > 1:
        err = _gmax(comm, err)
    ok = err <= tol
    degree = tuple(int(h[2]) if (h[3] and o) else -1 for h, o in zip(hs, ok, strict=True))
    S = None
    redo = np.flatnonzero(~ok)
    label = "fastsum"
    if redo.size:
        failed = [int(h) for h in redo if hs[h][3]]
        if failed:
            ests = ", ".join(f"head {h}: {err[h]:.1e}" for h in failed)
            reason += f"; estimate above tol={tol:g} ({ests}), summed directly"
            logger.info("causal fast sum fell back to direct sums (%s)", ests)
        if P > 1:
            Zd, Yd, _, Sd = _ring_causal(comm, x, m, Q[redo], K[redo], beta, spec, mk, bs,
                                         offset, "direct", False, scores, block)
        else:
            Zd, Yd, _, Sd = _direct_causal(x, x, m, Q[redo], K[redo], beta, spec, mk, bs, 0, 0,
                                           False, scores)
        Z[redo] = Zd
        Y[redo] = Yd
        label = "fastsum+direct" if np.any(ok) else "direct"
    if scores:
        S = np.zeros((H, M))
        for h in range(H):
            S[h] = beta * np.einsum("mi,ij,mj->m", x, A[h], Y[h])
        if redo.size:
            S[redo] = Sd
    ests = [float(e) for e in err[ok]] + ([err_direct] if redo.size else [])
    reason += where + (" (exclusive scan of the ranks' coefficient sums)" if P > 1 else "")
    return KernelSums(Z, project(Y), Z if potential else None, S, KernelInfo(
        label, backend, reason, float(max(ests)), tol, degree, threads(), pairs))


def _mpi_max():
    from mpi4py import MPI

    return MPI.MAX


def _gmax(comm: Any, vals: np.ndarray) -> np.ndarray:
    """Elementwise maximum over the ranks (exact in any order)."""
    from mpi4py import MPI

    v = np.ascontiguousarray(vals, dtype=np.float64)
    out = np.empty_like(v)
    comm.Allreduce(v, out, op=MPI.MAX)
    return out
