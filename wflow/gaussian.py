"""Gaussian transformer dynamics in ``R^d``: the moment ODE, blow-up, closed forms (THEORY.md §7).

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
invariant (THEORY.md §7), also for rank-deficient ``Σ₀``.

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

Parameters may depend on time (depth): :class:`ConstantSchedule`,
:class:`CallableSchedule` (any ``t ↦ (A, b, V, B)``), :class:`LayerSchedule`
(piecewise constant, layer ``ℓ`` on ``[ℓΔ, (ℓ+1)Δ)``).

Units: time is depth (continuous layer index); all matrices are dimensionless.
"""

from __future__ import annotations

import logging
import math
import warnings
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any, Protocol, runtime_checkable

import numpy as np
import scipy.integrate
import scipy.linalg

from .kernels import kernel_sums

__all__ = [
    "GaussianParams",
    "ParamSchedule",
    "ConstantSchedule",
    "CallableSchedule",
    "LayerSchedule",
    "as_schedule",
    "GaussianTrajectory",
    "moment_rhs",
    "psd_factor",
    "integrate_moments",
    "riccati_closed_form",
    "blowup_time_closed_form",
    "blowup_time_scalar",
    "blowup_time_isotropic",
    "bures_wasserstein_distance",
    "bures_map",
    "particle_velocity",
    "ParticleRun",
    "simulate_particles",
    "empirical_moments",
]

logger = logging.getLogger(__name__)

_EPS = np.finfo(np.float64).eps


# ---------------------------------------------------------------------------------------------
# parameters and schedules
# ---------------------------------------------------------------------------------------------


def _as_matrix(value: Any, d: int, name: str) -> np.ndarray:
    """A ``(d, d)`` float array; a scalar ``s`` means ``s I``."""
    arr = np.asarray(value, dtype=np.float64)
    if arr.ndim == 0:
        arr = float(arr) * np.eye(d)
    if arr.shape != (d, d):
        raise ValueError(f"{name}: expected a scalar or a ({d}, {d}) matrix, got shape {arr.shape}")
    if not np.all(np.isfinite(arr)):
        raise ValueError(f"{name}: contains NaN or Inf")
    return arr


def _as_vector(value: Any, d: int, name: str) -> np.ndarray:
    """A ``(d,)`` float array; the scalar ``0`` means the zero vector."""
    arr = np.asarray(value, dtype=np.float64)
    if arr.ndim == 0:
        if float(arr) != 0.0:
            raise ValueError(f"{name}: a scalar is only accepted for the zero vector, got {arr}")
        arr = np.zeros(d)
    if arr.shape != (d,):
        raise ValueError(f"{name}: expected a vector of length {d}, got shape {arr.shape}")
    if not np.all(np.isfinite(arr)):
        raise ValueError(f"{name}: contains NaN or Inf")
    return arr


def _frozen(a: np.ndarray) -> np.ndarray:
    a = np.array(a, dtype=np.float64, copy=True)
    a.setflags(write=False)
    return a


