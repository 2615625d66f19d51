"""Quantitative multi-head results of [MH] (THEORY.md §6): formulas and checks.

Conventions: softmax heads, ``w_h = 1`` (the [MH] sum over heads) unless stated, value
aligned (``V_h = A_h``), masses ``m_j = 1/n``, so that for token ``i`` and head ``h``
``f_h(x_i) = Σ_j p^h_ij A_h x_j``, ``p^h_ij = softmax_j(β <x_i, A_h x_j>)`` (the self term
``j = i`` included, as in the particle engine), ``ẋ_i = P_{x_i} Σ_h w_h f_h(x_i)``.

Radial dominance and the critical temperature
---------------------------------------------
For static heads the per-head energy rate splits (see :mod:`wflow.diagnostics`) as
``dE_h/dt = own_h + cross_direct_h + cross_radial_h`` with, per token,

* own tangential power ``own_i = <∇ψ_h, P_x w_h f_h>`` (``= w_h Z_h |P_x f_h|²`` for
  value-aligned heads, since then ``∇ψ_h = Z_h f_h``);
* ``cross_direct_i = <∇ψ_h, Σ_{h'≠h} w_h' f_h'>`` (zero when ``A_h A_h' = 0``);
* ``cross_radial_i = −<∇ψ_h, x> Σ_{h'≠h} w_h' a^{h'}``, radial shadows ``a^h = <f_h, x>``.

The *radial-dominance condition* of [MH] compares the own power with the cross-head
radial-shadow terms bounded by Cauchy–Schwarz, ``|<∇ψ_h, x>| ≤ |∇ψ_h|``:

    own_h  ≥  R_h := ∫ |∇ψ_h(x)| Σ_{h'≠h} w_h' |a^{h'}(x)| dμ(x).          (RD)

``margin_h = own_h − R_h``. With orthogonal heads (``cross_direct = 0``) (RD) implies
``dE_h/dt ≥ own_h − ∫|cross_radial| ≥ margin_h ≥ 0``. For arbitrary heads the same
argument gives the certificate ``margin_general_h = own_h + cross_direct_h − R_h ≥ 0``
⇒ ``dE_h/dt ≥ 0``.

For approximately orthogonal symmetric heads the direct term has an a-priori bound from
the head overlaps: ``∇ψ_h = A_h Y_h`` and ``f_h' = V_h' Y_h'/Z_h'`` (softmax) give
``|cross_direct_h| ≤ D_h := Σ_{h'≠h} w_h' ‖A_h V_h'‖ ∫ |Y_h| |Y_h'|/Z_h' dμ`` (for
value-aligned heads ``‖A_h V_h'‖ = ‖A_h A_h'‖ ≤ δ``). The resulting *certificate*
``certificate_h = own_h − R_h − D_h`` is a lower bound of ``dE_h/dt`` that uses neither
``cross_direct`` nor ``cross_radial`` themselves: ``dE_h/dt ≥ certificate_h``.

**Which configuration gives** ``β*``. Take ``n ≤ d`` orthonormal tokens and ``H``
*identical* scalar heads ``A_h = V_h = α I`` sharing the token space (``w_h`` equal;
their common value cancels). With ``u = e^{αβ}`` every token sees
``f = α(u x_i + Σ_{j≠i} x_j)/(u + n − 1)``, so ``a = |f| c`` with the cosine

    c(β) = <f, x_i>/|f| = u / sqrt(u² + n − 1),

``own = Z |f|² (1 − c²)`` and ``R = Z |f| (H − 1) |f| c``. Hence (RD) ⇔
``1 − c² ≥ (H − 1) c`` ⇔ ``c ≤ c*(H)``, the positive root of ``c² + (H−1) c − 1 = 0``,

    c*(H) = (sqrt((H−1)² + 4) − (H−1)) / 2,

and, ``c`` being increasing in ``β``, (RD) ⇔ ``β ≤ β*`` with

    β* = (1/2α) ln( c*² (n−1) / (1 − c*²) ).

This reproduces THEORY.md exactly; the *sharp* radial term instead (``own ≥ |cross_radial|``,
``|cross_radial| = Z (H−1) a²``) gives ``c² ≤ 1/H``, i.e.
``β ≤ β*_exact = (1/2α) ln((n−1)/(H−1))`` (:func:`beta_star_exact`), and ``β* < β*_exact``
because (RD) is only sufficient. In this shared-space configuration ``cross_direct > 0``
(the heads coincide), so the per-head rates themselves stay positive; the condition
matters for heads in (approximately) orthogonal subspaces. Special cases: ``H = 1`` has no
cross term, ``c*(1) = 1`` and ``β* = +∞`` (dominance at every ``β``); ``β* ≤ 0`` (when
``c*(H)² ≤ 1/n``, e.g. ``H = 4, n ≤ 10``) means (RD) fails at every ``β > 0`` because
already ``c(0) = 1/√n > c*``.

For heads in orthogonal coordinate blocks ``A_h = Hα P_h`` acting on the *spread*
orthonormal tokens ``x_i = H^{-1/2} Σ_h e_{h,i}`` (each head again sees scores
``α δ_ij``; :func:`block_heads`, :func:`spread_tokens`), ``f_h`` lies in block ``h`` and
``c_h = a/|f_h| = c(β)/√H``; (RD) then holds iff
``β ≤ β*_⊥ = (1/2α) ln(H c*² (n−1) / (1 − H c*²))`` (:func:`beta_star_blocks`), while the
sharp per-head rates are ``∝ n − 1 > 0``.

Equiangular reduction
---------------------
If ``<x_i, x_j> = γ`` for all ``i ≠ j`` then ``P_{x_i} x_j = x_j − γ x_i`` and, for scalar
heads ``A_h = V_h = λ_h I``, ``ẋ_i = κ(γ) Σ_{j≠i}(x_j − γ x_i)``; the Gram matrix stays
equiangular and

    γ̇ = F(γ) = 2 κ(γ) (1 − γ)(1 + (n−1) γ),

* softmax: ``κ = Σ_h w_h λ_h / (e^{βλ_h(1−γ)} + n − 1)``;
* USA: ``κ = Σ_h w_h λ_h e^{βλ_h γ} / n``; ReLU: ``κ = Σ_h w_h β λ_h² max(0, γ) / n``.

Softmax: ``F(0) = Σ_h φ(λ_h)`` with ``φ(λ) = 2λ / (e^{λβ} + n − 1)`` (``w_h = 1``), and
``F(γ) ≈ 2Λ (1 − γ)`` as ``γ → 1`` (``Λ = Σ_h λ_h``): ``1 − γ ≈ C e^{−2Λt}``. ReLU has
``F(0) = 0`` and ``γ̇ ≈ (2β Σλ_h²/n) γ`` near 0, hence the ``n log d`` clustering time from
a random start (``γ_0 ~ d^{-1/2}``).

``φ`` is concave then convex in ``λ``: with ``s = βλ``, ``φ'' ∝ e^s (s − 2) − (n−1)(s + 2)``,
which has exactly one positive root ``s_c > 2`` (the function is convex in ``s`` and
negative at ``s = 2``); ``λ_c = s_c/β`` (:func:`lambda_c`). The equation
``(s − 2) e^s = (n−1)(s + 2)`` is a generalised Lambert-W equation with no elementary closed
form; it is solved by Brent's method to ``xtol = 1e-14``.

Attention entropy of an equiangular row: ``p_self = 1/(1 + (n−1) e^{−βλ(1−γ)})``, the others
share ``1 − p_self``; ``H = −p_self log p_self − (1 − p_self) log((1 − p_self)/(n−1))``,
non-decreasing in ``γ`` and equal to ``log n`` at ``γ = 1``.
"""

