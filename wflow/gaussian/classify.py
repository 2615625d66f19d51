"""Long-time classifier of the covariance for constant parameters (docs/theory.md §7).

``classify(params)`` describes every full-rank initial covariance
(``scope="all"``); ``classify(params, Sigma0=S)`` the trajectory from ``S``
(``scope="Sigma0"``), with its limit, rate or blow-up time. Labels
(:data:`LABELS`):

* ``"converges_to_zero"`` — ``Σ → 0``, exponentially (``‖Σ‖ ~ e^{−rt}``) or
  algebraically (``‖Σ‖ ~ t^{−p}``), with the rate;
* ``"converges"`` — ``Σ → Σ∞ ≠ 0`` (``limit``, ``limit_rank``; it depends on Σ₀
  on a continuum of equilibria), with the rate of ``‖Σ − Σ∞‖``;
* ``"blows_up"`` — finite-time blow-up (``blowup_time`` for a given Σ₀);
* ``"depends_on_initial_data"`` — some Σ₀ blow up (or diverge), others converge;
* ``"unbounded"`` — no blow-up but ``‖Σ‖ → ∞`` (exponential or algebraic rate);
* ``"oscillates"`` — bounded without a limit ((quasi-)periodic);
* ``"undetermined"`` — only from a probe (or a Lyapunov verdict awaiting its
  confirmation), with the reason a longer horizon could settle.

Decision order: the structural rules of :mod:`~wflow.gaussian.structure`
(linear flow; ``A = 0`` with a Lyapunov function, frozen kernel part and
self-similar decay; ``V = vI`` commuting closed form) decide exactly where they
apply (``method="exact"`` or ``"lyapunov"``). Elsewhere the *probe* integrates
from Σ₀ (``scope="all"``: an ensemble of scales ``10^{-2}..10^2`` and random
orientations, each classified on its own) up to ``horizon`` and reads the tail
with :func:`~wflow.gaussian.asymptotics.fit_tail_rate`:

1. ``‖Σ‖`` settles on a decaying exponential or power law → ``converges_to_zero``;
   on a growing one → ``unbounded``;
2. else ``‖Σ̇‖ = ‖F(Σ)‖`` settles on ``e^{−rt}`` or ``t^{−q}`` with ``q > 1`` →
   ``converges``, the limit extrapolated as ``Σ(T) + F(Σ(T))/r`` or
   ``Σ(T) + T F(Σ(T))/(q − 1)`` and snapped to an isolated equilibrium or
   polished by Newton's method when within the extrapolation error;
3. else ``undetermined``, with the local rates and exponents that did not settle.

For exact verdicts with a given Σ₀ the same tail fit is run as a check
(``rate_fit``). Probe messages go to ``logging`` (never ``warnings``).
"""

from __future__ import annotations

import logging
import math
from collections.abc import Callable, Sequence
from dataclasses import dataclass, replace
from typing import Any

import numpy as np
import scipy.linalg

from ..status import Status
from .asymptotics import fit_tail_rate
from .moments import _EPS, psd_factor
from .params import GaussianParams
from .riccati import (
    Equilibrium,
    equilibria,
    equilibrium_families,
    refine_equilibrium,
    riccati_linearisation,
    riccati_residual,
)
from .structure import (
    commuting_rule,
    homogeneous_rule,
    integrate_tail,
    linear_rule,
    probe_tolerances,
)
from .structure.probes import _fit_distance
from .verdict import LABELS, Classification

__all__ = [
    "LABELS",
    "Classification",
    "PhaseDiagram",
    "classify",
    "phase_diagram",
]

logger = logging.getLogger(__name__)

#: Smallest power-law exponent of ``‖Σ̇‖`` read as convergence: ``∫ t^{−q} dt < ∞`` needs
#: ``q > 1``; the margin keeps a drifting ``q ≈ 1`` (logarithmic drift) out.
_Q_MARGIN = 0.05


