"""Time stepping of the particle system: the time grid, one state's terms, the integrators.

Integrators are registered objects (:data:`INTEGRATORS`, the only list of them; each
declares its ``order()`` and how the weights are advanced alongside):

* ``"euler"`` — explicit Euler + renormalisation ``x ← (x + dt v)/|x + dt v|``
  (the literature's scheme, order 1);
* ``"rk4"`` — classical RK4 for the radially extended field ``F(x) = v(x/|x|)``
  (tangent, so ``|x|`` is a first integral) with normalised stages and a final
  projection, order 4.

A user's integrator is a :class:`ParticleIntegrator` subclass with ``name``, ``order()``
and ``step``: its object runs as it is (``ParticleOptions(integrator=Midpoint())``), and
registered with ``@INTEGRATORS.register`` it is reached by name from a scenario; it runs
on the Python engine
(``engine="auto"`` hands over to it with a warning, ``engine="compiled"`` refuses it),
since only a class that declares ``compiled_code`` has a compiled step.

The state of each step (field, slope terms, energy) comes from one fused compiled pass
(:func:`wflow.energy.particle_field`) for ``d ≤ 3`` where the sums are direct, else
from :func:`wflow.energy.evaluate` with the chosen back-end.
"""

from __future__ import annotations

from typing import NamedTuple

import numpy as np

from ..attention.heads import Attention, Heads
from ..attention.schedules import Schedule, WeightStep
from ..energy import (
    FieldEval,
    SlopeTerms,
    dE_dt_weights,
    evaluate,
    head_energies,
    ito_correction,
    particle_field,
    slope_terms,
)
from ..geometry.sphere import normalize
from ..infra.registry import Method, Registry
from ..kernels import KernelLog, plan_kernel

__all__ = [
    "INTEGRATORS",
    "CODE_EULER",
    "CODE_RK4",
    "ParticleIntegrator",
    "compiled_code",
    "Euler",
    "RK4",
    "time_grid",
]


def time_grid(T: float, dt: float, jumps: tuple[float, ...] = ()) -> np.ndarray:
    """Step times ``0 = t_0 < … < t_S = T``: uniform ``dt`` plus every jump time in ``(0, T)``."""
    n = int(np.ceil(T / dt - 1e-9))
    grid = np.linspace(0.0, T, n + 1)
    tol = 1e-9 * max(T, 1.0)
    for j in (j for j in jumps if 0 < j < T):
        near = np.flatnonzero(np.abs(grid - j) <= tol)
        if near.size:
            grid[near] = j  # snap to the exact jump time
        else:
            grid = np.sort(np.append(grid, j))
    return grid


def _velocity(field_: FieldEval, flow: str) -> np.ndarray:
    return field_.v if flow == "transformer" else field_.vhat


class _Kernel(NamedTuple):
    """Kernel settings threaded through a run (back-end, tolerance, call log)."""

    backend: str = "auto"
    tol: float = 1e-10
    log: KernelLog | None = None

    def evaluate(self, x: np.ndarray, heads: Heads, attn: Attention) -> FieldEval:
        return evaluate(x, heads, attn, backend=self.backend, tol=self.tol, log=self.log)

    def fused(self, x: np.ndarray, m: np.ndarray, heads: Heads, attn: Attention,
              flow: str) -> tuple[FieldEval, SlopeTerms, float] | None:
        """Field, slope terms and energy in one compiled pass, where the sums are direct.

        ``d ≤ 3`` and back-end ``direct``, or ``auto`` where it would choose direct sums
        (not the fast summation); ``None`` otherwise (the caller evaluates separately).
        """
        if x.shape[1] > 3 or self.backend not in ("auto", "direct"):
            return None
        if self.backend == "auto" and plan_kernel(
                x, x, heads.Q, heads.K, beta=attn.beta, kind=attn.kind, tol=self.tol,
                m=m).backend != "direct":
            return None
        return particle_field(x, m, heads, attn, flow=flow, log=self.log,
                              backend=self.backend)


_DEFAULT_KERNEL = _Kernel()


def _state_terms(x: np.ndarray, m: np.ndarray, t: float, theta: np.ndarray, schedule: Schedule,
                 attn: Attention, flow: str, heads: Heads | None = None,
                 kernel: _Kernel = _DEFAULT_KERNEL) -> tuple[Heads, FieldEval, np.ndarray, dict]:
    heads = schedule.heads_at(theta) if heads is None else heads
    fused = kernel.fused(x, m, heads, attn, flow)
    if fused is None:
        fe = kernel.evaluate(x, heads, attn)
        st = slope_terms(x, m, fe, heads, _velocity(fe, flow))
        E = float(heads.w @ head_energies(fe, m, attn))
    else:
        fe, st, E = fused
    vel = _velocity(fe, flow)
    dEdt = 0.0 if schedule.static else dE_dt_weights(x, m, fe, heads,
                                                      schedule.A_dot(theta, t), attn)
    ito = 0.0
    if schedule.stochastic:
        ito = ito_correction(x, m, heads, attn, schedule.sigma(t),
                             symmetric_noise=schedule.symmetric_noise)
    terms = {"E": E, "dEdt_w": dEdt, "power": st.power, "slope2": st.slope2,
             "speed2": st.speed2, "G2": st.G2, "ito": ito}
    return heads, fe, vel, terms


