r"""``wflow reproduce mun_rosenzweig``: the phase transition of the noisy transformer, judged.

Mun & Rosenzweig, *Phase transitions in Doi–Onsager, noisy transformer, and other
multimodal models* (arXiv 2604.16288, ``d = 2``) and its sequel for every dimension
(arXiv 2606.05140), study the free energy of one unnormalised attention head
``A = V = I`` with token diffusion on ``S^{d-1}`` in their coupling ``K = 1/(2D)``
(THEORY §8, docs/theory.md §9):

.. math::

    F_K(\rho) = \int \rho\log\rho\,d\sigma
      - \frac{K}{\beta}\iint e^{\beta x\cdot y}\rho(x)\rho(y)\,d\sigma(x)\,d\sigma(y).

Neither paper publishes code, so there are no conventions to port term by term: their
claims are closed forms and statements about the branches of critical points, and they
are judged here against wflow's own computation of those branches (:mod:`wflow.phase`,
the zonal reduction solved by Newton continuation in the order parameter). The claims,
as the papers state them, each judged in ``d = 2`` (the first paper) and in the
dimensions :attr:`MunRosenzweigOptions.dims` (the second):

``k_sharp``
    ``ρ ≡ 1`` is linearly unstable iff ``K > K_#(β) = β^{d/2}/(2^{d/2} Γ(d/2) I_{d/2}(β))``.
    Evidence: (a) ``β/(2λ_1)`` with ``λ_1 = ∫ cos θ e^{β cos θ} sin^{d−2}θ dθ / ∫
    sin^{d−2}θ dθ`` by adaptive quadrature (no Bessel function), relative tolerance
    :data:`K_QUAD_RTOL`; (b) the bifurcation point ``K(0)`` of the computed branch of
    stationary states, from ``K(m) = K_0 + a m² + b m⁴`` through ``m = 0.005, 0.01, 0.015``,
    relative tolerance :data:`K_BRANCH_RTOL`, at each ``β`` of :attr:`~MunRosenzweigOptions.betas`.
``beta_star``
    The transition changes type at the unique root ``β*(d)`` of
    ``I_{d/2+1}(β)/I_{d/2}(β) = 1/d``. Evidence: the root of the computed branch's Landau
    coefficient ``a(β)`` (Brent on ``[0.5, 6]``), relative tolerance :data:`BETA_STAR_RTOL`.
``continuous``
    For ``β ≤ β*`` the transition is continuous, at ``K_c = K_#``, with
    ``m ∝ (K − K_#)^{1/2}``. Evidence: no fold of the branch at ``β*/2`` and
    ``(1 − margin)β*``; the fitted exponent at ``β*/2`` within :data:`EXPONENT_TOL` of 1/2.
``discontinuous``
    For ``β > β*`` it is discontinuous: a clustered state wins from ``K_c < K_#`` on and a
    branch of clustered critical points reaches down to a fold ``K_f < K_c``. Evidence:
    at ``(1 + margin)β*``, ``1.5β*`` and ``2β*``, a fold, with ``K_# − K_c`` and
    ``K_c − K_f`` both above :data:`GAP_FLOOR` (relative to ``K_#``) and above a
    thousand times the computation's own quadrature residual.

A claim is REPRODUCED when every piece of evidence is within its tolerance, NOT
REPRODUCED when one is beyond ten times it (or a transition has the wrong type),
INCONCLUSIVE in between. The verdict on the papers is REPRODUCED only when every claim is
and both negative controls are NOT REPRODUCED:

* ``wrong_bessel_index`` — the same rule given ``β*`` as the root of
  ``I_{d/2}/I_{d/2−1} = 1/d`` (the Bessel index shifted by one);
* ``k_sharp_doubled`` — the same rule given ``2K_#`` (the coupling read as ``K = 1/D``).

The published closed forms are implemented here from the papers' statements with
:func:`scipy.special.iv` (:func:`published_k_sharp`, :func:`published_beta_star`),
independently of :mod:`wflow.phase.thresholds`.
"""

