"""The PDE solver under ``mpirun -n 2`` gives the serial result (to 1e-10).

Run as a module, this file is the parallel case itself:
``mpirun -n 2 python -m tests.test_pde_mpi OUT.npz``.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

ROOT = Path(__file__).resolve().parents[1]
MPIRUN = Path(sys.executable).parent / "mpirun"


def case() -> dict[str, np.ndarray]:
    """Order-2 nonlocal run with time-dependent softmax heads and full diagnostics."""
    from scipy.spatial.transform import Rotation

    from wflow.attention.heads import Attention, Heads
    from wflow.attention.schedules import Oscillating, Parametrisation
    from wflow.geometry.mesh import load_mesh
    from wflow.pde import solve_pde

    R = Rotation.from_rotvec([0.4, 0.7, -0.2]).as_matrix()
    A = np.stack([np.diag([1.0, 0.3, -0.2]), R @ np.diag([0.8, 0.0, 0.4]) @ R.T])
    heads = Heads.bilinear(A, w=0.5, value_sign=1.0)
    param, theta0 = Parametrisation.from_heads(heads, kind="bilinear")
    sch = Oscillating(param, theta0, amplitude=0.4, omega=2.0)
    sm = load_mesh("sphere_720.msh")
    res = solve_pde({"type": "vmf", "means": [[1, 0, 0], [0, 1, 0.3]], "kappas": [3, 2]},
                    sch, Attention("softmax", 1.5), mesh=sm, T=0.4, dt=0.05, order=2, n_saves=3,
                    entropy=True, head_rates=True)
    assert res.status == "success", res.message
    out = {"rho": res.rho, "t": res.t, "steps_t": res.steps["t"], "E": res.steps["E"],
           "ranks": np.array(sm.comm.size), "owned": np.array(sm.num_owned)}
    for k, v in res.history.items():
        out[f"h_{k}"] = v
    for k, v in res.balance.items():
        out[f"b_{k}"] = np.array(v)
    return out


def mpirun(*args: str, timeout: float = 120) -> subprocess.CompletedProcess:
    env = dict(os.environ, OMP_NUM_THREADS="1", OPENBLAS_NUM_THREADS="1")
    return subprocess.run([str(MPIRUN), "-n", "2", *args], capture_output=True, text=True,
                          timeout=timeout, cwd=ROOT, env=env)


needs_mpirun = pytest.mark.skipif(not MPIRUN.exists() and shutil.which("mpirun") is None,
                                  reason="mpirun not available")


@pytest.mark.mpi
@needs_mpirun
def test_pde_two_ranks_equals_serial(tmp_path):
    out = tmp_path / "par.npz"
    r = mpirun(sys.executable, "-m", "tests.test_pde_mpi", str(out))
    assert r.returncode == 0, r.stdout + r.stderr
    serial = case()
    with np.load(out) as par:
        assert int(par["ranks"]) == 2
        assert 0 < int(par["owned"]) < 720  # the mesh really was distributed
        assert set(par.files) == set(serial)
        # same step sequence, then every array to 1e-10 (different summation orders only)
        np.testing.assert_allclose(par["steps_t"], serial["steps_t"], rtol=0, atol=1e-12)
        for k in serial:
            if k in ("ranks", "owned"):
                continue
            scale = max(1.0, float(np.max(np.abs(serial[k]))))
            np.testing.assert_allclose(par[k], serial[k], rtol=0, atol=1e-10 * scale,
                                       err_msg=k)


@pytest.mark.mpi
@needs_mpirun
def test_cli_pde_under_mpirun(tmp_path):
    sc = tmp_path / "s.toml"
    sc.write_text("""
[attention]
kind = "usa"
[heads]
type = "random_symmetric"
H = 2
scale = 0.5
[density]
type = "cap"
center = [0, 0, 1]
radius = 0.8
[pde]
mesh = "sphere_720.msh"
T = 0.2
dt = 0.05
order = 1
n_saves = 2
""")
    r = mpirun(sys.executable, "-m", "wflow.cli", "pde", str(sc), "--out",
               str(tmp_path / "par"))
    assert r.returncode == 0, r.stdout + r.stderr
    r = subprocess.run([sys.executable, "-m", "wflow.cli", "pde", str(sc), "--out",
                        str(tmp_path / "ser")], capture_output=True, text=True, timeout=120,
                       cwd=ROOT)
    assert r.returncode == 0, r.stderr
    with np.load(tmp_path / "par" / "density.npz") as p, \
            np.load(tmp_path / "ser" / "density.npz") as s:
        np.testing.assert_allclose(p["rho"], s["rho"], rtol=0, atol=1e-10 * s["rho"].max())
    assert (tmp_path / "par" / "density.xdmf").is_file()


if __name__ == "__main__":
    from mpi4py import MPI

    result = case()
    if MPI.COMM_WORLD.rank == 0:
        np.savez(sys.argv[1], **result)
