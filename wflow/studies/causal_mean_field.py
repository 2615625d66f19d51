r"""Study ``causal-mean-field``: causal particles vs the kinetic limit by binned moments (§10).

The decoder system (docs/theory.md §10): ``n`` tokens in array order, token ``i = 1 … n``
attends to ``j ≤ i`` with the ALiBi bias ``b(i, j) = −(λ/n)(i − j)``
(:class:`wflow.attention.mask.Causal`, :class:`~wflow.attention.mask.ALiBi` with slope
``λ/n``), one softmax head ``A = V = diag(2.4, 1.2, −0.6)``, ``β = 1`` (the model of
:mod:`wflow.studies.mean_field`), token ``i`` drawn independently from
``ρ_0(s_i, ·) = (1 − s_i) ρ_A + s_i ρ_B`` at ``s_i = (i − ½)/n`` (``ρ_A`` the ``mean-field``
study's ``RHO0``, ``ρ_B`` the bump :data:`RHO0_B`). The initial
law must depend on the position: with the same density at every position, softmax
attention normalises the cumulative measure's weight away and every slice follows the
non-causal transformer PDE whatever the bias (:mod:`wflow.kinetic.solver`), so neither the
mask nor the slope would show. With ``s = i/n`` the bias is ``−λ(s − s')`` and the tokens
near position ``s`` converge to the kinetic family ``ρ_t(s, ·)`` of
:func:`wflow.kinetic.solve_kinetic`,

.. math::

    ∂_t ρ(s, ·) + \operatorname{div}_S(ρ(s, ·) v_s) = 0, \qquad
    v_s = P_x f[μ_s^b], \qquad μ_s^b = \int_0^s e^{−λ(s − s')} ρ(s', ·)\, ds',

with the kinetic ``alibi = λ`` (the token slope ``λ/n`` times ``n``), ``λ = 2``, ``T = 1``.

The statistics. ``B`` position bins of ``n/B`` consecutive tokens each (bin ``b``: tokens
``i`` with ``s = i/n ∈ (b/B, (b+1)/B]``); per bin the mean real spherical-harmonic moments
``μ_{b,k}``, ``1 ≤ k < (L+1)²``, of its tokens
(:func:`wflow.geometry.harmonics.token_moment_sums`). The kinetic run has ``S = mB``
slices (``m = 4``), slice ``j`` centred at ``s_j = (j + ½)/S``; the prediction for bin ``b``
is the mean over its ``m`` slices of the moments of each slice's probability density
(:func:`~wflow.geometry.harmonics.cell_moments` of ``S ×`` its cell masses): the bin
average ``B ∫_{bin} μ(ρ_T(s)) ds`` to ``O(S^{-2})``. The vector over (bins × moments) is
laid out behind one mass entry, ``1 + B((L+1)² − 1) = (L' + 1)²`` numbers (``L = 2``:
``B = 3`` → ``L' = 4``, ``B = 6`` → ``L' = 6``), the layout
:func:`wflow.geometry.moment_test.moment_test` takes (its heat-kernel MMD weights then
have no meaning: not reported).

Errors of the reference, added in quadrature to the Monte Carlo standard error (as
``mean-field``): the mesh, ``e_h = |μ^{fine} − μ^{coarse}|/(r² − 1)`` (order 2, ``r²`` the
ratio of the cell counts), and the slices, ``e_S = (4/3)|μ_S − μ_{2S}|`` on the coarse
mesh (bin means at ``S`` and ``2S`` slices; order 2 in ``1/S``: ``μ_S = μ + C/S²``,
``μ_{2S} = μ + C/(4S²)``).

The particles: ``R`` replicates of ``n`` tokens, RK4 with ``dt = T/8``
(:func:`wflow.particles.simulate`). Control variates (as ``mean-field``,
:func:`wflow.geometry.moment_test.control_variates`): the harmonics of each token's initial
position up to degree ``L_cv = 6``, one block of ``(L_cv + 1)² − 1 = 48`` controls per bin
(``Z_i^{(b)} = B·1[i ∈ b] Y_j(x_i(0))``, ``_blocked``); their means are exact: the bin
means of the initial slices' cell moments (``ρ_0`` is linear in ``s``).

Finite ``n``: token ``i`` feels ``i`` tokens, its own among them; the first tokens differ
from the limit at ``O(1/i)``, ``O(B log(n/B)/n)`` averaged over bin 0 (the size over the
seeds, bench/results/size_power_causal.json, checks that this stays below the test's
resolution). A mask shifted by one position changes exactly that self weight, so the
control ``mask-shifted`` (the particles with ``Causal(strict=True)``, ``j < i``) is an
``O(log n / n)`` effect concentrated in bin 0.

Criteria (each at level :data:`~wflow.studies.mean_field.ALPHA`,
``mean_field.moment_criteria``): ``moments_at_0`` and ``moments_at_T``,
``max |t|`` over all (bin, moment) pairs below the Šidák critical value of ``t(R − 1)``;
``hotelling_at_T``, Hotelling's ``T²`` against its ``F(K, R − K)`` critical value.

Negative controls (``FAULTS``, ``FAMILIES``): the kinetic velocity ``×(1 + s)``
(``pde-velocity:S``, the value matrix scaled), the kinetic ALiBi slope ``λ(1 + s)``
(``bias-slope:S``) and ``mask-shifted``. The sizes caught are recorded in
bench/results/size_power_causal.json (written by bench/size_power.py).
"""

