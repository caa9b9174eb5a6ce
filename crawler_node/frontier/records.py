"""What the frontier hands out and takes in: URLs, leases, per-host records, outcome batches.

Plain data, no I/O. The row states are the codes stored in `urls.state`; operators and tests
read them there, so they never change.
"""

from __future__ import annotations

from collections import Counter
from dataclasses import dataclass, field

# Row states. They appear as literals in the frontier's SQL because SQLite only uses a partial
# index when the query's WHERE clause repeats the index's condition literally.
QUEUED = 0
LEASED = 1  # in memory and in the counts; stored as state 0 with a row in `leases` (layout 8)
DONE = 2
FAILED = 3
DEFERRED = 4  # parked by load shedding: in the seen-set, not leased, restored later
STATES = (QUEUED, LEASED, DONE, FAILED, DEFERRED)


@dataclass(slots=True)
class UrlEntry:
    """A URL to crawl; `url` is already normalised. Higher priority is leased sooner.

    `hops`: times the URL was forwarded on by nodes that disagreed on its owner.
    `redirects`: redirects followed to reach it (0 for a link or a seed); it travels with a
    redirect's target as depth does with a link, so a chain ends at --max-redirects.
    `via`: the URL of the page it was found on (None for a seed or a submitted URL). Last, so
    entries built positionally before it existed still mean what they did."""

    url: str
    host: str
    depth: int = 0
    priority: int = 0
    hops: int = 0
    redirects: int = 0
    via: str | None = None


@dataclass(slots=True)
class Lease:
    """One leased URL. `attempts` counts this attempt (1 on the first lease).

    `etag`, `last_modified` and `visits` are what the last recorded fetches left (see
    `FrontierBatch.recrawl`): a recrawl sends them back as If-None-Match / If-Modified-Since.
    """

    id: int
    url: str
    host: str
    depth: int
    priority: int
    attempts: int
    hops: int
    redirects: int = 0
    via: str | None = None
    etag: str | None = None
    last_modified: str | None = None
    visits: int = 0  # fetches recorded through `FrontierBatch.recrawl` before this lease
    history: bytes | None = None  # what its recrawls saw (core.change_rate.History, packed)


@dataclass(frozen=True, slots=True)
class HostPoliteness:
    """The durable part of a host's politeness, one row of the `hosts` table.

    `next_eligible` is wall-clock time: a Retry-After pause or a backoff ends then.
    `crawl_delay` comes from robots.txt. The node decides these; the frontier only keeps them.
    """

    host: str
    next_eligible: float = 0.0
    crawl_delay: float = 0.0
    backoff_level: int = 0
    last_throttle: float | None = None

    @property
    def is_default(self) -> bool:
        """Nothing to remember: a host never throttled, without a crawl delay."""
        return (
            self.next_eligible == 0.0 and self.crawl_delay == 0.0
            and self.backoff_level == 0 and self.last_throttle is None
        )


@dataclass(frozen=True, slots=True)
class HostRefresh:
    """What a batch says of a host's refresh: its queued replicas in the batch are part of the
    refresh `token`; `complete`: the refresh ends in this batch (frontier.replica)."""

    host: str
    token: str
    complete: bool = False


@dataclass(slots=True)
class HostQueue:
    """The in-memory record of one host that has work (queued, leased or deferred rows).

    `queued` includes URLs waiting for a retry time. `politeness` is the host's stored row as
    loaded when this record was created (None when that row is all defaults)."""

    host: str
    queued: int = 0
    leased: int = 0
    deferred: int = 0
    politeness: HostPoliteness | None = None

    @property
    def idle(self) -> bool:
        """No work left: the record may leave memory (its durable part stays on disk)."""
        return not (self.queued or self.leased or self.deferred)


@dataclass(slots=True)
class AddResult:
    accepted: list[UrlEntry]  # new to the seen-set: queued, or deferred by load shedding
    duplicates: int  # known already (neither accepted nor capped)
    deferred: list[UrlEntry] = field(default_factory=list)  # the accepted ones parked on arrival
    # The stored politeness of the hosts whose record this call (re)created, when not all
    # defaults: the node may have dropped its own state of those hosts long ago.
    politeness: dict[str, HostPoliteness] = field(default_factory=dict)
    # New URLs of hosts that had max_pages_per_host accepted already: neither queued nor in the
    # seen-set (found again, they are turned away again), for the caller to log
    capped: list[UrlEntry] = field(default_factory=list)
    forwarded: int = 0  # passed on to their owners' outboxes (the node's intake sets it)
    # Hosts of accepted URLs that are parked (no record: frontier.host_records): their URLs wait on
    # disk for the host's turn, and are not work for the host table until `unpark` says so
    parked: set[str] = field(default_factory=set)
    # done rows queued again by `FrontierBatch.refetch`, per active host (work for the host table)
    refetched: Counter[str] = field(default_factory=Counter)

    @property
    def queued(self) -> list[UrlEntry]:
        """The accepted URLs that went into the queue of an active host (work for the host
        table now): not those deferred, nor those of parked hosts."""
        if not self.deferred and not self.parked:
            return self.accepted
        deferred = {id(entry) for entry in self.deferred}
        parked = self.parked
        return [entry for entry in self.accepted if id(entry) not in deferred and entry.host not in parked]


