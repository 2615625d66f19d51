r"""Noisy particles at their stationary state against the zonal branch (``d = 3``).

The mean-field limit of ``n`` tokens ``dx_i = P_{x_i}(1/n Σ_j e^{β x_i·x_j} x_j) dt +
√(2D) P_{x_i} ∘ dW_i`` (one USA head ``A = V = I``, token diffusion ``D = 1/(2K)``,
:func:`wflow.attention.diffusion.diffusion_of`) is the noisy transformer PDE, whose
stable stationary states above the transition are the clustered zonal states of
:mod:`wflow.phase.zonal`. :func:`particle_order_parameter` runs the particle system
(:func:`wflow.particles.simulate`, the weak-order-2 Strang integrator, optionally split
over MPI ranks) from a von Mises–Fisher law with the branch's order parameter, lets it
relax for ``burn`` time units and then records the order parameter
``m_n(t) = |1/n Σ_i x_i(t)|`` every ``every`` time units until ``T``. Its time average
``m̄`` estimates the branch's ``m(K)``:

* the standard error is that of batch means (``batches`` consecutive blocks of the
  recorded series, so the time correlation is inside a block);
* the check (:meth:`ParticlePhaseRun.passed`): ``|m̄ − m(K)| / se`` against the
  two-sided ``t(batches − 1)`` quantile at level :data:`ALPHA`;
* the finite-``n`` bias of ``E m_n`` is ``O(1/n)`` (``(1 − m² − …)/(2 n m)`` for
  independent tokens), below the standard error for ``n ≥ 10⁴``;
* the time step's bias of the stationary law is ``O(dt²)`` (weak order 2); the check
  :attr:`ParticlePhaseRun.z` does not model it (:data:`DT_BIAS_NOTE`): at the small
  configuration :data:`CHECK_CONFIG` the size over 100 seeds (1 false fail) bounds its
  effect there, while at ``β = 3`` it is many standard errors at ``dt = 0.05`` and
  :func:`extrapolate_dt` removes it from a pair of runs at ``dt`` and ``dt/2``, and
  :func:`correct_dt` from one run at ``dt`` with that bias measured on pairs at a
  smaller ``n``.

The run records its segments in order: each segment is one :func:`simulate` call of
``every`` time units from the previous segment's tokens, with its own noise seed
``SeedSequence([seed, k])`` (``k`` the segment), so a run is reproducible and ``mpirun
-n P`` equals the serial run to round-off (the noise streams are keyed by token block
and step, not by rank).
"""

from __future__ import annotations

import logging
import math
import time
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np
from scipy.optimize import brentq

from ..attention.diffusion import diffusion_of
from ..geometry.sphere import sample_vmf
from .thresholds import k_sharp

logger = logging.getLogger(__name__)

__all__ = ["ParticlePhaseRun", "particle_order_parameter", "stable_order_parameter",
           "vmf_kappa_of", "batch_means_se", "CHECK_CONFIG", "ParticlePoint",
           "check_particle_point", "load_particle_points", "extrapolate_dt"]

#: Level of :meth:`ParticlePhaseRun.passed` (two-sided, on ``t(batches − 1)``).
ALPHA = 0.003

#: The small configuration whose size and power ``bench/phase_particles.py size`` measures
#: (β = 1, a continuous transition, K = 2.2 ≈ 1.62 K_#: ``m = 0.837``; ``n = 1000``).
#: The order parameter's integrated autocorrelation time there is ≈ 1.9 time units
#: (measured over ``T = 100``), so each of the 6 batches spans 5 units; with batches of
#: 0.5 units the batch means understated the error 2.5-fold (``|z|`` up to 9 over 41
#: seeds). Nearer ``K_#`` the mode is softer and the time longer.
CHECK_CONFIG: dict[str, Any] = {"beta": 1.0, "K": 2.2, "n": 1000, "T": 32.0, "burn": 2.0,
                                "every": 1.0, "batches": 6}

