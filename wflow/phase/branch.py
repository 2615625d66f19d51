r"""The clustered branch by continuation in the order parameter, its fold and ``K_c``.

The branch of zonal stationary states bifurcating from ``ρ ≡ 1`` at ``K_#`` is followed in
the order parameter ``m = |∫ x dμ|`` (:class:`~wflow.phase.zonal.ZonalModel`): a tangent
predictor ``y + (dy/dm) Δm`` and a Newton corrector at each ``m`` of a grid that is
geometric near the bifurcation and uniform beyond. Near ``m = 0`` (Landau)

.. math::

    K(m) = K_\# + a\,m^2 + b\,m^4 + O(m^6),

* ``a > 0``: **continuous** transition (``β < β*``), ``K_c = K_#``, ``m ∝ (K − K_#)^{1/2}``;
* ``a = 0 < b``: the tricritical point ``β = β*``, ``m ∝ (K − K_#)^{1/4}``;
* ``a < 0``: **discontinuous** (``β > β*``): ``K(m)`` falls to a minimum, the **fold**
  ``K_f = min_m K(m)`` (``dK/dm = 0``, located by Brent's method on the exact slope),
  then rises; beyond the fold the clustered state is a local minimiser. Its free energy
  ``ΔF = F_K(ρ) − F_K(1)`` is positive at the fold and negative far out: its root on
  the upper branch is the **first-order threshold** ``K_c`` (equal free energies), and
  ``K_f < K_c < K_#``.

All couplings are in the published convention ``K = 1/(2D)``
(:func:`wflow.attention.diffusion.diffusion_of` gives ``D``).
"""

from __future__ import annotations

import logging
import math
from dataclasses import dataclass, field, replace
from typing import Literal

import numpy as np
from scipy.optimize import brentq

from ..attention.diffusion import diffusion_of
from .thresholds import check_phase_args, funk_hecke_eigenvalues
from .zonal import Eigenvalues, PhaseError, ZonalModel, ZonalOptions, ZonalState

logger = logging.getLogger(__name__)

__all__ = ["ZonalBranch", "PhasePoint", "zonal_branch", "phase_point", "default_m_grid"]

Transition = Literal["continuous", "discontinuous"]

#: Brent's tolerance on ``m`` for the fold and ``K_c``. At the fold ``K`` is stationary in
#: ``m`` (its error is quadratic in that of ``m``); at ``K_c``, ``|dK/dm| = O(1)`` so ``K_c``
#: inherits it: 1e-13 is ~500 ulps of ``m = O(1)``, the round-off of one Newton solve.
M_XTOL = 1e-13
#: Largest accepted change of the moments on a rule of twice the nodes: the states'
#: own Newton tolerance is ~1e-13, so 1e-10 flags a rule that under-resolves the density.
QUADRATURE_RTOL = 1e-10


def default_m_grid(m_max: float = 0.95) -> np.ndarray:
    """Continuation grid: 16 geometric points on ``[1e-3, 0.1]``, then steps ``≈ 0.015``."""
    tail = np.linspace(0.1, m_max, max(2, int(round((m_max - 0.1) / 0.015)) + 1))
    return np.unique(np.concatenate([np.geomspace(1e-3, 0.1, 16), tail]))


@dataclass(frozen=True)
class ZonalBranch:
    """The clustered branch sampled on a grid of order parameters.

    Attributes
    ----------
    beta : float
        Inverse temperature.
    d : int
        Ambient dimension.
    m, K, dK_dm, free_energy_gap : numpy.ndarray
        Order parameter, coupling, slope and ``ΔF`` along the branch, shape ``(n,)``.
    states : list of ZonalState
        The states themselves (Gegenbauer moments included).
    model : ZonalModel
        The discretisation that computed them.
    """

    beta: float
    d: int
    m: np.ndarray
    K: np.ndarray
    dK_dm: np.ndarray
    free_energy_gap: np.ndarray
    states: list[ZonalState] = field(repr=False)
    model: ZonalModel = field(repr=False)

    def _warm(self, m: float) -> np.ndarray:
        """Predictor for ``m`` from the nearest grid state below it."""
        i = max(0, int(np.searchsorted(self.m, m)) - 1)
        s = self.states[i]
        y = np.concatenate((s.c[2:], [s.K]))
        return y + self.model.tangent(s.m, y) * (m - s.m)

    def solve(self, m: float) -> ZonalState:
        """The stationary state at order parameter ``m`` (warm-started on the branch)."""
        return self.model.solve(m, self._warm(m))[0]


