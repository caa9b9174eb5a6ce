"""Name resolution for direct fetches: c-ares (aiodns), a bounded cache that honours TTLs, and
the private-address guard.

One :class:`Resolver` serves both the connector (it is an aiohttp ``AbstractResolver``) and
the per-IP gates (``first_address``), so a fetch and the gate it passed agree on the address
and the name is asked for once.

Why c-ares also when no ``--dns-server`` is given (it then reads /etc/resolv.conf and
/etc/hosts, as the system's getaddrinfo does): the system's getaddrinfo gives no TTLs, and
aiohttp runs it in the default thread pool, a handful of threads on a small machine, so a crawl
that meets many new hosts behind a slow resolver would wait for threads. c-ares runs on the
event loop, any number of lookups at once. What it does not do is nsswitch (mDNS, LDAP...),
which a crawler of public names does not need.

c-ares (1.23 and later) also keeps a query cache of its own, by TTL as well (at most an hour):
``dns_cache_s`` bounds how long this cache keeps an answer, and a name asked again after that
may still be answered from c-ares' cache while its TTL lasts. Neither keeps an answer past its
TTL.

Through ``--proxy`` the proxy resolves the sites' names, and this resolver is not used.
"""

from __future__ import annotations

import asyncio
import ipaddress
import socket
import time
from collections import OrderedDict
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from typing import Any

import aiodns
from aiohttp.abc import AbstractResolver, ResolveResult

from crawler_node.core.addresses import is_public_address

_NUMERIC = socket.AI_NUMERICHOST | socket.AI_NUMERICSERV


class PrivateAddressError(OSError):
    """The name resolves only to private, loopback or link-local addresses (see
    ``Resolver``): fetching it is not allowed, and will not be on a later attempt."""

    def __init__(self, host: str, addresses: list[str]) -> None:
        super().__init__(f"{host} resolves only to non-public addresses {addresses}")
        self.host = host
        self.addresses = addresses


class DnsLookupError(OSError):
    """The name did not resolve: NXDOMAIN, no address records, SERVFAIL, REFUSED, or the
    resolver did not answer in time. ``reason`` is c-ares' own words."""

    def __init__(self, host: str, reason: str) -> None:
        super().__init__(f"{host}: {reason}")
        self.host = host
        self.reason = reason


@dataclass(frozen=True, slots=True)
class Answer:
    """What one lookup gave: the addresses (family, address) in the resolver's order, or
    the reason it failed; cached until ``expires_at`` (the clock of the cache)."""

    addresses: tuple[tuple[int, str], ...]
    error: str | None
    expires_at: float


class DnsCache:
    """Answers per name, each kept for its TTL (at most ``max_ttl_s``), failures for
    ``negative_ttl_s``; at most ``max_hosts`` names, the least recently used leaving first.
    Pure: time is passed in."""

    def __init__(self, *, max_hosts: int, max_ttl_s: float, negative_ttl_s: float) -> None:
        if max_hosts < 1:
            raise ValueError(f"max_hosts must be >= 1, got {max_hosts}")
        if max_ttl_s < 0 or negative_ttl_s < 0:
            raise ValueError(f"need max_ttl_s >= 0 and negative_ttl_s >= 0, got {max_ttl_s}, {negative_ttl_s}")
        self.max_hosts = max_hosts
        self.max_ttl_s = max_ttl_s
        self.negative_ttl_s = min(negative_ttl_s, max_ttl_s)
        self._answers: OrderedDict[str, Answer] = OrderedDict()
        self.evicted = 0

    def __len__(self) -> int:
        return len(self._answers)

    def get(self, name: str, now: float) -> Answer | None:
        answers = self._answers
        answer = answers.get(name)
        if answer is None:
            return None
        if answer.expires_at <= now:
            del answers[name]
            return None
        answers.move_to_end(name)
        return answer

    def put_addresses(self, name: str, addresses: tuple[tuple[int, str], ...], ttl_s: float, now: float) -> Answer:
        # A TTL of 0 means "do not cache" (RFC 1035 3.2.1): the answer serves the lookups
        # waiting for it, and the next one asks again.
        return self._put(name, Answer(addresses, None, now + min(max(ttl_s, 0.0), self.max_ttl_s)))

    def put_failure(self, name: str, reason: str, now: float) -> Answer:
        return self._put(name, Answer((), reason, now + self.negative_ttl_s))

    def _put(self, name: str, answer: Answer) -> Answer:
        answers = self._answers
        answers[name] = answer
        answers.move_to_end(name)
        while len(answers) > self.max_hosts:
            answers.popitem(last=False)
            self.evicted += 1
        return answer


