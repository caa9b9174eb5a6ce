"""Read-only views of a node for /v1/status and /metrics. Part of the Node (see node.py)."""

from __future__ import annotations

import logging
import time

from crawler_node.node.hosts import HostState

log = logging.getLogger("crawler_node.node.node")


class StatusViews:
    """Mixin of :class:`crawler_node.node.Node`; uses the node's state directly."""

    async def frontier_totals(self) -> dict:
        return await self._frontier_thread.call(self.frontier.totals)

    async def status(self) -> dict:
        totals = await self.frontier_totals()
        idle = (
            totals["queued"] == 0 and totals["leased"] == 0 and totals.get("deferred", 0) == 0 and self.in_flight == 0
            and self._inbound_pending == 0 and self.parse_queue.empty() and self.store_queue.empty()
            and not self._busy_parsers and not self._store_busy
            and self.cluster.outbox_total() == 0 and not self._returned_now and not self._disallowed_now
        )
        uptime = time.monotonic() - self.started_at
        fetched = self.counters["fetched"]
        return {
            "node_id": self.node_id,
            "url": self.settings.advertise_url,
            "idle": idle,
            "stopping": self._stopping,
            "uptime_s": round(uptime, 3),
            # Unix time of the last fetch attempt written to the store and committed to the
            # frontier (null before the first): an idle node's crawl ended then; a busy node
            # whose value stops moving is stalled.
            "last_stored_at": self.last_stored_at,
            "counters": {
                "fetched": fetched,
                "pages_done": self.counters["pages_done"],
                "failed": self.counters["failed"],
                "retries": self.counters["retries"],
                "retry_ratio": round(self.counters["retries"] / fetched, 4) if fetched else 0.0,
                "submitted": self.counters["submitted"],
                "rejected": self.counters["rejected"],
                "robots_disallowed": self.counters["robots_disallowed"],
                "links_discovered": self.counters["links_discovered"],
                "parse_errors": self.counters["parse_errors"],
                "parser_restarts": self.counters["parser_restarts"],
                "outcomes": dict(self.outcomes),
            },
            "rates": {"fetched_per_s": round(fetched / uptime, 2) if uptime > 0 else 0.0},
            "frontier": totals,
            "queues": self.queue_snapshot(totals),
            **self.pressure_status(totals),
            "hosts": [self.host_snapshot(state) for state in self.scheduler.busiest(20)],
            "members": self.cluster.members_status(),
            "cluster": {"counters": dict(self.cluster.counters), "events": self.cluster.events[-10:]},
        }

    def queue_snapshot(self, totals: dict) -> dict:
        return {
            "inbound": {"depth": self._inbound_pending, "capacity": self.settings.inbound_capacity,
                        "oldest_age_s": 0.0, "blocked_puts": self.counters["inbound_rejected_batches"]},
            "frontier": {"depth": totals.get("queued", 0),
                         "oldest_age_s": round(totals.get("oldest_queued_age_s") or 0.0, 3)},
            "fetch": {"depth": self.in_flight, "capacity": self.settings.global_inflight, "oldest_age_s": 0.0},
            "parse": self.parse_queue.snapshot(),
            "store": self.store_queue.snapshot(),
        }

    @staticmethod
    def host_snapshot(state: HostState) -> dict:
        return {
            "host": state.host,
            "in_flight": state.limiter.in_flight,
            "limit": state.limiter.limit,
            "limit_decreases": state.limiter.decreases,
            "queued": state.queued + len(state.buffer),
            "fetched": state.fetched,
            "throttled": state.throttled,
            "errors": state.errors,
            "retries": state.retries,
            "retry_ratio": round(state.retries / state.fetched, 4) if state.fetched else 0.0,
            "crawl_delay_s": state.crawl_delay,
            "throttle_point": state.limiter.throttle_point,
            "latency_baseline_ms": round(state.latency.baseline_s * 1000, 1) if state.latency else None,
            "latency_rises": state.latency_rises,
            "backoffs": state.backoffs,
            "backoff_level": state.backoff.level if state.backoff else 0,
            "api_refused": state.api_refused,
            "ip": state.ip_gate.address if state.ip_gate else None,
        }
