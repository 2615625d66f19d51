"""Gaussian scenarios: a small validated TOML schema for ``wflow gaussian``.

The scalar tables ``[run]``, ``[classify]`` and ``[particles]`` are options dataclasses
declared once (:class:`GaussianRunOptions`, :class:`ClassifyOptions`,
:class:`GaussianParticleOptions`; keys, defaults, checks and docs from their fields, see
:mod:`wflow.infra.options`); the shape-dependent tables are validated here.

Schema (every key optional unless marked; unknown keys are refused with their
name; numbers must be finite; ``A, V, B`` are a scalar ``s`` (meaning ``s I``)
or a ``d × d`` matrix; ``b`` a length-``d`` vector or ``0``)::

    title = "..."
    d = 2                                   # required

    [params]                                # constant parameters (default 0)
    A = ...   b = ...   V = ...   B = ...

    [[layers]]                              # piecewise-constant parameters (optional):
    duration = 0.5                          # required per layer, > 0
    A = ...                                 # entries override [params] for this layer

    [initial]                               # required
    m = [...]                               # required
    Sigma = [[...]]                         # required, symmetric PSD (any rank)

    [run]
    T = 2.0                                 # default: total layer depth, else required
    n_out = 201
    method = "Radau"                        # scipy.integrate.solve_ivp method
    rtol = 1e-9
    atol = 1e-12
    blowup_factor = 1e8

    [classify]                              # constant parameters only
    method = "auto"                         # auto | exact | probe
    horizon = 50.0                          # probe / rate-check integration time
    scope = "initial"                       # initial: the trajectory from [initial].Sigma
                                            # all: every full-rank initial covariance

    [target]                                # for `wflow gaussian reach`
    m = [...]   Sigma = [[...]]   T = 1.0   # all required
    keep_attention = true                   # steer with the scenario's V, B (else V = B = 0)

    [particles]                             # particle check of the moment ODE
    n = 400    seed = 0    steps = 40

    [phase]                                 # phase diagram of an affine 2-parameter family
    x_name = "a"    x = [-1.0, 1.0]         # name and range of the first parameter
    y_name = "vb"   y = [-1.0, 1.0]
    n = 41                                  # grid points per axis
    A0 = 0.0  Ax = 1.0  Ay = 0.0            # M(x, y) = M0 + x·Mx + y·My for M = A, V, B
    V0 = 1.0  Vx = 0.0  Vy = 0.0
    B0 = 0.0  Bx = 0.0  By = 1.0
    method = "auto"   horizon = 50.0
"""

from __future__ import annotations

import math
import tomllib
from collections.abc import Mapping
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from ..infra.options import documented, from_table, keys_of, opt, validate
from ..infra.schema import choice, number
from .moments import psd_factor
from .params import ConstantParams, GaussianParams, LayerParams, ParamPath

__all__ = [
    "GaussianRunOptions",
    "ClassifyOptions",
    "GaussianParticleOptions",
    "GaussianScenario",
    "PhaseSpec",
    "load_gaussian_scenario",
    "parse_gaussian_scenario",
]

_METHODS = ("RK45", "RK23", "DOP853", "Radau", "BDF", "LSODA")


@documented
@dataclass(frozen=True)
class GaussianRunOptions:
    """The ``[run]`` table of a Gaussian scenario: horizon and moment-ODE solver settings."""

    SECTION = "run"

    T: float | None = field(default=None, metadata=opt(
        "Final time; default: the total depth of the ``[[layers]]`` (required without them).",
        check=number(0, strict_lo=True), type="float, optional"))
    n_out: int = field(default=201, metadata=opt(
        "Equally spaced output times in ``[0, T]``.", check=number(2, integer=True)))
    method: str = field(default="Radau", metadata=opt(
        "Method of :func:`scipy.integrate.solve_ivp`.", check=choice(*_METHODS)))
    rtol: float = field(default=1e-9, metadata=opt(
        "Relative tolerance of the ODE solver.", check=number(0, strict_lo=True)))
    atol: float = field(default=1e-12, metadata=opt(
        "Absolute tolerance of the ODE solver.", check=number(0, strict_lo=True)))
    blowup_factor: float = field(default=1e8, metadata=opt(
        "Blow-up when ``tr Σ`` exceeds this factor times its initial scale (``> 1``).",
        check=number(1, strict_lo=True)))

    def __post_init__(self) -> None:
        validate(self)

    def solver_options(self) -> dict[str, Any]:
        """Keyword arguments of :func:`wflow.gaussian.solver.integrate_moments` (no ``T``)."""
        return {k: v for k, v in asdict(self).items() if k != "T"}