from __future__ import annotations

import logging
import warnings
from dataclasses import dataclass
from typing import Literal, NamedTuple

import numpy as np
from scipy.integrate import solve_ivp
from scipy.optimize import brentq

from .diagnostics import head_rates, mean_inner_product, radial_shadows
from .energy import evaluate
from .heads import Attention, Heads
from .schedules import Static
from .sphere import check_on_sphere

__all__ = [
    "c_star",
    "beta_star",
    "beta_star_exact",
    "beta_star_blocks",
    "dominance_cosine",
    "phi",
    "early_rate",
    "lambda_c",
    "equiangular_rhs",
    "EquiangularSolution",
    "solve_equiangular",
    "equiangular_entropy",
    "RadialDominance",
    "radial_dominance",
    "dominance_root",
    "head_overlap",
    "approx_orthogonal_heads",
    "block_heads",
    "spread_tokens",
    "equiangular_time",
    "relu_equiangular_time",
    "reduce_to_span",
    "fit_early_rate",
    "fit_decay_rate",
    "clustering_time",
    "ClusteringRun",
    "particle_clustering_time",
]

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
    Ha, na, aa = (np.asarray(v, dtype=np.float64) for v in (H, n, alpha))
    with np.errstate(invalid="ignore"):
        bad = _domain({"H": Ha, "n": na, "alpha": aa},
                      {"H": _int_bad(Ha, 1), "n": _int_bad(na, 2),
                       "alpha": ~np.isfinite(aa) | ~(aa > 0)}, errors, "beta_star")
    Hs = np.where(bad, 2.0, Ha)
    ns = np.where(bad, 2.0, na)
    As = np.where(bad, 1.0, aa)
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
    Ha, na, aa = (np.asarray(v, dtype=np.float64) for v in (H, n, alpha))
    with np.errstate(invalid="ignore"):
        bad = _domain({"H": Ha, "n": na, "alpha": aa},
                      {"H": _int_bad(Ha, 1), "n": _int_bad(na, 2),
                       "alpha": ~np.isfinite(aa) | ~(aa > 0)}, errors, "beta_star_exact")
    Hs = np.where(bad, 2.0, Ha)
    ns = np.where(bad, 2.0, na)
    As = np.where(bad, 1.0, aa)
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
    Ha, na, aa = (np.asarray(v, dtype=np.float64) for v in (H, n, alpha))
    with np.errstate(invalid="ignore"):
        bad = _domain({"H": Ha, "n": na, "alpha": aa},
                      {"H": _int_bad(Ha, 1), "n": _int_bad(na, 2),
                       "alpha": ~np.isfinite(aa) | ~(aa > 0)}, errors, "beta_star_blocks")
    Hs = np.where(bad, 2.0, Ha)
    ns = np.where(bad, 2.0, na)
    As = np.where(bad, 1.0, aa)
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


