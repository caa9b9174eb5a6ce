"""How the node routes each signal (rule 5), checked on a Node object that is never started:
no processes, no sockets, a fixed clock. The staged scenarios live in test_pressure_*.py."""

from __future__ import annotations

from crawler_node.fetch.fetcher import FetchResult
from crawler_node.frontier.frontier import Lease
from crawler_node.core.limiter import Outcome
from crawler_node.node.node import Node
from crawler_node.node.pipeline import PageResult
from crawler_node.settings import Settings
from crawler_node.core.signals import ApiSignal, Signal

NOW = 1_000_000.0


def make_node(tmp_path, **overrides) -> Node:
    settings = Settings(node_id="w", data_dir=tmp_path, **overrides).validate()
    return Node(settings, clock=lambda: NOW)


def ok(headers_s: float) -> FetchResult:
    return FetchResult(url="http://a.test/", status=200, headers_s=headers_s)


async def test_latency_far_above_the_hosts_baseline_cuts_only_that_host(tmp_path) -> None:
    node = make_node(tmp_path, latency_rise_factor=3.0, latency_rise_min_s=0.5)
    slow, calm = node.scheduler.host("slow.test"), node.scheduler.host("calm.test")
    success = Signal("ok", Outcome.SUCCESS)
    for _ in range(20):
        assert node._host_outcome(slow, success, ok(0.1)) is Outcome.SUCCESS
        assert node._host_outcome(calm, success, ok(0.1)) is Outcome.SUCCESS
    outcomes = [node._host_outcome(slow, success, ok(2.0)) for _ in range(3)]
    assert Outcome.THROTTLED in outcomes and slow.latency_rises >= 1
    assert node._host_outcome(calm, success, ok(0.1)) is Outcome.SUCCESS and calm.latency_rises == 0
    off = make_node(tmp_path / "off", latency_rise_factor=0.0)
    state = off.scheduler.host("slow.test")
    assert all(off._host_outcome(state, success, ok(5.0)) is Outcome.SUCCESS for _ in range(30))


async def test_429s_without_retry_after_pause_the_host_after_repeated_cuts(tmp_path) -> None:
    node = make_node(tmp_path, host_backoff_after=2, host_backoff_initial_s=60.0)
    state = node.scheduler.host("a.test")
    throttled = Signal("throttled", Outcome.THROTTLED)
    node._route_signal(state, throttled, NOW, status=429, cut=True)
    assert state.backoffs == 0 and state.next_eligible <= NOW
    node._route_signal(state, Signal("ok", Outcome.SUCCESS), NOW, status=200)  # a success in between
    node._route_signal(state, throttled, NOW, status=429, cut=True)
    assert state.backoffs == 0, "a success resets the streak"
    node._route_signal(state, throttled, NOW, status=429, cut=False)  # same window: not a new cut
    node._route_signal(state, throttled, NOW, status=429, cut=True)
    assert state.backoffs == 1 and 48.0 <= state.next_eligible - NOW <= 72.0
    # with Retry-After the site said when; no host backoff on top
    node._route_signal(state, Signal("throttled", Outcome.THROTTLED, retry_after_s=0.0), NOW, status=429, cut=True)
    node._route_signal(state, Signal("throttled", Outcome.THROTTLED, retry_after_s=5.0), NOW, status=429, cut=True)
    assert state.backoffs == 1


async def test_an_api_refusal_is_postponed_without_spending_budget_or_touching_the_host(tmp_path) -> None:
    node = make_node(tmp_path, proxy="http://127.0.0.1:9")
    state = node.scheduler.host("a.test")
    lease = Lease(id=1, url="http://a.test/", host="a.test", depth=0, priority=0, attempts=3, hops=0)
    refused = Signal("api_throttled", Outcome.NEUTRAL, ApiSignal.THROTTLED, retry_after_s=2.0)
    page = PageResult(lease=lease, fetch=FetchResult(url=lease.url, status=429), signal=refused)
    node._route_signal(state, refused, NOW, status=429, cut=False)
    node._decide_retry(state, page, NOW)
    assert page.postponed and page.retry_at >= NOW + 2.0 and not page.final_failure
    assert (state.fetched, state.throttled, state.retries, state.api_refused) == (0, 0, 0, 1)
    assert node.counters["retries"] == 0 and node.counters["api_postponed"] == 1


async def test_pipeline_pressure_sources_hold_admission(tmp_path) -> None:
    node = make_node(tmp_path, parse_queue=1, store_queue=1, pipeline_max_bytes=100)
    assert node.admission.blocked(NOW) is None
    await node.parse_queue.put(object())
    assert node.admission.blocked(NOW) == "parse" == node.admission.hold_leasing(NOW)
    node.parse_queue.get_nowait()
    await node.store_queue.put(object())
    assert node.admission.blocked(NOW) == "store"
    node.store_queue.get_nowait()
    node.held_bytes = 101
    assert node.admission.blocked(NOW) == "memory"
    node.held_bytes = 0
    node.admission.add_pressure_source("outbox:b", lambda: True)  # how the cluster plugs in
    assert node.admission.blocked(NOW) == "outbox:b"
