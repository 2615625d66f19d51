r"""Study ``free-energy``: the EDI of ``F_D = D∫ρ log ρ − E`` on the noisy PDE and JKO (§9).

For unnormalised attention (USA) with symmetric value-aligned heads the noisy PDE
``∂_t ρ + div_S(ρ v) = D Δ_S ρ`` is the Wasserstein gradient descent of
``F_D(μ) = D ∫ρ log ρ dσ − E(μ)`` and

.. math::

    F_D(T) - F_D(0) + \int_0^T \partial_t E\,dt
    = -\int_0^T\!\!\int \big|\nabla_S(D\log\rho - \psi)\big|^2\,d\mu\,dt ,

the relative Fisher information on the right. On the mesh (:mod:`wflow.pde.diffusion`,
:func:`~wflow.pde.diffusion.free_energy_terms`) the residual ``r`` of this identity is a
discretisation error: it goes to zero under joint refinement at the scheme's order.

The identity is judged for the *stated* model's ``D``, not the solver's: from the PDE's
per-step records (``steps``: ``E``, ``G2 = ∫|∇ψ|²dμ``, ``free_energy``, ``power_diffusion``,
``free_dissipation``, all at the diffusivity ``D_run`` the solver integrated) the study
recovers the entropy ``H = (F + E)/D_run``, the diffusion's energy rate per unit ``D``
and the entropy dissipation per unit ``D²``, and rebuilds ``F_D`` and the Fisher
information ``I_D = D² S + 2 D p + G2`` at the stated ``D`` (trapezoid in time, as the
solver). With ``D_run = D`` this is the solver's own ``free_edi`` to round-off (checked:
``fits.reconstruction_error``); a solver whose Laplacian is off by a factor leaves a
residual that does not converge.

The run. One USA head ``A = V = I``, ``β = 2``, ``D =`` :data:`DIFFUSION`, two vMF bumps;
the PDE (order 2, Strang splitting with Crank–Nicolson diffusion) on icospheres of
frequencies ``n`` (``20 n²`` cells) with ``dt = DT_SCALE/n`` to ``T``.

Criteria:

* ``free_edi_order``: the slope of ``log|r|`` against ``log(1/n)`` at least
  ``ORDER − ORDER_TOL`` (the scheme's order 2 with the tolerance of the ``edi`` study's
  PDE order, :data:`wflow.studies.edi.PDE_ORDER_TOL`);
* ``free_edi_relative``: ``|r| / |ΔF_D|`` on the finest level at most :data:`REL_MAX`
  (a bound on the discretisation error at that level);
* ``reconstruction``: the rebuilt residual at ``D_run = D`` equals the solver's
  ``free_edi`` to :data:`RECON_RTOL` of ``|ΔF|`` (round-off of the sums: ``10⁴ eps``).

The JKO (:mod:`wflow.jko.fv`, the energy step then the linearised entropy step, first
order) runs the same model under joint refinement ``h ∝ τ`` on the ``edi`` study's
shipped icospheres (:data:`wflow.studies.edi.JKO_LEVELS`: 720, 2 420, 9 680 cells, and
40 500 in full mode, ``τ = T/2 … T/16``). Its residual is rebuilt at the stated ``D``
from the cell masses (:func:`jko_free_edi_at`). Criteria:

* ``jko_free_edi_order``: the fitted order in ``τ`` at least ``1 −`` the ``edi`` study's
  JKO tolerance;
* ``jko_free_edi_relative``: ``|r|/|ΔF_D|`` on the finest level at most
  :data:`JKO_REL_MAX`;
* ``jko_reconstruction``: the rebuilt residual at the JKO's own ``D`` equals its
  ``balance.free_edi`` (round-off);
* ``jko_entropy_rate``: without interaction, the entropy step's decay rate of the first
  harmonic, extrapolated in ``τ``, equals ``2D`` to :data:`RATE_RTOL` on the finest level
  (:func:`jko_heat_rate`). A first-order EDI cannot see a 1 % entropy weight at these
  levels (the fault moves the residual by a fraction of its own size); this rate, second order
  in ``h`` once extrapolated in ``τ``, does.

Reported, not judged: the softmax head's defect (``free_edi_defect`` of the same run with
kind ``softmax``, over the dissipation): the plain Laplacian is not the softmax-weighted
flow of ``F_D``, a property of the model, never a discretisation error.

Negative controls: the PDE's Laplacian ``×(1 + s)`` (``laplacian:S``: the solver runs at
``D(1 + s)``, the identity is judged at ``D``; documented ``laplacian:0.01`` and
``laplacian:-0.01``); the PDE with no diffusion (``pde-noiseless``); the JKO's entropy
weight ``×(1 + s)`` (``jko-entropy:S``, documented ``jko-entropy:0.01`` and
``jko-entropy:-0.01``: the JKO at ``D(1 + s)``, judged at ``D``).
"""

