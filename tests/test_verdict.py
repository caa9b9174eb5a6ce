"""What a response means (core.verdict), through its public functions: a host's state, a fetch
result and the time in, a verdict out. No node, no clock, no sleeping."""

from __future__ import annotations

import random
from dataclasses import dataclass

import pytest

from crawler_node.core.backoff import NO_BACKOFF, BackoffState, HostBackoffPolicy, RetryPolicy
from crawler_node.core.limiter import Outcome
from crawler_node.core.outcomes import ErrorKind, FetchOutcome
from crawler_node.core.response import FetchResult
from crawler_node.core.robots import AuthorityRobots, RobotsPolicy, RobotsStatus
from crawler_node.core.signals import ApiSignal, LatencyLevel, LatencyModel
from crawler_node.core.verdict import Pause, ResponseRules, RetryAction, judge_page, judge_robots

NOW = 1_000_000.0


@dataclass
class Host:
    crawl_delay: float = 0.0
    throttle_streak: int = 0
    backoff: BackoffState = NO_BACKOFF
    latency: LatencyLevel | None = None


def rules(**overrides) -> ResponseRules:
    values = dict(retry=RetryPolicy(budget=3, base_s=1.0, cap_s=60.0, rng=random.Random(7)),
                  host_backoff=HostBackoffPolicy(initial_s=60.0, forgive_after_s=600.0, rng=random.Random(7)),
                  host_backoff_after=2, retry_after_cap_s=300.0, latency=None, through_api=False)
    values.update(overrides)
    return ResponseRules(**values)


def result(status: int | None = 200, error: ErrorKind | None = None, headers_s: float | None = 0.1,
           **headers: str) -> FetchResult:
    return FetchResult(url="http://a.test/", status=status, error=error, headers_s=headers_s,
                       headers=list(headers.items()))


def judge(host: Host, answer: FetchResult, *, attempt: int = 1, current: bool = True, now: float = NOW, **kw):
    return judge_page(host, answer, attempt=attempt, in_current_round=current, now=now, rules=rules(**kw))


def apply(host: Host, verdict) -> Host:
    """What the host table keeps of a verdict (node.hosts.HostTable.finish_page)."""
    return Host(host.crawl_delay, verdict.throttle_streak, verdict.backoff, verdict.latency)


def test_a_page_is_done_and_the_host_may_go_on_at_once() -> None:
    verdict = judge(Host(), result(200))
    assert (verdict.signal.outcome, verdict.limiter, verdict.retry, verdict.next_eligible) == (
        FetchOutcome.OK, Outcome.SUCCESS, RetryAction.DONE, 0.0)


def test_a_crawl_delay_counts_from_the_end_of_the_request() -> None:
    assert judge(Host(crawl_delay=3.0), result(200), now=NOW).next_eligible == NOW + 3.0


@pytest.mark.parametrize("status", [400, 403, 404, 410, 451])
def test_a_final_client_error_is_the_pages_result_and_never_retried(status: int) -> None:
    verdict = judge(Host(), result(status))
    assert verdict.retry is RetryAction.DONE and verdict.retry_at is None and verdict.limiter is Outcome.NEUTRAL


@pytest.mark.parametrize(("answer", "why"), [
    (result(500), "server_error"), (result(408), "request_timeout"),
    (result(None, ErrorKind.TIMEOUT), "timeout"), (result(None, ErrorKind.CONNECTION), "connection"),
])
def test_transient_failures_are_retried_with_backoff_within_the_budget(answer: FetchResult, why: str) -> None:
    verdict = judge(Host(), answer, attempt=1)
    assert verdict.retry is RetryAction.RETRY and verdict.reason == why
    assert NOW <= verdict.retry_at <= NOW + 1.0  # full jitter over [0, base]
    spent = judge(Host(), answer, attempt=4)
    assert (spent.retry, spent.reason) == (RetryAction.GIVE_UP, "budget_exhausted")


@pytest.mark.parametrize("error", [ErrorKind.TOO_LARGE, ErrorKind.NOT_ALLOWED])
def test_what_cannot_succeed_is_given_up_at_once(error: ErrorKind) -> None:
    verdict = judge(Host(), result(None, error), attempt=1)
    assert verdict.retry is RetryAction.GIVE_UP and verdict.reason == f"fatal_{error}"


