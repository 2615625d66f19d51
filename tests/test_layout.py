"""The house: every solver package has the same rooms, and every public name resolves."""

from __future__ import annotations

import ast
import importlib
from pathlib import Path

import pytest

WFLOW = Path(__file__).resolve().parents[1] / "wflow"
SOLVERS = ("particles", "pde", "jko", "gaussian")


@pytest.mark.parametrize("pkg", SOLVERS)
def test_solver_packages_have_the_same_rooms(pkg):
    """options, solver (with the result) and the numerics; the scenario → files job of each
    lives in ``wflow/apps/jobs/`` (a solver package reads no scenario and writes no file)."""
    rooms = {p.stem for p in (WFLOW / pkg).glob("*.py")}
    assert {"__init__", "options", "solver"} <= rooms, sorted(rooms)
    assert "run" not in rooms, f"{pkg}/run.py: scenario → files jobs live in wflow/apps/jobs/"
    assert (WFLOW / "apps" / "jobs" / f"{pkg}.py").is_file()


@pytest.mark.parametrize("pkg", SOLVERS)
def test_solver_packages_write_no_files(pkg):
    """Writers (io.write_*, save_npz, run_directory) are called from the jobs
    (``wflow/apps/jobs/``) and the plots only, never from a solver's numerics."""
    writers = {"write_json", "write_csv", "save_npz", "run_directory", "atomic_write_text",
               "atomic_write_bytes", "savefig", "screenshot"}
    for path in (WFLOW / pkg).glob("*.py"):
        if path.stem == "plots":
            continue
        calls = {n.func.attr if isinstance(n.func, ast.Attribute) else getattr(n.func, "id", "")
                 for n in ast.walk(ast.parse(path.read_text())) if isinstance(n, ast.Call)}
        assert not calls & writers, f"{path.name} writes files: {sorted(calls & writers)}"


@pytest.mark.parametrize("pkg", ["wflow", *(f"wflow.{p}" for p in SOLVERS), "wflow.apps.reproduce",
                                 "wflow.apps.main", "wflow.kernels", "wflow.infra.io",
                                 "wflow.attention.schedules", "wflow.status"])
def test_every_public_name_resolves(pkg):
    """Each name of ``__all__`` exists (the top level's lazy ones included) and is not
    shadowed by a submodule of the same name."""
    import types

    mod = importlib.import_module(pkg)
    for name in mod.__all__:
        obj = getattr(mod, name)
        assert not isinstance(obj, types.ModuleType), f"{pkg}.{name} is a module"


#: Internal pieces: importable from their modules, not part of the face (``wflow.__all__``).
INTERNAL = {"KernelLog": "wflow.kernels", "KernelPlan": "wflow.kernels",
            "ParticleTerms": "wflow.kernels", "particle_terms": "wflow.kernels",
            "plan_kernel": "wflow.kernels", "euler_path": "wflow.particles",
            "EulerPath": "wflow.particles"}
#: What a user needs without knowing the house (issue #32): initial data, the jobs, the
#: studies, the extension points; one name per concept (the multi-head rate is not ``phi``).
FACE = {"initial_density", "sample_particles", "run_particles", "run_pde", "run_jko",
        "run_main_job", "run_experiments", "verify", "simulate", "solve_pde", "solve_jko",
        "INTEGRATORS", "SCHEDULE_TYPES", "equiangular_rate"}


def test_the_face_holds_the_public_names_and_no_internal_one():
    import wflow

    assert FACE <= set(wflow.__all__), sorted(FACE - set(wflow.__all__))
    assert not set(INTERNAL) & set(wflow.__all__), sorted(set(INTERNAL) & set(wflow.__all__))
    assert "phi" not in wflow.__all__
    for name, mod in INTERNAL.items():
        assert hasattr(importlib.import_module(mod), name), f"{mod}.{name}"
    kinds = importlib.import_module("wflow.attention.kinds")
    if hasattr(kinds, "register_kind"):  # the extension point of kinds, where it exists
        assert "register_kind" in wflow.__all__


def test_dir_lists_every_public_name_lazy_ones_included():
    """``dir(wflow)`` holds every name of ``__all__``, before any lazy name is loaded (a
    fresh interpreter: the heavy modules are not imported by ``dir``)."""
    import subprocess
    import sys

    code = ("import sys, wflow; d = set(dir(wflow)); missing = set(wflow.__all__) - d; "
            "assert not missing, sorted(missing); "
            "assert 'dolfinx' not in sys.modules and 'ot' not in sys.modules; print('ok')")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                         check=False)
    assert out.stdout.strip() == "ok", out.stderr


def test_the_dir_check_catches_a_missing_lazy_name(monkeypatch):
    """Negative control: a lazy name dropped from ``__dir__`` is missed by ``dir``."""
    import wflow

    monkeypatch.setattr(wflow, "_LAZY", {k: v for k, v in wflow._LAZY.items() if k != "run_pde"})
    assert "run_pde" not in dir(wflow) and "run_pde" in wflow.__all__


#: The numba back-ends: one compiled kernel per specialisation, kept in one file each.
LONG_FILE_EXEMPT = {"_numba.py", "_path_numba.py", "_fv_numba.py"}
#: Most lines of a module of wflow (the numba back-ends excepted).
MAX_LINES = 700
#: ... and of a room of the main job (``wflow/apps/main/``).
MAX_MAIN_ROOM_LINES = 500


def _too_long(paths, limit: int, root: Path = WFLOW) -> list[str]:
    return [f"{p.relative_to(root)}: {n} lines" for p in paths
            if p.name not in LONG_FILE_EXEMPT
            and (n := len(p.read_text().splitlines())) > limit]


def test_no_module_is_over_700_lines():
    """Rooms named after what they hold: no module over :data:`MAX_LINES` lines."""
    assert not _too_long(sorted(WFLOW.rglob("*.py")), MAX_LINES)
    assert not _too_long(sorted((WFLOW / "apps" / "main").glob("*.py")), MAX_MAIN_ROOM_LINES)


def test_the_line_rule_catches_a_long_file(tmp_path):
    """Negative control: a 701-line module is reported, an exempt back-end is not."""
    long = tmp_path / "long.py"
    long.write_text("x = 1\n" * (MAX_LINES + 1))
    exempt = tmp_path / "_numba.py"
    exempt.write_text(long.read_text())
    assert _too_long([long, exempt], MAX_LINES, tmp_path) == [f"long.py: {MAX_LINES + 1} lines"]
