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

from ..attention.heads import Heads
from ..attention.kinds import get_kind
from ..energy import FieldEval
from ..geometry.mesh import SphereMesh
from ..geometry.mesh.dual import DualGeometry, dual_from_cell_vertices, log_mean
from ..kernels import kernel_sums
from .fv import _allmin, _allsum

__all__ = [
    "StrangSplitting",
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


class StrangSplitting:
    """The noisy PDE's step ``CN(Δt/2) ∘ drift(Δt) ∘ CN(Δt/2)`` and its free-energy balance.

    One per PDE run with ``D > 0`` (:class:`wflow.pde.solver._Run`, passed as ``run``: its
    ``fv``, ``opts``, ``attn``, ``stage_rates`` and ``try_step``). It holds what links
    consecutive steps: the predicted ``Δt`` and the drift rates at the next step's ``m*``
    (prepared at the end of each step from the last positivity bound, so a step costs the
    noiseless step's velocity evaluations plus two linear solves), and the running
    free-energy EDI.
    """

    def __init__(self, run: Any) -> None:
        self.run = run
        self.diff = TokenDiffusion(run.mesh, run.opts.diffusion)
        self.next_dt: tuple[float, float] | None = None  # (t, Δt) predicted for the next step
        self.pred: tuple | None = None  # (m*_glob, net*, out*) at that (t, Δt)
        self.extra_evals = 0
        self.free: dict[str, float] | None = None

    def stats(self) -> dict[str, Any]:
        """Counters of the run: solves, CG iterations, positivity step, extra evaluations."""
        d = self.diff
        return {"diffusion": d.D, "diffusion_solves": d.solves,
                "diffusion_cg_iterations": d.iterations,
                "diffusion_positive_step": 2.0 * d.positive_step(),
                "strang_extra_evals": self.extra_evals}

    def record(self, put: Any, terms: dict, acc: Any) -> None:
        """History at an output time: the free-energy terms and the EDI so far."""
        for key in ("entropy", "free_energy", "free_dissipation", "power_diffusion"):
            put(key, terms[key])
        if acc is not None:
            for key, val in self.free_residuals(acc).items():
                put(f"balance_{key}", val)

    def free_terms(self, m_glob: np.ndarray, heads: Heads, fe: FieldEval, E: float) -> dict:
        """The diffusion's terms of the balance (:func:`free_energy_terms`).

        ``power`` gains the diffusion's energy rate ``Σ_K ψ_K (dm_K/dt)_diff`` with
        ``ψ_K = ∂E/∂m_K`` at the projected centroids (the discrete chain rule of ``E`` on
        ``Σ m_K δ_{ĉ_K}``; ``(Φ + Φᵀ)/2β`` for non-symmetric heads); ``free_energy``
        ``F = D H − s E`` and ``free_dissipation`` ``I`` (the relative Fisher information)
        enter the free-energy EDI (``s`` the value alignment, 0 for other heads).
        """
        run = self.run
        fv, attn, diff = run.fv, run.attn, self.diff
        assert attn is not None and diff is not None
        phi = fe.Phi
        if not heads.is_symmetric():
            phit = kernel_sums(fv.chat_owned, fv.chat_glob, m_glob, heads.K, heads.Q,
                               beta=attn.beta, kind=attn.kind, potential=True).Phi
            phi = 0.5 * (phi + phit)
        psi = fv.mesh.gather_owned(np.einsum("h,hm->m", heads.w, phi) / attn.beta)
        s = heads.value_alignment() if heads.is_symmetric() else 0
        x = fv.chat_owned
        gp = np.einsum("h,hmi->mi", heads.w, fe.grad_psi)
        gp -= np.einsum("mi,mi->m", gp, x)[:, None] * x
        grad2 = float(_allsum(fv.comm, m_glob[fv.orig_owned] @ np.einsum("mi,mi->m", gp, gp)))
        ft = free_energy_terms(diff, m_glob, psi, s, grad2)
        return {"power_diffusion": ft["power_diffusion"],
                "entropy": ft["entropy"], "free_energy": diff.D * ft["entropy"] - s * E,
                "free_dissipation": ft["free_dissipation"]}

    # ------------------------------------------------------------------ free-energy EDI
    def free_step(self, dt: float, left: dict, right: dict) -> None:
        """Trapezoid of the relative Fisher information over one step (D > 0)."""
        if self.free is None:
            self.free = {"F0": left["free_energy"], "F": left["free_energy"], "I": 0.0}
        self.free["I"] += 0.5 * dt * (left["free_dissipation"] + right["free_dissipation"])
        self.free["F"] = right["free_energy"]

    def free_residuals(self, acc: Any) -> dict[str, float]:
        """The free-energy EDI of ``F_D = D H − sE`` (THEORY §8), D > 0.

        ``F(T) − F(0) + s(W + Itô + M) + ∫ I dt`` with ``W = ∫∂_tE`` and the weights'
        jumps, Itô and martingale terms (:class:`~wflow.diagnostics.BalanceAccumulator`):
        ``free_edi``, a
        discretisation error (→ 0 at the scheme's order) for unnormalised (USA) symmetric
        value-aligned heads; ``free_edi_defect`` for a normalised kind (softmax), where the
        plain Laplacian is not the weighted gradient flow of ``F_D``: a property of the
        model, measured, never judged as a discretisation error. Absent for heads that are
        not value-aligned (no gradient-flow direction).
        """
        if self.free is None or not acc.sign:
            return {}
        f = self.free
        work = acc.W + acc.I + acc.M
        r = f["F"] - f["F0"] + acc.sign * work + f["I"]
        key = "free_edi_defect" if get_kind(self.run.attn.kind).normalised else "free_edi"
        return {key: float(r), "free_dF": float(f["F"] - f["F0"]),
                "free_dissipation_int": float(f["I"])}

    # ------------------------------------------------------------------ Strang (D > 0)
    def rates(self, m_glob: np.ndarray, t: float, theta: Any, dt: float
                     ) -> tuple[np.ndarray, np.ndarray, np.ndarray] | None:
        """Leading half-step ``m* = CN(Δt/2) m`` and the drift rates at ``m*``.

        ``None`` when ``m*`` has a negative mass (a sub-step beyond the positivity step
        ``h_+`` on rough data; the caller rejects the step).
        """
        fv = self.run.fv
        ms = self.diff.step(m_glob, 0.5 * dt)
        if _allmin(fv.comm, 1.0 if bool(np.all(ms >= 0)) else 0.0) <= 0:
            return None
        g = fv.gather(ms)
        net, out = self.run.stage_rates(g, t, theta)
        return g, net, out

    def predict(self, m_glob: np.ndarray, t: float, theta: Any, t_stop: float, bound: float,
                tol: float) -> None:
        """Choose the next ``Δt`` from the last step's positivity bound and prepare ``m*``.

        The drift rates at ``m*`` serve the next step's first stage (one velocity
        evaluation per stage, as without diffusion); a rejected or shortened step
        recomputes them (``stats["strang_extra_evals"]``).
        """
        opts = self.run.opts
        dt = min(opts.dt, opts.cfl * bound, t_stop - t)
        if t_stop - t - dt <= tol:
            dt = t_stop - t
        self.next_dt = (t, dt)
        self.pred = self.rates(m_glob, t, theta, dt)

    def step(self, m_glob: np.ndarray, t: float, dt: float, thetas: tuple
                   ) -> tuple[np.ndarray | None, float]:
        """One Strang step ``CN(Δt/2) ∘ drift(Δt) ∘ CN(Δt/2)`` (owned masses or ``None``).

        The drift step is the run's ``try_step`` (SSP stages, positivity checks); each
        diffusion half-step is checked for ``m >= 0`` (guaranteed for ``Δt/2 <= h_+``).
        """
        fv = self.run.fv
        pred = self.pred if self.next_dt == (t, dt) else None
        self.pred = self.next_dt = None
        if pred is None:
            self.extra_evals += 1
            pred = self.rates(m_glob, t, thetas[0], dt)
            if pred is None:
                return None, math.inf
        g, net0, out0 = pred
        m_drift, bmin = self.run.try_step(g, net0, out0, t, dt, thetas)
        if m_drift is None:
            return None, bmin
        m_new = self.diff.step(fv.gather(m_drift), 0.5 * dt)
        if _allmin(fv.comm, 1.0 if bool(np.all(m_new >= 0)) else 0.0) <= 0:
            return None, bmin
        return m_new, bmin
