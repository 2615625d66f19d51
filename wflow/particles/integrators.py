"""Time stepping of the particle system: the time grid, one state's terms, the integrators.

Integrators are registered objects (:data:`INTEGRATORS`, the only list of them; each
declares its ``order()`` and how the weights are advanced alongside):

* ``"euler"`` — explicit Euler + renormalisation ``x ← (x + dt v)/|x + dt v|``
  (the literature's scheme, order 1);
* ``"rk4"`` — classical RK4 for the radially extended field ``F(x) = v(x/|x|)``
  (tangent, so ``|x|`` is a first integral) with normalised stages and a final
  projection, order 4;
* ``"em"`` — projected Euler–Maruyama for token diffusion ``D > 0`` (THEORY §8), weak
  order 1 (:class:`EulerMaruyama`; ``D = 0``: ``"euler"``);
* ``"strang"`` — Strang splitting ``B_{h/2} ∘ Φ^{RK4}_h ∘ B_{h/2}`` with exact Brownian
  increments on ``S^{d−1}`` from the heat kernel, weak order 2 (:class:`StrangHeat`;
  ``D = 0``: ``"rk4"``'s step);
* ``"strang-heun"`` — Strang splitting ``Φ^{Heun}_{h/2} ∘ B_h ∘ Φ^{Heun}_{h/2}`` with the
  drift outside, weak order 2 (:class:`StrangHeun`): its first stage is the state's
  velocity, so a noisy step costs RK4's evaluations (``"strang"`` one more), at a
  second-order deterministic error. Their noise comes from keyed streams
  (:mod:`wflow.particles.noise`).

A user's integrator is a :class:`ParticleIntegrator` subclass with ``name``, ``order()``
and ``step``: its object runs as it is (``ParticleOptions(integrator=Midpoint())``), and
registered with ``@INTEGRATORS.register`` it is reached by name from a scenario; it runs
on the Python engine
(``engine="auto"`` hands over to it with a warning, ``engine="compiled"`` refuses it),
since only a class that declares ``compiled_code`` has a compiled step.

The state of each step (field, slope terms, energy) comes from one fused compiled pass
(:func:`wflow.energy.particle_field`) for ``d ≤ 3`` where the sums are direct, else
from :func:`wflow.energy.evaluate` with the chosen back-end (heads with values of rank
``r`` summed at their rank). Under a causal mask (``Attention(mask=...)``) every stage's
velocity is the masked one (tokens in their array order) and the state's energy terms
are those of the exchangeable model (:func:`_state_terms`).
"""

from __future__ import annotations

from collections.abc import Callable
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
from ..infra.registry import OrderedMethod, Registry
from ..kernels import KernelLog, plan_kernel

