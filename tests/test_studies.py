"""Each §5 study runs in quick mode through `wflow verify`, writes its outputs and passes.

Negative controls and other seeds: ``test_study_controls.py``; full mode: ``test_study_full.py``.
"""

from __future__ import annotations

import json

import pytest

from wflow.apps.output_keys import contract_problems
from wflow.cli import main
from wflow.studies import fit_loglog
from wflow.studies.registry import STUDIES, all_studies

PARTICLE_STUDIES = ["asymptotics", "noisy-edi", "stability", "gamma", "mean-field", "edi"]


@pytest.mark.parametrize("name", PARTICLE_STUDIES)
def test_study_quick(name, tmp_path, capsys):
    out = tmp_path / name
    rc = main(["verify", name, "--quick", "--out", str(out)])
    text = capsys.readouterr().out
    summary = json.loads((out / "summary.json").read_text())
    assert not contract_problems(summary, "verify")  # status, message, checks; keys
    assert summary["study"] == name and summary["verdict"]
    assert all((out / f).is_file() for f in summary["figures"]) and summary["figures"]
    assert rc == 0 and summary["passed"], f"{name} did not pass: {text}"
    # the verdict's criteria (with their accepted ranges) and the negative controls
    assert summary["criteria"] and all(c["ok"] for c in summary["criteria"])
    assert all({"name", "value", "accepted", "what"} <= set(c) for c in summary["criteria"])
    assert summary["fault"] is None and summary["negative_controls"]


def test_registry_lists_core_studies():
    assert set(PARTICLE_STUDIES) <= set(all_studies())
    assert set(STUDIES) >= set(PARTICLE_STUDIES)


def test_fit_loglog_recovers_power_law():
    import numpy as np

    x = np.array([1.0, 2.0, 4.0, 8.0])
    f = fit_loglog(x, 3.0 * x**-1.5)
    np.testing.assert_allclose(f.slope, -1.5, rtol=1e-12)
    np.testing.assert_allclose(np.exp(f.intercept), 3.0, rtol=1e-12)
    with pytest.raises(ValueError, match="two positive"):
        fit_loglog([1.0], [1.0])


def test_unknown_study_is_rejected(capsys):
    with pytest.raises(SystemExit):
        main(["verify", "nope", "--out", "x"])
    assert "invalid choice" in capsys.readouterr().err
