"""The fetch layer on the real web: real node processes crawl nginx over https, resolving
through dnsmasq (``--dns-server``), trusting the test CA (``--ca-bundle``), or through squid
(``--proxy``, https by CONNECT). Assertions are on nginx's access log and on the node's WARC
read back with warcio; the fetcher's cut bodies are checked against a server that stalls or
drops mid-body.

- certificate errors: outcome ``tls`` with OpenSSL's reason, once per URL, nginx never sees
  an HTTP request;
- a name that does not resolve: outcome ``dns``;
- ``WARC-IP-Address`` on every response record of a direct crawl, the address nginx served
  it on; none through the proxy;
- a body over ``--max-body-bytes`` keeps its first bytes, marked ``WARC-Truncated: length``;
  a timeout or a reset after the headers keeps what came (``time``, ``disconnect``).
"""

from __future__ import annotations

import asyncio
import contextlib
import io
from collections.abc import AsyncIterator
from pathlib import Path

import pytest
from aiohttp import web
from conftest import read_crawl_log
from realweb import RealWeb, realweb  # noqa: F401 - realweb is the fixture
from warcio.archiveiterator import ArchiveIterator

from crawler_node.config import FetchConfig
from crawler_node.core.outcomes import ErrorKind, FetchOutcome
from crawler_node.fetch.fetcher import Fetcher
from crawler_node.store.writer import FetchRecord, exchange_records

pytestmark = [pytest.mark.timeout(180), pytest.mark.tools]  # nginx, dnsmasq, squid

TLS_REASONS = {"expired": "certificate has expired", "selfsigned": "self-signed certificate",
               "wrongname": "Hostname mismatch"}


def _direct_args(web: RealWeb, *more: str) -> list[str]:
    return ["--allow-private", "--ca-bundle", str(web.ca_file), "--dns-server", web.dns_server,
            "--allow-host", "*.realweb.test", *more]


def _warc_responses(data_dir: Path) -> list[dict]:
    """Every response (and revisit) record of the node's WARC files: URI, headers that matter,
    payload (a revisit record's is the original's: empty here)."""
    records = []
    for path in sorted((Path(data_dir) / "warc").glob("*.warc.gz")):
        with open(path, "rb") as handle:
            for record in ArchiveIterator(handle):
                if record.rec_type not in ("response", "revisit"):
                    continue
                records.append({
                    "type": record.rec_type,
                    "uri": record.rec_headers.get_header("WARC-Target-URI"),
                    "ip": record.rec_headers.get_header("WARC-IP-Address"),
                    "truncated": record.rec_headers.get_header("WARC-Truncated"),
                    "status": int(record.http_headers.get_statuscode()),
                    "payload": record.content_stream().read(),
                })
    return records


def _host_of(uri: str) -> str:
    return uri.split("://", 1)[1].split("/", 1)[0].split(":", 1)[0]


def test_certificate_errors_end_each_url_once_as_tls_with_the_reason(realweb: RealWeb, start_node) -> None:  # noqa: F811
    """robots.txt comes first; its certificate failure is final for the authority (with the
    default robots_max_attempts): robots.txt is asked once, fails with its reason, and the
    site's URLs end as tls with that reason, once each, without a handshake of their own.
    nginx sees no HTTP request at all: the handshake failed first."""
    seeds = [realweb.url(site, path) for site in TLS_REASONS for path in ("/", "/page-1.html")]
    node = start_node("tls", seeds=seeds, extra_args=_direct_args(realweb))
    node.wait_idle(timeout_s=90)
    lines = read_crawl_log(node.data_dir, everything=True)
    for site, reason in TLS_REASONS.items():
        host = realweb.host(site)
        robots = [line for line in lines if line["kind"] == "robots" and line["host"] == host]
        assert [line["outcome"] for line in robots] == [FetchOutcome.TLS.value], robots
        assert reason in robots[0]["error"], robots[0]
        assert robots[0]["status"] is None
        pages = [line for line in lines if line["kind"] == "page" and line["host"] == host]
        assert sorted(line["url"] for line in pages) == sorted(realweb.url(site, p) for p in ("/", "/page-1.html"))
        assert {line["outcome"] for line in pages} == {FetchOutcome.TLS.value}, pages
        assert all(reason in line["error"] for line in pages), pages
        assert realweb.accesses(site) == []  # not one HTTP request reached nginx
    # No exchange, no WARC record.
    assert not [r for r in _warc_responses(node.data_dir) if _host_of(r["uri"]) in map(realweb.host, TLS_REASONS)]


