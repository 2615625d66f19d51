"""``wflow reproduce glpr_phase``: the (β, t) phase diagram of the probability of clustering.

The published experiment is ``phase-diagrams.py`` of ``borjanG/2023-transformers-rotf``
(Geshkovski–Letrouit–Polyanskiy–Rigollet, *A mathematical perspective on transformers*,
arXiv:2312.10794), run as ``python phase-diagrams.py --use_softmax`` (the softmax case,
``Q = K = V = I``). Its conventions, re-implemented term by term (line numbers of the
published file at commit ``538ba83``):

=======================  ==============================================================
convention               published (line)
=======================  ==============================================================
sizes                    ``d = 2`` (451), ``n = 32`` tokens (452), ``2048`` independent
                         systems (453), ``90`` values of β (456) from ``torch.linspace(0.1,
                         9, 90)`` (333, torch's two-sided rule, :func:`torch_linspace`)
float                    float64 (``torch.set_default_dtype``, 326)
initial tokens           ``torch.randn(batch, n, d)`` on the CPU (44), normalised (55);
                         a fresh draw for every β from one global stream (353, 279);
                         the published file does not seed it (a seeded copy draws
                         ``torch.manual_seed(seed)``'s stream, which
                         :func:`wflow.attention.published.torch_cpu_normal` reproduces bit for bit)
step                     ``x ← normalise(x + η softmax_row(β X Xᵀ) X)`` (227-271),
                         ``η = 0.1`` (461, 30), softmax = ``exp(s − max)/Σ`` (243),
                         ``normalize`` = ``y / max(‖y‖, 1e-12)`` (271)
time                     ``t ← t + η`` in Python floats (273); stop when ``t ≥ 30``
                         (310, 476): 300 steps
records                  ``torch.linspace(0, 30, 200)`` (334); after a step, every
                         record time ``≤ t`` not yet filled gets the statistic of the
                         current tokens (293-303)
statistic                fraction of ordered pairs ``i ≠ j`` over all systems with
                         ``⟨x_i, x_j⟩ > 0.999`` (146-149)
figure                   ``pcolormesh(t, β, P)``, ``RdBu_r``, log and linear colour
                         scales (383-397)
=======================  ==============================================================

What differs: the pair sums are wflow's compiled loop (:func:`phase_counts`) instead of torch's
BLAS matmul and its vectorised ``exp``, so the tokens agree with the published code's to round-off
(a few ulps), not bit for bit; the pair counts agree exactly unless an inner product lies within
round-off of 0.999 at a record (the fixture test counts them). Pair counts are integers here (the
published code divides them at once).

The claim (the paper's phase diagram, in words): *tokens cluster — the probability that two tokens
have merged rises to one — and the time they need grows with β: fast clustering at small β, a long
metastable phase at large β.* The verdict (:func:`judge_phase`) measures ``t_½(β)``, the first
record time at which ``P ≥ 1/2`` (``∞`` if never), with its Monte-Carlo error bar from the
per-system fractions.
"""

from __future__ import annotations

import logging
import math
import time
from dataclasses import asdict, dataclass, field, replace
from functools import lru_cache
from pathlib import Path
from typing import Any, Literal

import numpy as np

from ..attention.published import torch_cpu_normal
from ..infra.parallel import comm_rank_size, parallel_map
from .claims import Claim, ClaimOutcome, report_head, write_reproduction

__all__ = [
    "PhaseOptions",
    "PhaseResult",
    "PhaseVerdict",
    "torch_linspace",
    "record_steps",
    "initial_tokens",
    "phase_counts",
    "published_step",
    "run_phase",
    "judge_phase",
    "write_phase",
]

logger = logging.getLogger(__name__)

PAPER = ("Geshkovski, Letrouit, Polyanskiy, Rigollet, A mathematical perspective on "
         "transformers (arXiv:2312.10794); code borjanG/2023-transformers-rotf, "
         "phase-diagrams.py --use_softmax")
CLAIM = ("tokens cluster (the probability that two tokens have merged, <x_i, x_j> > 0.999, "
         "rises to one) and the time they need grows with beta: fast clustering at small beta, "
         "a long metastable phase at large beta")


