"""The main job's ``τ/h`` study: JKO and surrogate PDE on coarser icospheres, fitted orders.

Part of the main job (:mod:`wflow.apps.main`).
"""

from __future__ import annotations

import contextlib
import time

import numpy as np

from ...infra.logs import filtered_logs
from ...jko.schemes import SCHEMES
from ...status import Status
from ..run_table import RunOptions
from ..scenario import Scenario
from . import phases
from .compare import _at_jko_times, _row, _table_row
from .verdicts import ORDER_MIN_EDI, ORDER_MIN_L1, ORDER_MIN_W2, RISE_MAX, TIME_TOL

REFINE_RATIO = 1.5
#: Frequency ``n`` of the coarsest icosphere of the table (``20 n²`` = 320 cells): the
#: levels are ``n_k = n·r^{-k}`` with ``r = min(REFINE_RATIO, (n/MIN_ICO)^{1/K})``.
MIN_ICO = 4


def _levels(M: int, N: int, K: int) -> list[tuple[int, int]]:
    """The coarser levels ``(cells, steps)`` of the ``τ/h`` table, coarsest last.

    The main mesh has ``M ≈ 20 n²`` cells and the main JKO ``N`` steps. Level ``k = 1..K``:
    the icosphere of frequency ``n_k = round(n / r^k)``, ``r = min(1.5, (n/4)^{1/K})``
    (so the coarsest has at least 320 cells), and ``N_k = max(1, round(N n_k / n))``
    steps, so that ``τ_k/h_k ≈ τ/h`` (``h ∝ 1/n`` on icospheres). Levels that repeat a
    step count or a mesh are dropped.
    """
    import math

    n = math.sqrt(M / 20.0)
    r = min(REFINE_RATIO, max(n / MIN_ICO, 1.0) ** (1.0 / max(K, 1)))
    out, seen_n, seen_N = [], {math.floor(n + 0.5)}, {N}
    for k in range(1, K + 1):
        nk = max(2, math.floor(n / r ** k + 0.5))
        Nk = max(1, math.floor(N * nk / n + 0.5))
        if nk in seen_n or Nk in seen_N:
            continue
        seen_n.add(nk)
        seen_N.add(Nk)
        out.append((20 * nk * nk, Nk))
    return out


def _without_referee(sc: Scenario) -> Scenario:
    """``sc`` with ``[jko] verify = false`` unless the scenario sets it (refinement levels).

    The POT referee of every FV step (a dense ``M × M`` OT problem per step, 3 s at 2 420
    cells) is reported by the main ``jko`` phase; the table's levels are judged against
    the PDE instead.
    """
    from dataclasses import replace

    jsec = dict(sc.sections.get("jko") or {})
    if "verify" in jsec:
        return sc
    jsec["verify"] = False
    return replace(sc, sections={**sc.sections, "jko": jsec})


