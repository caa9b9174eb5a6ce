"""The small real web itself: nginx, the CA, dnsmasq and squid behave as the crawl tests rely on.

A client here is plain aiohttp with a resolver pointed at our dnsmasq, so each test also shows
how a test reaches the sites without any system file (/etc/hosts, /etc/resolv.conf).
"""

from __future__ import annotations

import asyncio
import gzip
import ssl
import time
import uuid

import aiodns
import aiohttp
import pytest
from aiohttp.resolver import AsyncResolver
from realweb import DNS_TTL_S, RealWeb, peak_concurrency, realweb  # noqa: F401 - realweb is the fixture

pytestmark = [pytest.mark.timeout(60), pytest.mark.tools]  # nginx, dnsmasq, squid

USER_AGENT = "realweb-infra-test/1"


def _dns(web: RealWeb) -> tuple[str, int]:
    host, port = web.dns_server.rsplit(":", 1)
    return host, int(port)


def _session(web: RealWeb, *, verify: bool = True) -> aiohttp.ClientSession:
    host, port = _dns(web)
    resolver = AsyncResolver(nameservers=[host], udp_port=port, tcp_port=port, timeout=2, tries=1)
    context = ssl.create_default_context(cafile=str(web.ca_file)) if verify else False
    connector = aiohttp.TCPConnector(resolver=resolver, ssl=context, use_dns_cache=False)
    return aiohttp.ClientSession(
        connector=connector, headers={"User-Agent": USER_AGENT}, auto_decompress=False,
        timeout=aiohttp.ClientTimeout(total=15),
    )


async def test_good_site_verifies_against_the_test_ca(realweb: RealWeb):  # noqa: F811
    async with _session(realweb) as session:
        async with session.get(realweb.url("httpsonly")) as response:
            body = await response.read()
    assert response.status == 200
    assert b'href="/page-1.html"' in body
    assert response.connection is None  # released: the body was read whole


@pytest.mark.parametrize(
    ("site", "reason"),
    [("expired", "certificate has expired"), ("selfsigned", "self-signed certificate"),
     ("wrongname", "Hostname mismatch")],
)
async def test_bad_certificates_fail_verification(realweb: RealWeb, site: str, reason: str):  # noqa: F811
    async with _session(realweb) as session:
        with pytest.raises(aiohttp.ClientConnectorCertificateError) as caught:
            await session.get(realweb.url(site))
        # Without verification the same server answers: only the certificate is wrong.
    async with _session(realweb, verify=False) as session:
        async with session.get(realweb.url(site, "/page-1.html")) as response:
            assert response.status == 200
    assert reason in str(caught.value.certificate_error)


async def test_dnsmasq_answers_the_sites_and_nxdomains_missing(realweb: RealWeb):  # noqa: F811
    host, port = _dns(realweb)
    resolver = aiodns.DNSResolver(nameservers=[host], udp_port=port, tcp_port=port, timeout=2, tries=1)
    try:
        delay = (await resolver.query_dns("delay.realweb.test", "A")).answer
        assert [record.data.addr for record in delay] == [realweb.address("delay")]
        assert 0 < delay[0].ttl <= DNS_TTL_S  # short, so a test can watch a cache honour it
        shared = (await resolver.query_dns("shared.realweb.test", "A")).answer
        assert [record.data.addr for record in shared] == [realweb.address("shared")]
        with pytest.raises(aiodns.error.DNSError) as missing:
            await resolver.query_dns("missing.realweb.test", "A")
        assert missing.value.args[0] == aiodns.error.ARES_ENOTFOUND
        with pytest.raises(aiodns.error.DNSError) as unknown:
            await resolver.query_dns("nosuchsite.realweb.test", "A")
        assert unknown.value.args[0] == aiodns.error.ARES_ENOTFOUND
    finally:
        await resolver.close()


async def test_forward_proxy_connects_to_https_sites(realweb: RealWeb):  # noqa: F811
    if realweb.proxy_url is None:
        pytest.skip("squid is not installed")
    path = f"/page-2.html?proxied={uuid.uuid4().hex}"
    context = ssl.create_default_context(cafile=str(realweb.ca_file))
    async with aiohttp.ClientSession(headers={"User-Agent": USER_AGENT}) as session:
        # No resolver of ours: squid resolves the name from its hosts_file and opens the tunnel.
        async with session.get(realweb.url("httpsonly", path), proxy=realweb.proxy_url, ssl=context) as response:
            assert response.status == 200
            await response.read()
    seen = realweb.logged("httpsonly", lambda record: record.uri == path)
    assert len(seen) == 1
    assert (seen[0].scheme, seen[0].server_port, seen[0].host) == ("https", 443, "httpsonly.realweb.test")