@dataclass(frozen=True)
class GaussianParams:
    """Parameters ``(A, b, V, B)`` of ``ẋ = Ax + b + V·attention_B[μ](x)`` (read-only arrays).

    Attributes
    ----------
    A : (d, d) array
        Linear feed-forward part.
    b : (d,) array
        Bias.
    V : (d, d) array
        Value matrix.
    B : (d, d) array
        Score matrix: the score is ``<B x, y>``.
    """

    A: np.ndarray
    b: np.ndarray
    V: np.ndarray
    B: np.ndarray

    def __post_init__(self) -> None:
        A = np.asarray(self.A, dtype=np.float64)
        if A.ndim != 2 or A.shape[0] != A.shape[1]:
            raise ValueError(f"A: expected a square (d, d) matrix, got shape {A.shape}")
        d = A.shape[0]
        object.__setattr__(self, "A", _frozen(_as_matrix(A, d, "A")))
        object.__setattr__(self, "b", _frozen(_as_vector(self.b, d, "b")))
        object.__setattr__(self, "V", _frozen(_as_matrix(self.V, d, "V")))
        object.__setattr__(self, "B", _frozen(_as_matrix(self.B, d, "B")))

    @classmethod
    def make(cls, d: int, *, A: Any = 0.0, b: Any = 0.0, V: Any = 0.0, B: Any = 0.0
             ) -> GaussianParams:
        """Build from scalars (``s`` means ``s I``; ``b`` scalar only ``0``) or arrays."""
        if int(d) < 1:
            raise ValueError(f"d: must be >= 1, got {d}")
        d = int(d)
        return cls(_as_matrix(A, d, "A"), _as_vector(b, d, "b"), _as_matrix(V, d, "V"),
                   _as_matrix(B, d, "B"))

    @property
    def d(self) -> int:
        """Dimension of the token space."""
        return int(self.A.shape[0])

    def replace(self, **changes: Any) -> GaussianParams:
        """A copy with some of ``A, b, V, B`` replaced (scalars allowed as in :meth:`make`)."""
        kw = {k: getattr(self, k) for k in ("A", "b", "V", "B")}
        for k, v in changes.items():
            if k not in kw:
                raise ValueError(f"GaussianParams.replace: unknown parameter {k!r}")
            kw[k] = v
        return GaussianParams.make(self.d, **kw)

    def to_dict(self) -> dict[str, Any]:
        """Plain lists, for JSON."""
        return {k: getattr(self, k).tolist() for k in ("A", "b", "V", "B")}


@runtime_checkable
class ParamSchedule(Protocol):
    """Time-dependent parameters ``t ↦ (A, b, V, B)(t)``."""

    d: int
    is_constant: bool

    def at(self, t: float) -> GaussianParams:
        """Parameters at time ``t``."""
        ...

    def breakpoints(self, t0: float, t1: float) -> list[float]:
        """Times in ``(t0, t1)`` where the parameters jump (the integrator restarts there)."""
        ...


@dataclass(frozen=True)
class ConstantSchedule:
    """Constant parameters."""

    params: GaussianParams
    is_constant: bool = field(default=True, init=False)

    @property
    def d(self) -> int:  # noqa: D102
        return self.params.d

    def at(self, t: float) -> GaussianParams:  # noqa: D102
        return self.params

    def breakpoints(self, t0: float, t1: float) -> list[float]:  # noqa: D102
        return []


@dataclass(frozen=True)
class CallableSchedule:
    """Parameters from a user callable ``fn(t) -> GaussianParams | (A, b, V, B)``.

    The callable must be smooth between the listed ``jumps`` (times where it may
    be discontinuous; the integrator restarts there).
    """

    fn: Callable[[float], Any]
    d: int
    jumps: tuple[float, ...] = ()
    is_constant: bool = field(default=False, init=False)

    def at(self, t: float) -> GaussianParams:  # noqa: D102
        out = self.fn(float(t))
        if isinstance(out, GaussianParams):
            p = out
        else:
            try:
                A, b, V, B = out
            except (TypeError, ValueError) as exc:
                raise ValueError(
                    "CallableSchedule: fn(t) must return GaussianParams or a tuple (A, b, V, B)"
                ) from exc
            p = GaussianParams.make(self.d, A=A, b=b, V=V, B=B)
        if p.d != self.d:
            raise ValueError(f"CallableSchedule: fn({t}) returned dimension {p.d}, "
                             f"expected {self.d}")
        return p

    def breakpoints(self, t0: float, t1: float) -> list[float]:  # noqa: D102
        return sorted(float(s) for s in self.jumps if t0 < s < t1)