def phi(lam: np.ndarray | float, beta: float, n: int) -> np.ndarray:
    """Early-time rate of one scalar head, ``φ(λ) = 2λ / (e^{λβ} + n − 1)`` (vectorised in ``λ``).

    Evaluated as ``2λ exp(−logaddexp(λβ, log(n−1)))`` (no overflow for large ``λβ``).
    """
    _check_n_beta(n, beta, "phi")
    lam = np.asarray(lam, dtype=np.float64)
    return 2.0 * lam * np.exp(-np.logaddexp(lam * beta, np.log(n - 1.0)))


def early_rate(lambdas: np.ndarray, beta: float, n: int, *, w: np.ndarray | float = 1.0) -> float:
    """``γ̇(0) = Σ_h w_h φ(λ_h)`` for equiangular tokens at ``γ = 0`` (softmax, scalar heads)."""
    lam = np.atleast_1d(np.asarray(lambdas, dtype=np.float64))
    return float(np.sum(np.broadcast_to(np.asarray(w, float), lam.shape) * phi(lam, beta, n)))


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


# ------------------------------------------------------------------- equiangular reduction
Kind = Literal["softmax", "usa", "relu"]


def _lam_w(lambdas: np.ndarray, w: np.ndarray | float) -> tuple[np.ndarray, np.ndarray]:
    lam = np.atleast_1d(np.asarray(lambdas, dtype=np.float64))
    if lam.ndim != 1 or not np.all(np.isfinite(lam)) or np.any(lam <= 0):
        raise ValueError(f"lambdas: scalar head strengths must be finite and > 0, got {lam}")
    ww = np.broadcast_to(np.asarray(w, dtype=np.float64), lam.shape)
    if np.any(ww < 0) or not np.all(np.isfinite(ww)):
        raise ValueError("w: mixing weights must be finite and >= 0")
    return lam, ww


