r"""Closed forms of the noisy model's phase transition (THEORY §8, docs/theory.md §9).

One USA head ``A = V = I``, ``w = 1``, on ``S^{d-1}`` (any ``d >= 2``), in the published
convention of Mun & Rosenzweig,

.. math::

    F_K(\rho) = \int \rho\log\rho\,d\sigma - \frac{K}{\beta}\iint e^{\beta x\cdot y}
    \rho(x)\rho(y)\,d\sigma\,d\sigma, \qquad K = \frac{1}{2D}

(``σ`` the normalised surface measure; :func:`wflow.attention.diffusion.coupling_of`).

* **Funk–Hecke.** ``∫ e^{β x·y} Y_l(y) dσ(y) = λ_l Y_l(x)`` with
  ``λ_l = Γ(d/2) (2/β)^{d/2−1} I_{l+d/2−1}(β)`` (:func:`funk_hecke_eigenvalues`).
* **Linear threshold.** ``ρ ≡ 1`` is linearly unstable iff ``(2K/β) λ_1 > 1``, i.e.
  ``K > K_#(β) = β/(2λ_1) = β^{d/2} / (2^{d/2} Γ(d/2) I_{d/2}(β))`` (:func:`k_sharp`).
  In the diffusion convention: the degree-``l`` growth rate ``l(l+d−2)(λ_l/β − D)``
  vanishes at ``D_# = λ_1/β = 1/(2K_#)``.
* **Tricritical inverse temperature.** ``β*(d)`` is the unique root of
  ``I_{d/2+1}(β)/I_{d/2}(β) = 1/d`` (:func:`tricritical_beta`): the transition is
  continuous for ``β <= β*`` and discontinuous for ``β > β*``.

Bessel functions are evaluated scaled (``scipy.special.ive(ν, β) = e^{−β} I_ν(β)``) and
combined in logarithms, so ``β`` up to several hundred is safe.
"""

from __future__ import annotations

import logging
import math

import numpy as np
from scipy.optimize import brentq
from scipy.special import gammaln, ive

logger = logging.getLogger(__name__)

__all__ = ["funk_hecke_eigenvalues", "k_sharp", "tricritical_beta", "check_phase_args"]


def check_phase_args(beta: float, d: int) -> tuple[float, int]:
    """Validate ``β > 0`` finite and an integer dimension ``d >= 2``; return them typed.

    Raises
    ------
    ValueError
        Naming ``beta`` or ``d`` and the value received.
    """
    if isinstance(d, bool) or int(d) != d or d < 2:
        raise ValueError(f"d: the sphere S^(d-1) needs an integer d >= 2, got {d!r}")
    if isinstance(beta, bool) or not np.isfinite(beta) or beta <= 0:
        raise ValueError(f"beta: must be a finite number > 0, got {beta!r}")
    return float(beta), int(d)


def funk_hecke_eigenvalues(beta: float, d: int, lmax: int) -> np.ndarray:
    r"""Funk–Hecke eigenvalues ``λ_l`` of the kernel ``e^{β x·y}`` on ``S^{d-1}``, ``l = 0..lmax``.

    .. math::

        \int_{S^{d-1}} e^{\beta x\cdot y}\,Y_l(y)\,d\sigma(y) = \lambda_l\,Y_l(x),\qquad
        \lambda_l = \Gamma(d/2)\,(2/\beta)^{d/2-1}\,I_{l+d/2-1}(\beta),

    ``σ`` the normalised surface measure (``λ_0 = ∫ e^{β x·y} dσ(y)``; ``sinh β/β`` for
    ``d = 3``, ``I_0(β)`` for ``d = 2``).

    Parameters
    ----------
    beta : float
        Inverse temperature ``β > 0``.
    d : int
        Ambient dimension (tokens on ``S^{d-1}``), ``d >= 2``.
    lmax : int
        Largest degree, ``>= 0``.

    Returns
    -------
    numpy.ndarray
        Shape ``(lmax + 1,)``, dimensionless, positive and decreasing in ``l``.
    """
    beta, d = check_phase_args(beta, d)
    ls = np.arange(int(lmax) + 1, dtype=np.float64)
    nu = ls + d / 2.0 - 1.0
    with np.errstate(divide="ignore"):
        log_i = np.log(ive(nu, beta)) + beta  # log I_ν(β); -inf where it underflows
    return np.exp(gammaln(d / 2.0) + (d / 2.0 - 1.0) * math.log(2.0 / beta) + log_i)


def k_sharp(beta: float, d: int) -> float:
    r"""The linear-stability threshold ``K_#(β)`` of the uniform density (published ``K``).

    .. math::

        K_\#(\beta) = \frac{\beta}{2\lambda_1}
        = \frac{\beta^{d/2}}{2^{d/2}\,\Gamma(d/2)\,I_{d/2}(\beta)}.

    ``ρ ≡ 1`` is linearly unstable iff ``K > K_#``; the diffusivity at the threshold is
    :func:`wflow.attention.diffusion.diffusion_of` ``(K_#) = λ_1/β``.

    Parameters
    ----------
    beta : float
        Inverse temperature ``β > 0``.
    d : int
        Ambient dimension, ``d >= 2``.

    Returns
    -------
    float
        ``K_#`` (dimensionless coupling, ``K = 1/(2D)``).
    """
    beta, d = check_phase_args(beta, d)
    log_k = (d / 2.0) * math.log(beta / 2.0) - gammaln(d / 2.0) \
        - (math.log(ive(d / 2.0, beta)) + beta)
    return math.exp(log_k)


def _ratio_gap(beta: float, d: int) -> float:
    """``I_{d/2+1}(β)/I_{d/2}(β) − 1/d`` (scaled Bessel: the ``e^β`` cancel)."""
    return float(ive(d / 2.0 + 1.0, beta) / ive(d / 2.0, beta)) - 1.0 / d


def tricritical_beta(d: int, *, xtol: float = 1e-14) -> float:
    r"""``β*(d)``: the unique root of ``I_{d/2+1}(β) / I_{d/2}(β) = 1/d``.

    The ratio ``I_{ν+1}/I_ν`` increases from ``0`` (``≈ β/(d+2)`` as ``β → 0``) to ``1``
    (``≈ 1 − (d+1)/(2β)`` as ``β → ∞``), so the root is bracketed by ``[1e-3, β_hi]``,
    ``β_hi`` doubled from 4 until the sign changes; Brent's method then finds it to
    ``xtol`` (absolute; ``β* = O(1)``).

    Parameters
    ----------
    d : int
        Ambient dimension, ``d >= 2``.
    xtol : float, keyword-only
        Absolute tolerance on ``β*`` (default ``1e-14``, a few ulps of ``β* ≈ 1–2.5``).

    Returns
    -------
    float
        ``β*(d)``: 2.4469183… (d = 2), 1.8161545… (d = 3), 1.5752572… (d = 4).
    """
    _, d = check_phase_args(1.0, d)
    lo, hi = 1e-3, 4.0
    assert _ratio_gap(lo, d) < 0  # ratio ≈ lo/(d+2) < 1/d
    while _ratio_gap(hi, d) <= 0:
        hi *= 2.0
    return float(brentq(_ratio_gap, lo, hi, args=(d,), xtol=xtol, rtol=4 * np.finfo(float).eps))
