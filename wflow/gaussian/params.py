"""Parameters ``(A, b, V, B)`` of the Gaussian model and their time dependence (docs/theory.md §7).

Parameters may depend on time (depth) along a *parameter path* (:class:`ParamPath`):
:class:`ConstantParams`, :class:`CallableParams` (any ``t ↦ (A, b, V, B)``),
:class:`LayerParams` (piecewise constant, layer ``ℓ`` on ``[ℓΔ, (ℓ+1)Δ)``);
:func:`as_param_path` coerces any of them (or plain :class:`GaussianParams`). Units: time
is depth (continuous layer index); all matrices are dimensionless. (The names differ from
the head schedules of :mod:`wflow.attention.schedules` on purpose: these move the
Gaussian model's ``(A, b, V, B)``, not attention heads.)
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any, Protocol, runtime_checkable

import numpy as np

__all__ = [
    "GaussianParams",
    "ParamPath",
    "ConstantParams",
    "CallableParams",
    "LayerParams",
    "as_param_path",
]


def _as_matrix(value: Any, d: int, name: str) -> np.ndarray:
    """A ``(d, d)`` float array; a scalar ``s`` means ``s I``."""
    arr = np.asarray(value, dtype=np.float64)
    if arr.ndim == 0:
        arr = float(arr) * np.eye(d)
    if arr.shape != (d, d):
        raise ValueError(f"{name}: expected a scalar or a ({d}, {d}) matrix, got shape {arr.shape}")
    if not np.all(np.isfinite(arr)):
        raise ValueError(f"{name}: contains NaN or Inf")
    return arr


def _as_vector(value: Any, d: int, name: str) -> np.ndarray:
    """A ``(d,)`` float array; the scalar ``0`` means the zero vector."""
    arr = np.asarray(value, dtype=np.float64)
    if arr.ndim == 0:
        if float(arr) != 0.0:
            raise ValueError(f"{name}: a scalar is only accepted for the zero vector, got {arr}")
        arr = np.zeros(d)
    if arr.shape != (d,):
        raise ValueError(f"{name}: expected a vector of length {d}, got shape {arr.shape}")
    if not np.all(np.isfinite(arr)):
        raise ValueError(f"{name}: contains NaN or Inf")
    return arr


def _frozen(a: np.ndarray) -> np.ndarray:
    a = np.array(a, dtype=np.float64, copy=True)
    a.setflags(write=False)
    return a


@dataclass(frozen=True)
class GaussianParams:
    """Parameters ``(A, b, V, B)`` of ``ẋ = Ax + b + V·attention_B[μ](x)`` (read-only arrays).

    Attributes
    ----------
    A : (d, d) array
        Linear feed-forward part.
    b : (d,) array
        Bias.
    V : (d, d) array
        Value matrix.
    B : (d, d) array
        Score matrix: the score is ``<B x, y>``.
    """

    A: np.ndarray
    b: np.ndarray
    V: np.ndarray
    B: np.ndarray

    def __post_init__(self) -> None:
        A = np.asarray(self.A, dtype=np.float64)
        if A.ndim != 2 or A.shape[0] != A.shape[1]:
            raise ValueError(f"A: expected a square (d, d) matrix, got shape {A.shape}")
        d = A.shape[0]
        object.__setattr__(self, "A", _frozen(_as_matrix(A, d, "A")))
        object.__setattr__(self, "b", _frozen(_as_vector(self.b, d, "b")))
        object.__setattr__(self, "V", _frozen(_as_matrix(self.V, d, "V")))
        object.__setattr__(self, "B", _frozen(_as_matrix(self.B, d, "B")))

    @classmethod
    def make(cls, d: int, *, A: Any = 0.0, b: Any = 0.0, V: Any = 0.0, B: Any = 0.0
             ) -> GaussianParams:
        """Build from scalars (``s`` means ``s I``; ``b`` scalar only ``0``) or arrays."""
        if int(d) < 1:
            raise ValueError(f"d: must be >= 1, got {d}")
        d = int(d)
        return cls(_as_matrix(A, d, "A"), _as_vector(b, d, "b"), _as_matrix(V, d, "V"),
                   _as_matrix(B, d, "B"))

    @property
    def d(self) -> int:
        """Dimension of the token space."""
        return int(self.A.shape[0])

    def replace(self, **changes: Any) -> GaussianParams:
        """A copy with some of ``A, b, V, B`` replaced (scalars allowed as in :meth:`make`)."""
        kw = {k: getattr(self, k) for k in ("A", "b", "V", "B")}
        for k, v in changes.items():
            if k not in kw:
                raise ValueError(f"GaussianParams.replace: unknown parameter {k!r}")
            kw[k] = v
        return GaussianParams.make(self.d, **kw)

    def to_dict(self) -> dict[str, Any]:
        """Plain lists, for JSON."""
        return {k: getattr(self, k).tolist() for k in ("A", "b", "V", "B")}


@runtime_checkable
class ParamPath(Protocol):
    """Time-dependent parameters ``t ↦ (A, b, V, B)(t)``."""

    d: int
    is_constant: bool

    def at(self, t: float) -> GaussianParams:
        """Parameters at time ``t``."""
        ...

    def breakpoints(self, t0: float, t1: float) -> list[float]:
        """Times in ``(t0, t1)`` where the parameters jump (the integrator restarts there)."""
        ...


@dataclass(frozen=True)
class ConstantParams:
    """Constant parameters."""

    params: GaussianParams
    is_constant: bool = field(default=True, init=False)

    @property
    def d(self) -> int:  # noqa: D102
        return self.params.d

    def at(self, t: float) -> GaussianParams:  # noqa: D102
        return self.params

    def breakpoints(self, t0: float, t1: float) -> list[float]:  # noqa: D102
        return []


@dataclass(frozen=True)
class CallableParams:
    """Parameters from a user callable ``fn(t) -> GaussianParams | (A, b, V, B)``.

    The callable must be smooth between the listed ``jumps`` (times where it may
    be discontinuous; the integrator restarts there).
    """

    fn: Callable[[float], Any]
    d: int
    jumps: tuple[float, ...] = ()
    is_constant: bool = field(default=False, init=False)

    def at(self, t: float) -> GaussianParams:  # noqa: D102
        out = self.fn(float(t))
        if isinstance(out, GaussianParams):
            p = out
        else:
            try:
                A, b, V, B = out
            except (TypeError, ValueError) as exc:
                raise ValueError(
                    "CallableParams: fn(t) must return GaussianParams or a tuple (A, b, V, B)"
                ) from exc
            p = GaussianParams.make(self.d, A=A, b=b, V=V, B=B)
        if p.d != self.d:
            raise ValueError(f"CallableParams: fn({t}) returned dimension {p.d}, "
                             f"expected {self.d}")
        return p

    def breakpoints(self, t0: float, t1: float) -> list[float]:  # noqa: D102
        return sorted(float(s) for s in self.jumps if t0 < s < t1)


@dataclass(frozen=True)
class LayerParams:
    """Piecewise-constant parameters: layer ``ℓ`` acts on ``[t_ℓ, t_{ℓ+1})``.

    Parameters
    ----------
    layers : sequence of GaussianParams
        One parameter set per layer.
    durations : float or sequence of float
        Layer durations ``Δ_ℓ > 0`` (a float: all equal).
    t0 : float
        Start time of layer 0.

    Before ``t0`` the first and after the last boundary the last layer holds.
    """

    layers: tuple[GaussianParams, ...]
    durations: tuple[float, ...]
    t0: float = 0.0
    is_constant: bool = field(default=False, init=False)

    def __init__(self, layers: Sequence[GaussianParams], durations: float | Sequence[float],
                 t0: float = 0.0) -> None:
        layers = tuple(layers)
        if not layers:
            raise ValueError("LayerParams.layers: at least one layer is required")
        d = layers[0].d
        for i, p in enumerate(layers):
            if not isinstance(p, GaussianParams):
                raise ValueError(f"LayerParams.layers[{i}]: expected GaussianParams")
            if p.d != d:
                raise ValueError(f"LayerParams.layers[{i}]: dimension {p.d} != {d}")
        if np.ndim(durations) == 0:
            durations = [float(durations)] * len(layers)
        durations = tuple(float(x) for x in durations)
        if len(durations) != len(layers):
            raise ValueError(f"LayerParams.durations: {len(durations)} values for "
                             f"{len(layers)} layers")
        if not all(math.isfinite(x) and x > 0 for x in durations):
            raise ValueError(f"LayerParams.durations: must be finite and > 0, got {durations}")
        object.__setattr__(self, "layers", layers)
        object.__setattr__(self, "durations", durations)
        object.__setattr__(self, "t0", float(t0))
        object.__setattr__(self, "is_constant", False)

    @property
    def d(self) -> int:  # noqa: D102
        return self.layers[0].d

    @property
    def edges(self) -> np.ndarray:
        """Layer boundaries ``t_0 < t_1 < ... < t_L``."""
        return self.t0 + np.concatenate([[0.0], np.cumsum(self.durations)])

    @property
    def total_time(self) -> float:
        """Depth of the stack ``Σ_ℓ Δ_ℓ``."""
        return float(sum(self.durations))

    def at(self, t: float) -> GaussianParams:  # noqa: D102
        i = int(np.searchsorted(self.edges, t, side="right")) - 1
        return self.layers[min(max(i, 0), len(self.layers) - 1)]

    def breakpoints(self, t0: float, t1: float) -> list[float]:  # noqa: D102
        return [float(s) for s in self.edges[1:-1] if t0 < s < t1]


def as_param_path(obj: Any, d: int | None = None) -> ParamPath:
    """Accept GaussianParams, a parameter path or a callable ``t -> (A, b, V, B)`` (needs d)."""
    if isinstance(obj, GaussianParams):
        return ConstantParams(obj)
    if isinstance(obj, (ConstantParams, CallableParams, LayerParams)):
        return obj
    if callable(obj):
        if d is None:
            raise ValueError("as_param_path: a callable parameter path needs the dimension d")
        return CallableParams(obj, int(d))
    if isinstance(obj, ParamPath):
        return obj
    raise ValueError(f"params: expected GaussianParams, a parameter path or a callable, "
                     f"got {type(obj)}")
