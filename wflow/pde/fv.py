"""Finite volumes on a DOLFINx sphere mesh: geometry, reconstruction, fluxes, positivity bound.

Discretises ``∂_t ρ + div_S(ρ v) = 0`` on S² (docs/theory.md §2).

Discretisation (cell-centred finite volumes = DG0 on the flat-triangle mesh)
-----------------------------------------------------------------------------
* Unknowns: cell masses ``m_K = ρ_K |K|`` (``|K|``, centroids ``c_K`` and all
  facet geometry from DOLFINx, see :mod:`wflow.geometry.mesh`).
* Nonlocal velocity: at every edge quadrature point ``x_q`` (Gauss–Legendre on
  the flat edge, radially projected to the sphere ``x̂_q = x_q/|x_q|``),
  ``v(x̂_q) = evaluate(x̂_q, heads, attn, y=ĉ, m=m).v`` (or ``.vhat``) with the
  sources at the projected centroids ``ĉ_K = c_K/|c_K|`` carrying the cell
  masses (one-point centroid rule per cell, second-order accurate). The same
  :func:`wflow.energy.evaluate` and :func:`wflow.kernels.kernel_sums` as the
  particle engine, so every kernel (SA, USA, ReLU), any number of heads and any
  weight schedule (:mod:`wflow.attention.schedules`) work unchanged.
* Edge flux (edge ``e`` from ``K⁺`` to ``K⁻``, single-valued normal
  ``n_e = ½(n⁺ − n⁻)`` from the two cells' conormals)::

      F_e = |e| Σ_q w_q u_q ρ_up(x_q),   u_q = v(x̂_q)·n_e,
      ρ_up = ρ⁺(x_q) if u_q > 0 else ρ⁻(x_q).

  Order 1: ``ρ^±(x_q) = ρ_{K^±}``. Order 2: limited linear reconstruction
  ``ρ_K(x) = ρ_K + φ_K g_K·(x − c_K)`` with the least-squares gradient ``g_K``
  in the plane of ``K`` (from its three face neighbours) and a limiter
  (``barth_jespersen``, ``venkatakrishnan`` or ``positivity``), always followed
  by the Zhang–Shu scaling that makes every reconstructed edge value ``>= 0``.
* Update: ``dm_K/dt = −Σ_{e ∋ K} ±F_e``; each ``F_e`` is subtracted from one cell
  and added to the other (the identical number), so ``Σ_K m_K`` is conserved to
  round-off. Time stepping: forward Euler (order 1), SSP-RK2 or SSP-RK3 (order 2).
* Positivity: a forward-Euler stage keeps ``m_K >= 0`` iff
  ``Δt · out_K <= m_K`` with ``out_K = Σ_{e ∋ K} |F_e|⁺`` the outflow (docs/theory.md §2
  CFL bound). Each step takes ``Δt = min(dt, cfl · min_K m_K/out_K, time to the
  next output / jump)``; every SSP stage is a convex combination of such stages and
  is checked again; a step whose later stage would violate the bound (the
  velocity changed) is rejected and retried with a smaller ``Δt`` (counted in
  ``stats["rejected_steps"]``); a step is never taken with a negative mass.
"""

from __future__ import annotations

import logging
import math
from collections.abc import Callable
from typing import Any

import numpy as np

from ..geometry.mesh import SphereMesh
from ..geometry.sphere import normalize
from .limiters import LIMITERS
from .options import PDEOptions

logger = logging.getLogger(__name__)