def test_a_retry_after_pauses_the_host_and_the_retry_honours_it() -> None:
    verdict = judge(Host(), result(503, **{"Retry-After": "120"}))
    assert verdict.signal.outcome is FetchOutcome.THROTTLED and verdict.limiter is Outcome.THROTTLED
    assert verdict.pause is Pause.RETRY_AFTER and verdict.next_eligible == NOW + 120.0
    assert verdict.retry is RetryAction.RETRY and verdict.retry_at == NOW + 120.0
    capped = judge(Host(), result(429, **{"Retry-After": "100000"}))
    assert capped.next_eligible == NOW + 300.0  # retry_after_cap_s


def test_429s_without_retry_after_pause_the_host_after_repeated_cuts() -> None:
    host = Host()
    first = judge(host, result(429))
    assert first.pause is Pause.NONE and first.throttle_streak == 1
    host = apply(host, first)
    echo = judge(host, result(429), current=False)  # from the window already cut: no new cut
    assert echo.throttle_streak == 1 and echo.pause is Pause.NONE
    ok = judge(host, result(200))
    assert ok.throttle_streak == 0, "a success resets the streak"
    second = judge(host, result(429))
    assert second.pause is Pause.BACKOFF and second.throttle_streak == 0 and second.backoff.level == 1
    assert 48.0 <= second.next_eligible - NOW <= 72.0
    host = apply(host, second)
    third = judge(apply(host, judge(host, result(429))), result(429))
    assert third.backoff.level == 2 and 96.0 <= third.next_eligible - NOW <= 144.0


def test_a_host_backoff_is_forgiven_only_after_a_quiet_period() -> None:
    host = Host(backoff=BackoffState(level=2, last_throttle=NOW, eligible_at=NOW + 120))
    assert judge(host, result(200), now=NOW + 600).backoff.level == 2
    assert judge(host, result(200), now=NOW + 601).backoff == NO_BACKOFF


def test_an_api_refusal_is_postponed_without_spending_budget_or_touching_the_host() -> None:
    host = Host(throttle_streak=1)
    refused = result(429, **{"X-Api-Limit": "concurrency", "Retry-After": "2"})
    verdict = judge(host, refused, attempt=3, through_api=True)
    assert verdict.signal.api is ApiSignal.THROTTLED and not verdict.reached_host
    assert verdict.retry is RetryAction.POSTPONE and verdict.retry_at >= NOW + 2.0
    assert (verdict.limiter, verdict.next_eligible, verdict.throttle_streak) == (Outcome.NEUTRAL, 0.0, 1)
    quota = judge(host, result(509), through_api=True)
    assert quota.signal.api is ApiSignal.QUOTA and quota.retry is RetryAction.POSTPONE
    site = judge(host, result(509), through_api=False)  # fetching directly, a 509 is the site's
    assert site.signal.api is ApiSignal.NONE and site.limiter is Outcome.THROTTLED


def test_latency_far_above_the_hosts_baseline_is_a_slow_down_signal() -> None:
    model = LatencyModel(factor=3.0, min_rise_s=0.5)
    host = Host()
    for _ in range(20):
        verdict = judge(host, result(200, headers_s=0.1), latency=model)
        assert verdict.limiter is Outcome.SUCCESS
        host = apply(host, verdict)
    slow = []
    for _ in range(3):
        verdict = judge(host, result(200, headers_s=2.0), latency=model)
        slow.append(verdict)
        host = apply(host, verdict)
    assert any(v.latency_rise and v.limiter is Outcome.THROTTLED for v in slow)
    assert all(v.retry is RetryAction.DONE for v in slow)  # the page itself is fine
    assert judge(Host(), result(200, headers_s=5.0)).limiter is Outcome.SUCCESS  # the model off