from __future__ import annotations

import logging
import math
import time
from collections.abc import Callable
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
from scipy.integrate import quad
from scipy.optimize import brentq
from scipy.special import gamma, iv

from ..status import Claim
from .claims import ClaimOutcome, write_reproduction

__all__ = [
    "PAPERS",
    "CLAIMS",
    "MunRosenzweigOptions",
    "ClosedForms",
    "ClaimEvidence",
    "MunRosenzweigVerdict",
    "published_k_sharp",
    "published_beta_star",
    "wrong_index_beta_star",
    "quadrature_k_sharp",
    "branch_start",
    "numerical_beta_star",
    "PUBLISHED",
    "CONTROLS",
    "judge",
    "reproduce",
]

logger = logging.getLogger(__name__)

PAPERS = {
    "2604.16288": "Mun, Rosenzweig, Phase transitions in Doi-Onsager, noisy transformer, and "
                  "other multimodal models (arXiv 2604.16288), d = 2",
    "2606.05140": "Mun, Rosenzweig, the noisy transformer's phase transition in every "
                  "dimension (arXiv 2606.05140)",
}
PAPER = "; ".join(PAPERS.values()) + "; no published code"
CLAIMS = {
    "k_sharp": "the uniform density is linearly unstable iff K > K_#(beta) = "
               "beta^(d/2) / (2^(d/2) Gamma(d/2) I_(d/2)(beta)), K = 1/(2D)",
    "beta_star": "the transition changes type at the unique root beta*(d) of "
                 "I_(d/2+1)(beta) / I_(d/2)(beta) = 1/d",
    "continuous": "for beta <= beta* the transition is continuous, at K_c = K_#, with "
                  "m ~ (K - K_#)^(1/2)",
    "discontinuous": "for beta > beta* it is discontinuous: a clustered state wins from "
                     "K_c < K_# on, and a branch of clustered critical points reaches down "
                     "to a fold K_f < K_c",
}
CLAIM = "; ".join(f"({k}) {v}" for k, v in CLAIMS.items())

#: Relative tolerance of ``K_#`` against ``β/(2λ_1)`` by adaptive quadrature: ``quad`` is
#: asked for ``epsrel = 1e-13`` on an analytic integrand; 1e-11 leaves a factor 100.
K_QUAD_RTOL = 1e-11
#: Relative tolerance of ``K_#`` against the computed bifurcation point ``K(0)``: the
#: three-point fit through ``m = 0.005, 0.01, 0.015`` leaves the ``m⁶`` term,
#: ``(0.005·0.01·0.015)² c ≈ 6e-13 c`` with ``c`` growing with ``β``, and each ``K(m)``
#: carries Newton's ``1e-13`` amplified a few times by the fit. Measured for
#: d = 2, 3, 8, 16: ≤ 3.2e-13 at β = 0.5, ≤ 8.8e-13 at β = 3, ≤ 1.2e-10 at β = 8 (the
#: fit through 0.01, 0.02, 0.03 gave 64 times more: the ``m⁶`` term), 1.6e-7 at β = 20;
#: hence β ≤ :data:`MAX_BETA` and a margin of 80 at β = 8.
K_BRANCH_RTOL = 1e-8
#: Largest ``β`` of the ``K_#`` claim (the fit's remainder grows with ``β``).
MAX_BETA = 10.0
#: Relative tolerance of ``β*`` against the root of the computed Landau coefficient: ``a``
#: carries the fit's ``O(m⁴)`` remainder and Newton's ``1e-13/m²``, ``|da/dβ| ≳ 0.2``
#: (measured: ≤ 8.8e-9 for d = 2, 3, 8, 16; 1.4e-7 with the fit through 0.01, 0.02, 0.03).
BETA_STAR_RTOL = 1e-6
#: Tolerance of the fitted exponent at ``β*/2`` against 1/2: the next Landau term changes
#: the slope by ``O(m²) < 1e-3`` on the fit range ``m ∈ [0.005, 0.03]`` (measured 0.49991).
EXPONENT_TOL = 5e-3
#: Smallest relative gaps ``(K_# − K_c)/K_#`` and ``(K_c − K_f)/K_#`` read as a
#: discontinuous transition (the smallest measured, at ``1.02 β*`` in d = 8: ``2e-5``).
GAP_FLOOR = 1e-6

