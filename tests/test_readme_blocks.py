"""The README's code blocks work as printed: every TOML block is a valid scenario and every
Python block runs (a block after ``<!-- slow -->`` runs in the slow suite). The TOML and
Python blocks of the site's guide pages are checked the same way."""

from __future__ import annotations

import os
import re
import subprocess
import sys
import tomllib
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
FENCE = re.compile(r"(?P<mark><!-- slow -->\n)?```(?P<lang>\w+)\n(?P<body>.*?)\n```", re.S)


def _blocks(path: Path, lang: str) -> list[tuple[str, bool]]:
    text = path.read_text(encoding="utf-8")
    return [(m["body"], bool(m["mark"])) for m in FENCE.finditer(text) if m["lang"] == lang]


README_PY = _blocks(ROOT / "README.md", "python")
#: The Python blocks of the site's guide pages run too (the tutorials run in the docs build).
GUIDE_PY = [b for p in sorted((ROOT / "docs" / "guide").glob("*.md"))
            for b in _blocks(p, "python")]
TOMLS = [(p, body) for p in [ROOT / "README.md", *sorted((ROOT / "docs").rglob("*.md"))]
         for body, _ in _blocks(p, "toml")]


def test_the_readme_has_its_blocks():
    assert len(README_PY) >= 5
    assert _blocks(ROOT / "README.md", "toml")
    assert len((ROOT / "README.md").read_text(encoding="utf-8").splitlines()) <= 260


@pytest.mark.parametrize("path,body", TOMLS,
                         ids=[f"{p.relative_to(ROOT)}:{i}" for i, (p, _) in enumerate(TOMLS)])
def test_toml_block_is_a_valid_scenario(path, body, tmp_path):
    from wflow.apps.scenario import parse_scenario

    raw = tomllib.loads(body)  # raises on invalid TOML, naming line and column
    sc = parse_scenario(raw, base_dir=tmp_path)
    sc.build_tokens()
    sc.build_schedule()
    sc.attention_obj()
    if "particles" in raw:
        sc.particle_options()
    if "density" in raw:
        from wflow.geometry.density import density_spec_from_scenario

        density_spec_from_scenario(sc)
    if "pde" in raw:
        from wflow.pde import pde_options_from_dict

        pde_options_from_dict(sc.sections["pde"], seed=sc.seed)


def _run(body: str, tmp_path: Path) -> None:
    env = dict(os.environ, MPLBACKEND="Agg", PYTHONPATH=str(ROOT))
    r = subprocess.run([sys.executable, "-c", body], capture_output=True, text=True, env=env,
                       cwd=tmp_path, timeout=900)
    assert r.returncode == 0, f"README block failed:\n{body}\n---\n{r.stdout}\n{r.stderr}"


_FAST = [b for b, slow in README_PY + GUIDE_PY if not slow]
_SLOW = [b for b, slow in README_PY + GUIDE_PY if slow]


@pytest.mark.parametrize("body", _FAST, ids=[f"python{i}" for i in range(len(_FAST))])
def test_python_block_runs(body, tmp_path):
    _run(body, tmp_path)


@pytest.mark.slow
@pytest.mark.parametrize("body", _SLOW, ids=[f"slow{i}" for i in range(len(_SLOW))])
def test_slow_python_block_runs(body, tmp_path):
    _run(body, tmp_path)


def test_readme_stays_under_250_lines():
    # the README is the front page: at most 250 lines (the rest lives on the site)
    from pathlib import Path

    lines = (Path(__file__).resolve().parents[1] / "README.md").read_text().splitlines()
    assert len(lines) <= 250, len(lines)