class _FV:
    """Precomputed geometry and the FV right-hand side on one rank."""

    def __init__(self, mesh: SphereMesh, opts: PDEOptions) -> None:
        from dolfinx import la

        self.mesh = mesh
        self.comm = mesh.comm
        self.opts = opts
        self.order = opts.order
        self.no = mesh.num_owned
        self.nl = mesh.num_local
        self.M = mesh.num_global
        orig = mesh.original_index
        self.orig_owned = orig[: self.no]
        self.chat_glob = normalize(mesh.gather_owned(mesh.centroids))
        self.areas_glob = mesh.gather_owned(mesh.areas)
        self.area_owned = mesh.areas[: self.no]
        self.chat_owned = self.chat_glob[self.orig_owned]
        self.nbr_glob = mesh.gather_owned(orig[mesh.cell_neighbors].astype(np.int64))
        fc = mesh.facet_cells
        self.f0, self.f1 = fc[:, 0].astype(np.int64), fc[:, 1].astype(np.int64)
        self.f0g, self.f1g = orig[self.f0], orig[self.f1]
        pts, w = mesh.facet_quadrature(opts.quad_points)
        nf, q = pts.shape[:2]
        self.nf, self.q = nf, q
        self.qhat = normalize(pts.reshape(-1, 3))
        self.lw = mesh.facet_length[:, None] * w[None, :]  # (nf, q)
        self.n_e = mesh.facet_normal
        self.vec = la.vector(mesh.mesh.topology.index_map(2), 2)
        if self.order == 2:
            self.limiter = LIMITERS.resolve(opts.limiter)
            cen = mesh.centroids
            self.off0 = pts - cen[self.f0][:, None, :]
            self.off1 = pts - cen[self.f1][:, None, :]
            self._setup_reconstruction(w)

    # ------------------------------------------------------------------ reconstruction
    def _setup_reconstruction(self, w: np.ndarray) -> None:
        mesh = self.mesh
        no = self.no
        cv = mesh.cell_vertices[:no]  # (no, 3, 3)
        cen = mesh.centroids[:no]
        nrm = mesh.normals[:no]
        # least-squares gradient in the plane of K from the three face neighbours
        cent_glob = self.mesh.gather_owned(mesh.centroids)
        d = cent_glob[self.nbr_glob[self.orig_owned]] - cen[:, None, :]  # (no, 3, 3)
        d -= np.einsum("kji,ki->kj", d, nrm)[:, :, None] * nrm[:, None, :]
        t1 = cv[:, 1] - cv[:, 0]
        t1 /= np.linalg.norm(t1, axis=1, keepdims=True)
        t2 = np.cross(nrm, t1)
        T = np.stack([t1, t2], axis=2)  # (no, 3, 2)
        D = np.einsum("kji,kia->kja", d, T)  # (no, 3 nbrs, 2)
        pinv = np.linalg.pinv(D)  # (no, 2, 3)
        self.Wls = np.einsum("kia,kaj->kij", T, pinv)  # (no, 3, 3): g = W δ
        # offsets of the cell's own edge quadrature points (for the limiter)
        s = 0.5 * (np.polynomial.legendre.leggauss(self.q)[0] + 1.0)
        a = cv
        b = np.roll(cv, -1, axis=1)
        qp = a[:, :, None, :] + s[None, None, :, None] * (b - a)[:, :, None, :]
        self.cell_off = (qp - cen[:, None, None, :]).reshape(no, 3 * self.q, 3)
        # h_K and the reference density of Venkatakrishnan's ε
        self.hK = np.sqrt(mesh.areas[:no])
        self.rho_ref = 1.0 / float(self.areas_glob.sum())

    def slopes(self, rho_glob: np.ndarray) -> np.ndarray:
        """Limited gradients of all cells (global order), via the owners and an all-gather."""
        rK = rho_glob[self.orig_owned]
        rn = rho_glob[self.nbr_glob[self.orig_owned]]  # (no, 3)
        g = np.einsum("kij,kj->ki", self.Wls, rn - rK[:, None])
        delta = np.einsum("kqi,ki->kq", self.cell_off, g)  # edge values minus the mean
        rmax = np.maximum(rK, rn.max(axis=1))
        rmin = np.minimum(rK, rn.min(axis=1))
        with np.errstate(divide="ignore", invalid="ignore"):
            phi = self.limiter.phi(delta, rK, rmax, rmin, self)
            # Zhang–Shu positivity scaling: every edge value >= 0
            vmin = rK + phi * delta.min(axis=1)
            theta = np.where(vmin < 0, rK / (rK - phi * delta.min(axis=1)), 1.0)
            theta = np.where(np.isfinite(theta), theta, 0.0)
        phi = phi * np.clip(theta, 0.0, 1.0)
        return self.mesh.gather_owned(phi[:, None] * g)

    # ------------------------------------------------------------------ right-hand side
    def rates(self, m_glob: np.ndarray, vel: np.ndarray) -> tuple[np.ndarray, np.ndarray, dict]:
        """``dm/dt`` and outflow rates of the owned cells for edge velocities ``vel``.

        ``vel``: (nf·q, 3) velocity at the projected edge quadrature points.
        Returns ``(net (no,), out (no,), info)``.
        """
        from dolfinx import la

        rho = m_glob / self.areas_glob
        u = np.einsum("fqi,fi->fq", vel.reshape(self.nf, self.q, 3), self.n_e)
        r0 = rho[self.f0g][:, None]
        r1 = rho[self.f1g][:, None]
        if self.order == 2:
            g = self.slopes(rho)
            r0 = np.maximum(r0 + np.einsum("fqi,fi->fq", self.off0, g[self.f0g]), 0.0)
            r1 = np.maximum(r1 + np.einsum("fqi,fi->fq", self.off1, g[self.f1g]), 0.0)
        else:
            r0 = np.broadcast_to(r0, u.shape)
            r1 = np.broadcast_to(r1, u.shape)
        up = np.where(u > 0, r0, r1)
        F = np.sum(self.lw * u * up, axis=1)
        out0 = np.sum(self.lw * np.maximum(u, 0.0) * r0, axis=1)
        out1 = np.sum(self.lw * np.maximum(-u, 0.0) * r1, axis=1)
        nl = self.nl
        arr = self.vec.array
        arr[:] = 0.0
        buf = arr.reshape(-1, 2)
        buf[:, 0] = np.bincount(self.f0, weights=-F, minlength=nl) + np.bincount(
            self.f1, weights=F, minlength=nl)
        buf[:, 1] = np.bincount(self.f0, weights=out0, minlength=nl) + np.bincount(
            self.f1, weights=out1, minlength=nl)
        self.vec.scatter_reverse(la.InsertMode.add)
        own = buf[: self.no]
        return own[:, 0].copy(), own[:, 1].copy(), {"umax": float(np.max(np.abs(u)))}

    def bound(self, m_owned: np.ndarray, out: np.ndarray) -> float:
        """Largest positivity-preserving Euler step ``min_K m_K / out_K`` (global)."""
        pos = out > 0
        loc = float(np.min(m_owned[pos] / out[pos])) if np.any(pos) else math.inf
        return _allmin(self.comm, loc)

    def gather(self, m_owned: np.ndarray) -> np.ndarray:
        """Owned masses -> global array in original order (identical on all ranks)."""
        return self.mesh.gather_owned(m_owned)


