"""The node's resolver (fetch/dns.py) against a real dnsmasq: answers kept for their TTL and
asked again after it, concurrent lookups of one name sent as one query, failures (NXDOMAIN, a
dead server) named and cached briefly, the private-address guard on every address; the cache
bounded and least-recently-used out; DNS failures get their own outcome and a retry schedule
that starts where the connection schedule ends.

c-ares keeps a query cache of its own (by TTL too), so what the server was asked is counted
where a TTL lets it show, and the cache's bound and cap are tested on the cache itself, with
time passed in."""

from __future__ import annotations

import asyncio
import random
import time
from collections.abc import Iterator

import pytest
from aiohttp import web
from dnsmasq_helpers import Dnsmasq

from crawler_node.config import FetchConfig
from crawler_node.core.backoff import RetryPolicy
from crawler_node.core.outcomes import ErrorKind, FetchOutcome
from crawler_node.core.response import FetchResult
from crawler_node.core.signals import classify
from crawler_node.fetch.dns import DnsCache, DnsLookupError, PrivateAddressError, Resolver, nameserver
from crawler_node.fetch.fetcher import Fetcher

pytestmark = pytest.mark.timeout(60)

PUBLIC = "93.184.215.14"  # an address is_public_address accepts; nothing connects to it here


@pytest.fixture(scope="module")
def dnsmasq(tmp_path_factory) -> Iterator[Dnsmasq]:
    server = Dnsmasq(tmp_path_factory.mktemp("dns"), {
        "short": (["127.0.0.1"], 2),
        "long": (["127.0.0.1"], 600),
        "burst": (["127.0.0.1"], 600),
        "loopback": (["127.0.0.1"], 600),
        "mixed": (["127.0.0.1", PUBLIC], 600),
        "public": ([PUBLIC], 600),
        "site": (["127.0.0.1"], 600),
        "pooled": (["127.0.0.1"], 600),
    })
    try:
        yield server
    finally:
        server.stop()


def _resolver(dns: Dnsmasq, **kwargs) -> Resolver:
    kwargs.setdefault("allow_private", True)
    kwargs.setdefault("cache_hosts", 100)
    kwargs.setdefault("cache_s", 300.0)
    return Resolver(server=dns.server, timeout_s=1.0, tries=1, **kwargs)


async def _addresses(resolver: Resolver, host: str) -> list[str]:
    return [answer["host"] for answer in await resolver.resolve(host, 443)]


@pytest.mark.tools
async def test_an_answer_is_kept_for_its_ttl_and_asked_again_after_it(dnsmasq: Dnsmasq) -> None:
    resolver = _resolver(dnsmasq)
    try:
        started = time.monotonic()
        assert await _addresses(resolver, dnsmasq.name("short")) == ["127.0.0.1"]
        assert await _addresses(resolver, dnsmasq.name("long")) == ["127.0.0.1"]
        for _ in range(5):
            await _addresses(resolver, dnsmasq.name("short"))
            await _addresses(resolver, dnsmasq.name("long"))
        dnsmasq.sync()
        assert (dnsmasq.queries("short"), dnsmasq.queries("long")) == (1, 1)
        # The 2 s answer is asked for again once its TTL has run out, not before; the 600 s
        # one is not asked for again meanwhile.
        deadline = started + 10
        while dnsmasq.queries("short") < 2 and time.monotonic() < deadline:
            await _addresses(resolver, dnsmasq.name("short"))
            await _addresses(resolver, dnsmasq.name("long"))
            dnsmasq.sync()
        assert dnsmasq.queries("short") == 2
        assert time.monotonic() - started >= 2.0
        assert dnsmasq.queries("long") == 1
    finally:
        await resolver.close()


@pytest.mark.tools
async def test_concurrent_lookups_of_one_name_are_one_query(dnsmasq: Dnsmasq) -> None:
    resolver = _resolver(dnsmasq)
    try:
        answers = await asyncio.gather(*(_addresses(resolver, dnsmasq.name("burst")) for _ in range(20)))
        assert answers == [["127.0.0.1"]] * 20
        dnsmasq.sync()
        assert dnsmasq.queries("burst") == 1
        assert resolver.lookups == 1
    finally:
        await resolver.close()


