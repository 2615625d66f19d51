r"""Study ``phase``: growth rates of the uniform density's modes and ``K_#`` (theory §9).

One USA head ``A = V = I`` (``w = 1``) on ``S²``, inverse temperature ``β``, token diffusion
``D``. Funk–Hecke (THEORY §8, :func:`wflow.phase.funk_hecke_eigenvalues`) gives the exact
linear growth rate of a perturbation ``ε P_l(x·e)`` of ``ρ ≡ 1``,

.. math::

    \gamma_l = l(l+1)\Big(\frac{\lambda_l}{\beta} - D\Big),\qquad
    \lambda_l = \Gamma(3/2)\,(2/\beta)^{1/2}\,I_{l+1/2}(\beta),

so the uniform density is unstable iff ``D < D_# = λ_1/β``, i.e. (Mun & Rosenzweig's
convention ``K = 1/(2D)``, :func:`wflow.attention.diffusion.diffusion_of`) iff
``K > K_#(β)`` (:func:`wflow.phase.k_sharp`).

The run. The study is posed in the published convention: two couplings
``K_± = K_#(β)·(1 ± 1/4)`` (above and below the threshold), each turned into a diffusivity
by ``D = 1/(2K)``. For each, the noisy PDE (:func:`wflow.pde.solve_pde`, order 2,
``PDEOptions(diffusion=D)``) runs from ``ρ ≡ 1`` (the base) and from ``1 + ε P_l(x·e)``
(``ε = 10⁻³``, the axis ``e`` drawn from the seed; ``l = 1`` at both couplings, ``l = 3`` at
``K_+``), on two icospheres (``20 n²`` cells, ``n`` and ``2n``; ``dt = 0.6/n``: joint
refinement). The fitted rate is ``γ̂_l = log(a_l(T)/a_l(0))/T`` with ``a_l = (m − m_base)·P_l``
(the base subtracted; ``l`` odd, so the quadratic self-interaction enters at ``O(ε²)``
relative). The two levels are combined by Richardson's rule for the scheme's order 2,
``γ̂_R = (4γ̂_{2n} − γ̂_n)/3``. The transition: ``γ_1`` is affine in ``D``, so the zero of the
line through ``(D_±, γ̂_{R,1}(D_±))`` is the located ``D̂_#``, and ``K̂_# = 1/(2 D̂_#)``.

Criteria (deterministic: the seed only rotates the axis ``e`` against the mesh):

* ``growth_l1_above``, ``growth_l1_below``, ``growth_l3``: ``|γ̂_R − γ_l| / |γ_l|`` at most
  :data:`RATE_RTOL` (``10⁻³``, the requested accuracy of the fitted growth rates; the values
  of a run are in its ``fits``, their spread over seeds on docs/studies_power.md);
* ``k_sharp``: ``|K̂_# − K_#| / K_#`` at most :data:`RATE_RTOL`.

Negative controls (``FAULTS``, ``FAMILIES``): the PDE at ``β ×(1 + s)`` against the closed
forms at ``β`` (``beta:S``; documented ``beta:0.01``, ``beta:-0.01``), the ``K ↔ D``
convention off by a factor 2 (``k-convention-x2``: ``D = 1/K``; ``k-convention-half``:
``D = 1/(4K)``), the PDE's diffusion ``×(1 + s)`` (``diffusion:S``).
"""

from __future__ import annotations

import logging
import math
from pathlib import Path
from typing import Any

import numpy as np

from ..attention.diffusion import diffusion_of
from ..attention.heads import Attention, Heads
from ..geometry.sphere import normalize
from ..phase import funk_hecke_eigenvalues, k_sharp
from ..status import Status
from .base import Criterion, NegativeControls, StudyResult, write_study

logger = logging.getLogger(__name__)

__all__ = ["run", "FAULTS", "FAMILIES", "MODES", "RATE_RTOL", "BETA", "growth_rates"]

NAME = "phase"

#: Inverse temperature (above ``β*(3) ≈ 1.816``: the discontinuous regime).
BETA = 3.0
#: Couplings ``K_#·(1 ± K_SPREAD)``.
K_SPREAD = 0.25
#: Perturbation amplitude; final time.
EPS_PERT = 1e-3
T_FINAL = 0.5
#: Relative tolerance of the fitted rates and of ``K̂_#`` (the requested accuracy, ``10⁻³``).
RATE_RTOL = 1e-3

