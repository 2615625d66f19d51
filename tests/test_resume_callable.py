"""``--resume`` refuses an edited callable: the fingerprint covers ``"package.module:function"``.

The scenario's initial density is a Python function in a module beside it. The run is
interrupted after its PDE phase; the function is edited; ``--resume`` is refused with the
module named (and nothing recomputed). Negative control: the unedited module resumes.
"""

from __future__ import annotations

import importlib
import sys

import pytest

from wflow.apps.main import checkpoint as mj_checkpoint
from wflow.apps.main import phases as mj_phases
from wflow.cli import main

from .test_cli_run import _scenario as run_scenario

MODULE = '''
import numpy as np


def rho(x):
    return 1.0 + 0.5 * x[:, 2] ** 2
'''


@pytest.fixture
def density_module(tmp_path, monkeypatch):
    name = "wflow_test_density_22"
    (tmp_path / f"{name}.py").write_text(MODULE)
    monkeypatch.syspath_prepend(str(tmp_path))
    importlib.invalidate_caches()
    yield name
    sys.modules.pop(name, None)


def _interrupted(*a, **k):
    raise KeyboardInterrupt


def test_edited_callable_refuses_resume_naming_the_module(tmp_path, capsys, monkeypatch,
                                                          density_module):
    sc = run_scenario(tmp_path, replace=(
        '[density]\ntype = "vmf"\nmeans = [[1.0, 0.0, 0.2], [-0.3, 1.0, 0.0]]\n'
        'kappas = [5.0, 4.0]',
        f'[density]\ntype = "callable"\nfunction = "{density_module}:rho"'))
    assert f'"{density_module}:rho"' in sc.read_text()
    out = tmp_path / "o"
    monkeypatch.setattr(mj_phases, "_run_particles", _interrupted)
    assert main(["run", str(sc), "--out", str(out)]) == 130
    capsys.readouterr()
    meta = mj_checkpoint._Checkpoint(out).meta()
    assert f"callable:{density_module}:rho" in meta["fingerprint"]

    src = tmp_path / f"{density_module}.py"
    src.write_text(MODULE.replace("0.5 *", "0.7 *"))  # the function is edited
    monkeypatch.setattr(mj_phases, "_run_pde", lambda *a, **k: pytest.fail("recomputed"))
    assert main(["run", str(sc), "--resume", str(out)]) == 2
    line = capsys.readouterr().err.strip().splitlines()[-1]
    assert "differs from the scenario checkpointed" in line
    assert f"callable '{density_module}:rho' changed: module '{density_module}'" in line
    assert str(src) in line
    assert main(["run", "--resume", str(out)]) == 2  # also with the checkpointed scenario

    # control: the original source resumes (the PDE phase restored, not recomputed)
    src.write_text(MODULE)
    assert main(["run", str(sc), "--resume", str(out)]) == 130  # particles interrupt again
    assert "phase pde restored from the checkpoint" in capsys.readouterr().out


def test_callable_fingerprint_reads_the_source_not_the_import(tmp_path, density_module):
    raw = {"density": {"type": "callable", "function": f"{density_module}:rho"}}
    fp1 = mj_checkpoint._fingerprint(raw, tmp_path)
    assert fp1 == mj_checkpoint._fingerprint(raw, tmp_path)  # stable
    other = {"density": {"type": "callable", "function": f"{density_module}:rho2"}}
    assert mj_checkpoint._fingerprint(other, tmp_path)[f"callable:{density_module}:rho2"] != \
        fp1[f"callable:{density_module}:rho"]  # the qualified name counts
    # mesh generators look like "name:N" but are not callables
    assert not any(k.startswith("callable:") for k in
                   mj_checkpoint._fingerprint({"pde": {"mesh": "icosphere:80"}}, tmp_path))
