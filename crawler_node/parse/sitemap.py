"""Sitemaps (https://www.sitemaps.org/protocol.html), pure: the URLs a sitemap lists.

A sitemap's bytes are inflated from gzip no further than ``max_bytes`` (parse.sitemap_input),
then read as XML: a ``<urlset>`` lists pages, a ``<sitemapindex>`` more sitemaps, an RSS 2.0
or Atom feed pages (parse.sitemap_xml, which bounds what hostile XML costs). At most
``max_urls`` URLs are kept.
"""

from __future__ import annotations

import zlib

from crawler_node.parse.sitemap_input import FEED_BYTES, Sitemap, is_gzip, open_body
from crawler_node.parse.sitemap_xml import SITEMAP_NAMESPACE, read_xml

__all__ = ["SITEMAP_NAMESPACE", "Sitemap", "is_gzip", "read_sitemap"]


def read_sitemap(body: bytes, *, max_urls: int, max_bytes: int) -> Sitemap:
    """The URLs of the sitemap in ``body`` (XML, or gzip of XML: told by the magic bytes, not
    the URL or the Content-Type, which servers get wrong both ways). An XML document of
    another kind (an XHTML page) is ``Sitemap(kind=None)``; malformed XML, a DTD or
    corrupt gzip gives an ``error``, never an exception."""
    source = open_body(body, max_bytes)
    try:
        first = source.read(FEED_BYTES)
    except zlib.error as exc:
        return Sitemap(kind=None, error=f"{type(exc).__name__}: {exc}")
    return read_xml(first, source, max_urls=max_urls)
