"""Constant parameters: Riccati equilibria, their stability, and the long-time classifier.

For constant ``(A, b, V, B)`` the covariance obeys the autonomous Riccati equation
(docs/theory.md §7)::

    Σ̇ = F(Σ) = AΣ + ΣAᵀ + VΣBΣ + ΣBᵀΣVᵀ.

Equilibria solve the algebraic Riccati equation ``F(Σ) = 0``. ``Σ = 0`` always
does. With ``V = vI`` the Bernoulli substitution ``P = Σ^{-1}`` makes it
linear: a positive definite equilibrium is ``Σ* = P*^{-1}`` where ``P*`` solves
the Lyapunov equation ``AᵀP + PA = −C``, ``C = v(B + Bᵀ)``, and it exists iff
``P* ≻ 0``. For general ``V`` equilibria are found by Newton's method on the
symmetric matrices (``scipy.optimize.root``) from several starts.

Stability: the linearisation of ``F`` at ``Σ*`` acts on symmetric ``H`` by
``DF[H] = MH + HMᵀ + VHBΣ* + Σ*BᵀHVᵀ`` (``M = A + VΣ*B``); its spectrum on
the ``d(d+1)/2``-dimensional space of symmetric matrices decides local
stability. The mean equilibrium solves ``(A + V + VΣ*B) m* = −b`` and its
stability is the spectrum of ``A + V + VΣ*B`` (the Jacobian of ``(m, Σ)`` is
block triangular).

Closed forms (``V = vI``): the Bernoulli substitution ``P = Σ^{-1}`` gives
``Σ(t) = e^{At} L₀ (I_r − L₀ᵀ G(t) L₀)^{-1} L₀ᵀ e^{Aᵀt}``,
``G(t) = ∫_0^t e^{Aᵀs} C e^{As} ds``, which blows up at the first ``t*`` with
``λ_max(L₀ᵀ G(t*) L₀) = 1`` (:func:`riccati_closed_form`,
:func:`blowup_time_closed_form`); scalar and isotropic blow-up times
(:func:`blowup_time_scalar`, :func:`blowup_time_isotropic`).
"""

from __future__ import annotations

import logging
import math
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np
import scipy.integrate
import scipy.linalg
import scipy.optimize

from .moments import _EPS, moment_rhs, psd_factor
from .params import GaussianParams

__all__ = [
    "riccati_closed_form",
    "blowup_time_closed_form",
    "blowup_time_scalar",
    "blowup_time_isotropic",
    "Equilibrium",
    "EquilibriumFamily",
    "equilibrium_families",
    "quadratic_term_vanishes",
    "riccati_residual",
    "riccati_linearisation",
    "sym_basis",
    "equilibria",
    "refine_equilibrium",
]

logger = logging.getLogger(__name__)



def scalar_value(V: np.ndarray, *, rtol: float = 1e-12) -> float | None:
    """``v`` if ``V = vI`` (to ``rtol``), else None."""
    d = V.shape[0]
    v = float(np.trace(V)) / d
    if np.max(np.abs(V - v * np.eye(d))) <= rtol * max(abs(v), np.max(np.abs(V)), 1e-300):
        return v
    return None


def _gramian(A: np.ndarray, C: np.ndarray, t: float) -> tuple[np.ndarray, np.ndarray]:
    """``(G(t), e^{At})`` with ``G(t) = ∫_0^t e^{Aᵀs} C e^{As} ds`` (Van Loan block exponential)."""
    d = A.shape[0]
    blk = np.zeros((2 * d, 2 * d))
    blk[:d, :d] = -A.T
    blk[:d, d:] = C
    blk[d:, d:] = A
    E = scipy.linalg.expm(blk * t)
    eAt = E[d:, d:]
    G = eAt.T @ E[:d, d:]
    return 0.5 * (G + G.T), eAt


def _require_scalar_V(params: GaussianParams) -> float:
    v = scalar_value(params.V)
    if v is None:
        raise ValueError("V: the closed form needs V = vI (a multiple of the identity)")
    return v


