"""The state of a particle run and its result: histories, per-step integrands, balances, status.

Shared by the Python loop (:mod:`~wflow.particles.solver`) and the compiled loop
(:mod:`~wflow.particles.compiled`), so both end a run the same way.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import NamedTuple

import numpy as np

from ..attention.heads import Attention, Heads
from ..attention.schedules import Schedule
from ..diagnostics import (
    BalanceAccumulator,
    attention_entropy,
    count_clusters,
    entropy_production,
    head_rates,
    mean_inner_product,
    radial_shadows,
    simpson_balance,
)
from ..energy import FieldEval, head_energies
from ..results import SolverResult
from ..status import Check, Status, balance_order, judge_steps
from .options import INTEGRATOR_ORDER, ParticleOptions

__all__ = ["STEP_KEYS", "ParticleState", "ParticleResult", "add_simpson", "judge_run"]

#: The per-step integrands every run keeps (``ParticleResult.steps``, besides ``"t"``).
STEP_KEYS = ("E", "dEdt_w", "power", "slope2", "speed2", "G2", "ito")


class ParticleState(NamedTuple):
    """One point of a trajectory (yielded by :func:`iterate`)."""

    t: float
    x: np.ndarray
    theta: np.ndarray
    heads: Heads
    field: FieldEval
    velocity: np.ndarray
    integrands: dict[str, float]
    dtheta_noise: np.ndarray | None  # θ_{k+1} − θ_k − dt·drift, for the martingale term
    pre_jump: dict[str, float] | None = None  # integrands at t⁻ when the weights jump at t


@dataclass(frozen=True)
class ParticleResult(SolverResult):
    """Result of :func:`simulate` (the fields of :class:`~wflow.results.SolverResult`, and).

    Attributes
    ----------
    status : Status
        ``SUCCESS``; ``INACCURATE`` (finite, but the chain-rule residual of some path
        exceeds its tolerance, see :mod:`wflow.status`); or ``FAILED`` (non-finite
        values). ``message`` says why.
    order : int
        Order of the integrator in ``dt`` (``INTEGRATOR_ORDER``).
    engine : str
        ``"python"`` or ``"compiled"`` (also ``extra["engine"]``).
    t : (K,) array
        Recorded times.
    history : dict of arrays
        Per-path diagnostics, shape ``(P, K)`` for scalars, ``(P, K, H)`` per head.
    steps : dict of arrays
        Per-step balance integrands (``t`` of shape ``(S+1,)``; others ``(P, S+1)``); with
        token diffusion on the Python loop also ``lap = Σ_iΔ_{S,i}E``, ``qv`` and ``kappa``
        (:data:`wflow.particles.free_energy.ITO_STEP_KEYS`).
    balance : dict of arrays
        Final balance terms and residuals per path, shape ``(P,)``.
    x : (P, n, d) array
        Final tokens per path.
    theta : (P, H, rows, d) array
        Final weight parameters per path.
    trajectory, theta_trajectory : arrays or None
        Tokens ``(P, K, n, d)`` / weights ``(P, K, H, rows, d)`` at recorded times (with
        ``save_trajectory=True``): path first, then time. The last tokens of path 0 are
        ``trajectory[0, -1]``; ``trajectory[-1]`` is the whole last *path*.
    sign : int
        ``+1`` ascent / ``−1`` descent for value-aligned symmetric heads, else 0.
    extra : dict
        The kernel log (``"kernel"``), the engine and why it was chosen.
    checks : dict
        Accuracy checks behind the status (``"chain"``: relative chain-rule residual of
        the worst path, its tolerance, pass/fail and rule; :func:`wflow.status.chain_check`).
        With token diffusion ``D > 0``: ``"ito_balance"``, the Itô energy balance of the
        tokens in the mean over paths (:func:`wflow.particles.free_energy.ito_check`;
        ``judged: False`` with a ``reason`` where it is not judged), which then decides
        the status; the per-path ``ito_tokens``, ``ito_residual`` and ``ito_qv`` are in
        ``balance``.
    """

    t: np.ndarray
    steps: dict[str, np.ndarray]
    balance: dict[str, np.ndarray]
    x: np.ndarray
    theta: np.ndarray
    trajectory: np.ndarray | None = None
    theta_trajectory: np.ndarray | None = None
    sign: int = 0
    extra: dict = field(default_factory=dict)

    @property
    def n_paths(self) -> int:
        """Number of Monte-Carlo paths."""
        return self.x.shape[0]

    def mean(self, name: str) -> np.ndarray:
        """Monte-Carlo mean of a recorded diagnostic over paths."""
        return self.history[name].mean(axis=0)

    def std(self, name: str) -> np.ndarray:
        """Monte-Carlo standard deviation (``ddof=1``; zeros for one path)."""
        h = self.history[name]
        return h.std(axis=0, ddof=1) if h.shape[0] > 1 else np.zeros(h.shape[1:])

    def final(self) -> dict[str, dict[str, float | list]]:
        """Final value of every diagnostic: mean and std over paths."""
        out = {}
        for name in self.history:
            mu, sd = self.mean(name)[-1], self.std(name)[-1]
            out[name] = {"mean": np.asarray(mu).tolist(), "std": np.asarray(sd).tolist()}
        return out

    def balance_summary(self) -> dict[str, dict[str, float]]:
        """Balance residuals: per-path values, mean and standard error of the mean."""
        out = {}
        for k, v in self.balance.items():
            P = v.shape[0]
            out[k] = {"mean": float(np.mean(v)),
                      "stderr": float(np.std(v, ddof=1) / np.sqrt(P)) if P > 1 else 0.0,
                      "paths": v.tolist()}
        return out


def add_simpson(balance: dict[str, list[float]], grid: np.ndarray,
                steps: dict[str, np.ndarray], p: int, *, sign: int, schedule: Schedule) -> None:
    """Append path ``p``'s Simpson residuals to ``balance``.

    ``chain_simpson`` always; ``edi_simpson`` and ``g2_simpson`` for a gradient-flow
    direction with deterministic weights. Nothing with weight jumps: Simpson needs smooth
    integrands.
    """
    if schedule.jump_times:
        return
    # EDI forms: gradient-flow direction and deterministic weights (no Itô terms)
    simp = simpson_balance(grid, steps["E"][p], {k: steps[k][p] for k in STEP_KEYS},
                           sign=0 if schedule.stochastic else sign)
    for key, val in simp.items():
        balance.setdefault(f"{key}_simpson", []).append(val)


def judge_run(history: dict[str, np.ndarray], steps: dict[str, np.ndarray],
              balance: dict[str, np.ndarray], grid: np.ndarray, opts: ParticleOptions,
              stochastic: bool) -> tuple[str, str, dict]:
    """Status, message and checks of a finished run (both engines).

    ``"failed"`` on any non-finite recorded number; otherwise the chain-rule check
    (:func:`_accuracy`) decides between ``"success"`` and ``"inaccurate"``.
    """
    status, message = Status.SUCCESS, ""
    for name, arr in list(history.items()) + [(k, steps[k]) for k in STEP_KEYS]:
        if not np.all(np.isfinite(arr)):
            status, message = Status.FAILED, f"non-finite values in diagnostic {name!r}"
    checks: dict = {}
    if status == Status.SUCCESS:
        check = _accuracy(grid, steps, balance["chain"], opts, stochastic)
        checks["chain"] = check.as_dict()
        if not check.passed:
            status, message = Status.INACCURATE, check.failure()
    return status, message, checks


def _accuracy(t: np.ndarray, steps: dict[str, np.ndarray], chain: np.ndarray,
              opts: ParticleOptions, stochastic: bool) -> Check:
    """Chain-rule check of a particle run (:func:`wflow.status.chain_check`), per path.

    Budget ``∫(|power| + |∂_tE| + |Itô|) dt`` from the per-step integrands (trapezoid).
    Balance order ``min(integrator order, 2)``; 1 with noisy weights (Euler–Maruyama
    leaves a per-path residual of order ``√dt`` through the quadratic variation, judged
    against the first-order tolerance). Every path is judged on its own — the residual
    is the discretisation error of that path's ODE, not Monte-Carlo noise — and the
    worst one sets the status.
    """
    q = 1 if stochastic else balance_order(INTEGRATOR_ORDER[opts.integrator])
    scheme = f"{opts.integrator}{' + Euler–Maruyama weights' if stochastic else ''}, " \
             f"dt = {opts.dt:g}"
    return judge_steps(t, steps, chain, order=q, scheme=scheme)


def put_record(rows: dict[str, list], terms: dict[str, float], E_h: np.ndarray,
               bhat: tuple[float, float, float], mean_inner: float, n_clusters: float | None,
               acc: BalanceAccumulator, rates: tuple | None) -> None:
    """Append one record's values to ``rows`` (the keys and their order of every engine).

    ``bhat``: mean, min and max of ``b̂``; ``n_clusters``: ``None`` when not counted;
    ``rates``: ``(dE_h/dt, own, cross direct, cross radial, margin, radial shadow)`` or
    ``None``.
    """
    def put(key: str, val) -> None:
        rows.setdefault(key, []).append(val)

    put("E", terms["E"])
    put("E_h", E_h)
    for key in ("dEdt_w", "power", "slope2", "speed2", "G2", "ito"):
        put(key, terms[key])
    put("bhat_mean", bhat[0])
    put("bhat_min", bhat[1])
    put("bhat_max", bhat[2])
    put("mean_inner", mean_inner)
    if n_clusters is not None:
        put("n_clusters", n_clusters)
    res = acc.residuals()
    for key in ("chain", "edi", "g2") if acc.sign else ("chain",):
        put(f"balance_{key}", res[key])
    if rates is not None:
        for key, val in zip(("dEh_dt", "dEh_own", "dEh_cross_direct", "dEh_cross_radial",
                             "radial_margin", "radial_shadow"), rates, strict=True):
            put(key, val)


def _record(rows: dict[str, list], st: ParticleState, m: np.ndarray, attn: Attention,
            acc: BalanceAccumulator, opts: ParticleOptions, schedule: Schedule) -> None:
    x, fe, heads = st.x, st.field, st.heads
    rates = None
    if opts.head_rates:
        hr = head_rates(x, m, fe, heads)
        rates = (hr.total, hr.own, hr.cross_direct, hr.cross_radial, hr.margin,
                 radial_shadows(x, fe) @ m)
    put_record(rows, st.integrands, head_energies(fe, m, attn),
               (float(m @ fe.bhat), float(fe.bhat.min()), float(fe.bhat.max())),
               mean_inner_product(x, m),
               float(count_clusters(x, cos_threshold=opts.cluster_cos)) if opts.clusters
               else None, acc, rates)
    if opts.entropy:
        ent = attention_entropy(x, heads, attn)
        A_dot = None if schedule.static else schedule.A_dot(st.theta, st.t)
        rate = entropy_production(x, st.velocity, heads, attn, A_dot)
        rows.setdefault("entropy", []).append(ent @ m)
        rows.setdefault("entropy_rate", []).append(rate @ m)
