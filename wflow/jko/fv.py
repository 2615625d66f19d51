"""The finite-volume (dynamic, Benamou–Brenier) JKO step on a sphere mesh (docs/theory.md §4).

One step of size ``τ`` of the ascent of ``E`` (``s = +1``; ``s = −1`` descent)::

    m^{k+1} ∈ argmin_m  W²_h(m^k, m)/(2τ) − s E(m),

where ``m`` are cell masses and ``W²_h`` is the two-point-flux discretisation of the
Benamou–Brenier distance with the lagged mobility ``b̂_k`` (Cancès–Gallouët–Todeschi,
Numer. Math. 2020, with ``n_s`` pseudo-time substeps ``δ = 1/n_s``)::

    W²_h(m^0, m^{n_s}) = min  Σ_{i<n_s} δ Σ_σ (J^i_σ)² / (w_σ θ_σ(m^{i+1}))
    s.t.  m^{i+1}_K − m^i_K + δ Σ_{σ⊂∂K} J^i_{K,σ} = 0,

with ``J_σ = |σ| F_σ`` the total flux across the edge, ``w_σ = |σ|/d_σ``
(:mod:`wflow.geometry.mesh.dual`) and the *upwind* edge mobility ``θ_σ = b̂_K m_K/|K|`` of the
cell the flux leaves. Each term ``J²/θ`` (split into its positive and negative part,
each over its own upwind cell) is a perspective function: ``W²_h`` is jointly convex in
``(m, J)``. ``n_s = 1`` is the CGT scheme, whose cost is ``τ Σ_σ |σ| d_σ F_σ²/(2θ_σ)``
in the notation of the issue; ``n_s > 1`` refines the pseudo-time of the transport.

Solution of the step with the potential ``ψ = δE/δm`` fixed (proven)
--------------------------------------------------------------------
With ``ψ`` fixed the step is the convex problem ``min ½W²_h − τ s⟨ψ, m⟩``. Its KKT
system decouples (multipliers ``λ^i`` of the constraints, ``λ^{n_s} = τ s ψ``):

* backward, the discrete Hamilton–Jacobi equations, for ``i = n_s−1, …, 0``::

      G_K(λ^i) = λ^i_K − (δ b̂_K / 2|K|) Σ_L w_σ ((λ^i_L − λ^i_K)⁺)² − λ^{i+1}_K = 0;

* forward, the implicit upwind continuity equations with ``J^i_σ = w_σ θ_σ (λ^i_L −
  λ^i_K)``: ``G'(λ^i)ᵀ m^{i+1} = m^i`` (the continuity matrix is the transposed
  Jacobian of ``G``).

``G`` is concave in ``λ`` and ``G'`` is an M-matrix with row sums 1 (``G'_KK >= 1``,
off-diagonal ``<= 0``); hence (i) ``G`` has a unique zero, (ii) Newton's method from
*any* start has ``G <= 0`` after one step and then increases monotonically to it
(Ortega–Rheinboldt 13.3.4), (iii) ``G'`` is triangular in the order of decreasing
``λ`` (``G'_KL ≠ 0`` only if ``λ_L > λ_K``), so each Newton solve and each continuity
solve is one sweep, ``O(N)``, no fill, no multigrid needed; (iv) ``G'ᵀ`` is an M-matrix
whose column sums are 1: the continuity solve conserves mass exactly and
``m^{i+1}_K >= m^i_K / G'_KK > 0`` wherever ``m^i_K > 0`` — **no cell empties**. The
KKT point with ``m > 0`` is the global minimiser of the convex subproblem.

The energy (what is proven and what is not)
-------------------------------------------
``E(m) = ½ mᵀΨm`` with ``Ψ_KL = Σ_h w_h Φ(β x_Kᵀ A_h x_L)/β`` at the circumcentres
``x_K``; ``ψ = Ψm`` from :func:`wflow.kernels.kernel_sums` (fast summation on S² when
it pays). ``energy = "implicit"`` (default) re-linearises ``ψ`` at the new iterate and
repeats (a convex–concave procedure, CCP; the statements below are for
``hamiltonian = "discrete"``, where each iterate is the minimiser of the convex
majorant — see "The Hamiltonian" for the default):

* ascent ``s = +1`` with positive semi-definite ``A_h`` (``Ψ`` is then a positive
  semi-definite kernel matrix: ``e^{β xᵀAy}`` is a positive-definite kernel): ``−E``
  is concave, the linearisation majorises ``−E``, and each CCP iterate decreases the
  true step functional ``W²_h/(2τ) − sE`` (proven, recorded as ``monotone``); the
  limit is a stationary point of the (nonconvex) step problem (proven for CCP with a
  strictly convex majorant; *not* proven to be the global minimiser);
* descent ``s = −1`` (``+E`` convex) or indefinite ``A_h``: the same fixed-point
  iteration, which converges when ``τ`` times the Lipschitz constant of ``m ↦ ψ`` in
  the transport metric is below 1 (not proven in general; the convergence and the
  objective are checked and reported).

``energy = "lagged"``: one linearisation at ``m^k`` (semi-implicit; first order in ``τ``
like the implicit step, never iterates).

The Hamiltonian (``hamiltonian = "pointwise"`` default, ``"discrete"``)
------------------------------------------------------------------------
The HJ term of the KKT system, ``(δ b̂_K/2|K|) Σ_L w_σ ((λ_L − λ_K)⁺)²``, is the upwind
Hamiltonian of the variational scheme. On triangles it is *not consistent* with
``½ b̂ |∇λ|²``: for a constant gradient it sums over the one or two outflow edges
only, and varies by a factor 2 with the direction of the gradient relative to the cell
(equilateral cell: ``[2/3, 4/3] |∇λ|²``). The error in ``λ`` is ``O(τ²|∇ψ|²)`` with a
cell-scale pattern, and the flux takes its gradient: measured after one step at
``τ = 0.1`` on the issue's problem, the L¹ error of the cell masses *grows* like ``1/h``
(1.4e-2, 2.9e-2, 5.1e-2 on 2 420, 9 680, 40 500 cells; a centred mobility only
reduces it 4×). ``"discrete"`` keeps this exact KKT system (the scheme is then the
exact minimiser of a discrete convex problem per CCP iteration; W₂ converges, L¹ does
not at fixed ``τ``). ``"pointwise"`` (default) replaces the discrete HJ solves by their
second-order expansion in ``τ``, with the *exact* tangential gradient of ``ψ`` from the
kernel sums::

    λ^i = τ s ψ + (1 − i/n_s) (τ²/2) b̂ |P∇ψ|²

(the HJ ``∂_sφ + ½ b̂|∇φ|² = 0`` backward from ``φ(1) = τsψ``, to ``O(τ³)``), then the
same implicit upwind continuity solves. Positivity, exact mass conservation and the
``O(N)`` sweeps are unchanged (proven as above); the step is no longer the minimiser of
a discrete functional (the CCP is then a fixed-point iteration: its convergence is
checked, not proven), and its consistency is first order.

Token diffusion: the entropy (``diffusion = D > 0``, THEORY §8)
-----------------------------------------------------------------
The noisy model's step is Jordan–Kinderlehrer–Otto's, ``W²/(2τ) − sE + D H`` with
``H = Σ_K m_K log(m_K/σ(K))`` (:meth:`~wflow.geometry.mesh.dual.DualGeometry.entropy`).
It is taken as two minimising movements of the same ``τ`` (Lie splitting, first order
like the step itself): the step above for ``−sE``, then the *linearised* JKO step of the
entropy (:func:`fv_entropy_step`, LJKO: the mobility ``θ_σ`` lagged at its start ``m½``,
the plain metric ``b̂ = 1`` because the noisy PDE diffuses by ``DΔρ``)::

    min_{m, J}  Σ_σ J_σ² / (2τ w_σ θ_σ) + D H(m)   s.t.  m − m½ + div J = 0,

convex (a quadratic plus the strictly convex entropy). Its KKT system, with
``u_K = log(m_K/|K|)`` and ``J_σ = τ D w_σ θ_σ (u_K − u_L)``, is the gradient of the
strictly convex ``Φ(u) = Σ_K |K| e^{u_K} − Σ_K m½_K u_K + (τD/2) Σ_σ w_σ θ_σ (u_K − u_L)²``:
Newton's method with backtracking on ``Φ`` (started from the backward-Euler heat step)
converges to the unique minimiser (its Hessian ``diag(|K|e^u) + τD 𝓛_θ`` is an SPD
M-matrix). **Positivity (proven):** ``m_K = |K| e^{u_K} > 0`` in every cell that holds
mass or borders one (``θ_σ = ½(ρ½_K + ρ½_L) > 0`` connects it), also those empty at
``m½``; a cell with no occupied neighbour has ``θ_σ = 0`` on all its edges and stays
empty (``m_K = 0``): the lagged mobility spreads mass by one cell per step. **Mass:** the
masses are written in flux form ``m = m½ − div J`` (each edge flux one number, added and
subtracted), so ``Σ m`` is conserved to round-off; ``m = |K|e^u`` holds to the Newton tolerance.

The discrete free-energy EDI of the step, in its rate form (the PDE's,
``F(T) − F(0) = −∫ I dt``), is ``F_{k+1} − F_k + (τ/2)(I_h(m^k) + I_h(m^{k+1}))`` with
``F = D H − sE`` and the relative Fisher information ``I_h = Σ_σ w_σ θ_σ (g_K − g_L)²``,
``g = D log ρ − sψ`` (``θ_σ`` the logarithmic mean, :func:`fv_free_fisher`). De Giorgi's
form ``W²/(2τ) + (τ/2)|∂F|²`` does not apply to the split step: the two sub-steps' ``W²``
do not add up to the ``W²`` of the step (the cross term ``−2Ds∫∇ψ·∇ρ`` of the speed is
missing, measured: a residual of 0.09 τ per step at every ``h``). Measured (USA, ``β = 2``,
two bumps, ``D = 0.1``, one step, ``τ ∝ h``): residual/τ = 1.6e-2, 7.6e-3, 3.7e-3 on
1 280, 5 120, 20 480 cells, first order.

Accuracy (measured, ``tests/test_jko_fv.py``; the exact step from :mod:`wflow.jko.zonal`)
-----------------------------------------------------------------------------------------
The issue's problem (USA, ``A = I``, ``β = 2``, ``ρ₀ ∝ 1 + ½P₂``), ``T = 0.4``, pointwise
Hamiltonian, ``n_s = 1``, shipped meshes 2 420 … 40 500 cells (``h`` 0.072 … 0.0176),
errors at ``T`` against the exact JKO iterate of the same ``τ``:

* ``τ = 0.1``: L¹ of the cell masses 4.7e-3 … 1.5e-3 (fitted order 0.80), 1-D W₂ of the
  polar marginals 3.5e-3 … 5.3e-4 (order 1.34);
* ``τ = 0.05``: L¹ 4.4e-3 … 1.2e-3 (order 0.92), W₂ 3.4e-3 … 4.4e-4 (order 1.45).

More pseudo-time substeps (``"auto"``: 2–7 here) change these by < 25 %: at these ``τ``
the spatial (upwind) error dominates. No cell empties (``min m^{k+1}/m^k > 0``).
"""

