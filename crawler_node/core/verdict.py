"""What a response means: a pure function from (a host's state, a fetch result, the time) to
a verdict (DESIGN.md rules 4-6).

The verdict says everything the node does with one answer, and nothing is done while it is
made: what the host's AIMD limiter learns; whether the URL is done, retried (when), postponed
(refused by the fetch-through API before it reached the site) or given up (why); when the
host may be asked again (Crawl-delay, Retry-After, host backoff); and the host's new
throttle streak, backoff and latency level. The per-host table applies it
(node.hosts.HostTable.finish_page), the fetch-through API's gate learns from ``signal.api``.
Randomness (retry jitter, backoff jitter) comes from the injected policies' generators.
"""

from __future__ import annotations

import enum
from dataclasses import dataclass
from typing import Protocol

from crawler_node.core.backoff import FINAL_ANSWER, NO_BACKOFF, BackoffState, HostBackoffPolicy, RetryPolicy
from crawler_node.core.encoding import decode_body
from crawler_node.core.limiter import Outcome
from crawler_node.core.outcomes import ErrorKind, FetchOutcome
from crawler_node.core.refusals import Refusal, RefusalKind
from crawler_node.core.response import FetchResult
from crawler_node.core.robots import RobotsPolicy, RobotsRules, RobotsStatus, RobotsVerdict, verdict_for_status
from crawler_node.core.signals import ApiSignal, LatencyLevel, LatencyModel, Signal, classify


class RetryAction(enum.Enum):
    DONE = "done"  # this attempt is the URL's result (a page, a redirect, a 404)
    RETRY = "retry"  # back to its queue until retry_at; the attempt counts against the budget
    POSTPONE = "postpone"  # refused before the site (API limit): back until retry_at, budget kept
    GIVE_UP = "give_up"  # failed for good; ``reason`` says why


class Pause(enum.Enum):
    NONE = "none"
    RETRY_AFTER = "retry_after"  # the site said when to come back
    BACKOFF = "backoff"  # the site keeps answering 429 without saying when
    REFUSAL = "refusal"  # a challenge, captcha or soft block (core.refusals): the host waits it out


class HostView(Protocol):
    """What a verdict reads of a host (node.hosts.HostState satisfies it)."""

    @property
    def crawl_delay(self) -> float: ...
    @property
    def throttle_streak(self) -> int: ...
    @property
    def backoff(self) -> BackoffState: ...
    @property
    def latency(self) -> LatencyLevel | None: ...


OUTCOME_OF_REFUSAL = {
    RefusalKind.CHALLENGE: FetchOutcome.BLOCKED_CHALLENGE,
    RefusalKind.CAPTCHA: FetchOutcome.BLOCKED_CAPTCHA,
    RefusalKind.SOFT_BLOCK: FetchOutcome.BLOCKED_SOFT,
    RefusalKind.LOGIN_WALL: FetchOutcome.LOGIN_WALL,
    RefusalKind.REFUSAL: FetchOutcome.REFUSED,
}


@dataclass(frozen=True, slots=True)
class RefusalPolicy:
    """How a host that refuses the crawler is waited out (config.SiteHealthConfig): each new
    incident pauses the host ``backoff``'s next step (60 s, doubling, capped, jittered), and the
    level starts over after ``forgive_after_s`` without one, counted from the end of the last
    pause. A URL that met ``url_budget`` refusals ends with its blocked_* outcome."""

    backoff: HostBackoffPolicy
    url_budget: int = 3

    def incident(self, state: BackoffState, now: float) -> tuple[BackoffState, bool]:
        """The host's refusal backoff after a refusal now, and whether it is a new incident
        (one that ends a pause, not an echo of requests sent before the pause began)."""
        if now < state.eligible_at:
            return state, False
        if state.level and now - max(state.eligible_at, state.last_throttle or 0.0) > self.backoff.forgive_after_s:
            state = NO_BACKOFF
        return self.backoff.on_throttle(state, now), True


@dataclass(frozen=True, slots=True)
class ResponseRules:
    """The settings a verdict applies, read once from Settings (see node.builders.build_rules)."""

    retry: RetryPolicy
    host_backoff: HostBackoffPolicy
    host_backoff_after: int  # limit cuts from 429s without Retry-After, in a row, before a pause
    retry_after_cap_s: float
    latency: LatencyModel | None  # None: a slow success is not a slow-down signal
    through_api: bool  # fetching through a proxy/API: its 429/509 are the API's
    api_limit_header: str = "X-Api-Limit"
    robots_agent: str = "crawler-node"
    max_crawl_delay_s: float = 30.0
    robots: RobotsPolicy = RobotsPolicy()
    robots_max_bytes: int = 500_000  # of a robots.txt read, decoded (RFC 9309 2.5: at least 500 KiB)
    refusals: RefusalPolicy | None = None  # None: a refusal is judged as its status alone

    def api_retry_delay(self, signal: Signal) -> float:
        """When to try again what the API refused: its Retry-After (capped), jittered."""
        asked = min(signal.retry_after_s or 0.0, self.retry_after_cap_s)
        return max(asked, self.retry.backoff_s(1))


