"""The particle solver's cost model: memory, steps and time of ``wflow particles``.

Calibrated against measured peak RSS and CPU time (``tests/test_estimates.py`` pins it on
the recorded measurements, ``docs/guide/cli.md`` "Cost estimates"). The work of a step is
``stages()`` evaluations of the field, read from the integrator object
(:class:`~wflow.particles.integrators.ParticleIntegrator`), never from its name.

Token diffusion ``D > 0`` (THEORY §8) adds the noise of a stochastic integrator: its
``draws`` keyed draws per token and step, Gaussian tangent increments for projected
Euler–Maruyama (:data:`NORMAL_DRAW_SECONDS`), exact heat-kernel increments otherwise
(:data:`HEAT_DRAW_SECONDS`). Before computing, :func:`check_diffusive_step` refuses a
Euler–Maruyama step whose diffusive Courant number ``ν = D Δt (d − 1)`` exceeds
:data:`EM_MAX_COURANT` (:class:`~wflow.infra.estimate.EstimateError`, naming
``particles.dt`` and ``attention.diffusion`` with a step that meets it).
"""

from __future__ import annotations

from dataclasses import replace

from ..attention.kinds import get_kind
from ..infra.estimate import Estimate, EstimateError, step_count
from ..infra.parallel import split_range
from ..kernels.memory import causal_coefficients, causal_kept_bytes, causal_wave_bytes
from .adaptive import default_aside
from .free_energy import has_laplacian
from .integrators import INTEGRATORS, EulerMaruyama, ParticleIntegrator
from .options import ParticleOptions

__all__ = ["PAIR_SECONDS", "FASTSUM_SECONDS", "TOKEN_BYTES_PER_DOUBLE", "STEP_SECONDS",
           "RECORD_SECONDS", "CLUSTER_SECONDS", "BASELINE_BYTES", "STARTUP_SECONDS",
           "estimate_particles",
           "fastsum_eligible", "integrator_of", "estimate_run", "NORMAL_DRAW_SECONDS",
           "HEAT_DRAW_SECONDS", "EM_MAX_COURANT", "noise_seconds", "check_diffusive_step",
           "WHOLE_SYSTEM_COPIES", "CAUSAL_DOUBLES_PER_TOKEN", "rank_memory_parts"]

#: Seconds per kernel pair, head and stage of the compiled particle loop (fused sums, pairs
#: once for symmetric heads, two threads; 5.2e-10 CPU seconds measured at 2 048 tokens).
PAIR_SECONDS = 5e-10

#: CPU seconds per token, head and stage of the spherical-harmonic fast summation (one
#: evaluation of the field): 15.5 s per RK4 step at n = 10⁶, H = 4 and 1.39 s at n = 10⁵
#: (9.7e-7 and 8.7e-7; ``bench/results/particles_mpi.json``, one rank).
FASTSUM_SECONDS = 1.0e-6

#: Working doubles per token coordinate and per (1 + H) — positions, the RK4 stages, the
#: per-head outputs, normalisers and scores: peak RSS above the libraries 1.07 kB per token
#: at n = 10⁶ and 1.26 kB at n = 10⁵ (d = 3, H = 4), 18 kB at d = 64, n = 10⁴
#: (``bench/results/particles_mpi.json``); ``8 · 8 max(d, 3)(1 + H)`` gives 0.96, 0.96 and
#: 20 kB.
TOKEN_BYTES_PER_DOUBLE = 8.0

#: Whole-system copies of the token positions (``8 n d`` bytes each) on every rank of a run
#: split over ``P > 1`` ranks (:mod:`wflow.particles.split`): the initial tokens (every rank
#: builds them) and, at the end, the ranks' final blocks gathered (the list of blocks and
#: their concatenation) into the result.
WHOLE_SYSTEM_COPIES = 3

#: Doubles per token of the causal fast sum's driver (``_fast_causal``, private to
#: :mod:`wflow.kernels`) besides its outputs ``Z, Y`` (``4 H``): the unit
#: tokens, charges and their bound (9), one head's images, directions, radii and scaled
#: offsets (17), its sums and their estimates (6); and over ranks the contiguous copies of
#: the rank's own tokens for the coefficients-only pass (15).
CAUSAL_DOUBLES_PER_TOKEN = (32, 15)

#: Fixed cost of one time step (s) and of one recorded row of diagnostics (s) — measured
#: on ``wflow particles`` with 30 tokens (≈ 2 ms per recorded step).
STEP_SECONDS, RECORD_SECONDS = 2e-5, 2e-3

