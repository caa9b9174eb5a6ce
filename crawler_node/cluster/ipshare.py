"""Per-IP politeness across the cluster: this node's share of each address's in-flight limit.

Hosts are owned by consistent hashing on ``host[:port]``, so the hosts behind one address
may belong to different nodes, and a limit kept per node adds up over the cluster. Each node
therefore takes only a *share* of ``L = --ip-inflight-limit`` for an address it fetches from,
and the shares are agreed through the heartbeats: no message per request.

What travels. Every answer to ``GET /v1/members`` carries this node's *announcement*
(``"ips"``, :meth:`IpShares.payload`): the addresses it is active on (requests in flight,
hosts waiting for a slot, or used in the last ``linger_s``; at most ``max_addresses``
besides those with requests in flight, the longest idle making room for a new one), which
of them it is *draining* (more requests in flight than its share now allows), and, for each
peer, the version of that peer's announcement it holds: its acknowledgement. A node hears
each peer's announcement through its own heartbeat to that peer.

The share. The *sharers* of address X are this node and the live peers whose announcement
lists X. :func:`split_limit` gives each ``floor(L / n)`` and one more to the first
``L mod n`` of them, in an order fixed per address (a hash of address and id, so the
remainder does not always go to the same node): every node that knows the same sharers
computes the same split, and it sums to L. With more sharers than L, L of them get 1 and the
others 0 until a sharer leaves the address.

When it may be used. A node's *cap* on X (what its IP gate admits up to) is 0 until every
live peer has acknowledged an announcement that lists X and did not say, in that same answer,
that it is draining X; from then on it is the node's share. A node that hears of a new sharer
lowers its own share at once: its requests above the new share end by themselves, no new
one starts until it is under, and until then it says it is draining. An acknowledgement holds
while the peer stays live and X stays announced; an address dropped and announced again, or a
peer that was down and is back, needs a new one.

Invariant: for every address, the requests in flight to it from the live members together
never exceed L. Why: the members with a nonzero cap on X each know all the others (each one
that came later waited for the earlier ones to acknowledge it, and learnt their addresses
from those same answers), and each has drained to its share before the next was admitted.
A member's share over a set of sharers is never larger than over a subset of it (fewer
sharers, larger floor; a member's place in the fixed order can only move forward), so the
shares the admitted members use, each over what it knows, add up to at most the split of L
over the admitted members themselves, which is L. Dropping a sharer only ever happens with
nothing in flight there, so the others raising their shares after it is safe.

Limits:

- A peer counts until the membership says it is down (a suspect peer still counts, and holds
  back new addresses until it answers or is down). A member declared down while it still has
  requests open (frozen, cut off, or leaving the cluster with requests in flight) can overlap
  with the shares the others take then: by what it has in flight then (its share, more while
  it drains), until those requests end (``fetch_timeout_s`` bounds them on a node that runs).
- A new address, a member that joins and one that comes back cost one acknowledgement: about
  one to two heartbeat intervals before new requests start (on every address, for a member
  that joins or returns).
- Peers that announce nothing (an older version, a node fetching through a proxy, or one
  run with ``--ip-limit-per-node``) are not counted: their requests add to the limit.
- Addresses are what each node resolves: nodes that resolve one name differently count
  different addresses.
- The split is even, not by need: a sharer with little work left keeps its share until it
  stops using the address (plus ``linger_s``), and the others cannot borrow it meanwhile.

Pure: no I/O and no clock; times are passed in (only :func:`ip_shares_for` draws an epoch).
"""

from __future__ import annotations

import hashlib
import secrets
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any

# What a peer's announcement may hold; beyond it the answer is malformed.
MAX_ADDRESSES_HEARD = 8192
MAX_PEERS_SEEN = 1024
MAX_TOKEN_CHARS = 64  # an epoch or an address


class BadAnnouncement(ValueError):
    """A peer's ``ips`` announcement does not have the shape of one."""


