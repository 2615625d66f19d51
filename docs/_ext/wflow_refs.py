"""Generated reference pages (scenario keys, studies, output keys), written by conf.py."""

from __future__ import annotations

from pathlib import Path

#: Pages other contributors add beside these; listed in the index when present.
OPTIONAL_PAGES = ("jko", "reproduce_field")


def generate(outdir: Path) -> None:
    """Write the generated reference pages into ``outdir``."""
    outdir.mkdir(parents=True, exist_ok=True)
    for n in ("scenario_keys","studies","output_keys"):
        (outdir/f"{n}.md").write_text(f"# {n}\n\nTODO\n")
