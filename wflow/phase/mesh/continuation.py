"""Pseudo-arclength continuation on the mesh: the fold, ``K_c`` and ``K_#``."""

from __future__ import annotations

import logging
import time
from dataclasses import dataclass, field

import numpy as np
from scipy.optimize import brentq

from ..thresholds import funk_hecke_eigenvalues
from ..zonal import Eigenvalues, PhaseError
from .model import MeshModel, MeshOptions, MeshState, _blas

logger = logging.getLogger(__name__)

__all__ = ["MeshBranch", "MeshPhasePoint", "mesh_branch", "mesh_phase_point"]


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
    from ..branch import zonal_branch

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