def equiangular_rhs(gamma: np.ndarray | float, lambdas: np.ndarray, beta: float, n: int, *,
                    kind: Kind = "softmax", w: np.ndarray | float = 1.0) -> np.ndarray:
    """``F(γ) = 2κ(γ)(1 − γ)(1 + (n−1)γ)``: the equiangular ODE ``γ̇ = F(γ)`` (module docstring).

    Vectorised in ``γ``; ``lambdas`` are the scalar head strengths ``λ_h > 0``.
    """
    _check_n_beta(n, beta, "equiangular_rhs")
    lam, ww = _lam_w(lambdas, w)
    g = np.asarray(gamma, dtype=np.float64)
    gg = g[..., None]
    if kind == "softmax":
        kap = np.sum(ww * lam * np.exp(-np.logaddexp(beta * lam * (1.0 - gg), np.log(n - 1.0))),
                     axis=-1)
    elif kind == "usa":
        kap = np.sum(ww * lam * np.exp(beta * lam * gg), axis=-1) / n
    elif kind == "relu":
        kap = np.sum(ww * beta * lam**2, axis=-1) * np.maximum(g, 0.0) / n
    else:
        raise ValueError(f"kind: must be 'softmax', 'usa' or 'relu', got {kind!r}")
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
        return EquiangularSolution("failed", t, np.full(t.shape, np.nan), sol.message)
    return EquiangularSolution("success", sol.t, sol.y[0], "")


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


# ------------------------------------------------------------------------ radial dominance
@dataclass(frozen=True)
class RadialDominance:
    """Per-head radial-dominance quantities at one state (integrated over ``μ``; shapes ``(H,)``).

    Attributes
    ----------
    own : tangential own power ``∫ <P∇ψ_h, P w_h f_h>`` (``= ∫ <∇ψ_h, P w_h f_h>``).
    cross_direct : ``∫ <∇ψ_h, Σ_{h'≠h} w_h' f_h'>``.
    cross_radial : exact radial-shadow cross term ``−∫ <∇ψ_h, x> Σ_{h'≠h} w_h' a^{h'}``.
    cross_bound : ``R_h = ∫ |∇ψ_h| Σ_{h'≠h} w_h' |a^{h'}|`` (>= ``|cross_radial|``).
    rate : ``dE_h/dt = own + cross_direct + cross_radial``.
    margin : ``own − R_h``; the [MH] condition (RD) holds iff ``margin >= 0``.
    margin_exact : ``own − |cross_radial|`` (sharp radial comparison).
    margin_general : ``own + cross_direct − R_h``; ``>= 0`` certifies ``dE_h/dt >= 0`` for
        any heads.
    margin_pointwise : ``min_i (own_i − R_{h,i})`` (RD token by token), shape ``(H,)``.
    shadows : radial shadows ``a^h_i``, shape ``(H, n)``.
    direct_bound : ``D_h = Σ_{h'≠h} w_h' ‖A_h V_h'‖ ∫ |Y_h| |Y_h'|/Z_h' dμ`` (``>=
        |cross_direct|`` for symmetric heads; NaN for non-symmetric ones).
    """

    own: np.ndarray
    cross_direct: np.ndarray
    cross_radial: np.ndarray
    cross_bound: np.ndarray
    shadows: np.ndarray
    margin_pointwise: np.ndarray
    direct_bound: np.ndarray | None = None

    @property
    def rate(self) -> np.ndarray:
        """``dE_h/dt``."""
        return self.own + self.cross_direct + self.cross_radial

    @property
    def margin(self) -> np.ndarray:
        """``own − R_h`` (radial dominance holds where ``>= 0``)."""
        return self.own - self.cross_bound

    @property
    def margin_exact(self) -> np.ndarray:
        """``own − |cross_radial|``."""
        return self.own - np.abs(self.cross_radial)

    @property
    def margin_general(self) -> np.ndarray:
        """``own + cross_direct − R_h`` (certificate of ``dE_h/dt >= 0`` for any heads)."""
        return self.own + self.cross_direct - self.cross_bound

    @property
    def certificate(self) -> np.ndarray:
        """``own − R_h − D_h``: an a-priori lower bound of ``dE_h/dt`` (symmetric heads)."""
        return self.own - self.cross_bound - self.direct_bound

    @property
    def holds(self) -> np.ndarray:
        """Radial dominance (RD) per head: ``margin >= 0``."""
        return self.margin >= 0

    def as_dict(self) -> dict[str, list[float]]:
        """Plain per-head lists for JSON."""
        return {k: np.asarray(getattr(self, k)).tolist() for k in
                ("own", "cross_direct", "cross_radial", "cross_bound", "rate", "margin",
                 "margin_exact", "margin_general", "margin_pointwise", "direct_bound",
                 "certificate", "holds")}


