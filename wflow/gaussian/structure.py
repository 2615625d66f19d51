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

import logging
import math
from typing import Any

import numpy as np
import scipy.linalg

from .asymptotics import RateFit, fit_tail_rate, sample_times
from .moments import psd_factor
from .params import GaussianParams
from .riccati import (
    EquilibriumFamily,
    blowup_time_closed_form,
    equilibria,
    quadratic_term_vanishes,
    scalar_value,
    sym_basis,
)
from .solver import integrate_moments
from .verdict import Classification

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

logger = logging.getLogger(__name__)

_EPS = np.finfo(np.float64).eps
#: Real parts within ``_CRIT · ‖A‖`` of 0 count as 0 (rule 1): eigenvalues of a defective
#: matrix are only determined to ``O(√ε ‖A‖)``; 1e-6 leaves a margin over √ε ≈ 1.5e-8.
_CRIT = 1e-6


def _sym(M: np.ndarray) -> np.ndarray:
    return 0.5 * (M + M.T)


def probe_tolerances(Sigma0: np.ndarray) -> tuple[float, float, float]:
    """``(rtol, atol, floor)`` for tail integrations from Σ₀.

    The state is the factor ``L`` (``Σ = LLᵀ``, entries ``~ √‖Σ‖``): ``atol = 1e-14
    √‖Σ₀‖``; ``Σ`` keeps ~3 correct digits while ``|L| ≥ 1e3 atol``, so decay fits stop
    at ``floor = (1e3·atol)²``.
    """
    s = math.sqrt(max(float(np.linalg.norm(Sigma0, 2)), 1e-300))
    atol = 1e-14 * s
    return 1e-10, atol, (1e3 * atol) ** 2


def integrate_tail(params: GaussianParams, Sigma0: np.ndarray, horizon: float, *,
                   solver: str = "LSODA") -> Any:
    """Integrate the covariance from Σ₀ to ``horizon`` on :func:`sample_times` (quietly)."""
    rtol, atol, _ = probe_tolerances(Sigma0)
    # quiet: a failed status is read by the callers
    return integrate_moments(params, np.zeros(params.d), Sigma0, horizon,
                             t_eval=sample_times(horizon), method=solver, rtol=rtol, atol=atol,
                             quiet=True)


def _fit_distance(tr: Any, target: np.ndarray | None, Sigma0: np.ndarray) -> RateFit:
    """Fit ``‖Σ(t) − target‖`` (``‖Σ(t)‖`` when ``target`` is None) on the tail."""
    rtol, _, floor = probe_tolerances(Sigma0)
    if target is None:
        q = np.linalg.norm(tr.Sigma, axis=(1, 2))
        return fit_tail_rate(tr.t, q, floor=floor)
    q = np.linalg.norm(tr.Sigma - target[None], axis=(1, 2))
    # the integration's global error is ~ 1e3 rtol ‖Σ‖ over long horizons
    return fit_tail_rate(tr.t, q, floor=1e3 * rtol * float(np.linalg.norm(target)) + floor)


# ----------------------------------------------------------------------------- rule 1
def _krylov_basis(A: np.ndarray, L0: np.ndarray) -> np.ndarray:
    """Orthonormal basis of the smallest A-invariant subspace containing ``range L0``."""
    d = A.shape[0]
    K = np.zeros((d, 0))
    block = L0
    # new directions below the round-off of the block they come from (‖L0‖, then ‖A‖ times
    # orthonormal columns) are not new
    ref = max(float(np.linalg.norm(L0, 2)), 1e-300)
    for _ in range(d + 1):
        if K.shape[1]:
            block = block - K @ (K.T @ block)
            block = block - K @ (K.T @ block)  # re-orthogonalise (classical Gram–Schmidt twice)
        if block.size == 0:
            break
        U, s, _ = np.linalg.svd(block, full_matrices=False)
        new = U[:, s > 1e3 * d * _EPS * ref]
        if new.shape[1] == 0:
            break
        K = np.hstack([K, new])
        if K.shape[1] >= d:
            break
        block = A @ new
        ref = max(float(np.linalg.norm(A, 2)), 1e-300)
    return K


def _min_poly_residual(T11: np.ndarray, omegas: list[float], zero: bool, power: int,
                       scale: float) -> float:
    """``‖p(T11)^power‖ / scale^deg`` for ``p(x) = x^[zero] ∏ (x² + ω²)`` (scale ~ ‖A‖)."""
    k = T11.shape[0]
    P = np.eye(k)
    for w in omegas:
        P = P @ (T11 @ T11 + w * w * np.eye(k))
    if zero:
        P = P @ T11
    P = np.linalg.matrix_power(P, power)
    deg = (2 * len(omegas) + int(zero)) * power
    return float(np.linalg.norm(P, 2)) / scale**deg


