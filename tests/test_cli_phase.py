"""``wflow phase``: β*(d) and the thresholds, as the API computes them; bad input exits 2."""

from __future__ import annotations

import json
import subprocess
import sys

import pytest

from wflow.phase import phase_point, tricritical_beta


def _run(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "wflow.cli", "phase", *args],
                          capture_output=True, text=True, timeout=300)


def test_beta_star_matches_the_api():
    r = _run("beta-star", "--d", "2", "3", "8", "--json")
    assert r.returncode == 0, r.stderr
    recs = json.loads(r.stdout)
    assert [x["d"] for x in recs] == [2, 3, 8]
    for x in recs:
        assert x["beta_star"] == tricritical_beta(x["d"])  # the same function: bit equality
    assert recs[1]["beta_star"] == pytest.approx(1.8161545, abs=1e-7)


def test_point_matches_the_api_and_converts_to_diffusions():
    r = _run("point", "--beta", "3", "--d", "3", "--json")
    assert r.returncode == 0, r.stderr
    (x,) = json.loads(r.stdout)
    p = phase_point(3.0, 3)
    assert x["k_c"] == p.k_c and x["k_fold"] == p.k_fold and x["transition"] == "discontinuous"
    assert x["D_c"] == pytest.approx(1 / (2 * p.k_c), rel=1e-15)
    assert x["k_fold"] < x["k_c"] < x["k_sharp"]


@pytest.mark.parametrize("args, key", [(("point", "--beta", "-1"), "beta"),
                                       (("point", "--beta", "nan"), "beta"),
                                       (("beta-star", "--d", "1"), "d")])
def test_bad_input_exits_2_naming_the_argument(args, key):
    r = _run(*args)
    assert r.returncode == 2
    line = r.stderr.strip().splitlines()[-1]
    assert f"{key}:" in line and "Traceback" not in r.stderr
