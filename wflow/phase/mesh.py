r"""Stationary states of the noisy model on the full triangulated ``S²`` (``d = 3``).

The stationary equation of the noisy PDE (THEORY §8), ``ρ = exp((2K/β) W*ρ)/Z``, is posed
on the cells of a geodesic icosphere (:func:`wflow.geometry.mesh.icosphere`) with the
quadrature the PDE's interaction uses: the mass ``m_K`` of cell ``K`` sits at its
projected centroid ``x_K = ĉ_K`` (:mod:`wflow.pde.fv`), and the reference measure of the
cell is its normalised spherical area ``σ_K = A_K/4π``
(:func:`wflow.geometry.mesh.dual_geometry`, the entropy weight of the PDE and the JKO).
The discrete free energy and its critical points are

.. math::

    F_K^h(m) = \sum_K m_K\log\frac{m_K}{\sigma_K}
      - \frac{K}{\beta}\sum_{K,L} e^{\beta x_K\cdot x_L} m_K m_L,\qquad
    m_K = \frac{\sigma_K\, e^{u_K}}{\sum_L \sigma_L e^{u_L}},\quad
    u = \frac{2K}{\beta} W m,

``W_{KL} = e^{β x_K·x_L}`` (``(M, M)``, never formed).

**Separable kernel.** By Funk–Hecke and the addition theorem
``e^{β x·y} = Σ_l 4π λ_l Σ_m Y_{lm}(x) Y_{lm}(y)`` (real harmonics orthonormal for the
area, :func:`wflow.geometry.harmonics.real_harmonics`), truncated where
``(2l+1) λ_l/λ_1 < mode_tol`` (``L = 23`` at ``β = 3``, ``33`` at ``β = 8``; the dropped
tail is below ``10^{-18}`` of the kernel, i.e. round-off). So ``W = Φ diag(κ) Φᵀ`` with
``Φ_{Kk} = Y_k(x_K)`` (``(M, R)``) and ``κ_k = 4π λ_{l(k)}``, and the equation becomes a
fixed point for the ``R`` moments ``a = Φᵀ m``:

.. math::

    G(a, K) = a - \Phi^\top m(a, K) = 0,\qquad
    \partial_a G = I - C\,\tfrac{2K}{\beta}\operatorname{diag}\kappa,\quad
    C = \Phi^\top(\operatorname{diag} m - m m^\top)\Phi,

solved by Newton's method with this exact Jacobian. Memory: ``Φ`` is ``8MR`` bytes and the
Jacobian assembly one more ``(M, R)`` temporary; no ``(M, M)`` array is formed.

**Symmetry.** The icosphere is rotated so that an icosahedron vertex is the pole and a
mirror plane is ``y = 0``; the mesh is then invariant under the group ``C_{5v}`` of the
pole. A state invariant under it has moments only on ``Y_{l,m}``, ``m ≡ 0 (mod 5)``,
``cos`` type: ``symmetry="axial"`` keeps those (``R = 70`` at ``L = 23``), which removes
the two rotational near-zero modes of the Jacobian (the mesh breaks the continuum's
rotation invariance only at ``O(h²)``), and its critical points are critical points of
the full ``F_K^h`` (symmetric criticality). ``symmetry="none"`` keeps every harmonic:
non-zonal states and modes (:func:`nonzonal_check`).

**Continuation.** The branch ``z = (a, K/K_#)`` is followed by pseudo-arclength
continuation: tangent predictor ``z_i + Δs τ_i``, Newton corrector on
``[G; τ_i·(z − z_i) − Δs] = 0``. The fold ``K_f^h`` is the root of the tangent's
``K``-component and ``K_c^h`` that of ``ΔF^h = F_K^h(m) − F_K^h(m_0)``, ``m_0`` the
near-uniform state on the same mesh (invariant under the full icosahedral group, a fixed
point by symmetry, exactly uniform only as ``h → 0``), each by Brent's method in the
arclength between two branch points. The uniform state's linear threshold ``K_#^h`` is
where the largest eigenvalue of ``C (2K/β) diag κ`` (the degree-1 triplet, degenerate by
icosahedral symmetry) crosses 1.

Errors are ``O(h²)`` (one-point centroid rule), ``h = √(mean A_K)``;
:func:`mesh_refinement` fits the observed order and Richardson-extrapolates ``K_c``.
"""

