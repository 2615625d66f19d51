"""Long-time classifier of the covariance for constant parameters (THEORY.md §7).

Classifier (for full-rank initial covariances) — labels:

* ``"converges"``: every ``Σ₀ ≻ 0`` converges (to the PD equilibrium or to 0);
* ``"blows_up"``: every ``Σ₀ ≻ 0`` blows up in finite time;
* ``"depends_on_initial_data"``: small ``Σ₀`` survive, large ones blow up;
* ``"grows_exponentially"``: no blow-up, but unbounded growth;
* ``"bounded"``: no blow-up, neither convergence nor growth (neutral directions);
* ``"undetermined"``: the probe could not decide within its horizon.

``method="exact"`` applies when ``V = vI`` and the symmetric part ``A_s``, the
skew part ``A_k`` of ``A`` and ``C`` commute pairwise (scalar, isotropic,
simultaneously diagonal cases): then ``G(t) = ∫_0^t e^{Aᵀs}Ce^{As}ds`` is
diagonal in the common eigenbasis with entries
``g_i(t) = c_i (e^{2a_i t} − 1)/(2a_i)`` and the per-direction scalar Bernoulli
equations ``σ̇ = 2a_iσ + c_iσ²`` decide: blow-up for all data iff some
``c_i > 0`` has ``a_i ≥ 0``; no blow-up iff all ``c_i ≤ 0``; otherwise it
depends on the data (critical variance ``−2a_i/c_i``). Otherwise
``method="probe"`` integrates the moment ODE from an ensemble of initial
covariances (scales ``10^{-2}..10^{2}``, random orientations) up to a horizon
and reads the outcome — a numerical verdict valid for that horizon.
"""

from __future__ import annotations

import logging
import math
import warnings
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from .params import GaussianParams
from .riccati import Equilibrium, _scalar_value, equilibria, riccati_residual
from .solver import integrate_moments

__all__ = [
    "LABELS",
    "Classification",
    "PhaseDiagram",
    "classify",
    "phase_diagram",
]

logger = logging.getLogger(__name__)

_EPS = np.finfo(np.float64).eps

#: Classifier labels, in plotting order.
LABELS = ("converges", "blows_up", "depends_on_initial_data", "grows_exponentially", "bounded",
          "undetermined")


@dataclass(frozen=True)
class Classification:
    """Long-time behaviour of the covariance for constant ``(A, V, B)``.

    Attributes
    ----------
    label : str
        One of :data:`LABELS` (for full-rank initial covariances).
    method : {"exact", "probe"}
    reason : str
        One sentence explaining the verdict.
    limit : (d, d) array or None
        Limit covariance when ``label == "converges"`` (full-rank data).
    equilibria : tuple of Equilibrium
    details : dict
        ``exact``: eigen-directions ``a_i``, ``c_i`` and critical variances
        ``−2a_i/c_i``; ``probe``: per-run outcomes and the horizon.
    """

    label: str
    method: str
    reason: str
    limit: np.ndarray | None
    equilibria: tuple[Equilibrium, ...]
    details: dict[str, Any] = field(default_factory=dict)

    def to_dict(self) -> dict[str, Any]:
        """JSON-friendly summary."""
        return {
            "label": self.label,
            "method": self.method,
            "reason": self.reason,
            "limit": None if self.limit is None else self.limit.tolist(),
            "equilibria": [e.to_dict() for e in self.equilibria],
            "details": self.details,
        }


def _commuting_structure(params: GaussianParams, rtol: float = 1e-10
                         ) -> tuple[np.ndarray, np.ndarray, np.ndarray] | None:
    """``(a, c, U)`` if ``V = vI`` and ``A_s, A_k, C`` commute; ``U`` the common eigenbasis."""
    v = _scalar_value(params.V)
    if v is None:
        return None
    A = params.A
    As, Ak = 0.5 * (A + A.T), 0.5 * (A - A.T)
    C = v * (params.B + params.B.T)
    scale = max(np.linalg.norm(As), np.linalg.norm(Ak), np.linalg.norm(C), 1e-300)
    for X, Y in ((As, C), (Ak, C), (As, Ak)):
        if np.linalg.norm(X @ Y - Y @ X) > rtol * scale**2:
            return None
    nA, nC = np.linalg.norm(As), np.linalg.norm(C)
    # a generic combination separates the joint eigenvalues (golden-ratio weight)
    gamma = 0.6180339887498949 * (nA / nC if nA > 0 and nC > 0 else 1.0)
    _, U = np.linalg.eigh(As + gamma * C)
    Da, Dc = U.T @ As @ U, U.T @ C @ U
    off = max(np.linalg.norm(Da - np.diag(np.diag(Da))), np.linalg.norm(Dc - np.diag(np.diag(Dc))))
    if off > 1e3 * rtol * scale:
        return None
    return np.diag(Da).copy(), np.diag(Dc).copy(), U