from __future__ import annotations

import logging
import math
import time
from dataclasses import dataclass
from typing import NamedTuple

import numpy as np

from ..attention.heads import Attention, Heads
from ..geometry.mesh.dual import DualGeometry, log_mean
from ..kernels import kernel_sums

__all__ = [
    "FVGraph",
    "FVStepResult",
    "fv_potential",
    "fv_fields",
    "fv_slope2",
    "fv_step",
    "fv_entropy_step",
    "fv_free_fisher",
    "auto_substeps",
]

logger = logging.getLogger(__name__)


@dataclass(frozen=True, eq=False)
class FVGraph:
    """The cell graph of a :class:`~wflow.geometry.mesh.dual.DualGeometry` in CSR form.

    Attributes
    ----------
    geo : DualGeometry
        The mesh's cells and edges the graph is built from.
    ptr, idx : int64 arrays
        Neighbours of cell ``K``: ``idx[ptr[K]:ptr[K+1]]``.
    w : float array
        ``|σ|/d_σ`` of each (cell, neighbour) entry.
    """

    geo: DualGeometry
    ptr: np.ndarray
    idx: np.ndarray
    w: np.ndarray

    @classmethod
    def from_geometry(cls, geo: DualGeometry) -> FVGraph:
        """Symmetric adjacency of the cells with the edge transmissibilities."""
        K, L = geo.edge_cells[:, 0], geo.edge_cells[:, 1]
        rows = np.concatenate([K, L])
        cols = np.concatenate([L, K])
        ww = np.concatenate([geo.trans, geo.trans])
        order = np.lexsort((cols, rows))
        rows, cols, ww = rows[order], cols[order], ww[order]
        ptr = np.zeros(geo.M + 1, dtype=np.int64)
        np.cumsum(np.bincount(rows, minlength=geo.M), out=ptr[1:])
        return cls(geo, ptr, np.ascontiguousarray(cols, dtype=np.int64),
                   np.ascontiguousarray(ww))