from __future__ import annotations

import logging
from pathlib import Path
from typing import Any

import numpy as np

from ..attention.heads import Attention, Heads
from ..status import Status
from .base import Criterion, NegativeControls, StudyResult, fit_loglog, write_study
from .edi import JKO_LEVELS, JKO_ORDER_TOL, PDE_ORDER_TOL

logger = logging.getLogger(__name__)

__all__ = ["run", "FAULTS", "FAMILIES", "MODES", "DIFFUSION", "free_edi_at"]

NAME = "free-energy"

#: Token diffusion of the stated model; inverse temperature; final time.
DIFFUSION = 0.1
BETA = 2.0
T_FINAL = 0.25
#: ``dt = DT_SCALE / n`` (joint refinement in space and time).
DT_SCALE = 0.0375
#: The scheme's order and the accepted range of the fitted order.
ORDER = 2.0
ORDER_TOL = PDE_ORDER_TOL
#: Bound on ``|r|/|ΔF|`` at the finest level.
REL_MAX = 1e-3
#: The rebuilt residual against the solver's own (relative to ``|ΔF|``): round-off of a
#: few hundred steps' sums over the cells, ``10⁴ eps``.
RECON_RTOL = 1e4 * float(np.finfo(np.float64).eps)

#: The JKO's residual is first order (Lie splitting of the energy and entropy steps, upwind
#: fluxes): the fitted order under joint refinement is at least ``1 − JKO_ORDER_TOL`` (the
#: ``edi`` study's tolerance; the values on the correct solver: docs/studies_power.md).
JKO_ORDER = 1.0
#: Bound on the JKO's ``|r|/|ΔF_D|`` at its finest level: a first-order discretisation
#: error, about a third of this bound on 9 680 cells (quick; docs/studies_power.md).
JKO_REL_MAX = 0.03
#: Bound on the relative error of the JKO entropy step's heat-flow rate (Richardson in
#: ``τ``) against ``2D``: the finite-volume Laplacian's ``O(h²)`` error, about a tenth of
#: this bound on 9 680 cells (docs/studies_power.md); a 1 % entropy weight moves the rate
#: by 1 %, five times the bound.
RATE_RTOL = 2e-3
#: Amplitude ``a`` of the heat-rate run's initial density ``(1 + a z)/4π``.
RATE_AMPLITUDE = 0.2

#: The PDE and the identity are deterministic: the seed enters nowhere.
SEED_INDEPENDENT = True

#: Icosphere frequencies per mode.
MODES: dict[str, dict[str, Any]] = {"quick": {"freq": (4, 8, 16), "jko": JKO_LEVELS[:3]},
                                    "full": {"freq": (6, 12, 24), "jko": JKO_LEVELS}}

#: Initial density: two vMF bumps.
RHO0 = {"type": "vmf", "means": [[0, 0, 1], [1, 0, 0]], "kappas": [2.0, 3.0]}