from __future__ import annotations

import logging
from collections import OrderedDict
from pathlib import Path
from typing import Any

import numpy as np

from ..attention.heads import Attention, Heads
from ..attention.mask import ALiBi, Causal
from ..geometry.harmonics import cell_moments, token_cross_sums, token_moment_sums
from ..geometry.moment_test import control_variates, moment_test
from ..geometry.sphere import sample_cells
from ..infra.parallel import parallel_map
from ..kinetic.binned import bin_means as _bins
from ..kinetic.binned import blocked_cross_sums as _blocked
from ..kinetic.binned import flat as _flat
from ..kinetic.binned import token_var as _token_var
from ..particles import simulate
from ..status import Status
from .base import NegativeControls, StudyResult, write_study
from .mean_field import ALPHA, RHO0, _model, moment_criteria

logger = logging.getLogger(__name__)

__all__ = ["run", "FAULTS", "FAMILIES", "MODES", "LAMBDA", "RHO0_B"]

NAME = "causal-mean-field"

#: ALiBi slope of the limit (token slope ``λ/n``).
LAMBDA = 2.0
#: Final time, particle RK4 steps, kinetic step bound.
T_FINAL = 1.0
PARTICLE_STEPS = 8
PDE_DT = 0.05

#: Settings per mode: tokens ``n`` (a multiple of ``B``), replicates ``R``, bins ``B``,
#: kinetic slices ``S`` (a multiple of ``B``), moment degree ``L``, control-variate degree
#: ``L_cv``, the kinetic meshes (coarse, fine). ``1 + B((L+1)² − 1)`` must be a square
#: (the moment layout).
MODES: dict[str, dict[str, Any]] = {
    "quick": {"n": 1200, "R": 64, "B": 3, "S": 12, "L": 2, "L_cv": 6,
              "meshes": ("icosphere:1280", "icosphere:5120")},
    "full": {"n": 4800, "R": 96, "B": 6, "S": 24, "L": 2, "L_cv": 6,
             "meshes": ("icosphere:1280", "icosphere:5120")},
}