@dataclass(frozen=True)
class PhaseOptions:
    """Settings of :func:`run_phase` (defaults: the published full scale).

    Parameters
    ----------
    d, n, batch : int
        Dimension, tokens, independent systems per β (published 2, 32, 2048).
    n_beta : int
        Values of β in ``torch_linspace(beta_min, beta_max, n_beta)`` (published 90).
    beta_min, beta_max : float
        β range (published 0.1, 9).
    step : float
        ``η`` (published 0.1); time advances by ``η`` per step.
    maxtime : float
        Stop when the accumulated time reaches it (published 30).
    n_times : int
        Record times ``torch_linspace(0, maxtime, n_times)`` (published 200).
    threshold : float
        A pair is clustered when ``⟨x_i, x_j⟩ > threshold`` (published 0.999).
    seed : int
        Seed of the initial tokens' stream.
    generator : {"torch-cpu", "numpy"}
        ``"torch-cpu"``: the stream of ``torch.manual_seed(seed)`` on the CPU, i.e. the
        published tokens of a seeded run, bit for bit (needs ``batch·n·d`` divisible by
        16, true at the published sizes); ``"numpy"``: ``default_rng(seed)`` normals (the
        same law, another sample).
    """

    d: int = 2
    n: int = 32
    batch: int = 2048
    n_beta: int = 90
    beta_min: float = 0.1
    beta_max: float = 9.0
    step: float = 0.1
    maxtime: float = 30.0
    n_times: int = 200
    threshold: float = 0.999
    seed: int = 0
    generator: Literal["torch-cpu", "numpy"] = "torch-cpu"

    def __post_init__(self) -> None:
        if min(self.d, self.n, self.batch, self.n_beta) < 1 or self.n < 2:
            raise ValueError("glpr_phase: d, batch, n_beta >= 1 and n >= 2 required")
        if not (self.step > 0 and self.maxtime > 0 and self.n_times >= 2):
            raise ValueError("glpr_phase: step > 0, maxtime > 0, n_times >= 2 required")
        if self.generator not in ("torch-cpu", "numpy"):
            raise ValueError(f"glpr_phase: unknown generator {self.generator!r}")
        if self.generator == "torch-cpu" and (self.batch * self.n * self.d) % 16:
            raise ValueError("glpr_phase: generator 'torch-cpu' needs batch*n*d divisible by "
                             "16 (successive torch.randn draws are then one stream)")

    @classmethod
    def quick(cls, **changes: Any) -> PhaseOptions:
        """A version that runs in about a second: n = 16, 64 systems, 12 β, same time grid."""
        base = {"n": 16, "batch": 64, "n_beta": 12}
        base.update(changes)
        return cls(**base)


def torch_linspace(start: float, end: float, steps: int) -> np.ndarray:
    """``torch.linspace(start, end, steps)`` in float64, value for value.

    Torch's CPU kernel fills the first ``steps // 2`` entries as ``start + h·i`` and the
    rest as ``end − h·(steps − 1 − i)`` with ``h = (end − start)/(steps − 1)``; NumPy's
    ``linspace`` uses ``start + i·h`` throughout, which differs by an ulp in the second
    half (and the record times are compared with ``≥``, published lines 293, 297).
    """
    steps = int(steps)
    if steps == 1:
        return np.array([float(start)])
    h = (float(end) - float(start)) / (steps - 1)
    i = np.arange(steps, dtype=np.float64)
    half = steps // 2
    out = np.empty(steps)
    out[:half] = float(start) + h * i[:half]
    out[half:] = float(end) - h * (steps - 1 - i[half:])
    return out


