"""Prometheus exposition of the node's pressure (rule 8), rendered at scrape time from the
same status dictionary that ``GET /v1/status`` answers with (api.status).

A custom collector rather than metric objects updated on every event: the hot path only bumps
plain counters (and plain counting histograms, core.histogram), and the registry is per node
(no global default registry), so tests can run several nodes in one process.

Per-host series are for a stable set of hosts (PinnedHosts), not for whichever are busiest at
the scrape: a series that comes and goes every few seconds makes ``rate()`` over its counter
meaningless. What holds for every host is in the aggregates (``crawler_hosts{place}``, the
overall retry ratio and attempts); one host's detail is ``crawler-node hosts`` / ``/v1/status``.
"""

from __future__ import annotations

import time
from collections.abc import Awaitable, Callable, Iterable, Iterator
from typing import TYPE_CHECKING

from prometheus_client import CollectorRegistry, generate_latest
from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily, HistogramMetricFamily, Metric
from prometheus_client.utils import floatToGoString

from crawler_node import __version__
from crawler_node.api.status import node_status
from crawler_node.core.shedding import ARRIVED_WHILE_SHEDDING, QUEUE_OVER_HIGH_WATER
from crawler_node.core.stats import to_json

if TYPE_CHECKING:
    from crawler_node.node.node import Node


# The crawl.log outcomes of URLs the scope or a trap guard turns away, each a status counter.
TURNED_AWAY = ("out_of_scope", "repeated_segments", "path_too_deep", "too_many_query_params", "denied_url",
               "host_page_cap", "host_dropped")


