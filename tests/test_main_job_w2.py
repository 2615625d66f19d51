"""The main job's particle W₂ beyond ``max_ot_points``: a seeded random subsample, its
sampling floor, the sliced W₂ of every particle, and verdicts that account for the floor."""

from __future__ import annotations

import contextlib
import io

import numpy as np
import pytest

from tests.test_main_job import SCENARIO as _BASE
from wflow.apps.main import ParticleW2, particles_w2, resolve_w2, w2_label
from wflow.apps.main.verdicts import W2_GROWTH_TOL
from wflow.geometry.density import sample_particles
from wflow.geometry.mesh import load_mesh
from wflow.status import Verdict

# rotations of the cloud about the z axis (the density's bump sits on the x axis, so a
# rotation by δ moves it by δ): none, one that lands W₂(T) within the floor of the growth
# tolerance 3 W₂(0) (≈ 0.55 rad: W₂ ≈ 0.6 against 3 × 0.19 ± 0.22), one far beyond it
DELTAS = (0.0, 0.55, 1.4)


@pytest.fixture(scope="module")
def cells():
    mesh = load_mesh("icosphere:320")
    c = mesh.gather_owned(mesh.centroids)
    c = c / np.linalg.norm(c, axis=1, keepdims=True)
    nu = np.exp(5.0 * c @ np.array([1.0, 0.0, 0.0]))
    return mesh, c, nu / nu.sum()


def _rot(x: np.ndarray, d: float) -> np.ndarray:
    C, S = np.cos(d), np.sin(d)
    return x @ np.array([[C, -S, 0.0], [S, C, 0.0], [0.0, 0.0, 1.0]]).T


def _verdicts(cells, seed: int, n: int = 400, m: int = 100) -> tuple[list[Verdict], ParticleW2]:
    """The main job's growth rule on a cloud at t = 0 and rotated by each δ at later times."""
    mesh, c, nu = cells
    x = sample_particles(mesh, nu, n, np.random.default_rng([7, seed]))
    traj = np.stack([_rot(x, d) for d in DELTAS])
    pw = particles_w2(traj, c, [nu] * len(DELTAS), max_points=m, seed=(seed, 1),
                      projections=20)
    tol = W2_GROWTH_TOL * pw.value[0]
    return [resolve_w2(v, tol, pw.floor) for v in pw.value], pw


def test_all_particles_below_max_points(cells):
    mesh, c, nu = cells
    x = sample_particles(mesh, nu, 150, np.random.default_rng(1))
    pw = particles_w2(x[None], c, [nu], max_points=150)
    assert not pw.subsampled and pw.floor == 0.0 and pw.sliced is None
    assert pw.label == w2_label(150, 150) == "W₂ (all 150 particles)"
    # floor 0: the verdict is the plain comparison, never INCONCLUSIVE
    assert resolve_w2(1.0, 1.0, 0.0) is Verdict.PASS
    assert resolve_w2(1.0 + 1e-12, 1.0, 0.0) is Verdict.FAIL


def test_subsample_is_random_seeded_and_within_its_floor(cells):
    """Particles sorted by height: the first m would all sit on one side (what the main
    job used to take); the seeded random subsample stays within its floor of the exact
    W₂ of every particle, the sliced W₂ covers them all, and a seed gives one answer."""
    mesh, c, nu = cells
    x = sample_particles(mesh, nu, 600, np.random.default_rng(2))
    x = x[np.argsort(x[:, 2])]
    full = particles_w2(x[None], c, [nu], max_points=600).value[0]
    first = particles_w2(x[None, :150], c, [nu], max_points=150).value[0]
    pw = particles_w2(x[None], c, [nu], max_points=150, seed=(3, 1), projections=20)
    assert pw.subsampled and pw.m == 150 and pw.n == 600 and pw.seed == (3, 1)
    assert pw.label == "W₂ (subsample of 150 of 600 particles)"
    assert abs(pw.value[0] - full) <= pw.floor, (pw.value[0], full, pw.floor)
    assert first - full > 3 * pw.floor  # the first 150 miss the upper half of the cloud
    again = particles_w2(x[None], c, [nu], max_points=150, seed=(3, 1), projections=20)
    assert again.value[0] == pw.value[0] and again.floor == pw.floor
    assert again.sliced[0] == pw.sliced[0] and pw.sliced.shape == (1,)
    other = particles_w2(x[None], c, [nu], max_points=150, seed=(4, 1), projections=20)
    assert other.value[0] != pw.value[0]
    # two equally valid subsamples differ by less than the floor (triangle inequality)
    assert abs(other.value[0] - pw.value[0]) <= pw.floor


def _rates(cells, seeds) -> np.ndarray:
    out = np.zeros((len(DELTAS), 3))
    names = (Verdict.PASS, Verdict.INCONCLUSIVE, Verdict.FAIL)
    for s in seeds:
        vs, _ = _verdicts(cells, s)
        for i, v in enumerate(vs):
            out[i, names.index(v)] += 1
    return out / len(seeds)


def test_negative_control_perturbation_beyond_the_floor_is_caught(cells):
    """Through the public API (particles_w2 + resolve_w2, the main job's growth rule): the
    cloud unmoved passes, moved to within the floor of the tolerance is INCONCLUSIVE (not
    PASS or FAIL at random), moved beyond it FAILs; on every one of 12 seeds."""
    rates = _rates(cells, range(12))
    assert rates[0, 0] == 1.0 and rates[1, 1] == 1.0 and rates[2, 2] == 1.0, rates


