"""Per-IP gates for direct fetches: hosts that resolve to one address share its limit.

One :class:`IpGate` per address counts the requests in flight there from this node and parks
the hosts it turns away until a slot frees up. :class:`IpGates` resolves hosts (cached) to
their gates. Alone, a gate admits ``--ip-inflight-limit``; in a cluster, hosts on one address
may belong to different nodes, and each gate admits this node's share of the limit, agreed
through the heartbeats (cluster.ipshare states the protocol and its invariant).
"""

from __future__ import annotations

import asyncio
import socket
from collections.abc import Awaitable, Callable, Hashable, Iterable
from dataclasses import dataclass, field
from typing import Any, Generic, TypeVar

from crawler_node.cluster.ipshare import AddressActivity, Announcement, IpShares, IpSharesSnapshot
from crawler_node.core.addresses import is_ip_literal
from crawler_node.core.stats import Indexed, counter, gauge, stat
from crawler_node.core.urls import bare_host

# What an IP gate parks and wakes: a host of the host table (node.host_state.HostState).
H = TypeVar("H", bound=Hashable)

class IpGate(Generic[H]):
    """The in-flight requests to one IP address, shared by every host that resolves to it.

    A fixed cap rather than AIMD: the hosts' own limiters already adapt; this only stops many
    small sites on one shared server from adding up to more than it should take from us. In
    a cluster the cap is this node's share of the address's limit (cluster.ipshare), set by
    :class:`IpGates` as the heartbeats bring news; requests above a lowered cap drain.
    """

    __slots__ = ("address", "limit", "in_flight", "hosts", "waiting", "refusals", "acquired", "_gone", "_claim")

    def __init__(self, address: str, limit: int) -> None:
        self.address = address
        self.limit = limit
        self.in_flight = 0
        self.hosts = 0  # hosts bound to this address
        self.waiting: set[H] = set()  # hosts parked because this gate was full
        self.refusals = 0
        self.acquired = 0  # requests started, ever (activity between two looks)
        self._gone: Callable[[IpGate[H]], None] | None = None  # told when no host uses it any more
        self._claim: Callable[[IpGate[H]], bool] | None = None  # asked for room before refusing

    def admits(self, state: H) -> bool:
        """Room for one more request; when there is none, the host waits for a release."""
        if self.in_flight < self.limit:
            return True
        if self._claim is not None and self._claim(self):
            return True
        if state not in self.waiting:
            self.waiting.add(state)
            self.refusals += 1
        return False

    def acquire(self) -> None:
        self.in_flight += 1
        self.acquired += 1

    def release(self) -> set[H]:
        """Return a slot; the hosts that were waiting for one must be re-placed by the caller."""
        self.in_flight -= 1
        woken, self.waiting = self.waiting, set()
        if not self.hosts and not self.in_flight and self._gone is not None:
            self._gone(self)
        return woken

    def unbind(self, state: H) -> None:
        """A host left memory (node.hosts.HostTable.collect): it no longer counts here."""
        self.hosts -= 1
        self.waiting.discard(state)
        if not self.hosts and not self.in_flight and self._gone is not None:
            self._gone(self)


