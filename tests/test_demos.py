"""Every demo runs in quick mode and returns its pinned numbers; the slow suite runs every
demo at full size (as a plain script, as a user would) and every shipped scenario through
its command."""

from __future__ import annotations

import importlib.util
import os
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

ROOT = Path(__file__).resolve().parents[1]
DEMOS = sorted((ROOT / "demos").glob("*.py"))
TOMLS = sorted((ROOT / "demos").glob("*.toml"))
#: The command of a shipped scenario, from its name.
COMMAND = {"particles": ["particles"], "pde": ["pde"], "jko": ["jko"], "gaussian": ["gaussian"],
           "published": ["particles"],  # one H of a published experiment (reproduce: all H)
           "run": ["run", "--yes"]}  # the main job (run_jko_refinement_s2: ~30 min, slow)


def test_every_shipped_scenario_has_a_command():
    assert {t.stem.split("_")[0] for t in TOMLS} <= set(COMMAND)


def _run(args: list, timeout: float) -> subprocess.CompletedProcess:
    env = dict(os.environ, MPLBACKEND="Agg")
    r = subprocess.run([sys.executable, *map(str, args)], capture_output=True, text=True,
                       env=env, timeout=timeout, cwd=ROOT)
    assert r.returncode == 0, f"{' '.join(map(str, args))} failed:\n{r.stdout}\n{r.stderr}"
    assert r.stdout.strip(), f"{args} printed nothing"
    return r


def _load(demo: Path):
    spec = importlib.util.spec_from_file_location(f"demo_{demo.stem}", demo)
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


def _get(result: dict, path: str):
    for key in path.split("."):
        result = result[key]
    return result


#: Numbers each demo's ``main(quick=True)`` returns, pinned (as scikit-fem's example tests do).
#: Deterministic runs: relative 1e-6 (summation order may change with the thread count; the
#: runs are otherwise reproducible to round-off). A demo that ends in NaN, or whose physics
#: moved, fails here even when it exits 0.
PINNED = {
    "phase_diagram": {"beta_star": 1.8161545254358862, "k_sharp_beta3": 0.668809795493452,
                      "k_c_beta3": 0.6168721972981279, "k_fold_beta3": 0.6042237643901619,
                      "exponent_at": (0.2500013348530882, 2e-5), "discontinuous": 6},
    "gaussian_riccati": {
        "riccati.classification": "converges",
        "riccati.distance_to_PD_equilibrium": 0.001281646520106788,
        "blowup.t_star_closed_form": 1.5952185084422947,
        "blowup.t_star_detected": (1.5952185084422947, 1e-9),
        "reach.full_rank": "reached",
        "regimes.algebraic.fitted": 0.9992041767317645,
        "regimes.kernel.rank": 1,
    },
    "jko_clustering_s2": {
        "status": "success",
        "monotone": True,
        "cells": 720,
    },
    "multihead_critical_temperature": {
        "beta_star_blocks": 1.5601345773374307,
        "min_rate_below": 0.009487944272294824,
        "min_rate_above": -1.5330052634772962,
    },
    "particles_clustering_s2": {
        "status": "success",
        "E0": 0.7856461870521181,
        "E_T": 2.664877161829854,
        "G2_T": 0.0003748306062722205,
        "clusters_T": 2.0,
    },
    "particles_ou_vs_oscillating": {
        "ou.G2_late_mean": 0.06764721781663638,
        "oscillating.G2_late_mean": 0.06006442448210181,
        "ou.G2_initial": 0.1184576928431699,
    },
    "pde_clustering_s2": {
        "status": "success",
        "E0": 0.8506411100242524,
        "E_T": 2.167630355163493,
        "rho_max_T": 2.925263491713418,
        "rho_min": 0.003135805540564123,
        "edi_residual": -0.02604803119438759,
        "steps": 22,
        "mass_error": (0.0, 1e-15),  # conservative scheme: round-off
    },
    "pretrained_gaussianity": {
        "status": "success",
        "export.explained": 0.5286971149453489,
        # a Bures-Wasserstein distance between two nearly equal covariances, one of them
        # near-singular (PCA of a 3-layer random BERT): the matrix square root turns
        # eps-level eigenvalue perturbations into sqrt(eps) ones, so bw² moves by about
        # sqrt(eps)·tr S and rel = bw/sqrt(tr S) by sqrt(eps)/(2 rel) absolute, i.e.
        # sqrt(eps)/(2 rel²) = 2.9e-5 relative at rel = 0.016. Measured across OpenBLAS
        # kernels (Haswell, SkylakeX, Zen, Sandybridge): spread 4.3e-6 relative.
        "per_layer.layer0.attn_rel": (0.01597881133259242,
                                      np.sqrt(np.finfo(float).eps) / (2 * 0.01597881133259242)),
    },
    "published_experiments": {
        "s2_oscillating": -1.1757794644118313,
        "s2_ou": -0.841463196893385,
    },
    "noisy_clustering": {
        "status": "success",
        "D_sharp": 0.3678794411714427,
        "m_star": 0.8907830545204354,
        "fluctuation_above": 0.05641895835477563,
        # keyed noise streams (seed, token block, step): the same draws on every machine,
        # so the runs are deterministic. Round-off: 150 Strang steps of 5 field evaluations,
        # each a sum of n = 800 terms, ~750·800·eps relative per token; not amplified (a
        # 1e-13 perturbation of the initial tokens moves these by <= 1.2e-12 relative).
        # Eight times that bound, relative to the value.
        "m_late_below": (0.8796429247046543, 8 * 750 * 800 * np.finfo(float).eps * 0.88),
        "m_late_above": (0.061691955571286386, 8 * 750 * 800 * np.finfo(float).eps * 0.062),
    },
}


