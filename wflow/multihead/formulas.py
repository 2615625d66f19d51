"""[MH] closed forms: ``c*(H)``, ``β*``, ``φ(λ)``, ``λ_c`` and their domain checks."""

from __future__ import annotations

import logging
from typing import Literal

import numpy as np
from scipy.optimize import brentq

logger = logging.getLogger(__name__)

Errors = Literal["raise", "nan"]


# --------------------------------------------------------------------------- domain checks
def _domain(values: dict[str, np.ndarray], bad: dict[str, np.ndarray], errors: Errors,
            func: str) -> np.ndarray:
    """Return the mask of invalid entries; raise naming the argument when ``errors='raise'``."""
    if errors not in ("raise", "nan"):
        raise ValueError(f"{func}: errors must be 'raise' or 'nan', got {errors!r}")
    mask = np.zeros(np.broadcast(*values.values()).shape, dtype=bool)
    for name, b in bad.items():
        b = np.broadcast_to(b, mask.shape)
        if errors == "raise" and np.any(b):
            vals = np.broadcast_to(values[name], mask.shape)[b]
            raise ValueError(f"{func}: argument {name} out of domain ({_REASONS[name]}), got "
                             f"{vals.ravel()[:5].tolist()}")
        mask |= b
    return mask


_REASONS = {
    "H": "number of heads must be an integer >= 1",
    "n": "number of tokens must be an integer >= 2",
    "alpha": "head strength must be finite and > 0",
    "beta": "inverse temperature must be finite and >= 0",
}


def _int_bad(v: np.ndarray, lo: int) -> np.ndarray:
    with np.errstate(invalid="ignore"):
        return ~np.isfinite(v) | (v < lo) | (v != np.round(v))


def c_star(H: np.ndarray | float, *, errors: Errors = "raise") -> np.ndarray:
    """Critical cosine ``c*(H) = (sqrt((H−1)² + 4) − (H−1))/2`` (vectorised).

    Positive root of ``c² + (H−1)c − 1 = 0``; ``c*(1) = 1``, ``c*(2) = 1/φ_golden``.
    Computed in the cancellation-free form ``2/(sqrt((H−1)² + 4) + (H−1))``.

    Parameters
    ----------
    H : int or array
        Number of heads, an integer ``>= 1``.
    errors : {"raise", "nan"}
        Out-of-domain inputs raise ``ValueError`` (default) or give ``nan``.
    """
    Ha = np.asarray(H, dtype=np.float64)
    bad = _domain({"H": Ha}, {"H": _int_bad(Ha, 1)}, errors, "c_star")
    Hs = np.where(bad, 1.0, Ha)
    out = 2.0 / (np.sqrt((Hs - 1.0) ** 2 + 4.0) + (Hs - 1.0))
    return np.where(bad, np.nan, out)


def _heads_domain(H: np.ndarray | float, n: np.ndarray | float, alpha: np.ndarray | float,
                  errors: Errors, func: str) -> tuple[np.ndarray, ...]:
    """The domain of the dominance thresholds: ``bad`` and ``H, n, α`` safe to evaluate.

    ``H`` integer ``>= 1``, ``n`` integer ``>= 2``, ``α > 0``, all finite; out of it
    :func:`_domain` raises (naming ``func`` and the argument) or, with ``errors="nan"``,
    marks the entry in ``bad``, where ``(H, n, α)`` are replaced by ``(2, 2, 1)`` so that
    the formulas evaluate (their result there is replaced by ``nan``).
    """
    Ha, na, aa = (np.asarray(v, dtype=np.float64) for v in (H, n, alpha))
    with np.errstate(invalid="ignore"):
        bad = _domain({"H": Ha, "n": na, "alpha": aa},
                      {"H": _int_bad(Ha, 1), "n": _int_bad(na, 2),
                       "alpha": ~np.isfinite(aa) | ~(aa > 0)}, errors, func)
    return bad, np.where(bad, 2.0, Ha), np.where(bad, 2.0, na), np.where(bad, 1.0, aa)


def beta_star(H: np.ndarray | float, n: np.ndarray | float, alpha: np.ndarray | float, *,
              errors: Errors = "raise") -> np.ndarray:
    """Critical inverse temperature ``β* = (1/2α) ln(c*(H)² (n−1) / (1 − c*(H)²))``.

    Radial dominance (RD, module docstring) holds for orthonormal tokens and ``H`` identical
    scalar heads ``αI`` iff ``β ≤ β*``. Vectorised over broadcastable ``H, n, α``.

    Parameters
    ----------
    H : int or array
        Heads, integer ``>= 1``. ``H = 1`` gives ``β* = +inf`` (no cross-head term:
        dominance at every ``β``; the log argument is infinite since ``c*(1) = 1``).
    n : int or array
        Tokens, integer ``>= 2`` (``n − 1`` other tokens; orthonormality needs ``n <= d``).
    alpha : float or array
        Head strength ``α > 0``.
    errors : {"raise", "nan"}
        Out-of-domain inputs (``H < 1`` or non-integer, ``n < 2`` or non-integer,
        ``α <= 0``, non-finite) raise ``ValueError`` naming the argument (default) or give
        ``nan``. The log argument is then always in ``(0, ∞]``.

    Returns
    -------
    ndarray
        ``β*`` (``+inf`` for ``H = 1``). A value ``<= 0`` is returned as computed and
        means that dominance fails for every ``β > 0`` (``c*(H)² <= 1/n``).
    """
    bad, Hs, ns, As = _heads_domain(H, n, alpha, errors, "beta_star")
    c = c_star(Hs)
    # 1 − c² = (H−1) c (the defining quadratic), exact and cancellation-free; 0 for H = 1
    one_minus_c2 = (Hs - 1.0) * c
    single = Hs == 1
    arg = c * c * (ns - 1.0) / np.where(single, 1.0, one_minus_c2)
    out = np.where(single, np.inf, np.log(arg) / (2.0 * As))
    return np.where(bad, np.nan, out)


