r"""Token diffusion ``D Δ_S ρ`` on the cells of a sphere mesh: two-point fluxes, Crank–Nicolson.

The noisy transformer PDE (THEORY §8, docs/theory.md §9) is the Fokker–Planck equation

.. math::

    \partial_t \rho + \operatorname{div}_S(\rho\, v[\mu_t, \Theta_t]) = D\,\Delta_S \rho
    \quad\text{on } S^2 .

Space: two-point fluxes on the circumcentric dual
-------------------------------------------------
On the dual geometry of :mod:`wflow.geometry.mesh.dual` (spherical circumcentres ``x_K``,
geodesic edge lengths ``|σ|``, centre distances ``d_σ``, transmissibilities
``T_σ = |σ|/d_σ``, spherical cell areas ``A_K``), the flux of ``D ∇ρ`` across the edge
``σ = K|L`` is ``D T_σ (ρ_L − ρ_K)`` with the per-area densities ``ρ_K = m_K / A_K``:

.. math::

    \frac{dm_K}{dt}\Big|_{\rm diff} = -D\,(\mathcal L \rho)_K,\qquad
    (\mathcal L \rho)_K = \sum_{\sigma = K|L} T_\sigma (\rho_K - \rho_L),

``𝓛`` (``(M, M)``) the symmetric positive semi-definite graph Laplacian. The arc
``x_K x_L`` is orthogonal to ``σ`` on every triangulation; it crosses ``σ`` (consistency)
only on a *well-centred* mesh, which :func:`~wflow.geometry.mesh.dual.dual_geometry`
checks: a mesh that is not well centred is refused
(:class:`~wflow.geometry.mesh.dual.NotWellCentredError`), as the finite-volume JKO does.
The spherical areas ``A_K`` make the uniform measure (``m_K ∝ A_K``) exactly stationary.

Time: Crank–Nicolson, mass-exact flux form
------------------------------------------
One diffusion sub-step of length ``h`` (Strang splitting uses ``h = Δt/2`` before and
after the explicit drift step of :mod:`wflow.pde.fv`, docs/theory.md §9) solves

.. math::

    \big(A + \tfrac{h D}{2}\mathcal L\big)\rho' = \big(A - \tfrac{h D}{2}\mathcal L\big)\rho,
    \qquad A = \operatorname{diag}(A_K),

with PETSc (CG, Jacobi preconditioner, distributed over the owned cells of the DOLFINx
mesh: rows are owned cells, the matrix is assembled once per step length), then updates
the masses in *flux form*,
``m'_K = m_K − (hD/2) Σ_σ T_σ ((ρ_K + ρ'_K) − (ρ_L + ρ'_L))``: every edge flux is one
floating-point number, subtracted from one cell and added to the other, so ``Σ_K m_K`` is
conserved to round-off whatever the solver tolerance (which enters the accuracy only:
``m' = A ρ'`` up to the solver residual).

Positivity (proof)
------------------
``S = A + (hD/2)𝓛`` has positive diagonal, non-positive off-diagonal entries and is
strictly diagonally dominant (its row sums are ``A_K > 0``): a nonsingular M-matrix, so
``S^{-1} >= 0`` entrywise and ``ρ' >= 0`` whenever the right-hand side is. The right-hand
side ``(A − (hD/2)𝓛)ρ`` is ``>= 0`` for every ``ρ >= 0`` iff its diagonal is, i.e.

.. math::

    h \le h_+ = \min_K \frac{2 A_K}{D \sum_{\sigma\subset\partial K} T_\sigma}
    \qquad (:meth:`TokenDiffusion.positive_step`).

Under this condition every Crank–Nicolson sub-step maps non-negative masses to
non-negative masses (to the solver residual). A longer sub-step may still give
``m' >= 0`` (smooth data); the PDE solver checks every step's masses and rejects a step
with a negative one (retried with a smaller ``Δt``, which reaches ``h_+`` in finitely
many halvings). No linear time stepper of order 2 is unconditionally positive
(Bolley–Crouzeix), hence the condition; backward Euler would be unconditionally
positive but of order 1.

Order: ``𝓛`` is second-order accurate for the spherical harmonics on the icospheres
(measured, ``tests/test_pde_diffusion.py``); Crank–Nicolson and Strang splitting are
second order in time.

Free energy (THEORY §8)
-----------------------
For USA heads, symmetric and value-aligned (``V_h = s A_h``), the noisy PDE is the
Wasserstein gradient descent of ``F_D = D ∫ρ log ρ dσ − s E`` (``σ`` the normalised
surface measure). Discretely (:func:`free_energy_terms`):
``H = Σ_K m_K log(4π m_K / A_K)``, ``F = D H − s E`` and the relative Fisher information
``I = Σ_σ T_σ θ_σ (g_K − g_L)²``, ``g = D log ρ − s ψ``, ``θ_σ`` the logarithmic mean of
``ρ_K, ρ_L`` (with it the diffusion's part ``D² Σ_σ T_σ (ρ_K − ρ_L)(log ρ_K − log ρ_L)`` is
the exact entropy dissipation of the semi-discrete diffusion). The EDI
``F(T) − F(0) + ∫ ∂_tE dt = −∫ I dt`` then holds to the scheme's order.
"""

