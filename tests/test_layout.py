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
                                 "wflow.status"])
def test_every_public_name_resolves(pkg):
    """Each name of ``__all__`` exists (the top level's lazy ones included) and is not
    shadowed by a submodule of the same name."""
    import types

    mod = importlib.import_module(pkg)
    for name in mod.__all__:
        obj = getattr(mod, name)
        assert not isinstance(obj, types.ModuleType), f"{pkg}.{name} is a module"