def linear_rule(params: GaussianParams, Sigma0: np.ndarray | None) -> Classification | None:
    """Rule 1 (module docstring): ``Q ≡ 0``, ``Σ(t) = e^{At}Σ₀e^{Aᵀt}``."""
    if not quadratic_term_vanishes(params):
        return None
    A = params.A
    d = params.d
    scope = "all" if Sigma0 is None else "Sigma0"
    base = "linear flow Σ(t) = e^{At}Σ₀e^{Aᵀt} (the attention term VΣBΣ + ΣBᵀΣVᵀ vanishes)"
    if not np.any(A):
        if Sigma0 is None:
            return Classification("converges", "exact", f"{base}; A = 0: every Σ is an "
                                  "equilibrium, Σ(t) = Σ₀ (the limit is Σ₀)", None,
                                  "stationary", None, scope=scope)
        lab = "converges" if np.any(Sigma0) else "converges_to_zero"
        return Classification(lab, "exact", f"{base}; A = 0: Σ(t) = Σ₀", Sigma0.copy(),
                              "stationary", None, scope=scope)
    nA = float(np.linalg.norm(A, 2))
    tol = _CRIT * nA
    if Sigma0 is not None:
        L0 = psd_factor(Sigma0, name="Sigma0")
        K = _krylov_basis(A, L0)
        S0K = K.T @ Sigma0 @ K
    else:
        K = np.eye(d)
        S0K = np.eye(d)
    AK = K.T @ A @ K
    ev = np.linalg.eigvals(AK)
    alpha = float(np.max(ev.real))
    details: dict[str, Any] = {"eigenvalues_real": np.sort(ev.real).tolist(),
                               "eigenvalues_imag": ev.imag[np.argsort(ev.real)].tolist(),
                               "invariant_subspace_dim": int(K.shape[1])}
    if alpha > tol:
        return Classification("unbounded", "exact",
                              f"{base}; A has an eigenvalue with Re λ = {alpha:.6g} > 0 "
                              f"(excited by Σ₀): ‖Σ‖ grows like e^(2·{alpha:.6g} t)", None,
                              "exponential", 2 * alpha, scope=scope, details=details)
    T, Z, k = scipy.linalg.schur(AK, output="real", sort=lambda x, y: abs(x) <= tol)
    n = AK.shape[0]
    stable = ev.real < -tol
    alpha_s = float(np.max(ev.real[stable])) if np.any(stable) else None
    if k == 0:
        return Classification("converges_to_zero", "exact",
                              f"{base}; every eigenvalue of A has Re λ < 0: ‖Σ‖ ~ "
                              f"e^(−{2 * abs(alpha):.6g} t)", np.zeros((d, d)), "exponential",
                              2 * abs(alpha), scope=scope, details=details)
    T11, T12, T22 = T[:k, :k], T[:k, k:], T[k:, k:]
    X = (scipy.linalg.solve_sylvester(T11, -T22, -T12) if k < n else np.zeros((k, 0)))
    Lc = np.hstack([np.eye(k), -X]) @ Z.T  # spectral projection onto the critical subspace
    mu = np.linalg.eigvals(T11)
    # cluster the frequencies |Im μ| (tolerance as for the real parts)
    omegas: list[float] = []
    for w in sorted(np.abs(mu.imag)):
        if w > tol and not any(abs(w - o) <= tol for o in omegas):
            omegas.append(float(w))
    has_zero = bool(np.any(np.abs(mu) <= tol))
    details["critical_frequencies"] = omegas
    # semisimple iff the minimal polynomial has simple roots: p(T11) = 0 with
    # p(x) = x^[0 ∈ spec] ∏ (x² + ω²); a Jordan block leaves an O(1) residual
    j = 1
    while j <= k and _min_poly_residual(T11, omegas, has_zero, j, nA) > _CRIT:
        j += 1
    if j > 1:
        return Classification("unbounded", "exact",
                              f"{base}; A has a Jordan block of size {j} on the imaginary axis: "
                              f"‖Σ‖ ~ t^{2 * (j - 1)}", None, "algebraic", float(2 * (j - 1)),
                              scope=scope, details=details)
    Y = Lc @ S0K @ Lc.T
    Zc = K @ Z[:, :k]
    rot = T11 @ Y + Y @ T11.T
    constant = float(np.linalg.norm(rot)) <= _CRIT * nA * max(float(np.linalg.norm(Y)), 1e-300)
    if Sigma0 is None:
        constant = not omegas
    if not constant:
        return Classification("oscillates", "exact",
                              f"{base}; A has semisimple eigenvalues ±i·{omegas} on the imaginary "
                              "axis and Σ₀'s component there is not invariant under their "
                              "rotation: Σ(t) is (quasi-)periodic", None, None, None,
                              scope=scope, details=details)
    if Sigma0 is None:
        rate = abs(alpha_s) if alpha_s is not None else None
        return Classification("converges", "exact",
                              f"{base}; the critical eigenvalues of A are semisimple zeros: Σ "
                              "converges to the spectral projection of Σ₀ onto ker A (depends "
                              "on Σ₀)", None, "exponential" if rate else "stationary", rate,
                              scope=scope, details=details)
    limit = _sym(Zc @ Y @ Zc.T)
    if alpha_s is None:
        return Classification("converges", "exact", f"{base}; Σ₀ is invariant under the flow "
                              "(A's critical part is semisimple and A_cΣ₀ + Σ₀A_cᵀ = 0): "
                              "Σ(t) = Σ₀", limit, "stationary", None,
                              scope=scope, details=details)
    Ls = Z[:, k:].T
    cross = Lc @ S0K @ Ls.T
    coupled = float(np.linalg.norm(cross)) > 1e3 * _EPS * max(float(np.linalg.norm(S0K)), 1e-300)
    rate = abs(alpha_s) if coupled else 2 * abs(alpha_s)
    return Classification("converges", "exact",
                          f"{base}; the critical part of A is semisimple and Σ₀'s projection "
                          f"onto it is invariant: Σ → that projection, the rest decays like "
                          f"e^({alpha_s:.6g} t)", limit, "exponential", rate, scope=scope,
                          details=details)


