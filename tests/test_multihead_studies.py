"""[MH] studies in quick mode and the ``wflow heads`` command."""

from __future__ import annotations

import importlib
import json
from pathlib import Path

import numpy as np
import pytest

from wflow import cli
from wflow.apps.output_keys import contract_problems
from wflow.attention.heads import Heads
from wflow.geometry.sphere import orthonormal_tokens
from wflow.multihead import beta_star
from wflow.studies.registry import STUDIES

MH_STUDIES = sorted(k for k, v in STUDIES.items() if v.section == "§6")


@pytest.mark.parametrize("name", MH_STUDIES)
def test_study_quick(name, tmp_path):
    mod = importlib.import_module(STUDIES[name].module)
    out = tmp_path / name
    res = mod.run(out=out, quick=True, seed=0)
    assert res.name == name
    assert res.passed, res.verdict
    summary = json.loads((out / "summary.json").read_text())
    assert not contract_problems(summary, "verify")  # status, message, checks; keys
    assert summary["passed"] is True and summary["study"] == name
    assert res.figures
    for f in map(Path, res.figures):
        assert f.parent == out and f.name in summary["figures"] and f.stat().st_size > 1000


def test_registry_covers_every_study_module():
    import pkgutil

    import wflow.studies

    mods = {m.name for m in pkgutil.iter_modules(wflow.studies.__path__)} - {"base", "registry",
                                                                          "helpers"}
    assert {v.module.rsplit(".", 1)[1] for v in STUDIES.values()} == mods
    assert all(v.section for v in STUDIES.values()) and len(MH_STUDIES) == 6


def test_cli_beta_star_json(capsys):
    rc = cli.main(["heads", "beta-star", "--H", "1", "2", "3", "--n", "32", "--json"])
    assert rc == 0
    recs = json.loads(capsys.readouterr().out)
    assert [r["H"] for r in recs] == [1, 2, 3]
    assert recs[0]["beta_star"] == "inf"
    np.testing.assert_allclose([r["beta_star"] for r in recs[1:]], beta_star([2, 3], 32, 1.0),
                               rtol=1e-15)
    rc = cli.main(["heads", "beta-star", "--H", "4", "--n", "8"])
    assert rc == 0 and "fails at every beta" in capsys.readouterr().out


@pytest.mark.parametrize("argv, name", [
    (["--H", "0", "--n", "8"], "H"), (["--H", "2.5", "--n", "8"], "H"),
    (["--H", "2", "--n", "1"], "n"), (["--H", "2", "--n", "8", "--alpha", "-1"], "alpha"),
])
def test_cli_beta_star_domain(argv, name, capsys):
    assert cli.main(["heads", "beta-star", *argv]) == 2
    assert f"argument {name} out of domain" in capsys.readouterr().err


def test_cli_lambda_c_and_radial_dominance(tmp_path, capsys):
    assert cli.main(["heads", "lambda-c", "--n", "8", "--json"]) == 0
    lc = json.loads(capsys.readouterr().out)[0]
    assert lc["s_c"] > 2
    n, H = 16, 2
    np.save(tmp_path / "x.npy", orthonormal_tokens(n, n))
    Heads.scalar([1.0] * H, n).save_npz(tmp_path / "heads.npz")
    bs = float(beta_star(H, n, 1.0))
    for beta, holds in ((0.8 * bs, True), (1.2 * bs, False)):
        rc = cli.main(["heads", "radial-dominance", "--tokens", str(tmp_path / "x.npy"),
                       "--heads", str(tmp_path / "heads.npz"), "--beta", str(beta), "--json"])
        assert rc == 0
        out = json.loads(capsys.readouterr().out)
        assert out["holds"] == [holds] * H
    assert cli.main(["heads", "radial-dominance", "--tokens", str(tmp_path / "missing.npy"),
                     "--heads", str(tmp_path / "heads.npz"), "--beta", "1"]) == 2
    np.save(tmp_path / "bad.npy", np.ones((3, 5)) / np.sqrt(5))
    assert cli.main(["heads", "radial-dominance", "--tokens", str(tmp_path / "bad.npy"),
                     "--heads", str(tmp_path / "heads.npz"), "--beta", "1"]) == 2
    assert "--tokens" in capsys.readouterr().err
