"""The Gaussian dynamics' cost model: memory and time of ``wflow gaussian``.

The moment ODE itself is small (``d × d`` matrices, ``n_out`` outputs); the cost is the
libraries (matplotlib for the plots), the phase diagram (one classification per grid
point) and the particle check. Measured on the shipped demos (``/usr/bin/time -v``, peak
RSS and user + system CPU; ``demos/gaussian_blowup.toml``, ``gaussian_kernel.toml``:
149 MiB, 4.4–4.7 s without a phase diagram; ``gaussian_riccati.toml`` with a 41 × 41
phase diagram and 400 particles: 254 MiB, 7.8 s).
"""

from __future__ import annotations

from ..infra.estimate import Estimate
from .options import GaussianScenario

__all__ = ["BASELINE_BYTES", "STARTUP_SECONDS", "PHASE_POINT_SECONDS", "PHASE_POINT_BYTES",
           "PARTICLE_STEP_SECONDS", "estimate_gaussian"]

#: Resident size (bytes) of ``wflow gaussian`` without a phase diagram (149 MiB measured).
BASELINE_BYTES = 150 * 2**20
#: Start-up and one moment-ODE integration with its plots (4.4–4.7 CPU s measured).
STARTUP_SECONDS = 4.5
#: CPU seconds per point of the phase diagram (3.1 s over the 41² points of the Riccati
#: demo, above its start-up).
PHASE_POINT_SECONDS = 2e-3
#: Bytes per point of the phase diagram (105 MiB over 41² points, the Riccati demo).
PHASE_POINT_BYTES = 64e3
#: CPU seconds per particle and RK4 step of the particle check (an upper bound: the 400
#: particles × 40 steps of the Riccati demo take well under the phase diagram's time).
PARTICLE_STEP_SECONDS = 1e-6


def estimate_gaussian(scn: GaussianScenario) -> Estimate:
    """Estimate of ``wflow gaussian SCENARIO``: libraries, phase diagram, particle check.

    Memory ``BASELINE + PHASE_POINT_BYTES · n_x n_y``; time ``STARTUP + PHASE_POINT_SECONDS
    · n_x n_y + PARTICLE_STEP_SECONDS · n · steps`` (``n_x n_y`` the phase diagram's grid,
    ``n``, ``steps`` the particle check's; 0 where the scenario has none).
    """
    grid = 0.0 if scn.phase is None else float(len(scn.phase.x) * len(scn.phase.y))
    p = scn.particles or {}
    parts = {"libraries": float(BASELINE_BYTES), "phase diagram": PHASE_POINT_BYTES * grid}
    secs = (STARTUP_SECONDS + PHASE_POINT_SECONDS * grid
            + PARTICLE_STEP_SECONDS * float(p.get("n", 0)) * float(p.get("steps", 0)))
    steps = float(scn.run.get("n_out", 1))
    return Estimate("gaussian", sum(parts.values()), steps, secs, parts)