# ----------------------------------------------------------------------------- rule 2
def commuting_structure(params: GaussianParams, rtol: float = 1e-10
                        ) -> tuple[np.ndarray, np.ndarray, np.ndarray] | None:
    """``(a, c, U)`` if ``V = vI`` and ``A_s, A_k, C = v(B + Bᵀ)`` commute, else None.

    ``U`` is the common eigenbasis: ``A_s = U diag(a) Uᵀ``, ``C = U diag(c) Uᵀ``.
    """
    v = scalar_value(params.V)
    if v is None:
        return None
    A = params.A
    As, Ak = 0.5 * (A + A.T), 0.5 * (A - A.T)
    C = v * (params.B + params.B.T)
    scale = max(np.linalg.norm(As), np.linalg.norm(Ak), np.linalg.norm(C), 1e-300)
    for X, Y in ((As, C), (Ak, C), (As, Ak)):
        if np.linalg.norm(X @ Y - Y @ X) > rtol * scale**2:
            return None
    nA, nC = np.linalg.norm(As), np.linalg.norm(C)
    # a generic combination separates the joint eigenvalues (golden-ratio weight)
    gamma = 0.6180339887498949 * (nA / nC if nA > 0 and nC > 0 else 1.0)
    _, U = np.linalg.eigh(As + gamma * C)
    Da, Dc = U.T @ As @ U, U.T @ C @ U
    off = max(np.linalg.norm(Da - np.diag(np.diag(Da))), np.linalg.norm(Dc - np.diag(np.diag(Dc))))
    if off > 1e3 * rtol * scale:
        return None
    return np.diag(Da).copy(), np.diag(Dc).copy(), U


def _commuting_blowup(params: GaussianParams, a: np.ndarray, c: np.ndarray, U: np.ndarray,
                      Sigma0: np.ndarray, tol: float) -> float | None:
    """Blow-up time from Σ₀ (``inf``: certified none; None: could not certify)."""
    pos = c > tol
    if not np.any(pos):
        return math.inf
    lam0 = float(np.linalg.eigvalsh(Sigma0)[-1])
    if np.any(pos & (a >= -tol)):
        t_try = 1.0 / (float(np.max(c)) * max(lam0, 1e-300))
        for _ in range(80):
            t = blowup_time_closed_form(params, Sigma0, t_max=t_try, n_grid=2000)
            if math.isfinite(t):
                return t
            t_try *= 2.0
        return None
    # every expanding direction contracts (a < 0): h_i saturates like e^{−2|a|t}
    t_sat = math.log(1e16) / (2.0 * float(np.min(np.abs(a[pos]))))
    t = blowup_time_closed_form(params, Sigma0, t_max=t_sat, n_grid=4000)
    if math.isfinite(t):
        return t
    with np.errstate(over="ignore"):
        g_inf = np.where(pos, c / (2 * np.abs(np.where(pos, a, 1.0))), 0.0)
        g_neg = np.where(c < -tol, c * np.where(np.abs(a) > tol,
                                                np.expm1(2 * a * t_sat) / np.where(
                                                    np.abs(a) > tol, 2 * a, 1.0),
                                                t_sat), 0.0)
    L0 = psd_factor(Sigma0, name="Sigma0")
    Lt = U.T @ L0
    bound = float(np.linalg.eigvalsh(Lt.T @ ((g_inf + g_neg)[:, None] * Lt))[-1])
    return math.inf if bound < 1.0 - 1e-12 else None


