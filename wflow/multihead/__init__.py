"""Quantitative multi-head results of [MH] (docs/theory.md §6): formulas and checks.

Conventions: softmax heads, ``w_h = 1`` (the [MH] sum over heads) unless stated, value
aligned (``V_h = A_h``), masses ``m_j = 1/n``, so that for token ``i`` and head ``h``
``f_h(x_i) = Σ_j p^h_ij A_h x_j``, ``p^h_ij = softmax_j(β <x_i, A_h x_j>)`` (the self term
``j = i`` included, as in the particle engine), ``ẋ_i = P_{x_i} Σ_h w_h f_h(x_i)``.

Radial dominance and the critical temperature
---------------------------------------------
For static heads the per-head energy rate splits (see :mod:`wflow.diagnostics`) as
``dE_h/dt = own_h + cross_direct_h + cross_radial_h`` with, per token,

* own tangential power ``own_i = <∇ψ_h, P_x w_h f_h>`` (``= w_h Z_h |P_x f_h|²`` for
  value-aligned heads, since then ``∇ψ_h = Z_h f_h``);
* ``cross_direct_i = <∇ψ_h, Σ_{h'≠h} w_h' f_h'>`` (zero when ``A_h A_h' = 0``);
* ``cross_radial_i = −<∇ψ_h, x> Σ_{h'≠h} w_h' a^{h'}``, radial shadows ``a^h = <f_h, x>``.

The *radial-dominance condition* of [MH] compares the own power with the cross-head
radial-shadow terms bounded by Cauchy–Schwarz, ``|<∇ψ_h, x>| ≤ |∇ψ_h|``::

    own_h  ≥  R_h := ∫ |∇ψ_h(x)| Σ_{h'≠h} w_h' |a^{h'}(x)| dμ(x).          (RD)

``margin_h = own_h − R_h``. With orthogonal heads (``cross_direct = 0``) (RD) implies
``dE_h/dt ≥ own_h − ∫|cross_radial| ≥ margin_h ≥ 0``. For arbitrary heads the same
argument gives the certificate ``margin_general_h = own_h + cross_direct_h − R_h ≥ 0``
⇒ ``dE_h/dt ≥ 0``.

For approximately orthogonal symmetric heads the direct term has an a-priori bound from
the head overlaps: ``∇ψ_h = A_h Y_h`` and ``f_h' = V_h' Y_h'/Z_h'`` (softmax) give
``|cross_direct_h| ≤ D_h := Σ_{h'≠h} w_h' ‖A_h V_h'‖ ∫ |Y_h| |Y_h'|/Z_h' dμ`` (for
value-aligned heads ``‖A_h V_h'‖ = ‖A_h A_h'‖ ≤ δ``). The resulting *certificate*
``certificate_h = own_h − R_h − D_h`` is a lower bound of ``dE_h/dt`` that uses neither
``cross_direct`` nor ``cross_radial`` themselves: ``dE_h/dt ≥ certificate_h``.

**Which configuration gives** ``β*``. Take ``n ≤ d`` orthonormal tokens and ``H``
*identical* scalar heads ``A_h = V_h = α I`` sharing the token space (``w_h`` equal;
their common value cancels). With ``u = e^{αβ}`` every token sees
``f = α(u x_i + Σ_{j≠i} x_j)/(u + n − 1)``, so ``a = |f| c`` with the cosine::

    c(β) = <f, x_i>/|f| = u / sqrt(u² + n − 1),

``own = Z |f|² (1 − c²)`` and ``R = Z |f| (H − 1) |f| c``. Hence (RD) ⇔
``1 − c² ≥ (H − 1) c`` ⇔ ``c ≤ c*(H)``, the positive root of ``c² + (H−1) c − 1 = 0``,

    c*(H) = (sqrt((H−1)² + 4) − (H−1)) / 2,

and, ``c`` being increasing in ``β``, (RD) ⇔ ``β ≤ β*`` with

    β* = (1/2α) ln( c*² (n−1) / (1 − c*²) ).

This reproduces docs/theory.md exactly; the *sharp* radial term instead (``own ≥ |cross_radial|``,
``|cross_radial| = Z (H−1) a²``) gives ``c² ≤ 1/H``, i.e.
``β ≤ β*_exact = (1/2α) ln((n−1)/(H−1))`` (:func:`beta_star_exact`), and ``β* < β*_exact``
because (RD) is only sufficient. In this shared-space configuration ``cross_direct > 0``
(the heads coincide), so the per-head rates themselves stay positive; the condition
matters for heads in (approximately) orthogonal subspaces. Special cases: ``H = 1`` has no
cross term, ``c*(1) = 1`` and ``β* = +∞`` (dominance at every ``β``); ``β* ≤ 0`` (when
``c*(H)² ≤ 1/n``, e.g. ``H = 4, n ≤ 10``) means (RD) fails at every ``β > 0`` because
already ``c(0) = 1/√n > c*``.

For heads in orthogonal coordinate blocks ``A_h = Hα P_h`` acting on the *spread*
orthonormal tokens ``x_i = H^{-1/2} Σ_h e_{h,i}`` (each head again sees scores
``α δ_ij``; :func:`block_heads`, :func:`spread_tokens`), ``f_h`` lies in block ``h`` and
``c_h = a/|f_h| = c(β)/√H``; (RD) then holds iff
``β ≤ β*_⊥ = (1/2α) ln(H c*² (n−1) / (1 − H c*²))`` (:func:`beta_star_blocks`), while the
sharp per-head rates are ``∝ n − 1 > 0``.

Equiangular reduction
---------------------
If ``<x_i, x_j> = γ`` for all ``i ≠ j`` then ``P_{x_i} x_j = x_j − γ x_i`` and, for scalar
heads ``A_h = V_h = λ_h I``, ``ẋ_i = κ(γ) Σ_{j≠i}(x_j − γ x_i)``; the Gram matrix stays
equiangular and

    γ̇ = F(γ) = 2 κ(γ) (1 − γ)(1 + (n−1) γ),

* softmax: ``κ = Σ_h w_h λ_h / (e^{βλ_h(1−γ)} + n − 1)``;
* USA: ``κ = Σ_h w_h λ_h e^{βλ_h γ} / n``; ReLU: ``κ = Σ_h w_h β λ_h² max(0, γ) / n``.

Softmax: ``F(0) = Σ_h φ(λ_h)`` with ``φ(λ) = 2λ / (e^{λβ} + n − 1)`` (``w_h = 1``), and
``F(γ) ≈ 2Λ (1 − γ)`` as ``γ → 1`` (``Λ = Σ_h λ_h``): ``1 − γ ≈ C e^{−2Λt}``. ReLU has
``F(0) = 0`` and ``γ̇ ≈ (2β Σλ_h²/n) γ`` near 0, hence the ``n log d`` clustering time from
a random start (``γ_0 ~ d^{-1/2}``).

``φ`` is concave then convex in ``λ``: with ``s = βλ``, ``φ'' ∝ e^s (s − 2) − (n−1)(s + 2)``,
which has exactly one positive root ``s_c > 2`` (the function is convex in ``s`` and
negative at ``s = 2``); ``λ_c = s_c/β`` (:func:`lambda_c`). The equation
``(s − 2) e^s = (n−1)(s + 2)`` is a generalised Lambert-W equation with no elementary closed
form; it is solved by Brent's method to ``xtol = 1e-14``.

Attention entropy of an equiangular row: ``p_self = 1/(1 + (n−1) e^{−βλ(1−γ)})``, the others
share ``1 − p_self``; ``H = −p_self log p_self − (1 − p_self) log((1 − p_self)/(n−1))``,
non-decreasing in ``γ`` and equal to ``log n`` at ``γ = 1``.
"""

from __future__ import annotations

from .dominance import (
    RadialDominance,
    dominance_root,
    radial_dominance,
)
from .equiangular import (
    EquiangularSolution,
    equiangular_entropy,
    equiangular_rhs,
    equiangular_time,
    relu_equiangular_time,
    solve_equiangular,
)
from .formulas import (
    beta_star,
    beta_star_blocks,
    beta_star_exact,
    c_star,
    dominance_cosine,
    early_rate,
    equiangular_rate,
    lambda_c,
)

__all__ = [
    "c_star",
    "beta_star",
    "beta_star_exact",
    "beta_star_blocks",
    "dominance_cosine",
    "equiangular_rate",
    "early_rate",
    "lambda_c",
    "equiangular_rhs",
    "EquiangularSolution",
    "solve_equiangular",
    "equiangular_entropy",
    "equiangular_time",
    "relu_equiangular_time",
    "RadialDominance",
    "radial_dominance",
    "dominance_root",
]
