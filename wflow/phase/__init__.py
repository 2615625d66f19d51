r"""The noisy model's phase transition: closed forms, stationary branches, the diagram.

THEORY §8 (docs/theory.md §9) and Mun & Rosenzweig: one USA head ``A = V = I`` on
``S^{d-1}`` with token diffusion ``D``, in their convention ``K = 1/(2D)``
(:func:`wflow.attention.diffusion.coupling_of`):

* closed forms (:mod:`~wflow.phase.thresholds`): the Funk–Hecke eigenvalues ``λ_l``,
  the linear threshold :func:`k_sharp` ``K_#(β) = β/(2λ_1)``, and the tricritical
  :func:`tricritical_beta` ``β*(d)``, root of ``I_{d/2+1}/I_{d/2} = 1/d``;
* the zonal reduction of the stationary states to a finite Gegenbauer system
  (:mod:`~wflow.phase.zonal`), solved by Newton's method at a fixed order parameter;
* the branch from ``K_#`` by continuation in the order parameter, its fold ``K_f`` and the
  first-order threshold ``K_c`` (:mod:`~wflow.phase.branch`, :func:`phase_point`);
* the diagram, the critical exponents and the dichotomy at ``β*`` as a check
  (:mod:`~wflow.phase.diagram`);
* the stationary equation on the full triangulated ``S²`` (``d = 3``): Newton's method,
  pseudo-arclength continuation through the fold, ``K_c`` from equal free energies, and
  non-zonal states, Richardson-extrapolated against the zonal values
  (:mod:`~wflow.phase.mesh`);
* noisy particles at their stationary state against the branch, by batch means
  (:mod:`~wflow.phase.particles`, :func:`particle_order_parameter`; recorded points
  checked by :func:`check_particle_point`);
* the noisy PDE's long-time runs against the branches, and the hysteresis loop
  (:mod:`~wflow.phase.relaxation`, imported on first use: it needs the PDE's DOLFINx).

Reproduced (d = 3, published ``K``): ``β = 3``: ``K_# = 0.668810``, ``K_c = 0.616872``,
``K_f = 0.604224``; ``β = 4``: ``0.390515``, ``0.322675``, ``0.309136``; ``β = 8``:
``0.0245367``, ``0.0137432``, ``0.0124196`` (``K_f < K_c < K_#``).

This package is a studies-level room: it imports :mod:`wflow.attention`, the mesh
geometry and harmonics of :mod:`wflow.geometry`, and SciPy.
"""

from __future__ import annotations

from .branch import PhasePoint, ZonalBranch, phase_point, zonal_branch
from .diagram import (
    DichotomyCheck,
    ExponentFit,
    PhaseDiagram,
    check_dichotomy,
    order_parameter_exponent,
    phase_diagram,
)
from .mesh import (
    MeshBranch,
    MeshModel,
    MeshOptions,
    MeshPhasePoint,
    MeshRefinement,
    MeshState,
    NonzonalCheck,
    mesh_branch,
    mesh_phase_point,
    mesh_refinement,
    nonzonal_check,
)
from .particles import (
    ParticlePhaseRun,
    ParticlePoint,
    check_particle_point,
    correct_dt,
    extrapolate_dt,
    load_particle_points,
    particle_order_parameter,
    stable_order_parameter,
)
from .thresholds import funk_hecke_eigenvalues, k_sharp, tricritical_beta
from .zonal import PhaseError, ZonalModel, ZonalOptions, ZonalState

#: Names of :mod:`~wflow.phase.relaxation`, imported on first use (the PDE needs DOLFINx).
_LAZY = ("RelaxationRun", "relax_pde", "PDERelaxationCheck", "pde_relaxation_check",
         "HysteresisCheck", "hysteresis_check", "HysteresisSweep", "hysteresis_sweep")


def __getattr__(name: str):
    if name in _LAZY:
        from . import relaxation

        return getattr(relaxation, name)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


__all__ = [
    "funk_hecke_eigenvalues",
    "k_sharp",
    "tricritical_beta",
    "ZonalOptions",
    "ZonalModel",
    "ZonalState",
    "PhaseError",
    "ZonalBranch",
    "PhasePoint",
    "zonal_branch",
    "phase_point",
    "PhaseDiagram",
    "phase_diagram",
    "ExponentFit",
    "order_parameter_exponent",
    "DichotomyCheck",
    "check_dichotomy",
    "MeshOptions",
    "MeshModel",
    "MeshState",
    "MeshBranch",
    "MeshPhasePoint",
    "MeshRefinement",
    "NonzonalCheck",
    "mesh_branch",
    "mesh_phase_point",
    "mesh_refinement",
    "nonzonal_check",
    "ParticlePhaseRun",
    "particle_order_parameter",
    "stable_order_parameter",
    "ParticlePoint",
    "check_particle_point",
    "load_particle_points",
    "extrapolate_dt",
    "correct_dt",
    *_LAZY,
]
