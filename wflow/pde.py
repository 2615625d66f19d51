"""The transformer PDE on a triangulated sphere: finite volumes on a DOLFINx mesh.

Solves the continuity equation (THEORY.md §2)

    ∂_t ρ + div_S(ρ v[μ_t, Θ_t]) = 0   on S²,

for the transformer velocity ``v`` or its effective-mobility surrogate ``v̂``
(``flow = "transformer" | "surrogate"``, THEORY.md §3), or for a prescribed
velocity field ``v(x, t)`` (used by the rigid-rotation tests).

Discretisation (cell-centred finite volumes = DG0 on the flat-triangle mesh)
-----------------------------------------------------------------------------
* Unknowns: cell masses ``m_K = ρ_K |K|`` (``|K|``, centroids ``c_K`` and all
  facet geometry from DOLFINx, see :mod:`wflow.mesh`).
* Nonlocal velocity: at every edge quadrature point ``x_q`` (Gauss–Legendre on
  the flat edge, radially projected to the sphere ``x̂_q = x_q/|x_q|``),
  ``v(x̂_q) = evaluate(x̂_q, heads, attn, y=ĉ, m=m).v`` (or ``.vhat``) with the
  sources at the projected centroids ``ĉ_K = c_K/|c_K|`` carrying the cell
  masses (one-point centroid rule per cell, second-order accurate). The same
  :func:`wflow.energy.evaluate` and :func:`wflow.kernels.kernel_sums` as the
  particle engine, so every kernel (SA, USA, ReLU), any number of heads and any
  weight schedule (:mod:`wflow.schedules`) work unchanged.
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
  ``Δt · out_K <= m_K`` with ``out_K = Σ_{e ∋ K} |F_e|⁺`` the outflow (THEORY.md §2
  CFL bound). Each step takes ``Δt = min(dt, cfl · min_K m_K/out_K, time to the
  next output / jump)``; every SSP stage is a convex combination of such stages and
  is checked again; a step whose later stage would violate the bound (the
  velocity changed) is rejected and retried with a smaller ``Δt`` (counted in
  ``stats["rejected_steps"]``); a step is never taken with a negative mass.

Diagnostics (same meaning as the particle ones, :mod:`wflow.particles`): the
measure ``μ_h = Σ_K m_K δ_{ĉ_K}`` is fed to the particle formulas
(:func:`~wflow.energy.evaluate` with targets = sources = ``ĉ``, masses ``m``):
``E``, ``E_h``, ``∂_tE`` (``dEdt_w``), ``power``, ``slope2``, ``speed2``, ``G2``,
``b̂`` statistics, the running balance (:class:`~wflow.diagnostics.BalanceAccumulator`,
trapezoid over the accepted steps), attention entropies of the softmax rows over
the cells (entropy of ``p_KL = m_L e^{s_KL}/Z_K``, ``<= log M``), the mass-weighted
mean inner product and a cluster count (connected components of the cell graph
restricted to ``{ρ >= cluster_level · max ρ}`` holding at least
``cluster_min_mass`` of the mass).

Parallel: run the same code under ``mpirun -n P``. DOLFINx distributes the mesh
(``GhostMode.shared_facet``); each rank computes the fluxes of its facets; the
nonlocal sums need every cell mass, so masses (and order-2 slopes) are
all-gathered in the original cell order every stage (``O(M)`` communication
against ``O(M²)`` work), and flux contributions to ghost cells are sent to their
owners with a DOLFINx reverse scatter. The result equals the serial one to
round-off.
"""

from __future__ import annotations

import logging
import math
import time
import warnings
from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any, Literal, NamedTuple

import numpy as np

from .diagnostics import BalanceAccumulator, head_rates, mean_inner_product, radial_shadows
from .energy import (
    FieldEval,
    dE_dt_weights,
    energy_gradient_A,
    evaluate,
    head_energies,
    ito_correction,
    slope_terms,
)
from .heads import Attention, Heads
from .io import finish_history
from .kernels import BACKENDS, KernelLog, kernel_sums, plan_kernel
from .mesh import SphereMesh
from .schedules import Schedule, Static
from .sphere import normalize

__all__ = [
    "PDEOptions",
    "PDEState",
    "PDEResult",
    "TIME_INTEGRATORS",
    "LIMITERS",
    "initial_density",
    "iterate_pde",
    "solve_pde",
    "rotation_velocity",
    "pde_options_from_dict",
    "density_spec_from_scenario",
    "PDE_SPEC",
    "DENSITY_SPEC",
]

logger = logging.getLogger(__name__)

#: Time integrators: name -> (declared order, stages).
TIME_INTEGRATORS = {"euler": (1, 1), "ssprk2": (2, 2), "ssprk3": (3, 3)}
#: Slope limiters of the order-2 reconstruction (all followed by the positivity scaling).
LIMITERS = ("barth_jespersen", "venkatakrishnan", "positivity")

VelocityField = Callable[[np.ndarray, float], np.ndarray]


