"""Time integrators of the finite-volume PDE: SSP Runge–Kutta methods as registered objects.

Every integrator is a convex combination of positivity-checked forward-Euler stages
(Shu–Osher form, docs/theory.md §2), so a step keeps ``m_K >= 0`` whenever each of its
Euler stages does. An integrator declares its ``order()`` and ``nodes`` (``stages()`` of
them) and combines
the stages in :meth:`TimeIntegrator.step`; :data:`TIME_INTEGRATORS` is the only list of
them (the ``[pde] time_integrator`` choices derive from it), and an unregistered
:class:`TimeIntegrator` object is accepted wherever a name is.
"""

from __future__ import annotations

from collections.abc import Callable

import numpy as np

from ..infra.registry import OrderedMethod, Registry

__all__ = ["TIME_INTEGRATORS", "TimeIntegrator", "ShuOsher", "Euler", "SSPRK2", "SSPRK3", "Stage"]

#: ``stage(m, c)``: the forward-Euler update ``m + Δt·L(m)`` with the rates at
#: ``t + c·Δt`` (``c = 0``: the step's start, whose rates are already known), or ``None``
#: when that stage would break the positivity bound.
Stage = Callable[[np.ndarray, float], "np.ndarray | None"]

class TimeIntegrator(OrderedMethod):
    """A strong-stability-preserving explicit Runge–Kutta method.

    Its ``name`` is the value of ``PDEOptions.time_integrator`` / ``[pde] time_integrator``.

    Attributes
    ----------
    nodes : tuple of float
        The stage times ``c`` (fractions of ``Δt``) the method evaluates at, in order.
    declared_order : int or None
        What :meth:`order` returns, the order of accuracy in time
        (:class:`~wflow.infra.registry.OrderedMethod`).
    """

    nodes: tuple[float, ...] = ()

    def stages(self) -> int:
        """Right-hand-side evaluations per step: one per node (the cost estimate's work)."""
        return len(self.nodes)

    def step(self, m0: np.ndarray, stage: Stage) -> np.ndarray | None:
        """One step from ``m0`` (``None`` if a stage broke the positivity bound)."""
        raise NotImplementedError


#: PDE time integrators, by name; where a name is accepted (``PDEOptions.time_integrator``)
#: a :class:`TimeIntegrator` object is too, unregistered.
TIME_INTEGRATORS: Registry[TimeIntegrator] = Registry(
    "time integrator", TimeIntegrator, key="pde.time_integrator")


#: One row of a Shu–Osher table: the stage time ``c`` and how the stage's Euler update ``e``
#: of the previous row's result combines with the step's start ``m⁰`` into this row's
#: result (``None``: ``e`` itself).
ShuOsherRow = tuple[float, "Callable[[np.ndarray, np.ndarray], np.ndarray] | None"]


class ShuOsher(TimeIntegrator):
    """An SSP method in Shu–Osher form, defined by its table :attr:`rows` alone.

    ``m⁽⁰⁾ = m⁰``; row ``i`` computes ``e = E(m⁽ⁱ⁾, c_i)`` (a forward-Euler stage at
    ``t + c_i·Δt``) and ``m⁽ⁱ⁺¹⁾ = combine_i(m⁰, e)``; the last is the step's result.
    ``nodes`` are the rows' stage times (set from ``rows`` for each subclass that
    declares them).
    """

    rows: tuple[ShuOsherRow, ...] = ()

    def __init_subclass__(cls, **kwargs) -> None:  # noqa: D105
        super().__init_subclass__(**kwargs)
        if "rows" in cls.__dict__:
            cls.nodes = tuple(c for c, _combine in cls.rows)

    def step(self, m0: np.ndarray, stage: Stage) -> np.ndarray | None:  # noqa: D102
        m = m0
        for c, combine in self.rows:
            e = stage(m, c)
            if e is None:
                return None
            m = e if combine is None else combine(m0, e)
        return m


@TIME_INTEGRATORS.register
class Euler(ShuOsher):
    """Forward Euler (order 1)."""

    name = "euler"
    declared_order = 1
    rows = ((0.0, None),)


@TIME_INTEGRATORS.register
class SSPRK2(ShuOsher):
    """Heun's SSP-RK2: ``m¹ = E(m⁰)``, ``m⁺ = ½m⁰ + ½E(m¹)`` (order 2)."""

    name = "ssprk2"
    declared_order = 2
    rows = ((0.0, None), (1.0, lambda m0, e: 0.5 * m0 + 0.5 * e))


@TIME_INTEGRATORS.register
class SSPRK3(ShuOsher):
    """Shu–Osher SSP-RK3: ``m² = ¾m⁰ + ¼E(m¹)``, ``m⁺ = ⅓m⁰ + ⅔E(m²)`` (order 3)."""

    name = "ssprk3"
    declared_order = 3
    rows = ((0.0, None), (1.0, lambda m0, e: 0.75 * m0 + 0.25 * e),
            (0.5, lambda m0, e: m0 / 3.0 + 2.0 / 3.0 * e))
