"""Memory of the fast summation's set-up between evaluations (:data:`_fastsum.PLAN_CACHE`).

Part of :mod:`wflow.kernels`. A time step evaluates the attention sums several times
(four stages of RK4, the recorded state); the recurrence tables depend on the degree
only, and :func:`wflow.kernels.plan_kernel` and the expansion plan each head on the same
points. :class:`PlanCache` keeps both, keyed by everything they depend on.
"""

from __future__ import annotations

from collections.abc import Callable

import numpy as np

__all__ = ["PlanCache"]


class PlanCache:
    """The set-up of the expansion that an evaluation would otherwise rebuild.

    * ``tables(L)``: the recurrence coefficients of degree ``L`` (``build_tables``:
      :func:`wflow.kernels._fastsum._build_tables`), a function of ``L`` alone; kept for
      every degree met (``O(L²)`` numbers each), returned as read-only arrays.
    * ``plan_head(u, β, tol, max_degree)``: centre, ``β R'`` and degree of one head
      (``build_plan``: :func:`wflow.kernels._fastsum.plan_head`), a function of the
      points ``u`` (``O(N)`` to build: the enclosing ball). The last :attr:`MAX_HEADS`
      plans are kept with a copy of their points, at most :attr:`MAX_BYTES` of points
      in all; a call hits only when ``β``, ``tol``, ``max_degree``, the shape, the dtype
      and every bit of ``u`` are equal (one ``O(N)`` comparison), so a hit returns what
      the computation would.

    ``enabled = False`` computes everything afresh (the benchmark's "before");
    ``hits`` and ``misses`` count the plan look-ups, ``builds`` the tables built.
    """

    MAX_HEADS = 16
    MAX_BYTES = 1 << 26

    def __init__(self, build_tables: Callable[[int], tuple],
                 build_plan: Callable[..., tuple]) -> None:
        self._build_tables = build_tables
        self._build_plan = build_plan
        self.enabled = True
        self.clear()

    def clear(self) -> None:
        """Forget every table and plan, reset the counters."""
        self._tables: dict[int, tuple] = {}
        self._plans: list[tuple[tuple, np.ndarray, tuple]] = []
        self.hits = self.misses = self.builds = 0

    def tables(self, L: int) -> tuple:
        """``(off, a, b, dmm, d1)`` of degree ``L``, built at the first call."""
        if not self.enabled:
            return self._build_tables(L)
        tab = self._tables.get(L)
        if tab is None:
            tab = self._build_tables(L)
            for arr in tab:
                arr.flags.writeable = False
            self._tables[L] = tab
            self.builds += 1
        return tab

    def plan_head(self, u: np.ndarray, beta: float, tol: float,
                  max_degree: int) -> tuple[np.ndarray, float, int | None]:
        """``(centre (3,), β R', L or None)`` of the points ``u`` (N, 3), remembered."""
        if not self.enabled:
            return self._build_plan(u, beta, tol, max_degree)
        u = np.asarray(u)
        key = (float(beta), float(tol), int(max_degree), u.shape, u.dtype.str)
        for i, (k, pts, val) in enumerate(self._plans):
            if k == key and np.array_equal(pts, u):
                self.hits += 1
                if i:
                    self._plans.insert(0, self._plans.pop(i))
                return val[0].copy(), val[1], val[2]
        self.misses += 1
        val = self._build_plan(u, beta, tol, max_degree)
        if u.nbytes <= self.MAX_BYTES:
            self._plans.insert(0, (key, u.copy(), (val[0].copy(), val[1], val[2])))
            kept, total = [], 0
            for entry in self._plans[: self.MAX_HEADS]:
                total += entry[1].nbytes
                if total > self.MAX_BYTES:
                    break
                kept.append(entry)
            self._plans = kept
        return val
