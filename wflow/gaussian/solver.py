"""Gaussian transformer dynamics in ``R^d``: moment ODE, blow-up, closed forms (docs/theory.md §7).

Model (self-attention + affine feed-forward, tokens in ``R^d``, no normalisation)::

    ẋ = A x + b + V ∫ y e^{<Bx, y>} dμ(y) / ∫ e^{<Bx, y>} dμ(y).

For ``μ = N(m, Σ)`` the attention output is the tilted mean ``m + Σ B x``, the
velocity is affine in ``x`` and Gaussians stay Gaussian::

    ṁ = (A + V) m + V Σ B m + b,
    Σ̇ = A Σ + Σ Aᵀ + V Σ B Σ + Σ Bᵀ Σ Vᵀ = M Σ + Σ Mᵀ,   M = A + V Σ B.

The covariance equation is a differential Riccati equation. Because it
factorises as ``Σ̇ = MΣ + ΣMᵀ``, a factor ``L`` (``d × r``, ``Σ = L Lᵀ``) that
solves ``L̇ = M L`` gives the exact solution ``Σ(t) = Φ(t) Σ₀ Φ(t)ᵀ`` with
``Φ̇ = MΦ`` invertible. :func:`integrate_moments` integrates ``(m, L)``: Σ is
symmetric positive semi-definite by construction and its rank ``r`` is
invariant (docs/theory.md §7), also for rank-deficient ``Σ₀``.

Blow-up. With ``V = vI`` the substitution ``P = Σ^{-1}`` linearises the
equation (Bernoulli): ``Ṗ = −AᵀP − PA − C`` with ``C = v(B + Bᵀ)``, whence the
closed form (any ``A``, any rank of ``Σ₀ = L₀L₀ᵀ``)::

    Σ(t) = e^{At} L₀ (I_r − L₀ᵀ G(t) L₀)^{-1} L₀ᵀ e^{Aᵀt},
    G(t) = ∫_0^t e^{Aᵀs} C e^{As} ds,

which blows up at the first ``t*`` with ``λ_max(L₀ᵀ G(t*) L₀) = 1``
(:func:`riccati_closed_form`, :func:`blowup_time_closed_form`). Scalar case
(``d = 1``, ``A = a``, ``c = 2vb``): ``σ̇ = 2aσ + cσ²`` blows up at
``t* = ln(1 + 2a/(cσ₀)) / (2a)`` (``= 1/(2vbσ₀)`` for ``a = 0``); isotropic
case ``A = aI, V = vI, B = bI``: the same with ``σ₀ = λ_max(Σ₀)``
(:func:`blowup_time_scalar`, :func:`blowup_time_isotropic`).

The integrator stops with ``status="blowup"`` when ``tr Σ`` crosses
``blowup_factor · max(tr Σ₀, 1)`` and extrapolates the blow-up time from the
Riccati asymptotics ``λ_max(Σ) ≈ κ/(t* − t)``: ``t* ≈ t + λ_max/λ̇_max`` (exact
for the scalar and isotropic cases).

Parameters may depend on time (depth): :class:`ConstantParams`,
:class:`CallableParams` (any ``t ↦ (A, b, V, B)``), :class:`LayerParams`
(piecewise constant, layer ``ℓ`` on ``[ℓΔ, (ℓ+1)Δ)``).

Units: time is depth (continuous layer index); all matrices are dimensionless.
"""

from __future__ import annotations

import logging
import math
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import numpy as np
import scipy.integrate
import scipy.linalg
import scipy.optimize

from ..results import SolverResult
from ..status import Status
from .moments import (
    _IMPLICIT,
    MAX_TRACE,
    RICCATI_SIGNATURE,
    _lmax_and_rate,
    _moment_jacobian,
    _pack,
    psd_factor,
)
from .params import GaussianParams, LayerParams, as_param_path

__all__ = [
    "GaussianTrajectory",
    "integrate_moments",
]

logger = logging.getLogger(__name__)

_EPS = np.finfo(np.float64).eps