#: Negative controls: ``run(fault=NAME)``.
FAULTS = {
    "laplacian:0.01": "the PDE's Laplacian ×1.01 (the solver at 1.01 D, the identity at D)",
    "laplacian:-0.01": "the PDE's Laplacian ×0.99 (the solver at 0.99 D, the identity at D)",
    "pde-noiseless": "the PDE without its diffusion (D_run = 0; judged at D)",
    "jko-entropy:0.01": "the JKO's entropy weight ×1.01 (the JKO at 1.01 D, judged at D)",
    "jko-entropy:-0.01": "the JKO's entropy weight ×0.99 (the JKO at 0.99 D, judged at D)",
}
#: Fault families ``run(fault="FAMILY:S")``.
FAMILIES = {"laplacian": "the PDE's Laplacian ×(1 + s) (the identity judged at D)",
            "jko-entropy": "the JKO's entropy weight ×(1 + s) (the identity judged at D)"}

#: The smallest D_run the reconstruction divides by (a noiseless run is run at this).
_D_FLOOR = 1e-9
#: The study's faults, read (``run(fault=...)``) and reported (the verdict) in one place.
CONTROLS = NegativeControls(NAME, FAULTS, FAMILIES, seed_independent=SEED_INDEPENDENT)


def free_edi_at(steps: dict[str, Any], D_run: float, D: float) -> dict[str, float]:
    """The free-energy EDI residual at the stated ``D`` from a run at ``D_run``.

    Parameters
    ----------
    steps : dict
        :attr:`wflow.pde.PDEResult.steps` of a run with ``diffusion = D_run`` (one USA
        head, value-aligned ``V = A``): ``t``, ``E``, ``G2``, ``dEdt_w``, ``free_energy``,
        ``power_diffusion``, ``free_dissipation`` per step.
    D_run, D : float
        The solver's diffusivity and the stated model's (> 0).

    Returns
    -------
    dict
        ``edi`` (``r = ΔF_D + ∫∂_tE + ∫I_D``), ``dF`` (``ΔF_D``), ``dissipation``
        (``∫I_D``), dimensionless energies.
    """
    t = np.asarray(steps["t"], float)
    E = np.asarray(steps["E"], float)
    G2 = np.asarray(steps["G2"], float)
    F_run = np.asarray(steps["free_energy"], float)
    p_run = np.asarray(steps["power_diffusion"], float)
    I_run = np.asarray(steps["free_dissipation"], float)
    H = (F_run + E) / D_run  # F = D_run H − E
    S = (I_run - 2.0 * p_run - G2) / D_run**2  # I = D_run² S + 2 p + G2
    p1 = p_run / D_run  # p = −D_run Σ T δρ δψ
    F = D * H - E
    I_D = D * D * S + 2.0 * D * p1 + G2
    dEdt = np.asarray(steps.get("dEdt_w", np.zeros_like(t)), float)
    dt = np.diff(t)
    integral = float(np.sum(0.5 * dt * (I_D[1:] + I_D[:-1])))
    work = float(np.sum(0.5 * dt * (dEdt[1:] + dEdt[:-1])))
    dF = float(F[-1] - F[0])
    return {"edi": dF + work + integral, "dF": dF, "dissipation": integral}


def _level(n: int, D_run: float, kind: str) -> dict[str, Any]:
    """One PDE run on the icosphere of frequency ``n`` at diffusivity ``D_run``."""
    from ..geometry.mesh import load_mesh
    from ..pde import PDEOptions, solve_pde

    sm = load_mesh(f"icosphere:{20 * n * n}")
    res = solve_pde(RHO0, Heads.bilinear(np.eye(3)), Attention(kind, BETA), mesh=sm,
                    options=PDEOptions(T=T_FINAL, dt=DT_SCALE / n, order=2,
                                       diffusion=D_run, n_saves=2, clusters=False,
                                       progress=False))
    if res.status != Status.SUCCESS:
        raise FloatingPointError(f"{NAME}: PDE failed at n = {n}: {res.message}")
    return {"steps": res.steps, "balance": dict(res.balance), "cells": 20 * n * n}