@dataclass(frozen=True, slots=True)
class Announcement:
    """One peer's announcement as heard (see the module docstring)."""

    epoch: str  # changes when the peer restarts: its versions start again
    version: int
    addresses: frozenset[str]
    draining: frozenset[str]
    seen: Mapping[str, tuple[str, int]]  # member id -> (epoch, version) of its announcement held there


def parse_announcement(raw: object) -> Announcement | None:
    """A peer's ``ips`` value as an :class:`Announcement`; None when it announces nothing (a
    peer that does not share). BadAnnouncement when it has the wrong shape. Entries that are
    not plausible addresses are skipped, as junk members are (they can match nothing)."""
    if raw is None:
        return None
    if not isinstance(raw, dict):
        raise BadAnnouncement(f"ips must be an object, got {type(raw).__name__}")
    epoch, version = raw.get("epoch"), raw.get("version")
    if not isinstance(epoch, str) or not _token(epoch):
        raise BadAnnouncement("ips.epoch must be 1 to 64 printable characters")
    if not isinstance(version, int) or isinstance(version, bool) or version < 0:
        raise BadAnnouncement("ips.version must be an integer >= 0")
    seen_raw = raw.get("seen", {})
    if not isinstance(seen_raw, dict) or len(seen_raw) > MAX_PEERS_SEEN:
        raise BadAnnouncement(f"ips.seen must be an object of at most {MAX_PEERS_SEEN} members")
    seen: dict[str, tuple[str, int]] = {}
    for member, held in seen_raw.items():
        if (not isinstance(held, list) or len(held) != 2 or not _token(held[0])
                or not isinstance(held[1], int) or isinstance(held[1], bool)):
            raise BadAnnouncement("ips.seen maps a member id to [epoch, version]")
        seen[str(member)] = (held[0], held[1])
    return Announcement(epoch=epoch, version=version, addresses=_addresses(raw.get("addresses"), "addresses"),
                        draining=_addresses(raw.get("draining", []), "draining"), seen=seen)


def _token(value: object) -> bool:
    return isinstance(value, str) and 0 < len(value) <= MAX_TOKEN_CHARS and value.isprintable()


def _addresses(value: object, name: str) -> frozenset[str]:
    if not isinstance(value, list) or len(value) > MAX_ADDRESSES_HEARD:
        raise BadAnnouncement(f"ips.{name} must be a list of at most {MAX_ADDRESSES_HEARD} addresses")
    return frozenset(item for item in value if _token(item))


def split_limit(limit: int, sharers: Iterable[str], address: str) -> dict[str, int]:
    """Each sharer's part of ``limit`` on ``address``: the floor for all, the remainder one
    each in an order fixed by address and id. Sums to ``limit`` (to fewer only when there
    are no sharers); a sharer's part never grows when sharers are added."""
    order = sorted(set(sharers), key=lambda member: (_rank(address, member), member))
    if not order:
        return {}
    base, extra = divmod(limit, len(order))
    return {member: base + (1 if rank < extra else 0) for rank, member in enumerate(order)}


def _rank(address: str, member: str) -> bytes:
    # A hash that mixes well (crc32 of strings that differ in one character does not), the
    # same on every member: it only has to spread the remainder over the members.
    return hashlib.blake2b(f"{address}\0{member}".encode(), digest_size=8).digest()


@dataclass(slots=True)
class _Peer:
    heard: Announcement | None = None
    speaks: bool | None = None  # None: not heard yet (counted as sharing, so waited for)
    acked: set[str] = field(default_factory=set)  # my addresses this peer has acknowledged


@dataclass(frozen=True, slots=True)
class AddressActivity:
    """What this node does on one address now (from its IP gate)."""

    address: str
    in_flight: int
    busy: bool  # requests in flight, hosts waiting, or a request started since the last look


