"""A callable density (``[density] function = "mod:fn"``) whose module lies beside the
scenario resolves against the scenario's folder, like every relative path of a scenario;
the density written to the summary carries only the keys of its type."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parents[1]

SCENARIO = """
seed = 0
[attention]
kind = "softmax"
beta = 1.0
d = 3
[heads]
type = "random_symmetric"
H = 1
scale = 0.5
[density]
type = "callable"
function = "{function}"
[pde]
mesh = "sphere_720.msh"
T = 0.1
dt = 0.05
order = 1
n_saves = 2
"""

MODULE = '''
import numpy as np

def bump(x):
    """A density per spherical area, up to normalisation: 1 + x_3."""
    return 1.0 + x[:, 2]
'''


def _scenario(folder: Path, function: str) -> Path:
    folder.mkdir(parents=True, exist_ok=True)
    (folder / "mydens_beside.py").write_text(MODULE, encoding="utf-8")
    path = folder / "scenario.toml"
    path.write_text(SCENARIO.format(function=function), encoding="utf-8")
    return path


def _wflow(args: list, cwd: Path) -> subprocess.CompletedProcess:
    env = dict(os.environ, PYTHONPATH=str(ROOT), MPLBACKEND="Agg")
    return subprocess.run([sys.executable, "-m", "wflow.cli", *map(str, args)],
                          capture_output=True, text=True, env=env, cwd=cwd, timeout=600)


def test_module_beside_the_scenario_resolves_there(tmp_path):
    sc = _scenario(tmp_path / "case", "mydens_beside:bump")
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    r = _wflow(["pde", sc, "--out", tmp_path / "out"], cwd=elsewhere)
    assert r.returncode == 0, r.stderr
    summary = json.loads((tmp_path / "out" / "summary.json").read_text(encoding="utf-8"))
    text = json.dumps(summary)
    assert "mydens_beside.py:bump" in text
    assert '"radius"' not in text  # the cap's default is not carried into a callable density
    npz = np.load(tmp_path / "out" / "density.npz")
    c = npz["centroids"] / np.linalg.norm(npz["centroids"], axis=1, keepdims=True)
    rho0 = npz["rho"][0]
    np.testing.assert_allclose((rho0 * npz["areas"]).sum(), 1.0, rtol=1e-12)
    ratio = rho0 / (1.0 + c[:, 2])  # the callable's values, normalised: one constant
    np.testing.assert_allclose(ratio, ratio.mean(), rtol=1e-12)


def test_a_module_that_exists_nowhere_is_one_line_naming_the_key(tmp_path):
    """Negative control: the lookup beside the scenario does not hide a missing module."""
    sc = _scenario(tmp_path / "case", "no_such_module_anywhere:bump")
    r = _wflow(["pde", sc, "--out", tmp_path / "out"], cwd=tmp_path)
    assert r.returncode == 2, r.stderr
    assert "density.function" in r.stderr and "no_such_module_anywhere" in r.stderr
    assert len(r.stderr.strip().splitlines()) == 1, r.stderr
    assert not (tmp_path / "out").exists()


def test_schedule_callable_beside_the_scenario_resolves_there(tmp_path):
    from wflow.apps.scenario import load_scenario

    folder = tmp_path / "case"
    folder.mkdir()
    (folder / "mydrift_beside.py").write_text(
        "def relax(theta, t):\n    return -theta\n", encoding="utf-8")
    path = folder / "scenario.toml"
    path.write_text('[heads]\ntype = "random_symmetric"\nH = 1\n'
                    '[schedule]\ntype = "callable"\nfunction = "mydrift_beside:relax"\n',
                    encoding="utf-8")
    sched = load_scenario(path).build_schedule()
    assert type(sched).__name__ == "CallableSchedule"
