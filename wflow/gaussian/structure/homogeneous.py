"""Rule 3: homogeneous quadratic dynamics: frozen kernels, self-similar profiles, blow-up bounds.

Part of :mod:`wflow.gaussian.structure` (the package re-exports its names).
"""

from __future__ import annotations

import math
from typing import Any

import numpy as np

from ..moments import psd_factor
from ..params import GaussianParams
from ..riccati import (
    blowup_time_closed_form,
    equilibria,
    quadratic_term_vanishes,
    scalar_value,
)
from ..solver import integrate_moments
from ..verdict import Classification
from .probes import _EPS, _fit_distance, _sym, integrate_tail, probe_tolerances


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