def _structural(params: GaussianParams, Sigma0: np.ndarray | None, *, horizon: float,
                solver: str) -> Classification | None:
    for rule in (lambda: linear_rule(params, Sigma0),
                 lambda: homogeneous_rule(params, Sigma0, horizon=horizon, solver=solver),
                 lambda: commuting_rule(params, Sigma0)):
        cl = rule()
        if cl is not None:
            return cl
    return None


def _with_fit(cl: Classification, params: GaussianParams, Sigma0: np.ndarray, horizon: float,
              solver: str) -> Classification:
    """Attach the tail fit of an integration up to ``horizon`` (a check of an exact verdict)."""
    if cl.rate_kind == "stationary" or cl.label not in ("converges", "converges_to_zero",
                                                         "unbounded", "blows_up"):
        return cl
    tr = integrate_tail(params, Sigma0, horizon, solver=solver)
    details = dict(cl.details)
    if cl.label == "blows_up":
        details["blowup_time_integrated"] = tr.blowup_time
        return replace(cl, details=details)
    if tr.status == Status.BLOWUP:
        details["check"] = f"the check integration blew up at t = {tr.blowup_time}"
        logger.warning("classify: exact verdict %s but the integration blew up (%s)", cl.label,
                       tr.message)
        return replace(cl, details=details)
    target = cl.limit if cl.label == "converges" else None
    fit = _fit_distance(tr, target, Sigma0)
    return replace(cl, rate_fit=fit, details=details)


def _certify(params: GaussianParams, t: np.ndarray, S: np.ndarray,
             eqs: Sequence[Equilibrium]) -> tuple[np.ndarray, float, float, dict] | None:
    """Local Lyapunov certificate that the sampled trajectory converges to a stable equilibrium.

    ``F`` is quadratic: ``F(Σ* + H) = J[H] + Q(H)``, ``J = DF(Σ*)``,
    ``‖Q(H)‖_F ≤ 2‖V‖₂‖B‖₂‖H‖_F²``. With ``JᵀP + PJ = −I`` (``J`` stable),
    ``d/dt hᵀPh ≤ −|h|² + 4‖P‖‖V‖‖B‖|h|³ < 0`` for ``|h| < ρ = 1/(4‖P‖‖V‖‖B‖)``,
    so the sublevel set ``{hᵀPh ≤ λ_min(P) ρ²}`` lies in that ball, is invariant and
    is attracted to ``Σ*`` at the rate ``−max Re spec J``. Returns
    ``(Σ*, rate, t_enter, info)`` for the first sample inside, or None.
    """
    from .riccati import sym_basis

    cands = [e.Sigma for e in eqs if e.stable]
    ref = refine_equilibrium(params, S[-1])
    if ref is not None and np.linalg.eigvalsh(ref)[0] >= -1e-12 * max(
            float(np.linalg.norm(ref)), 1.0):
        cands.append(ref)
    E = sym_basis(params.d)
    nVB = float(np.linalg.norm(params.V, 2) * np.linalg.norm(params.B, 2))
    for Sstar in cands:
        J = riccati_linearisation(params, Sstar)
        spec = np.linalg.eigvals(J)
        # eigenvalues within round-off of the imaginary axis do not count as stable
        if not np.all(spec.real < -1e3 * _EPS * max(1.0, float(np.max(np.abs(spec))))):
            continue
        P = scipy.linalg.solve_continuous_lyapunov(J.T, -np.eye(J.shape[0]))
        P = 0.5 * (P + P.T)
        lam = np.linalg.eigvalsh(P)
        if lam[0] <= 0:
            continue
        rho = math.inf if nVB == 0 else 1.0 / (4.0 * float(lam[-1]) * nVB)
        level = 0.999 * float(lam[0]) * rho**2  # margin for the integration error
        h = np.einsum("kij,tij->tk", E, S - Sstar[None])
        vals = np.einsum("tk,kl,tl->t", h, P, h)
        inside = np.flatnonzero(vals <= level)
        if inside.size and inside[-1] == t.size - 1:
            # first sample from which the trajectory stays inside (it cannot leave: invariant)
            k = int(inside[0])
            rate = float(-np.max(spec.real))
            return (0.5 * (Sstar + Sstar.T), rate, float(t[k]),
                    {"rho": rho, "level": level, "value_at_entry": float(vals[k]),
                     "spectrum_real_max": float(np.max(spec.real))})
    return None


