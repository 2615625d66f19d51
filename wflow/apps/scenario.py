"""Scenario files (TOML): one documented schema, validated with errors that name the key.

A scenario describes tokens, heads, their schedule and attention, and the options of
each solver. Unknown keys, wrong types or shapes, non-unit tokens, ``β <= 0`` and NaN
are rejected with a message ``"<section>.<key>: <what is wrong>"``. Relative file
paths are resolved against the scenario file's directory.

Schema (defaults in brackets)::

    seed = 0                                 # master seed [0]
    modules = ["mykinds.py", "pkg.mod"]      # imported first (relative to the scenario):
                                             # they register kinds, integrators, schedules
    [attention]  kind = "softmax"|"usa"|"relu" ["softmax"]; beta = 1.0; d = 3;
                 diffusion = 0.0 (token diffusion D >= 0, THEORY §8)
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

Every section is parsed and validated **once, when the scenario loads**, whatever the
command: a typo in ``[jko]`` or ``[run]`` stops ``wflow particles`` too (exit status 2,
one line naming the key). The registered solvers' sections (``[particles]``, ``[pde]``,
``[jko]``, ``[kinetic]``: :data:`~wflow.infra.spec.SOLVERS`) by their parsers, ``[run]``
into :class:`~wflow.apps.run_table.RunOptions` and ``[density]`` against
:data:`~wflow.geometry.density.DENSITY_SCHEMA`; the typed results are
:meth:`Scenario.table`. A module may declare a section of its own through
:func:`register_section`.
"""

from __future__ import annotations

import math
import tomllib
from collections.abc import Mapping
from dataclasses import dataclass, field, fields
from pathlib import Path
from typing import Any

import numpy as np

