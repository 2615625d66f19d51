"""The older compiled Euler loop for static heads in ``d ≤ 3``: :func:`euler_path`.

Every step recorded, the same trajectory, energies and running balances as
``simulate(..., integrator="euler", record_every=1)`` (tested to 1e-12); the general
compiled time loop is :func:`wflow.particles.simulate_compiled`.
"""

from __future__ import annotations

import logging
import time
from typing import Literal, NamedTuple

import numpy as np

from ..attention.heads import Attention, Heads
from ..attention.kinds import get_kind
from ..geometry.sphere import check_on_sphere
from ..kernels import aligned, aligned_empty, pair_once, particle_heads3, raise_bound, team
from ..status import Status

__all__ = ["EulerPath", "euler_path"]

logger = logging.getLogger(__name__)


class EulerPath(NamedTuple):
    """Result of :func:`euler_path` (every step recorded).

    Attributes
    ----------
    status, message : str
        ``"success"``, or ``"failed"`` with the first non-finite step; the records then
        stop before that step, ``x`` is the state at it.
    t : (S+1,) array
        Times ``k·dt``.
    E, power, slope2, speed2, G2 : (S+1,) arrays
        The integrands of :class:`wflow.diagnostics.BalanceAccumulator` at every step
        (conventions of :mod:`wflow.energy`; ``dEdt_w = 0`` for static heads).
    balance : dict of (S+1,) arrays
        Running residuals (trapezoid, as :func:`simulate`): ``chain = ΔE − ∫power``, and for
        value-aligned symmetric heads (``sign ≠ 0``) ``edi = ΔE − sign ∫½(speed2 + slope2)``
        and ``g2 = ΔE − sign ∫G2``.
    x : (n, d) array
        Final tokens.
    trajectory : (K, n, d) array or None
        Tokens every ``save_every`` steps.
    sign : int
        Value alignment of the heads (+1 ascent, −1 descent, 0 none).
    wall : float
        Wall time of the compiled loop (s).
    """

    status: str
    message: str
    t: np.ndarray
    E: np.ndarray
    power: np.ndarray
    slope2: np.ndarray
    speed2: np.ndarray
    G2: np.ndarray
    balance: dict[str, np.ndarray]
    x: np.ndarray
    trajectory: np.ndarray | None
    sign: int
    wall: float


def euler_path(x0: np.ndarray, heads: Heads, attn: Attention, *, dt: float, steps: int,
               flow: Literal["transformer", "surrogate"] = "transformer",
               m: np.ndarray | None = None, save_every: int = 0) -> EulerPath:
    """Explicit Euler ``x ← (x + dt v)/|x + dt v|`` for static heads in one compiled loop.

    The same trajectory, energies and running balances as
    ``simulate(x0, heads, attn, integrator="euler", record_every=1)`` (tested to 1e-12)
    for ``d ≤ 3``, without the per-step Python work: every step is one fused pass of
    :func:`wflow.kernels.particle_terms` (direct sums, pairs counted once for symmetric
    heads). Meant for the published multi-head experiments (small ``n``, many steps,
    ``E``, slope and balance at every step), where the per-step overhead of the general
    path dominates.

    Parameters
    ----------
    x0 : (n, d) array, ``d ≤ 3``
        Initial tokens on the unit sphere.
    heads : Heads
        Static heads.
    attn : Attention
    dt : float
        Time step (> 0).
    steps : int
        Number of steps ``S`` (≥ 1); ``T = S·dt``.
    flow : {"transformer", "surrogate"}
    m : (n,) array, optional
        Token masses (default uniform ``1/n``), summing to 1.
    save_every : int
        Keep the tokens every this many steps (0: only the final state).
    """
    from ..kernels import primitives

    if not isinstance(heads, Heads):
        raise TypeError(f"heads: euler_path needs static Heads, got {type(heads).__name__}")
    x0 = check_on_sphere(x0, name="tokens")
    n, d = x0.shape
    if d > 3 or d != heads.d:
        raise ValueError(f"tokens: euler_path needs d <= 3 matching the heads (d = {heads.d}), "
                         f"got d = {d}")
    if not (np.isfinite(dt) and dt > 0):
        raise ValueError(f"dt: must be a finite number > 0, got {dt!r}")
    if int(steps) != steps or steps < 1:
        raise ValueError(f"steps: must be an integer >= 1, got {steps!r}")
    if int(save_every) != save_every or save_every < 0:
        raise ValueError(f"save_every: must be an integer >= 0, got {save_every!r}")
    if flow not in ("transformer", "surrogate"):
        raise ValueError(f"flow: must be 'transformer' or 'surrogate', got {flow!r}")
    if m is None:
        m = np.full(n, 1.0 / n)
    m = np.ascontiguousarray(m, dtype=np.float64)
    if m.shape != (n,) or not np.all(np.isfinite(m)) or np.any(m < 0):
        raise ValueError(f"m: must be {n} finite non-negative masses")
    steps, save_every = int(steps), int(save_every)
    H = heads.H
    spec, beta = get_kind(attn.kind), float(attn.beta)
    kcode = spec.require_compiled("euler_path")
    if spec.exponential:  # unit tokens: |Q x| <= ||Q||_2 for every x on the sphere, every step
        raise_bound(beta * max(float(np.linalg.norm(heads.Q[h], 2) * np.linalg.norm(heads.K[h], 2))
                                for h in range(H)))
    A3, V3, sym = particle_heads3(heads.Q, heads.K, heads.V)
    xT = aligned_empty((3, n))  # see wflow.kernels.aligned_empty: reruns agree bit for bit
    xT[:] = 0.0
    xT[:d] = x0.T
    w = np.ascontiguousarray(heads.w, dtype=np.float64)
    out = np.full((5, steps + 1), np.nan)
    nsave = steps // save_every + 1 if save_every else 0
    saved = np.zeros((nsave, 3, n))
    once = pair_once(sym, n, H)
    t0 = time.perf_counter()
    with team(n * n * H * (1 if sym else 2)):
        done = primitives.euler_path(xT, A3, V3, w, w / w.sum(), aligned(m), beta, kcode,
                                     spec.normalised, sym, once, flow == "surrogate",
                                     float(dt), save_every, out, saved)
    wall = time.perf_counter() - t0
    sign = heads.value_alignment() if heads.is_symmetric() else 0
    status, message = Status.SUCCESS, ""
    if done < steps + 1:  # keep the finite records only (steps 0 .. done-1)
        status, message = Status.FAILED, f"non-finite energy or slope terms at step {done}"
        logger.error("euler_path: %s", message)
        out = out[:, :done]
        saved = saved[: (done - 1) // save_every + 1 if save_every and done else 0]
    E, power, slope2, speed2, G2 = out

    def cum(f: np.ndarray) -> np.ndarray:  # BalanceAccumulator's trapezoid, vectorised
        return np.concatenate([[0.0], np.cumsum(0.5 * dt * (f[1:] + f[:-1]))])[: f.size]

    dE = E - E[:1]
    balance = {"chain": dE - cum(power)}
    if sign:
        balance["edi"] = dE - sign * cum(0.5 * (speed2 + slope2))
        balance["g2"] = dE - sign * cum(G2)
    traj = np.ascontiguousarray(np.swapaxes(saved, 1, 2)[:, :, :d]) if save_every else None
    return EulerPath(status, message, dt * np.arange(E.size), E, power, slope2, speed2, G2,
                     balance, np.ascontiguousarray(xT[:d].T), traj, int(sign), wall)
