r"""The causal main job: ``wflow run`` of a scenario with ``[attention] mask`` (THEORY §9).

A decoder's tokens are not exchangeable: the causal system is not a gradient flow (no
energy identity, no JKO), so the main job of a masked scenario runs two phases and
compares them, and the JKO and the EDI are recorded as not applicable
(:data:`NOT_GRADIENT_FLOW`; ``[run] jko = true`` given with a mask is refused, naming the
key):

1. ``kinetic`` — the mean-field limit :func:`wflow.kinetic.solve_kinetic` of the scenario,
   built as ``wflow kinetic`` builds it (:mod:`wflow.apps.jobs.kinetic`: ``[kinetic]`` the
   slices, ``[pde]`` the mesh and finite volumes, ``[density]`` the initial density of
   every position, the limit slope ``λ`` from ``[kinetic] alibi`` or ``[attention] bias``);
2. ``particles`` — ``n = [run] n_particles`` tokens in array order under the scenario's
   attention (mask and bias), token ``i`` (0-based) drawn from the kinetic initial slice
   that holds its position ``(i + ½)/n``, evolved by :func:`wflow.particles.simulate`
   and recorded at the kinetic output times;
3. ``compare`` — the moment test of :mod:`wflow.kinetic.binned` (the one definition the
   ``causal-mean-field`` study uses): ``B`` position bins (:func:`bins_of`) × the real
   spherical harmonics of degree ``1 ≤ l ≤`` :data:`DEGREE`, the mean over
   :data:`REPLICATES` independent particle systems (the main run and ``R − 1`` more, seeds
   ``[seed, 4242, n, r]``) against the bins' kinetic moments, at ``t = 0`` and at ``T``
   (:func:`wflow.geometry.moment_test.moment_test`: ``max_k |t_k|`` against its Šidák
   critical value of ``t(R − 1)`` at level :data:`~wflow.apps.main.moments.ALPHA`). At
   ``T`` on control-variate moments (:func:`wflow.geometry.moment_test.control_variates`):
   the harmonics of each token's initial position up to :data:`CONTROL_DEGREE`, one block
   per bin, with exact means (the bins' initial kinetic moments), regress the initial
   sample's fluctuation out, so the test at ``T`` judges the dynamics (the test at
   ``t = 0`` the draw); the plain test is reported. The kinetic reference's error, added
   in quadrature to the Monte Carlo standard error, is the Richardson estimate of the mesh
   ``e_h = |μ^h − μ^{coarse}|/(r² − 1)`` (an icosphere of about half the frequency,
   :func:`~wflow.apps.main.moments.coarse_cells`; ``r²`` the ratio of the cell counts) and
   of the slices ``e_S = (4/3)|μ_S − μ_{2S}|`` (order 2 in ``1/S``, on the coarse mesh).

Operating characteristics, measured on the shipped example (``n = 600`` tokens, ``R = 16``,
1 280 cells, ``S = 6``, ``B = 6``, control variates ×0.15 on the s.e.): no false fail in 27
seeds (1–27; ``max|t|`` at ``T`` 1.7–3.8, at ``t = 0`` 2.0–4.1, critical 4.86). Negative
controls (seed 1; the kinetic solve's ALiBi slope ``λ`` scaled, the particles keeping
theirs): ``λ × 0`` → ``max|t|`` 60.6, ``× 0.75`` → 9.2, ``× 0.8`` → 7.4, ``× 1.5`` → 8.1
caught; ``× 0.9`` (4.25), ``× 1.1`` (1.65) and ``× 1.25`` (4.17) not caught: the
reference's error (mesh and slices, ``1.8e-3``) sets the resolution.

Under ``mpirun -n P wflow run`` (:mod:`wflow.apps.main.ranks`) the kinetic solves run on
meshes distributed over the ranks and every particle system with its tokens split over
them (:func:`wflow.particles.simulate` with ``comm``); every rank holds the gathered
results and computes the same comparison, equal to the serial run's to round-off; rank 0
writes.

The status is ``success`` only when both phases succeed, both moment tests pass and every
number of the comparison is finite; else ``inaccurate`` with the failed check named. The
particle run's token slope must be the limit's: ``slope · n = λ`` (else the scenario is
refused naming ``run.n_particles``), so that the tokens and the slices are one model.

Finite ``n``: token ``i`` feels ``i`` tokens, its own among them; the first tokens differ
from the limit at ``O(1/i)``, ``O(B log(n/B)/n)`` averaged over bin 0 — below the test's
resolution at the shipped example's ``n`` (``wflow/data/causal_run.toml``). With the same
initial density at every position, softmax attention normalises the cumulative measure's
weight away (every slice follows the exchangeable PDE, whatever the bias); the
unnormalised kinds (``usa``) feel the mask and the bias even so, which is why the shipped
example uses one.
"""