from ..attention.diffusion import check_diffusion
from ..attention.heads import KINDS, Attention, Heads
from ..attention.mask import get_bias, get_mask
from ..attention.published import (
    HEAD_GENERATORS,
    published_heads,
    published_relaxed,
    sample_published_clusters,
)
from ..attention.schedules import SCHEDULE_TYPES, Schedule, ScheduleContext
from ..geometry.density import DENSITY_SCHEMA
from ..geometry.sphere import (
    check_on_sphere,
    equiangular_tokens,
    orthonormal_tokens,
    sample_polytope_clusters,
    sample_uniform,
    sample_vmf_mixture,
)
from ..infra.callables import load_module, resolve_callable
from ..infra.options import from_table
from ..infra.schema import ScenarioError, Spec, boolean, choice, choice_in, number, string, take
from ..infra.schema import array as _array
from ..infra.spec import SOLVERS
from ..jko import spec as _jko_spec  # noqa: F401  (registers [jko])
from ..kinetic import spec as _kinetic_spec  # noqa: F401  (registers [kinetic])
from ..particles.options import PARTICLES_SPEC, ParticleOptions
from ..particles.spec import SPEC as PARTICLES
from ..pde import spec as _pde_spec  # noqa: F401  (registers [pde])
from .run_table import RunOptions

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
    "kind": ("softmax", choice_in(KINDS)),  # live: kinds registered by `modules` count
    "beta": (1.0, number(0, strict_lo=True)),
    "d": (3, number(2, integer=True)),
    "diffusion": (0.0, check_diffusion),  # token diffusion D (THEORY §8), read once here
    "mask": ("none", lambda v, key: (get_mask(v, key), v)[1]),  # THEORY §9: a decoder's mask
    "bias": ("none", lambda v, key: (get_bias(v, key), v)[1]),  # its positional bias
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
#: What each key means, in words (the scenario-key reference of the site is generated from
#: these and the schemas above; ``tests/test_scenario_key_docs.py`` fails when a key has
#: no meaning or its meaning only repeats the default).
ATTENTION_DOCS: dict[str, str] = {
    "kind": "Attention kernel: normalised softmax, unnormalised self-attention (USA, "
            "e^{β⟨x, Ay⟩} without the normaliser) or ReLU (the registered attention kinds).",
    "beta": "Inverse temperature β of the scores (e^{β⟨Q x, K y⟩}); larger β, sharper "
            "attention and faster clustering.",
    "d": "Ambient dimension: tokens live on the sphere S^{d-1} ⊂ R^d (the PDE and JKO "
         "solvers need d = 3).",
    "diffusion": "Token diffusion D ≥ 0 (THEORY §8): each token also moves by a Brownian "
                 "motion on the sphere with generator D Δ_S; the PDE gains D Δ_S ρ, the JKO "
                 "the entropy D Σ m log(m/σ). Not the weights' OU noise ([schedule]). Needs a "
                 "stochastic particle integrator (em, strang) and the FV JKO scheme; "
                 "Mun & Rosenzweig's K = 1/(2D). 0: the noiseless model.",
    "mask": "The causal mask of a decoder (THEORY §9): 'causal' (token i attends to j ≤ i, "
            "in the order of the token array), 'causal_strict' (j < i: the first token "
            "stays at rest) or 'none'. The particles run it (the Python loop, also split over "
            "MPI ranks), wflow kinetic solves its mean-field limit, and wflow run compares "
            "the two (no JKO, no EDI: not a gradient flow); the PDE and the JKO refuse a "
            "mask (no density form).",
    "bias": "The positional bias added to the scores under the mask: 'none' or an ALiBi "
            "table {type = 'alibi', slope = s} (b(i, j) = −s(i − j)) or {type = 'alibi', "
            "lam = λ, n = n} (slope λ/n). Needs attention.mask.",
}
TOKENS_DOCS: dict[str, str] = {
    "n": "Number of tokens (particles).",
    "sampler": "How the initial tokens are drawn: uniform on the sphere, a von Mises–Fisher "
               "mixture, noisy polytope vertices, the published experiments' draws, "
               "equiangular or orthonormal tokens, or read from a file.",
    "means": "vmf: the mixture's mean directions, one row of length d per component "
             "(normalised; required for sampler = \"vmf\").",
    "kappas": "vmf: concentration κ of each component (one number for all, or one per "
              "component; default 10).",
    "weights": "vmf: mixture weights of the components (default: equal).",
    "polytope": "polytope: the vertex set the tokens cluster around: \"octahedron\" / "
                "\"cross\" (±e_i), \"simplex\", \"cube\" or \"icosahedron\" (d = 3).",
    "noise": "polytope and published: standard deviation of the Gaussian perturbation added "
             "to each vertex before normalising.",
    "layout": "published: the vertex order of the published draws, \"octahedral\" or "
              "\"cross\" (default: the one the published experiments use for d).",
    "gamma": "equiangular: the common inner product γ = ⟨x_i, x_j⟩ of every pair, in "
             "(−1/(n−1), 1).",
    "file": "file: a .npy array (n, d) of unit tokens, relative to the scenario's folder.",
    "seed": "Seed of the token draw (default: the top-level seed).",
}
HEADS_DOCS: dict[str, str] = {
    "type": "How the heads are built: random symmetric score matrices, the published "
            "experiments' heads, scalar heads λ_h I, explicit matrices, or a .npz file.",
    "H": "Number of heads (random_symmetric and published).",
    "scale": "random_symmetric: A_h = scale · (Z + Zᵀ), Z standard normal.",
    "lambdas": "scalar: the heads' scalars λ_h (A_h = λ_h I), one per head.",
    "A": "matrices: the score matrices A_h, shape (H, d, d) (required for type = "
         "\"matrices\").",
    "V": "matrices: the value matrices V_h, shape (H, d, d) (default: value_sign · A).",
    "file": "file: a .npz archive with Q, K, V[, w] or A[, V, w], relative to the "
            "scenario's folder.",
    "value_sign": "V = value_sign · A where V is not given: +1 (ascent, value-aligned "
                  "heads) or −1 (descent); for files only archives with A alone.",
    "w": "Mixing weights of the heads: \"mean\" (w_h = 1/H, the mean-field average), "
         "\"sum\" (w_h = 1) or a list of H non-negative numbers.",
    "seed": "Seed of the random heads (default: seed + 1; published: seed + H).",
    "generator": "published: the random stream of Z, NumPy's (the published law) or "
                 "torch's CPU stream (the very matrices of the published code on a CPU).",
}
SCHEDULE_DOCS: dict[str, str] = {
    "type": "How the head weights θ(t) evolve with depth: static, Ornstein–Uhlenbeck, "
            "oscillating, relaxed towards an oscillating target, piecewise-constant "
            "layers, or a user's callable (the registered schedule types).",
    "kappa": "ou and relaxed: relaxation rate κ of dθ = −κ(θ − θ_∞) dt (resp. towards "
             "the target F(t)).",
    "sigma": "ou and callable: noise amplitude σ₀ of the weights (σ₀ e^{−γt} dW; default "
             "0, deterministic); give sigma or sigma2, not both.",
    "sigma2": "ou and callable: the noise variance σ₀² instead of sigma (σ₀ = √sigma2; "
              "the published OU runs use 2).",
    "gamma": "ou and callable: decay rate γ of the noise amplitude σ₀ e^{−γt} (γ > 0 "
             "makes the path integrable).",
    "symmetric_noise": "ou and callable: symmetrise each noise increment "
                       "((Z + Zᵀ)/2), so that symmetric heads stay symmetric.",
    "target": "ou: the limit θ_∞ (\"identity\", the \"initial\" heads, \"zero\" or a "
              "number c for c·I; default identity); relaxed: the oscillating target, "
              "\"published\" frames or wflow's \"rotating\" variant.",
    "amplitude": "oscillating: amplitude a of θ_h(t) = θ_∞,h + a sin(ωt + φ_h).",
    "omega": "oscillating: angular frequency ω (default 1); relaxed, rotating: frequency "
             "of the rotating target (default 0.5).",
    "c": "relaxed, rotating: the identity part c of the target F_h(t) = c I + α P(ω(t + "
         "s_h)), P the oscillating pattern (default 2).",
    "alpha": "relaxed, rotating: the amplitude α of the target's oscillating part "
             "(default 1.5).",
    "files": "layers: the list of .npz head files, one per layer, relative to the "
             "scenario's folder.",
    "delta": "layers: the depth (duration) of each layer; layer ℓ acts on [ℓδ, (ℓ+1)δ).",
    "function": "callable: \"package.module:function\" computing dθ/dt = f(θ, t) (a "
                "module beside the scenario is found there first).",
}
CORE_SECTIONS = {"attention": ATTENTION_SCHEMA, "tokens": TOKENS_SCHEMA, "heads": HEADS_SCHEMA,
                 "schedule": SCHEDULE_SCHEMA}
