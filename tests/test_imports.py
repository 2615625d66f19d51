"""The import graph of wflow: data flows one way, no cycles, no private names across packages.

Every ``from ... import`` anywhere in a module counts, function-level imports included
(a function-level import that closes a loop is still a loop). Rank = the data flow of
``docs/theory.md``'s map of the code: a module imports only from its own rank or below.
"""

from __future__ import annotations

import ast
import sys
from pathlib import Path

import pytest

WFLOW = Path(__file__).resolve().parents[1] / "wflow"

#: Rank of each part of the house (longest prefix wins), in data-flow order.
RANKS = {
    "wflow.infra": 0,
    "wflow.geometry": 1,
    "wflow.attention": 2,
    "wflow.kernels": 3,
    "wflow.energy": 4,
    "wflow.diagnostics": 5,
    "wflow.status": 5,
    "wflow.results": 5,
    "wflow.multihead": 6,
    "wflow.particles": 7,
    "wflow.pde": 7,
    "wflow.jko": 8,
    "wflow.kinetic": 8,  # the causal kinetic limit: the PDE's finite volumes per slice
    "wflow.gaussian": 7,
    "wflow.models": 8,
    # the noisy model's phase transition: closed forms and continuation (attention, SciPy)
    "wflow.phase": 9,
    # the field's reproductions run, judge and write like studies (their StudyResult)
    "wflow.published": 10.5,
    "wflow.studies": 10,
    "wflow.apps": 11,
    "wflow.commands": 12,
    "wflow.cli": 13,
    "wflow": 14,  # the top-level __init__ re-exports the public face
}


def _module_name(path: Path) -> str:
    parts = list(path.relative_to(WFLOW.parent).with_suffix("").parts)
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def _exists(mod: str) -> bool:
    p = WFLOW.parent / Path(*mod.split("."))
    return p.with_suffix(".py").is_file() or (p / "__init__.py").is_file()


def _edges() -> list[tuple[str, str, tuple[str, ...], int]]:
    """``(importer, imported module, names, line)`` for every import of a wflow module."""
    out = []
    for path in sorted(WFLOW.rglob("*.py")):
        mod = _module_name(path)
        pkg = mod.split(".") if path.name == "__init__.py" else mod.split(".")[:-1]
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.ImportFrom):
                if node.level:
                    base = pkg[: len(pkg) - node.level + 1] + (node.module.split(".")
                                                               if node.module else [])
                    target = ".".join(base)
                elif node.module and node.module.split(".")[0] == "wflow":
                    target = node.module
                else:
                    continue
                names = tuple(a.name for a in node.names)
                subs = [n for n in names if _exists(f"{target}.{n}")]
                attrs = tuple(n for n in names if n not in subs)
                for s in subs:
                    out.append((mod, f"{target}.{s}", (), node.lineno))
                if attrs or not subs:
                    out.append((mod, target, attrs, node.lineno))
            elif isinstance(node, ast.Import):
                for a in node.names:
                    if a.name.split(".")[0] == "wflow":
                        out.append((mod, a.name, (), node.lineno))
    return out


def _rank(mod: str) -> int:
    best = max((k for k in RANKS if mod == k or mod.startswith(k + ".")), key=len)
    return RANKS[best]


def _package(mod: str) -> str:
    parts = mod.split(".")
    return ".".join(parts[:2]) if len(parts) > 1 else parts[0]


def test_data_flows_one_way():
    bad = [f"{a}:{line} imports {b} (rank {_rank(a)} < {_rank(b)})"
           for a, b, _, line in _edges()
           if _rank(a) < _rank(b) and not b.startswith(a + ".")]  # a package's face is free
    assert not bad, "upward imports:\n" + "\n".join(bad)


def test_no_import_cycles():
    graph: dict[str, set[str]] = {}
    for a, b, _, _ in _edges():
        if a != b:
            graph.setdefault(a, set()).add(b)
    # Tarjan's strongly connected components
    index, low, stack, on, sccs, counter = {}, {}, [], set(), [], [0]

    def visit(v: str) -> None:
        index[v] = low[v] = counter[0]
        counter[0] += 1
        stack.append(v)
        on.add(v)
        for w in graph.get(v, ()):
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in on:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            comp = []
            while True:
                w = stack.pop()
                on.discard(w)
                comp.append(w)
                if w == v:
                    break
            if len(comp) > 1:
                sccs.append(sorted(comp))

    for v in sorted(graph):
        if v not in index:
            visit(v)
    assert not sccs, "import cycles: " + "; ".join(" <-> ".join(c) for c in sccs)


def test_no_private_name_crosses_a_package():
    bad = []
    for a, b, names, line in _edges():
        if _package(a) == _package(b):
            continue
        private = [n for n in names if n.startswith("_") and not n.startswith("__")]
        if any(p.startswith("_") for p in b.split(".")[1:]):
            private.append(f"module {b}")
        if private:
            bad.append(f"{a}:{line} imports {private} from {b}")
    assert not bad, "private names across packages:\n" + "\n".join(bad)


@pytest.mark.parametrize("fault", ["cycle", "upward", "private"])
def test_the_checks_catch_an_injected_fault(fault, monkeypatch):
    """Negative controls: an injected edge of each kind is caught (on the real graph, which
    passes its own check: the other tests of this file)."""
    edges = _edges()
    extra = {"cycle": [("wflow.infra.schema", "wflow.infra.io", (), 1),
                       ("wflow.infra.io", "wflow.infra.schema", (), 1)],
             "upward": [("wflow.geometry.sphere", "wflow.particles.solver", (), 1)],
             "private": [("wflow.pde.solver", "wflow.kernels", ("_threads",), 1)]}[fault]
    monkeypatch.setattr(sys.modules[__name__], "_edges", lambda: edges + extra)
    check = {"cycle": test_no_import_cycles, "upward": test_data_flows_one_way,
             "private": test_no_private_name_crosses_a_package}[fault]
    with pytest.raises(AssertionError):
        check()