@dataclass(frozen=True)
class LayerSchedule:
    """Piecewise-constant parameters: layer ``ℓ`` acts on ``[t_ℓ, t_{ℓ+1})``.

    Parameters
    ----------
    layers : sequence of GaussianParams
        One parameter set per layer.
    durations : float or sequence of float
        Layer durations ``Δ_ℓ > 0`` (a float: all equal).
    t0 : float
        Start time of layer 0.

    Before ``t0`` the first and after the last boundary the last layer holds.
    """

    layers: tuple[GaussianParams, ...]
    durations: tuple[float, ...]
    t0: float = 0.0
    is_constant: bool = field(default=False, init=False)

    def __init__(self, layers: Sequence[GaussianParams], durations: float | Sequence[float],
                 t0: float = 0.0) -> None:
        layers = tuple(layers)
        if not layers:
            raise ValueError("LayerSchedule.layers: at least one layer is required")
        d = layers[0].d
        for i, p in enumerate(layers):
            if not isinstance(p, GaussianParams):
                raise ValueError(f"LayerSchedule.layers[{i}]: expected GaussianParams")
            if p.d != d:
                raise ValueError(f"LayerSchedule.layers[{i}]: dimension {p.d} != {d}")
        if np.ndim(durations) == 0:
            durations = [float(durations)] * len(layers)
        durations = tuple(float(x) for x in durations)
        if len(durations) != len(layers):
            raise ValueError(f"LayerSchedule.durations: {len(durations)} values for "
                             f"{len(layers)} layers")
        if not all(math.isfinite(x) and x > 0 for x in durations):
            raise ValueError(f"LayerSchedule.durations: must be finite and > 0, got {durations}")
        object.__setattr__(self, "layers", layers)
        object.__setattr__(self, "durations", durations)
        object.__setattr__(self, "t0", float(t0))
        object.__setattr__(self, "is_constant", False)

    @property
    def d(self) -> int:  # noqa: D102
        return self.layers[0].d

    @property
    def edges(self) -> np.ndarray:
        """Layer boundaries ``t_0 < t_1 < ... < t_L``."""
        return self.t0 + np.concatenate([[0.0], np.cumsum(self.durations)])

    @property
    def total_time(self) -> float:
        """Depth of the stack ``Σ_ℓ Δ_ℓ``."""
        return float(sum(self.durations))

    def at(self, t: float) -> GaussianParams:  # noqa: D102
        i = int(np.searchsorted(self.edges, t, side="right")) - 1
        return self.layers[min(max(i, 0), len(self.layers) - 1)]

    def breakpoints(self, t0: float, t1: float) -> list[float]:  # noqa: D102
        return [float(s) for s in self.edges[1:-1] if t0 < s < t1]


def as_schedule(obj: Any, d: int | None = None) -> ParamSchedule:
    """Accept GaussianParams, a schedule, or a callable ``t -> (A, b, V, B)`` (needs ``d``)."""
    if isinstance(obj, GaussianParams):
        return ConstantSchedule(obj)
    if isinstance(obj, (ConstantSchedule, CallableSchedule, LayerSchedule)):
        return obj
    if callable(obj):
        if d is None:
            raise ValueError("as_schedule: a callable schedule needs the dimension d")
        return CallableSchedule(obj, int(d))
    if isinstance(obj, ParamSchedule):
        return obj
    raise ValueError(f"params: expected GaussianParams, a schedule or a callable, got {type(obj)}")


# ---------------------------------------------------------------------------------------------
# moment ODE
# ---------------------------------------------------------------------------------------------


def moment_rhs(params: GaussianParams, m: np.ndarray, Sigma: np.ndarray
               ) -> tuple[np.ndarray, np.ndarray]:
    """Right-hand side of the moment ODE (THEORY.md §7).

    ``ṁ = (A + V) m + V Σ B m + b``, ``Σ̇ = AΣ + ΣAᵀ + VΣBΣ + ΣBᵀΣVᵀ``.

    Parameters
    ----------
    params : GaussianParams
    m : (d,) array
    Sigma : (d, d) array

    Returns
    -------
    dm : (d,) array
    dSigma : (d, d) array (symmetric)
    """
    A, b, V, B = params.A, params.b, params.V, params.B
    VSB = V @ Sigma @ B
    dm = (A + V) @ m + VSB @ m + b
    M = A @ Sigma + VSB @ Sigma
    return dm, M + M.T