def _jko_run(mesh: Any, mass0: np.ndarray, heads: Heads, tau: float, D_run: float) -> Any:
    """The FV JKO with the entropy ``D_run H`` (one USA head at ``β``) on ``[0, T]``."""
    from ..jko import JKOOptions, solve_jko

    cen, areas = mesh.gather_owned(mesh.centroids), mesh.gather_owned(mesh.areas)
    res = solve_jko(mass0, heads, Attention("usa", BETA), points=cen, areas=areas, mesh=mesh,
                    options=JKOOptions(T=T_FINAL, tau=tau, diffusion=D_run, verify=False,
                                       progress=False))
    if res.status not in (Status.SUCCESS, Status.COMPLETED):  # the study judges its EDI
        raise FloatingPointError(f"{NAME}: JKO failed on {areas.size} cells: {res.message}")
    return res


def jko_free_edi_at(mesh: Any, masses: np.ndarray, heads: Heads, tau: float,
                    D: float) -> dict[str, float]:
    r"""The JKO's free-energy EDI at the stated ``D``, rebuilt from its cell masses.

    .. math::

        r = F_D(m^N) - F_D(m^0) + \sum_k \tfrac{\tau}{2}\big(I_h(m^k) + I_h(m^{k+1})\big),
        \quad F_D = D\,H - E,

    with ``H`` the cells' entropy and ``I_h`` the relative Fisher information of
    :func:`wflow.jko.fv.fv_free_fisher` (USA, value-aligned heads: ``s = 1``). With
    ``D`` the solver's own this is its ``balance.free_edi`` to round-off.

    Parameters
    ----------
    mesh : SphereMesh
        The mesh of the run.
    masses : (N + 1, M) array
        The cell masses at ``t_k = kτ`` (:attr:`wflow.jko.JKOResult.masses`).
    heads : Heads
        The run's heads.
    tau, D : float
        The step and the stated diffusivity.

    Returns
    -------
    dict
        ``edi`` (``r``), ``dF`` (``ΔF_D``), ``dissipation`` (the trapezoid of ``I_h``).
    """
    from ..jko.fv import fv_fields, fv_free_fisher
    from ..jko.steppers import as_dual

    geo = as_dual(mesh, masses.shape[1])
    attn = Attention("usa", BETA)
    F, fisher = [], []
    for m in masses:
        psi = fv_fields(geo.centres, m, heads, attn)[:, 0]
        F.append(D * geo.entropy(m) - 0.5 * float(m @ psi))
        fisher.append(fv_free_fisher(geo, m, psi, diffusion=D, sign=1))
    fi = np.asarray(fisher)
    dissipation = float(0.5 * tau * np.sum(fi[1:] + fi[:-1]))
    dF = float(F[-1] - F[0])
    return {"edi": dF + dissipation, "dF": dF, "dissipation": dissipation}


def _jko_level(name: str, n: int, D_run: float, D: float) -> dict[str, Any]:
    """One JKO run on the shipped mesh ``name`` with ``τ = T/n``, judged at ``D``."""
    from ..geometry.density import initial_density
    from ..geometry.mesh import load_mesh

    sm = load_mesh(name)
    areas = sm.gather_owned(sm.areas)
    heads = Heads.bilinear(np.eye(3))
    tau = T_FINAL / n
    res = _jko_run(sm, initial_density(sm, RHO0) * areas, heads, tau, D_run)
    row = jko_free_edi_at(sm, res.masses, heads, tau, D)
    own = float(res.balance.get("free_edi", float("nan")))
    rebuilt = row["edi"] if D_run == D else jko_free_edi_at(sm, res.masses, heads, tau,
                                                            D_run)["edi"]
    return {"cells": int(areas.size), "tau": tau, **row,
            "reconstruction_error": abs(rebuilt - own) / abs(row["dF"])}


