"""The discrete stationary equation on one icosphere (see :mod:`wflow.phase.mesh`)."""

from __future__ import annotations

import logging
import math
from dataclasses import dataclass, field
from typing import Literal

import numpy as np
from scipy.optimize import brentq

from ...geometry.harmonics import harmonic_index, real_harmonics
from ...geometry.mesh import dual_geometry, icosphere
from ..thresholds import check_phase_args, funk_hecke_eigenvalues
from ..zonal import Eigenvalues, PhaseError, ZonalModel, gegenbauer_table

logger = logging.getLogger(__name__)

__all__ = ["MeshOptions", "MeshState", "MeshModel"]

Symmetry = Literal["axial", "none"]

#: Points per block when tabulating the harmonics (memory ``(L+1)² · BLOCK`` floats).
BLOCK = 4096
#: Jacobians of at most this many multiply-adds (``M R²``) run on one BLAS thread: the
#: tall-skinny products gain little from threads and lose ~25× when the cores are shared
#: (measured: 5.6 ms serial against 145 ms threaded at ``M = 1280, R = 70``, load 11).
SERIAL_FLOPS = 2e9


def _blas(model: MeshModel):
    """A context limiting BLAS to one thread for small problems (restored on exit)."""
    import contextlib

    try:
        from threadpoolctl import threadpool_limits
    except ImportError:  # pragma: no cover - a core dependency
        return contextlib.nullcontext()
    if model.M * model.R ** 2 > SERIAL_FLOPS:
        return contextlib.nullcontext()
    return threadpool_limits(1, user_api="blas")


@dataclass(frozen=True, kw_only=True)
class MeshOptions:
    """Discretisation and solver settings of the mesh stationary states (keyword-only).

    Attributes
    ----------
    frequency : int
        Icosphere subdivision ``n`` (``20n²`` cells, ``h ≈ 0.79/n``).
    symmetry : {"axial", "none"}
        ``"axial"``: the ``C_{5v}``-invariant harmonics only (zonal branch about the pole);
        ``"none"``: every harmonic of degree ``<= L``.
    mode_tol : float
        Truncation of the kernel's expansion, ``(2L+1)λ_L/λ_1 < mode_tol``.
    newton_tol : float
        Newton stops when ``max|G| <= newton_tol``: the moments are ``O(1)`` sums over
        ``M`` cells, so their round-off is ``~ 10 eps √M``; ``1e-11`` is ~40× that at
        ``M = 10^5`` and still far below the ``O(h²)`` discretisation error.
    max_newton : int
        Newton iterations per solve.
    """

    frequency: int = 8
    symmetry: Symmetry = "axial"
    mode_tol: float = 1e-18
    newton_tol: float = 1e-11
    max_newton: int = 40

    def __post_init__(self) -> None:
        if isinstance(self.frequency, bool) or int(self.frequency) != self.frequency \
                or self.frequency < 1:
            raise ValueError(f"frequency: must be an integer >= 1, got {self.frequency!r}")
        if self.symmetry not in ("axial", "none"):
            raise ValueError(f"symmetry: expected 'axial' or 'none', got {self.symmetry!r}")
        if not (0 < self.mode_tol < 1) or not (0 < self.newton_tol < 1e-3):
            raise ValueError("mode_tol, newton_tol: expected small positive numbers")


@dataclass(frozen=True)
class MeshState:
    """One stationary state on the mesh.

    Attributes
    ----------
    K : float
        Coupling (published convention ``K = 1/(2D)``).
    a : numpy.ndarray
        Moments ``Φᵀ m``, shape ``(R,)``.
    m : numpy.ndarray
        Cell masses, shape ``(M,)`` (sum 1).
    first_moment : numpy.ndarray
        ``Σ_K m_K x_K``, shape ``(3,)``; the order parameter is its norm.
    free_energy : float
        ``F_K^h(m)``.
    residual : float
        ``max|G|`` at exit.
    iterations : int
        Newton iterations.
    """

    K: float
    a: np.ndarray = field(repr=False)
    m: np.ndarray = field(repr=False)
    first_moment: np.ndarray
    free_energy: float
    residual: float
    iterations: int

    @property
    def order_parameter(self) -> float:
        """``|Σ_K m_K x_K|``."""
        return float(np.linalg.norm(self.first_moment))


def _pole_frame() -> np.ndarray:
    """Columns ``e1, e2, e3``: an icosahedron vertex as ``e3``, a neighbour in the e1-e3 plane."""
    t = (1.0 + math.sqrt(5.0)) / 2.0
    v5 = np.array([0.0, 1.0, t]) / math.sqrt(1.0 + t * t)   # the icosahedron's vertex 5
    v0 = np.array([-1.0, t, 0.0]) / math.sqrt(1.0 + t * t)  # its neighbour, vertex 0
    e1 = v0 - (v0 @ v5) * v5
    e1 /= np.linalg.norm(e1)
    return np.stack([e1, np.cross(v5, e1), v5], axis=1)


