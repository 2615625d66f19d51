"""The kinetic limit of causal attention (:mod:`wflow.kinetic`): reductions, orders, invariants.

Measured (icosphere:320 unless said; USA or softmax, ``β = 2``, ALiBi ``λ = 2``, ``T = 0.5``):

* exact reductions: softmax with identical slices is :func:`~wflow.pde.solve_pde` on every
  slice (any ``S``, any bias), USA with ``S = 1`` is the PDE at half the time: 2e-16;
* time: Euler 1.06, SSP-RK2 2.01 (``dt`` = 0.05, 0.025, 0.0125 against ``dt/32``);
* space (mean vectors of the slices, 320/1280/5120 cells, ``dt = 0.6 h``, Richardson):
  upwind 0.92, limited linear + SSP-RK2 1.93;
* position (``S`` = 2, 6, 18 against 54 at the shared centres, L1 per slice): USA max over
  slices 2.03, softmax mean over slices 1.81 and max 1.17 (the first slice: the half slice's
  error relative to the mass ``s`` of ``μ_s`` is ``O(1/(S s))``); the shifted quadratures
  (strict / non-strict mask slice-wise) 0.79–1.14, softmax ``exclusive`` does not converge
  at the first slice (max error 0.38 at every ``S``).
"""

from __future__ import annotations

import sys

import numpy as np
import pytest

from wflow.attention.heads import Attention, Heads
from wflow.geometry.mesh import load_mesh
from wflow.infra.schema import ScenarioError
from wflow.kinetic import CumulativeMeasure, KineticOptions, slice_centres, solve_kinetic
from wflow.pde import PDEOptions, solve_pde
from wflow.status import Status

from .conftest import EPS

_MESHES: dict[int, object] = {}
A = np.diag([1.0, 0.6, 0.3])
HEADS = Heads.bilinear(A)
VMF2 = {"type": "vmf", "means": [[1, 0, 0], [0, 1, 0.3]], "kappas": [3, 2]}
S_LIST, S_REF = (2, 6, 18), 54  # odd multiples: the coarse centres are reference centres


def mesh(cells: int = 320):
    if cells not in _MESHES:
        _MESHES[cells] = load_mesh(f"icosphere:{cells}")
    return _MESHES[cells]


def fitted_order(h, err) -> float:
    return float(np.polyfit(np.log(h), np.log(err), 1)[0])


def rotating(S: int) -> list[dict]:
    """Slice densities smooth in ``s``: a vMF whose mean turns by ``π`` over ``[0, 1]``."""
    return [{"type": "vmf", "means": [[np.cos(np.pi * s), np.sin(np.pi * s), 0.3]],
             "kappas": [3.0]} for s in slice_centres(S)]


def ran(res) -> bool:
    """A run of fixed steps reached ``T`` conserved and positive, its time error not estimated.

    Without ``pde.rtol`` no accuracy check is judged: ``completed``, naming the remedy
    (tests/test_kinetic_accuracy.py judges runs with it).
    """
    return res.status == Status.COMPLETED and "pde.rtol" in res.message


def with_values(scale: float) -> Heads:
    """The heads with ``V`` scaled (a velocity fault of ``scale − 1``)."""
    return Heads(HEADS.Q, HEADS.K, scale * HEADS.V, HEADS.w)


# ----------------------------------------------------------------------------- options
def test_options_name_the_key_and_route_keywords():
    with pytest.raises(ScenarioError, match=r"kinetic\.S"):
        KineticOptions(S=0)
    with pytest.raises(ScenarioError, match=r"kinetic\.quadrature"):
        KineticOptions(quadrature="left")
    with pytest.raises(ScenarioError, match=r"kinetic\.alibi"):
        KineticOptions(alibi=-1.0)
    with pytest.raises(ScenarioError, match=r"kinetic\.pde\.diffusion"):
        KineticOptions(pde=PDEOptions(diffusion=0.1))
    with pytest.raises(ScenarioError, match=r"kinetic\.pde\.flow"):
        KineticOptions(pde=PDEOptions(flow="surrogate"))
    res = solve_kinetic("uniform", HEADS, Attention("usa", 1.0), mesh=mesh(80), S=2, alibi=1.0,
                        T=0.1, dt=0.05, n_saves=2, order=2)
    assert res.options.S == 2 and res.options.alibi == 1.0 and res.options.pde.order == 2
    assert res.rho.shape == (2, 2, 80) and res.mass.shape == (2, 2)
    # one kernel call per slice and velocity evaluation (the cumulative sums by prefix sums)
    assert res.stats["kernel_calls"] == 2 * res.stats["velocity_evals"] > 0


