"""Scenario files (TOML): one documented schema, validated with errors that name the key.

A scenario describes tokens, heads, their schedule and attention, and the options of
each solver. Unknown keys, wrong types or shapes, non-unit tokens, ``β <= 0`` and NaN
are rejected with a message ``"<section>.<key>: <what is wrong>"``. Relative file
paths are resolved against the scenario file's directory.

Schema (defaults in brackets)::

    seed = 0                                 # master seed [0]
    [attention]  kind = "softmax"|"usa"|"relu" ["softmax"]; beta = 1.0; d = 3
    [tokens]     n = 200; sampler = "uniform"|"vmf"|"polytope"|"published"|"equiangular"|
                 "orthonormal"|"file" ["uniform"];
                 means = [[...]], kappas = [...], weights = [...]     (vmf)
                 polytope = "octahedron", noise = 0.05                 (polytope)
                 noise = 0.05; layout = "octahedral"|"cross" [by d]    (published)
                 gamma = 0.0                                           (equiangular)
                 file = "tokens.npy"                                   (file)
    [heads]      type = "random_symmetric"|"published"|"scalar"|"matrices"|"file"
                 ["random_symmetric"];
                 H = 1; scale = 1.0; lambdas = [...]; A = [[[...]]]; V = [[[...]]];
                 file = "heads.npz" (Q, K, V[, w] or A[, V, w]);
                 value_sign = 1 (+1 ascent V = A, -1 descent V = -A; for files: sets V
                 of archives with A alone, must agree with a V the archive gives);
                 w = "mean"|"sum"|[...] ["mean": w_h = 1/H]; seed (default: seed + 1;
                 published: seed + H); generator = "numpy"|"torch-cpu" ["numpy"] (published)
    [schedule]   type = "static"|"ou"|"oscillating"|"relaxed"|"layers"|"callable" ["static"]
                 (the registered SCHEDULE_TYPES of wflow.attention.schedules);
                 kappa = 1.0; sigma = 0.0 (or sigma2 = σ², e.g. 2.0); gamma = 0.0;
                 symmetric_noise = false;
                 target = "identity"|"initial"|"zero"|<number c: c·I> ["identity"]  (ou)
                 amplitude = 0.5; omega = 1.0 (default)               (oscillating)
                 target = "published"|"rotating" ["published"]         (relaxed)
                 c = 2.0; alpha = 1.5; omega = 0.5 (defaults)          (relaxed, rotating)
                 files = ["layer0.npz", ...]; delta = 1.0                (layers)
                 function = "package.module:function"                   (callable)
    [particles]  T; dt; integrator; flow; record_every; n_paths; entropy; head_rates;
                 clusters; cluster_cos; kernel_backend; kernel_tol   (see ParticleOptions)

Other solvers add their own sections (``mesh``, ``density``, ``pde``, ``jko``, ``run``)
through :func:`register_section`.
"""

from __future__ import annotations

import math
import tomllib
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from ..attention.heads import KINDS, Attention, Heads
from ..attention.published import (
    HEAD_GENERATORS,
    published_heads,
    published_relaxed,
    sample_published_clusters,
)
from ..attention.schedules import SCHEDULE_TYPES, Schedule, ScheduleContext
from ..geometry.sphere import (
    check_on_sphere,
    equiangular_tokens,
    orthonormal_tokens,
    sample_polytope_clusters,
    sample_uniform,
    sample_vmf_mixture,
)
from ..infra.callables import resolve_callable
from ..infra.schema import ScenarioError, Spec, boolean, choice, number, string, take
from ..infra.schema import array as _array
from ..particles.options import PARTICLES_SCHEMA, ParticleOptions

__all__ = [
    "Scenario",
    "load_scenario",
    "parse_scenario",
    "take",
    "number",
    "choice",
    "boolean",
    "string",
    "register_section",
    "ScenarioError",
]

_EXTRA_SECTIONS: dict[str, Spec] = {}


def register_section(name: str, spec: Spec) -> None:
    """Declare a solver-specific top-level section (validated by ``take`` with ``spec``)."""
    _EXTRA_SECTIONS[name] = spec