@dataclass(frozen=True)
class GaussianTrajectory(SolverResult):
    """Solution of the moment ODE (the fields of :class:`~wflow.results.SolverResult`, and).

    Attributes
    ----------
    status : Status
        ``COMPLETED`` (``"completed"``: the final time reached), ``BLOWUP``
        (``"blowup"``: stopped at the covariance blow-up event) or ``FAILED``.
    message : str
    options : dict
        The integration settings (``T``, ``method``, ``rtol``, ``atol``,
        ``blowup_factor``, ``max_step``).
    history : dict
        ``{"m": m, "Sigma": Sigma}`` (the same arrays as the attributes).
    checks : dict
        Empty: the moment ODE has no a-posteriori accuracy check (``solve_ivp``'s
        tolerances control the error).
    stats : dict
        ``{"nfev": nfev}``.
    engine : str
        ``"scipy"`` (:func:`scipy.integrate.solve_ivp`); ``order`` is ``None``
        (adaptive, tolerance-controlled).
    t : (n_t,) array
        Output times: the requested ones up to the stop time, plus the stop time itself on
        a blow-up event or a failure.
    m : (n_t, d) array
    Sigma : (n_t, d, d) array
        Symmetric PSD, rank ``rank`` at every time.
    rank : int
        ``rank Σ₀`` (invariant).
    blowup_time : float or None
        Extrapolated blow-up time ``t*`` (``status == "blowup"``).
    event_time : float or None
        Time at which ``tr Σ`` crossed the threshold.
    threshold : float
        The blow-up threshold on ``tr Σ``.
    nfev : int
        Right-hand-side evaluations.
    """

    t: np.ndarray
    m: np.ndarray
    Sigma: np.ndarray
    rank: int
    blowup_time: float | None
    event_time: float | None
    threshold: float
    nfev: int

    @property
    def final_m(self) -> np.ndarray:
        """Mean at the stop time."""
        return self.m[-1]

    @property
    def final_Sigma(self) -> np.ndarray:
        """Covariance at the stop time."""
        return self.Sigma[-1]

    def to_dict(self) -> dict[str, Any]:
        """Summary (final moments, status, blow-up) for JSON."""
        return {
            "status": self.status,
            "message": self.message,
            "t_final": float(self.t[-1]),
            "rank": self.rank,
            "blowup_time": self.blowup_time,
            "event_time": self.event_time,
            "blowup_threshold_trace": self.threshold,
            "final_m": self.final_m.tolist(),
            "final_Sigma": self.final_Sigma.tolist(),
            "final_eigenvalues": np.linalg.eigvalsh(self.final_Sigma).tolist(),
            "n_times": int(self.t.size),
            "nfev": self.nfev,
        }