def record_steps(step: float, maxtime: float, times: np.ndarray) -> tuple[int, np.ndarray]:
    """Number of steps and, per record time, the step after which it is filled.

    The published loop (lines 290-311): ``t ← t + η`` (Python float); after each step,
    if ``t ≥ times[k]`` for the next unfilled ``k``, every such ``k`` gets the current
    statistic; stop once ``t ≥ maxtime``.

    Returns
    -------
    n_steps : int
    rec : (len(times),) int64 array
        ``rec[k]``: 1-based step index whose tokens give record ``k`` (``0``: never
        filled, its published value stays 0).
    """
    rec = np.zeros(len(times), np.int64)
    t, k, s = 0.0, 0, 0
    while True:
        t = t + step
        s += 1
        if k < len(times) and t >= times[k]:
            while k < len(times) and t >= times[k]:
                rec[k] = s
                k += 1
        if t >= maxtime:
            break
    return s, rec


@lru_cache(maxsize=4)
def _torch_stream(seed: int, shape: tuple[int, ...]) -> np.ndarray:
    return torch_cpu_normal(seed, shape)


def initial_tokens(opts: PhaseOptions, beta_index: int) -> np.ndarray:
    """The ``(batch, n, d)`` initial tokens of β number ``beta_index``, normalised.

    ``"torch-cpu"``: draw ``beta_index`` of ``torch.randn(batch, n, d)`` from the stream
    of ``torch.manual_seed(seed)`` (published line 44, one draw per β in order; since
    ``batch·n·d`` is a multiple of 16, successive draws are one stream cut in pieces),
    then ``y / max(‖y‖, 1e-12)`` (line 55). ``"numpy"``: ``default_rng([seed, beta_index])``.
    """
    shape = (opts.batch, opts.n, opts.d)
    if opts.generator == "torch-cpu":
        z = _torch_stream(int(opts.seed), (opts.n_beta, *shape))[beta_index]
    else:
        z = np.random.default_rng([int(opts.seed), int(beta_index)]).standard_normal(shape)
    nrm = np.sqrt(np.sum(z * z, axis=2, keepdims=True))
    return z / np.maximum(nrm, 1e-12)


def _import_numba():
    from numba import njit, prange

    return njit, prange


@lru_cache(maxsize=1)
def _kernel():
    njit, prange = _import_numba()

    @njit(parallel=True, cache=True)
    def counts_kernel(x0, beta, eta, rec, threshold):  # pragma: no cover - compiled
        B, n, d = x0.shape
        K = rec.size
        n_steps = 0
        for k in range(K):
            n_steps = max(n_steps, rec[k])
        out = np.zeros((B, K), np.int64)
        xf = np.empty_like(x0)
        for b in prange(B):
            x = x0[b].copy()
            y = np.empty((n, d))
            p = np.empty(n)
            r = 0
            while r < K and rec[r] == 0:
                r += 1
            for s in range(1, n_steps + 1):
                for i in range(n):
                    m = -np.inf
                    for j in range(n):
                        acc = 0.0
                        for k in range(d):
                            acc += x[i, k] * x[j, k]
                        p[j] = acc * beta
                        if p[j] > m:
                            m = p[j]
                    z = 0.0
                    for j in range(n):
                        p[j] = math.exp(p[j] - m)
                        z += p[j]
                    for k in range(d):
                        y[i, k] = 0.0
                    for j in range(n):
                        w = p[j] / z
                        for k in range(d):
                            y[i, k] += w * x[j, k]
                for i in range(n):
                    nrm2 = 0.0
                    for k in range(d):
                        y[i, k] = y[i, k] * eta + x[i, k]
                        nrm2 += y[i, k] * y[i, k]
                    nrm = max(math.sqrt(nrm2), 1e-12)
                    for k in range(d):
                        x[i, k] = y[i, k] / nrm
                if r < K and rec[r] == s:
                    c = 0
                    for i in range(n):
                        for j in range(n):
                            if i != j:
                                acc = 0.0
                                for k in range(d):
                                    acc += x[i, k] * x[j, k]
                                if acc > threshold:
                                    c += 1
                    while r < K and rec[r] == s:
                        out[b, r] = c
                        r += 1
            xf[b] = x
        return out, xf

    return counts_kernel