def _classify_exact(params: GaussianParams, a: np.ndarray, c: np.ndarray, U: np.ndarray,
                    eqs: tuple[Equilibrium, ...]) -> Classification:
    scale = max(float(np.max(np.abs(a), initial=0.0)), float(np.max(np.abs(c), initial=0.0)),
                1e-300)
    tol = 1e3 * _EPS * scale  # round-off of the joint eigen-decomposition
    pos = c > tol
    details: dict[str, Any] = {"a": a.tolist(), "c": c.tolist(), "basis": U.tolist()}
    if np.any(pos & (a >= -tol)):
        i = int(np.argmax(pos & (a >= -tol)))
        return Classification("blows_up", "exact",
                              f"direction {i}: c = {c[i]:.4g} > 0 with a = {a[i]:.4g} >= 0 "
                              "(G(t) is unbounded)", None, eqs, details)
    if np.any(pos):
        crit = np.where(pos, -2 * a / np.where(pos, c, 1.0), np.inf)
        details["critical_variance"] = [float(x) if math.isfinite(x) else None for x in crit]
        return Classification("depends_on_initial_data", "exact",
                              "attention expands (c > 0) only along contracting directions "
                              "(a < 0): covariances above the critical variance −2a/c blow up, "
                              "small ones do not", None, eqs, details)
    zero_c = np.abs(c) <= tol
    if np.any(zero_c & (a > tol)):
        return Classification("grows_exponentially", "exact",
                              "no blow-up (c <= 0), but a direction with c = 0 and a > 0 grows "
                              "like e^{2at}", None, eqs, details)
    if np.any(zero_c & (np.abs(a) <= tol)):
        return Classification("bounded", "exact",
                              "no blow-up; a neutral direction (a = c = 0) keeps its variance",
                              None, eqs, details)
    sig = np.where(a > tol, -2 * a / np.where(c < -tol, c, -1.0), 0.0)
    limit = (U * sig) @ U.T
    return Classification("converges", "exact",
                          "every direction contracts to its equilibrium variance "
                          "(−2a/c for a > 0, 0 otherwise)", 0.5 * (limit + limit.T), eqs,
                          details)


def _probe_run_outcome(params: GaussianParams, S0: np.ndarray, horizon: float, method: str
                       ) -> tuple[str, np.ndarray]:
    d = params.d
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", RuntimeWarning)
        tr = integrate_moments(params, np.zeros(d), S0, horizon, n_out=11, method=method,
                               rtol=1e-8, atol=1e-12)
    if tr.status == "blowup":
        return "blowup", tr.final_Sigma
    if tr.status == "failed":
        return "failed", tr.final_Sigma
    S = tr.final_Sigma
    nS = float(np.linalg.norm(S))
    F = riccati_residual(params, S)
    kappa = (np.linalg.norm(params.A, 2)
             + np.linalg.norm(params.V, 2) * np.linalg.norm(params.B, 2) * np.linalg.norm(S, 2))
    if nS <= 1e-8 * np.linalg.norm(S0):
        return "to_zero", S
    if np.linalg.norm(F) <= 1e-6 * max(kappa, 1e-300) * nS:
        return "converged", S
    if np.trace(S) >= 1e3 * max(float(np.trace(S0)), 1.0):
        return "grows", S
    return "undecided", S


def _classify_probe(params: GaussianParams, eqs: tuple[Equilibrium, ...], *, horizon: float,
                    n_scales: int, n_orient: int, seed: int, method: str) -> Classification:
    d = params.d
    rng = np.random.default_rng(seed)
    outcomes: list[dict[str, Any]] = []
    finals = []
    for s in np.geomspace(1e-2, 1e2, n_scales):
        for _ in range(n_orient):
            Qm, _ = np.linalg.qr(rng.standard_normal((d, d)))
            lam = s * np.exp(0.5 * rng.standard_normal(d))
            S0 = (Qm * lam) @ Qm.T
            S0 = 0.5 * (S0 + S0.T)
            kind, S = _probe_run_outcome(params, S0, horizon, method)
            outcomes.append({"scale": float(s), "outcome": kind})
            finals.append((kind, S))
    kinds = [o["outcome"] for o in outcomes]
    details = {"horizon": horizon, "runs": outcomes}
    n_blow = kinds.count("blowup")
    if n_blow == len(kinds):
        return Classification("blows_up", "probe",
                              f"all {len(kinds)} probe runs blew up before t = {horizon}", None,
                              eqs, details)
    if n_blow > 0:
        return Classification("depends_on_initial_data", "probe",
                              f"{n_blow} of {len(kinds)} probe runs blew up before t = {horizon}",
                              None, eqs, details)
    if all(k in ("converged", "to_zero") for k in kinds):
        lims = [S for _, S in finals]
        ref = lims[0] if kinds[0] == "converged" else np.zeros((d, d))
        same = all(np.linalg.norm((S if k == "converged" else 0 * S) - ref)
                   <= 1e-4 * max(1.0, np.linalg.norm(ref)) for k, S in finals)
        if same:
            return Classification("converges", "probe",
                                  f"all {len(kinds)} probe runs converged to the same limit "
                                  f"by t = {horizon}", ref, eqs, details)
        return Classification("converges", "probe",
                              "probe runs converged, to limits that depend on the initial data",
                              None, eqs, details)
    if all(k == "grows" for k in kinds):
        return Classification("grows_exponentially", "probe",
                              f"no blow-up but every probe run grew by >= 1e3 by t = {horizon}",
                              None, eqs, details)
    msg = (f"probe runs did not agree within the horizon {horizon} "
           f"(outcomes: {sorted(set(kinds))}); increase `horizon`")
    warnings.warn(f"classify: {msg}", RuntimeWarning, stacklevel=3)
    return Classification("undetermined", "probe", msg, None, eqs, details)


