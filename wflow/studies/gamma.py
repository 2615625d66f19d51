"""Study ``gamma``: stability under weight perturbation (Γ-convergence, THEORY.md §5).

If the weight law ``Θ^ε → Θ`` then ``E^ε → E`` and the flows converge,
``sup_t W_2(μ^ε_t, μ_t) → 0``. Two families: perturbed initialisation
``A^ε_h = A_h + ε Δ_h`` (``Δ_h`` symmetric, ``|Δ_h|_F = 1``) and weight decay
``A^ε_h = (1 − ε) A_h`` (values tied, ``V = A``). For ``ε`` down to ``3e-3`` the study
measures ``sup_t |E^ε − E|`` and ``sup_t W_2(μ^ε_t, μ_t)`` (exact OT) from the same
initial tokens and fits the rates in ``ε`` (theory for smooth dependence: 1).
"""

from __future__ import annotations

from pathlib import Path

import numpy as np

from ..heads import Attention, Heads
from ..parallel import parallel_map
from ..particles import simulate
from ..sphere import sample_uniform
from ..transport import w2_sphere
from .base import StudyResult, fit_loglog, write_study

__all__ = ["run"]

RATE_TOL = 0.25


def _setup(n: int, H: int, seed: int):
    rng = np.random.default_rng([seed, 11])
    x0 = sample_uniform(n, 3, rng)
    heads = Heads.random_symmetric(H, 3, rng, scale=0.6)
    D = rng.standard_normal((H, 3, 3))
    D = D + np.swapaxes(D, 1, 2)
    D /= np.linalg.norm(D, axis=(1, 2), keepdims=True)
    return x0, heads, D


def _traj(item: tuple) -> dict:
    family, eps, n, H, T, dt, seed = item
    x0, heads, D = _setup(n, H, seed)
    if family == "init":
        A = heads.A + eps * D
    elif family == "decay":
        A = (1.0 - eps) * heads.A
    else:
        A = heads.A
    h = Heads.bilinear(A, w=heads.w)
    res = simulate(x0, h, Attention("softmax", 1.5), T=T, dt=dt, integrator="rk4",
                   save_trajectory=True, head_rates=False, clusters=False,
                   record_every=max(1, int(round(0.2 / dt))))
    if res.status != "success":
        raise FloatingPointError(res.message)
    return {"t": res.t, "E": res.history["E"][0], "x": res.trajectory[0]}


def run(*, out: Path, quick: bool = False, seed: int = 0) -> StudyResult:
    """Sweep ε for both families; fit the rates; write summary and plot."""
    n, H, T, dt = (100, 3, 1.5, 0.05) if quick else (300, 3, 4.0, 0.025)
    epss = [0.1, 0.03, 0.01] if quick else [0.1, 0.03, 0.01, 0.003]
    items = [("base", 0.0, n, H, T, dt, seed)] + [(f, e, n, H, T, dt, seed)
                                                   for f in ("init", "decay") for e in epss]
    runs = parallel_map(_traj, items)
    base = runs[0]
    table, fits = {}, {}
    for fam in ("init", "decay"):
        dE, dW = [], []
        for item, r in zip(items[1:], runs[1:], strict=True):
            if item[0] != fam:
                continue
            dE.append(float(np.max(np.abs(r["E"] - base["E"]))))
            dW.append(float(max(w2_sphere(a, b) for a, b in zip(r["x"], base["x"],
                                                                 strict=True))))
        table[fam] = {"eps": epss, "sup_dE": dE, "sup_W2": dW}
        fits[fam] = {"E": fit_loglog(epss, dE).as_dict(), "W2": fit_loglog(epss, dW).as_dict()}
    slopes = [fits[f][q]["slope"] for f in fits for q in ("E", "W2")]
    passed = all(abs(s - 1.0) < RATE_TOL for s in slopes)
    verdict = ("Rates in ε: " + "; ".join(
        f"{f}: sup|E^ε−E| ~ ε^{fits[f]['E']['slope']:.2f}, sup W2 ~ ε^{fits[f]['W2']['slope']:.2f}"
        for f in fits) + f" (theory 1 ± {RATE_TOL}): "
        + ("flows converge linearly in the weight perturbation." if passed else
           "NOT as predicted."))
    summary = {"settings": {"n": n, "H": H, "T": T, "dt": dt, "beta": 1.5, "eps": epss,
                            "seed": seed, "quick": quick},
               "fits": fits, "table": table}
    result = StudyResult("gamma", summary, verdict, bool(passed))

    def plot(stage: Path) -> list[str]:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt

        fig, ax = plt.subplots(figsize=(6, 3.8))
        for fam, tab in table.items():
            ax.loglog(tab["eps"], tab["sup_dE"], "o-", label=f"{fam}: sup|E^ε − E|")
            ax.loglog(tab["eps"], tab["sup_W2"], "s--", label=f"{fam}: sup W2")
        e = np.array(epss)
        ax.loglog(e, e * table["init"]["sup_W2"][0] / e[0], "k:", lw=0.8, label="ε¹")
        ax.set(xlabel="ε", title="weight perturbation (Γ-convergence)")
        ax.legend(fontsize=8)
        fig.tight_layout()
        fig.savefig(stage / "gamma.png", dpi=120)
        plt.close(fig)
        return ["gamma.png"]

    return write_study(out, result, plot)
