"""Opt-in link shapes that only a URL Standard parser reads as browsers do (a host whose profile
says ``url_shapes: true``; no other host changes).

The host's root page also links to ``/shapes/``, a UTF-8 page, and to ``/shapes/legacy``, a
windows-1252 page (so said by its Content-Type). Every link on them is written in one shape:
backslashes for slashes, scheme-relative forms with three slashes or none after the scheme, and on the legacy page
queries with characters that windows-1252 encodes in one byte, or lacks. Each leads to a page of
its own under ``/shapes/t/``, which links nowhere, so the ground truth (``/_testweb/stats``'s
per-URL counts) shows the URL a crawler requested for each shape. The expected URLs are those a
browser requests.
"""

from __future__ import annotations

import html

ENTRY = "/shapes/"
LEGACY = "/shapes/legacy"
TARGETS = "/shapes/t/"
LEGACY_CONTENT_TYPE = "text/html; charset=windows-1252"
KINDS = ("shapes", "legacy", "shape_target")


def _shapes(host: str) -> list[tuple[str, str]]:
    """(the href as written on /shapes/, the path and query a browser requests)."""
    return [
        ("..\\shapes\\t\\backslash-relative", "/shapes/t/backslash-relative"),
        ("t\\backslash-in-path\\x", "/shapes/t/backslash-in-path/x"),
        ("\\shapes\\t\\backslash-root", "/shapes/t/backslash-root"),
        (f"http:\\\\{host}\\shapes\\t\\backslash-absolute", "/shapes/t/backslash-absolute"),
        (f"\\\\{host}\\shapes\\t\\backslash-scheme-relative", "/shapes/t/backslash-scheme-relative"),
        (f"//{host}/shapes/t/scheme-relative", "/shapes/t/scheme-relative"),
        (f"///{host}/shapes/t/three-slashes", "/shapes/t/three-slashes"),
        (f"http:///{host}/shapes/t/http-three-slashes", "/shapes/t/http-three-slashes"),
        ("http:t/http-colon-relative", "/shapes/t/http-colon-relative"),  # the page's own scheme: relative
    ]


# (the href as written on the legacy page, as HTML; the path and query a browser requests). The
# query is encoded in windows-1252, the path in UTF-8; U+2713 is not in windows-1252.
_LEGACY_SHAPES = [
    ("t/query?word=café", "/shapes/t/query?word=caf%E9"),
    ("t/café?word=é", "/shapes/t/caf%C3%A9?word=%E9"),
    ("t/mark?sign=&#10003;", "/shapes/t/mark?sign=%26%2310003%3B"),
]


def kind_of(path: str) -> str | None:
    """The kind of resource at ``path`` (perhaps with its query) under /shapes/, or None (404)."""
    if path == ENTRY:
        return "shapes"
    if path == LEGACY:
        return "legacy"
    if path.startswith(TARGETS) and len(path) > len(TARGETS):
        return "shape_target"
    return None


def targets(host: str, kind: str) -> list[str]:
    """The paths (with their queries) a page of ``kind`` links to, as a browser requests them."""
    if kind == "shapes":
        return [path for _, path in _shapes(host)]
    if kind == "legacy":
        return [path for _, path in _LEGACY_SHAPES]
    return []


def render(host: str, kind: str) -> bytes:
    """The bytes of a page of ``kind``: /shapes/ in UTF-8, /shapes/legacy in windows-1252."""
    if kind == "shapes":
        anchors = [f'<a href="{html.escape(href)}">{html.escape(path)}</a>' for href, path in _shapes(host)]
        return _document("URL shapes", anchors, "utf-8").encode("utf-8")
    if kind == "legacy":
        anchors = [f'<a href="{href}">{html.escape(path)}</a>' for href, path in _LEGACY_SHAPES]
        return _document("Legacy encoding", anchors, "windows-1252").encode("cp1252")
    return _document("A shape's target", [], "utf-8").encode("utf-8")


def _document(title: str, anchors: list[str], charset: str) -> str:
    items = "".join(f"<li>{anchor}</li>\n" for anchor in anchors)
    return (f'<!DOCTYPE html>\n<html>\n<head>\n<meta charset="{charset}">\n<title>{title}</title>\n</head>\n'
            f"<body>\n<ul>\n{items}</ul>\n</body>\n</html>\n")