from __future__ import annotations

import logging
import math
from typing import Any

import numpy as np

from ..geometry.mesh import SphereMesh
from ..geometry.mesh.dual import DualGeometry, dual_from_cell_vertices, log_mean

__all__ = [
    "TokenDiffusion",
    "free_energy_terms",
]

logger = logging.getLogger(__name__)


class TokenDiffusion:
    """``D Δ_S`` by two-point fluxes on a :class:`SphereMesh`, Crank–Nicolson sub-steps.

    Parameters
    ----------
    mesh : SphereMesh
        The (possibly distributed) mesh of the PDE; its cells must be well centred.
    diffusion : float
        ``D > 0`` (radius² per unit time).
    rtol : float
        Relative tolerance of the CG solve (accuracy only: the mass is exact regardless).

    Attributes
    ----------
    dual : DualGeometry
        The global dual geometry (original cell order, the same on every rank).
    areas : (M,) array
        Spherical cell areas ``A_K`` (sum ``4π``).
    """

    def __init__(self, mesh: SphereMesh, diffusion: float, *, rtol: float = 1e-13) -> None:
        if not diffusion > 0:
            raise ValueError(f"diffusion: TokenDiffusion needs D > 0, got {diffusion!r}")
        self.mesh = mesh
        self.comm = mesh.comm
        self.D = float(diffusion)
        self.rtol = float(rtol)
        # the global dual geometry: NotWellCentredError for a mesh that is not well centred
        self.dual: DualGeometry = dual_from_cell_vertices(mesh.gather_owned(mesh.cell_vertices))
        geo = self.dual
        M = geo.M
        self.M = M
        self.areas = geo.areas
        self.K, self.L = geo.edge_cells[:, 0], geo.edge_cells[:, 1]
        self.T = geo.trans
        self.sumT = np.bincount(self.K, self.T, M) + np.bincount(self.L, self.T, M)
        no = mesh.num_owned
        self.orig_owned = np.asarray(mesh.original_index[:no], dtype=np.int64)
        own = np.zeros(M, dtype=bool)
        own[self.orig_owned] = True
        # edges touching an owned cell (a cross-rank edge is computed by both owners, as one
        # identical number: the same operands in the same order)
        self.esel = np.flatnonzero(own[self.K] | own[self.L])
        self.loc_of = np.full(M, -1, dtype=np.int64)
        self.loc_of[self.orig_owned] = np.arange(no)
        # PETSc numbering: rank r owns a contiguous range, its owned cells in local order
        allidx, counts = mesh._gather_plan
        self.petsc_of = np.empty(M, dtype=np.int32)
        self.petsc_of[allidx] = np.arange(M, dtype=np.int32)
        self.start = int(np.concatenate([[0], np.cumsum(counts)])[self.comm.rank])
        self.no = no
        self._S: Any = None
        self._c = math.nan
        self._ksp: Any = None
        self.solves = 0
        self.iterations = 0

    # ------------------------------------------------------------------ operator
    def positive_step(self) -> float:
        """``h_+ = min_K 2 A_K / (D Σ_σ T_σ)``: every sub-step ``h <= h_+`` keeps ``m >= 0``."""
        return float(np.min(2.0 * self.areas / (self.D * self.sumT)))

    def laplacian(self, rho: np.ndarray) -> np.ndarray:
        """``(𝓛 ρ)_K = Σ_σ T_σ (ρ_K − ρ_L)`` of all cells (global arrays, serial helper)."""
        F = self.T * (rho[self.K] - rho[self.L])
        return np.bincount(self.K, F, self.M) - np.bincount(self.L, F, self.M)

    def _flux_div_owned(self, s: np.ndarray) -> np.ndarray:
        """``Σ_σ T_σ (s_K − s_L)`` of the owned cells (local order), edge by edge."""
        e = self.esel
        K, L = self.K[e], self.L[e]
        F = self.T[e] * (s[K] - s[L])
        out = np.zeros(self.no)
        lk, ll = self.loc_of[K], self.loc_of[L]
        ok, ol = lk >= 0, ll >= 0
        np.add.at(out, lk[ok], F[ok])
        np.subtract.at(out, ll[ol], F[ol])
        return out

    def _csr(self) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
        """CSR pattern of the owned rows of ``𝓛`` in PETSc numbering, and its values.

        Returns ``(indptr, indices, lap_values, diag_mask)``: ``𝓛`` row by row (owned cells
        in local order, columns sorted), and which entries are diagonal.
        """
        e = self.esel
        K, L, T = self.K[e], self.L[e], self.T[e]
        own = self.orig_owned
        p = self.petsc_of.astype(np.int64)
        rows = [np.arange(self.no)]
        cols = [p[own]]
        vals = [self.sumT[own]]
        lk, ll = self.loc_of[K], self.loc_of[L]
        ok, ol = lk >= 0, ll >= 0
        rows += [lk[ok], ll[ol]]
        cols += [p[L][ok], p[K][ol]]
        vals += [-T[ok], -T[ol]]
        r = np.concatenate(rows)
        cidx = np.concatenate(cols)
        v = np.concatenate(vals)
        order = np.lexsort((cidx, r))
        r, cidx, v = r[order], cidx[order], v[order]
        indptr = np.concatenate([[0], np.cumsum(np.bincount(r, minlength=self.no))])
        diag = cidx == p[own][r]
        return (indptr.astype(np.int32), cidx.astype(np.int32), v, diag)

    def _matrix(self, c: float) -> Any:
        """The KSP of ``S = A + c 𝓛`` (rows = owned cells), reassembled when ``c`` changes."""
        if self._ksp is not None and c == self._c:
            return self._ksp
        # DOLFINx's order: MPI, then dolfinx, then PETSc
        from mpi4py import MPI  # noqa: F401
        # isort: split
        import dolfinx  # noqa: F401
        # isort: split
        from petsc4py import PETSc

        if self._ksp is None:
            self._pattern = self._csr()
            indptr, cidx, _, _ = self._pattern
            S = PETSc.Mat().createAIJ(size=((self.no, self.M), (self.no, self.M)),
                                      csr=(indptr, cidx), comm=self.comm)
            self._S = S
            ksp = PETSc.KSP().create(self.comm)
            ksp.setType("cg")
            ksp.getPC().setType("jacobi")
            ksp.setTolerances(rtol=self.rtol, atol=0.0, max_it=100_000)
            ksp.setInitialGuessNonzero(True)
            self._ksp = ksp
        indptr, cidx, lap, diag = self._pattern
        vals = c * lap
        vals[diag] += self.areas[self.orig_owned]
        S = self._S
        S.setValuesCSR(indptr, cidx, vals)
        S.assemble()
        self._ksp.setOperators(S)
        self._c = c
        return self._ksp

    # ------------------------------------------------------------------ one sub-step
    def solve(self, m_glob: np.ndarray, h: float) -> np.ndarray:
        """The Crank–Nicolson density ``ρ'`` of a sub-step of length ``h`` (global order).

        ``(A + (hD/2)𝓛) ρ' = m − (hD/2) 𝓛 ρ`` with ``ρ = m/A``, by CG to ``rtol``; then
        gathered on every rank. :meth:`step` turns it into mass-exact masses.
        """
        c = 0.5 * h * self.D
        ksp = self._matrix(c)
        rho = m_glob / self.areas
        own = self.orig_owned
        b_loc = m_glob[own] - c * self._flux_div_owned(rho)
        x, b = self._S.createVecs()
        b.array[:] = b_loc
        x.array[:] = rho[own]  # initial guess: the old density
        ksp.solve(b, x)
        reason = ksp.getConvergedReason()
        if reason < 0:
            raise FloatingPointError(f"pde diffusion: CG did not converge (reason {reason}, "
                                     f"{ksp.getIterationNumber()} iterations)")
        self.solves += 1
        self.iterations += ksp.getIterationNumber()
        rho_new_own = x.array.copy()
        x.destroy()
        b.destroy()
        return self.mesh.gather_owned(rho_new_own)

    def step(self, m_glob: np.ndarray, h: float) -> np.ndarray:
        """One Crank–Nicolson sub-step of length ``h``: global masses -> owned masses.

        ``m'_K = m_K − (hD/2) Σ_σ T_σ ((ρ + ρ')_K − (ρ + ρ')_L)`` (flux form: the sum of
        the masses is conserved to round-off, whatever the CG tolerance). Returns the owned
        masses in the mesh's local order. ``m' >= 0`` is guaranteed for ``h <= h_+``
        (:meth:`positive_step`), to the solver residual; the caller checks it otherwise.
        """
        rho_new = self.solve(m_glob, h)
        c = 0.5 * h * self.D
        return m_glob[self.orig_owned] - c * self._flux_div_owned(m_glob / self.areas + rho_new)

    # ------------------------------------------------------------------ free energy
    def rate(self, m_glob: np.ndarray) -> np.ndarray:
        """``dm/dt`` of the diffusion on the owned cells: ``−D (𝓛 ρ)_K``."""
        return -self.D * self._flux_div_owned(m_glob / self.areas)


