"""Study ``mean-field``: particles vs the transformer PDE by linear statistics (theory §5).

With ``x_i(0)`` i.i.d. from ``ρ_0`` the empirical measure ``μ^n_t`` of the particles
converges to the PDE solution ``μ_t``; a linear statistic ``⟨φ, μ^n_t⟩`` fluctuates around
``⟨φ, μ_t⟩`` at ``O(n^{-1/2})`` (propagation of chaos), against the ``(log n/n)^{1/2}``
floor of ``W_2`` between samples, so moments resolve a much smaller particle–PDE error
than a distance between samples does. The statistics are the real spherical-harmonic
moments ``μ_k`` up to degree ``L`` (:mod:`wflow.geometry.harmonics`): of the tokens
(``O(n L²)``, a sum over tokens) and of the PDE's cell masses (integrated over each flat
cell with a degree-9 triangle rule, carried to ``S²`` by the radial projection: the
measure the tokens are drawn from).

The run. The PDE solves on two mesh levels (``h`` and about ``h/2``, order 2; quick
5 120 and 20 480 cells, full 9 680 and 40 500); the fine one is the reference and
``e_k = |μ_k^{fine} − μ_k^{coarse}|/(r² − 1)`` (``r² = `` the ratio of the cell counts)
its Richardson error estimate, added in quadrature to the Monte Carlo standard error
(conservative: the test is then less likely to reject). ``R`` independent
replicates of ``n`` tokens are drawn from the fine level's ``ρ_0`` and evolved to ``T``
(RK4, ``dt = T/8``). At ``T`` the tokens are not independent, so the standard error of
the mean moments is estimated from the replicates (:mod:`wflow.geometry.moment_test`;
the i.i.d. formula and the ratio of the two are reported). At ``T`` the moments are
control-variate moments (:func:`wflow.geometry.moment_test.control_variates`): the
harmonics of each token's *initial* position up to degree ``L_cv = 8`` (80 controls, with
means under ``ρ_0`` exact from the fine level's cell masses) regress out the part of the
sampling fluctuation the flow carries from ``t = 0``: the replicate standard error
falls by the factor every run reports (``fits.cv_se_ratio``, with the explained fraction of
the per-token variance ``fits.cv_explained_median``), the power of ``cv_se_ratio^{-2}``
times the tokens at no cost; the plain test is reported beside (``tests.T_plain``). A
biased initial sampler is regressed out with them, so it is ``moments_at_0``'s to catch.
The PDE is deterministic: its solution and moments are cached in-process (keyed by every
input), so the seeds of bench/size_power.py reuse it.

Criteria (each at level :data:`ALPHA`, three together at most ``3 α`` = 0.9 % false
fails):

* ``moments_at_0``: ``max_k |t_k|`` at ``t = 0`` below the Šidák critical value of
  ``t(R − 1)`` (catches a biased sampler; exact there: the tokens are i.i.d. from the
  measure whose moments are computed);
* ``moments_at_T``: the same at ``T`` (the PDE's error ``e_k`` in the denominator);
* ``hotelling_at_T``: Hotelling's ``T²`` of the moment differences at ``T`` below its
  ``F(K, R − K)`` critical value (combines all ``K`` moments: the power against a
  velocity or ``β`` error spread over several of them).

Reported, not judged: a heat-kernel MMD of the moment differences with its
moment-matched null; the smallest detectable moment error ``t_crit (s_k² + e_k²)^{1/2}``
and the PDE velocity error it amounts to (a velocity ``×(1 + s)`` is a time change:
``δμ_k ≈ s T ∂_t μ_k(T)``); POT's sliced Wasserstein on the sphere
(``ot.sliced_wasserstein_sphere``) between tokens pooled over the replicates (1 000
quick, 4 000 full) and a sample of the PDE, beside the same between two PDE samples (its
floor; the particles' value is expected above it by about the ratio of the replicate to
the i.i.d. standard error, ``fits.se_ratio_T``: their fluctuations are amplified by the
flow), and the exact ``W_2`` (wflow.geometry.transport) on 1 000 (quick) or 2 000 (full)
tokens of the first replicate (``O(n³)``).

Float32 (``run(dtype="float32")``, ``wflow verify mean-field --dtype float32``). The
replicates run ``simulate(..., dtype="float32")``: scores and exponentials in float32, the
sums, velocity, moments and tests in float64. Beside them a float64 control runs replicate
0 from the same ``x_0``, and a fourth criterion judges the largest moment difference at T:

* ``float32_vs_float64``: ``max_k |μ_k^{32} − μ_k^{64}|`` below the tolerance derived from
  float32's ``ε₃₂`` (:func:`float32_tolerance`): each evaluation's relative error is within
  the kernel's a-priori estimate ``err_est`` (``extra["kernel"]["max_err_est"]``, about
  ``41 ε₃₂`` here: :func:`wflow.kernels.sums.err_float32`), so a token's velocity is within
  ``δv = 2 √d err_est Σ_h |w_h| ‖V_h‖₂`` (the numerator's and the normaliser's error); RK4's
  stage weights sum to one, so ``S`` steps of ``dt`` add at most ``T δv`` to a token, and the
  flow carries that to ``T`` by its Grönwall factor ``Γ`` in the mean over the tokens
  (measured on the control: the mean displacement at ``T`` of a random tangent perturbation
  of every token by ``10⁻⁶``, over ``10⁻⁶``, at least 1 for the errors of the last steps; the
  a-priori ``e^{LT}`` with ``L ≤ ‖V‖(3 + 2β‖A‖) ≈ 19`` would be ``10⁸``). A moment is a mean
  over the tokens and ``|∇Y_{lm}| ≤ G_L = (L(L + 1)(2L + 1)/4π)^{1/2}`` (the addition
  theorem), so ``|Δμ_k| ≤ τ = G_L max(1, Γ) T δv``.

``τ`` is added to the PDE's error ``e_k`` in quadrature in the moment tests at ``T`` (the
float32 replicates' allowance; at ``t = 0`` the tokens are the same). The summary says
``dtype`` and records the control's numbers (``float32``). A float64 run is today's, bit
for bit, with three criteria. The negative control ``float32-beta`` (float32 runs only,
:data:`FAULT_DTYPES`) runs the float32 replicates at ``β × 1.005``: several ``τ`` between
them and their control, below the moment error the quick tests detect (they pass); the
differences, tolerances and run times are on docs/guide/studies.md.

What a PASS rules out: :data:`MEASURED_POWER`, the smallest fault of each family caught per
mode with the seeds it was caught at (tests/test_size_power.py checks it against
``bench/results/size_power.json``), and docs/studies_power.md (the size over the seeds and
the power, generated from that file). The thresholds come from the null laws, not from
seeds: every seed is held out.
"""

