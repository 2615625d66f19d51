"""Study ``entropy``: attention-entropy production identity and monotone entropy.

Theory (docs/theory.md §6): the entropy ``H^h_i = −Σ_j p_ij log p_ij`` of head ``h``'s attention
row ``i`` (``p_ij = softmax_j(β s_ij)``, ``s_ij = <x_i, A_h x_j>``) obeys exactly
``dH^h_i/dt = −β² Cov_{p_i}(s, ṡ)`` along any trajectory, for any heads. For scalar heads
and equiangular tokens the entropy is non-decreasing and tends to ``log n``.

Checks: (a) general heads (random symmetric, and non-symmetric with unrelated values):
central differences of the recorded mean entropy ``(1/n) Σ_i H^h_i`` against the recorded
identity (particle engine, RK4), at two step sizes — the discrepancy is the ``O(dt²)``
central-difference error (fitted order ≈ 2); (b) scalar heads from orthonormal tokens:
entropy non-decreasing, equal to the closed form along the equiangular ODE, and → ``log n``.
Each is a criterion with the tolerance of :data:`TOL`.

β. The identity carries ``β²`` (one ``β`` from the softmax, one from ``ṡ``'s weight in the
log-partition function); at ``β = 1`` a ``β`` in its place is invisible. Part (a) therefore
runs at ``β = 1`` and at ``β =`` :data:`BETA_ALT` (criteria with the suffix ``_beta2``);
fault ``identity-beta-power`` (the identity with ``β`` instead of ``β²``) trips the
latter. Fault family ``velocity:S``: the scalar heads of part (b) run with values
``×(1 + s)`` against the closed form of the nominal heads.

A missing mobility. Part (a) is blind to it: the identity holds along *any* trajectory
(``ṡ`` is taken from the velocity the engine integrates), so a solver that drops the
softmax mobility ``1/Z`` (kind ``usa``) still satisfies it. Part (b) compares with the
softmax ODE and sees it: negative control ``no-mobility`` (all particle runs with kind
``usa``, the recorded entropies still those of the softmax rows) trips
``equiangular_closed_form``. Part (a)'s orders move only through the faster, less resolved
flow (at ``β =`` :data:`BETA_ALT` one of them may leave its band): that is not a detection
to rely on. The criteria each control trips (quick mode, seed 0): docs/studies_power.md,
generated from ``bench/results/size_power.json``.
"""

from __future__ import annotations

import logging
from pathlib import Path

import numpy as np

from ..attention.heads import Attention, Heads
from ..geometry.sphere import equiangular_tokens, sample_uniform
from ..multihead import equiangular_entropy, solve_equiangular
from ..particles import simulate
from ..status import Status
from .base import Criterion, NegativeControls, StudyResult, fit_loglog, save_figure, write_study

logger = logging.getLogger(__name__)

NAME = "entropy"

TOL = {
    # central differences: error C dt² |H'''|; the order of the discrepancy must be 2
    "order_lo": 1.8, "order_hi": 2.2,
    # closed-form entropy along the ODE vs particles: RK4 error in γ (~1e-9) times dH/dγ
    "closed_form": 1e-7,
    # monotonicity: round-off of the entropy evaluation (~n eps log n)
    "monotone": 1e-12,
    # log n reached at the final time (1 − γ(T) ~ e^{-2ΛT} ≲ 1e-8 makes H − log n ~ 1e-8)
    "log_n": 1e-6,
}


#: Negative controls: ``run(fault=NAME)``.
FAULTS = {
    "euler": "the particles are integrated with explicit Euler (order 1) instead of RK4: "
             "the central differences then miss the identity at order 1",
    "value-sign": "the scalar heads of the equiangular part have negated values (V = −λI, "
                  "repulsive) while the closed form uses the attractive ODE",
    "identity-beta-power": "the entropy-production identity is taken with β instead of β² "
                           "(−β Cov(s, ṡ); visible at β ≠ 1)",
    "velocity:0.01": "the scalar heads of the equiangular part run with values ×1.01 "
                     "against the closed form of the nominal heads",
    "no-mobility": "the particles drop the softmax mobility 1/Z (unnormalised attention, "
                   "kind 'usa', same β; the entropies stay those of the softmax rows) while "
                   "the closed form uses the softmax ODE",
}
#: Fault families ``run(fault="FAMILY:S")`` (sizes scanned by bench/size_power.py).
FAMILIES = {
    "velocity": "the scalar heads of the equiangular part run with values ×(1 + s) against "
                "the closed form of the nominal heads",
    "identity-beta": "the identity is taken with β^(2 + s) instead of β² (at β ≠ 1)",
}
#: The second inverse temperature of the identity check (β vs β² faults show at β ≠ 1).
BETA_ALT = 2.0
#: The study's faults, read (``run(fault=...)``) and reported (the verdict) in one place.
CONTROLS = NegativeControls(NAME, FAULTS, FAMILIES)


