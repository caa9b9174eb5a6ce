"""The inbound path: URLs submitted through the API or as seeds, and URLs peers forward.

URLs are normalised and scope-checked once, here; this node's own go to its frontier, the
others to the owner's outbox, both durably before the caller is answered (so the API and
peers may acknowledge). A URL a peer forwarded is scoped by where it was found (its ``via``),
as the peer scoped it: the scope's rules need no knowledge of the peer's seeds. URLs the
frontier turns away at their host's page cap get their crawl.log lines from here. The
inbound queue is bounded: past ``capacity`` URLs waiting for the frontier, callers are told
to come back (InboundFull, a 429 with Retry-After).
"""

from __future__ import annotations

import logging
from collections import Counter
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, Protocol

from crawler_node.core.scope import Scope, source_of
from crawler_node.core.stats import Indexed, counter, stat
from crawler_node.core.urls import InvalidURL, host_of, normalize_url, resolve_plain
from crawler_node.frontier import AddResult, FrontierService, HostPoliteness, UrlEntry
from crawler_node.frontier.replica import HostRefresh, clamped
from crawler_node.node.hosts import HostTable
from crawler_node.node.pipeline import SEED_PRIORITY, InboundFull
from crawler_node.node.queues import QueueSnapshot

log = logging.getLogger("crawler_node.intake")

_PLAIN_SCHEMES = ("http://", "https://")


class Ring(Protocol):
    @property
    def is_single(self) -> bool: ...
    def route(self, host: str) -> str | None: ...
    def serves(self, host: str) -> bool: ...
    def successor_for(self, host: str) -> str | None: ...


class Outboxes(Protocol):
    def note_outboxed(self, counts: Mapping[str, int]) -> None: ...


class CrawlLog(Protocol):
    async def log_capped(self, entries: list[UrlEntry]) -> None: ...


@dataclass(slots=True)
class Prepared:
    """Submitted items, checked: the entries to take in, and those turned away (url, reason)."""

    entries: list[UrlEntry] = field(default_factory=list)
    invalid: list[tuple[int, str, str]] = field(default_factory=list)  # (index, url, reason): malformed
    out_of_scope: list[tuple[str, str]] = field(default_factory=list)  # (url, reason)


@dataclass(slots=True)
class IntakeCounts:
    submitted: int = 0  # URLs accepted here (API, seeds)
    rejected: int = 0  # submitted URLs malformed or out of scope
    forwarded: int = 0  # submitted URLs for other members, to their outboxes
    queued_replicas: int = 0
    inbound_rejected_batches: int = 0  # batches turned away with InboundFull
    received_forwarded_on: int = 0  # URLs a peer forwarded here, for a third member
    hop_limit_kept: int = 0  # URLs kept here at the forwarding hop limit


@dataclass(frozen=True, slots=True)
class IntakeCounters:
    """The intake's part of the status's ``counters``."""

    submitted: int = field(metadata=counter("crawler_urls_submitted", "URLs accepted through the API or as seeds"))
    rejected: int = field(metadata=counter("crawler_urls_rejected", "Submitted URLs rejected (scope, malformed)"))
    forwarded: int = field(metadata=stat(json=False))
    queued_replicas: int = field(metadata=stat(json=False))


@dataclass(frozen=True, slots=True)
class IntakePeerCounters:
    """The intake's part of the status's ``cluster.counters``: URLs peers sent on."""

    received_forwarded_on: int
    hop_limit_kept: int


@dataclass(frozen=True, slots=True)
class IntakeSnapshot(Indexed):
    queue: QueueSnapshot  # the status's queues.inbound
    counters: IntakeCounters
    peers: IntakePeerCounters


