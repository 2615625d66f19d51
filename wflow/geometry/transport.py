"""Optimal transport between measures on the sphere (POT), with the geodesic cost.

``W_2(μ, ν)² = min_π Σ_ij π_ij d_S(x_i, y_j)²`` for discrete measures
``μ = Σ a_i δ_{x_i}``, ``ν = Σ b_j δ_{y_j}`` (particles, or cell masses at centroids).
Exact network simplex (``ot.emd2``); the dense cost matrix limits it to a few thousand
points on each side (``max_points``), beyond which the caller must subsample.
"""

from __future__ import annotations

import numpy as np

from .sphere import pairwise_geodesic

__all__ = ["w2_sphere", "uniform_weights"]


def uniform_weights(n: int) -> np.ndarray:
    """Weights ``1/n``."""
    return np.full(n, 1.0 / n)


def w2_sphere(x: np.ndarray, y: np.ndarray, a: np.ndarray | None = None,
              b: np.ndarray | None = None, *, max_points: int = 6000,
              num_itermax: int = 10_000_000) -> float:
    """Exact ``W_2`` distance on the sphere between two discrete measures.

    Parameters
    ----------
    x : (n, d) array, y : (m, d) array
        Support points on the unit sphere.
    a : (n,) array, b : (m,) array, optional
        Non-negative masses (normalised to 1 here; default uniform).
    max_points : int
        Refuse larger problems (the dense ``n × m`` cost would not fit comfortably).

    Returns
    -------
    float
        ``W_2`` in radians (geodesic cost ``d_S²``).
    """
    import ot

    if max(x.shape[0], y.shape[0]) > max_points:
        raise ValueError(f"w2_sphere: {x.shape[0]} x {y.shape[0]} points exceeds max_points="
                         f"{max_points}; subsample or raise the limit")
    a = uniform_weights(x.shape[0]) if a is None else np.asarray(a, float)
    b = uniform_weights(y.shape[0]) if b is None else np.asarray(b, float)
    if np.any(a < 0) or np.any(b < 0):
        raise ValueError("w2_sphere: masses must be non-negative")
    a, b = a / a.sum(), b / b.sum()
    C = pairwise_geodesic(x, y) ** 2
    val = ot.emd2(a, b, C, numItermax=num_itermax)
    return float(np.sqrt(max(float(val), 0.0)))