#: How the time step's bias stands (``bench/phase_particles.py points``, ``n = 10⁵`` on 2
#: ranks, section ``points`` of ``bench/results/phase_particles.json``).
DT_BIAS_NOTE = ("measured at n = 1e5: at beta = 3, K = 0.9 the stationary order parameter "
                "is biased by -6.70e-3 at dt = 0.05 and -1.65e-3 at dt = 0.025 (ratio 4.05: "
                "second order, 150 and 36 standard errors); Richardson's limit of the two "
                "(extrapolate_dt) is 0.5 standard errors from the branch. At beta = 1, "
                "K = 2.2 the runs (two seeds) lie within 3.1 standard errors of the branch, on "
                "both sides, with no dt^2 pattern above that scatter")


def stable_order_parameter(beta: float, K: float, d: int = 3) -> float:
    """Order parameter ``m(K)`` of the stable clustered zonal state at coupling ``K``.

    The upper branch of :func:`wflow.phase.phase_point` (from the fold ``m_f`` when the
    transition is discontinuous, from ``m → 0`` when it is continuous), solved for ``K``
    by Brent's method on ``K(m) − K``; ``0`` (the uniform state) when ``K`` lies below the
    branch's lowest coupling on its stable part (``K ≤ K_#`` for a continuous transition,
    ``K < K_f`` for a discontinuous one, where the clustered state is metastable up to
    ``K_c``).

    Parameters
    ----------
    beta : float
        Inverse temperature ``β > 0`` of the USA head ``A = V = I``.
    K : float
        Published coupling ``K = 1/(2D) > 0``.
    d : int
        Ambient dimension.

    Returns
    -------
    float
        ``m ∈ [0, 1)``, dimensionless.
    """
    state = stable_state(beta, K, d)
    return 0.0 if state is None else float(state.m)


def stable_state(beta: float, K: float, d: int = 3):
    """The stable clustered zonal state at ``K`` (:func:`stable_order_parameter`), or ``None``.

    Returns
    -------
    ZonalState or None
        ``None`` where the stable state is uniform.
    """
    from .branch import phase_point

    zp = phase_point(float(beta), int(d))
    br = zp.branch
    lo = float(zp.m_fold) if zp.transition == "discontinuous" else 1e-3
    if K <= br.solve(lo).K:
        return None
    hi = 0.995
    if br.solve(hi).K < K:
        raise ValueError(f"K: {K!r} lies beyond the branch's m = {hi} (K = "
                         f"{br.solve(hi).K:.6g}); choose a smaller coupling")
    return br.solve(float(brentq(lambda m: br.solve(m).K - K, lo, hi)))


def vmf_kappa_of(m: float) -> float:
    """Concentration ``κ`` of the von Mises–Fisher law on ``S²`` whose mean length is ``m``.

    ``coth κ − 1/κ = m`` (Langevin function), by Brent's method; ``0`` for ``m = 0``.
    """
    if not 0.0 <= m < 1.0:
        raise ValueError(f"m: expected 0 <= m < 1, got {m!r}")
    if m == 0.0:
        return 0.0
    return float(brentq(lambda k: 1.0 / math.tanh(k) - 1.0 / k - m, 1e-8, 1e4))


