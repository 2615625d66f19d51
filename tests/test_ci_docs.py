"""CI builds what a user builds: ``.ci/run`` runs ``make docs`` with the examples executed."""

from __future__ import annotations

import re
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


def ci_builds_docs(ci: str, makefile: str, conf: str) -> bool:
    """True when CI runs ``make docs``, the target runs the gallery, and errors abort it."""
    runs_docs = any(re.fullmatch(r"\s*make docs\s*", line) for line in ci.splitlines())
    target = makefile.split("\ndocs:", 1)[-1].split("\n\n", 1)[0]
    executes = "plot_gallery=0" not in target and "-W" in target
    aborts = re.search(r'"abort_on_example_error":\s*True', conf) is not None
    return runs_docs and executes and aborts


def test_ci_builds_the_docs_with_examples_run():
    assert ci_builds_docs((ROOT / ".ci" / "run").read_text(), (ROOT / "Makefile").read_text(),
                          (ROOT / "docs" / "conf.py").read_text())


def test_ci_without_docs_is_caught():
    # negative controls: the CI script as it was (tests only), and a docs target that skips
    # the gallery, each fail the check
    ci = (ROOT / ".ci" / "run").read_text()
    mk = (ROOT / "Makefile").read_text()
    conf = (ROOT / "docs" / "conf.py").read_text()
    assert not ci_builds_docs(ci.replace("\nmake docs\n", "\n"), mk, conf)
    assert not ci_builds_docs(ci, mk.replace("$(DOCS_ARGS) docs", "-D plot_gallery=0 docs"),
                              conf)
    assert not ci_builds_docs(ci, mk, conf.replace('"abort_on_example_error": True',
                                                   '"abort_on_example_error": False'))


def ci_runs_site_checks(ci: str) -> bool:
    """True when CI runs the slow site test (API pages, generated references) by name."""
    return any("-m slow" in line and "tests/test_docs.py" in line
               and "site_builds_without_warnings" in line and line.lstrip().startswith("make")
               for line in ci.splitlines())


def test_ci_runs_the_site_checks_the_default_suite_leaves_out():
    ci = (ROOT / ".ci" / "run").read_text()
    assert ci_runs_site_checks(ci)
    # negative control: the CI script without that line
    assert not ci_runs_site_checks("\n".join(line for line in ci.splitlines()
                                             if "site_builds_without_warnings" not in line))
