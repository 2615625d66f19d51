r"""The Itô energy balance of noisy tokens (THEORY §8): terms along a run and its judged check.

With token diffusion ``D > 0`` each token solves ``dx_i = v_i dt + √(2D) P_{x_i} ∘ dW_i``
(generator ``v·∇ + D Δ_S`` per token). Itô's formula for the interaction energy
``E(x_1, …, x_n) = Σ_h (w_h/2β) Σ_{a,b} m_a m_b Φ(β x_aᵀA_h x_b)`` gives, per path,

.. math::

    E(T) − E(0) = \int_0^T \big(\text{power} + ∂_t E\big)\,dt
      + D \int_0^T \sum_i Δ_{S,i} E\,dt + M_T,\qquad
    M_T = \sqrt{2D} \sum_i \int_0^T ∇_{S,i}E \cdot dW_i,

``power = Σ_i ∇_iE·v_i`` (the chain rule's integrand, any flow and any kind) and ``M`` a
martingale of mean zero with ``E[M_T²] = E∫ 2D Σ_i |∇_{S,i}E|² dt``
(``∇_{S,i}E = m_i P_{x_i}∇ψ(x_i)``). So the residual

.. math::

    r = E(T) − E(0) − \int (\text{power} + ∂_tE)\,dt − D\int \sum_i Δ_{S,i}E\,dt

(the run's chain-rule residual less the Itô term) has mean zero up to the scheme's weak
error; a path's ``r`` is ``M_T`` plus discretisation error.

**The Laplacian in closed form** (exponential kinds, ``Φ = Φ' = Φ'' = e^s``; ``s =
βxᵀAy``). On the sphere ``Δ_S f = tr(P_x ∇²f) − (d−1) x·∇f``, so

.. math::

    Δ_x Φ = β²Φ''\,|P_x A y|² − (d−1)βΦ'\,xᵀAy,\qquad
    Δ_y Φ = β²Φ''\,|P_y Aᵀx|² − (d−1)βΦ'\,xᵀAy,

and the self term ``Φ(βx_iᵀAx_i)`` adds the mixed derivative
``2 tr(P_x ∂_x∂_yΦ) = 2[βΦ'(tr A − xᵀAx) + β²Φ''(Aᵀx)·P_x(Ax)]``. Summing over the
tokens (the ``Δ_y`` part relabelled ``i ↔ j``),

.. math::

    \sum_i Δ_{S,i}E = \sum_h \frac{w_h}{2β} \sum_i m_i \Big[
      β²\big(\mathrm{tr}(AᵀA\,M_i) + |Aᵀx_i|² Z_i − 2 (Aᵀx_i)ᵀ M_i (Aᵀx_i)\big)
      − 2(d−1)β\, x_i·A Y_i + 2 m_i c_i \Big]

with the kernel sums ``Z_i = Σ_j m_j k(s_ij)``, ``Y_i = Σ_j m_j k(s_ij) y_j`` (the field's)
and the second moment ``M_i = Σ_j m_j k(s_ij) y_j y_jᵀ``, obtained from ``d`` more kernel
sums with the non-negative masses ``m_j(1 + y_{j,a})``: ``M_i[a] = Y_i[m(1 + y_a)] − Y_i``
(:func:`wflow.kernels.kernel_sums`, any back-end; over MPI ranks
:func:`wflow.kernels.split.split_sums`). Memory ``O(n H d²)``, never an ``(n, n)`` array;
cost ``d`` kernel sums per state. Kinds whose ``Φ''`` is not their kernel (ReLU:
``Φ'' = 1_{s>0}``) have no such sums: the balance is reported as not judged.

**The check** (:func:`ito_check`). Over ``P`` paths, ``r̄ = mean_p r_p`` against

.. math::

    |r̄| \le z\,\mathrm{SE} + (κ h)^q B + S\,\sqrt{ε}\,\max|E|,

* the standard error. With ``P ≥ 16`` paths the residual less a control variate of the
  martingale (:func:`martingale_cv`: the step's keyed noise redrawn at the state, mean
  exactly zero), and its sample standard error over the paths; the variate removes the
  leading martingale, the rest shrinks like ``√h`` (measured: SE 0.017 → 0.004 at
  ``h = 0.025``). With fewer paths ``SE² = mean_p ∫ 2D Σ_i |∇_{S,i}E|² dt / P``, the
  martingale's variance by its predictable quadratic variation along the paths (valid for
  one path). ``z = 4``: a false alarm below ``1e-4`` per run for a Gaussian mean,
  ``1e-3`` for Student's ``t`` with 15 degrees of freedom;
* the weak bias. The integrals are trapezoid sums
  (:class:`~wflow.diagnostics.BalanceAccumulator`). Per step
  ``E[ΔE_k] = h LE + h²/2 L²E + e_k`` with the scheme's local weak error
  ``e_k = O(h^{q+1})`` and the trapezoid's mean ``h LE + h²/2 L²E + O(h³)``, so the mean
  residual is ``O(h^q)`` for a scheme of weak order ``q ≤ 2``
  (Euler–Maruyama ``q = 1``, Strang ``q = 2``). Its constant is bounded by the scale
  argument ``|e_k| ≲ (κh)^q h |LE|``: each application of the generator to ``E`` costs at
  most the rate ``κ = β a (u + D(β a + d − 1))`` (``a = max_h ‖A_h‖₂``, ``u`` the RMS
  speed ``(Σ_i m_i|v_i|²)^{1/2}``, its maximum over the run: a derivative of
  ``e^{βxᵀAy}`` brings ``βa``, the drift ``u`` per derivative, the Laplacian
  ``βa(βa + d − 1)``), and ``B = mean_p ∫(|power| + |∂_tE| + D|ΣΔ_SE|) dt`` bounds
  ``∫|LE|``. The bound shrinks like ``h^q``; it is a scale argument, not a proof, and
  the tests check it against the measured bias (6–10 % of the bound on clustered tokens,
  d = 2, β = 2, D = 0.5) and the fitted orders (EM 1.0, Strang 1.8);
* round-off: ``S`` steps of energy differences, each ``√ε`` relative at worst.

A wrong diffusivity in the dynamics (``D(1 + s)``) shifts ``r̄`` by ``s D ∫ΣΔ_SE``, and a
balance without the Itô term by ``D ∫ΣΔ_SE``: both are caught once they exceed the
tolerance (tests/test_particles_free_energy.py).
"""