@documented
@dataclass(frozen=True)
class ClassifyOptions:
    """The ``[classify]`` table: the long-time classifier (constant parameters only)."""

    SECTION = "classify"

    method: str = field(default="auto", metadata=opt(
        "``exact`` (closed-form rules), ``probe`` (integration) or ``auto`` (exact where a "
        "rule applies).", check=choice("auto", "exact", "probe")))
    horizon: float = field(default=50.0, metadata=opt(
        "Probe / rate-check integration time.", check=number(0, strict_lo=True)))
    scope: str = field(default="initial", metadata=opt(
        "``initial``: the trajectory from ``[initial].Sigma``; ``all``: every full-rank "
        "initial covariance.", check=choice("initial", "all")))

    def __post_init__(self) -> None:
        validate(self)


@documented
@dataclass(frozen=True)
class GaussianParticleOptions:
    """The ``[particles]`` table: the particle check of the moment ODE."""

    SECTION = "particles"

    n: int = field(default=400, metadata=opt(
        "Particles sampled from ``N(m₀, Σ₀)``.", check=number(2, integer=True)))
    seed: int = field(default=0, metadata=opt(
        "Seed of the particle sample.", check=number(integer=True)))
    steps: int = field(default=40, metadata=opt(
        "RK4 steps of the particle system over ``[0, T]``.", check=number(1, integer=True)))

    def __post_init__(self) -> None:
        validate(self)


_TOP = {"title", "d", "params", "layers", "initial", "run", "classify", "target", "particles",
        "phase"}
_PARAM_KEYS = {"A", "b", "V", "B"}
_SECTIONS: dict[str, set[str]] = {
    "params": _PARAM_KEYS,
    "layer": _PARAM_KEYS | {"duration"},
    "initial": {"m", "Sigma"},
    "run": set(keys_of(GaussianRunOptions)),
    "classify": set(keys_of(ClassifyOptions)),
    "target": {"m", "Sigma", "T", "keep_attention"},
    "particles": set(keys_of(GaussianParticleOptions)),
    "phase": {"x_name", "x", "y_name", "y", "n", "method", "horizon",
              "A0", "Ax", "Ay", "V0", "Vx", "Vy", "B0", "Bx", "By"},
}


def _check_keys(table: Any, section: str, allowed: set[str]) -> Mapping[str, Any]:
    if not isinstance(table, Mapping):
        raise ValueError(f"{section}: expected a table, got {type(table).__name__}")
    for k in table:
        if k not in allowed:
            raise ValueError(f"{section}.{k}: unknown key (allowed: {', '.join(sorted(allowed))})")
    return table


def _number(value: Any, name: str, *, positive: bool = False, integer: bool = False) -> float:
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        raise ValueError(f"{name}: expected a number, got {value!r}")
    if integer and not isinstance(value, int):
        raise ValueError(f"{name}: expected an integer, got {value!r}")
    if not math.isfinite(value):
        raise ValueError(f"{name}: must be finite, got {value!r}")
    if positive and value <= 0:
        raise ValueError(f"{name}: must be > 0, got {value!r}")
    return value


def _array(value: Any, name: str) -> np.ndarray:
    def check(v: Any, path: str) -> None:
        if isinstance(v, list):
            for i, x in enumerate(v):
                check(x, f"{path}[{i}]")
        else:
            _number(v, path)

    check(value, name)
    try:
        arr = np.asarray(value, dtype=np.float64)
    except ValueError as exc:
        raise ValueError(f"{name}: ragged nested lists ({exc})") from exc
    return arr


def _matrix(value: Any, d: int, name: str) -> np.ndarray:
    arr = _array(value, name)
    if arr.ndim == 0:
        return float(arr) * np.eye(d)
    if arr.shape != (d, d):
        raise ValueError(f"{name}: expected a scalar or a {d}×{d} matrix, got shape {arr.shape}")
    return arr


