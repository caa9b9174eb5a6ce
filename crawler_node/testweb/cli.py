"""`crawler-node testweb`: read the options and the profile, serve until SIGTERM/SIGINT.

Sizes: `--hosts N --pages P` makes site-0.test ... site-{N-1}.test with P pages each, plus
`--images` PNGs per host. A web of many one-page hosts, as a memory test needs, is

    crawler-node testweb --hosts 200000 --pages 1 --images 0 --cross-link-prob 0 --history 0

(200,000 hosts, each serving exactly `/` and robots.txt (404); ready in about 6 s). Building
every host's layout is linear in hosts x pages; `/_testweb/expected` is computed before the
ready line. Poll `/_testweb/stats?summary=1` on such a web: the full document grows per URL.
Add `--no-keep-alive` when a crawler crawls it fast through the proxy: aiohttp pools proxied
connections per target host, so kept alive that is one open connection per recent host.
"""

from __future__ import annotations

import argparse
import asyncio
import signal
import sys
from collections.abc import Callable
from typing import TYPE_CHECKING

from crawler_node.testweb.graph import IMAGES_PER_HOST, MAX_IMAGES_PER_HOST, HostFeatures, SyntheticWeb
from crawler_node.testweb.ground_truth import DEFAULT_HISTORY
from crawler_node.testweb.profile import (
    DEFAULT_API_HEADER,
    ApiLimit,
    Profile,
    ProfileError,
    check_api_header,
    load_profile,
)

if TYPE_CHECKING:
    from crawler_node.testweb.server import TestwebServer

READY_PREFIX = "testweb listening on "


def _listen_address(text: str) -> tuple[str, int]:
    host, sep, port = text.rpartition(":")
    if not sep or not host or not port.isdigit() or int(port) > 65535:
        raise argparse.ArgumentTypeError(f"expected HOST:PORT, got {text!r}")
    return host.strip("[]"), int(port)


def _at_least(minimum: int) -> Callable[[str], int]:
    def parse(text: str) -> int:
        try:
            value = int(text)
        except ValueError:
            raise argparse.ArgumentTypeError(f"expected an integer, got {text!r}") from None
        if value < minimum:
            raise argparse.ArgumentTypeError(f"must be >= {minimum}, got {value}")
        return value

    return parse


def _between(minimum: int, maximum: int) -> Callable[[str], int]:
    at_least_minimum = _at_least(minimum)

    def parse(text: str) -> int:
        value = at_least_minimum(text)
        if value > maximum:
            raise argparse.ArgumentTypeError(f"must be <= {maximum}, got {value}")
        return value

    return parse


def _probability(text: str) -> float:
    try:
        value = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected a number, got {text!r}") from None
    if not 0.0 <= value <= 1.0:
        raise argparse.ArgumentTypeError(f"must be between 0 and 1, got {value}")
    return value


def _header_name(text: str) -> str:
    try:
        return check_api_header(text)
    except ValueError as exc:
        raise argparse.ArgumentTypeError(str(exc)) from None


