"""Options of the PDE solver and the ``[pde]`` table of a scenario.

:class:`PDEOptions` are the keyword-only options of :func:`wflow.pde.solve_pde`. Each
option is declared once, as a field with its meaning and checker
(:mod:`wflow.infra.options`): :data:`PDE_SCHEMA` (the TOML schema of ``[pde]``: the
TOML fields plus ``mesh``), :data:`PDE_SPEC` (its keys) and the ``Parameters`` section
of the class docstring are derived from them, and :func:`pde_options_from_dict`
validates a table with errors ``pde.<key>: ...``.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any, Literal

from ..attention.diffusion import diffusion_field
from ..infra.accuracy import ErrorControlled, error_control_fields
from ..infra.options import Extra, documented, keys_of, opt, schema_of, validate
from ..infra.schema import Spec, boolean, choice, number, string, take
from ..kernels import BACKENDS
from .integrators import TIME_INTEGRATORS
from .limiters import LIMITERS

__all__ = [
    "TIME_INTEGRATORS",
    "LIMITERS",
    "PDEOptions",
    "PDE_SCHEMA",
    "PDE_SPEC",
    "pde_options_from_dict",
    "PDETable",
    "pde_table_from_dict",
]


_MESH_DOC = ("Sphere mesh: ``\"default\"`` (``meshes/sphere_2420.msh``), a path relative to the "
             "scenario, a shipped file name, or ``\"icosphere:N\"`` / ``\"gmsh:N\"``.")


@documented
@dataclass(frozen=True)
class PDEOptions(ErrorControlled):
    """Options of :func:`solve_pde` (keyword-only in the API)."""

    SECTION = "pde"
    TABLE_EXTRAS = {
        "mesh": Extra("default", string, _MESH_DOC, "str")}

    T: float = field(default=1.0, metadata=opt(
        "Final time (depth) of the PDE solve.", check=number(0, strict_lo=True)))
    dt: float = field(default=1e-2, metadata=opt(
        "Upper bound of the time step (the step is adaptive, from the CFL bound).",
        check=number(0, strict_lo=True)))
    order: int = field(default=1, metadata=opt(
        "Spatial order: upwind (1) or limited linear reconstruction (2).", check=choice(1, 2)))
    time_integrator: str = field(default="auto", metadata=opt(
        "SSP time integrator (:data:`~wflow.pde.integrators.TIME_INTEGRATORS`); ``auto``: "
        "Euler for order 1, SSP-RK2 for order 2.", check=TIME_INTEGRATORS.checker("auto")))
    limiter: str = field(default="barth_jespersen", metadata=opt(
        "Slope limiter of order 2 (:data:`~wflow.pde.limiters.LIMITERS`), each followed by the "
        "positivity scaling.", check=LIMITERS.checker()))
    venkat_k: float = field(default=5.0, metadata=opt(
        "Venkatakrishnan limiter: its constant ``K`` (``ε² = (K h_K)³ ρ̄²``).",
        check=number(0, strict_lo=True)))
    cfl: float = field(default=0.9, metadata=opt(
        "Safety factor in ``(0, 1]`` times the positivity bound ``min_K m_K / out_K``.",
        check=number(0, 1, strict_lo=True)))
    flow: Literal["transformer", "surrogate"] = field(default="transformer", metadata=opt(
        "Velocity ``v`` or the surrogate ``v̂`` (ignored for a prescribed velocity).",
        check=choice("transformer", "surrogate")))
    quad_points: int = field(default=1, metadata=opt(
        "Gauss points per edge (1 = midpoint, enough for order 2; 2 or 3).",
        check=choice(1, 2, 3)))
    n_saves: int = field(default=11, metadata=opt(
        "Number of equally spaced output times in ``[0, T]`` (both ends included).",
        check=number(2, integer=True)))
    balance: bool = field(default=True, metadata=opt(
        "Evaluate the energy integrands at every step (running EDI balance); costs one "
        "cell-to-cell evaluation (``M²``) per step.", check=boolean))
    entropy: bool = field(default=False, metadata=opt(
        "Attention entropies at the output times.", check=boolean))
    head_rates: bool = field(default=False, metadata=opt(
        "Per-head energy rates at the output times.", check=boolean))
    clusters: bool = field(default=True, metadata=opt(
        "Cluster count at the output times.", check=boolean))
    cluster_level: float = field(default=0.1, metadata=opt(
        "Cells with ``ρ >= cluster_level · max ρ`` form the cluster graph.",
        check=number(0, 1, strict_hi=True)))
    cluster_min_mass: float = field(default=0.01, metadata=opt(
        "Components with less mass are not counted as clusters.",
        check=number(0, 1, strict_hi=True)))
    max_steps: int = field(default=1_000_000, metadata=opt(
        "Give up (status ``\"max_steps\"``) after this many accepted steps.",
        check=number(1, integer=True)))
    min_dt: float = field(default=1e-12, metadata=opt(
        "Give up (status ``\"failed\"``) if the positivity bound forces a smaller step.",
        check=number(0, strict_lo=True)))
    seed: int = field(default=0, metadata=opt(
        "Seed of the weight noise (stochastic schedules).", toml=False,
        reason="the scenario's top-level ``seed``"))
    progress: bool | None = field(default=None, metadata=opt(
        "tqdm progress bar (``None``: only on a TTY, rank 0).", toml=False,
        reason="the command line's ``--progress``"))
    kernel_backend: str = field(default="auto", metadata=opt(
        "Back-end of the attention sums. ``auto`` is resolved once per run from the global "
        "problem (all edge quadrature points against all cells), so serial and MPI runs use "
        "the same back-end; the choice and its error estimate are in ``stats[\"kernel\"]``.",
        check=choice(*BACKENDS)))
    kernel_tol: float = field(default=1e-10, metadata=opt(
        "Relative tolerance of the fast summation.", check=number(0, strict_lo=True)))
    diffusion: float = diffusion_field(
        "Token diffusion ``D >= 0`` (:mod:`wflow.attention.diffusion`): the term ``D Δ_S ρ`` "
        "by two-point fluxes, Crank–Nicolson half-steps around the drift step (Strang, "
        ":mod:`wflow.pde.diffusion`); ``0``: today's solver, bit for bit.")

    rtol: float | None
    atol: float | None
    adaptive: bool
    rtol, atol, adaptive = error_control_fields(
        "Relative tolerance of the cell densities (error control, step doubling; "
        "docs/theory.md §2): each step's local-error estimate, in the scaled RMS norm "
        "over the cells, is kept within ``rtol`` per unit time so that the error at ``T`` "
        "meets it; the step is the controller's, within ``dt`` and the positivity bound.",
        atol="units of ``ρ``", adaptive=True, adaptive_what=(
        "With ``rtol``/``atol``: choose each step by the error controller; ``False`` takes "
        "today's steps and judges the run by the same estimate (status ``inaccurate`` with "
        "the ``dt`` that would meet the tolerance)."))

    def __post_init__(self) -> None:
        validate(self)

    @property
    def integrator(self) -> str:
        """The time integrator actually used (``auto`` resolved)."""
        if self.time_integrator != "auto":
            return self.time_integrator
        return "euler" if self.order == 1 else "ssprk2"


#: The ``[pde]`` table: ``key -> (default, checker)`` (derived from :class:`PDEOptions`).
PDE_SCHEMA: Spec = schema_of(PDEOptions)

#: Keys of the ``[pde]`` section (derived; see :func:`pde_options_from_dict`).
PDE_SPEC: tuple[str, ...] = keys_of(PDEOptions)


def pde_options_from_dict(d: Mapping[str, Any] | None, *, seed: int = 0
                          ) -> tuple[str, PDEOptions]:
    """Validate a ``[pde]`` table; returns ``(mesh_spec, PDEOptions)``.

    Keys and defaults: :data:`PDE_SCHEMA` (the fields of :class:`PDEOptions` settable
    from TOML, and ``mesh``). Errors name the key (``pde.<key>: ...``).
    """
    vals = take(d or {}, PDE_SCHEMA, "pde")
    mesh = vals.pop("mesh")
    return mesh, PDEOptions(**vals, seed=seed)


@dataclass(frozen=True)
class PDETable:
    """The ``[pde]`` table of a scenario, validated once: the mesh spec and the options."""

    mesh: str
    options: PDEOptions


def pde_table_from_dict(d: Mapping[str, Any] | None, *, seed: int = 0) -> PDETable:
    """Validate a ``[pde]`` table into a :class:`PDETable` (:func:`pde_options_from_dict`)."""
    return PDETable(*pde_options_from_dict(d, seed=seed))