#: Order parameters of the three-point fit of ``K(m) = K_0 + a m² + b m⁴``.
FIT_M = (0.005, 0.01, 0.015)


def published_k_sharp(beta: float, d: int) -> float:
    r"""The papers' ``K_#(β) = β^{d/2} / (2^{d/2} Γ(d/2) I_{d/2}(β))`` (``K = 1/(2D)``).

    Parameters
    ----------
    beta : float
        Inverse temperature ``β > 0`` (``I_{d/2}(β)`` unscaled: ``β ≲ 700``).
    d : int
        Ambient dimension ``d >= 2``.

    Returns
    -------
    float
        The linear threshold, dimensionless.
    """
    return float(beta ** (d / 2) / (2 ** (d / 2) * gamma(d / 2) * iv(d / 2, beta)))


def _bessel_root(nu: float, d: int) -> float:
    """The root of ``I_{ν+1}(β)/I_ν(β) = 1/d`` (the ratio increases from 0 to 1)."""
    def gap(b: float) -> float:
        return float(iv(nu + 1, b) / iv(nu, b)) - 1.0 / d

    hi = 4.0
    while gap(hi) <= 0:
        hi *= 2.0
    return float(brentq(gap, 1e-6, hi, xtol=1e-15, rtol=4 * np.finfo(float).eps))


def published_beta_star(d: int) -> float:
    """The papers' ``β*(d)``: the root of ``I_{d/2+1}(β)/I_{d/2}(β) = 1/d``."""
    return _bessel_root(d / 2.0, int(d))


def wrong_index_beta_star(d: int) -> float:
    """Negative control: the root of ``I_{d/2}(β)/I_{d/2−1}(β) = 1/d`` (index shifted)."""
    return _bessel_root(d / 2.0 - 1.0, int(d))


def quadrature_k_sharp(beta: float, d: int) -> float:
    r"""``β/(2λ_1)`` with ``λ_1`` by adaptive quadrature (no Bessel function).

    .. math::

        \lambda_1 = \frac{\int_0^\pi \cos\theta\, e^{\beta\cos\theta}\sin^{d-2}\theta\,d\theta}
                         {\int_0^\pi \sin^{d-2}\theta\,d\theta},

    the Funk–Hecke eigenvalue of ``e^{β x·y}`` on the degree-1 harmonics (``x·e = cos θ``,
    the law of ``θ`` under the normalised surface measure ``∝ sin^{d−2}θ``).
    """
    num = quad(lambda t: math.cos(t) * math.exp(beta * math.cos(t)) * math.sin(t) ** (d - 2),
               0.0, math.pi, epsabs=0.0, epsrel=1e-13, limit=200)[0]
    den = quad(lambda t: math.sin(t) ** (d - 2), 0.0, math.pi, epsabs=0.0, epsrel=1e-13,
               limit=200)[0]
    return float(beta / (2.0 * num / den))


def branch_start(beta: float, d: int) -> tuple[float, float]:
    """``(K_0, a)`` of the computed branch: ``K(m) = K_0 + a m² + b m⁴`` through :data:`FIT_M`.

    ``K_0`` is the bifurcation point of the branch of zonal stationary states, ``a`` its
    Landau coefficient (``> 0``: continuous, ``< 0``: a fold). Computed by
    :func:`wflow.phase.zonal_branch` (Newton at fixed order parameter ``m``).
    """
    from ..phase import zonal_branch

    m = np.asarray(FIT_M)
    br = zonal_branch(float(beta), int(d), m=m)
    V = np.stack([np.ones_like(m), m**2, m**4], axis=1)
    k0, a, _ = np.linalg.solve(V, br.K)
    return float(k0), float(a)


