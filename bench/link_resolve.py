"""What resolving a page's links costs: the node's way (the plain-URL shortcut, the memo, then the
WHATWG parser), against the parser for every link and against Ada's bare join.

The links are those the crawl resolves: every ``href`` ``extract_links`` collects from each HTML
file of a directory, with the page's base. Then, side by side in one process, rounds alternating:

- **node**: what ``parse/links.py: _collect_links`` does per link: ``urls.resolve_plain`` (the
  plain-URL shortcut), then ``LinkMemo.normalize`` (``urls.normalize_url``, remembered per base
  directory), the page's origin and directory once per page;
- **normalize_url**: ``urls.normalize_url(raw, base)`` for every link: Ada's parse and the
  crawler's canonical form, no shortcut, no memo;
- **ada join_url**: ``ada_url.join_url(base, raw)``, fragment dropped: the parse alone, through
  ada_url's own Python API, without the canonical form (a floor, not a way to crawl).

It reports how many links the shortcut resolves, and that the node's answers equal
normalize_url's for every link (the shortcut and the memo change the cost, never the answer).
For a tree before this parser (main before issue 46), run that tree's own bench with its
checkout on PYTHONPATH: its "node" line is the same measurement.

Not run in CI. It needs a documentation set, Debian's postgresql-doc-15 by default:

    apt-get install postgresql-doc-15
    python bench/link_resolve.py [--docs DIR] [--rounds 5]
"""

from __future__ import annotations

import argparse
import statistics
import time
from collections.abc import Callable
from pathlib import Path

import ada_url

from crawler_node.core.urls import InvalidURL, directory_of, normalize_url, origin_of, resolve_plain
from crawler_node.parse import links

DEFAULT_DOCS = Path("/usr/share/doc/postgresql-doc-15/html")
Page = tuple[str, list[str]]  # a page's base and its raw link targets, in document order


def collected(docs: Path) -> list[Page]:
    """Each page's base and raw targets, as extract_links hands them to _collect_links."""
    pages: list[Page] = []
    original = links._collect_links

    def keep(targets: list[str], base: str, max_links: int, memo: links.LinkMemo,
             query_codec: str | None = None) -> list[str]:
        pages.append((base, list(targets)))
        return original(targets, base, max_links, memo, query_codec)

    links._collect_links = keep
    try:
        for path in sorted(docs.glob("*.html")):
            links.extract_links(path.read_bytes(), f"https://www.postgresql.org/docs/15/{path.name}",
                                with_title=False)
    finally:
        links._collect_links = original
    return pages


def node(pages: list[Page]) -> list[str | None]:
    memo, out = links.LinkMemo(), []
    for base, targets in pages:
        origin = origin_of(base)
        directory = directory_of(base, origin)
        out += [resolve_plain(raw, origin, directory) or memo.normalize(raw, base, origin, directory)
                for raw in targets]
    return out


def each_parsed(pages: list[Page]) -> list[str | None]:
    out: list[str | None] = []
    for base, targets in pages:
        for raw in targets:
            try:
                out.append(normalize_url(raw, base))
            except InvalidURL:
                out.append(None)
    return out


def ada_join(pages: list[Page]) -> list[str | None]:
    out: list[str | None] = []
    for base, targets in pages:
        for raw in targets:
            try:
                out.append(ada_url.join_url(base, raw).partition("#")[0])
            except ValueError:
                out.append(None)
    return out


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--docs", type=Path, default=DEFAULT_DOCS)
    parser.add_argument("--rounds", type=int, default=5)
    args = parser.parse_args()
    pages = collected(args.docs)
    count = sum(len(targets) for _, targets in pages)
    print(f"{len(pages)} pages, {count} link targets ({count / len(pages):.1f} a page)")
    sides: dict[str, Callable[[list[Page]], list[str | None]]] = {
        "node": node, "normalize_url": each_parsed, "ada join_url": ada_join}
    times: dict[str, list[float]] = {name: [] for name in sides}
    answers: dict[str, list[str | None]] = {}
    for index in range(args.rounds):
        order = list(sides.items())
        for name, side in order[::-1] if index % 2 else order:
            started = time.perf_counter()
            answers[name] = side(pages)
            times[name].append((time.perf_counter() - started) / count * 1e6)
    for name, per_link in times.items():
        print(f"{name}: {statistics.median(per_link):.2f} µs a link (rounds {min(per_link):.2f}-{max(per_link):.2f}),"
              f" {statistics.median(per_link) * count / len(pages):.1f} µs a page")
    plain = sum(resolve_plain(raw, origin_of(base), directory_of(base, origin_of(base))) is not None
                for base, targets in pages for raw in targets)
    print(f"the plain-URL shortcut resolves {plain} of {count} links")
    same = sum(a == b for a, b in zip(answers["node"], answers["normalize_url"], strict=True))
    print(f"the node's answer equals normalize_url's for {same} of {count} links")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
