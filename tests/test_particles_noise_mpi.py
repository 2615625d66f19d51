"""Token diffusion over MPI ranks: ``mpirun -n P`` equals the serial run, P = 1, 2, 3.

The token noise is keyed by (seed, path, token block, step), never by rank
(:mod:`wflow.particles.noise`), so a split run draws every token's serial numbers; what
differs is only the order of the attention sums (as for the noiseless split run,
tests/test_particles_mpi.py). Both stochastic integrators, blocks of 64 tokens so that
block and rank boundaries cross. Negative control: a run whose noise is keyed by rank
(each rank's rows drawn as a system of its own, through the public ``TokenNoise``) is
caught by the same comparison.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import textwrap
from pathlib import Path

import numpy as np
import pytest

ROOT = Path(__file__).resolve().parents[1]
MPIRUN = Path(sys.executable).parent / "mpirun"
EPS = float(np.finfo(np.float64).eps)
N = 301

needs_mpirun = pytest.mark.skipif(not MPIRUN.exists() and shutil.which("mpirun") is None,
                                  reason="mpirun not available")

SCRIPT = textwrap.dedent('''
    import sys
    import numpy as np
    from mpi4py import MPI
    import wflow.particles.noise as nz
    from wflow.attention.heads import Attention, Heads
    from wflow.geometry.sphere import sample_uniform
    from wflow.particles import ParticleOptions, simulate

    nz.TOKEN_BLOCK = 64  # blocks smaller than the ranks' shares: boundaries cross
    out, rank_keyed = sys.argv[1], sys.argv[2] == "1"
    if rank_keyed:  # the fault: every rank draws its rows as a system of its own
        real = nz.TokenNoise

        class ByRank(real):
            def __init__(self, seed, n, d, *, path=0, first=0, count=None, block=64):
                super().__init__(seed, count if count is not None else n, d, path=path,
                                 block=block)

        import wflow.particles.solver as solver
        solver.TokenNoise = ByRank
    comm = MPI.COMM_WORLD
    rng = np.random.default_rng(7)
    x = sample_uniform(NTOK, 3, rng)
    heads = Heads.random_symmetric(2, 3, rng, scale=0.8)
    attn = Attention("softmax", 1.0)
    res = {}
    # the split runs, then (rank 0) the serial ones: same tokens, heads, options
    for prefix, c in (("par", comm), ("ser", None if comm.Get_rank() == 0 else False)):
        if c is False:
            continue
        for integ in ("em", "strang", "strang-heun"):
            opts = ParticleOptions(T=0.2, dt=0.05, integrator=integ, diffusion=0.3, seed=3,
                                   kernel_backend="direct", clusters=False)
            r = simulate(x, heads, attn, options=opts, comm=c)
            res[f"{prefix}_{integ}_x"] = r.x
            res[f"{prefix}_{integ}_E"] = r.history["E"]
            res[f"{prefix}_{integ}_status"] = str(r.status)
    if comm.Get_rank() == 0:
        np.savez(out, **res)
''').replace("NTOK", str(N))


def _run(P: int, tmp: Path, rank_keyed: bool = False) -> dict:
    script = tmp / "noise_mpi.py"
    script.write_text(SCRIPT)
    out = tmp / f"out{P}{int(rank_keyed)}.npz"
    env = dict(os.environ, OMP_NUM_THREADS="1", NUMBA_NUM_THREADS="1",
               PYTHONPATH=str(ROOT))
    r = subprocess.run([str(MPIRUN), "-n", str(P), sys.executable, str(script), str(out),
                        "1" if rank_keyed else "0"], capture_output=True, text=True,
                       timeout=600, cwd=ROOT, env=env)
    assert r.returncode == 0, r.stdout + r.stderr
    with np.load(out) as d:
        return {k: d[k] for k in d.files}


def _tol() -> float:
    """A split sum of ``N`` terms differs by ``≤ 2 N ε`` relative; 4 steps (RK4: 5 field
    evaluations each) with Lipschitz constant ≤ 3 amplify it by ``< e^{0.6} · 20``:
    ``100 N ε`` (as tests/test_particles_mpi.py)."""
    return 100 * N * EPS


@pytest.mark.mpi
@needs_mpirun
@pytest.mark.parametrize("P", [1, 2, 3])
def test_noisy_split_run_equals_serial(tmp_path, P):
    res = _run(P, tmp_path)
    assert_split_equals_serial(res, ("_x", "_E"), _tol(), f"P={P}", status="success")


def assert_split_equals_serial(res: dict, keys: tuple[str, ...], tol: float, label: str,
                               status: str | None = None) -> None:
    """For every integrator in ``res``: the split run's status is the serial one's (and
    ``status`` when given), and every array ``keys`` of the two within ``tol``."""
    integs = sorted({k.split("_")[1] for k in res if k.startswith("ser_")})
    assert integs, "no serial runs recorded"
    for integ in integs:
        assert str(res[f"par_{integ}_status"]) == str(res[f"ser_{integ}_status"])
        assert status is None or str(res[f"ser_{integ}_status"]) == status
        for key in keys:
            a, b = res[f"ser_{integ}{key}"], res[f"par_{integ}{key}"]
            err = float(np.max(np.abs(a - b)))
            print(f"{label} {integ}{key}: max |split − serial| = {err:.2e}")
            assert err <= tol, (integ, key, err)


@pytest.mark.mpi
@needs_mpirun
def test_noise_keyed_by_rank_is_caught(tmp_path):
    res = _run(2, tmp_path, rank_keyed=True)
    err = float(np.max(np.abs(res["ser_em_x"] - res["par_em_x"])))
    assert err > 1e3 * _tol(), err