def _general_heads(kind: str, d: int, rng: np.random.Generator) -> Heads:
    if kind == "symmetric":
        return Heads.random_symmetric(2, d, rng, scale=0.6)
    A = 0.6 * rng.standard_normal((2, d, d))
    V = 0.6 * rng.standard_normal((2, d, d))
    return Heads.bilinear(A, V=V, w=0.5)


#: Balance residuals that the particle engine defines as NaN for flows that are not
#: gradient flows (``sign = 0``: non-symmetric or non-value-aligned heads).
_NAN_BY_DEFINITION = ("balance_edi", "balance_g2")


def _check_run(res) -> None:
    """Accept a run whose only non-finite records are the NaN-by-definition EDI residuals."""
    if res.status == Status.SUCCESS:
        return
    bad = [k for k, v in res.history.items()
           if k not in _NAN_BY_DEFINITION and not np.all(np.isfinite(v))]
    if bad or not res.history or res.sign != 0:
        raise FloatingPointError(f"{NAME}: particle run failed: {res.message}")


def _identity_error(x0: np.ndarray, heads: Heads, beta: float, T: float, dt: float,
                    integrator: str = "rk4", power: float = 2.0,
                    kind: str = "softmax") -> dict:
    """Central differences of the entropy against the identity ``−β^power Cov(s, ṡ)``.

    ``kind``: the attention the particles run with (negative control ``no-mobility``:
    ``"usa"``); the recorded entropies are those of the softmax rows either way.
    """
    # rtol = None: judged by the study's criteria, not by the solver's tolerance
    res = simulate(x0, heads, Attention(kind, beta), T=T, dt=dt, entropy=True,
                   head_rates=False, clusters=False, integrator=integrator, rtol=None)
    _check_run(res)
    t = res.t
    ent = res.history["entropy"][0]  # (K, H)
    # the engine records −β² Cov(s, ṡ); a fault takes the identity with β^power instead
    rate = res.history["entropy_rate"][0] * beta ** (power - 2.0)
    fd = (ent[2:] - ent[:-2]) / (t[2:, None] - t[:-2, None])
    err = float(np.max(np.abs(fd - rate[1:-1])))
    return {"dt": dt, "max_abs_err": err, "max_rate": float(np.max(np.abs(rate))),
            "t": t[1:-1], "fd": fd, "rate": rate[1:-1]}


