"""[MH] equiangular tokens: the reduced ODE for ``γ(t)``, its entropy and clustering times."""

from __future__ import annotations

import logging
import warnings
from typing import Literal, NamedTuple

import numpy as np
from scipy.integrate import solve_ivp

from ..attention.kinds import RELU, SOFTMAX, USA, AttentionKind, get_kind
from ..status import Status
from .formulas import (
    _check_n_beta,
)

logger = logging.getLogger(__name__)

Errors = Literal["raise", "nan"]


# ------------------------------------------------------------------- equiangular reduction
#: A registered attention kind (:data:`wflow.attention.kinds.KINDS`) or its object.
Kind = str | AttentionKind


def _lam_w(lambdas: np.ndarray, w: np.ndarray | float) -> tuple[np.ndarray, np.ndarray]:
    lam = np.atleast_1d(np.asarray(lambdas, dtype=np.float64))
    if lam.ndim != 1 or not np.all(np.isfinite(lam)) or np.any(lam <= 0):
        raise ValueError(f"lambdas: scalar head strengths must be finite and > 0, got {lam}")
    ww = np.broadcast_to(np.asarray(w, dtype=np.float64), lam.shape)
    if np.any(ww < 0) or not np.all(np.isfinite(ww)):
        raise ValueError("w: mixing weights must be finite and >= 0")
    return lam, ww


def _kappa_generic(kind: AttentionKind, g: np.ndarray, lam: np.ndarray, ww: np.ndarray,
                   beta: float, n: int) -> np.ndarray:
    """``κ(γ) = Σ_h w_h λ_h k(βλ_hγ) / N_h`` from the kind's kernel ``k``.

    Scalar heads ``A_h = λ_h I`` on equiangular tokens: the self score is ``βλ_h``, the
    ``n − 1`` others ``βλ_hγ``; ``N_h = k(βλ_h) + (n − 1) k(βλ_hγ)`` for normalised
    kinds, ``n`` otherwise (masses ``1/n``).
    """
    gg = g[..., None]
    ko = kind.dphi(beta * lam * gg)
    if kind.normalised:
        return np.sum(ww * lam * ko / (kind.dphi(beta * lam) + (n - 1.0) * ko), axis=-1)
    return np.sum(ww * lam * ko, axis=-1) / n


def _kappa(kind: AttentionKind, g: np.ndarray, lam: np.ndarray, ww: np.ndarray, beta: float,
           n: int) -> np.ndarray:
    """``κ(γ)``: closed forms for the built-in kinds (stable in ``β``), else the generic one."""
    gg = g[..., None]
    if kind == SOFTMAX:  # λ/(e^{βλ(1−γ)} + n − 1) without overflow
        return np.sum(ww * lam * np.exp(-np.logaddexp(beta * lam * (1.0 - gg),
                                                      np.log(n - 1.0))), axis=-1)
    if kind == USA:
        return np.sum(ww * lam * np.exp(beta * lam * gg), axis=-1) / n
    if kind == RELU:
        return np.sum(ww * beta * lam**2, axis=-1) * np.maximum(g, 0.0) / n
    return _kappa_generic(kind, g, lam, ww, beta, n)


def equiangular_rhs(gamma: np.ndarray | float, lambdas: np.ndarray, beta: float, n: int, *,
                    kind: Kind = "softmax", w: np.ndarray | float = 1.0) -> np.ndarray:
    """``F(γ) = 2κ(γ)(1 − γ)(1 + (n−1)γ)``: the equiangular ODE ``γ̇ = F(γ)`` (module docstring).

    Vectorised in ``γ``; ``lambdas`` are the scalar head strengths ``λ_h > 0``; ``kind`` a
    registered attention kind (``ValueError`` otherwise): closed forms for softmax, USA
    and ReLU, ``κ = Σ_h w_h λ_h k(βλ_hγ)/N_h`` from the kind's kernel for any other.
    """
    spec = get_kind(kind)
    _check_n_beta(n, beta, "equiangular_rhs")
    lam, ww = _lam_w(lambdas, w)
    g = np.asarray(gamma, dtype=np.float64)
    kap = _kappa(spec, g, lam, ww, beta, n)
    return 2.0 * kap * (1.0 - g) * (1.0 + (n - 1.0) * g)


class EquiangularSolution(NamedTuple):
    """Solution of the equiangular ODE at the requested times."""

    status: str
    t: np.ndarray
    gamma: np.ndarray
    message: str


def solve_equiangular(gamma0: float, lambdas: np.ndarray, beta: float, n: int,
                      t: np.ndarray, *, kind: Kind = "softmax", w: np.ndarray | float = 1.0,
                      rtol: float = 1e-12, atol: float = 1e-14) -> EquiangularSolution:
    """Integrate ``γ̇ = F(γ)`` (DOP853, tight tolerances) and return ``γ`` at times ``t``.

    Parameters
    ----------
    gamma0 : float
        Initial mutual inner product, ``−1/(n−1) < γ_0 < 1``.
    t : (K,) array
        Increasing output times starting at 0.
    """
    get_kind(kind)
    _check_n_beta(n, beta, "solve_equiangular")
    if not -1.0 / (n - 1) < gamma0 < 1.0:
        raise ValueError(f"gamma0: must lie in (-1/(n-1), 1), got {gamma0}")
    t = np.asarray(t, dtype=np.float64)
    if t.ndim != 1 or t.size < 1 or t[0] != 0 or np.any(np.diff(t) <= 0):
        raise ValueError("t: output times must be increasing and start at 0")
    _lam_w(lambdas, w)

    def rhs(_t: float, y: np.ndarray) -> np.ndarray:
        return np.atleast_1d(equiangular_rhs(y[0], lambdas, beta, n, kind=kind, w=w))

    sol = solve_ivp(rhs, (0.0, float(t[-1])), [gamma0], method="DOP853", t_eval=t,
                    rtol=rtol, atol=atol)
    if not sol.success:
        warnings.warn(f"solve_equiangular: integrator failed: {sol.message}", stacklevel=2)
        return EquiangularSolution(Status.FAILED, t, np.full(t.shape, np.nan), sol.message)
    return EquiangularSolution(Status.SUCCESS, sol.t, sol.y[0], "")