def fv_potential(x: np.ndarray, m: np.ndarray, heads: Heads, attn: Attention) -> np.ndarray:
    """``ψ_K = ∂E/∂m_K = Σ_h w_h Φ_h(x_K)/β`` at the centres (``kernel_sums``, backend auto)."""
    sums = kernel_sums(x, x, m, heads.Q, heads.K, beta=attn.beta, kind=attn.kind,
                       potential=True, backend="auto")
    return np.einsum("h,hm->m", heads.w, sums.Phi) / attn.beta


def fv_fields(x: np.ndarray, m: np.ndarray, heads: Heads, attn: Attention
              ) -> np.ndarray:
    """``[ψ, P∇ψ]`` at the centres, shape ``(M, 4)`` (linear in ``m``; one kernel sum).

    ``ψ = Σ_h w_h Φ_h/β`` and the tangential gradient ``P_x Σ_h w_h A_h Y_h`` (symmetric
    ``A_h``; :func:`wflow.energy.evaluate`).
    """
    from ..energy import evaluate
    from ..geometry.sphere import project_tangent

    fe = evaluate(x, heads, attn, m=m)
    out = np.empty((x.shape[0], 4))
    out[:, 0] = np.einsum("h,hm->m", heads.w, fe.Phi) / attn.beta
    out[:, 1:] = project_tangent(x, np.einsum("h,hmd->md", heads.w, fe.grad_psi))
    return out


