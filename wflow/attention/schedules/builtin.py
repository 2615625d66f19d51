"""The built-in schedules: static, Ornstein–Uhlenbeck, oscillating, relaxed, layers, callable.

Part of :mod:`wflow.attention.schedules` (the package re-exports its names).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Literal

import numpy as np

from ..heads import Heads
from .base import Parametrisation, Schedule, _check_theta

__all__ = ["Static", "OrnsteinUhlenbeck", "Oscillating", "Relaxed", "Layers", "CallableSchedule",
           "oscillating_pattern", "as_schedule"]


@dataclass(frozen=True, eq=False)
class Static(Schedule):
    """Constant heads.

    ``heads``: the heads themselves, returned by :meth:`heads_at` at ``θ_0`` (the only
    parameters a static path visits), so heads of value rank ``r`` keep their factors
    ``W_V, W_O`` and are summed at their rank (:func:`wflow.energy.evaluate`); ``θ``
    (``Q, K, V`` stacked) holds ``V = W_O W_V`` at full width. ``None``: the heads of ``θ``.
    """

    param: Parametrisation
    theta0: np.ndarray
    heads: Heads | None = None

    @classmethod
    def of(cls, heads: Heads) -> Static:
        """Static schedule holding ``heads`` (value factors kept where they are given)."""
        param, theta = Parametrisation.from_heads(heads)
        # heads given by a full V are rebuilt from θ as before (bit for bit)
        return cls(param, theta, heads if heads.value_factors() is not None else None)

    def heads_at(self, theta: np.ndarray) -> Heads:
        """The kept heads at ``θ_0``; the heads of ``θ`` elsewhere (or without kept heads)."""
        if self.heads is not None and (theta is self.theta0
                                       or np.array_equal(theta, self.theta0)):
            return self.heads
        return self.param.heads(theta)

    @property
    def static(self) -> bool:  # noqa: D102
        return True

    def initial_theta(self) -> np.ndarray:  # noqa: D102
        return self.theta0

    def drift(self, theta: np.ndarray, t: float) -> np.ndarray:  # noqa: D102
        return np.zeros_like(theta)

    def closed_form(self, t: float) -> np.ndarray:  # noqa: D102
        return self.theta0


class _DecayingNoise:
    """The noise amplitude ``σ(t) = σ₀ e^{−γt}`` of a schedule (its fields ``sigma0``, ``gamma``).

    The schedule is stochastic exactly when ``σ₀ > 0``.
    """

    sigma0: float
    gamma: float

    @property
    def stochastic(self) -> bool:  # noqa: D102
        return self.sigma0 > 0

    def sigma(self, t: float) -> float:  # noqa: D102
        return self.sigma0 * float(np.exp(-self.gamma * t))


@dataclass(frozen=True, eq=False)
class OrnsteinUhlenbeck(_DecayingNoise, Schedule):
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

    def initial_theta(self) -> np.ndarray:  # noqa: D102
        return self.theta0

    def drift(self, theta: np.ndarray, t: float) -> np.ndarray:  # noqa: D102
        return -self.kappa * (theta - self.theta_inf)

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
class CallableSchedule(_DecayingNoise, Schedule):
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

    def initial_theta(self) -> np.ndarray:  # noqa: D102
        return self.theta0

    def drift(self, theta: np.ndarray, t: float) -> np.ndarray:  # noqa: D102
        return np.asarray(self.func(theta, t), dtype=float)


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