def classify(params: GaussianParams, *, method: str = "auto", horizon: float = 50.0,
             n_scales: int = 5, n_orient: int = 2, seed: int = 0,
             solver: str = "LSODA") -> Classification:
    """Classify the long-time behaviour of Σ for constant ``(A, V, B)`` (module docstring).

    Parameters
    ----------
    params : GaussianParams
        ``b`` only enters the mean equilibria.
    method : {"auto", "exact", "probe"}
        ``auto``: exact when the commuting structure holds, else probe.
    horizon : float
        Probe integration time.
    n_scales, n_orient : int
        Probe ensemble: ``n_scales`` scales in ``[10^{-2}, 10^2]`` times
        ``n_orient`` random orientations.
    seed : int
        Seed of the probe ensemble and of the Newton starts.
    solver : str
        ``solve_ivp`` method of the probe runs.

    Returns
    -------
    Classification
    """
    if method not in ("auto", "exact", "probe"):
        raise ValueError(f"method: must be 'auto', 'exact' or 'probe', got {method!r}")
    if not (math.isfinite(horizon) and horizon > 0):
        raise ValueError(f"horizon: must be finite and > 0, got {horizon}")
    eqs = equilibria(params, seed=seed)
    struct = _commuting_structure(params) if method != "probe" else None
    if method == "exact" and struct is None:
        raise ValueError("method='exact' needs V = vI and pairwise commuting A_s, A_k, "
                         "V(B + Bᵀ)")
    if struct is not None:
        return _classify_exact(params, *struct, eqs)
    return _classify_probe(params, eqs, horizon=horizon, n_scales=int(n_scales),
                           n_orient=int(n_orient), seed=seed, method=solver)


@dataclass(frozen=True)
class PhaseDiagram:
    """Classifier labels over a 2-parameter family.

    Attributes
    ----------
    x, y : 1-d arrays
        Parameter values (``labels[j, i]`` is at ``(x[i], y[j])``).
    labels : (ny, nx) array of str
    methods : (ny, nx) array of str
    x_name, y_name : str
    """

    x: np.ndarray
    y: np.ndarray
    labels: np.ndarray
    methods: np.ndarray
    x_name: str
    y_name: str

    def counts(self) -> dict[str, int]:
        """How many grid points carry each label."""
        return {lab: int(np.sum(self.labels == lab)) for lab in LABELS
                if np.any(self.labels == lab)}

    def to_dict(self) -> dict[str, Any]:
        """JSON-friendly summary."""
        return {"x_name": self.x_name, "y_name": self.y_name, "x": self.x.tolist(),
                "y": self.y.tolist(), "labels": self.labels.tolist(), "counts": self.counts()}


def phase_diagram(family: Callable[[float, float], GaussianParams], x: Sequence[float],
                  y: Sequence[float], *, x_name: str = "x", y_name: str = "y",
                  **classify_kw: Any) -> PhaseDiagram:
    """Classify ``family(x_i, y_j)`` on a grid (``classify_kw`` go to :func:`classify`)."""
    x = np.asarray(x, dtype=np.float64)
    y = np.asarray(y, dtype=np.float64)
    labels = np.empty((y.size, x.size), dtype=object)
    methods = np.empty((y.size, x.size), dtype=object)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", RuntimeWarning)  # 'undetermined' is a label here
        for j, yy in enumerate(y):
            for i, xx in enumerate(x):
                cl = classify(family(float(xx), float(yy)), **classify_kw)
                labels[j, i] = cl.label
                methods[j, i] = cl.method
    return PhaseDiagram(x=x, y=y, labels=labels.astype(str), methods=methods.astype(str),
                        x_name=x_name, y_name=y_name)