def fv_slope2(geo: DualGeometry, m: np.ndarray, psi: np.ndarray, bhat: np.ndarray,
              sign: int) -> float:
    """Discrete metric slope ``|∂E|²_h = Σ_σ w_σ θ_σ (ψ_L − ψ_K)²`` in the scheme's metric.

    ``θ_σ = b̂ m/|K|`` of the upwind cell for the flow along ``s∇ψ`` (the cell the mass
    leaves); ``≈ ∫ b̂ |∇ψ|² dμ`` to first order in ``h``.
    """
    K, L = geo.edge_cells[:, 0], geo.edge_cells[:, 1]
    d = sign * (psi[L] - psi[K])
    up = np.where(d > 0, K, L)
    theta = bhat[up] * m[up] / geo.areas[up]
    return float(np.sum(geo.trans * theta * d * d))


def auto_substeps(tau: float, vmax: float, h: float) -> int:
    """Pseudo-time substeps ``n_s = max(1, ⌈τ|v|_max/h⌉)``: each substep moves <= one cell."""
    if not (tau > 0 and h > 0 and math.isfinite(vmax) and vmax >= 0):
        raise ValueError(f"auto_substeps: needs tau > 0, h > 0 and a finite speed, got "
                         f"{tau!r}, {h!r}, {vmax!r}")
    return max(1, math.ceil(tau * vmax / h - 1e-9))


class _LinearStep(NamedTuple):
    m: np.ndarray
    lam: list
    W2sq: float
    newton: int
    newton_res: float


def _hj(graph: FVGraph, tgt: np.ndarray, c: np.ndarray, lam0: np.ndarray, tol: float,
        max_iter: int) -> tuple[np.ndarray, int, float]:
    from . import _fv_numba as kn

    lam = lam0.copy()
    G = np.empty_like(lam)
    dx = np.zeros_like(lam)
    res = kn.hj_residual(lam, tgt, graph.ptr, graph.idx, graph.w, c, G)
    it = 0
    while res > tol and it < max_iter:
        order = np.argsort(-lam, kind="stable")
        kn.hj_newton_solve(lam, -G, graph.ptr, graph.idx, graph.w, c, order, dx)
        lam += dx
        it += 1
        res = kn.hj_residual(lam, tgt, graph.ptr, graph.idx, graph.w, c, G)
    return lam, it, res


