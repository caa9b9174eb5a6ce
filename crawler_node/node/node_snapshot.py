"""The node's snapshot: its components' snapshots, gathered once (``Node.snapshot``), in the
shape of ``GET /v1/status``.

Each section of the status is a field here, and a section that gathers several components'
counters holds their snapshots side by side (``flat``): its JSON is theirs, merged. The JSON is
``core.stats.to_json`` of this object, and /metrics walks the same object (api.metrics), so a
quantity has one definition, in the component that owns it, and one declaration, beside its
field there. api.status adds the cluster view on top (each member's own status, ``crawl_state``).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field

from crawler_node.cluster.cluster_snapshot import ClusterCounters, ClusterEvent, MemberSnapshot
from crawler_node.cluster.heartbeats import HeartbeatsSnapshot
from crawler_node.cluster.peerdns import PeerDnsSnapshot
from crawler_node.core.crawl_totals import TotalsSnapshot
from crawler_node.core.histogram import HistogramSnapshot
from crawler_node.core.shed_policy import ARRIVED_WHILE_SHEDDING, QUEUE_OVER_HIGH_WATER, ShedPolicySnapshot
from crawler_node.core.stats import counter, gauge, histogram, info, stat
from crawler_node.fetch.dns import DnsSnapshot
from crawler_node.frontier.frontier_snapshot import FrontierTotals
from crawler_node.node.admission import AdmissionGate, ApiSnapshot, PauseSnapshot
from crawler_node.node.budget import HeldSnapshot
from crawler_node.node.dispatch import DispatchSnapshot
from crawler_node.node.fetch_stage import FetchCounters, FetchesSnapshot, RetrySnapshot
from crawler_node.node.host_snapshot import HostSnapshot, HostTableSnapshot
from crawler_node.node.intake import IntakeCounters, IntakePeerCounters
from crawler_node.node.ip_gates import IpSnapshot
from crawler_node.node.leases import LeaseSnapshot
from crawler_node.node.parse_stage import ParseSnapshot
from crawler_node.node.queues import FrontierQueueSnapshot, QueueSnapshot
from crawler_node.node.store_stage import StoreSnapshot
from crawler_node.node.upkeep import UpkeepCounters
from crawler_node.runtime.supervisor import SupervisorSnapshot

TOP_HOSTS = 20  # the busiest hosts the status shows
DEFERRAL_REASONS = (QUEUE_OVER_HIGH_WATER, ARRIVED_WHILE_SHEDDING)  # each a series from the start
_FLAT = stat(flat=True)


@dataclass(frozen=True, slots=True)
class Counters:
    """The status's ``counters``: each stage's, side by side."""

    store: StoreSnapshot = field(metadata=_FLAT)
    fetch: FetchCounters = field(metadata=_FLAT)
    intake: IntakeCounters = field(metadata=_FLAT)
    leases: LeaseSnapshot = field(metadata=_FLAT)
    parse: ParseSnapshot = field(metadata=_FLAT)
    upkeep: UpkeepCounters = field(metadata=_FLAT)


@dataclass(frozen=True, slots=True)
class Rates:
    fetched_per_s: float


@dataclass(frozen=True, slots=True)
class Queues:
    """Every stage's queue (rule 8), each under the name its series carry."""

    inbound: QueueSnapshot = field(metadata=stat(at={"stage": "inbound"}))
    frontier: FrontierQueueSnapshot = field(metadata=stat(at={"stage": "frontier"}))
    fetch: DispatchSnapshot = field(metadata=stat(at={"stage": "fetch"}))
    parse: QueueSnapshot = field(metadata=stat(at={"stage": "parse"}))
    store: QueueSnapshot = field(metadata=stat(at={"stage": "store"}))


@dataclass(frozen=True, slots=True)
class Admission:
    """The status's ``admission``: the gate, and the bytes held between fetch and store."""

    gate: AdmissionGate = field(metadata=_FLAT)
    held: HeldSnapshot = field(metadata=_FLAT)


