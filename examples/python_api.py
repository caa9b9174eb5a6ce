"""Crawl from an asyncio program and handle each page as it is stored (crawler_node's Python API).

    python examples/python_api.py https://docs.example.org/ [--proxy URL] [--data-dir DIR]

The crawl waits for this program: while `handle` works on a page, at most `buffer` more are
stored ahead of it, and the node fetches no faster than the pages are taken.
"""

from __future__ import annotations

import argparse
import asyncio
from pathlib import Path

from crawler_node import Crawl, Page, make_settings


async def handle(page: Page) -> None:
    """Your work on one page: here, a line per page (and any slow await would slow the crawl)."""
    print(page.status, page.url, f"{len(page.decoded())} bytes, {len(page.links)} links", flush=True)


async def main(seeds: list[str], *, data_dir: Path, proxy: str | None = None) -> int:
    # the names and checks of the command line's flags (--max-depth 3 --pace adaptive ...)
    settings = make_settings(seeds=seeds, data_dir=data_dir, proxy=proxy, max_depth=3, pace="adaptive")
    pages = 0
    async with Crawl(settings, buffer=16) as crawl:
        async for page in crawl:
            await handle(page)
            pages += 1
        totals = crawl.node.totals.snapshot()  # the durable totals of the data directory
    print(f"{pages} pages handled; crawl.log has {totals.lines} lines, {totals.pages} pages answered 200")
    return pages


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("seeds", nargs="+")
    parser.add_argument("--proxy")
    parser.add_argument("--data-dir", type=Path, default=Path("./data"))
    args = parser.parse_args()
    asyncio.run(main(args.seeds, data_dir=args.data_dir, proxy=args.proxy))
