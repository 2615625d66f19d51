r"""Token noise of the particle solver: keyed random streams and exact heat-kernel increments.

The noisy transformer (THEORY §8, :mod:`wflow.attention.diffusion`) moves each token by a
Brownian motion on ``S^{d-1}`` with generator ``D Δ_S``. This module holds what the
stochastic integrators (:mod:`wflow.particles.integrators`) draw:

**Keyed streams** (:class:`TokenNoise`). The randomness of token block ``b`` (global token
indices ``[bB, min((b+1)B, n))``, ``B = TOKEN_BLOCK``) at step ``k`` and draw ``s`` (a
substep of the scheme) is a NumPy :class:`~numpy.random.Philox` generator with

.. math::

    \text{key} = \mathrm{SeedSequence}(\text{seed}, \text{path}, \text{tag}),\qquad
    \text{counter} = (0,\ s,\ b,\ k),

a counter-based stream: it is a function of ``(seed, path, block, step, draw)`` alone, never
of the MPI rank or of the order in which blocks are drawn. A rank holding the tokens
``[a, a + M)`` draws the whole blocks that overlap them and keeps its rows, so
``mpirun -n P`` draws the same numbers for every token as the serial run, for every ``P``.
The counter's low word is the one Philox advances while drawing, so a block may draw up
to ``2^64`` words without touching another block's counter.

**Exact Brownian increments on** ``S^{d-1}`` (:class:`HeatAngle`, :func:`heat_step`).
Started at ``x``, the Brownian motion with generator ``D Δ_S`` at time ``τ`` is

.. math::

    x_τ = \cos θ\, x + \sin θ\, u,\qquad
    u = \frac{P_x ξ}{|P_x ξ|},\ ξ \sim N(0, I_d),

with ``u`` uniform on the unit sphere of the tangent space (rotation invariance) and the
angle ``θ ∈ [0, π]`` independent of ``u`` with density (``s = Dτ``, ``λ = (d−2)/2``)

.. math::

    p_s(θ) \propto \sin^{d-2}θ\; K_s(\cos θ),\qquad
    K_s(z) = \sum_{l \ge 0} N_l\, e^{-l(l+d-2)s}\, \frac{C_l^{λ}(z)}{C_l^{λ}(1)},

the heat kernel against the normalised surface measure (``N_l`` the dimension of the
degree-``l`` harmonics; for ``d = 2`` the ratio is ``cos lθ`` and ``N_l = 2``). The angle is
drawn by **rejection from a piecewise-constant envelope with a squeeze**: ``K_s`` decreases
in the geodesic distance, so on a bin ``[a, b]`` of angles
``K_s(\cos b) \min \sin^{d-2} ≤ p_s ≤ K_s(\cos a) \max \sin^{d-2}`` rigorously; a proposal
uniform in a bin chosen by the envelope's mass is accepted at once under the lower bound,
and else against the series itself (summed until its tail is below ``1e-18`` of
``K_s(1)``). The bins are fine (``HEAT_BINS`` on ``[0, min(π, 14√s)]`` and one tail bin), so
acceptance is ``≈ 1`` and the series is summed for a few percent of the draws only. The
samples are exact up to the truncated tail and round-off in the bounds (relative
``< 1e-12``, covered by a safety factor on the envelope). This is the heat-kernel
rejection sampler (not the Jenkins–Spanò / Mijatović–Mramor–Uribe ancestral-process
algorithm, whose alternating series cancels catastrophically for the small times of a
time step: the terms exceed the result by ``e^{O(1/s)}``).

Checked by ``E[C_l(x_τ · x)/C_l(1)] = e^{−D l(l+d−2) τ}`` (tests/test_particles_noise.py).
"""

from __future__ import annotations

import logging
import math
from functools import lru_cache

import numpy as np
from numba import njit

__all__ = [
    "TOKEN_BLOCK",
    "HEAT_BINS",
    "TokenNoise",
    "StepNoise",
    "HeatAngle",
    "heat_angle",
    "heat_step",
    "zonal_ratio",
]

logger = logging.getLogger(__name__)

#: Tokens per keyed block of the noise streams (a fixed global partition of the tokens).
TOKEN_BLOCK = 4096
#: Bins of the heat-kernel angle envelope on ``[0, min(π, 14√s)]``.
HEAT_BINS = 2048
#: Relative margin on the envelope's bounds (covers round-off in ``K_s`` at the bin edges).
_MARGIN = 1e-12
#: The token stream's tag in the key (``"token"`` in ASCII): apart from the weights' noise.
_TAG = 0x746F6B656E