from __future__ import annotations

import logging
import math
import time
from dataclasses import replace
from pathlib import Path
from typing import Any

import numpy as np

from ...infra.schema import ScenarioError
from ...kinetic.binned import (
    bin_means,
    binned_cross_sums,
    binned_token_moments,
    flat,
    layout_degree,
    slice_moments,
    token_var,
)
from ...status import Status, Verdict, worst_status
from .checkpoint import _phase, _Pieces, _session_record
from .compare import _piece
from .moments import ALPHA, coarse_cells
from .options import MainJobResult
from .summary import phases_status

__all__ = ["REPLICATES", "DEGREE", "CONTROL_DEGREE", "NOT_GRADIENT_FLOW", "bins_of", "check_causal",
           "run_causal_job"]

logger = logging.getLogger(__name__)

#: Independent causal particle systems of the moment test (the main run is the first).
REPLICATES = 16
#: Largest harmonic degree compared per position bin (``(L+1)² − 1 = 8`` moments a bin).
DEGREE = 2
#: Degree ``L_c`` of the control variates of the test at ``T``: the harmonics of each
#: token's initial position, ``(L_c+1)² − 1 = 24`` controls a bin.
CONTROL_DEGREE = 4
#: Why the JKO and the EDI are not computed for a masked scenario.
NOT_GRADIENT_FLOW = ("the causal system is not a gradient flow (token i attends to j ≤ i "
                     "only: the tokens are not exchangeable, so there is no energy identity "
                     "and no JKO scheme)")


def bins_of(S: int, L: int = DEGREE) -> int:
    """Position bins of ``S`` slices: the largest ``B`` dividing ``S`` with a square layout.

    ``1 + B((L+1)² − 1)`` must be a square (:func:`wflow.kinetic.binned.layout_degree`;
    ``L = 2``: ``B`` a triangular number ``1, 3, 6, 10, …``), so each bin averages ``S/B``
    whole slices. ``S = 4``: ``B = 1``; ``S = 6``: ``B = 6``; ``S = 12``: ``B = 6``.
    """
    for B in range(int(S), 0, -1):
        if S % B == 0:
            try:
                layout_degree(B, L)
            except ValueError:
                continue
            return B
    return 1  # B = 1 is always a square layout: 1 + (L+1)² − 1


