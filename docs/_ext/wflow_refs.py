"""Generated reference pages, written by conf.py at every build (never edited by hand).

* ``reference/scenario_keys.rst``: every key of every scenario section, from the schemas
  (``Spec = {key: (default, checker)}``) with the type read off the checker and the meaning
  from the options dataclass's numpydoc ``Parameters`` (or the section's documented text);
* ``reference/studies.rst``: every study of the registry with its claim (module docstring),
  its thresholds (the ``#:``-documented constants) and its negative controls (``FAULTS``);
* ``reference/output_keys.rst``: the table of :mod:`wflow.apps.output_keys`.

Everything is looked up by name and skipped when absent, so a schema that moves or changes
shape shows up as a missing section, not as a broken build.
"""

from __future__ import annotations

import importlib
import re
from pathlib import Path
from types import ModuleType
from typing import Any

#: Pages other contributors add beside these; listed in the index when present.
OPTIONAL_PAGES = ("jko", "reproduce_field")

#: Scenario sections: name -> (schema "module:attr", documentation sources). A source is a
#: ``{key: meaning}`` table kept beside the schema (``ATTENTION_DOCS``, …), an options class
#: (its field metadata, or its numpydoc Parameters/Attributes) or a function/module whose
#: docstring documents ``key = value`` or ````key```` (text); the first that documents a
#: key gives its meaning.
SECTIONS = {
    "(top level)": ("", ["wflow.apps.scenario"]),
    "attention": ("wflow.apps.scenario:ATTENTION_SCHEMA|ATTENTION_SPEC",
                  ["wflow.apps.scenario:ATTENTION_DOCS", "wflow.apps.scenario"]),
    "tokens": ("wflow.apps.scenario:TOKENS_SCHEMA|TOKENS_SPEC",
               ["wflow.apps.scenario:TOKENS_DOCS", "wflow.apps.scenario"]),
    "heads": ("wflow.apps.scenario:HEADS_SCHEMA|HEADS_SPEC",
              ["wflow.apps.scenario:HEADS_DOCS", "wflow.apps.scenario"]),
    "schedule": ("wflow.apps.scenario:SCHEDULE_SCHEMA|SCHEDULE_SPEC",
                 ["wflow.apps.scenario:SCHEDULE_DOCS", "wflow.apps.scenario"]),
    "particles": ("wflow.particles.options:PARTICLES_SCHEMA|PARTICLES_SPEC",
                  ["wflow.particles.options:ParticleOptions"]),
    "density": ("wflow.geometry.density:DENSITY_SCHEMA",
                ["wflow.geometry.density:DENSITY_DOCS",
                 "wflow.geometry.density:density_spec_from_scenario"]),
    "pde": ("wflow.pde.options:PDE_SCHEMA", ["wflow.pde.options:PDEOptions",
                                             "wflow.pde.options:pde_options_from_dict"]),
    "jko": ("wflow.jko.options:JKO_SCHEMA", ["wflow.jko.options:JKOOptions",
                                             "wflow.jko.options:jko_table_from_dict"]),
    "kinetic": ("wflow.kinetic.options:KINETIC_SCHEMA",
                ["wflow.kinetic.options:KineticOptions"]),
    "run": ("wflow.apps.run_table:RUN_SCHEMA|RUN_SPEC", ["wflow.apps.run_table:RunOptions"]),
}


def _get(ref: str) -> Any:
    """``"module:attr"`` (``"module:a|b"``: the first of ``a``, ``b`` that exists)."""
    mod, _, attrs = ref.partition(":")
    obj = importlib.import_module(mod)
    if not attrs:
        return obj
    for attr in attrs.split("|"):
        if hasattr(obj, attr):
            return getattr(obj, attr)
    raise AttributeError(ref)


def _esc(text: str) -> str:
    """Plain text made safe for reST (no markup)."""
    return re.sub(r"([\\*`|_])", r"\\\1", str(text)).replace("\n", " ")


def _table(header: list[str], rows: list[list[str]], widths: str | None = None) -> list[str]:
    out = [".. list-table::", "   :header-rows: 1"]
    if widths:
        out.append(f"   :widths: {widths}")
    out.append("")
    for row in [header, *rows]:
        out.append(f"   * - {row[0] or ' '}")
        out += [f"     - {c or ' '}" for c in row[1:]]
    return out + [""]


