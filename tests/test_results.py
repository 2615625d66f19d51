"""One status type, one result shape, one argument order (issue #32, item 2).

* :class:`wflow.status.Status` is a string enum: every member carries its message and its
  remedy, compares equal to (and serialises as) its string, and :func:`worst_status`
  orders them; an AST scan of ``wflow/`` refuses string-literal statuses (with a negative
  control: the scan catches an injected one).
* Every solver's result derives from :class:`wflow.results.SolverResult`;
  :func:`wflow.results.status_summary` works for all four (particles, PDE, JKO, Gaussian).
* The solve functions take ``(initial state, heads, attn, *, geometry=..., options=...)``;
  the former orders warn (DeprecationWarning naming the new call) and give the same
  numbers; the test configuration turns such a warning from wflow's own code into an error.
"""

from __future__ import annotations

import ast
import json
import warnings
from dataclasses import FrozenInstanceError, fields
from pathlib import Path

import numpy as np
import pytest

from wflow.attention.heads import Attention, Heads
from wflow.gaussian.params import GaussianParams
from wflow.gaussian.solver import GaussianTrajectory, integrate_moments
from wflow.geometry.density import initial_density
from wflow.geometry.mesh import load_mesh
from wflow.geometry.sphere import sample_uniform
from wflow.jko import JKOOptions, JKOResult, solve_jko
from wflow.particles import ParticleResult, simulate
from wflow.pde import PDEOptions, PDEResult, solve_pde
from wflow.results import SolverResult, status_summary
from wflow.status import STATUSES, Status, unjudged_status, worst_status

WFLOW = Path(__file__).resolve().parents[1] / "wflow"
VALUES = frozenset(s.value for s in Status)

#: Functions whose own vocabulary shares a word with Status (not a run status), and why.
OWN_VOCABULARY = {
    ("studies/helpers.py", "particle_clustering_time"):
        "ClusteringRun.status: success / stalled / not_reached of a threshold search",
}


# ------------------------------------------------------------------------- the status type
def test_every_status_carries_its_message_and_remedy():
    assert [s.value for s in STATUSES] == ["success", "completed", "blowup", "inaccurate",
                                           "not_converged", "locked", "max_steps",
                                           "inconclusive", "failed"]
    for s in Status:
        assert isinstance(s, str) and s == s.value and Status(s.value) is s
        assert f"{s}" == s.value and json.dumps({"status": s}) == f'{{"status": "{s.value}"}}'
        assert len(s.message) > 20, s
        assert s.usable == (s in (Status.SUCCESS, Status.COMPLETED, Status.BLOWUP))
        # a status that says the numbers are not usable says what to do
        assert bool(s.remedy) == (s not in (Status.SUCCESS, Status.COMPLETED)), s
    assert "lower dt" in Status.INACCURATE.remedy and "refine the mesh" in Status.INACCURATE.remedy
    assert "jko.tau" in Status.LOCKED.remedy and "max_steps" in Status.MAX_STEPS.remedy
    line = Status.MAX_STEPS.explain("ran out at t = 0.3")
    assert line.startswith("max_steps: ran out at t = 0.3") and "remedy" in line
    assert Status.SUCCESS.explain() == f"success: {Status.SUCCESS.message}"


def test_a_success_no_check_backs_is_completed():
    """``unjudged_status``: ``success`` with every check recorded but not judged becomes
    ``completed``, naming each reason and the remedy; one judged check (a dict without
    ``judged``, or ``judged: True``) keeps ``success``; other statuses, counters and an
    empty ``checks`` are left alone."""
    unj = {"chain": {"value": 0.9, "judged": False, "reason": "token diffusion"},
           "ito_balance": {"judged": False, "reason": "not asked for"}, "locked_steps": 0}
    st, msg = unjudged_status("success", "", unj, remedy="set rtol")
    assert st is Status.COMPLETED and st.usable
    assert msg == ("no accuracy check was judged (chain: token diffusion; ito_balance: not "
                   "asked for); set rtol")
    # negative controls: one judged check, the other statuses, no check at all
    for judged in ({"value": 0.1, "passed": True}, {"judged": True, "passed": True}):
        assert unjudged_status("success", "", {**unj, "edi": judged}) == (Status.SUCCESS, "")
    assert unjudged_status("inaccurate", "x", unj) == (Status.INACCURATE, "x")
    assert unjudged_status(Status.FAILED, "y", unj) == (Status.FAILED, "y")
    assert unjudged_status("success", "", {"locked_steps": 0}) == (Status.SUCCESS, "")
    assert unjudged_status("success", "", {}) == (Status.SUCCESS, "")


