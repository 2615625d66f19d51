"""The particle system over MPI ranks: ``simulate(..., comm=comm)`` (docs/theory.md §2).

Two ways to spread a run over the ``P`` ranks of ``comm``; both give every rank the
result of the serial run (to round-off, see below):

* **Paths over ranks** (noisy weights with ``n_paths > 1``): path ``p`` runs whole on rank
  ``p mod P`` with its own generator (``SeedSequence(seed).spawn(n_paths)[p]``, as in the
  serial run), through the step-by-step loop of :func:`wflow.particles.iterate`; the
  finished paths are gathered in path order. Each path runs the serial Python loop's
  operations (equal to round-off: NumPy's vectorised reductions may round by where an
  array starts in memory; the serial default, the compiled loop, agrees to 1e-12).
* **Tokens over ranks** (one large system, every other case): rank ``r`` holds the
  contiguous block :func:`~wflow.infra.parallel.split_range` ``(n, P, r)`` of the tokens.
  Every evaluation of the field is :func:`wflow.kernels.split.split_sums` (the fast
  summation on S² with one ordered sum of the harmonic coefficients, else direct sums
  with the sources passed around a ring); everything else a step needs is local to the
  rank's tokens, and every diagnostic that is a sum over tokens (energies, power, slopes,
  ``∂E/∂A``, per-head rates, radial shadows, the mean inner product, ``b̂``'s mean) is
  one :func:`~wflow.infra.parallel.ordered_sum` per state; minima and maxima are exact
  reductions; the cluster count is :func:`wflow.diagnostics.count_clusters` with
  ``comm``. Memory per rank ``O(n/P · H d)`` plus ``O(L²)`` coefficients: the solver
  never holds the ``n`` tokens on one rank, except the final tokens (and, with
  ``save_trajectory``, the kept tokens) gathered into the result at the end, which
  therefore equals the serial result in every field. Attention entropies
  (``entropy=True``, ``O(n²)`` per record) are not split yet: refused.

Round-off. A sum over tokens is added in a different order than in one process (``P``
partial sums, each in the serial kernels' order, added in rank order), so each recorded
sum is within ``(P − 1) ε Σ|terms|`` plus the kernels' own reordering (``2 N ε``
relative per attention sum, :mod:`wflow.kernels.split`) of the serial one; along a run
these differences grow with the flow's Lipschitz constant like any perturbation of the
initial data. Every reduction has a fixed order, so a run with ``P`` ranks repeats bit
for bit, and every rank holds the same numbers (the same control flow on every rank).
"""

from __future__ import annotations

import logging
import time
from collections.abc import Iterator
from typing import Any

import numpy as np

from ..attention.heads import Attention, Heads
from ..attention.schedules import Schedule
from ..diagnostics import count_clusters, head_rates, radial_shadows
from ..energy import FieldEval, energy_gradient_A, field_from_sums, masked_field, slope_terms
from ..geometry.sphere import check_on_sphere
from ..infra.parallel import collective_check, ordered_sum, split_range
from ..kernels import KernelLog
from ..kernels.split import split_sums
from .integrators import _velocity
from .loop import time_loop
from .result import ParticleState, put_record

__all__ = ["SplitKernel", "iterate_split", "record_split", "martingale_split"]

logger = logging.getLogger(__name__)


def _gmin(comm: Any, val: float) -> float:
    from mpi4py import MPI

    return float(comm.allreduce(float(val), op=MPI.MIN))


def _gmax(comm: Any, val: float) -> float:
    from mpi4py import MPI

    return float(comm.allreduce(float(val), op=MPI.MAX))


class SplitKernel:
    """The kernel settings of a split run: ``evaluate`` is the field at this rank's tokens.

    Duck-types :class:`wflow.particles.integrators._Kernel` for the integrators (every
    stage's field then comes from :func:`wflow.kernels.split.split_sums`); ``fused``
    is ``None`` (the fused direct pass is one process's).
    """

    def __init__(self, comm: Any, n: int, backend: str = "auto", tol: float = 1e-10,
                 log: KernelLog | None = None) -> None:
        self.comm = comm
        self.n = int(n)
        self.backend = backend
        self.tol = tol
        self.log = log

    def evaluate(self, x: np.ndarray, heads: Heads, attn: Attention) -> FieldEval:
        """:func:`wflow.energy.evaluate` at this rank's tokens ``x`` over all tokens."""
        m = np.full(x.shape[0], 1.0 / self.n)
        return evaluate_split(x, m, heads, attn, comm=self.comm, backend=self.backend,
                              tol=self.tol, log=self.log)

    def velocity(self, x: np.ndarray, heads: Heads, attn: Attention, flow: str) -> np.ndarray:
        """The velocity of ``flow`` alone at this rank's tokens (no ``∇ψ``: a stage)."""
        m = np.full(x.shape[0], 1.0 / self.n)
        return _velocity(evaluate_split(x, m, heads, attn, comm=self.comm,
                                        backend=self.backend, tol=self.tol, log=self.log,
                                        gradient=False), flow)

    def fused(self, *args, **kwargs) -> None:  # noqa: D102
        return None


