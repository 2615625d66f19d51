"""Gaussianity statistics of a token cloud: whitening, Mardia, PCA, W₂ to its Gaussian.

Part of :mod:`wflow.models.gaussianity` (the package re-exports its names).
"""

from __future__ import annotations

from typing import NamedTuple

import numpy as np
from scipy import stats as sps

from ..moments import (
    Moments,
)

#: Sublayer stages recorded in every layer, in order.
STAGES = ("attn", "ln1", "ffn", "out")
#: Eigenvalues below this fraction of the largest are treated as zero (the support of the
#: token cloud; LayerNorm outputs have an exactly null direction).
RANK_RTOL = 1e-10


class MardiaStats(NamedTuple):
    """Mardia's multivariate skewness and kurtosis of ``n`` points of rank ``dim``.

    ``b1 = (1/n²) Σ_ij (z_iᵀ S⁻¹ z_j)³``, ``b2 = (1/n) Σ_i (z_iᵀ S⁻¹ z_i)²`` with
    ``z = x − x̄`` and ``S`` the covariance with divisor ``n``. Under Gaussianity (``n → ∞``)
    ``n b1 / 6 ~ χ²`` with ``dim(dim+1)(dim+2)/6`` degrees of freedom and
    ``b2 ~ N(dim(dim+2)(n−1)/(n+1), 8 dim(dim+2)/n)``.
    """

    n: int
    dim: int
    b1: float
    b2: float
    skew_stat: float
    skew_dof: float
    skew_pvalue: float
    kurt_mean: float
    kurt_sd: float
    kurt_z: float
    kurt_pvalue: float


def whiten(x: np.ndarray, *, rtol: float = RANK_RTOL) -> np.ndarray:
    """Centred, whitened coordinates ``(n, r)`` on the support of the sample covariance."""
    x = np.asarray(x, float)
    c = x - x.mean(axis=0)
    S = (c.T @ c) / x.shape[0]
    w, U = np.linalg.eigh(0.5 * (S + S.T))
    if not w[-1] > 0:
        raise ValueError("whiten: the sample has zero covariance")
    keep = w > rtol * w[-1]
    return (c @ U[:, keep]) / np.sqrt(w[keep])


def mardia(x: np.ndarray, *, rtol: float = RANK_RTOL, block: int = 1024) -> MardiaStats:
    """Mardia skewness / kurtosis of the rows of ``x`` (``O(n² r)``), see :class:`MardiaStats`.

    The statistics are computed on the support of the covariance (rank ``r``). Needs
    ``n > r + 1`` (otherwise every Mahalanobis norm is the same and the test is void).
    """
    x = np.asarray(x, float)
    if x.ndim != 2:
        raise ValueError(f"mardia: expected an (n, d) array, got shape {x.shape}")
    n = x.shape[0]
    z = whiten(x, rtol=rtol)
    r = z.shape[1]
    if n <= r + 1:
        raise ValueError(f"mardia: need more points than dimensions + 1 (n = {n}, rank {r}); "
                         "use more samples or a PCA-reduced space")
    b1 = 0.0
    for i0 in range(0, n, block):
        G = z[i0:i0 + block] @ z.T
        b1 += float(np.sum(G * G * G))
    b1 /= n * n
    b2 = float(np.mean(np.sum(z * z, axis=1) ** 2))
    dof = r * (r + 1) * (r + 2) / 6.0
    stat = n * b1 / 6.0
    kmean = r * (r + 2) * (n - 1) / (n + 1)
    ksd = float(np.sqrt(8.0 * r * (r + 2) / n))
    kz = (b2 - kmean) / ksd
    return MardiaStats(n, r, b1, b2, stat, dof, float(sps.chi2.sf(stat, dof)), kmean, ksd,
                       float(kz), float(2 * sps.norm.sf(abs(kz))))


def pca_project(x: np.ndarray, p: int) -> np.ndarray:
    """Coordinates of the centred rows of ``x`` in its top-``p`` principal directions."""
    c = x - x.mean(axis=0)
    S = (c.T @ c) / x.shape[0]
    _, U = np.linalg.eigh(0.5 * (S + S.T))
    return c @ U[:, ::-1][:, :p]


def sample_gaussian(mom: Moments, n: int, rng: np.random.Generator) -> np.ndarray:
    """``n`` samples of ``N(m, S)`` (PSD ``S`` through its eigen-decomposition)."""
    w, U = np.linalg.eigh(0.5 * (mom.S + mom.S.T))
    L = U * np.sqrt(np.clip(w, 0.0, None))
    return mom.m + rng.standard_normal((n, w.size)) @ L.T


class W2Gap(NamedTuple):
    """Empirical W2 to the moment-matched Gaussian and its Gaussian floor.

    Attributes
    ----------
    n_ot : points on each side of the OT problems
    w2 : ``W2(tokens, Gaussian sample)``
    w2_null : ``W2(Gaussian sample', Gaussian sample)`` (both from ``N(m̂, Σ̂)``)
    ratio : ``w2 / w2_null`` (≈ 1 for Gaussian tokens)
    excess : ``sqrt(max(w2² − w2_null², 0))`` — a debiased distance estimate
    scale : ``sqrt(tr Σ̂)`` (to compare across layers)
    """

    n_ot: int
    w2: float
    w2_null: float
    ratio: float
    excess: float
    scale: float


def w2_to_moment_matched(x: np.ndarray, rng: np.random.Generator, *,
                         n_ot: int = 1000) -> W2Gap:
    """Exact empirical W2 (POT ``ot.emd2``) between tokens and their moment-matched Gaussian."""
    import ot

    x = np.asarray(x, float)
    n = min(int(n_ot), x.shape[0])
    if n < 2:
        raise ValueError(f"n_ot: need at least 2 points, got {n}")
    mom = Moments.of(x)
    xs = x[rng.choice(x.shape[0], size=n, replace=False)] if n < x.shape[0] else x
    g1 = sample_gaussian(mom, n, rng)
    g2 = sample_gaussian(mom, n, rng)
    a = np.full(n, 1.0 / n)

    def w2(p: np.ndarray, q: np.ndarray) -> float:
        cost = ot.dist(p, q)  # squared Euclidean
        return float(np.sqrt(max(ot.emd2(a, a, cost, numItermax=10_000_000), 0.0)))

    d_tok, d_null = w2(xs, g1), w2(g2, g1)
    return W2Gap(n, d_tok, d_null, d_tok / d_null, float(np.sqrt(max(d_tok ** 2 - d_null ** 2,
                                                                      0.0))),
                 float(np.sqrt(np.trace(mom.S))))
