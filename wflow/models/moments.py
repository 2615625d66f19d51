"""Gaussian moment maps of the BERT sublayers (docs/theory.md §7 for a trained encoder).

Each map takes the mean ``m`` and covariance ``Σ`` of the tokens entering a sublayer and
returns the mean and covariance of the tokens leaving it, *computed as if the entering
tokens were exactly* ``N(m, Σ)`` (and, for attention, infinitely many: the mean-field
limit). Comparing these predictions with the moments actually measured on the tokens
tells how far the Gaussian description of [GA] carries through a trained transformer.

Attention (exact for a Gaussian in the mean-field limit)
    Head ``h`` scores ``<W_Q^h x + b_Q^h, W_K^h y + b_K^h>/√k = <B_h x + c_h, y> + (terms
    free of y)`` with ``B_h = W_K^hᵀ W_Q^h / √k``, ``c_h = W_K^hᵀ b_Q^h / √k``. For
    ``μ = N(m, Σ)`` the exponentially tilted mean is ``m + Σ(B_h x + c_h)``, so the
    attention output is affine, ``a(x) = F x + g`` with::

        F = Σ_h V_h Σ B_h,   V_h = W_O[:, h] W_V^h   (d×d, rank k)
        g = W_O (W_V m + b_V) + Σ_h V_h Σ c_h + b_O

    * discrete map (the residual layer ``x ↦ x + a(x)``, one Euler step of size 1):
      ``m' = m + F m + g``, ``Σ' = (I + F) Σ (I + F)ᵀ``  — :func:`attention_moment_map`;
    * moment ODE (depth as time, docs/theory.md §7 with ``A = 0``, several heads and biases):
      ``ṁ = F(m, Σ) m + g(m, Σ)``, ``Σ̇ = F Σ + Σ Fᵀ`` on ``[0, T]``, RK4 —
      :func:`attention_moment_ode`. For one head, ``V = vI``, ``B = bI`` and no biases it
      is ``Σ̇ = 2vbΣ²``, ``Σ(t) = (Σ₀⁻¹ − 2vbt I)⁻¹``.

Feed-forward residual ``y = u + W_2 gelu(W_1 u + b_1) + b_2`` (exact moments for a Gaussian)
    With ``z = W_1 u + b_1 ~ N(μ_z, C_z)``, ``σ_j² = (C_z)_jj``, ``ρ_ij = (C_z)_ij/(σ_iσ_j)``,
    normalised Hermite coefficients ``a_jk = E[gelu(μ_j + σ_j ξ) He_k(ξ)]/√k!`` (Gauss–
    Hermite quadrature) and ``D = diag(E[gelu'(z_j)])`` (Stein)::

        E y   = m + W_2 a_{·0} + b_2
        Cov y = Σ + Σ W_1ᵀ D W_2ᵀ + W_2 D W_1 Σ + W_2 C_g W_2ᵀ,
        (C_g)_ij = Σ_{k=1}^{K} a_ik a_jk ρ_ij^k  (i ≠ j, Mehler),   (C_g)_jj = Var gelu(z_j)

    The truncation after ``K`` terms errs by at most ``sqrt(r_i r_j) |ρ_ij|^{K+1}`` with
    ``r_i = Var_i − Σ_{k≤K} a_ik²``; :func:`ffn_moment_map` returns that bound.

LayerNorm (first-order concentration approximation)
    ``LN(x) = γ ⊙ C x / s(x) + β`` with ``C = I − 11ᵀ/d`` and ``s(x)² = |Cx|²/d + ε``. For
    large ``d`` the scale ``s`` concentrates at ``s̄² = (|Cm|² + tr CΣC)/d + ε`` (relative
    fluctuation ``O(d^{-1/2})``); replacing ``s`` by ``s̄`` gives
    ``m'' = γ ⊙ C m / s̄ + β``, ``Σ'' = D_γ C Σ C D_γ / s̄²`` — :func:`layer_norm_moment_map`.
"""

from __future__ import annotations

import functools
from typing import NamedTuple

import numpy as np
from numpy.polynomial.hermite_e import hermegauss
from scipy.special import ndtr

from .bert import BertConfig, BertLayer, gelu

__all__ = [
    "Moments",
    "attention_affine",
    "head_bilinear",
    "attention_moment_map",
    "attention_moment_ode",
    "layer_norm_moment_map",
    "ffn_moment_map",
    "gelu_hermite",
    "bures_wasserstein",
    "sym_sqrt",
]


class Moments(NamedTuple):
    """Mean ``m`` (d,) and covariance ``S`` (d, d) of a token distribution."""

    m: np.ndarray
    S: np.ndarray

    @classmethod
    def of(cls, x: np.ndarray) -> Moments:
        """Empirical moments of the rows of ``x`` (covariance divisor ``n``)."""
        x = np.asarray(x, float)
        m = x.mean(axis=0)
        c = x - m
        return cls(m, (c.T @ c) / x.shape[0])


