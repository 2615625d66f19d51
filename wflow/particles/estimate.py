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
from .integrators import INTEGRATORS, EulerMaruyama, ParticleIntegrator
from .options import ParticleOptions

__all__ = ["PAIR_SECONDS", "FASTSUM_SECONDS", "TOKEN_BYTES_PER_DOUBLE", "STEP_SECONDS",
           "RECORD_SECONDS", "BASELINE_BYTES", "STARTUP_SECONDS", "estimate_particles",
           "fastsum_eligible", "integrator_of", "estimate_run", "NORMAL_DRAW_SECONDS",
           "HEAT_DRAW_SECONDS", "EM_MAX_COURANT", "noise_seconds", "check_diffusive_step"]

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

#: Fixed cost of one time step (s) and of one recorded row of diagnostics (s) — measured
#: on ``wflow particles`` with 30 tokens (≈ 2 ms per recorded step).
STEP_SECONDS, RECORD_SECONDS = 2e-5, 2e-3

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
#: and 8.5e-7 s at d = 8 (10⁵ tokens, one thread).
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


def estimate_particles(*, n: int, d: int = 3, H: int = 1, T: float, dt: float,
                       paths: int = 1, record_every: int = 1,
                       integrator: ParticleIntegrator | str = "rk4",
                       save_trajectory: bool = False, fastsum: bool = False,
                       what: str = "particles", diffusion: float = 0.0) -> Estimate:
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

    With token diffusion ``diffusion = D > 0`` each step adds the integrator's noise
    (:func:`noise_seconds`: ``draws`` keyed draws per token) and the step is checked
    first (:func:`check_diffusive_step`: an :class:`~wflow.infra.estimate.EstimateError`
    for a Euler–Maruyama step beyond the diffusive Courant bound). ``D = 0``: the
    noiseless estimate, bit for bit.
    """
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
    parts = {"libraries": float(BASELINE_BYTES)}
    parts.update({"time grid": 8.0 * S, "per-step integrands": 160.0 * S * paths,
                  "recorded rows": 8.0 * R * (24 + 8 * H) * paths,
                  "tokens": TOKEN_BYTES_PER_DOUBLE * 8.0 * n * width * (1 + H) * paths})
    if save_trajectory:
        parts["trajectory"] = 8.0 * R * n * d * paths
    step = STEP_SECONDS + stages * per_eval
    if noisy:
        step += noise_seconds(integrator, n=n, d=d)
    secs = STARTUP_SECONDS + paths * (S * step + R * RECORD_SECONDS)
    return Estimate(what, sum(parts.values()), S * paths, secs, parts)


def estimate_run(options: ParticleOptions, *, n: int, d: int, H: int,
                 kind: str) -> Estimate:
    """:func:`estimate_particles` of a run of ``options`` (the spec's estimate).

    ``n`` tokens on ``S^{d-1}``, ``H`` heads of attention ``kind`` (whether the fast
    summation may be chosen: :func:`fastsum_eligible`). Accuracy asked for
    (:mod:`wflow.particles.adaptive`): with ``adaptive`` each step costs about four
    (three for step doubling, one in the recorded run) and the steps are counted at the
    largest step ``dt`` — a lower bound, as the controller may take smaller ones (noted);
    with ``rtol`` (or ``atol``) on fixed steps the run is repeated at ``dt/2``: three times
    the steps (token diffusion ``D > 0``: an independent run at ``dt/2`` for the weak-error
    estimate, :mod:`wflow.particles.weak_error`, counted the same).
    """
    est = _estimate_fixed(options, n=n, d=d, H=H, kind=kind)
    if getattr(options, "adaptive", False):
        extra = 3.0 * (est.seconds - STARTUP_SECONDS)
        return replace(est, steps=4 * est.steps, seconds=est.seconds + extra,
                       notes=est.notes + ("adaptive steps: counted at the largest step dt "
                                          "(a lower bound), 4 integrator steps each",))
    if getattr(options, "rtol", None) is not None or getattr(options, "atol", None) is not None:
        extra = 2.0 * (est.seconds - STARTUP_SECONDS)
        why = ("an independent run at dt/2 (weak-error estimate)"
               if getattr(options, "diffusion", 0.0) > 0 else "the run repeated at dt/2")
        return replace(est, steps=3 * est.steps, seconds=est.seconds + extra,
                       notes=est.notes + (f"rtol on fixed steps: {why}",))
    return est


def _estimate_fixed(options: ParticleOptions, *, n: int, d: int, H: int,
                    kind: str) -> Estimate:
    return estimate_particles(
        n=int(n), d=int(d), H=int(H), T=options.T, dt=options.dt, paths=options.n_paths,
        record_every=options.record_every, integrator=options.integrator,
        save_trajectory=options.save_trajectory,
        fastsum=fastsum_eligible(kind, int(d), options.kernel_backend),
        diffusion=float(getattr(options, "diffusion", 0.0)))