def commuting_rule(params: GaussianParams, Sigma0: np.ndarray | None) -> Classification | None:
    """Rule 2 (module docstring): ``V = vI`` with ``A_s, A_k, C`` commuting."""
    struct = commuting_structure(params)
    if struct is None:
        return None
    a, c, U = struct
    d = params.d
    scope = "all" if Sigma0 is None else "Sigma0"
    scale = max(float(np.max(np.abs(a), initial=0.0)), float(np.max(np.abs(c), initial=0.0)),
                1e-300)
    tol = 1e3 * _EPS * scale  # round-off of the joint eigen-decomposition
    details: dict[str, Any] = {"a": a.tolist(), "c": c.tolist(), "basis": U.tolist()}
    pos = c > tol
    Am = a < -tol
    zero_a = np.abs(a) <= tol
    Z = zero_a & (c < -tol)
    N0 = zero_a & (np.abs(c) <= tol)
    Fg = (a > tol) & (c < -tol)
    G = (a > tol) & (np.abs(c) <= tol)
    Ak = U.T @ (0.5 * (params.A - params.A.T)) @ U
    base = "V = vI and A_s, A_k, C = v(B + Bᵀ) commute (closed form through P = Σ⁻¹)"
    sig_F = np.where(Fg, -2 * a / np.where(Fg, c, -1.0), 0.0)
    fam: tuple[EquilibriumFamily, ...] = ()
    if np.any(N0) and not (np.any(pos) or np.any(G)):
        E = sym_basis(int(np.sum(N0)))
        Un = U[:, N0]
        Akn = Ak[np.ix_(N0, N0)]
        op = np.asarray([np.einsum("kij,ij->k", E, Akn @ H - H @ Akn) for H in E]).T
        _, s, vt = np.linalg.svd(op) if op.size else (None, np.zeros(0), np.eye(len(E)))
        rank = int(np.sum(s > 1e3 * _EPS * max(float(s[0]) if s.size else 0.0, 1e-300)))
        basis = np.einsum("ia,kab,jb->kij", Un, np.einsum("nk,kab->nab", vt[rank:], E), Un)
        fam = (EquilibriumFamily(_sym((U * sig_F) @ U.T), basis,
                                 "Σ = (isolated variances −2a/c) + any S ⪰ 0 on the neutral "
                                 "directions a = c = 0 that commutes with A's skew part",
                                 "commuting"),)
    if Sigma0 is None:
        if np.any(pos & (a >= -tol)):
            i = int(np.argmax(pos & (a >= -tol)))
            return Classification("blows_up", "exact",
                                  f"{base}; direction {i}: c = {c[i]:.4g} > 0 with a = {a[i]:.4g} "
                                  ">= 0 (G(t) is unbounded): every Σ₀ ≻ 0 blows up", None,
                                  scope=scope, details=details)
        if np.any(pos):
            crit = np.where(pos, -2 * a / np.where(pos, c, 1.0), np.inf)
            details["critical_variance"] = [float(x) if math.isfinite(x) else None for x in crit]
            return Classification("depends_on_initial_data", "exact",
                                  f"{base}; attention expands (c > 0) only along contracting "
                                  "directions (a < 0): covariances above the critical variance "
                                  "−2a/c blow up, small ones converge", None, scope=scope,
                                  details=details)
        if np.any(G):
            r = 2 * float(np.max(a[G]))
            return Classification("unbounded", "exact",
                                  f"{base}; no blow-up (c <= 0), but a direction with c = 0 and "
                                  f"a > 0 grows like e^(2at) (rate {r:.6g})", None, "exponential",
                                  r, scope=scope, details=details)
        S = np.abs(a[Am | Fg])
        if np.any(N0):
            if np.linalg.norm(Ak[np.ix_(N0, N0)]) > tol:
                return Classification("oscillates", "exact",
                                      f"{base}; the neutral directions (a = c = 0) keep their "
                                      "covariance block, which A's skew part rotates: Σ(t) is "
                                      "periodic for generic Σ₀", None, scope=scope,
                                      families=fam, details=details)
            kind, rate = (("algebraic", 1.0) if np.any(Z) else
                          ("exponential", float(np.min(S))) if S.size else ("stationary", None))
            return Classification("converges", "exact",
                                  f"{base}; neutral directions (a = c = 0) keep a Σ₀-dependent "
                                  "block (continuum of equilibria), the others converge", None,
                                  kind, rate, scope=scope, families=fam, details=details)
        limit = _sym((U * sig_F) @ U.T)
        kind, rate = (("algebraic", 1.0) if np.any(Z) else ("exponential", 2 * float(np.min(S))))
        lab = "converges" if np.any(Fg) else "converges_to_zero"
        return Classification(lab, "exact",
                              f"{base}; every direction contracts to its equilibrium variance "
                              "(−2a/c for a > 0, 0 otherwise; like 1/(|c|t) where a = 0)", limit,
                              kind, rate, scope=scope, details=details)
    # ---- a given Σ₀ (full rank: P₀ = Σ₀⁻¹ exists)
    if psd_factor(Sigma0, name="Sigma0").shape[1] < d:
        return None
    tstar = _commuting_blowup(params, a, c, U, Sigma0, tol)
    if tstar is None:
        return None
    if math.isfinite(tstar):
        return Classification("blows_up", "exact",
                              f"{base}; λ_max(L₀ᵀG(t)L₀) reaches 1 at t* = {tstar:.12g}", None,
                              blowup_time=tstar, scope=scope, details=details)
    if np.any(G):
        r = 2 * float(np.max(a[G]))
        return Classification("unbounded", "exact",
                              f"{base}; no blow-up, but a direction with c = 0 and a > 0 grows "
                              f"like e^(2at) (rate {r:.6g})", None, "exponential", r,
                              scope=scope, details=details)
    P0 = U.T @ np.linalg.inv(Sigma0) @ U
    P0 = _sym(P0)
    Xs = Am | N0
    St = np.zeros((d, d))
    if np.any(N0):
        idx = np.flatnonzero(Xs)
        Nt = P0[np.ix_(idx, idx)].copy()
        am = Am[idx]
        Nt[am, am] += -c[idx][am] / (2 * np.abs(a[idx][am]))
        inv = np.linalg.inv(Nt)
        nsel = N0[idx]
        St[np.ix_(idx[nsel], idx[nsel])] = inv[np.ix_(nsel, nsel)]
    St[Fg, Fg] = sig_F[Fg]
    St = _sym(St)
    comm = Ak @ St - St @ Ak
    if float(np.linalg.norm(comm)) > 1e3 * _EPS * max(float(np.linalg.norm(Ak)), 1e-300) * max(
            float(np.linalg.norm(St)), 1e-300) * d:
        return Classification("oscillates", "exact",
                              f"{base}; the neutral block (a = c = 0) of Σ keeps the Schur "
                              "complement of Σ₀⁻¹ and A's skew part rotates it: Σ(t) is periodic",
                              None, scope=scope, families=fam, details=details)
    limit = _sym(U @ St @ U.T)
    S = np.abs(a[Am | Fg])
    if np.any(Z):
        kind, rate = "algebraic", 1.0
    elif S.size == 0:
        kind, rate = "stationary", None
    else:
        # a neutral block coupled (through P₀) to a contracting direction j relaxes like
        # e^{−|a_j|t}; all other corrections decay like e^{−(|a_i| + |a_j|)t}
        coupled = np.zeros(d, dtype=bool)
        if np.any(N0):
            cross = np.max(np.abs(P0[N0]), axis=0)
            coupled = (Am | Fg) & (cross > 1e3 * _EPS * float(np.max(np.abs(P0))))
        rate = 2 * float(np.min(S))
        if np.any(coupled):
            rate = min(rate, float(np.min(np.abs(a[coupled]))))
        kind = "exponential"
    details["limit_in_eigenbasis"] = St.tolist()
    if not np.any(limit):
        return Classification("converges_to_zero", "exact",
                              f"{base}; every direction contracts to 0", limit, kind, rate,
                              scope=scope, details=details)
    return Classification("converges", "exact",
                          f"{base}; Σ → the isolated variances −2a/c (a > 0) plus, on the "
                          "neutral directions, the Schur complement of Σ₀⁻¹ over the "
                          "contracting ones (a limit that depends on Σ₀)", limit, kind, rate,
                          scope=scope, families=fam, details=details)


