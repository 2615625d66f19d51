"""`wflow reproduce glpr_phase | castin_ranks | metastable_staircase` (issue 25).

Exactness first: each re-implementation against numbers of the published code, run on this
machine on a small case (``tests/data/published_field``, how each was made is in
docs/reproduce_field.md):

* ``glpr_small.npz``: ``phase-diagrams.py --use_softmax --dmodel 2 --ntokens 8 --batch 64
  --betas 5`` with ``torch.manual_seed(7)`` (CPU, torch 2.14): β and record grids, the
  clustered-pair counts (integers, exactly) and the final tokens (to round-off: torch's
  BLAS and vectorised ``exp`` against wflow's compiled loop, 300 steps);
* ``castin_n3.json``: ``histograms.py`` (traditional self-attention) with ``n_per_dim = 3``
  under the same NumPy: iterations, convergence and ranks exactly, the limits' eigenvalues
  to the round-off of the iteration (Weyl's bound, :func:`_castin_eig_tol`);
* ``staircase_20k.npz``: ``staircase.py`` with ``max_iter = 20000`` for β = 500, 4000:
  the record count, the NaN tail and the final merged energy exactly, every energy to the
  round-off of its sum (:func:`_staircase_rtol`).

Portability: integers and discrete outcomes (iteration counts, convergence flags, ranks,
merges, NaN steps, clustered-pair counts) are compared exactly; floats against stored
references only to tolerances derived from ``eps`` and the computation's length. The
stored references were made with one BLAS kernel (OpenBLAS picks one per CPU:
``OPENBLAS_CORETYPE``) and one set of NumPy SIMD loops: another kernel rounds the same
operations differently (on AMD EPYC with the Haswell kernel the castin eigenvalues differ by
up to 637 eps·‖S‖ after 1 816–11 844 iterations, 24 of 12 237 staircase energies by ≤ 41
eps relative). "Bit for bit" is a property of one machine: it is tested within one process
(two runs give identical bytes: ``test_*_is_bitwise_repeatable``). ``.ci/run`` runs this
file again under a second CPU profile.

Then the verdicts and their negative controls through the public API, the command line in
quick mode, and MPI (two ranks give the serial numbers). Full scale, slow and pinned:
``tests/test_reproduce_field_full.py``.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

from wflow.apps.output_keys import contract_problems
from wflow.cli import main
from wflow.published import castin_ranks as cr
from wflow.published import glpr_phase as gp
from wflow.published import metastable_staircase as ms

ROOT = Path(__file__).resolve().parents[1]
DATA = ROOT / "tests" / "data" / "published_field"
MPIRUN = Path(sys.executable).parent / "mpirun"
EPS = np.finfo(float).eps


# --------------------------------------------------------------------------- glpr_phase
@pytest.fixture(scope="module")
def glpr_pub():
    with np.load(DATA / "glpr_small.npz") as z:
        return {k: z[k] for k in z.files}


def _glpr_opts(z, **kw):
    return gp.PhaseOptions(d=int(z["d"]), n=int(z["n"]), batch=int(z["batch"]),
                           n_beta=int(z["n_beta"]), seed=int(z["seed"]), **kw)


def test_glpr_grids_are_torch_linspace(glpr_pub):
    np.testing.assert_array_equal(gp.torch_linspace(0.1, 9, 5), glpr_pub["betas"])
    np.testing.assert_array_equal(gp.torch_linspace(0, 30, 200), glpr_pub["times"])
    # NumPy's linspace differs in the second half: the port matters
    assert not np.array_equal(np.linspace(0, 30, 200), glpr_pub["times"])
    n_steps, rec = gp.record_steps(0.1, 30.0, glpr_pub["times"])
    assert n_steps == 300 and rec[0] == 1 and rec[-1] == 300
    assert np.all(np.diff(rec) >= 0)


def test_glpr_counts_equal_the_published_run(glpr_pub):
    res = gp.run_phase(_glpr_opts(glpr_pub), keep_final=True)
    np.testing.assert_array_equal(res.counts, glpr_pub["counts"])
    np.testing.assert_array_equal(res.probability, glpr_pub["P"])
    xf = np.stack([res.final_x[k] for k in range(5)])
    # round-off only: 300 steps of a contracting map, a few ulps per step (observed 2.3e-14)
    np.testing.assert_allclose(xf, glpr_pub["final_x"], rtol=0, atol=300 * 64 * EPS)


def test_glpr_compiled_step_is_the_published_step():
    o = gp.PhaseOptions(n=8, batch=16, n_beta=1, seed=3)
    x = gp.initial_tokens(o, 0)
    rec = np.array([5], np.int64)
    _, xf = gp.phase_counts(x, 3.0, step=0.1, rec=rec, threshold=0.999)
    y = x
    for _ in range(5):
        y = gp.published_step(y, 3.0, 0.1)
    np.testing.assert_allclose(xf, y, rtol=0, atol=5 * 16 * EPS)


def test_glpr_numpy_stream_agrees_within_error_bars(glpr_pub):
    """Another sample of the same law: |P − P_pub| within 5 combined standard errors.

    The published run's error bars are those of wflow's run on its very systems (the
    torch stream, counts equal); a floor of one pair's weight covers records where one
    sample happens to be all 0 or all 1.
    """
    pub = gp.run_phase(_glpr_opts(glpr_pub))
    res = gp.run_phase(_glpr_opts(glpr_pub, generator="numpy"))
    se = np.sqrt(res.stderr**2 + pub.stderr**2) + 1.0 / res.pairs
    z = np.abs(res.probability - glpr_pub["P"]) / se
    assert z.max() <= 5, z.max()
    assert not np.array_equal(res.counts, glpr_pub["counts"])  # really another sample


def test_glpr_verdict_and_negative_controls():
    b = gp.torch_linspace(0.1, 9, 10)
    t = gp.torch_linspace(0, 30, 50)
    # clustering time growing with β: reproduced; the rows reversed: not reproduced
    th = 2 + 2 * b
    P = np.clip((t[None, :] - th[:, None]) / 4 + 0.5, 0, 1)
    se = np.full_like(P, 0.01)
    assert gp.judge_phase(b, t, P, se).verdict == "reproduced"
    assert gp.judge_phase(b, t, P[::-1], se).verdict == "not reproduced"
    # no clustering at all: not reproduced
    assert gp.judge_phase(b, t, np.zeros_like(P), se).verdict == "not reproduced"
    # the same diagram drowned in noise: not reproduced or inconclusive, never reproduced
    assert gp.judge_phase(b, t, P, np.full_like(P, 0.5)).verdict != "reproduced"


def test_glpr_options_refuse_a_stream_that_is_not_one():
    with pytest.raises(ValueError, match="divisible by 16"):
        gp.PhaseOptions(n=3, batch=5, d=3)


# --------------------------------------------------------------------------- castin_ranks
@pytest.fixture(scope="module")
def castin_pub():
    return json.loads((DATA / "castin_n3.json").read_text())


def _castin_eig_tol(S: np.ndarray, iterations: int) -> float:
    """Tolerance on the limit eigenvalues after ``iterations`` projected Euler steps.

    Each step ``Σ ← P(Σ + hR)`` is a few ``d × d`` products and one symmetric eigensolve,
    backward stable: another BLAS kernel perturbs the iterate by ``‖δΣ‖₂ ≲ c·eps·‖Σ‖₂``
    (``c`` of order ``d``) per step. Near the limit the map does not expand (the
    iteration converges), so after ``k`` steps the iterates differ by at most
    ``k·c·eps·‖Σ‖₂`` and, by Weyl's inequality ``|λᵢ(A) − λᵢ(B)| ≤ ‖A − B‖₂``, so do the
    eigenvalues. We take ``c = 1``: ``k·eps·‖Σ‖₂`` (measured on AMD EPYC, Haswell kernel:
    at most 0.12·k·eps·‖Σ‖₂, i.e. 637 eps·‖Σ‖₂ at k = 5 423).
    """
    return iterations * EPS * float(np.linalg.norm(S, 2))


def _check_castin(runs, pub, case):
    recs = [a for d in (3, 4, 5) for a in runs[case][d]["attempts"]]
    P = pub[case]["records"]
    assert len(recs) == len(P)
    for a, p in zip(recs, P, strict=True):
        # discrete outcomes: exactly
        assert a["iterations"] == p["n_iter"] and a["converged"] == p["converged"]
        S = np.array(p["S_last"])
        np.testing.assert_allclose(a["eigenvalues"], np.linalg.eigvalsh(S), rtol=0,
                                   atol=_castin_eig_tol(S, p["n_iter"]))
    assert [runs[case][d]["ranks"] for d in (3, 4, 5)] == pub[case]["ranks"]
    assert sum(runs[case][d]["exceptions"] for d in (3, 4, 5)) == pub[case]["exceptions"]


@pytest.fixture(scope="module")
def castin_identity_runs():
    return {lanes: cr.run_ranks(cr.RankOptions(n_per_dim=3, cases=("identity",), exact=False,
                                               lanes=lanes)) for lanes in (0, 128)}


@pytest.mark.parametrize("lanes", [0, 128])  # the scalar loop and the batched engine
def test_castin_identity_equals_the_published_run(castin_pub, castin_identity_runs, lanes):
    _check_castin(castin_identity_runs[lanes], castin_pub, "identity")


def test_castin_is_bitwise_repeatable(castin_identity_runs):
    """Bit for bit on one machine: a second run in this process gives identical bytes."""
    again = cr.run_ranks(cr.RankOptions(n_per_dim=3, cases=("identity",), exact=False,
                                        lanes=0))
    assert _sig(again) == _sig(castin_identity_runs[0])


def test_castin_tolerance_sees_a_changed_limit(castin_pub):
    """Negative control of the eigenvalue tolerance: a limit moved by 1e-10 (relative,
    ~4.5e5 eps, far below any verdict) is outside it."""
    runs = cr.run_ranks(cr.RankOptions(n_per_dim=3, dims=(3,), cases=("identity",),
                                       exact=False, lanes=0))
    runs["identity"][3]["attempts"][0]["eigenvalues"] = (
        runs["identity"][3]["attempts"][0]["eigenvalues"] * (1 + 1e-10))
    recs = runs["identity"][3]["attempts"]
    p = castin_pub["identity"]["records"][0]
    S = np.array(p["S_last"])
    assert np.abs(recs[0]["eigenvalues"] - np.linalg.eigvalsh(S)).max() > _castin_eig_tol(
        S, p["n_iter"])


def test_castin_batched_step_is_the_published_step():
    """Seven lanes of one batched iteration against the published scalar calls, bit for bit."""
    rng = np.random.default_rng(5)
    d, L, h = 4, 7, 0.06
    Q = rng.standard_normal((L, d // 2, d))
    G = rng.standard_normal((L, d, d))
    W = rng.standard_normal((L, d, d))
    S = G @ np.swapaxes(G, 1, 2)
    V = np.swapaxes(W, 1, 2) @ W
    A = np.stack([np.dot(-q.T, q) / np.sqrt(d) for q in Q])
    Sn, conv, div = cr.batched_euler_step(S, V, A, step=h, tol=5e-5)
    for m in range(L):
        R = cr.rhs_softmax(S[m], Q[m], -Q[m], V[m], d)
        np.testing.assert_array_equal(Sn[m], cr.psd_project(S[m] + h * R))
        assert conv[m] == (np.linalg.norm(R) < 5e-5)
        assert div[m] == (np.trace(Sn[m]) > 1e3)


_SMALL = {"dims": (3,), "n_per_dim": 3, "cases": ("identity", "random"), "max_iter": 2000,
          "exact": False}


def _sig(runs):
    return [(a["index"], a["iterations"], a["converged"], a["eigenvalues"].tobytes())
            for c in runs for a in runs[c][3]["attempts"]]


@pytest.fixture(scope="module")
def castin_scalar_small():
    return cr.run_ranks(cr.RankOptions(lanes=0, **_SMALL))


@pytest.mark.parametrize("lanes", [4, 64])
def test_castin_batched_loop_equals_the_scalar_loop(castin_scalar_small, lanes):
    """The speculative engine commits the published loop's attempts whatever it guesses.

    d = 3, both rows, ``max_iter = 2000``: converged attempts, attempts that stop at
    ``max_iter`` and attempts rejected for divergence (``tr Σ > 10³``), so the path of
    ``(attempt, draw)`` nodes branches; each lane count gives the scalar loop's attempts
    (iterations, outcome, limit eigenvalues bit for bit).
    """
    ref = castin_scalar_small
    got = cr.run_ranks(cr.RankOptions(lanes=lanes, **_SMALL))
    assert _sig(got) == _sig(ref)
    att = ref["random"][3]["attempts"]
    its = [a["iterations"] for a in att]
    assert 2000 in its and min(its) < 100 and any(a["converged"] for a in att)
    for c in got:
        assert got[c][3]["path_steps"] == ref[c][3]["path_steps"] == ref[c][3]["lane_steps"]
        assert got[c][3]["lane_steps"] >= got[c][3]["path_steps"]


def test_castin_loop_comparison_sees_a_changed_convention(castin_scalar_small):
    """Negative control of the comparison above: one step fewer changes the attempts."""
    other = cr.run_ranks(cr.RankOptions(lanes=16, **{**_SMALL, "max_iter": 1999}))
    assert _sig(other) != _sig(castin_scalar_small)


@pytest.mark.slow
def test_castin_random_v_equals_the_published_run(castin_pub):
    runs = cr.run_ranks(cr.RankOptions(n_per_dim=3, cases=("random",), exact=False))
    _check_castin(runs, castin_pub, "random")


def test_castin_exact_limit_is_the_ode_limit():
    rng = np.random.default_rng(0)
    for d in (3, 4, 5):
        Q = rng.standard_normal((d // 2, d))
        G = rng.standard_normal((d, d))
        S0 = G @ G.T
        A = -Q.T @ Q / np.sqrt(d)
        # the closed form solves the ODE: Σ(t) = (Σ0⁻¹ − 2tA)⁻¹ against LSODA at t = 3
        from scipy.integrate import solve_ivp

        def f(_t, y, d=d, Q=Q):
            return cr.rhs_softmax(y.reshape(d, d), Q, -Q, np.eye(d), d).ravel()

        sol = solve_ivp(f, (0, 3), S0.ravel(), rtol=1e-11, atol=1e-13)
        closed = np.linalg.inv(np.linalg.inv(S0) - 2 * 3 * A)
        np.testing.assert_allclose(sol.y[:, -1].reshape(d, d), closed, rtol=1e-8, atol=1e-10)
        Sinf, r, uns = cr.exact_limit(S0, Q, -Q, np.eye(d), identity=True)
        assert r == (d + 1) // 2 and uns == 0
        # Σ(t) = Σ∞ + C/t + O(t⁻²): Richardson on t = 1e6, 2e6 leaves O(1e-12) + round-off
        s1, s2 = (np.linalg.inv(np.linalg.inv(S0) - 2 * t * A) for t in (1e6, 2e6))
        np.testing.assert_allclose(Sinf, 2 * s2 - s1, rtol=0, atol=1e-6 * np.abs(S0).max())
        np.testing.assert_allclose(Sinf @ Q.T, 0, atol=1e-10 * np.abs(S0).max())
        # the integrated limit for a random V has the same kernel bound
        W = rng.standard_normal((d, d))
        _, r2, uns2 = cr.exact_limit(S0, Q, -Q, W.T @ W, identity=False, t_end=1e5)
        assert r2 + uns2 <= (d + 1) // 2


def test_castin_verdict_and_negative_control():
    runs = cr.run_ranks(cr.RankOptions(n_per_dim=2, cases=("identity",)))
    assert cr.judge_ranks(runs, 2).verdict == "reproduced"
    assert cr.control(runs, 2).verdict == "not reproduced"
    for d in (3, 4, 5):
        assert all(a["exact_rank"] == (d + 1) // 2 for a in runs["identity"][d]["attempts"])


# --------------------------------------------------------------------------- staircase
@pytest.fixture(scope="module")
def stair_pub():
    with np.load(DATA / "staircase_20k.npz") as z:
        return {k: z[k] for k in z.files}


def test_staircase_initial_angles(stair_pub):
    np.testing.assert_array_equal(ms.published_theta0(2000), stair_pub["theta0"])


def _staircase_rtol(beta: float, n: int = 5) -> float:
    """Relative tolerance on each energy ``E = n⁻² Σᵢⱼ e^{β(cos(θᵢ − θⱼ) − 1)}``.

    ``cos(θᵢ − θⱼ) − 1`` is computed to an absolute error ≲ 2 eps (the angle difference,
    of modulus ≤ π, rounded to ≤ eps; the cosine, faithfully rounded, to ≤ eps), which the
    factor ``β`` in the exponent turns into a relative error ``≤ 2β·eps`` of each term;
    the sum of ``n²`` positive terms adds ``≤ n²·eps``. The
    angles themselves agree to round-off (the merges and the NaN step agree exactly) and
    the contracting ascent does not amplify it. So ``(2β + n²)·eps`` (β = 500: 1 025 eps;
    measured on AMD EPYC, Haswell kernel: ≤ 41 eps, 24 of 12 237 energies not identical).
    """
    return (2 * beta + n * n) * EPS


@pytest.fixture(scope="module")
def stair_runs():
    return {b: ms.staircase_energy(ms.published_theta0(2000), b, lr=10e-6, max_iter=20000)
            for b in (500, 4000)}


@pytest.mark.parametrize("beta", [500, 4000])
def test_staircase_energies_equal_the_published_run(stair_pub, stair_runs, beta):
    E, info = stair_runs[beta]
    ref = stair_pub[f"E_{beta}"]
    # discrete outcomes exactly: the record count, the step of the 0/0, the five merges
    assert int(stair_pub[f"records_{beta}"]) == E.size
    assert np.isnan(E[ref.size:]).all() and info["nan_from"] == ref.size
    assert len(info["merges"]) == 5 and info["merges"][-1][0] == ref.size - 1
    assert E[ref.size - 1] == ref[-1] == 1.0  # the five tokens merged exactly before the 0/0
    np.testing.assert_allclose(E[:ref.size], ref, rtol=_staircase_rtol(beta), atol=0)


def test_staircase_is_bitwise_repeatable(stair_runs):
    """Bit for bit on one machine: a second run in this process gives identical bytes."""
    E, info = ms.staircase_energy(ms.published_theta0(2000), 500, lr=10e-6, max_iter=20000)
    assert E.tobytes() == stair_runs[500][0].tobytes()
    assert info["merges"] == stair_runs[500][1]["merges"]


def test_staircase_tolerance_sees_a_changed_step(stair_pub):
    """Negative control of the energy tolerance: the learning rate ×(1 + 1e-9) moves the
    energies beyond it (long before any verdict could notice)."""
    E, _ = ms.staircase_energy(ms.published_theta0(2000), 500, lr=10e-6 * (1 + 1e-9),
                               max_iter=20000)
    ref = stair_pub["E_500"]
    m = min(ref.size, int(np.isfinite(E).sum()))
    rel = np.abs(E[:m] - ref[:m]) / np.abs(ref[:m])
    assert rel.max() > _staircase_rtol(500)


def test_staircase_verdict_and_negative_control(stair_pub):
    series = {b: stair_pub[f"E_{b}"] for b in (500, 4000)}
    v = ms.judge_staircase(series, lr=10e-6)
    assert v.verdict == "reproduced", v.per_beta
    assert ms.control_ramp(series, lr=10e-6).verdict == "not reproduced"
    # an energy that falls is not the gradient-ascent staircase
    assert ms.judge_staircase({1: series[500][::-1]}, lr=10e-6).verdict == "not reproduced"


# --------------------------------------------------------------------------- command line
@pytest.mark.parametrize("name", ["glpr_phase", "castin_ranks", "metastable_staircase",
                                  "lost_in_the_middle", "mun_rosenzweig"])
def test_cli_quick(name, tmp_path):
    out = tmp_path / name
    rc = main(["reproduce", name, "--quick", "--out", str(out)])
    s = json.loads((out / "summary.json").read_text())
    assert rc == (0 if s["status"] == "success" else 1)  # the exit status follows it
    assert s["verdict"] in ("reproduced", "not reproduced", "inconclusive")
    assert not contract_problems(s, "reproduce")  # status, message, checks; keys
    assert s["claim"] and s["verdict_rule"] and s["paper"]
    for f in s["figures"]:
        assert (out / f).is_file() and (out / f).stat().st_size > 0
    assert (out / "report.md").read_text().startswith(f"# {name}")
    # every verdict here has a control that must fail
    ctl = {"glpr_phase": "control_reversed_beta", "castin_ranks": "control_bound_floor_d_over_2",
           "metastable_staircase": "control_ramp",
           "lost_in_the_middle": "control_mirrored_mask",
           "mun_rosenzweig": "control_wrong_bessel_index"}[name]
    assert s[ctl] == "not reproduced"
    _assert_checks(s)


def _assert_checks(s: dict) -> None:
    """The summary states its judged comparisons: each check {value, tolerance, passed,
    rule}, and the status is success exactly when every check passed."""
    checks = s["checks"]
    assert checks and all(set(c) == {"value", "tolerance", "passed", "rule"}
                          for c in checks.values()), checks
    assert all(isinstance(c["passed"], bool) and c["rule"] for c in checks.values())
    assert (s["status"] == "success") == all(c["passed"] for c in checks.values()), checks
    assert (s["status"] == "success") == (s["verdict"] == "reproduced")


@pytest.mark.parametrize("name, fault, status, failing", [
    # P(T) read after 5 steps: the tokens have not clustered yet
    ("glpr_phase", {"maxtime": 0.5}, "failed", "clustering_at_smallest_beta"),
    # 10 Euler steps: no draw converges in d = 4, 5 (the claim cannot be judged)
    ("castin_ranks", {"max_iter": 10}, "inconclusive", "identity_d5_converged"),
    # a step 100x the published one: the normalised ascent overshoots, the energy falls
    ("metastable_staircase", {"lr": 1e-3}, "failed", "beta_500_max_fall_over_rise"),
])
def test_field_checks_see_an_injected_fault(name, fault, status, failing, tmp_path):
    """Negative control of the checks: an option that breaks the claim (through the public
    API: the module's ``reproduce`` with changed options) gives a failing check and a
    non-success status."""
    mod, cls = {"glpr_phase": (gp, gp.PhaseOptions), "castin_ranks": (cr, cr.RankOptions),
                "metastable_staircase": (ms, ms.StaircaseOptions)}[name]
    mod.reproduce(out=tmp_path / name, options=cls.quick(**fault))
    s = json.loads((tmp_path / name / "summary.json").read_text())
    assert not contract_problems(s, "reproduce")
    _assert_checks(s)
    assert s["status"] == status and s["checks"][failing]["passed"] is False, s["checks"]


def test_cli_refuses_mixing_field_and_td(tmp_path):
    assert main(["reproduce", "glpr_phase", "castin_ranks", "--out", str(tmp_path / "x")]) == 2
    assert main(["reproduce", "glpr_phase", "s2", "--out", str(tmp_path / "y")]) == 2
    assert not (tmp_path / "x").exists() and not (tmp_path / "y").exists()


def test_cli_glpr_compares_with_published_data(glpr_pub, tmp_path):
    pub = tmp_path / "pub.npz"
    np.savez(pub, P=glpr_pub["P"], counts=glpr_pub["counts"])
    out = tmp_path / "g"
    opts = _glpr_opts(glpr_pub)
    gp.reproduce(out=out, options=opts, published=pub)
    s = json.loads((out / "summary.json").read_text())
    assert s["published_reference"]["records_differing"] == 0
    assert "glpr_phase.png" in s["figures"]


# --------------------------------------------------------------------------- MPI
needs_mpirun = pytest.mark.skipif(not MPIRUN.exists() and shutil.which("mpirun") is None,
                                  reason="mpirun not available")


@pytest.mark.mpi
@needs_mpirun
def test_glpr_two_ranks_equal_serial(tmp_path):
    env = dict(os.environ, OMP_NUM_THREADS="1", PYTHONPATH=str(ROOT))
    out = tmp_path / "par"
    r = subprocess.run([str(MPIRUN), "-n", "2", sys.executable, "-m", "wflow.cli", "reproduce",
                        "glpr_phase", "--quick", "--out", str(out)], capture_output=True,
                       text=True, timeout=600, cwd=ROOT, env=env)
    assert r.returncode == 0, r.stdout + r.stderr
    serial = gp.run_phase(gp.PhaseOptions.quick())
    with np.load(out / "glpr_phase.npz") as z:
        np.testing.assert_array_equal(z["counts"], serial.counts)
        np.testing.assert_array_equal(z["counts_sq"], serial.counts_sq)
    assert json.loads((out / "summary.json").read_text())["ranks"] == 2


# --------------------------------------------------------------------------- full scale
@pytest.mark.slow
def test_glpr_published_size_counts_equal_the_published_run():
    """2048 systems of 32 tokens, 4 β (``--betas 4 --seed 0``): every count exactly."""
    with np.load(DATA / "glpr_2048x32_4beta.npz") as z:
        ref = {k: z[k] for k in z.files}
    res = gp.run_phase(gp.PhaseOptions(n_beta=4, seed=0))
    np.testing.assert_array_equal(res.betas, ref["betas"])
    np.testing.assert_array_equal(res.counts, ref["counts"])
