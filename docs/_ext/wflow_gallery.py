"""The gallery of ``demos/``: sources prepared for sphinx-gallery, quick mode, PNG scraper.

The demos stay plain scripts (``python demos/X.py --quick --out DIR``). For the gallery
each is copied into ``docs/_gallery_src`` with its module docstring given a reST title
(the first line) and its other lines kept as reST where they parse cleanly, else shown as
a literal block. sphinx-gallery runs every script as ``__main__`` with
``sys.argv = [script, "--quick", "--out", DIR]`` (:func:`reset_argv`) and shows the PNG
files the script wrote into ``DIR`` (:func:`png_scraper`) besides any open matplotlib
figure. Tutorials (``docs/tutorials``) take no arguments.
"""

from __future__ import annotations

import ast
import shutil
from pathlib import Path

DOCS = Path(__file__).resolve().parents[1]
OUT = DOCS / "_build" / "gallery_out"

HEADER = """Gallery of demos
================

The scripts of ``demos/``, executed in their quick mode while the site is built
(``python demos/NAME.py --quick --out DIR`` does the same at the command line; without
``--quick`` they run at full size). The figures are the files each demo writes.
"""


def _rst_is_clean(text: str) -> bool:
    import docutils.core
    import docutils.utils

    try:
        docutils.core.publish_doctree(
            text, settings_overrides={"report_level": 5, "halt_level": 2,
                                      "warning_stream": False})
    except (docutils.utils.SystemMessage, Exception):  # noqa: BLE001 - any parse problem
        return False
    return True


def _gallery_docstring(doc: str) -> str:
    lines = doc.strip().splitlines()
    title = lines[0].strip().rstrip(".")
    body = "\n".join(lines[1:]).strip()
    if body and not _rst_is_clean(body):
        body = "::\n\n" + "\n".join("    " + ln for ln in body.splitlines())
    return f"{title}\n{'=' * (len(title) + 4)}\n\n{body}\n"


def prepare(demos: Path, target: Path) -> list[Path]:
    """Copy ``demos/*.py`` (docstrings made gallery titles) and ``demos/*.toml`` to ``target``."""
    if target.exists():
        shutil.rmtree(target)
    target.mkdir(parents=True)
    (target / "GALLERY_HEADER.rst").write_text(HEADER, encoding="utf-8")
    written = []
    for src in sorted(demos.glob("*.py")):
        text = src.read_text(encoding="utf-8")
        tree = ast.parse(text)
        doc = ast.get_docstring(tree, clean=True) or src.stem
        first = tree.body[0] if tree.body else None
        if isinstance(first, ast.Expr) and isinstance(getattr(first, "value", None),
                                                         ast.Constant):
            rest = "\n".join(text.splitlines()[first.end_lineno:])
        else:
            rest = text
        # sphinx-gallery runs the code without ``__file__``; the demos find their scenarios
        # beside themselves and print their docstring, so both are set (hidden from the page)
        hidden = (f"# sphinx_gallery_start_ignore\n__file__ = {str(src)!r}\n"
                  f"__doc__ = {doc!r}\n# sphinx_gallery_end_ignore\n")
        future = "from __future__ import annotations\n"
        if future in rest:  # it must stay the first statement
            rest = rest.replace(future, "", 1)
            hidden = future + hidden
        new = ('"""\n' + _gallery_docstring(doc).replace('"""', "'''") + '"""\n' + hidden
               + rest + "\n")
        (target / src.name).write_text(new, encoding="utf-8")
        written.append(target / src.name)
    for src in sorted(demos.glob("*.toml")):
        shutil.copy2(src, target / src.name)
    return written


def _out_dir(src_file: str) -> Path:
    return OUT / Path(src_file).stem


def reset_argv(gallery_conf, script_vars) -> list[str]:
    """Arguments of a gallery script: demos get ``--quick --out DIR``, tutorials none."""
    src = Path(script_vars["src_file"])
    if src.parent.name != "_gallery_src":
        return []
    out = _out_dir(str(src))
    if out.exists():
        shutil.rmtree(out)
    return ["--quick", "--out", str(out)]


def png_scraper(block, block_vars, gallery_conf):
    """Show the PNG files a demo wrote into its ``--out`` folder (once each)."""
    from sphinx_gallery.scrapers import figure_rst

    out = _out_dir(block_vars["src_file"])
    seen = block_vars.setdefault("_wflow_pngs", set())
    paths = []
    for png in sorted(out.rglob("*.png")) if out.is_dir() else []:
        if png in seen:
            continue
        seen.add(png)
        dest = next(block_vars["image_path_iterator"])
        shutil.copyfile(png, dest)
        paths.append(dest)
    return figure_rst(paths, gallery_conf["src_dir"])