class IpShares:
    """This node's side of the protocol: its announcement, what it heard, its caps."""

    def __init__(self, *, self_id: str, limit: int, epoch: str, max_addresses: int = 256,
                 linger_s: float = 5.0) -> None:
        if limit < 1:
            raise ValueError(f"limit must be >= 1, got {limit}")
        if max_addresses < 1 or linger_s < 0:
            raise ValueError("need max_addresses >= 1 and linger_s >= 0")
        if not _token(epoch):
            raise ValueError("epoch must be 1 to 64 printable characters")
        self.self_id = self_id
        self.limit = limit
        self.epoch = epoch
        self.max_addresses = max_addresses
        self.linger_s = linger_s
        self.version = 0  # bumped on every change of the announced set
        self._mine: dict[str, int] = {}  # announced address -> version that added it
        self._last_busy: dict[str, float] = {}
        self._peers: dict[str, _Peer] = {}

    # ----------------------------------------------------------------- this node
    def announced(self, address: str) -> bool:
        return address in self._mine

    def claim(self, address: str, now: float, *, in_use: Callable[[str], bool]) -> tuple[bool, str | None]:
        """Announce ``address`` from now on (a host wants a slot there). When the announcement
        is full, the address idle longest of those not in use (``in_use``: requests in flight
        or hosts waiting there) makes room; returns (announced, the address that made room).
        Not announced when all are in use: the host then waits, and the address gets in when
        there is room (:meth:`update`)."""
        if address in self._mine:
            return True, None
        evicted = None
        if len(self._mine) >= self.max_addresses:
            idle = [other for other in self._mine if not in_use(other)]
            if not idle:
                return False, None
            evicted = min(idle, key=lambda other: self._last_busy.get(other, now))
            self._drop(evicted)
        self._add(address, now)
        return True, evicted

    def update(self, activity: Iterable[AddressActivity], now: float) -> list[str]:
        """Re-derive the announced set from the gates; returns the addresses dropped. An
        address with requests in flight is always announced (the others must count them)."""
        seen: set[str] = set()
        for item in activity:
            seen.add(item.address)
            if item.busy:
                self._last_busy[item.address] = now
                if item.address not in self._mine and (item.in_flight or len(self._mine) < self.max_addresses):
                    self._add(item.address, now)
        gone = [address for address in self._mine if address not in seen
                or now - self._last_busy.get(address, now) > self.linger_s]
        for address in gone:
            self._drop(address)
        return gone

    def _add(self, address: str, now: float) -> None:
        self.version += 1
        self._mine[address] = self.version
        self._last_busy[address] = now

    def _drop(self, address: str) -> None:
        # Only with nothing in flight there (see update): the others may raise at once.
        self.version += 1
        del self._mine[address]
        self._last_busy.pop(address, None)
        for peer in self._peers.values():
            peer.acked.discard(address)

    # ----------------------------------------------------------------- peers
    def peers_live(self, live: Iterable[str]) -> None:
        """The peers that are not down. A peer that went down takes its addresses and its
        acknowledgements with it; one that is (back) up is waited for until it answers."""
        live = set(live) - {self.self_id}
        for peer_id in list(self._peers):
            if peer_id not in live:
                del self._peers[peer_id]
        for peer_id in live:
            self._peers.setdefault(peer_id, _Peer())

    def heard(self, peer_id: str, announcement: Announcement | None) -> None:
        """A live peer's answer: its addresses, and its acknowledgement of mine."""
        peer = self._peers.setdefault(peer_id, _Peer())
        if announcement is None:
            peer.speaks, peer.heard = False, None
            peer.acked.clear()
            return
        if (peer.heard is not None and peer.heard.epoch == announcement.epoch
                and announcement.version < peer.heard.version):
            return  # older than what it said already (an answer that came late): no news
        peer.speaks, peer.heard = True, announcement
        held = announcement.seen.get(self.self_id)
        if held is None or held[0] != self.epoch:
            return  # it holds nothing of mine yet, or what it holds is from before my restart
        for address, added in self._mine.items():
            if added <= held[1] and address not in announcement.draining:
                peer.acked.add(address)

    # ----------------------------------------------------------------- shares
    def sharers(self, address: str) -> list[str]:
        return [self.self_id] + sorted(peer_id for peer_id, peer in self._peers.items()
                                       if peer.heard is not None and address in peer.heard.addresses)

    def share(self, address: str) -> int:
        """This node's part of the limit on ``address`` as the sharers it knows split it."""
        return split_limit(self.limit, self.sharers(address), address)[self.self_id]

    def waiting_for(self, address: str) -> list[str]:
        """Live peers whose acknowledgement of ``address`` this node still needs."""
        return sorted(peer_id for peer_id, peer in self._peers.items()
                      if peer.speaks is not False and address not in peer.acked)

    def cap(self, address: str) -> int:
        """How many requests this node may have in flight to ``address`` now."""
        if address not in self._mine:
            return 0
        for peer in self._peers.values():
            if peer.speaks is not False and address not in peer.acked:
                return 0
        return self.share(address)

    def addresses(self) -> list[str]:
        return list(self._mine)

    def payload(self, in_flight: Mapping[str, int]) -> dict[str, Any]:
        """This node's announcement, as its heartbeat answers carry it."""
        return {
            "epoch": self.epoch,
            "version": self.version,
            "addresses": sorted(self._mine),
            "draining": sorted(address for address in self._mine if in_flight.get(address, 0) > self.share(address)),
            "seen": {peer_id: [peer.heard.epoch, peer.heard.version]
                     for peer_id, peer in sorted(self._peers.items()) if peer.heard is not None},
        }

    def snapshot(self, in_flight: Mapping[str, int], top: int = 20) -> IpSharesSnapshot:
        busiest = sorted(self._mine, key=lambda address: (-in_flight.get(address, 0), address))[:top]
        return IpSharesSnapshot(
            mode="cluster", version=self.version, announced=len(self._mine),
            peers={peer_id: IpSharePeer(shares=peer.speaks,
                                        addresses=len(peer.heard.addresses) if peer.heard else 0)
                   for peer_id, peer in sorted(self._peers.items())},
            addresses=tuple(IpShareAddress(ip=address, in_flight=in_flight.get(address, 0), cap=self.cap(address),
                                           share=self.share(address), sharers=tuple(self.sharers(address)),
                                           waiting_for=tuple(self.waiting_for(address))) for address in busiest))


