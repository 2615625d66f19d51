"""Validation of the kernel's inputs and the overflow bound of exponential kernels.

Part of :mod:`wflow.kernels` (the face re-exports the public names).
"""

from __future__ import annotations

import math

import numpy as np

from ..attention.kinds import get_kind

#: Largest score bound accepted for exponential kernels (e^709 overflows float64).
EXP_OVERFLOW = 700.0
#: Back-ends accepted by :func:`kernel_sums`.
BACKENDS = ("auto", "numpy", "direct", "fastsum")
#: Default relative tolerance of the fast summation (per target, relative to ``Z_i``).
DEFAULT_TOL = 1e-10
#: Precisions of the scores and kernel values accepted by :func:`wflow.kernels.kernel_sums`
#: (the sums are float64 in both).
DTYPES = ("float64", "float32")
def _apply(Q: np.ndarray, x: np.ndarray) -> np.ndarray:
    """``Q_h x_i`` for all heads, shape ``(H, M, k)``: ONE GEMM ``x [Q_1; …; Q_H]ᵀ``.

    (NumPy's batched ``matmul`` with the transposed ``Q_h`` does not reach BLAS: 5x slower
    at a model's width.) Each entry is the same dot product of length ``d`` as before.
    """
    H, k, d = Q.shape
    out = np.ascontiguousarray(Q).reshape(H * k, d) @ np.asarray(x).T  # (H k, M)
    return np.ascontiguousarray(np.swapaxes(out.reshape(H, k, -1), 1, 2))


def _scores_A(Q: np.ndarray, K: np.ndarray) -> np.ndarray:
    """``A_h = Q_hᵀ K_h``, shape ``(H, d, d)``."""
    return np.matmul(np.swapaxes(Q, 1, 2), K)


#: Above this many multiply-adds ``H k d n``, :func:`max_rownorm` uses BLAS (one head at a
#: time, ``O(n k)`` memory) instead of the compiled loop (serial, scalar: ~1 ns each).
ROWNORM_BLAS = 1 << 22


def max_rownorm(Q: np.ndarray, x: np.ndarray) -> float:
    """``max_{h,i} |Q_h x_i|`` (the overflow guard's factor), by the cheaper of two ways.

    Small problems: :func:`wflow.kernels._numba.max_rownorm` (no temporaries); from
    :data:`ROWNORM_BLAS` multiply-adds on (a model's width), ``x Q_hᵀ`` by BLAS per head.
    """
    H, k, d = Q.shape
    n = x.shape[0]
    if H * k * d * n < ROWNORM_BLAS:
        from . import _numba as kn

        return float(kn.max_rownorm(Q, x))
    best = 0.0
    for h in range(H):
        v = x @ Q[h].T
        best = max(best, float(np.max(np.einsum("ij,ij->i", v, v))))
    return math.sqrt(best)


def _max_norm(v: np.ndarray) -> float:
    return math.sqrt(float(np.max(np.einsum("...k,...k->...", v, v)))) if v.size else 0.0


def _check_bound(qx: np.ndarray, ky: np.ndarray, beta: float) -> None:
    raise_bound(beta * _max_norm(qx) * _max_norm(ky))


def raise_bound(bound: float) -> None:
    """``FloatingPointError`` if the score bound ``β|Qx||Ky|`` exceeds :data:`EXP_OVERFLOW`.

    The overflow guard of exponential kernels (``e^709`` overflows float64), shared by
    every back-end and the compiled particle loops.
    """
    if bound > EXP_OVERFLOW:
        raise FloatingPointError(
            f"attention scores may reach β|Qx||Ky| = {bound:.1f} > {EXP_OVERFLOW}: e^s would "
            "overflow float64. Lower attention.beta or the head scale.")


def _validate_values(values, H: int, d: int) -> np.ndarray | None:
    """``values`` (``(H, r, d)`` value factors ``W_{V,h}``) as float64, or ``None``."""
    if values is None:
        return None
    W = np.ascontiguousarray(values, dtype=np.float64)
    if W.ndim != 3 or W.shape[0] != H or W.shape[2] != d or W.shape[1] < 1:
        raise ValueError(f"values: expected shape (H={H}, r, d={d}) with r >= 1, got {W.shape}")
    if not np.all(np.isfinite(W)):
        raise ValueError("values: contains NaN or Inf")
    return W


def _validate_dtype(dtype) -> str:
    name = np.dtype(dtype).name if not isinstance(dtype, str) else dtype
    if name not in DTYPES:
        raise ValueError(f"dtype: must be one of {DTYPES}, got {dtype!r}")
    return name


def _validate(x, y, m, Q, K, beta, kind, backend, tol):
    spec = get_kind(kind)  # ValueError naming the known kinds
    if backend not in BACKENDS:
        raise ValueError(f"backend: must be one of {BACKENDS}, got {backend!r}")
    if not (np.isfinite(beta) and beta > 0):
        raise ValueError(f"beta: must be a finite number > 0, got {beta!r}")
    if not (np.isfinite(tol) and tol > 0):
        raise ValueError(f"tol: must be a finite number > 0, got {tol!r}")
    x = np.ascontiguousarray(x, dtype=np.float64)
    y = np.ascontiguousarray(y, dtype=np.float64)
    m = np.ascontiguousarray(m, dtype=np.float64)
    Q = np.ascontiguousarray(Q, dtype=np.float64)
    K = np.ascontiguousarray(K, dtype=np.float64)
    if x.ndim != 2:
        raise ValueError(f"x: expected shape (M, d), got {x.shape}")
    d = x.shape[1]
    if y.ndim != 2 or y.shape[1] != d:
        raise ValueError(f"y: expected shape (N, {d}), got {y.shape}")
    if m.shape != (y.shape[0],):
        raise ValueError(f"m: expected shape ({y.shape[0]},), got {m.shape}")
    if Q.ndim != 3 or Q.shape[2] != d:
        raise ValueError(f"Q: expected shape (H, k, {d}), got {Q.shape}")
    if K.shape != Q.shape:
        raise ValueError(f"K: shape {K.shape} must equal Q shape {Q.shape}")
    return x, y, m, Q, K, spec


def _validate_sums(x, y, m, Q, K, beta, kind, backend, tol, values, dtype):
    """:func:`_validate` of a kernel-sums call with its value factors and its dtype.

    Returns ``x, y, m, Q, K, spec, values, dtype`` (``values`` by :func:`_validate_values`,
    ``dtype`` by :func:`_validate_dtype`), the inputs of :func:`wflow.kernels.kernel_sums`
    and of its MPI split alike.
    """
    x, y, m, Q, K, spec = _validate(x, y, m, Q, K, beta, kind, backend, tol)
    H, _, d = Q.shape
    return x, y, m, Q, K, spec, _validate_values(values, H, d), _validate_dtype(dtype)