#: Icosphere frequencies ``(n, 2n)`` per mode (``20 n²`` cells; ``dt = 0.6/n``).
MODES: dict[str, dict[str, Any]] = {"quick": {"freq": (6, 12)}, "full": {"freq": (12, 24)}}

#: Negative controls: ``run(fault=NAME)``.
FAULTS = {
    "beta:0.01": "the PDE runs at β ×1.01 against the closed forms at β",
    "beta:-0.01": "the PDE runs at β ×0.99 against the closed forms at β",
    "k-convention-x2": "the K ↔ D convention off by a factor 2: D = 1/K instead of 1/(2K)",
    "k-convention-half": "the K ↔ D convention off by a factor 2: D = 1/(4K)",
    "diffusion:0.02": "the PDE's diffusion ×1.02",
}
#: Fault families ``run(fault="FAMILY:S")``.
FAMILIES = {
    "beta": "the PDE runs at β ×(1 + s) against the closed forms at β",
    "diffusion": "the PDE's token diffusion ×(1 + s) against the closed forms at D",
}

_MESHES: dict[int, Any] = {}
#: The study's faults, read (``run(fault=...)``) and reported (the verdict) in one place.
CONTROLS = NegativeControls(NAME, FAULTS, FAMILIES)


def _mesh(n: int):
    """Cached icosphere of frequency ``n`` (``20 n²`` cells)."""
    if n not in _MESHES:
        from ..geometry.mesh import load_mesh

        _MESHES[n] = load_mesh(f"icosphere:{20 * n * n}")
    return _MESHES[n]


def growth_rates(n: int, D: float, beta: float, ls: tuple[int, ...], axis: np.ndarray, *,
                 T: float = T_FINAL, eps: float = EPS_PERT) -> dict[int, float]:
    """Fitted growth rates ``γ̂_l`` of ``ε P_l(x·axis)`` on ``ρ ≡ 1`` (icosphere ``20 n²``).

    Parameters
    ----------
    n : int
        Icosphere frequency (``20 n²`` cells; ``dt = 0.6/n``).
    D, beta : float
        Token diffusion and inverse temperature of the PDE (one USA head ``A = V = I``).
    ls : tuple of int
        Odd degrees.
    axis : (3,) array
        Unit axis of the zonal perturbation.

    Returns
    -------
    dict
        ``l -> γ̂_l`` (units 1/time).
    """
    from ..pde import PDEOptions, solve_pde

    sm = _mesh(n)
    z = normalize(sm.gather_owned(sm.centroids)) @ axis
    heads, attn = Heads.bilinear(np.eye(3)), Attention("usa", float(beta))
    opts = PDEOptions(T=T, dt=0.6 / n, order=2, diffusion=float(D), n_saves=2,
                      clusters=False, balance=False, progress=False)
    base = solve_pde(np.ones_like(z), heads, attn, mesh=sm, options=opts)
    out = {}
    for ll in ls:
        P = np.polynomial.legendre.Legendre.basis(ll)(z)
        pert = solve_pde(1.0 + eps * P, heads, attn, mesh=sm, options=opts)
        ran = (Status.SUCCESS, Status.COMPLETED)  # balance off: the runs are not judged
        if base.status not in ran or pert.status not in ran:
            raise FloatingPointError(f"{NAME}: PDE failed: {base.message} {pert.message}")
        a = (pert.masses - base.masses) @ P
        out[ll] = float(math.log(a[-1] / a[0]) / T)
    return out