# ----------------------------------------------------------------------------- attention
def head_bilinear(layer: BertLayer, cfg: BertConfig) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Per-head ``B_h = W_K^hᵀ W_Q^h/√k``, ``c_h = W_K^hᵀ b_Q^h/√k``, ``V_h = W_O[:, h] W_V^h``.

    Shapes ``(H, d, d)``, ``(H, d)``, ``(H, d, d)`` (reference form of the attention map).
    """
    k = cfg.head_dim
    sl = layer.head_slices(cfg)
    B = np.stack([layer.Wk[s].T @ layer.Wq[s] for s in sl]) / np.sqrt(k)
    c = np.stack([layer.Wk[s].T @ layer.bq[s] for s in sl]) / np.sqrt(k)
    V = np.stack([layer.Wo[:, s] @ layer.Wv[s] for s in sl])
    return B, c, V


def attention_affine(layer: BertLayer, cfg: BertConfig, m: np.ndarray,
                     S: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """``(F, g)`` with ``a(x) = F x + g`` the mean-field attention output for ``μ = N(m, S)``.

    Uses the low-rank structure ``V_h Σ B_h = W_O[:, h] (W_V^h Σ W_K^hᵀ) W_Q^h / √k``:
    ``F = W_O M W_Q / √k`` with ``M`` the block-diagonal part (``k×k`` blocks) of
    ``W_V Σ W_Kᵀ``, and ``g = W_O (W_V m + b_V) + W_O M b_Q / √k + b_O`` (``O(d³)``).
    """
    k = cfg.head_dim
    M = layer.Wv @ S @ layer.Wk.T
    heads = np.arange(M.shape[0]) // k
    M = np.where(heads[:, None] == heads[None, :], M, 0.0)
    WoM = layer.Wo @ M
    F = WoM @ layer.Wq / np.sqrt(k)
    g = layer.Wo @ (layer.Wv @ m + layer.bv) + WoM @ layer.bq / np.sqrt(k) + layer.bo
    return F, g


def attention_moment_map(layer: BertLayer, cfg: BertConfig, m: np.ndarray,
                         S: np.ndarray) -> Moments:
    """Moments after the attention residual ``x + a(x)`` for ``x ~ N(m, S)`` (mean field)."""
    F, g = attention_affine(layer, cfg, m, S)
    M = np.eye(S.shape[0]) + F
    S1 = M @ S @ M.T
    return Moments(m + F @ m + g, 0.5 * (S1 + S1.T))


def attention_moment_ode(layer: BertLayer, cfg: BertConfig, m: np.ndarray, S: np.ndarray, *,
                         T: float = 1.0, steps: int = 32) -> Moments:
    """Moment ODE ``ṁ = F m + g``, ``Σ̇ = FΣ + ΣFᵀ`` (``F, g`` from the current moments), RK4.

    Returns non-finite moments if the Riccati flow blows up before ``T`` (callers check).
    """
    if not (np.isfinite(T) and T > 0):
        raise ValueError(f"T: must be a finite number > 0, got {T!r}")
    if int(steps) < 1:
        raise ValueError(f"steps: must be >= 1, got {steps}")
    h = T / int(steps)

    def rhs(mm: np.ndarray, SS: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        F, g = attention_affine(layer, cfg, mm, SS)
        FS = F @ SS
        return F @ mm + g, FS + FS.T

    with np.errstate(over="ignore", invalid="ignore"):
        for _ in range(int(steps)):
            k1 = rhs(m, S)
            k2 = rhs(m + 0.5 * h * k1[0], S + 0.5 * h * k1[1])
            k3 = rhs(m + 0.5 * h * k2[0], S + 0.5 * h * k2[1])
            k4 = rhs(m + h * k3[0], S + h * k3[1])
            m = m + (h / 6) * (k1[0] + 2 * k2[0] + 2 * k3[0] + k4[0])
            S = S + (h / 6) * (k1[1] + 2 * k2[1] + 2 * k3[1] + k4[1])
            if not (np.all(np.isfinite(m)) and np.all(np.isfinite(S))):
                break
    return Moments(m, 0.5 * (S + S.T))


# ----------------------------------------------------------------------------- layer norm
def layer_norm_moment_map(gamma: np.ndarray, beta: np.ndarray, eps: float, m: np.ndarray,
                          S: np.ndarray) -> Moments:
    """Moments after ``LN`` with the scale frozen at its concentration value ``s̄``."""
    d = m.shape[0]
    Cm = m - m.mean()
    CS = S - S.mean(axis=0, keepdims=True)
    CSC = CS - CS.mean(axis=1, keepdims=True)
    s2 = (Cm @ Cm + np.trace(CSC)) / d + eps
    S1 = (gamma[:, None] * CSC * gamma[None, :]) / s2
    return Moments(gamma * Cm / np.sqrt(s2) + beta, 0.5 * (S1 + S1.T))


# ----------------------------------------------------------------------------- feed-forward
def _gelu_prime(z: np.ndarray) -> np.ndarray:
    return ndtr(z) + z * np.exp(-0.5 * z * z) / np.sqrt(2 * np.pi)


@functools.lru_cache(maxsize=8)
def _gauss_hermite(nodes: int) -> tuple[np.ndarray, np.ndarray]:
    """Probabilists' Gauss–Hermite nodes and weights normalised to sum 1 (read-only)."""
    xi, w = hermegauss(nodes)
    w = w / w.sum()
    xi.setflags(write=False)
    w.setflags(write=False)
    return xi, w


