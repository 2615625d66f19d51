"""Study ``edi``: the energy–dissipation identity under refinement (THEORY.md §3, §5).

Along a solution of an exact gradient flow the EDI
``E(T) − E(0) − ∫∂_tE = ∫(½|μ'|²_b̂ + ½|∂E|²) dt`` holds with equality, so the discrete
residual of a numerical solution must vanish at the scheme's order. Setting: two
different symmetric softmax heads, value-aligned (ascent), solved as the
weighted-Wasserstein gradient flow with the effective mobility ``b̂`` (``flow =
"surrogate"``, for which the EDI is exact; for the transformer flow with several heads
the residual is a defect of the model, see ``wflow particles`` with ``flow =
"transformer"``).

* particles: residual vs ``dt`` for explicit Euler (order 1) and RK4 (order 4, Simpson
  quadrature of the balance);
* PDE: residual vs mesh refinement (``h`` and ``dt ∝ h`` together) for the
  second-order finite-volume scheme;
* JKO: residual vs ``τ`` under joint refinement ``h ∝ τ`` with the entropic scheme
  (``ε = 4τ²``); on a fixed mesh the exact scheme locks below ``τ ~ h/|v|``.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np

from ..heads import Attention, Heads
from ..parallel import parallel_map
from ..particles import simulate
from ..sphere import sample_vmf_mixture
from .base import StudyResult, fit_loglog, write_study

__all__ = ["run", "model", "jko_refinement"]

ORDER_TOL = 0.4
A_HEADS = np.array([[[1.5, 0.3, 0.0], [0.3, 0.5, 0.0], [0.0, 0.0, -0.5]],
                    [[0.2, 0.0, 0.4], [0.0, 1.0, 0.0], [0.4, 0.0, 1.2]]])
DENSITY = {"type": "vmf", "means": [[1.0, 0.0, 0.2], [-0.3, 1.0, 0.0]], "kappas": [5.0, 4.0],
           "weights": [0.6, 0.4]}


def model() -> tuple[Heads, Attention]:
    """Two different value-aligned softmax heads, ``w_h = 1/2``, ``β = 1``."""
    return Heads.bilinear(A_HEADS, w=0.5), Attention("softmax", 1.0)


def _particle_run(item: tuple) -> float:
    integrator, dt, T, n, seed = item
    heads, attn = model()
    x0 = sample_vmf_mixture(n, np.array(DENSITY["means"]), np.array(DENSITY["kappas"]),
                            np.array(DENSITY["weights"]), np.random.default_rng(seed))
    res = simulate(x0, heads, attn, T=T, dt=dt, integrator=integrator, flow="surrogate",
                   head_rates=False, clusters=False)
    key = "edi" if integrator == "euler" else "chain_simpson"
    # for the surrogate flow with value-aligned heads, chain = EDI to round-off:
    # power = speed2 = slope2 pointwise (v̂ = b̂ P∇ψ); Simpson makes the 4th order visible
    return float(res.balance[key][0])


def _pde_run(item: tuple) -> dict:
    from ..mesh import load_mesh
    from ..pde import solve_pde

    mesh_name, dt, T = item
    heads, attn = model()
    mesh = load_mesh(mesh_name)
    res = solve_pde(mesh, DENSITY, heads, attn, T=T, dt=dt, order=2, flow="surrogate",
                    n_saves=2, clusters=False, progress=False)
    if res.status != "success":
        raise FloatingPointError(f"edi: PDE on {mesh_name} failed: {res.message}")
    return {"edi": float(res.balance["edi"]), "dissipation": float(res.balance["dissipation"]),
            "h": float(np.sqrt(np.mean(res.areas))), "cells": int(res.areas.size)}


def run(*, out: Path, quick: bool = False, seed: int = 0) -> StudyResult:
    """Refinement sweeps for particles, PDE (and JKO); fitted orders; summary and plot."""
    T = 0.5
    n = 80 if quick else 300
    dts_e = [0.05, 0.025, 0.0125] if quick else [0.05, 0.025, 0.0125, 0.00625]
    dts_r = [0.05, 0.025, 0.0125] if quick else [0.05, 0.025, 0.0125, 0.00625]
    meshes = (["sphere_720.msh", "sphere_2420.msh"] if quick else
              ["sphere_720.msh", "sphere_2420.msh", "sphere_9680.msh"])
    pitems = [("euler", dt, T, n, seed) for dt in dts_e] + [("rk4", dt, T, n, seed)
                                                              for dt in dts_r]
    mitems = [(m, 0.05 * np.sqrt(720 / int(m.split("_")[1].split(".")[0])), T) for m in meshes]
    res = parallel_map(_particle_run, pitems)
    res_e, res_r = res[: len(dts_e)], res[len(dts_e):]
    pde = parallel_map(_pde_run, mitems)
    fits = {"particles_euler": fit_loglog(dts_e, res_e).as_dict(),
            "particles_rk4": fit_loglog(dts_r, res_r).as_dict(),
            "pde": fit_loglog([p["h"] for p in pde], [p["edi"] for p in pde]).as_dict()}
    expect = {"particles_euler": 1.0, "particles_rk4": 4.0}
    ok = {k: abs(fits[k]["slope"] - v) < ORDER_TOL for k, v in expect.items()}
    # PDE: the residual must shrink under refinement (order >= 1 in h; 2 expected for
    # smooth solutions with the second-order scheme)
    ok["pde"] = fits["pde"]["slope"] > 1.0 - ORDER_TOL
    table = {"particles_euler": {"dt": dts_e, "edi": res_e},
             "particles_rk4": {"dt": dts_r, "edi_simpson": res_r},
             "pde": {"cells": [p["cells"] for p in pde], "h": [p["h"] for p in pde],
                     "dt": [it[1] for it in mitems], "edi": [p["edi"] for p in pde],
                     "dissipation": [p["dissipation"] for p in pde]}}
    # joint refinement h ∝ τ with the entropic scheme (ε = 4τ²): on a fixed mesh the
    # exact scheme pins mass below τ ~ h/|v| (moving one cell costs h²/2τ)
    jt = jko_refinement(quick=quick, model=model, density=DENSITY, T=0.8)
    table["jko"] = jt
    fits["jko"] = fit_loglog(jt["tau"], jt["edi"]).as_dict()
    # the entropic JKO residual shrinks under joint refinement, at order ≈ 0.6–1.2
    # (jko_refinement); required: it shrinks (order > 0.5)
    ok["jko"] = fits["jko"]["slope"] > 0.5
    jko_note = (f" JKO (entropic, ε = 4τ², joint refinement h ∝ τ: cells {jt['cells']}, "
                f"τ = {jt['tau']}): summed EDI residual "
                f"{[float(f'{e:.3g}') for e in jt['edi']]}, fitted order "
                f"{fits['jko']['slope']:.2f} (required > 0.5: it shrinks).")
    verdict = ("Fitted EDI-residual orders: " + ", ".join(
        f"{k} {fits[k]['slope']:.2f}" for k in ok if k != "jko")
        + " (expected: particles Euler 1, RK4 4, PDE ≥ 1 in h (2 for smooth data)"
        f"; tolerance {ORDER_TOL}). "
        + ("These residuals vanish at the scheme's order." if all(ok.values()) else
           "NOT as predicted for: " + ", ".join(k for k, v in ok.items() if not v) + ".")
        + jko_note)
    summary = {"settings": {"T": T, "n": n, "quick": quick, "seed": seed, "flow": "surrogate",
                            "heads": A_HEADS.tolist(), "density": DENSITY},
               "fits": fits, "ok": ok, "table": table}
    result = StudyResult("edi", summary, verdict, bool(all(ok.values())))

    def plot(stage: Path) -> list[str]:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt

        fig, ax = plt.subplots(1, 2, figsize=(10, 3.8))
        se, sr = fits["particles_euler"]["slope"], fits["particles_rk4"]["slope"]
        ax[0].loglog(dts_e, np.abs(res_e), "o-", label=f"Euler ({se:.2f})")
        ax[0].loglog(dts_r, np.abs(res_r), "s-", label=f"RK4 ({sr:.2f})")
        if "jko" in table:
            ax[0].loglog(table["jko"]["tau"], np.abs(table["jko"]["edi"]), "^-",
                         label=f"JKO τ ({fits['jko']['slope']:.2f})")
        ax[0].set(xlabel="dt / τ", ylabel="|EDI residual|", title="particles (and JKO)")
        ax[0].legend(fontsize=8)
        ax[1].loglog(table["pde"]["h"], np.abs(table["pde"]["edi"]), "o-",
                     label=f"PDE order 2 ({fits['pde']['slope']:.2f})")
        ax[1].set(xlabel="h (mean cell size)", ylabel="|EDI residual|", title="PDE")
        ax[1].legend(fontsize=8)
        fig.tight_layout()
        fig.savefig(stage / "edi.png", dpi=120)
        plt.close(fig)
        return ["edi.png"]

    return write_study(out, result, plot)


def jko_refinement(*, quick: bool, model: Any, density: Any, T: float,
                   mesh: str | None = None, ot: str | None = None) -> dict[str, list]:
    """Summed EDI residual of the JKO scheme vs ``τ`` (hook of the ``edi`` study).

    ``mesh`` given: that fixed mesh, ``τ = T/2, T/4, T/8`` (and ``T/16`` unless
    ``quick``), exact OT by default. ``mesh=None``: joint refinement ``h ∝ τ`` —
    ``(sphere_720, T/2)``, ``(sphere_2420, T/4)`` and, unless ``quick``,
    ``(sphere_5120, T/6)`` — with the entropic scheme (``ε = 4τ²``, the meshes keep
    resolving the Gibbs kernel of width ``√ε``) by default. Measured: on a fixed mesh the
    residual stops shrinking once ``τ|v| <~ h`` (locking, see the module docstring); the
    exact scheme's residual does not shrink under ``h ∝ τ`` either (it stays near 3–4 %
    of the dissipation); the entropic one does, at order ≈ 0.6–1.2.
    Returns ``{"tau", "edi", "cells", "inner_iters"}``.
    """
    from ..density import initial_density
    from ..jko import JKOOptions, solve_jko
    from ..mesh import load_mesh

    heads, attn = model()
    if mesh is not None:
        ns = [2, 4, 8] if quick else [2, 4, 8, 16]
        levels = [(mesh, n) for n in ns]
        ot = ot or "emd"
    else:
        levels = [("sphere_720.msh", 2), ("sphere_2420.msh", 4)]
        if not quick:
            levels.append(("sphere_5120.msh", 6))
        ot = ot or "sinkhorn"
    out: dict[str, list] = {"tau": [], "edi": [], "cells": [], "inner_iters": []}
    loaded: dict[str, Any] = {}
    for name, n in levels:
        if name not in loaded:
            loaded[name] = load_mesh(name)
        sm = loaded[name]
        cen, areas = sm.gather_owned(sm.centroids), sm.gather_owned(sm.areas)
        rho0 = initial_density(sm, density)
        res = solve_jko(cen, areas, rho0 * areas, heads, attn, options=JKOOptions(
            T=T, tau=T / n, ot=ot, eps_scale=4.0, verify=False))
        out["tau"].append(T / n)
        out["edi"].append(float(np.sum(res.history["edi_step"][1:])))
        out["cells"].append(int(areas.size))
        out["inner_iters"].append(int(res.stats["inner_iters_total"]))
    return out
