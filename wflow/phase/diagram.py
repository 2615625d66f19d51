r"""The phase diagram, the critical exponents, and the dichotomy at ``β*`` as a check.

* :func:`phase_diagram`: :func:`~wflow.phase.branch.phase_point` over a list of ``β``
  for one ``d``: ``K_#``, ``K_c``, ``K_f`` against ``β`` (published ``K = 1/(2D)``).
* :func:`order_parameter_exponent`: the slope of ``log m`` against ``log(K − K_#)`` along
  the branch near the bifurcation: ``1/2`` for ``β < β*`` (``K − K_# ≈ a m²``), ``1/4`` at
  ``β = β*`` (``a = 0``, ``K − K_# ≈ b m⁴``).
* :func:`check_dichotomy`: the transition is continuous at ``(1 − margin) β*`` and
  discontinuous, with ``K_f < K_c < K_#``, at ``(1 + margin) β*``. A wrong ``β*`` (or a
  kernel whose tricritical point is elsewhere) fails it.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass, field

import numpy as np

from .branch import PhasePoint, phase_point, zonal_branch
from .thresholds import check_phase_args, funk_hecke_eigenvalues, tricritical_beta
from .zonal import Eigenvalues, ZonalOptions

logger = logging.getLogger(__name__)

__all__ = ["PhaseDiagram", "phase_diagram", "ExponentFit", "order_parameter_exponent",
           "DichotomyCheck", "check_dichotomy"]


@dataclass(frozen=True)
class PhaseDiagram:
    """``K_#``, ``K_c``, ``K_f`` against ``β`` for one ``d`` (published ``K = 1/(2D)``).

    Attributes
    ----------
    d : int
        Ambient dimension.
    beta_star : float
        ``β*(d)`` (:func:`~wflow.phase.thresholds.tricritical_beta`).
    beta, k_sharp, k_c, k_fold, m_c, m_fold : numpy.ndarray
        Shape ``(n,)``; ``k_fold``/``m_fold`` are ``nan`` where the transition is continuous.
    transition : list of str
        ``"continuous"`` or ``"discontinuous"`` per ``β``.
    points : list of PhasePoint
        The computations behind each column.
    """

    d: int
    beta_star: float
    beta: np.ndarray
    k_sharp: np.ndarray
    k_c: np.ndarray
    k_fold: np.ndarray
    m_c: np.ndarray
    m_fold: np.ndarray
    transition: list[str]
    points: list[PhasePoint] = field(repr=False)

    def as_dict(self) -> dict:
        """JSON-ready columns (``nan`` where there is no fold)."""
        return {"d": self.d, "beta_star": self.beta_star, "beta": self.beta.tolist(),
                "k_sharp": self.k_sharp.tolist(), "k_c": self.k_c.tolist(),
                "k_fold": self.k_fold.tolist(), "m_c": self.m_c.tolist(),
                "m_fold": self.m_fold.tolist(), "transition": list(self.transition)}


def phase_diagram(d: int, betas: np.ndarray, *, options: ZonalOptions | None = None,
                  eigenvalues: Eigenvalues = funk_hecke_eigenvalues) -> PhaseDiagram:
    """The transition at each ``β`` of ``betas`` in dimension ``d`` (:func:`phase_point`).

    Parameters
    ----------
    d : int
        Ambient dimension ``d >= 2``.
    betas : array_like
        Inverse temperatures ``> 0``, shape ``(n,)``.
    options, eigenvalues
        As :func:`~wflow.phase.branch.zonal_branch`.

    Returns
    -------
    PhaseDiagram
    """
    pts = [phase_point(float(b), d, options=options, eigenvalues=eigenvalues)
           for b in np.atleast_1d(np.asarray(betas, dtype=np.float64))]

    def col(name: str) -> np.ndarray:
        return np.array([getattr(p, name) for p in pts], dtype=np.float64)

    return PhaseDiagram(d=int(d), beta_star=tricritical_beta(d), beta=col("beta"),
                        k_sharp=col("k_sharp"), k_c=col("k_c"), k_fold=col("k_fold"),
                        m_c=col("m_c"), m_fold=col("m_fold"),
                        transition=[p.transition for p in pts], points=pts)


@dataclass(frozen=True)
class ExponentFit:
    """A fitted law ``m ∝ (K − K_#)^exponent`` near the bifurcation.

    Attributes
    ----------
    exponent : float
        Least-squares slope of ``log m`` against ``log(K − K_#)``.
    m, dk : numpy.ndarray
        The order parameters and ``K − K_#`` fitted, shape ``(n,)``.
    """

    exponent: float
    m: np.ndarray
    dk: np.ndarray


def order_parameter_exponent(beta: float, d: int, *, m: np.ndarray | None = None,
                             options: ZonalOptions | None = None,
                             eigenvalues: Eigenvalues = funk_hecke_eigenvalues) -> ExponentFit:
    r"""Fit ``m ∝ (K − K_#)^γ`` near ``K_#`` (``γ = 1/2`` below ``β*``, ``1/4`` at it).

    Parameters
    ----------
    beta : float
        Inverse temperature, ``<= β*`` for a supercritical branch (``K > K_#``).
    d : int
        Ambient dimension.
    m : numpy.ndarray or None, keyword-only
        Order parameters of the fit (default 9 geometric points on ``[0.005, 0.03]``: small
        enough that the next Landau term changes the slope by ``O(m²) < 1e-3``; large enough
        that ``K − K_# ≈ b m⁴ ≥ 1e-10`` stays far above the round-off ``≈ eps K/m`` of ``K``).
    options, eigenvalues
        As :func:`~wflow.phase.branch.zonal_branch`.

    Returns
    -------
    ExponentFit

    Raises
    ------
    ValueError
        ``K − K_# <= 0`` on the fit range (a subcritical branch: ``β > β*``).
    """
    beta, d = check_phase_args(beta, d)
    ms = np.geomspace(0.005, 0.03, 9) if m is None else np.asarray(m, dtype=np.float64)
    br = zonal_branch(beta, d, m=ms, options=options, eigenvalues=eigenvalues)
    dk = br.K - beta / (2.0 * br.model.lam[1])
    if np.any(dk <= 0):
        raise ValueError(f"beta={beta:g} d={d}: K(m) < K_# on the fit range (a subcritical "
                         f"branch, beta > beta*): no power law m ~ (K - K_#)^gamma")
    slope = float(np.polyfit(np.log(dk), np.log(ms), 1)[0])
    return ExponentFit(exponent=slope, m=ms, dk=dk)


@dataclass(frozen=True)
class DichotomyCheck:
    """The dichotomy at ``β* ± margin`` in one dimension.

    Attributes
    ----------
    d : int
        Ambient dimension.
    beta_star : float
        The ``β*`` under test.
    below, above : PhasePoint
        The transitions at ``(1 − margin) β*`` and ``(1 + margin) β*``.
    holds : bool
        ``below`` continuous and ``above`` discontinuous with ``K_f < K_c < K_#``.
    message : str
        What holds or what failed.
    """

    d: int
    beta_star: float
    below: PhasePoint
    above: PhasePoint
    holds: bool
    message: str


def check_dichotomy(d: int, *, beta_star: float | None = None, margin: float = 0.02,
                    options: ZonalOptions | None = None,
                    eigenvalues: Eigenvalues = funk_hecke_eigenvalues) -> DichotomyCheck:
    """Check that the transition changes type at ``beta_star`` (default: the closed form).

    Parameters
    ----------
    d : int
        Ambient dimension ``d >= 2``.
    beta_star : float or None, keyword-only
        The tricritical ``β`` to test (``None``: :func:`tricritical_beta` ``(d)``).
    margin : float, keyword-only
        Relative distance of the two test points (default 2 %).
    options, eigenvalues
        As :func:`~wflow.phase.branch.zonal_branch`.

    Returns
    -------
    DichotomyCheck
    """
    bs = tricritical_beta(d) if beta_star is None else float(beta_star)
    lo = phase_point(bs * (1 - margin), d, options=options, eigenvalues=eigenvalues)
    hi = phase_point(bs * (1 + margin), d, options=options, eigenvalues=eigenvalues)
    fails = []
    if lo.transition != "continuous":
        fails.append(f"{lo.transition} at (1-{margin:g}) beta* = {lo.beta:.8g} "
                     f"(fold K_f = {lo.k_fold:.8g})")
    if hi.transition != "discontinuous":
        fails.append(f"{hi.transition} at (1+{margin:g}) beta* = {hi.beta:.8g}")
    elif not hi.k_fold < hi.k_c < hi.k_sharp:
        fails.append(f"at (1+{margin:g}) beta*: not K_f < K_c < K_# "
                     f"({hi.k_fold:.8g}, {hi.k_c:.8g}, {hi.k_sharp:.8g})")
    msg = ("; ".join(fails) if fails else
           f"continuous at {lo.beta:.6g}, discontinuous at {hi.beta:.6g} "
           f"(K_f={hi.k_fold:.8g} < K_c={hi.k_c:.8g} < K_#={hi.k_sharp:.8g})")
    return DichotomyCheck(d=int(d), beta_star=bs, below=lo, above=hi, holds=not fails,
                          message=msg)
