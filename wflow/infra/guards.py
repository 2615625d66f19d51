"""Guards before a library call: the input is finite, below overflow, positive semi-definite.

POT and SciPy take square roots, logarithms and products of what they are given; a
diverging solver hands them covariances of norm 1e79 with round-off negative eigenvalues,
or NaN, and they raise deep inside (``sqrtm`` under ``errstate(invalid="raise")``) or warn
and return NaN. The guards here check the input first and raise :class:`GuardError` (a
``FloatingPointError``) whose message names the quantity and the reason, so a study can
turn it into a FAIL of a named criterion (:func:`wflow.studies.base.never_raise`).

* :func:`guard_finite`: every entry finite;
* :func:`guard_below_overflow`: ``max |x| ≤ (float max)^{1/p}``, so that a product of ``p``
  such factors (``Σ^{1/2} S Σ^{1/2}``: ``p = 2``) cannot overflow;
* :func:`guard_psd`: symmetric to round-off and ``λ_min ≥ −tol``, ``tol = terms·eps·‖S‖₂``
  the round-off of a matrix assembled from ``terms`` rank-one terms (an empirical covariance
  of ``n`` samples: ``terms = n``); returns whether ``S`` is positive definite beyond that
  round-off (``λ_min > tol``), i.e. safe for a square root taken by a library without
  clipping.
"""

from __future__ import annotations

import numpy as np

__all__ = ["GuardError", "guard_finite", "guard_below_overflow", "guard_psd"]

EPS = float(np.finfo(np.float64).eps)
FMAX = float(np.finfo(np.float64).max)


class GuardError(FloatingPointError):
    """An input refused before a library call (non-finite, overflowing, not PSD)."""


def guard_finite(name: str, x: np.ndarray | float) -> np.ndarray:
    """``x`` as a float64 array, or :class:`GuardError` if an entry is NaN/Inf."""
    a = np.asarray(x, dtype=np.float64)
    if not np.all(np.isfinite(a)):
        raise GuardError(f"{name}: non-finite value ({int(np.sum(~np.isfinite(a)))} of "
                         f"{a.size} entries NaN/Inf)")
    return a


def guard_below_overflow(name: str, x: np.ndarray | float, *, power: int = 2) -> np.ndarray:
    """``x`` (finite) with ``max |x| ≤ FMAX^{1/power}``, else :class:`GuardError`."""
    a = guard_finite(name, x)
    bound = FMAX ** (1.0 / power)
    top = float(np.max(np.abs(a))) if a.size else 0.0
    if top > bound:
        raise GuardError(f"{name}: |entry| {top:.3g} above {bound:.3g} (a product of {power} "
                         "such factors overflows)")
    return a


def guard_psd(name: str, S: np.ndarray, *, terms: int = 1) -> bool:
    """Check a covariance before a library square root; return whether it is definite.

    Parameters
    ----------
    name : str
        What ``S`` is (in the message).
    S : (d, d) array
        Finite, below overflow (:func:`guard_below_overflow`, ``power = 2``), symmetric to
        ``terms·eps·max|S|`` and with ``λ_min ≥ −terms·eps·‖S‖₂``.
    terms : int
        Rank-one terms ``S`` was summed from: each adds a rounding of ``≤ eps‖S‖₂``, so
        eigenvalues within ``terms·eps·‖S‖₂`` of 0 are round-off.

    Returns
    -------
    bool
        ``True`` when ``λ_min > terms·eps·‖S‖₂`` (positive definite beyond round-off);
        ``False`` when ``S`` is PSD only to round-off (a library square root may meet a
        negative eigenvalue: clip instead).
    """
    A = guard_below_overflow(name, S, power=2)
    if A.ndim != 2 or A.shape[0] != A.shape[1]:
        raise GuardError(f"{name}: not a square matrix (shape {A.shape})")
    scale = float(np.max(np.abs(A))) if A.size else 0.0
    tol_sym = terms * EPS * scale
    asym = float(np.max(np.abs(A - A.T))) if A.size else 0.0
    if asym > tol_sym:
        raise GuardError(f"{name}: not symmetric (|S − Sᵀ| {asym:.3g} > {tol_sym:.3g})")
    lam = np.linalg.eigvalsh(0.5 * (A + A.T))
    tol = terms * EPS * float(np.max(np.abs(lam), initial=0.0))
    if lam.size and lam[0] < -tol:
        raise GuardError(f"{name}: not positive semi-definite (λ_min {lam[0]:.3g} < "
                         f"−{tol:.3g}, the round-off of {terms} terms)")
    return bool(lam.size == 0 or lam[0] > tol)
