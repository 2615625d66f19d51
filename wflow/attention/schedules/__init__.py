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

from . import builtin
from .base import Parametrisation, Schedule, WeightStep
from .builtin import *  # noqa: F403 (its __all__: the built-in schedules)
from .schedule_types import (  # noqa: F401 (importable here as before)
    SCHEDULE_TYPES,
    CallableType,
    LayersType,
    OrnsteinUhlenbeckType,
    OscillatingType,
    RelaxedType,
    ScheduleContext,
    ScheduleType,
    StaticType,
)

__all__ = [
    "Parametrisation",
    "Schedule",
    *builtin.__all__,
    "SCHEDULE_TYPES",
    "ScheduleType",
    "ScheduleContext",
    "WeightStep",
]