def numerical_beta_star(d: int) -> float:
    """The root of the computed Landau coefficient ``a(β)`` (Brent on ``[0.5, 6]``)."""
    return float(brentq(lambda b: branch_start(b, d)[1], 0.5, 6.0, xtol=1e-13))


@dataclass(frozen=True)
class ClosedForms:
    """The closed forms under test: the papers' or a negative control's.

    Attributes
    ----------
    name : str
        ``"published"`` or the negative control's name (its key in ``CONTROLS``).
    k_sharp : callable
        ``(β, d) -> K_#``.
    beta_star : callable
        ``d -> β*``.
    """

    name: str
    k_sharp: Callable[[float, int], float]
    beta_star: Callable[[int], float]


#: The papers' closed forms: :func:`published_k_sharp` and :func:`published_beta_star`.
PUBLISHED = ClosedForms("published", published_k_sharp, published_beta_star)
#: The negative controls' closed forms (each must be judged not reproduced).
CONTROLS = {
    "wrong_bessel_index": ClosedForms("wrong_bessel_index", published_k_sharp,
                                      wrong_index_beta_star),
    "k_sharp_doubled": ClosedForms("k_sharp_doubled",
                                   lambda b, d: 2.0 * published_k_sharp(b, d),
                                   published_beta_star),
}


@dataclass(frozen=True, kw_only=True)
class MunRosenzweigOptions:
    """Settings of :func:`reproduce` (keyword-only).

    Parameters
    ----------
    dims : tuple of int
        Dimensions of the second paper's claims (``d = 2`` is always the first paper's).
    betas : tuple of float
        Inverse temperatures of the ``K_#`` claim.
    margin : float
        Relative distance to ``β*`` of the type tests (``(1 ± margin)β*``).
    above : tuple of float
        Further multiples of ``β*`` where the transition must be discontinuous.
    """

    dims: tuple[int, ...] = (3, 4, 8)
    betas: tuple[float, ...] = (0.5, 1.0, 3.0, 8.0)
    margin: float = 0.02
    above: tuple[float, ...] = (1.5, 2.0)

    def __post_init__(self) -> None:
        """Refuse dimensions below 3 (d = 2 is the first paper's), β <= 0, a bad margin."""
        if not self.dims or any(int(d) != d or d < 3 for d in self.dims):
            raise ValueError(f"mun_rosenzweig: dims must be integers >= 3, got {self.dims!r}")
        if not self.betas or min(self.betas) <= 0 or max(self.betas) > MAX_BETA:
            raise ValueError(f"mun_rosenzweig: betas must lie in (0, {MAX_BETA:g}], got "
                             f"{self.betas!r}")
        if not 0 < self.margin < 0.5 or not self.above or min(self.above) <= 1:
            raise ValueError("mun_rosenzweig: 0 < margin < 0.5 and multiples above > 1")

    @classmethod
    def quick(cls, **changes: Any) -> MunRosenzweigOptions:
        """Seconds: ``d = 3`` beside ``d = 2``, two β for ``K_#``, one multiple above ``β*``."""
        base: dict[str, Any] = {"dims": (3,), "betas": (1.0, 3.0), "above": (2.0,)}
        base.update(changes)
        return cls(**base)


@dataclass(frozen=True)
class ClaimEvidence:
    """One judged comparison: a value against its tolerance, and its verdict."""

    claim: str
    d: int
    name: str
    value: float
    tolerance: float
    verdict: Claim
    rule: str
    bound: str = "≤"

    def check(self) -> dict[str, Any]:
        """``{value, tolerance, passed, rule}`` for ``summary.json``."""
        return {"value": self.value, "tolerance": f"{self.bound} {self.tolerance:.3g}",
                "passed": self.verdict.passed, "rule": self.rule}