def psd_factor(Sigma: np.ndarray, *, name: str = "Sigma", rtol: float | None = None
               ) -> np.ndarray:
    """A factor ``L`` (``d × r``, full column rank) with ``L Lᵀ = Σ`` for a PSD matrix.

    The rank ``r`` counts eigenvalues above ``rtol · λ_max`` (default
    ``100 d ε``, round-off of a symmetric eigensolver); eigenvalues below
    ``−rtol · λ_max`` make ``Σ`` not PSD and raise ``ValueError`` naming ``name``.
    """
    S = np.asarray(Sigma, dtype=np.float64)
    if S.ndim != 2 or S.shape[0] != S.shape[1]:
        raise ValueError(f"{name}: expected a square matrix, got shape {S.shape}")
    if not np.all(np.isfinite(S)):
        raise ValueError(f"{name}: contains NaN or Inf")
    d = S.shape[0]
    asym = np.max(np.abs(S - S.T)) if d else 0.0
    scale = max(np.max(np.abs(S)) if d else 0.0, np.finfo(np.float64).tiny)
    if asym > 1e3 * _EPS * scale:
        raise ValueError(f"{name}: not symmetric (max |S - Sᵀ| = {asym:.3g})")
    S = 0.5 * (S + S.T)
    lam, U = np.linalg.eigh(S)
    tol = (100 * d * _EPS if rtol is None else rtol) * max(float(np.max(np.abs(lam), initial=0.0)),
                                                          np.finfo(np.float64).tiny)
    if lam.size and lam[0] < -tol:
        raise ValueError(f"{name}: not positive semi-definite (smallest eigenvalue {lam[0]:.3g})")
    keep = lam > tol
    return U[:, keep] * np.sqrt(lam[keep])


def _lmax_and_rate(params: GaussianParams, m: np.ndarray, Sigma: np.ndarray
                   ) -> tuple[float, float]:
    """``λ_max(Σ)`` and ``λ̇_max = uᵀ Σ̇ u`` (Hellmann–Feynman, simple top eigenvalue)."""
    lam, U = np.linalg.eigh(Sigma)
    u = U[:, -1]
    _, dS = moment_rhs(params, m, Sigma)
    return float(lam[-1]), float(u @ dS @ u)


#: A threshold crossing counts as a blow-up when ``λ̇/λ > RICCATI_SIGNATURE · 2‖A‖₂``
#: (near a Riccati blow-up ``λ̇/λ ≈ 1/(t* − t)`` is huge; linear growth is bounded by 2‖A‖₂).
RICCATI_SIGNATURE = 1e3
#: Largest ``tr Σ`` followed when the growth is not a blow-up (exponential growth).
MAX_TRACE = 1e200

#: solve_ivp methods that use a Jacobian (we pass the analytic one).
_IMPLICIT = ("Radau", "BDF", "LSODA")


def _moment_jacobian(p: GaussianParams, m: np.ndarray, L: np.ndarray) -> np.ndarray:
    """Jacobian of ``(m, L) ↦ (Mm + Vm + b, ML)``, ``M = A + V L Lᵀ B`` (row-major ``vec L``).

    ``∂(ML)[H] = MH + V H (LᵀBL) + (VL) Hᵀ (BL)``,
    ``∂ṁ[H] = V H (LᵀBm) + (VL) Hᵀ (Bm)``, ``∂ṁ/∂m = M + V``.
    """
    d, r = L.shape
    W = p.V @ L  # (d, r)
    Z = p.B @ L  # (d, r)
    M = p.A + W @ (L.T @ p.B)
    J = np.zeros((d + d * r, d + d * r))
    J[:d, :d] = M + p.V
    if r:
        Bm = p.B @ m
        J[:d, d:] = (np.einsum("ib,a->iba", p.V, L.T @ Bm)
                     + np.einsum("ia,b->iba", W, Bm)).reshape(d, d * r)
        J[d:, d:] = (np.kron(M, np.eye(r)) + np.kron(p.V, (L.T @ Z).T)
                     + np.einsum("ia,bk->ikba", W, Z).reshape(d * r, d * r))
    return J