#: Sections of the main job and of the initial density (parsed at load: :class:`Scenario`).
KNOWN_SOLVER_SECTIONS = ("density", "run")


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
        Raw sections other than the core ones (``pde``, ``jko``, ``mesh``, …), as read.
    tables : dict
        Every registered solver's section, ``run`` and ``density`` (when given), parsed and
        validated once when the scenario is built (:meth:`table`); a scenario built with
        other ``sections`` (``dataclasses.replace``) parses them again.
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
    tables: dict = field(default_factory=dict, init=False, compare=False, repr=False)

    def __post_init__(self) -> None:
        """Parse every registered solver section (the one parse of each per scenario)."""
        tables: dict[str, Any] = {}
        for name, spec in SOLVERS.sections().items():
            if spec is PARTICLES:  # a core table, validated by parse_scenario
                tables[name] = ParticleOptions(**self.particles, seed=self.seed)
                continue
            sec = self.sections.get(name)
            if sec is not None and not isinstance(sec, Mapping):
                raise ScenarioError(f"{name}: expected a table [{name}]")
            tables[name] = spec.parse(sec, self.sections, self.seed)
        tables["run"] = from_table(RunOptions, self.sections.get("run"), "run")
        if "density" in self.sections:  # the keys of the table (files resolved where used)
            tables["density"] = take(self.sections["density"], DENSITY_SCHEMA, "density")
        object.__setattr__(self, "tables", tables)

    def table(self, section: str) -> Any:
        """The typed, validated ``[section]`` of a registered solver, ``run`` or ``density``.

        ``ParticleOptions``, ``PDETable``, ``JKOTable``, ``KineticTable``, ``RunOptions``:
        the defaults where the scenario has no such table; ``density``: the validated keys
        of the ``[density]`` table (absent without one).
        """
        try:
            return self.tables[section]
        except KeyError:
            raise KeyError(f"{section}: not a solver section (known: "
                           f"{sorted(self.tables)})") from None

    # ------------------------------------------------------------------ builders
    def attention_obj(self) -> Attention:
        """The :class:`Attention` of the scenario."""
        mask = get_mask(self.attention.get("mask", "none"), "attention.mask")
        bias = get_bias(self.attention.get("bias", "none"), "attention.bias")
        if mask is None and bias is None:  # the exchangeable model: today's object
            return Attention(self.attention["kind"], self.attention["beta"])
        return Attention(self.attention["kind"], self.attention["beta"], mask=mask, bias=bias)

    @property
    def d(self) -> int:
        """Ambient dimension."""
        return int(self.attention["d"])

    @property
    def diffusion(self) -> float:
        """Token diffusion ``D`` (``[attention] diffusion``, validated at load; 0: noiseless)."""
        return float(self.attention.get("diffusion", 0.0))

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
        stype = SCHEDULE_TYPES.resolve(self.schedule["type"], "schedule.type")
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
        opts = self.tables["particles"]
        return ParticleOptions(**{**{f.name: getattr(opts, f.name) for f in fields(opts)},
                                  **overrides}) if overrides else opts