#: CPU seconds per token of one cluster count (``count_clusters`` at a record, the
#: ``clusters`` option): ``bench/bench_clusters.py`` measured 2.3e-6 … 6.7e-6 s for
#: uniform and clustered tokens on S², n = 500 … 10⁵, one thread.
CLUSTER_SECONDS = 4e-6

#: Resident size (bytes) of the interpreter and the libraries ``wflow particles`` loads
#: (NumPy, numba and the compiled loops), measured on the smallest runs of the grid.
BASELINE_BYTES = 220 * 2**20

#: Start-up seconds of ``wflow particles`` (interpreter, imports, loading the compiled
#: loops): the CPU seconds of the smallest runs of the calibration grid.
STARTUP_SECONDS = 1.7

#: CPU seconds of one keyed Gaussian draw per token, ``a + b d`` (the Philox normals, the
#: tangent projection and the normalisation of projected Euler–Maruyama): 1.1e-7 s at
#: d = 3 and 2.4e-7 s at d = 8 (10⁵ tokens, one thread).
NORMAL_DRAW_SECONDS = (4e-8, 2.5e-8)

#: CPU seconds of one exact heat-kernel increment per token, ``a + b d`` (the angle by
#: rejection from the envelope, the tangent direction, the rotation): 5.1e-7 s at d = 3
#: and 8.5e-7 s at d = 8 (10⁵ tokens, one thread). Since the rejected proposals' series
#: is compiled the draws measure 3.2e-7 and 5.6e-7 s (the same 10⁵ tokens, step
#: ``s = 5e-4``): the constants, kept, are 1.6× above them, within the estimates' 2×.
HEAT_DRAW_SECONDS = (3e-7, 7e-8)

#: Largest diffusive Courant number ``ν = D Δt (d − 1)`` of a projected Euler–Maruyama
#: step. ``ν`` is the exact decay exponent of the degree-1 harmonic over one step
#: (``E[x_Δt · x_0] = e^{−ν}``); the Gaussian tangent increment has mean square length
#: ``2ν``, so at ``ν = 1/2`` its root-mean-square length is one radian and the projected
#: step's decay factor ``E[(1 + 2DΔt χ²_{d−1})^{-1/2}]`` is 0.76 against the exact 0.61
#: (d = 3): the step no longer approximates a Brownian increment on the sphere. The
#: Strang scheme's increments are exact heat-kernel draws and have no such bound.
EM_MAX_COURANT = 0.5


def integrator_of(integrator: ParticleIntegrator | str) -> ParticleIntegrator:
    """The integrator object: ``integrator`` itself, or the one registered under that name."""
    if isinstance(integrator, ParticleIntegrator):
        return integrator
    return INTEGRATORS.resolve(integrator, "particles.integrator")


def fastsum_eligible(kind: str, d: int, backend: str) -> bool:
    """Whether the kernel plan may choose the fast summation (the particle estimate's cost).

    ``d = 3``, a kind whose kernel has compiled code and the fast-summation expansion, and
    a back-end (``kernel_backend``) that may choose it (``"auto"`` or ``"fastsum"``).
    """
    spec = get_kind(kind)
    return d == 3 and spec.compiled and spec.fastsum and backend in ("auto", "fastsum")


def noise_seconds(integrator: ParticleIntegrator | str, *, n: int, d: int) -> float:
    """CPU seconds of one step's token noise: ``draws · n · (a + b d)``.

    ``(a, b)``: :data:`NORMAL_DRAW_SECONDS` for projected Euler–Maruyama (Gaussian tangent
    increments), :data:`HEAT_DRAW_SECONDS` for every other stochastic integrator (exact
    heat-kernel increments, the costlier draw); ``0`` for a deterministic integrator.
    """
    integ = integrator_of(integrator)
    if not getattr(integ, "stochastic", False):
        return 0.0
    a, b = NORMAL_DRAW_SECONDS if isinstance(integ, EulerMaruyama) else HEAT_DRAW_SECONDS
    return float(getattr(integ, "draws", 1)) * float(n) * (a + b * int(d))


