"""The noisy PDE (token diffusion) under ``mpirun -n 2`` gives the serial result.

The Crank–Nicolson solves are distributed over the owned cells (PETSc rows); serial and
parallel CG differ only in the order of their reductions, so the results agree to the
solver tolerance (``rtol = 1e-13``), checked at 1e-10 as the noiseless MPI test.
Run as a module, this file is the parallel case itself:
``mpirun -n 2 python -m tests.test_pde_diffusion_mpi OUT.npz``.
"""

from __future__ import annotations

import sys

import numpy as np
import pytest

from .test_pde_mpi import mpirun, needs_mpirun


def case() -> dict[str, np.ndarray]:
    """Order-2 nonlocal USA run with token diffusion and the free-energy balance."""
    from wflow.attention.heads import Attention, Heads
    from wflow.geometry.mesh import load_mesh
    from wflow.pde import solve_pde

    sm = load_mesh("sphere_720.msh")
    res = solve_pde({"type": "vmf", "means": [[1, 0, 0], [0, 1, 0.3]], "kappas": [3, 2]},
                    Heads.bilinear(np.eye(3)), Attention("usa", 2.0), mesh=sm, T=0.3,
                    dt=0.05, order=2, n_saves=3, diffusion=0.2)
    assert res.status == "success", res.message
    out = {"rho": res.rho, "t": res.t, "steps_t": res.steps["t"], "E": res.steps["E"],
           "F": res.steps["free_energy"], "I": res.steps["free_dissipation"],
           "ranks": np.array(sm.comm.size), "owned": np.array(sm.num_owned)}
    for k, v in res.balance.items():
        out[f"b_{k}"] = np.array(v)
    return out


@pytest.mark.mpi
@needs_mpirun
def test_noisy_pde_two_ranks_equals_serial(tmp_path):
    out = tmp_path / "par.npz"
    r = mpirun(sys.executable, "-m", "tests.test_pde_diffusion_mpi", str(out))
    assert r.returncode == 0, r.stdout + r.stderr
    serial = case()
    with np.load(out) as par:
        got = {k: par[k] for k in par.files}
    assert int(got["ranks"]) == 2 and 0 < int(got["owned"]) < 720  # really distributed
    assert got.keys() == serial.keys()
    assert np.array_equal(got["steps_t"], serial["steps_t"])  # the same step sequence
    # densities, energies, free energies, Fisher informations and the balance: 1e-10
    worst = {k: float(np.max(np.abs(got[k] - serial[k]))
                      / max(1.0, float(np.max(np.abs(serial[k])))))
             for k in serial if k not in ("ranks", "owned")}
    assert max(worst.values()) <= 1e-10, worst
    # mass exact on two ranks too (the flux form across the ranks' shared edges)
    mass = got["rho"] @ serial_areas()
    assert np.max(np.abs(mass - mass[0])) <= 1e-14 * mass[0]


def serial_areas() -> np.ndarray:
    from wflow.geometry.mesh import load_mesh

    sm = load_mesh("sphere_720.msh")
    return sm.gather_owned(sm.areas)


if __name__ == "__main__":
    from mpi4py import MPI

    result = case()
    if MPI.COMM_WORLD.rank == 0:
        np.savez(sys.argv[1], **result)