# =============================================================================== options
@dataclass(frozen=True)
class PDEOptions:
    """Options of :func:`solve_pde` (keyword-only in the API).

    Parameters
    ----------
    T : float
        Final time.
    dt : float
        Upper bound of the time step (the step is adaptive, from the CFL bound).
    order : {1, 2}
        Spatial order: upwind (1) or limited linear reconstruction (2).
    time_integrator : {"auto", "euler", "ssprk2", "ssprk3"}
        ``auto``: Euler for order 1, SSP-RK2 for order 2.
    limiter : {"barth_jespersen", "venkatakrishnan", "positivity"}
        Slope limiter of order 2 (each followed by the positivity scaling).
    venkat_k : float
        Venkatakrishnan's constant ``K`` (``ε² = (K h_K)³``).
    cfl : float
        Safety factor in ``(0, 1]`` times the positivity bound ``min_K m_K / out_K``.
    flow : {"transformer", "surrogate"}
        Velocity ``v`` or ``v̂`` (ignored for a prescribed velocity).
    quad_points : int
        Gauss points per edge (1 = midpoint, enough for order 2; 2 or 3).
    n_saves : int
        Number of equally spaced output times in ``[0, T]`` (both ends included).
    balance : bool
        Evaluate the energy integrands at every step (running EDI balance).
        Costs one cell-to-cell evaluation (``M²``) per step.
    entropy, head_rates, clusters : bool
        Extra diagnostics at the output times.
    cluster_level : float
        Cells with ``ρ >= cluster_level · max ρ`` form the cluster graph.
    cluster_min_mass : float
        Components with less mass are not counted as clusters.
    max_steps : int
        Give up (status ``"max_steps"``) after this many accepted steps.
    min_dt : float
        Give up (status ``"failed"``) if the positivity bound forces a smaller step.
    seed : int
        Seed of the weight noise (stochastic schedules).
    progress : bool or None
        tqdm progress bar (``None``: only on a TTY, rank 0).
    kernel_backend : {"auto", "numpy", "direct", "fastsum"}
        Back-end of the attention sums. ``auto`` is resolved once per run from the
        global problem (all edge quadrature points against all cells), so serial and
        MPI runs use the same back-end; the choice and its error estimate are in
        ``stats["kernel"]``.
    kernel_tol : float
        Relative tolerance of the fast summation.
    """

    T: float = 1.0
    dt: float = 1e-2
    order: int = 1
    time_integrator: str = "auto"
    limiter: str = "barth_jespersen"
    venkat_k: float = 5.0
    cfl: float = 0.9
    flow: Literal["transformer", "surrogate"] = "transformer"
    quad_points: int = 1
    n_saves: int = 11
    balance: bool = True
    entropy: bool = False
    head_rates: bool = False
    clusters: bool = True
    cluster_level: float = 0.1
    cluster_min_mass: float = 0.01
    max_steps: int = 1_000_000
    min_dt: float = 1e-12
    seed: int = 0
    progress: bool | None = None
    kernel_backend: str = "auto"
    kernel_tol: float = 1e-10

    def __post_init__(self) -> None:
        def bad(key: str, what: str) -> ValueError:
            return ValueError(f"pde.{key}: {what}, got {getattr(self, key)!r}")

        if self.kernel_backend not in BACKENDS:
            raise bad("kernel_backend", f"must be one of {list(BACKENDS)}")
        if not self.kernel_tol > 0:
            raise bad("kernel_tol", "must be > 0")

        if not (isinstance(self.T, (int, float)) and math.isfinite(self.T) and self.T > 0):
            raise bad("T", "must be a finite number > 0")
        if not (isinstance(self.dt, (int, float)) and math.isfinite(self.dt) and self.dt > 0):
            raise bad("dt", "must be a finite number > 0")
        if self.order not in (1, 2):
            raise bad("order", "must be 1 or 2")
        if self.time_integrator not in ("auto", *TIME_INTEGRATORS):
            raise bad("time_integrator", f"must be one of {['auto', *TIME_INTEGRATORS]}")
        if self.limiter not in LIMITERS:
            raise bad("limiter", f"must be one of {list(LIMITERS)}")
        if not 0 < self.cfl <= 1:
            raise bad("cfl", "must lie in (0, 1]")
        if self.flow not in ("transformer", "surrogate"):
            raise bad("flow", "must be 'transformer' or 'surrogate'")
        if self.quad_points not in (1, 2, 3):
            raise bad("quad_points", "must be 1, 2 or 3")
        if int(self.n_saves) < 2:
            raise bad("n_saves", "must be >= 2 (the initial and final times)")
        if not 0 <= self.cluster_level < 1:
            raise bad("cluster_level", "must lie in [0, 1)")
        if not 0 <= self.cluster_min_mass < 1:
            raise bad("cluster_min_mass", "must lie in [0, 1)")
        if int(self.max_steps) < 1:
            raise bad("max_steps", "must be >= 1")
        if not self.venkat_k > 0:
            raise bad("venkat_k", "must be > 0")

    @property
    def integrator(self) -> str:
        """The time integrator actually used (``auto`` resolved)."""
        if self.time_integrator != "auto":
            return self.time_integrator
        return "euler" if self.order == 1 else "ssprk2"


# =============================================================================== initial data
def _vmf_density(x: np.ndarray, means: np.ndarray, kappas: np.ndarray,
                 weights: np.ndarray) -> np.ndarray:
    """Mixture of von Mises–Fisher densities on S² (w.r.t. area), overflow-safe."""
    out = np.zeros(x.shape[0])
    for mu, k, w in zip(means, kappas, weights, strict=True):
        mu = mu / np.linalg.norm(mu)
        if k == 0:
            out += w / (4 * math.pi)
        else:  # κ/(4π sinh κ) e^{κ μ·x} = κ/(2π(1 − e^{−2κ})) e^{κ(μ·x − 1)}
            out += w * k / (2 * math.pi * -math.expm1(-2 * k)) * np.exp(k * (x @ mu - 1.0))
    return out


def _density_values(points: np.ndarray, spec: Any, base_dir: Path | None,
                    num_global: int) -> np.ndarray:
    """Unnormalised density at the projected centroids (global order)."""
    if callable(spec):
        vals = spec(points)
        where = "density.function"
    elif isinstance(spec, np.ndarray):
        vals = spec
        where = "density (array)"
    else:
        if isinstance(spec, str):
            spec = {"type": spec}
        if not isinstance(spec, Mapping):
            raise ValueError(f"density: expected 'uniform', a mapping, an array or a callable, "
                             f"got {type(spec).__name__}")
        typ = spec.get("type", "uniform")
        where = f"density ({typ})"
        if typ == "uniform":
            vals = np.ones(points.shape[0])
        elif typ == "vmf":
            if spec.get("means") is None:
                raise ValueError("density.means: required for type = 'vmf'")
            means = np.atleast_2d(np.asarray(spec["means"], dtype=float))
            if means.shape[1] != 3:
                raise ValueError(f"density.means: rows must have length 3, got {means.shape}")
            kap = spec.get("kappas")
            kap = np.broadcast_to(np.asarray(10.0 if kap is None else kap, dtype=float),
                                  (means.shape[0],))
            w = spec.get("weights")
            w = np.full(means.shape[0], 1.0 / means.shape[0]) if w is None else np.asarray(
                w, dtype=float)
            if w.shape != (means.shape[0],) or np.any(w < 0) or np.any(kap < 0):
                raise ValueError("density.weights/kappas: one non-negative value per mean")
            vals = _vmf_density(points, means, kap, w / w.sum())
        elif typ == "cap":
            c = np.asarray(spec.get("center", [0.0, 0.0, 1.0]), dtype=float)
            if c.shape != (3,) or not np.linalg.norm(c) > 0:
                raise ValueError(f"density.center: expected a non-zero 3-vector, got {c}")
            r = float(spec.get("radius", 0.5))
            if not 0 < r <= math.pi:
                raise ValueError(f"density.radius: angular radius must lie in (0, π], got {r}")
            ang = np.arccos(np.clip(points @ (c / np.linalg.norm(c)), -1.0, 1.0))
            vals = (ang <= r).astype(float)
        elif typ == "file":
            f = spec.get("file")
            if f is None:
                raise ValueError("density.file: required for type = 'file' (.npy of cell values)")
            p = Path(f)
            if not p.is_absolute() and base_dir is not None:
                p = base_dir / p
            if not p.is_file():
                raise FileNotFoundError(f"density.file: file not found: {p}")
            vals = np.load(p)
            where = f"density.file {p.name}"
        elif typ == "callable":
            from .schedules import load_callable

            fn = spec.get("function")
            if fn is None:
                raise ValueError("density.function: required for type = 'callable' "
                                 "('package.module:function' mapping points (M, 3) to (M,))")
            vals = load_callable(fn, name="density.function")(points)
            where = f"density.function {fn}"
        else:
            raise ValueError(f"density.type: must be one of ['uniform', 'vmf', 'cap', 'file', "
                             f"'callable'], got {typ!r}")
    vals = np.asarray(vals, dtype=np.float64)
    if vals.shape != (num_global,):
        raise ValueError(f"{where}: expected {num_global} cell values, got shape {vals.shape}")
    if not np.all(np.isfinite(vals)):
        raise ValueError(f"{where}: contains NaN or Inf")
    if np.any(vals < 0):
        raise ValueError(f"{where}: density is negative in {int(np.sum(vals < 0))} cells "
                         f"(min {vals.min():.3e})")
    return vals