from __future__ import annotations

import logging
import math
import time
from dataclasses import dataclass, field
from typing import Literal

import numpy as np
from scipy.optimize import brentq

from ..geometry.harmonics import harmonic_index, real_harmonics
from ..geometry.mesh import dual_geometry, icosphere
from .thresholds import check_phase_args, funk_hecke_eigenvalues
from .zonal import Eigenvalues, PhaseError, ZonalModel, gegenbauer_table

logger = logging.getLogger(__name__)

__all__ = ["MeshOptions", "MeshModel", "MeshState", "MeshBranch", "MeshPhasePoint",
           "MeshRefinement", "NonzonalCheck", "mesh_branch", "mesh_phase_point",
           "mesh_refinement", "nonzonal_check"]

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


@dataclass(frozen=True)
class MeshBranch:
    """The clustered branch on the mesh by pseudo-arclength continuation.

    Attributes
    ----------
    model : MeshModel
    states : list of MeshState
        Branch points in arclength order (order parameter increasing at the start).
    tangents : numpy.ndarray
        Unit tangents ``τ_i`` in ``z = (a, K/K_#)``, shape ``(n, R + 1)``.
    K, order_parameter, free_energy_gap : numpy.ndarray
        Along the branch, shape ``(n,)`` (``ΔF^h`` against the near-uniform state).
    ds : float
        Arclength step.
    """

    model: MeshModel = field(repr=False)
    states: list[MeshState] = field(repr=False)
    tangents: np.ndarray = field(repr=False)
    K: np.ndarray
    order_parameter: np.ndarray
    free_energy_gap: np.ndarray
    ds: float

    def corrector(self, i: int, s: float) -> tuple[MeshState, np.ndarray]:
        """The branch point at arclength ``s`` past point ``i`` and its tangent."""
        return _corrector(self.model, self.states[i], self.tangents[i], s)


def _z(model: MeshModel, st: MeshState) -> np.ndarray:
    return np.concatenate([st.a, [st.K / model.k_sharp0]])


def _tangent(model: MeshModel, a: np.ndarray, K: float, m: np.ndarray,
             prev: np.ndarray | None) -> np.ndarray:
    """Unit null vector of ``[∂_a G, K_# ∂_K G]``, oriented along ``prev`` (or ``+m_z``)."""
    Ja, JK = model.jacobian(a, K, m)
    A = np.hstack([Ja, (JK * model.k_sharp0)[:, None]])
    if prev is None:
        t = np.concatenate([np.linalg.solve(Ja, -JK * model.k_sharp0), [1.0]])
    else:
        t = np.linalg.solve(np.vstack([A, prev[None, :]]), np.r_[np.zeros(model.R), 1.0])
    t /= np.linalg.norm(t)
    if prev is None:
        dmz = (m * ((2.0 * K / model.beta) * (model.phi @ (model.kappa * t[:-1]))
                    + (2.0 / model.beta) * (model.phi @ (model.kappa * a)) * t[-1]
                    * model.k_sharp0))
        sign = np.sign(dmz @ model.x[:, 2] - (m @ dmz) * (m @ model.x[:, 2]))
        return t * (sign or 1.0)
    return t if t @ prev > 0 else -t


def _corrector(model: MeshModel, st: MeshState, tau: np.ndarray, s: float
               ) -> tuple[MeshState, np.ndarray]:
    """Newton on ``[G(a, K); τ·(z − z_i) − s] = 0`` from the predictor ``z_i + sτ``."""
    z0 = _z(model, st)
    z = z0 + s * tau
    k0 = model.k_sharp0
    opts = model.options
    for it in range(opts.max_newton):
        a, K = z[:-1], z[-1] * k0
        G, m = model.residual(a, K)
        arc = float(tau @ (z - z0) - s)
        r = max(float(np.max(np.abs(G))), abs(arc))
        if r <= opts.newton_tol:
            return model.state(a, K, r, it), _tangent(model, a, K, m, tau)
        Ja, JK = model.jacobian(a, K, m)
        A = np.vstack([np.hstack([Ja, (JK * k0)[:, None]]), tau[None, :]])
        z = z - np.linalg.solve(A, np.r_[G, arc])
    raise PhaseError(f"mesh continuation: the corrector did not converge at s={s:.3g} "
                     f"from K={st.K:.8g}; reduce the arclength step")


