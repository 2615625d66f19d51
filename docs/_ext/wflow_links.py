"""Internal links of the built site are checked: every ``page.html#anchor`` resolves.

Run at ``build-finished`` (HTML builders): every ``<a href>`` of every page that points to
another page of the site (a relative URL, no scheme, no host) must name a page that was
written, and its ``#fragment`` an ``id`` (or ``<a name>``) of that page. Each broken link is
logged as a warning naming the page and the link, so ``-W`` (``make docs``,
``tests/test_docs.py``) turns it into a failed build. External links are not checked here
(a build must work offline).

Also :func:`fix_viewcode_backlinks`: ``sphinx.ext.viewcode`` writes the "[docs]" links
of a source page as ``#<first module that documented the file>.<name>``; a file whose
names are documented on several module pages (a package re-exporting them) got anchors
of the wrong page. The handler rewrites each such link to the anchor that exists on the
page it points to.
"""

from __future__ import annotations

import posixpath
import re
from html.parser import HTMLParser
from pathlib import Path
from urllib.parse import unquote, urlsplit

from sphinx.util import logging

logger = logging.getLogger(__name__)


class _Page(HTMLParser):
    """The ids and the links of one HTML page."""

    def __init__(self) -> None:
        super().__init__(convert_charrefs=True)
        self.ids: set[str] = set()
        self.hrefs: list[str] = []

    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        a = dict(attrs)
        if a.get("id"):
            self.ids.add(a["id"] or "")
        if tag == "a" and a.get("name"):
            self.ids.add(a["name"] or "")
        if tag == "a" and a.get("href"):
            self.hrefs.append(a["href"] or "")


def broken_links(root: Path) -> list[tuple[str, str, str]]:
    """Every internal link of the site under ``root`` that does not resolve.

    Returns
    -------
    list of (page, href, why)
        ``page`` relative to ``root``; ``why`` is ``"no such page"`` or ``"no such anchor"``.
    """
    root = root.resolve()
    pages: dict[Path, _Page] = {}
    for f in sorted(root.rglob("*.html")):
        p = _Page()
        p.feed(f.read_text(encoding="utf-8", errors="replace"))
        pages[f.resolve()] = p
    bad = []
    for f, page in pages.items():
        for href in page.hrefs:
            u = urlsplit(href)
            if u.scheme or u.netloc or href.startswith("//"):
                continue
            target = f if not u.path else (f.parent / unquote(u.path)).resolve()
            if target.suffix != ".html":
                continue  # downloads, images, sources: not pages
            rel = str(f.relative_to(root))
            if target not in pages:
                bad.append((rel, href, "no such page"))
            elif u.fragment and unquote(u.fragment) not in pages[target].ids:
                bad.append((rel, href, "no such anchor"))
    return bad


def check_links(app, exc) -> None:
    """``build-finished``: a warning per broken internal link (an error under ``-W``)."""
    if exc is not None or app.builder.format != "html":
        return
    for page, href, why in broken_links(Path(app.outdir)):
        logger.warning("broken internal link in %s: %s (%s)", page, href, why,
                       type="wflow", subtype="anchor")


_BACK = re.compile(r'(<a class="viewcode-back" href=")([^"#]*)#([^"]+)(")')


def fix_viewcode_backlinks(app, pagename, templatename, context, doctree) -> None:
    """``html-page-context`` of the source pages: each "[docs]" link to its real anchor."""
    if not pagename.startswith("_modules/") or "body" not in context:
        return
    py = app.env.domains["py"]
    ids: dict[str, set[str]] = {}
    for _, _, _, doc, anchor, _ in py.get_objects():
        ids.setdefault(doc, set()).add(anchor)

    def fix(m: re.Match) -> str:
        url, anchor = m.group(2), m.group(3)
        doc = posixpath.normpath(posixpath.join(posixpath.dirname(pagename), url))
        doc = doc.removesuffix(app.builder.out_suffix)
        have = ids.get(doc, set())
        if anchor in have:
            return m.group(0)
        module = posixpath.basename(doc)  # api/<module>.html documents <module>.<name>
        parts = anchor.split(".")
        for k in range(1, len(parts)):  # the longest name first
            cand = f"{module}." + ".".join(parts[k:])
            if cand in have:
                return f"{m.group(1)}{url}#{cand}{m.group(4)}"
        return m.group(0)  # left as it is: the link check reports it

    context["body"] = _BACK.sub(fix, context["body"])


def setup(app) -> dict:
    """Register the link check and the back-link fix."""
    app.connect("html-page-context", fix_viewcode_backlinks)
    app.connect("build-finished", check_links)
    return {"parallel_read_safe": True, "parallel_write_safe": True}