def jko_heat_rate(name: str, D_run: float, D: float) -> dict[str, float]:
    """The JKO entropy step's decay rate of ``z`` against ``l(l+1)D = 2D`` (``l = 1``).

    No interaction (zero heads): from ``ρ₀ = (1 + a z)/4π`` the heat flow ``∂_tρ = DΔρ``
    decays the first moment ``Σ_K m_K z_K`` at the rate ``2D`` exactly (``Δz = −2z`` on
    ``S²``). The rate fitted over ``[0, T]`` at ``τ = T/4`` and ``T/8`` is extrapolated
    (Richardson, first order in ``τ``): what remains is the mesh Laplacian's ``O(h²)``.

    Returns
    -------
    dict
        ``rate`` (extrapolated), ``rel_error`` (``rate/(2D) − 1``), ``rates`` at the two
        steps, ``cells``.
    """
    from ..geometry.mesh import load_mesh

    sm = load_mesh(name)
    cen, areas = sm.gather_owned(sm.centroids), sm.gather_owned(sm.areas)
    z = cen[:, 2] / np.linalg.norm(cen, axis=1)
    m0 = areas * (1.0 + RATE_AMPLITUDE * z)
    m0 = m0 / m0.sum()
    rates = []
    for n in (4, 8):
        res = _jko_run(sm, m0, Heads.bilinear(np.zeros((3, 3))), T_FINAL / n, D_run)
        a = res.masses @ z
        rates.append(float(-np.log(a[-1] / a[0]) / T_FINAL))
    rate = 2.0 * rates[1] - rates[0]
    return {"rate": rate, "rel_error": rate / (2.0 * D) - 1.0, "rates": rates,
            "cells": int(areas.size)}


