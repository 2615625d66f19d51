"""Long-time rates from a sampled tail: exponential ``e^{−rt}`` or algebraic ``t^{−p}``.

A positive quantity ``q(t)`` (``‖Σ(t)‖``, ``‖Σ(t) − Σ∞‖`` or ``‖Σ̇(t)‖``) is read
on the tail of its time series, in ``n_windows`` consecutive windows:

* *algebraic* windows are equal in ``log t``; in each the least-squares slope of
  ``ln q`` against ``ln t`` is a local exponent ``−p_k``;
* *exponential* windows are equal in ``t`` (over the last half of the span); in
  each the slope of ``ln q`` against ``t`` is a local rate ``−r_k``.

A law is *settled* when its local values agree to ``rtol`` (relative spread
``(max − min)/|median|``) over windows on which ``q`` moved (at least
``min_efolds`` e-folds, or ``min_decades`` decades of ``t``: over a short tail
any smooth ``q`` looks exponential). The two laws exclude each other on a long enough
tail: for ``q = e^{−rt}`` the local exponents ``p = rt`` grow with ``t``, for
``q = t^{−p}`` the local rates ``r = p/t`` shrink; so a law that is settled
while the other is not is the verdict, and a tail on which neither (or both)
settles gives no verdict, with the local values as the reason (a longer
horizon lets them settle).

Samples below ``floor`` (the integrator's noise level) are cut off: the tail
ends at the first sample that falls below it.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Any

import numpy as np

__all__ = ["RateFit", "fit_tail_rate", "sample_times"]


@dataclass(frozen=True)
class RateFit:
    """Rate of ``q(t) → 0`` (or growth) read from the tail of a time series.

    Attributes
    ----------
    kind : {"exponential", "algebraic", "constant"} or None
        ``None``: no law settled on the tail (see ``reason``).
    rate : float or None
        ``q ~ e^{−rate·t}`` (exponential) or ``q ~ t^{−rate}`` (algebraic);
        negative for growth.
    local : dict
        Local values per window: ``{"exponential": [...], "algebraic": [...]}``.
    t_range : (float, float)
        The time span used.
    reason : str
    """

    kind: str | None
    rate: float | None
    local: dict[str, list[float]] = field(default_factory=dict)
    t_range: tuple[float, float] = (math.nan, math.nan)
    reason: str = ""

    @property
    def settled(self) -> bool:
        """A law (exponential, algebraic or constant) settled on the tail."""
        return self.kind is not None

    def to_dict(self) -> dict[str, Any]:
        """JSON-friendly summary."""
        return {"kind": self.kind, "rate": self.rate, "local": self.local,
                "t_range": list(self.t_range), "reason": self.reason}


def sample_times(horizon: float, *, per_decade: int = 24, decades: float = 6.0,
                 n_linear: int = 121) -> np.ndarray:
    """Output times for a tail analysis.

    Geometric over ``decades`` decades below ``horizon`` (``per_decade`` points per
    decade), merged with ``n_linear`` equispaced points on ``[0, horizon]``.
    """
    T = float(horizon)
    n_geo = max(int(per_decade * decades), 2)
    geo = np.geomspace(T * 10.0 ** (-decades), T, n_geo)
    lin = np.linspace(0.0, T, int(n_linear))
    t = np.unique(np.concatenate([[0.0], geo, lin]))
    t[-1] = T
    return t


def _window_slopes(x: np.ndarray, y: np.ndarray, edges: np.ndarray) -> list[float] | None:
    out = []
    for lo, hi in zip(edges[:-1], edges[1:], strict=True):
        sel = (x >= lo) & (x <= hi)
        if np.count_nonzero(sel) < 3:
            return None
        xs, ys = x[sel], y[sel]
        xm = xs - xs.mean()
        den = float(np.dot(xm, xm))
        if den <= 0:
            return None
        out.append(float(np.dot(xm, ys - ys.mean()) / den))
    return out


def _spread(v: list[float]) -> float:
    med = float(np.median(v))
    if med == 0.0:
        return math.inf
    return (max(v) - min(v)) / abs(med)


def fit_tail_rate(t: np.ndarray, q: np.ndarray, *, floor: float = 0.0, rtol: float = 0.05,
                  n_windows: int = 3, decade_width: float = 0.5, min_efolds: float = 3.0,
                  min_decades: float = 1.0) -> RateFit:
    """Exponential or algebraic law of ``q(t)`` on its tail (module docstring).

    Parameters
    ----------
    t : (n,) array
        Increasing times.
    q : (n,) array
        Positive quantity.
    floor : float
        Noise level: the tail ends before the first sample ``q <= floor``.
    rtol : float
        Relative spread of the local values that counts as settled.
    n_windows : int
        Number of windows compared (``>= 2``).
    decade_width : float
        Width of an algebraic window in decades (shrunk when the tail is shorter).
    min_efolds, min_decades : float
        Least change over the windows for a verdict: ``rate · Δt`` e-folds
        (exponential) or decades of ``t`` (algebraic).

    Returns
    -------
    RateFit
    """
    t = np.asarray(t, dtype=np.float64)
    q = np.asarray(q, dtype=np.float64)
    ok = (t > 0) & np.isfinite(q) & (q > 0)
    bad = np.flatnonzero((t > 0) & ~(np.isfinite(q) & (q > floor)))
    end = int(bad[0]) if bad.size else t.size
    sel = ok.copy()
    sel[end:] = False
    tv, qv = t[sel], q[sel]
    if tv.size < 3 * n_windows:
        return RateFit(None, None, reason=f"only {tv.size} samples above the noise floor "
                                          f"{floor:.3g}")
    lq = np.log(qv)
    t_hi, t_lo = float(tv[-1]), float(tv[0])
    local: dict[str, list[float]] = {}
    # constant: q changes by less than rtol over the whole tail half
    half = tv >= 0.5 * (t_lo + t_hi)
    if np.count_nonzero(half) >= 3 and float(np.ptp(lq[half])) <= rtol * 1e-2:
        return RateFit("constant", 0.0, local, (float(tv[half][0]), t_hi),
                       "q is constant on the tail")
    # algebraic windows: equal in log t
    dec = math.log10(t_hi / t_lo)
    w = min(decade_width, dec / (n_windows + 1))
    spans: dict[str, tuple[float, float]] = {}
    if w >= 0.05:
        edges = t_hi * 10.0 ** (-w * np.arange(n_windows, -1, -1))
        alg = _window_slopes(np.log(tv), lq, np.log(edges))
        if alg is not None:
            local["algebraic"] = [-s for s in alg]
            spans["algebraic"] = (float(edges[0]), t_hi)
    # exponential windows: equal in t over the last half of the span
    edges = np.linspace(0.5 * (t_lo + t_hi), t_hi, n_windows + 1)
    ex = _window_slopes(tv, lq, edges)
    if ex is not None:
        local["exponential"] = [-s for s in ex]
        spans["exponential"] = (float(edges[0]), t_hi)
    cands = []
    for kind in ("algebraic", "exponential"):
        v = local.get(kind)
        if v is not None and _spread(v) <= rtol:
            cands.append((_spread(v), kind))
    t_range = (t_lo, t_hi)
    if not cands:
        desc = "; ".join(f"{k} {np.round(v, 4).tolist()}" for k, v in local.items())
        return RateFit(None, None, local, t_range,
                       f"no exponential or power law settled on t in [{t_lo:.3g}, {t_hi:.3g}] "
                       f"(local values: {desc or 'too few samples per window'})")
    _, kind = min(cands)
    rate = float(local[kind][-1])
    lo, hi = spans[kind]
    # a law is only read off a tail on which q moved: min_efolds e-folds (exponential) or
    # min_decades decades of t (algebraic); a short horizon otherwise mimics any law
    moved = (abs(rate) * (hi - lo) >= min_efolds if kind == "exponential"
             else math.log10(hi / lo) >= min_decades)
    if not moved:
        span = (f"{abs(rate) * (hi - lo):.3g} e-folds" if kind == "exponential"
                else f"{math.log10(hi / lo):.3g} decades")
        return RateFit(None, None, local, t_range,
                       f"the tail t in [{lo:.3g}, {hi:.3g}] spans only {span} of a {kind} law "
                       f"(local values {np.round(local[kind], 6).tolist()}): too short to tell")
    return RateFit(kind, rate, local, spans[kind],
                   f"{kind} law settled on t in [{lo:.3g}, {hi:.3g}] "
                   f"(local values {np.round(local[kind], 6).tolist()})")