@pytest.mark.tools
async def test_a_name_that_does_not_resolve_fails_by_name_and_is_cached_briefly(dnsmasq: Dnsmasq) -> None:
    now = [1000.0]
    resolver = _resolver(dnsmasq, negative_s=30.0, clock=lambda: now[0])
    try:
        name = dnsmasq.name("missing")
        for _ in range(3):
            with pytest.raises(DnsLookupError) as failure:
                await resolver.resolve(name, 443)
        assert "not found" in failure.value.reason.lower()  # NXDOMAIN, in c-ares' words
        assert await resolver.first_address(name) is None
        dnsmasq.sync()
        assert dnsmasq.queries("missing") == 1
        assert (resolver.lookups, resolver.failures) == (1, 1)
        now[0] += 31  # past the negative TTL: asked again
        with pytest.raises(DnsLookupError):
            await resolver.resolve(name, 443)
        assert resolver.lookups == 2
    finally:
        await resolver.close()


async def test_a_resolver_that_does_not_answer_is_a_dns_failure() -> None:
    resolver = Resolver(server="127.0.0.1:9", allow_private=True, cache_hosts=10, cache_s=60, timeout_s=0.3, tries=1)
    try:
        started = time.monotonic()
        with pytest.raises(DnsLookupError) as failure:
            await resolver.resolve("anything.dnstest.test", 80)
        assert time.monotonic() - started < 5
        assert failure.value.reason  # "Could not contact DNS servers" / a timeout
    finally:
        await resolver.close()


@pytest.mark.tools
async def test_private_answers_are_dropped_from_every_answer(dnsmasq: Dnsmasq) -> None:
    guarded = _resolver(dnsmasq, allow_private=False)
    open_ = _resolver(dnsmasq, allow_private=True)
    try:
        assert await _addresses(guarded, dnsmasq.name("mixed")) == [PUBLIC]
        assert await guarded.first_address(dnsmasq.name("mixed")) == PUBLIC
        assert await _addresses(guarded, dnsmasq.name("public")) == [PUBLIC]
        with pytest.raises(PrivateAddressError):
            await guarded.resolve(dnsmasq.name("loopback"), 443)
        assert await guarded.first_address(dnsmasq.name("loopback")) is None
        assert sorted(await _addresses(open_, dnsmasq.name("mixed"))) == sorted(["127.0.0.1", PUBLIC])
    finally:
        await guarded.close()
        await open_.close()


def test_the_cache_honours_ttls_up_to_its_cap_and_drops_the_least_recently_used() -> None:
    cache = DnsCache(max_hosts=2, max_ttl_s=60.0, negative_ttl_s=5.0)
    v4 = ((2, "192.0.2.1"),)
    cache.put_addresses("a", v4, 10, now=0.0)
    cache.put_addresses("b", v4, 3600, now=0.0)  # capped at 60 s
    assert cache.get("a", 9.9) is not None and cache.get("a", 10.0) is None
    assert cache.get("b", 59.9) is not None and cache.get("b", 60.0) is None
    cache.put_addresses("zero", v4, 0, now=0.0)  # TTL 0: serves its lookup, never a later one
    assert cache.get("zero", 0.0) is None
    cache.put_addresses("a", v4, 30, now=100.0)
    cache.put_addresses("b", v4, 30, now=100.0)
    assert cache.get("a", 101.0) is not None  # a used last: b leaves first
    cache.put_addresses("c", v4, 30, now=101.0)
    assert (cache.get("b", 101.0), len(cache), cache.evicted) == (None, 2, 1)
    assert cache.get("a", 101.0) is not None and cache.get("c", 101.0) is not None
    failed = cache.put_failure("d", "Domain name not found", now=200.0)
    assert failed.error == "Domain name not found" and failed.expires_at == 205.0
    with pytest.raises(ValueError):
        DnsCache(max_hosts=0, max_ttl_s=1, negative_ttl_s=1)


