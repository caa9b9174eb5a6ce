"""The parse stage's unit of work, run in a worker process so CPU spent on HTML never stalls
the event loop that drives the fetches. The scope check runs here too: it is per-link CPU
work, and the node then receives only the links it will keep, each once (see ReturnedLinks)."""

from __future__ import annotations

import os
import time
from dataclasses import dataclass, field

from crawler_node.core.bounded import TwoGenerationSet
from crawler_node.core.scope import Scope
from crawler_node.core.urls import host_of
from crawler_node.parse.links import LinkMemo, extract_links


class ReturnedLinks:
    """The links this worker has already handed to the node since the cluster's ring last
    changed. About six of every seven links on a page were found on an earlier page (the
    same navigation everywhere); the node would only learn again that they are duplicates,
    after unpickling them, making their frontier entries and asking its frontier.

    Handed over once is enough: the node commits every link it receives to its frontier or
    to a peer's outbox, both durable, and neither ever drops one. What a node fetches moves
    only when the ring's live members change (a peer down, back, joining), and then links
    must be routed again: a new ``generation`` (the membership version) empties the memory.
    A new worker (after a crash, or a restart of the node) starts empty. Bounded (see
    core.bounded.TwoGenerationSet)."""

    def __init__(self, capacity: int = 32_768) -> None:
        self._urls = TwoGenerationSet(capacity)
        self._generation: int | None = None

    def new_generation(self, generation: int) -> None:
        if generation != self._generation:
            self._generation = generation
            self._urls.clear()

    def fresh(self, urls: list[str]) -> list[str]:
        """The ``urls`` not handed over in this generation yet, now remembered (in order; a URL
        listed twice counts once)."""
        return self._urls.add_new(urls)


@dataclass(frozen=True, slots=True)
class ParseContext:
    scope: Scope
    max_links: int
    delay_s: float = 0.0  # a test hook that stages a slow parser; zero in production
    crash_url: str = ""  # a test hook: the worker process dies on this page; empty in production
    memo: LinkMemo = field(default_factory=LinkMemo)  # this worker's, for all its pages
    returned: ReturnedLinks = field(default_factory=ReturnedLinks)


# What a page yields: the (url, host) of its links in scope, normalised, that this worker has
# not handed over before (see ReturnedLinks), and how many links the page had in all. A
# plain tuple: it crosses the process boundary, where a tuple pickles in a fraction of a
# dataclass's time.
PageLinks = tuple[list[tuple[str, str]], int]


def parse_page(context: ParseContext, body: bytes, url: str, depth: int) -> PageLinks:
    """The in-scope links of one HTML page found at ``depth`` (see links.extract_links) that
    were not handed over before."""
    if context.delay_s:
        time.sleep(context.delay_s)
    if context.crash_url and url == context.crash_url:
        os._exit(70)  # no cleanup, no answer: what a crash in the HTML parser's C code looks like
    found = extract_links(
        body, url, max_links=context.max_links, memo=context.memo, with_title=False
    ).links
    # The scope first: a link out of scope at this depth may be in scope at another.
    scope = context.scope
    if scope.too_deep(depth + 1):
        return [], len(found)
    in_scope = [link for link in found if scope.check(link, depth + 1) is None] if scope.allow_hosts else found
    return [(link, host_of(link)) for link in context.returned.fresh(in_scope)], len(found)


def parse_pages(
    context: ParseContext, pages: list[tuple[bytes, str, int]], generation: int = 0
) -> list[PageLinks | str]:
    """Parse a batch in one round trip to the worker: crossing a process boundary costs far
    more than parsing one small page, so the parse stage sends pages in batches. A page that
    cannot be parsed yields its error message instead of failing the batch. ``generation``
    is the cluster's membership version: when it changes, links are handed over again."""
    context.returned.new_generation(generation)
    results: list[PageLinks | str] = []
    for body, url, depth in pages:
        try:
            results.append(parse_page(context, body, url, depth))
        except Exception as exc:  # noqa: BLE001 - one hostile page must not sink its batch
            results.append(f"{type(exc).__name__}: {exc}")
    return results