def riccati_closed_form(params: GaussianParams, Sigma0: np.ndarray, t: np.ndarray | float
                        ) -> np.ndarray:
    """Exact covariance for ``V = vI`` (Bernoulli substitution, module docstring).

    ``Σ(t) = e^{At} L₀ (I_r − L₀ᵀ G(t) L₀)^{-1} L₀ᵀ e^{Aᵀt}`` with
    ``G(t) = ∫_0^t e^{Aᵀs} v(B + Bᵀ) e^{As} ds`` and ``Σ₀ = L₀L₀ᵀ``.

    Parameters
    ----------
    params : GaussianParams with ``V = vI``
    Sigma0 : (d, d) array, PSD (any rank)
    t : float or (n,) array, each before the blow-up time

    Returns
    -------
    (d, d) or (n, d, d) array

    Raises
    ------
    ValueError
        If ``V`` is not a multiple of the identity, or some ``t`` is at/after blow-up.
    """
    v = _require_scalar_V(params)
    C = v * (params.B + params.B.T)
    L0 = psd_factor(Sigma0, name="Sigma0")
    ts = np.atleast_1d(np.asarray(t, dtype=np.float64))
    out = np.empty((ts.size, params.d, params.d))
    r = L0.shape[1]
    for i, tt in enumerate(ts):
        G, eAt = _gramian(params.A, C, float(tt))
        K = np.eye(r) - L0.T @ G @ L0
        if r and np.linalg.eigvalsh(K)[0] <= 0:
            raise ValueError(f"t: {tt} is at or after the blow-up time")
        X = eAt @ L0
        S = X @ np.linalg.solve(K, X.T) if r else np.zeros((params.d, params.d))
        out[i] = 0.5 * (S + S.T)
    return out[0] if np.ndim(t) == 0 else out


def blowup_time_closed_form(params: GaussianParams, Sigma0: np.ndarray, *, t_max: float,
                            n_grid: int = 400) -> float:
    """Blow-up time for ``V = vI``: the first ``t`` with ``λ_max(L₀ᵀ G(t) L₀) = 1``.

    Scans ``[0, t_max]`` on ``n_grid`` points and refines the first crossing
    with Brent's method (to ``4ε t``). Returns ``inf`` if there is none up to
    ``t_max`` (the function ``λ_max(L₀ᵀGL₀)`` can be non-monotone, hence the scan).
    """
    v = _require_scalar_V(params)
    C = v * (params.B + params.B.T)
    L0 = psd_factor(Sigma0, name="Sigma0")
    if L0.shape[1] == 0:
        return math.inf

    def h(t: float) -> float:
        G, _ = _gramian(params.A, C, t)
        return float(np.linalg.eigvalsh(L0.T @ G @ L0)[-1]) - 1.0

    # scan with the semigroup recursion G(t + δ) = G(t) + e^{Aᵀt} G(δ) e^{At}
    # (one matrix exponential), then bracket and refine with direct evaluations
    grid = np.linspace(0.0, float(t_max), int(n_grid))
    dt = float(grid[1] - grid[0])
    Gd, Ed = _gramian(params.A, C, dt)
    G = np.zeros_like(Gd)
    E = np.eye(params.d)
    for k in range(1, grid.size):
        G = G + E.T @ Gd @ E
        E = E @ Ed
        if float(np.linalg.eigvalsh(L0.T @ G @ L0)[-1]) >= 1.0:
            lo, hi = max(k - 2, 0), min(k + 1, grid.size - 1)
            while lo > 0 and h(float(grid[lo])) >= 0:
                lo -= 1
            while hi < grid.size - 1 and h(float(grid[hi])) < 0:
                hi += 1
            if h(float(grid[hi])) < 0:
                return math.inf
            import scipy.optimize

            return float(scipy.optimize.brentq(h, float(grid[lo]), float(grid[hi]), xtol=1e-15,
                                               rtol=4 * _EPS))
    return math.inf


