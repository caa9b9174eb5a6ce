"""The fetch stage: one request (a page or a robots.txt), judged by core.verdict, applied to the
host table, and handed to the next stage.

A fetch task owns its permit (the host's, the API's and the IP's slots) from dispatch until
its answer is judged; every path out of it, cancellation included, gives the slots back.
"""

from __future__ import annotations

import asyncio
import logging
from collections import Counter
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field, replace
from typing import Protocol

from crawler_node.config import FetchConfig
from crawler_node.core.histogram import BODY_BYTES_BOUNDS, FETCH_SECONDS_BOUNDS, CountingHistogram, HistogramSnapshot
from crawler_node.core.outcomes import FetchOutcome
from crawler_node.core.refusals import RefusalKind
from crawler_node.core.response import FetchResult, PageFetcher
from crawler_node.core.robots import MAX_ROBOTS_REDIRECTS, RobotsStatus, robots_url, scheme_of
from crawler_node.core.scope import Scope
from crawler_node.core.signals import ApiSignal, Signal
from crawler_node.core.stats import counter, gauge, histogram
from crawler_node.core.urls import InvalidURL, host_of, normalize_url
from crawler_node.core.verdict import (
    Pause,
    ResponseRules,
    RetryAction,
    RobotsAnswer,
    Verdict,
    judge_page,
    judge_robots,
)
from crawler_node.frontier import Lease, UrlEntry
from crawler_node.node.admission import FetchAdmission, Permit
from crawler_node.node.budget import HeldBytes
from crawler_node.node.hosts import HostState, HostTable
from crawler_node.node.refusal_check import RefusalCheck
from crawler_node.node.robots_txt import may_be_text_sitemap, redirect_target, robots_pages, sitemap_entries
from crawler_node.node.stage_items import PageResult

log = logging.getLogger("crawler_node.fetch")



class NextStage(Protocol):
    async def put(self, page: PageResult) -> None: ...


