"""Slope limiters of the order-2 finite-volume reconstruction, as registered objects.

Each limiter scales the least-squares gradient of a cell by ``φ_K ∈ [0, 1]``; the
Zhang–Shu positivity scaling follows in :meth:`wflow.pde.fv._FV.slopes` whatever the
limiter. :data:`LIMITERS` is the only list of them (the ``[pde] limiter`` choices derive
from it) and an unregistered name raises instead of meaning "no limiting"; an unregistered
:class:`Limiter` object is accepted wherever a name is. A limiter acts only at
``order = 2``, and only its own parameters act (:attr:`Limiter.params`):
:func:`check_applicable` refuses the others, as the JKO refuses the keys of the other
scheme.
"""

from __future__ import annotations

import logging
from collections.abc import Iterable
from dataclasses import MISSING, fields
from typing import Any

import numpy as np

from ..infra.registry import Method, Registry
from ..infra.schema import ScenarioError

__all__ = ["LIMITERS", "Limiter", "BarthJespersen", "Venkatakrishnan", "Positivity",
           "check_applicable"]

logger = logging.getLogger(__name__)


class Limiter(Method):
    """A slope limiter: the factor ``φ_K ∈ [0, 1]`` of the least-squares gradient.

    ``phi(delta, rK, rmax, rmin, fv)``: ``delta (no, 3q)`` are the unlimited edge values
    minus the cell mean ``rK (no,)`` at the cell's own edge quadrature points, ``rmax``,
    ``rmin (no,)`` the extremes over the cell and its face neighbours; ``fv`` the
    :class:`wflow.pde.fv._FV` (mesh sizes, options). Called under ``np.errstate`` (divisions by zero
    give ``inf`` or ``nan`` and are handled by the caller's positivity scaling).
    """

    #: The ``PDEOptions`` fields this limiter reads (e.g. ``("venkat_k",)``).
    params: tuple[str, ...] = ()

    def phi(self, delta: np.ndarray, rK: np.ndarray, rmax: np.ndarray, rmin: np.ndarray,
            fv: Any) -> np.ndarray:
        """The limiter factor of every owned cell, shape ``(no,)``."""
        raise NotImplementedError


#: Slope limiters of the order-2 reconstruction, by name (each followed by the
#: Zhang–Shu positivity scaling in :meth:`wflow.pde.fv._FV.slopes`).
LIMITERS: Registry[Limiter] = Registry("limiter", Limiter, key="pde.limiter")

#: Every limiter's parameters (``PDEOptions`` fields read only by the limiters that
#: declare them in :attr:`Limiter.params`).
LIMITER_PARAMS: tuple[str, ...] = ("venkat_k",)


def check_applicable(opts: Any, given: Iterable[str] = (), *, label: str = "pde.{}") -> None:
    """Refuse (or warn about) limiter options where they have no effect.

    The limiter and its parameters act only at ``order = 2`` (the order-1 scheme is
    upwind, with no reconstruction); a limiter parameter (:data:`LIMITER_PARAMS`) acts
    only with a limiter that declares it (:attr:`Limiter.params`). Such an option raises
    :class:`~wflow.infra.schema.ScenarioError` (exit status 2, one line naming the key)
    when its value differs from the default, and is logged as a WARNING when it is in
    ``given`` (the scenario table's keys) with the default value, as
    :func:`wflow.jko.options.check_applicable` does for the JKO's schemes.

    Parameters
    ----------
    opts : PDEOptions
    given : iterable of str
        The keys set explicitly (a ``[pde]`` table's keys); the API cannot tell a value
        left at its default from one given, so only a changed value is refused there.
    label : str
        Format of the key in messages (``"--{}"`` for a command-line flag).
    """
    given = set(given)
    defaults = {f.name: f.default for f in fields(opts) if f.default is not MISSING}
    if opts.order == 2:
        limiter = LIMITERS.resolve(opts.limiter, label.format("limiter"))
        idle = [(k, "limiter = " + " or ".join(repr(name) for name, lim in LIMITERS.items()
                                              if k in lim.params))
                for k in LIMITER_PARAMS if k not in limiter.params]
        why = f"this run's limiter is {str(limiter)!r}"
    else:
        idle = [(k, "order = 2") for k in ("limiter", *LIMITER_PARAMS)]
        why = f"this run's order is {opts.order}"
    for key, cond in idle:
        value = getattr(opts, key)
        line = f"{label.format(key)}: applies only with {cond}, and {why}"
        if not _same(value, defaults.get(key)):
            raise ScenarioError(f"{line}: it would be ignored; remove it")
        if key in given:
            logger.warning("%s; its value %r (the default) has no effect", line, value)


def _same(a: Any, b: Any) -> bool:
    return isinstance(a, str) == isinstance(b, str) and bool(a == b)


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
    params = ("venkat_k",)

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