def _import_modules(mods: Any, base_dir: str | Path) -> None:
    """Import the scenario's ``modules`` before anything is validated.

    Their registrations (attention kinds, particle integrators, schedule types) are then
    valid names in every section.
    """
    mods = [mods] if isinstance(mods, str) else mods
    if not isinstance(mods, list) or not all(isinstance(m, str) for m in mods):
        raise ScenarioError(f"modules: expected a module (string) or a list of them, "
                            f"got {mods!r}")
    for i, spec in enumerate(mods):
        try:
            load_module(spec, base_dir=base_dir, name=f"modules[{i}]")
        except ValueError as exc:
            raise ScenarioError(str(exc)) from exc


def parse_scenario(raw: Mapping[str, Any], *, base_dir: str | Path = ".") -> Scenario:
    """Validate a scenario mapping (as read from TOML)."""
    raw = dict(raw)
    solver_sections = tuple(SOLVERS.sections())
    allowed = {"seed", "modules", *CORE_SECTIONS, *solver_sections, *KNOWN_SOLVER_SECTIONS,
               *_EXTRA_SECTIONS}
    unknown = sorted(set(raw) - allowed)
    if unknown:
        raise ScenarioError(f"{unknown[0]}: unknown top-level key (known: {sorted(allowed)})")
    _import_modules(raw.get("modules", []), base_dir)
    seed = number(0, integer=True)(raw.get("seed", 0), "seed")
    parts = {}
    for name, spec in CORE_SECTIONS.items():
        sec = raw.get(name, {})
        if not isinstance(sec, Mapping):
            raise ScenarioError(f"{name}: expected a table [{name}], got {type(sec).__name__}")
        parts[name] = take(sec, spec, name)
    sec = raw.get("particles", {})
    if not isinstance(sec, Mapping):
        raise ScenarioError(f"particles: expected a table [particles], got {type(sec).__name__}")
    popts = PARTICLES.parse(sec, raw, seed)
    parts["particles"] = {k: getattr(popts, k) for k in PARTICLES_SPEC}
    sections = {}
    for name in (*solver_sections, *KNOWN_SOLVER_SECTIONS, *_EXTRA_SECTIONS):
        if name == PARTICLES.section:
            continue
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