@dataclass(frozen=True)
class ParticlePhaseRun:
    """One stationary particle run against the zonal branch.

    Attributes
    ----------
    beta, K, diffusion : float
        Inverse temperature, coupling and the token diffusion ``D`` the particles ran with.
    d, n : int
        Dimension and number of tokens.
    dt, burn, T, every : float
        Time step, relaxation time, final time and the recording interval (time units).
    seed : int
        Noise and initial-draw seed.
    t, order_parameter : numpy.ndarray
        Recording times and ``m_n(t) = |mean x_i(t)|``, shape ``(records,)``.
    mean, se : float
        Time average of ``m_n`` over ``t > burn`` and its batch-means standard error.
    branch_m : float
        The zonal branch's order parameter at ``K`` (:func:`stable_order_parameter`).
    batches : int
        Number of batches of the standard error.
    ranks : int
        MPI ranks the tokens were split over.
    seconds : float
        Wall time of the run.
    """

    beta: float
    K: float
    diffusion: float
    d: int
    n: int
    dt: float
    burn: float
    T: float
    every: float
    seed: int
    t: np.ndarray = field(repr=False)
    order_parameter: np.ndarray = field(repr=False)
    mean: float
    se: float
    branch_m: float
    batches: int
    ranks: int
    seconds: float

    @property
    def z(self) -> float:
        """``(m̄ − m(K)) / se``: the particles' deviation from the branch in standard errors."""
        return float((self.mean - self.branch_m) / self.se) if self.se > 0 else math.inf

    def t_crit(self, alpha: float = ALPHA) -> float:
        """Two-sided critical value of ``t(batches − 1)`` at level ``alpha``."""
        from scipy.stats import t as student

        return float(student.ppf(1.0 - alpha / 2.0, self.batches - 1))

    def passed(self, alpha: float = ALPHA) -> bool:
        """``|z| ≤ t_crit(alpha)`` and every recorded value finite."""
        return bool(np.all(np.isfinite(self.order_parameter))
                    and abs(self.z) <= self.t_crit(alpha))

    def as_dict(self) -> dict[str, Any]:
        """JSON-ready record (the series included)."""
        return {"beta": self.beta, "K": self.K, "diffusion": self.diffusion, "d": self.d,
                "n": self.n, "dt": self.dt, "burn": self.burn, "T": self.T,
                "every": self.every, "seed": self.seed, "t": self.t.tolist(),
                "order_parameter": self.order_parameter.tolist(), "mean": self.mean,
                "se": self.se, "branch_m": self.branch_m, "z": self.z,
                "t_crit": self.t_crit(), "passed": self.passed(),
                "batches": self.batches, "ranks": self.ranks, "seconds": self.seconds}


@dataclass(frozen=True)
class ParticlePoint:
    """A recorded particle point checked against the continuation's stable state.

    Attributes
    ----------
    beta, K : float
        Inverse temperature and coupling of the run.
    n, ranks, batches : int
        Tokens, MPI ranks and batches of the standard error.
    dt : float
        Time step of the Strang integrator (time units).
    seed : int
        The run's seed (``0`` where the record has none).
    mean, se : float
        The particles' time-averaged order parameter ``m̄`` and its batch-means
        standard error (dimensionless).
    branch_m : float
        ``m(K)`` of the stable zonal state, recomputed here
        (:func:`stable_order_parameter`; the record's own copy is not read).
    z, t_crit : float
        ``(m̄ − m(K)) / se`` and the two-sided ``t(batches − 1)`` quantile at ``alpha``.
    passed : bool
        ``|z| ≤ t_crit`` with ``m̄`` and ``se`` finite and ``se > 0``.
    bias_n : int or None
        For a ``dt = 0`` point of :func:`correct_dt`: the token count of the pairs that
        measured the step's bias (the largest, if they differ); ``None`` otherwise.
    """

    beta: float
    K: float
    n: int
    ranks: int
    batches: int
    dt: float
    seed: int
    mean: float
    se: float
    branch_m: float
    z: float
    t_crit: float
    passed: bool
    bias_n: int | None = None