def beta_star_exact(H: np.ndarray | float, n: np.ndarray | float, alpha: np.ndarray | float,
                    *, errors: Errors = "raise") -> np.ndarray:
    """Threshold of the *sharp* radial term ``β*_exact = (1/2α) ln((n−1)/(H−1))``.

    ``own ≥ |cross_radial|`` iff ``β ≤ β*_exact``. Same configuration and domain as
    :func:`beta_star`; ``+inf`` for ``H = 1``.
    """
    bad, Hs, ns, As = _heads_domain(H, n, alpha, errors, "beta_star_exact")
    single = Hs == 1
    out = np.where(single, np.inf,
                   np.log((ns - 1.0) / np.where(single, 1.0, Hs - 1.0)) / (2.0 * As))
    return np.where(bad, np.nan, out)


def beta_star_blocks(H: np.ndarray | float, n: np.ndarray | float, alpha: np.ndarray | float,
                     *, errors: Errors = "raise") -> np.ndarray:
    """Dominance threshold ``β*_⊥ = (1/2α) ln(H c*² (n−1) / (1 − H c*²))`` for block heads.

    Configuration of :func:`block_heads` with :func:`spread_tokens` (module docstring);
    ``+inf`` for ``H = 1``. ``H c*(H)² < 1`` for every ``H >= 2``.
    """
    bad, Hs, ns, As = _heads_domain(H, n, alpha, errors, "beta_star_blocks")
    c2H = Hs * c_star(Hs) ** 2
    single = Hs == 1
    arg = c2H * (ns - 1.0) / np.where(single, 1.0, 1.0 - c2H)
    out = np.where(single, np.inf, np.log(arg) / (2.0 * As))
    return np.where(bad, np.nan, out)


def dominance_cosine(beta: np.ndarray | float, n: np.ndarray | float,
                     alpha: np.ndarray | float) -> np.ndarray:
    """``c(β) = e^{αβ}/sqrt(e^{2αβ} + n − 1) = cos∠(f, x)`` for orthonormal tokens (stable form)."""
    b, na, aa = (np.asarray(v, dtype=np.float64) for v in (beta, n, alpha))
    # c = 1/sqrt(1 + (n−1) e^{−2αβ}) without overflow
    return 1.0 / np.sqrt(1.0 + (na - 1.0) * np.exp(-2.0 * aa * b))


# ------------------------------------------------------------------------------ φ and λ_c
def _check_n_beta(n: float, beta: float, func: str) -> None:
    if not (np.isfinite(n) and n >= 2 and n == int(n)):
        raise ValueError(f"{func}: argument n out of domain ({_REASONS['n']}), got {n!r}")
    if not (np.isfinite(beta) and beta > 0):
        raise ValueError(f"{func}: argument beta must be finite and > 0, got {beta!r}")


def equiangular_rate(lam: np.ndarray | float, beta: float, n: int) -> np.ndarray:
    """Early-time rate of one scalar head, ``φ(λ) = 2λ / (e^{λβ} + n − 1)`` (vectorised in ``λ``).

    The rate of the equiangular reduction at ``γ = 0`` (docs/theory.md §6, written ``φ``
    there; not the kernel's potential ``Φ`` of :mod:`wflow.attention.kinds`).

    Evaluated as ``2λ exp(−logaddexp(λβ, log(n−1)))`` (no overflow for large ``λβ``).
    """
    _check_n_beta(n, beta, "equiangular_rate")
    lam = np.asarray(lam, dtype=np.float64)
    return 2.0 * lam * np.exp(-np.logaddexp(lam * beta, np.log(n - 1.0)))


def early_rate(lambdas: np.ndarray, beta: float, n: int, *, w: np.ndarray | float = 1.0) -> float:
    """``γ̇(0) = Σ_h w_h φ(λ_h)`` for equiangular tokens at ``γ = 0`` (softmax, scalar heads)."""
    lam = np.atleast_1d(np.asarray(lambdas, dtype=np.float64))
    return float(np.sum(np.broadcast_to(np.asarray(w, float), lam.shape)
                        * equiangular_rate(lam, beta, n)))


def lambda_c(n: int | np.ndarray, beta: float | np.ndarray) -> np.ndarray:
    """Convexity threshold of ``φ``: ``φ'' < 0`` for ``λ < λ_c``, ``> 0`` for ``λ > λ_c``.

    ``λ_c = s_c/β`` with ``s_c > 2`` the unique positive root of
    ``(s − 2) − (n−1)(s + 2) e^{−s} = 0`` (Brent, ``xtol = 1e-14``). Vectorised by a loop.
    """
    nn, bb = np.broadcast_arrays(np.asarray(n, dtype=np.float64),
                                 np.asarray(beta, dtype=np.float64))
    out = np.empty(nn.shape)
    for idx in np.ndindex(nn.shape):
        ni, bi = float(nn[idx]), float(bb[idx])
        _check_n_beta(ni, bi, "lambda_c")
        N = ni - 1.0

        def g(s: float, N: float = N) -> float:
            return (s - 2.0) - N * (s + 2.0) * np.exp(-s)

        hi = 4.0
        while g(hi) <= 0:
            hi *= 2.0
        out[idx] = brentq(g, 2.0, hi, xtol=1e-14, rtol=4 * np.finfo(float).eps) / bi
    return out if out.ndim else out[()]