def test_refusals_through_the_public_api():
    from wflow.attention.mask import ALiBi

    with pytest.raises(ScenarioError, match=r"attention\.bias"):
        solve_kinetic("uniform", HEADS, Attention("softmax", 1.0, mask="causal",
                                                  bias=ALiBi(0.1)), mesh=mesh(80))
    with pytest.raises(ValueError, match=r"kinetic\.alibi"):
        solve_kinetic("uniform", HEADS, Attention("relu", 1.0), mesh=mesh(80), alibi=1.0)
    with pytest.raises(ValueError, match=r"rho0"):
        solve_kinetic(["uniform"] * 3, HEADS, Attention("usa", 1.0), mesh=mesh(80), S=2)


def test_prefix_sums_equal_the_matrix_of_a_user_bias():
    """ALiBi by prefix sums (``O(S)``) = the same bias as a callable, by the ``(S, S)`` matrix."""
    rng = np.random.default_rng(0)
    X = rng.random((7, 2, 5))
    lam = 1.7
    for c in (0.5, 0.0, 1.0):
        pre = CumulativeMeasure(7, c, alibi=lam)
        mat = CumulativeMeasure(7, c, bias=lambda s, t: -lam * (s - t))
        assert np.allclose(pre.apply(X), mat.apply(X), rtol=20 * EPS, atol=0)
        W = CumulativeMeasure(7, c).matrix()
        assert np.array_equal(W, np.tril(np.ones((7, 7)), -1) + c * np.eye(7))


# ----------------------------------------------------------------------------- reductions
@pytest.mark.parametrize("S, lam", [(1, 0.0), (3, 2.0)])
def test_softmax_identical_slices_are_the_pde(S, lam):
    """Softmax normalises ``μ_{s_k} ∝ ρ`` away: every slice is the transformer PDE of ``ρ``.

    The velocities agree to a few ulps (the same sums times a weight that cancels in
    ``Y/Z``), the upwind steps are the same: ``≤ 100 ε max ρ`` after 10 steps.
    """
    attn = Attention("softmax", 2.0)
    kin = solve_kinetic(VMF2, HEADS, attn, mesh=mesh(), S=S, alibi=lam, T=0.5, dt=0.05,
                        n_saves=3)
    pde = solve_pde(VMF2, HEADS, attn, mesh=mesh(), T=0.5, dt=0.05, n_saves=3, balance=False)
    assert ran(kin) and ran(pde)  # balance = false: nothing judged either
    err = np.max(np.abs(kin.rho - pde.rho[:, None, :]))
    assert err <= 100 * EPS * pde.rho.max(), err
    # negative control: a velocity fault of 2 % shows 10⁸ times above it
    bad = solve_kinetic(VMF2, with_values(1.02), attn, mesh=mesh(), S=S, alibi=lam, T=0.5,
                        dt=0.05, n_saves=3)
    assert np.max(np.abs(bad.rho - pde.rho[:, None, :])) > 1e6 * max(err, EPS)


def test_softmax_identical_slices_are_the_pde_under_a_schedule():
    """The same reduction with weights that move (an oscillating schedule, SSP-RK2)."""
    from wflow.attention.schedules import Oscillating, Parametrisation

    param, theta0 = Parametrisation.from_heads(HEADS, kind="bilinear")
    sch = Oscillating(param, theta0, amplitude=0.4, omega=2.0)
    attn = Attention("softmax", 2.0)
    kw = dict(mesh=mesh(80), T=0.4, dt=0.05, n_saves=3, order=2)
    kin = solve_kinetic(VMF2, sch, attn, S=2, alibi=1.0, **kw)
    pde = solve_pde(VMF2, sch, attn, balance=False, **kw)
    assert ran(kin) and ran(pde) and kin.stats["steps"] == pde.stats["steps"]
    assert np.max(np.abs(kin.rho - pde.rho[:, None, :])) <= 100 * EPS * pde.rho.max()