def gelu_hermite(mu: np.ndarray, sigma: np.ndarray, *, order: int = 40,
                 nodes: int = 200) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Hermite data of ``gelu(μ_j + σ_j ξ)``, ``ξ ~ N(0, 1)``.

    Returns
    -------
    a : (J, order + 1) array
        ``a_jk = E[gelu(μ_j + σ_j ξ) He_k(ξ)] / √k!`` (``a_j0`` is the mean).
    var : (J,) array
        ``Var gelu(μ_j + σ_j ξ)``.
    dmean : (J,) array
        ``E[gelu'(μ_j + σ_j ξ)]``.
    """
    xi, w = _gauss_hermite(int(nodes))
    z = mu[:, None] + sigma[:, None] * xi[None, :]
    G = gelu(z)
    K = int(order)
    H = np.empty((K + 1, xi.size))  # normalised He_k / √k! by the stable recurrence
    H[0] = 1.0
    if K >= 1:
        H[1] = xi
    for k in range(1, K):
        H[k + 1] = (xi * H[k] - np.sqrt(k) * H[k - 1]) / np.sqrt(k + 1)
    a = (G * w) @ H.T
    var = (G * G) @ w - a[:, 0] ** 2
    dmean = _gelu_prime(z) @ w
    return a, np.maximum(var, 0.0), dmean


def ffn_moment_map(layer: BertLayer, m: np.ndarray, S: np.ndarray, *, order: int = 40,
                   nodes: int = 200) -> tuple[Moments, float]:
    """Moments of ``u + W_2 gelu(W_1 u + b_1) + b_2`` for ``u ~ N(m, S)`` (Mehler series).

    Returns the moments and the Mehler truncation bound ``max_ij sqrt(r_i r_j)|ρ_ij|^{K+1}``
    on the entries of ``C_g`` (see the module docstring).
    """
    W1, W2 = layer.Wi, layer.Wf
    mu = W1 @ m + layer.bi
    C = W1 @ S @ W1.T
    sig = np.sqrt(np.maximum(np.diag(C), 0.0))
    a, var, dmean = gelu_hermite(mu, sig, order=order, nodes=nodes)
    pos = sig > 0
    denom = np.where(pos, sig, 1.0)
    R = C / denom[:, None] / denom[None, :]
    R[~pos, :] = 0.0
    R[:, ~pos] = 0.0
    np.clip(R, -1.0, 1.0, out=R)
    Cg = np.zeros_like(R)
    Rk = np.ones_like(R)
    tmp = np.empty_like(R)
    for k in range(1, a.shape[1]):
        Rk *= R
        np.multiply(Rk, a[:, k][:, None], out=tmp)
        tmp *= a[:, k][None, :]
        Cg += tmp
    tail = np.maximum(var - np.sum(a[:, 1:] ** 2, axis=1), 0.0)
    Rk *= R
    off = np.sqrt(np.outer(tail, tail)) * np.abs(Rk)
    np.fill_diagonal(off, 0.0)
    np.fill_diagonal(Cg, var)
    X = S @ W1.T * dmean[None, :] @ W2.T  # Cov(u, W_2 g) = Σ W_1ᵀ D W_2ᵀ
    S1 = S + X + X.T + W2 @ Cg @ W2.T
    mean = m + W2 @ a[:, 0] + layer.bf
    return Moments(mean, 0.5 * (S1 + S1.T)), float(off.max()) if off.size else 0.0


# ----------------------------------------------------------------------------- distances
def sym_sqrt(S: np.ndarray) -> np.ndarray:
    """Symmetric PSD square root (negative round-off eigenvalues clipped to 0)."""
    w, U = np.linalg.eigh(0.5 * (S + S.T))
    return (U * np.sqrt(np.clip(w, 0.0, None))) @ U.T


def bures_wasserstein(m1: np.ndarray, S1: np.ndarray, m2: np.ndarray, S2: np.ndarray) -> float:
    """``W_2(N(m1, S1), N(m2, S2))``: ``|m1−m2|² + tr S1 + tr S2 − 2 tr (S1^½ S2 S1^½)^½``.

    Valid for singular (PSD) covariances (eigenvalues clipped at 0, the square of the
    distance clipped at 0 against round-off).
    """
    r = sym_sqrt(S1)
    cross = np.linalg.eigvalsh(0.5 * ((r @ S2 @ r) + (r @ S2 @ r).T))
    w2 = float(np.sum((m1 - m2) ** 2) + np.trace(S1) + np.trace(S2)
               - 2.0 * np.sum(np.sqrt(np.clip(cross, 0.0, None))))
    return float(np.sqrt(max(w2, 0.0)))