def radial_dominance(x: np.ndarray, heads: Heads, attn: Attention,
                     m: np.ndarray | None = None) -> RadialDominance:
    """Own tangential power, cross-head radial-shadow terms and margins of every head.

    Parameters
    ----------
    x : (n, d) array
        Tokens on the sphere.
    heads : Heads
        Any heads (the [MH] setting is symmetric value-aligned; the split is general).
    attn : Attention
        Attention kind and ``β``.
    m : (n,) array, optional
        Token masses (default ``1/n``).

    Returns
    -------
    RadialDominance
        See the module docstring for the definitions; ``cross_direct`` and ``cross_radial``
        are those of :func:`wflow.diagnostics.head_rates`; ``own`` equals its ``own`` but is
        evaluated from projected vectors (no cancellation for nearly radial outputs).
    """
    x = check_on_sphere(x, name="tokens")
    n = x.shape[0]
    m = np.full(n, 1.0 / n) if m is None else np.asarray(m, dtype=np.float64)
    fe = evaluate(x, heads, attn, m=m)
    hr = head_rates(x, m, fe, heads)
    a = radial_shadows(x, fe)  # (H, n)
    wa = np.abs(heads.w[:, None] * a)
    others = wa.sum(axis=0)[None, :] - wa  # Σ_{h'≠h} w_h' |a^{h'}|
    gnorm = np.linalg.norm(fe.grad_psi, axis=2)  # |∇ψ_h(x_i)|
    bound_i = gnorm * others
    # own per token as <P∇ψ_h, P w_h f_h>: equal to diagnostics.head_rates' own
    # <∇ψ_h, w_h f_h> − <∇ψ_h, x> w_h a^h, but without its cancellation when the outputs are
    # nearly radial (large β: the tangential parts are e^{−αβ} smaller than the outputs)
    Pg = fe.grad_psi - np.einsum("hnd,nd->hn", fe.grad_psi, x)[:, :, None] * x[None]
    Pf = fe.f - a[:, :, None] * x[None]
    own_i = heads.w[:, None] * np.einsum("hnd,hnd->hn", Pg, Pf)
    return RadialDominance(own_i @ m, hr.cross_direct, hr.cross_radial, bound_i @ m, a,
                           np.min(own_i - bound_i, axis=1),
                           _direct_bound(fe, heads, attn, m))


def _direct_bound(fe, heads: Heads, attn: Attention, m: np.ndarray) -> np.ndarray:
    """``D_h = Σ_{h'≠h} w_h' ‖A_h V_h'‖ ∫ |Y_h| |Y_h'|/Z_h' dμ`` (module docstring)."""
    H = heads.H
    if not heads.is_symmetric():
        return np.full(H, np.nan)
    AV = np.array([[np.linalg.norm(heads.A[h] @ heads.V[g], 2) for g in range(H)]
                   for h in range(H)])
    np.fill_diagonal(AV, 0.0)
    ynorm = np.linalg.norm(fe.Y, axis=2)  # (H, n): |Y_h(x_i)|
    fnorm = ynorm / fe.Z if attn.kind == "softmax" else ynorm  # |f_h'| per unit ‖V_h'‖
    pair = np.einsum("hn,gn,n->hg", ynorm, fnorm, m)  # ∫ |Y_h| |Y_g|/Z_g dμ
    return np.einsum("hg,g,hg->h", AV, heads.w, pair)