def _vector(value: Any, d: int, name: str, *, zero_scalar: bool = False) -> np.ndarray:
    arr = _array(value, name)
    if arr.ndim == 0 and zero_scalar:
        if float(arr) != 0.0:
            raise ValueError(f"{name}: a scalar is only accepted as 0 (the zero vector)")
        return np.zeros(d)
    if arr.shape != (d,):
        raise ValueError(f"{name}: expected a vector of length {d}, got shape {arr.shape}")
    return arr


def _params(table: Mapping[str, Any], d: int, section: str, base: GaussianParams | None = None
            ) -> GaussianParams:
    vals: dict[str, Any] = ({k: getattr(base, k) for k in _PARAM_KEYS} if base is not None
                            else {"A": 0.0, "b": 0.0, "V": 0.0, "B": 0.0})
    for k in _PARAM_KEYS & set(table):
        vals[k] = (_vector(table[k], d, f"{section}.{k}", zero_scalar=True) if k == "b"
                   else _matrix(table[k], d, f"{section}.{k}"))
    return GaussianParams.make(d, **vals)


@dataclass(frozen=True)
class PhaseSpec:
    """Affine 2-parameter family ``M(x, y) = M0 + x·Mx + y·My`` (``M = A, V, B``) and its grid."""

    x_name: str
    y_name: str
    x: np.ndarray
    y: np.ndarray
    coeffs: dict[str, np.ndarray]
    method: str = "auto"
    horizon: float = 50.0

    def family(self, x: float, y: float) -> GaussianParams:
        """Parameters at ``(x, y)`` (``b = 0``)."""
        c = self.coeffs
        return GaussianParams(c["A0"] + x * c["Ax"] + y * c["Ay"], np.zeros(c["A0"].shape[0]),
                              c["V0"] + x * c["Vx"] + y * c["Vy"],
                              c["B0"] + x * c["Bx"] + y * c["By"])


@dataclass(frozen=True)
class GaussianScenario:
    """A validated Gaussian scenario (module docstring for the schema)."""

    title: str
    d: int
    params_path: ParamPath
    m0: np.ndarray
    Sigma0: np.ndarray
    T: float
    run: dict[str, Any]
    classify: dict[str, Any] | None
    target: dict[str, Any] | None
    particles: dict[str, Any] | None
    phase: PhaseSpec | None
    source: str = ""
    raw: dict[str, Any] = field(default_factory=dict, repr=False)

    @property
    def constant_params(self) -> GaussianParams | None:
        """The parameters if they are constant, else None."""
        if isinstance(self.params_path, ConstantParams):
            return self.params_path.params
        return None