@dataclass(frozen=True)
class MunRosenzweigVerdict(ClaimOutcome):
    """The verdict of one set of closed forms (a :class:`ClaimOutcome`).

    Attributes
    ----------
    verdict : Claim
        The worst verdict of the claims.
    claims : dict
        ``"<claim>_d<d>"`` → :class:`~wflow.status.Claim`.
    evidence : list of ClaimEvidence
    checks : dict
        ``name → {value, tolerance, passed, rule}``.
    numbers : dict
        What was computed (thresholds, roots, exponents).
    """

    verdict: Claim
    claims: dict[str, Claim]
    evidence: list[ClaimEvidence]
    checks: dict[str, dict[str, Any]] = field(default_factory=dict)
    numbers: dict[str, Any] = field(default_factory=dict)


def _tag(x: float) -> str:
    """A number in a check's name without a dot (``0.98 → 0p98``): names are key paths."""
    return f"{x:g}".replace(".", "p")


def _graded(err: float, tol: float) -> Claim:
    if not np.isfinite(err) or err > 10 * tol:
        return Claim.NOT_REPRODUCED
    return Claim.REPRODUCED if err <= tol else Claim.INCONCLUSIVE


def _worst(verdicts: list[Claim]) -> Claim:
    if any(v == Claim.NOT_REPRODUCED for v in verdicts):
        return Claim.NOT_REPRODUCED
    if any(v == Claim.INCONCLUSIVE for v in verdicts):
        return Claim.INCONCLUSIVE
    return Claim.REPRODUCED