def blowup_time_scalar(a: float, v: float, b: float, sigma0: float) -> float:
    """Blow-up time of ``σ̇ = 2aσ + 2vbσ²`` from ``σ₀ > 0`` (``inf`` if none).

    With ``c = 2vb``: ``t* = ln(1 + 2a/(cσ₀)) / (2a)``, and ``t* = 1/(cσ₀)`` for
    ``a = 0`` (docs/theory.md §7: ``1/(2vbσ₀)``). Blow-up happens iff ``c > 0`` and
    ``2a + cσ₀ > 0``.
    """
    c = 2.0 * v * b
    if sigma0 <= 0 or c <= 0 or 2 * a + c * sigma0 <= 0:
        return math.inf
    x = 2.0 * a / (c * sigma0)
    if abs(x) < 1e-8:  # series of log1p(x)/x: avoids 0/0 at a = 0
        return (1.0 - x / 2 + x * x / 3) / (c * sigma0)
    return math.log1p(x) / (2.0 * a)


def blowup_time_isotropic(a: float, v: float, b: float, Sigma0: np.ndarray) -> float:
    """Blow-up time for ``A = aI, V = vI, B = bI``: the scalar time with ``σ₀ = λ_max(Σ₀)``.

    For ``a = 0`` this is ``t* = 1/(2vb λ_max(Σ₀))`` (docs/theory.md §7): every
    eigenvalue of Σ follows the scalar Riccati equation.
    """
    lam = float(np.linalg.eigvalsh(np.asarray(Sigma0, dtype=np.float64))[-1])
    return blowup_time_scalar(a, v, b, lam)


def riccati_residual(params: GaussianParams, Sigma: np.ndarray) -> np.ndarray:
    """``F(Σ) = AΣ + ΣAᵀ + VΣBΣ + ΣBᵀΣVᵀ``."""
    return moment_rhs(params, np.zeros(params.d), Sigma)[1]


def sym_basis(d: int) -> np.ndarray:
    """Frobenius-orthonormal basis ``(d(d+1)/2, d, d)`` of the symmetric matrices."""
    out = []
    for i in range(d):
        for j in range(i, d):
            E = np.zeros((d, d))
            if i == j:
                E[i, i] = 1.0
            else:
                E[i, j] = E[j, i] = 1.0 / math.sqrt(2.0)
            out.append(E)
    return np.asarray(out)


def riccati_linearisation(params: GaussianParams, Sigma: np.ndarray) -> np.ndarray:
    """Matrix of ``DF(Σ)`` on the symmetric matrices (in the basis :func:`sym_basis`).

    ``DF[H] = (A + VΣB)H + H(A + VΣB)ᵀ + VHBΣ + ΣBᵀHVᵀ``.
    """
    A, V, B = params.A, params.V, params.B
    M = A + V @ Sigma @ B
    E = sym_basis(params.d)
    cols = []
    for H in E:
        X = M @ H + V @ H @ B @ Sigma
        cols.append(np.einsum("kij,ij->k", E, X + X.T))
    return np.asarray(cols).T


@dataclass(frozen=True)
class Equilibrium:
    """A stationary point of the moment ODE.

    Attributes
    ----------
    Sigma : (d, d) array
        Solves ``F(Σ*) = 0``.
    rank : int
    spectrum : (d(d+1)/2,) complex array
        Eigenvalues of the linearisation ``DF(Σ*)`` on symmetric matrices.
    stable : bool
        All eigenvalues have negative real part (asymptotically stable in Σ).
    m : (d,) array or None
        Mean equilibrium ``−(A + V + VΣ*B)^{-1} b`` (None if singular).
    mean_spectrum : (d,) complex array
        Eigenvalues of ``A + V + VΣ*B``.
    residual : float
        ``‖F(Σ*)‖_F``.
    source : str
        ``"trivial"``, ``"lyapunov"`` (closed form, ``V = vI``), ``"exact"`` or ``"newton"``.
    """

    Sigma: np.ndarray
    rank: int
    spectrum: np.ndarray
    stable: bool
    m: np.ndarray | None
    mean_spectrum: np.ndarray
    residual: float
    source: str

    def to_dict(self) -> dict[str, Any]:
        """JSON-friendly summary."""
        return {
            "Sigma": self.Sigma.tolist(),
            "rank": self.rank,
            "stable": self.stable,
            "spectrum_real": np.sort(self.spectrum.real).tolist(),
            "spectrum_imag_max": float(np.max(np.abs(self.spectrum.imag), initial=0.0)),
            "m": None if self.m is None else self.m.tolist(),
            "mean_spectrum_real": np.sort(self.mean_spectrum.real).tolist(),
            "residual": self.residual,
            "source": self.source,
        }


