import random
from datetime import UTC, datetime
from email.utils import format_datetime

import pytest

from crawler_node.core.backoff import NO_BACKOFF, HostBackoffPolicy, RetryDecision, RetryPolicy, parse_retry_after
from crawler_node.core.outcomes import ErrorKind

NOW = 1_700_000_000.0


def http_date(timestamp: float) -> str:
    return format_datetime(datetime.fromtimestamp(timestamp, UTC), usegmt=True)


@pytest.mark.parametrize(
    ("value", "seconds"),
    [
        ("120", 120.0),
        ("  7 ", 7.0),
        ("0", 0.0),
        ("-5", 0.0),
        ("1.5", 1.5),
        (http_date(NOW + 90), 90.0),
        (http_date(NOW - 90), 0.0),
        ("Wed, 21 Oct 2015 07:28:00 -0000", 0.0),  # naive date, in the past
        (None, None),
        ("", None),
        ("soon", None),
        ("Wed, 99 Foo 2015", None),
        ("nan", None),
        ("inf", None),
    ],
)
def test_parse_retry_after(value: str | None, seconds: float | None) -> None:
    assert parse_retry_after(value, now=NOW) == seconds


def policy(**kwargs) -> RetryPolicy:
    return RetryPolicy(rng=random.Random(1234), **kwargs)


@pytest.mark.parametrize("status", [200, 204, 301, 304])
def test_success_and_redirects_are_not_retried(status: int) -> None:
    assert policy().decide(attempt=1, status=status) == RetryDecision(False, 0.0, "ok")


@pytest.mark.parametrize("status", [400, 401, 403, 404, 410, 451])
def test_client_errors_are_not_retried(status: int) -> None:
    decision = policy().decide(attempt=1, status=status)
    assert (decision.retry, decision.reason) == (False, "client_error")


@pytest.mark.parametrize(
    ("status", "error", "reason"),
    [
        (408, None, "request_timeout"),
        (429, None, "throttled"),
        (500, None, "server_error"),
        (503, None, "server_error"),
        (None, "timeout", "timeout"),
        (None, "connection", "connection"),
        (200, "timeout", "timeout"),  # the body read timed out after the status line
    ],
)
def test_transient_failures_are_retried(status: int | None, error: str | None, reason: str) -> None:
    decision = policy().decide(attempt=1, status=status, error=error)
    assert decision.retry
    assert decision.reason == reason


@pytest.mark.parametrize("error", [ErrorKind.TOO_LARGE, ErrorKind.NOT_ALLOWED])
def test_fatal_errors_are_never_retried(error: str) -> None:
    decision = policy().decide(attempt=1, status=503, error=error)
    assert not decision.retry
    assert decision.reason == f"fatal_{error}"


def test_a_client_error_with_a_transport_error_is_still_not_retried() -> None:
    assert not policy().decide(attempt=1, status=404, error=ErrorKind.TIMEOUT).retry


def test_budget_counts_retries_after_the_first_attempt() -> None:
    retry_policy = policy(budget=3)
    assert [retry_policy.decide(attempt=a, status=503).retry for a in (1, 2, 3, 4, 5)] == [
        True,
        True,
        True,
        False,
        False,
    ]
    assert retry_policy.decide(attempt=4, status=503).reason == "budget_exhausted"
    assert not policy(budget=0).decide(attempt=1, status=503).retry


def test_full_jitter_stays_within_the_exponential_bound() -> None:
    retry_policy = policy(budget=100, base_s=0.5, cap_s=8.0)
    for attempt in range(1, 12):
        bound = min(8.0, 0.5 * 2 ** (attempt - 1))
        delays = [retry_policy.decide(attempt=attempt, status=500).delay_s for _ in range(300)]
        assert all(0.0 <= d <= bound for d in delays)
        # Full jitter spreads over the whole range, not just near the bound.
        assert min(delays) < bound * 0.1 and max(delays) > bound * 0.9


def test_jitter_is_reproducible_with_a_seeded_rng() -> None:
    first, second = policy(), policy()
    delays = [first.decide(attempt=3, status=500).delay_s for _ in range(20)]
    assert delays == [second.decide(attempt=3, status=500).delay_s for _ in range(20)]


def test_huge_attempt_numbers_do_not_overflow() -> None:
    decision = policy(budget=10**6).decide(attempt=5_000, status=500)
    assert 0.0 <= decision.delay_s <= 60.0


def test_retry_after_is_honoured_and_capped() -> None:
    retry_policy = policy(cap_s=10.0, retry_after_cap_s=300.0)
    assert retry_policy.decide(attempt=1, status=429, retry_after_s=120.0).delay_s == 120.0
    assert retry_policy.decide(attempt=1, status=429, retry_after_s=10_000.0).delay_s == 300.0
    # A Retry-After shorter than the backoff does not make us come back sooner.
    for _ in range(50):
        decision = retry_policy.decide(attempt=5, status=503, retry_after_s=0.0)
        assert 0.0 <= decision.delay_s <= 10.0


def test_retry_after_does_not_override_the_budget() -> None:
    assert not policy(budget=1).decide(attempt=2, status=429, retry_after_s=1.0).retry


@pytest.mark.parametrize(
    "kwargs", [{"budget": -1}, {"base_s": 0.0}, {"base_s": 5.0, "cap_s": 1.0}, {"retry_after_cap_s": -1.0}]
)
def test_policy_validates(kwargs: dict) -> None:
    with pytest.raises(ValueError):
        RetryPolicy(**kwargs)


def test_decide_validates_its_arguments() -> None:
    with pytest.raises(ValueError):
        policy().decide(attempt=0, status=500)
    with pytest.raises(ValueError):
        policy().decide(attempt=1, status=None)


def test_host_backoff_doubles_with_jitter_up_to_the_cap() -> None:
    backoff = HostBackoffPolicy(initial_s=60.0, cap_s=3600.0, rng=random.Random(5))
    state, now = NO_BACKOFF, NOW
    for level in range(1, 12):
        state = backoff.on_throttle(state, now)
        nominal = 60.0 * 2 ** (level - 1)
        delay = state.eligible_at - now
        assert state.level == level and state.last_throttle == now
        assert delay <= 3600.0
        assert min(nominal * 0.8, 3600.0 * 0.8) <= delay <= min(nominal * 1.2, 3600.0)
        now = state.eligible_at


def test_host_backoff_forgives_only_after_a_quiet_period() -> None:
    backoff = HostBackoffPolicy(initial_s=60.0, forgive_after_s=600.0, rng=random.Random(5))
    state = backoff.on_throttle(backoff.on_throttle(NO_BACKOFF, NOW), NOW + 100)
    assert backoff.on_success(state, NOW + 100 + 600).level == 2  # exactly forgive_after_s: not yet
    assert not backoff.forgiven(state, NOW + 100 + 600)
    state = backoff.on_success(state, NOW + 100 + 601)
    assert state == NO_BACKOFF and backoff.forgiven(state, NOW + 100 + 601)
    first = backoff.on_throttle(state, NOW + 2000)
    assert 48.0 <= first.eligible_at - (NOW + 2000) <= 72.0  # back to the initial delay


@pytest.mark.parametrize(
    "kwargs", [{"initial_s": 0.0}, {"initial_s": 100.0, "cap_s": 10.0}, {"forgive_after_s": -1.0}]
)
def test_host_backoff_validates(kwargs: dict) -> None:
    with pytest.raises(ValueError):
        HostBackoffPolicy(**kwargs)