def initial_density(mesh: SphereMesh, spec: Any = "uniform", *,
                    base_dir: str | Path | None = None) -> np.ndarray:
    """Initial cell densities, normalised to mass 1 (global original cell order).

    Parameters
    ----------
    mesh : SphereMesh
    spec : str, mapping, (M,) array or callable
        ``"uniform"``; ``{"type": "vmf", "means": (C, 3), "kappas": (C,), "weights": (C,)}``
        (mixture of ``κ/(4π sinh κ) e^{κ μ·x}``); ``{"type": "cap", "center": (3,),
        "radius": angle}`` (indicator of a spherical cap); ``{"type": "file", "file":
        "rho.npy"}`` (cell values in the mesh file's cell order); ``{"type": "callable",
        "function": "pkg.mod:fn"}`` or a Python callable mapping points ``(M, 3)`` on the
        sphere to densities ``(M,)``. Point values are taken at the projected
        centroids ``ĉ_K``.
    base_dir : path, optional
        Directory for relative ``file`` paths.

    Returns
    -------
    (M,) array
        ``ρ_K >= 0`` with ``Σ_K ρ_K |K| = 1``.
    """
    chat = normalize(mesh.gather_owned(mesh.centroids))
    areas = mesh.gather_owned(mesh.areas)
    vals = _density_values(chat, spec, None if base_dir is None else Path(base_dir),
                           mesh.num_global)
    mass = float(vals @ areas)
    if not mass > 0:
        raise ValueError("density: total mass is zero (the density vanishes on every cell)")
    return vals / mass


def rotation_velocity(omega: np.ndarray | tuple[float, float, float]) -> VelocityField:
    """Rigid rotation ``v(x) = ω × x`` (tangent and divergence-free on S²)."""
    w = np.asarray(omega, dtype=np.float64)
    if w.shape != (3,):
        raise ValueError(f"omega: expected a 3-vector, got shape {w.shape}")

    def v(x: np.ndarray, t: float) -> np.ndarray:
        return np.cross(np.broadcast_to(w, x.shape), x)

    return v


# =============================================================================== discretisation
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
        lim = self.opts.limiter
        with np.errstate(divide="ignore", invalid="ignore"):
            if lim == "barth_jespersen":
                bound = np.where(delta > 0, (rmax - rK)[:, None], (rmin - rK)[:, None])
                ratio = np.where(np.abs(delta) > 0, bound / delta, np.inf)
                phi = np.minimum(1.0, ratio.min(axis=1))
            elif lim == "venkatakrishnan":
                # Venkatakrishnan (1995) with ε² = (K h_K)³ ρ̄² (scale-free in ρ)
                dp = np.where(delta > 0, (rmax - rK)[:, None], (rmin - rK)[:, None])
                eps2 = ((self.opts.venkat_k * self.hK) ** 3 * self.rho_ref**2)[:, None]
                num = (dp * dp + eps2) + 2.0 * delta * dp
                den = dp * dp + 2.0 * delta * delta + delta * dp + eps2
                ph = np.where(np.abs(delta) > 0, num / den, 1.0)
                phi = np.clip(ph.min(axis=1), 0.0, 1.0)
            else:
                phi = np.ones(self.no)
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


def _allmin(comm: Any, x: float) -> float:
    from mpi4py import MPI

    return x if comm.size == 1 else float(comm.allreduce(x, op=MPI.MIN))


def _allsum(comm: Any, x: Any) -> Any:
    return x if comm.size == 1 else comm.allreduce(x)


# =============================================================================== velocity models
class _Nonlocal:
    """Transformer / surrogate velocity from the heads of a schedule."""

    def __init__(self, schedule: Schedule, attn: Attention, flow: str, backend: str = "auto",
                 tol: float = 1e-10) -> None:
        self.schedule = schedule
        self.attn = attn
        self.flow = flow
        self.backend = backend
        self.tol = tol
        self.log = KernelLog()
        self.n_evals = 0
        self.eval_time = 0.0

    def __call__(self, x: np.ndarray, t: float, theta: np.ndarray, chat: np.ndarray,
                 m_glob: np.ndarray) -> np.ndarray:
        t0 = time.perf_counter()
        fe = evaluate(x, self.schedule.heads_at(theta), self.attn, y=chat, m=m_glob,
                      backend=self.backend, tol=self.tol, log=self.log)
        self.n_evals += 1
        self.eval_time += time.perf_counter() - t0
        return fe.v if self.flow == "transformer" else fe.vhat


class _Prescribed:
    def __init__(self, fn: VelocityField) -> None:
        self.fn = fn
        self.n_evals = 0
        self.eval_time = 0.0

    def __call__(self, x: np.ndarray, t: float, theta: Any, chat: np.ndarray,
                 m_glob: np.ndarray) -> np.ndarray:
        t0 = time.perf_counter()
        v = np.asarray(self.fn(x, t), dtype=np.float64)
        if v.shape != x.shape:
            raise ValueError(f"velocity: expected shape {x.shape}, got {v.shape}")
        self.n_evals += 1
        self.eval_time += time.perf_counter() - t0
        return v


# =============================================================================== states
class PDEState(NamedTuple):
    """One accepted time level (yielded by :func:`iterate_pde`).

    Attributes
    ----------
    t : float
    step : int
        Number of accepted steps so far.
    dt : float
        Step that led here (0 for the initial state).
    m : (M,) array
        Cell masses, global original order (the same on every rank).
    rho : (M,) array
        ``m / |K|``.
    theta : array or None
        Weight parameters ``θ(t)`` (``None`` for a prescribed velocity).
    heads : Heads or None
    field : FieldEval or None
        Cell-level field at the owned projected centroids (when measured).
    integrands : dict or None
        ``E, dEdt_w, power, slope2, speed2, G2, ito`` (when measured).
    dtheta_noise : array or None
        ``θ_{k+1} − θ_k − Δt·drift`` of the *next* step (martingale term).
    is_save : bool
        ``t`` is one of the output times.
    pre_jump : dict or None
        Integrands at ``t⁻`` when the weights jump at ``t`` (``integrands`` hold ``θ⁺``).
    """

    t: float
    step: int
    dt: float
    m: np.ndarray
    rho: np.ndarray
    theta: np.ndarray | None
    heads: Heads | None
    field: FieldEval | None
    integrands: dict | None
    dtheta_noise: np.ndarray | None
    is_save: bool
    pre_jump: dict | None = None


def _global_backend(fv: _FV, schedule: Schedule, attn: Attention, tol: float) -> str:
    """Resolve ``auto`` once from the global problem (rank 0 plans, every rank follows).

    The plan depends on the targets (all edge quadrature points), the sources (the cell
    centroids, fixed) and the initial heads; taking it from the global problem keeps
    serial and parallel runs on the same back-end.
    """
    q_all = fv.comm.gather(fv.qhat, root=0)
    choice = None
    if fv.comm.rank == 0:
        heads = schedule.heads_at(schedule.initial_theta())
        plan = plan_kernel(np.concatenate(q_all), fv.chat_glob, heads.Q, heads.K,
                           beta=attn.beta, kind=attn.kind, tol=tol)
        choice = "fastsum" if plan.backend == "fastsum" else "direct"
        logger.info("pde: kernel back-end %s (%s)", choice, plan.reason)
    return fv.comm.bcast(choice, root=0)


