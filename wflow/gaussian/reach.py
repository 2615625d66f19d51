"""Exact finite-time reachability of Gaussian targets by time-varying controls (docs/theory.md §7).

Given ``N(m₀, Σ₀)``, a target ``N(m₁, Σ₁)`` with ``rank Σ₁ = rank Σ₀`` and a
horizon ``T``, we build feed-forward controls ``A(t), b(t)`` (the attention
``V, B`` are given and kept) that steer the moment ODE exactly:

1. A *planned* path driven by a piecewise-constant generator ``L(t)`` and drift
   ``c(t)``: ``Σ̇ = LΣ + ΣLᵀ``, ``ṁ = Lm + c``, so on a phase of length ``τ``
   ``Σ ↦ e^{τL} Σ e^{τLᵀ}`` and ``m ↦ e^{τL} m + φ_L(τ) c`` with
   ``φ_L(τ) = ∫_0^τ e^{sL} ds``.

   * Same range (in particular full rank): one phase with ``L = log(G)/T``, ``G``
     the SPD Bures/OT map ``G Σ₀ G = Σ₁`` restricted to the common range
     (POT's ``ot.gaussian.bures_wasserstein_mapping``), and constant ``c``
     solving ``φ_L(T) c = m₁ − G m₀``.
   * Different ranges of the same rank: first a rotation ``R = e^{Ω}`` (``Ω``
     skew, built from the principal angles between the ranges) on ``[0, T/2]``
     maps ``range Σ₀`` onto ``range Σ₁``; then the restricted Bures map on
     ``[T/2, T]`` as above.

2. Cancel the attention: ``A(t) = L(t) − V Σ_plan(t) B`` and
   ``b(t) = c(t) − V m_plan(t)`` turn the moment ODE
   ``ṁ = (A + V)m + VΣBm + b``, ``Σ̇ = (A + VΣB)Σ + Σ(A + VΣB)ᵀ`` into the
   planned one, whose solution is the plan (uniqueness).

Targets of a different rank are refused: ``Σ(t) = Φ(t) Σ₀ Φ(t)ᵀ`` with ``Φ``
invertible, so the rank is invariant. :func:`reach` verifies the controls by
integrating the moment ODE and reports the terminal errors.
"""

from __future__ import annotations

import logging
import math
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

import numpy as np
import scipy.linalg

from ..results import EMPTY, Outcome
from ..status import Reach, Status
from .bures import bures_map, bures_wasserstein_distance
from .moments import psd_factor
from .params import CallableParams, GaussianParams
from .solver import GaussianTrajectory, integrate_moments

__all__ = ["ReachPhase", "ReachPlan", "ReachResult", "plan_controls", "reach",
           "principal_rotation"]

logger = logging.getLogger(__name__)



@dataclass(frozen=True)
class ReachPhase:
    """One phase ``[t0, t1)`` of the plan with constant generator ``L`` and drift ``c``."""

    t0: float
    t1: float
    L: np.ndarray
    c: np.ndarray
    m_start: np.ndarray
    Sigma_start: np.ndarray
    kind: str  # "rotate" | "stretch"

    def flow(self, tau: float) -> tuple[np.ndarray, np.ndarray]:
        """``(e^{τL}, φ_L(τ) c)`` from the unitary eigen-decomposition of the normal ``L``.

        ``L`` is symmetric (stretch) or skew (rotate), so ``L = U diag(λ) Uᴴ`` with
        ``U`` unitary and ``e^{τL} = U diag(e^{λτ}) Uᴴ``,
        ``φ_L(τ) = U diag((e^{λτ} − 1)/λ) Uᴴ`` (``= τ`` for ``λ = 0``): no matrix
        exponential per evaluation, exact to round-off.
        """
        lam, U = _normal_eig(self.L)
        z = lam * tau
        e = np.exp(z)
        small = np.abs(z) < 1e-5
        # (e^z − 1)/z by its series where z is small (no cancellation), expm1 otherwise
        ratio = np.where(small, 1 + z / 2 + z * z / 6,
                         np.expm1(np.where(small, 1.0, z)) / np.where(small, 1.0, z))
        Uh = U.conj().T
        E = ((U * e) @ Uh).real
        shift = ((U * (tau * ratio)) @ (Uh @ self.c)).real
        return E, shift


