"""The parse stage's unit of work, run in a worker process so CPU spent on HTML never stalls
the event loop that drives the fetches."""

from __future__ import annotations

import time

from crawler_node.links import extract_links


def parse_page(body: bytes, url: str, max_links: int, delay_s: float = 0.0) -> list[str]:
    """Links of one HTML page, normalised (see links.extract_links). ``delay_s`` is a test
    hook that stages a slow parser; it is zero in production."""
    if delay_s:
        time.sleep(delay_s)
    return extract_links(body, url, max_links=max_links).links


def parse_pages(pages: list[tuple[bytes, str]], max_links: int, delay_s: float = 0.0) -> list[list[str] | str]:
    """Parse a batch in one round trip to the worker: crossing a process boundary costs far
    more than parsing one small page, so the parse stage sends pages in batches. A page that
    cannot be parsed yields its error message instead of failing the batch."""
    results: list[list[str] | str] = []
    for body, url in pages:
        try:
            results.append(parse_page(body, url, max_links, delay_s))
        except Exception as exc:  # noqa: BLE001 - one hostile page must not sink its batch
            results.append(f"{type(exc).__name__}: {exc}")
    return results