class FetchStage:
    def __init__(self, *, config: FetchConfig, fetcher: PageFetcher, hosts: HostTable, admission: FetchAdmission,
                 rules: ResponseRules, held: HeldBytes, parse: NextStage, store: NextStage, scope: Scope,
                 on_api_paused: Callable[[], None], returned: Callable[[int], None],
                 clock: Callable[[], float], refusals: RefusalCheck | None = None) -> None:
        """``on_api_paused``: the API's quota was just spent (the lease buffers go back);
        ``returned``: a lease whose request was cancelled before its answer, to give back.
        From ``config``: ``max_redirects``, redirects a chain may follow (the answer that would
        take one more ends it: outcome too_many_redirects, its target not queued);
        ``cookies``, the fetcher keeps the cookies sites set, so a redirect back into its own
        chain is worth following (see _redirect_target); ``robots_max_bytes`` and ``sitemaps``.
        ``refusals``: tells the site's refusals from its pages (None: not looked for)."""
        self._refusals = refusals
        self._max_redirects = config.max_redirects
        self._cookies = config.cookies
        self._fetcher = fetcher
        self._hosts = hosts
        self._admission = admission
        self._rules = rules
        self._held = held
        self._parse = parse
        self._store = store
        self._scope = scope
        self._robots_max_bytes = config.robots_max_bytes
        self._sitemaps = config.sitemaps
        self._on_api_paused = on_api_paused
        self._returned = returned
        self._clock = clock
        self.outcomes: Counter[FetchOutcome] = Counter()
        self.counters = FetchCounts()
        self.api_signals: Counter[ApiSignal] = Counter()  # answers the API itself gave, robots.txt's too
        self.gave_up: Counter[str] = Counter()
        self.refusals: Counter[RefusalKind] = Counter()
        # What page fetches cost and answered (/metrics histograms): one observation per
        # answer judged here; robots.txt requests add only to the bytes received.
        self.fetch_seconds = CountingHistogram(FETCH_SECONDS_BOUNDS)
        self.body_bytes = CountingHistogram(BODY_BYTES_BOUNDS)  # HTTP answers only
        self.responses: Counter[str] = Counter({code_class: 0 for code_class in CODE_CLASSES})
        self.fetched_bytes = 0  # response bodies received, pages and robots.txt, as sent

    # ----------------------------------------------------------------- pages
    async def fetch_page(self, state: HostState, lease: Lease, permit: Permit) -> None:
        try:
            result = await self._fetcher.fetch(lease.url, headers=_validators(lease))
        except asyncio.CancelledError:
            self._release(state, permit, None, self._clock())
            self._hosts.cancel_request(state, permit.host_ticket, self._clock())
            self._returned(lease.id)
            raise
        now = self._clock()
        self._observe(result)
        refusal = self._refusals.judge(state, result) if self._refusals is not None else None
        verdict = judge_page(state, result, attempt=lease.attempts, now=now, rules=self._rules,
                             in_current_round=state.limiter.is_current(permit.host_ticket), refusal=refusal,
                             url_refusals=state.url_refusals(lease.url) if refusal else 0,
                             refusal_backoff=state.refusal_backoff)
        # The host's slot and the global ones are given back together, before any await.
        self._release(state, permit, verdict.signal, now)
        self._hosts.finish_page(state, permit.host_ticket, verdict, now, lease.url)
        self._count(state, verdict)
        page = PageResult(lease=lease, fetch=result, verdict=verdict)
        outcome = verdict.signal.outcome
        if outcome is FetchOutcome.REDIRECT:
            page.links = self._redirect_target(page)
        # Counted until the store has written it: the memory pressure source reads this.
        self._held.hold(len(result.body))
        # HTML, and what may be a sitemap (cheap checks here; the parser reads the content).
        if outcome is FetchOutcome.OK and result.body and (result.is_html or result.may_be_sitemap
                                                           or may_be_text_sitemap(lease, result)):
            await self._parse.put(page)
        else:
            await self._store.put(page)

    def _observe(self, result: FetchResult) -> None:
        self.fetch_seconds.observe(result.elapsed_s)
        self.responses[code_class(result.status)] += 1
        if result.status is not None:
            self.body_bytes.observe(len(result.body))
        self.fetched_bytes += len(result.body)

    def _count(self, state: HostState, verdict: Verdict) -> None:
        signal = verdict.signal
        self.outcomes[signal.outcome] += 1
        counters = self.counters
        if signal.api is not ApiSignal.NONE:
            self.api_signals[signal.api] += 1
            counters.api_postponed += 1
            return
        counters.host_attempts += 1
        if verdict.refusal is not None:
            self.refusals[verdict.refusal.kind] += 1
            counters.refusal_pauses += verdict.refusal_incident
        retry = verdict.retry
        if retry is RetryAction.DONE:
            return
        if retry is RetryAction.RETRY:
            counters.retries += 1
        elif retry is RetryAction.GIVE_UP and verdict.reason is not None:
            self.gave_up[verdict.reason] += 1
        if verdict.refusal_incident:
            log.warning("%s refuses the crawler (%s: %s): paused until %.1f (level %d)", state.host,
                        verdict.refusal.kind if verdict.refusal else "?",
                        verdict.refusal.evidence if verdict.refusal else "", state.next_eligible,
                        state.refusal_backoff.level)
        if verdict.pause is Pause.BACKOFF:
            counters.host_backoffs += 1
            log.info("%s keeps answering 429 without Retry-After: paused until %.1f (level %d)",
                     state.host, state.next_eligible, state.backoff.level)

    def _redirect_target(self, page: PageResult) -> list[UrlEntry]:
        """The redirect's target to queue, one hop further along its chain than the page. Past
        max_redirects there is none, and the page's verdict says so: the URL is still done
        (the answer was the site's last word on it), but its outcome is too_many_redirects."""
        lease = page.lease
        location = page.fetch.header("Location")
        if not location:
            return []
        try:
            target = normalize_url(location, base=lease.url)
        except InvalidURL:
            return []
        # A redirect is not a step deeper into the site; keep the source's depth and priority.
        # Its target may change host (no source host: see core.scope), not escape the trap guards.
        why = self._scope.check(target, lease.depth)
        if why is not None:
            if why.outcome is not None:
                page.rejected.append((target, why, lease.depth))
            return []
        if self._cookies and ((target == lease.url and page.fetch.header("Set-Cookie") is not None)
                              or (lease.redirects and target == lease.via)):
            # A redirect to itself that sets a cookie, or back to the page that redirected here
            # (which may have set it): a site checking that a cookie comes back (a session, a
            # consent, ASP.NET's cookie detection), and the next request for that URL carries
            # it. Seen already, the target would be dropped as a duplicate and the page never
            # fetched: it is fetched once more instead (frontier.recrawl.Recrawl.refetch bounds
            # how often; back to the page before, the next round's target is a duplicate).
            page.refetch = target
            return []
        redirects = lease.redirects + 1
        if redirects > self._max_redirects:
            # Only the store stage reads the verdict from here on: the host table and the
            # limiter have taken this answer as the success it was.
            verdict = page.verdict
            page.verdict = replace(verdict, signal=replace(verdict.signal, outcome=FetchOutcome.TOO_MANY_REDIRECTS))
            self.outcomes[FetchOutcome.REDIRECT] -= 1
            self.outcomes[FetchOutcome.TOO_MANY_REDIRECTS] += 1
            return []
        return [UrlEntry(url=target, host=host_of(target), depth=lease.depth, priority=lease.priority,
                         redirects=redirects, via=lease.url)]

    # ----------------------------------------------------------------- robots.txt
    async def fetch_robots(self, state: HostState, permit: Permit, lease: Lease) -> None:
        """The robots.txt of ``lease``'s authority (its scheme, host and port), following up to
        five redirects (RFC 9309 2.3.1.2), wherever they lead. ``lease`` stays in the host's
        buffer; it only says which authority, and at what depth its sitemaps enter."""
        scheme = scheme_of(lease.url)
        url = robots_url(lease.url)
        failures = self._hosts.robots_of(state, scheme, self._clock()).failures
        hops: list[FetchResult] = []
        try:
            if self._admission.ip_gates is not None and state.ip_gate is None:
                if not await self._bind_ip_gate(state, permit, scheme):
                    return
            result = await self._fetcher.fetch(url, max_body_bytes=self._robots_max_bytes)
            hops.append(result)
            while len(hops) <= MAX_ROBOTS_REDIRECTS and (target := redirect_target(result, result.url)) is not None:
                result = await self._fetcher.fetch(target, max_body_bytes=self._robots_max_bytes)
                hops.append(result)
        except asyncio.CancelledError:
            self._release(state, permit, None, self._clock())
            self._hosts.robots_not_sent(state, scheme, permit.host_ticket, self._clock())
            raise
        now = self._clock()
        # More than five redirects: the file counts as unavailable (a 3xx: no restrictions).
        refused = self._refusals is not None and self._refusals.refuses_robots(result)
        answer = judge_robots(result, now=now, rules=self._rules, failures=failures, refused=refused)
        self._release(state, permit, answer.signal, now)
        self._hosts.finish_robots(state, scheme, permit.host_ticket, answer, now)
        if answer.api_refused:
            self.api_signals[answer.signal.api] += 1
            return
        self.counters.robots_fetched += 1
        self._warn_if_held(state, scheme, url, answer)
        pages = robots_pages(hops, for_lease=lease, attempt=failures + 1, through_api=self._rules.through_api)
        if answer.ready:
            pages[-1].links = sitemap_entries(answer.rules, lease=lease, mode=self._sitemaps, scope=self._scope)
        for page in pages:
            self.fetched_bytes += len(page.fetch.body)
            self._held.hold(len(page.fetch.body))
            await self._store.put(page)

    def _warn_if_held(self, state: HostState, scheme: str, url: str, answer: RobotsAnswer) -> None:
        """One warning when an authority's robots.txt first fails, one when it is given up: a
        stuck host says why, without a line per retry."""
        if answer.ready:
            return
        if answer.status is RobotsStatus.UNAVAILABLE:
            self.counters.robots_given_up += 1
            log.warning("%s could not be had %d times (%s): the queued %s URLs of %s end as robots_unavailable",
                        url, answer.failures, answer.error, scheme, state.host)
        elif answer.failures == 1:
            log.warning("%s is unavailable (%s): nothing of %s://%s is fetched until it is (retried with backoff)",
                        url, answer.error, scheme, state.host)

    async def _bind_ip_gate(self, state: HostState, permit: Permit, scheme: str) -> bool:
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
        self._hosts.robots_not_sent(state, scheme, permit.host_ticket, now)
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

    def snapshot(self) -> FetchSnapshot:
        counters = self.counters
        attempts, retries = counters.host_attempts, counters.retries
        # The one retry ratio: retries per request that reached a host.
        ratio = round(retries / attempts, 4) if attempts else 0.0
        return FetchSnapshot(
            counters=FetchCounters(
                retries=retries, retry_ratio=ratio, robots_fetched=counters.robots_fetched,
                robots_given_up=counters.robots_given_up,
                too_many_redirects=self.outcomes.get(FetchOutcome.TOO_MANY_REDIRECTS, 0),
                outcomes={str(outcome): count for outcome, count in self.outcomes.items()},
                refusals={str(kind): self.refusals[kind] for kind in RefusalKind},
                refusal_pauses=counters.refusal_pauses),
            retries=RetrySnapshot(total=retries, host_attempts=attempts, ratio=ratio,
                                  api_postponed=counters.api_postponed, host_backoffs=counters.host_backoffs,
                                  gave_up=dict(self.gave_up)),
            fetches=FetchesSnapshot(fetch_seconds=self.fetch_seconds.snapshot(), body_bytes=self.body_bytes.snapshot(),
                                    responses=dict(self.responses), fetched_bytes=self.fetched_bytes))