from __future__ import annotations

import logging
from collections import OrderedDict
from pathlib import Path
from typing import Any

import numpy as np

from ..attention.heads import Attention, Heads
from ..geometry.harmonics import cell_moments, token_cross_sums, token_moment_sums
from ..geometry.moment_test import MomentTest, control_variates, moment_test
from ..geometry.sphere import sample_cells, sample_vmf
from ..infra.parallel import parallel_map
from ..kernels.validation import DTYPES as KERNEL_DTYPES
from ..particles import simulate
from ..status import Status
from .base import (
    Criterion,
    NegativeControls,
    StudyResult,
    check_dtype,
    save_figure,
    write_study,
)

logger = logging.getLogger(__name__)

__all__ = ["run", "FAULTS", "FAMILIES", "ALPHA", "MODES", "MEASURED_POWER", "DTYPES",
           "FAULT_DTYPES", "float32_tolerance"]

NAME = "mean-field"

#: Level of each criterion (three criteria: at most 0.9 % false fails together).
ALPHA = 0.003

#: Settings per mode: tokens per replicate ``n``, replicates ``R``, degree ``L`` of the
#: moments, degree ``L_cv`` of the control variates at t = 0 (80 controls; degree 14 explains
#: barely more), the two PDE meshes (coarse, fine), the exact-W2 cross-check's tokens (one
#: replicate) and the sliced-W2 one's (pooled over the replicates, ``⌈ssw_tokens / R⌉``
#: from each; POT's ``sliced_wasserstein_sphere`` costs time linear in the tokens at a fixed
#: number of projections, and is the most expensive part of a run beyond a few thousand
#: tokens).
MODES: dict[str, dict[str, Any]] = {
    "quick": {"n": 1000, "R": 48, "L": 3, "L_cv": 8,
              "meshes": ("sphere_5120.msh", "sphere_20480.msh"), "w2_points": 1000,
              "ssw_tokens": 1000},
    "full": {"n": 10000, "R": 80, "L": 4, "L_cv": 8,
             "meshes": ("sphere_9680.msh", "sphere_40500.msh"), "w2_points": 2000,
             "ssw_tokens": 4000},
}
#: Final time, particle RK4 steps and PDE output times (for ``∂_t μ(T)``). Eight steps:
#: the moments at T move by less than :data:`STEP_BIAS_MAX` from ``dt = T/8`` to ``T/32``
#: (tests/test_mean_field_steps.py), small against the full mode's Monte Carlo standard
#: error that every run reports (``fits.se_mc_median``).
T_FINAL = 1.0
PARTICLE_STEPS = 8
PDE_SAVES = 21
#: Bound on the particles' time-step bias of the moments at T (``dt = T/8`` against ``T/32``,
#: the same tokens), checked by tests/test_mean_field_steps.py.
STEP_BIAS_MAX = 5e-5

