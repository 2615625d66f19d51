"""The full mode of ``noisy-mean-field`` is sized for ``D`` off by ±1 %, and measured so.

Fast (no study run): reads ``bench/results/noisy_mean_field_power_full.json``, written by
``bench/noisy_mean_field_full.py``. The file's runs are of the module's current full
mode; its standard-error budget, recomputed here from its parts, gives the current
setting an expected power of at least 90 % at ±1 %, and every cheaper candidate (fewer
tokens × replicates; the former ``4000 × 80`` among them, the negative control) less;
the studies guide states the file's measured power and size.
"""

from __future__ import annotations

import json
import re
import sys
from pathlib import Path

import numpy as np
import pytest

from wflow.studies import noisy_mean_field as nmf

ROOT = Path(__file__).resolve().parents[1]
RESULTS = ROOT / "bench" / "results" / "noisy_mean_field_power_full.json"
GUIDE = ROOT / "docs" / "guide" / "studies.md"


@pytest.fixture(scope="module")
def data():
    return json.loads(RESULTS.read_text())


@pytest.fixture(scope="module")
def bench():
    sys.path.insert(0, str(ROOT / "bench"))
    try:
        import noisy_mean_field_full
    finally:
        sys.path.remove(str(ROOT / "bench"))
    return noisy_mean_field_full


def test_runs_are_of_the_current_full_mode(data):
    full = nmf.MODES["full"]
    st = data["setting"]
    assert (st["n"], st["R"], st["meshes"]) == (full["n"], full["R"], list(full["meshes"]))
    assert tuple(st["bias_centre"]) == nmf.particle_bias(full["n"], nmf.PARTICLE_STEPS)
    assert data["runs"] and all(r["criteria"] for r in data["runs"].values())
    # the former settings' rows are kept, under a key that says so
    assert [(o["setting"]["n"], o["setting"]["R"]) for o in data["old_settings"]] == [
        (4000, 80), (8000, 96), (8000, 144)]


def test_budget_rows_follow_from_their_parts(data, bench):
    b = data["budget"]
    for row in b["table"]:
        n, R = row["n"], row["R"]
        mc = b["mc_rel_at_4000x80"] * np.sqrt(4000 * 80 / (n * R))
        bias_se = nmf.particle_bias(n, nmf.PARTICLE_STEPS)[1]
        sigma = np.sqrt(mc ** 2 + b["pde_rel"] ** 2 + bias_se ** 2)
        # a few flops and one scipy quantile: relative 1e-12
        assert row["sigma_rel"] == pytest.approx(sigma, rel=1e-12)
        assert row["power_at_1pc"] == pytest.approx(
            bench.power(0.01 / sigma, R, b["null_spread"]), rel=1e-12)
    # the PDE's error and the bias's standard error are a small part of the variance
    assert (b["pde_rel"] / b["mc_rel_at_4000x80"]) ** 2 < 0.05


def test_full_mode_is_the_smallest_candidate_with_the_target_power(data, bench):
    full = nmf.MODES["full"]
    target = data["budget"]["power_target"]
    assert target == bench.POWER_TARGET == 0.99
    table = data["budget"]["table"]
    mine = [r for r in table if (r["n"], r["R"]) == (full["n"], full["R"])]
    assert len(mine) == 1 and mine[0]["power_at_1pc"] >= target
    # the Monte Carlo variance goes as 1/(n R), and a token costs about the same at every
    # n of the table: fewer tokens × replicates is the cheaper candidate
    cheaper = [r for r in table if r["n"] * r["R"] < full["n"] * full["R"]]
    # negative controls: the former settings are among them and fall short
    assert {(4000, 80), (8000, 96), (8000, 144)} <= {(r["n"], r["R"]) for r in cheaper}
    assert cheaper and all(r["power_at_1pc"] < target for r in cheaper)
    # and a run stays a few minutes of CPU
    assert mine[0]["run_cpu_s"] < 600


def stated(data) -> list[str]:
    """The guide's phrases that must quote the file: power per fault, size, its bound."""
    caught = data["caught"]
    size = data["size"]
    return [f"D ×0.99 caught {caught['pde-diffusion:-0.01']}",
            f"×1.01 caught {caught['pde-diffusion:0.01']}",
            f"{size['false_fails']}/{size['runs']} false fails",
            f"bound {100 * size['upper95']:.0f} %"]


def test_guide_states_the_measured_power_and_size(data):
    text = " ".join(GUIDE.read_text().split())
    missing = [p for p in stated(data) if p not in text]
    assert not missing, missing
    # negative control: a count the file does not hold is not found
    other = json.loads(json.dumps(data))
    other["size"]["runs"] += 1
    assert [p for p in stated(other) if p not in text]
    # the guide's full-mode setting is the module's
    n, R = nmf.MODES["full"]["n"], nmf.MODES["full"]["R"]
    assert re.search(rf"Full mode \(R = {R} × n = {n:,}".replace(",", " "), text)


def test_a_runs_score_follows_from_its_recorded_fit(data, bench):
    """The study's score, from the recorded fitted D and its s.e., on any centre."""
    # a subtraction, a hypot and a division of numbers of size 1e-3: relative 1e-12
    for r in data["runs"].values():
        assert bench.rescore(r, (0.0, 0.0)) == pytest.approx(r["score_t_raw"], rel=1e-12)
        assert bench.rescore(r, tuple(data["setting"]["bias_centre"])) == pytest.approx(
            r["score_t"], rel=1e-12)


def test_recentring_rejudges_only_the_score(data, bench):
    other = json.loads(json.dumps(data))
    D = nmf.DIFFUSION
    # negative control: a centre 5 standard errors high fails every correct run
    run = next(r for r in other["runs"].values() if r["fault"] == "none")
    bench.recentre(other, (0.05, 0.0))
    assert run["caught"] and not run["criteria"]["score_D_at_T"]["ok"]
    assert run["score_t"] < -run["score_t_crit"]
    assert "FAIL (score_D_at_T)" in run["verdict"]
    assert other["recentred"][-1]["bias_centre"] == data["setting"]["bias_centre"]
    # the exact centre of a run: its score is 0, the other criteria unchanged
    b = (run["D_fit"] - D) / D
    bench.recentre(other, (b, 0.0))
    assert abs(run["score_t"]) < 1e-9
    orig = data["runs"][f"none@{run['seed']}"]
    for name, c in run["criteria"].items():
        if name != "score_D_at_T":
            assert c == orig["criteria"][name]
    assert run["caught"] == (not all(c["ok"] for c in run["criteria"].values()))


def test_one_process_per_results_file(bench, tmp_path, capsys):
    """A second process on a results file another one holds is refused before any work."""
    import multiprocessing as mp

    from wflow.infra.lock import release

    out = tmp_path / "runs.json"
    ctx = mp.get_context("spawn")
    ready, done = ctx.Event(), ctx.Event()
    holder = ctx.Process(target=_hold, args=(str(out), ready, done))
    holder.start()
    try:
        assert ready.wait(60)
        assert bench.main(["--out", str(out)]) == 2
        assert "lock" in capsys.readouterr().err.lower()
        assert not out.exists()  # refused before writing
    finally:
        done.set()
        holder.join(60)
    # negative control: once the holder is gone, the same call runs (without seeds or a
    # budget it has nothing to write)
    try:
        assert bench.main(["--out", str(out)]) == 0
    finally:
        release(out)


def _hold(path, ready, done):
    from wflow.infra.lock import acquire

    acquire(path)
    ready.set()
    done.wait(60)