def _jko_refinement(mesh, sc: Scenario, schedule, attn, popts, jko, ropts: RunOptions,
                    jref=None) -> dict:
    """The coarse rows of the ``τ/h`` table (``h ∝ τ``); the finest row is the main JKO.

    Levels: :func:`_levels` (``[run] jko_refinement`` coarser icospheres, at most 1.5
    apart in ``h``, ``N_k`` steps with ``τ_k/h_k ≈ τ/h``). On each: the surrogate PDE with
    an output at every JKO time and the JKO (the scenario's ``[jko]`` table with
    ``τ = T/N_k``; the POT referee off, :func:`_without_referee`), then
    ``W_2(μ^JKO_k, μ^PDE(kτ))`` and ``‖m^JKO_k − m^PDE(kτ)‖₁`` (cell masses) at every JKO
    time (:func:`_table_row`). The coarsest level is run once more with the OT scheme
    (``ot_crosscheck``, reported, not a row of the fit: it locks and speckles by
    construction, docs/jko.md). ``main_l1``: the L¹ of the main JKO against ``jref``.
    """
    import warnings
    from dataclasses import replace

    from ...geometry.density import density_spec_from_scenario, initial_density
    from ...geometry.mesh import load_mesh

    N = int(jko.stats["steps"])
    M = int(jko.areas.size)
    sc_levels = _without_referee(sc)
    rows, last = [], None
    for cells, Nk in _levels(M, N, ropts.jko_refinement):
        mk = load_mesh(f"icosphere:{cells}")
        rho_k = initial_density(mk, density_spec_from_scenario(sc), base_dir=sc.base_dir)
        tau_k = float(popts.T) / Nk
        t0 = time.perf_counter()
        with warnings.catch_warnings():  # the statuses go to the table
            warnings.simplefilter("ignore")
            pres = phases._run_pde(mk, rho_k, schedule, attn, replace(
                phases._surrogate_options(popts, Nk), balance=False, clusters=False,
                progress=False))
            t1 = time.perf_counter()
            jres = phases._run_jko(mk, rho_k, schedule, attn, sc_levels, popts, False, tau=tau_k)
        t2 = time.perf_counter()
        row = _table_row(jres, pres, ropts)
        row["wall_s"] = {"pde": t1 - t0, "jko": t2 - t1, "w2": time.perf_counter() - t2}
        rows.append(row)
        last = (mk, rho_k, tau_k, pres, jres)
    out: dict = {"rows": rows}
    if jref is not None:
        l1 = _at_jko_times(jko, jref)[2]
        out["main_l1"] = {"l1_max": float(np.max(l1)) if l1.size else float("nan"),
                          "l1_final": float(l1[-1]) if l1.size else float("nan")}
    # token diffusion D > 0: the OT scheme has no entropy step, so no OT cross-check
    if last is not None and not jko.options.diffusion > 0 and \
            SCHEMES.resolve(jko.options.scheme).on_dual:  # the FV scheme
        mk, rho_k, tau_k, pres, jres = last
        t0 = time.perf_counter()
        with warnings.catch_warnings(), _labelled_logs(
                f"OT cross-check of the τ/h table (scheme = \"ot\" on {mk.num_global} "
                f"cells, τ = {tau_k:.4g}; not the main JKO): "):
            warnings.simplefilter("ignore")
            try:
                ores = phases._run_jko(mk, rho_k, schedule, attn, sc_levels, popts, False,
                                       tau=tau_k, scheme="ot")
                out["ot_crosscheck"] = _table_row(ores, pres, ropts)
            except FloatingPointError as exc:
                out["ot_crosscheck"] = {"cells": int(jres.areas.size), "status": Status.FAILED,
                                        "message": str(exc)}
        out["ot_crosscheck"]["wall_s"] = time.perf_counter() - t0
    return out


@contextlib.contextmanager
def _labelled_logs(prefix: str, logger_name: str = "wflow.jko"):
    """Prefix every record the loggers under ``logger_name`` emit meanwhile with ``prefix``.

    The OT cross-check's warnings (``jko: up to N cells empty``) then say on the terminal,
    in ``summary.json`` ``warnings`` and in the report which run they come from.
    """
    import logging

    class _Prefix(logging.Filter):
        def filter(self, record: logging.LogRecord) -> bool:
            record.msg, record.args = prefix + record.getMessage(), None
            return True

    with filtered_logs(logger_name, _Prefix()):
        yield


def _order(x: list[float], y: list[float]) -> float | None:
    """Log–log slope of ``y`` against ``x`` (``None`` below two distinct positive ``x``).

    Refinement rows that share ``τ`` (short runs) give no slope.
    """
    pts = [(a, b) for a, b in zip(x, y, strict=True) if a > 0 and b is not None and b > 0]
    if len({a for a, _ in pts}) < 2:
        return None
    lx, ly = np.log([p[0] for p in pts]), np.log([p[1] for p in pts])
    return float(np.polyfit(lx, ly, 1)[0])