class NodeCollector:
    """Renders the status dictionary of one scrape (api.status.node_status)."""

    def __init__(self) -> None:
        self.status: dict = {}
        self.hosts: list[dict] = []  # the pinned hosts' snapshots (PinnedHosts.refresh)

    def collect(self) -> Iterator[Metric]:
        status = self.status
        if not status:
            return
        depth = GaugeMetricFamily("crawler_queue_depth", "Items waiting in each pipeline stage", labels=["stage"])
        age = GaugeMetricFamily("crawler_queue_oldest_age_seconds", "Age of the oldest item in each stage",
                                labels=["stage"])
        capacity = GaugeMetricFamily("crawler_queue_capacity", "Bound of each stage's queue", labels=["stage"])
        blocked = CounterMetricFamily("crawler_blocked_enqueues",
                                      "Enqueues that had to wait (or were refused) because a stage was full",
                                      labels=["stage"])
        for stage, snap in status["queues"].items():
            depth.add_metric([stage], snap.get("depth", 0))
            age.add_metric([stage], snap.get("oldest_age_s", 0.0))
            if "capacity" in snap:
                capacity.add_metric([stage], snap["capacity"])
            blocked.add_metric([stage], snap.get("blocked_puts", 0))
        yield from (depth, age, capacity, blocked)

        counters = status["counters"]
        outcomes = CounterMetricFamily("crawler_fetch_outcomes", "Fetch attempts by outcome", labels=["outcome"])
        for outcome, count in sorted(counters["outcomes"].items()):
            outcomes.add_metric([outcome], count)
        yield outcomes
        for name, key, help_text in (
            ("crawler_fetched", "fetched", "Fetch attempts written to the store"),
            ("crawler_retries", "retries", "Failed attempts sent back to the frontier for another try"),
            ("crawler_cookie_refetches", "cookie_refetches",
             "URLs fetched once more after a redirect back into their own chain (a cookie check)"),
            ("crawler_robots_disallowed", "robots_disallowed", "URLs skipped because robots.txt disallows them"),
            ("crawler_urls_submitted", "submitted", "URLs accepted through the API or as seeds"),
            ("crawler_urls_rejected", "rejected", "Submitted URLs rejected (scope, malformed)"),
            ("crawler_links_discovered", "links_discovered", "Links extracted from pages"),
            ("crawler_parse_errors", "parse_errors",
             "HTML pages stored without links: unparsable, or fatal to the parser"),
            ("crawler_parser_restarts", "parser_restarts", "Parser processes replaced after they died"),
            ("crawler_robots_unavailable", "robots_unavailable",
             "URLs ended unfetched because their robots.txt could not be had"),
            ("crawler_robots_fetched", "robots_fetched", "robots.txt requests (each redirect chain once)"),
            ("crawler_parse_truncated", "parse_truncated", "Pages whose links were read from max_parse_bytes only"),
            ("crawler_sitemaps", "sitemaps", "Sitemap files read"),
            ("crawler_sitemap_urls", "sitemap_urls", "URLs listed by the sitemaps read"),
            ("crawler_items", "items", "Items the pipelines made"),
            ("crawler_pipeline_errors", "pipeline_errors",
             "Pipeline runs that raised or returned what cannot be stored"),
            ("crawler_pipeline_timeouts", "pipeline_timeouts", "Pipeline runs stopped at --pipeline-budget-s"),
        ):
            yield _single(CounterMetricFamily, name, help_text, counters[key])
        yield _single(GaugeMetricFamily, "crawler_retry_ratio", "Retries per request that reached a host",
                      counters["retry_ratio"])
        # The start stands in for the last store until there is one (alerts: a node stalled from
        # its start), and the pause says a halt is an operator's.
        yield _single(GaugeMetricFamily, "crawler_start_time_seconds", "Unix time the node started",
                      round(time.time() - status["uptime_s"], 3))
        yield _single(GaugeMetricFamily, "crawler_paused", "1 while an operator has paused the crawl",
                      int(bool(status.get("paused", False))))
        if status["last_stored_at"] is not None:
            yield _single(GaugeMetricFamily, "crawler_last_stored_timestamp_seconds",
                          "Unix time of the last fetch attempt written to the store and the frontier",
                          status["last_stored_at"])
        yield _single(GaugeMetricFamily, "crawler_in_flight", "Requests in flight on this node",
                      status["queues"]["fetch"]["depth"])
        frontier = GaugeMetricFamily("crawler_frontier_urls", "URLs in the durable frontier by state",
                                     labels=["state"])
        for state in ("queued", "leased", "done", "failed", "deferred"):
            frontier.add_metric([state], status["frontier"].get(state, 0))
        yield frontier
        yield _single(GaugeMetricFamily, "crawler_frontier_parked_urls",
                      "Queued URLs of hosts waiting on disk for their turn (past --active-hosts)",
                      status["frontier"].get("parked_queued", 0))
        yield _single(GaugeMetricFamily, "crawler_frontier_active_hosts",
                      "Hosts with work the frontier keeps in memory",
                      status["frontier"].get("hosts_in_memory", 0))
        yield _single(CounterMetricFamily, "crawler_hosts_unparked", "Parked hosts given their turn",
                      counters["hosts_unparked"])
        yield _single(GaugeMetricFamily, "crawler_recrawl_due", "Fetched URLs due for their recrawl now",
                      status["frontier"].get("recrawl_due", 0))
        yield _single(GaugeMetricFamily, "crawler_recrawl_scheduled", "Fetched URLs with a recrawl scheduled",
                      status["frontier"].get("recrawl_scheduled", 0))
        yield _single(CounterMetricFamily, "crawler_recrawl_queued", "URLs queued again for their recrawl",
                      counters["recrawl_queued"])
        turned_away = CounterMetricFamily("crawler_urls_turned_away",
                                          "URLs never fetched: out of scope or stopped by a trap guard, by reason "
                                          "(each a crawl.log line with that outcome)", labels=["reason"])
        for reason in TURNED_AWAY:
            turned_away.add_metric([reason], counters.get(reason, 0))
        yield turned_away
        yield from _host_metrics(status, self.hosts)
        yield from pressure_metrics(status)
        yield from cluster_metrics(status)
        yield from fetch_metrics(status["fetches"])
        yield frontier_call_metric(status["frontier_calls"])
        build = GaugeMetricFamily("crawler_build_info", "The crawler's version (always 1)", labels=["version"])
        build.add_metric([__version__], 1)
        yield build


PINNED_HOSTS = 50
DEFERRAL_REASONS = (QUEUE_OVER_HIGH_WATER, ARRIVED_WHILE_SHEDDING)  # each a series from the start


