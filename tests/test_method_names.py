"""No method name compared as a string in wflow/: code dispatches on the method objects.

A method (attention kind, particle or PDE integrator, limiter, schedule type, JKO scheme)
is one registered object carrying what every path needs (docs STYLE, "One definition per
concept"); a comparison such as ``integrator == "rk4"`` or ``kind.name == "softmax"``
restates its knowledge elsewhere and silently misreads a user's object. The scan walks the
AST of every module of ``wflow/`` and flags a comparison (``==``, ``!=``, ``in``,
``not in``) between a *method slot* (a name or attribute ``kind``, ``integrator``,
``time_integrator``, ``limiter``, ``scheme``, or their ``.name``) and a string literal (or a
tuple/list/set of them) that is a registered name. A site left in a file
another engineer is rewriting would be listed in :data:`PENDING` with its count, which may
only go down (a fixed site must be removed from the list); none is left.
"""

from __future__ import annotations

import ast
from collections import Counter
from pathlib import Path

from wflow.attention.kinds import REGISTRY as KIND_REGISTRY
from wflow.attention.schedules import SCHEDULE_TYPES
from wflow.jko.schemes import SCHEMES
from wflow.particles.integrators import INTEGRATORS
from wflow.pde.integrators import TIME_INTEGRATORS
from wflow.pde.limiters import LIMITERS

WFLOW = Path(__file__).resolve().parents[1] / "wflow"

#: Names (and attributes) that hold a method, by name or by object.
SLOTS = frozenset({"kind", "integrator", "time_integrator", "limiter", "scheme",
                   "schedule_type"})

#: Sites left in files other engineers are rewriting, ``file -> count``; the scan fails on
#: any other site and on a count that grew. Empty: no method name is compared as a string.
PENDING: dict[str, int] = {}


def method_names() -> frozenset[str]:
    """Every registered method name but ``"auto"`` (a word of many options, not a method)."""
    names: set[str] = set()
    for reg in (KIND_REGISTRY, INTEGRATORS, TIME_INTEGRATORS, LIMITERS, SCHEDULE_TYPES,
                SCHEMES):
        names |= set(reg.names())
    return frozenset(names - {"auto"})


def _slot(node: ast.AST) -> bool:
    """``kind``, ``opts.integrator``, ``kind.name``, ``attn.kind.name``: a method slot."""
    if isinstance(node, ast.Attribute) and node.attr == "name":
        node = node.value
    if isinstance(node, ast.Name):
        return node.id in SLOTS
    return isinstance(node, ast.Attribute) and node.attr in SLOTS


def _literals(node: ast.AST) -> set[str]:
    if isinstance(node, ast.Constant) and isinstance(node.value, str):
        return {node.value}
    if isinstance(node, (ast.Tuple, ast.List, ast.Set)):
        return {e.value for e in node.elts
                if isinstance(e, ast.Constant) and isinstance(e.value, str)}
    return set()


def scan(source: str, names: frozenset[str]) -> list[tuple[int, str]]:
    """``(line, code)`` of every method-name comparison in ``source``."""
    hits = []
    for node in ast.walk(ast.parse(source)):
        if not isinstance(node, ast.Compare):
            continue
        sides = [node.left, *node.comparators]
        if any(_slot(s) for s in sides) and any(_literals(s) & names for s in sides):
            hits.append((node.lineno, ast.unparse(node)))
    return hits


def _all_sites() -> dict[str, list[tuple[int, str]]]:
    names = method_names()
    out = {}
    for path in sorted(WFLOW.rglob("*.py")):
        hits = scan(path.read_text(), names)
        if hits:
            out[path.relative_to(WFLOW).as_posix()] = hits
    return out


def test_no_method_name_is_compared_as_a_string():
    sites = _all_sites()
    new = {f: h for f, h in sites.items() if len(h) > PENDING.get(f, 0)}
    assert not new, ("method names compared as strings (dispatch on the object instead): "
                     + "; ".join(f"{f}:{ln}: {code}" for f, h in new.items() for ln, code in h))
    stale = {f: n for f, n in PENDING.items() if len(sites.get(f, [])) < n}
    assert not stale, f"PENDING lists sites that are gone (lower their counts): {stale}"


def test_the_scan_catches_an_injected_comparison():
    """Negative control: the comparisons this test exists for are caught, the others not."""
    names = method_names()
    assert {"rk4", "softmax", "barth_jespersen", "ssprk3", "fv", "ou"} <= names
    caught = '''
def f(opts, attn, kind, spec):
    if opts.integrator == "rk4":
        pass
    if attn.kind != "softmax":
        pass
    if kind.name in ("usa", "relu"):
        pass
    return "fv" == opts.scheme or spec.limiter in {"venkatakrishnan"}
'''
    assert [ln for ln, _ in scan(caught, names)] == [3, 5, 7, 9, 9]  # two on line 9
    innocent = '''
def g(opts, fault, name, kind):
    if opts.kernel_backend == "auto" or fault == "euler" or name == "usa":
        pass
    if kind is SOFTMAX or opts.integrator == INTEGRATOR:
        pass
    return kind == "bilinear"
'''
    assert scan(innocent, names) == []
    # and in a real module: the scan of a file with one site injected counts one more
    path = WFLOW / "particles" / "solver.py"
    src = path.read_text()
    base = Counter(code for _, code in scan(src, names))
    injected = src + '\n\ndef _probe(opts):\n    return opts.integrator == "euler"\n'
    more = Counter(code for _, code in scan(injected, names)) - base
    assert more == Counter({"opts.integrator == 'euler'": 1})
