"""A solver owns what it knows: one SolverSpec each, nothing of it on the ground floor (issue 39).

* Every solver registers one :class:`~wflow.infra.spec.SolverSpec` (section, options,
  parser, estimate, keys, solve), and the assembled output-key table holds every key of
  every spec, each naming its solver's command.
* ``wflow/infra``'s generic rooms (the estimate check, the spec registry, the key matcher)
  import nothing of the solvers and name none of them; negative control: the checker flags
  a line that compares an integrator's name, as the former ``infra/estimate.py`` did.
"""

from __future__ import annotations

import ast
import re
from pathlib import Path

import pytest

import wflow
from wflow.apps import output_keys
from wflow.infra.output_keys import commands_of
from wflow.infra.spec import SOLVERS, SolverSpec

WFLOW = Path(wflow.__file__).resolve().parent
SOLVER_NAMES = ("particles", "pde", "jko", "gaussian", "kinetic")
#: The generic rooms of the ground floor this issue moved solver knowledge out of.
GENERIC = [WFLOW / "infra" / "estimate.py", WFLOW / "infra" / "spec.py",
           *sorted((WFLOW / "infra" / "output_keys").glob("*.py"))]
_NAMED = re.compile(r"\b(particles?|pde|jko|gaussian|rk4|euler|ssprk\d)\b", re.I)


def solver_knowledge(text: str) -> list[str]:
    """The imports of a solver package and the solver or method names in ``text``."""
    found = []
    for node in ast.walk(ast.parse(text)):
        if isinstance(node, ast.ImportFrom) and node.module and \
                any(p in SOLVER_NAMES for p in node.module.split(".")):
            found.append(f"import from {node.module}")
    found += [f"line {i}: {m.group(0)}" for i, line in enumerate(text.splitlines(), 1)
              for m in [_NAMED.search(line)] if m]
    return found


@pytest.mark.parametrize("path", GENERIC, ids=lambda p: p.name)
def test_the_ground_floor_names_no_solver(path):
    assert not solver_knowledge(path.read_text(encoding="utf-8")), path


def test_the_checker_flags_solver_knowledge():
    """Negative control: the line the former estimate had, and a solver import."""
    assert solver_knowledge('stages = 4 if integrator == "rk4" else 1\n')
    assert solver_knowledge("from ..jko.options import auto_steps_bound\n")
    assert not solver_knowledge("stages = method.stages()\n")


def test_every_solver_registers_one_spec_with_its_keys():
    assert set(SOLVER_NAMES) <= set(SOLVERS)
    table = {k.pattern: commands_of(k.where) for k in output_keys.SUMMARY_KEYS}
    columns = {(k.pattern, k.where) for k in output_keys.CSV_COLUMNS}
    for name in SOLVER_NAMES:
        spec = SOLVERS[name]
        assert isinstance(spec, SolverSpec) and spec.name == name
        assert callable(spec.parse) and callable(spec.estimate) and callable(spec.solve)
        assert spec.keys, name
        for k in spec.keys:  # each key of a solver names its command, and is in the table
            assert name in commands_of(k.where), (name, k.pattern, k.where)
            # in the table, naming at least the commands the solver names (another solver
            # writing the same key adds its own: wflow.kinetic.keys.SHARED_SUMMARY_KEYS)
            assert commands_of(k.where) <= table.get(k.pattern, set()), (name, k.pattern)
        assert all((k.pattern, k.where) in columns for k in spec.columns)
    # the sections the scenario validates on load: the specs' (gaussian has its own file)
    assert set(SOLVERS.sections()) == {"particles", "pde", "jko", "kinetic"}


def test_a_second_solver_cannot_take_a_registered_section():
    spec = SOLVERS["jko"]
    with pytest.raises(ValueError, match=r"section \[jko\] is already read"):
        SOLVERS.register(SolverSpec(name="other", section="jko", options=spec.options,
                                    parse=spec.parse, estimate=spec.estimate,
                                    solve=spec.solve))
    assert "other" not in SOLVERS