def phase_counts(x0: np.ndarray, beta: float, *, step: float, rec: np.ndarray,
                 threshold: float) -> tuple[np.ndarray, np.ndarray]:
    r"""Clustered-pair counts of each system at each record, and the final tokens.

    The compiled, thread-parallel (over systems) form of the published step (lines
    220-273) with ``Q = K = V = I``:

    .. math:: s_{ij} = β⟨x_i, x_j⟩,\\quad p_{ij} = \\frac{e^{s_{ij} - \\max_j s_{ij}}}
              {\\sum_j e^{s_{ij} - \\max_j s_{ij}}},\\quad
              x_i ← \\frac{x_i + η \\sum_j p_{ij} x_j}{\\max(‖\\cdot‖, 10^{-12})},

    in the published order of operations (score times β, normalise the softmax, then
    multiply by ``η``, then add ``x``). Each system's numbers do not depend on the
    thread or MPI rank that runs it.

    Parameters
    ----------
    x0 : (B, n, d) float64 array
        Initial tokens.
    beta, step, threshold : float
    rec : (K,) int64 array
        From :func:`record_steps`.

    Returns
    -------
    counts : (B, K) int64 array
        Ordered pairs ``i ≠ j`` with ``⟨x_i, x_j⟩ > threshold``.
    x_final : (B, n, d) array
        Tokens after the last step.
    """
    kern = _kernel()
    return kern(np.ascontiguousarray(x0, np.float64), float(beta), float(step),
                np.ascontiguousarray(rec, np.int64), float(threshold))


def published_step(x: np.ndarray, beta: float, step: float) -> np.ndarray:
    """One published step in NumPy (vectorised), for tests and readers: ``(B, n, d)``."""
    s = np.einsum("bik,bjk->bij", x, x) * beta
    p = np.exp(s - s.max(axis=2, keepdims=True))
    p /= p.sum(axis=2, keepdims=True)
    y = np.einsum("bij,bjk->bik", p, x) * step + x
    return y / np.maximum(np.sqrt(np.sum(y * y, axis=2, keepdims=True)), 1e-12)


@dataclass(frozen=True)
class PhaseResult:
    """The phase diagram.

    Attributes
    ----------
    options : PhaseOptions
    betas : (n_beta,) array
    times : (n_times,) array
        Record times.
    n_steps : int
    counts : (n_beta, n_times) int64 array
        Clustered ordered pairs summed over the systems.
    counts_sq : (n_beta, n_times) int64 array
        Sum over systems of the squared per-system counts (for the error bars).
    wall_s : (n_beta,) array
        Seconds per β.
    final_x : dict
        β index -> final tokens ``(batch, n, d)`` (kept only when asked).
    """

    options: PhaseOptions
    betas: np.ndarray
    times: np.ndarray
    n_steps: int
    counts: np.ndarray
    counts_sq: np.ndarray
    wall_s: np.ndarray
    final_x: dict[int, np.ndarray] = field(default_factory=dict)

    @property
    def pairs(self) -> int:
        """Ordered pairs per record: ``batch · n · (n − 1)``."""
        o = self.options
        return o.batch * o.n * (o.n - 1)

    @property
    def probability(self) -> np.ndarray:
        """``P(β, t)``: the published statistic, ``counts / pairs`` (line 149)."""
        return self.counts / self.pairs

    @property
    def stderr(self) -> np.ndarray:
        """Monte-Carlo standard error of ``P``: std of per-system fractions / √batch."""
        o = self.options
        m = o.n * (o.n - 1)
        mean = self.counts / (o.batch * m)
        var = np.maximum(self.counts_sq / (o.batch * m * m) - mean**2, 0.0)
        return np.sqrt(var * o.batch / max(o.batch - 1, 1) / o.batch)


def _one_beta(item: tuple[PhaseOptions, int, float, bool]) -> dict[str, Any]:
    opts, k, beta, keep = item
    t0 = time.perf_counter()
    times = torch_linspace(0.0, opts.maxtime, opts.n_times)
    _, rec = record_steps(opts.step, opts.maxtime, times)
    x0 = initial_tokens(opts, k)
    c, xf = phase_counts(x0, beta, step=opts.step, rec=rec, threshold=opts.threshold)
    return {"k": k, "counts": c.sum(axis=0), "counts_sq": (c * c).sum(axis=0),
            "x": xf if keep else None, "wall_s": time.perf_counter() - t0}


