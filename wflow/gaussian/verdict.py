"""The classifier's result: :class:`Classification` (label, limit, rate, blow-up time, reason).

JSON convention of the Gaussian package: a non-finite float (an infinite time, an
undefined rate) is written as ``null``, never as the strings ``"inf"``/``"nan"``
nor the non-standard tokens ``Infinity``/``NaN`` (:func:`json_safe`).
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from ..infra.io import to_jsonable
from .asymptotics import RateFit
from .riccati import Equilibrium, EquilibriumFamily

__all__ = ["LABELS", "Classification", "json_safe"]

#: Classifier labels, in plotting order.
LABELS = ("converges_to_zero", "converges", "blows_up", "depends_on_initial_data", "unbounded",
          "oscillates", "undetermined")

_EPS = np.finfo(np.float64).eps


def json_safe(obj: Any) -> Any:
    """``obj`` with arrays as lists and every non-finite float replaced by ``None`` (JSON null)."""
    return to_jsonable(obj, nonfinite="null")


def _rank(S: np.ndarray) -> int:
    lam = np.linalg.eigvalsh(0.5 * (S + S.T))
    top = float(np.max(np.abs(lam), initial=0.0))
    if top == 0.0:
        return 0
    # eigenvalues below the symmetric eigensolver's round-off (~ d ε λ_max) count as 0
    return int(np.sum(lam > 1e3 * S.shape[0] * _EPS * top))


@dataclass(frozen=True)
class Classification:
    """Long-time behaviour of the covariance for constant ``(A, b, V, B)``.

    Attributes
    ----------
    label : str
        One of :data:`LABELS`:

        * ``"converges_to_zero"``: ``Σ(t) → 0``; ``rate_kind`` says how
          (``‖Σ‖ ~ e^{−rate·t}`` or ``t^{−rate}``);
        * ``"converges"``: ``Σ(t) → limit ≠ 0`` (``limit``, ``limit_rank``;
          ``‖Σ − limit‖ ~ e^{−rate·t}`` or ``t^{−rate}``; ``rate_kind =
          "stationary"`` when Σ₀ is an equilibrium);
        * ``"blows_up"``: ``‖Σ‖ → ∞`` at the finite ``blowup_time``;
        * ``"depends_on_initial_data"``: (``scope == "all"``) some Σ₀ blow up or
          diverge, others converge;
        * ``"unbounded"``: no blow-up, ``‖Σ‖ ~ e^{rate·t}`` or ``t^{rate}``;
        * ``"oscillates"``: bounded, no limit (periodic or quasi-periodic);
        * ``"undetermined"``: the reason says what a longer horizon could settle.
    method : {"exact", "lyapunov", "probe"}
        ``exact``: decided by a closed form / exact invariant; ``lyapunov``: by a
        Lyapunov function, with the limit confirmed on an integration; ``probe``:
        read from integrations up to a horizon.
    reason : str
        What decided the label (structure, invariant, fitted law).
    limit : (d, d) array or None
        The limit covariance (``converges``; zeros for ``converges_to_zero``);
        None when it depends on Σ₀ and none was given, or when there is no limit.
    rate_kind : {"exponential", "algebraic", "stationary"} or None
    rate : float or None
        The rate from the structure (closed form, linearisation, invariant) when
        known, else the fitted one.
    blowup_time : float or None
        ``blows_up`` with a given Σ₀.
    scope : {"Sigma0", "all"}
        ``Sigma0``: the trajectory from the given Σ₀; ``all``: every full-rank Σ₀.
    equilibria : tuple of Equilibrium
        Isolated equilibria (``Σ = 0`` first).
    families : tuple of EquilibriumFamily
        Continua of equilibria (rank-deficient ``B``, neutral directions, ``A`` with
        a kernel).
    rate_fit : RateFit or None
        The law fitted on the tail of an integration up to the horizon (a check
        of ``rate`` for exact verdicts; the evidence for probe verdicts).
    details : dict
        Rule-specific data (eigen-structure, invariants, self-similar profile, probe runs).
    """

    label: str
    method: str
    reason: str
    limit: np.ndarray | None = None
    rate_kind: str | None = None
    rate: float | None = None
    blowup_time: float | None = None
    scope: str = "all"
    equilibria: tuple[Equilibrium, ...] = ()
    families: tuple[EquilibriumFamily, ...] = ()
    rate_fit: RateFit | None = None
    details: dict[str, Any] = field(default_factory=dict)

    def __post_init__(self) -> None:
        if self.label not in LABELS:
            raise ValueError(f"Classification.label: {self.label!r} is not one of {LABELS}")

    @property
    def limit_rank(self) -> int | None:
        """Rank of the limit (None without a limit)."""
        return None if self.limit is None else _rank(self.limit)

    def summary_line(self) -> str:
        """One line for a terminal: label, method, rate or time, limit rank."""
        parts = [f"{self.label} ({self.method})"]
        if self.blowup_time is not None and math.isfinite(self.blowup_time):
            parts.append(f"t* = {self.blowup_time:.9g}")
        if self.rate_kind == "exponential" and self.rate is not None:
            sgn = "" if self.label == "unbounded" else "−"
            parts.append(f"~ e^({sgn}{self.rate:.6g} t)")
        elif self.rate_kind == "algebraic" and self.rate is not None:
            sgn = "" if self.label == "unbounded" else "−"
            parts.append(f"~ t^({sgn}{self.rate:.6g})")
        elif self.rate_kind == "stationary":
            parts.append("stationary")
        if self.label == "converges" and self.limit is not None:
            parts.append(f"limit of rank {self.limit_rank}")
        return ", ".join(parts)

    def to_dict(self) -> dict[str, Any]:
        """JSON-friendly summary (non-finite numbers become None)."""
        return json_safe({
            "label": self.label,
            "method": self.method,
            "scope": self.scope,
            "reason": self.reason,
            "limit": None if self.limit is None else self.limit.tolist(),
            "limit_rank": self.limit_rank,
            "rate_kind": self.rate_kind,
            "rate": self.rate,
            "blowup_time": self.blowup_time,
            "rate_fit": None if self.rate_fit is None else self.rate_fit.to_dict(),
            "equilibria": [e.to_dict() for e in self.equilibria],
            "families": [f.to_dict() for f in self.families],
            "details": self.details,
        })