# ----------------------------------------------------------------------------- rule 3
def frozen_kernel_part(B: np.ndarray, Sigma0: np.ndarray) -> np.ndarray:
    """``Σ_K = L₀ΠL₀ᵀ``, ``Π`` the projector onto ``ker(BL₀) ∩ ker(BᵀL₀)`` (A = 0 invariant).

    For ``A = 0`` the vectors ``x = L₀y`` with ``Bx = Bᵀx = 0`` are fixed by the flow
    (``ẋ = VΣBx = 0``) and ``Σ(t) − Σ_K`` solves the moment ODE again.
    """
    L0 = psd_factor(Sigma0, name="Sigma0")
    d, r = L0.shape
    if r == 0:
        return np.zeros((d, d))
    M = np.vstack([B @ L0, B.T @ L0])
    _, s, vt = np.linalg.svd(M)
    ref = max(float(np.linalg.norm(B, 2)) * float(np.linalg.norm(L0, 2)), 1e-300)
    # singular values below the SVD's round-off count as 0
    rank = int(np.sum(s > 1e3 * d * _EPS * ref))
    N = vt[rank:].T
    SK = L0 @ N @ N.T @ L0.T
    return _sym(SK)


def _kernel_split(B: np.ndarray, Sigma0: np.ndarray, base: str, scope: str,
                  details: dict[str, Any]
                  ) -> tuple[np.ndarray, np.ndarray, Classification | None]:
    """``Σ₀ = Σ_K + Σ_W`` and the verdict when ``Σ_W`` vanishes (``Σ₀`` an equilibrium).

    ``Σ_K`` is :func:`frozen_kernel_part` of ``B_s`` (``V = vI``: only ``B_s`` acts); it is
    recorded in ``details["Sigma_K"]``.
    """
    SK = frozen_kernel_part(_sym(B), Sigma0)
    SW = Sigma0 - SK
    details["Sigma_K"] = SK.tolist()
    d = Sigma0.shape[0]
    # Σ_W below the round-off of the SVD that split Σ₀ (~ d ε ‖Σ₀‖) counts as 0
    if float(np.linalg.norm(SW)) > 1e3 * d * _EPS * max(float(np.linalg.norm(Sigma0)), 1e-300):
        return SK, SW, None
    lab = "converges" if np.any(Sigma0) else "converges_to_zero"
    return SK, SW, Classification(lab, "exact", f"{base}: range Σ₀ ⊂ ker B, Σ₀ is an "
                                  "equilibrium", Sigma0.copy(), "stationary", None,
                                  scope=scope, details=details)


