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
        assert int(par["ranks"]) == 2
        assert 0 < int(par["owned"]) < 720  # the mesh really was distributed
        assert set(par.files) == set(serial)
        np.testing.assert_allclose(par["steps_t"], serial["steps_t"], rtol=0, atol=1e-12)
        for k in serial:
            if k in ("ranks", "owned"):
                continue
            scale = max(1.0, float(np.max(np.abs(serial[k]))))
            np.testing.assert_allclose(par[k], serial[k], rtol=0, atol=1e-10 * scale,
                                       err_msg=k)
        # mass exact on two ranks too (the flux form across the ranks' shared edges)
        mass = par["rho"] @ serial_areas()
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
