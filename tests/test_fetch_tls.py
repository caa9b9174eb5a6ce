"""TLS trust and certificate errors in the fetcher, against real https servers with
certificates made by openssl (a test CA, and expired, self-signed and wrong-name leaves).

A certificate that does not verify is ErrorKind.TLS with OpenSSL's reason, never an HTTP
exchange (the server's handler is never reached) and never retried. ``--ca-bundle`` trusts
its CAs; without it the system's trust applies, and OpenSSL's SSL_CERT_FILE / SSL_CERT_DIR
replace the system's locations."""

from __future__ import annotations

import asyncio
import contextlib
import shutil
import socket
import ssl
import subprocess
from collections.abc import AsyncIterator, Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest
from aiohttp import web
from dnsmasq_helpers import Dnsmasq
from realweb_certs import Certificates, make_certificates

from crawler_node.config import FetchConfig
from crawler_node.core.backoff import RetryPolicy
from crawler_node.core.outcomes import ErrorKind, FetchOutcome
from crawler_node.core.signals import classify
from crawler_node.fetch.dns import Resolver
from crawler_node.fetch.fetcher import Fetcher

pytestmark = [pytest.mark.timeout(60), pytest.mark.tools]  # dnsmasq, openssl

SITES = ("good", "expired", "selfsigned", "wrongname")


@dataclass
class TlsWeb:
    dns: Dnsmasq
    certs: Certificates
    ports: dict[str, int]
    requests: list[str]  # "site path" of every request a handler answered

    def url(self, site: str, path: str = "/") -> str:
        return f"https://{self.dns.name(site)}:{self.ports[site]}{path}"


@pytest.fixture(scope="module")
def certs(tmp_path_factory) -> Certificates:
    if shutil.which("openssl") is None:
        pytest.skip("openssl is not installed")
    return make_certificates(
        tmp_path_factory.mktemp("certs"), names=[Dnsmasq.name("good")], ips=["127.0.0.1"],
        expired_name=Dnsmasq.name("expired"), selfsigned_name=Dnsmasq.name("selfsigned"),
        wrong_name="elsewhere.invalid")


@pytest.fixture(scope="module")
def dns(tmp_path_factory) -> Iterator[Dnsmasq]:
    server = Dnsmasq(tmp_path_factory.mktemp("tls-dns"), {site: (["127.0.0.1"], 600) for site in SITES})
    try:
        yield server
    finally:
        server.stop()


@contextlib.asynccontextmanager
async def _tls_web(dns: Dnsmasq, certs: Certificates) -> AsyncIterator[TlsWeb]:
    requests: list[str] = []
    runners = []
    ports = {}
    pairs = {"good": certs.good, "expired": certs.expired, "selfsigned": certs.selfsigned,
             "wrongname": certs.wrongname}
    try:
        for site, pair in pairs.items():
            async def page(request: web.Request, site: str = site) -> web.Response:
                requests.append(f"{site} {request.path}")
                return web.Response(text=f"<html>{site}</html>", content_type="text/html")

            app = web.Application()
            app.router.add_get("/{tail:.*}", page)
            context = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH)
            context.load_cert_chain(pair.cert, pair.key)
            runner = web.AppRunner(app, access_log=None)
            await runner.setup()
            runners.append(runner)
            await web.TCPSite(runner, "127.0.0.1", 0, ssl_context=context).start()
            ports[site] = runner.addresses[0][1]
        yield TlsWeb(dns=dns, certs=certs, ports=ports, requests=requests)
    finally:
        for runner in runners:
            await runner.cleanup()


@contextlib.asynccontextmanager
async def _fetcher(dns: Dnsmasq, *, ca_bundle: Path | None) -> AsyncIterator[Fetcher]:
    fetcher = Fetcher(config=FetchConfig(user_agent="tls-test", proxy=None, allow_private=True, connect_timeout_s=5,
                                         fetch_timeout_s=10, max_body_bytes=100_000,
                                         ca_bundle=str(ca_bundle) if ca_bundle else None),
                      resolver=Resolver(server=dns.server, allow_private=True, cache_hosts=100, cache_s=60,
                                        timeout_s=1, tries=1))
    await fetcher.start()
    try:
        yield fetcher
    finally:
        await fetcher.close()


@pytest.fixture
def no_openssl_env(monkeypatch: pytest.MonkeyPatch) -> pytest.MonkeyPatch:
    monkeypatch.delenv("SSL_CERT_FILE", raising=False)
    monkeypatch.delenv("SSL_CERT_DIR", raising=False)
    return monkeypatch


