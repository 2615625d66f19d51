"""The main job's comparisons: exact ``W_2`` of particles and of the JKO to the PDE.

Part of the main job (:mod:`wflow.apps.main`).
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

from ...status import Verdict
from ..run_table import RunOptions

__all__ = ["ParticleW2", "particles_w2", "resolve_w2", "w2_label", "SSW_PROJECTIONS", "W2_SEED_TAG"]

logger = logging.getLogger(__name__)

#: Projections of POT's sliced spherical W₂ (``ot.sliced_wasserstein_sphere``) of all the
#: particles: two projection seeds differ by about 2 % at 200 (n = 10⁴ on the default mesh:
#: 0.01239 and 0.01268); it costs about 5 s of CPU per output time there.
SSW_PROJECTIONS = 200
#: Second word of the seed of the subsample and the projections: ``[scenario seed, tag]``
#: (the particles' own draw uses ``[seed, 4242]``).
W2_SEED_TAG = 4343


@dataclass(frozen=True)
class ParticleW2:
    """W₂ of a particle trajectory against cell measures, with what it can resolve.

    Attributes
    ----------
    value : (K,) array
        Exact ``W₂`` (POT, geodesic cost; rad) at each time between the particles used
        (all ``n``, or the subsample of ``m``) and the cell measure.
    n, m : int
        Particles, and those used by the exact ``W₂`` (``m = n``: all; ``m < n``: a
        uniformly random subsample without replacement, the same particles at every time).
    floor : float
        The subsample's sampling floor (rad): the exact ``W₂`` between the subsample and a
        second independent subsample of ``m`` of the same ``n`` particles, the larger at
        the first and the last time. Two equally valid subsamples give values that differ
        by at most this (triangle inequality), and a subsample's ``W₂`` differs from the
        full cloud's by at most ``W₂(subsample, cloud)``, which it estimates: a difference
        of ``W₂`` values below it is not evidence. ``0`` when ``m = n``.
    sliced : (K,) array or None
        POT's sliced spherical ``W₂`` (``ot.sliced_wasserstein_sphere``, ``p = 2``,
        :data:`SSW_PROJECTIONS` projections drawn once from ``seed``) of **all** ``n``
        particles against the cell measure; ``None`` when ``m = n`` (the exact value
        covers them). A different quantity from ``W₂`` (smaller: an average over 1-D
        circle projections), comparable across ``n``.
    seed : tuple of int
        The seed of the subsample and of the projections (``numpy.random.default_rng``).
    """

    value: np.ndarray
    n: int
    m: int
    floor: float
    sliced: np.ndarray | None
    seed: tuple[int, ...]

    @property
    def subsampled(self) -> bool:
        """True when the exact ``W₂`` uses fewer than all the particles."""
        return self.m < self.n

    @property
    def label(self) -> str:
        """The one name of the number (:func:`w2_label`)."""
        return w2_label(self.m, self.n)


def w2_label(m: int, n: int) -> str:
    """``"W₂ (subsample of m of n particles)"``, or ``"W₂ (all n particles)"`` when ``m >= n``.

    The one name of the particles' exact ``W₂`` on the terminal, in the report, the
    figures, the estimate and ``summary.json`` (``w2.label``).
    """
    m, n = min(int(m), int(n)), int(n)
    return f"W₂ (subsample of {m} of {n} particles)" if m < n else f"W₂ (all {n} particles)"


def particles_w2(traj: np.ndarray, y: np.ndarray, masses: Sequence[np.ndarray] | np.ndarray,
                 *, max_points: int, seed: Sequence[int] | int = 0,
                 projections: int = SSW_PROJECTIONS) -> ParticleW2:
    """Exact ``W₂`` of particles against cell measures at each time; a subsample beyond.

    ``W₂(μ^n_k, ν_k) = (min_π Σ π_ij d_S(x_i, y_j)²)^{1/2}`` with ``μ^n_k`` the uniform
    measure on the particles at time ``k`` and ``ν_k = Σ_j b_kj δ_{y_j}`` (POT's network
    simplex on the dense cost, :func:`wflow.geometry.transport.w2_sphere`; the certified
    sparse solver when the cells alone exceed ``max_points``). Above
    ``max_points`` particles it is computed on ``m = max_points`` of them, drawn uniformly
    without replacement from ``seed`` (the same particles at every time), with the
    subsample's sampling floor and the sliced ``W₂`` of all the particles
    (:class:`ParticleW2`). The draw depends on ``seed`` and ``n`` only (never on a rank or
    a thread count): a trajectory in the global token order gives the same subsample and
    projections however many ranks computed it.

    Parameters
    ----------
    traj : (K, n, 3) array
        Particles on the unit sphere at ``K`` times.
    y : (M, 3) array
        Cell points on the unit sphere.
    masses : (K, M) array
        Cell masses at the same times (normalised here).
    max_points : int
        Most particles of a dense exact solve (``[run] max_ot_points``).
    seed : int or sequence of int
        Seed of the subsample and of the projections.
    projections : int
        Projections of the sliced ``W₂``.

    Returns
    -------
    ParticleW2
    """
    traj = np.asarray(traj, dtype=float)
    K, n = traj.shape[0], traj.shape[1]
    seed_t = tuple(int(s) for s in np.atleast_1d(seed))
    if n <= max_points:
        val = np.array([_exact_w2(traj[k], y, None, masses[k], max_points)
                        for k in range(K)])
        return ParticleW2(val, n, n, 0.0, None, seed_t)
    import ot

    m = int(max_points)
    rng = np.random.default_rng(list(seed_t))
    perm = rng.permutation(n)
    idx = np.sort(perm[:m])
    # the floor's second subsample: disjoint when there are enough particles, else an
    # independent draw (sharing about m²/n particles, as the subsample shares them with
    # the cloud)
    idx2 = np.sort(perm[m:2 * m] if n >= 2 * m else rng.permutation(n)[:m])
    proj_seed = int(rng.integers(2**31 - 1))
    val = np.array([_exact_w2(traj[k, idx], y, None, masses[k], m) for k in range(K)])
    floor = max(_exact_w2(traj[k, idx], traj[k, idx2], None, None, m)
                for k in sorted({0, K - 1}))
    sliced = np.array([float(ot.sliced_wasserstein_sphere(
        traj[k], y, None, np.asarray(masses[k], float) / float(np.sum(masses[k])),
        n_projections=int(projections), p=2, seed=proj_seed)) for k in range(K)])
    return ParticleW2(val, n, m, float(floor), sliced, seed_t)


def resolve_w2(value: float, tolerance: float, floor: float) -> Verdict:
    """Judge ``value <= tolerance`` when both are known only to within ``floor``.

    ``PASS`` if ``value <= tolerance − floor``, ``FAIL`` if ``value > tolerance + floor``,
    else ``INCONCLUSIVE`` (the difference is below the sampling floor: not evidence either
    way). With ``floor = 0`` (an exact ``W₂`` of every particle) this is
    ``value <= tolerance``.
    """
    value, tolerance, floor = float(value), float(tolerance), max(float(floor), 0.0)
    if value <= tolerance - floor:
        return Verdict.PASS
    if value > tolerance + floor:
        return Verdict.FAIL
    return Verdict.INCONCLUSIVE

def _w2(x: np.ndarray, y: np.ndarray, a, b, ropts: RunOptions,
        uncertified: list[float] | None = None) -> float:
    """Exact ``W_2`` on the sphere (POT): dense up to ``max_ot_points``, certified sparse beyond.

    :func:`wflow.geometry.transport.w2_sphere` semantics with ``method = "auto"`` (O(N·k)
    memory beyond ``max_ot_points``; a dense ``18 000²`` cost alone is 2.6 GB). Identical
    measures (``t = 0``: both start from the initial cell masses) give ``W₂ = 0`` without
    a solve (at 40 500 cells a sparse solve costs ~37 s; it certifies them too since its
    tolerance includes the simplex's own optimality level). Any sparse solve that is not
    certified returns the value of its plan, an upper bound, and appends the violation to
    ``uncertified``.
    """
    if x is y and a is not None and b is not None and np.array_equal(a, b):
        return 0.0  # the same measure (t = 0: both start from the initial cell masses)
    return _exact_w2(x, y, a, b, ropts.max_ot_points, uncertified)


def _exact_w2(x: np.ndarray, y: np.ndarray, a, b, max_points: int,
              uncertified: list[float] | None = None) -> float:
    """Dense exact ``W₂`` up to ``max_points`` support points, certified sparse beyond."""
    from ...geometry.transport import w2_sphere, w2_sphere_sparse

    if max(x.shape[0], y.shape[0]) <= max_points:
        return w2_sphere(x, y, a, b, max_points=max_points, method="dense")
    res = w2_sphere_sparse(x, y, a, b, raise_uncertified=False)
    if not res.certified:
        logger.warning("main job: sparse W2 not certified (max dual violation %.2e rad²); "
                       "its plan's value is used (an upper bound)", res.max_violation)
        if uncertified is not None:
            uncertified.append(float(res.max_violation))
    return float(res.value)


def _at_jko_times(jko, ref, chat: np.ndarray | None = None, ropts: RunOptions | None = None,
                  uncertified: list[float] | None = None
                  ) -> tuple[np.ndarray, np.ndarray, np.ndarray, float]:
    """JKO iterate ``k`` against the reference PDE at the nominal time ``kτ``.

    The reference saves at ``t = jT/J``; JKO step ``k`` is paired with the output at
    ``kτ`` (``τ`` from the JKO's options) when there is one. Returns ``(t, W_2, L¹,
    time_error)``: the nominal times, ``W_2(μ^JKO_k, μ^ref(kτ))`` (empty without
    ``chat``), ``‖m^JKO_k − m^ref(kτ)‖₁`` (cell masses), and
    ``max_k |t_k − kτ| / T`` over the JKO's *recorded* times ``t_k`` (0 for a JKO whose
    times are its steps; a mislabelled ``τ`` shows here).
    """
    tau = float(jko.options.tau)
    t_rec = np.asarray(jko.t, dtype=float)
    T = float(ref.t[-1]) if len(ref.t) else 1.0
    nominal = tau * np.arange(t_rec.size)
    terr = float(np.max(np.abs(t_rec - nominal)) / max(T, 1e-300)) if t_rec.size else 0.0
    pairs = []
    for k, tk in enumerate(nominal):
        j = int(np.argmin(np.abs(ref.t - tk)))
        if abs(ref.t[j] - tk) <= 1e-9 * max(1.0, T):
            pairs.append((k, j))
    l1 = np.array([float(np.sum(np.abs(np.asarray(jko.masses[k]) - np.asarray(ref.masses[j]))))
                   for k, j in pairs])
    w2 = np.array([]) if chat is None else np.array(
        [_w2(chat, chat, jko.masses[k], ref.masses[j], ropts, uncertified) for k, j in pairs])
    return np.array([nominal[k] for k, _ in pairs]), w2, l1, terr


def _table_row(jres, pres, ropts: RunOptions) -> dict:
    """One row of the ``τ/h`` table: mesh, step, locking, EDI residual, W₂ and L¹ to the PDE."""
    chat = pres.centroids / np.linalg.norm(pres.centroids, axis=1, keepdims=True)
    unc: list[float] = []
    _, w2, l1, terr = _at_jko_times(jres, pres, chat, ropts, unc)
    return _row(jres, w2, l1, terr, unc)


def _row(jres, w2: np.ndarray, l1: np.ndarray, terr: float,
         uncertified: list[float] | tuple = ()) -> dict:
    rule = jres.stats.get("tau_rule", {})
    h = float(np.sqrt(np.mean(jres.areas)))
    return {"cells": int(jres.areas.size), "h": h, "tau": float(jres.options.tau),
            "scheme": jres.options.scheme,
            "l1_max": float(np.max(l1)) if l1.size else float("nan"),
            "l1_final": float(l1[-1]) if l1.size else float("nan"),
            "steps": int(jres.stats["steps"]), "eps": float(jres.options.epsilon),
            "cells_per_step": float(jres.options.tau * rule["vmax"] / h) if rule else None,
            "status": jres.status, "locked_steps": int(jres.stats.get("locked_steps", 0)),
            "empty_cells": int(jres.checks.get("empty_cells_max", 0)),
            # token diffusion D > 0: the free-energy EDI of F_D (the noisy scheme's balance)
            "edi_abs_relative": float(jres.checks.get("free_edi", jres.checks["edi"])["value"]),
            "edi_relative": _rel(jres.balance["edi"], jres.balance["dissipation"]),
            "w2_max": float(np.max(w2)) if w2.size else float("nan"),
            "w2_final": float(w2[-1]) if w2.size else float("nan"),
            "time_error": float(terr),
            "w2_uncertified": float(max(uncertified)) if len(uncertified) else 0.0}


def _rel(a: float, b: float) -> float:
    return abs(float(a)) / abs(float(b)) if b else float("nan")


def _compare(pde, parts: dict, jko, ropts: RunOptions, jref=None, *, seed: int = 0,
             store=None) -> dict:
    """The phase ``compare``'s W₂: particles vs the PDE, JKO vs its reference PDE.

    ``store``: a mapping the finished pieces are saved into (and restored from) by name,
    so that an interrupted phase resumes where it stopped (:func:`_piece`).
    """
    pres = parts["res"]
    chat = pde.centroids / np.linalg.norm(pde.centroids, axis=1, keepdims=True)
    traj = pres.trajectory[0]
    pw = _piece(store, "w2_particles", lambda: particles_w2(
        traj, chat, pde.masses, max_points=ropts.max_ot_points, seed=(int(seed), W2_SEED_TAG)))
    out = {"t": pde.t, "w2_particles_vs_pde": pw.value, "w2_particles": pw}
    if jko is not None:
        ref = jref or pde
        rchat = ref.centroids / np.linalg.norm(ref.centroids, axis=1, keepdims=True)

        def jko_w2():
            unc: list[float] = []
            return (*_at_jko_times(jko, ref, rchat, ropts, unc), unc)

        (out["t_jko"], out["w2_jko_vs_pde"], out["l1_jko_vs_pde"], out["jko_time_error"],
         out["jko_w2_uncertified"]) = _piece(store, "w2_jko", jko_w2)
    return out


def _piece(store, name: str, fn: Callable[[], Any]) -> Any:
    """``fn()``, or its value saved in ``store`` under ``name``; a new value is saved there.

    ``store`` (or ``None``: no saving) is a mutable mapping whose assignment persists the
    value (the main job's :class:`~wflow.apps.main.checkpoint._Pieces`).
    """
    if store is not None and name in store:
        return store[name]
    val = fn()
    if store is not None:
        store[name] = val
    return val


# --------------------------------------------------------------------------- summary & output
