"""How to cite wflow: ``CITATION.cff``, ``docs/citing.md``, the theory's references and
``LICENSE`` agree with each other and with ``pyproject.toml``.

``CITATION.cff`` was validated against the Citation File Format 1.2.0 schema when written;
here the facts that drift are checked: the format version, the software's version and
licence, the required keys, and the three papers (title, first author, year, arXiv id)
as stated on every page that cites them.
"""

from __future__ import annotations

import re
import tomllib
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
yaml = pytest.importorskip("yaml")

#: The papers: arXiv id -> (first author's family name, title start, year).
PAPERS = {
    "2605.18870": ("Massucco", "Multi-Headed Transformer Architectures as Time-dependent", 2026),
    "2605.04279": ("Pendharkar", "Gradient Flow Structure and Quantitative Dynamics", 2026),
    "2606.07600": ("Alcalde", "Reachability and asymptotics of Gaussian Transformer", 2026),
}


def _cff() -> dict:
    return yaml.safe_load((ROOT / "CITATION.cff").read_text(encoding="utf-8"))


def test_citation_cff_states_the_software():
    import wflow

    cff = _cff()
    project = tomllib.loads((ROOT / "pyproject.toml").read_text(encoding="utf-8"))["project"]
    assert cff["cff-version"] == "1.2.0"
    for key in ("cff-version", "message", "title", "authors"):  # required by CFF 1.2.0
        assert cff.get(key), key
    assert str(cff["version"]) == project["version"] == wflow.__version__
    assert cff["license"] == project["license"] == "MIT"
    assert all("name" in a or "family-names" in a for a in cff["authors"])


def test_the_papers_agree_on_every_page():
    refs = {r["identifiers"][0]["value"].removeprefix("arXiv:"): r for r in _cff()["references"]}
    assert set(refs) == set(PAPERS)
    pages = {p: (ROOT / p).read_text(encoding="utf-8")
             for p in ("docs/citing.md", "docs/theory.md")}
    for arxiv, (first, title, year) in PAPERS.items():
        r = refs[arxiv]
        assert r["authors"][0]["family-names"] == first and r["year"] == year
        assert r["title"].startswith(title)
        for name, text in pages.items():
            flat = " ".join(text.split())
            assert f"arXiv:{arxiv}" in flat, (name, arxiv)
            assert title in flat, (name, title)
        assert f"eprint        = {{{arxiv}}}" in pages["docs/citing.md"]


def test_the_licence_is_mit_and_names_its_holder():
    text = (ROOT / "LICENSE").read_text(encoding="utf-8")
    assert text.startswith("MIT License")
    assert re.search(r"Copyright \(c\) 2026 the wflow developers", text)
