"""wflow: the mean-field dynamics of transformers, computed and verified.

Tokens are points on ``S^{d-1}``, attention heads move them, depth is time. See
``docs/theory.md`` (in the repository, and on the documentation site) for every formula.
The public face:

* heads and attention: :class:`Heads`, :class:`Attention`, schedules in
  :mod:`wflow.attention.schedules`;
* the kernel: :func:`kernel_sums`; energies and velocities: :func:`evaluate`;
* solvers: :func:`simulate` (particles), :func:`solve_pde` (transformer PDE on a sphere
  mesh, :func:`load_mesh`), :mod:`wflow.jko` (JKO scheme), :mod:`wflow.gaussian`
  (Gaussian moment dynamics), :mod:`wflow.models` (a trained transformer, optional);
* initial data: :func:`initial_density` (cell densities on a mesh), :func:`sample_particles`
  (tokens drawn from cell masses);
* jobs (scenario → files, what the commands run): :func:`run_particles`, :func:`run_pde`,
  :func:`run_jko`, :func:`run_main_job` (``wflow run``), :func:`run_experiments`
  (``wflow reproduce``), :func:`verify` (``wflow verify STUDY``);
* theory checks: :mod:`wflow.multihead` (§6: :func:`equiangular_rate`, the early-time rate
  ``φ`` of one head, not the kernel's ``Φ``), :mod:`wflow.studies`;
* extension points: the registries :data:`INTEGRATORS` (particle integrators) and
  :data:`SCHEDULE_TYPES` (``[schedule] type``), attention kinds by :func:`register_kind`
  (:mod:`wflow.attention.kinds`); a scenario imports a user's file that registers them
  with ``modules = [...]``. Every registry is a :class:`Registry`; wherever a method's
  name is accepted its object is too, unregistered (an :class:`AttentionKind`, a
  :class:`ParticleIntegrator`, a PDE :class:`TimeIntegrator` or :class:`Limiter`, a
  :class:`JKOScheme`), as ``diffrax.diffeqsolve`` takes a solver instance.

Internal pieces (kernel plans and logs, the particle step's terms, the compiled Euler path)
stay importable from their modules (:mod:`wflow.kernels`, :mod:`wflow.particles`).

Heavy or optional pieces (DOLFINx, plotting, model readers) are imported lazily.
"""

from __future__ import annotations

# first: the wflow command's process holds a SIGTERM/SIGHUP/Ctrl-C that arrives while the
# package imports (nothing anywhere else; see the module)
from .infra import interrupts as _interrupts  # noqa: F401

# isort: split
from .apps.scenario import Scenario, load_scenario
from .attention.heads import Attention, Heads
from .attention.kinds import AttentionKind, register_kind
from .attention.schedules import (
    SCHEDULE_TYPES,
    CallableSchedule,
    Layers,
    OrnsteinUhlenbeck,
    Oscillating,
    Relaxed,
    Schedule,
    Static,
)
from .energy import (
    FieldEval,
    SlopeTerms,
    evaluate,
    head_energies,
    particle_field,
    slope_terms,
)
from .gaussian import GaussianParams, GaussianTrajectory, integrate_moments
from .gaussian import spec as _gaussian_spec  # noqa: F401  (registers its SolverSpec)
from .geometry.density import initial_density, sample_particles
from .geometry.harmonics import cell_moments, token_cross_sums, token_moments
from .geometry.moment_test import ControlVariates, MomentTest, control_variates, moment_test
from .geometry.transport import W2Result, w2_sphere, w2_sphere_sparse
from .infra.accuracy import StepController, Tolerance
from .infra.registry import Registry
from .infra.spec import SOLVERS, SolverSpec
from .infra.version import __version__
from .kernels import KernelInfo, KernelSums, kernel_sums
from .multihead import beta_star, c_star, equiangular_rate, lambda_c, radial_dominance
from .particles import INTEGRATORS, ParticleOptions, ParticleResult, simulate
from .results import Outcome, SolverResult, status_summary
from .status import Check, Claim, Reach, Status, Verdict, chain_check, worst_status

# isort: split
from .particles.integrators import ParticleIntegrator
from .phase import (
    DichotomyCheck,
    PhaseDiagram,
    PhasePoint,
    ZonalOptions,
    check_dichotomy,
    check_particle_point,
    funk_hecke_eigenvalues,
    k_sharp,
    order_parameter_exponent,
    particle_order_parameter,
    phase_diagram,
    phase_point,
    stable_order_parameter,
    tricritical_beta,
    zonal_branch,
)
from .phase.mesh import MeshOptions, mesh_phase_point, mesh_refinement, nonzonal_check

