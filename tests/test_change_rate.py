"""The change-rate estimator (core.change_rate) against simulated Poisson histories, and the
refresh schedule (core.refresh_schedule) against Cho & Garcia-Molina's properties."""

from __future__ import annotations

import math
import random
import statistics

import pytest

from crawler_node.core.adaptive_recrawl import Recrawler, payload_digest
from crawler_node.core.change_rate import (
    History,
    PooledRates,
    bin_seconds,
    estimate,
    interval_bin,
    observe,
    path_pattern,
    regular_rate,
)
from crawler_node.core.recrawl_policy import RecrawlPolicy
from crawler_node.core.refresh_schedule import RateMix, freshness, interval_for, optimal_frequency


def _poisson(rng: random.Random, mean: float) -> int:
    count, total = 0, rng.expovariate(1.0)
    while total < mean:
        count += 1
        total += rng.expovariate(1.0)
    return count


def _history(rng: random.Random, rate: float, intervals: list[float]) -> History:
    """What the recrawls of a page changing as a Poisson process of ``rate`` see; the digest
    is the number of changes so far, so a check sees a new one iff something changed."""
    now, changes = 0.0, 0
    history = observe(None, now, 0)
    for interval in intervals:
        now += interval
        changed = _poisson(rng, rate * interval)
        changes += changed
        history = observe(history, now, changes if changed else None)
    return history


def _expected_regular(rate: float, checks: int, interval: float) -> float:
    """E[r] of the bias-reduced estimator over the binomial law of the changes detected:
    the bias analysis of Cho & Garcia-Molina (TOIT 2003, section 4)."""
    p = -math.expm1(-rate * interval)
    return sum(math.comb(checks, k) * p ** k * (1 - p) ** (checks - k) * regular_rate(checks, k, interval)
               for k in range(checks + 1))


@pytest.mark.parametrize("rate_times_interval", [0.1, 0.5, 1.0, 2.0])
def test_regular_intervals_match_the_bias_analysis(rate_times_interval: float) -> None:
    rng = random.Random(7)
    checks, runs, rate = 50, 400, rate_times_interval  # interval 1 s
    estimates = [estimate(_history(rng, rate, [1.0] * checks), 0.0, prior_checks=0) for _ in range(runs)]
    predicted = _expected_regular(rate, checks, 1.0)
    standard_error = statistics.stdev(estimates) / math.sqrt(runs)
    assert abs(statistics.mean(estimates) - predicted) < 4 * standard_error
    # and the bias itself is what the paper says is small at these rates: under 10%
    assert abs(predicted / rate - 1) < 0.10


def test_regular_history_gives_the_closed_form() -> None:
    history = _history(random.Random(3), 0.02, [16.0] * 40)
    assert estimate(history, 0.0, prior_checks=0) == pytest.approx(
        regular_rate(history.checks, history.changes, 16.0), rel=1e-6)


@pytest.mark.parametrize("rate", [0.05, 0.2, 1.0, 3.0])
def test_irregular_intervals_are_estimated_without_much_bias(rate: float) -> None:
    rng = random.Random(11)
    runs, estimates, naive = 300, [], []
    for _ in range(runs):
        intervals = [rng.choice((0.2, 1.0, 5.0)) * rng.uniform(0.5, 1.5) for _ in range(100)]
        history = _history(rng, rate, intervals)
        estimates.append(estimate(history, 0.0, prior_checks=0))
        naive.append(history.changes / sum(intervals))
    error = statistics.mean(estimates) / rate - 1
    assert abs(error) < 0.10, error
    # counting changes per second of observation misses the changes a check cannot see
    if rate >= 1.0:
        assert statistics.mean(naive) / rate < 0.6


def test_a_never_changing_page_tends_to_zero_and_a_prior_fills_in_little_history() -> None:
    history = observe(None, 0.0, 5)
    assert estimate(history, 0.01) == 0.01  # no interval seen: the prior
    for step in range(1, 31):
        history = observe(history, step * 60.0, 5)
    assert estimate(history, 0.01) < 0.01 / 10
    # two checks that both saw a change: finite (the +0.5), pulled towards the prior
    young = observe(observe(observe(None, 0.0, 1), 10.0, 2), 20.0, 3)
    alone = estimate(young, 0.0, prior_checks=0)
    assert math.isfinite(alone)
    assert 0.001 < estimate(young, 0.001) < alone


def test_history_packs_small_and_round_trips() -> None:
    history = _history(random.Random(5), 0.1, [random.Random(5).uniform(1, 100) for _ in range(500)])
    blob = history.pack()
    assert len(blob) <= 46 + 2 * 12
    again = History.unpack(blob)
    assert again is not None and again.changed == history.changed and again.checks == history.checks
    assert History.unpack(None) is None
    assert abs(bin_seconds(interval_bin(37.0)) / 37.0 - 1) < 0.1


def test_pooled_priors_prefer_the_path_pattern_then_the_host() -> None:
    pools = PooledRates()
    news, archive = path_pattern("a.test", "/news-12/x"), path_pattern("a.test", "/archive/y")
    assert news == "a.test/news-##"
    assert pools.prior([news, "a.test"], 1e-3) == 1e-3
    for _ in range(20):
        pools.note([news, "a.test"], 10.0, changed=True)
        pools.note([archive, "a.test"], 10.0, changed=False)
    assert pools.prior([news, "a.test"], 1e-3) > 0.1
    assert pools.prior([archive, "a.test"], 1e-3) < 0.01
    assert 0.01 < pools.prior([path_pattern("a.test", "/other"), "a.test"], 1e-3) < pools.prior([news], 1e-3)