_EPILOG = """\
profile file (JSON, or TOML when named *.toml): host globs -> settings; later globs win per key.
  {"site-0.test": {"max_concurrency": 3, "latency_ms": 50}, "site-[1-4].test": {"error_rate": 0.3}}
  structured form: {"hosts": {GLOB: SETTINGS}, "api_limit": {"concurrency": N, "quota": N,
  "header": "X-Api-Limit"}}. An exact name outside site-N.test (shop.example.test) adds a host.
sizes: --hosts 200000 --pages 1 --images 0 --cross-link-prob 0 --history 0 is 200,000 one-page
  hosts (/ and robots.txt only), ready in seconds; poll it with GET /_testweb/stats?summary=1.
settings: latency_ms, jitter_ms (default 20% of latency, added on top), max_concurrency,
  retry_after_s (default 1), error_rate (0..1), error_status (default 503), robots (robots.txt
  text), robots_bom (bool: robots.txt served with a UTF-8 byte-order mark first), page_bytes,
  drip_bytes_per_s, redirects (0..1), trap (bool), redirect_trap (bool: / links
  /trap/redirect/x, which answers 302 to a path one /x longer, 250 hops deep), gzip_bomb (bool or bytes),
  gzip (bool: HTML sent with Content-Encoding: gzip when Accept-Encoding allows it; Vary: Accept-Encoding),
  changing (0..1: that fraction of /p/N pages, never /, differs on every visit; which ones:
  graph.is_changing(path, fraction), or "changing" in /_testweb/expected), duplicates (0..1000: N
  pairs /dup/K/a and /dup/K/b, linked from /, each pair the same bytes, linking only to / and the pair),
  sitemaps (a list of xml, txt, rss, atom, each maybe F.gz: robots.txt names /sitemap.F, which lists
  /listed/F/0..2, pages no page links to; text/plain, application/rss+xml, ..., application/gzip).
  url_shapes (bool: / links /shapes/, links written with backslashes and odd scheme-relative forms, and
  /shapes/legacy, a windows-1252 page whose links' queries a browser encodes in windows-1252).
  change_rate (per second: each /p/N page, never /, changes as a Poisson process of this rate from
  testweb's start, drawn from the seed) and change_spread (a page's rate is change_rate times a
  log-normal factor of this sigma; 0: all the same), change_paths (a table of path globs to rates:
  the first that matches a /p/N page's path sets its rate instead, 0 never).
refusals (testweb.refusals; stats count them per host as "refused": {kind: n}): challenge_rps (a
  Cloudflare-style 403 challenge once a second brings more requests), captcha, login_wall, forbidden
  (0..1: those page URLs answer a captcha page, a 302 to /login, a plain 403), soft_block_after (pages
  served before every URL gets one small page), refusal_for_s (default 5: how long either lasts).
validators: every 200 with content has a strong ETag (sha1 of the bytes sent) and Last-Modified (the
  start second; a changing page's visit), and answers If-None-Match / If-Modified-Since with 304.
ground truth (any Host): GET /_testweb/expected ({"urls": [...], "changing": [...]}),
  GET /_testweb/stats (per host and in totals: requests, ..., not_modified, body_bytes), GET /_testweb/hosts,
  POST /_testweb/reset, POST /_testweb/api/quota {"quota": N}, GET /_testweb/freshness (the pages
  with a change_rate: fetches served, those that found a new version, the time-averaged share of
  fetched pages whose last fetch is current; ?since=S: from S seconds after the start (its now_s
  is the time now), ?buckets=N: over time, ?pages=1: per page).
  /_testweb/stats flags: ?summary=1 (totals only), ?host=H (repeatable: those hosts and their URLs),
  ?history=1 (per host, the last --history requests as [started, status, path]; started on
  testweb's monotonic clock, whose current value is "clock"; status 0 = not answered).
"""


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.formatter_class = argparse.RawDescriptionHelpFormatter
    parser.epilog = _EPILOG
    parser.add_argument(
        "--listen", type=_listen_address, default=("127.0.0.1", 8900), metavar="HOST:PORT",
        help="address to serve on; port 0 picks a free port (default 127.0.0.1:8900)",
    )
    parser.add_argument("--hosts", type=_at_least(0), default=20, metavar="N",
                        help="number of site-K.test hosts (default 20)")
    parser.add_argument("--pages", type=_at_least(1), default=50, metavar="P",
                        help="pages per host, including / (default 50)")
    parser.add_argument("--images", type=_between(0, MAX_IMAGES_PER_HOST), default=IMAGES_PER_HOST,
                        metavar="K", help=f"PNG images per host, /img/0.png ... (0 to {MAX_IMAGES_PER_HOST};"
                                          f" default {IMAGES_PER_HOST})")
    parser.add_argument("--history", type=_at_least(0), default=DEFAULT_HISTORY, metavar="N",
                        help="requests remembered per host for /_testweb/stats?history=1; 0 = none"
                             f" (default {DEFAULT_HISTORY})")
    parser.add_argument("--no-keep-alive", dest="keep_alive", action="store_false",
                        help="answer every request with Connection: close (a client then cannot keep"
                             " one pooled connection per target host of a huge web)")
    parser.add_argument("--seed", type=int, default=1, metavar="S",
                        help="seed of the link graph and behaviours (default 1)")
    parser.add_argument("--cross-link-prob", type=_probability, default=0.2, metavar="X",
                        help="probability that a page links to other hosts (default 0.2)")
    parser.add_argument("--tree-only", action="store_true",
                        help="only the spanning tree: every page linked from exactly one parent, no"
                             " link back to / and no cross-host links (a lost URL is never found"
                             " again); seed every host's /")
    parser.add_argument("--profile", metavar="FILE",
                        help="JSON (or .toml) file mapping host globs to behaviours")
    parser.add_argument("--api-concurrency", type=_at_least(1), metavar="N",
                        help="act as a paid API: 429 when more than N requests are in flight")
    parser.add_argument("--api-quota", type=_at_least(0), metavar="N",
                        help="act as a paid API: 509 after N served requests")
    parser.add_argument("--api-limit-header", type=_header_name, metavar="NAME",
                        help=f"header naming the API limit hit (default {DEFAULT_API_HEADER})")


