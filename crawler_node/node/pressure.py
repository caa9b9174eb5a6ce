"""Flow control under pressure (DESIGN.md rules 5-8): global admission, the scraping API's
limiter and quota pause, per-IP gates, and load shedding. Part of the Node (see node.py)."""

from __future__ import annotations

import asyncio
import logging
import random
import time

from crawler_node.node.admission import API_QUOTA, ApiGate, FetchAdmission, IpGates, Permit
from crawler_node.frontier.frontier import FrontierBatch
from crawler_node.core.limiter import AimdLimiter, Outcome
from crawler_node.node.pipeline import SEED_PRIORITY
from crawler_node.node.hosts import HostState, Robots
from crawler_node.settings import Settings
from crawler_node.core.shedding import ShedPolicy

log = logging.getLogger("crawler_node.node.node")


class PressureControl:
    """Mixin of :class:`crawler_node.node.Node`; uses the node's state directly."""

    def _init_flow_control(self, s: Settings) -> None:
        """The global gates of rule 5 (admission.py) and the shedding policy of rule 7."""
        api = None
        if s.proxy:
            # Until the API says otherwise, assume it takes everything we send.
            start = s.api_limit_start or s.global_inflight
            api = ApiGate(limiter=AimdLimiter(start=start, floor=1, ceiling=s.global_inflight),
                          quota_reset_s=s.api_quota_reset_s)
        ip_gates = None
        if not s.proxy and s.ip_inflight_limit:
            # With a proxy we never learn the sites' addresses: no per-IP limit there.
            ip_gates = IpGates(limit=s.ip_inflight_limit, cache_s=s.dns_cache_s, clock=time.monotonic)
        self.admission = FetchAdmission(api=api, ip_gates=ip_gates)
        self.admission.add_pressure_source("parse", lambda: self.parse_queue.qsize() >= self.parse_queue.maxsize)
        self.admission.add_pressure_source("store", lambda: self.store_queue.qsize() >= self.store_queue.maxsize
                                           or self.store_queue.oldest_age_s() > s.store_lag_s)
        self.admission.add_pressure_source("memory", lambda: self.held_bytes > s.pipeline_max_bytes)
        # A peer not taking URLs as fast as we find them: fetch less rather than pile up.
        self.admission.add_pressure_source("outbox", lambda: self.cluster.outbox_full(self.cluster.outbox_counts))
        self.held_bytes = 0  # response bodies on their way from fetch to store
        self.shed_policy = ShedPolicy(high_water=s.shed_high_water, low_water=s.shed_low_water,
                                      after_s=s.shed_after_s)
        self._backoff_rng = random.Random()

    def pressure_status(self, totals: dict) -> dict:
        """The status sections of flow control: admission, the API, shedding, per-IP gates,
        retries. Also read by the metrics collector."""
        now = self._clock()
        api = self.admission.api
        gates = self.admission.ip_gates
        shed_counts = dict(self.frontier.shed_counts) if self.frontier is not None else {}
        restored = shed_counts.pop("restored", 0)
        fetched = sum(state.fetched for state in self.scheduler)
        return {
            "admission": {**self.admission.snapshot(now), "held_bytes": self.held_bytes,
                          "held_bytes_limit": self.settings.pipeline_max_bytes},
            "api": api.snapshot(now) if api is not None else {"enabled": False, "paused": False},
            "shedding": {
                **self.shed_policy.snapshot(),
                "deferred_now": totals.get("deferred", 0),
                "deferred_total": sum(shed_counts.values()),
                "deferred_by_reason": shed_counts,
                "restored_total": restored,
                "cut_priority": self.frontier.shed_cut if self.frontier is not None else None,
            },
            "retries": {
                "total": self.counters["retries"],
                "host_attempts": fetched,
                "ratio": round(self.counters["retries"] / fetched, 4) if fetched else 0.0,
                "api_postponed": self.counters["api_postponed"],
                "host_backoffs": self.counters["host_backoffs"],
                "gave_up": {key[len("gave_up_"):]: n for key, n in self.counters.items() if key.startswith("gave_up_")},
            },
            "ip": {
                "enabled": gates is not None,
                "limit": gates.limit if gates else None,
                "shared_addresses": gates.shared() if gates else 0,
                "refusals": gates.refusals if gates else 0,
                "busiest": [{"ip": g.address, "in_flight": g.in_flight, "hosts": g.hosts} for g in gates.busiest(10)]
                if gates else [],
            },
        }

    async def _wait_admission(self, reason: str) -> None:
        """No new fetch may start, because of ``reason``: wait until that changes. One
        rejection is counted per wait however long it lasts, and its time is added up."""
        self.admission.stats.rejections[reason] += 1
        started = time.monotonic()
        try:
            while not self._stopping and self.admission.blocked(self._clock()) == reason:
                self._work.clear()
                try:
                    await asyncio.wait_for(self._work.wait(), 0.05)
                except TimeoutError:
                    pass
        finally:
            self.admission.stats.blocked_s[reason] += time.monotonic() - started

    async def _hold_leasing(self) -> None:
        """While the pipeline is under pressure (or the API paused), lease nothing more:
        the URLs stay in the frontier, where they cost no memory and another node could take
        them over, instead of waiting in this node's buffers."""
        reason = self.admission.hold_leasing(self._clock())
        if reason is None:
            return
        self.counters[f"lease_held_{reason}"] += 1
        if reason == API_QUOTA:
            # A lease round that was under way when the pause began has filled buffers since.
            returned = self._take_back_buffers()
            if returned:
                await self._frontier_thread.call(self.frontier.apply, FrontierBatch(returned=returned))
        while not self._stopping and self.admission.hold_leasing(self._clock()) is not None:
            await asyncio.sleep(0.05)

    def _api_paused(self) -> None:
        """The API's quota is spent: hand the buffered leases back, so a long pause neither
        holds URLs in memory nor lets their leases expire (an expired lease counts an attempt)."""
        self._returned_now.extend(self._take_back_buffers())
        self._refill_event.set()

    def _take_back_buffers(self) -> list[int]:
        """Empty every host's lease buffer; the ids go back to the frontier, unattempted."""
        returned: list[int] = []
        for state in self.scheduler:
            if state.buffer:
                returned.extend(lease.id for lease in state.buffer)
                state.queued += len(state.buffer)
                state.buffer.clear()
        return returned

    def resume_api(self) -> bool:
        """Resume fetching through the API now (POST /v1/resume); False if it was not paused."""
        api = self.admission.api
        resumed = api is not None and api.resume(self._clock(), by="POST /v1/resume")
        self._work.set()
        return resumed

    async def _bind_ip_gate(self, state: HostState, permit: Permit) -> bool:
        """First contact with a host on a direct fetch: find the gate of its address. If that
        gate is full, give the slots back; the host then waits on the gate like any request."""
        gate = await self.admission.ip_gates.gate_for(state.host)
        state.ip_gate = gate
        if gate is None or gate.admits(state):
            if gate is not None:
                gate.acquire()
                permit.ip_gate = gate
            return True
        state.robots_state = Robots.UNKNOWN
        now = self._clock()
        self._release(state, permit, Outcome.NEUTRAL, None, now)
        self.scheduler.on_release(state, now)
        return False

    async def _shed_loop(self) -> None:
        """Rule 7: defer the lowest-priority URLs while the queue stays over its high-water
        mark, and bring them back once it has drained (the policy is shedding.ShedPolicy)."""
        policy = self.shed_policy
        interval = min(1.0, max(0.05, policy.after_s / 4))
        while True:
            await asyncio.sleep(interval)
            totals = await self._frontier_thread.call(self.frontier.totals)
            action = policy.observe(queued=totals["queued"], deferred=totals["deferred"], now=time.monotonic())
            if action.defer:
                # Seeds and submitted URLs (SEED_PRIORITY) are never deferred.
                per_host = await self._frontier_thread.call(
                    self.frontier.defer_lowest, action.defer, below_priority=SEED_PRIORITY)
                for host, count in per_host.items():
                    state = self.scheduler.get(host)
                    if state is not None:
                        state.queued = max(0, state.queued - count)
                log.warning("load shedding: queue over %d for %.0f s; deferred %d lowest-priority URLs",
                            policy.high_water, policy.after_s, sum(per_host.values()))
            if not action.active and self.frontier.shed_cut is not None:
                await self._frontier_thread.call(self.frontier.stop_shedding)
            if action.restore:
                per_host = await self._frontier_thread.call(self.frontier.restore_deferred, action.restore)
                now = self._clock()
                for host, count in per_host.items():
                    self.scheduler.add_work(host, count, now)
                log.info("load shedding: restored %d deferred URLs", sum(per_host.values()))
                self._work.set()