from __future__ import annotations

import logging
import math
from collections.abc import Callable, Mapping
from typing import Any

import numpy as np

from ..attention.heads import Attention, Heads
from ..attention.kinds import get_kind
from ..energy import FieldEval
from ..kernels import kernel_sums
from ..status import Status

__all__ = [
    "ITO_STEP_KEYS",
    "ITO_Z",
    "laplacian_energy",
    "has_laplacian",
    "ito_integrands",
    "bias_rate",
    "martingale_cv",
    "ito_balance_terms",
    "ito_check",
    "judge_ito_balance",
    "judge_noisy_run",
]

logger = logging.getLogger(__name__)

#: Per-step integrands a noisy run keeps besides the chain rule's (``ParticleResult.steps``):
#: ``lap = Σ_i Δ_{S,i}E`` (without ``D``), ``qv = 2D Σ_i |∇_{S,i}E|²`` (the martingale's
#: quadratic-variation density), ``kappa`` (the rate ``κ`` of the bias bound), ``cv`` (the
#: control variate :func:`martingale_cv` of the step from this state; 0 at the last).
ITO_STEP_KEYS = ("lap", "qv", "kappa", "cv")
#: Standard errors allowed to the mean residual (two-sided Gaussian tail ``6e-5``; Student's
#: ``t`` with 15 degrees of freedom, the fewest paths of the control-variate estimate: ``1e-3``).
ITO_Z = 4.0
#: Fewest paths for the control-variate estimate (sample standard error over paths).
CV_PATHS = 16
#: Why the Itô balance is not judged: a kind whose ``Φ''`` is not its kernel.
NO_LAPLACIAN = ("the attention kind has no closed-form Laplacian of the energy (Φ'' is not "
                "its kernel)")
#: Why the Itô balance is not judged: noisy weights.
NOISY_WEIGHTS = "noisy weights: their Itô terms enter the chain residual at order √dt per path"

#: ``sums(masses) -> (Z, Y)``: the kernel sums at the targets over all sources with the
#: given source masses (shapes ``(H, M)`` and ``(H, M, d)``).
SumsFn = Callable[[np.ndarray], tuple[np.ndarray, np.ndarray]]


def has_laplacian(kind: str) -> bool:
    """Whether the kind's ``Φ''`` equals its kernel (exponential kinds: softmax, USA)."""
    return bool(get_kind(kind).exponential)