@dataclass(slots=True)
class Verdict:
    """One page response, judged. Built by :func:`judge_page`; treat as immutable."""

    signal: Signal
    limiter: Outcome  # what the host's limiter learns (a slow success can be THROTTLED)
    retry: RetryAction
    retry_at: float | None  # RETRY, POSTPONE: eligible again then
    reason: str | None  # RETRY: why it may help; GIVE_UP: why it cannot
    next_eligible: float  # the host sends nothing before this (0.0: no new constraint)
    pause: Pause
    throttle_streak: int
    backoff: BackoffState
    latency: LatencyLevel | None
    latency_rise: bool = False
    refusal: Refusal | None = None  # the site refused the crawler (core.refusals), with its evidence
    refusal_backoff: BackoffState | None = None  # the host's new refusal backoff (None: unchanged)
    refusal_incident: bool = False  # this refusal paused the host anew

    @property
    def reached_host(self) -> bool:
        """False when the fetch-through API refused the request: the host saw nothing."""
        return self.signal.api is ApiSignal.NONE


def unfetched(outcome: FetchOutcome, *, gave_up: bool = False) -> Verdict:
    """The verdict of a URL that ends without a request (robots.txt forbids it, or could not
    be had): its crawl.log line says why, and the host learns nothing."""
    signal = Signal(outcome, Outcome.NEUTRAL)
    if gave_up:
        return Verdict(signal, Outcome.NEUTRAL, RetryAction.GIVE_UP, None, str(outcome), 0.0, Pause.NONE, 0,
                       NO_BACKOFF, None)
    return Verdict(signal, Outcome.NEUTRAL, RetryAction.DONE, None, None, 0.0, Pause.NONE, 0, NO_BACKOFF, None)


def record_only(signal: Signal) -> Verdict:
    """The verdict of a request that is not a URL of the frontier (a robots.txt): archived and
    logged as it was answered, nothing to finish."""
    return Verdict(signal, signal.host, RetryAction.DONE, None, None, 0.0, Pause.NONE, 0, NO_BACKOFF, None)


def judge_page(host: HostView, result: FetchResult, *, attempt: int, in_current_round: bool, now: float,
               rules: ResponseRules, refusal: Refusal | None = None, url_refusals: int = 0,
               refusal_backoff: BackoffState = NO_BACKOFF) -> Verdict:
    """``attempt`` counts this one (1 on the first); ``in_current_round``: the request was sent
    into the host's current limiter window (core.limiter.AimdLimiter.is_current), so a
    throttle now is a new cut, not an echo of one already made. ``refusal``: what
    core.refusals made of the answer; ``url_refusals``: refusals this URL met before;
    ``refusal_backoff``: the host's."""
    signal = classify(result, now=now, api_limit_header=rules.api_limit_header, through_api=rules.through_api)
    if refusal is not None and rules.refusals is not None and signal.api is ApiSignal.NONE:
        return _refused(host, signal, refusal, url_refusals, refusal_backoff, now, rules.refusals)
    outcome = signal.outcome
    if outcome is FetchOutcome.OK or outcome is FetchOutcome.REDIRECT or outcome is FetchOutcome.NOT_MODIFIED:
        return _success(host, signal, result, now, rules)  # most answers: the short way
    if signal.api is not ApiSignal.NONE:
        # The API's answer, not the host's (rule 5): nothing about the host changes.
        return Verdict(signal, Outcome.NEUTRAL, RetryAction.POSTPONE, now + rules.api_retry_delay(signal), None,
                       0.0, Pause.NONE, host.throttle_streak, host.backoff, host.latency)
    limiter, latency, rise = _limiter_news(host, signal, result, rules)
    # Crawl-delay counts from the end of this request, so a slow response never lets two
    # requests overlap or arrive closer together than the site asked for.
    next_eligible = now + host.crawl_delay if host.crawl_delay else 0.0
    pause, streak, backoff = Pause.NONE, host.throttle_streak, host.backoff
    if signal.outcome is FetchOutcome.THROTTLED:
        if signal.retry_after_s is not None:  # "Retry-After: 0" is an answer too
            next_eligible = max(next_eligible, now + min(signal.retry_after_s, rules.retry_after_cap_s))
            pause = Pause.RETRY_AFTER
        elif result.status == 429:
            # AIMD cuts the limit; a host that keeps answering so, cut after cut with no
            # success between, is paused as a whole, longer each time, until forgiven.
            if in_current_round:
                streak += 1
            if streak >= rules.host_backoff_after:
                backoff = rules.host_backoff.on_throttle(backoff, now)
                streak = 0
                next_eligible = max(next_eligible, backoff.eligible_at)
                pause = Pause.BACKOFF
    elif signal.success:
        streak = 0
        backoff = rules.host_backoff.on_success(backoff, now)
    action, retry_at, reason = _retry(signal, result, attempt, now, rules)
    return Verdict(signal, limiter, action, retry_at, reason, next_eligible, pause, streak, backoff, latency, rise)