def zonal_ratio(l_max: int, z: np.ndarray, d: int) -> np.ndarray:
    r"""The normalised zonal harmonics ``R_l(z) = C_l^{λ}(z)/C_l^{λ}(1)``, ``l = 0..l_max``.

    ``λ = (d − 2)/2``: Chebyshev ``T_l`` for ``d = 2``, Legendre ``P_l`` for ``d = 3``. By the
    recurrence ``R_{l+1} = ((2l + 2λ) z R_l − l R_{l−1}) / (l + 2λ)``, ``R_0 = 1``,
    ``R_1 = z`` (``|R_l| ≤ 1`` on ``[−1, 1]``, so the recurrence is stable there).

    Parameters
    ----------
    l_max : int
        Highest degree.
    z : array
        Arguments in ``[−1, 1]`` (any shape ``S``).
    d : int
        Ambient dimension (the sphere is ``S^{d−1}``), ``d ≥ 2``.

    Returns
    -------
    numpy.ndarray
        Shape ``(l_max + 1, *S)``.
    """
    z = np.asarray(z, dtype=np.float64)
    lam = 0.5 * (d - 2)
    out = np.empty((l_max + 1,) + z.shape)
    out[0] = 1.0
    if l_max >= 1:
        out[1] = z
    for ll in range(1, l_max):
        out[ll + 1] = ((2 * ll + 2 * lam) * z * out[ll] - ll * out[ll - 1]) / (ll + 2 * lam)
    return out


def _harmonic_dims(l_max: int, d: int) -> np.ndarray:
    """``N_l``: dimension of the spherical harmonics of degree ``l`` on ``S^{d−1}``."""
    ll = np.arange(l_max + 1, dtype=np.float64)
    if d == 2:
        return np.where(ll == 0, 1.0, 2.0)
    lg = np.array([math.lgamma(x + d - 2) - math.lgamma(x + 1) - math.lgamma(d - 2)
                   for x in ll])
    return (2 * ll + d - 2) / (d - 2) * np.exp(lg)