def self_similar_profile(params: GaussianParams) -> np.ndarray | None:
    """``X* = lim tΣ(t)`` for ``A = 0`` (None if not found).

    ``X = tΣ`` obeys ``dX/d ln t = X + Q(X)``: the Riccati equation with ``A = I/2``,
    whose stable positive definite equilibrium is ``X*``.
    """
    p2 = params.replace(A=0.5 * np.eye(params.d))
    eqs = [e for e in equilibria(p2) if e.rank == params.d and e.stable]
    return eqs[0].Sigma if len(eqs) == 1 else None


def _homogeneous_setup(params: GaussianParams
                       ) -> tuple[np.ndarray, np.ndarray, bool, float] | None:
    """``(V', B', commuting, s)`` for rule 3, or None."""
    V, B = params.V, params.B
    v = scalar_value(V)
    nV, nB = float(np.linalg.norm(V)), float(np.linalg.norm(B))
    if v is not None:
        if v == 0.0:
            return None
        s = 1.0 if v > 0 else -1.0
        return s * v * np.eye(params.d), s * _sym(B), True, s
    # symmetric to round-off (the user types symmetric matrices; ε-level asymmetry is noise)
    if (np.linalg.norm(V - V.T) > 1e3 * _EPS * nV or np.linalg.norm(B - B.T) > 1e3 * _EPS * nB):
        return None
    Vs, Bs = _sym(V), _sym(B)
    lam = np.linalg.eigvalsh(Vs)
    tolv = 1e3 * params.d * _EPS * float(np.max(np.abs(lam)))
    if lam[0] > tolv:
        s = 1.0
    elif lam[-1] < -tolv:
        s = -1.0
    else:
        return None
    comm = float(np.linalg.norm(Vs @ Bs - Bs @ Vs)) <= 1e3 * params.d * _EPS * nV * nB
    return s * Vs, s * Bs, comm, s


def _blowup_bound(Vp: np.ndarray, Bp: np.ndarray, Sigma0: np.ndarray) -> float:
    """``r λ_max(V'⁻¹)² / (2 β_min tr(V'⁻¹Σ₀))`` for ``B' ≻ 0`` (rank r of Σ₀)."""
    r = psd_factor(Sigma0, name="Sigma0").shape[1]
    Vi = np.linalg.inv(Vp)
    y0 = float(np.trace(Vi @ Sigma0))
    beta = float(np.linalg.eigvalsh(Bp)[0])
    return r * float(np.linalg.eigvalsh(_sym(Vi))[-1]) ** 2 / (2 * beta * y0)