def test_usa_one_slice_is_the_pde_at_half_the_time():
    """``S = 1``, midpoint: the slice feels half its own mass, ``v = ½ v_USA[ρ]``."""
    attn = Attention("usa", 2.0)
    kin = solve_kinetic(VMF2, HEADS, attn, mesh=mesh(), S=1, T=0.5, dt=0.05, n_saves=3)
    pde = solve_pde(VMF2, HEADS, attn, mesh=mesh(), T=0.25, dt=0.025, n_saves=3,
                    balance=False)
    assert kin.stats["steps"] == pde.stats["steps"] == 10
    err = np.max(np.abs(kin.rho[:, 0] - pde.rho))
    assert err <= 100 * EPS * pde.rho.max(), err


def test_mask_strictness_has_one_limit_and_the_first_slice():
    """Either mask gives the same run; slice 0 of USA moves at ``O(1/S)``; ``exclusive``
    (nothing of the slice itself) keeps softmax's first slice still."""
    kw = dict(mesh=mesh(80), T=0.3, dt=0.05, n_saves=2)
    a = solve_kinetic(VMF2, HEADS, Attention("usa", 2.0), S=4, **kw)
    b = solve_kinetic(VMF2, HEADS, Attention("usa", 2.0, mask="causal_strict"), S=4, **kw)
    assert np.array_equal(a.rho, b.rho)
    moved = []
    for S in (4, 8):
        r = solve_kinetic(VMF2, HEADS, Attention("usa", 2.0), S=S, **kw)
        moved.append(np.sum(np.abs(r.rho[-1, 0] - r.rho[0, 0]) * r.areas))
    assert 1.8 < moved[0] / moved[1] < 2.2, moved
    still = solve_kinetic(VMF2, HEADS, Attention("softmax", 2.0), S=3, quadrature="exclusive",
                          **kw)
    assert np.array_equal(still.rho[-1, 0], still.rho[0, 0])
    assert not np.array_equal(still.rho[-1, 1], still.rho[0, 1])


# ----------------------------------------------------------------------------- invariants
@pytest.mark.parametrize("order", [1, 2])
def test_mass_per_slice_and_positivity_for_a_cap(order):
    """Caps (zero outside) under softmax + ALiBi: every slice's mass to round-off, ``ρ >= 0``.

    Bound: an Euler stage ``m + Δt·net`` rounds each cell by ``ε|m'_K|`` and each product by
    ``ε Δt|net_K|``, with ``Σ_K Δt|net_K| <= 2 Δt Σ_K out_K <= 2 Σ m`` under the CFL bound:
    ``3ε`` of the slice's mass; the SSP combination ``a m⁰ + b E(m)`` two more; the mass sums
    (pairwise) ``ε log₂ M`` twice. So ``ε (5 · stages + 2 log₂ M)`` relative.
    """
    caps = [{"type": "cap", "center": [np.cos(3 * s), np.sin(3 * s), 0.3], "radius": 0.7}
            for s in slice_centres(4)]
    res = solve_kinetic(caps, Heads.random_symmetric(2, 3, np.random.default_rng(2)),
                        Attention("softmax", 2.0), mesh=mesh(720), S=4, alibi=3.0, T=0.5,
                        dt=0.05, order=order, n_saves=3)
    assert ran(res), res.message
    stages = (res.stats["steps"] + res.stats["rejected_steps"]) * (1 if order == 1 else 2)
    bound = EPS * (5 * stages + 2 * np.log2(720))
    drift = np.max(np.abs(res.mass - res.mass[0]) / res.mass[0])
    print(f"order {order}: {stages} stages, mass drift {drift:.2e} (bound {bound:.2e}), "
          f"min rho {res.stats['rho_min']:.2e}")
    assert drift <= bound and res.stats["mass_error_max"] <= bound
    assert np.allclose(res.mass, 0.25, rtol=bound, atol=0)
    assert res.stats["rho_min"] >= 0 and np.all(res.rho >= 0)
    assert np.all(np.min(res.rho[0], axis=1) == 0)  # caps: zero outside, kept >= 0