@pytest.mark.parametrize(("site", "reason"), [
    ("expired", "certificate has expired"),
    ("selfsigned", "self-signed certificate"),
    ("wrongname", "Hostname mismatch"),
])
async def test_a_certificate_error_is_tls_with_its_reason_final_and_no_http(
        dns: Dnsmasq, certs: Certificates, site: str, reason: str) -> None:
    async with _tls_web(dns, certs) as tls, _fetcher(dns, ca_bundle=certs.ca) as fetcher:
        good = await fetcher.fetch(tls.url("good"))
        bad = await fetcher.fetch(tls.url(site, "/page.html"))
    assert (good.status, good.error) == (200, None)
    assert (bad.status, bad.error) == (None, ErrorKind.TLS)
    assert reason in (bad.error_detail or ""), bad.error_detail
    assert tls.requests == ["good /"]  # the bad site's server never saw an HTTP request
    signal = classify(bad, now=0.0, through_api=False)
    assert signal.outcome is FetchOutcome.TLS
    decision = RetryPolicy(budget=3).decide(attempt=1, status=None, error=signal.error)
    assert (decision.retry, decision.reason) == (False, "fatal_tls")


async def test_the_ca_bundle_is_trusted_and_the_system_store_does_not_know_the_test_ca(
        dns: Dnsmasq, certs: Certificates, no_openssl_env: pytest.MonkeyPatch) -> None:
    async with _tls_web(dns, certs) as tls:
        async with _fetcher(dns, ca_bundle=certs.ca) as trusting:
            trusted = await trusting.fetch(tls.url("good"))
        async with _fetcher(dns, ca_bundle=None) as system:
            untrusted = await system.fetch(tls.url("good"))
    assert trusted.status == 200
    assert untrusted.error is ErrorKind.TLS
    assert "unable to get local issuer certificate" in (untrusted.error_detail or "")
    assert tls.requests == ["good /"]


async def test_ssl_cert_file_is_honoured_without_a_ca_bundle(
        dns: Dnsmasq, certs: Certificates, no_openssl_env: pytest.MonkeyPatch) -> None:
    no_openssl_env.setenv("SSL_CERT_FILE", str(certs.ca))
    async with _tls_web(dns, certs) as tls, _fetcher(dns, ca_bundle=None) as fetcher:
        result = await fetcher.fetch(tls.url("good", "/by-file"))
    assert (result.status, result.error) == (200, None)
    assert tls.requests == ["good /by-file"]


async def test_ssl_cert_dir_is_honoured_without_a_ca_bundle(
        dns: Dnsmasq, certs: Certificates, no_openssl_env: pytest.MonkeyPatch, tmp_path: Path) -> None:
    directory = tmp_path / "certs"
    directory.mkdir()
    shutil.copy(certs.ca, directory / "test-ca.pem")
    subprocess.run(["openssl", "rehash", str(directory)], check=True, capture_output=True, timeout=30)
    no_openssl_env.setenv("SSL_CERT_DIR", str(directory))
    no_openssl_env.setenv("SSL_CERT_FILE", str(tmp_path / "none.pem"))  # not the system bundle either
    async with _tls_web(dns, certs) as tls, _fetcher(dns, ca_bundle=None) as fetcher:
        result = await fetcher.fetch(tls.url("good", "/by-dir"))
    assert (result.status, result.error) == (200, None)
    assert tls.requests == ["good /by-dir"]


async def test_handshake_failures_a_plain_server_is_tls_a_cut_handshake_is_retryable(
        dns: Dnsmasq, certs: Certificates) -> None:
    """An http server on the https port fails the same way every time: TLS, final. A server
    that drops the connection mid-handshake may be overloaded: a connection error, retried."""
    async def plain_page(request: web.Request) -> web.Response:
        return web.Response(text="plain")

    app = web.Application()
    app.router.add_get("/{tail:.*}", plain_page)
    runner = web.AppRunner(app, access_log=None)
    await runner.setup()
    await web.TCPSite(runner, "127.0.0.1", 0).start()
    plain_port = runner.addresses[0][1]

    async def drop(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        await reader.read(1)  # the ClientHello began: close without an answer
        writer.transport.abort()

    dropper = await asyncio.start_server(drop, "127.0.0.1", 0, family=socket.AF_INET)
    drop_port = dropper.sockets[0].getsockname()[1]
    try:
        async with _fetcher(dns, ca_bundle=certs.ca) as fetcher:
            plain = await fetcher.fetch(f"https://{dns.name('good')}:{plain_port}/")
            cut = await fetcher.fetch(f"https://{dns.name('good')}:{drop_port}/")
    finally:
        dropper.close()
        await dropper.wait_closed()
        await runner.cleanup()
    assert plain.error is ErrorKind.TLS and "TLS handshake failed" in (plain.error_detail or ""), plain.error_detail
    assert cut.error is ErrorKind.CONNECTION, (cut.error, cut.error_detail)
    assert RetryPolicy(budget=3).decide(attempt=1, status=None, error=cut.error).retry