@dataclass(frozen=True)
class GaussianTrajectory:
    """Solution of the moment ODE.

    Attributes
    ----------
    t : (n_t,) array
        Output times: the requested ones up to the stop time, plus the stop time itself on
        a blow-up event or a failure.
    m : (n_t, d) array
    Sigma : (n_t, d, d) array
        Symmetric PSD, rank ``rank`` at every time.
    rank : int
        ``rank Σ₀`` (invariant).
    status : {"completed", "blowup", "failed"}
    blowup_time : float or None
        Extrapolated blow-up time ``t*`` (``status == "blowup"``).
    event_time : float or None
        Time at which ``tr Σ`` crossed the threshold.
    threshold : float
        The blow-up threshold on ``tr Σ``.
    message : str
    nfev : int
        Right-hand-side evaluations.
    """

    t: np.ndarray
    m: np.ndarray
    Sigma: np.ndarray
    rank: int
    status: str
    blowup_time: float | None
    event_time: float | None
    threshold: float
    message: str
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


def _pack(m: np.ndarray, L: np.ndarray) -> np.ndarray:
    return np.concatenate([m, L.ravel()])


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

    Returns
    -------
    GaussianTrajectory
        ``status="failed"`` (with a warning) when the integrator fails. A threshold
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
    sched = as_schedule(params, d)
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
    status, message = "completed", "reached the final time"
    event_time: float | None = None
    blowup_time: float | None = None
    seg, a = 0, 0.0
    # trial stages of an implicit method may overflow near a blow-up: let solve_ivp reject
    # them (step-size control) instead of raising; the result is checked for finiteness below
    with np.errstate(all="ignore"):
        while seg < len(cuts) - 1:
            bnd = cuts[seg + 1]
            if sched.is_constant or isinstance(sched, LayerSchedule):
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
                status, message = "failed", f"floating-point error in the parameters: {exc}"
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
                    status = "blowup"
                    message = (f"covariance blow-up: tr Σ reached {threshold_now:.3g} at "
                               f"t = {te_:.9g}; extrapolated blow-up time t* = {blowup_time:.9g}")
                    logger.info(message)
                    break
                if threshold_now * blowup_factor > MAX_TRACE:
                    status = "failed"
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
                status, message = "failed", f"solve_ivp ({method}) failed: {sol.message}"
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
    if status == "failed":
        warnings.warn(f"integrate_moments: {message}", RuntimeWarning, stacklevel=2)
    if t_arr.size == 0:
        raise ValueError("integrate_moments: no output time was reached")
    if not (np.all(np.isfinite(m_arr)) and np.all(np.isfinite(S_arr))):
        raise FloatingPointError("integrate_moments: non-finite moments (NaN/Inf)")
    return GaussianTrajectory(t=t_arr, m=m_arr, Sigma=S_arr, rank=r, status=status,
                              blowup_time=blowup_time, event_time=event_time,
                              threshold=threshold, message=message, nfev=nfev)


# ---------------------------------------------------------------------------------------------
# closed forms (V = vI)
# ---------------------------------------------------------------------------------------------


def _scalar_value(V: np.ndarray, *, rtol: float = 1e-12) -> float | None:
    """``v`` if ``V = vI`` (to ``rtol``), else None."""
    d = V.shape[0]
    v = float(np.trace(V)) / d
    if np.max(np.abs(V - v * np.eye(d))) <= rtol * max(abs(v), np.max(np.abs(V)), 1e-300):
        return v
    return None