ATTENTION_SCHEMA: Spec = {
    "kind": ("softmax", choice(*KINDS)),
    "beta": (1.0, number(0, strict_lo=True)),
    "d": (3, number(2, integer=True)),
}
TOKENS_SCHEMA: Spec = {
    "n": (200, number(1, integer=True)),
    "sampler": ("uniform", choice("uniform", "vmf", "polytope", "published", "equiangular",
                                   "orthonormal", "file")),
    "means": (None, _array(2)),
    "kappas": (None, _array((0, 1))),
    "weights": (None, _array(1)),
    "polytope": ("octahedron", string),
    "noise": (0.05, number(0)),
    "layout": (None, choice("octahedral", "cross")),
    "gamma": (0.0, number(-1, 1)),
    "file": (None, string),
    "seed": (None, number(0, integer=True)),
}
def _value_sign(v: Any, key: str) -> float:
    """Checker of ``heads.value_sign``: the number +1 or −1 (``true`` is not a sign)."""
    if isinstance(v, bool) or not isinstance(v, (int, float)) or v not in (1, -1):
        raise ScenarioError(f"{key}: must be the number 1 (ascent, V = A) or -1 (descent, "
                            f"V = -A), got {v!r}")
    return float(v)


HEADS_SCHEMA: Spec = {
    "type": ("random_symmetric", choice("random_symmetric", "published", "scalar", "matrices",
                                        "file")),
    "H": (1, number(1, integer=True)),
    "scale": (1.0, number(0)),
    "lambdas": (None, _array(1)),
    "A": (None, _array(3)),
    "V": (None, _array(3)),
    "file": (None, string),
    "value_sign": (None, lambda v, key: _value_sign(v, key)),
    "w": ("mean", None),
    "seed": (None, number(0, integer=True)),
    "generator": ("numpy", choice(*HEAD_GENERATORS)),
}
SCHEDULE_SCHEMA: Spec = {
    "type": ("static", SCHEDULE_TYPES.checker()),
    "kappa": (1.0, number(0)),
    "sigma": (None, number(0)),
    "sigma2": (None, number(0)),
    "gamma": (0.0, number(0)),
    "symmetric_noise": (False, boolean),
    "target": (None, None),
    "amplitude": (0.5, number()),
    "omega": (None, number()),
    "c": (None, number()),
    "alpha": (None, number()),
    "files": (None, None),
    "delta": (1.0, number(0, strict_lo=True)),
    "function": (None, string),
}
CORE_SECTIONS = {"attention": ATTENTION_SCHEMA, "tokens": TOKENS_SCHEMA, "heads": HEADS_SCHEMA,
                 "schedule": SCHEDULE_SCHEMA, "particles": PARTICLES_SCHEMA}
#: Sections owned by other solvers, validated there (registered at import of those modules).
KNOWN_SOLVER_SECTIONS = ("mesh", "density", "pde", "jko", "run", "verify")


