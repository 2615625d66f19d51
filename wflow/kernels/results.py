"""The kernel's results: the sums, the back-end that ran (:class:`KernelInfo`), plans, logs.

Part of :mod:`wflow.kernels` (the face re-exports the public names).
"""

from __future__ import annotations

import math
from dataclasses import asdict, dataclass, field
from typing import Any, NamedTuple

import numpy as np


@dataclass(frozen=True)
class KernelInfo:
    """How a :func:`kernel_sums` call was evaluated (for logs and ``summary.json``).

    Attributes
    ----------
    backend : str
        What ran: ``"numpy"``, ``"direct"``, ``"fastsum"``, or ``"fastsum+direct"``
        (some heads fell back to the direct sum).
    requested : str
        The ``backend`` argument.
    reason : str
        Why this back-end was chosen (and why heads fell back, if any).
    err_est : float
        Estimated relative error: ``max_i max(|ΔZ_i|, |ΔY_i|∞) / Z_i`` for the
        fast summation (a-posteriori bound), ``N · ε`` for direct sums (bound of
        float64 summation of positive terms).
    tol : float
        Requested tolerance of the fast summation.
    degree : tuple of int
        Truncation degree per head (``-1``: that head was summed directly).
    threads : int
        Threads used.
    triples : int
        ``M · N · H``.
    dtype : str
        Precision of the scores and kernel values (``"float64"`` or ``"float32"``; the
        sums are float64 in both).
    """

    backend: str
    requested: str
    reason: str
    err_est: float
    tol: float
    degree: tuple[int, ...] = ()
    threads: int = 1
    triples: int = 0
    dtype: str = "float64"

    def as_dict(self) -> dict[str, Any]:
        """Plain ``dict`` (JSON-ready with :func:`wflow.infra.io.to_jsonable`)."""
        return asdict(self)


@dataclass(frozen=True)
class KernelPlan:
    """The back-end :func:`kernel_sums` would use, and why (see :func:`plan_kernel`).

    Attributes
    ----------
    backend : str
        ``"numpy"``, ``"direct"`` or ``"fastsum"``.
    reason : str
    fast_heads : tuple of bool
        Heads to expand (``backend == "fastsum"``); the others are summed directly.
    degree : tuple of int
        Predicted truncation degree per head (``-1`` where not expanded).
    radius : tuple of float
        ``β R'`` per head (radius of the shifted source cloud ``A_h y_j``).
    cost_direct, cost_fast : float
        Model cost in core-seconds (``nan`` where not evaluated).
    """

    backend: str
    reason: str
    fast_heads: tuple[bool, ...] = ()
    degree: tuple[int, ...] = ()
    radius: tuple[float, ...] = ()
    cost_direct: float = math.nan
    cost_fast: float = math.nan


class _KernelSumsFields(NamedTuple):
    Z: np.ndarray
    Y: np.ndarray
    Phi: np.ndarray | None
    S: np.ndarray | None


class KernelSums(_KernelSumsFields):
    """Nonlocal sums for all heads and targets (see module docstring).

    A 4-tuple ``(Z, Y, Phi, S)``; ``.info`` (not a tuple field, so unpacking
    stays ``Z, Y, Phi, S = ...``) says how it was computed.

    Attributes
    ----------
    Z : (H, M) array
    Y : (H, M, d) array
        ``(H, M, r)`` with value factors of rank ``r`` (``values=``).
    Phi : (H, M) array or None
        Only when ``potential=True``; for exponential kernels it is ``Z``.
    S : (H, M) array or None
        Only when ``scores=True``.
    info : KernelInfo or None
    """

    info: KernelInfo | None = None

    def __new__(cls, Z, Y, Phi, S, info: KernelInfo | None = None):  # noqa: D102
        self = super().__new__(cls, Z, Y, Phi, S)
        if info is not None:
            self.info = info
        return self


@dataclass
class KernelLog:
    """Accumulates :class:`KernelInfo` of many calls (one solver run) for ``summary.json``.

    ``log.add(sums.info)`` after each call; :meth:`summary` gives the counts per
    back-end, the largest error estimate and the last reason.
    """

    counts: dict[str, int] = field(default_factory=dict)
    max_err_est: float = 0.0
    max_degree: int = -1
    last: KernelInfo | None = None

    def add(self, info: KernelInfo | None) -> None:
        """Record one call (``None`` is ignored)."""
        if info is None:
            return
        self.counts[info.backend] = self.counts.get(info.backend, 0) + 1
        self.max_err_est = max(self.max_err_est, float(info.err_est))
        if info.degree:
            self.max_degree = max(self.max_degree, max(info.degree))
        self.last = info

    def summary(self) -> dict[str, Any]:
        """``{"calls": {backend: n}, "max_err_est", "max_degree", "last": {...}}``."""
        return {
            "calls": dict(self.counts),
            "max_err_est": self.max_err_est,
            "max_degree": self.max_degree,
            "last": None if self.last is None else self.last.as_dict(),
        }