def check_causal(sc: Any, ropts: Any, *, progress: bool | None = None) -> tuple[Any, int]:
    """Validate a masked scenario for the main job: ``([kinetic] table, bins B)``.

    Raises
    ------
    ScenarioError
        ``run.jko = true`` given (:data:`NOT_GRADIENT_FLOW`); token diffusion, a ``[pde]``
        key with no meaning in the causal system, a non-ALiBi bias or inconsistent ``λ``
        (as ``wflow kinetic``: :func:`wflow.apps.jobs.kinetic.limit_alibi`); a particle
        slope that is not the limit's (``slope · n ≠ λ``, naming ``run.n_particles``); fewer
        tokens than ``B`` bins can hold.
    """
    from ...attention.mask import ALiBi
    from ..jobs.kinetic import _table, limit_alibi

    if (sc.raw.get("run") or {}).get("jko", False):
        raise ScenarioError(f"run.jko: the JKO phase cannot run with attention.mask = "
                            f"{sc.attention.get('mask')!r}: {NOT_GRADIENT_FLOW}; remove "
                            "run.jko (the main job then compares the causal particles with "
                            "the kinetic limit)")
    if sc.d != 3:
        raise ScenarioError("attention.d: the main job runs on S² meshes, d must be 3")
    table = _table(sc, {"progress": progress})
    lam, source = limit_alibi(sc, table)
    bias = sc.attention_obj().bias
    slope = bias.slope if isinstance(bias, ALiBi) else 0.0
    n = int(ropts.n_particles)
    if not math.isclose(slope * n, lam, rel_tol=1e-12, abs_tol=0.0):
        key = "run.n_particles" if slope else "kinetic.alibi"
        raise ScenarioError(
            f"{key}: the particles' token slope {slope:g} × run.n_particles = {n} gives "
            f"λ = {slope * n:g}, but the kinetic limit has λ = {lam:g} ({source}); the tokens "
            "and the slices must be one model: set run.n_particles to the n of the bias "
            "(attention.bias n, or tokens.n for a slope)")
    B = bins_of(int(table.S))
    if n < B * 10 or n % B:
        raise ScenarioError(f"run.n_particles: {n} tokens for {B} position bins (S = "
                            f"{table.S} slices); give a multiple of {B}, at least {10 * B}")
    return table, B


def _cells_of(mesh: Any) -> np.ndarray:
    return mesh.gather_owned(mesh.cell_vertices.reshape(-1, 9)).reshape(-1, 3, 3)


def _tokens(p: dict, m0: np.ndarray, n: int, rng: np.random.Generator) -> np.ndarray:
    """``n`` tokens in array order: token ``i`` from the initial slice holding ``(i + ½)/n``.

    ``m0``: the slices' initial cell masses ``(S, M)``.
    """
    from ...geometry.density import sample_particles

    S = m0.shape[0]
    k = np.floor((np.arange(n) + 0.5) / n * S).astype(int)
    x = np.empty((n, 3))
    for j in range(S):
        idx = np.flatnonzero(k == j)
        if idx.size:
            x[idx] = sample_particles(p["mesh"], S * m0[j], idx.size, rng)
    return x


def _particles(sc: Any, p: dict, kin: Any, ropts: Any, *, r: int,
               progress: bool | None, comm: Any = None) -> dict:
    """Causal particle system ``r`` (``0``: the main run, with its trajectory).

    ``comm``: the tokens split over its ranks (every rank draws all ``n``, the same).
    """
    from ...particles import simulate

    n = int(ropts.n_particles)
    rng = np.random.default_rng([sc.seed, 4242] if r == 0 else [sc.seed, 4242, n, r])
    x0 = _tokens(p, kin.masses[0], n, rng)
    T = float(kin.options.pde.T)
    every = int(ropts.particle_steps_per_save)
    steps = (len(kin.t) - 1) * every
    # rtol = None: judged by the main job's verdict table, not by the solver's tolerance
    res = simulate(x0, p["schedule"], sc.attention_obj(), T=T, dt=T / steps,
                   integrator=ropts.particle_integrator, record_every=every,
                   save_trajectory=r == 0, head_rates=False, seed=sc.seed,
                   progress=progress if r == 0 else False, comm=comm, rtol=None)
    if res.status == Status.FAILED:
        raise FloatingPointError(f"particle phase failed: {res.message}")
    return {"res": res, "x0": x0}