def free_energy_terms(diff: TokenDiffusion, m_glob: np.ndarray, psi_glob: np.ndarray,
                      sign: int, grad2: float) -> dict[str, float]:
    """Entropy, diffusion power and relative Fisher information of a cell measure.

    Parameters
    ----------
    diff : TokenDiffusion
    m_glob : (M,) array
        Cell masses (global order).
    psi_glob : (M,) array
        ``ψ = δE/δμ`` at the cells (global order).
    sign : int
        ``+1`` / ``−1`` value alignment of the heads (``F = D H − sign·E``).
    grad2 : float
        ``∫ |P_x ∇ψ|² dμ`` (the cell quadrature ``Σ_K m_K |P∇ψ(ĉ_K)|²`` with the exact
        gradient of the kernel sums).

    Returns
    -------
    dict
        ``entropy`` ``H = Σ m_K log(4π m_K/A_K)``; ``power_diffusion``
        ``Σ_K ψ_K (dm_K/dt)_diff = −D Σ_σ T_σ (ρ_K − ρ_L)(ψ_K − ψ_L)`` (the energy rate of the
        diffusion, the chain rule's second term); ``free_dissipation``, the relative Fisher
        information ``I = ∫ |∇(D log ρ − sψ)|² dμ`` expanded as

        ``I_h = D² Σ_σ T_σ θ_σ (log ρ_K − log ρ_L)² + 2s·power_diffusion + grad2``

        (``θ_σ`` the logarithmic mean: the first term is exactly the entropy dissipation of
        the semi-discrete diffusion; the cross term ``−2Ds ∫∇ρ·∇ψ = 2s D∫ψΔρ`` is the
        diffusion's discrete energy rate; the last ``∫ρ|∇ψ|²``). Along the semi-discrete
        flow of USA value-aligned heads ``dF/dt + I_h`` is then the consistency error of the
        drift's entropy production alone.
    """
    A = diff.areas
    rho = m_glob / A
    with np.errstate(divide="ignore", invalid="ignore"):
        logr = np.where(m_glob > 0, np.log(np.where(rho > 0, rho, 1.0)), 0.0)
    H = diff.dual.entropy(m_glob)
    K, L, T = diff.K, diff.L, diff.T
    drho = rho[K] - rho[L]
    dpsi = psi_glob[K] - psi_glob[L]
    pdiff = float(-diff.D * np.sum(T * drho * dpsi))
    theta = log_mean(rho[K], rho[L])
    # an empty cell next to an occupied one: θ = 0, the term vanishes (log ρ is −∞ there)
    dl = np.where(theta > 0, logr[K] - logr[L], 0.0)
    fisher = float(diff.D ** 2 * np.sum(T * theta * dl * dl) + 2.0 * sign * pdiff + grad2)
    return {"entropy": H, "power_diffusion": pdiff, "free_dissipation": fisher}
