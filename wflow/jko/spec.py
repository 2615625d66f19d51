"""The JKO scheme's :class:`~wflow.infra.spec.SolverSpec`, registered once, and its step rule.

``[jko]`` → :class:`~wflow.jko.options.JKOTable` (parsed once, when the scenario loads; its
defaults ``T`` and ``mesh`` from ``[pde]``), its cost
(:func:`~wflow.jko.estimate.estimate_run`), its keys, its solve
(:func:`~wflow.jko.solve_jko`), and :func:`resolve_step`: the table's step rule resolved
on a mesh (``tau = "auto"``: :func:`~wflow.jko.auto_step`).
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import replace
from typing import Any

import numpy as np

from ..infra.spec import SOLVERS, SolverSpec
from .estimate import estimate_run
from .keys import CSV_COLUMNS, SUMMARY_KEYS
from .options import FixedTau, JKOOptions, JKOTable, jko_table_from_dict
from .solver import auto_step, solve_jko

__all__ = ["SPEC", "resolve_step"]


def _parse(d: Mapping[str, Any] | None, sections: Mapping[str, Any], seed: int) -> JKOTable:
    """``[jko]`` at the scenario's load: every key checked, refused but not warned about.

    The OT cross-check counts (``wflow run`` runs one); the job that runs the table warns.
    """
    pde = sections.get("pde") or {}
    return jko_table_from_dict(d, T=pde.get("T"), mesh=pde.get("mesh"), crosscheck=True,
                               warn=False)


def resolve_step(table: JKOTable, points: np.ndarray, areas: np.ndarray, mass0: np.ndarray,
                 schedule: Any, attn: Any, **changes: Any) -> tuple[JKOOptions, dict]:
    """The options of a run of ``table`` on this mesh, and the record of its step.

    :class:`~wflow.jko.options.FixedTau`: ``τ`` given; :class:`~wflow.jko.options.AutoSteps`:
    ``τ`` (and, with ``ot = "sinkhorn"`` and no ``eps``, ``ε``) chosen by
    :func:`~wflow.jko.auto_step`. The record (``stats["tau_rule"]``) places the step
    against the mesh either way: ``h``, ``|v|_max``, ``τ|v|_max/h``, ``ε``.
    """
    given = isinstance(table.step, FixedTau)
    opts = table.options(table.step.tau if given else table.T, **changes)
    auto, info = auto_step(points, areas, mass0, schedule, attn, options=opts,
                           eps=table.eps_auto)
    if given:  # the given step, and where it sits against the mesh
        info = {**info, "rule": "given", "tau": opts.tau, "steps": opts.steps,
                "cells_per_step": opts.tau * info["vmax"] / info["h"]}
        if "diffusive_cells_per_step" in info:  # the heat flow's spread at the given τ
            info["diffusive_cells_per_step"] = math.sqrt(4.0 * opts.diffusion * opts.tau) \
                / info["h"]
    else:
        opts = auto
    if opts.ot == "sinkhorn" and table.eps_auto:
        opts = replace(opts, eps=auto.eps)
    info["eps"] = opts.epsilon
    return opts, info


#: The JKO solver's :class:`~wflow.infra.spec.SolverSpec` (registered in ``SOLVERS``).
SPEC = SOLVERS.register(SolverSpec(
    name="jko", section="jko", options=JKOOptions, parse=_parse, estimate=estimate_run,
    solve=solve_jko, keys=SUMMARY_KEYS, columns=CSV_COLUMNS))
