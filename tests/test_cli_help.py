"""Help texts come from the sources the code runs on, and a key of no effect is never ignored.

* Every key of every scenario table a command reads is in its ``--help``, read off the
  schema that validates the table (not off the help generator); every ``summary.json``
  key pattern the output-key table assigns to the command is in its help.
* ``wflow jko`` documents both schemes (the keys grouped by where they apply) and has
  ``--scheme``; a ``[jko]`` key or flag that does not apply to the scheme run is refused
  (exit status 2, one line naming it) or, at its default value, warned about.
"""

from __future__ import annotations

import logging

import pytest

from wflow.apps.output_keys import explain
from wflow.cli import main
from wflow.commands._help import SECTIONS, _get, summary_keys
from wflow.infra.options import schema_of
from wflow.infra.schema import ScenarioError
from wflow.jko.options import JKOOptions, check_applicable, jko_table_from_dict

#: command -> the scenario sections it reads.
COMMANDS = {
    "particles": ("attention", "tokens", "heads", "schedule", "particles"),
    "pde": ("attention", "tokens", "heads", "schedule", "pde", "density"),
    "jko": ("jko", "density"),
    "run": ("attention", "tokens", "heads", "schedule", "particles", "density", "pde", "jko",
            "run"),
    "gaussian": ("gaussian.run", "gaussian.classify", "gaussian.particles"),
    "verify": (),
    "reproduce": (),
}


def _help(capsys, cmd: str) -> str:
    with pytest.raises(SystemExit) as e:
        main([cmd, "--help"])
    assert e.value.code == 0
    return " ".join(capsys.readouterr().out.split())  # the wrapping undone


def _schema_keys(section: str) -> list[str]:
    obj = _get(SECTIONS[section])
    return list(obj) if isinstance(obj, dict) else list(schema_of(obj))


def missing(text: str, sections, command: str) -> list[str]:
    """Scenario keys and summary key patterns that ``text`` does not show."""
    out = [f"[{s}] {k}" for s in sections for k in _schema_keys(s) if f"{k} = " not in text]
    return out + [p for p in summary_keys(command) if p not in text]


@pytest.mark.parametrize("cmd", sorted(COMMANDS))
def test_every_key_is_in_the_help(capsys, cmd):
    text = _help(capsys, cmd)
    assert not missing(text, COMMANDS[cmd], cmd)
    assert "summary.json keys" in text and "status" in text and "checks" in text
    for pattern in summary_keys(cmd):  # each listed pattern is a documented entry
        assert explain(pattern.replace("**", "x").replace("*", "x")) is not None, pattern


def test_a_missing_key_is_caught(capsys):
    """Negative control: a help without one key (or one summary pattern) is caught."""
    text = _help(capsys, "jko")
    assert missing(text.replace("ccp_max = ", "ccp_maxi: "), ("jko",), "jko") == \
        ["[jko] ccp_max"]
    assert "edi_sum" in missing(text.replace("edi_sum", "edisum"), (), "jko")


def test_help_says_the_thing_itself(capsys):
    for cmd in ("gaussian", "particles"):
        text = _help(capsys, cmd)
        assert ".py" not in text.replace("gaussian_riccati.toml", ""), cmd
    top = main_help(capsys)
    assert "Benamou" in top and "minimising movements with (weighted)" not in top


def main_help(capsys) -> str:
    with pytest.raises(SystemExit):
        main(["--help"])
    return " ".join(capsys.readouterr().out.split())


def test_jko_help_documents_both_schemes(capsys):
    text = _help(capsys, "jko")
    assert "--scheme auto|fv|ot" in text
    fv = text.index("keys that apply only with scheme = 'fv':")
    ot = text.index("keys that apply only with scheme = 'ot':")
    for key in ("substeps", "energy", "hamiltonian", "ccp_tol", "ccp_max"):
        assert fv < text.index(f" {key} = ") < ot, key
    for key in ("inner", "gap_rtol", "max_inner", "warm_start"):
        assert text.index(f" {key} = ") > ot, key
    assert text.index(" lock_fraction = ") < fv  # both schemes
    assert "No XDMF" in text and "the same files as `wflow pde`" not in text