def _refinement_block(jko, table: dict | None, cmp_: dict, ropts: RunOptions) -> dict | None:
    """The ``τ/h`` table, coarsest row first, with fitted orders and the verdict inputs.

    The finest row is the main JKO (``W_2`` and ``L¹`` from the ``compare`` phase, against
    its reference PDE). Orders: log–log least-squares slopes against ``τ`` (``h ∝ τ``)
    of ``max_k W_2``, ``max_k L¹`` and the JKO's ``Σ|EDI_k|`` (relative); per quantity
    the level-to-level ratios, their largest ``rise_*`` and ``settles_*`` (the finest
    value below the coarsest), :func:`level_ratios`; ``shrinks_*``: the number decreases
    from every row to the next finer one (reported, not judged; ``None`` with one row).
    """
    if table is None:
        return None
    w = np.asarray(cmp_.get("w2_jko_vs_pde", np.array([])))
    l1 = np.asarray(cmp_.get("l1_jko_vs_pde", np.array([])))
    main = _row(jko, w, l1, float(cmp_.get("jko_time_error", 0.0)),
                cmp_.get("jko_w2_uncertified", ()))
    if not l1.size and "main_l1" in table:  # a table computed before this field existed
        main.update(table["main_l1"])
    return _fit_table([*table["rows"], main], table.get("ot_crosscheck"))


def level_ratios(v: list[float]) -> tuple[list[float], float | None, bool | None]:
    """The level-to-level ratios of one column of the table and the verdicts' inputs.

    Parameters
    ----------
    v : list of float
        One value per level, coarsest first (``v_0`` at the largest ``τ``), e.g. the
        ``max_k W_2`` column; dimensionless ratios follow whatever unit it has.

    Returns
    -------
    ratios : list of float
        ``v_{i+1} / v_i`` (finer over coarser), ``len(v) − 1`` of them; ``0/0`` is 0
        (no error on either level), ``b/0`` with ``b > 0`` is ``inf``.
    rise : float or None
        ``max_i v_{i+1}/v_i``, the most the number grows from one level to the next
        finer one (the verdicts judge ``rise <= RISE_MAX``); ``None`` below two levels.
    settles : bool or None
        ``v_{K} < v_0``: the finest value is below the coarsest; ``None`` below two levels.
        A non-finite value gives a ``nan`` ratio and ``settles = False``.
    """
    if len(v) < 2:
        return [], None, None
    ratios = [float(b / a) if a > 0 else (0.0 if b == 0 else float("inf"))
              for a, b in zip(v, v[1:], strict=False)]
    rise = float("nan") if any(np.isnan(ratios)) else max(ratios)
    return ratios, rise, bool(v[-1] < v[0])


def _fit_table(rows: list[dict], ot: dict | None) -> dict:
    """The block of :func:`_refinement_block` from its rows (sorted coarsest first here)."""
    rows = sorted(rows, key=lambda r: -r["tau"])
    taus = [r["tau"] for r in rows]

    def col(key: str) -> list[float]:
        return [float(r.get(key, float("nan"))) for r in rows]

    def shrinks(v: list[float]) -> bool | None:
        # None: one row, nothing to compare (a verdict of its own, WARN: see _verdicts)
        return all(b < a for a, b in zip(v, v[1:], strict=False)) if len(rows) > 1 else None

    def order(v: list[float]) -> float | None:
        return _order(taus, v) if all(np.isfinite(v)) else None

    cols = {"w2": col("w2_max"), "l1": col("l1_max"), "edi": col("edi_abs_relative")}
    levels: dict = {}
    for key, v in cols.items():
        ratios, rise, settles = level_ratios(v)
        levels |= {f"ratios_{key}": ratios, f"rise_{key}": rise, f"settles_{key}": settles}
    return {"rows": rows, **{f"order_{k}": order(v) for k, v in cols.items()},
            "ot_crosscheck": ot, **levels,
            **{f"shrinks_{k}": shrinks(v) for k, v in cols.items()},
            "time_error_max": float(np.nanmax(col("time_error"))) if rows else 0.0,
            "thresholds": {"order_w2": ORDER_MIN_W2, "order_l1": ORDER_MIN_L1,
                           "order_edi": ORDER_MIN_EDI, "time_error": TIME_TOL,
                           **{f"rise_{k}": RISE_MAX[k] for k in cols}},
            "rule": f"h ∝ τ: icospheres n_k = n/r^k (r = min({REFINE_RATIO:g}, (n/{MIN_ICO})^"
                    "(1/K)), 20 n_k² cells), N_k = round(N n_k/n) steps; the finest row is "
                    "the main JKO; W₂ and L¹ against the surrogate PDE on the same mesh at "
                    "the JKO times, max over the times"}