async def test_access_log_records_each_request(realweb: RealWeb):  # noqa: F811
    marker = f"/no-such-page-{uuid.uuid4().hex}.html"
    before = time.time()
    async with _session(realweb) as session:
        async with session.get(realweb.url("altport", marker)) as response:
            assert response.status == 404
    after = time.time()
    seen = realweb.logged(None, lambda record: record.uri == marker)
    assert len(seen) == 1
    record = seen[0]
    assert (record.server_addr, record.server_port, record.scheme) == (realweb.address("altport"), 8443, "https")
    assert (record.host, record.method, record.status, record.user_agent) == (
        "altport.realweb.test", "GET", 404, USER_AGENT,
    )
    assert before - 0.01 <= record.start <= record.end <= after + 0.01
    assert record in realweb.accesses("altport") and record not in realweb.accesses("delay")


async def test_shared_address_rate_limits_each_request(realweb: RealWeb):  # noqa: F811
    truth = realweb.expected("shared")
    urls = [realweb.url("shared", "/p/01.html", port=port) for port in truth.ports]
    async with _session(realweb) as session:

        async def fetch(url: str) -> tuple[int, float]:
            started = time.monotonic()
            async with session.get(url) as response:
                await response.read()
                return response.status, time.monotonic() - started

        results = await asyncio.gather(*(fetch(url) for url in urls))
    assert all(status == 200 for status, _ in results)
    assert all(elapsed >= 0.1 for _, elapsed in results), results
    logged = realweb.logged("shared", lambda r: r.uri == "/p/01.html", count=len(truth.ports))
    assert {r.server_port for r in logged} >= set(truth.ports)
    assert all(r.end - r.start >= 0.1 and r.bytes >= 50_000 for r in logged)
    # Six requests at once to one address, as a per-IP limit would count them from the log.
    assert peak_concurrency(logged) == len(truth.ports)


async def test_scheme_and_port_layout(realweb: RealWeb):  # noqa: F811
    async with _session(realweb) as session:
        plain = realweb.url("redirect", "/robots.txt", scheme="http")
        async with session.get(plain, allow_redirects=False) as response:
            assert response.status == 301
            assert response.headers["Location"] == "https://redirect.realweb.test/robots.txt"
        async with session.get(realweb.url("redirect", "/robots.txt")) as response:
            assert (response.status, await response.text()) == (200, "User-agent: *\nDisallow: /private/\n")
        for url in (realweb.url("altport", port=443), realweb.url("httpsonly", scheme="http")):
            with pytest.raises(aiohttp.ClientConnectorError):
                await session.get(url)  # nothing listens there
        async with session.get(realweb.url("robots503", "/robots.txt")) as response:
            assert response.status == 503
        async with session.get(realweb.url("trap", "/loop/a"), allow_redirects=False) as response:
            assert response.status == 302
            assert response.headers["Location"].endswith("/loop/ax")


async def test_latin1_charset_in_header_only(realweb: RealWeb):  # noqa: F811
    truth = realweb.expected("latin1")
    async with _session(realweb) as session:
        async with session.get(realweb.url("latin1")) as response:
            body = await response.read()
            assert response.headers["Content-Type"] == "text/html; charset=iso-8859-1"
        assert b'href="caf\xe9.html"' in body and b"charset" not in body.lower()
        for path in truth.pages:
            async with session.get(realweb.url("latin1", path)) as response:
                assert response.status == 200, path
        for path in truth.wrong_decodings:
            async with session.get(realweb.url("latin1", path)) as response:
                assert response.status == 404, path


async def test_sitemaps_gzip_and_big_page(realweb: RealWeb):  # noqa: F811
    sitemap, big = realweb.expected("sitemap"), realweb.expected("big")
    async with _session(realweb) as session:
        async with session.get(realweb.url("sitemap", "/sitemap-b.xml.gz")) as response:
            raw = await response.read()
            assert response.headers["Content-Type"] in ("application/gzip", "application/x-gzip")
            assert "Content-Encoding" not in response.headers
        listed = gzip.decompress(raw).decode()
        assert sum(f"https://sitemap.realweb.test{path}" in listed for path in sitemap.sitemap_only) == 5
        async with session.get(realweb.url("gzip"), headers={"Accept-Encoding": "gzip"}) as response:
            assert response.headers.get("Content-Encoding") == "gzip"
            assert b"compress me" in gzip.decompress(await response.read())
        async with session.get(realweb.url("big")) as response:
            page = await response.read()
    assert len(page) >= 8_000_000
    assert big.late_links and all(page.index(path.encode()) > 5_000_000 for path in big.late_links)
