"""Options of the particle solver and the ``[particles]`` table of a scenario.

:class:`ParticleOptions` are the keyword-only options of :func:`wflow.particles.simulate`.
Each option is declared once, as a field with its meaning and checker
(:mod:`wflow.infra.options`); :data:`PARTICLES_SCHEMA` (the TOML schema of ``[particles]``),
:data:`PARTICLES_SPEC` (its keys) and the ``Parameters`` section of the docstring are
derived from them (errors ``particles.<key>: ...``).
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping
from dataclasses import dataclass, field
from typing import Literal

from ..attention.diffusion import diffusion_field
from ..infra.accuracy import DEFAULT_RTOL, Tolerance, error_control_fields
from ..infra.options import documented, keys_of, opt, schema_of, validate
from ..infra.schema import Spec, boolean, choice, number
from ..kernels import BACKENDS
from .integrators import INTEGRATORS

__all__ = [
    "ENGINES",
    "INTEGRATORS",
    "INTEGRATOR_ORDER",
    "ParticleOptions",
    "PARTICLES_SCHEMA",
    "PARTICLES_SPEC",
]


class _Orders(Mapping[str, int]):
    """Declared order of each registered integrator (a live view of :data:`INTEGRATORS`)."""

    def __getitem__(self, name: str) -> int:
        return INTEGRATORS.resolve(name, "particles.integrator").order()

    def __iter__(self) -> Iterator[str]:
        return iter(INTEGRATORS)

    def __len__(self) -> int:
        return len(INTEGRATORS)


#: Declared order of each particle integrator (checked by a fitted-order test).
INTEGRATOR_ORDER: Mapping[str, int] = _Orders()
#: Time loops of :func:`wflow.particles.simulate` (see :class:`ParticleOptions`).
ENGINES = ("auto", "compiled", "python")


@documented
@dataclass(frozen=True)
class ParticleOptions:
    """Options of :func:`simulate` (all keyword-only in the API)."""

    SECTION = "particles"

    T: float = field(default=1.0, metadata=opt(
        "Final time (depth).", check=number(0, strict_lo=True)))
    dt: float = field(default=1e-2, metadata=opt(
        "Time step (the grid also contains every jump time of the schedule).",
        check=number(0, strict_lo=True)))
    integrator: str = field(default="rk4", metadata=opt(
        "Token integrator (:data:`~wflow.particles.integrators.INTEGRATORS`): explicit Euler "
        "with renormalisation (order 1) or RK4 with normalised stages (order 4).",
        check=INTEGRATORS.checker()))
    flow: Literal["transformer", "surrogate"] = field(default="transformer", metadata=opt(
        "Velocity: the transformer's ``v`` or the gradient-flow surrogate ``v̂``.",
        check=choice("transformer", "surrogate")))
    record_every: int = field(default=1, metadata=opt(
        "Record diagnostics every this many steps (the balance uses every step).",
        check=number(1, integer=True)))
    n_paths: int = field(default=1, metadata=opt(
        "Independent weight-noise paths (Monte-Carlo); 1 for deterministic schedules, except "
        "with token diffusion ``D > 0``: independent token-noise replicates (the mean of the "
        "Itô energy balance; the Python loop).",
        check=number(1, integer=True)))
    seed: int = field(default=0, metadata=opt(
        "Seed of the weight noise (paths use ``SeedSequence(seed).spawn(n_paths)``).",
        toml=False, reason="the scenario's top-level ``seed``"))
    entropy: bool = field(default=False, metadata=opt(
        "Record attention entropies and the entropy-production identity (``O(H n²)``).",
        check=boolean))
    head_rates: bool = field(default=True, metadata=opt(
        "Record per-head ``dE_h/dt`` with own / cross split and radial shadows.",
        check=boolean))
    clusters: bool = field(default=True, metadata=opt(
        "Record the number of clusters at ``cluster_cos``.", check=boolean))
    cluster_cos: float = field(default=0.99, metadata=opt(
        "Inner-product threshold linking two tokens in the cluster count.",
        check=number(-1, 1, strict_lo=True, strict_hi=True)))
    save_trajectory: bool = field(default=False, metadata=opt(
        "Keep tokens (and weights) at every recorded time.", toml=False,
        reason="the command line's ``--save-trajectory`` / ``--gif``"))
    trajectory_tokens: int = field(default=0, metadata=opt(
        "With ``save_trajectory``: keep only this many tokens per recorded time, the fixed "
        "subset of global indices ``unique(round(linspace(0, n − 1, k)))`` (the same tokens "
        "at every time, in every path; ``0``: all ``n``). Memory ``O(k K d)`` instead of "
        "``O(n K d)`` for ``K`` recorded times.", check=number(0, integer=True)))
    progress: bool | None = field(default=None, metadata=opt(
        "Progress bar (``None``: only when stderr is a TTY).", toml=False,
        reason="the command line's ``--progress``"))
    kernel_backend: str = field(default="auto", metadata=opt(
        "Back-end of the attention sums (``auto``: fused direct sums, fast summation on S² "
        "where it pays off); the choice and its error estimate land in ``summary.json``.",
        check=choice(*BACKENDS)))
    kernel_tol: float = field(default=1e-10, metadata=opt(
        "Relative tolerance of the fast summation.", check=number(0, strict_lo=True)))
    engine: Literal["auto", "compiled", "python"] = field(default="auto", metadata=opt(
        "``compiled``: the whole time loop compiled "
        "(:func:`wflow.particles.compiled.simulate_compiled`, equal to the Python loop to "
        "round-off; an error where it does not apply); ``python``: the step-by-step loop of "
        ":func:`wflow.particles.iterate`; ``auto``: compiled wherever it applies (every "
        "schedule but callables, direct sums), else Python with a warning for the schedule; "
        "the engine used is in ``ParticleResult.extra[\"engine\"]``.",
        check=choice(*ENGINES)))
    diffusion: float = diffusion_field(
        "Token diffusion ``D ≥ 0`` (THEORY §8): each token also moves by a Brownian motion on "
        "the sphere with generator ``D Δ_S`` (units: radius² per unit time), integrated by a "
        "stochastic integrator (``em``, weak order 1; ``strang``, weak order 2) with noise "
        "streams keyed by (seed, token block, step) (:mod:`wflow.particles.noise`). Not the "
        "weights' OU noise. ``0``: the noiseless model, bit for bit.")
    rtol: float | None
    atol: float | None
    adaptive: bool
    rtol, atol, adaptive = error_control_fields(
        "Requested relative accuracy of the final tokens (:class:`wflow.infra.accuracy."
        "Tolerance`; the scaled RMS norm of the error of ``x(T)``, per component "
        "``atol + rtol·|x|``). With ``adaptive``: the step controller's target (default "
        "``1e-3``); with fixed steps: the run is judged by a step-doubling estimate of its "
        "global error and ends ``inaccurate``, naming a ``dt`` that meets it, when it misses. "
        "With token diffusion ``D > 0`` (fixed steps only) an ``rtol`` the user sets judges "
        "the run by the weak error of its token moments ``m_1``, ``m_2`` at ``T`` (the "
        "default steps aside there: the estimate's noise floor ``∝ 1/√(n · n_paths)`` "
        "stays far above ``1e-3`` at ordinary sizes) "
        "(:mod:`wflow.particles.weak_error`: an independent run at ``dt/2``, Richardson at "
        "the integrator's weak order, 3 standard errors): ``success``, ``inaccurate`` naming "
        "a ``dt``, or ``inconclusive`` naming a token count. ``atol`` alone asks for it too.",
        atol="radius units; also when ``adaptive`` is set", adaptive=False, adaptive_what=(
        "Adaptive steps: a PI controller (error per unit step over ``[0, T]``) on the "
        "step-doubling estimate of the deterministic integrators (``euler``, ``rk4``), "
        "``dt`` the first and largest step; accepted / rejected counts and the steps in "
        "``ParticleResult.extra[\"adaptive\"]``. Not with token diffusion ``D > 0`` nor "
        "noisy weights. ``False``: fixed steps ``dt``."), rtol_default=DEFAULT_RTOL)
    ito_balance: bool | None = field(default=None, kw_only=True, metadata=opt(
        "With token diffusion ``D > 0``: record and judge the Itô energy balance of the "
        "tokens (:mod:`wflow.particles.free_energy`: ``E(T) − E(0) = ∫(power + ∂_tE) dt + "
        "D∫Σ_iΔ_{S,i}E dt + M_T`` in the mean over paths; ``d`` more kernel sums per state). "
        "``None``: judged wherever it applies (an exponential kind, deterministic weights, "
        "no mask): ``engine = 'auto'`` then runs the Python loop, which records it, and "
        "``engine = 'compiled'`` leaves it unjudged; ``True``: always (the Python loop); "
        "``False``: never (the compiled loop where it applies). A noisy run with no check "
        "judged ends ``completed``, not ``success``. No effect with ``D = 0``.",
        check=boolean))
    dtype: Literal["float64", "float32"] = field(default="float64", kw_only=True, metadata=opt(
        "Precision of the attention sums: ``float32`` forms every evaluation's scores and "
        "kernel values in float32 (the sums, energies and slope terms in float64; "
        ":func:`wflow.energy.evaluate`), within the kernel's a-priori estimate "
        "(``extra[\"kernel\"][\"max_err_est\"]``); the Python loop of one process only "
        "(refused with ``engine = 'compiled'``, a causal mask, or MPI ranks; ``engine = "
        "'auto'`` runs the Python loop). ``float64``: today's run, bit for bit.",
        check=choice("float64", "float32")))

    def __post_init__(self) -> None:
        validate(self)
        if self.rtol is not None or self.atol is not None or self.adaptive:
            self.tolerance()  # refuse a tolerance no computation can meet, naming the key

    def tolerance(self) -> Tolerance:
        """The requested :class:`~wflow.infra.accuracy.Tolerance` (defaults ``1e-3``/``1e-6``)."""
        return Tolerance.given(self.SECTION, self.rtol, self.atol)


#: The ``[particles]`` table: ``key -> (default, checker)`` (derived from :class:`ParticleOptions`).
PARTICLES_SCHEMA: Spec = schema_of(ParticleOptions)
#: Keys of the ``[particles]`` table.
PARTICLES_SPEC: tuple[str, ...] = keys_of(ParticleOptions)
