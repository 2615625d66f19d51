"""The house: every solver package has the same rooms, and old import paths still work."""

from __future__ import annotations

import ast
import importlib
from pathlib import Path

import pytest

WFLOW = Path(__file__).resolve().parents[1] / "wflow"
SOLVERS = ("particles", "pde", "jko", "gaussian")


@pytest.mark.parametrize("pkg", SOLVERS)
def test_solver_packages_have_the_same_rooms(pkg):
    rooms = {p.stem for p in (WFLOW / pkg).glob("*.py")}
    assert {"__init__", "options", "solver", "run"} <= rooms, sorted(rooms)


@pytest.mark.parametrize("pkg", SOLVERS)
def test_only_run_writes_files(pkg):
    """Writers (io.write_*, save_npz, run_directory) are called from run.py (and plots) only."""
    writers = {"write_json", "write_csv", "save_npz", "run_directory", "atomic_write_text",
               "atomic_write_bytes", "savefig", "screenshot"}
    for path in (WFLOW / pkg).glob("*.py"):
        if path.stem in ("run", "plots"):
            continue
        calls = {n.func.attr if isinstance(n.func, ast.Attribute) else getattr(n.func, "id", "")
                 for n in ast.walk(ast.parse(path.read_text())) if isinstance(n, ast.Call)}
        assert not calls & writers, f"{path.name} writes files: {sorted(calls & writers)}"


OLD_PATHS = {
    "wflow": ["simulate", "euler_path", "ParticleOptions", "solve_pde", "PDEOptions",
              "integrate_moments", "GaussianParams"],
    "wflow.jobs": ["run_particles", "history_columns", "provenance"],
    "wflow.particles": ["simulate", "iterate", "time_grid", "INTEGRATOR_ORDER", "EulerPath"],
    "wflow.pde": ["solve_pde", "iterate_pde", "initial_density", "density_spec_from_scenario",
                  "pde_options_from_dict", "rotation_velocity", "run_pde", "render_snapshots",
                  "PDE_SPEC", "DENSITY_SPEC"],
    "wflow.jko": ["solve_jko", "iterate_jko", "jko_step", "cost_matrix", "pair_mobility",
                  "energy_gradient", "jko_options_from_dict", "run_jko", "run_jko_scenario",
                  "jko_refinement", "JKOWarning", "JKO_SPEC"],
    "wflow.gaussian": ["integrate_moments", "riccati_closed_form", "blowup_time_isotropic",
                       "bures_map", "simulate_particles", "psd_factor", "LayerSchedule"],
    "wflow.gaussian_riccati": ["classify", "equilibria", "phase_diagram", "LABELS"],
    "wflow.gaussian_reach": ["reach", "plan_controls", "principal_rotation"],
    "wflow.gaussian_scenario": ["load_gaussian_scenario", "GaussianScenario"],
    "wflow.gaussian_report": ["run_gaussian_scenario", "write_gaussian_run", "plot_reach"],
    "wflow.scenario": ["number", "choice", "boolean", "string", "take", "ScenarioError"],
}


@pytest.mark.parametrize("module", sorted(OLD_PATHS))
def test_public_names_importable_from_their_old_paths(module):
    mod = importlib.import_module(module)
    missing = [n for n in OLD_PATHS[module] if not hasattr(mod, n)]
    assert not missing, f"{module} lost {missing}"


@pytest.mark.parametrize("pkg", ["wflow", *(f"wflow.{p}" for p in SOLVERS), "wflow.reproduce",
                                 "wflow.status"])
def test_every_public_name_resolves(pkg):
    """Each name of ``__all__`` exists (the top level's lazy ones included) and is not
    shadowed by a submodule of the same name."""
    import types

    mod = importlib.import_module(pkg)
    for name in mod.__all__:
        obj = getattr(mod, name)
        assert not isinstance(obj, types.ModuleType), f"{pkg}.{name} is a module"