# ----------------------------------------------------------------------------- orders
def usa_run(S: int, **kw):
    opts = dict(S=S, alibi=2.0, T=0.5, dt=0.025, n_saves=2)
    opts.update(kw)
    heads = opts.pop("heads", HEADS)
    return solve_kinetic(rotating(S), heads, Attention(opts.pop("kind", "usa"), 2.0),
                         mesh=mesh(), **opts)


@pytest.mark.parametrize("integrator, lo, hi", [("euler", 0.85, 1.2), ("ssprk2", 1.8, 2.3)])
def test_order_in_dt(integrator, lo, hi):
    """Fixed mesh and ``S = 4``, ``dt`` halved below the CFL bound: the integrator's order."""
    ref = usa_run(4, dt=0.05 / 32, time_integrator=integrator)
    dts = (0.05, 0.025, 0.0125)
    err = []
    for dt in dts:
        r = usa_run(4, dt=dt, time_integrator=integrator)
        assert r.stats["dt_min"] == pytest.approx(dt)  # the steps asked for, not the CFL's
        err.append(np.max(np.abs(r.rho[-1] - ref.rho[-1])))
    p = fitted_order(dts, err)
    print(f"time, {integrator}: errors {err}, fitted order {p:.3f}")
    assert lo <= p <= hi, (err, p)


@pytest.mark.parametrize("order, integrator, lo, hi", [(1, "euler", 0.8, 1.3),
                                                       (2, "ssprk2", 1.7, 2.4)])
def test_order_in_h(order, integrator, lo, hi):
    """Meshes of 320, 1280, 5120 cells (``h`` halved), ``dt = 0.6 h``: the slices' mean
    vectors (mesh-independent) converge at the space order (Richardson's ratio)."""
    means = []
    for n in (4, 8, 16):
        h = np.sqrt(4 * np.pi / (20 * n * n))
        r = solve_kinetic(rotating(4), HEADS, Attention("usa", 2.0), mesh=mesh(20 * n * n), S=4,
                          alibi=2.0, T=0.5, dt=0.6 * h, n_saves=2, order=order,
                          time_integrator=integrator)
        assert ran(r), r.message
        means.append(r.history["mean"][-1])
    d1, d2 = np.abs(means[0] - means[1]).max(), np.abs(means[1] - means[2]).max()
    p = float(np.log2(d1 / d2))
    print(f"space, order {order}: differences {d1:.3e}, {d2:.3e}, observed order {p:.3f}")
    assert lo <= p <= hi, (d1, d2, p)