def evaluate_split(x: np.ndarray, m: np.ndarray, heads: Heads, attn: Attention, *, comm: Any,
                   backend: str = "auto", tol: float = 1e-10,
                   log: KernelLog | None = None, gradient: bool = True) -> FieldEval:
    """:func:`wflow.energy.evaluate` for tokens split over ranks (targets = sources).

    ``x`` (``(M_r, d)``), ``m``: this rank's tokens and masses; returns the field at them
    from all ranks' tokens. Heads with values of rank ``r`` are summed at their rank
    (:func:`wflow.energy.field_from_sums`); under a causal mask the tokens' positions
    run in rank order (:func:`wflow.kernels.causal.causal_sums` with ``comm``). Collective.
    """
    if getattr(attn, "mask", None) is not None:
        return masked_field(x, heads, attn, m=m, backend=backend, tol=tol, log=log,
                             comm=comm)
    kw = {"beta": attn.beta, "kind": attn.kind, "backend": backend, "tol": tol}

    def sums(Q: np.ndarray, K: np.ndarray, potential: bool,
             values: np.ndarray | None = None):
        return split_sums(x, m, Q, K, comm=comm, potential=potential, values=values, **kw)

    # a normaliser that underflowed on one rank's tokens is an error on every rank
    return field_from_sums(x, heads, attn, sums, log=log, gradient=gradient,
                           guard=lambda fn: collective_check(comm, fn))


def _ring(comm: Any, x: np.ndarray, m: np.ndarray) -> Iterator[tuple[np.ndarray, np.ndarray]]:
    """Every rank's ``(x, m)`` block in turn (own block first), passed around a ring."""
    P, rank = comm.Get_size(), comm.Get_rank()
    counts = comm.allgather(x.shape[0])
    cap = max(counts)
    bx = np.zeros((cap, x.shape[1]))
    bm = np.zeros(cap)
    bx[: x.shape[0]] = x
    bm[: x.shape[0]] = m
    src = rank
    for step in range(P):
        yield bx[: counts[src]], bm[: counts[src]]
        if step < P - 1:
            comm.Sendrecv_replace(bx, dest=(rank + 1) % P, source=(rank - 1) % P)
            comm.Sendrecv_replace(bm, dest=(rank + 1) % P, source=(rank - 1) % P)
            src = (src - 1) % P