def _refused(host: HostView, signal: Signal, refusal: Refusal, url_refusals: int, refusal_backoff: BackoffState,
             now: float, policy: RefusalPolicy) -> Verdict:
    """The site refused the crawler. A login wall or a plain 401/403 is the URL's answer (the
    host's limiter learns nothing). A challenge, captcha or soft block means the site fights
    the crawler: the host's own limiter is cut (rule 5), the host pauses, and the URL waits
    for the pause's end with its retry budget untouched, until it met ``url_budget`` of them."""
    outcome = OUTCOME_OF_REFUSAL[refusal.kind]
    signal = Signal(outcome, Outcome.THROTTLED if refusal.kind.pauses else Outcome.NEUTRAL,
                    retry_after_s=signal.retry_after_s)
    next_eligible = now + host.crawl_delay if host.crawl_delay else 0.0
    if not refusal.kind.pauses:
        return Verdict(signal, Outcome.NEUTRAL, RetryAction.DONE, None, None, next_eligible, Pause.NONE,
                       host.throttle_streak, host.backoff, host.latency, refusal=refusal)
    backoff, incident = policy.incident(refusal_backoff, now)
    next_eligible = max(next_eligible, backoff.eligible_at)
    if url_refusals + 1 >= policy.url_budget:
        action, retry_at, reason = RetryAction.GIVE_UP, None, str(outcome)
    else:
        action, retry_at, reason = RetryAction.POSTPONE, backoff.eligible_at, str(refusal.kind)
    return Verdict(signal, Outcome.THROTTLED, action, retry_at, reason, next_eligible, Pause.REFUSAL,
                   host.throttle_streak, host.backoff, host.latency, refusal=refusal, refusal_backoff=backoff,
                   refusal_incident=incident)


def _success(host: HostView, signal: Signal, result: FetchResult, now: float, rules: ResponseRules) -> Verdict:
    """What judge_page decides for a page or a redirect, without the branches of failures."""
    latency, rise, limiter = host.latency, False, Outcome.SUCCESS
    model = rules.latency
    if model is not None and result.headers_s is not None:
        latency, rise = model.observe(latency, result.headers_s)
        if rise:
            limiter = Outcome.THROTTLED  # far slower than the host's own normal (rule 5)
    backoff = host.backoff
    if backoff.level:
        backoff = rules.host_backoff.on_success(backoff, now)
    next_eligible = now + host.crawl_delay if host.crawl_delay else 0.0
    return Verdict(signal, limiter, RetryAction.DONE, None, None, next_eligible, Pause.NONE, 0, backoff, latency,
                   rise)


def _limiter_news(host: HostView, signal: Signal, result: FetchResult,
                  rules: ResponseRules) -> tuple[Outcome, LatencyLevel | None, bool]:
    """The signal's verdict for the limiter, except that a success far slower than the host's
    own normal is a slow-down signal too (rule 5)."""
    if signal.host is not Outcome.SUCCESS or rules.latency is None or result.headers_s is None:
        return signal.host, host.latency, False
    latency, rising = rules.latency.observe(host.latency, result.headers_s)
    return (Outcome.THROTTLED if rising else Outcome.SUCCESS), latency, rising


def _retry(signal: Signal, result: FetchResult, attempt: int, now: float,
           rules: ResponseRules) -> tuple[RetryAction, float | None, str | None]:
    if signal.success:
        return RetryAction.DONE, None, None
    if result.status is None and signal.error is None:
        return RetryAction.GIVE_UP, None, "unexpected_status"
    decision = rules.retry.decide(attempt=attempt, status=result.status, error=signal.error,
                                  retry_after_s=signal.retry_after_s)
    if decision.retry:
        return RetryAction.RETRY, now + decision.delay_s, decision.reason
    if decision.reason == FINAL_ANSWER:
        return RetryAction.DONE, None, None  # a 404 is what the page is
    return RetryAction.GIVE_UP, None, decision.reason