def integrate_moments(
    params: Any,
    m0: np.ndarray,
    Sigma0: np.ndarray,
    T: float,
    *,
    t_eval: np.ndarray | None = None,
    n_out: int = 201,
    method: str = "Radau",
    rtol: float = 1e-9,
    atol: float = 1e-12,
    blowup_factor: float = 1e8,
    max_step: float = np.inf,
    quiet: bool = False,
) -> GaussianTrajectory:
    """Integrate the moment ODE from ``N(m₀, Σ₀)`` over ``[0, T]``.

    The state is ``(m, L)`` with ``Σ = L Lᵀ``, ``L`` of shape ``(d, r)``,
    ``r = rank Σ₀``, and ``L̇ = (A + VΣB) L`` (exact: ``Σ̇ = MΣ + ΣMᵀ``), so Σ
    stays symmetric PSD of rank ``r``. Integration uses
    :func:`scipy.integrate.solve_ivp` (implicit ``Radau`` by default: safe
    for stiff schedules and near blow-up) and restarts at schedule jumps.

    Parameters
    ----------
    params : GaussianParams, schedule or callable ``t -> (A, b, V, B)``
    m0 : (d,) array
    Sigma0 : (d, d) array, symmetric PSD (any rank)
    T : float
        Final time ``> 0``.
    t_eval : (n,) array, optional
        Output times in ``[0, T]`` (default ``n_out`` equispaced points).
    method : str
        ``solve_ivp`` method (``"Radau"``, ``"BDF"``, ``"LSODA"``, ``"DOP853"``, ...).
    rtol, atol : float
        Tolerances of ``solve_ivp``.
    blowup_factor : float
        Stop (``status="blowup"``) when ``tr Σ >= blowup_factor · max(tr Σ₀, 1)``.
    max_step : float
        Largest step of the integrator.
    quiet : bool
        Do not log a failure (for callers that read ``status`` themselves).

    Returns
    -------
    GaussianTrajectory
        ``status="failed"`` (with ``message``, logged as a warning unless ``quiet``) when
        the integrator fails. A threshold
        crossing counts as a blow-up only with the Riccati signature
        ``λ̇/λ > RICCATI_SIGNATURE · 2‖A‖₂``; otherwise (exponential growth) the threshold
        is raised by ``blowup_factor`` and the integration continues (up to
        ``tr Σ = MAX_TRACE``).
    """
    m0 = np.asarray(m0, dtype=np.float64)
    d = m0.shape[0] if m0.ndim == 1 else -1
    if m0.ndim != 1:
        raise ValueError(f"m0: expected a vector, got shape {m0.shape}")
    if not np.all(np.isfinite(m0)):
        raise ValueError("m0: contains NaN or Inf")
    sched = as_param_path(params, d)
    if sched.d != d:
        raise ValueError(f"m0: length {d} does not match the parameter dimension {sched.d}")
    Sigma0 = np.asarray(Sigma0, dtype=np.float64)
    if Sigma0.shape != (d, d):
        raise ValueError(f"Sigma0: expected shape ({d}, {d}), got {Sigma0.shape}")
    L0 = psd_factor(Sigma0, name="Sigma0")
    r = L0.shape[1]
    if not (math.isfinite(T) and T > 0):
        raise ValueError(f"T: must be finite and > 0, got {T}")
    if not (blowup_factor > 1):
        raise ValueError(f"blowup_factor: must be > 1, got {blowup_factor}")
    if t_eval is None:
        if int(n_out) < 2:
            raise ValueError(f"n_out: must be >= 2, got {n_out}")
        t_eval = np.linspace(0.0, T, int(n_out))
    t_eval = np.asarray(t_eval, dtype=np.float64)
    if t_eval.ndim != 1 or t_eval.size < 1 or np.any(np.diff(t_eval) <= 0):
        raise ValueError("t_eval: must be a strictly increasing 1-d array")
    if t_eval[0] < 0 or t_eval[-1] > T * (1 + 1e-12):
        raise ValueError(f"t_eval: must lie in [0, T={T}]")
    threshold = float(blowup_factor) * max(float(np.trace(Sigma0)), 1.0)
    threshold_now = threshold
    log_thr = math.log(threshold)

    def unpack(y: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        return y[:d], y[d:].reshape(d, r)

    nfev = 0

    def make_rhs(p_fn: Callable[[float], GaussianParams]):
        def rhs(t: float, y: np.ndarray) -> np.ndarray:
            nonlocal nfev
            nfev += 1
            p = p_fn(t)
            m, L = unpack(y)
            S = L @ L.T
            VSB = p.V @ S @ p.B
            Mx = p.A + VSB
            dm = Mx @ m + p.V @ m + p.b
            return _pack(dm, Mx @ L)
        return rhs

    def make_jac(p_fn: Callable[[float], GaussianParams]):
        def jac(t: float, y: np.ndarray) -> np.ndarray:
            return _moment_jacobian(p_fn(t), y[:d], y[d:].reshape(d, r))
        return jac

    def event(t: float, y: np.ndarray) -> float:
        tr = float(np.sum(y[d:] ** 2))
        return math.log(max(tr, 1e-300)) - log_thr

    event.terminal = True  # type: ignore[attr-defined]
    event.direction = 1.0  # type: ignore[attr-defined]

    cuts = [0.0, *sched.breakpoints(0.0, T), float(T)]
    ts: list[float] = []
    ys: list[np.ndarray] = []
    y = _pack(m0, L0)
    if t_eval[0] == 0.0:
        ts.append(0.0)
        ys.append(y.copy())
    status, message = Status.COMPLETED, "reached the final time"
    event_time: float | None = None
    blowup_time: float | None = None
    seg, a = 0, 0.0
    t_start = time.perf_counter()
    # trial stages of an implicit method may overflow near a blow-up: let solve_ivp reject
    # them (step-size control) instead of raising; the result is checked for finiteness below
    with np.errstate(all="ignore"):
        while seg < len(cuts) - 1:
            bnd = cuts[seg + 1]
            if sched.is_constant or isinstance(sched, LayerParams):
                const = sched.at(0.5 * (cuts[seg] + bnd))
                p_fn = (lambda t, _c=const: _c)  # noqa: E731
            else:
                p_fn = sched.at
            te = t_eval[(t_eval > a) & (t_eval <= bnd)]
            if te.size == 0 or te[-1] < bnd:
                te = np.append(te, bnd)  # always land on the segment end
            try:
                sol = scipy.integrate.solve_ivp(
                    make_rhs(p_fn), (a, bnd), y, method=method, t_eval=te, events=event,
                    rtol=rtol, atol=atol, max_step=max_step,
                    **({"jac": make_jac(p_fn)} if method in _IMPLICIT else {}))
            except FloatingPointError as exc:
                status, message = Status.FAILED, f"floating-point error in the parameters: {exc}"
                break
            sol_t = np.asarray(sol.t, dtype=np.float64).reshape(-1)  # [] if no output point
            sol_y = np.asarray(sol.y, dtype=np.float64).reshape(y.size, sol_t.size)
            keep = np.isin(sol_t, t_eval)
            ts.extend(sol_t[keep].tolist())
            ys.extend(sol_y[:, keep].T)
            if sol.status == 1:  # tr Σ crossed the threshold
                te_ = float(sol.t_events[0][0])
                ye = np.asarray(sol.y_events[0][0], dtype=np.float64)
                pe = p_fn(te_)
                me, Le = unpack(ye)
                lam, rate = _lmax_and_rate(pe, me, Le @ Le.T)
                # Riccati signature: the growth rate λ̇/λ dwarfs what the linear part can
                # give (2‖A‖₂); exponential growth is re-armed with a higher threshold
                lin = 2.0 * float(np.linalg.norm(pe.A, 2)) + _EPS
                if rate > 0 and rate / lam > RICCATI_SIGNATURE * lin:
                    event_time = te_
                    blowup_time = float(te_ + lam / rate)
                    ts.append(te_)
                    ys.append(ye)
                    status = Status.BLOWUP
                    message = (f"covariance blow-up: tr Σ reached {threshold_now:.3g} at "
                               f"t = {te_:.9g}; extrapolated blow-up time t* = {blowup_time:.9g}")
                    logger.info(message)
                    break
                if threshold_now * blowup_factor > MAX_TRACE:
                    status = Status.FAILED
                    message = (f"tr Σ exceeded {threshold_now:.3g} at t = {te_:.6g} without the "
                               "Riccati blow-up signature (exponential growth beyond range)")
                    ts.append(te_)
                    ys.append(ye)
                    break
                threshold_now *= blowup_factor
                log_thr = math.log(threshold_now)
                a, y = te_, ye
                continue
            if sol.status != 0:
                status, message = Status.FAILED, f"solve_ivp ({method}) failed: {sol.message}"
                if sol_t.size and not keep[-1]:
                    ts.append(float(sol_t[-1]))
                    ys.append(sol_y[:, -1])
                break
            y = sol_y[:, -1]  # segment end (an output time or not): continue from it
            seg, a = seg + 1, bnd
    t_arr = np.asarray(ts)
    Y = np.asarray(ys).reshape(len(ts), d + d * r)
    m_arr = Y[:, :d]
    L_arr = Y[:, d:].reshape(len(ts), d, r)
    S_arr = np.einsum("tik,tjk->tij", L_arr, L_arr)
    S_arr = 0.5 * (S_arr + np.swapaxes(S_arr, 1, 2))
    if status == Status.FAILED and not quiet:
        logger.warning("integrate_moments: %s", message)
    if t_arr.size == 0:
        raise ValueError("integrate_moments: no output time was reached")
    if not (np.all(np.isfinite(m_arr)) and np.all(np.isfinite(S_arr))):
        raise FloatingPointError("integrate_moments: non-finite moments (NaN/Inf)")
    options = {"T": float(T), "method": method, "rtol": rtol, "atol": atol,
               "blowup_factor": blowup_factor, "max_step": max_step}
    return GaussianTrajectory(t=t_arr, m=m_arr, Sigma=S_arr, rank=r, status=status,
                              blowup_time=blowup_time, event_time=event_time,
                              threshold=threshold, message=message, nfev=nfev,
                              options=options, history={"m": m_arr, "Sigma": S_arr},
                              stats={"nfev": nfev}, engine="scipy", order=None,
                              wall_time=time.perf_counter() - t_start)
