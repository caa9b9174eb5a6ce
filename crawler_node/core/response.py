"""What one request produced, as plain data: read by the verdict (core), the parse and store
stages. No I/O here; the fetcher (fetch.fetcher) fills it in."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Protocol

from crawler_node.core.outcomes import ErrorKind


@dataclass(slots=True)
class FetchResult:
    url: str
    status: int | None = None
    headers: list[tuple[str, str]] = field(default_factory=list)
    request_headers: list[tuple[str, str]] = field(default_factory=list)
    body: bytes = b""  # as the server sent it: de-chunked, still content-encoded (core.encoding decodes)
    status_line: str | None = None  # as received, e.g. "HTTP/1.0 200 OK"
    error: ErrorKind | None = None  # None when an HTTP answer came back
    error_detail: str | None = None
    started_at: float = 0.0  # wall clock
    elapsed_s: float = 0.0
    headers_s: float | None = None  # time to the response headers: the server's latency
    remote_addr: str | None = None
    # the body was cut: "length" (the size cap), "time" (a timeout) or "disconnect" (the
    # connection was lost mid-body), the WARC-Truncated reasons
    truncated: str | None = None
    # Header lookup by name, case-insensitive (a fetch's result is read by several stages:
    # classification, content type, retry policy, redirects): the fetcher hands over the
    # multidict aiohttp parsed anyway; otherwise a dict is built on the first lookup.
    _by_name: Mapping[str, str] | None = field(default=None, repr=False, compare=False)
    _content_type: str | None | bool = field(default=False, repr=False, compare=False)  # False: not yet

    def header(self, name: str) -> str | None:
        """The first header of that name (case-insensitive), or None."""
        by_name = self._by_name
        if by_name is None:
            by_name = self._by_name = {key.lower(): value for key, value in reversed(self.headers)}
        return by_name.get(name.lower())

    @property
    def content_type(self) -> str | None:
        content_type = self._content_type
        if content_type is False:
            value = self.header("Content-Type")
            content_type = self._content_type = value.split(";", 1)[0].strip().lower() if value else None
        return None if content_type is True else content_type

    @property
    def content_encoding(self) -> str | None:
        return self.header("Content-Encoding")

    @property
    def is_html(self) -> bool:
        return self.content_type in ("text/html", "application/xhtml+xml")

    @property
    def charset(self) -> str | None:
        """The ``charset`` parameter of the Content-Type as sent (a label; the parser maps it
        to an encoding), or None. The first one counts, as in WHATWG MIME type parsing."""
        value = self.header("Content-Type")
        if not value or "charset" not in value.lower():
            return None
        for parameter in value.split(";")[1:]:
            name, _, label = parameter.partition("=")
            if name.strip().lower() == "charset":
                return label.strip().strip('"').strip() or None
        return None

    @property
    def may_be_sitemap(self) -> bool:
        """Worth showing the sitemap parser (which decides by the root element): an XML, feed or
        gzip type, or a path ending in .xml, .rss or .atom, gzip'd or not (servers send .gz as
        octet-stream)."""
        if self.content_type in _SITEMAP_TYPES:
            return True
        path = self.url.partition("#")[0].partition("?")[0].lower()
        return path.endswith(_SITEMAP_SUFFIXES)

    @property
    def may_be_text_sitemap(self) -> bool:
        """A type a text sitemap may come as: text/plain, gzip or octet-stream (a .txt.gz), or
        none at all. Only a URL robots.txt names is read as one (node.robots_txt): any
        text/plain page could pass for a text sitemap."""
        return self.content_type in _TEXT_SITEMAP_TYPES


_SITEMAP_TYPES = frozenset({"application/xml", "text/xml", "application/rss+xml", "application/atom+xml",
                            "application/gzip", "application/x-gzip"})
_SITEMAP_SUFFIXES = (".xml", ".xml.gz", ".rss", ".rss.gz", ".atom", ".atom.gz")
_TEXT_SITEMAP_TYPES = frozenset({None, "text/plain", "application/octet-stream", "application/gzip",
                                 "application/x-gzip"})


class PageFetcher(Protocol):
    """What fetches a page: fetch.fetcher.Fetcher, or a wrapper of it (cluster.fencing)."""

    async def fetch(self, url: str, *, max_body_bytes: int | None = None,
                    headers: dict[str, str] | None = None) -> FetchResult: ...