@dataclass(slots=True)
class FetchCounts:
    """What the fetch stage counts, bumped on every answer."""

    host_attempts: int = 0  # requests that reached a host (not refused by the API)
    retries: int = 0
    api_postponed: int = 0
    host_backoffs: int = 0
    robots_fetched: int = 0
    robots_given_up: int = 0
    refusal_pauses: int = 0


@dataclass(frozen=True, slots=True)
class FetchCounters:
    """The fetch stage's part of the status's ``counters``."""

    retries: int = field(metadata=counter("crawler_retries",
                                          "Failed attempts sent back to the frontier for another try"))
    retry_ratio: float = field(metadata=gauge("crawler_retry_ratio", "Retries per request that reached a host"))
    robots_fetched: int = field(metadata=counter("crawler_robots_fetched",
                                                 "robots.txt requests (each redirect chain once)"))
    robots_given_up: int  # authorities given up
    too_many_redirects: int
    outcomes: Mapping[str, int] = field(metadata=counter("crawler_fetch_outcomes", "Fetch attempts by outcome",
                                                         labels=("outcome",)))
    refusals: Mapping[str, int] = field(default_factory=dict, metadata=counter(
        "crawler_refusals", "Answers that were the site refusing the crawler, by kind (core.refusals)",
        labels=("kind",)))
    refusal_pauses: int = field(default=0, metadata=counter(
        "crawler_refusal_pauses", "Host pauses for a challenge, captcha or soft block"))