class HeatAngle:
    r"""Sampler of the angle ``θ`` of Brownian motion on ``S^{d−1}`` after ``s = Dτ``.

    See the module docstring (rejection from a piecewise-constant envelope with a squeeze,
    exact up to a truncated tail below ``1e-18`` and round-off).

    Parameters
    ----------
    d : int
        Ambient dimension, ``d ≥ 2``.
    s : float
        Diffusivity × time, ``s = D τ > 0`` (units: radius²).
    """

    def __init__(self, d: int, s: float) -> None:
        if d < 2 or not (s > 0 and math.isfinite(s)):
            raise ValueError(f"heat kernel on S^(d-1): need d >= 2 and s > 0, got d={d}, s={s}")
        self.d = int(d)
        self.s = float(s)
        # series coefficients N_l e^{-l(l+d-2)s}, until the tail is below 1e-18 of K_s(1)
        l_max = 8
        while True:
            ll = np.arange(l_max + 1, dtype=np.float64)
            coef = _harmonic_dims(l_max, d) * np.exp(-ll * (ll + d - 2) * self.s)
            if coef[-1] < 1e-20 * coef.sum() and ll[-1] * (ll[-1] + d - 2) * self.s > 4:
                break
            l_max *= 2
        keep = np.flatnonzero(coef >= 1e-20 * coef.sum())
        self.coef = coef[: int(keep[-1]) + 1]
        self.l_max = self.coef.size - 1
        # envelope: fine bins on [0, θc], one tail bin [θc, π]
        theta_c = min(math.pi, 14.0 * math.sqrt(self.s))
        edges = np.linspace(0.0, theta_c, HEAT_BINS + 1)
        if theta_c < math.pi:
            edges = np.append(edges, math.pi)
        Kedge = self.kernel(np.cos(edges))
        if np.any(np.diff(Kedge) > 1e-12 * Kedge[0]):
            raise FloatingPointError("heat kernel not decreasing in the angle: series "
                                     f"inaccurate at d={d}, s={s}")
        a, b = edges[:-1], edges[1:]
        sa, sb = np.sin(a), np.sin(b)
        e = d - 2
        smax = np.where((a <= 0.5 * np.pi) & (b >= 0.5 * np.pi), 1.0, np.maximum(sa, sb)) ** e
        smin = np.minimum(sa, sb) ** e
        self.lo_edge = a
        self.width = b - a
        self.upper = Kedge[:-1] * smax * (1 + _MARGIN) + 1e-300
        self.lower = np.maximum(Kedge[1:], 0.0) * smin * (1 - _MARGIN)
        mass = self.upper * self.width
        self.cum = np.cumsum(mass)

    def kernel(self, z: np.ndarray) -> np.ndarray:
        """``K_s(z)``, the heat kernel against the normalised surface measure, at ``z = cos θ``.

        The series in the Gegenbauer (``d = 2``: Chebyshev) recurrence, compiled
        (:func:`_kernel_series`: a few percent of the draws sum it, up to ``l ≈ √(46/s)``
        terms each).
        """
        z = np.asarray(z, dtype=np.float64)
        out = np.empty(z.size)
        _kernel_series(self.coef, np.ascontiguousarray(z).reshape(-1), float(self.d - 2), out)
        return out.reshape(z.shape)

    def density(self, theta: np.ndarray) -> np.ndarray:
        """Unnormalised angle density ``sin^{d−2}θ K_s(cos θ)``."""
        theta = np.asarray(theta, dtype=np.float64)
        return np.sin(theta) ** (self.d - 2) * self.kernel(np.cos(theta))

    def sample(self, rng: np.random.Generator, count: int) -> np.ndarray:
        """``count`` angles from ``rng`` (a fixed sequence of draws for a given ``rng`` state)."""
        out = np.empty(count)
        todo = np.arange(count)
        total = self.cum[-1]
        while todo.size:
            k = todo.size
            b = np.searchsorted(self.cum, rng.random(k) * total, side="right")
            b = np.minimum(b, self.cum.size - 1)
            th = self.lo_edge[b] + rng.random(k) * self.width[b]
            u = rng.random(k) * self.upper[b]
            ok = u <= self.lower[b]
            hard = np.flatnonzero(~ok)
            if hard.size:
                p = self.density(th[hard])
                if np.any(p > self.upper[b[hard]]):  # never, if the envelope is a bound
                    raise FloatingPointError("heat-kernel envelope is not an upper bound")
                ok[hard] = u[hard] <= p
            out[todo[ok]] = th[ok]
            todo = todo[~ok]
        return out


@njit(cache=True)
def _kernel_series(coef, z, lam2, out):
    """``out[i] = Σ_l coef[l] C_l(z_i)/C_l(1)`` by the three-term recurrence, term by term.

    ``r_{l+1} = ((2l + 2λ) z r_l − l r_{l−1})/(l + 2λ)`` (``lam2 = 2λ = d − 2``), each
    product and sum in the order of the array form it replaced (no contraction to fused
    multiply–adds: numba's default), so the accept decisions, hence the draws, are the same.
    """
    L = coef.size - 1
    for i in range(z.size):
        zi = z[i]
        r0 = 1.0
        r1 = zi
        acc = 0.0
        acc += coef[0] * r0
        if L >= 1:
            acc += coef[1] * r1
        for ll in range(1, L):
            r0, r1 = r1, ((2 * ll + lam2) * zi * r1 - ll * r0) / (ll + lam2)
            acc += coef[ll + 1] * r1
        out[i] = acc


@lru_cache(maxsize=64)
def heat_angle(d: int, s: float) -> HeatAngle:
    """The cached :class:`HeatAngle` of ``(d, s)`` (one per step size of a run)."""
    return HeatAngle(d, s)


def heat_step(x: np.ndarray, cos_t: np.ndarray, sin_t: np.ndarray, xi: np.ndarray) -> np.ndarray:
    r"""Move tokens ``x`` by the angles ``θ`` in the tangent directions ``P_x ξ/|P_x ξ|``.

    ``x ← cos θ x + sin θ u``, renormalised (round-off only). Shapes: ``x``, ``xi``:
    ``(n, d)``; ``cos_t``, ``sin_t``: ``(n,)``.
    """
    t = xi - np.sum(xi * x, axis=1)[:, None] * x
    nt = np.sqrt(np.sum(t * t, axis=1))
    y = cos_t[:, None] * x + (sin_t / nt)[:, None] * t
    return y / np.sqrt(np.sum(y * y, axis=1))[:, None]