def mesh_branch(beta: float, *, options: MeshOptions | None = None, m_start: float = 0.3,
                ds: float = 0.05, max_points: int = 400,
                eigenvalues: Eigenvalues = funk_hecke_eigenvalues,
                model: MeshModel | None = None) -> MeshBranch:
    """Continue the mesh branch from the zonal state at order parameter ``m_start``.

    The first point is Newton's solve at the zonal ``K(m_start)`` from the zonal density
    sampled at the cells (axis = the pole); continuation runs towards larger order
    parameter, through the fold, until ``ΔF^h < 0`` past the fold plus two points.

    Parameters
    ----------
    beta : float
        Inverse temperature (``d = 3``).
    options : MeshOptions or None, keyword-only
    m_start : float, keyword-only
        Order parameter of the zonal starting state (below the fold's).
    ds : float, keyword-only
        Arclength step in ``z = (a, K/K_#)`` (halved on a failed corrector).
    max_points : int, keyword-only
    eigenvalues : callable, keyword-only
        The kernel (as :class:`MeshModel`).
    model : MeshModel or None, keyword-only
        Reuse a built model (``options`` and ``eigenvalues`` are then ignored).

    Raises
    ------
    PhaseError
        No fold and crossing within ``max_points``, or a failed solve.
    """
    model = model or MeshModel(beta, options=options, eigenvalues=eigenvalues)
    with _blas(model):
        return _continue(model, m_start, ds, max_points)


def _continue(model: MeshModel, m_start: float, ds: float, max_points: int) -> MeshBranch:
    """The continuation loop of :func:`mesh_branch`."""
    from .branch import zonal_branch

    zb = zonal_branch(model.beta, 3, m=np.geomspace(1e-3, m_start, 12),
                      eigenvalues=model.eigenvalues)
    zs = zb.states[-1]
    st = model.solve(model.zonal_guess(zs.c, zs.K), zs.K)
    tau = _tangent(model, st.a, st.K, st.m, None)
    uni = model.uniform_state(st.K)
    states, taus, gaps = [st], [tau], [st.free_energy - uni.free_energy]
    folded = False
    past = 0
    step = ds
    while len(states) < max_points:
        try:
            st1, tau1 = _corrector(model, states[-1], taus[-1], step)
        except PhaseError:
            step *= 0.5
            if step < ds / 64:
                raise
            continue
        uni = model.uniform_state(st1.K, uni.a)
        states.append(st1)
        taus.append(tau1)
        gaps.append(st1.free_energy - uni.free_energy)
        folded = folded or (taus[-2][-1] < 0 <= tau1[-1])
        if folded and gaps[-1] < 0:
            past += 1
            if past >= 2:
                break
        step = min(ds, 1.5 * step)
    else:
        raise PhaseError(f"beta={model.beta:g}: no fold and free-energy crossing within "
                         f"{max_points} points; raise max_points or ds")
    return MeshBranch(model=model, states=states, tangents=np.array(taus),
                      K=np.array([s.K for s in states]),
                      order_parameter=np.array([s.order_parameter for s in states]),
                      free_energy_gap=np.array(gaps), ds=ds)


@dataclass(frozen=True)
class MeshPhasePoint:
    """``K_#^h``, ``K_f^h`` and ``K_c^h`` on one mesh (couplings ``K = 1/(2D)``).

    Attributes
    ----------
    beta : float
    frequency : int
        Icosphere subdivision.
    cells : int
    h : float
        Mesh size ``√(mean A_K)``.
    k_sharp, k_fold, k_c : float
        Linear threshold of the near-uniform state, fold, equal free energies.
    m_fold, m_c : float
        Order parameters at the fold and at ``K_c``.
    seconds : float
        Wall time of the computation.
    branch : MeshBranch
    """

    beta: float
    frequency: int
    cells: int
    h: float
    k_sharp: float
    k_fold: float
    m_fold: float
    k_c: float
    m_c: float
    seconds: float
    branch: MeshBranch = field(repr=False)

    def as_dict(self) -> dict[str, float | int]:
        """The numbers (JSON-ready)."""
        return {k: getattr(self, k) for k in ("beta", "frequency", "cells", "h", "k_sharp",
                                              "k_fold", "m_fold", "k_c", "m_c", "seconds")}