def zonal_branch(beta: float, d: int, *, m: np.ndarray | None = None,
                 options: ZonalOptions | None = None,
                 eigenvalues: Eigenvalues = funk_hecke_eigenvalues) -> ZonalBranch:
    """Continue the zonal branch from the bifurcation ``(m, K) = (0, K_#)`` in ``m``.

    Parameters
    ----------
    beta : float
        Inverse temperature ``β > 0``.
    d : int
        Ambient dimension ``d >= 2``.
    m : numpy.ndarray or None, keyword-only
        Increasing order parameters in ``(0, 1)`` (default :func:`default_m_grid`).
    options : ZonalOptions or None, keyword-only
        Truncation and quadrature.
    eigenvalues : callable, keyword-only
        The kernel by its Funk–Hecke eigenvalues (default: ``e^{β x·y}``).

    Returns
    -------
    ZonalBranch

    Raises
    ------
    PhaseError
        A Newton solve failed (the message says how to refine).
    """
    beta, d = check_phase_args(beta, d)
    ms = default_m_grid() if m is None else np.asarray(m, dtype=np.float64)
    if ms.ndim != 1 or not np.all(np.diff(ms) > 0) or ms[0] <= 0 or ms[-1] >= 1:
        raise ValueError("m: expected an increasing grid inside (0, 1)")
    model = ZonalModel(beta, d, options=options, eigenvalues=eigenvalues)
    states: list[ZonalState] = []
    y, prev = None, None
    for mi in ms:
        if prev is not None:
            y = y + model.tangent(prev, y) * (mi - prev)
        s, y = model.solve(float(mi), y)
        states.append(s)
        prev = float(mi)
    return ZonalBranch(beta=beta, d=d, m=ms.copy(), K=np.array([s.K for s in states]),
                       dK_dm=np.array([s.dK_dm for s in states]),
                       free_energy_gap=np.array([s.free_energy_gap for s in states]),
                       states=states, model=model)


@dataclass(frozen=True)
class PhasePoint:
    r"""The phase transition at one ``(β, d)`` (couplings in the published ``K = 1/(2D)``).

    Attributes
    ----------
    beta, d : float, int
        Inverse temperature and ambient dimension of the point.
    transition : {"continuous", "discontinuous"}
        Whether the branch has a fold.
    k_sharp : float
        Bifurcation point ``K_# = β/(2λ_1)`` of the model's kernel (the closed form
        :func:`~wflow.phase.thresholds.k_sharp` for ``e^{β x·y}``).
    k_fold, m_fold : float
        The fold ``K_f = min K(m)`` and its order parameter (``nan`` if continuous).
    k_c, m_c : float
        The transition: equal free energies on the upper branch (discontinuous), or
        ``K_#`` and ``0`` (continuous).
    landau : float
        ``a = lim_{m→0} (K(m) − K_#)/m²`` (Richardson from the two smallest grid points):
        its sign is the transition's type.
    quadrature_residual : float
        A-posteriori check of the quadrature: ``max_l |⟨P_l⟩ − c_l|`` of the fold and
        ``K_c`` states re-evaluated with twice the nodes (``0`` for a continuous
        transition, whose ``K_c = K_#`` is exact). Above :data:`QUADRATURE_RTOL` a warning
        says to raise ``ZonalOptions.nodes``.
    branch : ZonalBranch
        The continuation behind the numbers.
    """

    beta: float
    d: int
    transition: Transition
    k_sharp: float
    k_fold: float
    m_fold: float
    k_c: float
    m_c: float
    landau: float
    quadrature_residual: float
    branch: ZonalBranch = field(repr=False)

    def diffusions(self) -> dict[str, float]:
        """The thresholds as token diffusions ``D = 1/(2K)`` (:func:`diffusion_of`).

        Returns ``{"D_sharp", "D_c", "D_fold"}`` (``D_fold`` ``nan`` if continuous); the
        uniform density is stable for ``D > D_#``, clustering wins for ``D < D_c``.
        """
        return {"D_sharp": diffusion_of(self.k_sharp), "D_c": diffusion_of(self.k_c),
                "D_fold": diffusion_of(self.k_fold) if self.k_fold == self.k_fold
                else math.nan}

    def as_dict(self) -> dict[str, float | int | str]:
        """The numbers, ``K`` and ``D`` (JSON-ready; ``nan`` for a continuous fold)."""
        return {"beta": self.beta, "d": self.d, "transition": self.transition,
                "k_sharp": self.k_sharp, "k_fold": self.k_fold, "m_fold": self.m_fold,
                "k_c": self.k_c, "m_c": self.m_c, "landau": self.landau,
                "quadrature_residual": self.quadrature_residual,
                **self.diffusions()}


def _landau(branch: ZonalBranch, k0: float) -> float:
    """``a`` from ``(K − K_#)/m² = a + b m²`` at the two smallest grid points."""
    m1, m2 = branch.m[0], branch.m[1]
    q1, q2 = (branch.K[0] - k0) / m1**2, (branch.K[1] - k0) / m2**2
    return float((q1 * m2**2 - q2 * m1**2) / (m2**2 - m1**2))


