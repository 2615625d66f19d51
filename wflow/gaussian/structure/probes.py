"""The probes the structural rules share: tolerances, integrated tails and their fitted rates.

Part of :mod:`wflow.gaussian.structure` (the package re-exports its names).
"""

from __future__ import annotations

import logging
import math
from typing import Any

import numpy as np

from ..asymptotics import RateFit, fit_tail_rate, sample_times
from ..params import GaussianParams
from ..solver import integrate_moments

logger = logging.getLogger(__name__)


logger = logging.getLogger(__name__)

_EPS = np.finfo(np.float64).eps
#: Real parts within ``_CRIT · ‖A‖`` of 0 count as 0 (rule 1): eigenvalues of a defective
#: matrix are only determined to ``O(√ε ‖A‖)``; 1e-6 leaves a margin over √ε ≈ 1.5e-8.
_CRIT = 1e-6


def _sym(M: np.ndarray) -> np.ndarray:
    return 0.5 * (M + M.T)


def probe_tolerances(Sigma0: np.ndarray) -> tuple[float, float, float]:
    """``(rtol, atol, floor)`` for tail integrations from Σ₀.

    The state is the factor ``L`` (``Σ = LLᵀ``, entries ``~ √‖Σ‖``): ``atol = 1e-14
    √‖Σ₀‖``; ``Σ`` keeps ~3 correct digits while ``|L| ≥ 1e3 atol``, so decay fits stop
    at ``floor = (1e3·atol)²``.
    """
    s = math.sqrt(max(float(np.linalg.norm(Sigma0, 2)), 1e-300))
    atol = 1e-14 * s
    return 1e-10, atol, (1e3 * atol) ** 2


def integrate_tail(params: GaussianParams, Sigma0: np.ndarray, horizon: float, *,
                   solver: str = "LSODA") -> Any:
    """Integrate the covariance from Σ₀ to ``horizon`` on :func:`sample_times` (quietly)."""
    rtol, atol, _ = probe_tolerances(Sigma0)
    # quiet: a failed status is read by the callers
    return integrate_moments(params, np.zeros(params.d), Sigma0, horizon,
                             t_eval=sample_times(horizon), method=solver, rtol=rtol, atol=atol,
                             quiet=True)


def _fit_distance(tr: Any, target: np.ndarray | None, Sigma0: np.ndarray) -> RateFit:
    """Fit ``‖Σ(t) − target‖`` (``‖Σ(t)‖`` when ``target`` is None) on the tail."""
    rtol, _, floor = probe_tolerances(Sigma0)
    if target is None:
        q = np.linalg.norm(tr.Sigma, axis=(1, 2))
        return fit_tail_rate(tr.t, q, floor=floor)
    q = np.linalg.norm(tr.Sigma - target[None], axis=(1, 2))
    # the integration's global error is ~ 1e3 rtol ‖Σ‖ over long horizons
    return fit_tail_rate(tr.t, q, floor=1e3 * rtol * float(np.linalg.norm(target)) + floor)