@dataclass(frozen=True)
class EquilibriumFamily:
    """A continuum of equilibria: ``Σ = offset + Σ_k s_k E_k ⪰ 0`` over a linear span.

    Attributes
    ----------
    offset : (d, d) array
        A fixed part (the isolated equilibrium variances of other directions).
    basis : (n, d, d) array
        Frobenius-orthonormal symmetric directions ``E_k`` spanning the family.
    description : str
        The family in words, e.g. ``{Σ ⪰ 0 : BΣ = 0}``.
    source : str
        The rule that produced it.
    """

    offset: np.ndarray
    basis: np.ndarray
    description: str
    source: str

    @property
    def dimension(self) -> int:
        """Dimension of the span (the PSD members form a cone of this dimension)."""
        return int(self.basis.shape[0])

    def contains(self, Sigma: np.ndarray, *, rtol: float = 1e-8) -> bool:
        """Whether ``Σ − offset`` lies in the span (to ``rtol`` relative to ``‖Σ‖_F``)."""
        X = np.asarray(Sigma, dtype=np.float64) - self.offset
        coef = np.einsum("kij,ij->k", self.basis, X)
        R = X - np.einsum("k,kij->ij", coef, self.basis)
        return bool(np.linalg.norm(R) <= rtol * max(np.linalg.norm(Sigma), 1e-300))

    def to_dict(self) -> dict[str, Any]:
        """JSON-friendly summary."""
        return {"description": self.description, "dimension": self.dimension,
                "offset": self.offset.tolist(), "basis": self.basis.tolist(),
                "source": self.source}


def quadratic_term_vanishes(params: GaussianParams) -> bool:
    """Whether ``Q(Σ) = VΣBΣ + ΣBᵀΣVᵀ`` vanishes for every symmetric Σ (a linear flow).

    ``Q`` is a quadratic form on the symmetric matrices; it vanishes iff it does on
    a basis ``E_i`` and its polarisation ``Q(E_i + E_j) − Q(E_i) − Q(E_j)`` does
    on all pairs. Holds for ``V = 0``, ``B = 0``, or ``V = vI`` with ``B`` skew.
    """
    V, B = params.V, params.B
    if not np.any(V) or not np.any(B):
        return True
    E = sym_basis(params.d)

    def Q(S: np.ndarray) -> np.ndarray:
        X = V @ S @ B @ S
        return X + X.T

    # each entry is a sum of O(d²) products of size ≤ ‖V‖‖B‖: round-off ~ d² ε ‖V‖‖B‖
    tol = 1e2 * params.d**2 * _EPS * float(np.linalg.norm(V) * np.linalg.norm(B))
    QE = [Q(Ei) for Ei in E]
    if max(float(np.max(np.abs(q))) for q in QE) > tol:
        return False
    for i in range(len(E)):
        for j in range(i + 1, len(E)):
            if float(np.max(np.abs(Q(E[i] + E[j]) - QE[i] - QE[j]))) > tol:
                return False
    return True


def _null_space_sym(op: np.ndarray, E: np.ndarray, *, rtol: float) -> np.ndarray:
    """Symmetric matrices spanning the null space of ``op`` (a matrix in the basis ``E``)."""
    if op.size == 0:
        return E.copy()
    _, s, vt = np.linalg.svd(op)
    top = float(s[0]) if s.size else 0.0
    rank = int(np.sum(s > rtol * max(top, 1e-300))) if top > 0 else 0
    N = vt[rank:]
    return np.einsum("nk,kij->nij", N, E)


