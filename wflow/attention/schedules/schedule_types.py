"""The scenario's schedule types (``[schedule] type``): the registry and one builder per type.

Part of :mod:`wflow.attention.schedules` (the package re-exports its names).
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any

import numpy as np

from ...infra.callables import load_callable
from ...infra.registry import Method, Registry
from ...infra.schema import ScenarioError
from ..heads import Heads
from .base import Parametrisation, Schedule
from .builtin import CallableSchedule, Layers, OrnsteinUhlenbeck, Oscillating, Relaxed, Static


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


class ScheduleType(Method):
    """One ``[schedule] type`` (its ``name``): builds its :class:`Schedule` from the table.

    Attributes
    ----------
    schedule : type
        The :class:`Schedule` class it builds.
    keys : tuple of str
        The ``[schedule]`` keys it reads besides ``type`` (documentation).
    """

    schedule: type[Schedule] = Schedule
    keys: tuple[str, ...] = ()

    def build(self, table: Mapping[str, Any], ctx: ScheduleContext) -> Schedule:
        """The schedule of a validated ``[schedule]`` table (errors name the key)."""
        raise NotImplementedError


#: Schedule types of a scenario's ``[schedule] type``, by name (the only list of them).
SCHEDULE_TYPES: Registry[ScheduleType] = Registry("schedule type", ScheduleType,
                                                  key="schedule.type")


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
