"""PDE tolerances: error control meets ``rtol``, and a step too large ends ``inaccurate``.

The flow is a prescribed, time-dependent, compressive velocity on the shipped 720-cell
mesh, upwind in space and SSP-RK2 in time (a linear system with a smooth solution: the
time error is the method's, not a limiter's). The error is measured at ``T`` against a
reference run at a step 100× smaller than the largest adaptive step of the finest
tolerance (its own error is ``≈ 10⁻⁴`` of the measured ones, order 2), in the controller's
norm: the scaled RMS :func:`~wflow.infra.accuracy.error_norm` over the cell densities,
``1`` = the tolerance. Three tolerances ``1e-3, 1e-4, 1e-5``: a smaller one needs a
reference of ``> 10⁵`` steps (over a minute on 2 shared cores).

Run as a module, this file is the MPI case: ``mpirun -n 2 python -m tests.test_pde_accuracy
OUT.npz``.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from functools import cache
from pathlib import Path

import numpy as np
import pytest

from wflow.geometry.mesh import load_mesh
from wflow.infra.accuracy import Tolerance, error_norm
from wflow.pde import PDEOptions, solve_pde

ROOT = Path(__file__).resolve().parents[1]
MPIRUN = Path(sys.executable).parent / "mpirun"
RTOLS = (1e-3, 1e-4, 1e-5)
A = np.array([0.3, 0.2, 1.0]) / np.linalg.norm([0.3, 0.2, 1.0])
RHO0 = {"type": "vmf", "means": [[1, 0, 0]], "kappas": [2.0]}


def velocity(x: np.ndarray, t: float) -> np.ndarray:
    """Tangential part of a fixed direction, with a time-varying speed (compressive)."""
    return (A[None] - (x @ A)[:, None] * x) * (1.5 + np.cos(4 * t))


def run(**kw):
    opts = dict(T=1.0, n_saves=2, order=1, time_integrator="ssprk2", dt=1.0)
    opts.update(kw)
    return solve_pde(RHO0, mesh=load_mesh("sphere_720.msh"), velocity=velocity, **opts)


def tol_of(rtol: float) -> Tolerance:
    return Tolerance(rtol=rtol, atol=rtol * 1e-2)


@cache
def adaptive(rtol: float):
    return run(rtol=rtol, atol=rtol * 1e-2)


@cache
def reference():
    return run(dt=adaptive(RTOLS[-1]).stats["dt_max"] / 100)


def measured(res, rtol: float) -> float:
    ref = reference().rho[-1]
    return error_norm(res.rho[-1] - ref, ref, ref, tol_of(rtol))


def test_options_rtol_atol_keys():
    assert PDEOptions().tolerance is None
    assert PDEOptions(rtol=1e-4).tolerance == Tolerance(rtol=1e-4, atol=1e-6)
    from wflow.infra.schema import ScenarioError
    from wflow.pde.options import pde_options_from_dict
    assert pde_options_from_dict({"rtol": 1e-5, "atol": 0.0})[1].tolerance.rtol == 1e-5
    for bad in ({"rtol": 0.0}, {"rtol": 1.0}, {"atol": -1.0}):
        with pytest.raises(ScenarioError, match=r"^pde\.(rtol|atol)"):
            pde_options_from_dict(bad)


def test_without_rtol_the_run_is_todays_bit_for_bit():
    a = run(dt=0.05)
    b = run(dt=0.05, rtol=None, atol=None, adaptive=False)
    assert np.array_equal(a.rho, b.rho) and np.array_equal(a.steps["dt"], b.steps["dt"])
    assert "error_norm" not in a.steps and not a.checks["tolerance"]["judged"]
    # control: the same run with a tolerance takes other steps
    c = run(dt=0.05, rtol=1e-3, atol=1e-5)
    assert not np.array_equal(a.steps["dt"], c.steps["dt"])


@pytest.mark.parametrize("rtol", RTOLS)
def test_error_control_meets_the_tolerance(rtol):
    res = adaptive(rtol)
    assert res.status == "success", res.message
    assert res.stats["accepted_steps"] == len(res.steps["dt"]) - 1
    assert res.stats["error_estimate"] <= 1.0
    assert res.checks["tolerance"]["passed"]
    assert res.steps["error_norm"].shape == res.steps["dt"].shape
    err = measured(res, rtol)
    # within 2x of the requested tolerance; measured 0.33, 0.34, 0.35 (not far below it
    # either: the control is not wastefully tight)
    assert 0.1 < err <= 2.0, err


def test_step_too_large_ends_inaccurate_with_a_remedy_that_meets_it():
    rtol = 1e-4
    bad = run(dt=0.05, rtol=rtol, atol=rtol * 1e-2, adaptive=False)
    assert bad.status == "inaccurate", bad.message
    chk = bad.checks["tolerance"]
    assert chk["estimate"] > 1 and "remedy: pde.dt =" in bad.message
    assert measured(bad, rtol) > 2.0  # the estimate was right: the run misses the tolerance
    good = run(dt=chk["dt_meeting"], rtol=rtol, atol=rtol * 1e-2, adaptive=False)
    assert good.status == "success", good.message
    assert measured(good, rtol) <= 2.0


def test_error_control_with_heads_and_where_it_is_refused():
    """The nonlocal velocity (a deterministic weight schedule) runs under error control."""
    from wflow.attention.heads import Attention, Heads
    from wflow.attention.schedules import Oscillating, Parametrisation

    heads = Heads.bilinear(np.stack([np.diag([1.0, 0.3, -0.2]), np.diag([0.8, 0.0, 0.4])]),
                           w=0.5, value_sign=1.0)
    param, theta0 = Parametrisation.from_heads(heads, kind="bilinear")
    sch = Oscillating(param, theta0, amplitude=0.4, omega=2.0)
    sm = load_mesh("sphere_720.msh")
    rho0 = {"type": "vmf", "means": [[1, 0, 0], [0, 1, 0.3]], "kappas": [3, 2]}
    res = solve_pde(rho0, sch, Attention("softmax", 1.5), mesh=sm, T=0.2, dt=0.05, order=2,
                    n_saves=2, rtol=1e-3)
    assert res.status == "success", res.message
    assert res.checks["tolerance"]["estimate"] <= 1.0
    with pytest.raises(ValueError, match=r"^pde\.rtol: .*token diffusion"):
        run(rtol=1e-3, diffusion=0.1)


def case() -> dict[str, np.ndarray]:
    """The MPI case: an error-controlled run (rank 0 writes it)."""
    res = adaptive(1e-4)
    sm = load_mesh("sphere_720.msh")
    return {"rho": res.rho, "dt": res.steps["dt"], "err": res.steps["error_norm"],
            "rejected": np.array(res.stats["error_rejected_steps"]),
            "ranks": np.array(sm.comm.size), "owned": np.array(sm.num_owned)}


@pytest.mark.mpi
@pytest.mark.skipif(not MPIRUN.exists() and shutil.which("mpirun") is None,
                    reason="mpirun not available")
def test_error_control_two_ranks_equals_serial(tmp_path):
    out = tmp_path / "par.npz"
    env = dict(os.environ, OMP_NUM_THREADS="1", OPENBLAS_NUM_THREADS="1")
    r = subprocess.run([str(MPIRUN), "-n", "2", sys.executable, "-m", "tests.test_pde_accuracy",
                        str(out)], capture_output=True, text=True, timeout=300, cwd=ROOT,
                       env=env)
    assert r.returncode == 0, r.stdout + r.stderr
    serial = case()
    with np.load(out) as par:
        assert int(par["ranks"]) == 2 and 0 < int(par["owned"]) < 720
        assert int(par["rejected"]) == int(serial["rejected"])
        # the same steps: the error norm is an exact cross-rank sum, the masses agree to
        # round-off (different summation orders of the fluxes only), so each step agrees to
        # 1e-10 of the time it reaches: a step that lands on an output time is that time
        # minus the accumulated steps, and carries their absolute difference (measured: the
        # last step of 126 off by 1.2e-10 of itself, 1.1e-12 absolute)
        t_reached = np.cumsum(serial["dt"])
        dev = np.abs(np.asarray(par["dt"]) - serial["dt"])
        assert np.all(dev <= 1e-10 * t_reached), (dev / t_reached).max()
        np.testing.assert_allclose(par["err"], serial["err"], rtol=1e-8, atol=1e-14)
        np.testing.assert_allclose(par["rho"], serial["rho"], rtol=0, atol=1e-12)


if __name__ == "__main__":
    data = case()
    from mpi4py import MPI
    if MPI.COMM_WORLD.rank == 0:
        np.savez(sys.argv[1], **data)


def test_a_run_with_nothing_judged_is_completed_and_its_remedies_judge_it():
    """No chain rule (a prescribed velocity; ``balance = false``) and no tolerance:
    ``completed``, naming why and the remedy; each remedy gives a judged ``success``
    (the controls: a judged check keeps the status the check gives)."""
    from wflow.attention.heads import Attention, Heads
    from wflow.status import Status

    bare = run(dt=0.05)
    assert bare.status == Status.COMPLETED
    assert "a prescribed velocity has no energy" in bare.message
    assert "set pde.rtol" in bare.message and "pde.balance" not in bare.message
    judged = run(dt=0.05, rtol=1e-3)
    assert judged.status == Status.SUCCESS and judged.checks["tolerance"]["passed"]
    mesh = load_mesh("icosphere:320")
    heads, attn = Heads.random_symmetric(2, 3, np.random.default_rng(0)), Attention("softmax", 1.0)
    kw = dict(mesh=mesh, T=0.2, dt=0.02, n_saves=2)
    off = solve_pde(RHO0, heads, attn, balance=False, **kw)
    assert off.status == Status.COMPLETED
    assert "pde.balance = false" in off.message and "leave pde.balance = true" in off.message
    on = solve_pde(RHO0, heads, attn, **kw)  # the chain rule judged
    assert on.status == Status.SUCCESS and on.checks["chain"]["passed"]
    assert "tolerance" not in on.checks
    assert np.array_equal(on.rho, off.rho)  # the verdict changes, not the numbers
    tol = solve_pde(RHO0, heads, attn, balance=False, rtol=1e-3, **kw)
    assert tol.status == Status.SUCCESS and tol.checks["tolerance"]["passed"]