class PinnedHosts:
    """The hosts that have per-host series. A host is pinned the first time a scrape finds it
    among the busiest while fewer than ``capacity`` are pinned. It stays pinned until it leaves
    the host table's memory (idle and collected, or its arc moved to another member). Then its
    place goes to a host that is busy at a later scrape.

    Why not the busiest N at each scrape: the busiest change every few seconds (15 of 20 were
    new within 6 s). Each pinned host's series run unbroken for as long as the node holds the
    host, and ``rate()`` over them means what it says. The set is bounded, so the series count
    is too. A host that leaves memory and comes back starts its counters again from 0, and
    Prometheus reads that as a counter reset.
    """

    def __init__(self, capacity: int = PINNED_HOSTS) -> None:
        if capacity < 0:
            raise ValueError(f"capacity must be >= 0, got {capacity}")
        self._capacity = capacity
        self._pinned: set[str] = set()

    def refresh(self, busiest: Iterable[dict], lookup: Callable[[str], dict | None]) -> list[dict]:
        """The pinned hosts' snapshots, sorted by host. ``busiest``: this scrape's busiest
        hosts' snapshots. ``lookup(host)``: a host's snapshot, or None once it has left memory."""
        snapshots: dict[str, dict] = {}
        for host in list(self._pinned):
            snapshot = lookup(host)
            if snapshot is None:
                self._pinned.discard(host)
            else:
                snapshots[host] = snapshot
        for snapshot in busiest:
            if len(self._pinned) >= self._capacity:
                break
            host = snapshot["host"]
            if host not in self._pinned:
                self._pinned.add(host)
                snapshots[host] = snapshot
        return [snapshots[host] for host in sorted(snapshots)]


def _host_metrics(status: dict, pinned: list[dict]) -> Iterator[Metric]:
    host_in_flight = GaugeMetricFamily("crawler_host_in_flight", "In-flight requests of each pinned host",
                                       labels=["host"])
    host_limit = GaugeMetricFamily("crawler_host_limit", "Current AIMD concurrency limit of each pinned host",
                                   labels=["host"])
    host_retries = CounterMetricFamily("crawler_host_retries", "Retries of each pinned host", labels=["host"])
    host_attempts = CounterMetricFamily("crawler_host_attempts", "Requests that reached each pinned host",
                                        labels=["host"])
    host_throttled = CounterMetricFamily("crawler_host_throttled", "429/503 answers of each pinned host",
                                         labels=["host"])
    host_ratio = GaugeMetricFamily("crawler_host_retry_ratio", "Retries per request of each pinned host",
                                   labels=["host"])
    for host in pinned:
        name = host["host"]
        host_in_flight.add_metric([name], host["in_flight"])
        host_limit.add_metric([name], host["limit"])
        host_retries.add_metric([name], host["retries"])
        host_attempts.add_metric([name], host["fetched"])
        host_throttled.add_metric([name], host["throttled"])
        host_ratio.add_metric([name], host["retry_ratio"])
    yield from (host_in_flight, host_limit, host_retries, host_attempts, host_throttled, host_ratio)
    hosts = GaugeMetricFamily("crawler_hosts", "Known hosts by scheduling state", labels=["place"])
    for place, count in sorted(status["host_table"]["places"].items()):
        hosts.add_metric([place], count)
    yield hosts


def _single(kind: type[GaugeMetricFamily] | type[CounterMetricFamily], name: str, help_text: str,
            value: float) -> Metric:
    family = kind(name, help_text)
    family.add_metric([], value)
    return family


def pressure_metrics(status: dict) -> Iterator[Metric]:
    """Flow control (rules 5-8): admission, the fetch-through API, shedding, retries, IP gates."""
    admission = status["admission"]
    yield _single(GaugeMetricFamily, "crawler_admission_open", "1 while new fetches may start", int(admission["open"]))
    rejections = CounterMetricFamily("crawler_admission_rejections",
                                     "Times a fetch was ready but admission refused it, by reason (stage)",
                                     labels=["reason"])
    blocked = CounterMetricFamily("crawler_admission_blocked_seconds",
                                  "Time new fetches were held back, by reason (stage)", labels=["reason"])
    # Every pressure source has its series from the start (at 0), so rate() has one to read.
    for reason in sorted(set(admission["rejections"]) | set(admission.get("pressure_sources", ()))):
        rejections.add_metric([reason], admission["rejections"].get(reason, 0))
        blocked.add_metric([reason], admission["blocked_s"].get(reason, 0.0))
    yield from (rejections, blocked)
    yield _single(GaugeMetricFamily, "crawler_pipeline_held_bytes", "Response bodies between fetch and store",
                  admission["held_bytes"])
    yield _single(GaugeMetricFamily, "crawler_pipeline_held_bytes_limit", "Held bytes above which no fetch starts",
                  admission["held_bytes_limit"])

    yield from _api_metrics(status["api"])
    yield from _shedding_metrics(status["shedding"])
    yield from _retry_metrics(status["retries"])
    yield from _ip_metrics(status["ip"])