class _Run:
    """Shared state of one run (solver objects, counters)."""

    def __init__(self, mesh: SphereMesh, opts: PDEOptions, schedule: Schedule | None,
                 attn: Attention | None, velocity: VelocityField | None) -> None:
        self.mesh = mesh
        self.opts = opts
        self.fv = _FV(mesh, opts)
        self.schedule = schedule
        self.attn = attn
        if velocity is not None:
            self.vel: _Nonlocal | _Prescribed = _Prescribed(velocity)
        else:
            assert schedule is not None and attn is not None
            backend = opts.kernel_backend
            if backend == "auto":
                backend = _global_backend(self.fv, schedule, attn, opts.kernel_tol)
            self.vel = _Nonlocal(schedule, attn, opts.flow, backend, opts.kernel_tol)
        self.rejected = 0
        self.measure_time = 0.0
        self.rhs_time = 0.0
        self.min_bound = math.inf
        self.umax = 0.0

    # ------------------------------------------------------------------ cell-level terms
    def measure(self, m_glob: np.ndarray, t: float, theta: np.ndarray
                ) -> tuple[Heads, FieldEval, dict]:
        """Energy integrands at the state (particle formulas on ``Σ m_K δ_{ĉ_K}``)."""
        t0 = time.perf_counter()
        fv, sch, attn = self.fv, self.schedule, self.attn
        assert sch is not None and attn is not None
        comm = fv.comm
        heads = sch.heads_at(theta)
        x = fv.chat_owned
        mo = m_glob[fv.orig_owned]
        vel = self.vel
        kw = ({"backend": vel.backend, "tol": vel.tol, "log": vel.log}
              if isinstance(vel, _Nonlocal) else {})
        fe = evaluate(x, heads, attn, y=fv.chat_glob, m=m_glob, **kw)
        vel = fe.v if self.opts.flow == "transformer" else fe.vhat
        st = slope_terms(x, mo, fe, heads, vel)
        E_h = head_energies(fe, mo, attn)
        dEdt = 0.0 if sch.static else dE_dt_weights(x, mo, fe, heads, sch.A_dot(theta, t), attn)
        loc = np.concatenate([[heads.w @ E_h, dEdt, st.power, st.slope2, st.speed2, st.G2],
                              E_h])
        tot = _allsum(comm, loc)
        ito = 0.0
        if sch.stochastic:
            ito = ito_correction(fv.chat_glob, m_glob, heads, attn, sch.sigma(t),
                                 symmetric_noise=sch.symmetric_noise)
        terms = {"E": float(tot[0]), "dEdt_w": float(tot[1]), "power": float(tot[2]),
                 "slope2": float(tot[3]), "speed2": float(tot[4]), "G2": float(tot[5]),
                 "ito": float(ito), "E_h": np.asarray(tot[6:])}
        self.measure_time += time.perf_counter() - t0
        return heads, fe, terms

    # ------------------------------------------------------------------ one step
    def stage_rates(self, m_glob: np.ndarray, t: float, theta: Any
                    ) -> tuple[np.ndarray, np.ndarray]:
        t0 = time.perf_counter()
        v = self.vel(self.fv.qhat, t, theta, self.fv.chat_glob, m_glob)
        net, out, info = self.fv.rates(m_glob, v)
        self.umax = max(self.umax, info["umax"])
        self.rhs_time += time.perf_counter() - t0
        return net, out

    def try_step(self, m_glob: np.ndarray, net0: np.ndarray, out0: np.ndarray, t: float,
                 dt: float, thetas: tuple) -> tuple[np.ndarray | None, float]:
        """Attempt one SSP step; returns (new owned masses or None, smallest stage bound)."""
        fv = self.fv
        m0 = m_glob[fv.orig_owned]
        integ = self.opts.integrator
        th0, th_mid, th1 = thetas

        def euler(m_own: np.ndarray, net: np.ndarray, out: np.ndarray) -> np.ndarray | None:
            ok = np.all(dt * out <= m_own)
            mn = m_own + dt * net
            ok = ok and bool(np.all(mn >= 0))
            ok_all = _allmin(fv.comm, 1.0 if ok else 0.0) > 0
            return mn if ok_all else None

        bmin = fv.bound(m0, out0)
        m1 = euler(m0, net0, out0)
        if m1 is None or integ == "euler":
            return m1, bmin
        g1 = fv.gather(m1)
        net1, out1 = self.stage_rates(g1, t + dt, th1)
        bmin = min(bmin, fv.bound(m1, out1))
        e1 = euler(m1, net1, out1)
        if e1 is None:
            return None, bmin
        if integ == "ssprk2":
            return 0.5 * m0 + 0.5 * e1, bmin
        m2 = 0.75 * m0 + 0.25 * e1
        g2 = fv.gather(m2)
        net2, out2 = self.stage_rates(g2, t + 0.5 * dt, th_mid)
        bmin = min(bmin, fv.bound(m2, out2))
        e2 = euler(m2, net2, out2)
        if e2 is None:
            return None, bmin
        return m0 / 3.0 + 2.0 / 3.0 * e2, bmin


def _as_schedule(heads_or_schedule: Heads | Schedule | None) -> Schedule | None:
    if heads_or_schedule is None:
        return None
    if isinstance(heads_or_schedule, Heads):
        return Static.of(heads_or_schedule)
    if isinstance(heads_or_schedule, Schedule):
        return heads_or_schedule
    raise ValueError("heads: expected Heads or a Schedule, got "
                     f"{type(heads_or_schedule).__name__}")


def _check_inputs(schedule: Schedule | None, attn: Attention | None,
                  velocity: VelocityField | None) -> None:
    if velocity is None and (schedule is None or attn is None):
        raise ValueError("heads/attention: required unless a prescribed velocity is given")
    if velocity is not None and schedule is not None:
        raise ValueError("velocity: give either a prescribed velocity or heads, not both")
    if schedule is not None and schedule.heads_at(schedule.initial_theta()).d != 3:
        raise ValueError("heads: the mesh solver works on S² (d = 3), got heads of dimension "
                         f"{schedule.heads_at(schedule.initial_theta()).d}")
    if velocity is not None and not callable(velocity):
        raise ValueError("velocity: must be a callable v(x (n, 3), t) -> (n, 3)")


