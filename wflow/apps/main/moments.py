"""The main job's particles-vs-PDE line: spherical-harmonic moments with a stated null law.

``W_2`` between the ``n`` particles and the PDE's cell measure only measures the sampling
floor (``(log n/n)^{1/2}`` on ``S²``). The moments ``μ_k = ∫ Y_k dμ`` up to degree
:data:`DEGREE` (:mod:`wflow.geometry.harmonics`) fluctuate at ``O(n^{-1/2})`` with a
covariance the dynamics changes, so the main job runs :data:`REPLICATES` independent
particle systems of ``n`` tokens (the main one and ``R − 1`` more, seeds
``[seed, 4242, r]``) and tests their mean against the PDE's moments
(:func:`wflow.geometry.moment_test.moment_test`: Šidák-combined ``t(R − 1)`` scores at
level :data:`ALPHA`; the PDE's error ``e`` is the Richardson estimate
``|μ^h − μ^{coarse}|/(r² − 1)`` against a PDE solved on an icosphere of about half the
frequency, ``r²`` the ratio of the cell counts, added to the Monte Carlo error in
quadrature). The smallest detectable moment error ``t_crit (s² + e²)^{1/2}`` is
measured at ``n``, ``n/4`` and ``n/16`` (levels of at least :data:`MIN_N` tokens, ``R``
replicates each) and its fitted log–log rate in ``n`` is reported beside the theory's
``−1/2``. Part of the ``compare`` phase (:func:`main_job_moments`); the replicates run through
:func:`wflow.apps.main.phases._run_particles` (so a fault injected there reaches them).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import numpy as np

from ...geometry.harmonics import cell_moments, token_moment_sums
from ...geometry.moment_test import moment_test
from ...status import Status

__all__ = ["REPLICATES", "DEGREE", "ALPHA", "MIN_N", "levels", "compare_moments",
           "main_job_moments", "coarse_cells"]

#: Independent particle systems per level (the main run is the first at ``n``).
REPLICATES = 8
#: Largest harmonic degree compared (``(L+1)² − 1 = 24`` moments).
DEGREE = 4
#: Level of the test (Šidák over the moments).
ALPHA = 0.01
#: Smallest level of the detectable-error rate.
MIN_N = 50


def levels(n: int) -> list[int]:
    """``[n/16, n/4, n]`` (those with at least :data:`MIN_N` tokens; ``n`` always)."""
    return sorted({int(n)} | {int(n) // k for k in (4, 16) if int(n) // k >= MIN_N})


def coarse_cells(cells: int) -> int:
    """Cells of the icosphere of about half the frequency of a ``cells``-cell mesh (``≥ 80``).

    The reference's Richardson level: ``20 f²`` cells, ``f = max(2, round(√(cells/20)/2))``.
    """
    freq = max(2, round(float(np.sqrt(int(cells) / 20.0)) / 2))
    return 20 * freq * freq


def _moments(x: np.ndarray, L: int) -> tuple[np.ndarray, np.ndarray]:
    s, q = token_moment_sums(np.asarray(x, float), L, squares=True)
    return s / x.shape[0], q / x.shape[0]


def compare_moments(*, verts: np.ndarray, m0: np.ndarray, mT: np.ndarray,
                    verts_coarse: np.ndarray, mT_coarse: np.ndarray, n: int,
                    run: Callable[[int, int], tuple[np.ndarray, np.ndarray]],
                    R: int = REPLICATES, L: int = DEGREE, alpha: float = ALPHA
                    ) -> dict[str, Any]:
    """Moments of ``R`` particle replicates against the PDE at ``t = 0`` and ``T``.

    Parameters
    ----------
    verts, m0, mT : arrays
        Cells ``(M, 3, 3)`` and PDE cell masses at 0 and T (file order).
    verts_coarse, mT_coarse : arrays
        The coarser PDE (its error estimate).
    n : int
        Tokens of the main run.
    run : callable
        ``run(n_k, r) -> (x0, xT)``: replicate ``r`` of ``n_k`` tokens (``r = 0`` at
        ``n`` is the main run).

    Returns
    -------
    dict
        ``test_T`` / ``test_0`` (:meth:`MomentTest.as_dict`), ``levels``, ``detectable``
        (smallest detectable moment error per level), ``rate`` and ``rate_stderr`` (the
        fitted log–log slope; ``None`` with fewer than two levels), ``passed``.
    """
    ref0, refT = cell_moments(verts, m0, L), cell_moments(verts, mT, L)
    # Richardson for an order-2 scheme: |μ_h − μ_coarse| / (r² − 1), r² the cell-count ratio
    rich = 1.0 / max(verts.shape[0] / verts_coarse.shape[0] - 1.0, 1e-300)
    err = rich * np.abs(refT - cell_moments(verts_coarse, mT_coarse, L))
    out: dict[str, Any] = {"levels": levels(n), "R": int(R), "L": int(L), "alpha": alpha}
    det, tests = [], {}
    for nk in out["levels"]:
        M0, MT, Q0, QT = [], [], [], []
        for r in range(R):
            x0, xT = run(nk, r)
            a, qa = _moments(x0, L)
            b, qb = _moments(xT, L)
            M0.append(a)
            MT.append(b)
            Q0.append(qa)
            QT.append(qb)
        M0, MT = np.array(M0), np.array(MT)
        tT = moment_test(MT, refT, n=nk, alpha=alpha, L=L, ref_error=err,
                         token_var=np.mean(QT, axis=0) - MT.mean(axis=0) ** 2)
        t0 = moment_test(M0, ref0, n=nk, alpha=alpha, L=L,
                         token_var=np.mean(Q0, axis=0) - M0.mean(axis=0) ** 2)
        det.append(float(np.min(tT.detectable)))
        tests[nk] = (t0, tT)
    t0, tT = tests[int(n)]
    out["test_T"], out["test_0"] = tT.as_dict(), t0.as_dict()
    out["detectable"] = det
    out["detectable_at_n"] = float(np.min(tT.detectable))
    out["se_mc_median"] = float(np.median(tT.se_mc))
    out["se_iid_median"] = float(np.median(tT.se_iid)) if tT.se_iid is not None else None
    out["pde_error_max"] = float(np.max(tT.pde_err))
    out["max_t"], out["t_crit"], out["p"] = tT.max_t, tT.t_crit, tT.p_max_t
    out["max_t_0"], out["p_0"] = t0.max_t, t0.p_max_t
    if len(det) >= 2:
        lx, ly = np.log(out["levels"]), np.log(det)
        A = np.vstack([lx, np.ones_like(lx)]).T
        coef, *_ = np.linalg.lstsq(A, ly, rcond=None)
        out["rate"] = float(coef[0])
        if len(det) > 2:
            res = ly - A @ coef
            out["rate_stderr"] = float(np.sqrt(res @ res / (len(det) - 2)
                                               / np.sum((lx - lx.mean()) ** 2)))
        else:
            out["rate_stderr"] = None
    else:
        out["rate"] = out["rate_stderr"] = None
    out["passed"] = bool(tT.max_t <= tT.t_crit and t0.max_t <= t0.t_crit)
    return out


def main_job_moments(mesh, pde, parts: dict, schedule, attn, popts, ropts, sc, *,
                     store=None) -> dict[str, Any]:
    """:func:`compare_moments` for the main job: its mesh, PDE, particles and scenario.

    ``store``: where the coarse PDE and each replicate are saved as they finish (and
    restored from), so that an interrupted comparison resumes (:func:`~.compare._piece`).
    """
    from dataclasses import replace

    from ...geometry.density import density_spec_from_scenario, initial_density
    from ...geometry.mesh import load_mesh
    from . import phases
    from .compare import _piece

    def cells_of(m) -> np.ndarray:
        return m.gather_owned(m.cell_vertices.reshape(-1, 9)).reshape(-1, 3, 3)

    verts = cells_of(mesh)
    # the PDE's error: against an icosphere of about half the frequency (order 2)
    coarse = load_mesh(f"icosphere:{coarse_cells(verts.shape[0])}")
    rho0 = initial_density(coarse, density_spec_from_scenario(sc), base_dir=sc.base_dir)
    # solved directly (not through phases._run_pde: the ``pde`` phase is the main one)
    from ...pde import solve_pde

    pc = _piece(store, "moments_coarse_pde", lambda: solve_pde(
        rho0, schedule, attn, mesh=coarse, options=replace(popts, progress=False)))
    if pc.status in (Status.FAILED, Status.MAX_STEPS):
        raise FloatingPointError(f"compare: the coarse PDE {pc.status}: {pc.message}")
    vc = cells_of(coarse)
    n = int(ropts.n_particles)

    def run(nk: int, r: int) -> tuple[np.ndarray, np.ndarray]:
        if nk == n and r == 0:
            return parts["x0"], parts["res"].x[0]
        def one() -> tuple[np.ndarray, np.ndarray]:
            rep = phases._run_particles(mesh, pde, schedule, attn, popts,
                                        replace(ropts, n_particles=nk), sc, False,
                                        rep=(nk, r))
            return rep["x0"], rep["res"].x[0]

        return _piece(store, f"moments_replicate_{nk}_{r}", one)

    out = compare_moments(verts=verts, m0=pde.masses[0], mT=pde.masses[-1], verts_coarse=vc,
                          mT_coarse=pc.masses[-1], n=n, run=run)
    out["cells_coarse"] = int(vc.shape[0])
    return out
