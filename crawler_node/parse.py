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
