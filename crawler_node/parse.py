"""The parse stage's unit of work, run in a worker process so CPU spent on HTML never stalls
the event loop that drives the fetches. The scope check runs here too: it is per-link CPU
work, and the node then receives only the links it will keep."""

from __future__ import annotations

import os
import time
from dataclasses import dataclass, field

from crawler_node.links import LinkMemo, extract_links
from crawler_node.urls import Scope, host_of


@dataclass(frozen=True, slots=True)
class ParseContext:
    scope: Scope
    max_links: int
    delay_s: float = 0.0  # a test hook that stages a slow parser; zero in production
    crash_url: str = ""  # a test hook: the worker process dies on this page; empty in production
    memo: LinkMemo = field(default_factory=LinkMemo)  # this worker's, for all its pages


# What a page yields: the (url, host) of its links in scope, normalised, and how many links it
# had in all. A plain tuple: it crosses the process boundary, where a tuple pickles in a
# fraction of a dataclass's time.
PageLinks = tuple[list[tuple[str, str]], int]


def parse_page(context: ParseContext, body: bytes, url: str, depth: int) -> PageLinks:
    """The in-scope links of one HTML page found at ``depth`` (see links.extract_links)."""
    if context.delay_s:
        time.sleep(context.delay_s)
    if context.crash_url and url == context.crash_url:
        os._exit(70)  # no cleanup, no answer: what a crash in the HTML parser's C code looks like
    found = extract_links(
        body, url, max_links=context.max_links, memo=context.memo, with_title=False
    ).links
    check = context.scope.check
    return [(link, host_of(link)) for link in found if check(link, depth + 1) is None], len(found)


def parse_pages(context: ParseContext, pages: list[tuple[bytes, str, int]]) -> list[PageLinks | str]:
    """Parse a batch in one round trip to the worker: crossing a process boundary costs far
    more than parsing one small page, so the parse stage sends pages in batches. A page that
    cannot be parsed yields its error message instead of failing the batch."""
    results: list[PageLinks | str] = []
    for body, url, depth in pages:
        try:
            results.append(parse_page(context, body, url, depth))
        except Exception as exc:  # noqa: BLE001 - one hostile page must not sink its batch
            results.append(f"{type(exc).__name__}: {exc}")
    return results
