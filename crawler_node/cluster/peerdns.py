"""Peers found by DNS (``--peer-dns NAME[:PORT]``): no edited peer list for a scaled cluster.

Every ``interval_s`` NAME's A and AAAA records are asked for (c-ares, aiodns, which reads
/etc/resolv.conf: Docker's embedded resolver for a compose service name, the cluster DNS for a
Kubernetes headless Service). Each address is a candidate member. A candidate this node has
not joined through yet is asked ``POST /v1/join`` with this node's id and URL — the join any
member accepts (cluster.heartbeats) — and its answer, the member list, goes into the
membership like any heartbeat's. From there the one existing rule decides who owns what:
heartbeats keep members alive, a member that stops answering goes down, a joiner is spread to
the others by their heartbeats (anti-entropy). DNS only finds candidates; it never removes a
member: one that left DNS (scaled in, or its pod deleted) goes down when its heartbeats fail,
exactly as a killed node does, and its arc goes to its successors.

Node ids: a node's id is its hostname unless given (settings.node_id): the pod name in a
StatefulSet (crawler-0, ...), the container's hostname under compose (its short id, kept by
``docker start`` and ``compose stop/start``). The joined member's id is read from its answer
(``node_id``), so an address maps to the member behind it; a node that comes back with another
address keeps its id and only its URL changes.

The pure part is :class:`DnsCandidates` (which addresses to join through, what the answers
taught); :class:`PeerDns` is the thin shell that resolves and posts.
"""

from __future__ import annotations

import asyncio
import ipaddress
import logging
import socket
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from urllib.parse import urlsplit

import aiodns

from crawler_node.cluster.heartbeats import parse_members_answer
from crawler_node.cluster.membership import Membership, PeerState, member_problem
from crawler_node.cluster.peer_client import BadPeerAnswer, PeerClient, PeerUnreachable
from crawler_node.core.stats import Indexed
from crawler_node.runtime.supervisor import Supervisor

log = logging.getLogger("crawler_node.cluster")

RESOLVE_TIMEOUT_S = 2.0
FIRST_ROUND_DEADLINE_S = 10.0
# While this member holds its first lease (cluster.readiness), NAME is asked this often instead
# of every interval_s: after `docker compose start` the replicas enter DNS one by one, and a
# member that leases without one that was in the cluster before routes that member's hosts to
# itself and crawls them again (176 URLs of 4,590 fetched twice, once in CI).
STARTUP_RESOLVE_S = 0.25


def parse_peer_dns(value: str, default_port: int) -> tuple[str, int]:
    """``NAME`` or ``NAME:PORT`` as (name, port); ValueError when it is neither."""
    name, sep, port = value.rpartition(":")
    if not sep:
        name, port = value, str(default_port)
    name = name.strip().rstrip(".")
    if not name or any(c.isspace() or c in "/@?#[]" for c in name) or not port.isdigit() or not 0 < int(port) < 65536:
        raise ValueError(f"peer_dns {value!r} must look like NAME or NAME:PORT")
    return name, int(port)


def address_url(address: str, port: int) -> str:
    """http://ADDRESS:PORT, an IPv6 address in brackets."""
    host = f"[{address}]" if ipaddress.ip_address(address).version == 6 else address
    return f"http://{host}:{port}"


@dataclass(slots=True)
class _Joined:
    node_id: str


class DnsCandidates:
    """Which resolved addresses to join through. Pure: the shell feeds it answers.

    An address is settled once a join through it succeeded and the member that answered is
    still in the membership and not down; it is asked again when that member went down (it
    may have restarted with a fresh frontier, or the address now belongs to another node) or
    when the address left DNS and came back. ``own`` addresses (this node's) are never asked.
    """

    def __init__(self, *, own: Iterable[str] = ()) -> None:
        self._own = frozenset(own)
        self._joined: dict[str, _Joined] = {}

    def targets(self, addresses: Iterable[str], membership: Membership) -> list[str]:
        """The addresses to send a join to this round, sorted; forgets addresses gone from DNS."""
        current = set(addresses) - self._own
        for gone in set(self._joined) - current:
            del self._joined[gone]
        wanted = []
        for address in sorted(current):
            joined = self._joined.get(address)
            member = membership.get(joined.node_id) if joined is not None else None
            if member is None or member.state is PeerState.DOWN:
                wanted.append(address)
        return wanted

    def joined(self, address: str, node_id: str) -> None:
        self._joined[address] = _Joined(node_id)

    def failed(self, address: str) -> None:
        self._joined.pop(address, None)

    def own_address(self, address: str) -> None:
        """An address that answered with this node's own id: it is this node."""
        self._own = self._own | {address}
        self._joined.pop(address, None)


def own_addresses() -> set[str]:
    """This machine's addresses as its hostname resolves (/etc/hosts in a container or pod)."""
    try:
        infos = socket.getaddrinfo(socket.gethostname(), None, type=socket.SOCK_STREAM)
    except OSError:
        return set()
    return {str(info[4][0]) for info in infos}


def advertised_url(advertise_url: str) -> str:
    """A URL peers can reach: ``http://0.0.0.0:PORT`` (the listen address, no --advertise
    given) names no machine, so this machine's own address stands in for the wildcard (the
    hostname's, as the others' DNS answers give it). Any other URL is kept."""
    parts = urlsplit(advertise_url)
    if parts.hostname not in ("0.0.0.0", "::") or parts.port is None:
        return advertise_url
    addresses = sorted(own_addresses(), key=lambda a: (ipaddress.ip_address(a).version, a))
    usable = [a for a in addresses if not ipaddress.ip_address(a).is_loopback]
    return address_url(usable[0], parts.port) if usable else advertise_url


