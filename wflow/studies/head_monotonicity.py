"""Study ``head-monotonicity``: per-head energy monotonicity below / above ``β*``, δ sweep.

Theory (docs/theory.md §6, :mod:`wflow.multihead`): with heads in orthogonal subspaces
(``A_{h'}A_h = 0``) the per-head rate is ``dE_h/dt = own_h + cross_radial_h``, and radial
dominance (RD) ``own_h ≥ R_h = ∫|∇ψ_h| Σ_{h'≠h}|a^{h'}|`` is sufficient for
``dE_h/dt ≥ 0``. For approximately orthogonal heads (``‖A_{h'}A_h‖_op = δ``) a direct cross
term of size ``O(δ)`` appears, bounded a priori by ``D_h`` (from the head overlaps and the
token configuration, :class:`~wflow.multihead.RadialDominance`); the certificate
``own_h − R_h − D_h`` is a lower bound of ``dE_h/dt``.

Setting: ``H`` heads ``A_h = V_h = Hα U_h U_hᵀ`` (coordinate blocks for ``δ = 0``, see
:func:`~wflow.multihead.approx_orthogonal_heads`), ``n`` tokens spread over the blocks
(each head sees orthonormal tokens with strength ``α``, :func:`~wflow.multihead.spread_tokens`)
plus a seeded perturbation that breaks the symmetry between heads. For the unperturbed
tokens (RD) holds iff ``β ≤ β*_⊥ = (1/2α) ln(H c*² (n−1)/(1 − H c*²))``. Trajectories
(particle engine, RK4) at ``β`` below and above ``β*_⊥`` and for a sweep of ``δ``.

Measured, independently of the rate formulas: the per-head energies ``E_h(t)`` recorded by
the particle engine, and their central differences ``FD_h`` (error ``≈ h² |E_h‴| / 6``,
estimated from third differences). Criteria:

* ``rate_identity``: ``FD_h`` equals the rate formula ``own + cross_direct + cross_radial``
  evaluated at the recorded tokens, to the difference error;
* ``certificate_lower_bound``: ``own − R − D <= FD_h`` (to the same error) at every
  recorded state, every head, every run;
* ``monotone_below_beta_star``: orthogonal heads (``δ = 0``) below ``β*_⊥``: no head's
  energy ever decreases (largest drop relative to its gain ``<=`` round-off);
* ``particle_accuracy``: every run passes the engine's chain-rule check
  (:func:`~wflow.studies.helpers.run_accuracy`; an inaccurate run FAILs the verdict rather
  than stopping the study).

Negative control ``no-mobility``: the particles run unnormalised attention
(kind ``usa``: the softmax mobility ``1/Z`` dropped) against the softmax rate formulas:
it trips ``rate_identity``, ``monotone_below_beta_star`` and ``certificate_lower_bound``,
and the faster flow also misses the engine's chain-rule check at ``dt = 0.04``
(``particle_accuracy``). The criteria each control trips (quick mode, seed 0):
docs/studies_power.md, generated from ``bench/results/size_power.json``.

Reported: the fraction of time with (RD) and with ``dE_h/dt ≥ 0`` above ``β*_⊥`` (RD is
only sufficient) and the largest energy drops of approximately orthogonal heads.
"""

from __future__ import annotations

import logging
from pathlib import Path

import numpy as np

from ..attention.heads import Attention
from ..geometry.sphere import normalize
from ..multihead import beta_star, beta_star_blocks, dominance_root, radial_dominance
from ..particles import simulate
from .base import Criterion, NegativeControls, StudyResult, fit_loglog, save_figure, write_study
from .helpers import (
    VELOCITY_FAMILY,
    accuracy_criterion,
    approx_orthogonal_heads,
    head_overlap,
    no_mobility_fault,
    run_accuracy,
    spread_tokens,
    time_doubled_fault,
    value_scale,
)

logger = logging.getLogger(__name__)

NAME = "head-monotonicity"