def check_diffusive_step(*, diffusion: float, dt: float, d: int,
                         integrator: ParticleIntegrator | str) -> float:
    r"""Refuse a projected Euler–Maruyama step beyond the diffusive Courant bound.

    .. math:: \nu = D\,\Delta t\,(d - 1) \le \nu_{\max} = 0.5
              \quad(:data:`EM_MAX_COURANT`).

    Parameters
    ----------
    diffusion : float
        Token diffusion ``D >= 0`` (radius² per unit time).
    dt : float
        The step (depth units).
    d : int
        Ambient dimension (tokens on ``S^{d-1}``).
    integrator : ParticleIntegrator or str
        Only :class:`~wflow.particles.integrators.EulerMaruyama` has the bound.

    Returns
    -------
    float
        ``ν`` (``0`` for ``D = 0``).

    Raises
    ------
    EstimateError
        ``ν > 0.5`` for Euler–Maruyama: names ``particles.dt`` and ``attention.diffusion``,
        the largest step that meets the bound and the ``strang`` integrator.
    """
    if not diffusion > 0:
        return 0.0
    nu = float(diffusion) * float(dt) * (int(d) - 1)
    if isinstance(integrator_of(integrator), EulerMaruyama) and nu > EM_MAX_COURANT:
        dt_max = EM_MAX_COURANT / (float(diffusion) * (int(d) - 1))
        raise EstimateError(
            f"particles.dt: a projected Euler-Maruyama step with attention.diffusion "
            f"D = {diffusion:g} in d = {d} has the diffusive Courant number "
            f"D*dt*(d-1) = {nu:.3g} > {EM_MAX_COURANT:g} (the noise moves a token by more "
            f"than a radian per step); use dt <= {dt_max:.3g}, or integrator = \"strang\" "
            "(exact heat-kernel increments), or a smaller D")
    return nu


