"""Rule 2: heads whose matrices commute, classified by simultaneous diagonalisation.

Part of :mod:`wflow.gaussian.structure` (the package re-exports its names).
"""

from __future__ import annotations

import math
from typing import Any

import numpy as np

from ..moments import psd_factor
from ..params import GaussianParams
from ..riccati import (
    EquilibriumFamily,
    blowup_time_closed_form,
    scalar_value,
    sym_basis,
)
from ..verdict import Classification
from .probes import _EPS, _sym


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