def run(args: argparse.Namespace) -> int:
    if args.profile:
        try:
            profile = load_profile(args.profile)
        except ProfileError as exc:
            print(f"testweb: error: profile {args.profile}: {exc}", file=sys.stderr)
            return 2
    else:
        profile = Profile()
    api = profile.api_limit
    api_limit = ApiLimit(
        concurrency=args.api_concurrency if args.api_concurrency is not None else api.concurrency,
        quota=args.api_quota if args.api_quota is not None else api.quota,
        header=args.api_limit_header or api.header,
    )
    hosts = [f"site-{k}.test" for k in range(args.hosts)]
    hosts += [name for name in profile.extra_hosts() if name not in hosts]
    if not hosts:
        print("testweb: error: no hosts (use --hosts N or name hosts in a profile)",
              file=sys.stderr)
        return 2
    host_profiles = {host: profile.for_host(host) for host in hosts}
    features = {
        host: HostFeatures(
            redirects=p.redirects,
            trap=p.trap,
            redirect_trap=p.redirect_trap,
            gzip_bomb=p.gzip_bomb > 0,
            page_bytes=p.page_bytes,
            robots=p.robots,
            duplicates=p.duplicates,
            changing=p.changing,
            sitemaps=p.sitemaps,
            url_shapes=p.url_shapes,
        )
        for host, p in host_profiles.items()
    }
    try:
        web_graph = SyntheticWeb(
            hosts=hosts, pages=args.pages, seed=args.seed,
            cross_link_prob=args.cross_link_prob, images=args.images, features=features,
            tree_only=args.tree_only,
        )
    except ValueError as exc:
        print(f"testweb: error: {exc}", file=sys.stderr)
        return 2
    # Imported here so that `crawler-node --help` does not pay for aiohttp.
    from crawler_node.testweb.server import TestwebServer

    server = TestwebServer(web_graph=web_graph, profiles=host_profiles, api_limit=api_limit,
                           history_limit=args.history, keep_alive=args.keep_alive)
    listen_host, listen_port = args.listen
    try:
        return asyncio.run(_serve(server, listen_host, listen_port))
    except OSError as exc:
        reason = exc.strerror or exc
        print(f"testweb: error: cannot listen on {listen_host}:{listen_port}: {reason}",
              file=sys.stderr)
        return 1


async def _serve(server: TestwebServer, host: str, port: int) -> int:
    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    for signum in (signal.SIGTERM, signal.SIGINT):
        loop.add_signal_handler(signum, stop.set)
    try:
        bound_host, bound_port = await server.start(host, port)
        shown = f"[{bound_host}]" if ":" in bound_host else bound_host
        print(f"{READY_PREFIX}http://{shown}:{bound_port}", flush=True)
        await stop.wait()
    finally:
        await server.close()
    return 0