def _normal_eig(L: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """``(λ, U)`` with ``L = U diag(λ) Uᴴ``, ``U`` unitary, for symmetric or skew ``L``."""
    if np.array_equal(L, L.T):
        lam, U = np.linalg.eigh(L)
        return lam.astype(complex), U.astype(complex)
    if np.array_equal(L, -L.T):
        mu, U = np.linalg.eigh(1j * L)  # iL Hermitian: L = U diag(−iμ) Uᴴ
        return -1j * mu, U
    raise ValueError("ReachPhase.L: expected a symmetric or skew-symmetric generator")


def _phi_matrix(L: np.ndarray, tau: float) -> np.ndarray:
    """``φ_L(τ) = ∫_0^τ e^{sL} ds`` (augmented exponential)."""
    d = L.shape[0]
    blk = np.zeros((2 * d, 2 * d))
    blk[:d, :d] = L
    blk[:d, d:] = np.eye(d)
    return scipy.linalg.expm(blk * tau)[:d, d:]


@dataclass(frozen=True)
class ReachPlan:
    """Planned path and the controls that realise it (module docstring).

    Attributes
    ----------
    phases : tuple of ReachPhase
    V, B : (d, d) arrays
        The attention parameters that the controls compensate.
    T : float
    G : (d, d) array
        The SPD Bures map of the stretch phase (identity off the target range).
    rotation : (d, d) array
        ``R = e^{Ω}`` of the rotation phase (identity if none).
    """

    phases: tuple[ReachPhase, ...]
    V: np.ndarray
    B: np.ndarray
    T: float
    G: np.ndarray
    rotation: np.ndarray

    @property
    def d(self) -> int:  # noqa: D102
        return int(self.V.shape[0])

    def _phase(self, t: float) -> ReachPhase:
        for ph in self.phases:
            if t < ph.t1:
                return ph
        return self.phases[-1]

    def planned(self, t: float) -> tuple[np.ndarray, np.ndarray]:
        """Planned ``(m(t), Σ(t))``."""
        ph = self._phase(float(t))
        tau = float(t) - ph.t0
        E, shift = ph.flow(tau)
        S = E @ ph.Sigma_start @ E.T
        return E @ ph.m_start + shift, 0.5 * (S + S.T)

    def controls(self, t: float) -> GaussianParams:
        """``(A(t), b(t), V, B)`` with ``A = L − VΣ_plan B``, ``b = c − V m_plan``."""
        ph = self._phase(float(t))
        m, S = self.planned(t)
        return GaussianParams(ph.L - self.V @ S @ self.B, ph.c - self.V @ m, self.V, self.B)

    def params_path(self) -> CallableParams:
        """The controls as a parameter path (jumps at the phase boundaries)."""
        return CallableParams(self.controls, self.d,
                                jumps=tuple(ph.t1 for ph in self.phases[:-1]))


def _range_basis(S: np.ndarray, name: str) -> np.ndarray:
    L = psd_factor(S, name=name)
    if L.shape[1] == 0:
        return L
    U, _, _ = np.linalg.svd(L, full_matrices=False)
    return U


def principal_rotation(U0: np.ndarray, U1: np.ndarray) -> np.ndarray:
    """Skew ``Ω`` with ``e^{Ω}`` mapping ``span U0`` onto ``span U1`` (orthonormal bases, d × r).

    Principal angles ``θ_k ∈ [0, π/2]`` from the SVD ``U0ᵀU1 = P cos Θ Qᵀ``;
    with ``u_k = U0 P e_k``, ``y_k = U1 Q e_k`` and
    ``w_k = (y_k − cos θ_k u_k)/sin θ_k``, ``Ω = Σ_k θ_k (w_k u_kᵀ − u_k w_kᵀ)``
    rotates ``u_k`` to ``y_k`` in mutually orthogonal planes.
    """
    d, r = U0.shape
    Omega = np.zeros((d, d))
    if r == 0:
        return Omega
    P, cos, Qt = np.linalg.svd(U0.T @ U1)
    cos = np.clip(cos, -1.0, 1.0)
    for k in range(r):
        theta = math.acos(cos[k])
        if theta <= 1e-12:
            continue
        u = U0 @ P[:, k]
        yk = U1 @ Qt[k]
        w = (yk - cos[k] * u) / math.sin(theta)
        w /= np.linalg.norm(w)
        Omega += theta * (np.outer(w, u) - np.outer(u, w))
    return Omega


def plan_controls(m0: np.ndarray, Sigma0: np.ndarray, m1: np.ndarray, Sigma1: np.ndarray,
                  T: float, *, V: Any = 0.0, B: Any = 0.0) -> ReachPlan:
    """Construct the controls that steer ``N(m₀, Σ₀)`` to ``N(m₁, Σ₁)`` at time ``T``.

    Parameters
    ----------
    m0, m1 : (d,) arrays
    Sigma0, Sigma1 : (d, d) arrays, PSD
    T : float
        Horizon ``> 0``.
    V, B : scalar or (d, d) arrays
        Attention parameters kept during the steering (``0``: pure feed-forward).

    Returns
    -------
    ReachPlan

    Raises
    ------
    ValueError
        If ``rank Σ₁ != rank Σ₀`` (the rank of Σ is invariant), if ``Σ₀`` or ``Σ₁`` is not
        symmetric (beyond round-off) or not PSD, or on bad shapes.
    """
    m0 = np.asarray(m0, dtype=np.float64)
    m1 = np.asarray(m1, dtype=np.float64)
    d = m0.shape[0]
    for name, v in (("m0", m0), ("m1", m1)):
        if v.shape != (d,) or not np.all(np.isfinite(v)):
            raise ValueError(f"{name}: expected a finite vector of length {d}, got shape {v.shape}")
    S0 = np.asarray(Sigma0, dtype=np.float64)
    S1 = np.asarray(Sigma1, dtype=np.float64)
    for name, S in (("Sigma0", S0), ("Sigma1", S1)):
        if S.shape != (d, d):
            raise ValueError(f"{name}: expected shape ({d}, {d}), got {S.shape}")
    if not (math.isfinite(T) and T > 0):
        raise ValueError(f"T: must be finite and > 0, got {T}")
    base = GaussianParams.make(d, V=V, B=B)
    # a covariance must be symmetric: beyond round-off (1e3 ε relative, psd_factor) it is an
    # error naming the argument, never silently symmetrised
    for name, S in (("Sigma0", S0), ("Sigma1 (target covariance)", S1)):
        psd_factor(S, name=name)
    S0 = 0.5 * (S0 + S0.T)
    S1 = 0.5 * (S1 + S1.T)
    U0 = _range_basis(S0, "Sigma0")
    U1 = _range_basis(S1, "Sigma1")
    r0, r1 = U0.shape[1], U1.shape[1]
    if r0 != r1:
        raise ValueError(
            f"target: rank Σ₁ = {r1} differs from rank Σ₀ = {r0}; the rank of the covariance "
            "is invariant under the moment ODE (Σ(t) = Φ(t) Σ₀ Φ(t)ᵀ with Φ invertible), so no "
            "control reaches this target")
    r = r0
    # do the ranges coincide? (largest principal angle)
    if 0 < r < d:
        cosines = np.linalg.svd(U0.T @ U1, compute_uv=False)
        same_range = float(np.min(cosines)) >= 1.0 - 1e-12
    else:
        same_range = True
    phases: list[ReachPhase] = []
    R = np.eye(d)
    t_mid = 0.0
    m_mid, S_mid = m0, S0
    if not same_range:
        t_mid = 0.5 * T
        Omega = principal_rotation(U0, U1)
        R = scipy.linalg.expm(Omega)
        Lrot = Omega / t_mid
        phases.append(ReachPhase(0.0, t_mid, Lrot, np.zeros(d), m0, S0, "rotate"))
        m_mid = R @ m0
        S_mid = R @ S0 @ R.T
        S_mid = 0.5 * (S_mid + S_mid.T)
    tau = T - t_mid
    # stretch: SPD Bures map on the common range, identity on its complement
    if r == 0:
        G = np.eye(d)
        logG = np.zeros((d, d))
    else:
        Sm_r = U1.T @ S_mid @ U1
        S1_r = U1.T @ S1 @ U1
        Gr = bures_map(0.5 * (Sm_r + Sm_r.T), 0.5 * (S1_r + S1_r.T))
        lam, W = np.linalg.eigh(Gr)
        logGr = (W * np.log(lam)) @ W.T
        P = U1 @ U1.T
        G = U1 @ Gr @ U1.T + (np.eye(d) - P)
        logG = U1 @ logGr @ U1.T
    Ls = 0.5 * (logG + logG.T) / tau
    Es = scipy.linalg.expm(Ls * tau)
    c = np.linalg.solve(_phi_matrix(Ls, tau), m1 - Es @ m_mid)
    phases.append(ReachPhase(t_mid, float(T), Ls, c, m_mid, S_mid, "stretch"))
    return ReachPlan(phases=tuple(phases), V=base.V, B=base.B, T=float(T), G=G, rotation=R)


@dataclass(frozen=True)
class ReachResult(Outcome):
    """Controls and their verification by integration (an :class:`~wflow.results.Outcome`).

    Attributes
    ----------
    plan : ReachPlan
    trajectory : GaussianTrajectory
        The moment ODE integrated with the controls.
    m_error : float
        ``|m(T) − m₁|``.
    Sigma_error : float
        ``‖Σ(T) − Σ₁‖_F / max(‖Σ₁‖_F, 1)``.
    w2_error : float
        ``W2(N(m(T), Σ(T)), N(m₁, Σ₁))``.
    status : Reach
        ``Reach.REACHED`` (``"reached"``) or ``Reach.MISSED`` (``"missed"``); a string
        naming one is accepted. ``run_status`` is the :class:`~wflow.status.Status` the
        ``wflow gaussian`` job writes (``SUCCESS`` / ``INACCURATE``).
    tol : float
    message : str
        Why the target was missed (empty when reached).
    target_m : (d,) array
    target_Sigma : (d, d) array
    checks : dict
        The three errors against ``tol`` (relative to ``scale = max(|m₁|, ‖Σ₁‖_F, 1)``
        for ``m`` and ``W2``), and the integration's status (computed).
    history : dict
        The integration's history (``trajectory.history``; computed).
    """

    plan: ReachPlan
    trajectory: GaussianTrajectory
    target_m: np.ndarray
    target_Sigma: np.ndarray
    m_error: float
    Sigma_error: float
    w2_error: float
    status: Reach
    tol: float
    message: str = ""

    def __post_init__(self) -> None:
        """Read ``status`` as a :class:`~wflow.status.Reach` member."""
        if not isinstance(self.status, Reach):
            object.__setattr__(self, "status", Reach(self.status))

    @property
    def checks(self) -> dict[str, dict[str, Any]]:
        """``{m_error, Sigma_error, w2_error, integration}``: value, tolerance, passed, rule."""
        scale = max(float(np.linalg.norm(self.target_m)),
                    float(np.linalg.norm(self.target_Sigma)), 1.0)
        rel = "relative to max(|m₁|, ‖Σ₁‖_F, 1)"
        out = {name: {"value": v / sc, "tolerance": self.tol, "passed": bool(v / sc <= self.tol),
                      "rule": rule}
               for name, v, sc, rule in (
                   ("m_error", self.m_error, scale, f"|m(T) − m₁| {rel}"),
                   ("Sigma_error", self.Sigma_error, 1.0,
                    "‖Σ(T) − Σ₁‖_F / max(‖Σ₁‖_F, 1)"),
                   ("w2_error", self.w2_error, scale, f"W2 of the Gaussians {rel}"))}
        ok = self.trajectory.status == Status.COMPLETED
        out["integration"] = {"value": str(self.trajectory.status),
                              "tolerance": str(Status.COMPLETED), "passed": ok,
                              "rule": "the moment ODE reached T (no blow-up, no failure)"}
        return out

    @property
    def history(self) -> Mapping[str, Any]:
        """The history of the integration with the controls."""
        return getattr(self.trajectory, "history", EMPTY)

    def to_dict(self) -> dict[str, Any]:
        """JSON-friendly summary (controls at phase starts, errors, final moments)."""
        return {
            "status": self.status,
            "message": self.message,
            "tol": self.tol,
            "m_error": self.m_error,
            "Sigma_error": self.Sigma_error,
            "w2_error": self.w2_error,
            "T": self.plan.T,
            "bures_map_G": self.plan.G.tolist(),
            "rotation": self.plan.rotation.tolist(),
            "phases": [{"t0": ph.t0, "t1": ph.t1, "kind": ph.kind, "L": ph.L.tolist(),
                        "c": ph.c.tolist()} for ph in self.plan.phases],
            "integration": self.trajectory.to_dict(),
        }


def reach(m0: np.ndarray, Sigma0: np.ndarray, m1: np.ndarray, Sigma1: np.ndarray, T: float, *,
          V: Any = 0.0, B: Any = 0.0, rtol: float = 1e-10, atol: float = 1e-12,
          method: str = "DOP853", n_out: int = 201, tol: float = 1e-6) -> ReachResult:
    """Plan the controls (:func:`plan_controls`) and verify them by integrating the moment ODE.

    ``status = Reach.REACHED`` (``"reached"``) when ``m_error``, ``Sigma_error`` and
    ``w2_error`` are all ``<= tol`` (relative to ``max(|m₁|, ‖Σ₁‖_F, 1)``); otherwise
    ``Reach.MISSED`` with the reason in ``message`` (also logged as a warning).
    ``w2_error`` is computed without cancellation
    (:func:`~wflow.gaussian.bures.bures_wasserstein_distance`), so it resolves
    ``|Δm|`` far below ``√ε``. A non-symmetric ``Sigma1`` raises ``ValueError``.
    The default integrator is explicit (``DOP853``, order 8): the controlled system is
    not stiff.
    """
    plan = plan_controls(m0, Sigma0, m1, Sigma1, T, V=V, B=B)
    traj = integrate_moments(plan.params_path(), np.asarray(m0, dtype=np.float64),
                             np.asarray(Sigma0, dtype=np.float64), T, rtol=rtol, atol=atol,
                             method=method, n_out=n_out)
    m1 = np.asarray(m1, dtype=np.float64)
    S1 = np.asarray(Sigma1, dtype=np.float64)
    mT, ST = traj.final_m, traj.final_Sigma
    m_err = float(np.linalg.norm(mT - m1))
    s_err = float(np.linalg.norm(ST - S1) / max(np.linalg.norm(S1), 1.0))
    w2 = bures_wasserstein_distance(mT, ST, m1, S1)
    scale = max(float(np.linalg.norm(m1)), float(np.linalg.norm(S1)), 1.0)
    ok = traj.status == Status.COMPLETED and max(m_err / scale, s_err, w2 / scale) <= tol
    status = Reach.REACHED if ok else Reach.MISSED
    message = "" if ok else (f"target missed (integration {traj.status}, |Δm| = {m_err:.3g}, "
                             f"relative ‖ΔΣ‖ = {s_err:.3g}, W2 = {w2:.3g}, tol = {tol:g})")
    if not ok:
        logger.warning("reach: %s", message)
    logger.info("reach: %s, |Δm| = %.3g, ‖ΔΣ‖ = %.3g, W2 = %.3g", status, m_err, s_err, w2)
    return ReachResult(plan=plan, trajectory=traj, target_m=m1, target_Sigma=S1, m_error=m_err,
                       Sigma_error=s_err, w2_error=w2, status=status, tol=tol, message=message)