def check_particle_point(record: dict[str, Any], *, alpha: float = ALPHA,
                         d: int = 3) -> ParticlePoint:
    r"""Check one recorded point (:meth:`ParticlePhaseRun.as_dict`) against the branch.

    The verdict of :meth:`ParticlePhaseRun.passed` from the record's ``beta``, ``K``,
    ``mean``, ``se`` and ``batches``: ``|m̄ − m(K)| ≤ t_{1−α/2}(batches − 1) · se``, with
    ``m(K)`` of the stable state recomputed by the continuation at the record's ``(β, K)``
    (so a record whose ``β`` or ``K`` is not the one the particles ran at fails, whatever
    ``branch_m`` it carries).

    Parameters
    ----------
    record : dict
        Needs ``beta``, ``K``, ``n``, ``dt``, ``mean``, ``se``, ``batches`` (``ranks``
        defaults to 1, ``seed`` to 0).
    alpha : float, keyword-only
        Two-sided level.
    d : int, keyword-only
        Ambient dimension of the branch.

    Returns
    -------
    ParticlePoint
    """
    from scipy.stats import t as student

    beta, K = float(record["beta"]), float(record["K"])
    mean, se, b = float(record["mean"]), float(record["se"]), int(record["batches"])
    m = stable_order_parameter(beta, K, d)
    ok = math.isfinite(mean) and math.isfinite(se) and se > 0
    z = (mean - m) / se if ok else math.inf
    tc = float(student.ppf(1.0 - alpha / 2.0, b - 1))
    return ParticlePoint(beta=beta, K=K, n=int(record["n"]), ranks=int(record.get("ranks", 1)),
                         batches=b, dt=float(record["dt"]),
                         seed=int(record.get("seed", 0)), mean=mean, se=se, branch_m=m,
                         z=float(z), t_crit=tc, passed=bool(ok and abs(z) <= tc))


def extrapolate_dt(coarse: ParticlePoint, fine: ParticlePoint, *, order: int = 2,
                   alpha: float = ALPHA) -> ParticlePoint:
    r"""Richardson's extrapolation ``dt → 0`` of two points at ``dt`` and ``dt/2``.

    With the stationary law's bias ``c dtᵖ`` (``p = order``; 2 for the Strang scheme, weak
    order 2) the limit is ``m₀ = (2ᵖ m̄_{dt/2} − m̄_{dt}) / (2ᵖ − 1)``; the runs are
    independent (their own noise), so ``se₀ = √(4ᵖ se_{dt/2}² + se_{dt}²) / (2ᵖ − 1)``, and the
    check's ``t`` quantile takes the Welch–Satterthwaite degrees of freedom (rounded down)
    of the two batch-means variances. The bias ``m̄_{dt} − m₀`` of the coarse run is
    ``(m̄_{dt} − m̄_{dt/2}) 2ᵖ / (2ᵖ − 1)``.

    Parameters
    ----------
    coarse, fine : ParticlePoint
        The same ``(β, K, n)`` at ``dt`` and ``dt/2``.
    order : int, keyword-only
        Order ``p`` of the step's bias.
    alpha : float, keyword-only
        Two-sided level of the verdict.

    Returns
    -------
    ParticlePoint
        ``dt = 0``, ``mean = m₀``, ``se = se₀``, ``batches`` one more than the degrees of
        freedom; ``z``, ``t_crit``, ``passed`` against the branch as in
        :func:`check_particle_point`.

    Raises
    ------
    ValueError
        The two points differ in ``β``, ``K`` or ``n``, or ``fine.dt ≠ coarse.dt / 2``.
    """
    _check_pair(coarse, fine)
    f = 2.0 ** int(order)
    mean = (f * fine.mean - coarse.mean) / (f - 1.0)
    parts = [((f / (f - 1.0)) * fine.se, fine.batches),
             (coarse.se / (f - 1.0), coarse.batches)]
    return _combined(fine, mean, parts, n=fine.n, ranks=fine.ranks, seed=fine.seed,
                     alpha=alpha)