def _checker_type(default: Any, check: Any) -> str:
    if check is None:
        return "any (checked where used)" if default is None else type(default).__name__
    name = getattr(check, "__qualname__", "")
    cells = dict(zip(getattr(check.__code__, "co_freevars", ()),
                     [c.cell_contents for c in (check.__closure__ or ())], strict=False))
    if name.startswith("number"):
        kind = "integer" if cells.get("integer") else "number"
        lo, hi = cells.get("lo"), cells.get("hi")
        rng = []
        if lo is not None:
            rng.append(f"{'>' if cells.get('strict_lo') else '≥'} {lo}")
        if hi is not None:
            rng.append(f"≤ {hi}")
        return kind + (f" ({', '.join(rng)})" if rng else "")
    if callable(getattr(check, "choices", None)):  # a registry's checker
        return "one of " + ", ".join(repr(o) for o in check.choices())
    if name.startswith("choice"):
        return "one of " + ", ".join(repr(o) for o in cells.get("options", ()))
    if name.startswith("array"):
        return f"array, {' or '.join(map(str, cells.get('dims', ())))}-d"
    if name.startswith(("boolean", "string")):
        return "boolean" if name.startswith("boolean") else "string"
    return "see the meaning"


def _param_docs(cls: Any) -> dict[str, str]:
    from numpydoc.docscrape import NumpyDocString

    doc = NumpyDocString(cls.__doc__ or "")
    out: dict[str, str] = {}
    for sec in ("Parameters", "Attributes"):
        for p in doc[sec]:
            text = " ".join(p.desc).strip() or (p.type or "")
            for name in p.name.split(","):
                out.setdefault(name.strip(), text)
    return out


def _fragments(text: str, keys: list[str]) -> dict[str, str]:
    """Per key, the documented fragment ``key = …`` of a schema text (up to ``;`` or EOL)."""
    out: dict[str, str] = {}
    for key in keys:
        hits = re.findall(rf"(?<![\w.]){re.escape(key)}\s*=\s*(.*?)\s*(?=,\s*\w+\s*=|;|\n|$)",
                          text)
        for names, paren in re.findall(
                r"((?:``\w+``,\s*)*``\w+``)\s*(\((?:[^()]|\([^()]*\))*\))", text):
            if f"``{key}``" in names.split(", ") or f"``{key}``" in re.findall(r"``\w+``",
                                                                              names):
                hits.append(paren)
        if hits:
            out[key] = "; ".join(h.strip() for h in hits)
    return out


def scenario_key_rows() -> list[tuple[str, str, str, str, str]]:
    """Every key of every scenario section: ``(section, key, type, default, meaning)``.

    The meaning is reST (``code`` marked up); a key no source documents has ``""``.
    """
    out = []
    for section, (spec_ref, sources) in SECTIONS.items():
        try:
            spec = _get(spec_ref) if spec_ref else {"seed": (0, None), "modules": ([], None)}
            docs = [_get(ref) for ref in sources]
        except (ImportError, AttributeError):
            continue
        meanings: dict[str, str] = {}
        for obj in docs:
            if isinstance(obj, dict):  # a {key: meaning} table beside the schema
                for k, v in obj.items():
                    meanings.setdefault(k, _esc(v))
                continue
            found = _param_docs(obj) if isinstance(obj, type) else {}
            try:  # options declared once with field metadata (wflow.infra.options)
                from wflow.infra.options import docs_of

                found = found | {kd.key: kd.doc for kd in docs_of(obj)}
            except Exception:  # noqa: BLE001, S110 - not such a class
                pass
            text = obj.__doc__ or ""
            block = re.search(rf"\[{re.escape(section)}\](.*?)(?=\n\s*\[\w+\]|\n\s*\n|\Z)",
                              text, re.S) if isinstance(obj, ModuleType) else None
            frag = _fragments(block.group(1) if block else text, list(spec))
            for k, v in frag.items():
                found.setdefault(k, "``" + re.sub(r"\s{2,}", " ", v).replace("``", "").strip()
                                 + "``")
            for k, v in found.items():
                meanings.setdefault(k, v)
        title = f"[{section}]" if section != "(top level)" else "Top level"
        for key, (default, check) in spec.items():
            meaning = meanings.get(key, "")
            if section == "(top level)":
                meaning = {"seed": "master seed: every generator of the run derives from it",
                           "modules": "files or packages imported before anything is "
                           "validated: a user's attention kinds, integrators, schedule "
                           "types (``register_kind``, ``INTEGRATORS.register``)"}[key]
            out.append((title, key, _checker_type(default, check), repr(default),
                        meaning.replace("\n", " ")))
    for title, spec, docs in _gaussian_sections():
        for k, (d, c) in spec.items():
            out.append((title, k, _checker_type(d, c), repr(d), docs.get(k, "")))
    return out