def iterate_pde(mesh: SphereMesh, rho0: np.ndarray, heads_or_schedule: Heads | Schedule | None
                = None, attn: Attention | None = None, *, velocity: VelocityField | None = None,
                options: PDEOptions | None = None, measure: bool | None = None,
                _run: _Run | None = None) -> Iterator[PDEState]:
    """Generate the accepted time levels ``(t_k, state_k)`` of the FV solution.

    Parameters
    ----------
    mesh : SphereMesh
    rho0 : (M,) array
        Initial cell densities in the mesh's original cell order (e.g. from
        :func:`initial_density`); must be ``>= 0`` with positive mass.
    heads_or_schedule, attn
        Static heads or a :class:`~wflow.schedules.Schedule`, and the attention.
    velocity : callable, optional
        Prescribed velocity ``v(x (n, 3), t) -> (n, 3)`` instead of the nonlocal one.
    options : PDEOptions
    measure : bool, optional
        Compute the energy integrands at every level (default ``options.balance``);
        the output levels are always measured for a nonlocal velocity.

    Yields
    ------
    PDEState
        The initial state, then one state per accepted step; the last has ``t = T``.
        Raises ``FloatingPointError`` if the positivity bound collapses below
        ``options.min_dt`` or values become non-finite.
    """
    opts = options or PDEOptions()
    schedule = _as_schedule(heads_or_schedule)
    _check_inputs(schedule, attn, velocity)
    run = _run or _Run(mesh, opts, schedule, attn, velocity)
    fv = run.fv
    rho0 = np.asarray(rho0, dtype=np.float64)
    if rho0.shape != (fv.M,):
        raise ValueError(f"rho0: expected {fv.M} cell values, got shape {rho0.shape}")
    if not np.all(np.isfinite(rho0)) or np.any(rho0 < 0):
        raise ValueError("rho0: densities must be finite and >= 0")
    m_glob = rho0 * fv.areas_glob
    if not m_glob.sum() > 0:
        raise ValueError("rho0: total mass must be > 0")
    measure = opts.balance if measure is None else measure
    nonlocal_ = schedule is not None
    tol = 1e-12 * opts.T
    saves = np.linspace(0.0, opts.T, int(opts.n_saves))
    jumps = [float(j) for j in (schedule.jump_times if schedule else ()) if 0 < j < opts.T]
    stops: list[float] = []
    for s in sorted([*saves.tolist(), *jumps]):  # merge near-duplicates (a jump at a save)
        if not stops or s - stops[-1] > tol:
            stops.append(s)
        elif s in jumps:
            stops[-1] = s
    rng = np.random.default_rng(opts.seed)
    theta = schedule.initial_theta() if schedule else None

    def state(t: float, k: int, dt: float, m: np.ndarray, th: Any, is_save: bool,
              dnoise: Any = None) -> PDEState:
        heads = fe = terms = None
        if nonlocal_ and (measure or is_save):
            heads, fe, terms = run.measure(m, t, th)
        elif nonlocal_:
            heads = schedule.heads_at(th)
        return PDEState(t, k, dt, m, m / fv.areas_glob, th, heads, fe, terms, dnoise, is_save)

    t, k, istop = 0.0, 0, 1
    cur = state(0.0, 0, 0.0, m_glob, theta, True)
    net, out = run.stage_rates(m_glob, t, theta)
    pending = cur
    while True:
        if istop >= len(stops):
            yield pending
            return
        if k >= opts.max_steps:
            yield pending
            raise _MaxSteps(f"max_steps = {opts.max_steps} reached at t = {t:.6g} < T")
        t_stop = stops[istop]
        bound = fv.bound(m_glob[fv.orig_owned], out)
        dt = min(opts.dt, opts.cfl * bound, t_stop - t)
        if t_stop - t - dt <= tol:
            dt = t_stop - t
        while True:
            if dt < opts.min_dt:
                raise FloatingPointError(
                    f"time step {dt:.3e} below min_dt = {opts.min_dt:.1e} at t = {t:.6g}: the "
                    "positivity (CFL) bound collapsed (velocity too large for the mesh?)")
            if schedule is not None:
                th_mid, th_new = schedule.advance(theta, t, dt, rng)
            else:
                th_mid = th_new = None
            m_new, bmin = run.try_step(m_glob, net, out, t, dt, (theta, th_mid, th_new))
            run.min_bound = min(run.min_bound, bmin)
            if m_new is not None:
                break
            run.rejected += 1
            dt_new = min(0.5 * dt, opts.cfl * bmin)
            logger.info("t = %.6g: step %.3e rejected (a stage would break positivity), "
                        "retrying with %.3e", t, dt, dt_new)
            dt = dt_new
        dnoise = None
        if schedule is not None and schedule.stochastic:
            dnoise = th_new - theta - dt * schedule.drift(theta, t)
        # the state at t carries the noise increment of the step leaving it
        yield pending._replace(dtheta_noise=dnoise)
        landed = abs((t + dt) - t_stop) <= tol or dt == t_stop - t
        t = t_stop if landed else t + dt
        k += 1
        m_glob = fv.gather(m_new)
        if not np.all(np.isfinite(m_glob)):
            raise FloatingPointError(f"non-finite cell masses at t = {t:.6g}")
        theta = th_new
        is_save = landed and bool(np.any(np.abs(saves - t) <= tol))
        pending = state(t, k, dt, m_glob, theta, is_save)
        if landed and schedule is not None and any(abs(t - j) <= tol for j in jumps):
            before = pending.integrands
            theta = schedule.after_jump(theta, t)
            pending = state(t, k, dt, m_glob, theta, is_save)._replace(pre_jump=before)
        if landed:
            istop += 1
        if istop < len(stops):
            net, out = run.stage_rates(m_glob, t, theta)


class _MaxSteps(RuntimeError):
    pass


# =============================================================================== result
@dataclass(frozen=True)
class PDEResult:
    """Result of :func:`solve_pde`.

    Attributes
    ----------
    status : str
        ``"success"``, ``"max_steps"`` or ``"failed"`` (see ``message``).
    message : str
    options : PDEOptions
    t : (S,) array
        Output times reached.
    rho : (S, M) array
        Cell densities at the output times (mesh's original cell order).
    mass : (S,) array
        ``Σ_K ρ_K |K|`` at the output times.
    history : dict of arrays
        Diagnostics at the output times (``(S,)`` scalars, ``(S, H)`` per head).
    steps : dict of arrays
        Per accepted step: ``t``, ``dt`` and (with ``balance``) the energy integrands.
    balance : dict
        Final balance terms and residuals (``chain``, ``edi``, ``g2``; see
        :class:`~wflow.diagnostics.BalanceAccumulator`).
    centroids, areas : arrays
        Flat centroids ``(M, 3)`` and areas ``(M,)`` of the cells (original order).
    stats : dict
        Steps, rejected steps, velocity evaluations, timings, positivity and mass errors.
    sign : int
        ``+1`` ascent / ``−1`` descent for value-aligned symmetric heads, else 0.
    """

    status: str
    message: str
    options: PDEOptions
    t: np.ndarray
    rho: np.ndarray
    mass: np.ndarray
    history: dict[str, np.ndarray]
    steps: dict[str, np.ndarray]
    balance: dict[str, float]
    centroids: np.ndarray
    areas: np.ndarray
    stats: dict[str, Any] = field(default_factory=dict)
    sign: int = 0

    @property
    def masses(self) -> np.ndarray:
        """Cell masses ``ρ_K |K|`` at the output times, ``(S, M)``."""
        return self.rho * self.areas[None, :]

    def summary(self) -> dict[str, Any]:
        """JSON-ready summary (final diagnostics, balance, stats)."""
        final = {k: np.asarray(v[-1]).tolist() for k, v in self.history.items() if len(v)}
        return {"status": self.status, "message": self.message,
                "options": {k: getattr(self.options, k) for k in self.options.__dataclass_fields__},
                "integrator": self.options.integrator, "t_final": float(self.t[-1]),
                "final": final, "balance": self.balance, "stats": self.stats,
                "sign": self.sign}


def _clusters(rho: np.ndarray, m: np.ndarray, nbr: np.ndarray, level: float,
              min_mass: float) -> int:
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