def test_a_name_that_does_not_resolve_is_outcome_dns(realweb: RealWeb, start_node) -> None:  # noqa: F811
    seeds = ["https://missing.realweb.test/", "https://nosuchsite.realweb.test/a.html"]
    node = start_node("dns", seeds=seeds, extra_args=_direct_args(
        realweb, "--robots-max-attempts", "1", "--robots-error-retry-s", "0.2"))
    node.wait_idle(timeout_s=90)
    lines = read_crawl_log(node.data_dir, everything=True)
    robots = [line for line in lines if line["kind"] == "robots"]
    assert sorted(line["host"] for line in robots) == ["missing.realweb.test", "nosuchsite.realweb.test"]
    assert {line["outcome"] for line in robots} == {FetchOutcome.DNS.value}
    assert all("not found" in line["error"].lower() for line in robots), robots
    pages = [line for line in lines if line["kind"] == "page"]
    assert sorted(line["url"] for line in pages) == sorted(seeds)
    assert {line["outcome"] for line in pages} == {FetchOutcome.ROBOTS_UNAVAILABLE.value}


def test_every_direct_response_has_the_address_nginx_served_it_on(realweb: RealWeb, start_node) -> None:  # noqa: F811
    sites = ("httpsonly", "gzip", "altport", "redirect")
    node = start_node("addr", seeds=[realweb.url(site) for site in sites],
                      extra_args=_direct_args(realweb, "--user-agent", "realweb-fetch-addr/1"))
    node.wait_idle(timeout_s=120)
    responses = _warc_responses(node.data_dir)
    assert len(responses) >= 20
    missing = [r["uri"] for r in responses if not r["ip"]]
    assert missing == []
    by_host = {realweb.host(site): realweb.address(site) for site in sites}
    assert {r["uri"]: r["ip"] for r in responses} == {r["uri"]: by_host[_host_of(r["uri"])] for r in responses}
    # One response record per request nginx answered for this node, robots.txt included.
    seen = [a for site in sites for a in realweb.accesses(site) if a.user_agent == "realweb-fetch-addr/1"]
    assert len(responses) == len(seen)
    gzip_pages = [r for r in responses if _host_of(r["uri"]) == realweb.host("gzip") and r["uri"].endswith(".html")
                  and r["type"] == "response"]
    assert gzip_pages and all(b"compress me" in r["payload"] for r in gzip_pages)


def test_https_through_the_forward_proxy_uses_connect(realweb: RealWeb, start_node) -> None:  # noqa: F811
    if realweb.proxy_url is None:
        pytest.skip("squid is not installed")
    agent = "realweb-fetch-proxy/1"
    node = start_node("proxy", proxy=realweb.proxy_url, seeds=[realweb.url("httpsonly")],
                      extra_args=["--ca-bundle", str(realweb.ca_file), "--allow-host", "*.realweb.test",
                                  "--user-agent", agent])
    node.wait_idle(timeout_s=120)
    truth = realweb.expected("httpsonly")
    seen = [a for a in realweb.accesses("httpsonly") if a.user_agent == agent]
    assert {a.path for a in seen if a.status == 200} >= truth.pages | {"/robots.txt"}
    assert {(a.scheme, a.server_port, a.host) for a in seen} == {("https", 443, realweb.host("httpsonly"))}
    assert not {a.path for a in seen} & truth.disallowed
    lines = read_crawl_log(node.data_dir)
    fetched = {line["url"] for line in lines if line["outcome"] == "ok"}
    assert fetched >= {realweb.url("httpsonly", path) for path in truth.pages}
    responses = _warc_responses(node.data_dir)
    assert responses and all(r["ip"] is None for r in responses)  # the peer was squid: not recorded


def test_a_body_over_the_cap_keeps_its_first_bytes_marked_truncated(realweb: RealWeb, start_node) -> None:  # noqa: F811
    cap = 1_000_000
    agent = "realweb-fetch-big/1"
    node = start_node("big", seeds=[realweb.url("big")], extra_args=_direct_args(
        realweb, "--max-body-bytes", str(cap), "--max-depth", "0", "--user-agent", agent))
    node.wait_idle(timeout_s=120)
    page = [line for line in read_crawl_log(node.data_dir) if line["url"] == realweb.url("big")]
    assert [(line["outcome"], line["truncated"], line["bytes"], line["status"]) for line in page] == [
        (FetchOutcome.TOO_LARGE.value, "length", cap, 200)]
    record, = [r for r in _warc_responses(node.data_dir) if r["uri"] == realweb.url("big")]
    original = (realweb.root / "sites" / "big" / "index.html").read_bytes()
    assert (record["status"], record["truncated"]) == (200, "length")
    assert record["payload"] == original[:cap]
    home = [a for a in realweb.accesses("big") if a.user_agent == agent and a.path == "/"]
    assert len(home) == 1  # cut once, not retried