def phase_point(beta: float, d: int, *, m: np.ndarray | None = None,
                options: ZonalOptions | None = None,
                eigenvalues: Eigenvalues = funk_hecke_eigenvalues) -> PhasePoint:
    """Classify the transition at ``(β, d)`` and locate ``K_f`` and ``K_c`` (module docstring).

    The branch (:func:`zonal_branch`) is scanned for a sign change of ``dK/dm`` from ``−``
    to ``+``; there Brent's method on the exact slope gives the fold, then Brent's method on
    ``ΔF(m)`` between the fold and the first grid state with ``ΔF < 0`` gives ``K_c``.
    If the slope is still negative at the end of the grid, the grid is extended towards
    ``m = 1`` (``1 − (1 − m_max)·0.7^k``) before giving up.

    Parameters
    ----------
    beta, d, m, options, eigenvalues
        As :func:`zonal_branch`.

    Returns
    -------
    PhasePoint

    Raises
    ------
    PhaseError
        No fold (or no ``ΔF < 0``) before ``m = 1 − 1e-3``, or a failed solve.
    """
    ms = default_m_grid() if m is None else np.asarray(m, dtype=np.float64)
    br = zonal_branch(beta, d, m=ms, options=options, eigenvalues=eigenvalues)
    k0 = float(br.model.beta / (2.0 * br.model.lam[1]))
    a = _landau(br, k0)
    if np.all(br.dK_dm > 0):
        logger.info("beta=%g d=%d: continuous transition at K_# = %.10g (a = %.3e)",
                    br.beta, br.d, k0, a)
        return PhasePoint(beta=br.beta, d=br.d, transition="continuous", k_sharp=k0,
                          k_fold=math.nan, m_fold=math.nan, k_c=k0, m_c=0.0, landau=a,
                          quadrature_residual=0.0, branch=br)

    def _needs_more(b: ZonalBranch) -> bool:
        neg = np.nonzero(b.dK_dm < 0)[0]
        after = b.free_energy_gap[neg[-1] + 1:] if neg.size else b.free_energy_gap
        return bool(b.dK_dm[-1] <= 0 or not np.any(after < 0))

    k = 1
    while _needs_more(br):
        m_new = 1.0 - (1.0 - ms[-1]) * 0.7 ** np.arange(1, 6)
        if m_new[-1] > 1.0 - 1e-3 or k > 4:
            raise PhaseError(f"beta={br.beta:g} d={br.d}: no fold and free-energy crossing "
                             f"before m = {ms[-1]:.4f}; raise ZonalOptions.nodes/modes "
                             f"for such concentrated states")
        ms = np.concatenate([ms, m_new])
        br = zonal_branch(beta, d, m=ms, options=options, eigenvalues=eigenvalues)
        k += 1
    neg = np.nonzero(br.dK_dm < 0)[0]
    # the fold: the last sign change of the slope from - to + (K(m) is unimodal in every
    # case computed; a second one would be logged)
    changes = np.nonzero((br.dK_dm[:-1] < 0) & (br.dK_dm[1:] > 0))[0]
    if changes.size != 1:
        logger.warning("beta=%g d=%d: %d folds on the branch; the last one is used",
                       br.beta, br.d, changes.size)
    i = int(changes[-1]) if changes.size else int(neg[-1])
    m_fold = float(brentq(lambda x: br.solve(x).dK_dm, br.m[i], br.m[i + 1], xtol=M_XTOL))
    fold = br.solve(m_fold)
    if fold.free_energy_gap <= 0:
        raise PhaseError(f"beta={br.beta:g} d={br.d}: the fold has ΔF = "
                         f"{fold.free_energy_gap:.3e} <= 0 (expected > 0)")
    j = i + 1 + int(np.nonzero(br.free_energy_gap[i + 1:] < 0)[0][0])
    m_c = float(brentq(lambda x: br.solve(x).free_energy_gap, m_fold, br.m[j], xtol=M_XTOL))
    crit = br.solve(m_c)
    res = _quadrature_residual(br.model, (fold, crit))
    logger.info("beta=%g d=%d: discontinuous, K_f = %.10g < K_c = %.10g < K_# = %.10g "
                "(quadrature residual %.1e)", br.beta, br.d, fold.K, crit.K, k0, res)
    if res > QUADRATURE_RTOL:
        logger.warning("beta=%g d=%d: the fold / K_c states move by %.1e on a rule of twice "
                       "the nodes (> %.0e): raise ZonalOptions.nodes above %d",
                       br.beta, br.d, res, QUADRATURE_RTOL, br.model.N)
    return PhasePoint(beta=br.beta, d=br.d, transition="discontinuous", k_sharp=k0,
                      k_fold=float(fold.K), m_fold=m_fold, k_c=float(crit.K), m_c=m_c,
                      landau=a, quadrature_residual=res, branch=br)


def _quadrature_residual(model: ZonalModel, states: tuple[ZonalState, ...]) -> float:
    """``max |⟨P_l⟩ − c_l|`` of ``states`` under a Gauss rule of twice the nodes."""
    fine = ZonalModel(model.beta, model.d, eigenvalues=model.eigenvalues,
                      options=replace(model.options, modes=model.L, nodes=2 * model.N))
    return max(float(np.max(np.abs(fine.moments(s.c, s.K)[0] - s.c[1:]))) for s in states)