class StepNoise:
    """The token noise of one step for the tokens ``[first, first + count)``.

    Each ``draw`` (a substep of the scheme) is a separate keyed stream; calling a method
    twice with the same ``draw`` returns the same numbers.
    """

    def __init__(self, noise: TokenNoise, step: int) -> None:
        self.noise = noise
        self.step = int(step)

    def normals(self, draw: int = 0) -> np.ndarray:
        """``(count, d)`` standard normals."""
        return self.noise._rows(self.step, draw, lambda g, m: g.standard_normal(
            (m, self.noise.d)))

    def heat_draws(self, s: float, draw: int = 0) -> tuple[np.ndarray, np.ndarray]:
        """The draws of one exact Brownian increment over ``s = Dτ > 0``: ``(ξ, θ)``.

        ``ξ``: ``(count, d)`` standard normals (the direction ``P_x ξ/|P_x ξ|``); ``θ``:
        ``(count,)`` angles from the heat kernel (:class:`HeatAngle`), both from the
        keyed stream of ``(step, draw)``, token block by token block.
        """
        sampler = heat_angle(self.noise.d, float(s))
        d = self.noise.d

        def gen(g: np.random.Generator, m: int) -> np.ndarray:
            out = np.empty((m, d + 1))
            out[:, :d] = g.standard_normal((m, d))
            out[:, d] = sampler.sample(g, m)
            return out

        r = self.noise._rows(self.step, draw, gen)
        return r[:, :d], r[:, d]

    def heat(self, x: np.ndarray, s: float, draw: int = 0) -> np.ndarray:
        """Tokens ``x`` moved by exact Brownian increments on the sphere over ``s = Dτ``."""
        if s == 0.0:
            return x
        xi, th = self.heat_draws(s, draw)
        return heat_step(x, np.cos(th), np.sin(th), xi)


class TokenNoise:
    """Keyed token-noise streams of one run (one weight path) on ``S^{d−1}``.

    Parameters
    ----------
    seed : int
        The run's seed (``ParticleOptions.seed``).
    n : int
        Number of tokens of the whole system (fixes the block partition).
    d : int
        Ambient dimension.
    path : int
        Weight path index (independent token noise per Monte-Carlo path).
    first, count : int
        The tokens this process holds (``[first, first + count)``; default all ``n``).
    block : int, optional
        Tokens per keyed block (default: :data:`TOKEN_BLOCK`, read at the call).
    """

    def __init__(self, seed: int, n: int, d: int, *, path: int = 0, first: int = 0,
                 count: int | None = None, block: int | None = None) -> None:
        self.n, self.d = int(n), int(d)
        self.block = int(TOKEN_BLOCK if block is None else block)
        self.first = int(first)
        self.count = self.n - self.first if count is None else int(count)
        if self.first < 0 or self.first + self.count > self.n or self.block < 1:
            raise ValueError(f"token noise: rows [{first}, {first}+{count}) outside n = {n}")
        ss = np.random.SeedSequence([int(seed) & 0xFFFFFFFFFFFFFFFF, int(path), _TAG])
        self.key = ss.generate_state(2, np.uint64)

    def at(self, step: int) -> StepNoise:
        """The noise of step ``step``."""
        return StepNoise(self, step)

    def generator(self, step: int, draw: int, block: int) -> np.random.Generator:
        """The keyed generator of ``(step, draw, block)``."""
        bg = np.random.Philox(key=self.key, counter=np.array([0, draw, block, step],
                                                             dtype=np.uint64))
        return np.random.Generator(bg)

    def _rows(self, step: int, draw: int, gen) -> np.ndarray:
        """Rows ``[first, first + count)`` of the per-token draws ``gen(generator, m)``."""
        a, b = self.first, self.first + self.count
        parts = []
        for blk in range(a // self.block, (b - 1) // self.block + 1 if b > a else a // self.block):
            lo, hi = blk * self.block, min((blk + 1) * self.block, self.n)
            vals = gen(self.generator(step, draw, blk), hi - lo)
            parts.append(vals[max(a, lo) - lo: min(b, hi) - lo])
        if not parts:
            return gen(self.generator(step, draw, 0), 0)
        return parts[0] if len(parts) == 1 else np.concatenate(parts, axis=0)
