"""Study ``mean-field``: particles vs the transformer PDE as ``n`` grows (docs/theory.md §5).

With ``x_i(0)`` i.i.d. from ``ρ_0`` the empirical measure stays close to the mean-field
solution: ``W_2(μ^n_t, μ_t)`` decays like the initial sampling error, ``≈ n^{-1/2}`` up to
logs on ``S²`` (``E W_2² ~ log n / n``, Ajtai–Komlós–Tusnády), and its level at ``t`` is
bounded by Grönwall, ``W_2(μ^n_t, μ_t) <= e^{Lt} W_2(μ^n_0, μ_0)``.

Estimators (exact OT, POT, geodesic cost; every number is a mean over ``reps``
independent replicates of the same ``n``):

* ``two0 = W_2(x_0, y_0)``: two independent ``n``-samples of ``ρ_0`` (the ``t = 0``
  baseline);
* ``twoT = W_2(X_T, Z_T)``: the particles at ``T`` against an independent ``n``-sample of
  the PDE solution ``ρ_T`` (two-sample estimator of the particle–PDE distance);
* ``pred_T² = (W_2(X_T, Y_T)² + W_2(Z_T, Z'_T)²)/2``: what ``twoT²`` is if the particles
  follow the PDE — ``Y`` evolves the independent sample ``y_0`` (so ``W_2(X_T, Y_T)``
  carries the dynamics' amplification ``e^{Lt}`` of the sampling error, measured here
  as ``amp = W_2(X_T, Y_T)/W_2(x_0, y_0)``) and ``Z'_T`` is a second sample of ``ρ_T``.
  Independent fluctuations add in ``W_2²``: ``E twoT² ≈ W_2(X_T, ρ_T)² + W_2(Z_T, ρ_T)²
  ≈ E pred_T²``, while a PDE that misses the particles' limit by ``δ`` adds ``δ²``;
* ``raw = W_2(X_T, Σ_K m_K δ_{c_K})``: particles against the PDE cell masses at the cell
  centroids (docs/theory.md §5's measurement); it flattens at the mesh resolution ``O(h)``, so it
  is reported, not judged (two atomic measures on the mesh are no remedy: a mass
  perturbation ``δ`` on atoms ``h`` apart costs ``W_2 ~ h|δ|^{1/2}``, rate ``n^{-1/4}``).

Criteria: the *level* ``R = (mean twoT² / mean pred_T²)^{1/2}`` at the largest ``n``
within ``1 + LEVEL_TOL`` (``δ`` grows relative to the sampling error like ``n^{1/2}``, so
the largest ``n`` has the power); the *rate*: the fitted exponent of ``twoT`` in ``n``
equal to that of the baseline ``two0`` within :data:`EXPONENT_TOL` and in
:data:`EXPONENT_RANGE`.

What a PASS rules out. The level test sees a particle–PDE discrepancy ``δ`` (in ``W_2``)
once ``R = (1 + δ²/pred_T²)^{1/2}`` exceeds ``1 + LEVEL_TOL``, i.e. ``δ >= δ* =
pred_T ((1 + LEVEL_TOL)² − 1)^{1/2}``. A PDE velocity off by ``×(1 + s)`` moves ``ρ_T``
by about ``s · W_2(ρ_0, ρ_T)`` (the displacement of the flow), so the verdict states the
smallest detectable velocity error ``s* ≈ δ*/W_2(ρ_0, ρ_T)`` at the largest ``n``
(estimated from the run) beside the *measured* one, :data:`MEASURED_VELOCITY_POWER`:
bench/size_power.py injected ``pde-velocity:S`` and found the smallest ``S`` of its grid
that fails (docs/studies_power.md). Quick mode (``n = 400``) catches ``+100 %`` and
``−50 %`` only; full mode (``n = 4000``) catches ``+20 %`` and ``−20 %`` at seed 0, while
``±10 %`` pass (``+10 %`` gives ``R = 1.26`` against ``1.3``). A 5 % velocity error is
therefore *below* what either mode sees; the runs' own estimate ``s*`` (full mode: 15–18 %)
agrees with the measurement to within the grid's step.

A missing mobility: dropping the softmax ``1/Z`` in one solver (kind ``usa`` at
the same ``β``) scales its velocity by ``Z(x)``, which varies over the sphere. Measured at
seed 0: full mode catches it in either solver, ``pde-no-mobility`` ``R = 2.40`` and
``particles-no-mobility`` ``R = 1.91`` at ``n = 4000`` (correct solver 0.94 at seed 0,
0.92–1.09 over seeds 0–3; accept ``≤ 1.3``; ``exponent_vs_baseline`` fails too, 0.20 and
0.21 against 0.03); quick mode does not
(``R = 1.10`` and ``1.13`` at ``n = 400`` against the correct 0.96; exponents pass), so both
controls are full-mode ones (``test_study_full.py``).
"""