SCENARIO = """
seed = 3
[attention]
kind = "softmax"
d = 3
[heads]
type = "matrices"
A = [[[1.0, 0.0, 0.0], [0.0, 0.5, 0.0], [0.0, 0.0, 0.2]]]
w = "mean"
[density]
type = "vmf"
means = [[1.0, 0.0, 0.0]]
kappas = [3.0]
[jko]
mesh = "sphere_720.msh"
T = 0.2
tau = 0.2
"""


def _jko(tmp_path, capsys, extra: str = "", args: tuple = ()) -> tuple[int, str]:
    sc = tmp_path / "s.toml"
    sc.write_text(SCENARIO + extra, encoding="utf-8")
    rc = main(["jko", str(sc), "--out", str(tmp_path / "o"), *args])
    return rc, capsys.readouterr().err


@pytest.mark.parametrize("extra,args,word", [
    ("", ("--ot", "sinkhorn"), "--ot: applies only with scheme = 'ot'"),  # the case
    ('ot = "sinkhorn"\n', (), "jko.ot: applies only with scheme = 'ot'"),
    ('scheme = "ot"\nsubsteps = 2\n', (), "jko.substeps: applies only with scheme = 'fv'"),
    ('substeps = 2\n', ("--scheme", "ot"), "jko.substeps: applies only with scheme = 'fv'"),
    ('scheme = "ot"\neps_scale = 4.0\n', (), "jko.eps_scale: applies only with scheme = 'ot' "
     "and ot = 'sinkhorn'"),
])
def test_a_key_of_no_effect_is_refused(tmp_path, capsys, extra, args, word):
    rc, err = _jko(tmp_path, capsys, extra, args)
    assert rc == 2
    lines = err.strip().splitlines()
    assert len(lines) == 1 and word in lines[0], err
    assert not (tmp_path / "o").exists()  # nothing computed, nothing written


def test_a_key_of_no_effect_at_its_default_is_warned(tmp_path, capsys, caplog):
    with caplog.at_level(logging.WARNING, logger="wflow.jko.options"):
        rc, _ = _jko(tmp_path, capsys, 'ot = "emd"\n')
    assert rc != 2
    assert any(r.levelno == logging.WARNING and "jko.ot" in r.getMessage()
               and "no effect" in r.getMessage() for r in caplog.records)


def test_applicability_is_declared_once():
    """The options level: TOML tables and flags share it; the main job's OT cross-check."""
    fv_key = {"substeps": 2}
    with pytest.raises(ScenarioError, match="jko.substeps"):
        jko_table_from_dict({"scheme": "ot", **fv_key})
    jko_table_from_dict({"scheme": "fv", **fv_key})
    with pytest.raises(ScenarioError, match="jko.ot"):
        jko_table_from_dict({"ot": "sinkhorn"})
    jko_table_from_dict({"ot": "sinkhorn"}, scheme="ot")  # --scheme ot makes it apply
    jko_table_from_dict({"ot": "sinkhorn"}, crosscheck=True)  # wflow run: the OT row
    with pytest.raises(ScenarioError, match="jko.substeps"):  # no OT cross-check helps FV keys
        jko_table_from_dict({"scheme": "ot", **fv_key}, crosscheck=True)
    opts = JKOOptions(T=1.0, tau=0.5, scheme="fv", ot="sinkhorn")  # the API: the caller's
    with pytest.raises(ScenarioError, match="--ot"):
        check_applicable(opts, {"ot"}, label="--{}")
    check_applicable(opts, {"T", "tau", "scheme", "lock_fraction", "verify"})  # both schemes
