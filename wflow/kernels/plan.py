"""Planning: which back-end runs each head (``auto``'s cost model), computing nothing.

Part of :mod:`wflow.kernels` (the face re-exports the public names).
"""

from __future__ import annotations

import math

import numpy as np

from ..attention.kinds import get_kind
from .results import KernelPlan
from .validation import DEFAULT_TOL, _scores_A

#: ``auto`` never tries the fast summation below this many (target, source, head) triples.
FASTSUM_MIN_TRIPLES = 1 << 22
# Cost model of ``auto`` (core-seconds; only ratios matter). Measured on one core with
# bench/bench_kernels.py: direct d = 3 ≈ 0.85 ns per triple; fast summation per head
# ≈ (M + N) · (250 ns + 1.0 ns · L(L+1)/2) + 0.3 ms (4 charge sets, both sides).
_COST_DIRECT3 = 0.85e-9
_COST_FAST_POINT = 250e-9
_COST_FAST = 1.0e-9
_COST_FAST_FIXED = 3e-4
def plan_kernel(
    x: np.ndarray,
    y: np.ndarray,
    Q: np.ndarray,
    K: np.ndarray,
    *,
    beta: float,
    kind: str,
    backend: str = "auto",
    tol: float = DEFAULT_TOL,
    m: np.ndarray | None = None,
) -> KernelPlan:
    """Choose the back-end of :func:`kernel_sums` (nothing is summed).

    ``"fastsum"`` is applicable for ``d = 3``, exponential kernels and targets
    on the unit sphere; ``"auto"`` takes it for the heads whose predicted cost
    ``(M + N) L(L+1)/2`` is below half the direct cost ``M N`` (model constants
    measured by ``bench/bench_kernels.py``), where the truncation degree
    ``L(β R', tol)`` exists (``L ≤ MAX_DEGREE``). Whether the round-off of the
    expansion meets ``tol`` depends on the data (smallest ``Z_i``), so it is
    checked after the expansion, head by head; failed heads cost the expansion
    (at most half a direct sum) plus the direct sum. With the masses ``m``,
    ``"auto"`` first bounds that estimate from below on a few probe targets
    (:func:`wflow.kernels._fastsum.estimate_floor`, ``O(16 N)``) and skips heads that
    would surely fail.

    Parameters
    ----------
    x, y, Q, K, beta, kind, backend, tol
        As in :func:`kernel_sums`.
    m : (N,) array, optional
        Source masses (enables the probe check).
    """
    from . import _fastsum as fs

    spec = get_kind(kind)
    H, k, d = np.shape(Q)
    M, N = np.shape(x)[0], np.shape(y)[0]
    if backend == "numpy":
        return KernelPlan("numpy", "requested")
    if not spec.compiled:
        if backend != "auto":
            spec.require_compiled(f"backend={backend!r}")
        return KernelPlan("numpy", f"kind {spec.name!r} has no compiled kernel")
    if backend == "direct":
        return KernelPlan("direct", "requested")
    why = None
    if d != 3:
        why = f"fast summation needs d = 3 (S²), got d = {d}"
    elif not spec.fastsum:
        why = ("fast summation needs the exponential kernel, got "
               f"{spec.label} ({spec.kernel.name})")
    else:
        dev = float(np.max(np.abs(np.linalg.norm(x, axis=1) - 1.0))) if M else 0.0
        if dev > 1e-6:
            why = f"targets are not on the unit sphere (max ||x| - 1| = {dev:.1e})"
    if why is None and backend == "auto" and M * N * H < FASTSUM_MIN_TRIPLES:
        why = f"small problem (M·N·H = {M * N * H} < {FASTSUM_MIN_TRIPLES})"
    if why is not None:
        if backend == "fastsum":
            raise ValueError(f"backend='fastsum' not applicable: {why}")
        return KernelPlan("direct", why)
    A = _scores_A(Q, K)
    y = np.asarray(y, dtype=np.float64)
    degrees, radii, fast = [], [], []
    cost_fast = 0.0
    cost_dir = _COST_DIRECT3 * M * N * H
    for h in range(H):
        u = y @ A[h].T
        c, zR, L = fs.plan_head(u, beta, tol)
        radii.append(float(zR))
        feasible = L is not None
        if feasible and m is not None and backend == "auto":
            feasible = fs.estimate_floor(x, y, m, u, c, beta) <= tol
        c_h = ((M + N) * (_COST_FAST_POINT + _COST_FAST * (L + 1) * (L + 2) / 2)
               + _COST_FAST_FIXED if L is not None else math.inf)
        use = feasible and (backend == "fastsum" or c_h < 0.5 * _COST_DIRECT3 * M * N)
        fast.append(bool(use))
        degrees.append(int(L) if use else -1)
        cost_fast += c_h if use else _COST_DIRECT3 * M * N
    if not any(fast):
        if backend == "fastsum":
            raise ValueError(
                "backend='fastsum' not applicable: the expansion cannot meet "
                f"tol={tol:g} for β R' = {max(radii):.3g} (degree > {fs.MAX_DEGREE}); "
                "use backend='direct' or a larger tol")
        return KernelPlan("direct", "fast summation would not pay off "
                          f"(β R' up to {max(radii):.3g}, tol {tol:g})", tuple(fast),
                          tuple(degrees), tuple(radii), cost_dir, cost_fast)
    reason = "requested" if backend == "fastsum" else (
        f"fast summation predicted {cost_dir / cost_fast:.1f}x cheaper than direct")
    return KernelPlan("fastsum", reason, tuple(fast), tuple(degrees), tuple(radii), cost_dir,
                      cost_fast)