from __future__ import annotations

from pathlib import Path

import numpy as np

from ..attention.heads import Attention, Heads
from ..geometry.sphere import sample_cells
from ..geometry.transport import w2_sphere
from ..infra.parallel import parallel_map
from ..particles import simulate
from ..status import Status
from .base import (
    Criterion,
    StudyResult,
    check_fault,
    conclude,
    fit_loglog,
    parse_fault,
    write_study,
)

__all__ = ["run", "FAULTS", "FAMILIES", "EXPONENT_TOL", "EXPONENT_RANGE", "LEVEL_TOL",
           "MEASURED_VELOCITY_POWER"]

NAME = "mean-field"

#: Accepted distance between the final and the baseline exponent: this floor, or 3
#: standard errors of the difference (from the replicates' scatter) where larger.
EXPONENT_TOL = 0.1
#: "n^{-1/2} up to logs": −1/2 + 1/(2 log n̄) ≈ −0.4 over the fitted ranges, ± the fit's
#: scatter: measured over seeds 0–19 in quick mode −0.48 … −0.23 (mean −0.40, s.d. 0.06;
#: seed 4 at −0.229 failed the former bound −0.25), so the upper bound sits 4 s.d. above
#: the mean; a biased PDE flattens it towards 0 (PDE velocity ×2: −0.11), but the level
#: criterion is the one with the power (docs/studies_power.md).
EXPONENT_RANGE = (-0.65, -0.15)
#: Accepted level ``R − 1`` at the largest ``n``. Under correct solvers R scatters around 1
#: with the W2 estimators' noise, measured s.d. ≈ 0.15 for one replicate (heavy-tailed in
#: 2-D), ≈ 0.06 for the means used (measured R = 0.92–1.09 in full mode, seeds 0–3); the
#: faults of :data:`FAULTS` give R = 1.5–2.7.
LEVEL_TOL = 0.3

#: The smallest PDE velocity errors ``×(1 + s)`` caught at seed 0 (``(s₊, s₋)``), measured by
#: bench/size_power.py over the grid ±0.02, ±0.05, ±0.1, ±0.2, ±0.5 (full mode) and
#: ±0.001 … ±1 (quick mode), results in bench/results/size_power.json: the verdict quotes
#: them. The next smaller sizes of the grid pass (quick: +0.5, −0.2; full: +0.1 with
#: R = 1.26, −0.1).
MEASURED_VELOCITY_POWER = {"quick": (1.0, -0.5), "full": (0.2, -0.2)}

#: Negative controls: ``run(fault=NAME)``.
FAULTS = {
    "frozen-pde": "the PDE solution is frozen: ρ_T := ρ_0",
    "pde-value-sign": "the PDE runs with the value matrix negated (V = −A)",
    "pde-beta-1.5": "the PDE runs at β = 1.5 instead of the particles' β = 1 (detected in "
                    "full mode; in quick mode the bias is below the sampling error)",
    "pde-velocity:1": "the PDE runs with the value matrix doubled (velocity ×2)",
    "pde-stop-short:0.5": "the PDE stops at T/2 (the particles run to T)",
    "pde-no-mobility": "the PDE drops the softmax mobility 1/Z (unnormalised attention, "
                       "kind 'usa', same β) while the particles run softmax (detected in "
                       "full mode; in quick mode the bias is below the sampling error)",
    "particles-no-mobility": "the particles drop the softmax mobility 1/Z (unnormalised "
                             "attention, kind 'usa', same β) while the PDE runs softmax "
                             "(detected in full mode; in quick mode the bias is below the "
                             "sampling error)",
}
#: Fault families ``run(fault="FAMILY:S")`` (sizes scanned by bench/size_power.py).
FAMILIES = {
    "pde-velocity": "the PDE runs with the value matrix ×(1 + s) (velocity scaled)",
    "pde-beta": "the PDE runs at β ×(1 + s)",
    "pde-stop-short": "the PDE stops at (1 − s)T while the particles run to T",
    "particles-velocity": "the particles run with the value matrix ×(1 + s)",
}


