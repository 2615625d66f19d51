"""The measured numbers the pages quote agree with the results files (``bench/results``).

``bench/doc_numbers.py`` derives every table and phrase of ``docs/guide/performance.md``
and the speed figures of the README and other pages from the JSON file that recorded
them; the pages must contain them verbatim (whitespace aside), and the numbers withdrawn
in ``bench/README.md`` §8 must stand nowhere.
"""

from __future__ import annotations

import re
import shutil
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "bench"))

import doc_numbers  # noqa: E402


def test_every_quoted_number_agrees_with_its_results_file():
    bad = doc_numbers.mismatches()
    assert not bad, "\n\n".join(bad) + "\n\n(`python bench/doc_numbers.py` prints them)"


def _copy_pages(tmp: Path) -> Path:
    for page in {p for p, _, _ in doc_numbers.expected()}:
        (tmp / page).parent.mkdir(parents=True, exist_ok=True)
        shutil.copy(ROOT / page, tmp / page)
    return tmp


def test_an_edited_number_is_caught(tmp_path):
    """Negative control: a number on the page changed (0.355 s → 0.335 s), a withdrawn
    number put back, a table row dropped: each is reported."""
    root = _copy_pages(tmp_path)
    perf = root / "docs" / "guide" / "performance.md"
    text = perf.read_text(encoding="utf-8")
    assert "0.355 s" in text
    perf.write_text(text.replace("0.355 s", "0.335 s", 1), encoding="utf-8")
    assert any("table kernel" in b for b in doc_numbers.mismatches(root))
    perf.write_text(text + "\nthe engine ratios are 21–66×\n", encoding="utf-8")
    assert any("withdrawn" in b for b in doc_numbers.mismatches(root))
    readme = root / "README.md"
    text = readme.read_text(encoding="utf-8")
    edited = re.sub(r"[\d.–]+ s of CPU", "about a minute of CPU", text, count=1)
    assert edited != text
    readme.write_text(edited, encoding="utf-8")
    assert any(b.startswith("README.md") for b in doc_numbers.mismatches(root))


def test_a_changed_results_file_is_caught(tmp_path, monkeypatch):
    """Negative control: the results file changes (a rerun), the page does not."""
    res = tmp_path / "results"
    shutil.copytree(doc_numbers.RESULTS, res)
    import json

    data = json.loads((res / "bench_main_job.json").read_text())
    data["cpu_s_min"] = 31.0
    (res / "bench_main_job.json").write_text(json.dumps(data))
    monkeypatch.setattr(doc_numbers, "RESULTS", res)
    bad = doc_numbers.mismatches()
    assert any("README.md" in b and "31" in b for b in bad)


def test_the_newly_checked_pages_are_caught(tmp_path, monkeypatch):
    """Negative control on the pages checked since: an edited order on docs/jko.md, an
    edited certified bound on docs/guide/transport.md, an edited pinned histogram on
    docs/reproduce_field.md and a study's changed CPU time in its results file."""
    root = _copy_pages(tmp_path)
    edits = {"docs/jko.md": ("| fitted order | | 0.80 |", "| fitted order | | 0.85 |"),
             "docs/guide/transport.md": ("| 2.5e-15 |", "| 2.0e-15 |"),
             "docs/reproduce_field.md": ("[4, 64, 31, 0]", "[4, 63, 32, 0]"),
             "docs/guide/cli.md": ("| 1319 MiB |", "| 1219 MiB |")}
    for page, (old, new) in edits.items():
        text = (root / page).read_text(encoding="utf-8")
        assert old in text, (page, old)
        (root / page).write_text(text.replace(old, new, 1), encoding="utf-8")
        assert any(b.startswith(page) for b in doc_numbers.mismatches(root)), page
        (root / page).write_text(text, encoding="utf-8")
    assert not doc_numbers.mismatches(root)
    import json

    res = tmp_path / "results"
    shutil.copytree(doc_numbers.RESULTS, res)
    data = json.loads((res / "bench_studies_quick.json").read_text())
    data["rows"]["entropy"]["cpu_s"] = 9.0
    (res / "bench_studies_quick.json").write_text(json.dumps(data))
    monkeypatch.setattr(doc_numbers, "RESULTS", res)
    assert any("studies.md" in b for b in doc_numbers.mismatches())


def test_the_size_power_bullet_is_caught(tmp_path, monkeypatch):
    """Negative control on the README's "What a PASS rules out": a study's size measurement
    gains a failing seed (the results file changes, the README does not), and an edited
    count on the README; each is reported."""
    import json

    root = _copy_pages(tmp_path)
    readme = root / "README.md"
    text = readme.read_text(encoding="utf-8")
    edited = re.sub(r"no false fail in(\s+)(\d+)", lambda m: f"no false fail in{m[1]}"
                    f"{int(m[2]) + 10}", text, count=1)
    assert edited != text
    readme.write_text(edited, encoding="utf-8")
    assert any(b.startswith("README.md") for b in doc_numbers.mismatches(root))
    readme.write_text(text, encoding="utf-8")
    res = tmp_path / "results"
    shutil.copytree(doc_numbers.RESULTS, res)
    data = json.loads((res / "size_power.json").read_text())
    data["studies"]["gamma"]["quick"]["size"]["failing_seeds"] = [7]
    (res / "size_power.json").write_text(json.dumps(data))
    monkeypatch.setattr(doc_numbers, "RESULTS", res)
    bad = doc_numbers.mismatches(root)
    assert any(b.startswith("README.md") and "`gamma` quick: 1 of 100" in b for b in bad)