def dominance_root(x: np.ndarray, heads: Heads, *, bracket: tuple[float, float],
                   which: Literal["margin", "margin_exact", "margin_general"] = "margin",
                   xtol: float = 1e-12) -> float:
    """Numerical root in ``β`` of ``min_h margin_h(β)`` for fixed tokens and softmax heads.

    Brent's method on ``bracket = (β_lo, β_hi)`` (the margin must change sign on it); the
    root is located to ``|β − β_root| <= xtol + 4 eps |β_root|``.
    """
    lo, hi = (float(b) for b in bracket)
    if not 0 < lo < hi:
        raise ValueError(f"bracket: need 0 < beta_lo < beta_hi, got {bracket}")

    def g(beta: float) -> float:
        return float(np.min(getattr(radial_dominance(x, heads, Attention("softmax", beta)),
                                    which)))

    glo, ghi = g(lo), g(hi)
    if glo * ghi > 0:
        raise ValueError(f"bracket: {which} does not change sign on [{lo}, {hi}] "
                         f"(values {glo:.3e}, {ghi:.3e})")
    return float(brentq(g, lo, hi, xtol=xtol, rtol=4 * np.finfo(float).eps))


# ------------------------------------------------------------------------- head builders
def head_overlap(heads: Heads) -> float:
    """``max_{h≠h'} ‖A_{h'} A_h‖_op`` (0 for one head)."""
    A = heads.A
    best = 0.0
    for h in range(heads.H):
        for g in range(heads.H):
            if g != h:
                best = max(best, float(np.linalg.norm(A[g] @ A[h], 2)))
    return best


def block_heads(H: int, d: int, alpha: float, *, w: float | np.ndarray = 1.0) -> Heads:
    """Heads in orthogonal coordinate blocks: ``A_h = V_h = Hα P_h``, block size ``d // H``.

    ``P_h`` projects on coordinates ``[h k, (h+1) k)``, ``k = d // H``; ``A_h A_h' = 0``.
    """
    if H < 1 or d < H:
        raise ValueError(f"block_heads: need 1 <= H <= d, got H={H}, d={d}")
    k = d // H
    A = np.zeros((H, d, d))
    for h in range(H):
        idx = np.arange(h * k, (h + 1) * k)
        A[h, idx, idx] = H * alpha
    return Heads.bilinear(A, w=w)


def spread_tokens(n: int, H: int, d: int | None = None) -> np.ndarray:
    """Orthonormal tokens ``x_i = H^{-1/2} Σ_h e_{h k + i}`` spread over the ``H`` blocks.

    Each block ``h`` (size ``k = d // H >= n``) sees the orthogonal vectors ``e_{hk+i}/√H``.
    """
    d = H * n if d is None else d
    k = d // H
    if k < n:
        raise ValueError(f"spread_tokens: need block size d // H >= n, got d={d}, H={H}, n={n}")
    x = np.zeros((n, d))
    for h in range(H):
        x[np.arange(n), h * k + np.arange(n)] = 1.0 / np.sqrt(H)
    return x


def approx_orthogonal_heads(H: int, d: int, *, scale: float, delta: float,
                            rng: np.random.Generator, w: float | np.ndarray = 1.0,
                            tol: float = 1e-10) -> Heads:
    """Symmetric PSD heads ``A_h = scale · U_h U_hᵀ`` with ``max ‖A_{h'}A_h‖_op = δ`` exactly.

    ``U_h`` is the orthonormal basis (QR) of ``E_h + t G_h``, ``E_h`` the coordinate block
    ``h`` (size ``k = d // H``) and ``G_h`` standard normal; ``t >= 0`` is found by
    bisection so that ``max_{h≠h'} ‖A_{h'}A_h‖_op = δ`` to relative ``tol``
    (``δ = 0``: exact blocks, ``A_{h'}A_h = 0``). Value-aligned (``V_h = A_h``).

    Parameters
    ----------
    scale : float
        ``‖A_h‖_op = scale > 0``.
    delta : float
        Target overlap, ``0 <= δ < scale²/2`` (larger values need non-generic frames).
    """
    if not (np.isfinite(scale) and scale > 0):
        raise ValueError(f"scale: must be finite and > 0, got {scale!r}")
    if not (np.isfinite(delta) and 0 <= delta < 0.5 * scale**2):
        raise ValueError(f"delta: must lie in [0, scale²/2) = [0, {0.5 * scale**2}), got {delta!r}")
    if H < 1 or d < H:
        raise ValueError(f"approx_orthogonal_heads: need 1 <= H <= d, got H={H}, d={d}")
    k = d // H
    E = [np.eye(d)[:, h * k:(h + 1) * k] for h in range(H)]
    G = [rng.standard_normal((d, k)) for _ in range(H)]

    def build(t: float) -> Heads:
        A = np.empty((H, d, d))
        for h in range(H):
            U, _ = np.linalg.qr(E[h] + t * G[h])
            A[h] = scale * (U @ U.T)
            A[h] = 0.5 * (A[h] + A[h].T)
        return Heads.bilinear(A, w=w)

    if delta == 0 or H == 1:
        return build(0.0)
    lo, hi = 0.0, 1.0
    while head_overlap(build(hi)) < delta:
        hi *= 2.0
        if hi > 1e6:
            raise ValueError(f"delta: overlap {delta} not reachable with H={H}, d={d}")
    for _ in range(200):
        mid = 0.5 * (lo + hi)
        if head_overlap(build(mid)) < delta:
            lo = mid
        else:
            hi = mid
        if hi - lo <= tol * hi:
            break
    return build(hi)