def _model() -> tuple[Heads, Attention]:
    """One softmax head ``A = V = diag(1.2, 0.6, −0.3)``, ``β = 1``."""
    return Heads.bilinear(np.diag([1.2, 0.6, -0.3])[None], w=1.0), Attention("softmax", 1.0)


def _setup(quick: bool):
    from ..geometry.density import initial_density
    from ..geometry.mesh import load_mesh

    mesh = load_mesh("sphere_720.msh" if quick else "sphere_2420.msh")
    heads, attn = _model()
    # two bumps on a uniform floor: a density bounded below, for which the sampling error
    # in W2 has the n^{-1/2} (log n)^{1/2} rate on S²
    rho0 = initial_density(mesh, {"type": "vmf", "means": [[0, 0, 1.0], [1.0, 0.2, 0.0],
                                                           [-0.2, 0.3, 1.0]],
                                  "kappas": [0.0, 4.0, 6.0], "weights": [0.4, 0.35, 0.25]})
    return mesh, heads, attn, rho0


def _particles(item: tuple) -> dict:
    n, r, T, seed, verts, m0, chat, mT, vscale, kind = item
    heads, attn = _model()
    if kind != attn.kind:
        attn = Attention(kind, attn.beta)
    if vscale != 1.0:
        heads = heads.with_(V=vscale * heads.V)

    def rng(k: int) -> np.random.Generator:
        return np.random.default_rng([seed, n, r, k])

    kw = dict(T=T, dt=T / 8, integrator="rk4", head_rates=False, clusters=False,
              record_every=8)
    x0, y0 = sample_cells(verts, m0, n, rng(0)), sample_cells(verts, m0, n, rng(1))
    runs = [simulate(z, heads, attn, **kw) for z in (x0, y0)]
    if any(res.status != Status.SUCCESS for res in runs):
        raise FloatingPointError(f"{NAME}: particle run failed")
    XT, YT = runs[0].x[0], runs[1].x[0]
    zT, zT2 = sample_cells(verts, mT, n, rng(2)), sample_cells(verts, mT, n, rng(3))
    maxp = max(n, chat.shape[0]) + 1
    out = {"two0": w2_sphere(x0, y0, max_points=maxp),
           "twoT": w2_sphere(XT, zT, max_points=maxp),
           "xyT": w2_sphere(XT, YT, max_points=maxp),
           "zzT": w2_sphere(zT, zT2, max_points=maxp)}
    if r == 0:  # against the cell masses: reported (first replicate), not judged
        out["raw0"] = w2_sphere(x0, chat, None, m0, max_points=maxp)
        out["rawT"] = w2_sphere(XT, chat, None, mT, max_points=maxp)
    out["predT"] = float(np.sqrt(0.5 * (out["xyT"] ** 2 + out["zzT"] ** 2)))
    return out


