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
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any, Protocol

from crawler_node.cluster.wire import Item, UrlsBody
from crawler_node.config import IntakeConfig
from crawler_node.core.scope import Scope, source_of
from crawler_node.core.stats import Indexed, counter, stat
from crawler_node.core.urls import InvalidURL, host_of, normalize_url, resolve_plain
from crawler_node.frontier import AddResult, FrontierService, HostPoliteness, HostRefresh, InboundBatch, UrlEntry
from crawler_node.frontier.replica import clamped
from crawler_node.node.hosts import HostTable
from crawler_node.node.queues import QueueSnapshot
from crawler_node.node.stage_items import SEED_PRIORITY, InboundFull, Routes

log = logging.getLogger("crawler_node.intake")

_PLAIN_SCHEMES = ("http://", "https://")



class OutboxNotes(Protocol):
    def note_outboxed(self, counts: Mapping[str, int]) -> None: ...


class CappedLog(Protocol):
    async def log_capped(self, entries: list[UrlEntry]) -> None: ...


@dataclass(slots=True)
class Prepared:
    """URLs that arrived, checked (normalised, in scope), by what the sender says of them: the
    intake's one input (``Intake.take``). What was turned away is listed, not taken."""

    entries: list[UrlEntry] = field(default_factory=list)  # to crawl
    # a member's only (cluster.wire): URLs it fetched, URLs it queued, its politeness, its refresh
    seen: list[UrlEntry] = field(default_factory=list)
    replica: list[UrlEntry] = field(default_factory=list)
    politeness: list[HostPoliteness] = field(default_factory=list)
    refreshes: list[HostRefresh] = field(default_factory=list)
    invalid: list[tuple[int, str, str]] = field(default_factory=list)  # (index, url, reason): malformed
    out_of_scope: list[tuple[str, str]] = field(default_factory=list)  # (url, reason)

    def __len__(self) -> int:
        return len(self.entries) + len(self.seen) + len(self.replica)


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

    def __init__(self, *, config: IntakeConfig, frontier: FrontierService, hosts: HostTable, router: Routes,
                 outboxes: OutboxNotes, scope: Scope, clock: Callable[[], float],
                 crawl_log: CappedLog | None = None) -> None:
        """``crawl_log`` writes the lines of URLs past their host's page cap (None: unlogged);
        ``config``: URLs waiting for the frontier, at most (``inbound_capacity``), and times a URL
        may be passed on by a member that disagrees on its owner (``max_hops``)."""
        self._frontier = frontier
        self._hosts = hosts
        self._router = router
        self._outboxes = outboxes
        self._scope = scope
        self._capacity = config.inbound_capacity
        self._max_hops = config.max_hops
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
        "redirects"?, "via"?}) to crawl."""
        prepared = Prepared()
        self._check(items, prepared, prepared.entries, priority)
        return prepared

    def prepare_body(self, body: UrlsBody) -> Prepared:
        """A POST /v1/urls body (cluster.wire), checked: ``invalid`` by the items' indexes there."""
        prepared = Prepared(politeness=body.politeness, refreshes=body.refreshes)
        for items, entries in ((body.crawl, prepared.entries), (body.seen, prepared.seen),
                               (body.replica, prepared.replica)):
            self._check_items(items, prepared, entries)
        return prepared

    def _check_items(self, items: list[Item], prepared: Prepared, entries: list[UrlEntry]) -> None:
        start = len(prepared.invalid)
        self._check([item for _, item in items], prepared, entries, SEED_PRIORITY)
        prepared.invalid[start:] = [(items[position][0], url, reason)
                                    for position, url, reason in prepared.invalid[start:]]

    def _check(self, items: Iterable[str | Mapping[str, Any]], prepared: Prepared, entries: list[UrlEntry],
               priority: int) -> None:
        check = self._scope.check
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

    async def submit(self, urls: Iterable[str | Mapping[str, Any]], *,
                     priority: int = SEED_PRIORITY) -> tuple[AddResult, Prepared]:
        """Seeds and submitted URLs: whatever is malformed or out of scope is counted as rejected."""
        prepared = self.prepare(urls, priority=priority)
        result = await self.take(prepared)
        self.rejected(len(prepared.invalid) + len(prepared.out_of_scope))
        return result, prepared

    def rejected(self, count: int) -> None:
        self.counters.rejected += count

    async def take(self, prepared: Prepared) -> AddResult:
        """Durably take URLs in, in one transaction of the frontier (InboundBatch), and return
        only after its commit. Raises InboundFull instead of queueing more.

        - To crawl (``entries``): this node's own go to its frontier, the others to their
          owner's outbox (``_route_received``).
        - ``seen``, fetched by another member: recorded where it lands, never forwarded: in the
          frontier for hosts served here (handback, join), as a replica for the others.
        - ``replica``, queued by their owner: kept as its replica (frontier.replica), or queued
          here for hosts served here; with the sender's ``politeness`` (kept with its replica,
          and honoured now for hosts served here) and its ``refreshes`` of its replica here.

        What is queued here is replicated to its hosts' successors."""
        size = len(prepared)
        if self._pending and self._pending + size > self._capacity:
            self.counters.inbound_rejected_batches += 1
            raise InboundFull(retry_after_s=1.0)
        router = self._router
        serves = router.serves
        batch = InboundBatch(politeness=prepared.politeness, refreshes=prepared.refreshes)
        batch.add, batch.forward = self._route_received(prepared.entries)
        for entry in prepared.seen:
            if serves(entry.host):
                batch.seen.append(entry)
            else:
                batch.fetched_replicas.append(entry.url)
        for entry in prepared.replica:
            (batch.add if serves(entry.host) else batch.queued_replicas).append(entry)
        self.counters.queued_replicas += len(batch.queued_replicas)
        if not router.is_single:
            batch.successors = self._successors(batch.add)
        if prepared.politeness:
            # Of the hosts crawled here (a handback): honoured now, besides kept (a record
            # made later inherits it from the replica's politeness).
            self._honour([record for record in prepared.politeness if serves(record.host)])
        self._pending += size
        try:
            result = await self._frontier.take_in(batch)
        finally:
            self._pending -= size
        outboxed = Counter(peer for peer, _ in batch.forward)
        if batch.successors:
            outboxed.update(peer for entry in result.accepted if (peer := batch.successors.get(entry.host)))
        if outboxed:
            self._outboxes.note_outboxed(outboxed)
        self._hosts.add_queued(result, self._clock())
        self.counters.submitted += len(result.accepted)
        self.counters.forwarded += len(batch.forward)
        result.forwarded = len(batch.forward)
        if result.capped and self._crawl_log is not None:
            await self._crawl_log.log_capped(result.capped)  # counted there, with the crawl's other lines
        return result

    def _honour(self, records: list[HostPoliteness]) -> None:
        now = self._clock()
        self._hosts.honour([clamped(record, now) for record in records], now)

    def _successors(self, entries: list[UrlEntry]) -> dict[str, str]:
        """host -> its successor, for the hosts of ``entries`` that have one."""
        successor_for = self._router.successor_for
        return {host: successor for host in {entry.host for entry in entries}
                if (successor := successor_for(host)) is not None}

    def _route_received(self, entries: list[UrlEntry]) -> tuple[list[UrlEntry], list[tuple[str, UrlEntry]]]:
        """Split URLs that arrived here: keep this node's, pass the rest on — at most
        ``max_hops`` times, after which a URL stays where it is (views that disagree for a
        moment must neither drop a URL nor bounce it forever)."""
        router = self._router
        if router.is_single:
            return entries, []
        mine: list[UrlEntry] = []
        forward: list[tuple[str, UrlEntry]] = []
        for entry in entries:
            owner = router.route(entry.host)
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
