"""One verdict vocabulary and one outcome base (issue 39, item 5).

* No status or verdict word is compared as a string literal in ``wflow/``: an AST scan of
  every module (``==``/``!=``/``is``, ``in`` a literal tuple/list/set, ``startswith`` /
  ``endswith``, ``match`` cases), with negative controls: the scanner flags a comparison
  injected into a real module's source and into a module written to a temporary folder.
* Every public outcome type derives from :class:`wflow.results.Outcome` and answers
  ``status``, ``message``, ``checks``, ``history`` and ``run_status``.
* The enums write what the strings wrote: ``summary.json`` of a study is byte-identical to
  the one written from plain strings.
"""

from __future__ import annotations

import ast
import json
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import pytest

import wflow
from wflow.results import Outcome, SolverResult, status_summary
from wflow.status import Claim, Reach, Status, Verdict, as_status

ROOT = Path(wflow.__file__).resolve().parent

#: Every word of the four vocabularies (compared case-insensitively).
VOCAB = frozenset(m.value.casefold() for e in (Status, Verdict, Claim, Reach) for m in e)

#: Comparisons left in files this change does not own, at most this many per file. The
#: owners (issue 39's spec/job-runner branch) replace them with ``Reach.REACHED`` /
#: ``Verdict.FAIL``; the table may only shrink (a count above it, or a file not listed,
#: fails).
PENDING: dict[str, int] = {}


def _word(node: ast.AST) -> bool:
    return (isinstance(node, ast.Constant) and isinstance(node.value, str)
            and node.value.casefold() in VOCAB)


def literal_comparisons(source: str) -> list[tuple[int, str]]:
    """``(line, code)`` of every comparison of a status/verdict string literal in ``source``.

    Flagged: ``x == "WORD"`` (``!=``, ``is``, ``is not``, either side), ``x in ("WORD",
    ...)`` (a literal tuple, list or set on the right), ``x.startswith("WORD")`` /
    ``endswith`` and ``case "WORD":``. Not flagged: a word *searched in* a container
    (``"locked" in history``: a key, not a status), a dict lookup, a string written.
    """
    hits: list[tuple[int, str]] = []
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, ast.Compare):
            sides = [node.left, *node.comparators]
            for i, op in enumerate(node.ops):
                a, b = sides[i], sides[i + 1]
                eq = isinstance(op, (ast.Eq, ast.NotEq, ast.Is, ast.IsNot)) and (
                    _word(a) or _word(b))
                member = (isinstance(op, (ast.In, ast.NotIn))
                          and isinstance(b, (ast.Tuple, ast.List, ast.Set))
                          and any(_word(e) for e in b.elts))
                if eq or member:
                    hits.append((node.lineno, ast.unparse(node)))
                    break
        elif (isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute)
              and node.func.attr in ("startswith", "endswith") and node.args
              and (_word(node.args[0]) or (isinstance(node.args[0], ast.Tuple)
                                           and any(_word(e) for e in node.args[0].elts)))):
            hits.append((node.lineno, ast.unparse(node)))
        elif isinstance(node, ast.MatchValue) and _word(node.value):
            hits.append((node.lineno, f"case {ast.unparse(node.value)}"))
    return sorted(hits)


def scan(root: Path) -> dict[str, list[tuple[int, str]]]:
    """:func:`literal_comparisons` of every ``*.py`` under ``root`` (relative paths)."""
    out = {}
    for path in sorted(root.rglob("*.py")):
        hits = literal_comparisons(path.read_text(encoding="utf-8"))
        if hits:
            out[path.relative_to(root).as_posix()] = hits
    return out


def test_no_status_or_verdict_literal_is_compared_in_wflow():
    found = scan(ROOT)
    over = {f: h for f, h in found.items() if len(h) > PENDING.get(f, 0)}
    assert not over, ("compare the enum members (wflow.status: Status, Verdict, Claim, "
                      f"Reach), not their strings: {over}")
    # every module this change owns is clean
    owned = ("status.py", "results.py", "studies/", "published/", "gaussian/reach.py",
             "gaussian/verdict.py", "apps/main/", "apps/report.py", "apps/reproduce.py")
    assert not [f for f in found if f.startswith(owned)], found


def test_scanner_flags_a_comparison_injected_into_a_real_module():
    """Negative control: the main job's summary with its FAIL comparison spelled as text."""
    src = (ROOT / "apps/main/summary.py").read_text(encoding="utf-8")
    good = 'v["verdict"] == Verdict.FAIL'
    assert src.count(good) == 1 and literal_comparisons(src) == []
    hits = literal_comparisons(src.replace(good, 'v["verdict"] == "FAIL"'))
    assert len(hits) == 1 and "'FAIL'" in hits[0][1], hits