@dataclass(slots=True)
class FrontierBatch:
    """Outcomes collected by the node, applied by `Frontier.apply` in one transaction."""

    done: list[int] = field(default_factory=list)
    failed: list[int] = field(default_factory=list)
    retry: list[tuple[int, float]] = field(default_factory=list)  # (lease id, not_before)
    returned: list[int] = field(default_factory=list)  # never attempted: attempt not counted
    # refused before reaching the site (a fetch-through API's limit): back to the queue
    # until not_before, the attempt not counted, so the retry budget is not spent on it
    postponed: list[tuple[int, float]] = field(default_factory=list)
    add: list[UrlEntry] = field(default_factory=list)
    forward: list[tuple[str, UrlEntry]] = field(default_factory=list)  # (peer, url) to the outbox
    replicate: list[tuple[str, UrlEntry]] = field(default_factory=list)  # fetched here: tell the successor
    # host -> its politeness now, for the hosts in `replicate` that have some (a Crawl-delay,
    # a pause): it travels with the replica, so a takeover honours it (frontier.replica)
    politeness: dict[str, HostPoliteness] = field(default_factory=dict)
    # host -> its successor, for the hosts in `add`: the URLs queued of them are replicated there
    successors: dict[str, str] = field(default_factory=dict)
    # (lease id, due_at, etag, last_modified) of leases also in `done` whose fetch is recorded:
    # the validators are kept, `visits` counts one more, and the row is due again at due_at
    # (None: never; a done lease not listed here keeps due_at NULL too). See Frontier.requeue_due.
    recrawl: list[tuple[int, float | None, str | None, str | None]] = field(default_factory=list)
    # lease id -> the URL's history after this fetch (core.change_rate.History, packed), for
    # ids in `recrawl`: stored with it (an id not here keeps the history it had)
    histories: dict[int, bytes] = field(default_factory=dict)
    # done URLs to fetch once more (a redirect back into its own chain, with cookies on), after
    # the outcomes above: see Recrawl.refetch
    refetch: list[str] = field(default_factory=list)


@dataclass(slots=True)
class InboundBatch:
    """URLs that arrived from outside the node (a user's, a seed, a member's batch), routed by
    the node's intake and taken in by `Frontier.take_in` in one transaction: the mirror of
    `FrontierBatch`. All of it is committed before the sender is answered; a crash before that
    makes the sender send again, and receivers deduplicate."""

    add: list[UrlEntry] = field(default_factory=list)  # of hosts served here: queued if new
    forward: list[tuple[str, UrlEntry]] = field(default_factory=list)  # (member, url) owed to it: the outbox
    # fetched by another member, of hosts served here (a handback, a join): recorded as fetched
    seen: list[UrlEntry] = field(default_factory=list)
    # a neighbour's replica (frontier.replica): URLs it fetched, URLs it queued, its hosts' politeness
    fetched_replicas: list[str] = field(default_factory=list)
    queued_replicas: list[UrlEntry] = field(default_factory=list)
    politeness: list[HostPoliteness] = field(default_factory=list)
    # the neighbour's refresh of its replica here, of which `queued_replicas` are part
    refreshes: list[HostRefresh] = field(default_factory=list)
    # host -> its successor, for the hosts in `add`: the URLs queued of them are replicated there
    successors: dict[str, str] = field(default_factory=dict)

    def __len__(self) -> int:
        return (len(self.add) + len(self.forward) + len(self.seen) + len(self.fetched_replicas)
                + len(self.queued_replicas))


def snapshot(record: HostQueue) -> HostQueue:
    """A copy of a record for callers (the live one belongs to the frontier)."""
    # Spelled out: 7x faster than dataclasses.replace, and the node snapshots every host
    # with work each time it schedules. `politeness` is frozen: shared, not copied.
    return HostQueue(record.host, record.queued, record.leased, record.deferred, record.politeness)
