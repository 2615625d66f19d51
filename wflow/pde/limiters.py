"""Slope limiters of the order-2 finite-volume reconstruction, as registered objects.

Each limiter scales the least-squares gradient of a cell by ``φ_K ∈ [0, 1]``; the
Zhang–Shu positivity scaling follows in :meth:`wflow.pde.fv._FV.slopes` whatever the
limiter. :data:`LIMITERS` is the only list of them (the ``[pde] limiter`` choices derive
from it) and an unregistered name raises instead of meaning "no limiting".
"""

from __future__ import annotations

from typing import Any

import numpy as np

from ..infra.registry import Registry

__all__ = ["LIMITERS", "Limiter", "BarthJespersen", "Venkatakrishnan", "Positivity"]


# ----------------------------------------------------------------------------- limiters
#: Slope limiters of the order-2 reconstruction, by name (each followed by the
#: Zhang–Shu positivity scaling in :meth:`wflow.pde.fv._FV.slopes`).
LIMITERS: Registry[Limiter] = Registry("limiter")


class Limiter:
    """A slope limiter: the factor ``φ_K ∈ [0, 1]`` of the least-squares gradient.

    ``phi(delta, rK, rmax, rmin, fv)``: ``delta (no, 3q)`` are the unlimited edge values
    minus the cell mean ``rK (no,)`` at the cell's own edge quadrature points, ``rmax``,
    ``rmin (no,)`` the extremes over the cell and its face neighbours; ``fv`` the
    :class:`wflow.pde.fv._FV` (mesh sizes, options). Called under ``np.errstate`` (divisions by zero
    give ``inf`` or ``nan`` and are handled by the caller's positivity scaling).
    """

    name: str = ""

    def phi(self, delta: np.ndarray, rK: np.ndarray, rmax: np.ndarray, rmin: np.ndarray,
            fv: Any) -> np.ndarray:
        """The limiter factor of every owned cell, shape ``(no,)``."""
        raise NotImplementedError


@LIMITERS.register
class BarthJespersen(Limiter):
    """Barth–Jespersen: the largest ``φ`` keeping every edge value within ``[rmin, rmax]``."""

    name = "barth_jespersen"

    def phi(self, delta: np.ndarray, rK: np.ndarray, rmax: np.ndarray,  # noqa: D102
            rmin: np.ndarray, fv: Any) -> np.ndarray:
        bound = np.where(delta > 0, (rmax - rK)[:, None], (rmin - rK)[:, None])
        ratio = np.where(np.abs(delta) > 0, bound / delta, np.inf)
        return np.minimum(1.0, ratio.min(axis=1))


@LIMITERS.register
class Venkatakrishnan(Limiter):
    """Venkatakrishnan (1995), smooth, with ``ε² = (K h_K)³ ρ̄²`` (scale-free in ``ρ``)."""

    name = "venkatakrishnan"

    def phi(self, delta: np.ndarray, rK: np.ndarray, rmax: np.ndarray,  # noqa: D102
            rmin: np.ndarray, fv: Any) -> np.ndarray:
        dp = np.where(delta > 0, (rmax - rK)[:, None], (rmin - rK)[:, None])
        eps2 = ((fv.opts.venkat_k * fv.hK) ** 3 * fv.rho_ref**2)[:, None]
        num = (dp * dp + eps2) + 2.0 * delta * dp
        den = dp * dp + 2.0 * delta * delta + delta * dp + eps2
        ph = np.where(np.abs(delta) > 0, num / den, 1.0)
        return np.clip(ph.min(axis=1), 0.0, 1.0)


@LIMITERS.register
class Positivity(Limiter):
    """No limiting (``φ = 1``): only the positivity scaling acts."""

    name = "positivity"

    def phi(self, delta: np.ndarray, rK: np.ndarray, rmax: np.ndarray,  # noqa: D102
            rmin: np.ndarray, fv: Any) -> np.ndarray:
        return np.ones(fv.no)


