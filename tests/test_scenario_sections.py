"""Every solver section is parsed and validated once, when the scenario loads (issue 39).

* A typo in ``[jko]`` or ``[pde]`` stops ``wflow particles`` too: exit status 2, one line
  naming the key, before any computation (negative control: the same scenario without the
  typo runs).
* ``[jko]`` is parsed at one site (:func:`wflow.jko.options.jko_table_from_dict`), once per
  scenario, into a typed :class:`~wflow.jko.options.JKOTable` whose step rule is typed
  (:class:`~wflow.jko.options.FixedTau` | :class:`~wflow.jko.options.AutoSteps`): no
  placeholder ``tau`` (negative control: a scenario built with other sections parses again,
  so the counter counts).
* The job runner estimates once per command (negative control: a job whose built problem
  differs from its pre-estimate size is estimated twice, and the counter sees it).
* The particle estimate reads the stage count from the integrator object, a user's too.
"""

from __future__ import annotations

from dataclasses import replace

import pytest

import wflow.apps.jobs.particles as prun
import wflow.apps.jobs.runner as runner
import wflow.jko.spec as jko_spec
from wflow.apps.scenario import load_scenario
from wflow.cli import main
from wflow.jko.options import AutoSteps, FixedTau, JKOTable

from .test_cli_output import SCENARIO
from .test_estimates_absurd import _write


@pytest.fixture
def no_compute(monkeypatch):
    monkeypatch.setattr(prun, "simulate", lambda *a, **k: pytest.fail("computed"))


@pytest.mark.parametrize("table, key", [
    ("[jko]\ntaux = 0.1\n", "jko.taux"),            # a typo of tau
    ("[jko]\ntau = \"fast\"\n", "jko.tau"),          # a wrong value
    ("[jko]\ntau = 0.3\nT = 1.0\n", "jko.T"),        # T not a multiple of tau
    ("[jko]\nscheme = \"ot\"\nsubsteps = 2\n", "jko.substeps"),  # applies nowhere
    ("[pde]\nordr = 2\n", "pde.ordr"),
])
def test_a_bad_solver_section_stops_every_command(tmp_path, capsys, no_compute, table, key):
    sc = _write(tmp_path, SCENARIO + table)
    assert main(["particles", str(sc), "--out", str(tmp_path / "o")]) == 2
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1 and "Traceback" not in err, err
    assert err.startswith("wflow particles: error: ") and key in err, err
    assert not (tmp_path / "o").exists()


def test_the_same_scenario_without_the_typo_runs(tmp_path, capsys):
    """Negative control of the refusals above: a valid [jko] (and [pde]) runs."""
    sc = _write(tmp_path, SCENARIO + "[jko]\ntau = 0.1\n[pde]\norder = 2\n")
    assert main(["particles", str(sc), "--out", str(tmp_path / "o")]) == 0, \
        capsys.readouterr().err
    assert (tmp_path / "o" / "summary.json").is_file()


def test_jko_is_parsed_once_into_a_typed_table(tmp_path, monkeypatch):
    calls = []
    real = jko_spec.jko_table_from_dict

    def counting(*a, **k):
        calls.append(a)
        return real(*a, **k)

    monkeypatch.setattr(jko_spec, "jko_table_from_dict", counting)
    sc = load_scenario(_write(tmp_path, SCENARIO + "[pde]\nT = 0.4\n[jko]\nscheme = \"fv\"\n"))
    assert len(calls) == 1
    table = sc.table("jko")
    assert isinstance(table, JKOTable) and table.step == AutoSteps() and table.T == 0.4
    assert "tau" not in table.settings  # no placeholder step: the rule is typed
    # the job's table, its size and its estimate read the parsed table (no parse)
    from wflow.apps.jobs.jko import JOB

    t = JOB.table(sc, {"tau": 0.2})
    assert t.step == FixedTau(0.2) and t.steps_bound(2420) == 2
    JOB.spec.estimate(t, cells=2420, H=1)
    assert len(calls) == 1
    # negative control: a scenario built with other sections parses them again
    replace(sc, sections={**sc.sections, "jko": {"tau": 0.1}})
    assert len(calls) == 2


def test_the_estimate_runs_once_per_command(tmp_path, monkeypatch):
    counted = []
    real = runner.check_estimate
    monkeypatch.setattr(runner, "check_estimate",
                        lambda est, **k: counted.append(est.what) or real(est, **k))
    sc = load_scenario(_write(tmp_path, SCENARIO))
    prun.run_particles(sc, tmp_path / "o1")
    assert counted == ["particles"]
    # negative control: a problem built unlike its pre-estimate is estimated again
    job = replace(prun.JOB, size_of=lambda p: {**prun._size_of(p), "n": 31})
    counted.clear()
    runner.run_job(job, sc, tmp_path / "o2")
    assert counted == ["particles", "particles"]


def test_the_particle_estimate_reads_stages_from_the_integrator_object():
    """A user's integrator object, unregistered, is costed by its ``stages()``: two stages
    cost one field evaluation more per step than Euler's one (no name is compared)."""
    from wflow.particles import integrators as pint
    from wflow.particles.estimate import PAIR_SECONDS, estimate_particles

    class Midpoint(pint.ParticleIntegrator):
        name = "my-midpoint"

        def order(self) -> int:
            return 2

        def stages(self) -> int:
            return 2

    kw = dict(n=100, d=3, H=1, T=1.0, dt=0.1)
    two = estimate_particles(**kw, integrator=Midpoint())
    one = estimate_particles(**kw, integrator="euler")
    per_eval = 100.0 * 100 * PAIR_SECONDS
    assert two.seconds - one.seconds == pytest.approx(10 * per_eval, rel=1e-12)
    four = estimate_particles(**kw, integrator=pint.RK4())
    assert four.seconds - one.seconds == pytest.approx(30 * per_eval, rel=1e-12)
