"""The weak-error verdict over MPI ranks: ``mpirun -n 2`` equals the serial verdict.

Both runs of the estimate (the run at ``dt`` and the independent one at ``dt/2``) are split
over the ranks with the token noise keyed by global token block
(tests/test_particles_noise_mpi.py); the moments are computed on every rank from the
gathered tokens in global order. So the moments, their estimates and standard errors
equal the serial ones to the round-off of the split attention sums, and the verdict is
the same. Both stochastic integrators, blocks of 64 tokens so that block and rank
boundaries cross. Negative control: noise keyed by rank (each rank's rows drawn as a
system of its own, through the public ``TokenNoise``) is caught by the same comparison.
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
    for prefix, c in (("par", comm), ("ser", None if comm.Get_rank() == 0 else False)):
        if c is False:
            continue
        for integ in ("em", "strang"):
            opts = ParticleOptions(T=0.2, dt=0.05, integrator=integ, diffusion=0.3, seed=3,
                                   kernel_backend="direct", clusters=False, rtol=0.1,
                                   atol=0.05)
            r = simulate(x, heads, attn, options=opts, comm=c)
            acc = r.checks["accuracy"]
            for key in ("moment_error", "moment_se", "moment_value"):
                res[f"{prefix}_{integ}_{key}"] = np.asarray(acc[key])
            res[f"{prefix}_{integ}_status"] = str(r.status)
            res[f"{prefix}_{integ}_seeds"] = np.array([acc["seed"], acc["seed_half"]])
    if comm.Get_rank() == 0:
        np.savez(out, **res)
''').replace("NTOK", str(N))


def _run(P: int, tmp: Path, rank_keyed: bool = False) -> dict:
    script = tmp / "weak_mpi.py"
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
    """Split tokens are within ``100 N ε`` of the serial ones (tests/test_particles_noise_mpi
    .py); a moment (a mean of tokens or of products of two) within twice that, the
    estimate ``2^q/(2^q − 1) ≤ 2`` times a difference of two: ``1000 N ε`` covers it."""
    return 1000 * N * EPS


@pytest.mark.mpi
@needs_mpirun
def test_split_verdict_equals_serial(tmp_path):
    res = _run(2, tmp_path)
    for integ in ("em", "strang"):
        assert str(res[f"par_{integ}_status"]) == str(res[f"ser_{integ}_status"])
        assert np.array_equal(res[f"par_{integ}_seeds"], res[f"ser_{integ}_seeds"])
        for key in ("moment_error", "moment_se", "moment_value"):
            a, b = res[f"ser_{integ}_{key}"], res[f"par_{integ}_{key}"]
            err = float(np.max(np.abs(a - b)))
            print(f"P=2 {integ} {key}: max |split − serial| = {err:.2e}")
            assert err <= _tol(), (integ, key, err)


@pytest.mark.mpi
@needs_mpirun
def test_noise_keyed_by_rank_is_caught(tmp_path):
    res = _run(2, tmp_path, rank_keyed=True)
    err = float(np.max(np.abs(res["ser_em_moment_error"] - res["par_em_moment_error"])))
    assert err > 1e3 * _tol(), err