def run(*, out: Path, quick: bool = False, seed: int = 0,
        fault: str | None = None) -> StudyResult:
    """Sweep ``n`` (several replicates); judge level and exponent; write summary and plot."""
    from ..pde import solve_pde

    check_fault(NAME, fault, FAULTS, FAMILIES)
    fam, size = parse_fault(fault, FAMILIES)
    T = 1.0
    ns = [100, 200, 400] if quick else [250, 500, 1000, 2000, 4000]
    reps = 8 if quick else 4
    mesh, heads, attn, rho0 = _setup(quick)
    p_heads, p_attn = heads, attn
    if fault == "pde-value-sign":
        p_heads = heads.with_(V=-heads.V)
    elif fault == "pde-beta-1.5":
        p_attn = Attention(attn.kind, 1.5)
    elif fault == "pde-no-mobility":
        p_attn = Attention("usa", attn.beta)
    elif fam == "pde-velocity":
        p_heads = heads.with_(V=(1.0 + size) * heads.V)
    elif fam == "pde-beta":
        p_attn = Attention(attn.kind, attn.beta * (1.0 + size))
    T_pde = T * (1.0 - size) if fam == "pde-stop-short" else T
    vscale = 1.0 + size if fam == "particles-velocity" else 1.0
    kind = "usa" if fault == "particles-no-mobility" else attn.kind  # of the particles
    pde = solve_pde(rho0, p_heads, p_attn, mesh=mesh, T=T_pde, dt=0.05, order=2, n_saves=2,
                    balance=False, clusters=False, progress=False)
    if pde.status != Status.SUCCESS:
        raise FloatingPointError(f"{NAME}: PDE failed: {pde.message}")
    chat = pde.centroids / np.linalg.norm(pde.centroids, axis=1, keepdims=True)
    verts = mesh.gather_owned(mesh.cell_vertices.reshape(-1, 9)).reshape(-1, 3, 3)
    m0, mT = pde.masses[0], pde.masses[-1]
    if fault == "frozen-pde":
        mT = m0
    items = [(n, r, T, seed, verts, m0, chat, mT, vscale, kind) for n in ns
             for r in range(reps)]
    rows = parallel_map(_particles, items)
    keys = ("two0", "twoT", "xyT", "zzT", "predT", "raw0", "rawT")
    table: dict[str, list[float]] = {k: [] for k in keys}
    level, amp = [], []
    for n in ns:
        sel = [r for it, r in zip(items, rows, strict=True) if it[0] == n]
        for k in keys:
            table[k].append(float(np.mean([r[k] for r in sel if k in r])))
        level.append(float(np.sqrt(np.mean([r["twoT"] ** 2 for r in sel])
                                   / np.mean([r["predT"] ** 2 for r in sel]))))
        amp.append(float(np.mean([r["xyT"] / r["two0"] for r in sel])))
    fits = {k: fit_loglog(ns, table[k]).as_dict() for k in ("two0", "twoT", "raw0", "rawT")}
    sT, s0 = fits["twoT"]["slope"], fits["two0"]["slope"]
    # standard error of the exponent difference from the replicates' scatter: se of each
    # log-mean, propagated through the least-squares slope (weights Σ(l − l̄)²)
    ln = np.log(ns)
    lw = (ln - ln.mean()) / np.sum((ln - ln.mean()) ** 2)
    var_d = 0.0
    for j, n in enumerate(ns):
        sel = [r for it, r in zip(items, rows, strict=True) if it[0] == n]
        for k in ("twoT", "two0"):
            v = np.array([r[k] for r in sel])
            var_d += (lw[j] * v.std(ddof=1) / (np.sqrt(v.size) * v.mean())) ** 2
    tol_d = max(EXPONENT_TOL, 3.0 * float(np.sqrt(var_d)))
    lo, hi = EXPONENT_RANGE
    criteria = [
        Criterion("level_at_largest_n", level[-1], hi=1 + LEVEL_TOL,
                  what=f"R = (mean twoT² / mean pred_T²)^1/2 at n = {ns[-1]}",
                  why="particles and PDE agree up to the amplified sampling error"),
        Criterion("exponent_vs_baseline", abs(sT - s0), hi=tol_d,
                  what="|exponent(twoT) − exponent(two0)|",
                  why="the particle–PDE distance decays like the sampling error"),
        Criterion("exponent", sT, lo, hi, what="fitted exponent of twoT in n",
                  why="n^(-1/2) up to logs on S²"),
    ]
    # the smallest discrepancy the level test sees, and the velocity error it amounts to
    delta_star = table["predT"][-1] * float(np.sqrt((1 + LEVEL_TOL) ** 2 - 1))
    # the displacement of the flow, W2(ρ_0, ρ_T): the PDE cell masses at 0 and T on the
    # same atoms (no sampling error)
    disp = w2_sphere(chat, chat, pde.masses[0], pde.masses[-1],
                     max_points=chat.shape[0] + 1)
    s_star = delta_star / max(disp, 1e-300)
    sp, sm = MEASURED_VELOCITY_POWER["quick" if quick else "full"]
    details = (f"Detectable: a PDE velocity error of {100 * sp:+.0f} % or {100 * sm:+.0f} % "
               f"is caught in this mode (measured at seed 0, docs/studies_power.md; the next "
               f"smaller sizes scanned pass); "
               f"estimated from this run, a particle–PDE discrepancy W2 >= {delta_star:.3f} "
               f"rad at n = {ns[-1]}, i.e. a PDE velocity error of about {100 * s_star:.0f} % "
               f"(the flow moves ρ by W2(ρ_0, ρ_T) = {disp:.3f}; module docstring). "
               f"W2(μ^n_T, ρ_T) ~ n^{sT:.2f} vs the t = 0 baseline ~ n^{s0:.2f}; level R = "
               + ", ".join(f"{v:.2f}" for v in level) + f" at n = {ns} ({reps} replicates; "
               f"twoT/two0 = {table['twoT'][-1] / table['two0'][-1]:.2f} and the particles' "
               f"own amplification W2(X_T, Y_T)/W2(x_0, y_0) = {amp[-1]:.2f} at n = "
               f"{ns[-1]}). Particles vs the PDE cell masses at the centroids of "
               f"{int(chat.shape[0])} cells (docs/theory.md §5; reported, not judged): W2 = "
               f"{table['rawT'][-1]:.3f} rad at n = {ns[-1]} (t = 0: {table['raw0'][-1]:.3f}), "
               f"slope {fits['rawT']['slope']:.2f}.")
    passed, text, entries = conclude(criteria, details, fault=fault, faults=FAULTS,
                                     families=FAMILIES)
    summary = {"settings": {"ns": ns, "replicates": reps, "T": T, "cells": int(chat.shape[0]),
                            "quick": quick, "seed": seed, "heads": "one softmax head "
                            "A = V = diag(1.2, 0.6, −0.3), β = 1", "pde": "order 2, dt <= 0.05",
                            "level_tol": LEVEL_TOL, "exponent_tol": EXPONENT_TOL,
                            "exponent_range": list(EXPONENT_RANGE)},
               **entries,
               "fits": {**fits, "level": level, "amplification": amp,
                        "detectable_w2": delta_star, "detectable_velocity_error": s_star,
                        "measured_velocity_power": [sp, sm],
                        "displacement_w2": disp,
                        "exponent_difference_tol": tol_d},
               "table": {"n": ns, **table, "level": level, "amplification": amp}}
    result = StudyResult(NAME, summary, text, passed)

    def plot(stage: Path) -> list[str]:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
        import matplotlib.ticker

        fig, ax = plt.subplots(1, 2, figsize=(10.5, 3.8))
        for k, lab, st in (("two0", "t = 0 (baseline)", "o--"), ("twoT", "t = T vs PDE", "o-"),
                           ("raw0", "vs cell masses, t = 0", "s--"),
                           ("rawT", "vs cell masses, t = T", "s-")):
            ax[0].loglog(ns, table[k], st, label=f"{lab} (slope {fits[k]['slope']:.2f})")
        ax[0].loglog(ns, table["predT"], "k^:", ms=4, label="pred_T (no bias)")
        nn = np.array(ns, float)
        ax[0].loglog(nn, table["two0"][0] * (nn / nn[0]) ** -0.5, "k:", lw=0.8,
                     label="n^-1/2")
        ax[0].set(xlabel="n", ylabel="W₂ (rad)", title="particles vs PDE")
        ax[1].semilogx(ns, level, "o-", label="level R = twoT / pred_T")
        ax[1].semilogx(ns, amp, "s--", label="amplification W2(X_T,Y_T)/W2(x0,y0)")
        ax[1].axhline(1 + LEVEL_TOL, color="r", ls=":", label="accepted level")
        ax[1].set(xlabel="n", title="level at T")
        for a in ax:
            a.set_xticks(nn, [str(int(v)) for v in nn])  # the sample sizes, no minor labels
            a.xaxis.set_minor_formatter(matplotlib.ticker.NullFormatter())
            a.legend(fontsize=7)
        fig.tight_layout()
        fig.savefig(stage / "mean_field.png", dpi=120)
        plt.close(fig)
        return ["mean_field.png"]

    return write_study(out, result, plot)