def _compare(sc: Any, p: dict, table: Any, kin: Any, parts: dict, ropts: Any, B: int, *,
             store: Any, comm: Any = None) -> dict[str, Any]:
    """The moment test of the particles against the kinetic slices (module docstring)."""
    from ...geometry.mesh import load_mesh
    from ...geometry.moment_test import control_variates, moment_test
    from ..jobs.kinetic import _solve

    L, R, n = DEGREE, REPLICATES, int(ropts.n_particles)
    verts = _cells_of(p["mesh"])
    coarse = load_mesh(f"icosphere:{coarse_cells(verts.shape[0])}")
    vc = _cells_of(coarse)

    def solve(mesh, S: int):
        res = _solve({**p, "mesh": mesh}, replace(table, S=S), None)
        # completed: fixed steps without pde.rtol (no time-error estimate), as the phase
        if res.status not in (Status.SUCCESS, Status.COMPLETED):
            raise FloatingPointError(f"compare: the kinetic reference ({S} slices on "
                                     f"{mesh.num_global} cells) {res.status}: {res.message}")
        return res.masses[-1]

    mc = _piece(store, "causal_kinetic_coarse", lambda: solve(coarse, table.S))
    mh = _piece(store, "causal_kinetic_2S", lambda: solve(coarse, 2 * table.S))
    refT = bin_means(slice_moments(verts, kin.masses[-1], L), B)
    ref0 = bin_means(slice_moments(verts, kin.masses[0], L), B)
    ref_c = bin_means(slice_moments(vc, mc, L), B)
    e_h = np.abs(refT - ref_c) / max(verts.shape[0] / vc.shape[0] - 1.0, 1e-300)
    e_S = (4.0 / 3.0) * np.abs(ref_c - bin_means(slice_moments(vc, mh, L), B))
    err = np.sqrt(e_h**2 + e_S**2)

    def replicate(r: int) -> dict[str, np.ndarray]:
        def one() -> dict[str, np.ndarray]:
            run = parts if r == 0 else _particles(sc, p, kin, ropts, r=r, progress=False,
                                                  comm=comm)
            x0, xT = run["x0"], run["res"].x[0]
            m0, q0 = binned_token_moments(x0, B, L)
            mT, qT = binned_token_moments(xT, B, L)
            return {"m0": m0, "q0": q0, "mT": mT, "qT": qT,
                    "cv": binned_cross_sums(x0, xT, B, CONTROL_DEGREE, L)}

        return one() if r == 0 else _piece(store, f"causal_replicate_{r}", one)

    rows = [replicate(r) for r in range(R)]
    stack = {k: np.array([row[k] for row in rows]) for k in ("m0", "q0", "mT", "qT")}
    Lf = layout_degree(B, L)
    # the controls' exact means: the bins' initial kinetic moments up to L_c (mass dropped)
    nu = bin_means(slice_moments(verts, kin.masses[0], CONTROL_DEGREE), B)[1:]
    cv = control_variates([row["cv"] for row in rows], nu, n=n)
    tT = moment_test(cv.adjusted, refT, n=n, alpha=ALPHA, L=Lf, ref_error=err,
                     token_var=cv.token_var)
    plain = moment_test(np.array([flat(m) for m in stack["mT"]]), refT, n=n, alpha=ALPHA,
                        L=Lf, ref_error=err, token_var=token_var(stack["mT"], stack["qT"], B))
    t0 = moment_test(np.array([flat(m) for m in stack["m0"]]), ref0, n=n, alpha=ALPHA, L=Lf,
                     token_var=token_var(stack["m0"], stack["q0"], B))
    K1 = (L + 1) ** 2 - 1
    finite = bool(np.all(np.isfinite(tT.t)) and np.all(np.isfinite(t0.t))
                  and np.all(np.isfinite(err)))
    return {
        "bins": B, "slices_per_bin": int(table.S) // B, "degree": L, "replicates": R,
        "alpha": ALPHA, "cells_coarse": int(vc.shape[0]),
        "max_t_T": tT.max_t, "t_crit_T": tT.t_crit, "p_T": tT.p_max_t,
        "max_t_0": t0.max_t, "t_crit_0": t0.t_crit, "p_0": t0.p_max_t,
        "t_per_bin_T": np.abs(tT.t).reshape(B, K1).max(axis=1).tolist(),
        "se_mc_median": float(np.median(tT.se_mc)),
        "ref_error_max": float(np.max(err)), "mesh_error_max": float(np.max(e_h)),
        "slice_error_max": float(np.max(e_S)),
        "detectable_T": float(np.min(tT.detectable)), "finite": finite,
        "control_degree": CONTROL_DEGREE, "controls": int(cv.controls),
        "cv_se_ratio": float(np.median(tT.se_mc / plain.se_mc)),
        "max_t_T_plain": plain.max_t,
        "passed": bool(finite and tT.max_t <= tT.t_crit and t0.max_t <= t0.t_crit),
        "test_T": tT.as_dict(), "test_0": t0.as_dict(),
        # raw data (written to causal_moments.npz, not to summary.json)
        "_arrays": {"particles_T": stack["mT"], "particles_0": stack["m0"],
                    "particles_T_cv": cv.adjusted,
                    "kinetic_T": refT, "kinetic_0": ref0, "kinetic_error_T": err},
    }


