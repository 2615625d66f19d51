"""Every scenario key has a meaning in words on the site (``reference/scenario_keys``).

The reference is generated (``docs/_ext/wflow_refs.py``) from the schemas and, for the
meanings, from the options' field metadata and the ``{key: meaning}`` tables kept beside
the schemas (``ATTENTION_DOCS``, ``TOKENS_DOCS``, ``HEADS_DOCS``, ``SCHEDULE_DOCS``,
``DENSITY_DOCS``). A key whose meaning is empty, only repeats its default, or is only a
code fragment of a docstring (``"``1.0``"``, ``"``[...]``"``) fails here; so does a table
that documents a key its schema does not have.
"""

from __future__ import annotations

import re
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "docs" / "_ext"))

pytest.importorskip("numpydoc")  # the generator reads numpydoc sections (docs extra)


def _plain(text: str) -> str:
    """A meaning without reST markup and escapes."""
    return re.sub(r"\\(.)", r"\1", re.sub(r"``(.*?)``", r"\1", text)).strip()


def problems(rows) -> list[str]:
    """The keys of ``rows`` (``(section, key, type, default, meaning)``) without a meaning."""
    bad = []
    for section, key, _typ, default, meaning in rows:
        plain = _plain(meaning)
        words = re.findall(r"[A-Za-zÀ-ÿ]{2,}", plain)
        if not plain:
            why = "no meaning"
        elif plain.lower() in {default.lower().strip("'\""), default.lower()}:
            why = f"the meaning repeats the default {default}"
        elif re.fullmatch(r"``[^`]*``(;\s*``[^`]*``)*", meaning.strip()):
            why = "only a code fragment"
        elif len(words) < 3:
            why = "fewer than three words"
        else:
            continue
        bad.append(f"{section} {key}: {why} ({meaning!r})")
    return bad


def test_every_scenario_key_has_a_meaning():
    import wflow_refs

    rows = wflow_refs.scenario_key_rows()
    assert len(rows) >= 120  # every section was found (a moved schema would drop one)
    assert not problems(rows), "\n".join(problems(rows))


def test_a_key_without_meaning_is_caught():
    """Negative control: an empty meaning, one equal to the default, a bare docstring
    fragment and a two-word stub each fail."""
    rows = [("[x]", "a", "number", "1.0", ""), ("[x]", "b", "number", "1.0", "``1.0``"),
            ("[x]", "c", "integer", "3", "3"), ("[x]", "d", "array", "None", "``[[...]]``"),
            ("[x]", "e", "boolean", "False", "``false``"), ("[x]", "f", "number", "1", "Final"),
            ("[x]", "ok", "number", "1.0", "Inverse temperature of the scores.")]
    assert [p.split(":")[0] for p in problems(rows)] == [f"[x] {k}" for k in "abcdef"]


def test_the_meaning_tables_match_their_schemas():
    from wflow.apps import scenario as sc
    from wflow.geometry import density as dens

    for schema, docs in ((sc.ATTENTION_SCHEMA, sc.ATTENTION_DOCS),
                         (sc.TOKENS_SCHEMA, sc.TOKENS_DOCS), (sc.HEADS_SCHEMA, sc.HEADS_DOCS),
                         (sc.SCHEDULE_SCHEMA, sc.SCHEDULE_DOCS),
                         (dens.DENSITY_SCHEMA, dens.DENSITY_DOCS)):
        assert list(docs) == list(schema), (sorted(set(docs) ^ set(schema)))
