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