def rank_memory_parts(*, n: int, d: int, H: int, ranks: int, causal: bool,
                      degree: int | None) -> dict[str, float]:
    """Bytes a rank holds beyond its tokens' working arrays, by part (may be empty).

    * ``whole system`` (``ranks > 1``): :data:`WHOLE_SYSTEM_COPIES` ``· 8 n d``, the
      initial tokens and the gathered final ones on every rank.
    * ``causal sums`` (``causal`` with a ``degree``): the driver's arrays,
      ``8 (4 H + a + b [P > 1]) ⌈n/P⌉`` bytes, ``(a, b)`` =
      :data:`CAUSAL_DOUBLES_PER_TOKEN`.
    * ``causal waves`` (``causal`` with a ``degree``): one head's coefficient buffers in
      flight, :func:`~wflow.kernels.memory.causal_wave_bytes` (≈ 32 MiB).
    * ``kept coefficients`` (``causal``, ``ranks > 1``): the largest rank's kept block
      coefficients by the kernel's rule,
      :func:`~wflow.kernels.memory.causal_kept_bytes` with ``K = (L+1)(L+2)/2`` of
      ``degree`` over the blocks :func:`~wflow.infra.parallel.split_range` gives each rank.
    """
    parts: dict[str, float] = {}
    P = max(1, int(ranks))
    if P > 1:
        parts["whole system"] = WHOLE_SYSTEM_COPIES * 8.0 * n * d
    if causal and degree is not None:
        a, b = CAUSAL_DOUBLES_PER_TOKEN
        per_token = 4 * int(H) + a + (b if P > 1 else 0)
        parts["causal sums"] = 8.0 * per_token * float(-(-int(n) // P))
        K = causal_coefficients(degree)
        parts["causal waves"] = float(causal_wave_bytes(K))
        kept = max(causal_kept_bytes(stop - start, P, K, offset=start)
                   for start, stop in (split_range(int(n), P, r) for r in range(P)))
        if kept:
            parts["kept coefficients"] = float(kept)
    return parts


def estimate_particles(*, n: int, d: int = 3, H: int = 1, T: float, dt: float,
                       paths: int = 1, record_every: int = 1,
                       integrator: ParticleIntegrator | str = "rk4",
                       save_trajectory: bool = False, fastsum: bool = False,
                       what: str = "particles", diffusion: float = 0.0, ranks: int = 1,
                       mask: str | None = None, degree: int | None = None,
                       clusters: bool = False, ito: str = "no") -> Estimate:
    """Estimate of ``wflow particles``: ``n`` tokens in ``d``, ``H`` heads, ``paths`` paths.

    Steps ``S = ceil(T/dt)``, rows ``R = S/record_every + 1`` per path; memory: the
    libraries, the time grid ``8 S``, the per-step integrands ``160 S`` and the recorded
    rows ``8 R (24 + 8 H)`` per path, the working arrays of the tokens
    ``TOKEN_BYTES_PER_DOUBLE · 8 max(d, 3) (1 + H) n`` per path (positions, stages, the
    per-head outputs and scores), the trajectory ``8 R n d`` per path (if saved); time:
    ``STARTUP + P (S (STEP + stages · c) + R RECORD)`` with ``stages`` the integrator's
    evaluations of the field per step (``integrator.stages()``: 4 for RK4, 1 for Euler;
    an object or a registered name) and ``c`` the cost of one evaluation: the direct
    sums, ``n² H PAIR_SECONDS max(d, 3)/3``, or — where the spherical-harmonic fast
    summation applies (``fastsum``: ``d = 3``, an exponential kernel with compiled code, a
    back-end that may choose it) — the cheaper of that and ``n H FASTSUM_SECONDS``, as
    the kernel plan chooses the cheaper one.

    Memory is per rank of a run over ``ranks = P`` MPI ranks (``mpirun -n P``; ``1``: one
    process): one path's tokens are split (the working arrays of the largest block,
    ``⌈n/P⌉`` tokens), several paths run whole on ranks ``p mod P`` (``⌈paths/P⌉`` paths'
    working arrays); every rank also holds the recorded rows of every path and the whole
    system's positions (:func:`rank_memory_parts`). A causal ``mask`` (``"causal"``,
    ``"causal_strict"``; ``None`` or ``"none"``: none) summed fast adds its driver's
    arrays, its coefficient buffers and, over ranks, the kept block coefficients at the
    expansion's ``degree`` (:func:`~wflow.kernels.memory.fast_degree`; ``None``: not
    counted). The time is the whole run's CPU seconds (every rank's work together), for
    any ``P``.

    With ``clusters`` each recorded row adds the cluster count, ``CLUSTER_SECONDS · n``
    (:data:`CLUSTER_SECONDS`; ``False``, the default here: ``RECORD_SECONDS`` alone).

    With token diffusion ``diffusion = D > 0`` each step adds the integrator's noise
    (:func:`noise_seconds`: ``draws`` keyed draws per token) and the step is checked
    first (:func:`check_diffusive_step`: an :class:`~wflow.infra.estimate.EstimateError`
    for a Euler–Maruyama step beyond the diffusive Courant bound). ``D = 0``: the
    noiseless estimate, bit for bit. The Itô energy balance's terms
    (:mod:`wflow.particles.free_energy`: ``d`` more kernel sums per step and the control
    variate's redrawn noise; in memory its second moments, ``8 H n d²`` bytes a path) are
    counted with ``ito = "yes"``, and with ``ito =
    "if-python"`` only where the fast summation is chosen (the Python loop, which
    records them); ``"no"``: not counted.
    """
    if ito not in ("no", "yes", "if-python"):
        raise ValueError(f"ito: expected 'no', 'yes' or 'if-python', got {ito!r}")
    noisy = diffusion > 0
    if noisy:
        check_diffusive_step(diffusion=diffusion, dt=dt, d=d, integrator=integrator)
    S = step_count(T, dt)
    R = S / max(1, record_every) + 1
    stages = integrator_of(integrator).stages()
    width = max(int(d), 3)
    direct = float(n) * n * H * PAIR_SECONDS * width / 3.0
    fast = float(n) * H * FASTSUM_SECONDS
    per_eval = min(direct, fast) if fastsum and d == 3 else direct
    P = max(1, int(ranks))
    split_paths = paths > 1 and P > 1  # whole paths on ranks p mod P, else tokens split
    local_n = float(n) if split_paths or P == 1 else float(-(-int(n) // P))
    local_paths = -(-int(paths) // P) if split_paths else paths
    causal = mask not in (None, "none") and fastsum and d == 3
    parts = {"libraries": float(BASELINE_BYTES)}
    parts.update({"time grid": 8.0 * S, "per-step integrands": 160.0 * S * paths,
                  "recorded rows": 8.0 * R * (24 + 8 * H) * paths,
                  "tokens": TOKEN_BYTES_PER_DOUBLE * 8.0 * local_n * width * (1 + H)
                  * local_paths})
    parts.update(rank_memory_parts(n=int(n), d=int(d), H=int(H),
                                   ranks=1 if split_paths else P,
                                   causal=causal, degree=degree))
    if save_trajectory:
        parts["trajectory"] = 8.0 * R * n * d * paths
    step = STEP_SECONDS + stages * per_eval
    if noisy:
        step += noise_seconds(integrator, n=n, d=d)
        python = fastsum and d == 3 and fast < direct
        if ito == "yes" or (ito == "if-python" and python):
            step += int(d) * per_eval + noise_seconds(integrator, n=n, d=d)
            # the Laplacian's second moments Σ_j m_j k y_j y_jᵀ: (H, n, d, d) per path
            parts["Itô second moments"] = 8.0 * H * local_n * int(d) ** 2 * local_paths
    record = RECORD_SECONDS + (CLUSTER_SECONDS * n if clusters else 0.0)
    secs = STARTUP_SECONDS + paths * (S * step + R * record)
    return Estimate(what, sum(parts.values()), S * paths, secs, parts)


def estimate_run(options: ParticleOptions, *, n: int, d: int, H: int,
                 kind: str, ranks: int = 1, mask: str | None = None,
                 degree: int | None = None, stochastic: bool | None = None) -> Estimate:
    """:func:`estimate_particles` of a run of ``options`` (the spec's estimate).

    ``stochastic``: whether the weights' schedule is noisy. Deterministic weights without
    token diffusion run one path whatever ``n_paths`` says (:func:`~wflow.particles.simulate`),
    so the estimate counts one; ``None`` (unknown, the default) counts ``n_paths`` and the
    default ``rtol``'s rerun (upper bounds). Where the default ``rtol`` steps aside
    (:func:`~wflow.particles.adaptive.default_aside`) the run is costed as with ``None``.

    ``n`` tokens on ``S^{d-1}``, ``H`` heads of attention ``kind`` (whether the fast
    summation may be chosen: :func:`fastsum_eligible`); memory per rank of ``ranks``
    (the communicator's size), under the attention ``mask`` with the fast summation's
    ``degree`` (:func:`~wflow.kernels.memory.fast_degree`). Accuracy asked for
    (:mod:`wflow.particles.adaptive`): with ``adaptive`` each step costs about four
    (three for step doubling, one in the recorded run) and the steps are counted at the
    largest step ``dt`` — a lower bound, as the controller may take smaller ones (noted);
    with ``rtol`` (or ``atol``) on fixed steps the run is repeated at ``dt/2``: three times
    the steps (token diffusion ``D > 0``: an independent run at ``dt/2`` for the weak-error
    estimate, :mod:`wflow.particles.weak_error`, counted the same).
    """
    if stochastic is False and not getattr(options, "diffusion", 0.0) > 0:
        options = replace(options, n_paths=1)  # simulate runs one path
    est = _estimate_fixed(options, n=n, d=d, H=H, kind=kind, ranks=ranks, mask=mask,
                          degree=degree,
                          ito=_ito_cost(options, kind, mask, stochastic is not False))
    if getattr(options, "adaptive", False):
        extra = 3.0 * (est.seconds - STARTUP_SECONDS)
        return replace(est, steps=4 * est.steps, seconds=est.seconds + extra,
                       notes=est.notes + ("adaptive steps: counted at the largest step dt "
                                          "(a lower bound), 4 integrator steps each",))
    if default_aside(options, bool(stochastic)) is not None:  # as with rtol = None
        options = replace(options, rtol=None)
    if getattr(options, "rtol", None) is not None or getattr(options, "atol", None) is not None:
        extra = 2.0 * (est.seconds - STARTUP_SECONDS)
        why = ("an independent run at dt/2 (weak-error estimate)"
               if getattr(options, "diffusion", 0.0) > 0 else "the run repeated at dt/2")
        return replace(est, steps=3 * est.steps, seconds=est.seconds + extra,
                       notes=est.notes + (f"rtol on fixed steps: {why}",))
    return est


def _ito_cost(options: ParticleOptions, kind: str, mask: str | None, stochastic: bool) -> str:
    """Whether the run records the Itô balance's terms (``ito`` of :func:`estimate_particles`).

    Token diffusion with a closed-form Laplacian and ``ito_balance`` not ``False``: the
    Python loop records them (``engine = "compiled"`` does not). ``engine = "auto"``
    takes the Python loop to judge them with deterministic weights, or under a mask; with
    noisy weights only where it takes it anyway (the fast summation).
    """
    if not (getattr(options, "diffusion", 0.0) > 0 and has_laplacian(kind)
            and getattr(options, "ito_balance", None) is not False):
        return "no"
    engine = getattr(options, "engine", "auto")
    if engine == "compiled":
        return "no"
    if (engine == "python" or options.ito_balance is True or not stochastic
            or mask not in (None, "none")):
        return "yes"
    return "if-python"


def _estimate_fixed(options: ParticleOptions, *, n: int, d: int, H: int,
                    kind: str, ranks: int = 1, mask: str | None = None,
                    degree: int | None = None, ito: str = "no") -> Estimate:
    return estimate_particles(
        n=int(n), d=int(d), H=int(H), T=options.T, dt=options.dt, paths=options.n_paths,
        record_every=options.record_every, integrator=options.integrator,
        save_trajectory=options.save_trajectory,
        fastsum=fastsum_eligible(kind, int(d), options.kernel_backend),
        diffusion=float(getattr(options, "diffusion", 0.0)), ranks=int(ranks), mask=mask,
        degree=degree, clusters=bool(getattr(options, "clusters", False)), ito=ito)
