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

from pathlib import Path

import numpy as np
import pytest

from . import test_particles_noise_mpi as noise_mpi
from .test_particles_noise_mpi import EPS, N, needs_mpirun

#: The noise test's script (system, 64-token blocks, the rank-keyed fault) up to its runs,
#: then the judged runs: both integrators with ``rtol``/``atol`` set.
SCRIPT = noise_mpi.SCRIPT.split("res = {}")[0] + """res = {}
for prefix, c in (("par", comm), ("ser", None if comm.Get_rank() == 0 else False)):
    if c is False:
        continue
    for integ in ("em", "strang"):
        opts = ParticleOptions(T=0.2, dt=0.05, integrator=integ, diffusion=0.3, seed=3,
                               kernel_backend="direct", clusters=False, rtol=0.1, atol=0.05)
        r = simulate(x, heads, attn, options=opts, comm=c)
        acc = r.checks["accuracy"]
        for key in ("moment_error", "moment_se", "moment_value"):
            res[f"{prefix}_{integ}_{key}"] = np.asarray(acc[key])
        res[f"{prefix}_{integ}_status"] = str(r.status)
        res[f"{prefix}_{integ}_seeds"] = np.array([acc["seed"], acc["seed_half"]])
if comm.Get_rank() == 0:
    np.savez(out, **res)
"""


def _run(P: int, tmp: Path, monkeypatch, rank_keyed: bool = False) -> dict:
    """The noise test's ``mpirun`` harness with this script."""
    monkeypatch.setattr(noise_mpi, "SCRIPT", SCRIPT)
    return noise_mpi._run(P, tmp, rank_keyed=rank_keyed)


def _tol() -> float:
    """Split tokens are within ``100 N ε`` of the serial ones (tests/test_particles_noise_mpi
    .py); a moment (a mean of tokens or of products of two) within twice that, the
    estimate ``2^q/(2^q − 1) ≤ 2`` times a difference of two: ``1000 N ε`` covers it."""
    return 1000 * N * EPS


@pytest.mark.mpi
@needs_mpirun
def test_split_verdict_equals_serial(tmp_path, monkeypatch):
    res = _run(2, tmp_path, monkeypatch)
    noise_mpi.assert_split_equals_serial(
        res, ("_moment_error", "_moment_se", "_moment_value"), _tol(), "P=2")
    for integ in ("em", "strang"):  # integers: exact
        assert np.array_equal(res[f"par_{integ}_seeds"], res[f"ser_{integ}_seeds"])


@pytest.mark.mpi
@needs_mpirun
def test_noise_keyed_by_rank_is_caught(tmp_path, monkeypatch):
    res = _run(2, tmp_path, monkeypatch, rank_keyed=True)
    err = float(np.max(np.abs(res["ser_em_moment_error"] - res["par_em_moment_error"])))
    assert err > 1e3 * _tol(), err