class Resolver(AbstractResolver):
    """aiohttp's resolver for direct fetches, with the node's cache and guard.

    Unless ``allow_private``, private, loopback and link-local answers are dropped from every
    answer, so a hostile DNS name cannot point the crawler at the machine's own network
    (SSRF); a name with nothing else is refused with :class:`PrivateAddressError`. A name that
    does not resolve raises :class:`DnsLookupError`. Concurrent lookups of one name share one
    query."""

    def __init__(self, *, server: str | None, allow_private: bool, cache_hosts: int, cache_s: float,
                 negative_s: float = 30.0, timeout_s: float = 5.0, tries: int = 2,
                 clock: Callable[[], float] = time.monotonic) -> None:
        """``server``: HOST[:PORT] (an IP address) of the one DNS server to ask; None for the
        system's configuration. ``timeout_s`` and ``tries`` are c-ares' per server; a lookup
        that exhausts them fails as "timeout"."""
        if timeout_s <= 0 or tries < 1:
            raise ValueError(f"need timeout_s > 0 and tries >= 1, got {timeout_s}, {tries}")
        self.server = server
        self._nameservers = None if server is None else [nameserver(server)]
        self.allow_private = allow_private
        self.cache = DnsCache(max_hosts=cache_hosts, max_ttl_s=cache_s, negative_ttl_s=negative_s)
        self._timeout_s = timeout_s
        self._tries = tries
        self._clock = clock
        self._channel: aiodns.DNSResolver | None = None  # made in the running loop, on first use
        self._closed = False
        self._pending: dict[str, asyncio.Future[Answer]] = {}  # bounded by the lookups in flight
        self.lookups = 0  # queries sent
        self.hits = 0
        self.failures = 0

    def _resolver(self) -> aiodns.DNSResolver:
        if self._channel is None:
            self._channel = aiodns.DNSResolver(nameservers=self._nameservers, timeout=self._timeout_s,
                                               tries=self._tries)
        return self._channel

    async def answer(self, host: str) -> Answer:
        """The cached answer for ``host``, or a fresh one (a failure is an answer too)."""
        name = host.rstrip(".").lower()
        answer = self.cache.get(name, self._clock())
        if answer is not None:
            self.hits += 1
            return answer
        pending = self._pending.get(name)
        if pending is None:
            pending = self._query(name)
        # Shielded: a cancelled fetch must not cancel the lookup other fetches wait for.
        return await asyncio.shield(pending)

    def _query(self, name: str) -> asyncio.Future[Answer]:
        loop = asyncio.get_running_loop()
        answer: asyncio.Future[Answer] = loop.create_future()
        if self._closed:  # the node is stopping: nothing is asked, nothing cached
            answer.set_result(Answer((), "resolver closed", self._clock()))
            return answer
        self._pending[name] = answer
        self.lookups += 1
        try:
            query = self._resolver().getaddrinfo(name, family=socket.AF_UNSPEC, type=socket.SOCK_STREAM)
        except (aiodns.error.DNSError, ValueError, TypeError) as exc:  # a name c-ares will not even ask for
            self._pending.pop(name, None)
            self.failures += 1
            answer.set_result(self.cache.put_failure(name, _reason(exc), self._clock()))
            return answer

        def done(lookup: asyncio.Future[Any]) -> None:
            # Runs once per query, whatever became of the fetches that asked: the answer
            # (or the failure) is cached, and the waiters get it; nothing is left unretrieved.
            self._pending.pop(name, None)
            now = self._clock()
            if lookup.cancelled():
                result = Answer((), "lookup cancelled", now)  # the resolver closed: not cached
            elif (error := lookup.exception()) is not None:
                self.failures += 1
                result = self.cache.put_failure(name, _reason(error), now)
            else:
                nodes = lookup.result().nodes
                addresses = _ipv4_first(dict.fromkeys((node.family, node.addr[0].decode("ascii")) for node in nodes))
                if addresses:
                    result = self.cache.put_addresses(name, addresses, min(node.ttl for node in nodes), now)
                else:
                    self.failures += 1
                    result = self.cache.put_failure(name, "no address records", now)
            if not answer.done():
                answer.set_result(result)

        query.add_done_callback(done)
        return answer

    async def resolve(self, host: str, port: int = 0,
                      family: socket.AddressFamily = socket.AF_INET) -> list[ResolveResult]:
        answer = await self.answer(host)
        if answer.error is not None:
            raise DnsLookupError(host, answer.error)
        addresses = self._allowed(host, answer)
        return [ResolveResult(hostname=host, host=address, port=port, family=address_family, proto=0,
                              flags=_NUMERIC)
                for address_family, address in addresses if family in (socket.AF_UNSPEC, address_family)]

    async def first_address(self, host: str) -> str | None:
        """The address a fetch of ``host`` connects to first, or None when the name does not
        resolve or resolves to nothing the node may fetch (for node.admission.IpGates)."""
        answer = await self.answer(host)
        if answer.error is not None:
            return None
        try:
            return self._allowed(host, answer)[0][1]
        except PrivateAddressError:
            return None

    def _allowed(self, host: str, answer: Answer) -> tuple[tuple[int, str], ...]:
        if self.allow_private:
            return answer.addresses
        public = tuple(entry for entry in answer.addresses if is_public_address(entry[1]))
        if not public:
            raise PrivateAddressError(host, [address for _, address in answer.addresses])
        return public

    async def close(self) -> None:
        self._closed = True
        channel, self._channel = self._channel, None
        if channel is not None:
            await channel.close()

    def snapshot(self) -> DnsSnapshot:
        return DnsSnapshot(server=self.server or "system", cached_names=len(self.cache), lookups=self.lookups,
                           hits=self.hits, failures=self.failures, evicted=self.cache.evicted)