def run_phase(options: PhaseOptions | None = None, *, keep_final: bool = False
              ) -> PhaseResult:
    """Compute the phase diagram, β values spread over MPI ranks (:func:`parallel_map`).

    The numbers do not depend on the number of ranks or threads: each β carries its own
    initial tokens, each system is computed by one thread.
    """
    opts = options or PhaseOptions()
    betas = torch_linspace(opts.beta_min, opts.beta_max, opts.n_beta)
    times = torch_linspace(0.0, opts.maxtime, opts.n_times)
    n_steps, _ = record_steps(opts.step, opts.maxtime, times)
    items = [(opts, k, float(b), keep_final) for k, b in enumerate(betas)]
    res = parallel_map(_one_beta, items)
    return PhaseResult(
        opts, betas, times, n_steps,
        np.array([r["counts"] for r in res], np.int64),
        np.array([r["counts_sq"] for r in res], np.int64),
        np.array([r["wall_s"] for r in res]),
        {r["k"]: r["x"] for r in res if r["x"] is not None})


@dataclass(frozen=True)
class PhaseVerdict(ClaimOutcome):
    """Verdict on the claim, with the numbers it rests on (a :class:`ClaimOutcome`).

    Attributes
    ----------
    verdict : Claim
    t_half : (n_beta,) array
        First record time with ``P ≥ 1/2`` (``inf``: never).
    t_half_lo, t_half_hi : (n_beta,) arrays
        The same with ``P ± 2·stderr`` (a 2σ band on ``t_½``).
    p_final_small, p_final_large : float
        ``P(T)`` at the smallest and at the largest β.
    kendall_tau : float
        Rank correlation of ``t_½`` with β (ties and ``inf`` handled by rank).
    reasons : tuple of str
    rule : str
    checks : dict
        The criteria (a)–(c) of :data:`RULE` as ``summary.json`` checks (``{name: {value,
        tolerance, passed, rule}}``): reproduced exactly when all three pass.
    """

    verdict: Claim
    t_half: np.ndarray
    t_half_lo: np.ndarray
    t_half_hi: np.ndarray
    p_final_small: float
    p_final_large: float
    kendall_tau: float
    reasons: tuple[str, ...]
    rule: str
    checks: dict[str, dict[str, Any]] = field(default_factory=dict)


RULE = ("t_half(beta) = first record time with P >= 1/2 (inf if never), its 2-sigma band "
        "from P -/+ 2 stderr. REPRODUCED when (a) P(T) at the smallest beta >= 0.9 "
        "(clustering), (b) the band of t_half at the largest beta lies above the band at the "
        "smallest beta (the time grows with beta beyond Monte-Carlo error) and (c) Kendall's "
        "tau between beta and t_half >= 0.5 (it grows along the range). NOT REPRODUCED when "
        "(a) fails with P(T) + 2 stderr < 0.9, or the bands of the two ends are reversed "
        "(t_half_hi(largest) < t_half_lo(smallest)), or tau <= 0. Otherwise INCONCLUSIVE.")


def _first_time(P: np.ndarray, times: np.ndarray, level: float) -> np.ndarray:
    hit = P >= level
    out = np.full(P.shape[0], np.inf)
    for k in range(P.shape[0]):
        idx = np.flatnonzero(hit[k])
        if idx.size:
            out[k] = times[idx[0]]
    return out


def _kendall_tau(x: np.ndarray, y: np.ndarray) -> float:
    from scipy.stats import kendalltau

    yy = np.where(np.isfinite(y), y, np.nanmax(np.where(np.isfinite(y), y, np.nan)) + 1.0
                  if np.isfinite(y).any() else 0.0)
    if np.all(yy == yy[0]):
        return 0.0
    return float(kendalltau(x, yy).statistic)


