"""Heads files (``heads.type = "file"``, ``schedule.files``) and ``heads.value_sign``.

An archive with ``A`` alone gets ``V = value_sign · A``; an archive that gives ``V`` keeps
it and an explicit, conflicting ``value_sign`` is refused; a ``.npy`` file or
``value_sign = true`` stop with one line (exit 2), before computing (issue 14, item 6).
"""

from __future__ import annotations

import json

import numpy as np
import pytest

import wflow.apps.jobs.particles as prun
from wflow.apps.scenario import ScenarioError, parse_scenario
from wflow.cli import main

A = np.array([[[1.0, 0.2, 0.0], [0.2, 0.5, 0.0], [0.0, 0.0, -0.5]],
              [[0.3, 0.0, 0.1], [0.0, 0.8, 0.0], [0.1, 0.0, 0.4]]])


def _raw(**heads) -> dict:
    return {"seed": 0, "attention": {"kind": "softmax", "beta": 1.0, "d": 3},
            "tokens": {"n": 20}, "heads": {"type": "file", "file": "h.npz", **heads},
            "particles": {"T": 0.1, "dt": 0.05}}


def _toml(tmp_path, raw: dict):
    lines = [f"seed = {raw['seed']}"]
    for sec, vals in raw.items():
        if sec != "seed":
            lines.append(f"[{sec}]")
            lines += [f"{k} = {json.dumps(v)}" for k, v in vals.items()]
    p = tmp_path / "s.toml"
    p.write_text("\n".join(lines) + "\n")
    return p


@pytest.mark.parametrize("sign", [None, 1, -1])
def test_a_only_archive_takes_value_sign(tmp_path, sign):
    np.savez(tmp_path / "h.npz", A=A)
    raw = _raw() if sign is None else _raw(value_sign=sign)
    heads = parse_scenario(raw, base_dir=tmp_path).build_heads()
    expected = 1 if sign is None else sign
    np.testing.assert_array_equal(heads.V, expected * A)
    assert heads.value_alignment() == expected


def test_descent_a_only_archive_descends_at_the_cli(tmp_path, capsys):
    """value_sign = -1 with an A-only file: the run is a descent (sign -1), E decreases."""
    np.savez(tmp_path / "h.npz", A=A)
    out = tmp_path / "o"
    assert main(["particles", str(_toml(tmp_path, _raw(value_sign=-1))), "--out",
                 str(out)]) == 0
    s = json.loads((out / "summary.json").read_text())
    assert s["gradient_flow_sign"] == -1
    E = np.loadtxt(out / "diagnostics.csv", delimiter=",", skiprows=1, usecols=[
        (out / "diagnostics.csv").read_text().splitlines()[0].split(",").index("E")])
    assert E[-1] < E[0]  # negative control of the old behaviour (V = +A: ascent)


@pytest.mark.parametrize("file_sign", [1, -1])
def test_archive_with_v_keeps_it_and_refuses_a_conflicting_sign(tmp_path, file_sign):
    np.savez(tmp_path / "h.npz", A=A, V=file_sign * A)
    # no value_sign, or an agreeing one: V from the file
    for raw in (_raw(), _raw(value_sign=file_sign)):
        heads = parse_scenario(raw, base_dir=tmp_path).build_heads()
        np.testing.assert_array_equal(heads.V, file_sign * A)
    with pytest.raises(ScenarioError, match=r"heads\.value_sign = [+-]1 conflicts with "
                                            r"heads\.file h\.npz"):
        parse_scenario(_raw(value_sign=-file_sign), base_dir=tmp_path).build_heads()


def test_conflicting_sign_at_the_cli_is_one_line_and_computes_nothing(tmp_path, capsys,
                                                                       monkeypatch):
    np.savez(tmp_path / "h.npz", A=A, V=A)
    monkeypatch.setattr(prun, "simulate", lambda *a, **k: pytest.fail("computed"))
    out = tmp_path / "o"
    assert main(["particles", str(_toml(tmp_path, _raw(value_sign=-1))), "--out",
                 str(out)]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "conflicts with heads.file" in err[0]
    assert not out.exists()


def test_npy_file_is_refused_naming_the_format(tmp_path, capsys):
    np.save(tmp_path / "h.npy", A)
    raw = _raw()
    raw["heads"]["file"] = "h.npy"
    out = tmp_path / "o"
    assert main(["particles", str(_toml(tmp_path, raw)), "--out", str(out)]) == 2
    err = capsys.readouterr().err
    lines = err.strip().splitlines()
    assert len(lines) == 1 and "Traceback" not in err
    assert "heads.file" in lines[0] and ".npz archive" in lines[0] and "(.npy)" in lines[0]
    assert not out.exists()


def test_garbage_file_is_refused(tmp_path):
    (tmp_path / "h.npz").write_text("not numpy")
    with pytest.raises(ScenarioError, match=r"heads\.file: .*not readable by numpy\.load"):
        parse_scenario(_raw(), base_dir=tmp_path).build_heads()


@pytest.mark.parametrize("bad", [True, False, 0, 2, -0.5, "1"])
def test_value_sign_is_the_number_plus_or_minus_one(tmp_path, capsys, bad):
    raw = _raw()
    raw["heads"] = {"type": "random_symmetric", "H": 1, "value_sign": bad}
    with pytest.raises(ScenarioError, match=r"heads\.value_sign: must be the number 1"):
        parse_scenario(raw)
    out = tmp_path / "o"
    assert main(["particles", str(_toml(tmp_path, raw)), "--out", str(out)]) == 2
    assert "heads.value_sign" in capsys.readouterr().err and not out.exists()


def test_layer_files_use_the_same_rule(tmp_path):
    np.savez(tmp_path / "l0.npz", A=A)
    np.savez(tmp_path / "l1.npz", A=2 * A)
    raw = _raw(value_sign=-1)
    raw["heads"] = {"type": "random_symmetric", "H": 2, "value_sign": -1}
    raw["schedule"] = {"type": "layers", "files": ["l0.npz", "l1.npz"], "delta": 0.05}
    sched = parse_scenario(raw, base_dir=tmp_path).build_schedule()
    h0 = sched.heads_at(sched.initial_theta())
    np.testing.assert_array_equal(h0.V, -A)
    np.save(tmp_path / "l1.npy", A)
    raw["schedule"]["files"] = ["l0.npz", "l1.npy"]
    with pytest.raises(ScenarioError, match=r"schedule\.files\[1\]: .*\.npz archive"):
        parse_scenario(raw, base_dir=tmp_path).build_schedule()