#: Negative controls: ``run(fault=NAME)``.
FAULTS = {
    "pde-velocity:0.02": "the kinetic velocity ×1.02 (quick mode)",
    "pde-velocity:-0.02": "the kinetic velocity ×0.98 (quick mode)",
    "pde-velocity:0.01": "the kinetic velocity ×1.01 (full mode)",
    "pde-velocity:-0.01": "the kinetic velocity ×0.99 (full mode)",
    "mask-shifted": "the particles with the mask shifted by one position: j < i instead of "
                    "j ≤ i (Causal(strict=True))",
    "bias-slope:0.5": "the kinetic ALiBi slope λ ×1.5",
}
#: Fault families ``run(fault="FAMILY:S")``.
FAMILIES = {
    "pde-velocity": "the kinetic solver's value matrix ×(1 + s) (velocity scaled)",
    "bias-slope": "the kinetic ALiBi slope λ ×(1 + s) (the particles keep λ/n)",
}

#: The second initial density: ``ρ_0(s, ·) = (1 − s) ρ_A + s ρ_B`` with ``ρ_A`` the
#: ``mean-field`` study's ``RHO0`` and ``ρ_B`` this vMF bump.
RHO0_B = {"type": "vmf", "means": [[0.0, -1.0, 0.3]], "kappas": [5.0], "weights": [1.0]}

#: In-process cache of the kinetic levels (deterministic): key -> level data.
_PDE_CACHE: OrderedDict[tuple, dict[str, Any]] = OrderedDict()
_CACHE_SIZE = 12
#: The study's faults, read (``run(fault=...)``) and reported (the verdict) in one place.
CONTROLS = NegativeControls(NAME, FAULTS, FAMILIES)


def _kinetic_level(spec: str, S: int, heads: Heads, lam: float, quadrature: str, L: int
                   ) -> dict[str, Any]:
    """One kinetic level: cell vertices, initial masses, slice moments at ``T`` (cached).

    ``mom`` is ``(S, (L+1)²)``: the moments of each slice's probability density at ``T``.
    """
    key = (spec, int(S), heads.V.tobytes(), float(lam), quadrature, int(L))
    if key in _PDE_CACHE:
        _PDE_CACHE.move_to_end(key)
        return _PDE_CACHE[key]
    from ..geometry.density import initial_density
    from ..geometry.mesh import load_mesh
    from ..kinetic import KineticOptions, solve_kinetic
    from ..kinetic.slices import slice_centres
    from ..pde import PDEOptions

    _, attn = _model()
    mesh = load_mesh(spec)
    rA, rB = initial_density(mesh, RHO0), initial_density(mesh, RHO0_B)
    rho0 = np.array([(1.0 - s) * rA + s * rB for s in slice_centres(S)])
    opts = KineticOptions(S=S, alibi=lam, quadrature=quadrature,
                          pde=PDEOptions(T=T_FINAL, dt=PDE_DT, order=2, n_saves=2,
                                         balance=False, clusters=False, progress=False))
    res = solve_kinetic(rho0, heads, attn, mesh=mesh, options=opts)
    # completed: fixed steps (no pde.rtol), the time error not estimated; the study's
    # reference error is the Richardson estimate in h and 1/S at this step
    if res.status not in (Status.SUCCESS, Status.COMPLETED):
        raise FloatingPointError(f"{NAME}: kinetic run failed on {spec}: {res.message}")
    verts = mesh.gather_owned(mesh.cell_vertices.reshape(-1, 9)).reshape(-1, 3, 3)
    prob = res.masses * S  # (n_t, S, M): each slice a probability
    level = {"verts": verts, "mA": rA * res.areas, "mB": rB * res.areas, "m0": prob[0],
             "mom": np.array([cell_moments(verts, prob[-1, k], L) for k in range(S)]),
             "cells": int(verts.shape[0]), "wall_s": float(res.wall_time)}
    _PDE_CACHE[key] = level
    while len(_PDE_CACHE) > _CACHE_SIZE:
        _PDE_CACHE.popitem(last=False)
    return level