def judge_phase(betas: np.ndarray, times: np.ndarray, P: np.ndarray,
                stderr: np.ndarray) -> PhaseVerdict:
    """Judge the claim on a phase diagram ``P[β, t]`` (rule: :data:`RULE`)."""
    betas, times, P, se = (np.asarray(a, float) for a in (betas, times, P, stderr))
    th = _first_time(P, times, 0.5)
    th_lo = _first_time(P + 2 * se, times, 0.5)  # earliest plausible
    th_hi = _first_time(P - 2 * se, times, 0.5)  # latest plausible
    i0, i1 = int(np.argmin(betas)), int(np.argmax(betas))
    p0, p1 = float(P[i0, -1]), float(P[i1, -1])
    tau = _kendall_tau(betas, th)
    reasons = []
    a_ok = p0 >= 0.9
    a_bad = p0 + 2 * se[i0, -1] < 0.9
    b_ok = th_lo[i1] > th_hi[i0]
    b_bad = th_hi[i1] < th_lo[i0]
    c_ok, c_bad = tau >= 0.5, tau <= 0.0
    reasons.append(f"P(T) at beta = {betas[i0]:.3g}: {p0:.4f} ± {se[i0, -1]:.1e} "
                   f"({'≥' if a_ok else '<'} 0.9)")
    reasons.append(f"t_half at beta = {betas[i0]:.3g}: {th[i0]:.3g} [{th_lo[i0]:.3g}, "
                   f"{th_hi[i0]:.3g}]; at beta = {betas[i1]:.3g}: {th[i1]:.3g} "
                   f"[{th_lo[i1]:.3g}, {th_hi[i1]:.3g}]")
    reasons.append(f"Kendall tau(beta, t_half) = {tau:.3f}")
    v = (Claim.NOT_REPRODUCED if a_bad or b_bad or c_bad
         else Claim.REPRODUCED if a_ok and b_ok and c_ok else Claim.INCONCLUSIVE)
    with np.errstate(invalid="ignore"):  # inf - inf: neither band reaches 1/2
        gap = float(th_lo[i1] - th_hi[i0])
    checks = {
        "clustering_at_smallest_beta": {
            "value": p0, "tolerance": "≥ 0.9", "passed": bool(a_ok),
            "rule": f"(a) P(T), the fraction of clustered pairs at T, at the smallest beta "
                    f"({betas[i0]:.3g}): the tokens cluster; refuted when P(T) + 2 stderr "
                    f"< 0.9 (stderr {se[i0, -1]:.2g})"},
        "t_half_grows_with_beta": {"value": gap, "tolerance": "> 0", "passed": bool(b_ok),
            "rule": f"(b) the earliest plausible t_half at the largest beta "
                    f"({th_lo[i1]:.3g}) minus the latest plausible one at the smallest beta "
                    f"({th_hi[i0]:.3g}), 2-sigma bands from P -/+ 2 stderr (a t_half that "
                    "never comes is inf; inf - inf is nan, not passed); refuted when the "
                    "bands are reversed"},
        "kendall_tau_beta_t_half": {
            "value": tau, "tolerance": "≥ 0.5", "passed": bool(c_ok),
            "rule": "(c) Kendall's tau between beta and t_half over the whole range (inf "
                    "ranked last): t_half grows along the range; refuted when tau ≤ 0"},
    }
    return PhaseVerdict(v, th, th_lo, th_hi, p0, p1, tau, tuple(reasons), RULE, checks)


def control_shuffled(res: PhaseResult, *, seed: int = 1) -> PhaseVerdict:
    """Negative control: the same rule on the diagram with its β rows reversed.

    Reversing the β order turns a clustering time that grows with β into one that
    falls; a rule that still said *reproduced* could not tell the claim from its opposite.
    """
    del seed
    return judge_phase(res.betas, res.times, res.probability[::-1], res.stderr[::-1])


