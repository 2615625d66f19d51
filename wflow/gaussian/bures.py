"""Bures–Wasserstein geometry of Gaussians: distance and SPD transport map (docs/theory.md §7)."""

from __future__ import annotations

import math

import numpy as np

from .moments import psd_factor

__all__ = [
    "bures_wasserstein_distance",
    "bures_distance",
    "bures_map",
]


def _sqrtm_psd(S: np.ndarray) -> np.ndarray:
    lam, U = np.linalg.eigh(0.5 * (S + S.T))
    return (U * np.sqrt(np.clip(lam, 0.0, None))) @ U.T


def bures_wasserstein_distance(m0: np.ndarray, S0: np.ndarray, m1: np.ndarray, S1: np.ndarray
                               ) -> float:
    """``W2(N(m₀, Σ₀), N(m₁, Σ₁))`` for PSD covariances of any rank, without cancellation.

    ``W2² = |m₀ − m₁|² + b²`` with the Bures distance
    ``b² = tr Σ₀ + tr Σ₁ − 2 tr (Σ₀^{1/2} Σ₁ Σ₀^{1/2})^{1/2}``. The trace formula
    subtracts nearly equal numbers when ``Σ₀ ≈ Σ₁`` (an absolute error
    ``~ε tr Σ`` in ``b²``, i.e. ``~√(ε tr Σ)`` in ``b``, which swamps a small
    ``|Δm|``). Instead ``b = min_U ‖R₀ − R₁U‖_F`` over orthogonal ``U``
    (``R_i = Σ_i^{1/2}``), attained at ``U = Z Wᵀ`` from the SVD ``R₀R₁ = W S Zᵀ``
    (``tr(R₀R₁U) ≤ tr S = tr (R₀Σ₁R₀)^{1/2}``): a norm of a difference of matrices,
    accurate to ``~ε‖R‖`` absolutely. ``W2 = hypot(|Δm|, b)``.

    Square roots clip round-off negative eigenvalues at 0, so rank-deficient inputs
    are safe (POT's ``ot.gaussian.bures_wasserstein_distance`` takes square roots
    of them); for full-rank inputs both agree (tested).
    """
    m0, m1 = np.asarray(m0, dtype=np.float64), np.asarray(m1, dtype=np.float64)
    S0, S1 = np.asarray(S0, dtype=np.float64), np.asarray(S1, dtype=np.float64)
    return math.hypot(float(np.linalg.norm(m0 - m1)), bures_distance(S0, S1))


def bures_distance(S0: np.ndarray, S1: np.ndarray) -> float:
    """Bures distance ``b(Σ₀, Σ₁) = min_U ‖Σ₀^{1/2} − Σ₁^{1/2}U‖_F`` (see above)."""
    R0 = _sqrtm_psd(np.asarray(S0, dtype=np.float64))
    R1 = _sqrtm_psd(np.asarray(S1, dtype=np.float64))
    W, _, Zt = np.linalg.svd(R0 @ R1)
    return float(np.linalg.norm(R0 - R1 @ (Zt.T @ W.T)))


def bures_map(S0: np.ndarray, S1: np.ndarray) -> np.ndarray:
    """SPD optimal-transport (Bures) map ``G = Σ₀^{-1/2}(Σ₀^{1/2}Σ₁Σ₀^{1/2})^{1/2}Σ₀^{-1/2}``.

    The unique SPD matrix with ``G Σ₀ G = Σ₁`` (``Σ₀, Σ₁`` positive definite).
    Computed with POT (``ot.gaussian.bures_wasserstein_mapping``) and checked.
    """
    import ot

    S0 = np.asarray(S0, dtype=np.float64)
    S1 = np.asarray(S1, dtype=np.float64)
    for name, S in (("Sigma0", S0), ("Sigma1", S1)):
        if psd_factor(S, name=name).shape[1] != S.shape[0]:
            raise ValueError(f"{name}: the SPD Bures map needs a positive definite covariance")
    d = S0.shape[0]
    G, _ = ot.gaussian.bures_wasserstein_mapping(np.zeros(d), np.zeros(d), S0, S1)
    G = 0.5 * (np.asarray(G) + np.asarray(G).T)
    return G