def _entropy(run: _Run, heads: Heads, m_glob: np.ndarray) -> np.ndarray:
    """Mass-weighted mean over cells K of the softmax-row entropies over cells, per head."""
    fv, attn = run.fv, run.attn
    assert attn is not None
    x = fv.chat_owned
    sums = kernel_sums(x, fv.chat_glob, m_glob, heads.Q, heads.K, beta=attn.beta,
                       kind="softmax", scores=True)
    mlogm = np.where(m_glob > 0, m_glob * np.log(np.where(m_glob > 0, m_glob, 1.0)), 0.0)
    zl = kernel_sums(x, fv.chat_glob, mlogm, heads.Q, heads.K, beta=attn.beta,
                     kind="softmax").Z
    ent = np.log(sums.Z) - (sums.S + zl) / sums.Z  # (H, no)
    return np.asarray(_allsum(fv.comm, ent @ m_glob[fv.orig_owned]))


def _record(rows: dict[str, list], run: _Run, st: PDEState, acc: BalanceAccumulator | None
            ) -> None:
    fv, opts = run.fv, run.opts

    def put(key: str, val: Any) -> None:
        rows.setdefault(key, []).append(val)

    put("t", st.t)
    put("mass", float(st.m.sum()))
    put("rho_min", float(st.rho.min()))
    put("rho_max", float(st.rho.max()))
    put("mean_inner", mean_inner_product(fv.chat_glob, st.m))
    if opts.clusters:
        put("n_clusters", float(_clusters(st.rho, st.m, fv.nbr_glob, opts.cluster_level,
                                          opts.cluster_min_mass)))
    if st.integrands is None:
        return
    terms, fe, heads = st.integrands, st.field, st.heads
    assert fe is not None and heads is not None
    put("E", terms["E"])
    put("E_h", terms["E_h"])
    for key in ("dEdt_w", "power", "slope2", "speed2", "G2", "ito"):
        put(key, terms[key])
    mo = st.m[fv.orig_owned]
    comm = fv.comm
    from mpi4py import MPI

    bsum = _allsum(comm, float(mo @ fe.bhat))
    bmin = fe.bhat.min() if fe.bhat.size else math.inf
    bmax = fe.bhat.max() if fe.bhat.size else -math.inf
    if comm.size > 1:
        bmin = comm.allreduce(bmin, op=MPI.MIN)
        bmax = comm.allreduce(bmax, op=MPI.MAX)
    put("bhat_mean", float(bsum))
    put("bhat_min", float(bmin))
    put("bhat_max", float(bmax))
    if acc is not None:
        res = acc.residuals()
        for key in ("chain", "edi", "g2"):
            put(f"balance_{key}", res[key])
    if opts.head_rates:
        hr = head_rates(fv.chat_owned, mo, fe, heads)
        put("dEh_dt", np.asarray(_allsum(comm, hr.total)))
        put("dEh_own", np.asarray(_allsum(comm, hr.own)))
        put("dEh_cross_direct", np.asarray(_allsum(comm, hr.cross_direct)))
        put("dEh_cross_radial", np.asarray(_allsum(comm, hr.cross_radial)))
        put("radial_shadow", np.asarray(_allsum(comm, radial_shadows(fv.chat_owned, fe) @ mo)))
    if opts.entropy:
        put("entropy", _entropy(run, heads, st.m))


def _progress(total: float, enabled: bool | None, rank: int):
    import sys

    enabled = (sys.stderr.isatty() if enabled is None else enabled) and rank == 0
    if not enabled:
        return None
    from tqdm import tqdm

    return tqdm(total=total, desc="pde", unit="t", leave=False,
                bar_format="{l_bar}{bar}| t={n:.4g}/{total:.4g} [{elapsed}<{remaining}]")


def solve_pde(mesh: SphereMesh, rho0: np.ndarray | Any = "uniform",
              heads_or_schedule: Heads | Schedule | None = None, attn: Attention | None = None,
              *, velocity: VelocityField | None = None, options: PDEOptions | None = None,
              **kwargs: Any) -> PDEResult:
    """Solve the transformer PDE (or transport by a prescribed velocity) on a sphere mesh.

    Parameters
    ----------
    mesh : SphereMesh
        From :func:`wflow.mesh.load_mesh`.
    rho0 : (M,) array or density spec
        Initial densities (original cell order) or anything :func:`initial_density`
        accepts; normalised to mass 1.
    heads_or_schedule : Heads or Schedule, optional
        Static heads or a weight schedule (nonlocal velocity).
    attn : Attention, optional
    velocity : callable, optional
        Prescribed velocity ``v(x, t)`` instead of the nonlocal one.
    options : PDEOptions, optional
        Keyword arguments override its fields.

    Returns
    -------
    PDEResult
        ``status == "success"`` only if ``T`` was reached with finite values.
    """
    opts = options or PDEOptions()
    if kwargs:
        opts = replace(opts, **kwargs)
    r0 = initial_density(mesh, rho0)
    schedule = _as_schedule(heads_or_schedule)
    _check_inputs(schedule, attn, velocity)
    run = _Run(mesh, opts, schedule, attn, velocity)
    fv = run.fv
    sign = 0
    if schedule is not None:
        h0 = schedule.heads_at(schedule.initial_theta())
        sign = h0.value_alignment() if h0.is_symmetric() else 0
    rows: dict[str, list] = {}
    rhos: list[np.ndarray] = []
    steps: dict[str, list] = {}
    acc: BalanceAccumulator | None = None
    prev: PDEState | None = None
    status, message = "success", ""
    mass0 = float(r0 @ fv.areas_glob)
    max_mass_err = 0.0
    min_rho = math.inf
    bar = _progress(opts.T, opts.progress, fv.comm.rank)
    t_start = time.perf_counter()
    measure = opts.balance and schedule is not None
    try:
        for st in iterate_pde(mesh, r0, schedule, attn, velocity=velocity, options=opts,
                              measure=measure, _run=run):
            steps.setdefault("t", []).append(st.t)
            steps.setdefault("dt", []).append(st.dt)
            max_mass_err = max(max_mass_err, abs(float(st.m.sum()) - mass0) / mass0)
            min_rho = min(min_rho, float(st.rho.min()))
            if st.integrands is not None and measure:
                for key in ("E", "dEdt_w", "power", "slope2", "speed2", "G2", "ito"):
                    steps.setdefault(key, []).append(st.integrands[key])
                if acc is None:
                    acc = BalanceAccumulator(sign=sign, E0=st.integrands["E"])
                else:
                    assert prev is not None and prev.integrands is not None
                    mart = 0.0
                    if prev.dtheta_noise is not None and schedule is not None:
                        G = energy_gradient_A(fv.chat_owned, prev.m[fv.orig_owned], prev.field)
                        G = np.asarray(_allsum(fv.comm, G))
                        dA = schedule.param.A_dot(prev.theta, prev.dtheta_noise)
                        mart = float(np.einsum("h,hij,hij->", prev.heads.w, G, dA))
                    acc.step(st.t - prev.t, prev.integrands, st.integrands,
                             pre_jump=st.pre_jump, martingale=mart,
                             stochastic=schedule is not None and schedule.stochastic)
            if st.is_save and (not rows or st.t > rows["t"][-1]):
                _record(rows, run, st, acc)
                rhos.append(st.rho.copy())
            if bar is not None and prev is not None:
                bar.update(st.t - prev.t)
            prev = st
    except _MaxSteps as exc:
        status, message = "max_steps", str(exc)
        warnings.warn(f"pde: {exc}; raise pde.max_steps or dt", UserWarning, stacklevel=2)
    except FloatingPointError as exc:
        status, message = "failed", str(exc)
        logger.error("pde run failed: %s", exc)
        warnings.warn(f"pde run failed: {exc}", UserWarning, stacklevel=2)
    finally:
        if bar is not None:
            bar.close()
    wall = time.perf_counter() - t_start
    history, tt, status, message = finish_history(rows, status, message)
    rho = np.asarray(rhos) if rhos else np.empty((0, fv.M))
    if status == "success" and max_mass_err > 1e-10:
        status = "failed"
        message = f"mass drifted by {max_mass_err:.2e} (relative): conservation broken"
    nsteps = len(steps.get("t", [1])) - 1
    n_evals = run.vel.n_evals
    stats = {
        "steps": nsteps, "rejected_steps": run.rejected, "velocity_evals": n_evals,
        "wall_time": wall, "time_per_step": wall / max(nsteps, 1),
        "time_per_velocity_eval": run.vel.eval_time / max(n_evals, 1),
        "rhs_time": run.rhs_time, "measure_time": run.measure_time,
        "mass_error_max": max_mass_err, "rho_min": min_rho,
        "dt_min": float(np.min(steps["dt"][1:])) if nsteps else float("nan"),
        "dt_max": float(np.max(steps["dt"][1:])) if nsteps else float("nan"),
        "max_normal_speed": run.umax, "cells": fv.M, "ranks": fv.comm.size,
        "edge_quadrature_points": fv.q,
        "kernel": run.vel.log.summary() if isinstance(run.vel, _Nonlocal) else None,
    }
    bal = acc.residuals() if acc is not None else {}
    res = PDEResult(status, message, opts, tt, rho, rho @ fv.areas_glob,
                    history, {k: np.asarray(v) for k, v in steps.items()}, bal,
                    mesh.gather_owned(mesh.centroids), fv.areas_glob, stats, sign)
    if status == "success":
        logger.info("pde: %d steps (%d rejected), %.2f s", nsteps, run.rejected, wall)
    return res