def run(*, out: Path, quick: bool = False, seed: int = 0,
        fault: str | None = None) -> StudyResult:
    """Entropy identity for general heads and monotone entropy for scalar heads."""
    fam, size = CONTROLS.read(fault)
    integrator = "euler" if fault == "euler" else "rk4"
    power = 1.0 if fault == "identity-beta-power" else 2.0
    if fam == "identity-beta":
        power = 2.0 + size
    vscale = 1.0 + size if fam == "velocity" else 1.0
    att = "usa" if fault == "no-mobility" else "softmax"  # the particles' attention kind
    rng = np.random.default_rng(seed)
    beta = 1.0
    n, d = (12, 3) if quick else (24, 3)
    T = 0.25 if quick else 1.0
    dts = (0.005, 0.0025) if quick else (0.01, 0.005, 0.0025)
    x0 = sample_uniform(n, d, rng)
    general = {}
    criteria: list[Criterion] = []
    heads_by_kind = {kind: _general_heads(kind, d, rng) for kind in ("symmetric",
                                                                      "nonsymmetric")}
    for b in (beta, BETA_ALT):
        for kind, heads in heads_by_kind.items():
            key = kind if b == beta else f"{kind}_beta{b:g}"
            errs = [_identity_error(x0, heads, b, T, dt, integrator, power, att)
                    for dt in dts]
            order = fit_loglog([e["dt"] for e in errs], [e["max_abs_err"] for e in errs]).slope
            general[key] = {"errors": [{k: e[k] for k in ("dt", "max_abs_err", "max_rate")}
                                       for e in errs],
                            "order": order, "series": errs[-1], "beta": b}
            criteria.append(Criterion(
                f"{key}_identity_order" if b == beta else f"{kind}_identity_order_beta{b:g}",
                order, TOL["order_lo"], TOL["order_hi"],
                what=f"{kind} heads, β = {b:g}: fitted order in dt of |central differences "
                     "− identity|",
                why="the identity is exact; central differences are O(dt²)"))
            logger.info("%s heads, beta %g: FD − identity errors %s, order %.2f", kind, b,
                        [e["max_abs_err"] for e in errs], order)
    # scalar heads, equiangular tokens
    ne, lam = 6, [0.7, 1.5]
    Te = 12.0 / (2 * sum(lam)) + 3.0
    xe = equiangular_tokens(ne, 0.0, d=ne + 2, rng=rng)
    dte = 0.02 if quick else 0.01
    sh = Heads.scalar(lam, ne + 2, value_sign=-1.0 if fault == "value-sign" else 1.0)
    if vscale != 1.0:
        sh = sh.with_(V=vscale * sh.V)
    # rtol = None: judged by the study's criteria, not by the solver's tolerance
    res = simulate(xe, sh, Attention(att, beta), T=Te, dt=dte, entropy=True, head_rates=False,
                   clusters=False, integrator=integrator, rtol=None)
    if res.status != Status.SUCCESS:
        raise FloatingPointError(f"{NAME}: particle run failed: {res.message}")
    ent = res.history["entropy"][0]
    gamma = solve_equiangular(0.0, lam, beta, ne, res.t).gamma
    closed = np.stack([equiangular_entropy(gamma, lh, beta, ne) for lh in lam], axis=1)
    eq = {"n": ne, "lambdas": lam, "T": Te,
          "min_increment": float(np.min(np.diff(ent, axis=0))),
          "min_rate": float(np.min(res.history["entropy_rate"][0])),
          "closed_form_err": float(np.max(np.abs(ent - closed))),
          "final_gap_to_log_n": float(np.max(np.abs(ent[-1] - np.log(ne)))),
          "t": res.t, "entropy": ent}
    criteria += [
        Criterion("equiangular_monotone", eq["min_increment"], lo=-TOL["monotone"],
                  what="smallest step of the mean entropy (scalar heads, equiangular tokens)",
                  why="non-decreasing up to the round-off of the entropy"),
        Criterion("equiangular_closed_form", eq["closed_form_err"], hi=TOL["closed_form"],
                  what="max |entropy − closed form along the equiangular ODE|",
                  why="RK4 error in γ times dH/dγ"),
        Criterion("equiangular_log_n", eq["final_gap_to_log_n"], hi=TOL["log_n"],
                  what="|H(T) − log n|", why="1 − γ(T) ≲ 1e-8 at the final time"),
    ]
    fits = {f"{k}_order": v["order"] for k, v in general.items()}
    fits.update({"equiangular_min_increment": eq["min_increment"],
                 "equiangular_closed_form_err": eq["closed_form_err"],
                 "equiangular_final_gap_to_log_n": eq["final_gap_to_log_n"]})
    word = "non-decreasing" if eq["min_increment"] >= -TOL["monotone"] else "NOT monotone"
    details = ("Entropy production identity dH/dt = −β² Cov(s, ṡ): central differences of the "
               "recorded entropy agree with it at order "
               + ", ".join(f"{v['order']:.2f} ({k.split('_')[0]} heads, β = {v['beta']:g})"
                           for k, v in general.items())
               + f" in dt. Scalar heads, equiangular tokens: entropy {word} (min step "
               f"{eq['min_increment']:.1e}), closed form to {eq['closed_form_err']:.1e}, "
               f"|H(T) − log n| = {eq['final_gap_to_log_n']:.1e}.")
    passed, text, entries = CONTROLS.conclude(criteria, details, fault)
    summary = {"settings": {"beta": beta, "beta_alt": BETA_ALT, "n": n, "d": d, "T": T,
                            "dts": dts, "quick": quick, "seed": seed, "tolerances": TOL},
               **entries,
               "fits": fits,
               "general": {k: {"errors": v["errors"], "order": v["order"]}
                           for k, v in general.items()},
               "equiangular": {k: v for k, v in eq.items() if k not in ("t", "entropy")}}

    def plot(stage: Path) -> list[str]:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt

        fig, ax = plt.subplots(1, 3, figsize=(14, 4))
        for i, (k, v) in enumerate((k, v) for k, v in general.items() if v["beta"] == beta):
            s = v["series"]
            for h in range(s["rate"].shape[1]):
                ax[0].plot(s["t"], s["rate"][:, h], color=f"C{2 * i + h}",
                           label=f"{k} head {h}: −β²Cov(s,ṡ)")
                ax[0].plot(s["t"], s["fd"][:, h], "k:", lw=1)
            ax[1].loglog([e["dt"] for e in v["errors"]], [e["max_abs_err"] for e in v["errors"]],
                         "o-", label=f"{k} (order {v['order']:.2f})")
        ax[0].set(xlabel="t", ylabel="dH/dt (token mean)",
                  title="identity (colour) vs central differences (dotted)")
        ax[0].legend(fontsize=7)
        ax[1].set(xlabel="dt", ylabel="max |FD − identity|", title="discrepancy = O(dt²)")
        ax[1].legend(fontsize=8)
        for h, lh in enumerate(lam):
            ax[2].plot(eq["t"], eq["entropy"][:, h], color=f"C{h}", label=f"λ={lh}")
        ax[2].axhline(np.log(ne), color="k", ls="--", lw=0.8, label="log n")
        ax[2].set(xlabel="t", ylabel="attention entropy",
                  title=f"scalar heads, equiangular tokens (n={ne})")
        ax[2].legend(fontsize=8)
        return save_figure(fig, stage, "entropy.png")

    return write_study(out, StudyResult(NAME, summary, text, passed), plot)
