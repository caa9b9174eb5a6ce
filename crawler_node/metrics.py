"""Prometheus exposition of the node's pressure (rule 8), read from the node at scrape time.

A custom collector rather than metric objects updated on every event: the hot path only bumps
plain counters, and the registry is per node (no global default registry), so tests can run
several nodes in one process.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from prometheus_client import CollectorRegistry, generate_latest
from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily

if TYPE_CHECKING:
    from crawler_node.node import Node

TOP_HOSTS = 20  # per-host series are bounded to the busiest hosts, plus aggregates


class NodeCollector:
    def __init__(self, node: Node) -> None:
        self._node = node
        self.frontier_totals: dict = {}

    def collect(self):
        node = self._node
        status_queues = node.queue_snapshot(self.frontier_totals)
        depth = GaugeMetricFamily("crawler_queue_depth", "Items waiting in each pipeline stage", labels=["stage"])
        age = GaugeMetricFamily("crawler_queue_oldest_age_seconds", "Age of the oldest item in each stage", labels=["stage"])
        capacity = GaugeMetricFamily("crawler_queue_capacity", "Bound of each stage's queue", labels=["stage"])
        blocked = CounterMetricFamily("crawler_blocked_enqueues", "Enqueues that had to wait (or were refused) because a stage was full", labels=["stage"])
        for stage, snap in status_queues.items():
            depth.add_metric([stage], snap.get("depth", 0))
            age.add_metric([stage], snap.get("oldest_age_s", 0.0))
            if "capacity" in snap:
                capacity.add_metric([stage], snap["capacity"])
            blocked.add_metric([stage], snap.get("blocked_puts", 0))
        yield from (depth, age, capacity, blocked)

        outcomes = CounterMetricFamily("crawler_fetch_outcomes", "Fetch attempts by outcome", labels=["outcome"])
        for outcome, count in sorted(node.outcomes.items()):
            outcomes.add_metric([outcome], count)
        yield outcomes
        for name, key, help_text in (
            ("crawler_fetched", "fetched", "Fetch attempts written to the store"),
            ("crawler_retries", "retries", "Failed attempts sent back to the frontier for another try"),
            ("crawler_robots_disallowed", "robots_disallowed", "URLs skipped because robots.txt disallows them"),
            ("crawler_urls_submitted", "submitted", "URLs accepted through the API or as seeds"),
            ("crawler_urls_rejected", "rejected", "Submitted URLs rejected (scope, malformed)"),
            ("crawler_links_discovered", "links_discovered", "Links extracted from pages"),
        ):
            family = CounterMetricFamily(name, help_text)
            family.add_metric([], node.counters[key])
            yield family
        fetched = node.counters["fetched"]
        ratio = GaugeMetricFamily("crawler_retry_ratio", "Retries per fetch attempt")
        ratio.add_metric([], node.counters["retries"] / fetched if fetched else 0.0)
        yield ratio

        in_flight = GaugeMetricFamily("crawler_in_flight", "Requests in flight on this node")
        in_flight.add_metric([], node.in_flight)
        yield in_flight
        frontier = GaugeMetricFamily("crawler_frontier_urls", "URLs in the durable frontier by state", labels=["state"])
        for state in ("queued", "leased", "done", "failed"):
            frontier.add_metric([state], self.frontier_totals.get(state, 0))
        yield frontier

        host_in_flight = GaugeMetricFamily("crawler_host_in_flight", "In-flight requests of the busiest hosts", labels=["host"])
        host_limit = GaugeMetricFamily("crawler_host_limit", "Current AIMD concurrency limit of the busiest hosts", labels=["host"])
        host_retries = CounterMetricFamily("crawler_host_retries", "Retries of the busiest hosts", labels=["host"])
        for state in node.scheduler.busiest(TOP_HOSTS):
            host_in_flight.add_metric([state.host], state.limiter.in_flight)
            host_limit.add_metric([state.host], state.limiter.limit)
            host_retries.add_metric([state.host], state.retries)
        yield from (host_in_flight, host_limit, host_retries)
        hosts = GaugeMetricFamily("crawler_hosts", "Known hosts by scheduling state", labels=["place"])
        places: dict[str, int] = {}
        for state in node.scheduler:
            places[state.place.value] = places.get(state.place.value, 0) + 1
        for place, count in sorted(places.items()):
            hosts.add_metric([place], count)
        yield hosts


class NodeMetrics:
    def __init__(self, node: Node) -> None:
        self.registry = CollectorRegistry(auto_describe=False)
        self._collector = NodeCollector(node)
        self.registry.register(self._collector)
        self._node = node

    async def render(self) -> bytes:
        self._collector.frontier_totals = await self._node.frontier_totals()
        return generate_latest(self.registry)