class Intake:
    name = "inbound"

    def __init__(self, *, frontier: FrontierService, hosts: HostTable, ring: Ring, outboxes: Outboxes,
                 scope: Scope, capacity: int, max_hops: int, clock: Callable[[], float],
                 crawl_log: CrawlLog | None = None) -> None:
        """``crawl_log`` writes the lines of URLs past their host's page cap (None: unlogged)."""
        if capacity < 1:
            raise ValueError(f"capacity must be >= 1, got {capacity}")
        self._frontier = frontier
        self._hosts = hosts
        self._ring = ring
        self._outboxes = outboxes
        self._scope = scope
        self._capacity = capacity
        self._max_hops = max_hops
        self._clock = clock
        self._crawl_log = crawl_log
        self._pending = 0
        self.counters = IntakeCounts()

    # ----------------------------------------------------------------- questions
    def needs_backout(self) -> bool:
        return self._pending >= self._capacity

    def admit(self) -> None:
        """Raise InboundFull (counted) when nothing more can be taken now."""
        if self.needs_backout():
            self.counters.inbound_rejected_batches += 1
            raise InboundFull(retry_after_s=1.0)

    def idle(self) -> bool:
        return self._pending == 0

    def snapshot(self) -> IntakeSnapshot:
        counters = self.counters
        return IntakeSnapshot(
            queue=QueueSnapshot(depth=self._pending, capacity=self._capacity, oldest_age_s=0.0,
                                blocked_puts=counters.inbound_rejected_batches),
            counters=IntakeCounters(submitted=counters.submitted, rejected=counters.rejected,
                                    forwarded=counters.forwarded, queued_replicas=counters.queued_replicas),
            peers=IntakePeerCounters(received_forwarded_on=counters.received_forwarded_on,
                                     hop_limit_kept=counters.hop_limit_kept))

    # ----------------------------------------------------------------- the path in
    def prepare(self, items: Iterable[str | Mapping[str, Any]], *, priority: int = SEED_PRIORITY) -> Prepared:
        """Normalise and scope-check URLs (strings, or {"url", "depth"?, "priority"?, "hops"?,
        "redirects"?})."""
        prepared = Prepared()
        check = self._scope.check
        entries = prepared.entries
        for index, item in enumerate(items):
            fields: Mapping[str, Any] = {"url": item} if isinstance(item, str) else item
            raw = fields["url"]
            # A peer's rows are canonical, and most canonical URLs are plain: for those the
            # shortcut gives what normalize_url gives, at ~60% of its cost (urls.resolve_plain).
            url = resolve_plain(raw, "", "") if raw.startswith(_PLAIN_SCHEMES) else None
            if url is None:
                try:
                    url = normalize_url(raw)
                except InvalidURL as exc:
                    prepared.invalid.append((index, raw, exc.reason))
                    continue
            depth = int(fields.get("depth") or 0)
            redirects, via = int(fields.get("redirects") or 0), fields.get("via")
            reason = check(url, depth, source_of(via, redirects))
            if reason is not None:
                prepared.out_of_scope.append((url, reason))
                continue
            entries.append(UrlEntry(url, host_of(url), depth, int(fields.get("priority", priority)),
                                    int(fields.get("hops") or 0), redirects, via))
        return prepared

    async def submit(self, urls: Iterable[str | Mapping[str, Any]], *,
                     priority: int = SEED_PRIORITY) -> tuple[AddResult, Prepared]:
        """Seeds and submitted URLs: whatever is malformed or out of scope is counted as rejected."""
        prepared = self.prepare(urls, priority=priority)
        result = await self.take(prepared.entries)
        self.rejected(len(prepared.invalid) + len(prepared.out_of_scope))
        return result, prepared

    def rejected(self, count: int) -> None:
        self.counters.rejected += count

    async def take(self, entries: list[UrlEntry], *, seen: bool = False, replica: bool = False,
                   politeness: Sequence[HostPoliteness] = (), refreshes: Sequence[HostRefresh] = ()) -> AddResult:
        """Durably take URLs in: this node's own go to its frontier, the others to the owner's
        outbox. Returns only after the commit. Raises InboundFull instead of queueing more.
        ``seen``: fetched elsewhere — recorded where it lands, never forwarded: in the frontier
        for hosts served here (handback, join), as a replica for the others. ``replica``:
        queued by their owner — kept as its replica (frontier.replica), or queued here for
        hosts served here. ``politeness``: of the sender's hosts, kept with its replica;
        ``refreshes``: the sender's refresh of its replica here (with ``replica``). What is
        queued here is replicated to its hosts' successors."""
        if self._pending and self._pending + len(entries) > self._capacity:
            self.counters.inbound_rejected_batches += 1
            raise InboundFull(retry_after_s=1.0)
        ring = self._ring
        forward: list[tuple[str, UrlEntry]] = []
        replicas: list[str] = []
        queued_replicas: list[UrlEntry] = []
        if seen:
            mine = [e for e in entries if ring.serves(e.host)]
            replicas = [e.url for e in entries if not ring.serves(e.host)]
        elif replica:
            mine = [e for e in entries if ring.serves(e.host)]
            queued_replicas = [e for e in entries if not ring.serves(e.host)]
            self.counters.queued_replicas += len(queued_replicas)
        else:
            mine, forward = self._route_received(entries)
        successors = {} if seen or ring.is_single else self._successors(mine)
        if politeness:
            # Of the hosts crawled here (a handback): honoured now, besides kept (a record
            # made later inherits it from the replica's politeness).
            self._honour([record for record in politeness if ring.serves(record.host)])
        self._pending += len(entries)
        try:
            result = await self._frontier.take_in(mine, forward, seen, replicas, queued_replicas=queued_replicas,
                                                  successors=successors, politeness=politeness,
                                                  refreshes=refreshes if replica else ())
        finally:
            self._pending -= len(entries)
        outboxed = Counter(peer for peer, _ in forward)
        if successors:
            outboxed.update(peer for entry in result.accepted if (peer := successors.get(entry.host)))
        if outboxed:
            self._outboxes.note_outboxed(outboxed)
        self._hosts.add_queued(result, self._clock())
        self.counters.submitted += len(result.accepted)
        self.counters.forwarded += len(forward)
        result.forwarded = len(forward)
        if result.capped and self._crawl_log is not None:
            await self._crawl_log.log_capped(result.capped)  # counted there, with the crawl's other lines
        return result

    def _honour(self, records: list[HostPoliteness]) -> None:
        now = self._clock()
        self._hosts.honour([clamped(record, now) for record in records], now)

    def _successors(self, entries: list[UrlEntry]) -> dict[str, str]:
        """host -> its successor, for the hosts of ``entries`` that have one."""
        successor_for = self._ring.successor_for
        return {host: successor for host in {entry.host for entry in entries}
                if (successor := successor_for(host)) is not None}

    def _route_received(self, entries: list[UrlEntry]) -> tuple[list[UrlEntry], list[tuple[str, UrlEntry]]]:
        """Split URLs that arrived here: keep this node's, pass the rest on — at most
        ``max_hops`` times, after which a URL stays where it is (views that disagree for a
        moment must neither drop a URL nor bounce it forever)."""
        ring = self._ring
        if ring.is_single:
            return entries, []
        mine: list[UrlEntry] = []
        forward: list[tuple[str, UrlEntry]] = []
        for entry in entries:
            owner = ring.route(entry.host)
            if owner is None:
                mine.append(entry)
            elif entry.hops >= self._max_hops:
                self.counters.hop_limit_kept += 1
                mine.append(entry)
            else:
                entry.hops += 1
                forward.append((owner, entry))
        self.counters.received_forwarded_on += len(forward)
        return mine, forward
