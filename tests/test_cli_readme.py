"""The table "bad input or fault → what wflow does" (docs/guide/cli.md, linked from the
README) names tests that exist."""

from __future__ import annotations

import re
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


def _table_rows() -> list[str]:
    text = (ROOT / "docs" / "guide" / "cli.md").read_text(encoding="utf-8")
    sec = text.split("## Bad input and faults: what wflow does", 1)[1].split("\n## ", 1)[0]
    return [ln for ln in sec.splitlines() if ln.startswith("| ") and not ln.startswith("| bad")]


def test_every_row_names_existing_tests():
    rows = _table_rows()
    assert len(rows) >= 25
    for row in rows:
        cells = [c.strip() for c in re.split(r"(?<!\\)\|", row.strip().strip("|"))]
        assert len(cells) == 4, row
        assert re.fullmatch(r"(0|1|2|129|130|143)( / (0|1|2|129|130|143))?", cells[2]), row
        refs = re.findall(r"`(T:[\w/.]+(?:::\w+)?|::\w+)`", cells[3])
        assert refs, row
        current = None
        for ref in refs:
            if ref.startswith("T:"):
                path, _, name = ref[2:].partition("::")
                current = ROOT / "tests" / path
                assert current.is_file(), (row, ref)
            else:
                name = ref[2:]
            assert current is not None, row
            if name:
                assert re.search(rf"^def {name}\(", current.read_text(), re.M), (row, ref)