def test_every_demo_has_pinned_numbers():
    assert {d.stem for d in DEMOS} == set(PINNED)


@pytest.mark.parametrize("demo", DEMOS, ids=[d.stem for d in DEMOS])
def test_demo_quick(demo, tmp_path):
    """``main(quick=True)`` returns the pinned numbers (and a finite result)."""
    result = _load(demo).main(quick=True, out=tmp_path)
    for path, want in PINNED[demo.stem].items():
        got = _get(result, path)
        if isinstance(want, tuple):
            want, atol = want
            np.testing.assert_allclose(got, want, rtol=0, atol=atol, err_msg=path)
        elif isinstance(want, float):
            np.testing.assert_allclose(got, want, rtol=1e-6, err_msg=path)
        else:
            assert got == want, f"{demo.stem}: {path} = {got!r}, pinned {want!r}"


def test_demo_runs_as_a_script(tmp_path):
    """A demo is a plain script: ``python demos/X.py --quick --out DIR`` (the fastest one)."""
    _run([ROOT / "demos" / "particles_ou_vs_oscillating.py", "--quick", "--out", tmp_path],
         timeout=300)


@pytest.mark.slow
@pytest.mark.parametrize("demo", DEMOS, ids=[d.stem for d in DEMOS])
def test_demo_full_size(demo, tmp_path):
    _run([demo, "--out", tmp_path], timeout=3600)


@pytest.mark.slow
@pytest.mark.parametrize("toml", TOMLS, ids=[t.stem for t in TOMLS])
def test_shipped_scenario_through_its_command(toml, tmp_path):
    out = tmp_path / "out"
    _run(["-m", "wflow.cli", *COMMAND[toml.stem.split("_")[0]], toml, "--out", out],
         timeout=3600)
    assert (out / "summary.json").is_file()


@pytest.mark.slow
def test_main_job_on_the_jko_demo_scenario(tmp_path):
    """`wflow run demos/jko_clustering_s2.toml` (crashed in the JKO phase before the fix of
    the candidate balls, issue 14 item 4)."""
    out = tmp_path / "out"
    _run(["-m", "wflow.cli", "run", ROOT / "demos" / "jko_clustering_s2.toml", "--out", out],
         timeout=3600)
    assert (out / "summary.json").is_file() and (out / "report.md").is_file()