#: Largest relative energy drop accepted as round-off (energies are O(1), ~1e-16 each).
DROP_TOL = 1e-12

#: Negative controls: ``run(fault=NAME)``.
FAULTS = {
    "time-doubled": time_doubled_fault("while the rate formulas use the nominal heads"),
    "value-sign": "the particle heads have negated values (V = −A: energy descent) while "
                  "the rate formulas use the nominal heads",
    "no-mobility": no_mobility_fault("the particles drop",
                                     "while the rate formulas are those of softmax"),
}
#: Fault families ``run(fault="FAMILY:S")`` (sizes scanned by bench/size_power.py).
FAMILIES = dict(VELOCITY_FAMILY)
#: The study's faults, read (``run(fault=...)``) and reported (the verdict) in one place.
CONTROLS = NegativeControls(NAME, FAULTS, FAMILIES)


def initial_tokens(n: int, H: int, eps: float, rng: np.random.Generator) -> np.ndarray:
    """Spread orthonormal tokens plus a Gaussian perturbation of size ``eps`` (renormalised)."""
    x = spread_tokens(n, H)
    return normalize(x + eps * rng.standard_normal(x.shape) / np.sqrt(x.shape[1]))


def _fd(t: np.ndarray, E: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Central differences of ``E`` (``(K, H)``) at interior times and their error bound.

    Error of the central difference on a uniform grid ``h``: ``h² |E‴| / 6``, with
    ``|E‴|`` estimated by the largest third difference of the run (times 2, safety),
    plus the round-off ``4 eps max|E| / h``.
    """
    h = float(t[1] - t[0])
    fd = (E[2:] - E[:-2]) / (t[2:] - t[:-2])[:, None]
    d3 = np.max(np.abs(np.diff(E, 3, axis=0)), axis=0) / h**3 if E.shape[0] > 3 else 0.0
    err = 2 * h**2 * d3 / 6 + 4 * np.finfo(float).eps * np.max(np.abs(E), axis=0) / h
    return fd, np.broadcast_to(err, fd.shape)


def run(*, out: Path, quick: bool = False, seed: int = 0,
        fault: str | None = None) -> StudyResult:
    """Trajectories below/above ``β*_⊥`` for orthogonal and approximately orthogonal heads."""
    fam, size = CONTROLS.read(fault)
    vscale = -1.0 if fault == "value-sign" else value_scale(fault, fam, size)
    H, n, alpha, eps = 2, 8, 1.0, 0.3
    d = H * n
    factors = (0.5, 2.5) if quick else (0.25, 0.5, 1.5, 2.5, 4.0)
    deltas = (0.0, 0.05) if quick else (0.0, 0.01, 0.03, 0.1)  # relative to (Hα)²
    T, dt, rec = (2.0, 0.04, 1) if quick else (6.0, 0.02, 2)
    rng = np.random.default_rng(seed)
    x0 = initial_tokens(n, H, eps, rng)
    bsb = float(beta_star_blocks(H, n, alpha))
    scale = H * alpha
    heads_by_delta = {}
    for dl in deltas:
        heads_by_delta[dl] = approx_orthogonal_heads(H, d, scale=scale, delta=dl * scale**2,
                                                     rng=np.random.default_rng(seed + 1))
    root0 = dominance_root(x0, heads_by_delta[0.0], bracket=(bsb / 8, 8 * bsb))
    runs = []
    worst_identity, worst_cert, worst_below, worst_acc = 0.0, -np.inf, 0.0, 0.0
    for f in factors:
        beta = f * bsb
        attn = Attention("softmax", beta)
        sim_attn = Attention("usa", beta) if fault == "no-mobility" else attn
        for dl, heads in heads_by_delta.items():
            sim_heads = heads.with_(V=vscale * heads.V) if vscale != 1.0 else heads
            # rtol = None: judged by the study's criteria, not by the solver's tolerance
            res = simulate(x0, sim_heads, sim_attn, T=T, dt=dt, record_every=rec,
                           save_trajectory=True, head_rates=False, clusters=False, rtol=None)
            worst_acc = max(worst_acc, run_accuracy(res, NAME))
            traj, t = res.trajectory[0], res.t
            E_h = res.history["E_h"][0]  # (K, H): the engine's energies
            rds = [radial_dominance(xk, heads, attn) for xk in traj]
            rate = np.array([r.rate for r in rds])  # formula, nominal heads
            cert = np.array([r.certificate for r in rds])
            margin = np.array([r.margin for r in rds])
            own = np.array([r.own for r in rds])
            cd = np.array([r.cross_direct for r in rds])
            fd, err = _fd(t, E_h)
            identity = float(np.max(np.abs(fd - rate[1:-1]) / err))
            cert_excess = float(np.max((cert[1:-1] - fd) / err))
            worst_identity = max(worst_identity, identity)
            worst_cert = max(worst_cert, cert_excess)
            mono = fd >= -err
            gain = np.maximum(np.abs(E_h[-1] - E_h[0]), 1e-300)
            drop = (np.maximum.accumulate(E_h, axis=0) - E_h).max(axis=0) / gain
            if f < 1 and dl == 0.0:
                worst_below = max(worst_below, float(np.max(drop)))
            row = {
                "beta_over_beta_star_blocks": f, "beta": beta, "delta_rel": dl,
                "overlap": head_overlap(heads),
                "frac_monotone": mono.mean(axis=0).tolist(),
                "max_relative_energy_drop": drop.tolist(),
                "frac_dominance": (margin >= 0).mean(axis=0).tolist(),
                "frac_certificate": (cert >= 0).mean(axis=0).tolist(),
                "dominance_at_t0": (margin[0] >= 0).tolist(),
                "rate_identity_over_error": identity,
                "certificate_excess_over_error": cert_excess,
                "min_fd_rate_over_max_own": float(np.min(fd) / np.max(own)),
                "cross_direct_over_own_t0": float(np.max(np.abs(cd[0]) / own[0])),
                "final_mean_inner": float(res.history["mean_inner"][0, -1]),
            }
            runs.append(row)
            logger.info("beta/beta*=%.2f delta=%.3g: frac monotone %s", f, dl,
                        row["frac_monotone"])
    # O(δ) scaling of the direct cross term (at the smallest β, over δ > 0)
    pos = [r for r in runs if r["delta_rel"] > 0 and r["beta_over_beta_star_blocks"] == factors[0]]
    fits = {"beta_star_blocks": bsb, "dominance_root_x0": root0,
            "rate_identity_over_error": worst_identity,
            "certificate_excess_over_error": worst_cert,
            "max_relative_drop_orthogonal_below": worst_below}
    if len(pos) >= 2:
        fit = fit_loglog([r["delta_rel"] for r in pos],
                         [r["cross_direct_over_own_t0"] for r in pos])
        fits["cross_direct_vs_delta_slope"] = fit.slope
    criteria = [
        Criterion("rate_identity", worst_identity, hi=1.0,
                  what="max |FD(E_h) − (own + cross_direct + cross_radial)| / FD error bound",
                  why="dE_h/dt = ∫<∇ψ_h, v> dμ is exact; central differences are O(h²)"),
        Criterion("certificate_lower_bound", worst_cert, hi=1.0,
                  what="max (own − R − D − FD(E_h)) / FD error bound",
                  why="own − R − D is a lower bound of dE_h/dt"),
        Criterion("monotone_below_beta_star", worst_below, hi=DROP_TOL,
                  what="orthogonal heads below β*_⊥: largest energy drop / gain of a head",
                  why="(RD) holds below β*_⊥ ⇒ every E_h non-decreasing"),
        accuracy_criterion(worst_acc),
    ]
    above = [r for r in runs if r["beta_over_beta_star_blocks"] > 1 and r["delta_rel"] == 0]
    lost_above = [r["beta_over_beta_star_blocks"] for r in above if min(r["frac_monotone"]) < 1]
    below_drop = {f"{dl:g}": max(max(r["max_relative_energy_drop"]) for r in runs
                                 if r["delta_rel"] == dl and r["beta_over_beta_star_blocks"] < 1)
                  for dl in deltas}
    fits["max_relative_energy_drop_below"] = {k: float(v) for k, v in below_drop.items()}
    dom_above = max((1 - min(r["frac_dominance"]) for r in above), default=0.0)
    sentences = [f"β*_⊥ = {bsb:.3f}; root of the (RD) margin at the initial tokens "
                 f"{root0:.3f}."]
    if above:
        fac = ", ".join(f"{r['beta_over_beta_star_blocks']:g}" for r in above)
        sentences.append(
            f"Above β*_⊥ (β/β*_⊥ = {fac}): "
            + (f"per-head monotonicity lost at β/β*_⊥ = {lost_above}" if lost_above else
               "every head's energy still non-decreasing")
            + f"; (RD) fails on up to {100 * dom_above:.0f}% of the recorded times (it is "
              "only sufficient).")
    for k, v in below_drop.items():
        if float(k) == 0.0:
            continue
        sentences.append(
            f"δ/(Hα)² = {k} below β*_⊥: largest per-head energy drop relative to its gain "
            + (f"{v:.1e} — the O(δ) direct cross term outweighs the own power somewhere."
               if v > DROP_TOL else f"{v:.1e} — no decrease observed."))
    passed, text, entries = CONTROLS.conclude(criteria, " ".join(sentences), fault)
    summary = {"settings": {"H": H, "n": n, "d": d, "alpha": alpha, "eps": eps, "T": T,
                            "dt": dt, "factors": factors, "deltas_rel": deltas,
                            "quick": quick, "seed": seed, "drop_tol": DROP_TOL,
                            "beta_star_shared_space": float(beta_star(H, n, alpha))},
               **entries,
               "fits": fits, "runs": runs}

    def plot(stage: Path) -> list[str]:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
        import matplotlib.ticker

        fig, ax = plt.subplots(1, 2, figsize=(10, 4))
        for j, dl in enumerate(deltas):
            rs = [r for r in runs if r["delta_rel"] == dl]
            fx = [r["beta_over_beta_star_blocks"] for r in rs]
            ax[0].plot(fx, [min(r["frac_monotone"]) for r in rs], "o-", color=f"C{j}",
                       label=f"δ/(Hα)² = {dl:g}: min_h frac dE_h/dt ≥ 0")
            ax[0].plot(fx, [min(r["frac_dominance"]) for r in rs], "x--", color=f"C{j}",
                       label=f"δ/(Hα)² = {dl:g}: min_h frac (RD)")
        ax[0].axvline(1, color="gray", ls=":")
        ax[0].set(xscale="log", xlabel="β / β*_⊥", ylabel="fraction of time",
                  title=f"H={H} heads, n={n} tokens")
        ax[0].legend(fontsize=6, loc="center left")
        for j, dl in enumerate(deltas):
            rs = [r for r in runs if r["delta_rel"] == dl]
            ax[1].plot([r["beta_over_beta_star_blocks"] for r in rs],
                       [max(r["max_relative_energy_drop"]) + 1e-17 for r in rs], "o-",
                       color=f"C{j}", label=f"δ/(Hα)² = {dl:g}")
        ax[1].axvline(1, color="gray", ls=":")
        ax[1].set(xscale="log", yscale="log", xlabel="β / β*_⊥",
                  ylabel="max_h (largest drop of E_h) / (E_h(T) − E_h(0))",
                  title="per-head energy decrease (1e-17 = none)")
        ax[1].legend(fontsize=8)
        for a in ax:
            a.set_xticks(list(factors), labels=[f"{f:g}" for f in factors])
            a.xaxis.set_minor_formatter(matplotlib.ticker.NullFormatter())
        return save_figure(fig, stage, "head_monotonicity.png")

    return write_study(out, StudyResult(NAME, summary, text, passed), plot)
