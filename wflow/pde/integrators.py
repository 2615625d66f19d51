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

from ..infra.registry import Method, Registry

__all__ = ["TIME_INTEGRATORS", "TimeIntegrator", "Euler", "SSPRK2", "SSPRK3", "Stage"]

#: ``stage(m, c)``: the forward-Euler update ``m + Δt·L(m)`` with the rates at
#: ``t + c·Δt`` (``c = 0``: the step's start, whose rates are already known), or ``None``
#: when that stage would break the positivity bound.
Stage = Callable[[np.ndarray, float], "np.ndarray | None"]

class TimeIntegrator(Method):
    """A strong-stability-preserving explicit Runge–Kutta method.

    Attributes
    ----------
    name : str
        The name in ``PDEOptions.time_integrator`` / ``[pde] time_integrator``.
    nodes : tuple of float
        The stage times ``c`` (fractions of ``Δt``) the method evaluates at, in order.
    """

    name: str = ""
    nodes: tuple[float, ...] = ()

    def order(self) -> int:
        """Order of accuracy in time."""
        raise NotImplementedError

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


@TIME_INTEGRATORS.register
class Euler(TimeIntegrator):
    """Forward Euler (order 1)."""

    name = "euler"
    nodes = (0.0,)

    def order(self) -> int:  # noqa: D102
        return 1

    def step(self, m0: np.ndarray, stage: Stage) -> np.ndarray | None:  # noqa: D102
        return stage(m0, 0.0)


@TIME_INTEGRATORS.register
class SSPRK2(TimeIntegrator):
    """Heun's SSP-RK2: ``m¹ = E(m⁰)``, ``m⁺ = ½m⁰ + ½E(m¹)`` (order 2)."""

    name = "ssprk2"
    nodes = (0.0, 1.0)

    def order(self) -> int:  # noqa: D102
        return 2

    def step(self, m0: np.ndarray, stage: Stage) -> np.ndarray | None:  # noqa: D102
        m1 = stage(m0, 0.0)
        if m1 is None:
            return None
        e1 = stage(m1, 1.0)
        if e1 is None:
            return None
        return 0.5 * m0 + 0.5 * e1


@TIME_INTEGRATORS.register
class SSPRK3(TimeIntegrator):
    """Shu–Osher SSP-RK3: ``m² = ¾m⁰ + ¼E(m¹)``, ``m⁺ = ⅓m⁰ + ⅔E(m²)`` (order 3)."""

    name = "ssprk3"
    nodes = (0.0, 1.0, 0.5)

    def order(self) -> int:  # noqa: D102
        return 3

    def step(self, m0: np.ndarray, stage: Stage) -> np.ndarray | None:  # noqa: D102
        m1 = stage(m0, 0.0)
        if m1 is None:
            return None
        e1 = stage(m1, 1.0)
        if e1 is None:
            return None
        m2 = 0.75 * m0 + 0.25 * e1
        e2 = stage(m2, 0.5)
        if e2 is None:
            return None
        return m0 / 3.0 + 2.0 / 3.0 * e2
