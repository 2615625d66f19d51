"""The main job's comparisons: exact ``W_2`` of particles and of the JKO to the PDE.

Part of the main job (:mod:`wflow.apps.main`).
"""

from __future__ import annotations

import logging

import numpy as np

from .options import RunOptions

logger = logging.getLogger(__name__)

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
    from ...geometry.transport import w2_sphere, w2_sphere_sparse

    if x is y and a is not None and b is not None and np.array_equal(a, b):
        return 0.0  # the same measure (t = 0: both start from the initial cell masses)
    if max(x.shape[0], y.shape[0]) <= ropts.max_ot_points:
        return w2_sphere(x, y, a, b, max_points=ropts.max_ot_points, method="dense")
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


def _compare(pde, parts: dict, jko, ropts: RunOptions, jref=None) -> dict:
    pres = parts["res"]
    chat = pde.centroids / np.linalg.norm(pde.centroids, axis=1, keepdims=True)
    traj = pres.trajectory[0]
    n = min(traj.shape[1], ropts.max_ot_points)
    w2_parts = np.array([_w2(traj[k, :n], chat, None, pde.masses[k], ropts)
                         for k in range(len(pde.t))])
    out = {"t": pde.t, "w2_particles_vs_pde": w2_parts}
    if jko is not None:
        ref = jref or pde
        rchat = ref.centroids / np.linalg.norm(ref.centroids, axis=1, keepdims=True)
        unc: list[float] = []
        out["t_jko"], out["w2_jko_vs_pde"], out["l1_jko_vs_pde"], out["jko_time_error"] = \
            _at_jko_times(jko, ref, rchat, ropts, unc)
        out["jko_w2_uncertified"] = unc
    return out


# --------------------------------------------------------------------------- summary & output
