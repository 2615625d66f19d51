"""The kernels' memory rules, for the cost estimates (public).

The causal fast sum's kept block coefficients and coefficient buffers
(:func:`causal_kept_bytes`, :func:`causal_wave_bytes`: the rules the kernel itself
applies, defined once in its driver) and a bound on the fast summation's degree
(:func:`fast_degree`), so that an estimate (:mod:`wflow.particles.estimate`) counts what
a rank will hold before anything is computed.
"""

from __future__ import annotations

import numpy as np

from ._causal_fast import (
    FAST_BLOCK,
    KEEP_BYTES,
    causal_coefficients,
    causal_kept_bytes,
    causal_wave_bytes,
)
from ._fastsum import choose_degree

__all__ = ["FAST_BLOCK", "KEEP_BYTES", "causal_coefficients", "causal_kept_bytes",
           "causal_wave_bytes", "fast_degree"]


def fast_degree(A: np.ndarray, beta: float, tol: float) -> int | None:
    """Degree of the fast summation's expansion at most: ``L`` for ``β max_h ‖A_h‖₂``.

    The kernel plan centres each head's images ``A_h x`` of unit tokens in their enclosing
    ball, of radius ``R ≤ ‖A_h‖₂``, and takes the smallest degree meeting ``tol`` at
    ``β R`` (:func:`wflow.kernels._fastsum.choose_degree`); the bound uses ``‖A_h‖₂``.

    Parameters
    ----------
    A : ndarray, shape (H, d, d)
        The heads' interaction matrices.
    beta : float
        Inverse temperature of the scores.
    tol : float
        The kernel tolerance (``particles.kernel_tol``).

    Returns
    -------
    int or None
        ``L``; ``None`` where no degree meets ``tol`` (direct sums) or there is no head.
    """
    A = np.asarray(A, dtype=np.float64)
    if A.ndim != 3 or A.shape[0] == 0:
        return None
    radius = max(float(np.linalg.norm(a, 2)) for a in A)
    return choose_degree(float(beta) * radius, float(tol))
