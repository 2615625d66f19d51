"""The mean-field study's particle time step: its bias on the moments at T is small.

The study runs RK4 at ``dt = T/8`` (``PARTICLE_STEPS``); the moments of the same tokens at
``T`` move by less than ``STEP_BIAS_MAX`` when the step is divided by 4, so the time-step
bias stays small against the Monte Carlo error the study's test resolves. Negative control:
Euler at the same step moves them by far more (first order), and the check catches it.
"""

from __future__ import annotations

import numpy as np

from wflow.geometry.harmonics import token_moments
from wflow.particles import simulate
from wflow.studies import mean_field as mf


def _moments(x0, dt, integrator, L):
    heads, attn = mf._model()
    steps = round(mf.T_FINAL / dt)
    res = simulate(x0, heads, attn, T=mf.T_FINAL, dt=dt, integrator=integrator,
                   head_rates=False, clusters=False, record_every=steps)
    return token_moments(res.x[0], L)


def _tokens(n: int) -> np.ndarray:
    from wflow.geometry.density import initial_density
    from wflow.geometry.mesh import load_mesh
    from wflow.geometry.sphere import sample_cells

    mesh = load_mesh("sphere_5120.msh")
    rho0 = initial_density(mesh, mf.RHO0)
    verts = mesh.gather_owned(mesh.cell_vertices.reshape(-1, 9)).reshape(-1, 3, 3)
    areas = 0.5 * np.linalg.norm(np.cross(verts[:, 1] - verts[:, 0],
                                          verts[:, 2] - verts[:, 0]), axis=1)
    return sample_cells(verts, rho0 * areas, n, np.random.default_rng(3))


def test_rk4_step_bias_is_below_the_stated_bound():
    x0 = _tokens(2000)
    L = mf.MODES["full"]["L"]
    dt = mf.T_FINAL / mf.PARTICLE_STEPS
    bias = np.max(np.abs(_moments(x0, dt, "rk4", L) - _moments(x0, dt / 4, "rk4", L)))
    assert bias < mf.STEP_BIAS_MAX, f"RK4 moment change {bias:.2e} (bound {mf.STEP_BIAS_MAX})"
    # negative control: Euler at the study's step is first order, far above the bound
    euler = np.max(np.abs(_moments(x0, dt, "euler", L) - _moments(x0, dt / 4, "rk4", L)))
    assert euler > 10 * mf.STEP_BIAS_MAX, f"Euler moment change {euler:.2e}"