def _probe_one(params: GaussianParams, S0: np.ndarray, horizon: float, solver: str,
               eqs: Sequence[Equilibrium]) -> Classification:
    """Probe verdict for the trajectory from ``S0`` (module docstring, steps 1–3)."""
    tr = integrate_tail(params, S0, horizon, solver=solver)
    scope = "Sigma0"
    if tr.status == Status.BLOWUP:
        return Classification("blows_up", "probe",
                              f"the integration blew up (Riccati signature): {tr.message}",
                              blowup_time=tr.blowup_time, scope=scope,
                              details={"horizon": horizon})
    t, S = tr.t, tr.Sigma
    if tr.status == Status.COMPLETED:
        cert = _certify(params, t, S, eqs)
        if cert is not None:
            Sstar, rate, tc, info = cert
            lab = "converges" if np.any(Sstar) else "converges_to_zero"
            return Classification(lab, "lyapunov",
                                  f"the trajectory enters at t = {tc:.6g} the certified basin of "
                                  "the stable equilibrium (local Lyapunov function hᵀPh, "
                                  "JᵀP + PJ = −I, with the quadratic remainder ‖Q(H)‖ ≤ "
                                  "2‖V‖‖B‖‖H‖²); rate from the linearisation", Sstar,
                                  "exponential", rate, scope="Sigma0",
                                  details={"horizon": horizon, "certificate": info})
    rtol, _, floor = probe_tolerances(S0)
    nS = np.linalg.norm(S, axis=(1, 2))
    fitS = fit_tail_rate(t, nS, floor=floor)
    details: dict[str, Any] = {"horizon": horizon, "fit_norm": fitS.to_dict()}
    if tr.status == Status.FAILED and not (fitS.kind in ("exponential", "algebraic")
                                      and fitS.rate is not None and fitS.rate < 0):
        return Classification("undetermined", "probe",
                              f"the integration failed at t = {t[-1]:.6g} ({tr.message}); a "
                              "different solver or horizon may get through", scope=scope,
                              details=details)
    if fitS.kind in ("exponential", "algebraic") and fitS.rate is not None:
        if fitS.rate > 0:
            return Classification("converges_to_zero", "probe",
                                  f"‖Σ(t)‖: {fitS.reason}", np.zeros_like(S0), fitS.kind,
                                  fitS.rate, scope=scope, rate_fit=fitS, details=details)
        # growth is read as 'unbounded' only once ‖Σ‖ is far beyond the scale
        # ‖A‖/(‖V‖‖B‖) where the quadratic term catches up with the linear one: below it,
        # an exponential phase may still end in a blow-up (σ̇ = 2aσ + cσ²)
        nVB = float(np.linalg.norm(params.V, 2) * np.linalg.norm(params.B, 2))
        bal = float(np.linalg.norm(params.A, 2)) / nVB if nVB > 0 else 0.0
        if nVB > 0 and float(nS[-1]) < 1e3 * max(bal, float(nS[0])):
            return Classification("undetermined", "probe",
                                  f"‖Σ‖ grows ({fitS.reason}) but by t = {t[-1]:.6g} it is "
                                  f"{float(nS[-1]):.3g}, not yet ≫ ‖A‖/(‖V‖‖B‖) = {bal:.3g} "
                                  "where the attention term catches up: a longer horizon "
                                  "decides between blow-up and unbounded growth", scope=scope,
                              rate_fit=fitS, details=details)
        return Classification("unbounded", "probe", f"‖Σ(t)‖ grows: {fitS.reason}", None,
                              fitS.kind, -fitS.rate, scope=scope, rate_fit=fitS, details=details)
    dS = np.array([np.linalg.norm(riccati_residual(params, Sk)) for Sk in S])
    kappa = (np.linalg.norm(params.A, 2)
             + 2 * np.linalg.norm(params.V, 2) * np.linalg.norm(params.B, 2) * nS)
    # F(Σ) inherits the integration error of Σ (~1e3 rtol ‖Σ‖) times its Lipschitz constant
    floor_d = float(np.max(1e3 * rtol * kappa * nS)) + floor
    if dS[0] <= floor_d:
        return Classification("converges" if np.any(S0) else "converges_to_zero", "probe",
                              "Σ₀ is an equilibrium (F(Σ₀) = 0 to round-off)", S0.copy(),
                              "stationary", None, scope=scope, details=details)
    fitD = fit_tail_rate(t, dS, floor=floor_d)
    details["fit_increments"] = fitD.to_dict()
    ST, FT, T = S[-1], riccati_residual(params, S[-1]), float(t[-1])
    if fitD.kind == "exponential" and fitD.rate is not None and fitD.rate > 0:
        corr = FT / fitD.rate
        kind, rate = "exponential", fitD.rate
    elif (fitD.kind == "algebraic" and fitD.rate is not None
          and fitD.rate > 1 + _Q_MARGIN):
        corr = T * FT / (fitD.rate - 1)
        kind, rate = "algebraic", fitD.rate - 1
    else:
        bounded = float(np.max(nS[t >= 0.5 * T])) <= 10 * max(float(np.max(nS[t < 0.5 * T])),
                                                               1e-300)
        hint = (" (bounded and not settling: an oscillation or a slow drift)" if bounded else "")
        return Classification("undetermined", "probe",
                              f"by t = {T:.6g} neither ‖Σ‖ ({fitS.reason}) nor ‖Σ̇‖ "
                              f"({fitD.reason}) settled on a law{hint}; a longer horizon can "
                              "settle it", scope=scope, details=details)
    lim = 0.5 * (ST + corr + (ST + corr).T)
    err = max(10 * float(np.linalg.norm(corr)), 1e3 * rtol * float(np.linalg.norm(ST)))
    snapped = "extrapolated"
    for e in eqs:
        if float(np.linalg.norm(e.Sigma - lim)) <= err:
            lim, snapped = e.Sigma.copy(), f"snapped to the isolated equilibrium ({e.source})"
            break
    else:
        ref = refine_equilibrium(params, lim)
        if ref is not None and float(np.linalg.norm(ref - lim)) <= err:
            spec = np.abs(np.linalg.eigvals(riccati_linearisation(params, ref)))
            # a (numerically) singular linearisation: ref is one point of a continuum of
            # equilibria, no better than the extrapolation; otherwise the isolated root
            if float(np.min(spec)) > 1e-8 * max(float(np.max(spec)), 1e-300):
                lim, snapped = ref, "polished by Newton's method (isolated equilibrium)"
            else:
                snapped = "extrapolated (on a continuum of equilibria)"
    details["limit_error_estimate"] = err
    if float(np.linalg.norm(lim)) <= err:
        return Classification("converges_to_zero", "probe",
                              f"‖Σ̇‖: {fitD.reason}; the extrapolated limit is 0 to its error",
                              np.zeros_like(S0), kind, rate, scope=scope, rate_fit=fitD,
                              details=details)
    return Classification("converges", "probe",
                          f"‖Σ̇‖: {fitD.reason}; limit {snapped} (error ≲ {err:.2g})", lim, kind,
                          rate, scope=scope, rate_fit=fitD, details=details)


