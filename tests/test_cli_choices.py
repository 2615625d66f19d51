"""The command line's choice lists are read from the registries and options they override."""

from __future__ import annotations

import argparse

import pytest

from wflow.cli import build_parser


def _options(parser: argparse.ArgumentParser) -> dict[str, tuple]:
    """``{option: choices}`` of a parser and of its subcommands' parsers."""
    out = {}
    for a in parser._actions:
        if isinstance(a, argparse._SubParsersAction):
            for p in a.choices.values():
                out.update(_options(p))
        elif a.choices is not None and a.option_strings:
            out[a.dest] = tuple(a.choices)
    return out


def _choices(command: str) -> dict[str, tuple]:
    """``{option: choices}`` of every option with a choice list of ``wflow COMMAND``."""
    sub = next(a for a in build_parser()._actions if isinstance(a, argparse._SubParsersAction))
    return _options(sub.choices[command])


def _expected() -> dict[tuple[str, str], tuple]:
    from wflow.attention.published import HEAD_GENERATORS
    from wflow.geometry.mesh.generation import METHODS
    from wflow.infra.options import choices_of
    from wflow.jko.options import OT_METHODS, SCHEMES, JKOOptions
    from wflow.pde.options import PDEOptions

    assert choices_of(JKOOptions, "ot") == OT_METHODS
    assert choices_of(JKOOptions, "scheme") == SCHEMES.names()
    return {("jko", "ot"): choices_of(JKOOptions, "ot"),
            ("pde", "order"): choices_of(PDEOptions, "order"),
            ("mesh", "method"): METHODS,
            ("reproduce", "heads_generator"): HEAD_GENERATORS}


@pytest.mark.parametrize("command, option", list(_expected()))
def test_a_cli_choice_list_is_its_registry(command, option):
    assert _choices(command)[option] == _expected()[(command, option)]


def test_every_choice_list_of_the_cli_is_checked():
    """No choice list escapes the test above (a new one must name its registry here)."""
    sub = next(a for a in build_parser()._actions if isinstance(a, argparse._SubParsersAction))
    found = {(c, o) for c in sub.choices for o in _choices(c)}
    assert found == set(_expected()), sorted(found ^ set(_expected()))


def test_the_comparison_catches_a_restated_list(monkeypatch):
    """Negative control: a choice list restated by hand (one value short) differs."""
    import wflow.infra.options as io

    real = io.choices_of
    monkeypatch.setattr(io, "choices_of",
                        lambda cls, name: real(cls, name)[:-1] if name == "ot" else
                        real(cls, name))
    with pytest.raises(AssertionError):
        assert _choices("jko")["ot"] == _expected()[("jko", "ot")]


def test_choices_of_refuses_an_option_without_choices():
    from wflow.infra.options import choices_of
    from wflow.pde.options import PDEOptions

    with pytest.raises(ValueError, match="not a choice"):
        choices_of(PDEOptions, "T")
    with pytest.raises(ValueError, match="no option"):
        choices_of(PDEOptions, "nope")


def test_jko_scheme_flag_is_checked_by_the_table_under_its_name(tmp_path, capsys):
    """``--scheme`` has no argparse list (a scenario's modules may register a scheme): the
    ``[jko]`` table refuses an unknown value naming the flag, before anything is written."""
    from wflow.cli import main

    from .test_noisy_wiring_cli import err_line, scenario

    p = scenario(tmp_path, None)
    assert main(["jko", str(p), "--out", str(tmp_path / "o"), "--scheme", "smooth_ot"]) == 2
    assert err_line(capsys).startswith("wflow jko: error: --scheme: must be one of")
    assert not (tmp_path / "o").exists()