#: Precisions of a run (``run(dtype=...)``, ``wflow verify mean-field --dtype``): float32
#: runs the replicates' attention sums in float32 beside a float64 control (module docstring).
DTYPES = KERNEL_DTYPES
#: The tangent perturbation of every token by which the float64 control measures the flow's
#: Grönwall factor (linear: 10⁻⁷ and 10⁻⁶ give the same factor to 6 digits).
GRONWALL_PROBE = 1e-6
#: The ``float32-beta`` control's relative change of β in the float32 replicates.
FLOAT32_BETA = 0.005

#: Faults caught, measured by bench/size_power.py (docs/studies_power.md): per mode, family
#: key -> the smallest size caught at each of seeds 0 and 1 (quick: grid {0.01, 0.02,
#: 0.05}; full: grid {0.01}, so the full mode may catch smaller ones); the held-out rechecks
#: are on docs/studies_power.md.
MEASURED_POWER: dict[str, dict[str, float | None]] = {
    "quick": {"pde-velocity:+": 0.02, "pde-velocity:-": -0.02, "pde-beta:+": 0.05,
              "pde-beta:-": -0.05, "pde-stop-short:+": 0.02, "pde-stop-short:-": -0.02,
              "particles-velocity:+": 0.02, "particles-velocity:-": -0.02,
              "tokens-off:+": 0.01, "tokens-off:-": -0.02},
    "full": {"pde-velocity:+": 0.01, "pde-velocity:-": -0.01, "pde-beta:+": 0.01,
             "pde-beta:-": -0.01, "tokens-off:+": 0.01, "tokens-off:-": -0.01},
}

#: The tokens of the ``tokens-off`` family: a fraction ``|s|`` drawn from this vMF
#: (mean ``(0, ±1, 0)`` by the sign of ``s``, κ = 4) instead of ``ρ_0``.
OFF_KAPPA = 4.0

#: Projections of the sliced-W2 cross-check (memory ``ssw_tokens × SSW_PROJECTIONS``).
SSW_PROJECTIONS = 200

#: Negative controls: ``run(fault=NAME)``.
FAULTS = {
    "frozen-pde": "the PDE solution is frozen: ρ_T := ρ_0",
    "pde-value-sign": "the PDE runs with the value matrix negated (V = −A)",
    "pde-beta-1.5": "the PDE runs at β = 1.5 instead of the particles' β = 1",
    "pde-velocity:1": "the PDE runs with the value matrix doubled (velocity ×2)",
    "pde-velocity:0.02": "the PDE velocity ×1.02 (the quick mode's measured power)",
    "pde-velocity:-0.02": "the PDE velocity ×0.98 (the quick mode's measured power)",
    "pde-velocity:0.01": "the PDE velocity ×1.01 (full mode)",
    "pde-velocity:-0.01": "the PDE velocity ×0.99 (full mode)",
    "pde-beta:0.01": "the PDE at β ×1.01 (full mode)",
    "pde-beta:-0.01": "the PDE at β ×0.99 (full mode)",
    "tokens-off:0.01": "1 % of the tokens drawn from a vMF bump instead of ρ_0 (full mode)",
    "pde-stop-short:0.5": "the PDE stops at T/2 (the particles run to T)",
    "pde-no-mobility": "the PDE drops the softmax mobility 1/Z (unnormalised attention, "
                       "kind 'usa', same β) while the particles run softmax",
    "particles-no-mobility": "the particles drop the softmax mobility 1/Z (unnormalised "
                             "attention, kind 'usa', same β) while the PDE runs softmax",
    "tokens-off:0.05": "a biased initial sampler: 5 % of the tokens drawn from a vMF bump "
                       "instead of ρ_0 (quick mode)",
    "float32-beta": "the float32 replicates run at β ×1.005, their float64 control at β "
                    "(--dtype float32 only)",
}
#: Faults that need a precision (fault -> dtype): refused at any other before the run.
FAULT_DTYPES = {"float32-beta": "float32"}
#: Fault families ``run(fault="FAMILY:S")`` (sizes scanned by bench/size_power.py).
FAMILIES = {
    "pde-velocity": "the PDE runs with the value matrix ×(1 + s) (velocity scaled)",
    "pde-beta": "the PDE runs at β ×(1 + s)",
    "pde-stop-short": "the PDE stops at (1 − s)T while the particles run to T",
    "particles-velocity": "the particles run with the value matrix ×(1 + s)",
    "tokens-off": "a fraction |s| of the initial tokens drawn from a vMF (κ = 4) at "
                  "(0, sign s, 0) instead of ρ_0",
}
#: The study's faults, read (``run(fault=...)``) and reported (the verdict) in one place.
CONTROLS = NegativeControls(NAME, FAULTS, FAMILIES)


def _model() -> tuple[Heads, Attention]:
    """One softmax head ``A = V = diag(2.4, 1.2, −0.6)``, ``β = 1``."""
    return Heads.bilinear(np.diag([2.4, 1.2, -0.6])[None], w=1.0), Attention("softmax", 1.0)