def test_robots_txt_answers() -> None:
    r = rules(max_crawl_delay_s=30.0, robots=RobotsPolicy(retry_s=30.0, retry_cap_s=100.0, max_attempts=3))
    parsed = judge_robots(FetchResult(url="http://a.test/robots.txt", status=200,
                                      body=b"User-agent: *\nDisallow: /x\nCrawl-delay: 100\n"), now=NOW, rules=r)
    assert parsed.ready and parsed.crawl_delay == 30.0 and parsed.next_eligible == NOW + 30.0
    assert parsed.rules is not None and not parsed.rules.allowed("http://a.test/x")
    missing = judge_robots(FetchResult(url="http://a.test/robots.txt", status=404), now=NOW, rules=r)
    assert missing.ready and missing.rules is None
    down = judge_robots(FetchResult(url="http://a.test/robots.txt", status=503), now=NOW, rules=r)
    assert not down.ready and down.next_eligible == NOW + 30.0
    unreachable = judge_robots(FetchResult(url="http://a.test/robots.txt", error=ErrorKind.CONNECTION),
                               now=NOW, rules=r)
    assert not unreachable.ready
    private = judge_robots(FetchResult(url="http://a.test/robots.txt", error=ErrorKind.NOT_ALLOWED),
                           now=NOW, rules=r)
    assert private.ready and private.rules is None
    # RFC 9309 2.3.1.3: any 4xx but 429 is "unavailable", no restrictions; a 3xx left over after
    # the redirects the fetch followed as well.
    for status in (400, 401, 403, 410, 301):
        assert judge_robots(FetchResult(url="http://a.test/robots.txt", status=status), now=NOW, rules=r).ready


def test_an_unreachable_robots_txt_is_asked_again_later_and_then_given_up() -> None:
    r = rules(robots=RobotsPolicy(retry_s=30.0, retry_cap_s=100.0, max_attempts=3))
    failures, waits = 0, []
    for error in (dict(status=429), dict(error=ErrorKind.DNS, error_detail="DNS: name not found")):
        answer = judge_robots(FetchResult(url="https://a.test/robots.txt", **error), now=NOW, rules=r,
                              failures=failures)
        assert answer.status is RobotsStatus.UNKNOWN and answer.failures == failures + 1
        failures, waits = answer.failures, [*waits, answer.next_eligible - NOW]
    assert waits == [30.0, 60.0] and answer.error == "DNS: name not found"
    final = judge_robots(FetchResult(url="https://a.test/robots.txt", status=500), now=NOW, rules=r, failures=2)
    assert final.status is RobotsStatus.UNAVAILABLE and final.error == "HTTP 500"
    # a certificate that fails verification fails every request alike: given up at once
    tls = judge_robots(FetchResult(url="https://a.test/robots.txt", error=ErrorKind.TLS,
                                   error_detail="certificate has expired"), now=NOW, rules=r)
    assert tls.status is RobotsStatus.UNAVAILABLE and tls.certificate_failed and tls.error == "certificate has expired"
    # robots.txt cut by a timeout may have lost its rules: not obeyed as it came
    cut = judge_robots(FetchResult(url="https://a.test/robots.txt", status=200, body=b"User-agent: *\n",
                                   error=ErrorKind.TIMEOUT, truncated="time"), now=NOW, rules=r)
    assert cut.status is RobotsStatus.UNKNOWN
    # a Retry-After longer than the backoff is honoured (capped)
    later = judge_robots(FetchResult(url="https://a.test/robots.txt", status=503, headers=[("Retry-After", "90")]),
                         now=NOW, rules=r)
    assert later.next_eligible == NOW + 90.0


def test_robots_policy_refetches_after_the_ttl_and_retries_a_given_up_authority_later() -> None:
    policy = RobotsPolicy(ttl_s=100.0, retry_cap_s=50.0)
    ready = AuthorityRobots(status=RobotsStatus.READY, since=0.0)
    assert not policy.due(ready, 100.0) and policy.due(ready, 100.1)
    given_up = AuthorityRobots(status=RobotsStatus.UNAVAILABLE, since=0.0, failures=6)
    assert not policy.due(given_up, 50.0) and policy.due(given_up, 50.1) and given_up.failures == 0
    assert policy.due(AuthorityRobots(), 0.0) and not policy.due(AuthorityRobots(status=RobotsStatus.FETCHING), 0.0)