def test_worst_status_orders_and_refuses_unknown_words():
    assert worst_status() is Status.SUCCESS
    assert worst_status("success", "inaccurate", "not_converged") is Status.NOT_CONVERGED
    assert worst_status(Status.LOCKED, "failed") is Status.FAILED
    assert worst_status(Status.COMPLETED, Status.BLOWUP) is Status.BLOWUP
    assert [s.severity for s in STATUSES] == list(range(len(STATUSES)))
    with pytest.raises(ValueError, match="succes"):  # a typo is an error, not "worst"
        worst_status("success", "succes")


# ------------------------------------------------------- no string-literal status in wflow/
def _is_status_literal(node: ast.AST) -> bool:
    return isinstance(node, ast.Constant) and isinstance(node.value, str) \
        and node.value in VALUES


def _names_status(node: ast.AST) -> bool:
    name = node.id if isinstance(node, ast.Name) else getattr(node, "attr", "")
    return "status" in name.lower()


def string_statuses(src: str) -> list[tuple[int, str]]:
    """``(line, what)`` of every string-literal status compared, assigned or passed."""
    tree = ast.parse(src)
    funcs: dict[int, str] = {}
    for f in ast.walk(tree):
        if isinstance(f, (ast.FunctionDef, ast.AsyncFunctionDef)):
            for n in ast.walk(f):
                funcs.setdefault(id(n), f.name)
    hits: list[tuple[int, str, str]] = []

    def hit(node: ast.AST, what: str) -> None:
        hits.append((node.lineno, what, funcs.get(id(node), "")))

    for n in ast.walk(tree):
        if isinstance(n, ast.Compare):
            for op, right in zip(n.ops, n.comparators, strict=True):
                if isinstance(op, (ast.In, ast.NotIn)):  # membership in a set of statuses
                    if isinstance(right, (ast.Tuple, ast.List, ast.Set)) and any(
                            _is_status_literal(e) for e in right.elts):
                        hit(n, "compared (in)")
                elif _is_status_literal(right) or _is_status_literal(n.left):
                    hit(n, "compared")
        elif isinstance(n, (ast.Assign, ast.AnnAssign)):
            targets = n.targets if isinstance(n, ast.Assign) else [n.target]
            for t in targets:
                if _names_status(t) and n.value is not None and _is_status_literal(n.value):
                    hit(n, "assigned")
                if isinstance(t, ast.Tuple) and isinstance(n.value, ast.Tuple):
                    for te, ve in zip(t.elts, n.value.elts, strict=False):
                        if _names_status(te) and _is_status_literal(ve):
                            hit(n, "assigned")
        elif isinstance(n, ast.keyword):
            if n.arg and "status" in n.arg.lower() and _is_status_literal(n.value):
                hit(n.value, "passed")
        elif isinstance(n, ast.Dict):
            for k, v in zip(n.keys, n.values, strict=True):
                if isinstance(k, ast.Constant) and k.value == "status" and _is_status_literal(v):
                    hit(n, "in a dict")
        elif isinstance(n, ast.Call):
            name = n.func.id if isinstance(n.func, ast.Name) else getattr(n.func, "attr", "")
            if n.args and _is_status_literal(n.args[0]) and (
                    name.endswith(("Result", "Solution", "Trajectory")) or name == "worst_status"):
                hit(n, f"passed to {name}")
            if name == "worst_status" and any(_is_status_literal(a) for a in n.args):
                hit(n, "passed to worst_status")
            if name == "get" and len(n.args) == 2 and isinstance(n.args[0], ast.Constant) \
                    and n.args[0].value == "status" and _is_status_literal(n.args[1]):
                hit(n, "a .get default")
    return sorted({(line, f"{what} [{fn}]") for line, what, fn in hits})


def test_no_string_literal_status_in_wflow():
    bad = []
    for path in sorted(WFLOW.rglob("*.py")):
        rel = path.relative_to(WFLOW).as_posix()
        for line, what in string_statuses(path.read_text()):
            fn = what.rsplit("[", 1)[1].rstrip("]")
            if (rel, fn) in OWN_VOCABULARY:
                continue
            bad.append(f"wflow/{rel}:{line}: a string status {what}")
    assert not bad, "compare and set Status members (wflow.status.Status):\n" + "\n".join(bad)


