"""Which limiter each answer describes (signals.classify), and latency-rise detection."""

from __future__ import annotations

import random

import pytest

from crawler_node.core.limiter import Outcome
from crawler_node.core.signals import ApiSignal, LatencyModel, classify
from crawler_node.fetch.fetcher import FetchResult


def answer(status: int, **headers: str) -> FetchResult:
    return FetchResult(url="http://a.test/", status=status, headers=list(headers.items()))


@pytest.mark.parametrize("through_api", [True, False])
def test_a_sites_429_goes_to_its_host_with_or_without_retry_after(through_api: bool) -> None:
    plain = classify(answer(429), now=0.0, through_api=through_api)
    assert (plain.host, plain.api, plain.retry_after_s) == (Outcome.THROTTLED, ApiSignal.NONE, None)
    zero = classify(answer(429, **{"Retry-After": "0"}), now=0.0, through_api=through_api)
    assert zero.retry_after_s == 0.0  # present, and zero: not the same as absent


def test_the_apis_own_limits_go_to_the_api_never_to_the_host() -> None:
    throttled = classify(answer(429, **{"X-Api-Limit": "concurrency", "Retry-After": "1"}), now=0.0)
    assert (throttled.host, throttled.api, throttled.retry_after_s) == (Outcome.NEUTRAL, ApiSignal.THROTTLED, 1.0)
    quota = classify(answer(509), now=0.0)
    assert (quota.host, quota.api) == (Outcome.NEUTRAL, ApiSignal.QUOTA)
    named = classify(answer(429, **{"X-Plan": "quota"}), now=0.0, api_limit_header="X-Plan")
    assert named.api is ApiSignal.QUOTA


def test_without_an_api_those_answers_are_the_sites() -> None:
    for result in (answer(509), answer(429, **{"X-Api-Limit": "concurrency"})):
        signal = classify(result, now=0.0, through_api=False)
        assert (signal.host, signal.api, signal.outcome) == (Outcome.THROTTLED, ApiSignal.NONE, "throttled")


@pytest.mark.parametrize("kwargs", [{"factor": 1.0}, {"min_rise_s": -1.0}, {"warmup": 0},
                                    {"slow_alpha": 0.5, "fast_alpha": 0.3}])
def test_latency_baseline_validates(kwargs: dict) -> None:
    with pytest.raises(ValueError):
        LatencyModel(**kwargs)


class Baseline:
    """One host's level, kept as the host table keeps it."""

    def __init__(self, **kwargs: float) -> None:
        self.model = LatencyModel(**kwargs)
        self.level = None

    def observe(self, latency_s: float) -> bool:
        self.level, rising = self.model.observe(self.level, latency_s)
        return rising

    @property
    def baseline_s(self) -> float:
        return self.level.baseline_s


def test_jitter_and_a_single_slow_answer_are_not_a_rise() -> None:
    rng = random.Random(1)
    baseline = Baseline(factor=3.0, min_rise_s=0.5)
    assert not any(baseline.observe(0.1 + rng.uniform(0, 0.05)) for _ in range(500))
    assert not baseline.observe(1.0)  # one slow answer moves the recent level by 30% of it
    assert abs(baseline.baseline_s - 0.125) < 0.05


def test_a_sustained_rise_is_reported_and_then_becomes_the_new_normal() -> None:
    baseline = Baseline(factor=3.0, min_rise_s=0.5)
    for _ in range(50):
        baseline.observe(0.1)
    reports = [baseline.observe(2.0) for _ in range(200)]
    first = reports.index(True)
    assert first <= 3  # noticed within a few answers
    assert not any(reports[-50:])  # and forgiven once 2 s has become this host's normal
    assert 1.5 < baseline.baseline_s <= 2.0


def test_a_fast_host_needs_an_absolute_rise_too() -> None:
    baseline = Baseline(factor=3.0, min_rise_s=0.5)
    for _ in range(20):
        baseline.observe(0.01)
    assert not any(baseline.observe(0.2) for _ in range(30))  # 20x slower, but only +0.19 s