@dataclass(frozen=True, slots=True)
class IpSharePeer:
    shares: bool | None  # None: not heard yet
    addresses: int


@dataclass(frozen=True, slots=True)
class IpShareAddress:
    ip: str
    in_flight: int
    cap: int
    share: int
    sharers: tuple[str, ...]
    waiting_for: tuple[str, ...]


@dataclass(frozen=True, slots=True)
class IpSharesSnapshot:
    """The per-IP limits agreed with the other members (the status's ``ip.cluster``)."""

    mode: str
    version: int
    announced: int
    peers: Mapping[str, IpSharePeer]
    addresses: tuple[IpShareAddress, ...]


def ip_shares_for(*, node_id: str, limit: int, per_node: bool, global_inflight: int,
                  heartbeat_interval_s: float) -> IpShares | None:
    """The shares of a per-IP ``limit`` this node asks for: None when each node keeps the
    whole limit (``per_node``: --ip-limit-per-node) or there is no per-IP limit."""
    if per_node or not limit:
        return None
    # Announced: every address with requests in flight, and room for several times as many
    # waiting. Kept a few heartbeats after its last request, so a host between two requests
    # (a lease refill, a short Crawl-delay) needs no new acknowledgement, but not much longer:
    # while it is announced, the others keep their shares down.
    return IpShares(self_id=node_id, limit=limit, epoch=secrets.token_hex(8),
                    max_addresses=max(256, 4 * global_inflight), linger_s=max(2.0, 4 * heartbeat_interval_s))