def run_causal_job(sc: Any, raw: dict, out: Path, ck: Any, fp: dict, *, resume: bool,
                   progress: bool | None, confirm: bool, comm: Any = None) -> MainJobResult:
    """The main job of a masked scenario (module docstring): validate, run, compare, write.

    Called by :func:`wflow.apps.main.run_main_job` under its checkpoint lock; the phases
    ``kinetic``, ``particles`` and ``compare`` are checkpointed as the other phases.
    ``comm`` (under mpirun): the meshes distributed and the tokens split over its ranks,
    every rank holding the gathered results; rank 0 writes (:mod:`wflow.apps.main.ranks`).
    """
    from ..jobs.kinetic import _build, _solve
    from ..jobs.mesh import mesh_size, mesh_size_of
    from .estimate import check_causal_estimate

    ropts = sc.table("run")
    table, B = check_causal(sc, ropts, progress=progress)
    size = mesh_size(sc, table)
    if size is not None:  # before generating or reading the mesh
        check_causal_estimate(sc, table, size["cells"], ropts, replicates=REPLICATES,
                              confirm=confirm)
    p = _build(sc, table, None)
    cells = mesh_size_of(p)["cells"]
    if size is None or size["cells"] != cells:
        check_causal_estimate(sc, table, cells, ropts, replicates=REPLICATES, confirm=confirm)
    print(f"run: the JKO and the EDI are not computed: {NOT_GRADIENT_FLOW}", flush=True)
    if not resume:
        ck.start(raw, sc.base_dir, fp)
    timings: dict[str, float] = {}
    cpu: dict[str, float] = {}
    restored: list[str] = []
    warned: list[dict] = []
    t_total = time.perf_counter()

    def phase(name: str, fn):
        return _phase(ck, name, fn, timings, restored, resume=resume, warned=warned, cpu=cpu)

    def kinetic() -> dict:
        res = _solve(p, table, None)
        if res.status in (Status.FAILED, Status.MAX_STEPS):
            raise FloatingPointError(f"kinetic phase {res.status}: {res.message}")
        return {"res": res}

    try:
        kin = phase("kinetic", kinetic)["res"]
        parts = phase("particles", lambda: _particles(sc, p, kin, ropts, r=0,
                                                      progress=progress, comm=comm))
        pieces = _Pieces(ck, "compare")
        cmp_ = phase("compare", lambda: {"moments": _compare(sc, p, table, kin, parts, ropts,
                                                             B, store=pieces, comm=comm)})
    except KeyboardInterrupt as exc:
        exc.args = (f"completed phases are checkpointed in {ck.dir}; continue with: "
                    f"wflow run --resume {out}",)
        raise
    session = time.perf_counter() - t_total
    restored_wall = float(sum(timings[k] for k in restored))
    summary = _summary(sc, raw, p, kin, parts, cmp_["moments"], timings,
                       session + restored_wall)
    summary.update(_session_record(warned, cpu, restored, restored_wall, session))
    if comm is None or comm.Get_rank() == 0:
        from ...infra.io import run_directory
        from .causal_report import _write

        with run_directory(out) as stage:
            _write(stage, summary, p, kin, parts, cmp_["moments"], render=ropts.render)
    ck.clear()
    return MainJobResult(summary["status"], summary, out)


