"""What the cluster shows of itself (the status's ``members`` and ``cluster``, and the /metrics
series of each member): snapshots, made by cluster.Cluster."""

from __future__ import annotations

from dataclasses import dataclass, field

from crawler_node.cluster.fencing import FencingSnapshot
from crawler_node.cluster.forwarding import OutboxCounters
from crawler_node.cluster.heartbeats import HeartbeatsSnapshot
from crawler_node.cluster.peerdns import PeerDnsSnapshot
from crawler_node.cluster.replica_keeper import ReplicaCounters
from crawler_node.core.stats import counter, gauge, stat


@dataclass(frozen=True, slots=True)
class MemberSnapshot:
    """One member as this node sees it (itself included)."""

    id: str = field(metadata=stat(is_label=("member", "peer")))
    url: str
    state: str
    is_self: bool = field(metadata=stat(key="self"))
    # "left": said goodbye and handed all its work on; "leaving": said goodbye, not (yet) that it
    # was drained: killed mid-drain, it still holds work, and the cluster is not idle.
    left: bool
    leaving: bool
    arc_share: float
    outbox: int  # rows this node owes it
    heartbeat_age_s: float  # since it last answered a heartbeat (0 for this node)
    # /metrics only. One that left on purpose (--handoff-on-exit) is not down: no series (None).
    up: int | None = field(metadata=gauge("crawler_member_up", "1 while a member is alive in this node's view "
                                          "(suspect or down: 0)", labels=("member",), json=False))
    # the peers' (None for this node)
    peer_outbox: int | None = field(metadata=gauge("crawler_outbox_urls",
                                                   "URLs this node's outbox holds for each peer", labels=("peer",),
                                                   json=False))
    heartbeat_failures: int | None = field(metadata=counter(
        "crawler_heartbeat_failures", "Heartbeats to each peer that failed or got something else than a member list",
        labels=("peer",), json=False))


@dataclass(frozen=True, slots=True)
class ClusterEvent:
    at: float
    event: str
    live: tuple[str, ...]  # the live members after it


@dataclass(frozen=True, slots=True)
class ClusterCounters:
    """The cluster's own part of the status's ``cluster.counters``."""

    outbox: OutboxCounters = field(metadata=stat(flat=True))
    handed_off: int  # URLs of hosts no longer owned here, handed to their owners (cluster.sweep)
    replica: ReplicaCounters = field(metadata=stat(flat=True))
    # URLs peers forwarded here to crawl (the other end of "forwarded")
    received: int = field(metadata=counter("crawler_received_urls", "URLs peers forwarded here (their forwarded)"))


@dataclass(frozen=True, slots=True)
class ClusterSnapshot:
    members: tuple[MemberSnapshot, ...]
    counters: ClusterCounters
    events: tuple[ClusterEvent, ...]  # the last membership changes
    outbox_total: int
    heartbeats: HeartbeatsSnapshot
    leaving: bool
    fencing: FencingSnapshot
    peer_dns: PeerDnsSnapshot | None
