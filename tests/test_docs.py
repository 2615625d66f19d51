"""The documentation site builds with warnings as errors (``make docs``).

The slow suite builds the whole site with the gallery not executed (``-D
plot_gallery=0``): every page, the API reference of every public name, the generated
references; any warning or broken cross-reference fails (``-n -W``); and with every demo
and tutorial executed in quick mode, checking that their figures are shown. Both are
slow for the default suite (a minute and several); CI runs the first after ``make docs``
(``.ci/run``), and ``make test-docs`` runs them all.
A tiny project with one bad reference proves that a broken reference does fail.
"""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

pytest.importorskip("sphinx")
pytest.importorskip("sphinx_gallery")

ROOT = Path(__file__).resolve().parents[1]
DOCS = ROOT / "docs"


def _sphinx(src: Path, out: Path, *extra: str, timeout: float) -> subprocess.CompletedProcess:
    env = dict(os.environ, MPLBACKEND="Agg", PYTHONPATH=str(ROOT))
    cmd = [sys.executable, "-m", "sphinx", "-b", "html", "-n", "-W", "--keep-going", "-q",
           "-d", str(out / ".doctrees"), *extra, str(src), str(out)]
    return subprocess.run(cmd, capture_output=True, text=True, env=env, timeout=timeout,
                          cwd=ROOT)


@pytest.mark.slow
def test_site_builds_without_warnings(tmp_path):
    r = _sphinx(DOCS, tmp_path, "-D", "plot_gallery=0", timeout=600)
    assert r.returncode == 0, f"sphinx-build failed:\n{r.stdout}\n{r.stderr}"
    assert "WARNING" not in r.stderr, r.stderr
    html = tmp_path
    for page in ("index.html", "theory.html", "search.html", "api/index.html",
                 "api/wflow.html", "reference/scenario_keys.html", "reference/studies.html",
                 "reference/output_keys.html", "gallery/index.html", "auto_tutorials/index.html"):
        assert (html / page).is_file(), page
    # every name of wflow.__all__ is described on the API pages (directly or as a link)
    import wflow

    api = (html / "api" / "wflow.html").read_text(encoding="utf-8")
    missing = [n for n in wflow.__all__ if n != "__version__" and n not in api]
    assert not missing, f"not in the API reference: {missing}"
    # the generated references list every scenario key, study and output key
    from wflow.apps.output_keys import SUMMARY_KEYS
    from wflow.pde.options import PDE_SCHEMA
    from wflow.studies.registry import STUDIES

    keys = (html / "reference" / "scenario_keys.html").read_text(encoding="utf-8")
    assert all(f">{k}<" in keys for k in PDE_SCHEMA), "a [pde] key is missing"
    studies = (html / "reference" / "studies.html").read_text(encoding="utf-8")
    assert all(name in studies for name in STUDIES)
    out_keys = (html / "reference" / "output_keys.html").read_text(encoding="utf-8")
    tails = [e.pattern.replace("*", "").split(".")[-1] for e in SUMMARY_KEYS]
    assert all(t in out_keys for t in tails)
    # theory sections numbered as cited by the docstrings: "docs/theory.md §N"
    theory = (html / "theory.html").read_text(encoding="utf-8")
    for n in range(1, 8):
        assert f"{n}. " in theory, f"theory §{n} missing"
    # the pages users expect (issue 34): install, troubleshooting, changelog, citing
    for page in ("install.html", "troubleshooting.html", "changelog.html", "citing.html"):
        assert (html / page).is_file(), page
    # offline: no page loads a script, a style sheet or an image from another host, and
    # the maths is rendered by the bundled MathJax
    remote = [(str(p.relative_to(html)), m.group(0)) for p in html.rglob("*.html")
              for m in REMOTE.finditer(p.read_text(encoding="utf-8"))]
    assert not remote, f"pages load remote resources: {remote[:5]}"
    assert "_static/mathjax/tex-svg-full.js" in theory
    assert (html / "_static" / "mathjax" / "tex-svg-full.js").is_file()
    # every internal link and anchor resolves (the build warns, -W fails; checked again)
    sys.path.insert(0, str(DOCS / "_ext"))
    from wflow_links import broken_links

    assert broken_links(html) == []
    # no development notes on user pages (the history is in the changelog)
    notes = [(str(p.relative_to(html)), m.group(0)) for p in html.rglob("*.html")
             if p.name != "changelog.html" and "_modules" not in p.parts
             for m in DEV_NOTE.finditer(re.sub(r"<[^>]+>", " ", p.read_text(encoding="utf-8")))]
    assert not notes, f"development notes on user pages: {notes[:8]}"


