"""Every section of a scenario is parsed once, when it loads, whatever the command.

``[run]`` (the main job's options) and ``[density]`` are validated at load like the
solvers' sections, so a typo or a bad value in them stops ``wflow particles`` (which uses
neither) with exit status 2 naming the key; the typed tables are ``Scenario.table``.
Tables no command reads (``[mesh]``, ``[verify]``) are refused as unknown. Controls: the
same scenarios without the fault load and run.
"""

from __future__ import annotations

import pytest

from wflow.apps.run_table import RunOptions
from wflow.apps.scenario import load_scenario, parse_scenario
from wflow.cli import main

BASE = """seed = 1
[attention]
kind = "softmax"
beta = 1.0
d = 3
[tokens]
n = 50
[particles]
T = 0.1
dt = 0.01
"""


@pytest.mark.parametrize("extra, key", [
    ("[run]\nn_particle = 100\n", "run.n_particle"),
    ("[run]\nn_particles = 1\n", "run.n_particles"),
    ("[run]\nparticle_integrator = 'rk5'\n", "run.particle_integrator"),
    ("[density]\ntype = 'vmf'\nkapas = [2.0]\n", "density.kapas"),
    ("[density]\ntype = 'gauss'\n", "density.type"),
    ("[mesh]\ncells = 320\n", "mesh"),
    ("[verify]\nseeds = 3\n", "verify"),
])
def test_a_bad_section_stops_a_command_that_does_not_use_it(tmp_path, capsys, extra, key):
    sc = tmp_path / "s.toml"
    sc.write_text(BASE + extra, encoding="utf-8")
    assert main(["particles", str(sc), "--out", str(tmp_path / "o")]) == 2
    err = capsys.readouterr().err
    assert key in err, err
    assert not (tmp_path / "o").exists()


def test_good_sections_are_parsed_once_into_tables(tmp_path):
    # control: the same sections, correct, load and run
    sc = tmp_path / "s.toml"
    sc.write_text(BASE + "[run]\nn_particles = 100\njko = false\n"
                  "[density]\ntype = 'vmf'\nmeans = [[0.0, 0.0, 1.0]]\nkappas = [2.0]\n",
                  encoding="utf-8")
    s = load_scenario(sc)
    run = s.table("run")
    assert isinstance(run, RunOptions) and run.n_particles == 100 and run.jko is False
    assert s.table("density")["kappas"] == [2.0]
    assert main(["particles", str(sc), "--out", str(tmp_path / "o")]) == 0
    # without the tables: the defaults (run), and no density table
    bare = parse_scenario({"tokens": {"n": 50}})
    assert bare.table("run") == RunOptions()
    with pytest.raises(KeyError, match="density"):
        bare.table("density")