def _linear_step(graph: FVGraph, m0: np.ndarray, bhat: np.ndarray, terminal: np.ndarray,
                 substeps: int, warm: list | None, newton_rtol: float,
                 newton_max: int, ham2: np.ndarray | None = None) -> _LinearStep:
    """The step with ``ψ`` fixed: HJ backward, continuity forward (module docstring).

    ``ham2`` given (``= τ² b̂ |P∇ψ|²``): the pointwise Hamiltonian,
    ``λ^i = τsψ + (1 − i/n_s) ham2/2`` instead of the discrete HJ solves.
    """
    from . import _fv_numba as kn

    geo = graph.geo
    delta = 1.0 / substeps
    c = delta * bhat / geo.areas
    osc = float(np.ptp(terminal)) if terminal.size else 0.0
    tol = newton_rtol * max(osc, 1e-300)
    lams: list = [None] * substeps
    nxt = terminal
    newton = 0
    worst = 0.0
    for i in range(substeps - 1, -1, -1):
        if ham2 is not None:
            lams[i] = terminal + (1.0 - i / substeps) * 0.5 * ham2
            continue
        start = warm[i] if warm is not None and len(warm) == substeps else nxt
        lam, it, res = _hj(graph, nxt, c, start, tol, newton_max)
        newton += it
        worst = max(worst, res / max(osc, 1e-300))
        lams[i] = lam
        nxt = lam
    K, L = geo.edge_cells[:, 0], geo.edge_cells[:, 1]
    m = m0
    W2 = 0.0
    for i in range(substeps):
        lam = lams[i]
        out = np.empty_like(m)
        kn.continuity_solve(lam, m, graph.ptr, graph.idx, graph.w, c,
                            np.argsort(lam, kind="stable"), out)
        m = out
        d = lam[L] - lam[K]
        up = np.where(d > 0, K, L)
        theta = bhat[up] * m[up] / geo.areas[up]
        W2 += delta * float(np.sum(geo.trans * theta * d * d))
    return _LinearStep(m, lams, W2, newton, worst)


def fv_entropy_step(geo: DualGeometry, m_half: np.ndarray, *, tau: float, diffusion: float,
                    rtol: float = 1e-12, max_iter: int = 100
                    ) -> tuple[np.ndarray, float, int]:
    """The linearised JKO step of the entropy ``D H`` (module docstring, "Token diffusion").

    Parameters
    ----------
    geo : DualGeometry
    m_half : (M,) array
        The masses after the energy's step (``>= 0``).
    tau, diffusion : float
        ``τ > 0`` and ``D > 0``.
    rtol : float
        Newton stops when ``|∇Φ(u)_K| <= rtol · (|K|e^{u_K} + m½_K + Σ_L |𝓛_KL u_L|)`` in
        every cell (relative to the terms it is made of: their round-off is the floor),
        or when the line search can no longer decrease ``Φ`` (round-off reached).

    Returns
    -------
    (m, W2sq, newton_iters)
        The new masses (flux form: ``Σ m = Σ m½`` to round-off; ``m > 0``), the step's
        ``W²_h = Σ_σ J_σ²/(w_σ θ_σ)`` and the Newton iterations.
    """
    from scipy.sparse import coo_matrix, diags
    from scipy.sparse.linalg import spsolve

    if not (tau > 0 and diffusion > 0):
        raise ValueError(f"fv_entropy_step: needs tau > 0 and diffusion > 0, got {tau!r}, "
                         f"{diffusion!r}")
    mh = np.asarray(m_half, dtype=np.float64)
    A = geo.areas
    M = geo.M
    K, L = geo.edge_cells[:, 0], geo.edge_cells[:, 1]
    rho = mh / A
    coef = tau * diffusion * geo.trans * 0.5 * (rho[K] + rho[L])  # τ D w_σ θ_σ
    lap_full = coo_matrix((np.concatenate([-coef, -coef, coef, coef]),
                           (np.concatenate([K, L, K, L]), np.concatenate([L, K, K, L]))),
                          shape=(M, M)).tocsr()
    # cells that hold mass or border one; the others keep m = 0 (θ = 0 on all their edges)
    active = (mh > 0) | (np.bincount(K, coef > 0, M) + np.bincount(L, coef > 0, M) > 0)
    idx = np.flatnonzero(active)
    lap = lap_full[idx][:, idx].tocsr()
    A_all, mh_all = A, mh
    A, mh = A_all[idx], mh_all[idx]
    # start: the backward-Euler heat step (an M-matrix solve: > 0 on the active cells)
    rho_lin = spsolve((diags(A) + lap).tocsc(), mh)
    u = np.log(np.maximum(rho_lin, 1e-300))

    def phi(v: np.ndarray) -> float:
        return float(A @ np.exp(v) - mh @ v + 0.5 * v @ (lap @ v))

    alap = abs(lap)
    it = 0
    f = phi(u)
    for it in range(1, max_iter + 1):
        eu = A * np.exp(u)
        g = eu - mh + lap @ u
        if np.all(np.abs(g) <= rtol * (eu + mh + alap @ np.abs(u))):
            it -= 1
            break
        du = spsolve((diags(eu) + lap).tocsc(), -g)
        slope = float(g @ du)
        step = 1.0
        # the Newton decrement at the round-off of Φ: the full step, no line search (a
        # comparison of Φ values there is noise and would stall Newton)
        if -slope <= 1e-12 * (float(eu.sum()) + float(np.abs(mh * u).sum())):
            u = u + du
            f = phi(u)
            continue
        while True:  # Armijo backtracking on the strictly convex Φ
            f_new = phi(u + step * du)
            if f_new <= f + 1e-4 * step * slope or step < 1e-10:
                break
            step *= 0.5
        if step < 1e-10:  # no decrease left to find: Φ is at its round-off floor
            break
        u = u + step * du
        f = f_new
    else:
        logger.warning("fv_entropy_step: Newton did not reach rtol = %.1e in %d iterations",
                       rtol, max_iter)
    u_all = np.zeros(M)
    u_all[idx] = u
    on = coef > 0
    J = np.where(on, coef * (u_all[K] - u_all[L]), 0.0)  # total flux K -> L
    m = mh_all - (np.bincount(K, J, M) - np.bincount(L, J, M))
    W2 = float(np.sum(J[on] ** 2 / (geo.trans[on] * 0.5 * (rho[K][on] + rho[L][on]))))
    return m, W2, it


