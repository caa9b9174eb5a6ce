"""What reading a sitemap costs as its size grows, whatever it holds (issue 46).

Each body is a sitemaps.org urlset whose one URL before and one after sit around a padding of
1, 10 and 50 MB, gzip'd as a hostile server would send it (the 50 MB comment is a 51 KB body).
The paddings are one token each, which expat re-scans from its start on every piece it is
fed: a comment, a processing instruction, and a start tag with one long attribute; a text
sitemap padded with blank lines, and with one line too long to be a URL; then a plain
sitemap of the same sizes (up to 50,000 URLs), the cost of the ordinary case. Reports the best
of ``--rounds`` parse times per body (read_sitemap, gzip inflation included), the ratio of
each size's time to the 1 MB one's (linear: about 10 and 50), and whether the URL after the
padding was read (an attribute over the token bound is an error by design: see
parse/sitemap_xml.py).

Not run in CI (tests/test_sitemap_linear.py checks the ratio at 1 and 10 MB):

    python bench/sitemap_parse.py [--rounds 3] [--sizes 1,10,50]
"""

from __future__ import annotations

import argparse
import gzip
import time

from crawler_node.parse.sitemap import SITEMAP_NAMESPACE, read_sitemap

MB = 1_000_000
LIMITS = {"max_urls": 50_000, "max_bytes": 52_428_800}
HEAD = f'<?xml version="1.0" encoding="UTF-8"?>\n<urlset xmlns="{SITEMAP_NAMESPACE}">\n'
FIRST, LAST = "http://s.test/before", "http://s.test/after"


def padded(kind: str, size: int) -> bytes:
    """A urlset of two URLs around ``size`` bytes of one token of ``kind``; or a text sitemap."""
    if kind.startswith("text"):
        filler = b"\n" if kind == "text, blank lines" else b"x"
        return f"{FIRST}\n".encode() + filler * size + f"\n{LAST}\n".encode()
    opening, closing = {"comment": ("<!--", "-->"), "pi": ("<?pad ", "?>"),
                        "attribute": ('<url pad="', '"/>')}[kind]
    filler = b"x" * (size - len(opening) - len(closing))
    return (f"{HEAD}<url><loc>{FIRST}</loc></url>{opening}".encode() + filler
            + f"{closing}<url><loc>{LAST}</loc></url></urlset>".encode())


def ordinary(size: int) -> bytes:
    """A urlset about ``size`` bytes long: one URL per 200 bytes, at most 50,000 (the spec's
    limit), their paths as long as it takes."""
    count = min(50_000, size // 200)
    entry = len("<url><loc>http://s.test/</loc><lastmod>2026-01-01</lastmod></url>\n") + 6
    path_chars = max(1, size // count - entry)
    entries = "".join(f"<url><loc>http://s.test/{i:06d}{'p' * path_chars}</loc><lastmod>2026-01-01</lastmod></url>\n"
                      for i in range(count))
    return f"{HEAD}{entries}</urlset>".encode()


def best_of(body: bytes, rounds: int, text: bool) -> tuple[float, list[str], str | None]:
    times = []
    for _ in range(rounds):
        started = time.perf_counter()
        sitemap = read_sitemap(body, **LIMITS, text=text)
        times.append(time.perf_counter() - started)
    return min(times), sitemap.urls, sitemap.error


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--sizes", default="1,10,50", help="padding sizes in MB, comma-separated")
    args = parser.parse_args()
    sizes = [int(size) for size in args.sizes.split(",")]
    print(f"{'body':<22}{'MB':>4}{'gzip KB':>10}{'seconds':>10}{'x 1 MB':>8}  read")
    for kind in ("comment", "pi", "attribute", "text, blank lines", "text, one long line", "ordinary"):
        first = None
        for size in sizes:
            raw = ordinary(size * MB) if kind == "ordinary" else padded(kind, size * MB)
            body = gzip.compress(raw, 6)
            seconds, urls, error = best_of(body, args.rounds, kind.startswith("text"))
            first = first or seconds
            if kind == "ordinary":
                read = f"{len(urls)} URLs"
            else:
                read = "both URLs" if urls == [FIRST, LAST] else f"{urls} ({error})"
            print(f"{kind:<22}{len(raw) / MB:>4.0f}{len(body) / 1000:>10.0f}{seconds:>10.3f}"
                  f"{seconds / first:>8.1f}  {read}")


if __name__ == "__main__":
    main()