def test_dns_failures_have_their_own_outcome_and_a_longer_retry_schedule() -> None:
    failed = FetchResult(url="https://missing.example/", error=ErrorKind.DNS, error_detail="Domain name not found")
    assert classify(failed, now=0.0, through_api=False).outcome is FetchOutcome.DNS
    policy = RetryPolicy(budget=3, base_s=1.0, cap_s=60.0, rng=random.Random(7))
    dns = [policy.decide(attempt=attempt, status=None, error=ErrorKind.DNS) for attempt in (1, 2, 3)]
    assert all(decision.retry and decision.reason == "dns" for decision in dns)
    # Never sooner than half the connection schedule's cap (the negative cache lasts 30 s),
    # doubling: 30-60 s, 60-120 s, 120-240 s.
    for attempt, decision in enumerate(dns, start=1):
        assert 30.0 * 2 ** (attempt - 1) <= decision.delay_s <= 60.0 * 2 ** (attempt - 1)
    connection = [policy.decide(attempt=a, status=None, error=ErrorKind.CONNECTION).delay_s for a in (1, 2, 3)]
    assert max(connection) <= 4.0 < 30.0 <= min(decision.delay_s for decision in dns)
    assert not policy.decide(attempt=4, status=None, error=ErrorKind.DNS).retry  # the same budget


@pytest.mark.tools
async def test_the_fetcher_resolves_through_the_node_resolver(dnsmasq: Dnsmasq) -> None:
    """A direct fetch by name: the resolver's address is connected to and recorded; a name
    that does not resolve is ErrorKind.DNS; a private-only name without --allow-private is
    refused before any connection."""
    peers: list[tuple[str, int]] = []

    async def page(request: web.Request) -> web.Response:
        peers.append(request.transport.get_extra_info("peername")[:2])
        return web.Response(text="<html>ok</html>", content_type="text/html")

    app = web.Application()
    app.router.add_get("/{tail:.*}", page)
    runner = web.AppRunner(app, access_log=None)
    await runner.setup()
    site = web.TCPSite(runner, "127.0.0.1", 0)
    await site.start()
    port = runner.addresses[0][1]
    fetchers = [Fetcher(config=FetchConfig(user_agent="test", proxy=None, allow_private=allow, connect_timeout_s=5,
                                           fetch_timeout_s=10, max_body_bytes=10_000),
                        resolver=_resolver(dnsmasq, allow_private=allow)) for allow in (True, False)]
    for fetcher in fetchers:
        await fetcher.start()
    open_, guarded = fetchers
    try:
        # Many responses on one pooled keep-alive connection: each has the peer's address.
        results = [await open_.fetch(f"http://{dnsmasq.name('pooled')}:{port}/p/{i}") for i in range(30)]
        assert [result.status for result in results] == [200] * 30
        assert {result.remote_addr for result in results} == {"127.0.0.1"}
        assert len(set(peers)) == 1  # the server saw one connection
        missing = await open_.fetch(f"http://{dnsmasq.name('missing')}:{port}/")
        assert (missing.error, missing.status) == (ErrorKind.DNS, None)
        assert "not found" in (missing.error_detail or "").lower()
        assert classify(missing, now=0.0, through_api=False).outcome is FetchOutcome.DNS
        refused = await guarded.fetch(f"http://{dnsmasq.name('site')}:{port}/")
        assert refused.error is ErrorKind.NOT_ALLOWED
        assert len(peers) == 30  # neither reached the server
    finally:
        for fetcher in fetchers:
            await fetcher.close()
        await runner.cleanup()


def test_the_dns_server_is_an_address_with_an_optional_port() -> None:
    assert [nameserver(text) for text in ("127.0.0.1", "127.0.0.1:5353", "::1", "[::1]:5353")] == [
        "127.0.0.1:53", "127.0.0.1:5353", "[::1]:53", "[::1]:5353"]
    for bad in ("dns.example", "dns.example:53", "127.0.0.1:0", "127.0.0.1:x", "[::1]5353"):
        with pytest.raises(ValueError):
            Resolver(server=bad, allow_private=True, cache_hosts=10, cache_s=60)
