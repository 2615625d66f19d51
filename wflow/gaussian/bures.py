"""Bures–Wasserstein geometry of Gaussians: distance and the SPD transport map (THEORY.md §7)."""

from __future__ import annotations

import math

import numpy as np

from .moments import psd_factor

__all__ = [
    "bures_wasserstein_distance",
    "bures_map",
]


def _sqrtm_psd(S: np.ndarray) -> np.ndarray:
    lam, U = np.linalg.eigh(0.5 * (S + S.T))
    return (U * np.sqrt(np.clip(lam, 0.0, None))) @ U.T


def bures_wasserstein_distance(m0: np.ndarray, S0: np.ndarray, m1: np.ndarray, S1: np.ndarray
                               ) -> float:
    """``W2(N(m₀, Σ₀), N(m₁, Σ₁))`` for PSD covariances of any rank.

    ``W2² = |m₀ − m₁|² + tr Σ₀ + tr Σ₁ − 2 tr (Σ₀^{1/2} Σ₁ Σ₀^{1/2})^{1/2}``.
    Eigenvalues are clipped at 0 so that rank-deficient inputs are safe (POT's
    ``ot.gaussian.bures_wasserstein_distance`` takes square roots of round-off
    negative eigenvalues); for full-rank inputs both agree (tested).
    """
    m0, m1 = np.asarray(m0, dtype=np.float64), np.asarray(m1, dtype=np.float64)
    S0, S1 = np.asarray(S0, dtype=np.float64), np.asarray(S1, dtype=np.float64)
    R0 = _sqrtm_psd(S0)
    cross = np.linalg.eigvalsh(0.5 * (R0 @ S1 @ R0 + (R0 @ S1 @ R0).T))
    b2 = np.trace(S0) + np.trace(S1) - 2.0 * np.sum(np.sqrt(np.clip(cross, 0.0, None)))
    return float(math.sqrt(max(float(np.sum((m0 - m1) ** 2)) + b2, 0.0)))


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