def _gramian(A: np.ndarray, C: np.ndarray, t: float) -> tuple[np.ndarray, np.ndarray]:
    """``(G(t), e^{At})`` with ``G(t) = ∫_0^t e^{Aᵀs} C e^{As} ds`` (Van Loan block exponential)."""
    d = A.shape[0]
    blk = np.zeros((2 * d, 2 * d))
    blk[:d, :d] = -A.T
    blk[:d, d:] = C
    blk[d:, d:] = A
    E = scipy.linalg.expm(blk * t)
    eAt = E[d:, d:]
    G = eAt.T @ E[:d, d:]
    return 0.5 * (G + G.T), eAt


def _require_scalar_V(params: GaussianParams) -> float:
    v = _scalar_value(params.V)
    if v is None:
        raise ValueError("V: the closed form needs V = vI (a multiple of the identity)")
    return v


def riccati_closed_form(params: GaussianParams, Sigma0: np.ndarray, t: np.ndarray | float
                        ) -> np.ndarray:
    """Exact covariance for ``V = vI`` (Bernoulli substitution, module docstring).

    ``Σ(t) = e^{At} L₀ (I_r − L₀ᵀ G(t) L₀)^{-1} L₀ᵀ e^{Aᵀt}`` with
    ``G(t) = ∫_0^t e^{Aᵀs} v(B + Bᵀ) e^{As} ds`` and ``Σ₀ = L₀L₀ᵀ``.

    Parameters
    ----------
    params : GaussianParams with ``V = vI``
    Sigma0 : (d, d) array, PSD (any rank)
    t : float or (n,) array, each before the blow-up time

    Returns
    -------
    (d, d) or (n, d, d) array

    Raises
    ------
    ValueError
        If ``V`` is not a multiple of the identity, or some ``t`` is at/after blow-up.
    """
    v = _require_scalar_V(params)
    C = v * (params.B + params.B.T)
    L0 = psd_factor(Sigma0, name="Sigma0")
    ts = np.atleast_1d(np.asarray(t, dtype=np.float64))
    out = np.empty((ts.size, params.d, params.d))
    r = L0.shape[1]
    for i, tt in enumerate(ts):
        G, eAt = _gramian(params.A, C, float(tt))
        K = np.eye(r) - L0.T @ G @ L0
        if r and np.linalg.eigvalsh(K)[0] <= 0:
            raise ValueError(f"t: {tt} is at or after the blow-up time")
        X = eAt @ L0
        S = X @ np.linalg.solve(K, X.T) if r else np.zeros((params.d, params.d))
        out[i] = 0.5 * (S + S.T)
    return out[0] if np.ndim(t) == 0 else out


def blowup_time_closed_form(params: GaussianParams, Sigma0: np.ndarray, *, t_max: float,
                            n_grid: int = 400) -> float:
    """Blow-up time for ``V = vI``: the first ``t`` with ``λ_max(L₀ᵀ G(t) L₀) = 1``.

    Scans ``[0, t_max]`` on ``n_grid`` points and refines the first crossing
    with Brent's method (to ``4ε t``). Returns ``inf`` if there is none up to
    ``t_max`` (the function ``λ_max(L₀ᵀGL₀)`` can be non-monotone, hence the scan).
    """
    v = _require_scalar_V(params)
    C = v * (params.B + params.B.T)
    L0 = psd_factor(Sigma0, name="Sigma0")
    if L0.shape[1] == 0:
        return math.inf

    def h(t: float) -> float:
        G, _ = _gramian(params.A, C, t)
        return float(np.linalg.eigvalsh(L0.T @ G @ L0)[-1]) - 1.0

    # scan with the semigroup recursion G(t + δ) = G(t) + e^{Aᵀt} G(δ) e^{At}
    # (one matrix exponential), then bracket and refine with direct evaluations
    grid = np.linspace(0.0, float(t_max), int(n_grid))
    dt = float(grid[1] - grid[0])
    Gd, Ed = _gramian(params.A, C, dt)
    G = np.zeros_like(Gd)
    E = np.eye(params.d)
    for k in range(1, grid.size):
        G = G + E.T @ Gd @ E
        E = E @ Ed
        if float(np.linalg.eigvalsh(L0.T @ G @ L0)[-1]) >= 1.0:
            lo, hi = max(k - 2, 0), min(k + 1, grid.size - 1)
            while lo > 0 and h(float(grid[lo])) >= 0:
                lo -= 1
            while hi < grid.size - 1 and h(float(grid[hi])) < 0:
                hi += 1
            if h(float(grid[hi])) < 0:
                return math.inf
            import scipy.optimize

            return float(scipy.optimize.brentq(h, float(grid[lo]), float(grid[hi]), xtol=1e-15,
                                               rtol=4 * _EPS))
    return math.inf


