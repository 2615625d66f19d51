"""The output-key tables are data files (``wflow/data/output_keys/*.toml``), each owned by
one package and read by the one generic loader; the assembled table keeps their order."""

from __future__ import annotations

import importlib
import tomllib
from pathlib import Path

import pytest

import wflow
from wflow.apps import output_keys
from wflow.infra.output_keys import KEYS_DIR, OutputKey, load_keys, parse_keys

WFLOW = Path(wflow.__file__).resolve().parent
TABLES = WFLOW.joinpath(*KEYS_DIR)
#: The package that reads each table file (a solver's ``keys.py``; the assembly).
OWNERS = {"particles.toml": "wflow.particles.keys", "pde.toml": "wflow.pde.keys",
          "jko.toml": "wflow.jko.keys", "kinetic.toml": "wflow.kinetic.keys",
          "gaussian.toml": "wflow.gaussian.keys", "apps.toml": "wflow.apps.output_keys"}

GOOD = """
[summary]
where = "wflow x"

[[summary.keys]]
pattern = "a.*"
meaning = "the a's"

[[summary.keys]]
include = "other"

[[summary.keys]]
pattern = "b"
meaning = "b"
unit = "count"
sign = "≥ 0"
where = "wflow x, wflow run"
"""


def test_every_table_file_has_one_owner_that_reads_it():
    """No orphan file, no owner without its file; each owner's table is what its file holds."""
    assert {p.name for p in TABLES.glob("*.toml")} == set(OWNERS)
    for name, module in OWNERS.items():
        if name == "apps.toml":
            continue
        mod = importlib.import_module(module)
        table = load_keys(name)
        assert mod.SUMMARY_KEYS == table.summary and mod.CSV_COLUMNS == table.csv, name


def test_the_table_files_are_package_data():
    """pyproject ships every table file (an installed wflow without them cannot import)."""
    pyproject = tomllib.loads((WFLOW.parent / "pyproject.toml").read_text(encoding="utf-8"))
    globs = pyproject["tool"]["setuptools"]["package-data"]["wflow"]

    def shipped(patterns):  # setuptools globs from the package folder; * stays in one folder
        return {p for g in patterns for p in WFLOW.glob(g)}

    assert set(TABLES.glob("*.toml")) <= shipped(globs)
    # negative control: without the folder's pattern the tables would not ship
    assert not set(TABLES.glob("*.toml")) & shipped(g for g in globs if "output_keys" not in g)


def test_the_assembly_places_each_solver_table_in_order():
    """Every solver's entries stand in the one table as one run, in the file's order."""
    patterns = [k.pattern for k in output_keys.SUMMARY_KEYS]
    for name in ("particles", "pde", "jko", "kinetic", "gaussian"):
        own = [k.pattern for k in load_keys(f"{name}.toml").summary]
        i = patterns.index(own[0])
        assert patterns[i:i + len(own)] == own, name


def test_an_entry_reads_its_fields_and_the_section_where():
    other = (OutputKey("o", "from another table", where="wflow y"),)
    table = parse_keys(GOOD, "good.toml", include={"other": other})
    assert table.summary == (OutputKey("a.*", "the a's", "1", "", "wflow x"), *other,
                             OutputKey("b", "b", "count", "≥ 0", "wflow x, wflow run"))
    assert table.csv == () and table.also_writes == ()


@pytest.mark.parametrize("fault, words", [
    ('meaning = "b"', "needs pattern and meaning"),          # an entry without its meaning
    ('unit = "count"', "unknown: ['units']"),                # a misspelt field
    ('include = "other"', "unknown table 'other'"),          # an include nobody passed
])
def test_a_broken_table_is_caught(fault, words):
    """Negative controls: each fault injected into a good file raises, naming the entry."""
    text = {'meaning = "b"': GOOD.replace('meaning = "b"\n', ""),
            'unit = "count"': GOOD.replace('unit = "count"', 'units = "count"'),
            'include = "other"': GOOD}[fault]
    include = {} if fault == 'include = "other"' else {"other": ()}
    with pytest.raises(ValueError, match=words.replace("[", r"\[").replace("]", r"\]")):
        parse_keys(text, "bad.toml", include=include)