def _judge_dimension(forms: ClosedForms, d: int, opts: MunRosenzweigOptions,
                     numbers: dict[str, Any]) -> list[ClaimEvidence]:
    from ..phase import order_parameter_exponent, phase_point
    from ..phase.zonal import PhaseError

    ev: list[ClaimEvidence] = []
    # k_sharp: quadrature and the branch's bifurcation point
    for b in opts.betas:
        kc = forms.k_sharp(b, d)
        kq = quadrature_k_sharp(b, d)
        k0, _ = branch_start(b, d)
        eq, e0 = abs(kc / kq - 1.0), abs(kc / k0 - 1.0)
        numbers[f"k_sharp_d{d}_beta{b:g}"] = {"claimed": kc, "quadrature": kq, "branch": k0}
        ev.append(ClaimEvidence("k_sharp", d, f"k_sharp_quadrature_d{d}_beta{_tag(b)}", eq,
                                K_QUAD_RTOL, _graded(eq, K_QUAD_RTOL),
                                f"|K_#/K_quad - 1| at beta = {b:g}: beta/(2 lambda_1), "
                                "lambda_1 by adaptive quadrature (no Bessel function)"))
        ev.append(ClaimEvidence("k_sharp", d, f"k_sharp_branch_d{d}_beta{_tag(b)}", e0,
                                K_BRANCH_RTOL, _graded(e0, K_BRANCH_RTOL),
                                f"|K_#/K(0) - 1| at beta = {b:g}: the bifurcation point of "
                                "the computed branch, K(m) = K0 + a m^2 + b m^4 through "
                                f"m = {', '.join(map(str, FIT_M))}"))
    # beta_star: the root of the computed Landau coefficient
    bs = forms.beta_star(d)
    bn = numerical_beta_star(d)
    eb = abs(bs / bn - 1.0)
    numbers[f"beta_star_d{d}"] = {"claimed": bs, "computed": bn}
    ev.append(ClaimEvidence("beta_star", d, f"beta_star_d{d}", eb, BETA_STAR_RTOL,
                            _graded(eb, BETA_STAR_RTOL),
                            "|beta*/beta*_num - 1|: beta*_num the root of the Landau "
                            "coefficient a(beta) of the computed branch"))
    # continuous below the claimed beta*
    for f in (0.5, 1.0 - opts.margin):
        try:
            p = phase_point(f * bs, d)
            ok = p.transition == "continuous"
            val = 0.0 if ok else (p.k_sharp - p.k_fold) / p.k_sharp
        except PhaseError as exc:  # a solve that fails is not evidence for the claim
            logger.warning("mun_rosenzweig: %s", exc)
            ok, val = False, math.nan
        numbers[f"type_d{d}_at_{f:g}_beta_star"] = "continuous" if ok else "discontinuous"
        ev.append(ClaimEvidence("continuous", d, f"continuous_d{d}_at_{_tag(f)}_beta_star", val,
                                0.0, Claim.REPRODUCED if ok else Claim.NOT_REPRODUCED,
                                f"no fold of the branch at {f:g} beta* = {f * bs:.6g}: value "
                                "(K_# - K_f)/K_# of a fold (0: none)"))
    try:
        g = order_parameter_exponent(0.5 * bs, d).exponent
    except ValueError:  # a subcritical branch at beta*/2: no power law at all
        g = math.nan
    numbers[f"exponent_d{d}_at_half_beta_star"] = g
    eg = abs(g - 0.5)
    ev.append(ClaimEvidence("continuous", d, f"exponent_d{d}", eg, EXPONENT_TOL,
                            _graded(eg, EXPONENT_TOL),
                            f"|gamma - 1/2|, gamma fitted on m ~ (K - K_#)^gamma at "
                            f"beta*/2 = {0.5 * bs:.6g}"))
    # discontinuous above the claimed beta*
    for f in (1.0 + opts.margin, *opts.above):
        key = f"discontinuous_d{d}_at_{_tag(f)}_beta_star"
        try:
            p = phase_point(f * bs, d)
        except PhaseError as exc:
            logger.warning("mun_rosenzweig: %s", exc)
            p = None
        if p is None or p.transition != "discontinuous":
            numbers[key] = None
            ev.append(ClaimEvidence("discontinuous", d, key, math.nan, GAP_FLOOR,
                                    Claim.NOT_REPRODUCED,
                                    f"a fold K_f < K_c < K_# at {f:g} beta* = {f * bs:.6g}: "
                                    "none (a continuous transition)", ">"))
            continue
        floor = max(GAP_FLOOR, 1e3 * p.quadrature_residual)
        gap = min(p.k_sharp - p.k_c, p.k_c - p.k_fold) / p.k_sharp
        numbers[key] = {"k_sharp": p.k_sharp, "k_c": p.k_c, "k_fold": p.k_fold,
                        "quadrature_residual": p.quadrature_residual}
        v = Claim.REPRODUCED if gap > floor else (
            Claim.INCONCLUSIVE if gap > 0 else Claim.NOT_REPRODUCED)
        ev.append(ClaimEvidence("discontinuous", d, key, gap, floor, v,
                                f"the smaller relative gap of K_f < K_c < K_# at {f:g} "
                                f"beta* = {f * bs:.6g}, (K_# - K_c)/K_# or (K_c - K_f)/K_#; "
                                "above max(1e-6, 1000 x the quadrature residual)", ">"))
    return ev


def judge(forms: ClosedForms, options: MunRosenzweigOptions | None = None
          ) -> MunRosenzweigVerdict:
    """Judge the claims with the closed forms ``forms`` in ``d = 2`` and ``options.dims``."""
    opts = options or MunRosenzweigOptions()
    numbers: dict[str, Any] = {}
    evidence: list[ClaimEvidence] = []
    for d in (2, *opts.dims):
        evidence += _judge_dimension(forms, int(d), opts, numbers)
    claims: dict[str, Claim] = {}
    for c in CLAIMS:
        for d in (2, *opts.dims):
            claims[f"{c}_d{d}"] = _worst([e.verdict for e in evidence
                                          if e.claim == c and e.d == d])
    checks = {e.name: e.check() for e in evidence}
    return MunRosenzweigVerdict(_worst(list(claims.values())), claims, evidence, checks,
                                numbers)