def scenario_keys() -> list[str]:
    """The lines of ``reference/scenario_keys.rst``."""
    lines = ["Scenario keys", "=============", "",
             "Every key of every section of a scenario file, generated from the schemas that",
             "validate them: the type and the default are read off the checker, the meaning",
             "from the options' field metadata and the tables of meanings kept beside the",
             "schemas. Unknown keys are errors naming the key; relative",
             "paths (files, meshes, modules of callables) resolve against the scenario's",
             "folder. A guided example: :doc:`../guide/scenarios`.", ""]
    rows = scenario_key_rows()
    gaussian = {t for t, _, _ in _gaussian_sections()}
    done: set[str] = set()
    for title, *_ in rows:
        if title in done:
            continue
        done.add(title)
        if title in gaussian:
            if not done & gaussian - {title}:
                lines += ["Gaussian scenarios (``wflow gaussian``)",
                          "---------------------------------------", "",
                          "A Gaussian scenario has its own tables; the scalar ones are "
                          "options classes.", ""]
            lines += [f"**{title}**", ""]
        else:
            lines += [title, "-" * len(title), ""]
        table = [[f"``{k}``", _esc(typ), f"``{d}``", m] for t, k, typ, d, m in rows
                 if t == title]
        lines += _table(["key", "type", "default", "meaning"], table, "14 22 12 52")
    return lines + _gaussian_schema_block()


#: Options classes of other scenario kinds (``wflow gaussian``): title -> class.
GAUSSIAN = {
    "[run] (wflow gaussian)": "wflow.gaussian.options:GaussianRunOptions",
    "[classify] (wflow gaussian)": "wflow.gaussian.options:ClassifyOptions",
    "[particles] (wflow gaussian)": "wflow.gaussian.options:GaussianParticleOptions",
}


def _gaussian_sections() -> list[tuple[str, dict, dict[str, str]]]:
    """The Gaussian scenario's options classes: ``(title, spec, {key: meaning})``."""
    try:
        from wflow.infra.options import docs_of, schema_of
    except ImportError:
        return []
    out = []
    for title, ref in GAUSSIAN.items():
        try:
            cls = _get(ref)
            out.append((title, schema_of(cls), {kd.key: kd.doc for kd in docs_of(cls)}))
        except (ImportError, AttributeError, TypeError):
            continue
    return out


def _gaussian_schema_block() -> list[str]:
    """The whole Gaussian schema as documented in :mod:`wflow.gaussian.options`."""
    import textwrap

    try:
        mod = importlib.import_module("wflow.gaussian.options")
    except ImportError:
        return []
    doc = mod.__doc__ or ""
    if "::" not in doc:
        return []
    block = textwrap.dedent(doc.split("::", 1)[1].strip("\n"))
    lines = ["The whole schema, as documented in :mod:`wflow.gaussian.options`::", ""]
    lines += ["    " + ln if ln.strip() else "" for ln in block.splitlines()]
    return lines + [""]