def correct_dt(run: ParticlePoint, pairs: Sequence[tuple[ParticlePoint, ParticlePoint]], *,
               order: int = 2, alpha: float = ALPHA) -> ParticlePoint:
    r"""A run at ``dt`` with the step's bias, measured on pairs at ``dt`` and ``dt/2``, removed.

    The stationary law's bias ``c dtᵖ`` of a run at ``dt`` is
    ``b = (m̄_{dt} − m̄_{dt/2}) 2ᵖ / (2ᵖ − 1)`` on a pair (:func:`extrapolate_dt`); over
    ``N`` independent pairs (other seeds) it is their mean, and the corrected order
    parameter is ``m₀ = m̄_run − b``. The pairs may have another token count: ``c`` is
    the mean-field law's own (the particles' ``O(1/n)`` bias enters it only at
    ``O(dtᵖ/n)``), so a large run needs one step size only. All runs are independent,
    ``se₀² = se_run² + (2ᵖ/((2ᵖ − 1)N))² Σ (se_{dt}² + se_{dt/2}²)``, and the ``t``
    quantile takes the Welch–Satterthwaite degrees of freedom of the batch-means
    variances.

    Parameters
    ----------
    run : ParticlePoint
        The run to correct, at the pairs' coarse step.
    pairs : sequence of (ParticlePoint, ParticlePoint)
        ``(coarse, fine)``: each the same ``(β, K, n)`` at ``dt`` and ``dt/2``, with
        ``run``'s ``(β, K)`` and step; one at least.
    order, alpha : keyword-only
        As for :func:`extrapolate_dt`: the order ``p`` of the step's bias (int) and the
        verdict's two-sided level (float).

    Returns
    -------
    ParticlePoint
        ``run``'s ``n``, ``ranks`` and ``seed``, ``dt = 0``, ``bias_n`` the pairs' token
        count (the largest, if they differ), ``mean = m₀``, ``se = se₀``, ``batches`` one
        more than the degrees of freedom.

    Raises
    ------
    ValueError
        No pair, a pair that is not one (:func:`extrapolate_dt`), or one with another
        ``(β, K)`` or coarse step than ``run``.
    """
    pairs = list(pairs)
    if not pairs:
        raise ValueError("pairs: expected at least one (coarse, fine) pair")
    for coarse, fine in pairs:
        _check_pair(coarse, fine)
        if (run.beta, run.K) != (coarse.beta, coarse.K):
            raise ValueError(f"points: expected the run's (beta, K) {(run.beta, run.K)}, "
                             f"got {(coarse.beta, coarse.K)}")
        if not math.isclose(run.dt, coarse.dt, rel_tol=1e-12):
            raise ValueError(f"dt: expected pairs at the run's step {run.dt!r}, got "
                             f"{coarse.dt!r}")
    g = 2.0 ** int(order) / ((2.0 ** int(order) - 1.0) * len(pairs))
    mean = run.mean - g * sum(c.mean - f.mean for c, f in pairs)
    parts = [(run.se, run.batches)]
    parts += [(g * q.se, q.batches) for pair in pairs for q in pair]
    return _combined(run, mean, parts, n=run.n, ranks=run.ranks, seed=run.seed,
                     alpha=alpha, bias_n=max(c.n for c, _ in pairs))


def _check_pair(coarse: ParticlePoint, fine: ParticlePoint) -> None:
    """Refuse two points that are not one ``(β, K, n)`` at ``dt`` and ``dt/2``."""
    if (coarse.beta, coarse.K, coarse.n) != (fine.beta, fine.K, fine.n):
        raise ValueError("points: expected the same (beta, K, n), got "
                         f"{(coarse.beta, coarse.K, coarse.n)} and "
                         f"{(fine.beta, fine.K, fine.n)}")
    if not math.isclose(fine.dt, coarse.dt / 2.0, rel_tol=1e-12):
        raise ValueError(f"dt: expected the fine step {coarse.dt / 2.0!r}, got {fine.dt!r}")