__all__ = [
    "INTEGRATORS",
    "CODE_EULER",
    "CODE_RK4",
    "CODE_EM",
    "CODE_STRANG",
    "CODE_STRANG_HEUN",
    "ParticleIntegrator",
    "compiled_code",
    "Euler",
    "RK4",
    "StochasticIntegrator",
    "EulerMaruyama",
    "StrangHeat",
    "StrangHeun",
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
    """Kernel settings threaded through a run (back-end, tolerance, call log, precision).

    ``dtype="float32"``: every evaluation's scores and kernel values in float32, the sums,
    energies and slope terms in float64 (:func:`wflow.energy.evaluate`); the fused
    ``d ≤ 3`` pass (float64) is then not used.
    """

    backend: str = "auto"
    tol: float = 1e-10
    log: KernelLog | None = None
    dtype: str = "float64"

    def evaluate(self, x: np.ndarray, heads: Heads, attn: Attention) -> FieldEval:
        return evaluate(x, heads, attn, backend=self.backend, tol=self.tol, log=self.log,
                        dtype=self.dtype)

    def velocity(self, x: np.ndarray, heads: Heads, attn: Attention, flow: str) -> np.ndarray:
        """The velocity of ``flow`` at ``x`` alone (no ``∇ψ``: an integrator's stage)."""
        return _velocity(evaluate(x, heads, attn, backend=self.backend, tol=self.tol,
                                  log=self.log, gradient=False, dtype=self.dtype), flow)

    def fused(self, x: np.ndarray, m: np.ndarray, heads: Heads, attn: Attention,
              flow: str) -> tuple[FieldEval, SlopeTerms, float] | None:
        """Field, slope terms and energy in one compiled pass, where the sums are direct.

        ``d ≤ 3`` and back-end ``direct``, or ``auto`` where it would choose direct sums
        (not the fast summation); ``None`` otherwise (the caller evaluates separately).
        """
        if (x.shape[1] > 3 or self.backend not in ("auto", "direct")
                or getattr(attn, "mask", None) is not None or self.dtype != "float64"):
            return None
        if self.backend == "auto" and plan_kernel(
                x, x, heads.Q, heads.K, beta=attn.beta, kind=attn.kind, tol=self.tol,
                m=m).backend != "direct":
            return None
        return particle_field(x, m, heads, attn, flow=flow, log=self.log,
                              backend=self.backend)


_DEFAULT_KERNEL = _Kernel()


def _stage(kernel, x: np.ndarray, heads: Heads, attn: Attention, flow: str) -> np.ndarray:
    """The velocity alone at ``x`` (``kernel.velocity`` if the kernel has one, else its field)."""
    vel = getattr(kernel, "velocity", None)
    if vel is None:
        return _velocity(kernel.evaluate(x, heads, attn), flow)
    return vel(x, heads, attn, flow)


def _state_terms(x: np.ndarray, m: np.ndarray, t: float, theta: np.ndarray, schedule: Schedule,
                 attn: Attention, flow: str, heads: Heads | None = None,
                 kernel: _Kernel = _DEFAULT_KERNEL) -> tuple[Heads, FieldEval, np.ndarray, dict]:
    """Heads, field, velocity and balance integrands of one state.

    Under a causal mask (THEORY §9) the tokens move with the masked velocity
    (:func:`wflow.energy.evaluate` with ``attn.mask``); the causal system is not a gradient
    flow, and the state's field and integrands are those of the exchangeable model's
    energy ``E[μ]`` at the same tokens (:meth:`~wflow.attention.heads.Attention.unmasked`):
    ``E``, ``∇ψ``, ``b̂`` and the slope terms of the masked velocity. The chain rule
    ``dE/dt = ∫⟨∇ψ, v⟩ dμ`` holds for any velocity ``v``, so the recorded balance still
    measures the integrator's error; ``E`` need not be monotone. Cost: one unmasked
    evaluation per state besides the masked one.
    """
    heads = schedule.heads_at(theta) if heads is None else heads
    vel = None
    if getattr(attn, "mask", None) is not None:
        vel = _stage(kernel, x, heads, attn, flow)
        attn = attn.unmasked()
    fused = kernel.fused(x, m, heads, attn, flow)
    if fused is None:
        fe = kernel.evaluate(x, heads, attn)
        st = slope_terms(x, m, fe, heads, _velocity(fe, flow) if vel is None else vel)
        E = float(heads.w @ head_energies(fe, m, attn))
    else:
        fe, st, E = fused
        if vel is not None:
            st = slope_terms(x, m, fe, heads, vel)
    vel = _velocity(fe, flow) if vel is None else vel
    dEdt = 0.0 if schedule.static else dE_dt_weights(x, m, fe, heads,
                                                      schedule.A_dot(theta, t), attn)
    ito = 0.0
    if schedule.stochastic:
        ito = ito_correction(x, m, heads, attn, schedule.sigma(t),
                             symmetric_noise=schedule.symmetric_noise)
    terms = {"E": E, "dEdt_w": dEdt, "power": st.power, "slope2": st.slope2,
             "speed2": st.speed2, "G2": st.G2, "ito": ito}
    return heads, fe, vel, terms


def _stage_velocity(kernel, heads: Heads, theta: np.ndarray, schedule: Schedule,
                    attn: Attention, flow: str) -> Callable[[np.ndarray, np.ndarray], np.ndarray]:
    """``V(y, θ)``: the velocity at ``y/|y|`` under the heads of ``θ`` (a stage).

    The heads are built once per distinct ``θ`` array of the step (``heads`` for
    ``theta``; static schedules pass the same array and reuse them).
    """
    stage_heads = {id(theta): heads}

    def V(y: np.ndarray, th: np.ndarray) -> np.ndarray:
        hh = stage_heads.get(id(th))
        if hh is None:
            hh = stage_heads[id(th)] = schedule.heads_at(th)
        return _stage(kernel, normalize(y), hh, attn, flow)

    return V


def _rk4_step(x: np.ndarray, h: float, k1: np.ndarray, heads: Heads, theta: np.ndarray,
              theta_mid: np.ndarray, theta_new: np.ndarray, schedule: Schedule,
              attn: Attention, flow: str, kernel: _Kernel) -> np.ndarray:
    """One RK4 step of ``F(x) = v(x/|x|)`` with normalised stages and a final projection."""
    V = _stage_velocity(kernel, heads, theta, schedule, attn, flow)
    k2 = V(x + 0.5 * h * k1, theta_mid)
    k3 = V(x + 0.5 * h * k2, theta_mid)
    k4 = V(x + h * k3, theta_new)
    return normalize(x + (h / 6.0) * (k1 + 2 * k2 + 2 * k3 + k4))


# ----------------------------------------------------------------------------- integrators
#: Compiled code of explicit Euler (the token step ``I_RK4 = 0`` of the compiled loop).
CODE_EULER = 0
#: Compiled code of RK4 with normalised stages (``I_RK4 = 1``; weights by RK4 half steps).
CODE_RK4 = 1
#: Compiled code of projected Euler–Maruyama (the Euler step plus the token noise).
CODE_EM = 2
#: Compiled code of ``B_{h/2} ∘ Φ^{RK4}_h ∘ B_{h/2}`` (:class:`StrangHeat`).
CODE_STRANG = 3
#: Compiled code of ``Φ^{Heun}_{h/2} ∘ B_h ∘ Φ^{Heun}_{h/2}`` (:class:`StrangHeun`).
CODE_STRANG_HEUN = 4


class ParticleIntegrator(OrderedMethod):
    """One step of the tokens ``x ← Φ_h(x)`` on the sphere.

    Its ``name`` is the value of ``ParticleOptions.integrator``.

    Attributes
    ----------
    weights : WeightStep
        How the schedule advances the weights over the step
        (:meth:`wflow.attention.schedules.Schedule.advance` ``method``).
    compiled_code : int or None
        The step of the compiled loop (:mod:`wflow.particles._path_numba`) that is this
        integrator, bit for bit: :data:`CODE_EULER`, :data:`CODE_RK4`; ``None`` (the
        default): no compiled code, the run takes the Python engine. Read with
        :func:`compiled_code`, from the class's own body only: a subclass that redefines
        ``step`` does not inherit its parent's code.
    declared_order : int or None
        What :meth:`order` returns, the order of accuracy in time (checked by a fitted-order
        test; :class:`~wflow.infra.registry.OrderedMethod`).
    """

    weights: WeightStep = WeightStep.RK4
    compiled_code: int | None = None

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
    declared_order = 1

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
    declared_order = 4

    def stages(self) -> int:  # noqa: D102
        return 4

    def step(self, x: np.ndarray, h: float, k1: np.ndarray, heads: Heads,  # noqa: D102
             theta: np.ndarray, theta_mid: np.ndarray, theta_new: np.ndarray,
             schedule: Schedule, attn: Attention, flow: str, kernel: _Kernel) -> np.ndarray:
        return _rk4_step(x, h, k1, heads, theta, theta_mid, theta_new, schedule, attn, flow,
                         kernel)


# ------------------------------------------------------------------ stochastic integrators
class StochasticIntegrator(ParticleIntegrator):
    r"""A token integrator of the noisy model ``dx = v dt + √(2D) P_x ∘ dW`` (THEORY §8).

    ``order()`` is the **weak** order (``|E g(x_T) − E g(x^h_T)| = O(h^q)`` for smooth
    ``g``). :meth:`noisy_step` takes the step's keyed noise
    (:class:`wflow.particles.noise.StepNoise`) and the diffusivity ``D``; :meth:`step`
    (the noiseless step) is the ``D = 0`` scheme. ``draws`` is the number of independent
    keyed draws per step.
    """

    stochastic = True
    draws: int = 1

    def noisy_step(self, x: np.ndarray, h: float, k1: np.ndarray, heads: Heads,
                   theta: np.ndarray, theta_mid: np.ndarray, theta_new: np.ndarray,
                   schedule: Schedule, attn: Attention, flow: str, kernel: _Kernel, *,
                   diffusion: float, noise) -> np.ndarray:
        """Tokens after one step with token diffusion ``diffusion`` and the step's ``noise``."""
        raise NotImplementedError


@INTEGRATORS.register
class EulerMaruyama(StochasticIntegrator):
    r"""Projected Euler–Maruyama, weak order 1 (THEORY §8).

    ``x ← (x + h v + √(2Dh) P_x ξ) / |…|``, ``ξ ~ N(0, I_d)``: the normalisation carries
    the Itô drift ``−D(d−1) x``. ``D = 0`` is :class:`Euler` bit for bit; the weights take
    the same Euler step.
    """

    name = "em"
    weights = "euler"
    draws = 1
    compiled_code = CODE_EM
    declared_order = 1

    #: the noiseless step (``D = 0``) is explicit Euler's, the same function
    step = Euler.step

    def noisy_step(self, x: np.ndarray, h: float, k1: np.ndarray, heads: Heads,  # noqa: D102
                   theta: np.ndarray, theta_mid: np.ndarray, theta_new: np.ndarray,
                   schedule: Schedule, attn: Attention, flow: str, kernel: _Kernel, *,
                   diffusion: float, noise) -> np.ndarray:
        xi = noise.normals(0)
        xi -= np.sum(xi * x, axis=1)[:, None] * x  # P_x ξ
        return normalize(x + h * k1 + np.sqrt(2.0 * diffusion * h) * xi)


@INTEGRATORS.register
class StrangHeat(StochasticIntegrator):
    r"""Strang splitting ``B_{h/2} ∘ Φ_h ∘ B_{h/2}``, weak order 2 (THEORY §8).

    ``Φ_h`` is the deterministic RK4 step (:class:`RK4`, normalised stages); ``B_{h/2}`` is
    an **exact** Brownian increment on ``S^{d−1}`` over ``h/2`` with generator ``D Δ_S``,
    sampled from the heat kernel (:class:`wflow.particles.noise.HeatAngle`: rejection
    with a squeeze from a rigorous envelope, any ``d``). The two half increments are
    independent keyed draws. Cost: one more field evaluation per step than RK4 (the
    first stage at ``B_{h/2}(x)``). ``D = 0`` is :class:`RK4`'s step, the same function
    (no evaluation at ``B_0(x) = x`` again; the compiled loop takes RK4's step too).
    """

    name = "strang"
    weights = "rk4"
    draws = 2
    compiled_code = CODE_STRANG
    declared_order = 2

    #: the noiseless step (``D = 0``) is RK4's, the same function
    step = RK4.step

    def stages(self) -> int:
        """Field evaluations per step: RK4's four from ``B_{h/2}(x)`` and the state's."""
        return 5

    def noisy_step(self, x: np.ndarray, h: float, k1: np.ndarray, heads: Heads,  # noqa: D102
                   theta: np.ndarray, theta_mid: np.ndarray, theta_new: np.ndarray,
                   schedule: Schedule, attn: Attention, flow: str, kernel: _Kernel, *,
                   diffusion: float, noise) -> np.ndarray:
        s = 0.5 * diffusion * h
        y = noise.heat(x, s, 0)
        k1y = _stage(kernel, y, heads, attn, flow)
        y = _rk4_step(y, h, k1y, heads, theta, theta_mid, theta_new, schedule, attn, flow,
                      kernel)
        return noise.heat(y, s, 1)


def _heun_halves(x: np.ndarray, h: float, k1: np.ndarray, heads: Heads, theta: np.ndarray,
                 theta_mid: np.ndarray, theta_new: np.ndarray, schedule: Schedule,
                 attn: Attention, flow: str, kernel: _Kernel,
                 between: Callable[[np.ndarray], np.ndarray] | None = None) -> np.ndarray:
    """Two Heun half steps of ``F(x) = v(x/|x|)`` (normalised stages), ``between`` them.

    ``y = Φ^{Heun}_{h/2}(x)`` from ``k1`` (the velocity at ``x``, time ``t``) and a stage
    at ``t + h/2``; then ``between(y)`` (``None``: ``y``); then ``Φ^{Heun}_{h/2}`` with
    stages at ``t + h/2`` and ``t + h``. Three new field evaluations.
    """
    V = _stage_velocity(kernel, heads, theta, schedule, attn, flow)
    q = 0.5 * h
    y = normalize(x + (0.5 * q) * (k1 + V(x + q * k1, theta_mid)))
    if between is not None:
        y = between(y)
    k1y = V(y, theta_mid)
    return normalize(y + (0.5 * q) * (k1y + V(y + q * k1y, theta_new)))


@INTEGRATORS.register
class StrangHeun(StochasticIntegrator):
    r"""Strang splitting ``Φ_{h/2} ∘ B_h ∘ Φ_{h/2}``, weak order 2 (THEORY §8).

    The drift outside: ``Φ_{h/2}`` is a Heun step (explicit trapezoid, order 2, normalised
    stages) and ``B_h`` the **exact** Brownian increment on ``S^{d−1}`` over ``h``, drawn as
    two independent keyed heat-kernel increments over ``h/2`` (the same draws as
    :class:`StrangHeat`). A Strang splitting stays weak order 2 when each sub-flow's
    local error is ``O(h³)``, which Heun's is. The first stage is the velocity at ``x``,
    the state's own, so a step costs the state's evaluation and three more: as many as
    RK4's, against :class:`StrangHeat`'s four more. Its deterministic error is second
    order where ``"strang"``'s is fourth. ``D = 0``: the two Heun half steps (order 2).
    """

    name = "strang-heun"
    weights = "rk4"
    draws = 2
    compiled_code = CODE_STRANG_HEUN
    declared_order = 2

    def stages(self) -> int:
        """Field evaluations per step: the state's and three Heun stages."""
        return 4

    def step(self, x: np.ndarray, h: float, k1: np.ndarray, heads: Heads,  # noqa: D102
             theta: np.ndarray, theta_mid: np.ndarray, theta_new: np.ndarray,
             schedule: Schedule, attn: Attention, flow: str, kernel: _Kernel) -> np.ndarray:
        return _heun_halves(x, h, k1, heads, theta, theta_mid, theta_new, schedule, attn,
                            flow, kernel)

    def noisy_step(self, x: np.ndarray, h: float, k1: np.ndarray, heads: Heads,  # noqa: D102
                   theta: np.ndarray, theta_mid: np.ndarray, theta_new: np.ndarray,
                   schedule: Schedule, attn: Attention, flow: str, kernel: _Kernel, *,
                   diffusion: float, noise) -> np.ndarray:
        s = 0.5 * diffusion * h
        return _heun_halves(x, h, k1, heads, theta, theta_mid, theta_new, schedule, attn,
                            flow, kernel,
                            between=lambda y: noise.heat(noise.heat(y, s, 0), s, 1))