def _local_sums(x: np.ndarray, heads: Heads, attn: Attention, backend: str,
                tol: float) -> SumsFn:
    def sums(mass: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        s = kernel_sums(x, x, mass, heads.Q, heads.K, beta=attn.beta, kind=attn.kind,
                        backend=backend, tol=tol)
        return s.Z, s.Y
    return sums


def laplacian_energy(x: np.ndarray, m: np.ndarray, heads: Heads, attn: Attention,
                     field: FieldEval, *, sums: SumsFn | None = None, backend: str = "auto",
                     tol: float = 1e-10) -> float:
    r"""``Σ_i m_i [ … ]``: this process's part of ``Σ_i Δ_{S,i}E`` (module docstring).

    Parameters
    ----------
    x : (M, d) array
        Tokens on the unit sphere (this process's; targets of ``field``).
    m : (M,) array
        Their masses.
    heads, attn
        Heads (any ``A_h``, symmetric or not) and an exponential attention kind.
    field : FieldEval
        The field at ``x`` (its ``Z`` and ``Y``: the kernel sums with masses ``m``).
    sums : callable, optional
        ``sums(masses) -> (Z, Y)`` over all sources (default:
        :func:`wflow.kernels.kernel_sums` with sources ``x``; split over ranks: the ranks'
        sums).
    backend, tol
        Kernel back-end and tolerance of the default ``sums``.

    Returns
    -------
    float
        The part of ``Σ_i Δ_{S,i}E`` of the tokens ``x`` (units: energy; the whole sum
        when ``x`` holds every token).

    Raises
    ------
    ValueError
        For a kind without the closed form (:func:`has_laplacian`).
    """
    if not has_laplacian(attn.kind):
        raise ValueError(f"attention.kind: {attn.kind!r} has no closed-form Laplacian of "
                         "the energy (Φ'' is not its kernel)")
    x = np.asarray(x, dtype=np.float64)
    M_, d = x.shape
    if M_ == 0:
        sums = sums or _local_sums(x, heads, attn, backend, tol)
        for _a in range(d):  # collective in a split run: every rank calls the sums
            sums(m.copy())
        return 0.0
    sums = sums or _local_sums(x, heads, attn, backend, tol)
    beta = float(attn.beta)
    Z, Y = field.Z, field.Y  # (H, M), (H, M, d)
    H = Z.shape[0]
    Mom = np.empty((H, M_, d, d))  # Σ_j m_j k y_j y_jᵀ, row a = Y[m(1 + y_a)] − Y
    for a in range(d):
        _, Ya = sums(m * (1.0 + x[:, a]))
        Mom[:, :, a, :] = Ya - Y
    Mom = 0.5 * (Mom + np.swapaxes(Mom, 2, 3))  # symmetric up to round-off
    total = 0.0
    for h in range(H):
        A = heads.A[h]
        Atx = x @ A  # rows Aᵀx_i
        Ax = x @ A.T  # rows A x_i
        AtA = A.T @ A
        trAM = np.einsum("ab,mab->m", AtA, Mom[h])
        quad = np.einsum("ma,mab,mb->m", Atx, Mom[h], Atx)
        xAY = np.einsum("ma,ma->m", Atx, Y[h])  # x_i·A Y_i
        pair = beta**2 * (trAM + np.einsum("ma,ma->m", Atx, Atx) * Z[h] - 2.0 * quad) \
            - 2.0 * (d - 1) * beta * xAY
        xAx = np.einsum("ma,ma->m", x, Ax)
        kii = np.exp(beta * xAx)
        PAx = Ax - xAx[:, None] * x
        c = kii * (beta * (np.trace(A) - xAx) + beta**2 * np.einsum("ma,ma->m", Atx, PAx))
        total += heads.w[h] / (2.0 * beta) * float(m @ (pair + 2.0 * m * c))
    return total


def ito_integrands(x: np.ndarray, m: np.ndarray, heads: Heads, attn: Attention,
                   field: FieldEval, velocity: np.ndarray, diffusion: float, *,
                   sums: SumsFn | None = None, backend: str = "auto",
                   tol: float = 1e-10) -> dict[str, float]:
    """The parts of :data:`ITO_STEP_KEYS` at one state of this process's tokens (module docstring).

    ``lap``: NaN for a kind without the closed form; ``qv``: ``2D Σ_i m_i²|P∇ψ_i|²``;
    ``u2``: ``Σ_i m_i |v_i|²``. Sums over this process's tokens (a split run adds the
    ranks' parts, then :func:`bias_rate` gives ``kappa``).
    """
    gpsi = np.einsum("h,hmd->md", heads.w, field.grad_psi)
    pg = gpsi - np.sum(gpsi * x, axis=1)[:, None] * x
    qv = 2.0 * diffusion * float((m * m) @ np.sum(pg * pg, axis=1))
    lap = float("nan")
    if has_laplacian(attn.kind):
        lap = laplacian_energy(x, m, heads, attn, field, sums=sums, backend=backend, tol=tol)
    u2 = float(m @ np.sum(velocity * velocity, axis=1))
    return {"lap": lap, "qv": qv, "u2": u2}


def martingale_cv(x: np.ndarray, m: np.ndarray, heads: Heads, field: FieldEval,
                  velocity: np.ndarray, integrator: Any, noise: Any, h: float,
                  diffusion: float) -> float:
    r"""A control variate of the step's martingale increment, of mean exactly zero.

    ``C_k = Σ_i m_i P_{x_i}∇ψ(x_i) · δ_i`` with ``δ_i`` the step's tangent noise at the
    state ``x_k``, redrawn from the keyed streams ``noise``
    (:class:`~wflow.particles.noise.StepNoise`): Euler–Maruyama ``√(2Dh) P_xξ``; Strang
    the tangent parts of both heat-kernel draws, the first ``P_x B_{h/2}(x)`` exactly,
    the second taken at ``z̃ = normalise(B_{h/2}(x) + h v(x_k))`` (the scheme's drifted state
    to first order;
    the variate stays mean zero, the second draw being independent of ``z̃`` and
    symmetric); Strang–Heun (drift outside) the tangent parts of both draws at their own
    bases, the first at ``ỹ = normalise(x_k + (h/2) v(x_k))`` (its drifted start to first
    order). Another integrator: ``0``.
    ``E[C_k] = 0`` whatever the integrator does, so subtracting ``Σ_k C_k`` from a path's
    residual keeps its mean and removes the leading martingale.
    """
    from .integrators import EulerMaruyama, StrangHeat, StrangHeun

    if x.shape[0] == 0 or not diffusion > 0:
        return 0.0
    if isinstance(integrator, EulerMaruyama):
        xi = noise.normals(0)
        inc = math.sqrt(2.0 * diffusion * h) * (xi - np.sum(xi * x, axis=1)[:, None] * x)
    elif isinstance(integrator, StrangHeat):
        s = 0.5 * diffusion * h
        y = noise.heat(x, s, 0)
        inc = y - np.sum(y * x, axis=1)[:, None] * x
        z = y + h * velocity  # the drifted state, to first order
        z /= np.linalg.norm(z, axis=1)[:, None]
        y = noise.heat(z, s, 1)
        inc += y - np.sum(y * z, axis=1)[:, None] * z
    elif isinstance(integrator, StrangHeun):
        s = 0.5 * diffusion * h
        z = x + (0.5 * h) * velocity  # the first half step's end, to first order
        z /= np.linalg.norm(z, axis=1)[:, None]
        y = noise.heat(z, s, 0)
        inc = y - np.sum(y * z, axis=1)[:, None] * z
        z = noise.heat(y, s, 1)
        inc += z - np.sum(z * y, axis=1)[:, None] * y
    else:
        return 0.0
    gpsi = np.einsum("h,hmd->md", heads.w, field.grad_psi)
    return float(m @ np.sum(gpsi * inc, axis=1))  # inc is tangent: P∇ψ·inc = ∇ψ·inc


def bias_rate(heads: Heads, attn: Attention, d: int, diffusion: float, u2: float) -> float:
    """The rate ``κ = βa(u + D(βa + d − 1))`` of the bias bound (module docstring).

    ``a = max_h ‖A_h‖₂``; ``u = (Σ_i m_i|v_i|²)^{1/2}``, the tokens' RMS speed (the energy
    is an average over the tokens, so are the constants of its weak error).
    """
    a = float(max(np.linalg.norm(A, 2) for A in heads.A))
    ba = attn.beta * a
    return ba * (math.sqrt(max(u2, 0.0)) + diffusion * (ba + d - 1))


def _trap(t: np.ndarray, f: np.ndarray) -> np.ndarray:
    """Trapezoid integral along the last axis."""
    return np.sum(0.5 * np.diff(t) * (f[..., 1:] + f[..., :-1]), axis=-1)


def ito_balance_terms(t: np.ndarray, steps: Mapping[str, np.ndarray], chain: np.ndarray,
                      diffusion: float) -> dict[str, np.ndarray]:
    """Per-path terms of the Itô balance, shape ``(P,)`` each.

    ``ito_tokens = D ∫ΣΔ_SE dt`` (trapezoid, as the chain rule's integrals),
    ``ito_residual = chain − ito_tokens``, ``ito_qv = ∫ 2DΣ|∇_SE|² dt``; where the steps
    hold the control variates, ``ito_cv = Σ_k C_k`` and ``ito_residual_cv = ito_residual −
    ito_cv`` (the same mean, the leading martingale removed).
    """
    t = np.asarray(t, dtype=np.float64)
    lap = np.atleast_2d(np.asarray(steps["lap"], dtype=np.float64))
    qv = np.atleast_2d(np.asarray(steps["qv"], dtype=np.float64))
    ito = diffusion * _trap(t, lap)
    r = np.asarray(chain, dtype=np.float64) - ito
    out = {"ito_tokens": ito, "ito_residual": r, "ito_qv": _trap(t, qv)}
    if "cv" in steps:
        cv = np.sum(np.atleast_2d(np.asarray(steps["cv"], dtype=np.float64)), axis=-1)
        out.update(ito_cv=cv, ito_residual_cv=r - cv)
    return out


def ito_check(t: np.ndarray, steps: Mapping[str, np.ndarray], chain: np.ndarray, *,
              diffusion: float, order: int, scheme: str, z: float = ITO_Z,
              judged_diffusion: float | None = None) -> dict[str, Any]:
    """Judge the mean Itô residual over paths (module docstring: tolerance and its reasons).

    Parameters
    ----------
    t : (S+1,) array
        Step times.
    steps : mapping
        Per-step integrands ``(P, S+1)``: ``E``, ``power``, ``dEdt_w``, ``ito`` and
        :data:`ITO_STEP_KEYS`.
    chain : (P,) array
        The chain-rule residuals ``ΔE − ∫(power + ∂_tE) − …`` of the paths.
    diffusion : float
        ``D`` of the run (the quadratic variation ``qv`` was recorded with it).
    order : int
        The scheme's weak order ``q`` (the bias bound ``(κh)^q B``; at most 2, the
        trapezoid's).
    scheme : str
        Named in the rule.
    z : float
        Standard errors allowed.
    judged_diffusion : float, optional
        ``D`` in the Itô term of the residual (default ``diffusion``; a negative control
        judges with a wrong one).

    Returns
    -------
    dict
        ``value`` (``|r̄|``), ``tolerance``, ``passed``, ``judged`` (True), ``mean``,
        ``stderr`` (quadratic variation), ``stderr_sample`` (over paths; NaN for one),
        ``bias_bound``, ``z``, ``order``, ``paths``, ``rule``, ``scheme``.
    """
    Dj = diffusion if judged_diffusion is None else float(judged_diffusion)
    t = np.asarray(t, dtype=np.float64)
    terms = ito_balance_terms(t, steps, chain, Dj)
    r = terms["ito_residual"]
    P = r.size
    se_qv = math.sqrt(max(float(np.mean(terms["ito_qv"])), 0.0) / P)
    se_sample = float(np.std(r, ddof=1) / math.sqrt(P)) if P > 1 else float("nan")
    if "ito_residual_cv" in terms and P >= CV_PATHS:
        rc = terms["ito_residual_cv"]
        mean, se = float(np.mean(rc)), float(np.std(rc, ddof=1) / math.sqrt(P))
        estimator = f"control variate, sample SE over {P} paths"
    else:
        mean, se = float(np.mean(r)), se_qv
        estimator = "quadratic variation"
    q = min(int(order), 2)
    lap = np.atleast_2d(np.asarray(steps["lap"], dtype=np.float64))
    budget = float(np.mean(_trap(t, np.abs(np.atleast_2d(steps["power"]))
                                 + np.abs(np.atleast_2d(steps["dEdt_w"]))
                                 + np.abs(np.atleast_2d(steps["ito"]))
                                 + Dj * np.abs(lap))))
    h = float(np.max(np.diff(t))) if t.size > 1 else 0.0
    kappa = float(np.max(np.atleast_2d(steps["kappa"])))
    bias = (kappa * h) ** q * budget
    S = max(t.size - 1, 1)
    roundoff = S * math.sqrt(np.finfo(float).eps) * float(
        np.max(np.abs(np.atleast_2d(steps["E"]))))
    tol = z * se + bias + roundoff
    ok = bool(np.isfinite(mean) and abs(mean) <= tol)
    rule = (f"|mean residual| <= {z:g} SE ({estimator}) + (κh)^{q} ∫(|power| + "
            f"|∂_tE| + D|ΣΔ_SE|) dt + round-off; E(T) − E(0) − ∫(power + ∂_tE) dt − "
            f"D ∫ΣΔ_SE dt over {P} path{'s' if P > 1 else ''}")
    return {"value": abs(mean), "tolerance": tol, "passed": ok, "judged": True,
            "mean": mean, "stderr": se, "stderr_qv": se_qv, "stderr_sample": se_sample,
            "estimator": estimator, "mean_raw": float(np.mean(r)), "bias_bound": bias,
            "kappa": kappa, "budget": budget, "z": z, "order": q, "paths": int(P),
            "diffusion": diffusion, "judged_diffusion": Dj, "rule": rule, "scheme": scheme}


def judge_ito_balance(result: Any, *, diffusion: float | None = None,
                      z: float = ITO_Z) -> dict[str, Any]:
    """Judge a finished noisy run's Itô balance again, with the Itô term at ``diffusion``.

    Parameters
    ----------
    result : ParticleResult
        A run with token diffusion whose steps hold :data:`ITO_STEP_KEYS`.
    diffusion : float, optional
        ``D`` of the Itô term (default: the run's). ``0`` judges the balance without the
        Itô correction (the noiseless chain rule); another value, a mismatched ``D``.
    z : float
        Standard errors allowed.

    Returns
    -------
    dict
        As :func:`ito_check`.

    Raises
    ------
    ValueError
        If the run recorded no Laplacian (no token diffusion, a kind without the closed
        form, or the compiled loop).
    """
    steps = result.steps
    if "lap" not in steps or not np.all(np.isfinite(steps["lap"])):
        raise ValueError("particles: this run recorded no Laplacian of the energy (token "
                         "diffusion D > 0 on the Python loop, an exponential kind)")
    opts = result.options
    from .options import INTEGRATOR_ORDER

    return ito_check(steps["t"], steps, result.balance["chain"], diffusion=opts.diffusion,
                     order=INTEGRATOR_ORDER[opts.integrator],
                     scheme=f"{_name(opts.integrator)}, dt = {opts.dt:g}", z=z,
                     judged_diffusion=opts.diffusion if diffusion is None else diffusion)


def judge_noisy_run(status: Status, message: str, checks: dict, grid: np.ndarray,
                    steps: dict[str, np.ndarray], balance: dict[str, np.ndarray], opts: Any,
                    stochastic: bool) -> tuple[Status, str, dict]:
    """The Itô balance's verdict of a finished run (both engines' results; ``D = 0``: as is).

    With ``opts.diffusion > 0`` and the Laplacian recorded, adds the per-path terms of
    :func:`ito_balance_terms` to ``balance`` (in place) and ``checks["ito_balance"]``
    (:func:`ito_check`); the check then decides ``success`` / ``inaccurate`` (a failed run
    stays failed). Not judged (``judged: False`` and the reason): a kind without the
    closed-form Laplacian, or noisy weights (their own Itô terms and martingale enter
    the chain residual at order ``√dt`` per path).
    """
    D = float(getattr(opts, "diffusion", 0.0))
    if not D > 0 or "lap" not in steps or status == Status.FAILED:
        return status, message, checks
    if not np.all(np.isfinite(steps["lap"])):
        return status, message, {**checks, "ito_balance": {
            "judged": False, "reason": NO_LAPLACIAN}}
    balance.update(ito_balance_terms(grid, steps, balance["chain"], D))
    from .options import INTEGRATOR_ORDER

    check = ito_check(grid, steps, balance["chain"], diffusion=D,
                      order=INTEGRATOR_ORDER[opts.integrator],
                      scheme=f"{_name(opts.integrator)}, dt = {opts.dt:g}")
    if stochastic:
        return status, message, {**checks, "ito_balance": {
            **check, "judged": False,
            "reason": f"{NOISY_WEIGHTS}; the tokens' balance is recorded"}}
    checks = {**checks, "ito_balance": check}
    if check["passed"]:
        return Status.SUCCESS, "", checks
    msg = (f"Itô energy balance: mean residual {check['mean']:.3g} exceeds its tolerance "
           f"{check['tolerance']:.3g} ({check['rule']}; {check['scheme']})")
    logger.warning("particle run inaccurate: %s", msg)
    return Status.INACCURATE, msg, checks


def _name(integrator: Any) -> str:
    return integrator if isinstance(integrator, str) else getattr(integrator, "name", "?")
