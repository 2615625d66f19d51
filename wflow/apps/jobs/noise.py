"""Token diffusion ``D`` of a job: the scenario's ``[attention] diffusion`` or ``--diffusion``.

The scenario reads ``D`` once (:attr:`wflow.apps.scenario.Scenario.diffusion`, validated by
:func:`~wflow.attention.diffusion.check_diffusion`); a command's ``--diffusion D``
overrides it. Every job passes ``D`` to its solver's options
(``ParticleOptions.diffusion``, ``PDEOptions.diffusion``, ``JKOOptions.diffusion``) and
refuses a ``D > 0`` that has no effect in the solver it runs, naming the key it came
from (exit status 2): a deterministic particle integrator, the OT JKO scheme.
"""

from __future__ import annotations

from typing import Any

from ...attention.diffusion import DIFFUSION_KEY, check_diffusion
from ...infra.schema import ScenarioError

__all__ = ["FLAG", "job_diffusion", "check_particles_diffusion"]

#: The command-line flag that overrides ``[attention] diffusion``.
FLAG = "--diffusion"


def job_diffusion(scenario: Any, overrides: dict[str, Any]) -> tuple[float, str]:
    """``(D, key)``: the flag's ``D`` (popped from ``overrides``) or the scenario's.

    ``key`` names where ``D`` came from (``"--diffusion"`` or ``"attention.diffusion"``),
    for the refusals. A flag's ``D < 0``, NaN or inf raises
    :class:`~wflow.infra.schema.ScenarioError` naming ``--diffusion``.
    """
    given = overrides.pop("diffusion", None)
    if given is not None:
        return check_diffusion(given, FLAG), FLAG
    return float(getattr(scenario, "diffusion", 0.0)), DIFFUSION_KEY


def check_particles_diffusion(opts: Any, key: str = DIFFUSION_KEY, *,
                              integrator_key: str = "particles.integrator") -> None:
    """Refuse ``D > 0`` with a deterministic particle integrator (the noise would be lost).

    ``particles.integrator`` names a registered integrator; only a
    :class:`~wflow.particles.integrators.StochasticIntegrator` (``em``, ``strang``) moves
    the tokens by the noise.
    """
    if not opts.diffusion > 0:
        return
    from ...particles.integrators import INTEGRATORS, StochasticIntegrator

    integ = INTEGRATORS.resolve(opts.integrator, integrator_key)
    if not isinstance(integ, StochasticIntegrator):
        stoch = sorted(k for k, v in INTEGRATORS.items() if isinstance(v, StochasticIntegrator))
        raise ScenarioError(
            f"{key}: token diffusion D = {opts.diffusion:g} has no effect with the "
            f"deterministic particle integrator {integ.name!r}; set {integrator_key} to "
            f"a stochastic one ({', '.join(stoch)}) or D = 0")
