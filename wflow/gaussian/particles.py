"""The Euclidean n-particle system whose mean-field limit is the moment ODE (docs/theory.md §7).

``ẋ_i = A x_i + b + V Σ_j softmax_j(<B x_i, x_j>) x_j``; the Gaussian moment ODE
(:mod:`wflow.gaussian.solver`) is its mean-field limit for Gaussian data.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import numpy as np

from ..kernels import kernel_sums
from .params import GaussianParams, as_param_path

__all__ = [
    "particle_velocity",
    "empirical_moments",
    "ParticleRun",
    "simulate_particles",
]


def particle_velocity(x: np.ndarray, params: GaussianParams, *,
                      normalised: bool = True) -> np.ndarray:
    """``v_i = A x_i + b + V Σ_j softmax_j(<B x_i, x_j>) x_j`` for the empirical measure.

    The attention sum is :func:`wflow.kernels.kernel_sums` with ``Q = B``,
    ``K = I``, ``β = 1`` (score ``<Bx_i, x_j>``), masses ``1/n``.

    Parameters
    ----------
    x : (n, d) array
    params : GaussianParams
    normalised : bool
        ``False``: the attention without the softmax's ``1/Z``,
        ``V (1/n) Σ_j e^{<B x_i, x_j>} x_j`` (the negative control of a dropped mobility).

    Returns
    -------
    (n, d) array
    """
    n, d = x.shape
    ks = kernel_sums(x, x, np.full(n, 1.0 / n), params.B[None], np.eye(d)[None], beta=1.0,
                     kind="softmax")
    att = ks.Y[0] / ks.Z[0][:, None] if normalised else ks.Y[0]
    return x @ params.A.T + params.b + att @ params.V.T


def empirical_moments(x: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Empirical mean and (biased, ``1/n``) covariance of particles ``x`` (n, d)."""
    m = x.mean(axis=0)
    xc = x - m
    return m, xc.T @ xc / x.shape[0]


@dataclass(frozen=True)
class ParticleRun:
    """Particles integrated with RK4.

    Attributes
    ----------
    t : (n_steps + 1,) array
    m : (n_steps + 1, d) array
        Empirical means.
    Sigma : (n_steps + 1, d, d) array
        Empirical covariances (``1/n``).
    x : (n, d) array
        Final positions.
    """

    t: np.ndarray
    m: np.ndarray
    Sigma: np.ndarray
    x: np.ndarray


def simulate_particles(params: Any, x0: np.ndarray, T: float, *, steps: int,
                       normalised: bool = True) -> ParticleRun:
    """Integrate ``ẋ_i = A x_i + b + V Σ_j softmax_j(<Bx_i, x_j>) x_j`` with classical RK4.

    RK4 (order 4) with ``steps`` uniform steps; layer jumps of a
    :class:`LayerParams` should fall on step boundaries for full order. ``normalised``:
    as in :func:`particle_velocity` (``False`` only for a negative control).
    """
    x = np.array(x0, dtype=np.float64)
    if x.ndim != 2:
        raise ValueError(f"x0: expected shape (n, d), got {x.shape}")
    sched = as_param_path(params, x.shape[1])
    if sched.d != x.shape[1]:
        raise ValueError(f"x0: dimension {x.shape[1]} does not match the parameters ({sched.d})")
    if int(steps) < 1:
        raise ValueError(f"steps: must be >= 1, got {steps}")
    h = float(T) / int(steps)
    ts = np.linspace(0.0, float(T), int(steps) + 1)
    ms, Ss = [], []
    m, S = empirical_moments(x)
    ms.append(m)
    Ss.append(S)
    for k in range(int(steps)):
        t = ts[k]
        # evaluate a piecewise-constant schedule inside the step (jumps on step boundaries)
        p0 = sched.at(t + 1e-9 * h) if not sched.is_constant else sched.at(t)
        ph = sched.at(t + 0.5 * h)
        p1 = sched.at(t + h - 1e-9 * h) if not sched.is_constant else sched.at(t + h)
        k1 = particle_velocity(x, p0, normalised=normalised)
        k2 = particle_velocity(x + 0.5 * h * k1, ph, normalised=normalised)
        k3 = particle_velocity(x + 0.5 * h * k2, ph, normalised=normalised)
        k4 = particle_velocity(x + h * k3, p1, normalised=normalised)
        x = x + (h / 6.0) * (k1 + 2 * k2 + 2 * k3 + k4)
        m, S = empirical_moments(x)
        ms.append(m)
        Ss.append(S)
    if not np.all(np.isfinite(x)):
        raise FloatingPointError("simulate_particles: non-finite particle positions")
    return ParticleRun(t=ts, m=np.asarray(ms), Sigma=np.asarray(Ss), x=x)