def _api_metrics(api: dict) -> Iterator[Metric]:
    yield _single(GaugeMetricFamily, "crawler_api_enabled", "1 when fetching through a proxy/API", int(api["enabled"]))
    yield _single(GaugeMetricFamily, "crawler_api_paused", "1 while the API's quota is exhausted", int(api["paused"]))
    if api["enabled"]:
        yield _single(GaugeMetricFamily, "crawler_api_limit", "The API limiter's current concurrency limit",
                      api["limit"])
        yield _single(GaugeMetricFamily, "crawler_api_in_flight", "Requests in flight through the API",
                      api["in_flight"])
        yield _single(CounterMetricFamily, "crawler_api_limit_decreases", "Cuts of the API limiter", api["decreases"])
        yield _single(CounterMetricFamily, "crawler_api_throttled", "429s from the API itself", api["throttled"])
        yield _single(CounterMetricFamily, "crawler_api_quota_exhausted", "509s (quota spent) from the API",
                      api["quota_hits"])
        yield _single(CounterMetricFamily, "crawler_api_pauses", "Times fetching was paused for the quota",
                      api["pauses"])
        yield _single(GaugeMetricFamily, "crawler_api_resume_in_seconds", "Time until a paused API resumes by itself",
                      api["resume_in_s"] or 0.0)


def _shedding_metrics(shedding: dict) -> Iterator[Metric]:
    yield _single(GaugeMetricFamily, "crawler_shed_active", "1 while low-priority URLs are being deferred",
                  int(shedding["active"]))
    deferred = CounterMetricFamily("crawler_shed_deferred", "URLs deferred by load shedding, by reason",
                                   labels=["reason"])
    for reason in sorted(set(shedding["deferred_by_reason"]) | set(DEFERRAL_REASONS)):
        deferred.add_metric([reason], shedding["deferred_by_reason"].get(reason, 0))
    yield deferred
    yield _single(CounterMetricFamily, "crawler_shed_restored", "Deferred URLs queued again",
                  shedding["restored_total"])
    yield _single(GaugeMetricFamily, "crawler_shed_high_water", "Queued URLs above which shedding starts",
                  shedding["high_water"])


def _retry_metrics(retries: dict) -> Iterator[Metric]:
    yield _single(CounterMetricFamily, "crawler_host_attempts_all", "Requests that reached any host",
                  retries["host_attempts"])
    yield _single(CounterMetricFamily, "crawler_api_postponed", "URLs the API refused, retried without spending budget",
                  retries["api_postponed"])
    yield _single(CounterMetricFamily, "crawler_host_backoffs", "Host pauses for 429s without Retry-After",
                  retries["host_backoffs"])
    gave_up = CounterMetricFamily("crawler_retries_given_up", "URLs not retried any more, by reason", labels=["reason"])
    for reason in sorted(retries["gave_up"]):
        gave_up.add_metric([reason], retries["gave_up"][reason])
    yield gave_up


def _ip_metrics(ip: dict) -> Iterator[Metric]:
    yield _single(GaugeMetricFamily, "crawler_ip_shared_addresses", "Addresses that several hosts resolve to",
                  ip["shared_addresses"])
    yield _single(CounterMetricFamily, "crawler_ip_gate_refusals", "Hosts held back because their IP was at its limit",
                  ip["refusals"])
    ip_in_flight = GaugeMetricFamily("crawler_ip_in_flight", "In-flight requests of the busiest IP addresses",
                                     labels=["ip"])
    for gate in ip["busiest"]:
        ip_in_flight.add_metric([gate["ip"]], gate["in_flight"])
    yield ip_in_flight