def equiangular_entropy(gamma: np.ndarray | float, lam: float, beta: float, n: int) -> np.ndarray:
    """Attention entropy of one row for equiangular tokens and one scalar head ``λ``.

    ``p_self = 1/(1 + (n−1)e^{−s})``, ``s = βλ(1−γ)``; the other ``n − 1`` entries equal.
    """
    _check_n_beta(n, beta, "equiangular_entropy")
    g = np.asarray(gamma, dtype=np.float64)
    s = beta * lam * (1.0 - g)
    logN = np.log(n - 1.0)
    L = np.logaddexp(0.0, logN - s)  # log(1 + N e^{−s})
    log_ps = -L
    ps = np.exp(log_ps)
    log_po = -s - L  # log of each other entry (1 − p_s)/N
    return -ps * log_ps - (1.0 - ps) * log_po



# ------------------------------------------------------------------------- clustering time
def equiangular_time(gamma0: float, gamma1: float, lambdas: np.ndarray, beta: float, n: int,
                     *, kind: Kind = "softmax", w: np.ndarray | float = 1.0) -> float:
    """Time for the equiangular ODE to go from ``γ_0`` to ``γ_1``: ``∫_{γ_0}^{γ_1} dγ / F(γ)``.

    Adaptive Gauss–Kronrod quadrature (``scipy.integrate.quad``, ``epsrel = 1e-12``); needs
    ``F > 0`` on ``[γ_0, γ_1]`` (``γ_0 > 0`` for ReLU, which has ``F(0) = 0``). Warns if
    the quadrature reports a large error estimate.
    """
    from scipy.integrate import quad

    spec = get_kind(kind)
    _check_n_beta(n, beta, "equiangular_time")
    if not -1.0 / (n - 1) < gamma0 < gamma1 < 1.0:
        raise ValueError(f"gamma0, gamma1: need -1/(n-1) < gamma0 < gamma1 < 1, got "
                         f"{gamma0}, {gamma1}")
    if gamma0 <= 0 and float(spec.dphi(np.float64(0.0))) == 0.0:
        raise ValueError(f"gamma0: {spec.label} has F(0) = 0 (k(0) = 0: no driving force); "
                         "need gamma0 > 0")

    def inv(g: float) -> float:
        return 1.0 / float(equiangular_rhs(g, lambdas, beta, n, kind=kind, w=w))

    val, err = quad(inv, gamma0, gamma1, epsabs=0.0, epsrel=1e-12, limit=200)
    if err > 1e-8 * abs(val):
        warnings.warn(f"equiangular_time: quadrature error estimate {err:.2e} for T = {val:.6g}",
                      stacklevel=2)
    return float(val)


def relu_equiangular_time(gamma0: np.ndarray | float, gamma1: float, lambdas: np.ndarray,
                          beta: float, n: int, *, w: np.ndarray | float = 1.0) -> np.ndarray:
    """Exact time for the ReLU equiangular ODE to go from ``γ_0`` to ``γ_1``.

    Needs ``0 < γ_0 < γ_1 < 1``. ``γ̇ = c γ (1−γ)(1+Nγ)`` with ``c = 2β Σ_h w_h λ_h² / n``,
    ``N = n − 1``; by partial fractions ``1/(γ(1−γ)(1+Nγ)) = 1/γ + 1/(n(1−γ)) − N²/(n(1+Nγ))``::

        T = (1/c) [ ln(γ_1/γ_0) − (1/n) ln((1−γ_1)/(1−γ_0)) − (N/n) ln((1+Nγ_1)/(1+Nγ_0)) ].

    For ``γ_0 = d^{-1/2}`` (random tokens) and ``d ≫ n²``:
    ``dT/d ln d → n / (4β Σ w_h λ_h²)``, the ``O(n log d)`` law. Vectorised in ``γ_0``.
    """
    _check_n_beta(n, beta, "relu_equiangular_time")
    lam, ww = _lam_w(lambdas, w)
    g0 = np.asarray(gamma0, dtype=np.float64)
    if np.any(~(g0 > 0)) or not 0 < gamma1 < 1 or np.any(g0 >= gamma1):
        raise ValueError(f"gamma0, gamma1: need 0 < gamma0 < gamma1 < 1, got {gamma0}, {gamma1}")
    c = 2.0 * beta * float(np.sum(ww * lam**2)) / n
    N = n - 1.0
    return (np.log(gamma1 / g0) - np.log((1 - gamma1) / (1 - g0)) / n
            - (N / n) * np.log((1 + N * gamma1) / (1 + N * g0))) / c
