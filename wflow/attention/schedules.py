"""Time dependence of the heads ``θ_h(t)`` (docs/theory.md §1): depth is time.

A schedule evolves a parameter array ``θ`` and maps it to :class:`~wflow.attention.heads.Heads`
through a :class:`Parametrisation`:

* ``"bilinear"``: ``θ_h = A_h`` (``d×d``), ``Q_h = I``, ``K_h = A_h`` and the value is
  tied, ``V_h = value_sign · A_h`` (``+1`` ascent / convention of docs/theory.md, ``-1`` the
  descent convention of the published experiments), or fixed ``V_h``;
* ``"qkv"``: ``θ_h`` stacks the rows of ``Q_h`` (k), ``K_h`` (k) and ``V_h`` (d), shape
  ``(2k + d, d)``.

Schedules:

* :class:`Static` — ``θ̇ = 0``;
* :class:`OrnsteinUhlenbeck` — ``dθ = −κ(θ − θ_∞) dt + σ(t) dW``, ``σ(t) = σ₀ e^{−γt}``,
  optional symmetric noise ``dW_sym = √dt (Z + Zᵀ)/2``; Euler–Maruyama with a seeded
  generator (closed form when ``σ₀ = 0``); :func:`wflow.attention.published.published_ou` is the
  published OU experiment (``σ² = 2``);
* :class:`Oscillating` — ``θ(t) = θ_∞ + a ⊙ sin(ωt + φ_h)``, ``φ_h = 2πh/H``;
* :class:`Relaxed` — ``dθ/dt = κ(F_h(t) − θ)`` towards an oscillating target
  (built-in: the published frames of :mod:`wflow.attention.published`, docs/theory.md §5,
  and wflow's rotating-reflection variant);
* :class:`Layers` — piecewise constant, layer ``ℓ`` acts on ``[ℓΔ, (ℓ+1)Δ)``;
* :class:`CallableSchedule` — any ``dθ/dt = f(θ, t)`` (+ optional noise), also given as
  ``"package.module:function"`` in a scenario file.

Deterministic drifts are integrated with RK4 (two half steps, so the midpoint value
needed by RK4 particle integrators is available at 4th order) or, with
``method="euler"`` (what the particles' Euler integrator uses, as the published
experiments do), with the same explicit Euler step as the tokens; noisy ones with
Euler–Maruyama (the midpoint is the average of the end points). Jumps of
:class:`Layers` happen at ``jump_times``; solvers align their steps to them.
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any, Literal

import numpy as np

from ..infra.callables import load_callable
from ..infra.registry import Registry
from ..infra.schema import ScenarioError
from .heads import Heads

__all__ = [
    "Parametrisation",
    "Schedule",
    "Static",
    "OrnsteinUhlenbeck",
    "Oscillating",
    "Relaxed",
    "Layers",
    "CallableSchedule",
    "oscillating_pattern",
    "as_schedule",
    "SCHEDULE_TYPES",
    "ScheduleType",
    "ScheduleContext",
]


# ----------------------------------------------------------------------------- parametrisation
@dataclass(frozen=True)
class Parametrisation:
    """Map from a parameter array ``θ`` of shape ``(H, rows, d)`` to :class:`Heads`.

    Parameters
    ----------
    kind : {"bilinear", "qkv"}
    w : (H,) array
        Mixing weights (constant in time).
    k : int
        Query/key dimension (``qkv`` only).
    value_sign : float
        ``bilinear`` with tied values: ``V_h = value_sign · A_h``.
    V : (H, d, d) array, optional
        ``bilinear`` with fixed values (overrides ``value_sign``).
    """

    kind: Literal["bilinear", "qkv"]
    w: np.ndarray
    k: int = 0
    value_sign: float = 1.0
    V: np.ndarray | None = None

    def __post_init__(self) -> None:
        if self.kind not in ("bilinear", "qkv"):
            raise ValueError("parametrisation: kind must be 'bilinear' or 'qkv', "
                             f"got {self.kind!r}")

    def heads(self, theta: np.ndarray) -> Heads:
        """Heads for the parameter array ``theta``."""
        if self.kind == "bilinear":
            return Heads.bilinear(theta, V=self.V, w=self.w, value_sign=self.value_sign)
        k = self.k
        return Heads(theta[:, :k], theta[:, k:2 * k], theta[:, 2 * k:], self.w)

    def A_dot(self, theta: np.ndarray, theta_dot: np.ndarray) -> np.ndarray:
        """``Ȧ_h`` for a parameter velocity ``θ̇`` (``Q̇ᵀK + QᵀK̇`` for ``qkv``)."""
        if self.kind == "bilinear":
            return theta_dot
        k = self.k
        Q, K = theta[:, :k], theta[:, k:2 * k]
        dQ, dK = theta_dot[:, :k], theta_dot[:, k:2 * k]
        return np.einsum("hki,hkj->hij", dQ, K) + np.einsum("hki,hkj->hij", Q, dK)

    @staticmethod
    def from_heads(heads: Heads, *, kind: str = "qkv") -> tuple[Parametrisation, np.ndarray]:
        """Parametrisation and ``θ`` reproducing ``heads`` exactly.

        ``kind="bilinear"`` needs value-aligned heads (``V = ±A``) or keeps ``V`` fixed.
        """
        if kind == "qkv":
            theta = np.concatenate([heads.Q, heads.K, heads.V], axis=1)
            return Parametrisation("qkv", heads.w.copy(), k=heads.k), theta
        sign = heads.value_alignment()
        if sign != 0:
            param = Parametrisation("bilinear", heads.w.copy(), value_sign=float(sign))
            return param, heads.A.copy()
        return Parametrisation("bilinear", heads.w.copy(), V=heads.V.copy()), heads.A.copy()


# ----------------------------------------------------------------------------- base class
class Schedule(ABC):
    """Base class: a (possibly stochastic) path ``t ↦ θ(t)`` of head parameters."""

    param: Parametrisation
    #: Times at which θ jumps (piecewise-constant schedules); solvers land on them.
    jump_times: tuple[float, ...] = ()

    @abstractmethod
    def initial_theta(self) -> np.ndarray:
        """``θ(0)``, shape ``(H, rows, d)``."""

    @abstractmethod
    def drift(self, theta: np.ndarray, t: float) -> np.ndarray:
        """Deterministic part of ``dθ/dt`` at ``(θ, t)``."""

    def sigma(self, t: float) -> float:
        """Noise amplitude ``σ(t)`` (0 for deterministic schedules)."""
        return 0.0

    #: Noise is ``(Z + Zᵀ)/2`` on the last two axes (symmetric) instead of ``Z``.
    symmetric_noise: bool = False

    @property
    def stochastic(self) -> bool:
        """True if the path is random (``σ`` not identically zero)."""
        return False

    @property
    def static(self) -> bool:
        """True if ``θ`` never changes."""
        return False

    def closed_form(self, t: float) -> np.ndarray | None:
        """``θ(t)`` in closed form where one exists (deterministic schedules), else ``None``."""
        return None

    def heads_at(self, theta: np.ndarray) -> Heads:
        """Heads for parameters ``θ``."""
        return self.param.heads(theta)

    def heads_at_time(self, t: float) -> Heads:
        """Heads at time ``t`` for deterministic schedules (integrates from 0 if needed)."""
        cf = self.closed_form(t)
        if cf is not None:
            return self.heads_at(cf)
        if self.stochastic:
            raise ValueError("heads_at_time: a stochastic schedule has no deterministic θ(t)")
        theta, s = self.initial_theta(), 0.0
        nsteps = max(1, int(np.ceil(t / 1e-2)))
        for _ in range(nsteps):
            _, theta = self.advance(theta, s, t / nsteps, None)
            s += t / nsteps
        return self.heads_at(theta)

    def A_dot(self, theta: np.ndarray, t: float) -> np.ndarray:
        """``Ȧ_h`` from the drift (the deterministic part of ``∂_t E``), shape ``(H, d, d)``."""
        return self.param.A_dot(theta, self.drift(theta, t))

    def after_jump(self, theta: np.ndarray, t: float) -> np.ndarray:
        """``θ(t⁺)`` at a jump time ``t`` (identity for schedules without jumps)."""
        return theta

    def noise(self, shape: tuple[int, ...], rng: np.random.Generator) -> np.ndarray:
        """One standard noise increment per unit ``√dt`` (symmetrised if requested)."""
        z = rng.standard_normal(shape)
        if self.symmetric_noise:
            z = 0.5 * (z + np.swapaxes(z, -1, -2))
        return z

    def advance(self, theta: np.ndarray, t: float, dt: float,
                rng: np.random.Generator | None, *, method: Literal["rk4", "euler"] = "rk4"
                ) -> tuple[np.ndarray, np.ndarray]:
        """Advance over ``[t, t + dt]``; returns ``(θ(t + dt/2), θ(t + dt))``.

        Closed form when available. Otherwise, ``method="rk4"``: RK4 (two half steps, so
        the midpoint needed by RK4 particle stages is 4th-order accurate) for deterministic
        drifts; ``method="euler"``: the explicit Euler step ``θ + f(θ, t) dt`` — the scheme
        of the published experiments, which advance tokens and weights with the same
        explicit Euler step (docs/theory.md §5). Noisy schedules always take the Euler–Maruyama
        step ``θ + f(θ, t) dt + σ(t) √dt ξ``. For Euler steps the returned midpoint is the
        average of the end points.
        """
        if method not in ("rk4", "euler"):
            raise ValueError(f"advance: method must be 'rk4' or 'euler', got {method!r}")
        if self.static:
            return theta, theta
        cf_mid = self.closed_form(t + 0.5 * dt)
        if cf_mid is not None:
            return cf_mid, self.closed_form(t + dt)
        if self.stochastic or method == "euler":
            new = theta + dt * self.drift(theta, t)
            if self.stochastic:
                if rng is None:
                    raise ValueError("advance: a stochastic schedule needs a random generator")
                s = self.sigma(t)
                if s != 0.0:
                    new = new + s * np.sqrt(dt) * self.noise(theta.shape, rng)
            return 0.5 * (theta + new), new
        mid = _rk4(self.drift, theta, t, 0.5 * dt)
        return mid, _rk4(self.drift, mid, t + 0.5 * dt, 0.5 * dt)


def _rk4(f: Callable[[np.ndarray, float], np.ndarray], y: np.ndarray, t: float,
         h: float) -> np.ndarray:
    k1 = f(y, t)
    k2 = f(y + 0.5 * h * k1, t + 0.5 * h)
    k3 = f(y + 0.5 * h * k2, t + 0.5 * h)
    k4 = f(y + h * k3, t + h)
    return y + (h / 6.0) * (k1 + 2 * k2 + 2 * k3 + k4)


def _check_theta(theta: np.ndarray, param: Parametrisation, name: str) -> np.ndarray:
    arr = np.asarray(theta, dtype=np.float64)
    if arr.ndim != 3:
        raise ValueError(f"{name}: expected shape (H, rows, d), got {arr.shape}")
    if not np.all(np.isfinite(arr)):
        raise ValueError(f"{name}: contains NaN or Inf")
    if arr.shape[0] != param.w.shape[0]:
        raise ValueError(f"{name}: {arr.shape[0]} heads but {param.w.shape[0]} mixing weights")
    if param.kind == "bilinear" and arr.shape[1] != arr.shape[2]:
        raise ValueError(f"{name}: bilinear parameters must be square (H, d, d), got {arr.shape}")
    if param.kind == "qkv" and arr.shape[1] != 2 * param.k + arr.shape[2]:
        raise ValueError(f"{name}: qkv parameters need 2k + d = {2 * param.k + arr.shape[2]} "
                         f"rows, got {arr.shape[1]}")
    return arr


# ----------------------------------------------------------------------------- schedules
@dataclass(frozen=True, eq=False)
class Static(Schedule):
    """Constant heads."""

    param: Parametrisation
    theta0: np.ndarray

    @classmethod
    def of(cls, heads: Heads) -> Static:
        """Static schedule holding ``heads``."""
        param, theta = Parametrisation.from_heads(heads)
        return cls(param, theta)

    @property
    def static(self) -> bool:  # noqa: D102
        return True

    def initial_theta(self) -> np.ndarray:  # noqa: D102
        return self.theta0

    def drift(self, theta: np.ndarray, t: float) -> np.ndarray:  # noqa: D102
        return np.zeros_like(theta)

    def closed_form(self, t: float) -> np.ndarray:  # noqa: D102
        return self.theta0


@dataclass(frozen=True, eq=False)
class OrnsteinUhlenbeck(Schedule):
    """``dθ = −κ(θ − θ_∞) dt + σ₀ e^{−γt} dW`` (γ = 0: plain OU).

    With ``σ₀ = 0`` or ``γ > 0`` the path has ``∫_0^∞ |θ̇| dt < ∞`` (the integrable regime).
    """

    param: Parametrisation
    theta0: np.ndarray
    theta_inf: np.ndarray
    kappa: float = 1.0
    sigma0: float = 0.0
    gamma: float = 0.0
    symmetric_noise: bool = False

    def __post_init__(self) -> None:
        object.__setattr__(self, "theta0", _check_theta(self.theta0, self.param, "theta0"))
        ti = np.broadcast_to(np.asarray(self.theta_inf, float), self.theta0.shape).copy()
        object.__setattr__(self, "theta_inf", _check_theta(ti, self.param, "theta_inf"))
        if not self.kappa >= 0:
            raise ValueError(f"ou.kappa: must be >= 0, got {self.kappa}")
        if not self.sigma0 >= 0:
            raise ValueError(f"ou.sigma: must be >= 0, got {self.sigma0}")
        if not self.gamma >= 0:
            raise ValueError(f"ou.gamma: must be >= 0, got {self.gamma}")
        if self.symmetric_noise and self.param.kind != "bilinear":
            raise ValueError("ou.symmetric_noise: only for the 'bilinear' parametrisation")
        if self.sigma0 > 0 and self.param.kind != "bilinear":
            raise ValueError("ou.sigma: noisy weights are supported for the 'bilinear' "
                             "parametrisation (θ = A), where the Itô term of the energy "
                             "balance has a closed form")

    @property
    def stochastic(self) -> bool:  # noqa: D102
        return self.sigma0 > 0

    def initial_theta(self) -> np.ndarray:  # noqa: D102
        return self.theta0

    def drift(self, theta: np.ndarray, t: float) -> np.ndarray:  # noqa: D102
        return -self.kappa * (theta - self.theta_inf)

    def sigma(self, t: float) -> float:  # noqa: D102
        return self.sigma0 * float(np.exp(-self.gamma * t))

    def closed_form(self, t: float) -> np.ndarray | None:  # noqa: D102
        if self.stochastic:
            return None
        return self.theta_inf + (self.theta0 - self.theta_inf) * np.exp(-self.kappa * t)


@dataclass(frozen=True, eq=False)
class Oscillating(Schedule):
    """``θ_h(t) = θ_∞,h + a ⊙ sin(ω t + φ_h)`` with ``φ_h = 2πh/H`` by default (non-integrable)."""

    param: Parametrisation
    theta_inf: np.ndarray
    amplitude: np.ndarray | float = 1.0
    omega: float = 1.0
    phases: np.ndarray | None = None

    def __post_init__(self) -> None:
        object.__setattr__(self, "theta_inf", _check_theta(self.theta_inf, self.param, "theta_inf"))
        H = self.theta_inf.shape[0]
        amp = np.broadcast_to(np.asarray(self.amplitude, float), self.theta_inf.shape).copy()
        object.__setattr__(self, "amplitude", amp)
        ph = 2 * np.pi * np.arange(H) / H if self.phases is None else np.asarray(self.phases, float)
        if ph.shape != (H,):
            raise ValueError(f"oscillating.phases: need {H} phases, got shape {ph.shape}")
        object.__setattr__(self, "phases", ph)

    def initial_theta(self) -> np.ndarray:  # noqa: D102
        return self.closed_form(0.0)

    def closed_form(self, t: float) -> np.ndarray:  # noqa: D102
        return self.theta_inf + self.amplitude * np.sin(self.omega * t + self.phases)[:, None, None]

    def drift(self, theta: np.ndarray, t: float) -> np.ndarray:  # noqa: D102
        return self.amplitude * self.omega * np.cos(self.omega * t + self.phases)[:, None, None]


def oscillating_pattern(t: float | np.ndarray, d: int) -> np.ndarray:
    """Periodic symmetric pattern ``P(t) = R(t/2) diag(1, −1, 0, …) R(t/2)ᵀ``.

    ``R(s)`` rotates the ``(e_1, e_2)`` plane by angle ``s``, so
    ``P(t) = [[cos t, sin t], [sin t, −cos t]] ⊕ 0``: period ``2π``, zero trace, ``|P| = 1``.
    Shape ``(d, d)`` (or ``(len(t), d, d)``).
    """
    t = np.asarray(t, float)
    c, s = np.cos(t), np.sin(t)
    P = np.zeros(t.shape + (d, d))
    P[..., 0, 0] = c
    P[..., 1, 1] = -c
    P[..., 0, 1] = s
    P[..., 1, 0] = s
    return P


@dataclass(frozen=True, eq=False)
class Relaxed(Schedule):
    """``dθ_h/dt = κ (F_h(t) − θ_h)`` towards an oscillating target ``F(t)``.

    ``target`` is a callable ``F(t) -> (H, rows, d)``. Built-in targets:

    * :func:`wflow.attention.published.published_relaxed` — the frames of the published
      experiments (:class:`~wflow.attention.published.PublishedFrames`, docs/theory.md §5),
      ``κ = 1``, value ``V_h = −A_h``;
    * :meth:`rotating` — wflow's own variant ``F_h(t) = c I + α P(ω (t + 2πh/H))`` with
      the rotating reflection :func:`oscillating_pattern` (not the published experiment).
      With ``ω`` an integer its first harmonics cancel in ``(1/H) Σ_h``; ``ω = 1/2``
      spreads the phases over half a period so that the oscillation survives the average.
    """

    param: Parametrisation
    theta0: np.ndarray
    target: Callable[[float], np.ndarray]
    kappa: float = 1.0

    def __post_init__(self) -> None:
        object.__setattr__(self, "theta0", _check_theta(self.theta0, self.param, "theta0"))

    @classmethod
    def rotating(cls, theta0: np.ndarray, *, w: np.ndarray | float, value_sign: float = -1.0,
                 c: float = 2.0, alpha: float = 1.5, omega: float = 0.5,
                 kappa: float = 1.0) -> Relaxed:
        """Bilinear heads relaxing to ``F_h(t) = c I + α P(ω (t + 2πh/H))`` (wflow's variant)."""
        theta0 = np.asarray(theta0, float)
        H, d, _ = theta0.shape
        shifts = 2 * np.pi * np.arange(H) / H
        eye = np.eye(d)

        def target(t: float) -> np.ndarray:
            return c * eye + alpha * oscillating_pattern(omega * (t + shifts), d)

        param = Parametrisation("bilinear", np.broadcast_to(np.asarray(w, float), (H,)).copy(),
                                value_sign=value_sign)
        return cls(param, theta0, target, kappa)

    def initial_theta(self) -> np.ndarray:  # noqa: D102
        return self.theta0

    def drift(self, theta: np.ndarray, t: float) -> np.ndarray:  # noqa: D102
        return self.kappa * (self.target(t) - theta)


@dataclass(frozen=True, eq=False)
class Layers(Schedule):
    """Piecewise-constant heads: layer ``ℓ`` acts on ``[ℓΔ, (ℓ+1)Δ)``; the last layer persists.

    ``thetas`` has shape ``(L, H, rows, d)``, e.g. weights read from a trained transformer.
    """

    param: Parametrisation
    thetas: np.ndarray
    delta: float = 1.0
    jump_times: tuple[float, ...] = field(init=False)

    def __post_init__(self) -> None:
        th = np.asarray(self.thetas, float)
        if th.ndim != 4:
            raise ValueError(f"layers.thetas: expected shape (L, H, rows, d), got {th.shape}")
        for ell in range(th.shape[0]):
            _check_theta(th[ell], self.param, f"layers.thetas[{ell}]")
        if not self.delta > 0:
            raise ValueError(f"layers.delta: must be > 0, got {self.delta}")
        object.__setattr__(self, "thetas", th)
        object.__setattr__(self, "jump_times",
                           tuple(float(ell * self.delta) for ell in range(1, th.shape[0])))

    @classmethod
    def of(cls, heads_per_layer: list[Heads], *, delta: float = 1.0) -> Layers:
        """Layers from a list of :class:`Heads` (same shapes in every layer)."""
        param, _ = Parametrisation.from_heads(heads_per_layer[0])
        thetas = np.stack([Parametrisation.from_heads(h)[1] for h in heads_per_layer])
        return cls(param, thetas, delta)

    def layer(self, t: float) -> int:
        """Index of the layer acting at time ``t`` (right-continuous)."""
        return int(min(self.thetas.shape[0] - 1, max(0, np.floor(t / self.delta + 1e-12))))

    def initial_theta(self) -> np.ndarray:  # noqa: D102
        return self.thetas[0]

    def drift(self, theta: np.ndarray, t: float) -> np.ndarray:  # noqa: D102
        return np.zeros_like(theta)

    def advance(self, theta: np.ndarray, t: float, dt: float,
                rng: np.random.Generator | None, *, method: Literal["rk4", "euler"] = "rk4"
                ) -> tuple[np.ndarray, np.ndarray]:
        """θ is constant inside a step (steps never cross a jump); jumps via :meth:`after_jump`."""
        return theta, theta

    def after_jump(self, theta: np.ndarray, t: float) -> np.ndarray:  # noqa: D102
        return self.thetas[self.layer(t)]


@dataclass(frozen=True, eq=False)
class CallableSchedule(Schedule):
    """Any ``dθ/dt = f(θ, t)`` plus optional noise ``σ(t) = σ₀ e^{−γt}``."""

    param: Parametrisation
    theta0: np.ndarray
    func: Callable[[np.ndarray, float], np.ndarray]
    sigma0: float = 0.0
    gamma: float = 0.0
    symmetric_noise: bool = False

    def __post_init__(self) -> None:
        object.__setattr__(self, "theta0", _check_theta(self.theta0, self.param, "theta0"))
        if self.sigma0 > 0 and self.param.kind != "bilinear":
            raise ValueError("callable.sigma: noise is supported for 'bilinear' parameters only")
        probe = np.asarray(self.func(self.theta0, 0.0))
        if probe.shape != self.theta0.shape:
            raise ValueError(f"callable schedule: f(θ, t) must return shape {self.theta0.shape}, "
                             f"got {probe.shape}")

    @property
    def stochastic(self) -> bool:  # noqa: D102
        return self.sigma0 > 0

    def initial_theta(self) -> np.ndarray:  # noqa: D102
        return self.theta0

    def drift(self, theta: np.ndarray, t: float) -> np.ndarray:  # noqa: D102
        return np.asarray(self.func(theta, t), dtype=float)

    def sigma(self, t: float) -> float:  # noqa: D102
        return self.sigma0 * float(np.exp(-self.gamma * t))


def as_schedule(heads_or_schedule: Heads | Schedule, *, deterministic: bool = False
                ) -> Schedule:
    """Coerce static :class:`Heads` or a :class:`Schedule` into a schedule (every solver).

    Parameters
    ----------
    heads_or_schedule : Heads or Schedule
        Static heads become :meth:`Static.of`; a schedule is returned as is.
    deterministic : bool
        Refuse stochastic schedules (``sigma > 0``): the JKO scheme needs a weight path.

    Raises
    ------
    ValueError
        For any other type, or a stochastic schedule with ``deterministic``.
    """
    if isinstance(heads_or_schedule, Heads):
        return Static.of(heads_or_schedule)
    if isinstance(heads_or_schedule, Schedule):
        if deterministic and heads_or_schedule.stochastic:
            raise ValueError("schedule: the JKO scheme needs a deterministic weight path "
                             "Θ(t); stochastic schedules (sigma > 0) are not supported")
        return heads_or_schedule
    what = "Heads or a deterministic Schedule" if deterministic else "Heads or a Schedule"
    raise ValueError(f"heads: expected {what}, got {type(heads_or_schedule).__name__}")


# ----------------------------------------------------------------------------- schedule types
#: Schedule types of a scenario's ``[schedule] type``, by name (the only list of them).
SCHEDULE_TYPES: Registry[ScheduleType] = Registry("schedule type")


@dataclass(frozen=True)
class ScheduleContext:
    """What a scenario gives a schedule type besides its validated ``[schedule]`` table.

    Attributes
    ----------
    heads : Heads
        The initial heads ``θ(0)`` of ``[heads]`` (weights included).
    d : int
        Ambient dimension.
    sigma : callable
        ``sigma() -> σ₀`` from ``schedule.sigma`` / ``schedule.sigma2`` (raises on both).
    heads_file : callable
        ``heads_file(name, key) -> Heads``: an ``.npz`` named in the scenario, with the
        scenario's mixing weights (``schedule.files``).
    published_relaxed : callable, optional
        ``published_relaxed(theta0, *, w, value_sign, kappa)``: the relaxed schedule towards
        the published frames (:func:`wflow.attention.published.published_relaxed`), given by the
        scenario so that this module stays below :mod:`wflow.published`.
    """

    heads: Heads
    d: int
    sigma: Callable[[], float]
    heads_file: Callable[[Any, str], Heads]
    published_relaxed: Callable[..., Schedule] | None = None


class ScheduleType:
    """One ``[schedule] type``: builds its :class:`Schedule` from the table.

    Attributes
    ----------
    name : str
        The value of ``schedule.type``.
    schedule : type
        The :class:`Schedule` class it builds.
    keys : tuple of str
        The ``[schedule]`` keys it reads besides ``type`` (documentation).
    """

    name: str = ""
    schedule: type[Schedule] = Schedule
    keys: tuple[str, ...] = ()

    def build(self, table: Mapping[str, Any], ctx: ScheduleContext) -> Schedule:
        """The schedule of a validated ``[schedule]`` table (errors name the key)."""
        raise NotImplementedError


def _parametrised(heads: Heads) -> tuple[Parametrisation, np.ndarray, str]:
    """``θ(0)`` of ``heads``: bilinear when value-aligned (``V = ±A``), else ``qkv``."""
    kind = "bilinear" if heads.value_alignment() != 0 else "qkv"
    param, theta0 = Parametrisation.from_heads(heads, kind=kind)
    return param, theta0, kind


def _no_rotating_keys(table: Mapping[str, Any]) -> None:
    for key in ("c", "alpha"):
        if table.get(key) is not None:
            raise ScenarioError(f"schedule.{key}: only for type = 'relaxed' with "
                                "target = 'rotating'")


@SCHEDULE_TYPES.register
class StaticType(ScheduleType):
    """``type = "static"``: the heads of ``[heads]``, constant."""

    name = "static"
    schedule = Static

    def build(self, table: Mapping[str, Any], ctx: ScheduleContext) -> Schedule:  # noqa: D102
        return Static.of(ctx.heads)


@SCHEDULE_TYPES.register
class LayersType(ScheduleType):
    """``type = "layers"``: one ``.npz`` of heads per layer of duration ``delta``."""

    name = "layers"
    schedule = Layers
    keys = ("files", "delta")

    def build(self, table: Mapping[str, Any], ctx: ScheduleContext) -> Schedule:  # noqa: D102
        files = table["files"]
        if not isinstance(files, list) or not files:
            raise ScenarioError("schedule.files: a non-empty list of .npz files is required "
                                "for type = 'layers'")
        layers = [ctx.heads_file(f, f"schedule.files[{i}]") for i, f in enumerate(files)]
        return Layers.of(layers, delta=table["delta"])


@SCHEDULE_TYPES.register
class OrnsteinUhlenbeckType(ScheduleType):
    """``type = "ou"``: relaxation towards ``target`` with optional decaying noise."""

    name = "ou"
    schedule = OrnsteinUhlenbeck
    keys = ("target", "kappa", "sigma", "sigma2", "gamma", "symmetric_noise")

    def build(self, table: Mapping[str, Any], ctx: ScheduleContext) -> Schedule:  # noqa: D102
        param, theta0, kind = _parametrised(ctx.heads)
        sigma = ctx.sigma()
        _no_rotating_keys(table)
        tgt = "identity" if table["target"] is None else table["target"]
        if tgt == "identity":
            tinf = np.broadcast_to(np.eye(ctx.d), theta0.shape) if kind == "bilinear" else None
        elif tgt == "initial":
            tinf = theta0
        elif tgt == "zero":
            tinf = np.zeros_like(theta0)
        elif isinstance(tgt, (int, float)) and not isinstance(tgt, bool):
            tinf = float(tgt) * np.broadcast_to(np.eye(ctx.d), theta0.shape) \
                if kind == "bilinear" else None
        else:
            raise ScenarioError("schedule.target: must be 'identity', 'initial', 'zero' or a "
                                f"number c (θ_∞ = c I), got {tgt!r}")
        if tinf is None:
            raise ScenarioError("schedule.target: a multiple of the identity needs "
                                "value-aligned heads (V = ±A)")
        try:
            return OrnsteinUhlenbeck(param, theta0, tinf, kappa=table["kappa"], sigma0=sigma,
                                     gamma=table["gamma"],
                                     symmetric_noise=table["symmetric_noise"])
        except ValueError as exc:
            raise ScenarioError(f"schedule: {exc}") from exc


@SCHEDULE_TYPES.register
class OscillatingType(ScheduleType):
    """``type = "oscillating"``: ``θ(t) = θ₀ + a ⊙ sin(ωt + φ_h)``."""

    name = "oscillating"
    schedule = Oscillating
    keys = ("amplitude", "omega")

    def build(self, table: Mapping[str, Any], ctx: ScheduleContext) -> Schedule:  # noqa: D102
        param, theta0, _ = _parametrised(ctx.heads)
        ctx.sigma()
        _no_rotating_keys(table)
        omega = 1.0 if table["omega"] is None else table["omega"]
        return Oscillating(param, theta0, amplitude=table["amplitude"], omega=omega)


@SCHEDULE_TYPES.register
class RelaxedType(ScheduleType):
    """``type = "relaxed"``: the published frames (default) or wflow's rotating variant."""

    name = "relaxed"
    schedule = Relaxed
    keys = ("target", "kappa", "c", "alpha", "omega")

    def build(self, table: Mapping[str, Any], ctx: ScheduleContext) -> Schedule:  # noqa: D102
        heads = ctx.heads
        param, theta0, kind = _parametrised(heads)
        ctx.sigma()
        if kind != "bilinear":
            raise ScenarioError("schedule.type: 'relaxed' needs value-aligned heads (V = ±A)")
        target = "published" if table["target"] is None else table["target"]
        if target not in ("published", "rotating"):
            raise ScenarioError("schedule.target: for type = 'relaxed' must be 'published' (the "
                                "frames of docs/theory.md §5) or 'rotating' (wflow's variant), got "
                                f"{target!r}")
        if ctx.sigma() != 0.0:
            raise ScenarioError("schedule.sigma: type = 'relaxed' is deterministic")
        if target == "published":
            for key in ("c", "alpha", "omega"):
                if table[key] is not None:
                    raise ScenarioError(f"schedule.{key}: the published frames have no {key}; "
                                        "it belongs to target = 'rotating' (wflow's variant)")
            if ctx.published_relaxed is None:
                raise ScenarioError("schedule.target: 'published' needs the published frames "
                                    "(wflow.attention.published), not given to this builder")
            return ctx.published_relaxed(theta0, w=heads.w, value_sign=param.value_sign,
                                         kappa=table["kappa"])
        return Relaxed.rotating(theta0, w=heads.w, value_sign=param.value_sign,
                                c=2.0 if table["c"] is None else table["c"],
                                alpha=1.5 if table["alpha"] is None else table["alpha"],
                                omega=0.5 if table["omega"] is None else table["omega"],
                                kappa=table["kappa"])


@SCHEDULE_TYPES.register
class CallableType(ScheduleType):
    """``type = "callable"``: ``dθ/dt = f(θ, t)`` from ``function = "module:function"``."""

    name = "callable"
    schedule = CallableSchedule
    keys = ("function", "sigma", "sigma2", "gamma", "symmetric_noise")

    def build(self, table: Mapping[str, Any], ctx: ScheduleContext) -> Schedule:  # noqa: D102
        param, theta0, _ = _parametrised(ctx.heads)
        sigma = ctx.sigma()
        _no_rotating_keys(table)
        if table["function"] is None:
            raise ScenarioError("schedule.function: required for type = 'callable' "
                                "('package.module:function' computing dθ/dt = f(θ, t))")
        fn = load_callable(table["function"], name="schedule.function")
        try:
            return CallableSchedule(param, theta0, fn, sigma0=sigma, gamma=table["gamma"],
                                    symmetric_noise=table["symmetric_noise"])
        except ValueError as exc:
            raise ScenarioError(f"schedule: {exc}") from exc