class MeshModel:
    """The discrete stationary equation on one icosphere (module docstring).

    Parameters
    ----------
    beta : float
        Inverse temperature ``β > 0``.
    options : MeshOptions or None, keyword-only
        Mesh and solver settings.
    eigenvalues : callable, keyword-only
        ``eigenvalues(beta, 3, lmax)``: the kernel by its Funk–Hecke eigenvalues (default
        ``e^{β x·y}``; another callable poses another kernel, e.g. for negative controls).

    Attributes
    ----------
    x : numpy.ndarray
        Cell points ``ĉ_K``, shape ``(M, 3)``.
    sigma : numpy.ndarray
        ``σ_K = A_K / Σ A``, shape ``(M,)``.
    phi : numpy.ndarray
        ``Y_k(x_K)`` for the kept harmonics, shape ``(M, R)``.
    degree, order : numpy.ndarray
        ``l`` and ``m`` of each kept harmonic, shape ``(R,)``.
    kappa : numpy.ndarray
        ``4π λ_l``, shape ``(R,)``.
    h : float
        Mesh size ``√(mean A_K)`` (rad).
    k_sharp0 : float
        ``β/(2λ_1)``: the continuum threshold of the kernel, the scale of ``K``.
    """

    def __init__(self, beta: float, *, options: MeshOptions | None = None,
                 eigenvalues: Eigenvalues = funk_hecke_eigenvalues) -> None:
        self.beta, _ = check_phase_args(beta, 3)
        self.options = opts = options or MeshOptions()
        self.eigenvalues = eigenvalues
        L = ZonalModel(self.beta, 3, eigenvalues=eigenvalues).L
        lam_all = np.asarray(eigenvalues(self.beta, 3, L + 40), dtype=np.float64)
        ls = np.arange(L + 41)
        small = np.nonzero((2 * ls + 1) * lam_all < opts.mode_tol * 3 * lam_all[1])[0]
        L = int(small[0]) if small.size else L + 40
        self.L = L
        self.lam = lam_all[: L + 1]
        tri = icosphere(int(opts.frequency))
        frame = _pole_frame()
        pts = tri.points @ frame
        dual = dual_geometry(pts, tri.cells, strict=False)
        cen = pts[dual.cells].mean(axis=1)
        self.x = cen / np.linalg.norm(cen, axis=1, keepdims=True)
        self.sigma = dual.areas / dual.areas.sum()
        self.h = float(dual.h)
        self.M = int(self.x.shape[0])
        deg, order = harmonic_index(L)
        keep = np.ones(deg.size, dtype=bool)
        if opts.symmetry == "axial":
            self._check_c5v()
            keep = (order >= 0) & (order % 5 == 0)
        self.degree, self.order = deg[keep], order[keep]
        self.R = int(keep.sum())
        self.phi = np.empty((self.M, self.R))
        for s in range(0, self.M, BLOCK):
            self.phi[s:s + BLOCK] = real_harmonics(self.x[s:s + BLOCK], L)[keep].T
        self.kappa = 4.0 * math.pi * self.lam[self.degree]
        self.k_sharp0 = float(self.beta / (2.0 * self.lam[1]))
        logger.debug("mesh model beta=%g n=%d: M=%d cells, L=%d, R=%d harmonics, "
                     "Phi %.1f MB", self.beta, opts.frequency, self.M, L, self.R,
                     self.memory_bytes / 1e6)

    @property
    def memory_bytes(self) -> int:
        """Bytes of ``Φ`` and the Jacobian's ``(M, R)`` temporary."""
        return 2 * 8 * self.M * self.R

    def _check_c5v(self) -> None:
        """The cell points are invariant under the pole's rotation by 72° and ``y ↦ −y``."""
        from scipy.spatial import cKDTree

        c, s = math.cos(2 * math.pi / 5), math.sin(2 * math.pi / 5)
        tree = cKDTree(self.x)
        for g in (np.array([[c, -s, 0], [s, c, 0], [0, 0, 1.0]]), np.diag([1.0, -1.0, 1.0])):
            dist, _ = tree.query(self.x @ g.T)
            if dist.max() > 1e-9:
                raise PhaseError(f"mesh: the cell points are not C5v-symmetric about the "
                                 f"pole (mismatch {dist.max():.2e}); use symmetry='none'")

    # ------------------------------------------------------------------ the equation
    def masses(self, a: np.ndarray, K: float) -> tuple[np.ndarray, float]:
        """``m(a, K) = σ e^u / Σ σ e^u``, ``u = (2K/β) Φ(κ a)``; returns ``(m, log Z)``."""
        u = (2.0 * K / self.beta) * (self.phi @ (self.kappa * a))
        umax = float(u.max())
        e = self.sigma * np.exp(u - umax)
        Z = float(e.sum())
        return e / Z, math.log(Z) + umax

    def residual(self, a: np.ndarray, K: float) -> tuple[np.ndarray, np.ndarray]:
        """``(G(a, K), m)``."""
        m, _ = self.masses(a, K)
        return a - self.phi.T @ m, m

    def jacobian(self, a: np.ndarray, K: float, m: np.ndarray
                 ) -> tuple[np.ndarray, np.ndarray]:
        """``(∂G/∂a (R, R), ∂G/∂K (R,))`` at masses ``m = m(a, K)``."""
        pm = self.phi.T @ m
        C = (self.phi * m[:, None]).T @ self.phi - np.outer(pm, pm)
        Ja = np.eye(self.R) - C * ((2.0 * K / self.beta) * self.kappa)[None, :]
        JK = -C @ ((2.0 / self.beta) * self.kappa * a)
        return Ja, JK

    def free_energy(self, m: np.ndarray, K: float) -> float:
        """``F_K^h(m) = Σ m log(m/σ) − (K/β) mᵀWm`` (``mᵀWm = Σ κ_k (Φᵀm)_k²``), any ``m``."""
        pos = m > 0
        a = self.phi.T @ m
        return float(np.sum(m[pos] * np.log(m[pos] / self.sigma[pos]))
                     - (K / self.beta) * np.sum(self.kappa * a * a))

    def state(self, a: np.ndarray, K: float, residual: float, iterations: int) -> MeshState:
        """Package the masses, first moment and free energy of ``(a, K)``."""
        m, _ = self.masses(a, K)
        return MeshState(K=float(K), a=a.copy(), m=m, first_moment=m @ self.x,
                         free_energy=self.free_energy(m, K), residual=residual,
                         iterations=iterations)

    def moments_of(self, m: np.ndarray) -> np.ndarray:
        """``Φᵀ m``: the kept moments of cell masses ``m``."""
        return self.phi.T @ np.asarray(m, dtype=np.float64)

    def solve(self, a0: np.ndarray, K: float) -> MeshState:
        """Newton's method at fixed ``K`` from moments ``a0`` (step halving on ``|G|``).

        Raises
        ------
        PhaseError
            No convergence in ``max_newton`` iterations.
        """
        a = np.array(a0, dtype=np.float64)
        G, m = self.residual(a, K)
        r = float(np.max(np.abs(G)))
        for it in range(self.options.max_newton):
            if r <= self.options.newton_tol:
                return self.state(a, K, r, it)
            Ja, _ = self.jacobian(a, K, m)
            step = np.linalg.solve(Ja, -G)
            t = 1.0
            while True:
                G1, m1 = self.residual(a + t * step, K)
                r1 = float(np.max(np.abs(G1)))
                if r1 < r or t < 1e-3:
                    break
                t *= 0.5
            a, G, m, r = a + t * step, G1, m1, r1
        if r <= self.options.newton_tol:
            return self.state(a, K, r, self.options.max_newton)
        raise PhaseError(f"mesh Newton at K={K:.8g}: |G| = {r:.2e} after "
                         f"{self.options.max_newton} iterations; start closer to the branch")

    def uniform_state(self, K: float, a0: np.ndarray | None = None) -> MeshState:
        """The near-uniform stationary state (from ``σ``, or ``a0``) at ``K``."""
        return self.solve(self.moments_of(self.sigma) if a0 is None else a0, K)

    def zonal_guess(self, c: np.ndarray, K: float, axis: np.ndarray | None = None
                    ) -> np.ndarray:
        """Moments of the zonal density ``f(x·e)`` with Legendre moments ``c`` (cells)."""
        e = np.array([0.0, 0.0, 1.0]) if axis is None else np.asarray(axis, float)
        e = e / np.linalg.norm(e)
        L = c.size - 1
        kap = 2.0 * np.asarray(self.eigenvalues(self.beta, 3, L))[: L + 1] \
            * (2 * np.arange(L + 1) + 1) / self.beta
        P = gegenbauer_table(3, L, self.x @ e)
        u = K * ((kap[1:] * c[1:]) @ P[1:])
        m = self.sigma * np.exp(u - u.max())
        return self.moments_of(m / m.sum())

    def linear_modes(self, K: float, state: MeshState | None = None) -> np.ndarray:
        """Eigenvalues of ``C (2K/β) diag κ`` at the near-uniform state, descending.

        A mode with eigenvalue above 1 is linearly unstable (``F_K^h``'s Hessian is
        negative along it). With ``symmetry="none"`` the first three are the degree-1
        triplet (all orders ``m = −1, 0, 1``); with ``"axial"`` the first is its ``m = 0``.
        """
        st = state or self.uniform_state(K)
        Ja, _ = self.jacobian(st.a, K, st.m)
        return np.sort(np.linalg.eigvals(np.eye(self.R) - Ja).real)[::-1]

    def k_sharp(self) -> float:
        """``K_#^h``: the top eigenvalue of :meth:`linear_modes` equals 1 (Brent)."""
        k0 = self.k_sharp0
        cache: dict[str, np.ndarray] = {}

        def f(K: float) -> float:
            st = self.uniform_state(K, cache.get("a"))
            cache["a"] = st.a
            return float(self.linear_modes(K, st)[0] - 1.0)

        return float(brentq(f, 0.9 * k0, 1.1 * k0, xtol=1e-14 * k0, rtol=1e-14))