def _rk4_step(x: np.ndarray, h: float, k1: np.ndarray, heads: Heads, theta: np.ndarray,
              theta_mid: np.ndarray, theta_new: np.ndarray, schedule: Schedule,
              attn: Attention, flow: str, kernel: _Kernel) -> np.ndarray:
    """One RK4 step of ``F(x) = v(x/|x|)`` with normalised stages and a final projection."""
    stage_heads = {id(theta): heads}  # heads built once per distinct θ (static: reused)

    def V(y: np.ndarray, th: np.ndarray) -> np.ndarray:
        hh = stage_heads.get(id(th))
        if hh is None:
            hh = stage_heads[id(th)] = schedule.heads_at(th)
        return _velocity(kernel.evaluate(normalize(y), hh, attn), flow)

    k2 = V(x + 0.5 * h * k1, theta_mid)
    k3 = V(x + 0.5 * h * k2, theta_mid)
    k4 = V(x + h * k3, theta_new)
    return normalize(x + (h / 6.0) * (k1 + 2 * k2 + 2 * k3 + k4))


# ----------------------------------------------------------------------------- integrators
#: Compiled code of explicit Euler (the token step ``I_RK4 = 0`` of the compiled loop).
CODE_EULER = 0
#: Compiled code of RK4 with normalised stages (``I_RK4 = 1``; weights by RK4 half steps).
CODE_RK4 = 1
class ParticleIntegrator(Method):
    """One step of the tokens ``x ← Φ_h(x)`` on the sphere.

    Attributes
    ----------
    name : str
        The name in ``ParticleOptions.integrator``.
    weights : WeightStep
        How the schedule advances the weights over the step
        (:meth:`wflow.attention.schedules.Schedule.advance` ``method``).
    compiled_code : int or None
        The step of the compiled loop (:mod:`wflow.particles._path_numba`) that is this
        integrator, bit for bit: :data:`CODE_EULER`, :data:`CODE_RK4`; ``None`` (the
        default): no compiled code, the run takes the Python engine. Read with
        :func:`compiled_code`, from the class's own body only: a subclass that redefines
        ``step`` does not inherit its parent's code.
    """

    name: str = ""
    weights: WeightStep = WeightStep.RK4
    compiled_code: int | None = None

    def order(self) -> int:
        """Order of accuracy in time (checked by a fitted-order test)."""
        raise NotImplementedError

    def stages(self) -> int:
        """Evaluations of the field per step (the cost estimate's work per step).

        The default, 1, is a one-stage method's; a multi-stage integrator overrides it.
        """
        return 1

    def step(self, x: np.ndarray, h: float, k1: np.ndarray, heads: Heads, theta: np.ndarray,
             theta_mid: np.ndarray, theta_new: np.ndarray, schedule: Schedule,
             attn: Attention, flow: str, kernel: _Kernel) -> np.ndarray:
        """Tokens after one step of size ``h`` from ``x`` (``k1``: the velocity at ``x``)."""
        raise NotImplementedError


#: Particle integrators, by name (``ParticleOptions.integrator``, ``[particles] integrator``);
#: where a name is accepted a :class:`ParticleIntegrator` object is too, unregistered.
INTEGRATORS: Registry[ParticleIntegrator] = Registry(
    "particle integrator", ParticleIntegrator, key="particles.integrator")


def compiled_code(integrator: ParticleIntegrator) -> int | None:
    """The compiled loop's code of ``integrator`` (``None``: it has none).

    Declared in the body of the integrator's own class (``compiled_code = ...``), never
    inherited, so that the compiled engine cannot run a parent's step for a subclass's.
    """
    return type(integrator).__dict__.get("compiled_code")


@INTEGRATORS.register
class Euler(ParticleIntegrator):
    """Explicit Euler and renormalisation; the weights take the same Euler step."""

    name = "euler"
    weights = WeightStep.EULER
    compiled_code = CODE_EULER

    def order(self) -> int:  # noqa: D102
        return 1

    def step(self, x: np.ndarray, h: float, k1: np.ndarray, heads: Heads,  # noqa: D102
             theta: np.ndarray, theta_mid: np.ndarray, theta_new: np.ndarray,
             schedule: Schedule, attn: Attention, flow: str, kernel: _Kernel) -> np.ndarray:
        return normalize(x + h * k1)


@INTEGRATORS.register
class RK4(ParticleIntegrator):
    """Classical RK4 of ``F(x) = v(x/|x|)``; the weights take RK4 half steps."""

    name = "rk4"
    weights = WeightStep.RK4
    compiled_code = CODE_RK4

    def order(self) -> int:  # noqa: D102
        return 4

    def stages(self) -> int:  # noqa: D102
        return 4

    def step(self, x: np.ndarray, h: float, k1: np.ndarray, heads: Heads,  # noqa: D102
             theta: np.ndarray, theta_mid: np.ndarray, theta_new: np.ndarray,
             schedule: Schedule, attn: Attention, flow: str, kernel: _Kernel) -> np.ndarray:
        return _rk4_step(x, h, k1, heads, theta, theta_mid, theta_new, schedule, attn, flow,
                         kernel)
