"""The NumPy reference back-end: blocked float64 sums (``O(block · N)`` memory per head).

Part of :mod:`wflow.kernels` (the face re-exports the public names).
"""

from __future__ import annotations

import numpy as np

from ..attention.kinds import AttentionKind
from .validation import _check_bound

#: Target block size of the NumPy back-end: a block of scores holds about this many doubles.
BLOCK_ELEMS = 1 << 22
def _numpy_sums(x, y, m, Q, K, beta, spec: AttentionKind, potential, scores, block,
                values=None):
    """The blocked NumPy float64 reference, any registered kind (its kernel's ``Φ'``, ``Φ``).

    ``values`` (``(H, r, d)``, optional): ``Y_h`` sums ``W_{V,h} y_j`` (width ``r``).
    """
    H = Q.shape[0]
    M, d = x.shape
    N = y.shape[0]
    r = d if values is None else values.shape[1]
    kern = spec.kernel
    expo = kern.exponential  # Φ = k: the potential sums are Z
    qx = np.einsum("hkd,md->hmk", Q, x)  # (H, M, k)
    ky = np.einsum("hkd,nd->hnk", K, y)  # (H, N, k)
    if expo:
        _check_bound(qx, ky, beta)
    Z = np.empty((H, M))
    Y = np.empty((H, M, r))
    Phi = np.empty((H, M)) if (potential and not expo) else None
    S = np.empty((H, M)) if scores else None
    B = max(1, min(M, (BLOCK_ELEMS // max(N, 1)) if block is None else int(block)))
    for h in range(H):
        kyT = np.ascontiguousarray(ky[h].T) * beta  # (k, N), β folded in
        vy = y if values is None else y @ values[h].T  # (N, r): W_{V,h} y_j
        for i0 in range(0, M, B):
            i1 = min(M, i0 + B)
            s = qx[h, i0:i1] @ kyT  # (b, N) scores β<Qx, Ky>
            kmat = kern.dphi(s)
            if Phi is not None:
                Phi[h, i0:i1] = kern.phi_of(s, kmat) @ m
            if S is not None:
                S[h, i0:i1] = (kmat * s) @ m
            kmat *= m  # weight by source masses
            Z[h, i0:i1] = kmat.sum(axis=1)
            Y[h, i0:i1] = kmat @ vy
    if potential and expo:
        Phi = Z
    return Z, Y, Phi, S
