"""``[attention] mask`` and ``bias`` in a scenario (THEORY §9): read once at load, into the
:class:`~wflow.Attention` every command builds; the particles run the decoder, the PDE and
the JKO refuse it naming the key; bad values exit 2 naming the key; ``mask = "none"`` (the
default) is today's attention object."""

from __future__ import annotations

import json

import pytest

from wflow.attention.heads import Attention
from wflow.attention.mask import ALiBi, Causal
from wflow.cli import main

SCENARIO = """seed = 0
[attention]
kind = "softmax"
beta = 2.0
d = 3
{extra}
[tokens]
n = 40
[heads]
type = "scalar"
lambdas = [1.0]
[particles]
T = 0.5
dt = 0.05
[pde]
mesh = "sphere_720.msh"
T = 0.1
[jko]
tau = 0.05
"""


def scenario(tmp_path, extra: str):
    p = tmp_path / "sc.toml"
    p.write_text(SCENARIO.format(extra=extra))
    return p


def test_the_scenario_builds_the_masked_attention(tmp_path):
    from wflow.apps.scenario import load_scenario

    sc = load_scenario(scenario(tmp_path, 'mask = "causal_strict"\n'
                                          'bias = {type = "alibi", lam = 2.0, n = 40}'))
    a = sc.attention_obj()
    assert a.mask == Causal(strict=True) and a.bias == ALiBi(slope=2.0 / 40)
    plain = load_scenario(scenario(tmp_path, "")).attention_obj()
    assert plain == Attention("softmax", 2.0) and plain.mask is None and plain.bias is None


def test_particles_run_the_decoder_and_the_order_matters(tmp_path, capsys):
    out = tmp_path / "o"
    # a masked run without a tolerance (rtol = "none") judges no check of its own:
    # completed, exit 1, the outputs written
    sc = scenario(tmp_path, 'mask = "causal"')
    sc.write_text(sc.read_text().replace("dt = 0.05", 'dt = 0.05\nrtol = "none"'))
    assert main(["particles", str(sc), "--out", str(out)]) == 1
    outerr = capsys.readouterr()
    err = outerr.err
    # the chain-rule residual on the summary line says that it decides nothing
    assert "(relative)" in outerr.out and "(recorded, not judged)" in outerr.out
    # said before the run (a note), and after it (the status line)
    assert err.index("wflow particles: note: no accuracy check will be judged") < err.index(
        "run completed: no accuracy check was judged"), err
    masked = json.loads((out / "summary.json").read_text())
    assert masked["status"] == "completed" and "particles.rtol" in masked["message"]
    out2 = tmp_path / "o2"
    assert main(["particles", str(scenario(tmp_path, "")), "--out", str(out2)]) == 0
    outerr = capsys.readouterr()  # control: a judged run, no note, its residual judged
    assert "note:" not in outerr.err and "not judged" not in outerr.out
    plain = json.loads((out2 / "summary.json").read_text())
    # negative control: the mask changes the run (the same tokens, the same heads)
    assert masked["final"]["E"]["mean"] != plain["final"]["E"]["mean"]
    # the default rtol = 1e-3 judges the masked run by step doubling: no note, exit 0
    out3 = tmp_path / "o3"
    assert main(["particles", str(scenario(tmp_path, 'mask = "causal"')), "--out",
                 str(out3)]) == 0
    assert "note:" not in capsys.readouterr().err
    judged = json.loads((out3 / "summary.json").read_text())
    assert judged["status"] == "success" and judged["checks"]["accuracy"]["passed"]
    assert judged["final"]["E"]["mean"] == masked["final"]["E"]["mean"]  # the same run


@pytest.mark.parametrize("extra, cmd, key", [
    ('mask = "causal"', "pde", "attention.mask: "),
    ('mask = "causal"', "jko", "attention.mask: "),
    ('mask = "future"', "particles", "attention.mask: "),
    ('bias = {type = "alibi", slope = 0.5}', "particles", "attention.bias: "),
    ('mask = "causal"\nbias = {type = "alibi", slope = -1.0}', "particles",
     "attention.bias.slope: "),
])
def test_refused_with_exit_2_naming_the_key(tmp_path, capsys, extra, cmd, key):
    out = tmp_path / "o"
    assert main([cmd, str(scenario(tmp_path, extra)), "--out", str(out)]) == 2
    err = capsys.readouterr().err.strip()
    assert key in err and "Traceback" not in err, err