RULE = ("Each claim in d = 2 (2604.16288) and in every d of the options (2606.05140) is "
        "judged by its evidence: K_# against beta/(2 lambda_1) by quadrature (rtol 1e-11) "
        "and against the bifurcation point of the computed branch (rtol 1e-8); beta* against "
        "the root of the computed Landau coefficient (rtol 1e-6); no fold at beta*/2 and "
        "(1 - margin) beta*, and the exponent at beta*/2 within 5e-3 of 1/2; a fold with "
        "K_f < K_c < K_# (relative gaps > max(1e-6, 1000 x quadrature residual)) at "
        "(1 + margin) beta* and the further multiples. REPRODUCED within every tolerance, NOT "
        "REPRODUCED beyond ten times one (or a transition of the wrong type), else "
        "INCONCLUSIVE. The papers' verdict is REPRODUCED only if both negative controls "
        "(beta* from the Bessel index shifted by one; K_# doubled) are NOT REPRODUCED")


def _figure(stage: Path, opts: MunRosenzweigOptions, v: MunRosenzweigVerdict) -> list[str]:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    from ..phase import phase_diagram

    dims = (2, *opts.dims[:1])
    fig, axes = plt.subplots(1, len(dims), figsize=(5.6 * len(dims), 4.2))
    rows: dict[str, list[float]] = {"d": [], "beta": [], "k_sharp": [], "k_c": [],
                                    "k_fold": []}
    for ax, d in zip(np.atleast_1d(axes), dims, strict=True):
        bs = published_beta_star(d)
        betas = np.linspace(0.4 * bs, 2.2 * bs, 19)
        pd = phase_diagram(d, betas)
        ks = np.array([published_k_sharp(b, d) for b in pd.beta])
        ax.axhline(1.0, color="k", lw=1, label="K_# (published closed form)")
        ax.plot(pd.beta, pd.k_c / ks, "C0o-", ms=3, label="K_c / K_# (computed)")
        ax.plot(pd.beta, pd.k_fold / ks, "C3s--", ms=3, label="K_f / K_# (computed fold)")
        ax.axvline(bs, color="C2", lw=1, label=f"β* = {bs:.5g}")
        ax.axvline(wrong_index_beta_star(d), color="0.6", lw=1, ls=":",
                   label="control: wrong Bessel index")
        ax.set(xlabel="β", ylabel="coupling over the published K_#  (K = 1/(2D))",
               title=f"d = {d}: beta_star {v.claims.get(f'beta_star_d{d}', '')}, "
                     f"discontinuous {v.claims.get(f'discontinuous_d{d}', '')}")
        ax.legend(fontsize=7)
        for i in range(len(pd.beta)):
            rows["d"].append(d)
            rows["beta"].append(float(pd.beta[i]))
            rows["k_sharp"].append(float(pd.k_sharp[i]))
            rows["k_c"].append(float(pd.k_c[i]))
            rows["k_fold"].append(float(pd.k_fold[i]))
    fig.suptitle(f"Mun & Rosenzweig, noisy transformer phase transition — "
                 f"{v.verdict.upper()}", fontsize=9)
    fig.tight_layout()
    fig.savefig(stage / "mun_rosenzweig.png", dpi=110)
    plt.close(fig)
    from ..infra.io import write_csv

    write_csv(stage / "mun_rosenzweig_diagram.csv", {k: np.asarray(x) for k, x in rows.items()})
    return ["mun_rosenzweig.png", "mun_rosenzweig_diagram.csv"]