def fv_free_fisher(geo: DualGeometry, m: np.ndarray, psi: np.ndarray, *, diffusion: float,
                   sign: int) -> float:
    """The relative Fisher information ``I_h = Σ_σ w_σ θ_σ (g_K − g_L)²`` of ``F = DH − sE``.

    ``g = D log ρ − sψ`` (``ρ = m/|K|``), ``θ_σ`` the logarithmic mean of ``ρ_K, ρ_L``
    (an edge next to an empty cell carries nothing); ``≈ ∫ |∇(D log ρ − sψ)|² dμ``.
    """
    K, L = geo.edge_cells[:, 0], geo.edge_cells[:, 1]
    rho = np.asarray(m, dtype=np.float64) / geo.areas
    theta = log_mean(rho[K], rho[L])
    with np.errstate(divide="ignore"):
        logr = np.log(np.where(rho > 0, rho, 1.0))
    dg = diffusion * (logr[K] - logr[L]) - sign * (psi[K] - psi[L])
    dg = np.where(theta > 0, dg, 0.0)
    return float(np.sum(geo.trans * theta * dg * dg))


class FVStepResult(NamedTuple):
    """What one finite-volume JKO step did.

    Attributes
    ----------
    m : (M,) array
        ``m^{k+1}`` (sum of ``m^k`` to round-off).
    W2sq : float
        ``W²_h(m^k, m^{k+1})`` in the scheme's metric (pseudo-time substeps included).
    objective : float
        ``W²_h/(2τ) − sE(m^{k+1})``.
    objectives : list of float
        The true objective after each CCP iteration.
    ccp_iters : int
    ccp_change : float
        ``‖m_{j+1} − m_j‖₁ / ‖m_{j+1} − m^k‖₁`` of the last CCP iteration.
    converged : bool
    monotone : bool
        Whether the objective never increased along the CCP iterations (beyond round-off).
    newton_iters : int
        Newton iterations, summed over substeps and CCP iterations.
    newton_res : float
        Largest final ``max|G|/osc(τψ)`` of the HJ solves.
    substeps : int
    fields : (M, 4) array
        ``[ψ, P∇ψ](m^{k+1})`` (:func:`fv_fields`).
    energy : float
        ``E(m^{k+1})``.
    min_ratio : float
        ``min_K m^{k+1}_K / m^k_K`` over the cells with ``m^k_K > 0`` (> 0: no empty cell).
    time : float
    W2sq_entropy : float
        ``diffusion > 0``: the entropy sub-step's ``W²_h`` (included in ``W2sq``); else 0.
    free_energy : float
        ``F(m^{k+1}) = D H − sE`` (NaN without diffusion).
    free_edi : float
        The step's free-energy EDI ``F_{k+1} − F_k + (τ/2)(I_h(m^k) + I_h(m^{k+1}))``
        (module docstring; NaN without diffusion).
    entropy_newton : int
        Newton iterations of the entropy sub-step.
    """

    m: np.ndarray
    W2sq: float
    objective: float
    objectives: list
    ccp_iters: int
    ccp_change: float
    converged: bool
    monotone: bool
    newton_iters: int
    newton_res: float
    substeps: int
    fields: np.ndarray
    energy: float
    min_ratio: float
    time: float
    W2sq_entropy: float = 0.0
    free_energy: float = float("nan")
    free_edi: float = float("nan")
    entropy_newton: int = 0


