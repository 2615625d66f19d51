"""Rule 1: linear Gaussian moment dynamics, classified from Krylov bases and minimal polynomials.

Part of :mod:`wflow.gaussian.structure` (the package re-exports its names).
"""

from __future__ import annotations

from typing import Any

import numpy as np
import scipy.linalg

from ..moments import psd_factor
from ..params import GaussianParams
from ..riccati import (
    quadratic_term_vanishes,
)
from ..verdict import Classification
from .probes import _CRIT, _EPS, _sym


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
