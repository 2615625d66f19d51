"""A study never raises on a wrong or diverging solver: it FAILs a named criterion.

Every study, quick mode, with two failures injected into every numerical entry point it
calls (the particle engines, the PDE, the JKO, the Gaussian systems, the multi-head ODEs
and the published re-implementations — every function of those packages bound in the
study's namespace, the shared helpers' or the solver packages' themselves):

* **blow-up**: the solver raises ``FloatingPointError("overflow encountered in exp")``, as
  NumPy does under ``errstate(over="raise")`` when a run diverges;
* **conservation**: the solver fails with the PDE's own message ``"mass drifted by … :
  conservation broken"`` (raised; and for the PDE, returned as its ``failed`` status,
  which the studies then raise on, as a PDE that loses mass really does).

Each run returns ``passed = False`` with a verdict starting ``FAIL`` that names the
criterion (``run_finite``, ``mass_conserved``, or a criterion of the study that counted the
failure itself, e.g. ``particles_finite``), writes ``summary.json``, and raises nothing.
The wrapper (:func:`wflow.studies.base.never_raise`) also keeps usage errors usage errors
(an unknown fault still raises ``ValueError`` before the run).
"""

from __future__ import annotations

import dataclasses
import inspect
import json

import numpy as np
import pytest

import wflow.gaussian
import wflow.jko
import wflow.multihead
import wflow.particles
import wflow.pde
import wflow.published
import wflow.studies.helpers
from wflow.studies.base import failed_criterion, never_raise
from wflow.studies.registry import STUDIES, load_study

#: The packages whose functions are solvers (the injection points).
SOLVER_PACKAGES = ("wflow.particles", "wflow.pde", "wflow.jko", "wflow.gaussian",
                   "wflow.multihead", "wflow.published", "wflow.geometry.transport")
BLOWUP = "overflow encountered in exp"
MASS = "mass drifted by 3.00e-03 (relative): conservation broken"
#: Criteria that may carry the injected failure: the wrapper's, or a study's own count.
CATCHERS = ("run_finite", "mass_conserved", "run_completed", "particles_finite")


def _is_solver(obj) -> bool:
    mod = getattr(obj, "__module__", "") or ""
    return inspect.isfunction(obj) and mod.startswith(SOLVER_PACKAGES)


def _inject(monkeypatch, mod, kind: str) -> list[str]:
    """Replace every solver function bound in ``mod``, the helpers and the solver packages."""
    msg = BLOWUP if kind == "blow-up" else MASS

    def failing(fn):
        def f(*a, **k):
            if kind == "conservation" and fn.__name__ == "solve_pde":
                res = fn(*a, **k)  # the PDE's own failure mode: a failed status
                return dataclasses.replace(res, status="failed", message=MASS)
            raise FloatingPointError(msg)
        return f

    patched = []
    owners = [mod, wflow.studies.helpers, wflow.particles, wflow.pde, wflow.jko,
              wflow.gaussian, wflow.multihead, wflow.published]
    for owner in owners:
        for name, obj in list(vars(owner).items()):
            if _is_solver(obj):
                monkeypatch.setattr(owner, name, failing(obj))
                patched.append(f"{owner.__name__}.{name}")
    return patched


PARTS = {"edi": {"parts": ("particles",)}}


@pytest.mark.parametrize("kind", ["blow-up", "conservation"])
@pytest.mark.parametrize("name", sorted(STUDIES))
def test_study_fails_never_raises(name, kind, tmp_path, monkeypatch):
    mod = load_study(name)
    patched = _inject(monkeypatch, mod, kind)
    assert patched, f"{name}: no solver entry point found"
    for obj in vars(mod).values():  # runs cached by earlier tests would skip the solver
        if callable(getattr(obj, "cache_clear", None)):
            obj.cache_clear()
    res = mod.run(out=tmp_path / name, quick=True, seed=0, **PARTS.get(name, {}))
    assert res.passed is False and res.verdict.startswith("FAIL"), res.verdict
    summary = json.loads((tmp_path / name / "summary.json").read_text())
    assert summary["passed"] is False
    failing = [c["name"] for c in summary["criteria"] if not c["ok"]]
    assert any(any(k in c for k in CATCHERS) for c in failing), (failing, res.verdict)
    if "run_finite" in failing or "mass_conserved" in failing:
        want = "mass_conserved" if kind == "conservation" else "run_finite"
        assert want in failing and (BLOWUP if kind == "blow-up" else "conservation") in \
            res.verdict


def test_edi_pde_that_loses_mass_fails(tmp_path, monkeypatch):
    """The issue's case: a PDE that loses mass makes ``edi`` FAIL ``mass_conserved``."""
    mod = load_study("edi")
    _inject(monkeypatch, mod, "conservation")
    res = mod.run(out=tmp_path / "e", quick=True, seed=0, parts=("pde",))
    assert not res.passed and "mass_conserved" in res.verdict.split(". ")[0], res.verdict
    assert "conservation broken" in res.verdict


def test_wrapper_keeps_usage_errors_and_machine_errors(tmp_path):
    def run(*, out, quick=False, seed=0, fault=None):
        raise OSError("disk full")

    wrapped = never_raise(run, name="x", faults={"f": "a fault"})
    with pytest.raises(ValueError, match="unknown fault 'nope'"):
        wrapped(out=tmp_path / "x", fault="nope")
    with pytest.raises(OSError, match="disk full"):
        wrapped(out=tmp_path / "x")
    assert never_raise(wrapped, name="x", faults={}) is wrapped  # installed once
    with pytest.raises(ValueError, match="parts must be"):
        never_raise(run, name="x", faults={}, parts=("a",))(out=tmp_path / "y", parts=("b",))


def test_wrapper_turns_a_non_finite_intermediate_into_a_fail(tmp_path):
    """Under the wrapper an overflow inside the run raises (errstate) and becomes a FAIL,
    also outside the test suite's strict errstate."""
    def run(*, out, quick=False, seed=0, fault=None):
        np.exp(np.array([1e3]))  # overflow: raises under the wrapper's errstate
        raise AssertionError("not reached")

    with np.errstate(all="ignore"):
        res = never_raise(run, name="x", faults={"f": "a fault"})(out=tmp_path / "x",
                                                                  fault="f")
    assert not res.passed and res.verdict.startswith("FAIL — 1 of 1 criteria not met: "
                                                     "run_finite")
    assert "overflow" in res.verdict and "Negative control 'f' injected" in res.verdict
    s = json.loads((tmp_path / "x" / "summary.json").read_text())
    assert s["error"]["type"] == "FloatingPointError" and s["fault"] == "f"


def test_failed_criterion_names():
    assert failed_criterion(FloatingPointError(MASS)).name == "mass_conserved"
    assert failed_criterion(FloatingPointError(BLOWUP)).name == "run_finite"
    assert failed_criterion(np.linalg.LinAlgError("SVD did not converge")).name == \
        "run_completed"
    c = failed_criterion(ValueError("x" * 1000))
    assert not c.ok and len(c.what) < 450