def _combined(ref: ParticlePoint, mean: float, parts: list[tuple[float, int]], *, n: int,
              ranks: int, seed: int, alpha: float, bias_n: int | None = None
              ) -> ParticlePoint:
    """The ``dt = 0`` point of a linear combination of independent runs.

    ``parts``: each run's ``(|coefficient| · se, batches)``; the standard error is their
    root sum of squares and the degrees of freedom Welch–Satterthwaite's (rounded down).
    """
    from scipy.stats import t as student

    v = [s * s for s, _ in parts]
    se = math.sqrt(sum(v))
    den = sum(x * x / (b - 1) for x, (_, b) in zip(v, parts, strict=True))
    df = max(1, int(math.floor(sum(v) ** 2 / den))) if den > 0 else 1
    ok = math.isfinite(mean) and math.isfinite(se) and se > 0
    z = (mean - ref.branch_m) / se if ok else math.inf
    tc = float(student.ppf(1.0 - alpha / 2.0, df))
    return ParticlePoint(beta=ref.beta, K=ref.K, n=n, ranks=ranks, batches=df + 1, dt=0.0,
                         seed=seed, mean=float(mean), se=float(se), branch_m=ref.branch_m,
                         z=float(z), t_crit=tc, passed=bool(ok and abs(z) <= tc),
                         bias_n=bias_n)


def load_particle_points(path: Any, section: str = "points", *,
                         alpha: float = ALPHA) -> list[ParticlePoint] | None:
    """The points of ``section`` of a results file, each checked (:func:`check_particle_point`).

    ``path``: a JSON file as ``bench/phase_particles.py points`` writes it (section
    ``{"rows": [record, ...]}``). Returns ``None`` when the file or the section is missing
    (the caller says so); a section without rows gives ``[]``.
    """
    import json
    from pathlib import Path

    p = Path(path)
    if not p.is_file():
        return None
    sec = json.loads(p.read_text()).get(section)
    if sec is None:
        return None
    return [check_particle_point(r, alpha=alpha) for r in sec.get("rows", [])]