def _replicate(item: tuple) -> dict[str, Any]:
    """One replicate of ``n`` causal tokens: per-bin moments at 0 and T, the control sums."""
    n, r, seed, B, L, L_cv, verts, mA, mB, slope, strict = item
    heads, attn = _model()
    attn = Attention(attn.kind, attn.beta, mask=Causal(strict=strict), bias=ALiBi(slope))
    rng = np.random.default_rng([seed, n, r, 21])
    x0 = sample_cells(verts, mA, n, rng)
    fromB = rng.random(n) < (np.arange(n) + 0.5) / n  # ρ_0(s_i) = (1 − s_i) ρ_A + s_i ρ_B
    x0[fromB] = sample_cells(verts, mB, int(fromB.sum()), rng)
    # rtol = None: judged by the study's criteria, not by the solver's tolerance
    res = simulate(x0, heads, attn, T=T_FINAL, dt=T_FINAL / PARTICLE_STEPS, integrator="rk4",
                   head_rates=False, clusters=False, record_every=PARTICLE_STEPS, rtol=None)
    if res.status not in (Status.SUCCESS, Status.COMPLETED):  # a mask: no check judged
        raise FloatingPointError(f"{NAME}: particle run failed: {res.message}")
    xT = res.x[0]
    nb = n // B
    m0b, q0b, mTb, qTb, cross = [], [], [], [], []
    for b in range(B):
        sl = slice(b * nb, (b + 1) * nb)
        s0, q0 = token_moment_sums(x0[sl], L, squares=True)
        sT, qT = token_moment_sums(xT[sl], L, squares=True)
        m0b.append(s0 / nb)
        q0b.append(q0 / nb)
        mTb.append(sT / nb)
        qTb.append(qT / nb)
        cross.append(token_cross_sums(x0[sl], xT[sl], L_cv, L))
    return {"m0": np.array(m0b), "q0": np.array(q0b), "mT": np.array(mTb),
            "qT": np.array(qTb), "cv": _blocked(cross, n)}