def studies() -> list[str]:
    """The lines of ``reference/studies.rst``."""
    from sphinx.pycode import ModuleAnalyzer

    reg = importlib.import_module("wflow.studies.registry")
    lines = ["Studies", "=======", "",
             "Every study of ``wflow verify``, generated from the registry",
             "(:mod:`wflow.studies.registry`) and each study's module: the claim it checks, the",
             "thresholds of its criteria with their reasons, and its negative controls",
             "(``--fault NAME``), each of which must make the study FAIL. The criteria",
             "themselves, with their measured values, are in every run's ``summary.json``",
             "(``criteria``); measured numbers: :doc:`../guide/studies`.", ""]
    for name, study in reg.STUDIES.items():
        modname = study.module
        try:
            mod = importlib.import_module(modname)
        except ImportError:
            continue
        title = f"{name} ({study.section})" if study.section else name
        doc = (mod.__doc__ or "").strip().splitlines()
        lines += [title, "-" * len(title), "", f"Module :mod:`{modname}`.", ""]
        if doc:
            lines += ["**Claim.** " + _esc(doc[0]), ""]
        attrs = ModuleAnalyzer.for_module(modname).find_attr_docs()
        rows = []
        for (_, attr), comment in attrs.items():
            if attr in ("FAULTS", "NAME") or not attr.isupper() or not hasattr(mod, attr):
                continue
            value = getattr(mod, attr)
            rep = repr(value)
            if len(rep) > 160:
                continue  # data (matrices, densities), not a threshold
            rows.append([f"``{attr}``", f"``{rep}``", _esc(" ".join(comment).strip())])
        if rows:
            lines += ["**Thresholds.**", ""] + _table(["constant", "value", "why"], rows,
                                                      "18 22 60")
        faults = getattr(mod, "FAULTS", {}) or {}
        if faults:
            lines += ["**Negative controls** (``--fault``).", ""]
            lines += _table(["fault", "what it changes"],
                            [[f"``{k}``", _esc(v)] for k, v in faults.items()], "20 80")
    return lines


def output_keys() -> list[str]:
    """The lines of ``reference/output_keys.rst``."""
    ok = importlib.import_module("wflow.apps.output_keys")
    lines = ["Output keys", "===========", "",
             "Every key of every ``summary.json`` and every CSV column, with its meaning, unit",
             "and sign convention, generated from the one table of",
             ":mod:`wflow.apps.output_keys` (a test fails when a writer adds a key the table",
             "does not explain). Keys are flattened with ``.``; ``[]`` marks a list of",
             "records; ``*`` stands for one level, ``**`` for any number of levels.", "",
             "Names say what is absolute and what is relative: a residual named",
             "``…relative`` is divided by the dissipation (EDI) or the energy budget (chain",
             "rule) and has unit 1; the others are in energy units. The JKO scheme has two EDI",
             "numbers: the relative EDI residual of the signed sum over the steps",
             "(``edi.jko.relative``), and its check, the sum of the steps' absolute residuals",
             "relative to the discrete dissipation (``checks.jko.edi.value``, named",
             "*JKO Σ|EDI_k| relative*).", ""]
    for title, entries in (("summary.json", ok.SUMMARY_KEYS), ("CSV columns", ok.CSV_COLUMNS)):
        lines += [title, "-" * len(title), ""]
        rows = [[f"``{e.pattern}``", _esc(e.meaning), _esc(e.unit), _esc(e.sign),
                 _esc(e.where)] for e in entries]
        lines += _table(["key", "meaning", "unit", "sign", "written by"], rows,
                        "22 46 8 14 10")
    return lines


def cli() -> list[str]:
    """The lines of ``reference/cli.rst``: every command's ``--help``, as the CLI prints it.

    The help texts are themselves generated (:mod:`wflow.commands._help`: the scenario
    tables from the schemas, the summary keys from the output-key table).
    """
    import contextlib
    import io

    from wflow.cli import build_parser

    lines = ["Command-line reference", "======================", "",
             "Every command's ``--help``, generated from the parser at build time (its scenario",
             "tables from the schemas that validate them, its summary keys from the output-key",
             "table): :doc:`scenario_keys`, :doc:`output_keys`.", ""]
    parser = build_parser()
    sub = next(a for a in parser._actions if a.dest == "command")
    for name in [None, *sorted(sub.choices)]:
        p = parser if name is None else sub.choices[name]
        buf = io.StringIO()
        with contextlib.redirect_stdout(buf):
            p.print_help()
        title = "wflow" if name is None else f"wflow {name}"
        lines += [title, "-" * len(title), "", "::", ""]
        lines += ["    " + ln if ln.strip() else "" for ln in buf.getvalue().splitlines()]
        lines.append("")
    return lines


def generate(outdir: Path) -> None:
    """Write the generated reference pages into ``outdir``."""
    outdir.mkdir(parents=True, exist_ok=True)
    for old in outdir.glob("*.*"):
        old.unlink()
    for name, build in (("scenario_keys", scenario_keys), ("studies", studies),
                        ("output_keys", output_keys), ("cli", cli)):
        (outdir / f"{name}.rst").write_text("\n".join(build()) + "\n", encoding="utf-8")