class IpGates:
    """Resolves hosts (cached) and hands out one shared :class:`IpGate` per address.

    With ``shares`` (a cluster; cluster.ipshare) each gate admits up to this node's share of
    ``limit``, which is 0 until the peers have acknowledged the address: the heartbeats call
    :meth:`announcement`, :meth:`heard`, :meth:`peers_live` and :meth:`refresh` (the
    cluster.heartbeats.IpShareLink protocol), and hosts that waited for a share that grew are
    handed to ``wake_with``'s callback. Without, each gate admits ``limit`` (one node alone).
    """

    def __init__(self, *, limit: int, cache_s: float, clock: Callable[[], float],
                 resolve: Callable[[str], Awaitable[str | None]] | None = None,
                 shares: IpShares | None = None, wake: Callable[[set[Any]], None] | None = None) -> None:
        """``wake(hosts)``: hosts parked on a gate whose cap grew may go again (with ``shares``)."""
        if limit < 1:
            raise ValueError(f"limit must be >= 1, got {limit}")
        if shares is not None and shares.limit != limit:
            raise ValueError(f"the shares split limit {shares.limit}, the gates have {limit}")
        self.limit = limit
        self.shares = shares
        self._wake: Callable[[set[Any]], None] = wake if wake is not None else (lambda states: None)
        self._acquired_seen: dict[str, int] = {}
        self.cache_s = cache_s
        self._clock = clock
        self._resolve = resolve or _first_address
        self._gates: dict[str, IpGate[Any]] = {}
        self._cache: dict[str, tuple[str | None, float]] = {}
        self.lookups = 0
        self.failures = 0
        self.refused_before = 0  # refusals of gates no host uses any more

    async def gate_for(self, host: str) -> IpGate[Any] | None:
        """The gate of the address ``host`` resolves to; None when it does not resolve (the
        fetch will then fail by itself, and there is no address to be polite to)."""
        address = await self.address_of(host)
        if address is None:
            return None
        gate = self._gates.get(address)
        if gate is None:
            gate = self._gates[address] = IpGate(address, self.limit)
            gate._gone = self._drop
            if self.shares is not None:
                gate.limit = self.shares.cap(address)
                gate._claim = self._claim
        gate.hosts += 1
        return gate

    # ----------------------------------------------------------------- cluster shares
    def _claim(self, gate: IpGate[Any]) -> bool:
        # Asked from admits(), inside the host rotation: no waking from here.
        shares = self.shares
        if shares is None or shares.announced(gate.address):
            return False
        claimed, evicted = shares.claim(gate.address, self._clock(), in_use=self._in_use)
        if evicted is not None and (idle := self._gates.get(evicted)) is not None:
            idle.limit = 0  # no longer announced: no request there until it is again
        if not claimed:
            return False
        gate.limit = shares.cap(gate.address)  # a node without live peers may go at once
        return gate.in_flight < gate.limit

    def _in_use(self, address: str) -> bool:
        # Hosts waiting count as use: else, in a broad crawl, each host that comes round
        # would push the previous one's address out before any peer acknowledged it.
        gate = self._gates.get(address)
        return gate is not None and (gate.in_flight > 0 or bool(gate.waiting))

    def refresh(self) -> None:
        """Re-derive the announced addresses from the gates, then every gate's cap."""
        shares = self.shares
        if shares is None:
            return
        activity = []
        for address, gate in self._gates.items():
            started = gate.acquired != self._acquired_seen.get(address)
            self._acquired_seen[address] = gate.acquired
            activity.append(AddressActivity(address, gate.in_flight, bool(gate.in_flight or gate.waiting or started)))
        for address in set(self._acquired_seen) - self._gates.keys():
            del self._acquired_seen[address]
        for address in shares.update(activity, self._clock()):
            dropped = self._gates.get(address)
            if dropped is not None:
                dropped.limit = 0
        self._apply()

    def _apply(self) -> None:
        shares = self.shares
        assert shares is not None
        woken: set[Any] = set()
        for address in shares.addresses():
            gate = self._gates.get(address)
            if gate is None:
                continue
            gate.limit = shares.cap(address)
            if gate.waiting and gate.in_flight < gate.limit:
                woken |= gate.waiting
                gate.waiting = set()
        if woken:
            self._wake(woken)

    def announcement(self) -> dict[str, Any] | None:
        """What this node's heartbeat answers carry (None: it does not share)."""
        if self.shares is None:
            return None
        self.refresh()
        return self.shares.payload(self._in_flight())

    def heard(self, peer_id: str, announcement: Announcement | None) -> None:
        if self.shares is not None:
            self.shares.heard(peer_id, announcement)
            self._apply()

    def peers_live(self, live: Iterable[str]) -> None:
        if self.shares is not None:
            self.shares.peers_live(live)
            self._apply()

    def _in_flight(self) -> dict[str, int]:
        return {address: gate.in_flight for address, gate in self._gates.items() if gate.in_flight}

    def _drop(self, gate: IpGate[Any]) -> None:
        if self._gates.get(gate.address) is gate:
            self.refused_before += gate.refusals
            del self._gates[gate.address]

    async def address_of(self, host: str) -> str | None:
        bare = bare_host(host).strip("[]")
        if is_ip_literal(bare):
            return bare
        now = self._clock()
        cached = self._cache.get(bare)
        if cached is not None and cached[1] > now:
            return cached[0]
        self.lookups += 1
        try:
            address = await self._resolve(bare)
        except OSError:
            self.failures += 1
            address = None
        if len(self._cache) > 100_000:  # bounded: a crawl meets many hosts, most of them once
            self._cache.clear()
        self._cache[bare] = (address, now + self.cache_s)
        return address

    def busiest(self, n: int) -> list[IpGate[Any]]:
        return sorted(self._gates.values(), key=lambda g: (g.in_flight, g.hosts), reverse=True)[:n]

    def shared(self) -> int:
        """Addresses that more than one host resolves to."""
        return sum(1 for gate in self._gates.values() if gate.hosts > 1)

    @property
    def refusals(self) -> int:
        return self.refused_before + sum(gate.refusals for gate in self._gates.values())

    def snapshot(self) -> IpSnapshot:
        return IpSnapshot(enabled=True, limit=self.limit, shared_addresses=self.shared(), refusals=self.refusals,
                          busiest=tuple(IpGateSnapshot(ip=gate.address, in_flight=gate.in_flight, hosts=gate.hosts)
                                        for gate in self.busiest(10)),
                          cluster=IpNodeMode() if self.shares is None else self.shares.snapshot(self._in_flight()))


@dataclass(frozen=True, slots=True)
class IpGateSnapshot:
    ip: str = field(metadata=stat(is_label=("ip",)))
    in_flight: int = field(metadata=gauge("crawler_ip_in_flight", "In-flight requests of the busiest IP addresses",
                                          labels=("ip",)))
    hosts: int


@dataclass(frozen=True, slots=True)
class IpNodeMode:
    mode: str = "node"  # each node keeps the whole per-IP limit (--ip-limit-per-node)


@dataclass(frozen=True, slots=True)
class IpSnapshot(Indexed):
    """The per-IP gates (the status's ``ip``)."""

    enabled: bool
    limit: int | None
    shared_addresses: int = field(metadata=gauge("crawler_ip_shared_addresses",
                                                 "Addresses that several hosts resolve to"))
    refusals: int = field(metadata=counter("crawler_ip_gate_refusals",
                                           "Hosts held back because their IP was at its limit"))
    busiest: tuple[IpGateSnapshot, ...]
    cluster: IpNodeMode | IpSharesSnapshot | None = field(metadata=stat(when="enabled"))


NO_IP_GATES = IpSnapshot(enabled=False, limit=None, shared_addresses=0, refusals=0, busiest=(), cluster=None)


async def _first_address(host: str) -> str | None:
    infos = await asyncio.get_running_loop().getaddrinfo(host, 80, type=socket.SOCK_STREAM)
    return str(infos[0][4][0]) if infos else None