def run(*, out: Path, quick: bool = False, seed: int = 0,
        fault: str | None = None) -> StudyResult:
    """EDI residual of ``F_D`` under joint refinement; judge the order; write the summary."""
    fam, size = CONTROLS.read(fault)
    D = DIFFUSION
    D_run = D * (1.0 + size) if fam == "laplacian" else D
    if fault == "pde-noiseless":
        D_run = _D_FLOOR
    D_jko = D * (1.0 + size) if fam == "jko-entropy" else D
    mode = MODES["quick" if quick else "full"]
    freqs = mode["freq"]
    levels = [_level(n, D_run, "usa") for n in freqs]
    rows = [free_edi_at(lv["steps"], D_run, D) for lv in levels]
    r = np.array([row["edi"] for row in rows])
    dF = np.array([row["dF"] for row in rows])
    fit = fit_loglog(1.0 / np.asarray(freqs, float), r)
    # the reconstruction at D_run against the solver's own residual (finest level)
    own = levels[-1]["balance"].get("free_edi", float("nan"))
    recon = free_edi_at(levels[-1]["steps"], D_run, D_run)["edi"]
    recon_err = abs(recon - own) / abs(dF[-1])
    rel = abs(r[-1]) / abs(dF[-1])
    # the JKO: its free-energy EDI under joint refinement, and its entropy step's heat rate
    jko = [_jko_level(name, n, D_jko, D) for name, n in mode["jko"]]
    rj = np.array([row["edi"] for row in jko])
    fit_j = fit_loglog([row["tau"] for row in jko], rj)
    rel_j = abs(rj[-1]) / abs(jko[-1]["dF"])
    recon_j = max(row["reconstruction_error"] for row in jko)
    heat = jko_heat_rate(mode["jko"][-1][0], D_jko, D)
    soft = _level(freqs[-2], D, "softmax")["balance"]
    defect = soft.get("free_edi_defect", float("nan"))
    defect_rel = abs(defect) / abs(soft.get("free_dissipation_int", float("nan")))
    criteria = [
        Criterion("free_edi_order", fit.slope, lo=ORDER - ORDER_TOL,
                  what=f"fitted order of the F_D EDI residual in 1/n over n = {list(freqs)}",
                  why=f"the PDE's order {ORDER:g} (Strang, CN, second-order fluxes) with "
                      f"the edi study's tolerance {ORDER_TOL:g}"),
        Criterion("free_edi_relative", rel, hi=REL_MAX,
                  what=f"|r|/|ΔF_D| on {levels[-1]['cells']} cells",
                  why="a discretisation error below this fraction of the free-energy change "
                      "at the finest level"),
        Criterion("reconstruction", recon_err, hi=RECON_RTOL,
                  what="rebuilt residual at the solver's D against its own free_edi, over "
                       "|ΔF|", why="the same sums in another order: round-off (1e4 eps)"),
        Criterion("jko_free_edi_order", fit_j.slope, lo=JKO_ORDER - JKO_ORDER_TOL,
                  what="fitted order of the JKO's F_D EDI residual in τ under joint "
                       f"refinement over {[row['cells'] for row in jko]} cells",
                  why=f"the FV JKO with the entropy is first order; the edi study's "
                      f"tolerance {JKO_ORDER_TOL:g}"),
        Criterion("jko_free_edi_relative", rel_j, hi=JKO_REL_MAX,
                  what=f"the JKO's |r|/|ΔF_D| on {jko[-1]['cells']} cells",
                  why="a first-order discretisation error (Lie splitting, upwind fluxes)"),
        Criterion("jko_reconstruction", recon_j, hi=RECON_RTOL,
                  what="the JKO's rebuilt residual at its own D against its "
                       "balance.free_edi, over |ΔF| (worst level)",
                  why="the same sums in another order: round-off (1e4 eps)"),
        Criterion("jko_entropy_rate", abs(heat["rel_error"]), hi=RATE_RTOL,
                  what=f"|rate/(2D) − 1| of the JKO's heat flow (no interaction) on "
                       f"{heat['cells']} cells, Richardson in τ",
                  why="the l = 1 harmonic decays at l(l+1)D = 2D; the mesh Laplacian's "
                      "O(h²) error remains"),
    ]
    details = (f"One USA head A = V = I, β = {BETA:g}, D = {D:g}, T = {T_FINAL:g}; residuals "
               + ", ".join(f"{c} cells: {x:.3e} (ΔF {f:.4g})" for c, x, f in
                           zip((lv["cells"] for lv in levels), r, dF, strict=True))
               + f"; fitted order {fit.slope:.2f}. JKO: residuals "
               + ", ".join(f"{row['cells']} cells τ = {row['tau']:g}: {row['edi']:.3e}"
                           for row in jko)
               + f"; fitted order {fit_j.slope:.2f}; heat-flow rate/(2D) − 1 = "
               f"{heat['rel_error']:.2e} on {heat['cells']} cells. Softmax (reported, not "
               f"judged: a defect of the model): free_edi_defect {defect:.3e}, "
               f"{100 * defect_rel:.1f} % of the dissipation.")
    passed, text, entries = CONTROLS.conclude(criteria, details, fault)
    summary = {"settings": {"beta": BETA, "diffusion": D, "diffusion_run": D_run,
                            "diffusion_jko": D_jko,
                            "jko_levels": [list(lv) for lv in mode["jko"]],
                            "T": T_FINAL, "freq": list(freqs), "dt_scale": DT_SCALE,
                            "quick": quick, "seed": seed, "rho0": RHO0},
               **entries,
               "fits": {"order": fit.slope, "order_stderr": fit.stderr,
                        "residual_finest": float(r[-1]), "relative_finest": rel,
                        "reconstruction_error": recon_err,
                        "jko_order": fit_j.slope, "jko_order_stderr": fit_j.stderr,
                        "jko_residual_finest": float(rj[-1]), "jko_relative_finest": rel_j,
                        "jko_reconstruction_error": recon_j,
                        "jko_heat_rate": heat["rate"],
                        "jko_heat_rate_rel_error": heat["rel_error"]},
               "levels": [{"cells": lv["cells"], **row}
                          for lv, row in zip(levels, rows, strict=True)],
               "jko_levels": jko,
               "jko_heat": heat,
               "reported": {"softmax_free_edi_defect": defect,
                            "softmax_defect_over_dissipation": defect_rel}}
    return write_study(out, StudyResult(NAME, summary, text, passed))