def blowup_time_scalar(a: float, v: float, b: float, sigma0: float) -> float:
    """Blow-up time of ``σ̇ = 2aσ + 2vbσ²`` from ``σ₀ > 0`` (``inf`` if none).

    With ``c = 2vb``: ``t* = ln(1 + 2a/(cσ₀)) / (2a)``, and ``t* = 1/(cσ₀)`` for
    ``a = 0`` (THEORY.md §7: ``1/(2vbσ₀)``). Blow-up happens iff ``c > 0`` and
    ``2a + cσ₀ > 0``.
    """
    c = 2.0 * v * b
    if sigma0 <= 0 or c <= 0 or 2 * a + c * sigma0 <= 0:
        return math.inf
    x = 2.0 * a / (c * sigma0)
    if abs(x) < 1e-8:  # series of log1p(x)/x: avoids 0/0 at a = 0
        return (1.0 - x / 2 + x * x / 3) / (c * sigma0)
    return math.log1p(x) / (2.0 * a)


def blowup_time_isotropic(a: float, v: float, b: float, Sigma0: np.ndarray) -> float:
    """Blow-up time for ``A = aI, V = vI, B = bI``: the scalar time with ``σ₀ = λ_max(Σ₀)``.

    For ``a = 0`` this is ``t* = 1/(2vb λ_max(Σ₀))`` (THEORY.md §7): every
    eigenvalue of Σ follows the scalar Riccati equation.
    """
    lam = float(np.linalg.eigvalsh(np.asarray(Sigma0, dtype=np.float64))[-1])
    return blowup_time_scalar(a, v, b, lam)


# ---------------------------------------------------------------------------------------------
# Bures–Wasserstein
# ---------------------------------------------------------------------------------------------


def _sqrtm_psd(S: np.ndarray) -> np.ndarray:
    lam, U = np.linalg.eigh(0.5 * (S + S.T))
    return (U * np.sqrt(np.clip(lam, 0.0, None))) @ U.T


def bures_wasserstein_distance(m0: np.ndarray, S0: np.ndarray, m1: np.ndarray, S1: np.ndarray
                               ) -> float:
    """``W2(N(m₀, Σ₀), N(m₁, Σ₁))`` for PSD covariances of any rank.

    ``W2² = |m₀ − m₁|² + tr Σ₀ + tr Σ₁ − 2 tr (Σ₀^{1/2} Σ₁ Σ₀^{1/2})^{1/2}``.
    Eigenvalues are clipped at 0 so that rank-deficient inputs are safe (POT's
    ``ot.gaussian.bures_wasserstein_distance`` takes square roots of round-off
    negative eigenvalues); for full-rank inputs both agree (tested).
    """
    m0, m1 = np.asarray(m0, dtype=np.float64), np.asarray(m1, dtype=np.float64)
    S0, S1 = np.asarray(S0, dtype=np.float64), np.asarray(S1, dtype=np.float64)
    R0 = _sqrtm_psd(S0)
    cross = np.linalg.eigvalsh(0.5 * (R0 @ S1 @ R0 + (R0 @ S1 @ R0).T))
    b2 = np.trace(S0) + np.trace(S1) - 2.0 * np.sum(np.sqrt(np.clip(cross, 0.0, None)))
    return float(math.sqrt(max(float(np.sum((m0 - m1) ** 2)) + b2, 0.0)))