def _ensemble(d: int, *, n_scales: int, n_orient: int, seed: int) -> list[np.ndarray]:
    rng = np.random.default_rng(seed)
    out = []
    for s in np.geomspace(1e-2, 1e2, n_scales):
        for _ in range(n_orient):
            Qm, _ = np.linalg.qr(rng.standard_normal((d, d)))
            lam = s * np.exp(0.5 * rng.standard_normal(d))
            S0 = (Qm * lam) @ Qm.T
            out.append(0.5 * (S0 + S0.T))
    return out


_METHOD_ORDER = {"exact": 0, "lyapunov": 1, "probe": 2}


def _aggregate(runs: list[tuple[np.ndarray, Classification]], horizon: float) -> Classification:
    """Combine per-Σ₀ verdicts of an ensemble into one ``scope="all"`` verdict."""
    cls = [c for _, c in runs]
    labels = [c.label for c in cls]
    n = len(cls)
    method = max((c.method for c in cls), key=_METHOD_ORDER.__getitem__)
    details: dict[str, Any] = {
        "horizon": horizon,
        "runs": [{"scale": float(np.trace(S)) / S.shape[0], "label": c.label, "method": c.method,
                  "rate_kind": c.rate_kind, "rate": c.rate, "blowup_time": c.blowup_time}
                 for S, c in runs]}
    counts = {lab: labels.count(lab) for lab in LABELS if lab in labels}
    conv = ("converges", "converges_to_zero")
    if all(lab == "blows_up" for lab in labels):
        return Classification("blows_up", method, f"all {n} initial covariances blew up",
                              details=details)
    if "undetermined" in labels:
        first = cls[labels.index("undetermined")]
        return Classification("undetermined", method,
                              f"{counts['undetermined']} of {n} runs undetermined (outcomes "
                              f"{counts}); first: {first.reason}", details=details)
    if "blows_up" in labels:
        if all(lab in (*conv, "blows_up") for lab in labels):
            return Classification("depends_on_initial_data", method,
                                  f"{counts['blows_up']} of {n} initial covariances blew up, the "
                                  "others converge", details=details)
        return Classification("undetermined", method,
                              f"{counts['blows_up']} of {n} blew up and the others did not "
                              f"settle on a limit ({counts}); a longer horizon decides whether "
                              "they blow up later", details=details)
    if len(counts) > 1 and not all(lab in conv for lab in labels):
        return Classification("depends_on_initial_data", method,
                              f"the long-time behaviour depends on Σ₀: {counts}", details=details)
    kinds = {c.rate_kind for c in cls}
    kind = kinds.pop() if len(kinds) == 1 else None
    rates = [c.rate for c in cls if c.rate is not None]
    lab = labels[0]
    if lab == "unbounded":
        return Classification("unbounded", method, f"all {n} runs grow without blowing up",
                              None, kind, max(rates) if rates and kind else None,
                              details=details)
    if lab == "oscillates":
        return Classification("oscillates", method, f"all {n} runs oscillate", details=details)
    # all converge (possibly to 0)
    rate = min(rates) if rates and kind else None
    if all(lab == "converges_to_zero" for lab in labels):
        d = runs[0][0].shape[0]
        return Classification("converges_to_zero", method,
                              f"all {n} initial covariances converge to 0", np.zeros((d, d)),
                              kind, rate, details=details)
    lims = [c.limit for c in cls]
    ref = lims[0]
    same = ref is not None and all(
        L is not None and float(np.linalg.norm(L - ref)) <= 1e-6 * max(1.0, float(
            np.linalg.norm(ref))) for L in lims)
    if same:
        return Classification("converges", method,
                              f"all {n} initial covariances converge to the same limit", ref,
                              kind, rate, details=details)
    return Classification("converges", method,
                          f"all {n} initial covariances converge, to limits that depend on Σ₀",
                          None, kind, rate, details=details)


