"""``wflow reproduce mun_rosenzweig``: the noisy transformer's phase transition, judged.

Neither paper publishes code; their closed forms (implemented here from the statements)
are judged against the branches :mod:`wflow.phase` computes. Tested:

* the closed forms against wflow.phase's independent implementation and an adaptive
  quadrature without Bessel functions (tolerances from eps and the quadrature's
  ``epsrel``);
* the verdicts through the public API: the papers' forms are REPRODUCED, both negative
  controls (``β*`` from the Bessel index shifted by one; ``K_#`` doubled, the ``K ↔ D``
  convention off by 2) are NOT REPRODUCED, each refuting the claim it perturbs; a ``K_#``
  off by 1e-6 is refuted and one off by 3e-11 (between the tolerance and ten times it) is
  INCONCLUSIVE;
* the command line's exit-code contract: 0 only for success, 1 for a refuted or an
  inconclusive verdict (closed forms swapped through the module), 2 for bad input.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

import wflow.published.mun_rosenzweig as mr
from wflow.apps.output_keys import contract_problems
from wflow.cli import main
from wflow.phase import k_sharp, tricritical_beta
from wflow.published import FIELD
from wflow.status import Claim

ROOT = Path(__file__).resolve().parents[1]
EPS = np.finfo(float).eps
QUICK = mr.MunRosenzweigOptions.quick()


def test_registered_in_the_field():
    assert FIELD["mun_rosenzweig"][0] == "wflow.published.mun_rosenzweig"


@pytest.mark.parametrize("d", [2, 3, 4, 8])
def test_closed_forms_agree_with_wflow_phase_and_quadrature(d):
    for beta in (0.5, 3.0, 8.0):
        # two evaluations of the same Bessel expression (iv against scaled ive in logs):
        # a few ulps each, 64 eps leaves room
        assert mr.published_k_sharp(beta, d) == pytest.approx(k_sharp(beta, d), rel=64 * EPS)
        # adaptive quadrature asked for epsrel 1e-13 on an analytic integrand
        assert mr.quadrature_k_sharp(beta, d) == pytest.approx(k_sharp(beta, d), rel=1e-12)
    # Brent to xtol 1e-15 on both sides: ~10 ulps of beta* ≈ 1-2.5
    assert mr.published_beta_star(d) == pytest.approx(tricritical_beta(d), rel=1e-13)
    # the control's root is far from it (the Bessel index shifted by one)
    assert mr.wrong_index_beta_star(d) < 0.85 * mr.published_beta_star(d)


def test_computed_landau_root_is_the_closed_form():
    for d in (2, 3):
        assert abs(mr.numerical_beta_star(d) / mr.published_beta_star(d) - 1) \
            < mr.BETA_STAR_RTOL / 10  # measured 1.4e-7 (d = 2), 1e-8 (d = 3)
    k0, a = mr.branch_start(3.0, 3)
    assert abs(k0 / mr.published_k_sharp(3.0, 3) - 1) < mr.K_BRANCH_RTOL and a < 0


@pytest.fixture(scope="module")
def verdicts():
    return {"published": mr.judge(mr.PUBLISHED, QUICK),
            **{k: mr.judge(f, QUICK) for k, f in mr.CONTROLS.items()}}


def test_published_claims_are_reproduced(verdicts):
    v = verdicts["published"]
    assert v.verdict == Claim.REPRODUCED and v.passed
    assert set(v.claims) == {f"{c}_d{d}" for c in mr.CLAIMS for d in (2, 3)}
    assert all(x == Claim.REPRODUCED for x in v.claims.values())
    assert all(c["passed"] for c in v.checks.values())


def test_negative_controls_are_not_reproduced(verdicts):
    wrong = verdicts["wrong_bessel_index"]
    assert wrong.verdict == Claim.NOT_REPRODUCED
    for d in (2, 3):
        assert wrong.claims[f"beta_star_d{d}"] == Claim.NOT_REPRODUCED
        assert wrong.claims[f"discontinuous_d{d}"] == Claim.NOT_REPRODUCED  # no fold there
        assert wrong.claims[f"k_sharp_d{d}"] == Claim.REPRODUCED  # untouched
    doubled = verdicts["k_sharp_doubled"]
    assert doubled.verdict == Claim.NOT_REPRODUCED
    for d in (2, 3):
        assert doubled.claims[f"k_sharp_d{d}"] == Claim.NOT_REPRODUCED
        assert doubled.claims[f"beta_star_d{d}"] == Claim.REPRODUCED


def _shifted(rel: float) -> mr.ClosedForms:
    return mr.ClosedForms(f"k_sharp_times_1+{rel:g}",
                          lambda b, d: (1 + rel) * mr.published_k_sharp(b, d),
                          mr.published_beta_star)


def test_tolerances_grade_small_errors():
    opts = mr.MunRosenzweigOptions.quick(betas=(3.0,))
    assert mr.judge(_shifted(1e-6), opts).claims["k_sharp_d2"] == Claim.NOT_REPRODUCED
    v = mr.judge(_shifted(3e-11), opts)  # quadrature check: 1e-11 < 3e-11 <= 1e-10
    assert v.claims["k_sharp_d2"] == Claim.INCONCLUSIVE and v.verdict == Claim.INCONCLUSIVE


def test_options_refuse_bad_settings():
    for bad in ({"dims": (2,)}, {"betas": (0.0,)}, {"betas": (20.0,)}, {"margin": 0.7},
                {"above": (1.0,)}):
        with pytest.raises(ValueError, match="mun_rosenzweig"):
            mr.MunRosenzweigOptions(**bad)


def _run(tmp_path, name="o"):
    out = tmp_path / name
    rc = main(["reproduce", "mun_rosenzweig", "--quick", "--out", str(out)])
    return rc, json.loads((out / "summary.json").read_text()), out


def test_cli_success_writes_the_contract(tmp_path):
    rc, s, out = _run(tmp_path)
    assert rc == 0 and s["status"] == "success" and s["verdict"] == "reproduced"
    assert not contract_problems(s, "reproduce")
    assert s["control_wrong_bessel_index"] == s["control_k_sharp_doubled"] == "not reproduced"
    assert all(set(c) == {"value", "tolerance", "passed", "rule"} for c in s["checks"].values())
    assert all(c["passed"] for c in s["checks"].values())
    assert (out / "report.md").read_text().startswith("# mun_rosenzweig — REPRODUCED")
    for f in s["figures"]:
        assert (out / f).is_file() and (out / f).stat().st_size > 0
    nums = json.loads((out / "mun_rosenzweig_numbers.json").read_text())
    assert nums["control_claims"]["k_sharp_doubled"]["k_sharp_d2"] == "not reproduced"


def test_cli_exit_status_follows_a_refuted_or_inconclusive_verdict(tmp_path, monkeypatch):
    monkeypatch.setattr(mr, "PUBLISHED", mr.CONTROLS["k_sharp_doubled"])
    rc, s, _ = _run(tmp_path, "refuted")
    assert rc == 1 and s["status"] == "failed" and s["verdict"] == "not reproduced"
    assert not all(c["passed"] for c in s["checks"].values())
    monkeypatch.setattr(mr, "PUBLISHED", _shifted(3e-11))
    rc, s, _ = _run(tmp_path, "unsure")
    assert rc == 1 and s["status"] == "inconclusive" and s["verdict"] == "inconclusive"


def test_cli_refuses_mixing_with_other_experiments(tmp_path):
    assert main(["reproduce", "mun_rosenzweig", "glpr_phase", "--out",
                 str(tmp_path / "x")]) == 2
    assert not (tmp_path / "x").exists()


def test_subprocess_exit_code(tmp_path):
    r = subprocess.run([sys.executable, "-m", "wflow.cli", "reproduce", "mun_rosenzweig",
                        "--quick", "--out", str(tmp_path / "o")], capture_output=True,
                       text=True, timeout=600, env={**os.environ, "PYTHONPATH": str(ROOT)})
    assert r.returncode == 0, r.stdout + r.stderr
    assert "published claims REPRODUCED" in r.stdout