def test_the_scan_catches_every_form_it_forbids():
    """Negative control: each forbidden form, injected, is caught; members are not."""
    forbidden = ['if res.status == "success":\n    pass\n',
                 'ok = "failed" != res.status\n',
                 'if res.status in ("failed", "max_steps"):\n    pass\n',
                 'status = "inaccurate"\n',
                 'status, message = "failed", "why"\n',
                 'r = PDEResult("failed", "why", opts)\n',
                 'x = worst_status(s, "locked")\n',
                 'd = {"status": "success"}\n',
                 'f(status="blowup")\n',
                 'bad = r.get("status", "success") != Status.SUCCESS\n']
    for src in forbidden:
        assert string_statuses(src), src
    allowed = ['if res.status == Status.SUCCESS:\n    pass\n',
               'status, message = Status.FAILED, "why"\n',
               'msg = "run failed" if "failed" in str(exc) else ""\n',
               'put("locked", 1.0)\n', 'n = history["locked"]\n']
    for src in allowed:
        assert not string_statuses(src), src


# --------------------------------------------------------------------- one result shape
@pytest.fixture(scope="module")
def four_results() -> dict[str, SolverResult]:
    """A small run of each solver (a few seconds together)."""
    rng = np.random.default_rng(3)
    heads = Heads.random_symmetric(1, 3, rng, scale=0.5)
    attn = Attention("softmax", beta=1.0)
    part = simulate(sample_uniform(24, 3, rng), heads, attn, T=0.4, dt=0.1, integrator="rk4")
    mesh = load_mesh("sphere_720.msh")
    rho0 = {"type": "vmf", "means": [[0, 0, 1]], "kappas": [4.0], "weights": [1.0]}
    pde = solve_pde(rho0, heads, attn, mesh=mesh,
                    options=PDEOptions(T=0.2, dt=0.1, order=2, n_saves=2, flow="surrogate"))
    cen, areas = mesh.gather_owned(mesh.centroids), mesh.gather_owned(mesh.areas)
    m0 = initial_density(mesh, rho0) * areas
    h1 = Heads.random_symmetric(1, 3, np.random.default_rng(1), scale=0.5)  # README's run
    jko = solve_jko(m0, h1, attn, points=cen, areas=areas, mesh=mesh,
                    options=JKOOptions(T=0.6, tau=0.3))
    gauss = integrate_moments(GaussianParams.make(2, A=0.0, V=-0.5, B=np.eye(2)), np.ones(2),
                              np.eye(2), 1.0, n_out=5)
    return {"particles": part, "pde": pde, "jko": jko, "gaussian": gauss}


def test_every_solver_returns_the_shared_result(four_results):
    classes = {"particles": ParticleResult, "pde": PDEResult, "jko": JKOResult,
               "gaussian": GaussianTrajectory}
    base = {f.name for f in fields(SolverResult)}
    assert base == {"status", "message", "options", "history", "checks", "stats", "engine",
                    "wall_time", "order"}
    for name, res in four_results.items():
        assert type(res) is classes[name] and isinstance(res, SolverResult)
        assert base <= {f.name for f in fields(res)}
        assert isinstance(res.status, Status) and res.status.usable, (name, res.message)
        assert isinstance(res.history, dict) and res.history
        assert isinstance(res.checks, dict) and isinstance(res.stats, dict)
        assert res.engine in ("python", "compiled", "scipy") and res.wall_time >= 0
        with pytest.raises(FrozenInstanceError):
            res.status = Status.FAILED  # type: ignore[misc]
    part, pde, jko, gauss = (four_results[k] for k in ("particles", "pde", "jko", "gaussian"))
    assert part.order == 4 and part.engine == part.extra["engine"]
    # order 2 in space runs SSP-RK2 by default: second order in dt
    assert pde.options.integrator == "ssprk2" and pde.order == 2
    assert pde.wall_time == pde.stats["wall_time"]
    assert jko.order == 1 and jko.wall_time == jko.stats["wall_time"]
    assert gauss.order is None and gauss.status == "completed" and gauss.checks == {}
    assert gauss.history["Sigma"] is gauss.Sigma and gauss.stats["nfev"] == gauss.nfev
    assert "chain" in part.checks and "chain" in pde.checks and "edi" in jko.checks