def reproduce(*, out: str | Path, options: MunRosenzweigOptions | None = None,
              overwrite: bool = True) -> Any:
    """Judge the claims and the two negative controls; write ``out/``.

    ``summary.json`` holds the checks of the papers' closed forms and one check per
    control (passed when the control is NOT REPRODUCED), the numbers computed and the
    per-claim verdicts; ``report.md``, ``mun_rosenzweig.png`` (``K_#``, ``K_c``, ``K_f``
    against ``β`` for ``d = 2`` and the first of ``dims``) and its table. Returns the
    :class:`~wflow.studies.base.StudyResult` (status ``success`` exactly when every check
    passed).
    """
    from ..infra.io import prepare_output

    opts = options or MunRosenzweigOptions()
    out = prepare_output(out, overwrite=overwrite)
    t0 = time.perf_counter()
    v = judge(PUBLISHED, opts)
    ctl = {name: judge(forms, opts) for name, forms in CONTROLS.items()}
    checks = dict(v.checks)
    for name, c in ctl.items():
        bad = [k for k, x in c.claims.items() if x == Claim.NOT_REPRODUCED]
        checks[f"control_{name}"] = {
            "value": str(c.verdict), "tolerance": "not reproduced",
            "passed": c.verdict == Claim.NOT_REPRODUCED,
            "rule": f"negative control ({name}): the same rule must refute it; claims "
                    f"refuted: {', '.join(bad) or 'none'}"}
    controls_fail = all(c.verdict == Claim.NOT_REPRODUCED for c in ctl.values())
    passed = v.passed and controls_fail
    reasons = [f"{k}: {x}" for k, x in v.claims.items()]
    reasons += [f"control {k}: {c.verdict} (refuted: "
                + (", ".join(n for n, x in c.claims.items() if x == Claim.NOT_REPRODUCED)
                   or "nothing") + ")" for k, c in ctl.items()]
    if v.passed and not controls_fail:
        reasons.append("a negative control was not refuted: the verdict is void")
    summary = {
        "paper": PAPER, "claim": CLAIM, "verdict": v.verdict, "verdict_rule": RULE,
        "settings": asdict(opts), "checks": checks, "reasons": reasons,
        **{f"control_{k}": c.verdict for k, c in ctl.items()},
        "differences_from_published": [
            "no published code: neither paper publishes an implementation (searched "
            "2026-12-04); the claims are judged against the branches wflow.phase computes",
            "the papers' closed forms implemented from their statements (scipy.special.iv), "
            "independently of wflow.phase.thresholds"],
        "run_wall_time_s": time.perf_counter() - t0,
    }
    sentence = (f"mun_rosenzweig: published claims {v.verdict.upper()}; controls "
                + ", ".join(f"{k}: {c.verdict}" for k, c in ctl.items())
                + ("." if controls_fail else " (a control was not refuted: INCONCLUSIVE)."))
    lines = [f"# mun_rosenzweig — {v.verdict.upper()}", "", f"Papers: {PAPER}.", "",
             f"Claims: {CLAIM}.", "", f"Rule: {RULE}.", "", "| claim | verdict |", "|---|---|"]
    lines += [f"| {k} | {x} |" for k, x in v.claims.items()]
    lines += ["", "Negative controls: " + "; ".join(f"{k}: {c.verdict}"
                                                    for k, c in ctl.items()) + "."]
    bad = [k for k, c in checks.items() if not c["passed"]]
    lines += ["", f"Checks: {len(checks)}, not passed: {', '.join(bad) or 'none'}."]

    def write(stage: Path) -> list[str]:
        from ..infra.io import write_json

        files = _figure(stage, opts, v)
        write_json(stage / "mun_rosenzweig_numbers.json",
                   {"published": v.numbers, **{f"control_{k}": c.numbers
                                               for k, c in ctl.items()},
                    "claims": {k: str(x) for k, x in v.claims.items()},
                    "control_claims": {k: {n: str(x) for n, x in c.claims.items()}
                                       for k, c in ctl.items()}})
        return [*files, "mun_rosenzweig_numbers.json"]

    return write_reproduction(out, "mun_rosenzweig", summary, sentence, passed,
                              report="\n".join(lines) + "\n", files=write)