def batch_means_se(series: np.ndarray, batches: int) -> float:
    """Standard error of the mean of a correlated series by ``batches`` batch means."""
    s = np.asarray(series, dtype=np.float64)
    b = int(batches)
    if b < 2 or s.size < b:
        raise ValueError(f"batches: need 2 <= batches <= {s.size}, got {batches!r}")
    usable = (s.size // b) * b
    means = s[s.size - usable:].reshape(b, -1).mean(axis=1)
    return float(means.std(ddof=1) / math.sqrt(b))


def particle_order_parameter(beta: float, K: float, *, n: int, d: int = 3, dt: float = 0.05,
                             burn: float = 4.0, T: float = 24.0, every: float = 0.25,
                             batches: int = 10, seed: int = 0,
                             diffusion: float | None = None, comm: Any = None,
                             kernel_backend: str = "auto") -> ParticlePhaseRun:
    r"""Run ``n`` noisy tokens to their stationary state and average the order parameter.

    Parameters
    ----------
    beta : float
        Inverse temperature ``β > 0`` of the USA head ``A = V = I``.
    K : float
        Published coupling; the tokens diffuse with ``D = 1/(2K)`` unless ``diffusion``
        is given.
    n : int, keyword-only
        Number of tokens (``≥ 100``).
    d : int, keyword-only
        Ambient dimension (the branch is the zonal reduction in ``d``).
    dt, burn, T, every : float, keyword-only
        Time step of the Strang integrator, relaxation time before averaging, final time
        and recording interval (``every`` a multiple of ``dt``; time units).
    batches : int, keyword-only
        Batches of the standard error.
    seed : int, keyword-only
        Seed of the initial draw and of the noise segments.
    diffusion : float or None, keyword-only
        Override ``D`` (a wrong convention, for negative controls).
    comm : mpi4py communicator or None, keyword-only
        Split the tokens over its ranks (collective; every rank gets the result).
    kernel_backend : str, keyword-only
        Passed to :class:`wflow.particles.ParticleOptions`.

    Returns
    -------
    ParticlePhaseRun

    Raises
    ------
    ValueError
        Bad arguments, named; ``FloatingPointError`` when a segment does not succeed.
    """
    from ..attention.heads import Attention, Heads
    from ..particles import simulate
    from ..status import Status

    for name, v in (("beta", beta), ("K", K), ("dt", dt), ("T", T), ("every", every)):
        if isinstance(v, bool) or not isinstance(v, (int, float)) or not math.isfinite(v) \
                or v <= 0:
            raise ValueError(f"{name}: expected a finite number > 0, got {v!r}")
    if isinstance(n, bool) or not isinstance(n, int) or n < 100:
        raise ValueError(f"n: expected an integer >= 100, got {n!r}")
    if not 0 <= burn < T:
        raise ValueError(f"burn: expected 0 <= burn < T = {T}, got {burn!r}")
    steps = every / dt
    if abs(steps - round(steps)) > 1e-9 * steps:
        raise ValueError(f"every: expected a multiple of dt = {dt}, got {every!r}")
    steps = int(round(steps))
    segments = int(round(T / every))
    if abs(segments * every - T) > 1e-9 * T:
        raise ValueError(f"T: expected a multiple of every = {every}, got {T!r}")
    D = diffusion_of(float(K)) if diffusion is None else float(diffusion)
    if not (math.isfinite(D) and D > 0):
        raise ValueError(f"diffusion: expected a finite number > 0, got {diffusion!r}")
    if K <= k_sharp(beta, d):
        logger.info("K = %g <= K_# = %g: the stable state may be uniform", K, k_sharp(beta, d))
    m_branch = stable_order_parameter(beta, K, d)
    t0 = time.perf_counter()
    rng = np.random.default_rng([int(seed), int(n), 77])
    axis = np.zeros(d)
    axis[-1] = 1.0
    x = sample_vmf(n, axis, vmf_kappa_of(m_branch) if d == 3 else 0.0, rng)
    heads, attn = Heads.bilinear(np.eye(d)), Attention("usa", float(beta))
    ts = [0.0]
    ms = [float(np.linalg.norm(x.mean(axis=0)))]
    for k in range(segments):
        noise_seed = int(np.random.SeedSequence([int(seed), k, 78]).generate_state(1)[0])
        # rtol = None: judged by the phase diagram's criteria, not by the solver's tolerance
        res = simulate(x, heads, attn, T=every, dt=dt, integrator="strang", diffusion=D,
                       seed=noise_seed, record_every=steps, head_rates=False,
                       clusters=False, progress=False, ito_balance=False,
                       kernel_backend=kernel_backend, engine="python",
                       comm=comm, rtol=None)
        if res.status not in (Status.SUCCESS, Status.COMPLETED):  # no check asked for
            raise FloatingPointError(f"particles: segment {k} ended {res.status}: "
                                     f"{res.message}")
        x = np.asarray(res.x[0])
        ts.append((k + 1) * every)
        ms.append(float(np.linalg.norm(x.mean(axis=0))))
        logger.debug("segment %d/%d: m = %.6f", k + 1, segments, ms[-1])
    t = np.asarray(ts)
    op = np.asarray(ms)
    keep = op[t > burn]
    run = ParticlePhaseRun(
        beta=float(beta), K=float(K), diffusion=D, d=int(d), n=int(n), dt=float(dt),
        burn=float(burn), T=float(T), every=float(every), seed=int(seed), t=t,
        order_parameter=op, mean=float(keep.mean()), se=batch_means_se(keep, batches),
        branch_m=m_branch, batches=int(batches),
        ranks=1 if comm is None else int(comm.Get_size()),
        seconds=time.perf_counter() - t0)
    logger.info("particles beta=%g K=%g n=%d: m = %.6f ± %.1e against the branch's %.6f "
                "(z = %.2f, %.1f s)", beta, K, n, run.mean, run.se, m_branch, run.z,
                run.seconds)
    return run