# isort: split
# causal attention: the mask and positional bias, the causal sums (issue 43)
from .attention.mask import ALiBi, Bias, Causal, refuse_masked
from .kernels.causal import causal_sums

__all__ = [
    "__version__",
    "Attention",
    "Heads",
    "Schedule",
    "Static",
    "OrnsteinUhlenbeck",
    "Oscillating",
    "Relaxed",
    "Layers",
    "CallableSchedule",
    "KernelSums",
    "KernelInfo",
    "kernel_sums",
    "FieldEval",
    "SlopeTerms",
    "evaluate",
    "head_energies",
    "particle_field",
    "slope_terms",
    "ParticleOptions",
    "ParticleResult",
    "simulate",
    "INTEGRATORS",
    "register_kind",
    "SCHEDULE_TYPES",
    "initial_density",
    "sample_particles",
    "Scenario",
    "load_scenario",
    "w2_sphere",
    "w2_sphere_sparse",
    "W2Result",
    "token_moments",
    "cell_moments",
    "moment_test",
    "MomentTest",
    "token_cross_sums",
    "control_variates",
    "ControlVariates",
    "beta_star",
    "c_star",
    "lambda_c",
    "equiangular_rate",
    "radial_dominance",
    "GaussianParams",
    "GaussianTrajectory",
    "integrate_moments",
    "load_mesh",
    "solve_pde",
    "PDEOptions",
    "PDEResult",
    "solve_jko",
    "JKOOptions",
    "JKOResult",
    "run_experiments",
    "ReproduceOptions",
    "ReproduceResult",
    "run_particles",
    "run_pde",
    "run_jko",
    "run_main_job",
    "verify",
    "Check",
    "chain_check",
    "Status",
    "worst_status",
    "SolverResult",
    "status_summary",
    "Tolerance",
    "StepController",
    "Outcome",
    "Verdict",
    "Claim",
    "Reach",
    # the noisy model's phase transition (issue 40, wflow.phase)
    "k_sharp",
    "tricritical_beta",
    "funk_hecke_eigenvalues",
    "ZonalOptions",
    "zonal_branch",
    "phase_point",
    "PhasePoint",
    "phase_diagram",
    "PhaseDiagram",
    "order_parameter_exponent",
    "check_dichotomy",
    "DichotomyCheck",
    "particle_order_parameter",
    "stable_order_parameter",
    "check_particle_point",
    "MeshOptions",
    "mesh_phase_point",
    "mesh_refinement",
    "nonzonal_check",
    "SolverSpec",
    "SOLVERS",
    "Registry",
    "AttentionKind",
    "ParticleIntegrator",
    "TimeIntegrator",
    "Limiter",
    "JKOScheme",
    # causal attention (issue 43)
    "Causal",
    "ALiBi",
    "Bias",
    "refuse_masked",
    "causal_sums",
    "solve_kinetic",
    "KineticOptions",
    "KineticResult",
    # the main job's particle W₂ (a seeded subsample beyond max_ot_points, with its floor)
    "ParticleW2",
    "particles_w2",
    "resolve_w2",
]

_LAZY = {  # name -> module; heavy imports (DOLFINx, POT, matplotlib) on first use
    "load_mesh": ".geometry.mesh",
    "solve_pde": ".pde", "PDEOptions": ".pde", "PDEResult": ".pde",
    "solve_jko": ".jko", "JKOOptions": ".jko", "JKOResult": ".jko",
    "run_experiments": ".apps.reproduce", "ReproduceOptions": ".apps.reproduce",
    "ReproduceResult": ".apps.reproduce",
    "run_particles": ".apps.jobs.particles", "run_pde": ".apps.jobs.pde",
    "run_jko": ".apps.jobs.jko", "run_main_job": ".apps.main", "verify": ".studies.registry",
    "TimeIntegrator": ".pde.integrators", "Limiter": ".pde.limiters",
    "JKOScheme": ".jko.schemes",
    "solve_kinetic": ".kinetic", "KineticOptions": ".kinetic", "KineticResult": ".kinetic",
    "ParticleW2": ".apps.main", "particles_w2": ".apps.main", "resolve_w2": ".apps.main",
}


def __getattr__(name: str):
    """Lazy access to the DOLFINx-, POT- and plotting-based API (imported on first use)."""
    if name in _LAZY:
        import importlib

        return getattr(importlib.import_module(_LAZY[name], __name__), name)
    raise AttributeError(f"module 'wflow' has no attribute {name!r}")


def __dir__() -> list[str]:
    """The module's names with the lazily loaded ones (:data:`_LAZY`), loaded or not."""
    return sorted(set(globals()) | set(_LAZY))