def bures_map(S0: np.ndarray, S1: np.ndarray) -> np.ndarray:
    """SPD optimal-transport (Bures) map ``G = Σ₀^{-1/2}(Σ₀^{1/2}Σ₁Σ₀^{1/2})^{1/2}Σ₀^{-1/2}``.

    The unique SPD matrix with ``G Σ₀ G = Σ₁`` (``Σ₀, Σ₁`` positive definite).
    Computed with POT (``ot.gaussian.bures_wasserstein_mapping``) and checked.
    """
    import ot

    S0 = np.asarray(S0, dtype=np.float64)
    S1 = np.asarray(S1, dtype=np.float64)
    for name, S in (("Sigma0", S0), ("Sigma1", S1)):
        if psd_factor(S, name=name).shape[1] != S.shape[0]:
            raise ValueError(f"{name}: the SPD Bures map needs a positive definite covariance")
    d = S0.shape[0]
    G, _ = ot.gaussian.bures_wasserstein_mapping(np.zeros(d), np.zeros(d), S0, S1)
    G = 0.5 * (np.asarray(G) + np.asarray(G).T)
    return G


# ---------------------------------------------------------------------------------------------
# particles (the Euclidean n-particle system)
# ---------------------------------------------------------------------------------------------


def particle_velocity(x: np.ndarray, params: GaussianParams) -> np.ndarray:
    """``v_i = A x_i + b + V Σ_j softmax_j(<B x_i, x_j>) x_j`` for the empirical measure.

    The attention sum is :func:`wflow.kernels.kernel_sums` with ``Q = B``,
    ``K = I``, ``β = 1`` (score ``<Bx_i, x_j>``), masses ``1/n``.

    Parameters
    ----------
    x : (n, d) array
    params : GaussianParams

    Returns
    -------
    (n, d) array
    """
    n, d = x.shape
    ks = kernel_sums(x, x, np.full(n, 1.0 / n), params.B[None], np.eye(d)[None], beta=1.0,
                     kind="softmax")
    att = ks.Y[0] / ks.Z[0][:, None]
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


def simulate_particles(params: Any, x0: np.ndarray, T: float, *, steps: int) -> ParticleRun:
    """Integrate ``ẋ_i = A x_i + b + V Σ_j softmax_j(<Bx_i, x_j>) x_j`` with classical RK4.

    RK4 (order 4) with ``steps`` uniform steps; layer jumps of a
    :class:`LayerSchedule` should fall on step boundaries for full order.
    """
    x = np.array(x0, dtype=np.float64)
    if x.ndim != 2:
        raise ValueError(f"x0: expected shape (n, d), got {x.shape}")
    sched = as_schedule(params, x.shape[1])
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
        k1 = particle_velocity(x, p0)
        k2 = particle_velocity(x + 0.5 * h * k1, ph)
        k3 = particle_velocity(x + 0.5 * h * k2, ph)
        k4 = particle_velocity(x + h * k3, p1)
        x = x + (h / 6.0) * (k1 + 2 * k2 + 2 * k3 + k4)
        m, S = empirical_moments(x)
        ms.append(m)
        Ss.append(S)
    if not np.all(np.isfinite(x)):
        raise FloatingPointError("simulate_particles: non-finite particle positions")
    return ParticleRun(t=ts, m=np.asarray(ms), Sigma=np.asarray(Ss), x=x)