def _summary(sc: Any, raw: dict, p: dict, kin: Any, parts: dict, mom: dict,
             timings: dict, wall: float) -> dict[str, Any]:
    from ...infra.io import check_finite, provenance

    pres = parts["res"]
    lam, source = p["alibi"]
    bias = sc.attention_obj().bias
    na = {"status": "not applicable", "reason": NOT_GRADIENT_FLOW}
    statuses = {"kinetic": {"status": kin.status, "message": kin.message},
                "particles": {"status": pres.status, "message": pres.message}}
    tol_T = f"<= {mom['t_crit_T']:.3g} (Šidák, t({mom['replicates'] - 1}), α = {ALPHA:g})"
    meaning = (f"max over {mom['bins']} position bins × {(DEGREE + 1) ** 2 - 1} harmonic "
               f"moments (degree ≤ {DEGREE}) of |mean of {mom['replicates']} causal particle "
               "systems − the bin's kinetic moments| / (replicate s.e. ⊕ the kinetic "
               "reference's mesh and slice error)")
    verdicts = [
        {"quantity": "particles vs kinetic: binned moments at T, max|t|",
         "value": mom["max_t_T"], "tolerance": tol_T,
         "verdict": Verdict.of(mom["finite"] and mom["max_t_T"] <= mom["t_crit_T"]),
         "meaning": meaning + ", on control-variate moments (the initial draw's "
                              "fluctuation regressed out). The tokens near position s follow "
                              "the kinetic family ρ_t(s, ·): the test of the causal "
                              "mean-field limit."},
        {"quantity": "particles vs kinetic: binned moments at t = 0, max|t|",
         "value": mom["max_t_0"], "tolerance": f"<= {mom['t_crit_0']:.3g}",
         "verdict": Verdict.of(mom["finite"] and mom["max_t_0"] <= mom["t_crit_0"]),
         "meaning": "the same at t = 0 (no reference error): the tokens are drawn from "
                    "the slices' initial densities"},
        {"quantity": "kinetic: slice mass error (relative)",
         "value": float(kin.stats["mass_error_max"]), "tolerance": "<= 1e-10",
         "verdict": Verdict.of(float(kin.stats["mass_error_max"]) <= 1e-10),
         "meaning": "largest relative drift of a slice's mass (the finite volumes conserve "
                    "it to round-off)"},
        {"quantity": "JKO", "value": None, "tolerance": "—",
         "verdict": Verdict.NOT_APPLICABLE, "meaning": f"not computed: {NOT_GRADIENT_FLOW}"},
        {"quantity": "EDI residuals", "value": None, "tolerance": "—",
         "verdict": Verdict.NOT_APPLICABLE, "meaning": f"not computed: {NOT_GRADIENT_FLOW}"},
    ]
    public = {k: v for k, v in mom.items() if not k.startswith("_")}
    summary: dict[str, Any] = {
        "status": Status.SUCCESS, "message": "", "statuses": statuses, "scenario": raw,
        "provenance": provenance(),
        "seeds": {"scenario": sc.seed, "particles_sampling": [sc.seed, 4242]},
        "mesh": {"cells": int(kin.areas.size), "spec": str(p["mesh_spec"])},
        "attention": sc.attention_obj().kind, "heads": int(p["H"]),
        "mask": str(p["mask"]),
        "alibi": {"lambda": float(lam), "source": source,
                  "token_slope": float(getattr(bias, "slope", 0.0))},
        "slices": int(kin.s.size), "n_particles": int(pres.x.shape[1]),
        "jko": dict(na), "edi": dict(na),
        "checks": {"kinetic": dict(kin.checks), "particles": pres.checks},
        "causal_moments": public,
        "kinetic_stats": kin.stats,
        "wall_time_s": {**{k: float(v) for k, v in timings.items()}, "total": float(wall)},
        "verdicts": verdicts,
    }
    overall, reasons = phases_status(statuses)
    failed = [v["quantity"] for v in verdicts if v["verdict"] == Verdict.FAIL]
    if failed:
        overall = worst_status(overall, Status.INACCURATE)
        reasons.append("failed checks: " + ", ".join(failed))
    summary["status"], summary["message"] = overall, "; ".join(reasons)
    check_finite("summary.causal_moments", {k: public[k] for k in (
        "max_t_T", "t_crit_T", "max_t_0", "t_crit_0", "ref_error_max", "se_mc_median")})
    return summary