def mesh_phase_point(beta: float, *, options: MeshOptions | None = None,
                     eigenvalues: Eigenvalues = funk_hecke_eigenvalues,
                     ds: float = 0.05) -> MeshPhasePoint:
    """Locate ``K_#^h``, the fold ``K_f^h`` and ``K_c^h`` on one mesh (``β > β*(3)``).

    Parameters
    ----------
    beta : float
        Inverse temperature above ``β*(3) = 1.816…`` (a discontinuous transition).
    options : MeshOptions or None, keyword-only
        The mesh (``symmetry="axial"`` is the fast default).
    eigenvalues : callable, keyword-only
        The kernel (as :class:`MeshModel`).
    ds : float, keyword-only
        Continuation step.

    Returns
    -------
    MeshPhasePoint
    """
    t0 = time.perf_counter()
    model = MeshModel(beta, options=options, eigenvalues=eigenvalues)
    with _blas(model):
        return _locate(mesh_branch(beta, ds=ds, model=model), t0)


def _locate(br: MeshBranch, t0: float) -> MeshPhasePoint:
    """Fold, ``K_c`` and ``K_#`` of a branch (:func:`mesh_phase_point`)."""
    model = br.model
    tk = br.tangents[:, -1]
    i = int(np.nonzero((tk[:-1] < 0) & (tk[1:] >= 0))[0][0])
    s_next = float(br.tangents[i] @ (_z(model, br.states[i + 1]) - _z(model, br.states[i])))

    def slope(s: float) -> float:
        return float(br.corrector(i, s)[1][-1])

    s_f = brentq(slope, 0.0, s_next, xtol=1e-10) if tk[i] < 0 < tk[i + 1] else s_next
    fold = br.corrector(i, s_f)[0]
    gaps = br.free_energy_gap
    j = i + int(np.nonzero(gaps[i:] < 0)[0][0]) - 1
    s_j = float(br.tangents[j] @ (_z(model, br.states[j + 1]) - _z(model, br.states[j])))

    def gap(s: float) -> float:
        st = br.corrector(j, s)[0]
        return st.free_energy - model.uniform_state(st.K).free_energy

    s_c = brentq(gap, 0.0, s_j, xtol=1e-13)
    crit = br.corrector(j, s_c)[0]
    ks = model.k_sharp()
    pt = MeshPhasePoint(beta=model.beta, frequency=int(model.options.frequency),
                        cells=model.M, h=model.h, k_sharp=ks, k_fold=fold.K,
                        m_fold=fold.order_parameter, k_c=crit.K, m_c=crit.order_parameter,
                        seconds=time.perf_counter() - t0, branch=br)
    logger.info("mesh beta=%g n=%d (M=%d): K_# = %.10g, K_c = %.10g, K_f = %.10g (%.1f s)",
                pt.beta, pt.frequency, pt.cells, ks, pt.k_c, pt.k_fold, pt.seconds)
    return pt


#: Declared order of the mesh discretisation in ``h`` (one-point centroid rule).
DECLARED_ORDER = 2.0


@dataclass(frozen=True)
class MeshRefinement:
    """``K_c^h``, ``K_f^h``, ``K_#^h`` under refinement, Richardson-extrapolated in ``h``.

    Attributes
    ----------
    beta : float
    points : list of MeshPhasePoint
        One per mesh, coarse to fine.
    reference : dict
        The zonal continuation's ``k_c``, ``k_fold``, ``k_sharp``.
    order : dict
        Observed order ``p = log(δ₁/δ₂)/log(h₁/h₂)`` of ``k_c``, ``k_fold``, ``k_sharp`` from
        the three finest meshes (``nan`` with fewer than three).
    extrapolated : dict
        ``K_3 + (K_3 − K_2)/((h_2/h_3)^p − 1)`` per quantity (the finest value with fewer
        than three meshes).
    rel_error : dict
        ``|extrapolated/reference − 1|`` per quantity.
    rtol : float
        The agreement demanded of ``K_c``.
    """

    beta: float
    points: list[MeshPhasePoint]
    reference: dict[str, float]
    order: dict[str, float]
    extrapolated: dict[str, float]
    rel_error: dict[str, float]
    rtol: float

    @property
    def passed(self) -> bool:
        """``K_c`` agrees to ``rtol`` *and* the observed order is the declared one (±0.5).

        A single mesh (a coarse mesh claimed as converged) has no observed order and fails.
        """
        p = self.order["k_c"]
        return bool(self.rel_error["k_c"] <= self.rtol and abs(p - DECLARED_ORDER) <= 0.5)

    def table(self) -> list[dict[str, float | int]]:
        """One row per mesh: its numbers and relative errors against the zonal ones."""
        return [{**pt.as_dict(),
                 **{f"err_{k}": getattr(pt, k) / self.reference[k] - 1.0
                    for k in ("k_c", "k_fold", "k_sharp")}} for pt in self.points]