def run(*, out: Path, quick: bool = False, seed: int = 0,
        fault: str | None = None) -> StudyResult:
    """Causal particles vs the kinetic limit: binned moments at 0 and T; judge; write."""
    fam, size = CONTROLS.read(fault)
    mode = MODES["quick" if quick else "full"]
    n, R, B, S, L, L_cv = (int(mode[k]) for k in ("n", "R", "B", "S", "L", "L_cv"))
    heads, _ = _model()
    k_heads = heads.with_(V=(1.0 + size) * heads.V) if fam == "pde-velocity" else heads
    lam_k = LAMBDA * (1.0 + size) if fam == "bias-slope" else LAMBDA
    quad = "midpoint"
    strict = fault == "mask-shifted"
    coarse, fine = (_kinetic_level(m, S, k_heads, lam_k, quad, L) for m in mode["meshes"])
    half = _kinetic_level(mode["meshes"][0], 2 * S, k_heads, lam_k, quad, L)
    rich_h = 1.0 / (fine["cells"] / coarse["cells"] - 1.0)
    e_h = rich_h * np.abs(_bins(fine["mom"], B) - _bins(coarse["mom"], B))
    e_S = (4.0 / 3.0) * np.abs(_bins(coarse["mom"], B) - _bins(half["mom"], B))
    errT = np.sqrt(e_h**2 + e_S**2)
    refT = _bins(fine["mom"], B)
    ref0 = _bins(np.array([cell_moments(fine["verts"], m, L) for m in fine["m0"]]), B)
    Lf = int(round(np.sqrt(ref0.size))) - 1
    items = [(n, r, seed, B, L, L_cv, fine["verts"], fine["mA"], fine["mB"], LAMBDA / n, strict)
             for r in range(R)]
    rows = parallel_map(_replicate, items)
    M0 = np.array([_flat(r["m0"]) for r in rows])
    MT = np.array([_flat(r["mT"]) for r in rows])
    var0 = _token_var(np.array([r["m0"] for r in rows]), np.array([r["q0"] for r in rows]), B)
    varT = _token_var(np.array([r["mT"] for r in rows]), np.array([r["qT"] for r in rows]), B)
    t0 = moment_test(M0, ref0, n=n, alpha=ALPHA, L=Lf, token_var=var0)
    nu0 = np.array([cell_moments(fine["verts"], m, L_cv) for m in fine["m0"]])
    nu = _bins(nu0, B)[1:]
    cv = control_variates([r["cv"] for r in rows], nu, n=n)
    tT = moment_test(cv.adjusted, refT, n=n, alpha=ALPHA, L=Lf, ref_error=errT,
                     token_var=cv.token_var)
    plain = moment_test(MT, refT, n=n, alpha=ALPHA, L=Lf, ref_error=errT, token_var=varT)
    cv_ratio = float(np.median(tT.se_mc / plain.se_mc))
    criteria = moment_criteria(t0, tT, R=R, n=n, T=T_FINAL)
    mc_med = float(np.median(tT.se_mc))
    K1 = (L + 1) ** 2 - 1
    worst = int(np.argmax(np.abs(tT.t)))
    details = " ".join((
        f"{B} position bins × {K1} moments (degree ≤ {L}) of {R} replicates × {n} causal",
        f"tokens (ALiBi slope λ/n, λ = {LAMBDA:g}) against the kinetic limit with {S} slices",
        f"on {fine['cells']} cells (error from {coarse['cells']} cells and {2 * S} slices):",
        f"at T max|t| = {tT.max_t:.2f} (bin {worst // K1}; critical {tT.t_crit:.2f}),",
        f"Hotelling T² = {tT.hotelling:.1f} (critical {tT.hotelling_crit:.1f});",
        f"at t = 0 max|t| = {t0.max_t:.2f}. Control variates ({cv.controls}) scale the",
        f"replicate s.e. by {cv_ratio:.2f} (without them max|t| = {plain.max_t:.2f},",
        f"T² = {plain.hotelling:.1f}). Monte Carlo s.e. median {mc_med:.2e}; reference",
        f"error max {float(np.max(errT)):.2e} (mesh {float(np.max(e_h)):.2e}, slices",
        f"{float(np.max(e_S)):.2e})."))
    passed, text, entries = CONTROLS.conclude(criteria, details, fault)
    summary = {"settings": {"n": n, "replicates": R, "bins": B, "slices": S, "degree": L,
                            "T": T_FINAL, "particle_dt": T_FINAL / PARTICLE_STEPS,
                            "alibi_lambda": LAMBDA, "token_slope": LAMBDA / n,
                            "cells": [coarse["cells"], fine["cells"]],
                            "meshes": list(mode["meshes"]), "quick": quick, "seed": seed,
                            "alpha": ALPHA, "control_variate_degree": L_cv,
                            "heads": "one softmax head A = V = diag(2.4, 1.2, −0.6), β = 1, "
                                     "causal mask j ≤ i", "rho0": RHO0},
               **entries,
               "fits": {"max_t_T": tT.max_t, "t_crit": tT.t_crit, "p_max_t_T": tT.p_max_t,
                        "hotelling_T": tT.hotelling, "hotelling_crit": tT.hotelling_crit,
                        "p_hotelling_T": tT.p_hotelling, "max_t_0": t0.max_t,
                        "p_max_t_0": t0.p_max_t, "se_mc_median": mc_med,
                        "cv_controls": cv.controls, "cv_se_ratio": cv_ratio,
                        "ref_error_max": float(np.max(errT)),
                        "mesh_error_max": float(np.max(e_h)),
                        "slice_error_max": float(np.max(e_S)),
                        "t_per_bin_T": np.abs(tT.t).reshape(B, K1).max(axis=1).tolist(),
                        "max_t_T_plain": plain.max_t, "hotelling_T_plain": plain.hotelling},
               "tests": {"t0": t0.as_dict(), "T": tT.as_dict(), "T_plain": plain.as_dict()}}
    return write_study(out, StudyResult(NAME, summary, text, passed))