# =============================================================================== scenario
def _spec_checks() -> tuple[dict, dict]:
    from .scenario import boolean, choice, number, string

    pde = {
        "mesh": ("default", string),
        "T": (1.0, number(0, strict_lo=True)),
        "dt": (1e-2, number(0, strict_lo=True)),
        "order": (1, choice(1, 2)),
        "time_integrator": ("auto", choice("auto", *TIME_INTEGRATORS)),
        "limiter": ("barth_jespersen", choice(*LIMITERS)),
        "cfl": (0.9, number(0, 1, strict_lo=True)),
        "flow": ("transformer", choice("transformer", "surrogate")),
        "quad_points": (1, choice(1, 2, 3)),
        "n_saves": (11, number(2, integer=True)),
        "balance": (True, boolean),
        "entropy": (False, boolean),
        "head_rates": (False, boolean),
        "clusters": (True, boolean),
        "cluster_level": (0.1, number(0, 1)),
        "cluster_min_mass": (0.01, number(0, 1)),
        "max_steps": (1_000_000, number(1, integer=True)),
        "kernel_backend": ("auto", choice(*BACKENDS)),
        "kernel_tol": (1e-10, number(0, strict_lo=True)),
    }
    density = {
        "type": ("uniform", choice("uniform", "vmf", "cap", "file", "callable")),
        "means": (None, None),
        "kappas": (None, None),
        "weights": (None, None),
        "center": (None, None),
        "radius": (0.5, number(0, strict_lo=True)),
        "file": (None, string),
        "function": (None, string),
    }
    return pde, density


#: Keys of the ``[pde]`` section (see :func:`pde_options_from_dict`).
PDE_SPEC = ("mesh", "T", "dt", "order", "time_integrator", "limiter", "cfl", "flow",
            "quad_points", "n_saves", "balance", "entropy", "head_rates", "clusters",
            "cluster_level", "cluster_min_mass", "max_steps", "kernel_backend", "kernel_tol")
#: Keys of the ``[density]`` section.
DENSITY_SPEC = ("type", "means", "kappas", "weights", "center", "radius", "file", "function")


def pde_options_from_dict(d: Mapping[str, Any] | None, *, seed: int = 0
                          ) -> tuple[str, PDEOptions]:
    """Validate a ``[pde]`` table; returns ``(mesh_spec, PDEOptions)``.

    Keys (defaults): ``mesh = "default"`` (``meshes/sphere_2420.msh``; a path
    relative to the scenario, a shipped file name, or ``"icosphere:N"`` /
    ``"gmsh:N"``), ``T = 1``, ``dt = 0.01`` (upper bound), ``order = 1``,
    ``time_integrator = "auto"``, ``limiter = "barth_jespersen"``, ``cfl = 0.9``,
    ``flow = "transformer"``, ``quad_points = 1``, ``n_saves = 11``,
    ``balance = true``, ``entropy = false``, ``head_rates = false``,
    ``clusters = true``, ``cluster_level = 0.1``, ``cluster_min_mass = 0.01``,
    ``max_steps = 1000000``. Errors name the key (``pde.<key>: ...``).
    """
    from .scenario import take

    spec, _ = _spec_checks()
    vals = take(d or {}, spec, "pde")
    mesh = vals.pop("mesh")
    return mesh, PDEOptions(**vals, seed=seed)


def density_spec_from_scenario(sc: Any) -> dict[str, Any]:
    """The initial density of a scenario: ``[density]``, else derived from ``[tokens]``.

    ``[density]`` keys: ``type = "uniform" | "vmf" | "cap" | "file" | "callable"``,
    ``means``, ``kappas``, ``weights`` (vmf), ``center``, ``radius`` (cap, radians),
    ``file`` (.npy of cell values, relative to the scenario), ``function``
    (``"pkg.module:function"`` mapping points (M, 3) to densities). Without a
    ``[density]`` table the token law of ``[tokens]`` is used (``uniform`` or
    ``vmf`` samplers), so particles and PDE start from the same distribution.
    """
    from .scenario import ScenarioError, take

    _, spec = _spec_checks()
    if "density" in sc.sections:
        vals = take(sc.sections["density"], spec, "density")
        if vals["file"] is not None:
            vals["file"] = str(sc.path(vals["file"]))
        return {k: v for k, v in vals.items() if v is not None}
    tok = sc.tokens
    if tok["sampler"] == "uniform":
        return {"type": "uniform"}
    if tok["sampler"] == "vmf":
        if tok["means"] is None:
            raise ScenarioError("tokens.means: required for sampler = 'vmf'")
        return {"type": "vmf", "means": tok["means"],
                "kappas": 10.0 if tok["kappas"] is None else tok["kappas"],
                "weights": tok["weights"]}
    raise ScenarioError(f"density: a [density] table is required for the PDE when "
                        f"tokens.sampler = {tok['sampler']!r} (only 'uniform' and 'vmf' token "
                        "laws have a density)")