@contextlib.asynccontextmanager
async def _cutting_server() -> AsyncIterator[tuple[str, asyncio.Event]]:
    """/stall sends the headers and 3,000 of 10,000 announced bytes, then waits; /drop sends
    the same and resets the connection."""
    release = asyncio.Event()

    async def cut(request: web.Request) -> web.StreamResponse:
        response = web.StreamResponse(headers={"Content-Type": "text/html", "Content-Length": "10000"})
        await response.prepare(request)
        await response.write(b"<html>" + b"x" * 2994)
        if request.path == "/drop":
            assert request.transport is not None
            request.transport.abort()
            return response
        await release.wait()
        return response

    app = web.Application()
    app.router.add_get("/{tail:.*}", cut)
    runner = web.AppRunner(app, access_log=None, shutdown_timeout=0.1)
    await runner.setup()
    await web.TCPSite(runner, "127.0.0.1", 0).start()
    try:
        yield f"http://127.0.0.1:{runner.addresses[0][1]}", release
    finally:
        release.set()
        await runner.cleanup()


async def test_a_timeout_or_a_reset_after_the_headers_keeps_what_came() -> None:
    fetcher = Fetcher(config=FetchConfig(user_agent="cut-test", proxy=None, allow_private=True, connect_timeout_s=2,
                                         fetch_timeout_s=0.5, max_body_bytes=100_000))
    await fetcher.start()
    try:
        async with _cutting_server() as (base, _):
            stalled = await fetcher.fetch(f"{base}/stall")
            dropped = await fetcher.fetch(f"{base}/drop")
    finally:
        await fetcher.close()
    assert (stalled.status, stalled.error, stalled.truncated) == (200, ErrorKind.TIMEOUT, "time")
    assert (dropped.status, dropped.error, dropped.truncated) == (200, ErrorKind.CONNECTION, "disconnect")
    for result in (stalled, dropped):
        assert result.body == b"<html>" + b"x" * 2994
        assert result.remote_addr == "127.0.0.1"
        # The WARC record holds what came, says it was cut, and keeps the announced length.
        fetch_record = FetchRecord(url=result.url, host="127.0.0.1", node_id="n", attempt=1,
                                   fetched_at=result.started_at, outcome="timeout", status=result.status,
                                   request_headers=result.request_headers, response_headers=result.headers,
                                   body=result.body, remote_addr=result.remote_addr, truncated=result.truncated)
        response, _ = exchange_records(fetch_record)
        record = next(iter(ArchiveIterator(io.BytesIO(response))))
        assert record.rec_headers.get_header("WARC-Truncated") == result.truncated
        assert record.rec_headers.get_header("WARC-IP-Address") == "127.0.0.1"
        # The headers as sent (the length announced); the payload as far as it came.
        assert record.http_headers.get_header("Content-Length") == "10000"
        assert record.raw_stream.read() == result.body


async def test_certificate_errors_through_the_proxy_are_tls_too(realweb: RealWeb) -> None:  # noqa: F811
    """Through CONNECT the TLS session is still ours, end to end with the site: squid only
    carries the bytes, so a bad certificate is the same final TLS error, with its reason."""
    if realweb.proxy_url is None:
        pytest.skip("squid is not installed")
    fetcher = Fetcher(config=FetchConfig(user_agent="realweb-fetch-proxy-tls/1", proxy=realweb.proxy_url,
                                         allow_private=False, connect_timeout_s=5, fetch_timeout_s=15,
                                         max_body_bytes=100_000, ca_bundle=str(realweb.ca_file)))
    await fetcher.start()
    try:
        good = await fetcher.fetch(realweb.url("httpsonly", "/page-1.html"))
        bad = {site: await fetcher.fetch(realweb.url(site, "/page-1.html")) for site in TLS_REASONS}
    finally:
        await fetcher.close()
    assert (good.status, good.error, good.remote_addr) == (200, None, None)
    for site, result in bad.items():
        assert (result.status, result.error) == (None, ErrorKind.TLS), (site, result.error, result.error_detail)
        assert TLS_REASONS[site] in (result.error_detail or ""), result.error_detail
        assert not [a for a in realweb.accesses(site) if a.user_agent == "realweb-fetch-proxy-tls/1"]
