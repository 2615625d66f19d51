r"""The discretisation in the position ``s``: slice centres and the cumulative measure.

The family ``ρ_t(s, ·)``, ``s ∈ [0, 1]``, is represented by ``S`` slices: slice ``k``
holds the cell masses ``m_k = ρ(s_k, ·)|K| / S`` of the density at its centre
``s_k = (k + ½)/S`` (each slice a probability density times its weight ``1/S``). Slice
``k`` feels the attention to the (biased) cumulative measure

.. math::

    μ_{s}^{b} = \int_0^{s} e^{b(s, s')} ρ(s', ·)\, ds', \qquad
    μ_{s_k}^{b} ≈ \sum_{l < k} e^{b(s_k, s_l)} m_l + c\, m_k,

the composite midpoint rule on the whole slices ``l < k`` (error ``O(S^{-2})``) and, on
the half slice ``[k/S, s_k]``, the rectangle rule with the value at ``s_k``
(``c = ½``: error ``ρ'·(2S)^{-2}/2 = O(S^{-2})``). Both are second order in ``1/S`` for a
family smooth in ``s``; ``c = 0`` (the strict mask ``j < i`` taken slice-wise) or ``c = 1``
(``j ≤ i`` slice-wise) miss the half slice by ``O(1/S)``: order 1 (the negative controls).

The attention sums are linear in the source masses, so the sums over ``μ_{s_k}`` are the
same combination of the sums over each slice: one :func:`wflow.kernels.kernel_sums` call
per slice, then :meth:`CumulativeMeasure.apply`. With the ALiBi bias
``b(s, s') = −λ (s − s')`` (or none) the combination is a prefix sum,
``E_0 = 0``, ``E_{k+1} = e^{−λ/S}(E_k + X_k)``, ``μ_k = E_k + c X_k``: ``O(S)`` per target;
a user's bias ``b(s, s')`` uses the ``(S, S)`` lower-triangular matrix of weights
(``O(S²)`` per target, still below the ``O(S M)`` of the sums themselves for ``S ≤ M``).
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass

import numpy as np

__all__ = ["slice_centres", "CumulativeMeasure", "SliceBias"]

#: A bias of the limit ``b(s, s')``: vectorised over broadcasting float arrays in ``[0, 1]``.
SliceBias = Callable[[np.ndarray, np.ndarray], np.ndarray]


def slice_centres(S: int) -> np.ndarray:
    """Slice centres ``s_k = (k + ½)/S``, shape ``(S,)``."""
    if int(S) < 1:
        raise ValueError(f"kinetic.S: must be >= 1, got {S!r}")
    return (np.arange(int(S)) + 0.5) / int(S)


@dataclass(frozen=True)
class CumulativeMeasure:
    """The quadrature of ``μ_{s_k}`` as a linear map on per-slice quantities.

    Parameters
    ----------
    S : int
        Number of slices.
    self_weight : float
        ``c``: the weight of slice ``k`` in its own cumulative measure (``½`` midpoint).
    alibi : float
        ``λ >= 0`` of ``b(s, s') = −λ (s − s')`` (prefix sums, ``O(S)``).
    bias : callable, optional
        A user's ``b(s, s')`` (vectorised, finite); replaces ``alibi`` (matrix, ``O(S²)``).
    """

    S: int
    self_weight: float = 0.5
    alibi: float = 0.0
    bias: SliceBias | None = None

    def __post_init__(self) -> None:
        if self.bias is not None and self.alibi != 0.0:
            raise ValueError("kinetic.alibi: give either alibi = λ or a bias b(s, s'), not "
                             "both")
        if self.bias is not None and not callable(self.bias):
            raise ValueError(f"bias: expected a callable b(s, s'), got {self.bias!r}")

    @property
    def centres(self) -> np.ndarray:
        """``s_k``, shape ``(S,)``."""
        return slice_centres(self.S)

    def matrix(self) -> np.ndarray:
        """The ``(S, S)`` weights ``W_{kl}``: ``μ_{s_k} ≈ Σ_l W_{kl} m_l`` (lower triangular)."""
        s = self.centres
        c = np.tril(np.ones((self.S, self.S)), -1) + self.self_weight * np.eye(self.S)
        if self.bias is None:
            b = -self.alibi * (s[:, None] - s[None, :])
        else:
            b = np.broadcast_to(np.asarray(self.bias(s[:, None], s[None, :]),
                                           dtype=np.float64), c.shape)
            if not np.all(np.isfinite(b[c > 0])):
                raise ValueError("bias: b(s, s') returned NaN or Inf on the slice centres")
        with np.errstate(over="ignore"):
            return np.where(c > 0, c * np.exp(np.where(c > 0, b, 0.0)), 0.0)

    def sees_nothing(self, k: int) -> bool:
        """Whether slice ``k`` attends to no mass (slice 0 with ``self_weight = 0``)."""
        return k == 0 and self.self_weight == 0.0

    def apply(self, X: np.ndarray) -> np.ndarray:
        """``Σ_l W_{kl} X_l`` for per-slice arrays ``X`` of shape ``(S, ...)``.

        Prefix sums (``O(S)`` per entry) for the ALiBi bias or none; the matrix product
        for a user's bias.
        """
        X = np.asarray(X, dtype=np.float64)
        if X.shape[0] != self.S:
            raise ValueError(f"expected {self.S} slices on the first axis, got {X.shape}")
        if self.bias is not None:
            return np.tensordot(self.matrix(), X, axes=(1, 0))
        r = math.exp(-self.alibi / self.S)
        out = np.empty_like(X)
        E = np.zeros_like(X[0])
        for k in range(self.S):
            out[k] = E + self.self_weight * X[k]
            E = r * (E + X[k])
        return out