#: The finite-volume discretisation under its public name, for the solvers built on it
#: (:mod:`wflow.kinetic` runs one density per slice on it).
FiniteVolumes = _FV


def _allmin(comm: Any, x: float) -> float:
    from mpi4py import MPI

    return x if comm.size == 1 else float(comm.allreduce(x, op=MPI.MIN))


def ssp_step(integrator: Any, m0: np.ndarray, net0: np.ndarray, out0: np.ndarray, dt: float,
             weights: dict[float, Any], rates: Callable[[np.ndarray, float, Any], tuple],
             bound: Callable[[np.ndarray, np.ndarray], float], comm: Any
             ) -> tuple[np.ndarray | None, float]:
    """One SSP step of positivity-checked forward-Euler stages (docs/theory.md §2).

    Parameters
    ----------
    integrator : TimeIntegrator
        Combines the stages (:meth:`~wflow.pde.integrators.TimeIntegrator.step`).
    m0, net0, out0 : arrays
        Owned masses at the step's start and their rates ``dm/dt`` and outflows (any
        shape: ``(no,)`` for one density, ``(S, no)`` for the slices of the kinetic solver).
    dt : float
    weights : dict
        The weight parameters at the stage times ``c ∈ {0, ½, 1}`` (fractions of ``dt``).
    rates : callable
        ``rates(m_own, c, theta) -> (net, out)`` at a later stage.
    bound : callable
        ``bound(m_own, out)``: the largest positivity-preserving Euler step.
    comm : MPI communicator

    Returns
    -------
    (array or None, float)
        The new owned masses (``None`` when a stage would break ``Δt · out_K <= m_K`` or
        ``m_K >= 0`` on any rank) and the smallest stage bound met.
    """
    bmin = bound(m0, out0)

    def euler(m_own: np.ndarray, net: np.ndarray, out: np.ndarray) -> np.ndarray | None:
        ok = np.all(dt * out <= m_own)
        mn = m_own + dt * net
        ok = ok and bool(np.all(mn >= 0))
        ok_all = _allmin(comm, 1.0 if ok else 0.0) > 0
        return mn if ok_all else None

    def stage(m_own: np.ndarray, c: float) -> np.ndarray | None:
        nonlocal bmin
        if c == 0.0 and m_own is m0:
            return euler(m0, net0, out0)
        if c not in weights:
            raise ValueError(f"pde.time_integrator: a stage at t + {c}·dt needs the "
                             "weights there; schedules give them at c = 0, 1/2, 1")
        net, out = rates(m_own, c, weights[c])
        bmin = min(bmin, bound(m_own, out))
        return euler(m_own, net, out)

    return integrator.step(m0, stage), bmin