def run(*, out: Path, quick: bool = False, seed: int = 0,
        fault: str | None = None) -> StudyResult:
    """Fit the growth rates at ``K_#(1 ± 1/4)``, locate ``K_#``; judge; write summary."""
    fam, size = CONTROLS.read(fault)
    beta = BETA
    d = 3
    n1, n2 = MODES["quick" if quick else "full"]["freq"]
    axis = normalize(np.random.default_rng([seed, 8]).standard_normal(3)[None])[0]
    ks = k_sharp(beta, d)
    K = {"above": ks * (1 + K_SPREAD), "below": ks * (1 - K_SPREAD)}
    D = {}
    for key, k in K.items():
        if fault == "k-convention-x2":
            D[key] = 1.0 / k
        elif fault == "k-convention-half":
            D[key] = 1.0 / (4.0 * k)
        else:
            D[key] = diffusion_of(k)
    beta_run = beta * (1.0 + size) if fam == "beta" else beta
    d_scale = 1.0 + size if fam == "diffusion" else 1.0
    lam = funk_hecke_eigenvalues(beta, d, 3)
    ls = {"above": (1, 3), "below": (1,)}
    raw: dict[str, dict[str, Any]] = {}
    for key in K:
        exact_D = diffusion_of(K[key])
        coarse = growth_rates(n1, D[key] * d_scale, beta_run, ls[key], axis)
        fine = growth_rates(n2, D[key] * d_scale, beta_run, ls[key], axis)
        for ll in ls[key]:
            rich = (4.0 * fine[ll] - coarse[ll]) / 3.0
            exact = ll * (ll + 1) * (lam[ll] / beta - exact_D)
            raw[f"l{ll}_{key}"] = {"coarse": coarse[ll], "fine": fine[ll], "richardson": rich,
                                   "exact": exact, "rel_error": abs(rich - exact) / abs(exact),
                                   "observed_order": math.log2(abs(coarse[ll] - exact)
                                                               / max(abs(fine[ll] - exact),
                                                                     1e-300)),
                                   "D": exact_D, "K": K[key]}
    # the zero of the affine γ_1(D) through the two couplings: D̂_#, K̂_# = 1/(2 D̂_#)
    ga, gb = raw["l1_above"]["richardson"], raw["l1_below"]["richardson"]
    Da, Db = diffusion_of(K["above"]), diffusion_of(K["below"])
    d_sharp = Da + ga * (Db - Da) / (ga - gb)
    k_hat = 1.0 / (2.0 * d_sharp)
    k_err = abs(k_hat - ks) / ks
    criteria = [
        Criterion(f"growth_{name}", r["rel_error"], hi=RATE_RTOL,
                  what=f"relative error of the Richardson-extrapolated growth rate of P_{name[1]} "
                       f"at K = {r['K']:.4g} (exact {r['exact']:.4g})",
                  why="the requested accuracy of the fitted growth rates (THEORY §8 closed form)")
        for name, r in (("l1_above", raw["l1_above"]), ("l1_below", raw["l1_below"]),
                        ("l3", raw["l3_above"]))]
    criteria.append(Criterion("k_sharp", k_err, hi=RATE_RTOL,
                              what=f"relative error of the located threshold K̂_# = "
                                   f"{k_hat:.6g} (closed form {ks:.6g})",
                              why="K_# confirmed by fitted growth rates to the requested accuracy"))
    cells = (20 * n1 * n1, 20 * n2 * n2)
    details = (f"One USA head A = V = I, β = {beta:g}, d = 3, on {cells[0]} and {cells[1]} "
               f"cells (order 2, Richardson); perturbation axis drawn from the seed. Rates "
               + ", ".join(f"{k}: {v['richardson']:.5g} vs {v['exact']:.5g} (orders "
                           f"{v['observed_order']:.2f})" for k, v in raw.items())
               + f". K̂_# = {k_hat:.6g} against K_#(β) = {ks:.6g} (D = 1/(2K)).")
    passed, text, entries = CONTROLS.conclude(criteria, details, fault)
    summary = {"settings": {"beta": beta, "d": d, "cells": list(cells), "T": T_FINAL,
                            "eps": EPS_PERT, "K": K, "D_run": D, "quick": quick,
                            "seed": seed, "axis": axis.tolist()},
               **entries,
               "fits": {"k_sharp_measured": k_hat, "k_sharp_closed_form": ks,
                        "k_sharp_rel_error": k_err,
                        **{f"rate_{k}": v["richardson"] for k, v in raw.items()},
                        **{f"rate_{k}_rel_error": v["rel_error"] for k, v in raw.items()}},
               "rates": raw}
    return write_study(out, StudyResult(NAME, summary, text, passed))
