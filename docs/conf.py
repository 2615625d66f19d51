"""Sphinx configuration of the wflow documentation site (``make docs``).

Generated at build time (never edited by hand, see ``docs/_ext``): the API reference from
the packages' ``__all__`` (``api/``), the scenario keys, the studies and the output keys
(``reference/``), and the gallery sources of ``demos/`` (``_gallery_src/``). The gallery
and the tutorials are executed unless ``-D plot_gallery=0`` (the default test suite);
examples run in their quick mode.
"""

from __future__ import annotations

import os
import sys
from pathlib import Path

DOCS = Path(__file__).resolve().parent
ROOT = DOCS.parent
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(DOCS / "_ext"))
os.environ.setdefault("MPLBACKEND", "Agg")

import wflow_api  # noqa: E402
import wflow_gallery  # noqa: E402
import wflow_refs  # noqa: E402

import wflow  # noqa: E402

project = "wflow"
author = "the wflow developers"
copyright = "2026, the wflow developers, MIT licence"  # noqa: A001
release = version = wflow.__version__

extensions = [
    "sphinx.ext.autodoc",
    "sphinx.ext.mathjax",
    "sphinx.ext.viewcode",
    "numpydoc",
    "myst_parser",
    "sphinx_gallery.gen_gallery",
    "wflow_links",  # docs/_ext: every internal link and anchor resolves (-W: else an error)
]

# --- generated sources ------------------------------------------------------------------
wflow_api.generate(DOCS / "api")
wflow_refs.generate(DOCS / "reference")
wflow_gallery.prepare(ROOT / "demos", DOCS / "_gallery_src")

# --- sources ----------------------------------------------------------------------------
source_suffix = {".rst": "restructuredtext", ".md": "markdown"}
root_doc = "index"
exclude_patterns = ["_build", "_ext", "_static", "_gallery_src", "tutorials",
                    "**.ipynb_checkpoints",
                    "gallery/*.py", "auto_tutorials/*.py", "sg_execution_times.rst",
                    "**/sg_execution_times.rst"]
myst_enable_extensions = ["dollarmath", "amsmath", "colon_fence", "deflist"]
myst_heading_anchors = 3
myst_dmath_double_inline = True

# --- API reference ----------------------------------------------------------------------
autodoc_default_options = {"member-order": "bysource"}
autodoc_typehints = "none"  # the numpydoc "Parameters" sections carry the types
autodoc_mock_imports: list[str] = []
numpydoc_show_class_members = False
numpydoc_class_members_toctree = False
numpydoc_xref_param_type = False
numpydoc_validation_checks: set[str] = set()
add_module_names = False

# --- gallery ----------------------------------------------------------------------------
sphinx_gallery_conf = {
    "examples_dirs": [str(DOCS / "_gallery_src"), str(DOCS / "tutorials")],
    "gallery_dirs": ["gallery", "auto_tutorials"],
    "filename_pattern": r".*\.py$",  # every example is executed (in its quick mode)
    "ignore_pattern": r"(__init__|conftest)\.py$",
    "reset_argv": wflow_gallery.reset_argv,
    "image_scrapers": ("matplotlib", wflow_gallery.png_scraper),
    "within_subsection_order": "FileNameSortKey",
    "download_all_examples": False,
    "remove_config_comments": True,
    "abort_on_example_error": True,
    "show_memory": False,
    "show_signature": False,
    "capture_repr": (),
    "backreferences_dir": None,
    "matplotlib_animations": False,
    # its timing page loads jQuery and DataTables from CDNs: the site must work offline
    "write_computation_times": False,
}

# --- output -----------------------------------------------------------------------------
nitpicky = True  # a reference to a name that does not exist is an error (-W)
suppress_warnings = ["config.cache"]  # the gallery's hooks are functions: not cached, harmless

html_theme = "pydata_sphinx_theme"
html_title = f"wflow {release}"
html_theme_options = {
    "navbar_end": ["search-button", "theme-switcher"],
    "show_toc_level": 2,
    "secondary_sidebar_items": ["page-toc"],
    "footer_start": ["copyright"],
    "footer_end": [],
}
html_sidebars = {"**": ["sidebar-nav-bs"]}
html_static_path = ["_static"]
# MathJax bundled (docs/_static/mathjax/README.md): pages read offline render their maths;
# no page loads a script from another host (tests/test_docs.py).
mathjax_path = "mathjax/tex-svg-full.js"
html_show_sourcelink = False


#: Top-level pages the index lists itself; every other ``docs/*.md`` (pages that other
#: work adds, e.g. ``jko.md``) is listed in the guides' table of contents automatically.
_LISTED = {"index", "theory", "install", "troubleshooting", "changelog", "citing"}


def _extra_toc(app, docname, source):
    """Fill the ``%EXTRA_PAGES%`` placeholder of the index with the other top-level pages."""
    if docname != "index":
        return
    known = [p for p in wflow_refs.OPTIONAL_PAGES if (DOCS / f"{p}.md").is_file()]
    others = sorted(p.stem for p in DOCS.glob("*.md") if p.stem not in _LISTED | set(known))
    source[0] = source[0].replace("%EXTRA_PAGES%", "\n".join(known + others))


def setup(app):
    """Register the index hook."""
    app.connect("source-read", _extra_toc)
    app.connect("missing-reference", wflow_api.resolve_missing)