def test_scanner_flags_every_form_and_only_those(tmp_path):
    """Negative control on a module written to disk, and the forms that are not flagged."""
    pkg = tmp_path / "pkg"
    pkg.mkdir()
    (pkg / "bad.py").write_text(
        "def f(res, v, s, word):\n"
        "    a = res.status != 'success'\n"            # 1: !=
        "    b = 'reached' == res.status\n"             # 2: literal on the left
        "    c = v in ('FAIL', 'WARN')\n"               # 3: a literal tuple
        "    d = s.startswith('Not Reproduced')\n"      # 4: any case, startswith
        "    match word:\n"
        "        case 'inconclusive':\n"                # 5: a match case
        "            pass\n"
        "    return a, b, c, d\n", encoding="utf-8")
    (pkg / "good.py").write_text(
        "from wflow.status import Status, Verdict\n"
        "def g(res, v, history, table):\n"
        "    x = res.status == Status.SUCCESS and v in (Verdict.FAIL, Verdict.WARN)\n"
        "    y = 'locked' in history and table['PASS']\n"  # a key search, a lookup
        "    return x, y, {'status': 'success'}, res.name == 'reach'\n", encoding="utf-8")
    found = scan(pkg)
    assert list(found) == ["bad.py"] and [ln for ln, _ in found["bad.py"]] == [2, 3, 4, 5, 7]


# ----------------------------------------------------------------------------- the enums
def test_the_enums_write_the_words_written_before():
    assert [v.value for v in Verdict] == ["PASS", "WARN", "INCONCLUSIVE", "FAIL", "reported",
                                          "n/a", "defect (expected)"]
    assert [c.value for c in Claim] == ["reproduced", "inconclusive", "not reproduced"]
    assert [r.value for r in Reach] == ["reached", "missed"]
    members = [*Verdict, *Claim, *Reach]
    assert json.dumps(members) == json.dumps([m.value for m in members])
    assert [f"{m}" for m in members] == [str(m) for m in members] == [m.value for m in members]
    # each word maps to one verdict and one status
    assert {c: c.verdict for c in Claim} == {Claim.REPRODUCED: Verdict.PASS,
                                             Claim.INCONCLUSIVE: Verdict.INCONCLUSIVE,
                                             Claim.NOT_REPRODUCED: Verdict.FAIL}
    assert [as_status(w) for w in (Verdict.PASS, Verdict.INCONCLUSIVE, Verdict.FAIL,
                                   Reach.REACHED, Reach.MISSED, "locked")] == [
        Status.SUCCESS, Status.INCONCLUSIVE, Status.FAILED, Status.SUCCESS, Status.INACCURATE,
        Status.LOCKED]
    with pytest.raises(ValueError):
        as_status("PASS")  # a verdict's string is no status


def test_verdict_status_and_the_main_job_words_are_today_s():
    from wflow.apps.main.verdicts import MIN_JUDGED_LEVELS, _table_verdict
    from wflow.studies.base import VERDICT_STATUS

    assert VERDICT_STATUS == {"PASS": "success", "INCONCLUSIVE": "inconclusive",
                              "FAIL": "failed"}

    def before(ok: bool, levels: int) -> str:  # the function as it read before the enum
        return "PASS" if ok else ("FAIL" if levels >= MIN_JUDGED_LEVELS else "WARN")

    for ok in (True, False):
        for levels in range(1, 6):
            got = _table_verdict(ok, levels)
            assert isinstance(got, Verdict) and got == before(ok, levels)
    for nl, ns, word in ((0, 5, "PASS"), (2, 5, "WARN"), (5, 5, "FAIL")):
        assert Verdict.of(nl == 0, judged=nl == ns) == word


def test_study_summary_json_is_byte_identical_to_the_strings(tmp_path):
    from wflow.studies.base import Criterion, StudyResult, conclude, study_status, write_study

    crit = [Criterion("slope", 2.5, lo=0.9, hi=1.1, what="order", why="first order")]
    passed, text, entries = conclude(crit, "details.", fault=None, faults={"x": "y"})
    res = write_study(tmp_path / "s", StudyResult("demo", {"quick": True, **entries}, text,
                                                  passed))
    assert res.decision is Verdict.FAIL and res.status is Status.FAILED
    expected = {"status": "failed", "message": text, "checks": {
        "slope": {"value": 2.5, "tolerance": "in [0.9, 1.1]", "passed": False,
                  "rule": "first order"}}, "study": "demo", "passed": False, "verdict": text,
        "figures": [], "dtype": "float64", "quick": True, **json.loads(json.dumps(entries))}
    got = (tmp_path / "s" / "summary.json").read_text(encoding="utf-8")
    assert got == json.dumps(expected, indent=2) + "\n"
    assert study_status(res) == (Status.FAILED, text, expected["checks"])
    words = {"All 1 criteria hold.": True, "INCONCLUSIVE — the control did not fail": False,
             "INCONCLUSIVE, NOT REPRODUCED": False, "FAIL — INCONCLUSIVE": False}
    got_words = [StudyResult("x", {}, t, p).decision for t, p in words.items()]
    assert got_words == ["PASS", "INCONCLUSIVE", "FAIL", "FAIL"]