def s_errors(kind: str, ref, **kw) -> list[np.ndarray]:
    """L1 error of every slice against the reference slice at its centre, per ``S``."""
    out = []
    for S in S_LIST:
        r = usa_run(S, kind=kind, **kw)
        step = S_REF // S
        ref_k = ref.rho[-1][np.arange(S) * step + step // 2]
        out.append(np.sum(np.abs(r.rho[-1] - ref_k) * r.areas, axis=1))
    return out


@pytest.fixture(scope="module")
def refs():
    return {kind: usa_run(S_REF, kind=kind) for kind in ("usa", "softmax")}


def test_order_in_one_over_S(refs):
    """The claim: order 2 in ``1/S`` (≥ 1.7 fitted) for USA in the max over slices; softmax
    2 in the mean over slices (≥ 1.5) and ≥ 1 in the max (the first slice)."""
    h = [1.0 / S for S in S_LIST]
    usa = s_errors("usa", refs["usa"])
    p_usa = fitted_order(h, [e.max() for e in usa])
    sm = s_errors("softmax", refs["softmax"])
    p_mean = fitted_order(h, [e.mean() for e in sm])
    p_max = fitted_order(h, [e.max() for e in sm])
    print(f"1/S: USA max {[e.max() for e in usa]} order {p_usa:.3f}; softmax mean order "
          f"{p_mean:.3f}, max order {p_max:.3f}")
    assert p_usa >= 1.7 and p_mean >= 1.5 and p_max >= 1.0, (p_usa, p_mean, p_max)


@pytest.mark.parametrize("fault", ["exclusive", "inclusive", "V+2%", "V-2%", "alibi+5%"])
def test_order_in_one_over_S_catches_faults(refs, fault):
    """Negative controls through the public API, judged by the same claim (USA, ≥ 1.7): the
    cumulative measure shifted by half a slice either way (the strict / non-strict mask
    slice-wise), the velocity off by ±2 %, the bias slope off by 5 %."""
    kw: dict = {}
    if fault in ("exclusive", "inclusive"):
        kw["quadrature"] = fault
    elif fault.startswith("V"):
        kw["heads"] = with_values(1.02 if "+" in fault else 0.98)
    else:
        kw["alibi"] = 2.0 * 1.05
    err = s_errors("usa", refs["usa"], **kw)
    p = fitted_order([1.0 / S for S in S_LIST], [e.max() for e in err])
    print(f"fault {fault}: errors {[e.max() for e in err]}, fitted order {p:.3f}")
    assert p < 1.7, p


# ----------------------------------------------------------------------------- MPI
def mpi_case() -> dict[str, np.ndarray]:
    """Order 2, softmax, ALiBi, four rotating slices on the shipped 720-cell mesh: fixed
    steps, and error control at ``rtol = 1e-4`` (its error norms are exact sums over the
    ranks, so the controller takes the same steps on any number of ranks)."""
    sm = load_mesh("sphere_720.msh")
    out = {"ranks": np.array(sm.comm.size), "owned": np.array(sm.num_owned)}
    for tag, kw in (("", {}), ("tol_", {"rtol": 1e-4})):
        res = solve_kinetic(rotating(4), HEADS, Attention("softmax", 2.0), mesh=sm, S=4,
                            alibi=2.0, T=0.3, dt=0.05, order=2, n_saves=3, **kw)
        assert (res.success and res.stats["error_rejected_steps"] > 0) if kw else ran(res), \
            res.message
        out.update({tag + "rho": res.rho, tag + "mass": res.mass,
                    tag + "steps_t": res.steps["t"], tag + "mean": res.history["mean"]})
        if kw:
            out["tol_error_norm"] = res.steps["error_norm"]
    return out


@pytest.mark.mpi
def test_two_ranks_equal_serial(tmp_path):
    """``mpirun -n 2`` (cells over ranks) gives the serial slices to 1e-12, with fixed steps
    and with error control (the same steps)."""
    from .test_pde_mpi import MPIRUN, mpirun

    if not MPIRUN.exists():
        pytest.skip("mpirun not available")
    out = tmp_path / "par.npz"
    r = mpirun(sys.executable, "-m", "tests.test_kinetic", str(out))
    assert r.returncode == 0, r.stdout + r.stderr
    serial = mpi_case()
    with np.load(out) as par:
        assert int(par["ranks"]) == 2 and 0 < int(par["owned"]) < 720
        for tag in ("", "tol_"):
            np.testing.assert_allclose(par[tag + "steps_t"], serial[tag + "steps_t"], rtol=0,
                                       atol=1e-12)
            for k in ("rho", "mass", "mean"):
                scale = float(np.max(np.abs(serial[tag + k])))
                np.testing.assert_allclose(par[tag + k], serial[tag + k], rtol=0,
                                           atol=1e-12 * scale, err_msg=tag + k)
        # the controller's inputs: exact sums of the local estimates, which are differences
        # of two solutions ~1e-4 apart (relative): the states' round-off (1e-16, the
        # velocity's sums in another order) is ~1e-12 of them; the same decisions follow
        np.testing.assert_allclose(par["tol_error_norm"], serial["tol_error_norm"],
                                   rtol=1e-9, atol=0)


if __name__ == "__main__":  # the parallel case: mpirun -n 2 python -m tests.test_kinetic OUT
    _res = mpi_case()
    from mpi4py import MPI

    if MPI.COMM_WORLD.rank == 0:
        np.savez(sys.argv[1], **_res)