# ------------------------------------------------------------------------- clustering time
def equiangular_time(gamma0: float, gamma1: float, lambdas: np.ndarray, beta: float, n: int,
                     *, kind: Kind = "softmax", w: np.ndarray | float = 1.0) -> float:
    """Time for the equiangular ODE to go from ``γ_0`` to ``γ_1``: ``∫_{γ_0}^{γ_1} dγ / F(γ)``.

    Adaptive Gauss–Kronrod quadrature (``scipy.integrate.quad``, ``epsrel = 1e-12``); needs
    ``F > 0`` on ``[γ_0, γ_1]`` (``γ_0 > 0`` for ReLU, which has ``F(0) = 0``). Warns if
    the quadrature reports a large error estimate.
    """
    from scipy.integrate import quad

    _check_n_beta(n, beta, "equiangular_time")
    if not -1.0 / (n - 1) < gamma0 < gamma1 < 1.0:
        raise ValueError(f"gamma0, gamma1: need -1/(n-1) < gamma0 < gamma1 < 1, got "
                         f"{gamma0}, {gamma1}")
    if kind == "relu" and gamma0 <= 0:
        raise ValueError("gamma0: ReLU has F(0) = 0 (no driving force); need gamma0 > 0")

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


def reduce_to_span(x: np.ndarray) -> np.ndarray:
    """Tokens expressed in an orthonormal basis of their span: ``(n, d) → (n, r)``, ``r = rank``.

    The Gram matrix is preserved. For scalar heads (``A_h = V_h = λ_h I``, any kind) the
    velocity ``P_{x_i} Σ_j k_ij x_j`` lies in ``span{x_j}``, so the span is invariant and the
    flow of the reduced tokens is the flow of the original ones (``O(d)``-equivariance):
    ``x(t) = y(t) Bᵀ``. This lets studies use random tokens in large ``d`` at cost ``O(n)``
    per dimension.
    """
    x = check_on_sphere(x, name="tokens")
    q, r = np.linalg.qr(x.T)  # x.T = q r, x = rᵀ qᵀ
    keep = np.abs(np.diag(r)) > 1e-12 * max(1.0, float(np.max(np.abs(r))))
    y = r.T[:, keep] if np.all(keep) else x @ q[:, keep]
    return y / np.linalg.norm(y, axis=1, keepdims=True)


def fit_early_rate(t: np.ndarray, q: np.ndarray, *, tau: float, degree: int = 6) -> float:
    """``q'(0)`` from a least-squares polynomial of ``degree`` fitted on ``0 <= t <= tau``.

    For a smooth noiseless trajectory the error is ``O(tau^degree)`` (truncation) plus the
    integrator error amplified by ``~1/tau``; use a ``tau`` well inside the early phase
    (e.g. ``γ(τ) <= 0.05``) and at least ``degree + 2`` samples.
    """
    t = np.asarray(t, dtype=np.float64)
    q = np.asarray(q, dtype=np.float64)
    sel = t <= tau * (1 + 1e-12)
    if sel.sum() < degree + 2:
        raise ValueError(f"fit_early_rate: need at least {degree + 2} samples in [0, tau], "
                         f"got {int(sel.sum())}")
    coef = np.polynomial.polynomial.polyfit(t[sel], q[sel], degree)
    return float(coef[1])