# ----------------------------------------------------------------------- the outcome base
def _published_verdicts() -> list[Outcome]:
    from wflow.published import glpr_phase as gp
    from wflow.published import metastable_staircase as ms
    from wflow.published.castin_ranks import verdict as cr

    b = gp.torch_linspace(0.1, 9, 10)
    t = gp.torch_linspace(0, 30, 50)
    P = np.clip((t[None, :] - (2 + 2 * b)[:, None]) / 4 + 0.5, 0, 1)
    se = np.full_like(P, 0.01)
    ramp = np.linspace(0.2, 1.0, 200)  # a smooth rise: no plateau, not reproduced
    runs = {"identity": {3: {"attempts": [{"converged": True, "rank": 2, "exact_rank": 2}]}}}
    return [gp.judge_phase(b, t, P, se), gp.judge_phase(b, t, P[::-1], se),
            ms.judge_staircase({1.0: ramp}, lr=1e-3), cr.judge_ranks(runs, 2)]


def test_every_public_outcome_type_shares_the_base():
    from wflow import JKOResult, ParticleResult, PDEResult, ReproduceResult
    from wflow.apps.main import MainJobResult
    from wflow.gaussian import GaussianTrajectory, ReachResult
    from wflow.published.castin_ranks.verdict import RankVerdict
    from wflow.published.glpr_phase import PhaseVerdict
    from wflow.published.metastable_staircase import StaircaseVerdict
    from wflow.studies.base import StudyResult

    for cls in (SolverResult, ParticleResult, PDEResult, JKOResult, GaussianTrajectory,
                StudyResult, MainJobResult, ReachResult, ReproduceResult, PhaseVerdict,
                StaircaseVerdict, RankVerdict):
        assert issubclass(cls, Outcome), cls
    assert wflow.Outcome is Outcome and wflow.Verdict is Verdict


def test_outcomes_answer_status_message_checks_history():
    from wflow.apps.main import MainJobResult
    from wflow.studies.base import StudyResult

    outcomes = [SolverResult("inaccurate", "chain residual 0.3", None,
                             checks={"chain": {"passed": False}}),
                StudyResult("x", {"criteria": [{"name": "c", "value": 1.0, "accepted": "≤ 0",
                                                "ok": False, "why": "w"}]}, "FAIL — c", False),
                MainJobResult("success", {"message": "", "checks": {"pde": {}}}, Path(".")),
                *_published_verdicts()]
    for o in outcomes:
        assert isinstance(o.run_status, Status) and isinstance(o.message, str)
        assert isinstance(o.checks, dict) and len(o.history) >= 0
        assert o.explain().startswith(o.run_status.value)
        assert status_summary(o)["status"] == o.run_status.value
    sr, st, mj, ph_ok, ph_bad, stair, ranks = outcomes
    assert sr.failed_checks() == ["chain"] and not sr.usable
    assert (st.status, st.message, st.failed_checks()) == (Status.FAILED, "FAIL — c", ["c"])
    assert (mj.status, mj.message, mj.usable) == (Status.SUCCESS, "", True)
    assert ph_ok.status is Claim.REPRODUCED and ph_ok.message == "" and ph_ok.passed
    assert ph_bad.status == "not reproduced" and ph_bad.run_status is Status.FAILED
    assert ph_bad.message.startswith(Claim.NOT_REPRODUCED + ": checks not passed: ")
    assert stair.verdict is Claim.NOT_REPRODUCED and "plateaus" in stair.message
    assert ranks.verdict is Claim.INCONCLUSIVE  # fewer converged draws than asked
    assert ranks.failed_checks() == ["identity_d3_converged"]


def test_reach_is_an_outcome_with_its_checks():
    from wflow.gaussian import reach

    ok = reach(np.zeros(2), np.eye(2), np.ones(2), np.eye(2), 1.0)
    missed = reach(np.zeros(2), np.eye(2), np.ones(2), 2 * np.eye(2), 1.0, tol=1e-300)
    assert ok.status is Reach.REACHED and ok.run_status is Status.SUCCESS and ok.message == ""
    assert all(c["passed"] for c in ok.checks.values()) and ok.history is ok.trajectory.history
    assert missed.status is Reach.MISSED and missed.run_status is Status.INACCURATE
    assert missed.failed_checks() and not missed.usable
    assert json.loads(json.dumps(missed.to_dict()["status"])) == "missed"


def test_an_outcome_without_its_four_attributes_is_refused():
    """Negative control of the base: a subclass that forgets ``history`` is refused."""
    with pytest.raises(TypeError, match="missing history"):
        @dataclass(frozen=True)
        class Partial(Outcome):  # noqa: F841 - defining it is the test
            status: Status
            message: str
            checks: dict