def _integrated_blowup(params: GaussianParams, Sigma0: np.ndarray, bound: float,
                       solver: str) -> float | None:
    if scalar_value(params.V) is not None:
        t = blowup_time_closed_form(params, Sigma0, t_max=1.001 * bound, n_grid=2000)
        return t if math.isfinite(t) else None
    rtol, atol, _ = probe_tolerances(Sigma0)
    tr = integrate_moments(params, np.zeros(params.d), Sigma0, 1.001 * bound, n_out=2,
                           method=solver, rtol=rtol, atol=atol, quiet=True)
    return tr.blowup_time if tr.status == "blowup" else None


def _coupling_exponent(Vp: np.ndarray, Bp: np.ndarray, Qk: np.ndarray, Rk: np.ndarray,
                       SW: np.ndarray | None) -> float:
    """Algebraic exponent ``min(1, min v_q/v_i)`` of ``‖Σ − Σ_K‖`` (V commuting with B).

    The minimum runs over the pairs coupled by ``J = Σ_W,QR Σ_W,RR⁺`` (all pairs
    when ``SW`` is None).
    """
    vq, Wq = np.linalg.eigh(_sym(Qk.T @ Vp @ Qk))
    vi, Wi = np.linalg.eigh(_sym(Rk.T @ Vp @ Rk))
    ratios = vq[:, None] / vi[None, :]
    if SW is None:
        return float(min(1.0, np.min(ratios)))
    Qe, Re = Qk @ Wq, Rk @ Wi
    J = (Qe.T @ SW @ Re) @ np.linalg.pinv(Re.T @ SW @ Re, rcond=1e3 * _EPS)
    cpl = np.abs(J) > 1e3 * _EPS * (1.0 + float(np.max(np.abs(J), initial=0.0)))
    return float(min(1.0, np.min(ratios[cpl]))) if np.any(cpl) else 1.0