def check_min_dt(dt: float, min_dt: float, t: float) -> None:
    """``FloatingPointError`` when the step has collapsed below ``min_dt`` (the CFL bound)."""
    if dt < min_dt:
        raise FloatingPointError(
            f"time step {dt:.3e} below min_dt = {min_dt:.1e} at t = {t:.6g}: the "
            "positivity (CFL) bound collapsed (velocity too large for the mesh?)")


def retry_dt(t: float, dt: float, bmin: float, cfl: float) -> float:
    """The step to retry after ``dt`` was rejected (a stage would break positivity), logged."""
    dt_new = min(0.5 * dt, cfl * bmin)
    logger.info("t = %.6g: step %.3e rejected (a stage would break positivity), "
                "retrying with %.3e", t, dt, dt_new)
    return dt_new


def _allsum(comm: Any, x: Any) -> Any:
    return x if comm.size == 1 else comm.allreduce(x)


def _clusters(rho: np.ndarray, m: np.ndarray, nbr: np.ndarray, level: float,
              min_mass: float) -> int:
    """Number of clusters of the density ``rho`` (per cell).

    A cluster is a connected set of cells (``nbr``: cell neighbours) with
    ``ρ ≥ level · max ρ``, counted when it holds at least ``min_mass`` of the mass ``m``.
    """
    from scipy.sparse import coo_matrix
    from scipy.sparse.csgraph import connected_components

    keep = rho >= level * rho.max()
    M = rho.size
    rows = np.repeat(np.arange(M), nbr.shape[1])
    cols = nbr.reshape(-1)
    sel = keep[rows] & keep[cols]
    g = coo_matrix((np.ones(int(sel.sum())), (rows[sel], cols[sel])), shape=(M, M))
    _, lab = connected_components(g, directed=False)
    mass = np.bincount(lab[keep], weights=m[keep], minlength=lab.max() + 1)
    return int(np.sum(mass >= min_mass * m.sum()))
