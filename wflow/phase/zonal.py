r"""Zonal stationary states of the noisy model, reduced to a finite system (THEORY §8).

Critical points of the published free energy ``F_K`` (:mod:`wflow.phase.thresholds`) solve

.. math::

    \rho = \frac{1}{Z}\exp\Big(\frac{2K}{\beta}\,W*\rho\Big),\qquad
    (W*\rho)(x) = \int e^{\beta x\cdot y}\rho(y)\,d\sigma(y).

**Reduction.** A zonal density ``ρ(x) = f(x·e)`` is a function on ``[−1, 1]`` with the
law ``dπ(z) ∝ (1 − z²)^{(d−3)/2} dz`` of ``z = x·e`` under ``σ``. Expand it in the
Gegenbauer polynomials normalised to ``P_l(1) = 1`` (Jacobi ``P_l^{(a,a)}``,
``a = (d−3)/2``: Legendre for ``d = 3``, Chebyshev ``T_l`` for ``d = 2``),

.. math::

    f = \sum_{l\ge0} h_l\,c_l\,P_l,\qquad c_l = \int P_l\,f\,d\pi,\qquad
    h_l = \Big(\int P_l^2\,d\pi\Big)^{-1} = \dim\mathcal H_l(S^{d-1}),

so ``c_0 = 1`` (mass) and ``c_1 = ∫ x·e dμ = m``, the **order parameter**. Funk–Hecke
(``λ_l``, :func:`~wflow.phase.thresholds.funk_hecke_eigenvalues`) diagonalises the
convolution, ``W*ρ = Σ_l λ_l h_l c_l P_l``, and the stationary equation becomes the
finite system (truncated at degree ``L``, where ``λ_L h_L/λ_1`` is below
``ZonalOptions.mode_tol``)

.. math::

    c_l = \langle P_l\rangle_u := \frac{\int P_l\,e^{u}\,d\pi}{\int e^{u}\,d\pi},\quad
    l = 1..L,\qquad u = K\sum_{k=1}^{L} \kappa_k\,c_k\,P_k,\quad
    \kappa_k = \frac{2\lambda_k h_k}{\beta}.

The integrals use Gauss–Jacobi quadrature with the weight ``(1 − z²)^{(d−3)/2}`` (exact for
polynomials of degree ``2N − 1``; ``e^u`` is entire, so the error falls geometrically).

**Parametrised by the order parameter.** The branch bifurcating from ``ρ ≡ 1`` at
``K_#`` is followed in ``m``, not in ``K``: at fixed ``c_1 = m`` the unknowns are
``y = (c_2, …, c_L, K)`` and Newton's method solves ``R(y) = c_{1..L} − ⟨P_{1..L}⟩_u = 0``
with the exact Jacobian (``∂⟨P_l⟩/∂c_k = Kκ_k Cov_u(P_l, P_k)``,
``∂⟨P_l⟩/∂K = Σ_k κ_k c_k Cov_u(P_l, P_k)``). ``K(m)`` then passes the fold of a
discontinuous transition (where ``dK/dm = 0``) without any turning-point machinery, and
``dK/dm = −(J^{-1} ∂R/∂m)_K`` is exact (implicit differentiation).

**Free energy.** At a stationary state (``log f = u − log Z``), relative to the uniform
density (``F_K(1) = −Kλ_0/β``),

.. math::

    \Delta F = F_K(\rho) - F_K(1) = \frac{K}{2}\sum_{k\ge1}\kappa_k c_k^2 - \log Z,
    \qquad Z = \int e^{u}\,d\pi.
"""

from __future__ import annotations

import logging
import math
from collections.abc import Callable
from dataclasses import dataclass

import numpy as np
from scipy.special import comb, roots_jacobi

from .thresholds import check_phase_args, funk_hecke_eigenvalues

logger = logging.getLogger(__name__)

#: ``eigenvalues(beta, d, lmax) -> λ_0..λ_lmax``: a zonal kernel by its Funk–Hecke eigenvalues.
Eigenvalues = Callable[[float, int, int], np.ndarray]

__all__ = ["ZonalOptions", "ZonalModel", "ZonalState", "PhaseError", "harmonic_dimension",
           "gegenbauer_table"]


class PhaseError(RuntimeError):
    """A stationary-state solve or a branch continuation failed (the message says what to do)."""


