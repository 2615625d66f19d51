"""Gaussian transformer dynamics in ``R^d`` (docs/theory.md §7): one package, the solver rooms.

Model (self-attention + affine feed-forward, tokens in ``R^d``, no normalisation)::

    ẋ = A x + b + V ∫ y e^{<Bx, y>} dμ(y) / ∫ e^{<Bx, y>} dμ(y),

and for ``μ = N(m, Σ)`` the moment ODE ``ṁ = (A + V)m + VΣBm + b``,
``Σ̇ = AΣ + ΣAᵀ + VΣBΣ + ΣBᵀΣVᵀ`` (a differential Riccati equation).

Rooms, in data-flow order:

* :mod:`~wflow.gaussian.params` — ``GaussianParams`` and parameter paths (``ParamPath``);
* :mod:`~wflow.gaussian.options` — the ``wflow gaussian`` scenario schema;
* :mod:`~wflow.gaussian.moments` — right-hand side, PSD factors, Jacobian;
* :mod:`~wflow.gaussian.riccati` — closed forms, blow-up times, equilibria;
* :mod:`~wflow.gaussian.structure` — structural long-time rules (linear flow, ``A = 0``
  Lyapunov/kernel invariants, commuting closed form);
* :mod:`~wflow.gaussian.asymptotics` — exponential / algebraic rates read off a tail;
* :mod:`~wflow.gaussian.classify` — long-time classifier (:mod:`~wflow.gaussian.verdict`:
  its result) and phase diagrams;
* :mod:`~wflow.gaussian.bures` — Bures–Wasserstein distance and map;
* :mod:`~wflow.gaussian.particles` — the ``n``-particle system;
* :mod:`~wflow.gaussian.reach` — exact reachability by time-varying controls;
* :mod:`~wflow.gaussian.solver` — :func:`integrate_moments` and its result;
"""

from . import params
from .asymptotics import RateFit, fit_tail_rate
from .bures import bures_distance, bures_map, bures_wasserstein_distance
from .classify import LABELS, Classification, PhaseDiagram, classify, phase_diagram
from .moments import moment_rhs, psd_factor
from .options import GaussianScenario, PhaseSpec, load_gaussian_scenario, parse_gaussian_scenario
from .params import *  # noqa: F403 (its __all__: the parameters and their paths)
from .particles import ParticleRun, empirical_moments, particle_velocity, simulate_particles
from .reach import ReachPhase, ReachPlan, ReachResult, plan_controls, principal_rotation, reach
from .riccati import (
    Equilibrium,
    EquilibriumFamily,
    blowup_time_closed_form,
    blowup_time_isotropic,
    blowup_time_scalar,
    equilibria,
    equilibrium_families,
    riccati_closed_form,
    riccati_linearisation,
    riccati_residual,
    sym_basis,
)
from .solver import GaussianTrajectory, integrate_moments

__all__ = [
    *params.__all__,  # the parameters and their paths, as the room lists them
    "GaussianTrajectory",
    "moment_rhs",
    "psd_factor",
    "integrate_moments",
    "riccati_closed_form",
    "blowup_time_closed_form",
    "blowup_time_scalar",
    "blowup_time_isotropic",
    "riccati_residual",
    "riccati_linearisation",
    "sym_basis",
    "Equilibrium",
    "equilibria",
    "EquilibriumFamily",
    "equilibrium_families",
    "RateFit",
    "fit_tail_rate",
    "LABELS",
    "Classification",
    "PhaseDiagram",
    "classify",
    "phase_diagram",
    "bures_wasserstein_distance",
    "bures_distance",
    "bures_map",
    "particle_velocity",
    "ParticleRun",
    "simulate_particles",
    "empirical_moments",
    "ReachPhase",
    "ReachPlan",
    "ReachResult",
    "plan_controls",
    "principal_rotation",
    "reach",
    "GaussianScenario",
    "PhaseSpec",
    "load_gaussian_scenario",
    "parse_gaussian_scenario",
]