@dataclass(frozen=True)
class Scenario:
    """A validated scenario.

    Attributes
    ----------
    raw : dict
        The TOML content as read (echoed into ``summary.json``).
    base_dir : Path
        Directory that relative file paths are resolved against.
    seed : int
    attention, tokens, heads, schedule, particles : dict
        Validated sections (defaults filled in).
    sections : dict
        Raw solver-specific sections (``mesh``, ``pde``, …) for their own validators.
    """

    raw: dict
    base_dir: Path
    seed: int
    attention: dict
    tokens: dict
    heads: dict
    schedule: dict
    particles: dict
    sections: dict = field(default_factory=dict)

    # ------------------------------------------------------------------ builders
    def attention_obj(self) -> Attention:
        """The :class:`Attention` of the scenario."""
        return Attention(self.attention["kind"], self.attention["beta"])

    @property
    def d(self) -> int:
        """Ambient dimension."""
        return int(self.attention["d"])

    def path(self, p: str) -> Path:
        """Resolve a scenario-relative path."""
        q = Path(p)
        return q if q.is_absolute() else self.base_dir / q

    def build_tokens(self, rng: np.random.Generator | None = None) -> np.ndarray:
        """Initial tokens ``(n, d)`` on the sphere (seeded by ``tokens.seed`` or ``seed``)."""
        t = self.tokens
        rng = rng or np.random.default_rng(self.seed if t["seed"] is None else t["seed"])
        n, d, s = t["n"], self.d, t["sampler"]
        if s == "uniform":
            x = sample_uniform(n, d, rng)
        elif s == "vmf":
            if t["means"] is None:
                raise ScenarioError("tokens.means: required for sampler = 'vmf'")
            means = t["means"]
            if means.shape[1] != d:
                raise ScenarioError(f"tokens.means: rows must have length d = {d}, "
                                    f"got shape {means.shape}")
            kappas = 10.0 if t["kappas"] is None else t["kappas"]
            x = sample_vmf_mixture(n, means, kappas, t["weights"], rng)
        elif s == "polytope":
            try:
                x = sample_polytope_clusters(n, d, rng, polytope=t["polytope"], noise=t["noise"])
            except ValueError as exc:
                raise ScenarioError(f"tokens.polytope: {exc}") from exc
        elif s == "published":
            try:
                x = sample_published_clusters(n, d, rng, noise=t["noise"], layout=t["layout"])
            except ValueError as exc:
                raise ScenarioError(f"tokens.layout: {exc}") from exc
        elif s == "equiangular":
            try:
                x = equiangular_tokens(n, t["gamma"], d, rng)
            except ValueError as exc:
                raise ScenarioError(f"tokens.gamma: {exc}") from exc
        elif s == "orthonormal":
            if n > d:
                raise ScenarioError(f"tokens.n: orthonormal tokens need n <= d = {d}, got {n}")
            x = orthonormal_tokens(n, d, rng)
        else:
            if t["file"] is None:
                raise ScenarioError("tokens.file: required for sampler = 'file'")
            p = self.path(t["file"])
            if not p.is_file():
                raise ScenarioError(f"tokens.file: file not found: {p}")
            x = np.load(p)
            try:
                x = check_on_sphere(x, name="tokens.file")
            except ValueError as exc:
                raise ScenarioError(str(exc)) from exc
            if x.shape[1] != d:
                raise ScenarioError(f"tokens.file: tokens have dimension {x.shape[1]}, "
                                    f"attention.d = {d}")
        return x

    def build_heads(self) -> Heads:
        """Initial heads ``θ(0)``."""
        h = self.heads
        d = self.d
        rng = np.random.default_rng(self.seed + 1 if h["seed"] is None else h["seed"])
        typ = h["type"]
        sign = 1.0 if h["value_sign"] is None else h["value_sign"]
        if typ == "random_symmetric":
            H = h["H"]
            heads = Heads.random_symmetric(H, d, rng, scale=h["scale"], value_sign=sign)
        elif typ == "published":
            return self._published_heads()
        elif typ == "scalar":
            if h["lambdas"] is None:
                raise ScenarioError("heads.lambdas: required for type = 'scalar'")
            heads = Heads.scalar(h["lambdas"], d, value_sign=sign)
        elif typ == "matrices":
            if h["A"] is None:
                raise ScenarioError("heads.A: required for type = 'matrices'")
            A = h["A"]
            if A.shape[1:] != (d, d):
                raise ScenarioError(f"heads.A: expected shape (H, {d}, {d}), got {A.shape}")
            V = h["V"]
            if V is not None and V.shape != A.shape:
                raise ScenarioError(f"heads.V: expected shape {A.shape}, got {V.shape}")
            heads = Heads.bilinear(A, V=V, value_sign=sign)
        else:
            if h["file"] is None:
                raise ScenarioError("heads.file: required for type = 'file'")
            heads = self._heads_file(h["file"], "heads.file")
        return heads.with_(w=self._weights(heads.H))

    def _published_heads(self) -> Heads:
        """``heads.type = "published"``: :func:`published_heads`, seed ``seed + H``.

        The published conventions (``D = Z + Zᵀ``, value ``−D``, ``w_h = 1/H``) are fixed:
        a key that would change them is refused.
        """
        h, given = self.heads, self.raw.get("heads", {})
        for key, ok in (("value_sign", (-1, -1.0)), ("scale", (1, 1.0)), ("w", ("mean",))):
            if key in given and given[key] not in ok:
                raise ScenarioError(f"heads.{key}: type = 'published' fixes {key} = {ok[0]!r} "
                                    f"(D = Z + Zᵀ, value −D, w_h = 1/H); got {given[key]!r}. "
                                    "Use type = 'random_symmetric' for other choices")
        H = h["H"]
        seed = self.seed + H if h["seed"] is None else h["seed"]
        return published_heads(H, self.d, seed=seed, generator=h["generator"])

    def _heads_file(self, name: Any, key: str) -> Heads:
        """Heads from an ``.npz`` named in the scenario (``heads.file``, ``schedule.files``).

        An archive with ``A`` alone gets ``V = value_sign · A`` (``heads.value_sign``,
        default +1). An archive that gives ``V`` keeps it: an explicit ``value_sign`` must
        then agree with it (``V = value_sign · A``), else the scenario is refused.
        """
        p = self.path(string(name, key))
        if not p.is_file():
            raise ScenarioError(f"{key}: file not found: {p}")
        explicit = self.heads["value_sign"]
        try:
            heads = Heads.from_npz(p, value_sign=1.0 if explicit is None else explicit)
        except ValueError as exc:
            raise ScenarioError(f"{key}: {exc}") from exc
        if heads.d != self.d:
            raise ScenarioError(f"{key}: heads act on R^{heads.d}, attention.d = {self.d}")
        if explicit is not None:
            with np.load(p) as z:
                gives_v = "V" in z.files
            align = heads.value_alignment()
            if gives_v and align != explicit:
                found = {1: "V = +A", -1: "V = -A"}.get(align, "V not ±A")
                raise ScenarioError(
                    f"heads.value_sign = {explicit:+g} conflicts with {key} {p.name}, whose "
                    f"heads have {found}; value_sign sets V only for archives with A alone: "
                    "remove it or fix the file")
        return heads

    def _weights(self, H: int) -> np.ndarray:
        w = self.heads["w"]
        if w == "mean":
            return np.full(H, 1.0 / H)
        if w == "sum":
            return np.ones(H)
        arr = _array(1)(w, "heads.w")
        if arr.shape != (H,) or np.any(arr < 0):
            raise ScenarioError(f"heads.w: expected {H} non-negative weights, 'mean' or 'sum'; "
                                f"got {w!r}")
        return arr

    def build_schedule(self) -> Schedule:
        """The weight schedule (static heads by default).

        ``[schedule] type`` is looked up in :data:`~wflow.attention.schedules.SCHEDULE_TYPES`
        (an unknown type raises with the known ones).
        """
        heads = self.build_heads()
        stype = SCHEDULE_TYPES.lookup(self.schedule["type"], "schedule.type")
        ctx = ScheduleContext(heads=heads, d=self.d, sigma=self._sigma,
                              heads_file=self._layer_heads, published_relaxed=published_relaxed)
        table = dict(self.schedule)
        if isinstance(table.get("function"), str):  # a module beside the scenario resolves there
            table["function"] = resolve_callable(table["function"], self.base_dir)
        return stype.build(table, ctx)

    def _layer_heads(self, name: Any, key: str) -> Heads:
        """Heads of one ``schedule.files`` entry with the scenario's mixing weights."""
        hl = self._heads_file(name, key)
        return hl.with_(w=self._weights(hl.H))

    def _sigma(self) -> float:
        """``σ₀`` from ``schedule.sigma`` or ``schedule.sigma2`` (``σ = √σ²`` exactly)."""
        s = self.schedule
        if s["sigma"] is not None and s["sigma2"] is not None:
            raise ScenarioError("schedule.sigma2: give either sigma or sigma2 (= σ²), not both")
        if s["sigma2"] is not None:
            return math.sqrt(s["sigma2"])
        return 0.0 if s["sigma"] is None else s["sigma"]

    def particle_options(self, **overrides: Any) -> ParticleOptions:
        """:class:`~wflow.particles.ParticleOptions` from ``[particles]`` (+ overrides)."""
        return ParticleOptions(**{**self.particles, "seed": self.seed, **overrides})


