"""What parsing a page as it is, when that is safe, saves over flattening it first
(parse/links.py: ``_parses_linearly``), and what the worst page within the bounds costs.

Side by side in one process, rounds alternating: ``extract_links`` as the crawl calls it (one
memo per worker, no title) over every HTML file of a directory, once as it is and once with
every page flattened first (the code before the shortcut). Reports µs per page for each, the
share of pages and of characters parsed directly, and checks that both give the same links on
every page. Then the worst cases the bounds admit (deep nesting, attribute floods just under
the segment bound, one-character Unicode attribute names), each timed, against the bounds'
largest ordinary page.

Not run in CI. It needs a documentation set, Debian's postgresql-doc-15 by default:

    apt-get install postgresql-doc-15
    python bench/parse_direct.py [--docs DIR] [--rounds 5]
"""

from __future__ import annotations

import argparse
import contextlib
import json
import statistics
import string
import sys
import time
from pathlib import Path
from unittest import mock

from crawler_node.parse import links
from crawler_node.parse.charset import decode_document

DEFAULT_DOCS = Path("/usr/share/doc/postgresql-doc-15/html")
RESULTS = Path(__file__).parent / "results" / "parse_direct.json"


def _pass(pages: list[tuple[bytes, str]]) -> tuple[float, list[list[str]]]:
    memo = links.LinkMemo()
    started = time.perf_counter()
    found = [links.extract_links(body, url, memo=memo, with_title=False).links for body, url in pages]
    return (time.perf_counter() - started) / len(pages) * 1e6, found


def _worst_cases() -> dict[str, str]:
    """Pages at the bounds of the direct parse, each admitted by ``_parses_linearly``."""
    tags, segment, size = links._DIRECT_MAX_TAGS, links._DIRECT_MAX_SEGMENT, links._DIRECT_MAX_CHARS
    names = [a + b for a in string.ascii_lowercase + string.digits for b in string.ascii_lowercase + string.digits]
    flood = "<div" + "".join(f" {name}" for name in names)[: segment - 8] + ">"
    wide = "<div/" + "/".join(chr(0x4E00 + i) for i in range((segment - 8) // 2)) + ">"
    cases = {
        "nested divs": "<div>" * tags,
        "span stack then div pairs": "<span>" * (tags // 3) + "<div></div>" * (tags // 3),
        "anchor and bold": "<a href=x><b>" * (tags // 2),
        "attribute floods, many tags": flood * min(tags, size // len(flood)),
        "one-letter Unicode attributes, many tags": wide * min(tags, size // len(wide)),
        "an ordinary page of the largest size": _ordinary(tags // 4, size),
    }
    for name, text in cases.items():
        if not links._parses_linearly(text):
            raise SystemExit(f"worst case {name!r} is not within the bounds: the bench is out of date")
    return cases


def _ordinary(paragraphs: int, size: int) -> str:
    """Paragraphs of text with a link each, four tags a paragraph, ``size`` characters in all."""
    words = max(1, (size // paragraphs - 40) // 10)
    return "".join(f'<p>{"Some text " * words}<a href="/x{i}">link</a></p>\n' for i in range(paragraphs))[:size]


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--docs", type=Path, default=DEFAULT_DOCS, help="a directory of .html files")
    parser.add_argument("--rounds", type=int, default=5)
    args = parser.parse_args()
    files = sorted(args.docs.glob("*.html"))
    if not files:
        print(f"no HTML files in {args.docs} (apt-get install postgresql-doc-15, or --docs DIR)")
        return 0
    pages = [(path.read_bytes(), f"http://docs.test/{path.name}") for path in files]
    texts = [decode_document(body, None).text for body, _ in pages]
    direct = [text for text in texts if links._parses_linearly(text)]
    scan = links._scan
    variants: dict[str, dict[str, object]] = {
        "as is when safe": {},
        # the elements of a tree parsed as it is walked, as a flattened tree's are, not queried
        "as is, walked": {"_scan": lambda tree, flat: scan(tree, flat=True)},
        "always flattened": {"_parses_linearly": lambda text: False},
    }
    timings: dict[str, list[float]] = {name: [] for name in variants}
    answers: dict[str, list[list[str]]] = {}
    for round_ in range(args.rounds):
        order = list(timings) if round_ % 2 == 0 else list(reversed(timings))
        for name in order:
            with contextlib.ExitStack() as patches:
                for attribute, replacement in variants[name].items():
                    patches.enter_context(mock.patch.object(links, attribute, replacement))
                timings[name].append((result := _pass(pages))[0])
            answers[name] = result[1]
    same = all(found == answers["always flattened"] for found in answers.values())
    medians = {name: statistics.median(values) for name, values in timings.items()}
    ratios = [a / b for a, b in zip(timings["as is when safe"], timings["always flattened"], strict=True)]
    walked = [a / b for a, b in zip(timings["as is when safe"], timings["as is, walked"], strict=True)]
    print(f"{len(pages)} pages from {args.docs}: {len(direct) / len(texts):.1%} of the pages and "
          f"{sum(map(len, direct)) / sum(map(len, texts)):.1%} of the characters parsed as they are")
    for name, value in medians.items():
        print(f"  {name:18s} {value:7.1f} µs per page (median of {args.rounds}; rounds "
              + ", ".join(f"{v:.0f}" for v in timings[name]) + ")")
    print(f"  against walked: {statistics.median(walked):.3f} (rounds {min(walked):.3f}-{max(walked):.3f})")
    print(f"  ratio {statistics.median(ratios):.3f} (rounds {min(ratios):.3f}-{max(ratios):.3f}); "
          f"same links on every page: {same}")
    worst = {}
    for name, text in _worst_cases().items():
        started = time.perf_counter()
        links.extract_links(text.encode(), "http://docs.test/", max_links=5000)
        worst[name] = {"chars": len(text), "ms": (time.perf_counter() - started) * 1e3}
        print(f"  worst case within the bounds, {name}: {len(text):,} chars, {worst[name]['ms']:.2f} ms")
    RESULTS.parent.mkdir(exist_ok=True)
    RESULTS.write_text(json.dumps({"pages": len(pages), "direct_share": len(direct) / len(texts),
                                   "us_per_page": medians, "ratio": statistics.median(ratios),
                                   "against_walked": statistics.median(walked), "same_links": same,
                                   "worst": worst}, indent=2))
    return 0 if same else 1


if __name__ == "__main__":
    sys.exit(main())