@dataclass(frozen=True, slots=True)
class SheddingStatus:
    """Load shedding (rule 7): the policy's state, and what the frontier deferred."""

    policy: ShedPolicySnapshot = field(metadata=_FLAT)
    deferred_now: int
    deferred_total: int
    deferred_by_reason: Mapping[str, int] = field(metadata=counter(
        "crawler_shed_deferred", "URLs deferred by load shedding, by reason", labels=("reason",),
        zeros=DEFERRAL_REASONS))
    restored_total: int = field(metadata=counter("crawler_shed_restored", "Deferred URLs queued again"))
    cut_priority: int | None


@dataclass(frozen=True, slots=True)
class ClusterCountersSection:
    cluster: ClusterCounters = field(metadata=_FLAT)
    intake: IntakePeerCounters = field(metadata=_FLAT)


@dataclass(frozen=True, slots=True)
class ClusterSection:
    """The status's ``cluster``: what this node exchanged with its peers."""

    counters: ClusterCountersSection
    events: tuple[ClusterEvent, ...]
    heartbeats: HeartbeatsSnapshot
    outbox_total: int
    peer_dns: PeerDnsSnapshot | None


@dataclass(frozen=True, slots=True)
class NodeSnapshot:
    """``GET /v1/status?scope=local``, field by field."""

    node_id: str
    url: str
    idle: bool  # nothing queued, leased or deferred in the frontier, nothing in flight in any stage
    stopping: bool
    # an operator's pause (crawler-node pause): no new fetch until resumed
    paused: bool = field(metadata=gauge("crawler_paused", "1 while an operator has paused the crawl"))
    pause: PauseSnapshot
    uptime_s: float
    # Unix time of the last fetch attempt written to the store and committed to the frontier
    # (null before the first): an idle node's crawl ended then; a busy node whose value stops
    # moving is stalled.
    last_stored_at: float | None = field(metadata=gauge(
        "crawler_last_stored_timestamp_seconds",
        "Unix time of the last fetch attempt written to the store and the frontier"))
    counters: Counters
    rates: Rates
    frontier: FrontierTotals
    queues: Queues
    admission: Admission
    api: ApiSnapshot
    shedding: SheddingStatus
    retries: RetrySnapshot
    ip: IpSnapshot
    hosts: tuple[HostSnapshot, ...] = field(metadata=stat(scrape=False))  # the busiest now: /metrics pins its own
    host_table: HostTableSnapshot
    members: tuple[MemberSnapshot, ...]
    cluster: ClusterSection
    dns: DnsSnapshot | None
    supervisor: SupervisorSnapshot
    leases_expired: int
    # page fetches: durations, body sizes (histograms), answers by status class, bytes received
    fetches: FetchesSnapshot
    # every crawl.log line of this data directory, counted: durable, cumulative across restarts
    totals: TotalsSnapshot
    # the frontier's calls on the crawl's path (histograms), the wait for its thread included
    frontier_calls: Mapping[str, HistogramSnapshot] = field(metadata=histogram(
        "crawler_frontier_call_duration_seconds",
        "Time of each frontier call on the crawl's path, its wait for the frontier's thread included",
        labels=("call",)))
    # /metrics only. The start stands in for the last store until there is one (alerts: a node
    # stalled from its start).
    start_time_s: float = field(metadata=gauge("crawler_start_time_seconds", "Unix time the node started",
                                               json=False))
    version: str = field(metadata=info("crawler_build", "The crawler's version (always 1)", labels=("version",),
                                       json=False))


def is_idle(queued: int, leased: int, deferred: int, pipeline_idle: bool) -> bool:
    """Nothing queued, leased or deferred in the frontier and nothing in flight in any stage."""
    return queued == 0 and leased == 0 and deferred == 0 and pipeline_idle
