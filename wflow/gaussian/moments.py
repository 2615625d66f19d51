"""The moment ODE of Gaussian token distributions (docs/theory.md §7): right-hand side and factors.

For ``μ = N(m, Σ)`` the attention output is the tilted mean ``m + Σ B x``, the
velocity is affine in ``x`` and Gaussians stay Gaussian::

    ṁ = (A + V) m + V Σ B m + b,
    Σ̇ = A Σ + Σ Aᵀ + V Σ B Σ + Σ Bᵀ Σ Vᵀ = M Σ + Σ Mᵀ,   M = A + V Σ B.

Here: the right-hand side (:func:`moment_rhs`), the PSD factor ``Σ = L Lᵀ``
(:func:`psd_factor`), the Jacobian of the factor form ``(m, L)`` and the blow-up
signature used by :func:`wflow.gaussian.integrate_moments`.
"""

from __future__ import annotations

import numpy as np

from .params import GaussianParams

__all__ = [
    "moment_rhs",
    "psd_factor",
    "RICCATI_SIGNATURE",
    "MAX_TRACE",
]

#: Machine epsilon of float64: the unit of the moment and Riccati tolerances.
_EPS = np.finfo(np.float64).eps


def moment_rhs(params: GaussianParams, m: np.ndarray, Sigma: np.ndarray
               ) -> tuple[np.ndarray, np.ndarray]:
    """Right-hand side of the moment ODE (docs/theory.md §7).

    ``ṁ = (A + V) m + V Σ B m + b``, ``Σ̇ = AΣ + ΣAᵀ + VΣBΣ + ΣBᵀΣVᵀ``.

    Parameters
    ----------
    params : GaussianParams
    m : (d,) array
    Sigma : (d, d) array

    Returns
    -------
    dm : (d,) array
    dSigma : (d, d) array (symmetric)
    """
    A, b, V, B = params.A, params.b, params.V, params.B
    VSB = V @ Sigma @ B
    dm = (A + V) @ m + VSB @ m + b
    M = A @ Sigma + VSB @ Sigma
    return dm, M + M.T


def psd_factor(Sigma: np.ndarray, *, name: str = "Sigma", rtol: float | None = None
               ) -> np.ndarray:
    """A factor ``L`` (``d × r``, full column rank) with ``L Lᵀ = Σ`` for a PSD matrix.

    The rank ``r`` counts eigenvalues above ``rtol · λ_max`` (default
    ``100 d ε``, round-off of a symmetric eigensolver); eigenvalues below
    ``−rtol · λ_max`` make ``Σ`` not PSD and raise ``ValueError`` naming ``name``.
    """
    S = np.asarray(Sigma, dtype=np.float64)
    if S.ndim != 2 or S.shape[0] != S.shape[1]:
        raise ValueError(f"{name}: expected a square matrix, got shape {S.shape}")
    if not np.all(np.isfinite(S)):
        raise ValueError(f"{name}: contains NaN or Inf")
    d = S.shape[0]
    asym = np.max(np.abs(S - S.T)) if d else 0.0
    scale = max(np.max(np.abs(S)) if d else 0.0, np.finfo(np.float64).tiny)
    if asym > 1e3 * _EPS * scale:
        raise ValueError(f"{name}: not symmetric (max |S - Sᵀ| = {asym:.3g})")
    S = 0.5 * (S + S.T)
    lam, U = np.linalg.eigh(S)
    tol = (100 * d * _EPS if rtol is None else rtol) * max(float(np.max(np.abs(lam), initial=0.0)),
                                                          np.finfo(np.float64).tiny)
    if lam.size and lam[0] < -tol:
        raise ValueError(f"{name}: not positive semi-definite (smallest eigenvalue {lam[0]:.3g})")
    keep = lam > tol
    return U[:, keep] * np.sqrt(lam[keep])


def _lmax_and_rate(params: GaussianParams, m: np.ndarray, Sigma: np.ndarray
                   ) -> tuple[float, float]:
    """``λ_max(Σ)`` and ``λ̇_max = uᵀ Σ̇ u`` (Hellmann–Feynman, simple top eigenvalue)."""
    lam, U = np.linalg.eigh(Sigma)
    u = U[:, -1]
    _, dS = moment_rhs(params, m, Sigma)
    return float(lam[-1]), float(u @ dS @ u)


#: A threshold crossing counts as a blow-up when ``λ̇/λ > RICCATI_SIGNATURE · 2‖A‖₂``
#: (near a Riccati blow-up ``λ̇/λ ≈ 1/(t* − t)`` is huge; linear growth is bounded by 2‖A‖₂).
RICCATI_SIGNATURE = 1e3
#: Largest ``tr Σ`` followed when the growth is not a blow-up (exponential growth).
MAX_TRACE = 1e200

#: solve_ivp methods that use a Jacobian (we pass the analytic one).
_IMPLICIT = ("Radau", "BDF", "LSODA")


def _moment_jacobian(p: GaussianParams, m: np.ndarray, L: np.ndarray) -> np.ndarray:
    """Jacobian of ``(m, L) ↦ (Mm + Vm + b, ML)``, ``M = A + V L Lᵀ B`` (row-major ``vec L``).

    ``∂(ML)[H] = MH + V H (LᵀBL) + (VL) Hᵀ (BL)``,
    ``∂ṁ[H] = V H (LᵀBm) + (VL) Hᵀ (Bm)``, ``∂ṁ/∂m = M + V``.
    """
    d, r = L.shape
    W = p.V @ L  # (d, r)
    Z = p.B @ L  # (d, r)
    M = p.A + W @ (L.T @ p.B)
    J = np.zeros((d + d * r, d + d * r))
    J[:d, :d] = M + p.V
    if r:
        Bm = p.B @ m
        J[:d, d:] = (np.einsum("ib,a->iba", p.V, L.T @ Bm)
                     + np.einsum("ia,b->iba", W, Bm)).reshape(d, d * r)
        J[d:, d:] = (np.kron(M, np.eye(r)) + np.kron(p.V, (L.T @ Z).T)
                     + np.einsum("ia,bk->ikba", W, Z).reshape(d * r, d * r))
    return J


def _pack(m: np.ndarray, L: np.ndarray) -> np.ndarray:
    return np.concatenate([m, L.ravel()])
