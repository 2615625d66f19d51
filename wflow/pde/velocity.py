"""Velocity models of the PDE: the nonlocal transformer / surrogate velocity, or a prescribed one.

The nonlocal velocity at the edge quadrature points comes from the same
:func:`wflow.energy.evaluate` and :func:`wflow.kernels.kernel_sums` as the particle
engine, with the cells' projected centroids carrying their masses as sources; a
prescribed field ``v(x, t)`` (:func:`rotation_velocity`) is used by the transport tests.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable
from typing import Any

import numpy as np

from ..attention.heads import Attention
from ..attention.schedules import Schedule
from ..energy import evaluate
from ..kernels import KernelLog, plan_kernel
from .fv import _FV

__all__ = [
    "VelocityField",
    "global_backend",
    "rotation_velocity",
]

logger = logging.getLogger(__name__)


VelocityField = Callable[[np.ndarray, float], np.ndarray]


def rotation_velocity(omega: np.ndarray | tuple[float, float, float]) -> VelocityField:
    """Rigid rotation ``v(x) = ω × x`` (tangent and divergence-free on S²)."""
    w = np.asarray(omega, dtype=np.float64)
    if w.shape != (3,):
        raise ValueError(f"omega: expected a 3-vector, got shape {w.shape}")

    def v(x: np.ndarray, t: float) -> np.ndarray:
        return np.cross(np.broadcast_to(w, x.shape), x)

    return v


class _Nonlocal:
    """Transformer / surrogate velocity from the heads of a schedule."""

    def __init__(self, schedule: Schedule, attn: Attention, flow: str, backend: str = "auto",
                 tol: float = 1e-10) -> None:
        self.schedule = schedule
        self.attn = attn
        self.flow = flow
        self.backend = backend
        self.tol = tol
        self.log = KernelLog()
        self.n_evals = 0
        self.eval_time = 0.0

    def __call__(self, x: np.ndarray, t: float, theta: np.ndarray, chat: np.ndarray,
                 m_glob: np.ndarray) -> np.ndarray:
        t0 = time.perf_counter()
        fe = evaluate(x, self.schedule.heads_at(theta), self.attn, y=chat, m=m_glob,
                      backend=self.backend, tol=self.tol, log=self.log)
        self.n_evals += 1
        self.eval_time += time.perf_counter() - t0
        return fe.v if self.flow == "transformer" else fe.vhat


class _Prescribed:
    def __init__(self, fn: VelocityField) -> None:
        self.fn = fn
        self.n_evals = 0
        self.eval_time = 0.0

    def __call__(self, x: np.ndarray, t: float, theta: Any, chat: np.ndarray,
                 m_glob: np.ndarray) -> np.ndarray:
        t0 = time.perf_counter()
        v = np.asarray(self.fn(x, t), dtype=np.float64)
        if v.shape != x.shape:
            raise ValueError(f"velocity: expected shape {x.shape}, got {v.shape}")
        self.n_evals += 1
        self.eval_time += time.perf_counter() - t0
        return v


def global_backend(fv: _FV, schedule: Schedule, attn: Attention, tol: float) -> str:
    """Resolve ``auto`` once from the global problem (rank 0 plans, every rank follows).

    The plan depends on the targets (all edge quadrature points), the sources (the cell
    centroids, fixed) and the initial heads; taking it from the global problem keeps
    serial and parallel runs on the same back-end. The planned back-end is used as is:
    direct or fast summation for a kind with compiled code, NumPy for one without.
    """
    q_all = fv.comm.gather(fv.qhat, root=0)
    choice = None
    if fv.comm.rank == 0:
        heads = schedule.heads_at(schedule.initial_theta())
        plan = plan_kernel(np.concatenate(q_all), fv.chat_glob, heads.Q, heads.K,
                           beta=attn.beta, kind=attn.kind, tol=tol)
        choice = plan.backend  # as planned: a kind without compiled code stays on NumPy
        logger.info("pde: kernel back-end %s (%s)", choice, plan.reason)
    return fv.comm.bcast(choice, root=0)