@pytest.mark.slow
def test_negative_control_sized_over_200_seeds(cells):
    """The same over 200 seeds: the rates of PASS / INCONCLUSIVE / FAIL per perturbation
    (measured: see docs/guide/main_job.md, "W₂ beyond max_ot_points")."""
    rates = _rates(cells, range(200))
    print("rates PASS/INCONCLUSIVE/FAIL per delta", DELTAS, rates.tolist())
    assert rates[0, 2] == 0.0 and rates[2, 0] == 0.0  # never the opposite verdict
    assert rates[0, 0] >= 0.98 and rates[1, 1] >= 0.95 and rates[2, 2] >= 0.98, rates


# ----------------------------------------------------------------------------- the main job
# the main job's test scenario (720 cells, 300 particles), no JKO, no figures
SCENARIO = (_BASE.replace("JKO", "false").replace("RENDER", "false")
            + "max_ot_points = MAXOT\n")


@pytest.fixture(scope="module")
def subsampled_run(tmp_path_factory):
    """``wflow run`` of the test scenario with max_ot_points = 100 (300 particles)."""
    from wflow.cli import main

    root = tmp_path_factory.mktemp("subsampled")
    p = root / "run.toml"
    p.write_text(SCENARIO.replace("MAXOT", "100"))
    out = root / "out"
    term = io.StringIO()
    with contextlib.redirect_stdout(term):
        assert main(["run", str(p), "--out", str(out)]) == 0
    return p, out, term.getvalue()


def test_main_job_names_its_subsample_everywhere_and_renders_nothing(subsampled_run):
    """300 particles above max_ot_points = 100: one label on the terminal, in summary.json,
    the verdict table, report.md and the estimate; the floor, seed and the sliced W₂ of all
    particles recorded and explained by the key table; render = false writes no image."""
    import csv
    import json

    from wflow.apps.output_keys import contract_problems, flatten, unexplained

    _, out, term = subsampled_run
    label = "W₂ (subsample of 100 of 300 particles)"
    s = json.loads((out / "summary.json").read_text())
    w = s["w2"]
    assert w["label"] == label and w["points"] == 100 and w["subsampled"]
    assert w["subsample_seed"] == [3, 4343] and w["subsample_floor"] > 0
    assert 0 < w["sliced_all"] < w["particles_vs_pde"] and w["sliced_all_initial"] > 0
    assert f"{label} vs PDE" in term  # the result line
    from wflow.apps.main.estimate import estimate_main_job

    est = estimate_main_job(cells=720, n=300, H=2, T=1.0, dt=0.05, n_saves=4,
                            steps_per_save=2, jko=False, refinement=0, max_ot_points=100)
    assert any(k.startswith(f"{label} vs PDE") for k in est.parts) or label in repr(est)
    row = next(v for v in s["verdicts"] if v["quantity"].startswith("W₂ ("))
    assert row["quantity"] == f"{label} vs PDE (max over t)" and "floor" in row["tolerance"]
    rep = (out / "report.md").read_text()
    assert label in rep and "sampling floor" in rep and "sliced spherical W₂ of all 300" in rep
    assert contract_problems(s, "run") == [] and unexplained(flatten(s)) == []
    with open(out / "w2.csv") as fh:
        cols = next(csv.reader(line for line in fh if not line.startswith("#")))
    assert "sliced_w2_all_particles_vs_pde" in cols and unexplained(cols, csv=True) == []
    # render = false: no figure of any kind, and the report links none
    assert sorted(f.name for f in out.iterdir() if f.suffix == ".png") == []
    assert "![" not in rep and "render = false" in rep


def test_interrupted_compare_resumes_piece_by_piece(subsampled_run, tmp_path, monkeypatch):
    """An interrupt in the compare phase (during the moment test's replicates) keeps the
    finished pieces; --resume computes only the rest and equals an uninterrupted run."""
    import json

    import wflow.apps.main as mj
    from wflow.apps.main import phases as mj_phases

    p, ref_out, _ = subsampled_run  # the uninterrupted run
    ref = json.loads((ref_out / "summary.json").read_text())
    real, calls, first = mj_phases._run_particles, [], []

    def counted(*a, rep=None, **k):
        if rep is not None:
            calls.append(rep)
            if len(calls) == 5 and not first:
                raise KeyboardInterrupt
        return real(*a, rep=rep, **k)

    monkeypatch.setattr(mj_phases, "_run_particles", counted)
    with pytest.raises(KeyboardInterrupt):
        mj.run_main_job(p, tmp_path / "out")
    ck = tmp_path / "out.ckpt"
    saved = sorted(f.name for f in ck.glob("compare.*.pkl"))
    assert "compare.w2_particles.pkl" in saved and "compare.moments_coarse_pde.pkl" in saved
    assert sum(n.startswith("compare.moments_replicate_") for n in saved) == 4, saved
    first += calls
    calls.clear()
    res = mj.run_main_job(None, tmp_path / "out", resume=True)
    assert calls and not set(calls) & set(first[:4]), (first, calls)  # none run again
    written = json.loads((tmp_path / "out" / "summary.json").read_text())
    for k in ("edi", "w2", "moments", "mass_error"):
        assert written[k] == ref[k], k
    assert res.summary["resumed"]["restored_phases"] == ["pde", "particles"]
    assert not ck.exists()