def cluster_metrics(status: dict) -> Iterator[Metric]:
    """This node's view of the cluster: every member it knows, itself included."""
    cluster = status["cluster"]
    member_up = GaugeMetricFamily("crawler_member_up", "1 while a member is alive in this node's view "
                                  "(suspect or down: 0)", labels=["member"])
    outbox = GaugeMetricFamily("crawler_outbox_urls", "URLs this node's outbox holds for each peer",
                               labels=["peer"])
    failures = CounterMetricFamily("crawler_heartbeat_failures", "Heartbeats to each peer that failed or "
                                   "got something else than a member list", labels=["peer"])
    failed = cluster["heartbeats"]["failures"]
    for member in status["members"]:
        if not member["left"]:  # one that left on purpose (--handoff-on-exit) is not down
            member_up.add_metric([member["id"]], 1 if member["state"] == "alive" else 0)
        if not member["self"]:
            outbox.add_metric([member["id"]], member["outbox"])
            failures.add_metric([member["id"]], failed.get(member["id"], 0))
    yield from (member_up, outbox, failures)
    counters = cluster["counters"]
    yield _single(CounterMetricFamily, "crawler_forwarded_urls", "URLs forwarded to their owners and acknowledged",
                  counters["forwarded"])
    yield _single(CounterMetricFamily, "crawler_received_urls", "URLs peers forwarded here (their forwarded)",
                  counters["received"])


def fetch_metrics(fetches: dict) -> Iterator[Metric]:
    """Page fetches, observed where each answer is judged (node.fetch_stage)."""
    yield _histogram("crawler_fetch_duration_seconds", "Time of each page fetch, to the end of its body or error",
                     fetches["fetch_seconds"])
    yield _histogram("crawler_response_body_bytes", "Body size of each HTTP answer to a page fetch, as received",
                     fetches["body_bytes"])
    responses = CounterMetricFamily("crawler_responses", "Page fetches by status class (none: no HTTP answer)",
                                    labels=["code_class"])
    for code_class, count in sorted(fetches["responses"].items()):
        responses.add_metric([code_class], count)
    yield responses
    yield _single(CounterMetricFamily, "crawler_fetched_bytes", "Response body bytes received (pages, robots.txt)",
                  fetches["fetched_bytes"])


def frontier_call_metric(calls: dict[str, dict]) -> Metric:
    """The frontier's calls on the crawl's path by call, the wait for its thread included
    (frontier.service)."""
    family = HistogramMetricFamily("crawler_frontier_call_duration_seconds",
                                   "Time of each frontier call on the crawl's path, its wait for the frontier's thread "
                                   "included", labels=["call"])
    for call, snapshot in sorted(calls.items()):
        family.add_metric([call], _buckets(snapshot), sum_value=snapshot["sum"])
    return family


def _histogram(name: str, help_text: str, snapshot: dict) -> Metric:
    return HistogramMetricFamily(name, help_text, buckets=_buckets(snapshot), sum_value=snapshot["sum"])


def _buckets(snapshot: dict) -> list[tuple[str, int]]:
    return [("+Inf" if bound is None else floatToGoString(bound), count) for bound, count in snapshot["buckets"]]


class NodeMetrics:
    def __init__(self, node: Node, *, pinned_hosts: int = PINNED_HOSTS,
                 status: Callable[[], Awaitable[dict]] | None = None) -> None:
        """``status``: where a scrape reads the node's status (the API's snapshot of it); by
        default it is built for each scrape."""
        self.registry = CollectorRegistry(auto_describe=False)
        self._collector = NodeCollector()
        self.registry.register(self._collector)
        self._node = node
        self._pinned = PinnedHosts(pinned_hosts)
        self._status = status

    async def render(self) -> bytes:
        status = await (self._status() if self._status is not None else node_status(self._node))
        self._collector.status = status
        self._collector.hosts = self._pinned.refresh(status["hosts"], self._host_snapshot)
        return generate_latest(self.registry)

    def _host_snapshot(self, host: str) -> dict | None:
        state = self._node.hosts.get(host)
        return to_json(state.snapshot()) if state is not None else None