def test_the_optimal_frequency_is_not_proportional_and_gives_up() -> None:
    mu = 100.0
    slow, medium, fast, hopeless = (optimal_frequency(rate, mu) for rate in (1e-4, 1e-3, 5e-3, 0.02))
    assert 0 < slow < medium
    assert fast < 5 * medium  # grows slower than the rate, then falls
    assert hopeless == 0.0  # mu * rate >= 1: given up
    assert freshness(0.0, 1.0) == 1.0 and freshness(1.0, 0.0) == 0.0


def test_the_price_spends_the_budget_and_beats_uniform_on_a_mix() -> None:
    rng = random.Random(2)
    # log-normal rates, median 10 changes per mean interval: a budget tight for most pages
    rates = [rng.lognormvariate(math.log(10 / 600.0), 2.0) for _ in range(2000)]
    mix = RateMix(half_life_s=1e9)
    for rate in rates:
        mix.add(rate, 0.0)
    bounds = {"mean_interval_s": 600.0, "min_s": 10.0, "max_s": 30 * 600.0}
    mu = mix.price(600.0, 10.0, 30 * 600.0)
    intervals = [interval_for(rate, mu, **bounds) for rate in rates]
    assert sum(1 / i for i in intervals) == pytest.approx(len(rates) / 600.0, rel=0.1)
    adaptive = statistics.mean(freshness(rate, 1 / i) for rate, i in zip(rates, intervals, strict=True))
    uniform = statistics.mean(freshness(rate, 1 / 600.0) for rate in rates)
    assert adaptive > 1.2 * uniform
    assert interval_for(1.0, None, **bounds) == 600.0
    # a URL scheduled again leaves its old bin: the mix still counts each URL once
    for rate in rates[:500]:
        mix.remove(rate, 0.0, 10.0)
        mix.add(rate * 2, 10.0)
    assert sum(mix._mass.values()) == pytest.approx(len(rates), rel=1e-3)


def test_the_recrawler_backs_off_a_page_that_never_changes_and_keeps_fixed_fixed() -> None:
    policy = RecrawlPolicy(10.0, mode="adaptive", min_s=1.0, max_s=100.0)
    recrawler, fixed = Recrawler(policy), Recrawler(RecrawlPolicy(10.0))
    never, busy, kept = None, None, None
    now, intervals = 0.0, []
    for visit in range(12):
        quiet = recrawler.schedule("a.test", "http://a.test/p/1", never, 42, now)
        moving = recrawler.schedule("b.test", "http://b.test/p/2", busy, 1000 + visit, now)
        steady = fixed.schedule("b.test", "http://b.test/p/1", kept, 7, now)
        assert quiet is not None and moving is not None and steady is not None
        never, busy, kept = quiet.history, moving.history, steady.history
        intervals.append(quiet.due_at - now)
        assert steady.due_at - now == 10.0
        now += 10.0
    # the longest interval in the end (asked for a little sooner: the test came later than asked)
    assert intervals[-1] > 90.0 and intervals[0] == pytest.approx(10.0)
    assert not quiet.changed and moving.changed and quiet.rate < moving.rate
    history = History.unpack(never)
    assert history is not None and (history.checks, history.changes) == (11, 0)
    assert recrawler.host_rate("a.test") == 0.0 and recrawler.host_rate("c.test") is None
    assert RecrawlPolicy(None).after("x.test") is None
    assert Recrawler(RecrawlPolicy(None, [("x.test", 5.0)])).schedule("y.test", "http://y.test/", None, 1, 0.0) is None
    assert payload_digest(b"a") != payload_digest(b"b") and payload_digest(b"a") == payload_digest(b"a")


def _dated_history(rng: random.Random, rate: float, intervals: list[float]) -> History:
    """As `_history`, each answer carrying the time of the page's last change (Last-Modified,
    in whole seconds as an HTTP-date has them)."""
    now, changes, last = 1000.0, 0, 0.0
    history = observe(None, now, 0)
    for interval in intervals:
        count, at = 0, now
        while (at := at + rng.expovariate(rate)) <= now + interval:
            count, last = count + 1, at
        now += interval
        changes += count
        history = observe(history, now, changes if count else None, math.floor(last) if count else None)
    return history


@pytest.mark.parametrize("rate_times_interval", [0.5, 5.0, 20.0])
def test_a_dated_change_tells_the_rate_where_checks_alone_cannot(rate_times_interval: float) -> None:
    rng = random.Random(13)
    rate, interval = rate_times_interval / 10.0, 10.0  # the seconds of an HTTP-date are 10% of an interval
    dated = [estimate(_dated_history(rng, rate, [interval] * 50), 0.0, prior_checks=0) for _ in range(200)]
    undated = [estimate(_history(rng, rate, [interval] * 50), 0.0, prior_checks=0) for _ in range(200)]
    # the 1 s resolution of the date adds ~0.5 s to each change's quiet time
    expected = 1 / (1 / rate + 0.5) if rate_times_interval > 1 else rate
    assert statistics.mean(dated) == pytest.approx(expected, rel=0.15)
    if rate_times_interval >= 20:  # every check sees a change: undated, only a floor on the rate
        assert statistics.mean(undated) < 0.5 * rate