def equilibrium_families(params: GaussianParams) -> tuple[EquilibriumFamily, ...]:
    """Continua of equilibria that are known in closed form.

    * Linear flow (``Q ≡ 0``, e.g. ``V = 0`` or ``B = 0``): the PSD solutions of
      the Lyapunov equation ``AΣ + ΣAᵀ = 0`` (every Σ when ``A = 0``).
    * ``A = 0`` and ``B`` singular: every ``Σ = Q S Qᵀ`` with ``S ⪰ 0`` and the
      columns of ``Q`` a basis of ``ker B`` is an equilibrium (``BΣ = 0`` makes
      both quadratic terms vanish); the family has dimension ``k(k+1)/2``.

    Neutral directions of the commuting case are reported by
    :func:`wflow.gaussian.classify.classify`.
    """
    d = params.d
    A, B = params.A, params.B
    out: list[EquilibriumFamily] = []
    E = sym_basis(d)
    if quadratic_term_vanishes(params):
        if not np.any(A):
            out.append(EquilibriumFamily(np.zeros((d, d)), E.copy(),
                                         "every Σ ⪰ 0 (A = 0 and no attention: Σ̇ = 0)",
                                         "linear"))
        else:
            op = np.asarray([np.einsum("kij,ij->k", E, A @ H + H @ A.T) for H in E]).T
            # null space of the Lyapunov operator, to the SVD's round-off (ε times its norm)
            N = _null_space_sym(op, E, rtol=1e3 * d * _EPS)
            if N.shape[0]:
                out.append(EquilibriumFamily(np.zeros((d, d)), N,
                                             "PSD solutions of AΣ + ΣAᵀ = 0 (linear flow)",
                                             "linear"))
        return tuple(out)
    if not np.any(A):
        _, s, vt = np.linalg.svd(B)
        # singular values below the SVD's round-off (d ε ‖B‖) count as 0
        k = int(np.sum(s <= 1e3 * d * _EPS * float(s[0])))
        if k:
            Qb = vt[d - k:].T
            basis = np.einsum("ia,kab,jb->kij", Qb, sym_basis(k), Qb)
            out.append(EquilibriumFamily(np.zeros((d, d)), basis,
                                         f"{{Σ = QSQᵀ : S ⪰ 0}}, Q a basis of ker B "
                                         f"(dim {k}): BΣ = 0 (A = 0)", "kernel"))
    return tuple(out)


def _make_equilibrium(params: GaussianParams, Sigma: np.ndarray, source: str) -> Equilibrium:
    Sigma = 0.5 * (Sigma + Sigma.T)
    J = riccati_linearisation(params, Sigma)
    spec = np.linalg.eigvals(J)
    Mm = params.A + params.V + params.V @ Sigma @ params.B
    try:
        m = -np.linalg.solve(Mm, params.b)
        if not np.all(np.isfinite(m)) or np.linalg.cond(Mm) > 1e12:
            m = None
    except np.linalg.LinAlgError:
        m = None
    lam = np.linalg.eigvalsh(Sigma)
    scale = max(float(np.max(np.abs(lam), initial=0.0)), 1e-300)
    rank = int(np.sum(lam > 1e3 * params.d * _EPS * scale)) if np.any(Sigma) else 0
    # stability tolerance: eigenvalues within round-off of 0 count as not stable
    tol = 1e3 * _EPS * max(1.0, float(np.max(np.abs(spec), initial=0.0)))
    return Equilibrium(Sigma=Sigma, rank=rank, spectrum=spec, stable=bool(np.all(spec.real < -tol)),
                       m=m, mean_spectrum=np.linalg.eigvals(Mm),
                       residual=float(np.linalg.norm(riccati_residual(params, Sigma))),
                       source=source)


def _vech(S: np.ndarray, E: np.ndarray) -> np.ndarray:
    return np.einsum("kij,ij->k", E, S)


def _unvech(x: np.ndarray, E: np.ndarray) -> np.ndarray:
    return np.einsum("k,kij->ij", x, E)


