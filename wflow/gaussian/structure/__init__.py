r"""Structural long-time analysis of the covariance (constant parameters, docs/theory.md §7).

``Σ̇ = F(Σ) = AΣ + ΣAᵀ + Q(Σ)``, ``Q(Σ) = VΣBΣ + ΣBᵀΣVᵀ``, and
``Σ(t) = Φ(t)Σ₀Φ(t)ᵀ`` with ``Φ̇ = (A + VΣB)Φ``. Three rules decide the
behaviour from the structure, without integrating; each returns a
:class:`~wflow.gaussian.verdict.Classification` or ``None`` (rule does not apply).

**Rule 1 — linear flow** (``Q ≡ 0``: ``V = 0``, ``B = 0``, or ``V = vI`` with ``B``
skew). ``Σ(t) = e^{At}Σ₀e^{Aᵀt}``. With ``α`` the largest real part of the
eigenvalues of ``A`` restricted to the smallest ``A``-invariant subspace that
contains ``range Σ₀`` (all of ``R^d`` for ``scope="all"``): ``α < 0`` → ``Σ → 0``
at rate ``2|α|``; ``α > 0`` → unbounded, rate ``2α``; ``α = 0``: a Jordan block
of size ``j`` on the imaginary axis gives ``‖Σ‖ ~ t^{2(j−1)}``; semisimple critical
eigenvalues ``±iω`` give a bounded orbit ``e^{A_c t}Y e^{A_cᵀt}`` that is constant
(a limit, the spectral projection of Σ₀) iff ``A_c Y + Y A_cᵀ = 0``, and
oscillates otherwise.

**Rule 2 — commuting, V = vI.** With ``C = v(B + Bᵀ)`` and ``A_s, A_k, C``
pairwise commuting (common eigenbasis ``U``: ``A_s = diag(a)``, ``C = diag(c)``),
``P = Σ^{-1}`` solves ``Ṗ = −AᵀP − PA − C`` and, in the eigenbasis,
``Σ(t) = e^{A_k t} N(t)^{-1} e^{−A_k t}``,
``N(t) = e^{−A_s t}P₀e^{−A_s t} − diag(h_i(t))``,
``h_i = c_i(1 − e^{−2a_i t})/(2a_i)`` (``c_i t`` for ``a_i = 0``). Directions:
``c > 0, a ≥ 0`` blow up; ``c > 0, a < 0`` blow up iff Σ₀ is large (critical
variance ``−2a/c``); ``a > 0, c = 0`` grow like ``e^{2at}``; ``a > 0, c < 0`` tend
to ``−2a/c``; ``a = 0, c < 0`` decay like ``1/(|c|t)`` (algebraic);
``a < 0`` decay like ``e^{−2|a|t}``; ``a = c = 0`` are *neutral*: their block keeps
the Schur complement ``(P₀,NN − P₀,NX Ñ_XX^{-1} P₀,XN)^{-1}`` with
``Ñ_XX = P₀,XX + diag(|c|/(2|a|))`` over the contracting directions ``X``
(``a < 0``): a limit that depends on Σ₀, rotated by ``e^{A_k t}`` (oscillation
unless it commutes with ``A_k``). Blow-up times come from the closed form
(:func:`~wflow.gaussian.riccati.blowup_time_closed_form`); when every
expanding direction (``c > 0``) has ``a < 0``, ``h_i`` saturates and a scan up
to the saturation time plus the Loewner bound ``L₀ᵀG(t)L₀ ⪯ L₀ᵀ(G₊(∞) +
G₋(t_s))L₀`` certifies that no blow-up follows.

**Rule 3 — homogeneous, A = 0**, ``V`` symmetric definite (sign ``s``) and ``B``
symmetric (for ``V = vI`` only ``B_s = (B + Bᵀ)/2`` enters). ``Q`` is invariant
under ``(V, B) → (−V, −B)``, so let ``V' = sV ≻ 0``, ``B' = sB``. Exact facts:

* Lyapunov: ``d/dt tr(V'^{-1}Σ) = 2 tr(ΣB'Σ)``.
* Frozen kernel part: with ``Σ₀ = L₀L₀ᵀ`` and ``Π`` the orthogonal projector
  onto ``ker(BL₀) ∩ ker(BᵀL₀)``, the vectors ``L₀Πy`` are fixed by ``Φ(t)``, so
  ``Σ(t) = Σ_K + Σ_W(t)`` with ``Σ_K = L₀ΠL₀ᵀ`` constant and ``Σ_W`` solving the
  same equation from ``Σ₀ − Σ_K`` (whose range meets ``ker B`` only in 0).
  For full-rank Σ₀, ``Σ_K = Q(QᵀΣ₀^{-1}Q)^{-1}Qᵀ`` (``Q`` a basis of ``ker B``)
  and ``QᵀΣ(t)^{-1}Q`` is conserved.
* ``B' ≺ 0``: ``Σ → 0`` and ``‖Σ(t)‖ ≍ 1/t`` (``ẏ ≤ −κy²`` for
  ``y = tr(V'^{-1}Σ)`` and ``‖Σ̇‖ ≤ 2‖V‖‖B‖‖Σ‖²``); ``X = tΣ`` obeys
  ``dX/d(ln t) = X + Q(X)``, i.e. the Riccati equation with ``A = I/2``, whose
  stable equilibrium ``X*`` is reported as ``lim tΣ(t)``.
* ``B' ⪯ 0`` singular: ``Σ → Σ_K`` (a point of the equilibrium continuum
  ``{BΣ = 0}`` that depends on Σ₀). For ``V = vI`` this is the closed form
  ``Σ(t)⁻¹ = Σ₀⁻¹ − 2vB_s t`` (rate ``1/t``). For ``V`` commuting with ``B`` the
  range-of-B block ``Σ_RR`` solves a definite problem of its own (``≍ 1/t``) and,
  writing ``Σ_W = TΣ_RRTᵀ`` with ``T = [J; I]``, the slope obeys the linear
  ``J̇ = (V_QJ − JV_R)Σ_RRB_R`` and ``(Σ_W)_QQ = JΣ_RRJᵀ`` satisfies
  ``d/dt tr(V_Q⁻¹(Σ_W)_QQ) = 2 tr(JΣ_RRB_RΣ_RRJᵀ) ≤ 0``; with
  ``tΣ_RR → diag(1/(2v_i|β_i|))`` this gives ``J_qi ~ t^{(1 − v_q/v_i)/2}`` and the
  algebraic exponent ``min(1, min v_q/v_i)`` over the eigenvalues ``v_q`` of ``V'`` on
  ``ker B`` and ``v_i`` on ``range B`` that Σ₀ couples (an asymptotic derivation,
  exact against the 2-d closed form with ``V = diag(v₁, v₂)``,
  ``B = diag(−1, 0)``: ``σ₂₂(t) − σ₂₂(∞) ∝ (1 + 2v₁σ₁₁(0)t)^{−v₂/v₁}``). For other ``V`` the
  Lyapunov function gives boundedness and approach to ``{BΣ = 0}``; the limit
  ``Σ_K`` is then confirmed by integrating (``method="lyapunov"``).
* ``B' ≻ 0``: blow-up for every ``Σ₀ ≠ 0`` before
  ``t ≤ r λ_max(V'^{-1})² / (2 β_min tr(V'^{-1}Σ₀))`` (``ẏ ≥ κy²``); the time
  is the closed form (``V = vI``) or the integrator's. ``B' ⪰ 0`` singular with
  ``V`` commuting with ``B``: blow-up iff ``Σ_W(0) ≠ 0``.
"""

from __future__ import annotations

from .commuting import commuting_rule, commuting_structure
from .homogeneous import frozen_kernel_part, homogeneous_rule, self_similar_profile
from .linear import linear_rule
from .probes import integrate_tail, probe_tolerances

__all__ = [
    "linear_rule",
    "commuting_rule",
    "homogeneous_rule",
    "commuting_structure",
    "frozen_kernel_part",
    "self_similar_profile",
    "probe_tolerances",
    "integrate_tail",
]