def classify(params: GaussianParams, *, Sigma0: np.ndarray | None = None, method: str = "auto",
             horizon: float = 50.0, n_scales: int = 5, n_orient: int = 2, seed: int = 0,
             solver: str = "LSODA", check: bool = True) -> Classification:
    """Classify the long-time behaviour of Σ for constant ``(A, V, B)`` (module docstring).

    Parameters
    ----------
    params : GaussianParams
        ``b`` only enters the mean equilibria.

    Other Parameters
    ----------------
    Sigma0 : (d, d) array, optional
        Classify the trajectory from this PSD covariance (any rank): its limit,
        rate or blow-up time. Default: every full-rank Σ₀ (``scope="all"``).
    method : {"auto", "exact", "probe"}
        ``auto``: a structural rule where one applies, else the probe; ``exact``:
        structural rules only (``ValueError`` if none applies); ``probe``: probe only.
    horizon : float
        Integration time of the probe and of the rate check.
    n_scales, n_orient : int
        Probe ensemble (``scope="all"``): ``n_scales`` scales in ``[10^{-2}, 10^2]``
        times ``n_orient`` random orientations.
    seed : int
        Seed of the probe ensemble and of the Newton starts.
    solver : str
        ``solve_ivp`` method of the integrations.
    check : bool
        With ``Sigma0``: fit the rate of an exact verdict on an integration (``rate_fit``).

    Returns
    -------
    Classification
    """
    if method not in ("auto", "exact", "probe"):
        raise ValueError(f"method: must be 'auto', 'exact' or 'probe', got {method!r}")
    if not (math.isfinite(horizon) and horizon > 0):
        raise ValueError(f"horizon: must be finite and > 0, got {horizon}")
    d = params.d
    eqs = equilibria(params, seed=seed)
    fams = equilibrium_families(params)

    def attach(cl: Classification) -> Classification:
        extra = tuple(f for f in cl.families if f not in fams)
        return replace(cl, equilibria=eqs, families=tuple(fams) + extra)

    S0 = None
    if Sigma0 is not None:
        S0 = np.asarray(Sigma0, dtype=np.float64)
        if S0.shape != (d, d):
            raise ValueError(f"Sigma0: expected shape ({d}, {d}), got {S0.shape}")
        psd_factor(S0, name="Sigma0")
        S0 = 0.5 * (S0 + S0.T)
        if psd_factor(S0, name="Sigma0").shape[1] == 0:
            return attach(Classification("converges_to_zero", "exact",
                                         "Σ₀ = 0 is an equilibrium (the rank of Σ is invariant)",
                                         np.zeros((d, d)), "stationary", None, scope="Sigma0"))
    if method != "probe":
        cl = _structural(params, S0, horizon=horizon, solver=solver)
        if cl is not None:
            if check and S0 is not None and cl.rate_fit is None:
                cl = _with_fit(cl, params, S0, horizon, solver)
            return attach(cl)
        if method == "exact" and S0 is not None:
            raise ValueError("method='exact': no structural rule applies (needs a linear flow, "
                             "A = 0 with symmetric definite V and symmetric B, or V = vI with "
                             "A_s, A_k, V(B + Bᵀ) commuting)")
    if S0 is not None:
        cl = _probe_one(params, S0, horizon, solver, eqs)
        logger.info("classify: %s", cl.summary_line())
        return attach(cl)
    runs = []
    for S in _ensemble(d, n_scales=int(n_scales), n_orient=int(n_orient), seed=seed):
        c = _structural(params, S, horizon=horizon, solver=solver) if method != "probe" else None
        if c is None:
            if method == "exact":
                raise ValueError("method='exact': no structural rule applies (needs a linear "
                                 "flow, A = 0 with symmetric definite V and symmetric B, or "
                                 "V = vI with A_s, A_k, V(B + Bᵀ) commuting)")
            c = _probe_one(params, S, horizon, solver, eqs)
        runs.append((S, c))
    cl = _aggregate(runs, horizon)
    if cl.label == "undetermined":
        logger.info("classify: %s", cl.reason)
    return attach(cl)


@dataclass(frozen=True)
class PhaseDiagram:
    """Classifier labels over a 2-parameter family.

    Attributes
    ----------
    x, y : 1-d arrays
        Grid values.
    labels : (len(y), len(x)) array of str
    methods : (len(y), len(x)) array of str
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
    for j, yy in enumerate(y):
        for i, xx in enumerate(x):
            cl = classify(family(float(xx), float(yy)), **classify_kw)
            labels[j, i] = cl.label
            methods[j, i] = cl.method
    return PhaseDiagram(x=x, y=y, labels=labels.astype(str), methods=methods.astype(str),
                        x_name=x_name, y_name=y_name)