@dataclass(frozen=True, slots=True)
class RetrySnapshot:
    """Retries as load (rule 6): the status's ``retries``."""

    total: int
    host_attempts: int = field(metadata=counter("crawler_host_attempts_all", "Requests that reached any host"))
    ratio: float
    api_postponed: int = field(metadata=counter("crawler_api_postponed",
                                                "URLs the API refused, retried without spending budget"))
    host_backoffs: int = field(metadata=counter("crawler_host_backoffs", "Host pauses for 429s without Retry-After"))
    gave_up: Mapping[str, int] = field(metadata=counter("crawler_retries_given_up",
                                                        "URLs not retried any more, by reason", labels=("reason",)))


@dataclass(frozen=True, slots=True)
class FetchesSnapshot:
    """Page fetches: durations, body sizes, answers by status class, bytes received."""

    fetch_seconds: HistogramSnapshot = field(metadata=histogram(
        "crawler_fetch_duration_seconds", "Time of each page fetch, to the end of its body or error"))
    body_bytes: HistogramSnapshot = field(metadata=histogram(
        "crawler_response_body_bytes", "Body size of each HTTP answer to a page fetch, as received"))
    # page fetches by status class; none: no HTTP answer
    responses: Mapping[str, int] = field(metadata=counter(
        "crawler_responses", "Page fetches by status class (none: no HTTP answer)", labels=("code_class",)))
    fetched_bytes: int = field(metadata=counter("crawler_fetched_bytes",
                                                "Response body bytes received (pages, robots.txt)"))


@dataclass(frozen=True, slots=True)
class FetchSnapshot:
    counters: FetchCounters
    retries: RetrySnapshot
    fetches: FetchesSnapshot


CODE_CLASSES = ("2xx", "3xx", "4xx", "5xx", "none")


def code_class(status: int | None) -> str:
    """``2xx`` .. ``5xx``; ``none`` for a fetch that got no HTTP answer; ``other`` outside."""
    if status is None:
        return "none"
    return f"{status // 100}xx" if 100 <= status < 600 else "other"


def _validators(lease: Lease) -> dict[str, str] | None:
    """A recrawl asks with what the last answer said of the page (RFC 9110 13.1): the server
    answers 304, without the body, if it has not changed."""
    etag, last_modified = lease.etag, lease.last_modified
    if etag is None and last_modified is None:
        return None
    headers = {}
    if etag is not None:
        headers["If-None-Match"] = etag
    if last_modified is not None:
        headers["If-Modified-Since"] = last_modified
    return headers