def _richardson(h: np.ndarray, v: np.ndarray) -> tuple[float, float]:
    """Observed order and extrapolated value from the last three ``(h, v)`` (``h`` halving)."""
    if v.size < 3:
        return math.nan, float(v[-1])
    (_, h2, h3), (v1, v2, v3) = h[-3:], v[-3:]
    d1, d2 = v1 - v2, v2 - v3
    if d1 == 0 or d2 == 0 or d1 * d2 < 0:
        return math.nan, float(v3)
    p = math.log(d1 / d2) / math.log(h2 / h3)
    return p, float(v3 - d2 / ((h2 / h3) ** p - 1.0))


def mesh_refinement(beta: float, frequencies: tuple[int, ...] = (8, 16, 32), *,
                    rtol: float = 1e-4, eigenvalues: Eigenvalues = funk_hecke_eigenvalues,
                    ) -> MeshRefinement:
    """``K_c``, ``K_f``, ``K_#`` on icospheres of the given frequencies against the zonal ones.

    The zonal reference always uses the exact kernel ``e^{β x·y}``; ``eigenvalues`` poses
    the mesh's kernel (a wrong one is a negative control: the check then fails).

    Parameters
    ----------
    beta : float
        ``β > β*(3)``.
    frequencies : tuple of int
        Icosphere subdivisions, increasing (each the double of the previous for a clean
        Richardson step).
    rtol : float, keyword-only
        Agreement demanded of the extrapolated ``K_c`` (:attr:`MeshRefinement.passed`).
    eigenvalues : callable, keyword-only

    Returns
    -------
    MeshRefinement
    """
    from .branch import phase_point

    fr = [int(f) for f in frequencies]
    if not fr or any(b <= a for a, b in zip(fr[:-1], fr[1:], strict=True)):
        raise ValueError(f"frequencies: expected an increasing list, got {frequencies!r}")
    zp = phase_point(beta, 3)
    ref = {"k_c": zp.k_c, "k_fold": zp.k_fold, "k_sharp": zp.k_sharp}
    pts = [mesh_phase_point(beta, options=MeshOptions(frequency=f), eigenvalues=eigenvalues)
           for f in fr]
    h = np.array([p.h for p in pts])
    order, extra, err = {}, {}, {}
    for k in ref:
        order[k], extra[k] = _richardson(h, np.array([getattr(p, k) for p in pts]))
        err[k] = abs(extra[k] / ref[k] - 1.0)
    res = MeshRefinement(beta=float(beta), points=pts, reference=ref, order=order,
                         extrapolated=extra, rel_error=err, rtol=rtol)
    logger.info("mesh refinement beta=%g: K_c extrapolated %.10g (zonal %.10g, rel %.2e), "
                "order %.3f", beta, extra["k_c"], ref["k_c"], err["k_c"], order["k_c"])
    return res


