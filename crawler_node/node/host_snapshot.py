"""What the host table shows of its hosts: one host's snapshot (the status's busiest hosts, and
/metrics for the pinned ones), and the table's (the status's ``host_table``)."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field

from crawler_node.core.robots import RobotsCacheSnapshot
from crawler_node.core.stats import Indexed, counter, gauge, stat


@dataclass(frozen=True, slots=True)
class AuthorityRobotsSnapshot:
    status: str
    failures: int
    error: str | None
    crawl_delay_s: float
    since: float


@dataclass(frozen=True, slots=True)
class HostSnapshot(Indexed):
    """One host, as the status's busiest hosts show it, and /metrics for the pinned ones
    (api.metrics.PinnedHosts): one series of each a host."""

    host: str = field(metadata=stat(is_label=("host",)))
    in_flight: int = field(metadata=gauge("crawler_host_in_flight", "In-flight requests of each pinned host",
                                          labels=("host",)))
    limit: int = field(metadata=gauge("crawler_host_limit", "Current AIMD concurrency limit of each pinned host",
                                      labels=("host",)))
    limit_decreases: int
    queued: int
    fetched: int = field(metadata=counter("crawler_host_attempts", "Requests that reached each pinned host",
                                          labels=("host",)))
    throttled: int = field(metadata=counter("crawler_host_throttled", "429/503 answers of each pinned host",
                                            labels=("host",)))
    errors: int
    retries: int = field(metadata=counter("crawler_host_retries", "Retries of each pinned host", labels=("host",)))
    retry_ratio: float = field(metadata=gauge("crawler_host_retry_ratio", "Retries per request of each pinned host",
                                              labels=("host",)))
    crawl_delay_s: float
    throttle_point: int | None
    latency_baseline_ms: float | None
    latency_rises: int
    backoffs: int
    backoff_level: int
    api_refused: int
    ip: str | None
    place: str
    next_eligible: float
    robots: Mapping[str, AuthorityRobotsSnapshot]
    held: str | None
    # One judgment of the site (core.site_health): its state, 0-100 score and the reasons
    health: str = "healthy"
    health_score: int = 100
    health_reasons: tuple[str, ...] = ()
    refusals: int = 0  # answers that were a refusal of any kind (core.refusals)
    refusal_pauses: int = 0


@dataclass(frozen=True, slots=True)
class HeldHost:
    host: str
    reason: str


@dataclass(frozen=True, slots=True)
class HeldHosts:
    """Hosts whose robots.txt keeps their URLs back, and why (the first few)."""

    count: int
    hosts: tuple[HeldHost, ...]


@dataclass(frozen=True, slots=True)
class HostTableSnapshot(Indexed):
    """The status's ``host_table``, and its busiest hosts (the status's ``hosts``)."""

    in_memory: int
    collected: int
    places: Mapping[str, int] = field(metadata=gauge("crawler_hosts", "Known hosts by scheduling state",
                                                     labels=("place",)))
    robots_cache: RobotsCacheSnapshot
    held: HeldHosts
    busiest: tuple[HostSnapshot, ...] = field(metadata=stat(json=False, scrape=False))
    health: Mapping[str, int] = field(default_factory=dict, metadata=gauge(
        "crawler_hosts_health", "Hosts in memory by health state (core.site_health)", labels=("state",)))
    # The unhealthy hosts with the lowest health scores, worst first (the dashboard's worst hosts)
    worst: tuple[HostSnapshot, ...] = field(default=(), metadata=stat(scrape=False))