def equilibria(params: GaussianParams, *, n_starts: int = 12, seed: int = 0,
               extra_starts: Sequence[np.ndarray] = ()) -> tuple[Equilibrium, ...]:
    """Equilibria ``Σ*`` of the Riccati equation: ``0`` and the positive definite ones.

    With ``V = vI`` the PD equilibrium (unique if any) is ``P*^{-1}``, ``P*``
    solving ``AᵀP + PA = −v(B + Bᵀ)`` (only when the Lyapunov operator is
    invertible, ``λ_i(A) + λ_j(A) ≠ 0``). Otherwise Newton's method from
    ``n_starts`` random PD starts (scales ``10^{-2}..10^2``) and
    ``extra_starts``; solutions that are not PSD or not of full rank are
    dropped (rank-deficient equilibria can form continua: see
    :func:`equilibrium_families`).

    Returns
    -------
    tuple of Equilibrium
        The trivial one first, then PD ones sorted by trace.
    """
    d = params.d
    out = [_make_equilibrium(params, np.zeros((d, d)), "trivial")]
    found: list[np.ndarray] = []
    v = scalar_value(params.V)
    if v is not None:
        C = v * (params.B + params.B.T)
        ev = np.linalg.eigvals(params.A)
        gap = float(np.min(np.abs(ev[:, None] + ev[None, :])))
        P = None
        # the Lyapunov operator P ↦ AᵀP + PA is invertible iff λ_i + λ_j ≠ 0 for all i, j;
        # otherwise PD equilibria are not isolated or absent and are not listed
        if gap > 1e-10 * max(1.0, float(np.max(np.abs(ev)))):
            try:
                P = scipy.linalg.solve_continuous_lyapunov(params.A.T, -C)
            except (np.linalg.LinAlgError, ValueError):
                P = None
        if P is not None and np.all(np.isfinite(P)):
            P = 0.5 * (P + P.T)
            lam = np.linalg.eigvalsh(P)
            if lam[0] > 1e3 * d * _EPS * max(abs(lam[-1]), 1e-300):
                found.append((np.linalg.inv(P), "lyapunov"))
        # the PD equilibrium is unique when V = vI (linear equation for P)
    else:
        E = sym_basis(d)
        rng = np.random.default_rng(seed)
        starts = list(extra_starts)
        for s in np.geomspace(1e-2, 1e2, max(int(n_starts), 1)):
            X = rng.standard_normal((d, d))
            starts.append(s * (X @ X.T / d + 0.1 * np.eye(d)))

        def fun(x: np.ndarray) -> np.ndarray:
            return _vech(riccati_residual(params, _unvech(x, E)), E)

        def jac(x: np.ndarray) -> np.ndarray:
            return riccati_linearisation(params, _unvech(x, E))

        for S0 in starts:
            with np.errstate(all="ignore"):
                sol = scipy.optimize.root(fun, _vech(np.asarray(S0, dtype=np.float64), E), jac=jac,
                                          method="hybr", options={"xtol": 1e-13})
            if not (sol.success and np.all(np.isfinite(sol.x))):
                continue
            S = _unvech(sol.x, E)
            lam = np.linalg.eigvalsh(S)
            scale = max(abs(lam[-1]), 1e-300)
            res = np.linalg.norm(riccati_residual(params, S))
            if lam[0] <= 1e3 * d * _EPS * scale or res > 1e-8 * max(1.0, scale) ** 2:
                continue
            if any(np.linalg.norm(S - F) <= 1e-7 * max(1.0, np.linalg.norm(F)) for F, _ in found):
                continue
            found.append((S, "newton"))
    found.sort(key=lambda fs: float(np.trace(fs[0])))
    out.extend(_make_equilibrium(params, S, src) for S, src in found)
    return tuple(out)


def refine_equilibrium(params: GaussianParams, Sigma: np.ndarray, *, xtol: float = 1e-13
                       ) -> np.ndarray | None:
    """Newton's method on ``F(Σ) = 0`` (symmetric matrices) from ``Σ``; None if it fails.

    Converges to a nearby equilibrium; on a continuum of equilibria (singular
    linearisation) the point it lands on is only one of many, so callers check
    the distance to their estimate.
    """
    E = sym_basis(params.d)

    def fun(x: np.ndarray) -> np.ndarray:
        return _vech(riccati_residual(params, _unvech(x, E)), E)

    def jac(x: np.ndarray) -> np.ndarray:
        return riccati_linearisation(params, _unvech(x, E))

    with np.errstate(all="ignore"):
        sol = scipy.optimize.root(fun, _vech(0.5 * (Sigma + Sigma.T), E), jac=jac, method="hybr",
                                  options={"xtol": xtol})
    if not (sol.success and np.all(np.isfinite(sol.x))):
        return None
    S = _unvech(sol.x, E)
    return 0.5 * (S + S.T)
