"""The bundled example pipeline (``--pipeline summary``): a page's title, description and
main text, one item per page.

The main text is the text of ``<main>``, else ``<article>``, else ``<body>``, without what is
not content (scripts, navigation, headers and footers, forms, ...), whitespace collapsed.
"""

from __future__ import annotations

from selectolax.lexbor import LexborHTMLParser, LexborNode

from crawler_node.pipelines import Page

MAX_TEXT_CHARS = 20_000
MAX_TITLE_CHARS = 1_000
MAX_DESCRIPTION_CHARS = 2_000
# Lexbor's tree building is quadratic in some hostile inputs (see parse/links.py); the runner's
# budget cannot interrupt it (a C call), so its input is bounded here.
MAX_INPUT_CHARS = 5_000_000
_NOT_CONTENT = "script, style, noscript, template, nav, header, footer, aside, form"
# Text of adjacent blocks is joined with a space ("<p>a</p><p>b</p>" is "a b", not "ab"),
# and text of inline elements without one ("<b>W</b>ord" is "Word", not "W ord").
_BLOCKS = (
    "address, article, blockquote, br, dd, details, div, dl, dt, fieldset, figcaption, figure, "
    "h1, h2, h3, h4, h5, h6, hr, li, main, ol, p, pre, section, summary, table, td, th, tr, ul"
)


def extract(page: Page) -> dict[str, str | None]:
    """``{"url", "title", "description", "text"}`` of `page`; None for a missing title or
    description. Never raises on what a server sends (empty, garbage, no body)."""
    tree = LexborHTMLParser(page.text[:MAX_INPUT_CHARS])
    return {
        "url": page.url,
        "title": _title(tree),
        "description": _description(tree),
        "text": _main_text(tree),
    }


def _title(tree: LexborHTMLParser) -> str | None:
    node = tree.css_first("head > title") or tree.css_first("title")
    return _clean(node.text(), MAX_TITLE_CHARS) if node is not None else None


def _description(tree: LexborHTMLParser) -> str | None:
    """``<meta name=description>``, else ``og:description`` (as property or as name)."""
    open_graph: str | None = None
    for meta in tree.css("meta[content]"):
        attributes = meta.attributes
        content = _clean(attributes.get("content") or "", MAX_DESCRIPTION_CHARS)
        if content is None:
            continue
        name = (attributes.get("name") or "").strip().lower()
        if name == "description":
            return content
        if open_graph is None and "og:description" in (name, (attributes.get("property") or "").strip().lower()):
            open_graph = content
    return open_graph


def _main_text(tree: LexborHTMLParser) -> str:
    root: LexborNode | None = tree.css_first("main") or tree.css_first("article") or tree.body
    if root is None:  # a frameset document has no body
        return ""
    for node in root.css(_NOT_CONTENT):
        node.decompose()
    for node in root.css(_BLOCKS):
        node.insert_after(" ")
    return _clean(root.text(), MAX_TEXT_CHARS) or ""


def _clean(text: str, limit: int) -> str | None:
    """Whitespace collapsed, cut at `limit` characters; None if nothing is left."""
    collapsed = " ".join(text.split())
    return collapsed[:limit].rstrip() or None
