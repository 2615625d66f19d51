"""The parametrisation of the heads by θ and the base class of schedules (its integrators).

Part of :mod:`wflow.attention.schedules` (the package re-exports its names).
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from collections.abc import Callable
from dataclasses import dataclass
from enum import StrEnum
from typing import Literal

import numpy as np

from ..heads import Heads


class WeightStep(StrEnum):
    """How :meth:`Schedule.advance` steps the weights without a closed form.

    ``RK4``: two RK4 half steps (the midpoint RK4 particle stages need, 4th order);
    ``EULER``: the explicit Euler step of the published experiments. A particle
    integrator declares its own (:attr:`wflow.particles.integrators.ParticleIntegrator.weights`).
    """

    RK4 = "rk4"
    EULER = "euler"


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
                rng: np.random.Generator | None, *,
                method: WeightStep | Literal["rk4", "euler"] = "rk4"
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
        try:
            step = WeightStep(method)
        except ValueError:
            raise ValueError(f"advance: method must be one of {[m.value for m in WeightStep]},"
                             f" got {method!r}") from None
        if self.static:
            return theta, theta
        cf_mid = self.closed_form(t + 0.5 * dt)
        if cf_mid is not None:
            return cf_mid, self.closed_form(t + dt)
        if self.stochastic or step is WeightStep.EULER:
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