def fit_decay_rate(t: np.ndarray, r: np.ndarray, *, lo: float, hi: float) -> tuple[float, int]:
    """Exponential decay rate ``k`` of ``r(t) ≈ C e^{−k t}`` fitted on ``lo <= r <= hi``.

    Returns ``(k, number of samples used)``; needs at least 3 samples in the window.
    """
    t = np.asarray(t, dtype=np.float64)
    r = np.asarray(r, dtype=np.float64)
    sel = (r >= lo) & (r <= hi)
    if sel.sum() < 3:
        raise ValueError(f"fit_decay_rate: fewer than 3 samples with {lo} <= r <= {hi}")
    slope = np.polyfit(t[sel], np.log(r[sel]), 1)[0]
    return float(-slope), int(sel.sum())


def clustering_time(t: np.ndarray, q: np.ndarray, threshold: float) -> float:
    """First time ``q(t) >= threshold``, linearly interpolated between recorded steps.

    Returns ``nan`` if the threshold is never reached (the caller decides; never a guess),
    ``t[0]`` if it holds initially.
    """
    t = np.asarray(t, dtype=np.float64)
    q = np.asarray(q, dtype=np.float64)
    if t.shape != q.shape or t.ndim != 1:
        raise ValueError(f"clustering_time: t and q must be 1-D of equal length, got "
                         f"{t.shape}, {q.shape}")
    hit = np.nonzero(q >= threshold)[0]
    if hit.size == 0:
        return float("nan")
    k = int(hit[0])
    if k == 0:
        return float(t[0])
    t0, t1, q0, q1 = t[k - 1], t[k], q[k - 1], q[k]
    return float(t0 + (threshold - q0) * (t1 - t0) / (q1 - q0))


class ClusteringRun(NamedTuple):
    """Result of :func:`particle_clustering_time`.

    ``status``: ``"success"`` (threshold reached), ``"stalled"`` (an equilibrium below the
    threshold: max token speed fell under ``v_tol``) or ``"not_reached"`` (``T_max`` hit).
    ``time`` is the interpolated clustering time (``nan`` unless ``"success"``).
    """

    status: str
    time: float
    t: np.ndarray
    mean_inner: np.ndarray


def particle_clustering_time(x0: np.ndarray, heads: Heads, attn: Attention, *,
                             threshold: float = 0.9, dt: float = 0.05, T_max: float = 1e3,
                             v_tol: float = 1e-9) -> ClusteringRun:
    """First time the mean pairwise inner product ``q`` of the particles reaches ``threshold``.

    Runs the particle system (RK4, :func:`wflow.particles.iterate`) until then. Every step
    is recorded (``q`` at the RK4 grid; linear interpolation of the crossing, error
    ``O(dt² |q''|)``). Stops early with ``"stalled"`` when ``max_i |ẋ_i| < v_tol`` (e.g. ReLU
    multi-cluster equilibria, whose clusters have non-positive mutual inner products and no
    longer interact) and with ``"not_reached"`` at ``T_max``; both warn.
    """
    from .particles import iterate

    if not -1 < threshold < 1:
        raise ValueError(f"threshold: must lie in (-1, 1), got {threshold}")
    ts, qs = [], []
    status = "not_reached"
    for st in iterate(x0, Static.of(heads), attn, T=T_max, dt=dt, integrator="rk4"):
        ts.append(st.t)
        qs.append(mean_inner_product(st.x))
        if qs[-1] >= threshold:
            status = "success"
            break
        if float(np.max(np.linalg.norm(st.velocity, axis=1))) < v_tol:
            status = "stalled"
            break
    t, q = np.asarray(ts), np.asarray(qs)
    if status != "success":
        warnings.warn(f"particle_clustering_time: {status}: mean inner product {q[-1]:.3f} "
                      f"below {threshold} at t = {t[-1]:.4g}", stacklevel=2)
        return ClusteringRun(status, float("nan"), t, q)
    return ClusteringRun(status, clustering_time(t, q, threshold), t, q)
