"""The published cases (value matrices, integrator settings) and the options of the reproduction.

Part of :mod:`wflow.published.castin_ranks` (the package re-exports its names).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Literal

PAPER = ("Castin, Ablin, Carrillo, Peyré, A unified perspective on the dynamics of deep "
         "transformers; code vcastin/2025-transformers-PDEs, histograms.py (traditional "
         "self-attention) + utils.py")
CLAIM = ("the covariance of the softmax moment ODE converges to a low-rank matrix: rank of "
         "the limit <= ceil(d/2) for every draw (K = -Q, Q in R^{floor(d/2) x d})")


@dataclass(frozen=True)
class RankCase:
    """One published panel row: value matrix and integrator settings per dimension."""

    name: str
    value: Literal["identity", "random"]
    steps: tuple[float, ...]
    tol: float
    max_iter: int
    n_max_factor: int | None  # n_max = factor * n_per_dim; None: the published 1000


#: The two rows of ``histograms_trad.pdf`` (h 20-35 and 38-61).
CASES: dict[str, RankCase] = {
    "identity": RankCase("identity", "identity", (0.09, 0.05, 0.02), 1e-4, 60000, None),
    "random": RankCase("random", "random", (0.09, 0.06, 0.02), 5e-5, 90000, 100),
}


@dataclass(frozen=True)
class RankOptions:
    """Settings of :func:`run_ranks` (defaults: the published full scale).

    Parameters
    ----------
    dims : tuple of int
        Dimensions (published 3, 4, 5).
    n_per_dim : int
        Converged draws per dimension (published 100); also sizes the ``Q`` and ``V``
        lists as published (``np.repeat(dims, n_per_dim)``).
    cases : tuple of str
        Keys of :data:`CASES`.
    max_iter : int, optional
        Override the published step limits (quick mode only; changes the numbers).
    exact : bool
        Also run wflow's solver (:func:`exact_limit`) on every attempt.
    seed_q, seed_v, seed_init : int
        Published 40, 26, 41.
    tol_rank : float
        Published 0.1.
    lanes : int
        ``0`` (default): the published loop, one attempt after the other
        (:func:`projected_euler`). ``L > 0``: the batched speculative engine
        (:class:`_Speculator`) on ``L`` lanes, the same numbers; fast where its guesses
        hold (attempts that all fail alike), but at the published scale it integrated
        several times the published loop's steps (the random-``V`` outcomes are hard to
        guess) and was slower than the trimmed scalar loop.
    """

    dims: tuple[int, ...] = (3, 4, 5)
    n_per_dim: int = 100
    cases: tuple[str, ...] = ("identity", "random")
    max_iter: int | None = None
    exact: bool = True
    seed_q: int = 40
    seed_v: int = 26
    seed_init: int = 41
    tol_rank: float = 0.1
    lanes: int = 0

    def __post_init__(self) -> None:
        if self.lanes < 0:
            raise ValueError("castin_ranks: lanes >= 0 required")
        if self.n_per_dim < 1 or not self.dims or min(self.dims) < 2:
            raise ValueError("castin_ranks: n_per_dim >= 1 and dims >= 2 required")
        bad = [c for c in self.cases if c not in CASES]
        if bad:
            raise ValueError(f"castin_ranks: unknown cases {bad}; known {list(CASES)}")

    @classmethod
    def quick(cls, **changes: Any) -> RankOptions:
        """Seconds: the ``V = I`` row, 3 draws per dimension, published settings.

        The random-``V`` row needs ~2·10⁶ projected-Euler steps even for 3 draws.
        """
        base: dict[str, Any] = {"n_per_dim": 3, "cases": ("identity",)}
        base.update(changes)
        return cls(**base)