@dataclass(frozen=True)
class NonzonalCheck:
    """Newton from non-axisymmetric random states on the full harmonic basis.

    Attributes
    ----------
    beta, K : float
        Where the states were sought (``K_f < K``, on the clustered branch).
    frequency : int
    order_parameters : numpy.ndarray
        ``|Σ m x|`` of each converged state, shape ``(n_seeds,)``.
    axes : numpy.ndarray
        Their unit first moments, shape ``(n_seeds, 3)``.
    start_axes : numpy.ndarray
        The random axes of the starting states.
    axial_order_parameter : float
        The axial branch's order parameter at ``K`` on the same mesh.
    zonal_order_parameter : float
        The zonal continuation's at ``K``.
    shape_error : numpy.ndarray
        ``max_K |ρ_K − f(x_K·e)| / max f`` per state, ``f`` the zonal density at ``K``
        and ``e`` the state's own axis: the states are rotations of the zonal one.
    k_sharp_modes : numpy.ndarray
        The three degree-1 eigenvalues of the near-uniform state at the closed-form
        ``K_#`` (all ``≈ 1``: every order ``m`` goes unstable there).
    torque : numpy.ndarray
        ``|α|`` per state: the multipliers that pin its axis (``O(h²)``-small: on the mesh
        every axis is an equilibrium up to the mesh's anisotropy).
    tol : float
        Agreement demanded (the mesh's discretisation error, ``O(h²)``).
    """

    beta: float
    K: float
    frequency: int
    order_parameters: np.ndarray
    axes: np.ndarray
    start_axes: np.ndarray
    axial_order_parameter: float
    zonal_order_parameter: float
    shape_error: np.ndarray
    k_sharp_modes: np.ndarray
    torque: np.ndarray
    tol: float

    @property
    def passed(self) -> bool:
        """Every state has the axial order parameter, the zonal shape, and ``K_#``'s modes."""
        return bool(np.all(np.abs(self.order_parameters - self.zonal_order_parameter)
                           <= self.tol)
                    and abs(self.axial_order_parameter - self.zonal_order_parameter)
                    <= self.tol
                    and np.all(self.shape_error <= self.tol)
                    and np.all(np.abs(self.k_sharp_modes - 1.0) <= self.tol))