def parse_scenario(raw: Mapping[str, Any], *, base_dir: str | Path = ".") -> Scenario:
    """Validate a scenario mapping (as read from TOML)."""
    raw = dict(raw)
    allowed = {"seed", *CORE_SECTIONS, *KNOWN_SOLVER_SECTIONS, *_EXTRA_SECTIONS}
    unknown = sorted(set(raw) - allowed)
    if unknown:
        raise ScenarioError(f"{unknown[0]}: unknown top-level key (known: {sorted(allowed)})")
    seed = number(0, integer=True)(raw.get("seed", 0), "seed")
    parts = {}
    for name, spec in CORE_SECTIONS.items():
        sec = raw.get(name, {})
        if not isinstance(sec, Mapping):
            raise ScenarioError(f"{name}: expected a table [{name}], got {type(sec).__name__}")
        parts[name] = take(sec, spec, name)
    sections = {}
    for name in (*KNOWN_SOLVER_SECTIONS, *_EXTRA_SECTIONS):
        if name in raw:
            if not isinstance(raw[name], Mapping):
                raise ScenarioError(f"{name}: expected a table [{name}]")
            sections[name] = dict(raw[name])
            if name in _EXTRA_SECTIONS:
                take(raw[name], _EXTRA_SECTIONS[name], name)
    sc = Scenario(raw=raw, base_dir=Path(base_dir), seed=seed, sections=sections, **parts)
    # eager checks that need several sections
    sc.attention_obj()
    if sc.heads["type"] == "random_symmetric" and sc.heads["H"] < 1:
        raise ScenarioError("heads.H: must be >= 1")
    return sc


def load_scenario(path: str | Path) -> Scenario:
    """Read and validate a TOML scenario file."""
    path = Path(path)
    if not path.is_file():
        raise FileNotFoundError(f"scenario file not found: {path}")
    try:
        raw = tomllib.loads(path.read_text(encoding="utf-8"))
    except tomllib.TOMLDecodeError as exc:
        raise ScenarioError(f"{path}: invalid TOML ({exc})") from exc
    return parse_scenario(raw, base_dir=path.parent)