def fv_step(graph: FVGraph, m0: np.ndarray, heads: Heads, attn: Attention, *, tau: float,
            sign: int, bhat: np.ndarray, substeps: int = 1, energy: str = "implicit",
            hamiltonian: str = "pointwise", fields0: np.ndarray | None = None,
            ccp_tol: float = 1e-8, ccp_max: int = 100, accelerate: bool = True,
            depth: int = 3, newton_rtol: float = 1e-12, newton_max: int = 60,
            diffusion: float = 0.0) -> FVStepResult:
    """One finite-volume JKO step ``m^k -> m^{k+1}`` (module docstring).

    Parameters
    ----------
    graph : FVGraph
    m0 : (M,) array
        ``m^k`` (cell masses, > 0 where the step should keep mass).
    heads, attn
        Heads at ``t_{k+1}`` (symmetric, value-aligned with sign ``sign``).
    tau : float
    sign : {+1, −1}
        Ascent (``V = A``) or descent (``V = −A``) of ``E``.
    bhat : (M,) array
        Lagged mobility ``b̂[m^k]`` at the centres.
    substeps : int
        Pseudo-time substeps ``n_s``.
    energy : {"implicit", "lagged"}
    hamiltonian : {"pointwise", "discrete"}
        ``"discrete"``: solve the discrete HJ equations (the exact KKT system of the
        variational scheme); ``"pointwise"``: their second-order expansion in ``τ`` with
        the exact tangential gradient of ``ψ`` (module docstring, "Hamiltonian").
    fields0 : (M, 4) array, optional
        :func:`fv_fields` at ``m^k`` if known.
    ccp_tol, ccp_max : float, int
        Stop the CCP when ``‖m_{j+1} − m_j‖₁ <= ccp_tol ‖m_{j+1} − m^k‖₁``.
    accelerate, depth : bool, int
        Anderson acceleration (history ``depth``) of the fixed point ``f -> f(S(f))``
        on the fields ``f = [ψ, P∇ψ]`` (linear in ``m``, so a mixed input costs no kernel
        sum; ``S`` the step with the fields fixed). Safeguarded: when the objective
        ``W²_h/(2τ) − sE`` increases (discrete Hamiltonian) or the fixed-point residual
        ``‖f(S(f)) − f‖`` grows (pointwise), the history is dropped and a plain step is
        taken (from the best iterate, resp. the last output). Every returned iterate is
        an output of ``S`` (positive, mass-conserving).
    newton_rtol, newton_max : float, int
        Stop Newton when ``max|G| <= newton_rtol · osc(τψ)`` (discrete Hamiltonian).
    diffusion : float
        Token diffusion ``D >= 0``: ``D > 0`` adds the entropy ``D H`` to the step (the
        linearised entropy step after the energy's, module docstring "Token diffusion")
        and reports the step's free-energy EDI; ``0`` is the noiseless step, bit for bit.
    """
    t0 = time.perf_counter()
    x = graph.geo.centres
    m0 = np.asarray(m0, dtype=np.float64)
    f_in = fv_fields(x, m0, heads, attn) if fields0 is None else fields0
    f_start = f_in
    warm = None
    objs: list[float] = []
    newton = 0
    nres = 0.0
    change = math.inf
    converged = False
    it = 0
    best = None
    prev_out = m0
    X: list[np.ndarray] = []
    Gf: list[np.ndarray] = []
    F: list[np.ndarray] = []
    pointwise = hamiltonian == "pointwise"
    last_res = math.inf
    for it in range(1, ccp_max + 1):
        ham2 = None
        if pointwise:
            ham2 = tau * tau * bhat * np.einsum("md,md->m", f_in[:, 1:], f_in[:, 1:])
        lin = _linear_step(graph, m0, bhat, tau * sign * f_in[:, 0], substeps, warm,
                           newton_rtol, newton_max, ham2)
        warm = lin.lam
        newton += lin.newton
        nres = max(nres, lin.newton_res)
        f_out = fv_fields(x, lin.m, heads, attn)
        E_out = 0.5 * float(lin.m @ f_out[:, 0])
        obj = lin.W2sq / (2.0 * tau) - sign * E_out
        objs.append(obj)
        moved = float(np.sum(np.abs(lin.m - m0)))
        change = float(np.sum(np.abs(lin.m - prev_out))) / max(moved, 1e-300)
        prev_out = lin.m
        if best is None or obj <= best[0]:
            best = (obj, lin.m, f_out, lin.W2sq, E_out)
        if energy == "lagged":
            converged = True
            break
        if moved == 0.0 or (it > 1 and change <= ccp_tol):
            converged = True
            break
        if not accelerate:
            f_in = f_out
            continue
        # (1e-9: far above the round-off of the objective, ~1e-13 relative, and of the
        # fast summation, 1e-10; below any increase that matters)
        res_norm = float(np.linalg.norm(f_out - f_in))
        # safeguard: the discrete Hamiltonian's step minimises the objective (CCP: it must
        # not increase); the pointwise one is a fixed point, whose residual must shrink
        bad = (obj > objs[-2] + 1e-9 * max(abs(obj), 1e-300) if not pointwise
               else res_norm > last_res) if len(objs) > 1 else False
        last_res = res_norm
        if bad:
            X.clear(), Gf.clear(), F.clear()
            f_in = best[2] if not pointwise else f_out
            continue
        X.append(f_in)
        Gf.append(f_out)
        F.append((f_out - f_in).ravel())
        if len(F) > depth + 1:
            del X[0], Gf[0], F[0]
        if len(F) == 1:
            f_in = f_out
            continue
        dF = np.stack([F[i + 1] - F[i] for i in range(len(F) - 1)], axis=1)
        dG = np.stack([(Gf[i + 1] - Gf[i]).ravel() for i in range(len(Gf) - 1)], axis=1)
        gam, *_ = np.linalg.lstsq(dF, F[-1], rcond=None)
        f_in = (Gf[-1].ravel() - dG @ gam).reshape(f_out.shape)
    assert best is not None
    if converged:
        m_new, f_new, W2, E_new = lin.m, f_out, lin.W2sq, E_out
    else:
        m_new, f_new, W2, E_new = best[1:]
    scale = max(abs(objs[0]), 1e-300)
    monotone = all(b <= a + 1e-9 * scale for a, b in zip(objs, objs[1:], strict=False))
    if diffusion > 0:
        return _with_entropy(graph, m0, m_new, W2, heads, attn, tau=tau, sign=sign,
                             diffusion=diffusion, fields0=f_start,
                             rest=(objs, it, change, converged, monotone, newton, nres,
                                   substeps), t0=t0)
    pos = m0 > 0
    ratio = float(np.min(m_new[pos] / m0[pos])) if np.any(pos) else 1.0
    return FVStepResult(m_new, W2, W2 / (2.0 * tau) - sign * E_new, objs, it, change,
                        converged, monotone, newton, nres, substeps, f_new, E_new, ratio,
                        time.perf_counter() - t0)