# =============================================================================== job (CLI)
def render_snapshots(mesh: SphereMesh, t: np.ndarray, rho: np.ndarray, out_dir: str | Path, *,
                     size: tuple[int, int] = (1100, 560), prefix: str = "rho",
                     shared_range: bool = False) -> list[Path]:
    """PNG snapshots of ``rho[k]`` on the sphere: two opposite views (pyvista off-screen).

    The colour range is ``[0, max ρ_k]`` per snapshot (``shared_range``: over all
    snapshots). Collective under MPI (gathers the cell vertices); rank 0 writes.
    """
    import os

    verts = mesh.gather_owned(mesh.cell_vertices)  # (M, 3, 3), original order
    if mesh.comm.rank != 0:
        return []
    os.environ.setdefault("VTK_DEFAULT_OPENGL_WINDOW", "vtkEGLRenderWindow")
    import pyvista as pv

    pv.OFF_SCREEN = True
    M = verts.shape[0]
    faces = np.hstack([np.full((M, 1), 3), np.arange(3 * M).reshape(M, 3)]).ravel()
    out_dir = Path(out_dir)
    out_dir.mkdir(parents=True, exist_ok=True)
    # look at the densest cell of the last snapshot (clusters stay in view), and from behind
    cen = verts.mean(axis=1)
    u = cen[int(np.argmax(rho[-1]))]
    u = u / np.linalg.norm(u)
    up = np.array([0.0, 0.0, 1.0]) if abs(u[2]) < 0.9 else np.array([1.0, 0.0, 0.0])
    files = []
    for k in range(rho.shape[0]):
        poly = pv.PolyData(verts.reshape(-1, 3), faces)
        poly.cell_data["density"] = rho[k]
        vmax = float(np.max(rho)) if shared_range else float(np.max(rho[k]))
        pl = pv.Plotter(off_screen=True, window_size=list(size), shape=(1, 2))
        for j, (eye, label) in enumerate(((4.8 * u, "densest cell at T"),
                                          (-4.8 * u, "opposite side"))):
            pl.subplot(0, j)
            pl.add_mesh(poly, scalars="density", cmap="viridis", clim=[0.0, vmax],
                        show_scalar_bar=(j == 1), lighting=False,
                        scalar_bar_args={"title": "density", "vertical": True})
            pl.add_axes()
            pl.add_text(f"t = {t[k]:.4g} ({label})", font_size=11)
            pl.camera_position = [tuple(eye), (0, 0, 0), tuple(up)]
        f = out_dir / f"{prefix}_{k:04d}.png"
        pl.screenshot(str(f))
        pl.close()
        files.append(f)
    return files


def write_xdmf(mesh: SphereMesh, t: np.ndarray, rho: np.ndarray, path: str | Path) -> None:
    """ParaView time series: the DOLFINx mesh and ρ as a DG0 function per output time.

    ``path`` ends in ``.xdmf`` (heavy data in the ``.h5`` beside it). Collective.
    """
    from dolfinx import fem, io

    V0 = fem.functionspace(mesh.mesh, ("DG", 0))
    u = fem.Function(V0, name="rho")
    dof = np.asarray(V0.dofmap.list)[: mesh.num_local, 0]
    with io.XDMFFile(mesh.comm, str(path), "w") as xf:
        xf.write_mesh(mesh.mesh)
        for k in range(rho.shape[0]):
            u.x.array[dof] = rho[k][mesh.original_index]
            xf.write_function(u, float(t[k]))


def run_pde(scenario: Any, out: str | Path, *, render: bool = False,
            progress: bool | None = None, overrides: Mapping[str, Any] | None = None,
            comm: Any = None) -> PDEResult:
    """Run the PDE of a scenario and write ``out/`` (collective under MPI).

    Writes ``summary.json`` (scenario echo, mesh, options, final diagnostics, balance,
    stats), ``diagnostics.csv`` (one row per output time), ``density.npz`` (``t``
    ``(S,)``, ``rho`` ``(S, M)``, ``centroids`` ``(M, 3)``, ``areas`` ``(M,)``, cells in the
    mesh file's order), ``density.xdmf`` + ``density.h5`` (ParaView: DG0 cell data
    ``rho`` per output time on the DOLFINx mesh) and, with ``render``,
    ``render/rho_XXXX.png``.

    Raises
    ------
    FloatingPointError
        If the run did not succeed (nothing is written).
    """
    import contextlib

    from mpi4py import MPI

    from .io import (
        check_finite,
        history_columns,
        provenance,
        run_directory,
        save_npz,
        write_csv,
        write_json,
    )
    from .mesh import MESH_DIR, load_mesh

    comm = MPI.COMM_WORLD if comm is None else comm
    mesh_spec, opts = pde_options_from_dict(scenario.sections.get("pde"), seed=scenario.seed)
    if overrides:
        opts = replace(opts, **{k: v for k, v in overrides.items() if v is not None})
    if progress is not None:
        opts = replace(opts, progress=progress)
    if mesh_spec not in ("default",) and ":" not in mesh_spec:
        p = scenario.path(mesh_spec)
        if p.is_file() or not (MESH_DIR / mesh_spec).is_file():
            mesh_spec = str(p)
    if scenario.d != 3:
        raise ValueError(f"attention.d: the PDE solver works on S² (d = 3), got {scenario.d}")
    density = density_spec_from_scenario(scenario)
    attn = scenario.attention_obj()
    schedule = scenario.build_schedule()
    sm = load_mesh(mesh_spec, comm=comm)
    res = solve_pde(sm, density, schedule, attn, options=opts)
    if res.status != "success":
        raise FloatingPointError(f"pde run {res.status}: {res.message}")
    summary = {
        "status": res.status, "solver": "pde", "scenario": scenario.raw,
        "provenance": provenance(), "seed": scenario.seed,
        "mesh": {"spec": mesh_spec, "cells": sm.num_global,
                 "min_area": float(res.areas.min()), "max_area": float(res.areas.max())},
        "n_heads": int(schedule.heads_at(schedule.initial_theta()).H),
        "density": {k: (np.asarray(v).tolist() if isinstance(v, np.ndarray) else v)
                    for k, v in density.items()},
        **res.summary(),
        "outputs": {"density.npz": "t (S,), rho (S, M), centroids (M, 3), areas (M,)",
                    "density.xdmf": "ParaView time series, DG0 cell data 'rho'",
                    "diagnostics.csv": "one row per output time"},
        "conventions": {
            "measure": "μ_h = Σ_K m_K δ_{ĉ_K}, m_K = ρ_K |K|, ĉ_K = c_K/|c_K|",
            "E": "Σ_h w_h (1/2β) Σ_KL m_K m_L Φ(β ĉ_Kᵀ A_h ĉ_L)",
            "balance_edi": "ΔE − ∫∂_tE − Itô − M − sign·∫(½speed2 + ½slope2)",
            "entropy": "Σ_K m_K H(p_K·), p_KL = m_L e^{s_KL}/Z_K (softmax rows over cells)",
        },
    }
    if comm.rank == 0:
        check_finite("summary.final", summary["final"])
    cols = history_columns(res.t, {k: np.asarray(v)[None] for k, v in res.history.items()})
    with contextlib.ExitStack() as stack:
        stage = stack.enter_context(run_directory(out)) if comm.rank == 0 else None
        stage = Path(comm.bcast(None if stage is None else str(stage), root=0))
        write_xdmf(sm, res.t, res.rho, stage / "density.xdmf")
        if render:
            render_snapshots(sm, res.t, res.rho, stage / "render")
        if comm.rank == 0:
            write_json(stage / "summary.json", summary)
            write_csv(stage / "diagnostics.csv", cols)
            save_npz(stage / "density.npz", t=res.t, rho=res.rho, centroids=res.centroids,
                     areas=res.areas)
        comm.barrier()
    logger.info("pde: wrote %s", out)
    return res