@dataclass(slots=True)
class PeerDnsCounts(Indexed):
    lookups: int = 0
    lookup_failures: int = 0
    joins: int = 0
    join_failures: int = 0


@dataclass(frozen=True, slots=True)
class PeerDnsSnapshot:
    """The status's ``cluster.peer_dns``."""

    name: str
    port: int
    addresses: tuple[str, ...]  # the last answer
    lookups: int
    lookup_failures: int
    joins: int
    join_failures: int


class PeerDns:
    """Resolves ``name`` every ``interval_s`` and joins through the addresses not yet members.

    ``learn(members, via)``: a member list answered by the node ``via``, (id, url) pairs
    already checked; the cluster merges it into the membership (cluster.Cluster._learnt).
    """

    def __init__(self, *, name: str, port: int, interval_s: float, node_id: str, advertise_url: str,
                 membership: Membership, learn: Callable[[list[tuple[str, str]], str], None],
                 client: PeerClient, supervisor: Supervisor, own: Iterable[str] = ()) -> None:
        if interval_s <= 0:
            raise ValueError(f"interval_s must be > 0, got {interval_s}")
        self.name = name
        self._port = port
        self._interval_s = interval_s
        self._node_id = node_id
        self._advertise_url = advertise_url
        self._membership = membership
        self._learn = learn
        self.client = client  # every request to a member goes through it
        self._supervisor = supervisor
        self._candidates = DnsCandidates(own=own)
        self._holding: Callable[[], bool] = lambda: False  # the startup hold, once watched
        self._resolver: aiodns.DNSResolver | None = None  # made in the running loop
        self.addresses: list[str] = []  # the last answer
        self.counters = PeerDnsCounts()

    def snapshot(self) -> PeerDnsSnapshot:
        c = self.counters
        return PeerDnsSnapshot(name=self.name, port=self._port, addresses=tuple(self.addresses), lookups=c.lookups,
                               lookup_failures=c.lookup_failures, joins=c.joins, join_failures=c.join_failures)

    async def start(self) -> None:
        """One round at once, repeated for up to FIRST_ROUND_DEADLINE_S while DNS names no other
        member (the others start at the same moment), then a recurring job."""
        loop = asyncio.get_running_loop()
        deadline = loop.time() + FIRST_ROUND_DEADLINE_S
        while True:
            await self.round()
            if len(self._membership.peers()) > 0 or loop.time() >= deadline:
                break
            await asyncio.sleep(min(1.0, self._interval_s))
        self._supervisor.recurring("peer-dns", self._paced_round)

    def watch_startup(self, holding: Callable[[], bool]) -> None:
        """While ``holding()`` (the member holds its first lease), rounds come every
        STARTUP_RESOLVE_S: a member that enters DNS during the hold is joined within it."""
        self._holding = holding

    async def _paced_round(self) -> None:
        await asyncio.sleep(min(self._interval_s, STARTUP_RESOLVE_S) if self._holding() else self._interval_s)
        await self.round()

    async def round(self) -> None:
        addresses = await self.resolve()
        if addresses is None:
            return
        self.addresses = sorted(addresses)
        targets = self._candidates.targets(addresses, self._membership)
        await asyncio.gather(*(self._join(address) for address in targets))

    async def resolve(self) -> set[str] | None:
        """NAME's A and AAAA addresses; None when it did not resolve (the last view stands:
        NXDOMAIN before the first replica started, or a resolver timeout)."""
        if self._resolver is None:
            self._resolver = aiodns.DNSResolver(timeout=RESOLVE_TIMEOUT_S, tries=2)
        self.counters.lookups += 1
        try:
            result = await self._resolver.getaddrinfo(self.name, family=socket.AF_UNSPEC, type=socket.SOCK_STREAM)
        except (aiodns.error.DNSError, ValueError, TypeError) as exc:
            self.counters.lookup_failures += 1
            log.debug("peer-dns: %s did not resolve: %s", self.name, exc)
            return None
        return {node.addr[0].decode("ascii") for node in result.nodes}

    async def _join(self, address: str) -> None:
        url = address_url(address, self._port)
        body = {"id": self._node_id, "url": self._advertise_url}
        try:
            reply = await self.client.join(url, body)  # to an address: which member is there is the question
            if reply.status == 409:  # "same_id" (api.members.post_join): this node itself
                self._candidates.own_address(address)
                return
            if reply.status != 200:
                raise BadPeerAnswer(f"HTTP {reply.status}")
            answer = reply.json()
            members, _ = parse_members_answer(answer)
            via = answer.get("node_id") if isinstance(answer, dict) else None
            if member_problem(via, url) is not None:
                raise BadPeerAnswer("no node_id in the answer")
        except (PeerUnreachable, ValueError) as exc:  # BadPeerAnswer is a ValueError
            self.counters.join_failures += 1
            self._candidates.failed(address)
            log.debug("peer-dns: join through %s failed: %s", url, exc)
            return
        if via == self._node_id:
            self._candidates.own_address(address)
            return
        self.counters.joins += 1
        self._candidates.joined(address, str(via))
        self._learn(members, str(via))