def _with_entropy(graph: FVGraph, m0: np.ndarray, m_half: np.ndarray, W2_E: float,
                  heads: Heads, attn: Attention, *, tau: float, sign: int, diffusion: float,
                  fields0: np.ndarray, rest: tuple, t0: float) -> FVStepResult:
    """The entropy sub-step after the energy's and the step's free-energy EDI."""
    geo = graph.geo
    x = geo.centres
    m_new, W2_H, newton_H = fv_entropy_step(geo, m_half, tau=tau, diffusion=diffusion)
    f_new = fv_fields(x, m_new, heads, attn)
    E0 = 0.5 * float(m0 @ fields0[:, 0])
    E1 = 0.5 * float(m_new @ f_new[:, 0])
    F0 = diffusion * geo.entropy(m0) - sign * E0
    F1 = diffusion * geo.entropy(m_new) - sign * E1
    W2 = W2_E + W2_H
    fisher = (fv_free_fisher(geo, m0, fields0[:, 0], diffusion=diffusion, sign=sign)
              + fv_free_fisher(geo, m_new, f_new[:, 0], diffusion=diffusion, sign=sign))
    edi = F1 - F0 + 0.5 * tau * fisher
    pos = m0 > 0
    ratio = float(np.min(m_new[pos] / m0[pos])) if np.any(pos) else 1.0
    return FVStepResult(m_new, W2, W2 / (2.0 * tau) + F1, *rest, f_new, E1, ratio,
                        time.perf_counter() - t0, W2_H, F1, edi, newton_H)