def _draw(stage: Path, res: PhaseResult, v: PhaseVerdict,
          published: dict[str, np.ndarray] | None) -> list[str]:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    P = res.probability
    ncol = 3 if published is not None else 2
    fig, axes = plt.subplots(1, ncol, figsize=(5.2 * ncol, 4.2))
    X, Y = np.meshgrid(res.times, res.betas)
    panels = []
    if published is not None:
        panels.append(("published code (seeded CPU run)", published["P"]))
    panels.append(("wflow, published conventions", P))
    for ax, (title, Z) in zip(axes, panels, strict=False):
        pc = ax.pcolormesh(X, Y, Z, cmap="RdBu_r", shading="auto", rasterized=True)
        fig.colorbar(pc, ax=ax)
        ax.set(xlabel="t", ylabel="β")
        ax.set_title(title, fontsize=9)
    ax = axes[-1]
    fin = np.isfinite(v.t_half)
    ax.plot(res.betas[fin], v.t_half[fin], "k.-", label="t_½(β), first t with P ≥ 1/2")
    lo = np.where(np.isfinite(v.t_half_lo), v.t_half_lo, res.times[-1])
    hi = np.where(np.isfinite(v.t_half_hi), v.t_half_hi, res.times[-1])
    ax.fill_between(res.betas, lo, hi, color="0.8", label="2σ band")
    ax.set(xlabel="β", ylabel="t_½")
    ax.set_title(f"claim: {v.verdict.upper()}", fontsize=9)
    ax.legend(fontsize=7)
    fig.suptitle("GLPR phase diagram — claim: " + CLAIM, fontsize=8, wrap=True)
    fig.tight_layout()
    fig.savefig(stage / "glpr_phase.png", dpi=110)
    plt.close(fig)
    # the published figure's two colour scales (lines 383-397)
    fig, axes = plt.subplots(1, 2, figsize=(10, 4))
    for ax, norm in zip(axes, ("log", "linear"), strict=True):
        Z = np.where(P > 0, P, np.nan) if norm == "log" else P
        pc = ax.pcolormesh(X, Y, Z, norm=norm, cmap="RdBu_r", shading="auto", rasterized=True)
        fig.colorbar(pc, ax=ax)
        ax.set(xlabel="t", ylabel="β")
        ax.set_title(f"P(β, t), {norm} colour (as published)", fontsize=9)
    fig.tight_layout()
    fig.savefig(stage / "glpr_phase_published_style.png", dpi=110)
    plt.close(fig)
    return ["glpr_phase.png", "glpr_phase_published_style.png"]


def summarize(res: PhaseResult, v: PhaseVerdict, control: PhaseVerdict) -> dict[str, Any]:
    """``summary.json`` content of the experiment."""
    return {
        "paper": PAPER,
        "claim": CLAIM,
        "settings": asdict(res.options),
        "n_steps": res.n_steps,
        "pair_evaluations": int(res.options.n_beta * res.options.batch * res.n_steps
                                * res.options.n**2),
        "verdict": v.verdict,
        "verdict_rule": v.rule,
        "reasons": list(v.reasons),
        "checks": v.checks,
        "control_reversed_beta": control.verdict,
        "kendall_tau": v.kendall_tau,
        "p_final_smallest_beta": v.p_final_small,
        "p_final_largest_beta": v.p_final_large,
        "t_half": {f"{b:.6g}": t for b, t in zip(res.betas, v.t_half, strict=True)},
        "max_stderr": float(res.stderr.max()),
        "wall_s_per_beta_sum": float(res.wall_s.sum()),
        "ranks": comm_rank_size()[2],
        "differences_from_published": [
            "pair sums in wflow's compiled loop (libm exp), not torch's BLAS matmul and "
            "vectorised exp: tokens agree to round-off, not bit for bit",
            "float64 throughout as published; CPU (the paper ran CUDA, whose stream for the "
            "initial tokens is not the CPU one: the published file does not seed it)",
        ],
    }


