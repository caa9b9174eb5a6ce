"""The fetch stage: one request (a page or a robots.txt), judged by core.verdict, applied to the
host table, and handed to the next stage.

A fetch task owns its permit (the host's, the API's and the IP's slots) from dispatch until
its answer is judged; every path out of it, cancellation included, gives the slots back.
"""

from __future__ import annotations

import asyncio
import logging
from collections import Counter
from collections.abc import Callable
from typing import Protocol

from crawler_node.core.outcomes import FetchOutcome
from crawler_node.core.response import FetchResult
from crawler_node.core.scope import Scope
from crawler_node.core.signals import ApiSignal, Signal
from crawler_node.core.urls import InvalidURL, host_of, normalize_url
from crawler_node.core.verdict import Pause, ResponseRules, RetryAction, Verdict, judge_page, judge_robots
from crawler_node.frontier import Lease, UrlEntry
from crawler_node.node.admission import FetchAdmission, Permit
from crawler_node.node.budget import HeldBytes
from crawler_node.node.hosts import HostState, HostTable
from crawler_node.node.pipeline import PageResult

log = logging.getLogger("crawler_node.fetch")


class Fetcher(Protocol):
    async def fetch(self, url: str, *, max_body_bytes: int | None = None) -> FetchResult: ...


class NextStage(Protocol):
    async def put(self, page: PageResult) -> None: ...


class FetchStage:
    def __init__(self, *, fetcher: Fetcher, hosts: HostTable, admission: FetchAdmission, rules: ResponseRules,
                 held: HeldBytes, parse: NextStage, store: NextStage, scope: Scope, robots_max_bytes: int,
                 on_api_paused: Callable[[], None], returned: Callable[[int], None],
                 clock: Callable[[], float]) -> None:
        """``on_api_paused``: the API's quota was just spent (the lease buffers go back);
        ``returned``: a lease whose request was cancelled before its answer, to give back."""
        self._fetcher = fetcher
        self._hosts = hosts
        self._admission = admission
        self._rules = rules
        self._held = held
        self._parse = parse
        self._store = store
        self._scope = scope
        self._robots_max_bytes = robots_max_bytes
        self._on_api_paused = on_api_paused
        self._returned = returned
        self._clock = clock
        self.outcomes: Counter[FetchOutcome] = Counter()
        self.counters: Counter[str] = Counter()
        self.gave_up: Counter[str] = Counter()

    # ----------------------------------------------------------------- pages
    async def fetch_page(self, state: HostState, lease: Lease, permit: Permit) -> None:
        try:
            result = await self._fetcher.fetch(lease.url)
        except asyncio.CancelledError:
            self._release(state, permit, None, self._clock())
            self._hosts.cancel_request(state, permit.host_ticket, self._clock())
            self._returned(lease.id)
            raise
        now = self._clock()
        verdict = judge_page(state, result, attempt=lease.attempts, now=now, rules=self._rules,
                             in_current_round=state.limiter.is_current(permit.host_ticket))
        # The host's slot and the global ones are given back together, before any await.
        self._release(state, permit, verdict.signal, now)
        self._hosts.finish_page(state, permit.host_ticket, verdict, now)
        self._count(state, verdict)
        page = PageResult(lease=lease, fetch=result, verdict=verdict)
        outcome = verdict.signal.outcome
        if outcome is FetchOutcome.REDIRECT:
            page.links = self._redirect_target(lease, result)
        # Counted until the store has written it: the memory pressure source reads this.
        self._held.hold(len(result.body))
        if outcome is FetchOutcome.OK and result.is_html and result.body:
            await self._parse.put(page)
        else:
            await self._store.put(page)

    def _count(self, state: HostState, verdict: Verdict) -> None:
        signal = verdict.signal
        self.outcomes[signal.outcome] += 1
        counters = self.counters
        if signal.api is not ApiSignal.NONE:
            counters[f"api_{signal.api.value}"] += 1
            counters["api_postponed"] += 1
            return
        counters["host_attempts"] += 1
        retry = verdict.retry
        if retry is RetryAction.DONE:
            return
        if retry is RetryAction.RETRY:
            counters["retries"] += 1
        elif retry is RetryAction.GIVE_UP and verdict.reason is not None:
            self.gave_up[verdict.reason] += 1
        if verdict.pause is Pause.BACKOFF:
            counters["host_backoffs"] += 1
            log.info("%s keeps answering 429 without Retry-After: paused until %.1f (level %d)",
                     state.host, state.next_eligible, state.backoff.level)

    def _redirect_target(self, lease: Lease, result: FetchResult) -> list[UrlEntry]:
        location = result.header("Location")
        if not location:
            return []
        try:
            target = normalize_url(location, base=lease.url)
        except InvalidURL:
            return []
        # A redirect is not a step deeper into the site; keep the source's depth and priority.
        if self._scope.check(target, lease.depth) is not None:
            return []
        return [UrlEntry(url=target, host=host_of(target), depth=lease.depth, priority=lease.priority)]

    # ----------------------------------------------------------------- robots.txt
    async def fetch_robots(self, state: HostState, permit: Permit) -> None:
        url = f"http://{state.host}/robots.txt"
        try:
            if self._admission.ip_gates is not None and state.ip_gate is None:
                if not await self._bind_ip_gate(state, permit):
                    return
            result = await self._fetcher.fetch(url, max_body_bytes=self._robots_max_bytes)
        except asyncio.CancelledError:
            self._release(state, permit, None, self._clock())
            self._hosts.robots_not_sent(state, permit.host_ticket, self._clock())
            raise
        now = self._clock()
        answer = judge_robots(result, now=now, rules=self._rules)
        self._release(state, permit, answer.signal, now)
        self._hosts.finish_robots(state, permit.host_ticket, answer, now)
        if answer.api_refused:
            self.counters[f"api_{answer.signal.api.value}"] += 1
        else:
            self.counters["robots_fetched"] += 1

    async def _bind_ip_gate(self, state: HostState, permit: Permit) -> bool:
        """First contact with a host on a direct fetch: find the gate of its address. If that
        gate is full, give the slots back; the host then waits on the gate like any request."""
        gates = self._admission.ip_gates
        assert gates is not None
        gate = await gates.gate_for(state.host)
        self._hosts.bind_ip_gate(state, gate)
        if gate is None or gate.admits(state):
            if gate is not None:
                gate.acquire()
                permit.ip_gate = gate
            return True
        now = self._clock()
        self._release(state, permit, None, now)
        self._hosts.robots_not_sent(state, permit.host_ticket, now)
        return False

    # ----------------------------------------------------------------- slots
    def _release(self, state: HostState, permit: Permit, signal: Signal | None, now: float) -> None:
        """Give back the global slots of a request (API, IP); the hosts that waited for the IP
        gate are re-placed. The host's own slot goes back through the host table."""
        woken, paused = self._admission.release(permit, signal, now)
        if woken:
            woken.discard(state)
            self._hosts.wake(woken, now)
        if paused:
            self._on_api_paused()

    def snapshot(self) -> dict:
        counters = self.counters
        attempts = counters["host_attempts"]
        return {
            "outcomes": {str(outcome): count for outcome, count in self.outcomes.items()},
            "host_attempts": attempts,
            "retries": counters["retries"],
            # The one retry ratio: retries per request that reached a host.
            "retry_ratio": round(counters["retries"] / attempts, 4) if attempts else 0.0,
            "api_postponed": counters["api_postponed"],
            "host_backoffs": counters["host_backoffs"],
            "robots_fetched": counters["robots_fetched"],
            "gave_up": dict(self.gave_up),
        }