#: Initial density: two bumps on a uniform floor.
RHO0 = {"type": "vmf", "means": [[0, 0, 1.0], [1.0, 0.2, 0.0], [-0.2, 0.3, 1.0]],
        "kappas": [0.0, 4.0, 6.0], "weights": [0.4, 0.35, 0.25]}

#: In-process cache of the PDE levels (deterministic): key -> level data.
_PDE_CACHE: OrderedDict[tuple, dict[str, Any]] = OrderedDict()
_CACHE_SIZE = 12


def _pde_level(spec: str, heads: Heads, attn: Attention, T: float, L: int) -> dict[str, Any]:
    """One PDE level: cell vertices, masses at 0, moments at the saves (cached)."""
    key = (spec, heads.A.tobytes(), heads.V.tobytes(), attn.kind, float(attn.beta), float(T),
           int(L))
    if key in _PDE_CACHE:
        _PDE_CACHE.move_to_end(key)
        return _PDE_CACHE[key]
    from ..geometry.density import initial_density
    from ..geometry.mesh import load_mesh
    from ..pde import solve_pde

    mesh = load_mesh(spec)
    rho0 = initial_density(mesh, RHO0)
    pde = solve_pde(rho0, heads, attn, mesh=mesh, T=T, dt=0.05, order=2, n_saves=PDE_SAVES,
                    balance=False, clusters=False, progress=False)
    if pde.status not in (Status.SUCCESS, Status.COMPLETED):  # balance off: not judged
        raise FloatingPointError(f"{NAME}: PDE failed on {spec}: {pde.message}")
    verts = mesh.gather_owned(mesh.cell_vertices.reshape(-1, 9)).reshape(-1, 3, 3)
    masses = pde.masses
    mom = np.array([cell_moments(verts, masses[i], L) for i in (0, -3, -2, -1)])
    level = {"verts": verts, "m0": masses[0], "mT": masses[-1], "m0_mom": mom[0],
             "mT_mom": mom[3], "t": np.asarray(pde.t)[[-3, -2, -1]], "tail": mom[1:],
             "cells": int(verts.shape[0]), "wall_s": float(pde.stats.get("wall_s", 0.0))
             if isinstance(pde.stats, dict) else 0.0}
    _PDE_CACHE[key] = level
    while len(_PDE_CACHE) > _CACHE_SIZE:
        _PDE_CACHE.popitem(last=False)
    return level


def _draw(verts: np.ndarray, m0: np.ndarray, n: int, rng: np.random.Generator, *,
          off: float) -> np.ndarray:
    """``n`` initial tokens from ``ρ_0`` (or, with ``off``, the ``tokens-off`` sampler)."""
    x = sample_cells(verts, m0, n, rng)
    if off:
        k = rng.random(n) < abs(off)
        mean = np.array([0.0, np.sign(off), 0.0])
        x[k] = sample_vmf(int(k.sum()), mean, OFF_KAPPA, rng)
    return x


def _replicate(item: tuple) -> dict[str, Any]:
    """One replicate: moments at 0 and T (and, for the first, the cross-check samples)."""
    (n, r, seed, T, L, L_cv, verts, m0, mT, vscale, kind, off, w2k, keep, dtype, bscale) = item
    heads, attn = _model()
    if kind != attn.kind:
        attn = Attention(kind, attn.beta)
    if vscale != 1.0:
        heads = heads.with_(V=vscale * heads.V)

    def rng(k: int) -> np.random.Generator:
        return np.random.default_rng([seed, n, r, k])

    x0 = _draw(verts, m0, n, rng(0), off=off)
    p_attn = Attention(attn.kind, attn.beta * bscale) if bscale != 1.0 else attn

    def particles(x: np.ndarray, at: Attention, dt_: str) -> tuple[np.ndarray, Any, int]:
        for steps in (PARTICLE_STEPS, 2 * PARTICLE_STEPS, 4 * PARTICLE_STEPS):
            # a faster (faulted) flow may need smaller steps to pass the chain-rule check;
            # the correct solver succeeds at the first
            # rtol = None: judged by the study's criteria, not by the solver's tolerance
            res = simulate(x, heads, at, T=T, dt=T / steps, integrator="rk4",
                           head_rates=False, clusters=False, record_every=steps, dtype=dt_,
                           rtol=None)
            if res.status == Status.SUCCESS:
                return res.x[0], res, steps
        raise FloatingPointError(f"{NAME}: particle run failed ({dt_}): {res.message}")

    xT, res, steps = particles(x0, p_attn, dtype)
    s0, q0 = token_moment_sums(x0, L, squares=True)
    sT, qT = token_moment_sums(xT, L, squares=True)
    out: dict[str, Any] = {"m0": s0 / n, "q0": q0 / n, "mT": sT / n, "qT": qT / n,
                           "cv": token_cross_sums(x0, xT, L_cv, L), "kept": xT[:keep]}
    if dtype != "float64":
        out["err_est"] = float(res.extra["kernel"]["max_err_est"])
    if r == 0:
        out.update(_cross_checks(xT, verts, mT, rng(5), w2k))
        if dtype != "float64":
            out["control"] = _float64_control(x0, xT, sT / n, heads, attn, T=T, L=L,
                                              steps=steps, rng=rng(6))
    return out