def write_phase(stage: Path, res: PhaseResult, v: PhaseVerdict, control: PhaseVerdict,
                *, published: dict[str, np.ndarray] | None = None) -> list[str]:
    """Write ``glpr_phase.npz``, ``glpr_phase.csv`` and the figures into ``stage``."""
    from ..infra.io import save_npz, write_csv

    save_npz(stage / "glpr_phase.npz", betas=res.betas, times=res.times, counts=res.counts,
             counts_sq=res.counts_sq, P=res.probability, stderr=res.stderr,
             t_half=v.t_half, pairs=np.int64(res.pairs), n_steps=np.int64(res.n_steps))
    bb, tt = np.meshgrid(res.betas, res.times, indexing="ij")
    write_csv(stage / "glpr_phase.csv", {"beta": bb.ravel(), "t": tt.ravel(),
                                         "counts": res.counts.ravel(), "P": res.probability.ravel(),
                                         "stderr": res.stderr.ravel()})
    return ["glpr_phase.npz", "glpr_phase.csv", *_draw(stage, res, v, published)]


def run_and_judge(options: PhaseOptions | None = None
                  ) -> tuple[PhaseResult, PhaseVerdict, PhaseVerdict]:
    """:func:`run_phase`, :func:`judge_phase` and the negative control."""
    res = run_phase(options)
    v = judge_phase(res.betas, res.times, res.probability, res.stderr)
    return res, v, control_shuffled(res)


def with_changes(opts: PhaseOptions, **changes: Any) -> PhaseOptions:
    """``replace`` for the CLI (ignores ``None``)."""
    return replace(opts, **{k: v for k, v in changes.items() if v is not None})


def _report(summary: dict[str, Any]) -> str:
    lines = [*report_head("glpr_phase", summary["verdict"], paper=summary["paper"],
                          claim=summary["claim"], rule=summary["verdict_rule"]),
             "Measured:", *[f"- {r}" for r in summary["reasons"]], "",
             f"Negative control (β rows reversed): {summary['control_reversed_beta']}.", "",
             f"{summary['pair_evaluations']:.3g} pair evaluations, "
             f"{summary['wall_s_per_beta_sum']:.1f} s summed over β, {summary['ranks']} rank(s)."]
    if "published_reference" in summary:
        lines += ["", "Against the published code's run: "
                  + json_line(summary["published_reference"])]
    return "\n".join(lines) + "\n"


def json_line(d: dict[str, Any]) -> str:
    """``k = v`` pairs of a flat dict, for the report."""
    return ", ".join(f"{k} = {v}" for k, v in d.items())


def reproduce(*, out: str | Path, options: PhaseOptions | None = None,
              published: str | Path | None = None, overwrite: bool = True) -> Any:
    """Run, judge and write ``out/`` (``summary.json``, ``report.md``, data, figures).

    ``published``: an ``.npz`` with the published code's ``counts`` (and ``P``) at the same
    settings; then the figure shows it beside wflow's and the summary counts the records
    that differ. Returns the :class:`~wflow.studies.base.StudyResult`.
    """
    from ..infra.io import prepare_output

    opts = options or PhaseOptions()
    out = prepare_output(out, overwrite=overwrite)
    res, v, ctl = run_and_judge(opts)
    summary = summarize(res, v, ctl)
    ref = None
    if published is not None:
        with np.load(published) as z:
            ref = {"P": z["P"], "counts": z["counts"]}
        if ref["counts"].shape != res.counts.shape:
            raise ValueError(f"glpr_phase: published data of shape {ref['counts'].shape}, "
                             f"run of shape {res.counts.shape}")
        diff = res.counts - ref["counts"]
        summary["published_reference"] = {
            "file": str(published), "records_differing": int(np.count_nonzero(diff)),
            "max_abs_count_difference": int(np.abs(diff).max()),
            "max_abs_P_difference": float(np.abs(res.probability - ref["P"]).max()),
            "verdict_on_published_data": judge_phase(
                res.betas, res.times, ref["P"], res.stderr).verdict}
    sentence = (f"glpr_phase: published claim {v.verdict.upper()} ({'; '.join(v.reasons)}); "
                f"control with β reversed: {ctl.verdict}.")
    return write_reproduction(out, "glpr_phase", summary, sentence,
                              v.verdict == Claim.REPRODUCED, report=_report(summary),
                              files=lambda stage: write_phase(stage, res, v, ctl, published=ref))