@dataclass(slots=True)
class RobotsAnswer:
    """A robots.txt response, judged (see :func:`judge_robots`)."""

    signal: Signal
    limiter: Outcome
    status: RobotsStatus  # READY: rules known; UNKNOWN: assume disallowed, ask again; UNAVAILABLE: given up
    rules: RobotsRules | None  # None when READY: no restrictions
    crawl_delay: float
    next_eligible: float
    api_refused: bool  # the API refused it: robots.txt was never asked for
    body: bytes | None = None  # the file as received, when its rules apply (None: no restrictions)
    failures: int = 0  # failed attempts in a row, this one included
    error: str | None = None  # why no rules came (a status or an error), for status and logs
    certificate_failed: bool = False  # given up because TLS failed: the URLs end as outcome tls

    @property
    def ready(self) -> bool:
        return self.status is RobotsStatus.READY


def judge_robots(result: FetchResult, *, now: float, rules: ResponseRules, failures: int = 0,
                 refused: bool = False) -> RobotsAnswer:
    """The final answer of a robots.txt fetch (after its redirects). ``failures``: failed
    attempts in a row before this one. RFC 9309 2.3.1: a 2xx is obeyed, another 4xx means no
    restrictions, a 5xx, a 429 or no answer at all (network, DNS, TLS) means complete
    disallow for now, asked again with a doubling wait, and given up after
    ``rules.robots.max_attempts`` such answers in a row. ``refused``: the answer is a challenge,
    a captcha or a soft block (core.refusals): not the site's rules but its refusal, asked
    again later like a 5xx, never read as a 4xx's "no restrictions"."""
    signal = classify(result, now=now, api_limit_header=rules.api_limit_header, through_api=rules.through_api)
    if signal.api is not ApiSignal.NONE:
        return RobotsAnswer(signal, Outcome.NEUTRAL, RobotsStatus.UNKNOWN, None, 0.0,
                            now + rules.api_retry_delay(signal), True, failures=failures)
    if result.error == ErrorKind.NOT_ALLOWED:
        # The host itself may not be fetched; its pages will fail the same way, for good.
        verdict = RobotsVerdict.ALLOW_ALL
    else:
        # A file cut at the size cap is read as far as it came (RFC 9309 2.5: at least 500 KiB
        # must be parsed); one cut by a timeout or a lost connection may have lost its rules.
        verdict = verdict_for_status(result.status if result.error is None or result.truncated == "length" else None)
        if refused:
            verdict = RobotsVerdict.RETRY_LATER
    if verdict is RobotsVerdict.RETRY_LATER:
        failures += 1
        error = f"HTTP {result.status}" if result.error is None else (result.error_detail or str(result.error))
        policy = rules.robots
        if result.error == ErrorKind.TLS:
            # A certificate that fails verification fails every request the same way: the
            # authority is given up at once, and its URLs end as outcome tls with the reason,
            # once each, without a handshake of their own (it is asked again after retry_cap_s).
            return RobotsAnswer(signal, signal.host, RobotsStatus.UNAVAILABLE, None, 0.0, now, False,
                                failures=failures, error=error, certificate_failed=True)
        if policy.gives_up(failures):
            return RobotsAnswer(signal, signal.host, RobotsStatus.UNAVAILABLE, None, 0.0, now, False,
                                failures=failures, error=error)
        retry_in = policy.retry_in(failures, signal.retry_after_s)
        return RobotsAnswer(signal, signal.host, RobotsStatus.UNKNOWN, None, 0.0, now + retry_in, False,
                            failures=failures, error=error)
    parsed = body = None
    if verdict is RobotsVerdict.PARSE:
        # The rules as the server sent them, decoded (a gzip robots.txt is common); a coding
        # we do not decode reads as garbage, which parses as no rules, like a 4xx.
        body = decode_body(result.body, result.content_encoding, rules.robots_max_bytes).body
        parsed = RobotsRules.parse(body, rules.robots_agent)
    crawl_delay = min(parsed.crawl_delay() if parsed else 0.0, rules.max_crawl_delay_s)
    return RobotsAnswer(signal, signal.host, RobotsStatus.READY, parsed, crawl_delay, now + crawl_delay, False, body)