@dataclass(frozen=True, kw_only=True)
class ZonalOptions:
    """Discretisation of the zonal reduction (keyword-only).

    Attributes
    ----------
    modes : int or None
        Truncation degree ``L`` (``None``: the smallest ``L >= 8`` with
        ``λ_L h_L / λ_1 < mode_tol``).
    nodes : int or None
        Gauss–Jacobi nodes ``N`` (``None``: ``2L + 64``).
    mode_tol : float
        Relative size of the first neglected coupling ``κ_L/κ_1`` (default ``1e-18``,
        below double-precision round-off of ``u``).
    newton_rtol : float
        Newton stops when the update is below ``newton_rtol·max(1, |y|)`` (default
        ``1e-13``: ~500 ulps, the round-off of a quadrature sum of ``N`` terms of ``e^u``).
    max_newton : int
        Newton iterations per solve before :class:`PhaseError` (default 40).
    """

    modes: int | None = None
    nodes: int | None = None
    mode_tol: float = 1e-18
    newton_rtol: float = 1e-13
    max_newton: int = 40


def harmonic_dimension(d: int, l: int) -> int:
    """``dim H_l(S^{d-1}) = C(l+d−1, d−1) − C(l+d−3, d−1)`` (2 for ``d = 2, l >= 1``)."""
    if l == 0:
        return 1
    return int(comb(l + d - 1, d - 1, exact=True) - comb(l + d - 3, d - 1, exact=True))


def gegenbauer_table(d: int, L: int, z: np.ndarray) -> np.ndarray:
    r"""Gegenbauer polynomials of ``S^{d-1}`` normalised to ``P_l(1) = 1``, ``l = 0..L``.

    The three-term recurrence, stable for every ``d`` (``λ = (d−2)/2``; ``T_l`` for
    ``d = 2``)::

        P_0 = 1,  P_1 = z,  P_l = (2(l+λ−1) z P_{l−1} − (l−1) P_{l−2}) / (l + 2λ − 1).

    (``scipy.special.eval_jacobi`` loses ~1e-6 of orthogonality at ``d = 64``.)

    Parameters
    ----------
    d : int
        Ambient dimension ``d >= 2``.
    L : int
        Largest degree.
    z : numpy.ndarray
        Points of ``[−1, 1]``, shape ``(N,)``.

    Returns
    -------
    numpy.ndarray
        Shape ``(L + 1, N)``.
    """
    lam = (d - 2) / 2.0
    z = np.asarray(z, dtype=np.float64)
    P = np.empty((L + 1, z.size))
    P[0] = 1.0
    if L >= 1:
        P[1] = z
    for l in range(2, L + 1):
        P[l] = (2.0 * (l + lam - 1.0) * z * P[l - 1] - (l - 1.0) * P[l - 2]) / (l + 2.0 * lam - 1.0)
    return P


@dataclass(frozen=True)
class ZonalState:
    """A zonal stationary state on the branch (all fields dimensionless).

    Attributes
    ----------
    m : float
        Order parameter ``c_1 = |∫ x dμ|``.
    K : float
        Coupling (published convention, ``K = 1/(2D)``).
    c : numpy.ndarray
        Gegenbauer moments ``c_0..c_L`` (``c_0 = 1``, ``c_1 = m``), shape ``(L + 1,)``.
    dK_dm : float
        Slope of the branch (``0`` at a fold).
    free_energy_gap : float
        ``ΔF = F_K(ρ) − F_K(1)``.
    iterations : int
        Newton iterations taken.
    """

    m: float
    K: float
    c: np.ndarray
    dK_dm: float
    free_energy_gap: float
    iterations: int


