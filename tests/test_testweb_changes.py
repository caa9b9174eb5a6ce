"""testweb's changing pages (testweb.changes): Poisson change times of known rates from the
seed, and the freshness the fetches served kept."""

from __future__ import annotations

import math

import pytest

from crawler_node.testweb.changes import ChangeClock, page_rate
from crawler_node.testweb.profile import ProfileError, parse_profile


def test_pages_change_at_their_rate_and_the_seed_fixes_when() -> None:
    clock, again = ChangeClock(seed=3), ChangeClock(seed=3)
    horizon, rate = 10_000.0, 0.05
    versions = [clock.version("a.test", f"/p/{n}", rate, 0.0, horizon)[0] for n in range(50)]
    # 50 pages x 500 expected changes each: the total within 1% (sd ~ 0.6%)
    assert sum(versions) == pytest.approx(50 * rate * horizon, rel=0.02)
    assert versions == [again.version("a.test", f"/p/{n}", rate, 0.0, horizon)[0] for n in range(50)]
    assert clock.version("a.test", "/p/0", 0.0, 0.0, horizon) == (versions[0], clock.version(
        "a.test", "/p/0", rate, 0.0, horizon)[1])  # a page keeps the rate it was made with


def test_spread_draws_log_normal_rates_around_the_median() -> None:
    rates = sorted(page_rate(1, "a.test", f"/p/{n}", 0.01, 2.0) for n in range(2001))
    assert rates[1000] == pytest.approx(0.01, rel=0.25)
    assert rates[-20] / rates[20] > 1000  # 2 sigma each side: e^8 apart
    assert page_rate(1, "a.test", "/p/1", 0.01, 0.0) == 0.01


def test_freshness_integrates_the_time_the_last_fetch_was_current() -> None:
    clock = ChangeClock(seed=9)
    rate = 0.1
    clock.version("a.test", "/p/1", rate, 0.0, 0.0)
    page = clock._pages[("a.test", "/p/1")]  # the test reads the change times it drew
    first = page.next_change
    clock.served("a.test", "/p/1", 0.0)  # fetched at 0: fresh until its first change
    end = first + 5.0
    clock.version("a.test", "/p/1", rate, 0.0, end)
    report = clock.report(end)
    fresh = min(first, end)
    assert report["freshness"] == pytest.approx(fresh / end)
    assert report["fetches"] == 1 and report["useful_fetches"] == 1 and report["stale_pages"] == 1
    # a fetch right after the change makes it fresh again, and it was useful
    clock.served("a.test", "/p/1", first + 1.0)
    report = clock.report(first + 1.5, buckets=2, pages=True)
    assert report["useful_fetches"] == 2
    assert report["per_page"]["http://a.test/p/1"]["fetches"] == 2
    assert len(report["timeline"]) == 2
    # a never-changing page: always fresh, and its second fetch was of no use
    never = ChangeClock(seed=1)
    never.version("b.test", "/p/2", 1e-12, 0.0, 0.0)
    never.served("b.test", "/p/2", 0.0)
    never.served("b.test", "/p/2", 50.0)
    report = never.report(100.0)
    assert report["freshness"] == 1.0 and report["useful_fetches"] == 1
    assert math.isclose(report["stale_age_s"], 0.0)


def test_a_profile_sets_rates_per_host_and_per_path_pattern() -> None:
    profile = parse_profile({"site-*.test": {"change_rate": 0.5, "change_paths": {"/p/1*": 0.01, "/p/2": 0}}})
    host = profile.for_host("site-3.test")
    assert (host.change_rate_of("/p/12"), host.change_rate_of("/p/2"), host.change_rate_of("/p/3")) == (0.01, 0.0, 0.5)
    for bad in ({"p/1": 1.0}, {"/p/1": -1}, ["/p/1"]):
        with pytest.raises(ProfileError):
            parse_profile({"site-*.test": {"change_paths": bad}})