def test_one_status_summary_for_every_solver(four_results):
    for name, res in four_results.items():
        s = status_summary(res)
        assert set(s) == {"status", "message", "remedy", "checks"}, name
        assert s["status"] == res.status.value and s["checks"] == res.checks
        assert s == res.status_summary() and json.loads(json.dumps(s)) == s
    # negative control: a failed result of each kind reports its status, reason and remedy
    for name, res in four_results.items():
        from dataclasses import replace

        bad = replace(res, status=Status.FAILED, message="")
        s = status_summary(bad)
        assert s["status"] == "failed" and s["message"] == Status.FAILED.message, name
        assert s["remedy"] == Status.FAILED.remedy and not bad.success


def test_a_result_reads_a_status_string_as_the_member(four_results):
    from dataclasses import replace

    r = replace(four_results["pde"], status="inaccurate")
    assert r.status is Status.INACCURATE
    with pytest.raises(ValueError):
        replace(four_results["pde"], status="fine")


# -------------------------------------------------------------------- one argument order
def _mesh_problem():
    mesh = load_mesh("sphere_720.msh")
    heads = Heads.random_symmetric(1, 3, np.random.default_rng(1), scale=0.5)
    rho0 = {"type": "vmf", "means": [[0, 0, 1]], "kappas": [4.0], "weights": [1.0]}
    return mesh, heads, Attention("softmax", beta=1.0), rho0


def test_former_solve_pde_order_warns_and_gives_the_same_numbers():
    mesh, heads, attn, rho0 = _mesh_problem()
    opts = PDEOptions(T=0.1, dt=0.05, order=1, n_saves=2)
    new = solve_pde(rho0, heads, attn, mesh=mesh, options=opts)
    with pytest.warns(DeprecationWarning,
                      match=r"call solve_pde\(rho0, heads, attn, mesh=mesh\)") as rec:
        old = solve_pde(mesh, rho0, heads, attn, options=opts)
    assert rec[0].filename == __file__  # stacklevel: the caller's line
    assert np.array_equal(old.rho, new.rho) and old.status == new.status
    with pytest.raises(TypeError, match="mesh= is required"):
        solve_pde(rho0, heads, attn, options=opts)
    with pytest.raises(TypeError, match="once"):
        solve_pde(mesh, rho0, heads, attn, mesh=mesh)


def test_former_solve_jko_order_warns_and_gives_the_same_numbers():
    mesh, heads, attn, rho0 = _mesh_problem()
    cen, areas = mesh.gather_owned(mesh.centroids), mesh.gather_owned(mesh.areas)
    m0 = initial_density(mesh, rho0) * areas
    opts = JKOOptions(T=0.3, tau=0.3)
    new = solve_jko(m0, heads, attn, points=cen, areas=areas, mesh=mesh, options=opts)
    with pytest.warns(DeprecationWarning, match=r"call solve_jko\(mass0, heads, attn, "
                      r"points=points, areas=areas\)") as rec:
        old = solve_jko(cen, areas, m0, heads, attn, mesh=mesh, options=opts)
    assert rec[0].filename == __file__
    assert np.array_equal(old.masses, new.masses) and old.status == new.status
    with pytest.raises(TypeError, match="points= and areas= are required"):
        solve_jko(m0, heads, attn, mesh=mesh, options=opts)
    with pytest.raises(TypeError, match="3 positional"):
        solve_jko(m0, heads, attn, cen, points=cen, areas=areas)


def test_a_deprecated_call_from_wflow_is_an_error_in_the_suite():
    """The configuration (pyproject ``filterwarnings``) errors on the former orders when the
    caller is a wflow module, and only then: injected with wflow's module name, the warning
    raises; from a test module it stays a warning."""
    msg = "solve_pde(mesh, rho0, heads, attn) is deprecated: call solve_pde(...)"
    with pytest.raises(DeprecationWarning):
        warnings.warn_explicit(msg, DeprecationWarning, "wflow/apps/fake.py", 1,
                               module="wflow.apps.fake")
    with pytest.warns(DeprecationWarning):
        warnings.warn_explicit(msg, DeprecationWarning, __file__, 1, module=__name__)
