"""The fetch stage: robots.txt, one page request, and what its answer means for the limiters
(rule 5), the retry policy (rule 6) and the next stage. Part of the Node (see node.py)."""

from __future__ import annotations

import asyncio
import logging

from crawler_node.node.admission import Permit
from crawler_node.core.backoff import HostBackoff
from crawler_node.fetch.fetcher import ErrorKind, FetchResult
from crawler_node.frontier.frontier import Lease, UrlEntry
from crawler_node.core.limiter import Outcome
from crawler_node.node.pipeline import PageResult
from crawler_node.fetch.robots import RobotsRules, RobotsVerdict, verdict_for_status
from crawler_node.node.hosts import HostState, Robots
from crawler_node.core.signals import ApiSignal, LatencyBaseline, Signal, classify
from crawler_node.core.urls import InvalidURL, host_of, normalize_url

log = logging.getLogger("crawler_node.node.node")


class FetchStage:
    """Mixin of :class:`crawler_node.node.Node`; uses the node's state directly."""

    async def _fetch_robots(self, state: HostState, permit: Permit) -> None:
        url = f"http://{state.host}/robots.txt"
        try:
            if self.admission.ip_gates is not None and state.ip_gate is None:
                if not await self._bind_ip_gate(state, permit):
                    return
            result = await self.fetcher.fetch(url, max_body_bytes=self.settings.robots_max_bytes)
        except asyncio.CancelledError:
            state.robots_state = Robots.UNKNOWN
            self._release(state, permit, Outcome.NEUTRAL, None, self._clock())
            self.scheduler.on_release(state, self._clock())
            raise
        now = self._clock()
        signal = self._classify(result, now)
        if signal.api is not ApiSignal.NONE:
            # The API refused it: robots.txt was never asked for. Ask again when it allows.
            state.robots_state = Robots.UNKNOWN
            self._release(state, permit, Outcome.NEUTRAL, signal, now)
            self.counters[f"api_{signal.api.value}"] += 1
            self.scheduler.delay(state, now + self._api_retry_delay(signal), now)
            self.scheduler.on_release(state, now)
            return
        self.counters["robots_fetched"] += 1
        if result.error == ErrorKind.NOT_ALLOWED:
            # The host itself may not be fetched; its pages will fail the same way, for good.
            verdict = RobotsVerdict.ALLOW_ALL
        else:
            verdict = verdict_for_status(result.status if result.error is None or result.truncated else None)
        agent = self.settings.robots_agent
        if verdict is RobotsVerdict.PARSE:
            state.robots = RobotsRules.parse(result.body, agent)
            state.robots_state = Robots.READY
        elif verdict is RobotsVerdict.ALLOW_ALL:
            state.robots = None
            state.robots_state = Robots.READY
        else:
            # RFC 9309: an unreachable robots.txt means "assume disallowed"; ask again later.
            state.robots_state = Robots.UNKNOWN
        self._release(state, permit, signal.host, signal, now)
        if state.robots_state is Robots.READY:
            state.crawl_delay = min(state.robots.crawl_delay() if state.robots else 0.0, self.settings.max_crawl_delay_s)
            self.scheduler.delay(state, now + state.crawl_delay, now)
        else:
            self.scheduler.delay(state, now + (signal.retry_after_s or self.settings.robots_error_retry_s), now)
        self.scheduler.on_release(state, now)

    async def _fetch_page(self, state: HostState, lease: Lease, permit: Permit) -> None:
        try:
            result = await self.fetcher.fetch(lease.url)
        except asyncio.CancelledError:
            self._release(state, permit, Outcome.NEUTRAL, None, self._clock())
            self._returned.append(lease.id)
            self.scheduler.on_release(state, self._clock())
            raise
        now = self._clock()
        signal = self._classify(result, now)
        cuts_before = state.limiter.decreases
        self._release(state, permit, self._host_outcome(state, signal, result), signal, now)
        if state.crawl_delay:
            # Crawl-delay counts from the end of the previous request, so a slow response never
            # lets two requests overlap or arrive closer together than the site asked for.
            self.scheduler.delay(state, now + state.crawl_delay, now)
        self._route_signal(state, signal, now, status=result.status, cut=state.limiter.decreases > cuts_before)
        self.scheduler.on_release(state, now)
        page = PageResult(lease=lease, fetch=result, signal=signal)
        self._decide_retry(state, page, now)
        if signal.outcome == "redirect":
            page.links = self._redirect_target(lease, result)
        # Counted until the store has written it: the memory pressure source reads this.
        self.held_bytes += len(result.body)
        if signal.outcome == "ok" and result.is_html and result.body:
            await self.parse_queue.put(page)
        else:
            await self.store_queue.put(page)

    def _route_signal(self, state: HostState, signal: Signal, now: float, *, status: int | None = None,
                      cut: bool = False) -> None:
        """The host's part of a response (its limiter has already learned from it): the
        next-eligible time for Retry-After and host backoff, and the host's counters."""
        self.outcomes[signal.outcome] += 1
        if signal.api is not ApiSignal.NONE:
            # The API's answer, not the host's: the host saw nothing (rule 5).
            self.counters[f"api_{signal.api.value}"] += 1
            return
        state.fetched += 1
        if signal.outcome == "throttled":
            state.throttled += 1
            if signal.retry_after_s is not None:  # "Retry-After: 0" is an answer too
                self.scheduler.delay(state, now + min(signal.retry_after_s, self.settings.retry_after_cap_s), now)
            elif status == 429:
                self._host_backoff(state, now, cut=cut)
        elif not signal.success:
            state.errors += 1
        else:
            state.throttle_streak = 0
            if state.backoff is not None:
                state.backoff.on_success(now)

    def _host_backoff(self, state: HostState, now: float, *, cut: bool) -> None:
        """A 429 without Retry-After. AIMD has already cut the limit; a host that keeps answering
        so (``host_backoff_after`` cuts in a row, no success between) is paused as a whole,
        longer each time (backoff.HostBackoff), until it has been quiet for a while."""
        if cut:
            state.throttle_streak += 1
        s = self.settings
        if state.throttle_streak < s.host_backoff_after:
            return
        if state.backoff is None:
            state.backoff = HostBackoff(initial_s=s.host_backoff_initial_s, cap_s=s.host_backoff_cap_s,
                                        forgive_after_s=s.host_backoff_forgive_s, rng=self._backoff_rng)
        until = state.backoff.on_throttle(now)
        state.throttle_streak = 0
        state.backoffs += 1
        self.counters["host_backoffs"] += 1
        self.scheduler.delay(state, until, now)
        log.info("%s keeps answering 429 without Retry-After: paused for %.1f s (level %d)",
                 state.host, until - now, state.backoff.level)

    def _classify(self, result: FetchResult, now: float) -> Signal:
        return classify(result, now=now, api_limit_header=self.settings.api_limit_header,
                        through_api=self.settings.proxy is not None)

    def _host_outcome(self, state: HostState, signal: Signal, result: FetchResult) -> Outcome:
        """What the host's limiter learns: the signal's verdict, except that a success far
        slower than the host's own normal is a slow-down signal too (rule 5)."""
        factor = self.settings.latency_rise_factor
        if signal.host is not Outcome.SUCCESS or not factor or result.headers_s is None:
            return signal.host
        if state.latency is None:
            state.latency = LatencyBaseline(factor=factor, min_rise_s=self.settings.latency_rise_min_s)
        if state.latency.observe(result.headers_s):
            state.latency_rises += 1
            return Outcome.THROTTLED
        return Outcome.SUCCESS

    def _api_retry_delay(self, signal: Signal) -> float:
        """When to try a URL again that the API refused: its Retry-After (capped), jittered."""
        asked = min(signal.retry_after_s or 0.0, self.settings.retry_after_cap_s)
        return max(asked, self.retry_policy.backoff_s(1))

    def _release(self, state: HostState, permit: Permit, outcome: Outcome, signal: Signal | None,
                 now: float) -> None:
        """Give back every slot of a request (host, API, IP); hosts that waited for the IP
        gate are re-placed. The caller re-places ``state`` itself, after its delays."""
        woken, paused = self.admission.release(state, permit, outcome, signal, now)
        for other in woken:
            if other is not state:
                self.scheduler.on_release(other, now)
        if paused:
            self._api_paused()

    def _decide_retry(self, state: HostState, page: PageResult, now: float) -> None:
        signal, result = page.signal, page.fetch
        if signal.api is not ApiSignal.NONE:
            # Refused by the API before it reached the site: again later, budget untouched.
            page.retry_at = now + self._api_retry_delay(signal)
            page.postponed = True
            state.api_refused += 1
            self.counters["api_postponed"] += 1
            return
        if signal.success or signal.outcome == "http_error" and result.status not in (408, 429):
            return
        decision = self.retry_policy.decide(
            attempt=page.lease.attempts, status=result.status, error=signal.error, retry_after_s=signal.retry_after_s
        )
        if decision.retry:
            page.retry_at = now + decision.delay_s
            state.retries += 1
            self.counters["retries"] += 1
        else:
            page.final_failure = True
            self.counters[f"gave_up_{decision.reason}"] += 1

    def _redirect_target(self, lease: Lease, result: FetchResult) -> list[UrlEntry]:
        location = result.header("Location")
        if not location:
            return []
        try:
            target = normalize_url(location, base=lease.url)
        except InvalidURL:
            return []
        # A redirect is not a step deeper into the site; keep the source's depth and priority.
        if self.scope.check(target, lease.depth) is not None:
            return []
        return [UrlEntry(url=target, host=host_of(target), depth=lease.depth, priority=lease.priority)]