def _float64_control(x0: np.ndarray, x32: np.ndarray, m32: np.ndarray, heads: Heads,
                     attn: Attention, *, T: float, L: int, steps: int,
                     rng: np.random.Generator) -> dict[str, float]:
    """The float64 run of a float32 replicate (same ``x_0``, steps, β) and the flow's factor.

    Returns the largest moment and token differences at ``T`` from the float32 run, and the
    Grönwall factor ``Γ`` in the mean over the tokens: the mean displacement at ``T`` of a
    random tangent perturbation of every token by :data:`GRONWALL_PROBE`, over it.
    """
    def run64(x: np.ndarray) -> np.ndarray:
        # rtol = None: judged by the study's criteria, not by the solver's tolerance
        res = simulate(x, heads, attn, T=T, dt=T / steps, integrator="rk4", head_rates=False,
                       clusters=False, record_every=steps, rtol=None)
        if res.status != Status.SUCCESS:
            raise FloatingPointError(f"{NAME}: float64 control failed: {res.message}")
        return res.x[0]

    x64 = run64(x0)
    xi = rng.standard_normal(x0.shape)
    xi -= np.sum(xi * x0, axis=1)[:, None] * x0
    xi /= np.linalg.norm(xi, axis=1)[:, None]
    xp = x0 + GRONWALL_PROBE * xi
    xp /= np.linalg.norm(xp, axis=1)[:, None]
    moved = np.linalg.norm(run64(xp) - x64, axis=1)
    dx = np.linalg.norm(x32 - x64, axis=1)
    m64 = token_moment_sums(x64, L) / x0.shape[0]
    return {"max_moment_difference": float(np.max(np.abs(m32 - m64))),
            "max_token_difference": float(np.max(dx)),
            "mean_token_difference": float(np.mean(dx)),
            "gronwall": float(np.mean(moved) / GRONWALL_PROBE)}


def float32_tolerance(err_est: float, gronwall: float, heads: Heads, *, T: float,
                      L: int) -> dict[str, float]:
    """The largest moment difference a float32 run may have from its float64 control.

    ``τ = G_L max(1, Γ) T δv`` (module docstring): ``δv = 2 √d err_est Σ_h |w_h| ‖V_h‖₂``
    bounds a token's velocity error per evaluation (``err_est``: the kernel's a-priori
    relative error, ``KernelLog.max_err_est``), ``T δv`` its sum over the RK4 steps, ``Γ``
    the flow's Grönwall factor in the mean over the tokens, and
    ``G_L = (L(L + 1)(2L + 1)/4π)^{1/2}`` bounds ``|∇Y_{lm}|`` for ``l ≤ L``.

    Parameters
    ----------
    err_est : float
        The largest a-priori relative error of a float32 evaluation over the replicates.
    gronwall : float
        The flow's Grönwall factor ``Γ`` (from the float64 control's perturbed run).
    heads : Heads
        The heads (their values' norms and weights).
    T : float
        The final time.
    L : int
        The moments' degree.

    Returns
    -------
    dict
        ``tolerance`` (``τ``), ``velocity_error`` (``δv``), ``gradient_bound`` (``G_L``) and
        ``growth`` (``max(1, Γ)``).
    """
    vnorm = float(np.sum(np.abs(heads.w) * np.linalg.norm(heads.V, ord=2, axis=(1, 2))))
    dv = 2.0 * np.sqrt(heads.d) * float(err_est) * vnorm
    g_l = float(np.sqrt(L * (L + 1) * (2 * L + 1) / (4 * np.pi)))
    growth = max(1.0, float(gronwall))
    return {"tolerance": g_l * growth * T * dv, "velocity_error": dv, "gradient_bound": g_l,
            "growth": growth}


def _cross_checks(xT: np.ndarray, verts: np.ndarray, mT: np.ndarray,
                  rng: np.random.Generator, w2k: int) -> dict[str, float]:
    """Exact W2 on ``w2k`` tokens of one replicate and a PDE sample: reported, not judged."""
    from ..geometry.transport import w2_sphere

    k = min(xT.shape[0], int(w2k))
    z, z2 = sample_cells(verts, mT, k, rng), sample_cells(verts, mT, k, rng)
    w2 = w2_sphere(xT[:k], z, max_points=k + 1)
    w20 = w2_sphere(z2, z, max_points=k + 1)
    return {"w2": w2, "w2_floor": w20, "w2_points": k}