#: A development note: an issue number, a "what changed (issue N)" section.
DEV_NOTE = re.compile(r"\bissues? #?\d+\b|\(#\d+\)|What changed \(", re.I)

#: A script, style sheet, image or frame loaded from another host (``//host``, ``http(s)://``).
REMOTE = re.compile(r"<(?:script|link|img|iframe|source)\b[^>]*\b(?:src|href)=[\"']?"
                    r"(?:https?:)?//", re.I)


def test_a_broken_anchor_fails_the_build(tmp_path):
    """Negative control of the link check (``docs/_ext/wflow_links.py``): a link to an
    anchor that no page has, or to a page that does not exist, fails ``-W``; the same
    link to an existing anchor builds."""
    src = tmp_path / "src"
    src.mkdir()
    (src / "conf.py").write_text(
        "import sys\n"
        f"sys.path.insert(0, {str(DOCS / '_ext')!r})\n"
        "extensions = ['myst_parser', 'wflow_links']\n", encoding="utf-8")
    (src / "other.md").write_text("# Other\n\n## A section\n", encoding="utf-8")
    index = "# t\n\n```{toctree}\nother\n```\n\n<a href=\"other.html#%s\">x</a>\n"
    (src / "index.md").write_text(index % "a-section", encoding="utf-8")
    r = _sphinx(src, tmp_path / "ok", timeout=300)
    assert r.returncode == 0, r.stderr
    (src / "index.md").write_text(index % "no-such-section", encoding="utf-8")
    r = _sphinx(src, tmp_path / "bad", timeout=300)
    assert r.returncode != 0
    assert "no-such-section" in r.stderr and "no such anchor" in r.stderr, r.stderr
    (src / "index.md").write_text(index.replace("other.html", "gone.html") % "a-section",
                                  encoding="utf-8")
    r = _sphinx(src, tmp_path / "gone", timeout=300)
    assert r.returncode != 0 and "no such page" in r.stderr, r.stderr


def test_a_broken_reference_fails_the_build(tmp_path):
    """Negative control: the resolver and ``-n -W`` turn a reference to a name that does not
    exist into an error, while names that exist resolve."""
    src = tmp_path / "src"
    src.mkdir()
    (src / "conf.py").write_text(
        "import sys\n"
        f"sys.path.insert(0, {str(DOCS / '_ext')!r})\n"
        "import wflow_api\n"
        "extensions = ['sphinx.ext.autodoc', 'myst_parser']\n"
        "nitpicky = True\n"
        "def setup(app):\n"
        "    app.connect('missing-reference', wflow_api.resolve_missing)\n",
        encoding="utf-8")
    good = ("# t\n\n{py:func}`wflow.particles.simulate` and "
            "{py:class}`wflow.attention.heads.Heads` and {py:func}`simulate`\n")
    (src / "index.md").write_text(good, encoding="utf-8")
    r = _sphinx(src, tmp_path / "ok", timeout=300)
    assert r.returncode == 0, r.stderr
    (src / "index.md").write_text(good + "\n{py:func}`wflow.particles.no_such_function`\n",
                                  encoding="utf-8")
    r = _sphinx(src, tmp_path / "bad", timeout=300)
    assert r.returncode != 0
    assert "no_such_function" in r.stderr


@pytest.mark.slow
def test_site_builds_with_the_gallery_executed(tmp_path):
    r = _sphinx(DOCS, tmp_path, timeout=3600)
    assert r.returncode == 0, f"sphinx-build failed:\n{r.stdout}\n{r.stderr}"
    demos = sorted(p.stem for p in (ROOT / "demos").glob("*.py"))
    for stem in demos:
        page = (tmp_path / "gallery" / f"{stem}.html").read_text(encoding="utf-8")
        assert "sphx-glr-script-out" in page or "<img" in page, f"{stem}: no output shown"
    for page in (tmp_path / "auto_tutorials").glob("plot_*.html"):
        assert "<img" in page.read_text(encoding="utf-8"), f"{page.name}: no figure"