def _solve_pinned(model: MeshModel, a0: np.ndarray, K: float, axis: np.ndarray
                  ) -> tuple[MeshState, float]:
    """Newton at fixed ``K`` with the first moment pinned to ``axis`` (bordered system).

    Unknowns ``(a, α)``, ``u = (2K/β)Φκa + α₁ b₁ + α₂ b₂`` with ``b_j = x·t_j``, ``t_j ⊥ axis``;
    equations ``G = 0`` and ``t_j · Σ m x = 0``. On the mesh the rotations of a clustered
    state are near-null modes of ``∂G/∂a`` (the continuum's symmetry broken at ``O(h²)``);
    pinning the axis removes them, and ``|α|`` measures the mesh's torque on the state.
    Returns the state and ``|α|``.
    """
    e = np.asarray(axis, float) / np.linalg.norm(axis)
    t1 = np.cross(e, [1.0, 0, 0] if abs(e[0]) < 0.9 else [0, 1.0, 0])
    t1 /= np.linalg.norm(t1)
    B = model.x @ np.stack([t1, np.cross(e, t1)], axis=1)  # (M, 2)
    R, c = model.R, 2.0 / model.beta
    y = np.concatenate([np.asarray(a0, float), np.zeros(2)])

    def resid(y: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        u = (c * K) * (model.phi @ (model.kappa * y[:R])) + B @ y[R:]
        ex = model.sigma * np.exp(u - u.max())
        m = ex / ex.sum()
        return np.concatenate([y[:R] - model.phi.T @ m, B.T @ m]), m

    F, m = resid(y)
    r = float(np.max(np.abs(F)))
    for _ in range(model.options.max_newton):
        if r <= model.options.newton_tol:
            return model.state(y[:R], K, r, 0), float(np.linalg.norm(y[R:]))
        Psi = np.hstack([model.phi, B])
        pm = Psi.T @ m
        C = (Psi * m[:, None]).T @ Psi - np.outer(pm, pm)
        scale = np.concatenate([(c * K) * model.kappa, np.ones(2)])
        J = -C * scale[None, :]
        J[np.arange(R), np.arange(R)] += 1.0
        J[R:] *= -1.0
        step = np.linalg.solve(J, -F)
        t = 1.0
        while True:
            F1, m1 = resid(y + t * step)
            r1 = float(np.max(np.abs(F1)))
            if r1 < r or t < 1e-3:
                break
            t *= 0.5
        y, F, m, r = y + t * step, F1, m1, r1
    raise PhaseError(f"mesh Newton (axis pinned) at K={K:.8g}: |G| = {r:.2e}; start "
                     f"closer to the branch")


def nonzonal_check(beta: float, K: float | None = None, *, frequency: int = 6,
                   seeds: tuple[int, ...] = (0, 1, 2), amplitude: float = 0.3,
                   tol: float | None = None,
                   eigenvalues: Eigenvalues = funk_hecke_eigenvalues) -> NonzonalCheck:
    """Solve from random non-zonal states and compare with the zonal branch at ``K``.

    Each start is the zonal state at ``K`` about a random axis, multiplied by
    ``exp(amplitude Σ g_k Y_k)`` with standard normal ``g_k`` on every harmonic of degree
    1–4 (not axisymmetric about any axis). Newton's method on the full basis
    (``symmetry="none"``) converges to a state whose order parameter and shape (about its
    own axis) are the zonal ones to the mesh error.

    Parameters
    ----------
    beta : float
        ``β > β*(3)``.
    K : float or None
        Coupling on the upper branch (default ``(K_c + K_#)/2`` of the zonal continuation).
    frequency : int, keyword-only
        Icosphere subdivision.
    seeds : tuple of int, keyword-only
    amplitude : float, keyword-only
    tol : float or None, keyword-only
        Default ``h²``: the ``O(h²)`` mesh error, whose constant measured at
        ``β = 3, 4, 8`` on ``n >= 6`` is ``≲ 0.6`` (shape) and ``≲ 0.1`` (order
        parameter); ``β = 8`` on ``n = 4`` (``h = 0.2``, the cluster over a few cells) is
        outside the asymptotic range (shape ``1.7 h²``).
    eigenvalues : callable, keyword-only
        The mesh's kernel (the zonal reference keeps ``e^{β x·y}``).
    """
    from .branch import phase_point

    zp = phase_point(beta, 3)
    if K is None:
        K = 0.5 * (zp.k_c + zp.k_sharp)
    br = zp.branch
    j = int(np.argmin(np.abs(br.K - K) + 10.0 * (br.m < zp.m_fold)))
    zs = br.solve(float(brentq(lambda m: br.solve(m).K - K, zp.m_fold,
                               min(0.999, br.m[j] + 0.05))))
    full = MeshModel(beta, options=MeshOptions(frequency=frequency, symmetry="none"),
                     eigenvalues=eigenvalues)
    axial = MeshModel(beta, options=MeshOptions(frequency=frequency), eigenvalues=eigenvalues)
    with _blas(full):
        return _nonzonal(full, axial, zp, zs, float(K), seeds, amplitude, tol)


def _nonzonal(full: MeshModel, axial: MeshModel, zp, zs, K: float, seeds: tuple[int, ...],
              amplitude: float, tol: float | None) -> NonzonalCheck:
    """The solves of :func:`nonzonal_check`."""
    ax_state = axial.solve(axial.zonal_guess(zs.c, K), K)
    L = zs.c.size - 1
    kap = 2.0 * funk_hecke_eigenvalues(full.beta, 3, L) * (2 * np.arange(L + 1) + 1) / full.beta
    low = (full.degree >= 1) & (full.degree <= 4)
    ms, axes, starts, shape, torques = [], [], [], [], []
    for seed in seeds:
        rng = np.random.default_rng(seed)
        e = rng.standard_normal(3)
        e /= np.linalg.norm(e)
        g = np.zeros(full.R)
        g[low] = rng.standard_normal(int(low.sum()))
        u = K * ((kap[1:] * zs.c[1:]) @ gegenbauer_table(3, L, full.x @ e)[1:])
        w = full.sigma * np.exp(u - u.max() + amplitude * (full.phi @ g))
        w /= w.sum()
        st, torque = _solve_pinned(full, full.moments_of(w), K, w @ full.x)
        ax = st.first_moment / st.order_parameter
        f = np.exp(K * ((kap[1:] * zs.c[1:]) @ gegenbauer_table(3, L, full.x @ ax)[1:]))
        f /= f @ full.sigma
        rho = st.m / full.sigma
        ms.append(st.order_parameter)
        axes.append(ax)
        starts.append(e)
        shape.append(float(np.max(np.abs(rho - f)) / f.max()))
        torques.append(torque)
    modes = full.linear_modes(zp.k_sharp)[:3]
    return NonzonalCheck(beta=full.beta, K=float(K), frequency=int(full.options.frequency),
                         order_parameters=np.array(ms), axes=np.array(axes),
                         start_axes=np.array(starts),
                         axial_order_parameter=ax_state.order_parameter,
                         zonal_order_parameter=float(zs.m), shape_error=np.array(shape),
                         k_sharp_modes=modes, torque=np.array(torques),
                         tol=full.h ** 2 if tol is None else float(tol))
