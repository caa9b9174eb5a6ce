"""testweb: the deterministic synthetic web that tests, benchmarks and the demo crawl.

It is reached as an HTTP proxy, so any `site-K.test` name works without DNS; unknown hosts get
421 and nothing leaves the synthetic web. Modules:

    graph            the pure link graph (seeded; no I/O)
    pages            the pure page bytes: HTML, PNGs, the gzip bomb
    profile          per-host behaviours loaded from a JSON/TOML file and validated
    representations  the bytes served per coding, their ETag and Last-Modified, and when a
                     conditional request gets a 304
    stats            ground truth: what the server observed
    responses        writing answers out, and the body bytes that sent
    server           the aiohttp server (absolute-form and origin-form requests)
    cli              `crawler-node testweb`
    process          `TestwebProcess`, testweb as a child process for tests, benchmarks and the demo

What `GET /_testweb/expected` contains: every URL reachable from the host roots by following
links and redirects, in canonical form (`http://site-1.test/p/3`, `http://site-1.test/`):
pages, the `/img/K.png` resources, redirecting pages (301/302) and their targets, the
`/loop/a` and `/loop/b` redirect loop, `/bomb`, the `/dup/K/a`, `/dup/K/b` duplicate pairs, and
the `/sitemap.F` files robots.txt names with the `/listed/F/K` pages only they list (a crawler
fetches all of these; the sitemaps when it reads robots.txt's Sitemap lines). Left out: URLs
that robots.txt disallows for `crawler-node` (protego's reading) and what is reachable only
through them, the `/calendar/` spider trap, the `/trap/redirect/x...` redirect trap, and
`/robots.txt` itself. Beside "urls", "changing" lists
those of them whose bytes (and so ETag and Last-Modified) differ on every visit
(`TestwebProcess.changing()`).

What `GET /_testweb/stats` counts, per host: every request that reached the host, robots.txt,
404s, 5xx and the host's own 429s included; requests refused by the paid-API layer (429 with
X-Api-Limit: concurrency, 509 with X-Api-Limit: quota) never reach a host and are counted only
under "api". `peak_concurrency` counts requests from the moment handling starts until the body
(drip included) is written, so a crawler that sends 4 at once to a host limited to 3 shows 4.
`min_gap_s` is the shortest time between the starts of two consecutive requests to the host.
`not_modified` counts 304 answers, and `body_bytes` the response body bytes written (as on the
wire: a gzip answer's compressed length, nothing for HEAD or a 304), per host and in the totals.

Query flags of `GET /_testweb/stats` (every answer carries "clock", testweb's monotonic clock
when it was taken, and "totals", running sums over all hosts):
    summary=1   only clock, totals, api and misdirected: O(1), to poll every second even on a web
                of 200,000 hosts (the full document grows with every URL served)
    host=H      (repeatable) only these hosts, and only their URLs
    history=1   per host, its last `--history` requests (default 64) as [started, status, path]:
                the start time on testweb's clock, the status sent (0: the client went away
                before the answer was written), e.g. to measure the gap across a crawler restart
                or between a 429 and the next request

Sizes: `--hosts N --pages P --images K`. `--hosts 200000 --pages 1 --images 0 --cross-link-prob 0
--history 0 --no-keep-alive` is a web of 200,000 one-page hosts (`/` and a 404 robots.txt each),
ready in about 6 s. `--no-keep-alive` answers with `Connection: close`: a client that pools
proxied connections per target host then does not hold one open per host.
"""

from crawler_node.testweb.process import TestwebError, TestwebProcess

__all__ = ["TestwebError", "TestwebProcess"]