@dataclass(frozen=True, slots=True)
class DnsSnapshot:
    """The resolver of direct fetches (the status's ``dns``)."""

    server: str
    cached_names: int
    lookups: int  # queries sent
    hits: int
    failures: int
    evicted: int


def nameserver(server: str) -> str:
    """``--dns-server`` as c-ares takes it: "IPv4[:PORT]", "[IPv6]:PORT" or a bare IPv6
    address in, "addr:port" / "[addr]:port" out. A DNS server is named by its address (its
    name would need a resolver first): anything else is a ValueError, raised when the node is
    built rather than on every lookup."""
    text = server.strip()
    port = "53"
    if text.startswith("["):
        address, _, rest = text[1:].partition("]")
        if rest:
            if not rest.startswith(":"):
                raise ValueError(f"dns server {server!r}: expected [IPv6]:PORT")
            port = rest[1:]
    elif text.count(":") == 1:
        address, port = text.split(":")
    else:
        address = text
    try:
        parsed = ipaddress.ip_address(address)
    except ValueError:
        raise ValueError(f"dns server {server!r} must be an IP address with an optional port") from None
    if not port.isdigit() or not 0 < int(port) < 65536:
        raise ValueError(f"dns server {server!r}: bad port {port!r}")
    return f"[{parsed}]:{port}" if parsed.version == 6 else f"{parsed}:{port}"


def _ipv4_first(addresses: Iterable[tuple[int, str]]) -> tuple[tuple[int, str], ...]:
    """IPv4 addresses before IPv6 ones, each family in the resolver's order. The connector
    tries the first address first, and the per-IP gate is keyed on it (first_address), so the
    two agree; IPv4 because a crawler's network more often lacks working IPv6 than IPv4 (c-ares
    sorts ::1 before 127.0.0.1 for localhost, where a server may listen on IPv4 only)."""
    return tuple(sorted(addresses, key=lambda entry: entry[0] != socket.AF_INET))


def _reason(error: BaseException) -> str:
    # aiodns.error.DNSError(code, message): "Domain name not found", "DNS server returned
    # answer with no data", "Timeout while contacting DNS servers", ...
    if isinstance(error, aiodns.error.DNSError) and len(error.args) >= 2:
        return str(error.args[1])
    return f"{type(error).__name__}: {error}"