def _pooled_ssw(x: np.ndarray, verts: np.ndarray, mT: np.ndarray,
                rng: np.random.Generator) -> dict[str, float]:
    """POT's sliced W2 on the sphere: the pooled tokens vs a PDE sample, and its floor.

    The replicates are independent systems each near ``μ_T``, so their pooled tokens sample
    ``μ_T`` up to the mean-field error; pooling (``MODES[mode]["ssw_tokens"]``) spreads the
    sample over every replicate rather than one system's tokens. Reported, not judged.
    """
    import ot

    N = x.shape[0]
    z, z2 = sample_cells(verts, mT, N, rng), sample_cells(verts, mT, N, rng)
    proj = int(rng.integers(2**31 - 1))
    ssw = float(ot.sliced_wasserstein_sphere(x, z, n_projections=SSW_PROJECTIONS, p=2,
                                            seed=proj))
    ssw0 = float(ot.sliced_wasserstein_sphere(z2, z, n_projections=SSW_PROJECTIONS, p=2,
                                             seed=proj))
    return {"ssw": ssw, "ssw_floor": ssw0, "ssw_points": int(N)}


def moment_criteria(t0: MomentTest, tT: MomentTest, *, R: int, n: int,
                    T: float) -> list[Criterion]:
    """The three moment criteria of the particles against the PDE.

    ``max |t|`` of the moments at ``t = 0`` and of the control-variate moments at ``T``, and
    Hotelling's ``T²`` at ``T``; shared with the noisy-mean-field study.
    """
    return [
        Criterion("moments_at_0", t0.max_t, hi=t0.t_crit,
                  what=f"max |t| of {t0.diff.size} moments at t = 0 (R = {R}, n = {n})",
                  why=f"Šidák level {ALPHA} of t({R - 1}): the initial tokens are drawn from ρ_0"),
        Criterion("moments_at_T", tT.max_t, hi=tT.t_crit,
                  what=f"max |t| of {tT.diff.size} control-variate moments at T = {T:g}",
                  why=f"Šidák level {ALPHA} of t({R - 1}); PDE error in the denominator"),
        Criterion("hotelling_at_T", tT.hotelling, hi=tT.hotelling_crit,
                  what="Hotelling T² of the control-variate moment differences at T",
                  why=f"level {ALPHA} of F({tT.diff.size}, {R - tT.diff.size}) (scaled)"),
    ]


def _velocity_error(test: MomentTest, tail: np.ndarray, tt: np.ndarray, T: float) -> float:
    """Smallest PDE velocity error ``s`` the max-|t| test sees: ``min_k det_k/(T |∂_t μ_k|)``."""
    h1, h2 = tt[2] - tt[1], tt[1] - tt[0]
    # second-order backward difference on the (possibly uneven) last three saves
    c0 = (2 * h1 + h2) / (h1 * (h1 + h2))
    c1 = -(h1 + h2) / (h1 * h2)
    c2 = h1 / (h2 * (h1 + h2))
    dmu = (c0 * tail[2] + c1 * tail[1] + c2 * tail[0])[1:]
    with np.errstate(divide="ignore"):
        s = test.detectable / (T * np.abs(dmu))
    return float(np.min(s))