def ito_split(x: np.ndarray, m: np.ndarray, heads: Heads, attn: Attention, sigma: float, *,
              symmetric_noise: bool, comm: Any) -> float:
    """:func:`wflow.energy.ito_correction` over all ranks' tokens (sources around a ring)."""
    from ..attention.kinds import get_kind

    if sigma == 0:
        return 0.0
    spec = get_kind(attn.kind)
    A = heads.A
    part = np.zeros(heads.H)
    nx = np.sum(x * x, axis=1)
    for ys, ms in _ring(comm, x, m):
        if not ys.shape[0] or not x.shape[0]:
            continue
        B = max(1, (1 << 22) // ys.shape[0])
        ny = np.sum(ys * ys, axis=1)
        for h in range(heads.H):
            Ay = ys @ A[h].T
            for i0 in range(0, x.shape[0], B):
                xi = x[i0:i0 + B]
                s = attn.beta * (xi @ Ay.T)
                geo = nx[i0:i0 + B, None] * ny[None, :]
                if symmetric_noise:
                    geo = geo + (xi @ ys.T) ** 2
                part[h] += float(m[i0:i0 + B] @ (spec.d2phi(s) * geo) @ ms)
    total = float(heads.w @ ordered_sum(comm, part))
    factor = 0.125 if symmetric_noise else 0.25
    return factor * sigma**2 * attn.beta * total


def _state_terms_split(x, m, t, theta, schedule: Schedule, attn: Attention, flow: str,
                       kernel: SplitKernel, heads: Heads | None = None):
    """:func:`wflow.particles.integrators._state_terms` with the sums over all ranks."""
    comm = kernel.comm
    heads = schedule.heads_at(theta) if heads is None else heads
    if getattr(attn, "mask", None) is not None:  # energy terms: the exchangeable model's
        vel = kernel.velocity(x, heads, attn, flow)
        attn = attn.unmasked()
        fe = kernel.evaluate(x, heads, attn)
    else:
        fe = kernel.evaluate(x, heads, attn)
        vel = _velocity(fe, flow)
    st = slope_terms(x, m, fe, heads, vel)
    H = heads.H
    parts = [fe.Phi @ m, [st.power, st.slope2, st.speed2, st.G2]]
    if not schedule.static:
        parts.append(energy_gradient_A(x, m, fe).ravel())
    tot = ordered_sum(comm, np.concatenate([np.asarray(p, dtype=np.float64).ravel()
                                            for p in parts]))
    E = float(heads.w @ (tot[:H] / (2.0 * attn.beta)))
    power, slope2, speed2, G2 = (float(v) for v in tot[H:H + 4])
    dEdt = 0.0
    if not schedule.static:
        G = tot[H + 4:].reshape(H, x.shape[1], x.shape[1])
        dEdt = float(np.einsum("h,hij,hij->", heads.w, G, schedule.A_dot(theta, t)))
    ito = 0.0
    if schedule.stochastic:
        ito = ito_split(x, m, heads, attn, schedule.sigma(t),
                        symmetric_noise=schedule.symmetric_noise, comm=comm)
    terms = {"E": E, "dEdt_w": dEdt, "power": power, "slope2": slope2, "speed2": speed2,
             "G2": G2, "ito": ito}
    return heads, fe, vel, terms


def iterate_split(x: np.ndarray, schedule: Schedule, attn: Attention, *, kernel: SplitKernel,
                  T: float, dt: float, integrator: str = "rk4", flow: str = "transformer",
                  rng: np.random.Generator | None = None) -> Iterator[ParticleState]:
    """:func:`wflow.particles.iterate` for this rank's block ``x`` of the tokens (collective).

    The yielded states hold this rank's tokens and field; their integrands are the
    whole system's (identical on every rank).
    """
    comm = kernel.comm
    x = check_on_sphere(x, name="tokens") if x.shape[0] else np.asarray(x, dtype=np.float64)
    m = np.full(x.shape[0], 1.0 / kernel.n)

    def terms(x: np.ndarray, t: float, theta: np.ndarray, heads: Heads | None):
        return _state_terms_split(x, m, t, theta, schedule, attn, flow, kernel, heads)

    return time_loop(x, schedule, attn, T=T, dt=dt, integrator=integrator, flow=flow,
                     rng=rng, kernel=kernel, terms=terms,
                   finite=lambda x: bool(_gmin(comm, float(bool(np.all(np.isfinite(x)))))))


def martingale_split(prev: ParticleState, m: np.ndarray, schedule: Schedule, comm: Any) -> float:
    """``<∂E/∂A, ΔA_noise>`` of one step with ``∂E_h/∂A_h`` summed over all ranks."""
    G = ordered_sum(comm, energy_gradient_A(prev.x, m, prev.field))
    dA = schedule.param.A_dot(prev.theta, prev.dtheta_noise)
    return float(np.einsum("h,hij,hij->", prev.heads.w, G, dA))


def record_split(rows: dict[str, list], st: ParticleState, m: np.ndarray, attn: Attention,
                 acc, opts, schedule: Schedule, comm: Any) -> None:
    """:func:`wflow.particles.result._record` for a split state (same keys, same order)."""
    x, fe, heads = st.x, st.field, st.heads
    terms = st.integrands
    H = heads.H
    d = x.shape[1]
    parts = [fe.Phi @ m, [float(m @ fe.bhat)], m @ x, [float(np.sum(m * m * np.sum(x * x, 1))),
                                                       float(m.sum()), float(np.sum(m * m))]]
    if opts.head_rates:
        hr = head_rates(x, m, fe, heads)
        parts += [hr.own, hr.cross_direct, hr.cross_radial, radial_shadows(x, fe) @ m]
    tot = ordered_sum(comm, np.concatenate([np.asarray(p, dtype=np.float64).ravel()
                                            for p in parts]))
    E_h = tot[:H] / (2.0 * attn.beta)
    bmean = float(tot[H])
    s = tot[H + 1:H + 1 + d]
    sm2, msum, m2 = (float(v) for v in tot[H + 1 + d:H + 4 + d])
    pos = H + 4 + d

    rates = None
    if opts.head_rates:
        own, cd, cr = tot[pos:pos + H], tot[pos + H:pos + 2 * H], tot[pos + 2 * H:pos + 3 * H]
        rates = (own + cd + cr, own, cd, cr, own - np.abs(cr), tot[pos + 3 * H:pos + 4 * H])
    bmin = _gmin(comm, float(fe.bhat.min()) if x.shape[0] else np.inf)
    bmax = _gmax(comm, float(fe.bhat.max()) if x.shape[0] else -np.inf)
    nc = (float(count_clusters(x, cos_threshold=opts.cluster_cos, comm=comm)) if opts.clusters
          else None)
    put_record(rows, terms, E_h, (bmean, bmin, bmax), float(s @ s - sm2) / float(msum**2 - m2),
               nc, acc, rates)


def local_block(x0: np.ndarray, comm: Any) -> tuple[np.ndarray, int]:
    """The contiguous block of the tokens ``x0`` this rank holds (a copy), its first index."""
    a, b = split_range(x0.shape[0], comm.Get_size(), comm.Get_rank())
    return np.array(x0[a:b], dtype=np.float64), a


def gather_rows(comm: Any, block: np.ndarray) -> np.ndarray:
    """The ranks' blocks concatenated in rank order, on every rank."""
    return np.concatenate(comm.allgather(np.ascontiguousarray(block)), axis=0)


def wall_max(comm: Any, t0: float) -> float:
    """The longest wall time since ``t0`` over the ranks."""
    return _gmax(comm, time.perf_counter() - t0)
