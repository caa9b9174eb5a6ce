"""What resolving a page's links costs, and whether Ada (the WHATWG URL parser in C++, PyPI
``ada-url``) would resolve them for less (issue 18's candidate "a faster URL parser").

The links are those the crawl resolves: every ``href`` ``extract_links`` collects from each HTML
file of a directory, with the page's base. Then, side by side in one process, rounds alternating:

- **the node**: what ``parse/links.py: _collect_links`` does per link (the plain-URL shortcut,
  then the memoised general normaliser), the page's origin and directory once per page;
- **ada**: ``ada_url.join_url(base, raw)`` per link, when ``ada-url`` is importable, and the
  node's plain-URL shortcut with Ada for the links it leaves (where Ada could replace the general
  normaliser). A join is less than the node does: its canonical form (fragment dropped, default
  ports, percent-encoding, the query kept as sent) would still be Python on top of it. Reports how many of Ada's
  answers, fragment dropped, equal the node's, and how many links the shortcut resolves.

Not run in CI. It needs a documentation set, Debian's postgresql-doc-15 by default, and ada-url
for the comparison (not a dependency of the node):

    apt-get install postgresql-doc-15; pip install ada-url
    python bench/link_resolve.py [--docs DIR] [--rounds 5]
"""

from __future__ import annotations

import argparse
import statistics
import time
from collections.abc import Callable
from pathlib import Path

try:
    import ada_url  # type: ignore[import-not-found]  # not a dependency of the node: installed for this bench
except ImportError:
    ada_url = None

from crawler_node.core.urls import directory_of, origin_of, resolve_plain
from crawler_node.parse import links

DEFAULT_DOCS = Path("/usr/share/doc/postgresql-doc-15/html")
Page = tuple[str, list[str]]  # a page's base and its raw link targets, in document order


def collected(docs: Path) -> list[Page]:
    """Each page's base and raw targets, as extract_links hands them to _collect_links."""
    pages: list[Page] = []
    original = links._collect_links

    def keep(targets: list[str], base: str, max_links: int, memo: links.LinkMemo) -> list[str]:
        pages.append((base, list(targets)))
        return original(targets, base, max_links, memo)

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


def ada(pages: list[Page]) -> list[str | None]:
    out: list[str | None] = []
    for base, targets in pages:
        for raw in targets:
            try:
                out.append(ada_url.join_url(base, raw).partition("#")[0])
            except ValueError:
                out.append(None)
    return out


def shortcut_then_ada(pages: list[Page]) -> list[str | None]:
    """The node's shortcut for plain links, Ada (not memoised) for the rest."""
    out: list[str | None] = []
    for base, targets in pages:
        origin = origin_of(base)
        directory = directory_of(base, origin)
        for raw in targets:
            url = resolve_plain(raw, origin, directory)
            if url is None:
                try:
                    url = ada_url.join_url(base, raw).partition("#")[0]
                except ValueError:
                    url = None
            out.append(url)
    return out


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--docs", type=Path, default=DEFAULT_DOCS)
    parser.add_argument("--rounds", type=int, default=5)
    args = parser.parse_args()
    pages = collected(args.docs)
    count = sum(len(targets) for _, targets in pages)
    print(f"{len(pages)} pages, {count} link targets ({count / len(pages):.1f} a page)")
    sides: dict[str, Callable[[list[Page]], list[str | None]]] = {"node": node}
    if ada_url is not None:
        sides["ada join_url"] = ada
        sides["shortcut, then ada"] = shortcut_then_ada
    else:
        print("ada-url is not installed: the node's side alone")
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
    for name in ("ada join_url", "shortcut, then ada"):
        if name in answers:
            same = sum(a == b for a, b in zip(answers["node"], answers[name], strict=True))
            print(f"{name}: the answer, fragment dropped, equals the node's for {same} of {count} links")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