def run(*, out: Path, quick: bool = False, seed: int = 0, fault: str | None = None,
        dtype: str = "float64") -> StudyResult:
    """Particles vs PDE moments at 0 and T; judge the three tests; write summary and plot.

    ``dtype="float32"``: the replicates in float32, a float64 control of replicate 0 and
    the criterion ``float32_vs_float64`` (module docstring).
    """
    fam, size = CONTROLS.read(fault)
    f32 = check_dtype(NAME, dtype, DTYPES, fault=fault, fault_dtypes=FAULT_DTYPES) == "float32"
    mode = MODES["quick" if quick else "full"]
    n, R, L, L_cv = int(mode["n"]), int(mode["R"]), int(mode["L"]), int(mode["L_cv"])
    T = T_FINAL
    heads, attn = _model()
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
    off = float(size) if fam == "tokens-off" else 0.0
    coarse, fine = (_pde_level(s, p_heads, p_attn, T_pde, L) for s in mode["meshes"])
    ref0, refT = fine["m0_mom"], fine["mT_mom"]
    # Richardson for an order-2 scheme: e_fine ≈ |μ_fine − μ_coarse| / (r² − 1), with
    # r² = cells_fine / cells_coarse (the ratio of h²)
    rich = 1.0 / (fine["cells"] / coarse["cells"] - 1.0)
    errT = rich * np.abs(fine["mT_mom"] - coarse["mT_mom"])
    if fault == "frozen-pde":
        refT, errT = ref0, rich * np.abs(fine["m0_mom"] - coarse["m0_mom"])
    items = [(n, r, seed, T, L, L_cv, fine["verts"], fine["m0"], fine["mT"], vscale, kind, off,
              int(mode["w2_points"]), -(-int(mode["ssw_tokens"]) // R), dtype,
              1.0 + FLOAT32_BETA if fault == "float32-beta" else 1.0) for r in range(R)]
    rows = parallel_map(_replicate, items)
    if f32:
        # the float32 allowance (float32_tolerance, derived from the kernel's a-priori
        # estimate): in quadrature with the PDE's Richardson error in the tests at T
        ctl = rows[0]["control"]
        prec = {**ctl, "err_est": max(r["err_est"] for r in rows),
                "derivation": "G_L max(1, Γ) T · 2√d err_est Σ|w_h|‖V_h‖₂ "
                              "(float32_tolerance)"}
        prec.update(float32_tolerance(prec["err_est"], ctl["gronwall"], heads, T=T, L=L))
        prec["ratio"] = prec["max_moment_difference"] / prec["tolerance"]
        errT = np.hypot(errT, prec["tolerance"])
    M0 = np.array([r["m0"] for r in rows])
    MT = np.array([r["mT"] for r in rows])
    var0 = np.mean([r["q0"] for r in rows], axis=0) - M0.mean(axis=0) ** 2
    varT = np.mean([r["qT"] for r in rows], axis=0) - MT.mean(axis=0) ** 2
    # t = 0: the tokens are i.i.d. from the fine level's measure, whose moments are exact
    # (quadrature at round-off): no reference error
    t0 = moment_test(M0, ref0, n=n, alpha=ALPHA, L=L, token_var=var0)
    # at T: the control variates (the initial tokens' harmonics up to L_cv, whose means
    # under ρ_0 the fine level's initial cell masses give exactly) take out the part of the
    # sampling fluctuation the flow carries from t = 0 (geometry/moment_test.py)
    nu = cell_moments(fine["verts"], fine["m0"], L_cv)
    cv = control_variates([r["cv"] for r in rows], nu, n=n)
    tT = moment_test(cv.adjusted, refT, n=n, alpha=ALPHA, L=L, ref_error=errT,
                     token_var=cv.token_var)
    plain = moment_test(MT, refT, n=n, alpha=ALPHA, L=L, ref_error=errT, token_var=varT)
    cv_ratio = float(np.median(tT.se_mc / plain.se_mc))
    s_star = _velocity_error(tT, fine["tail"], fine["t"], T)
    cc = {**rows[0], **_pooled_ssw(np.concatenate([r["kept"] for r in rows]), fine["verts"],
                                   fine["mT"], np.random.default_rng([seed, n, R, 7]))}
    criteria = moment_criteria(t0, tT, R=R, n=n, T=T)
    if f32:
        criteria.append(Criterion(
            "float32_vs_float64", prec["max_moment_difference"], hi=float(prec["tolerance"]),
            what="max |μ_k^{32} − μ_k^{64}| at T of replicate 0 in float32 vs its float64 "
                 "control",
            why=f"float32 rounding: G_L Γ T δv (err_est {prec['err_est']:.2g} = "
                f"{prec['err_est'] / np.finfo(np.float32).eps:.0f} ε₃₂, Γ = "
                f"{prec['growth']:.2f}; float32_tolerance)"))
    mc_med = float(np.median(tT.se_mc))
    # the PDE refined enough: its error below the Monte Carlo one, moment by moment
    pde_to_mc = float(np.max(tT.pde_err / tT.se_mc))
    details = (
        f"Moments up to degree {L} of {R} replicates × {n} tokens against the PDE on "
        f"{fine['cells']} cells (order 2; error from {coarse['cells']} cells): at T max|t| = "
        f"{tT.max_t:.2f} (p = {tT.p_max_t:.3g}; null: Šidák over {tT.diff.size} t({R - 1}), "
        f"critical {tT.t_crit:.2f}), Hotelling T² = {tT.hotelling:.1f} (p = "
        f"{tT.p_hotelling:.3g}, critical {tT.hotelling_crit:.1f}); at t = 0 max|t| = "
        f"{t0.max_t:.2f} (p = {t0.p_max_t:.3g}). Control variates: the harmonics of the "
        f"initial tokens up to degree {L_cv} ({cv.controls} controls) explain a median "
        f"{100 * float(np.median(cv.explained[1:])):.0f} % of the per-token variance at T "
        f"and scale the replicate s.e. by {cv_ratio:.2f} (without them max|t| = "
        f"{plain.max_t:.2f}, T² = {plain.hotelling:.1f}). Errors at T: Monte Carlo s.e. median "
        f"{mc_med:.2e} (replicates; the i.i.d. formula gives {np.median(tT.se_iid):.2e}, ratio "
        f"{tT.se_ratio:.2f}; at t = 0 ratio {t0.se_ratio:.2f}), PDE error max "
        f"{float(np.max(tT.pde_err)):.2e} (at most {pde_to_mc:.2f} of a moment's Monte Carlo "
        f"s.e.). Smallest detectable moment error "
        f"{float(np.min(tT.detectable)):.2e}, i.e. a PDE velocity error of about "
        f"{100 * s_star:.2g} % (max-|t| test alone). Heat-kernel MMD² = {tT.mmd2:.3g} "
        f"(approximate p = {tT.p_mmd:.3g}; reported). Cross-checks (reported, not judged): "
        f"sliced W2 on the sphere (POT) of {cc['ssw_points']} tokens pooled over the "
        f"replicates vs a PDE sample {cc['ssw']:.4f} against {cc['ssw_floor']:.4f} between "
        f"two PDE samples; exact W2 on {cc['w2_points']} "
        f"tokens {cc['w2']:.4f} against {cc['w2_floor']:.4f}.")
    if f32:
        details += (
            f" Precision float32 (the replicates' attention sums; float64 sums, velocity and "
            f"tests): the float64 control of replicate 0 differs by {prec['ratio']:.2g} of "
            f"the float32 tolerance {prec['tolerance']:.2e} (max token difference "
            f"{prec['max_token_difference']:.2e}); the tolerance is in the tests' denominators"
            f" at T.")
    passed, text, entries = CONTROLS.conclude(criteria, details, fault)
    summary = {"settings": {"n": n, "replicates": R, "degree": L, "T": T,
                            "particle_dt": T / PARTICLE_STEPS,
                            "cells": [coarse["cells"], fine["cells"]],
                            "meshes": list(mode["meshes"]), "quick": quick, "seed": seed,
                            "alpha": ALPHA, "control_variate_degree": L_cv,
                            "heads": "one softmax head A = V = "
                            "diag(2.4, 1.2, −0.6), β = 1", "pde": "order 2, dt <= 0.05",
                            "rho0": RHO0},
               **entries, "dtype": dtype, **({"float32": prec} if f32 else {}),
               "fits": {"max_t_T": tT.max_t, "t_crit": tT.t_crit, "p_max_t_T": tT.p_max_t,
                        "hotelling_T": tT.hotelling, "hotelling_crit": tT.hotelling_crit,
                        "p_hotelling_T": tT.p_hotelling, "max_t_0": t0.max_t,
                        "p_max_t_0": t0.p_max_t, "se_mc_median": mc_med,
                        "se_iid_median": float(np.median(tT.se_iid)),
                        "se_ratio_T": tT.se_ratio, "se_ratio_0": t0.se_ratio,
                        "pde_error_max": float(np.max(tT.pde_err)),
                        "pde_to_mc_error_max": pde_to_mc,
                        "detectable_moment_error": float(np.min(tT.detectable)),
                        "detectable_velocity_error": s_star,
                        "cv_controls": cv.controls, "cv_se_ratio": cv_ratio,
                        "cv_explained_median": float(np.median(cv.explained[1:])),
                        "max_t_T_plain": plain.max_t, "hotelling_T_plain": plain.hotelling},
               "reported": {"mmd2_T": tT.mmd2, "p_mmd_T": tT.p_mmd, "mmd2_0": t0.mmd2,
                            "p_mmd_0": t0.p_mmd, "ssw": cc["ssw"], "ssw_floor": cc["ssw_floor"],
                            "w2": cc["w2"], "w2_floor": cc["w2_floor"],
                            "w2_points": cc["w2_points"], "ssw_points": cc["ssw_points"]},
               "tests": {"t0": t0.as_dict(), "T": tT.as_dict(), "T_plain": plain.as_dict()}}
    result = StudyResult(NAME, summary, text, passed)

    def plot(stage: Path) -> list[str]:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt

        k = np.arange(1, t0.diff.size + 1)
        fig, ax = plt.subplots(1, 2, figsize=(10.5, 3.8))
        ax[0].plot(k, t0.t, "o--", ms=3, label="t = 0")
        ax[0].plot(k, tT.t, "s-", ms=3, label=f"t = {T:g}")
        for c in (t0.t_crit, -t0.t_crit):
            ax[0].axhline(c, color="r", ls=":", lw=0.8)
        ax[0].set(xlabel="moment index k = l² + l + m", ylabel="t-score",
                  title=f"particles vs PDE moments (R = {R}, n = {n})")
        ax[0].legend(fontsize=7)
        ax[1].semilogy(k, tT.se_mc, "o-", ms=3, label="Monte Carlo s.e. (replicates)")
        ax[1].semilogy(k, tT.se_iid, "x:", ms=3, label="i.i.d. formula")
        ax[1].semilogy(k, np.maximum(tT.pde_err, 1e-18), "s--", ms=3, label="PDE error")
        ax[1].semilogy(k, np.abs(tT.diff), "k.", ms=4, label="|particles − PDE|")
        ax[1].set(xlabel="moment index", title=f"errors at T = {T:g}")
        ax[1].legend(fontsize=7)
        return save_figure(fig, stage, "mean_field.png")

    return write_study(out, result, plot)