class ZonalModel:
    """The zonal reduction for one ``(β, d)``: quadrature, Gegenbauer table, couplings.

    Parameters
    ----------
    beta : float
        Inverse temperature ``β > 0``.
    d : int
        Ambient dimension ``d >= 2`` (tokens on ``S^{d-1}``).
    options : ZonalOptions, keyword-only
        Truncation and quadrature (defaults: automatic).
    eigenvalues : callable, keyword-only
        ``eigenvalues(beta, d, lmax) -> λ_0..λ_lmax`` (shape ``(lmax + 1,)``), the
        Funk–Hecke eigenvalues of the zonal interaction kernel. Default
        :func:`~wflow.phase.thresholds.funk_hecke_eigenvalues` (``e^{β x·y}``); another
        callable poses another kernel (a perturbed one for negative controls).

    Attributes
    ----------
    z, w : numpy.ndarray
        Gauss–Jacobi nodes and weights of ``π`` (``Σ w = 1``), shape ``(N,)``.
    P : numpy.ndarray
        ``P_l(z_j)``, shape ``(L + 1, N)``.
    lam, h, kappa : numpy.ndarray
        ``λ_l``, ``h_l`` and ``κ_l = 2λ_l h_l/β``, shape ``(L + 1,)``.
    """

    def __init__(self, beta: float, d: int, *, options: ZonalOptions | None = None,
                 eigenvalues: Eigenvalues = funk_hecke_eigenvalues) -> None:
        self.beta, self.d = check_phase_args(beta, d)
        self.options = opts = options or ZonalOptions()
        self.eigenvalues = eigenvalues
        if opts.modes is not None:
            L = int(opts.modes)
        else:
            full = np.asarray(eigenvalues(self.beta, self.d, 400), dtype=np.float64)
            dims = np.array([harmonic_dimension(self.d, l) for l in range(401)], float)
            small = np.nonzero(full * dims < opts.mode_tol * full[1] * dims[1])[0]
            L = max(8, int(small[small > 1][0]) if small.size and (small > 1).any() else 400)
        if L < 2:
            raise ValueError(f"modes: the branch needs L >= 2 Gegenbauer modes, got {L}")
        N = int(opts.nodes) if opts.nodes is not None else 2 * L + 64
        a = (self.d - 3) / 2.0
        z, w = roots_jacobi(N, a, a)
        self.z, self.w = z, w / w.sum()
        self.P = gegenbauer_table(self.d, L, z)
        self.lam = np.asarray(eigenvalues(self.beta, self.d, L), dtype=np.float64)
        if self.lam.shape != (L + 1,) or not np.all(np.isfinite(self.lam)) or self.lam[1] <= 0:
            raise ValueError(f"eigenvalues: expected {L + 1} finite values with lambda_1 > 0, "
                             f"got shape {self.lam.shape}")
        self.h = 1.0 / ((self.P**2) @ self.w)
        self.kappa = 2.0 * self.lam * self.h / self.beta
        self.L, self.N = L, N
        logger.debug("zonal model beta=%g d=%d: L=%d modes, N=%d nodes", beta, d, L, N)

    # ----------------------------------------------------------------- the map c -> <P>_u
    def moments(self, c: np.ndarray, K: float) -> tuple[np.ndarray, np.ndarray, float]:
        """``⟨P_l⟩_u`` (``l = 1..L``), ``Cov_u(P_l, P_k)`` (``(L, L)``) and ``log Z``.

        ``u = K Σ_{k>=1} κ_k c_k P_k``. Small ``u`` uses ``expm1`` so that ``⟨P_l⟩ = O(m)``
        keeps its relative accuracy near the bifurcation; large ``u`` is shifted by its max.
        """
        u = K * ((self.kappa[1:] * c[1:]) @ self.P[1:])
        top = float(u.max())
        P1 = self.P[1:]
        if top < 30.0:
            e = np.expm1(u)
            zm1 = float(self.w @ e)
            logZ, Z = math.log1p(zm1), 1.0 + zm1
            g = (P1 * self.w) @ e / Z  # Σ_j w_j P_l(z_j) = 0 exactly (Gauss, l >= 1)
            p = self.w * (1.0 + e) / Z
        else:
            e = np.exp(u - top)
            Zs = float(self.w @ e)
            logZ = top + math.log(Zs)
            p = self.w * e / Zs
            g = P1 @ p
        cov = (P1 * p) @ P1.T - np.outer(g, g)
        return g, cov, logZ

    def free_energy_gap(self, c: np.ndarray, K: float, logZ: float) -> float:
        """``ΔF = (K/2) Σ_{k>=1} κ_k c_k² − log Z`` at a stationary state (module docstring)."""
        return float(0.5 * K * np.sum(self.kappa[1:] * c[1:] ** 2) - logZ)

    # ----------------------------------------------------------------- one Newton solve
    def _system(self, m: float, y: np.ndarray):
        c = np.concatenate(([1.0, m], y[:-1]))
        K = float(y[-1])
        g, cov, logZ = self.moments(c, K)
        R = c[1:] - g
        J = np.empty((self.L, self.L))
        J[:, :-1] = -cov[:, 1:] * (K * self.kappa[2:])[None, :]
        J[np.arange(1, self.L), np.arange(self.L - 1)] += 1.0
        J[:, -1] = -cov @ (self.kappa[1:] * c[1:])
        dR_dm = -cov[:, 0] * (K * self.kappa[1])
        dR_dm[0] += 1.0
        return c, K, R, J, dR_dm, logZ

    def initial_guess(self) -> np.ndarray:
        """``y = (c_2..c_L, K) = (0, …, 0, K_#)``: the bifurcation point."""
        y = np.zeros(self.L)
        y[-1] = self.beta / (2.0 * self.lam[1])  # = k_sharp(β, d) for the exact kernel
        return y

    def solve(self, m: float, y0: np.ndarray | None = None) -> tuple[ZonalState, np.ndarray]:
        """Newton's method for the stationary state with order parameter ``m ∈ (0, 1)``.

        Parameters
        ----------
        m : float
            Order parameter ``c_1``.
        y0 : numpy.ndarray or None
            Start ``(c_2..c_L, K)``, shape ``(L,)`` (``None``: :meth:`initial_guess`).

        Returns
        -------
        (ZonalState, numpy.ndarray)
            The state and its unknowns ``y`` (a warm start for the next ``m``).

        Raises
        ------
        PhaseError
            Newton did not converge in ``max_newton`` iterations or left ``K > 0``.
        """
        y = self.initial_guess() if y0 is None else np.array(y0, dtype=np.float64)
        opts = self.options
        for it in range(1, opts.max_newton + 1):
            c, K, R, J, dR_dm, logZ = self._system(m, y)
            try:
                step = np.linalg.solve(J, -R)
            except np.linalg.LinAlgError as exc:
                raise PhaseError(f"zonal Newton at m={m:g} (beta={self.beta:g}, d={self.d}): "
                                 f"singular Jacobian ({exc}); raise ZonalOptions.nodes "
                                 f"(N={self.N}) above the modes (L={self.L})") from exc
            y = y + step
            if not np.all(np.isfinite(y)) or y[-1] <= 0:
                raise PhaseError(f"zonal Newton at m={m:g} (beta={self.beta:g}, d={self.d}) "
                                 f"left K > 0: continue from a closer state (smaller steps in m)")
            if np.max(np.abs(step)) <= opts.newton_rtol * max(1.0, float(np.max(np.abs(y)))):
                c, K, R, J, dR_dm, logZ = self._system(m, y)
                dy = np.linalg.solve(J, -dR_dm)
                state = ZonalState(m=float(m), K=K, c=c, dK_dm=float(dy[-1]),
                                   free_energy_gap=self.free_energy_gap(c, K, logZ),
                                   iterations=it)
                return state, y
        raise PhaseError(f"zonal Newton at m={m:g} (beta={self.beta:g}, d={self.d}) did not "
                         f"converge in {opts.max_newton} iterations (last step "
                         f"{np.max(np.abs(step)):.2e}): refine the continuation in m, or raise "
                         f"ZonalOptions.nodes / modes for a strongly clustered state")

    def tangent(self, m: float, y: np.ndarray) -> np.ndarray:
        """``dy/dm`` at a solution (implicit differentiation), shape ``(L,)``."""
        *_, J, dR_dm, _ = self._system(m, y)
        return np.linalg.solve(J, -dR_dm)

    def residual_nystrom(self, state: ZonalState, nodes: int = 200) -> float:
        r"""Residual of ``state`` in THEORY's zonal equation with the azimuthal kernel.

        An independent check of the Gegenbauer reduction: the density
        ``f = e^{u}/Z`` is inserted in ``f(z) = exp((2K/β) ∫ k(z, w) f(w) dπ(w)) / Z'`` with
        the azimuthal mean ``k(z, w) = e^{βzw} Γ(ν+1) (2/r)^ν I_ν(r)``, ``ν = (d−3)/2``,
        ``r = β√(1−z²)√(1−w²)`` (``cosh r`` for ``d = 2``), by a fresh Gauss–Jacobi rule of
        ``nodes`` points. Returns ``max_j |log f(z_j) − log f_new(z_j)|`` (both normalised),
        which is at round-off for a solution of the reduced system.
        """
        from scipy.special import gammaln, ive

        a = (self.d - 3) / 2.0
        zq, wq = roots_jacobi(int(nodes), a, a)
        wq = wq / wq.sum()
        Pq = gegenbauer_table(self.d, self.L, zq)
        u = state.K * ((self.kappa[1:] * state.c[1:]) @ Pq[1:])
        logf = u - np.log(wq @ np.exp(u - u.max())) - u.max()
        nu = a
        s = np.sqrt(1.0 - zq**2)
        r = self.beta * np.outer(s, s)
        # log k = β z w + r + log Γ(ν+1) + ν log(2/r) + log ive(ν, r)
        logk = (self.beta * np.outer(zq, zq) + r + gammaln(nu + 1.0) + nu * np.log(2.0 / r)
                + np.log(ive(nu, r)))
        conv = np.exp(logk) @ (wq * np.exp(logf))  # (W * ρ)(z_i)
        v = (2.0 * state.K / self.beta) * conv
        logf_new = v - np.log(wq @ np.exp(v - v.max())) - v.max()
        return float(np.max(np.abs(logf - logf_new)))