def homogeneous_rule(params: GaussianParams, Sigma0: np.ndarray | None, *, horizon: float,
                     solver: str = "LSODA") -> Classification | None:
    """Rule 3 (module docstring): ``A = 0``, ``V`` symmetric definite, ``B`` symmetric."""
    if np.any(params.A) or quadratic_term_vanishes(params):
        return None
    setup = _homogeneous_setup(params)
    if setup is None:
        return None
    Vp, Bp, commuting, s = setup
    d = params.d
    scope = "all" if Sigma0 is None else "Sigma0"
    beta, W = np.linalg.eigh(Bp)
    tolb = 1e3 * d * _EPS * float(np.max(np.abs(beta)))  # eigensolver round-off
    sign = "≻" if s > 0 else "≺"
    base = f"A = 0, V {sign} 0 symmetric, B symmetric"
    details: dict[str, Any] = {"lyapunov": "d/dt tr(V'⁻¹Σ) = 2 tr(ΣB'Σ), V' = sV, B' = sB",
                               "B_prime_eigenvalues": beta.tolist(), "V_commutes_with_B": commuting}
    if np.all(beta < -tolb):
        X = self_similar_profile(params)
        if X is not None:
            details["t_Sigma_limit"] = X.tolist()
        reason = (f"{base}, V and B of opposite definiteness: tr(V'⁻¹Σ) decreases with "
                  "d/dt ≤ −κ(tr V'⁻¹Σ)², and ‖Σ̇‖ ≤ 2‖V‖‖B‖‖Σ‖², so ‖Σ(t)‖ ≍ 1/t")
        if X is not None:
            reason += "; tΣ(t) → X* (stable equilibrium of the Riccati equation with A = I/2)"
        zero = np.zeros((d, d))
        if Sigma0 is not None and not np.any(Sigma0):
            return Classification("converges_to_zero", "exact", "Σ₀ = 0 is an equilibrium",
                                  zero, "stationary", None, scope=scope)
        return Classification("converges_to_zero", "exact", reason, zero, "algebraic", 1.0,
                              scope=scope, details=details)
    if np.all(beta <= tolb):
        k = int(np.sum(beta > -tolb))
        Qk, Rk = W[:, beta > -tolb], W[:, beta <= -tolb]
        details["kernel_dim"] = k
        if Sigma0 is None:
            if not commuting:
                return None  # Σ₀-dependent limit confirmed per datum (ensemble)
            p = _coupling_exponent(Vp, Bp, Qk, Rk, None)
            return Classification("converges", "exact",
                                  f"{base}, B' ⪯ 0 with a {k}-dimensional kernel and V commuting "
                                  "with B: Σ → Σ_K = Q(QᵀΣ₀⁻¹Q)⁻¹Qᵀ (QᵀΣ⁻¹Q is conserved), a "
                                  "point of the equilibrium continuum {BΣ = 0} that depends on Σ₀",
                                  None, "algebraic", p, scope=scope, details=details)
        SK, SW, fixed = _kernel_split(params.B, Sigma0, base, scope, details)
        if fixed is not None:
            return fixed
        lab = "converges" if np.any(SK) else "converges_to_zero"
        what = ("Σ → Σ_K = L₀ΠL₀ᵀ, Π the projector onto ker(BL₀) (frozen kernel part; for "
                "full-rank Σ₀ Σ_K = Q(QᵀΣ₀⁻¹Q)⁻¹Qᵀ with QᵀΣ⁻¹Q conserved)")
        if commuting:
            p = _coupling_exponent(Vp, Bp, Qk, Rk, SW)
            return Classification(lab, "exact",
                                  f"{base}, B' ⪯ 0 with a {k}-dimensional kernel, V commuting with "
                                  f"B: {what}; ‖Σ − Σ_K‖ ~ t^(−{p:.6g}) asymptotically "
                                  "(min(1, v_q/v_i) over the coupled eigenvalues of V on "
                                  "ker B and range B; when several powers mix, a finite "
                                  "tail can show a faster pre-asymptotic exponent)", SK,
                                  "algebraic", p, scope=scope, details=details)
        tr = integrate_tail(params, Sigma0, horizon, solver=solver)
        fit = _fit_distance(tr, SK, Sigma0) if tr.status == "completed" else None
        if fit is not None and fit.kind in ("algebraic", "exponential") and fit.rate > 0:
            return Classification(lab, "lyapunov",
                                  f"{base}, B' ⪯ 0 with a {k}-dimensional kernel: bounded "
                                  "(tr V'⁻¹Σ non-increasing) and Σ(t) − Σ_K solves the same "
                                  f"equation; {what}, confirmed by integration: "
                                  f"‖Σ − Σ_K‖ {fit.reason}", SK, fit.kind, fit.rate,
                                  scope=scope, rate_fit=fit, details=details)
        why = fit.reason if fit is not None else f"integration {tr.status}: {tr.message}"
        return Classification("undetermined", "lyapunov",
                              f"{base}, B' ⪯ 0 with a {k}-dimensional kernel: bounded and "
                              "approaching the equilibrium continuum {BΣ = 0}, the candidate limit "
                              f"Σ_K not confirmed by t = {horizon:g} ({why}); a longer horizon "
                              "can confirm it", None, scope=scope, rate_fit=fit, details=details)
    if np.all(beta >= -tolb):
        k = int(np.sum(beta < tolb))
        same = f"{base}, V and B of the same definiteness: tr(V'⁻¹Σ) increases"
        if k == 0:
            if Sigma0 is None:
                return Classification("blows_up", "exact",
                                      f"{same} with d/dt ≥ κ(tr V'⁻¹Σ)²: every Σ₀ ≠ 0 blows up",
                                      None, scope=scope, details=details)
            if not np.any(Sigma0):
                return Classification("converges_to_zero", "exact", "Σ₀ = 0 is an equilibrium",
                                      np.zeros((d, d)), "stationary", None, scope=scope)
            bound = _blowup_bound(Vp, Bp, Sigma0)
            details["blowup_time_bound"] = bound
            t = _integrated_blowup(params, Sigma0, bound, solver)
            src = "closed form" if scalar_value(params.V) is not None else "integrator"
            return Classification("blows_up", "exact",
                                  f"{same} with d/dt ≥ κ(tr V'⁻¹Σ)²: blow-up before "
                                  f"t = {bound:.6g} (time from the {src})",
                                  None, blowup_time=t, scope=scope, details=details)
        if not commuting:
            return None
        Qk, Rk = W[:, beta < tolb], W[:, beta >= tolb]
        if Sigma0 is None:
            return Classification("blows_up", "exact",
                                  f"{same}; B' ⪰ 0 with a {k}-dimensional kernel and V commuting "
                                  "with B: the range-of-B block is a definite problem, so every "
                                  "full-rank Σ₀ blows up", None, scope=scope, details=details)
        SK, SW, fixed = _kernel_split(params.B, Sigma0, base, scope, details)
        if fixed is not None:
            return fixed
        VR, BR = _sym(Rk.T @ Vp @ Rk), _sym(Rk.T @ Bp @ Rk)
        SR = _sym(Rk.T @ SW @ Rk)
        bound = _blowup_bound(VR, BR, SR)
        details["blowup_time_bound"] = bound
        t = _integrated_blowup(params, Sigma0, bound, solver)
        return Classification("blows_up", "exact",
                              f"{same}; B' ⪰ 0 with a {k}-dimensional kernel, V commuting with B: "
                              f"the range-of-B block blows up before t = {bound:.6g}", None,
                              blowup_time=t, scope=scope, details=details)
    return None