def parse_gaussian_scenario(data: Mapping[str, Any], *, source: str = "<dict>"
                            ) -> GaussianScenario:
    """Validate a scenario mapping (as read from TOML); errors name the offending key."""
    _check_keys(data, "scenario", _TOP)
    if "d" not in data:
        raise ValueError("d: required (dimension of the token space)")
    d = int(_number(data["d"], "d", positive=True, integer=True))
    title = data.get("title", Path(source).stem if source else "gaussian")
    if not isinstance(title, str):
        raise ValueError("title: expected a string")
    base = _params(_check_keys(data.get("params", {}), "params", _SECTIONS["params"]), d, "params")
    layers_raw = data.get("layers")
    if layers_raw is not None:
        if not isinstance(layers_raw, list) or not layers_raw:
            raise ValueError("layers: expected a non-empty array of tables ([[layers]])")
        layers, durations = [], []
        for i, lt in enumerate(layers_raw):
            sec = f"layers[{i}]"
            _check_keys(lt, sec, _SECTIONS["layer"])
            if "duration" not in lt:
                raise ValueError(f"{sec}.duration: required")
            durations.append(float(_number(lt["duration"], f"{sec}.duration", positive=True)))
            layers.append(_params(lt, d, sec, base))
        path: ParamPath = LayerParams(layers, durations)
    else:
        path = ConstantParams(base)

    if "initial" not in data:
        raise ValueError("initial: required table with m and Sigma")
    init = _check_keys(data["initial"], "initial", _SECTIONS["initial"])
    for k in ("m", "Sigma"):
        if k not in init:
            raise ValueError(f"initial.{k}: required")
    m0 = _vector(init["m"], d, "initial.m")
    S0 = _matrix(init["Sigma"], d, "initial.Sigma")
    psd_factor(S0, name="initial.Sigma")

    ro = from_table(GaussianRunOptions,
                    _check_keys(data.get("run", {}), "run", _SECTIONS["run"]))
    if ro.T is not None:
        T = ro.T
    elif isinstance(path, LayerParams):
        T = path.total_time
    else:
        raise ValueError("run.T: required (final time) when there are no [[layers]]")
    opts = ro.solver_options()

    classify = None
    if "classify" in data or isinstance(path, ConstantParams):
        ct = _check_keys(data.get("classify", {}), "classify", _SECTIONS["classify"])
        if "classify" in data and not isinstance(path, ConstantParams):
            raise ValueError("classify: only for constant parameters (remove [[layers]] or "
                             "[classify])")
        classify = asdict(from_table(ClassifyOptions, ct))

    target = None
    if "target" in data:
        tt = _check_keys(data["target"], "target", _SECTIONS["target"])
        for k in ("m", "Sigma", "T"):
            if k not in tt:
                raise ValueError(f"target.{k}: required")
        S1 = _matrix(tt["Sigma"], d, "target.Sigma")
        psd_factor(S1, name="target.Sigma")
        keep = tt.get("keep_attention", True)
        if not isinstance(keep, bool):
            raise ValueError("target.keep_attention: expected true or false")
        target = {"m": _vector(tt["m"], d, "target.m"), "Sigma": S1,
                  "T": float(_number(tt["T"], "target.T", positive=True)),
                  "keep_attention": keep}

    particles = None
    if "particles" in data:
        pt = _check_keys(data["particles"], "particles", _SECTIONS["particles"])
        particles = asdict(from_table(GaussianParticleOptions, pt))

    phase = None
    if "phase" in data:
        ph = _check_keys(data["phase"], "phase", _SECTIONS["phase"])
        rng_ = {}
        for ax in ("x", "y"):
            if ax not in ph:
                raise ValueError(f"phase.{ax}: required range [min, max]")
            r = _array(ph[ax], f"phase.{ax}")
            if r.shape != (2,) or not r[0] < r[1]:
                raise ValueError(f"phase.{ax}: expected [min, max] with min < max, got {ph[ax]}")
            rng_[ax] = r
        n = int(_number(ph.get("n", 41), "phase.n", positive=True, integer=True))
        if n < 2:
            raise ValueError("phase.n: must be >= 2")
        coeffs = {k: _matrix(ph.get(k, 0.0), d, f"phase.{k}")
                  for k in ("A0", "Ax", "Ay", "V0", "Vx", "Vy", "B0", "Bx", "By")}
        method = ph.get("method", "auto")
        if method not in ("auto", "exact", "probe"):
            raise ValueError(f"phase.method: must be auto, exact or probe, got {method!r}")
        names = {}
        for k, default in (("x_name", "x"), ("y_name", "y")):
            names[k] = ph.get(k, default)
            if not isinstance(names[k], str):
                raise ValueError(f"phase.{k}: expected a string")
        phase = PhaseSpec(x_name=names["x_name"], y_name=names["y_name"],
                          x=np.linspace(*rng_["x"], n), y=np.linspace(*rng_["y"], n),
                          coeffs=coeffs, method=method,
                          horizon=float(_number(ph.get("horizon", 50.0), "phase.horizon",
                                                positive=True)))

    return GaussianScenario(title=title, d=d, params_path=path, m0=m0, Sigma0=S0, T=T, run=opts,
                            classify=classify, target=target, particles=particles, phase=phase,
                            source=source, raw=dict(data))


def load_gaussian_scenario(path: str | Path) -> GaussianScenario:
    """Read and validate a Gaussian scenario TOML file."""
    path = Path(path)
    if not path.is_file():
        raise FileNotFoundError(f"scenario file not found: {path}")
    try:
        with path.open("rb") as fh:
            data = tomllib.load(fh)
    except tomllib.TOMLDecodeError as exc:
        raise ValueError(f"{path}: invalid TOML ({exc})") from exc
    return parse_gaussian_scenario(data, source=str(path))
