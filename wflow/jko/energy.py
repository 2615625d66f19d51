"""The energy on cell measures and its gradient in the cell masses (the smooth part of J_k).

``E(ν) = Σ_h w_h (1/2β) Σ_ij ν_i ν_j Φ(β ĉ_iᵀA_h ĉ_j)`` is quadratic in ``ν``; its
gradient ``∂E/∂ν_i = Σ_h w_h Φ_h(ĉ_i)/β`` comes from :func:`wflow.kernels.kernel_sums`
(symmetric ``A_h``; checked by a finite-difference test on the simplex).
"""

from __future__ import annotations

import numpy as np

from ..attention.heads import Attention, Heads
from ..attention.kinds import get_kind
from ..kernels import kernel_sums

__all__ = [
    "energy_gradient",
]


def _check_heads(heads: Heads) -> int:
    if not heads.is_symmetric():
        raise ValueError("heads: the JKO scheme needs symmetric score matrices A_h (it "
                         "discretises the gradient flow of E; non-symmetric heads have none)")
    s = heads.value_alignment()
    if s == 0:
        raise ValueError("heads: the JKO scheme needs value-aligned heads V_h = ±A_h (the "
                         "gradient-flow surrogate of docs/theory.md §3); got other value matrices")
    return int(s)


def energy_gradient(points: np.ndarray, nu: np.ndarray, heads: Heads, attn: Attention, *,
                    backend: str | None = None) -> np.ndarray:
    """``∂E/∂ν_i = Σ_h w_h Φ_h(ĉ_i)/β`` for cell masses ``ν`` (signed masses allowed).

    Linear in ``ν``; ``E(ν) = ½ <ν, ∂E/∂ν(ν)>``. Exact sums (to round-off) from
    :func:`wflow.kernels.kernel_sums` with symmetric ``A_h``: ``backend = None`` takes the
    kind's :attr:`~wflow.attention.kinds.AttentionKind.exact_backend` (compiled direct
    sums, NumPy for a kind without compiled code); ``"auto"``: the fast summation where it
    pays, for diagnostics on large meshes.
    """
    if backend is None:
        backend = get_kind(attn.kind).exact_backend
    sums = kernel_sums(points, points, nu, heads.Q, heads.K, beta=attn.beta, kind=attn.kind,
                       potential=True, backend=backend)
    return np.einsum("h,hm->m", heads.w, sums.Phi) / attn.beta
