"""``wflow heads beta-star``: the note says which threshold each column is (issue 42)."""

from __future__ import annotations

import json
import subprocess
import sys


def test_the_note_names_both_thresholds():
    r = subprocess.run([sys.executable, "-m", "wflow.cli", "heads", "beta-star", "--H", "2",
                        "--n", "32", "--json"], capture_output=True, text=True, timeout=120)
    assert r.returncode == 0, r.stderr
    (rec,) = json.loads(r.stdout)
    assert rec["beta_star"] < rec["beta_star_exact"]  # 1.476 and 1.717: two thresholds
    note = rec["note"]
    # each column named with its meaning; the old note ("dominance iff beta <= beta_star")
    # named one threshold beside two columns
    assert "beta <= beta_star;" in note and "beta <= beta_star_exact" in note
