"""The hot path: all nonlocal attention sums, behind one function.

For targets ``x_i`` (M, d), sources ``y_j`` (N, d) with masses ``m_j`` and
heads ``(Q_h, K_h)``, with scores ``s^h_ij = β <Q_h x_i, K_h y_j>``::

    Z_h(i)   = Σ_j m_j k(s^h_ij)              normaliser
    Y_h(i)   = Σ_j m_j k(s^h_ij) y_j          (d-vector; f_h = V_h Y_h [/ Z_h])
    Φ_h(i)   = Σ_j m_j Φ(s^h_ij)              potential (energy density), optional
    S_h(i)   = Σ_j m_j k(s^h_ij) s^h_ij       score moment (attention entropy), optional

with ``k(s) = e^s`` (softmax, USA) or ``max(0, s)`` (ReLU), and the
potential ``Φ`` with ``Φ' = k``: ``Φ = e^s`` resp. ``Φ = max(0, s)²/2``.
Every solver (particles, mesh velocity, energies, JKO gradients, studies)
calls :func:`kernel_sums`; the naive reference lives in the tests.

Memory is ``O(block · N)`` per head: targets are processed in blocks so the
``(M, N)`` score matrix never exists at once.
"""

from __future__ import annotations

import logging
from typing import NamedTuple

import numpy as np

__all__ = ["KernelSums", "kernel_sums", "BLOCK_ELEMS", "EXP_OVERFLOW"]

logger = logging.getLogger(__name__)

#: Target block size is chosen so a block of scores holds about this many doubles (32 MiB).
BLOCK_ELEMS = 1 << 22
#: Largest score bound accepted for exponential kernels (e^709 overflows float64).
EXP_OVERFLOW = 700.0


class KernelSums(NamedTuple):
    """Nonlocal sums for all heads and targets (see module docstring).

    Attributes
    ----------
    Z : (H, M) array
    Y : (H, M, d) array
    Phi : (H, M) array or None
        Only when ``potential=True``; for exponential kernels it is ``Z``.
    S : (H, M) array or None
        Only when ``scores=True``.
    """

    Z: np.ndarray
    Y: np.ndarray
    Phi: np.ndarray | None
    S: np.ndarray | None


def _check_bound(qx: np.ndarray, ky: np.ndarray, beta: float) -> None:
    bound = beta * float(np.max(np.linalg.norm(qx, axis=-1))) * float(
        np.max(np.linalg.norm(ky, axis=-1)))
    if bound > EXP_OVERFLOW:
        raise FloatingPointError(
            f"attention scores may reach β|Qx||Ky| = {bound:.1f} > {EXP_OVERFLOW}: e^s would "
            "overflow float64. Lower attention.beta or the head scale.")


def kernel_sums(
    x: np.ndarray,
    y: np.ndarray,
    m: np.ndarray,
    Q: np.ndarray,
    K: np.ndarray,
    *,
    beta: float,
    kind: str,
    potential: bool = False,
    scores: bool = False,
    block: int | None = None,
) -> KernelSums:
    """Evaluate the nonlocal attention sums (blocked NumPy, float64).

    Parameters
    ----------
    x : (M, d) array
        Targets.
    y : (N, d) array
        Sources.
    m : (N,) array
        Source masses (``1/n`` for an empirical measure, cell masses on a mesh).
    Q, K : (H, k, d) arrays
        Query and key matrices.
    beta : float
        Inverse temperature.
    kind : {"softmax", "usa", "relu"}
        Kernel ``k``: exponential for softmax/USA, ``max(0, s)`` for ReLU.
    potential, scores : bool
        Also return ``Φ_h`` resp. ``S_h``.
    block : int, optional
        Targets per block (default: ``BLOCK_ELEMS // N``).

    Returns
    -------
    KernelSums
    """
    x = np.ascontiguousarray(x, dtype=np.float64)
    y = np.ascontiguousarray(y, dtype=np.float64)
    m = np.ascontiguousarray(m, dtype=np.float64)
    H = Q.shape[0]
    M, d = x.shape
    N = y.shape[0]
    expo = kind in ("softmax", "usa")
    if kind not in ("softmax", "usa", "relu"):
        raise ValueError(f"kind: must be 'softmax', 'usa' or 'relu', got {kind!r}")
    qx = np.einsum("hkd,md->hmk", Q, x)  # (H, M, k)
    ky = np.einsum("hkd,nd->hnk", K, y)  # (H, N, k)
    if expo:
        _check_bound(qx, ky, beta)
    Z = np.empty((H, M))
    Y = np.empty((H, M, d))
    Phi = np.empty((H, M)) if (potential and not expo) else None
    S = np.empty((H, M)) if scores else None
    B = max(1, min(M, (BLOCK_ELEMS // max(N, 1)) if block is None else int(block)))
    for h in range(H):
        kyT = np.ascontiguousarray(ky[h].T) * beta  # (k, N), β folded in
        for i0 in range(0, M, B):
            i1 = min(M, i0 + B)
            s = qx[h, i0:i1] @ kyT  # (b, N) scores β<Qx, Ky>
            if expo:
                kmat = np.exp(s)
            else:
                kmat = np.maximum(s, 0.0)
            if Phi is not None:
                Phi[h, i0:i1] = (0.5 * kmat * kmat) @ m
            if S is not None:
                S[h, i0:i1] = (kmat * s) @ m
            kmat *= m  # weight by source masses
            Z[h, i0:i1] = kmat.sum(axis=1)
            Y[h, i0:i1] = kmat @ y
    if potential and expo:
        Phi = Z
    return KernelSums(Z, Y, Phi, S)
