"""The host table, built alone: round-robin across hosts, a host never exceeds its limiter,
politeness times hold (and survive in the durable politeness), a slow host does not block
the others, verdicts are applied, and idle hosts leave memory."""

from __future__ import annotations

import random

from crawler_node.config import PolitenessConfig
from crawler_node.core.backoff import HostBackoffPolicy, RetryPolicy
from crawler_node.core.limiter import AimdLimiter
from crawler_node.core.outcomes import FetchOutcome
from crawler_node.core.response import FetchResult
from crawler_node.core.robots import RobotsCache, RobotsPolicy, RobotsStatus
from crawler_node.core.verdict import ResponseRules, judge_page, judge_robots
from crawler_node.frontier import AddResult, HostPoliteness, HostQueue, Lease, UrlEntry
from crawler_node.node.hosts import HostState, HostTable, Place, Step
from crawler_node.runtime.wakeup import Wakeup

RULES = ResponseRules(retry=RetryPolicy(budget=3, rng=random.Random(1)),
                      host_backoff=HostBackoffPolicy(initial_s=60.0, forgive_after_s=600.0, rng=random.Random(1)),
                      host_backoff_after=2, retry_after_cap_s=300.0, latency=None, through_api=False)


def make_table(start: int = 2, ceiling: int = 4, idle_s: float = 60.0, started_at: float = 0.0) -> HostTable:
    return HostTable(config=PolitenessConfig(host_idle_s=idle_s, host_turn_s=0.0, min_host_delay_s=0.0),
                     new_limiter=lambda: AimdLimiter(start=start, floor=1, ceiling=ceiling),
                     backoff_policy=RULES.host_backoff, work=Wakeup(), started_at=started_at)


def leases(host: str, n: int, first_id: int = 1) -> list[Lease]:
    return [Lease(first_id + i, f"http://{host}/{first_id + i}", host, 0, 0, 1, 0) for i in range(n)]


def robots(table: HostTable, host: str, now: float = 0.0, body: bytes | None = None) -> HostState:
    """Take the host and answer the robots.txt of its http authority (404 = no rules, or
    ``body``), as if its first lease had asked for it."""
    state = table.next_host(now)
    assert state is not None and state.host == host
    ticket = table.start_request(state, now)
    table.settle(state, now)
    answer = FetchResult(url=f"http://{host}/robots.txt", status=404 if body is None else 200, body=body or b"")
    table.finish_robots(state, "http", ticket, judge_robots(answer, now=now, rules=RULES), now)
    return state


def fill(table: HostTable, state: HostState, n: int, now: float = 0.0, first_id: int = 1) -> None:
    """A lease round for the host came back with ``n`` leases."""
    assert table.request_refill(state)
    table.refilled(state, leases(state.host, n, first_id), None, now)


def send(table: HostTable, now: float = 0.0) -> tuple[HostState, int, Lease]:
    """Take the next host, lease and slot, as the dispatcher does."""
    state = table.next_host(now)
    assert state is not None
    step, lease = table.next_step(state, now)
    assert step is Step.FETCH and lease is not None
    ticket = table.start_request(state, now)
    table.settle(state, now)
    return state, ticket, lease


def answer(table: HostTable, state: HostState, ticket: int, status: int, now: float = 0.0, **headers: str) -> None:
    result = FetchResult(url=f"http://{state.host}/", status=status, headers=list(headers.items()))
    verdict = judge_page(state, result, attempt=1, in_current_round=state.limiter.is_current(ticket), now=now,
                         rules=RULES)
    table.finish_page(state, ticket, verdict, now)


def test_round_robin_between_hosts() -> None:
    table = make_table()
    for host in ("a", "b", "c"):
        table.add_work(host, 10, now=0.0)
    for host in ("a", "b", "c"):
        fill(table, robots(table, host), 10, first_id=100 * ord(host))
    order = []
    for _ in range(6):
        state, ticket, _ = send(table)
        order.append(state.host)
        answer(table, state, ticket, 200)
    assert order == ["a", "b", "c", "a", "b", "c"]


def test_a_host_at_its_limit_waits_and_does_not_block_the_others() -> None:
    table = make_table(start=1, ceiling=1)
    table.add_work("slow", 5, now=0.0)
    table.add_work("fast", 5, now=0.0)
    slow, fast = robots(table, "slow"), robots(table, "fast")
    fill(table, slow, 5)
    fill(table, fast, 5, first_id=10)
    state, slow_ticket, _ = send(table)
    assert state is slow and slow.place is Place.BLOCKED
    for _ in range(3):  # the slow host's request is still in flight: only the fast host is offered
        state, ticket, _ = send(table)
        assert state is fast
        answer(table, fast, ticket, 200)
    answer(table, slow, slow_ticket, 200)
    assert {send(table)[0].host, send(table)[0].host} == {"slow", "fast"}


def test_next_eligible_time_is_respected_and_a_retry_after_pauses_the_host() -> None:
    table = make_table()
    table.add_work("polite", 3, now=0.0)
    state = robots(table, "polite")
    fill(table, state, 3)
    state, ticket, _ = send(table)
    answer(table, state, ticket, 503, now=1.0, **{"Retry-After": "5"})
    assert state.place is Place.WAITING and table.next_wakeup() == 6.0
    assert table.next_host(5.9) is None
    assert table.next_host(6.0) is state
    assert table.unsaved.take() == [HostPoliteness(host="polite", next_eligible=6.0)]  # durable
    assert table.unsaved.take() == []


def test_a_crawl_delay_spaces_requests_one_at_a_time() -> None:
    table = make_table(start=4, ceiling=4)
    table.add_work("slow.test", 5, now=0.0)
    state = robots(table, "slow.test", body=b"User-agent: *\nCrawl-delay: 2\n")
    assert state.crawl_delay == 2.0 and table.next_host(1.9) is None
    fill(table, state, 1, now=2.0)
    assert table.lease_size(state) == 0  # one lease at a time for a Crawl-delay host
    state, ticket, _ = send(table, now=2.0)
    fill(table, state, 1, now=2.0, first_id=50)
    assert table.next_host(2.0) is None  # one request at a time
    answer(table, state, ticket, 200, now=3.0)  # the delay counts from the end of the request
    assert table.next_host(4.9) is None and table.next_host(5.0) is state


def test_politeness_handed_between_members_is_sent_with_a_request_in_flight_and_honoured() -> None:
    # The member that crawled the host: its next request may go 2 s after the last one ended;
    # while one is in flight, at least the delay from now.
    sender = make_table(start=4, ceiling=4)
    sender.add_work("slow.test", 5, now=0.0)
    state = robots(sender, "slow.test", body=b"User-agent: *\nCrawl-delay: 2\n")
    fill(sender, state, 1, now=2.0)
    state, ticket, _ = send(sender, now=2.0)
    assert sender.politeness_to_send("slow.test", now=2.5) == HostPoliteness("slow.test", 4.5, 2.0)
    answer(sender, state, ticket, 200, now=3.0)
    handed = sender.politeness_to_send("slow.test", now=3.5)
    assert handed == HostPoliteness("slow.test", 5.0, 2.0)
    assert sender.politeness_to_send("unknown.test", now=3.5) is None
    # The member that crawls it next, ready to send at once: it waits for the handed time.
    receiver = make_table(start=4, ceiling=4)
    receiver.add_work("slow.test", 5, now=0.0)
    mine = robots(receiver, "slow.test", now=3.0)
    fill(receiver, mine, 1, now=3.0)
    receiver.honour([handed], now=3.5)
    assert receiver.next_host(4.9) is None and receiver.next_host(5.0) is mine
    assert mine.crawl_delay == 2.0
    # A host with no state here yet keeps it too, once it gets work.
    receiver.honour([HostPoliteness("later.test", 9.0, 1.0)], now=3.5)
    receiver.add_work("later.test", 1, now=4.0)
    assert receiver.get("later.test").next_eligible >= 9.0


def test_repeated_429s_without_retry_after_pause_the_host_and_a_success_resets_the_streak() -> None:
    table = make_table(start=1, ceiling=1)
    table.add_work("h", 10, now=0.0)
    state = robots(table, "h")
    fill(table, state, 10)
    for status in (429, 200, 429):
        state, ticket, _ = send(table)
        answer(table, state, ticket, status)
    assert state.backoffs == 0  # the success reset the streak
    state, ticket, _ = send(table)
    answer(table, state, ticket, 429)
    assert state.backoffs == 1 and 48.0 <= state.next_eligible <= 72.0
    saved = table.unsaved.take()[0]
    assert saved.backoff_level == 1 and saved.next_eligible == state.next_eligible


def test_durable_politeness_is_restored_and_a_crawl_delay_counts_from_the_start() -> None:
    table = make_table(started_at=1000.0)
    table.load([HostQueue("a", queued=3, politeness=HostPoliteness("a", next_eligible=1010.0)),
                HostQueue("b", queued=3, politeness=HostPoliteness("b", next_eligible=900.0, crawl_delay=3.0))],
               now=1000.0)
    assert table.next_host(1002.9) is None  # b keeps its Crawl-delay from this run's start
    assert table.next_host(1003.0).host == "b"
    assert table.next_host(1009.9) is None and table.next_host(1010.0).host == "a"


def test_a_host_that_got_work_back_gets_its_durable_politeness_from_the_frontier() -> None:
    table = make_table()
    entry = UrlEntry("http://a/", "a")
    table.add_queued(AddResult(accepted=[entry], duplicates=0,
                               politeness={"a": HostPoliteness("a", next_eligible=50.0)}), now=0.0)
    assert table.next_host(49.0) is None and table.next_wakeup() == 50.0


def test_robots_disallowed_leases_are_reported_not_fetched() -> None:
    table = make_table()
    table.add_work("h", 2, now=0.0)
    state = robots(table, "h", body=b"User-agent: *\nDisallow: /1\n")
    fill(table, state, 2)
    taken = table.next_host(0.0)
    step, lease = table.next_step(taken, 0.0)
    assert step is Step.DISALLOWED and lease.url == "http://h/1"
    table.settle(taken, 0.0)
    assert send(table)[2].url == "http://h/2"


def test_an_unreachable_robots_txt_means_ask_again_later() -> None:
    table = make_table()
    table.add_work("h", 2, now=0.0)
    fill(table, table.get("h"), 2)
    state = table.next_host(0.0)
    step, lease = table.next_step(state, 0.0)
    assert step is Step.ROBOTS and lease is not None and lease.url == "http://h/1"  # it stays buffered
    ticket = table.start_request(state, 0.0)
    table.settle(state, 0.0)
    assert table.next_host(0.0) is None  # nothing of the host goes while its robots.txt is out
    answer_ = judge_robots(FetchResult(url="http://h/robots.txt", status=503), now=0.0, rules=RULES)
    table.finish_robots(state, "http", ticket, answer_, 0.0)
    assert state.robots["http"].status is RobotsStatus.UNKNOWN and table.next_host(29.9) is None
    assert table.next_host(30.0) is state and table.next_step(state, 30.0)[0] is Step.ROBOTS


def test_a_host_no_longer_served_gives_its_buffered_leases_back() -> None:
    table = make_table()
    table.add_work("mine", 3, now=0.0)
    table.add_work("theirs", 3, now=0.0)
    fill(table, robots(table, "mine"), 3)
    fill(table, robots(table, "theirs"), 3, first_id=10)
    returned = table.release_unserved(lambda host: host == "mine", now=0.0)
    assert sorted(returned) == [10, 11, 12]
    assert table.get("theirs").place is Place.IDLE and not table.get("theirs").has_work()
    assert send(table)[0].host == "mine"


def test_idle_hosts_leave_memory_only_when_nothing_is_left_to_remember() -> None:
    table = make_table(idle_s=10.0)  # and a memory target that is never reached
    for host in ("done", "paused", "busy"):
        table.add_work(host, 1, now=0.0)
    for index, state in enumerate([robots(table, host) for host in ("done", "paused", "busy")]):
        fill(table, state, 1, first_id=10 * index)
    for _ in range(3):
        state, ticket, _ = send(table)
        if state.host == "done":
            answer(table, state, ticket, 200)
        elif state.host == "paused":
            answer(table, state, ticket, 503, **{"Retry-After": "100"})
        else:
            busy_ticket = ticket
    table.unsaved.take()  # saved
    assert table.collect(now=5.0) == 0  # not idle long enough
    assert table.collect(now=11.0) == 1 and table.get("done") is None
    assert table.get("paused") is not None and table.get("busy") is not None  # a pause, a request in flight
    answer(table, table.get("busy"), busy_ticket, 200, now=12.0)
    assert table.collect(now=30.0) == 1 and table.get("busy") is None
    assert table.collect(now=101.0) == 1 and len(table) == 0
    assert table.snapshot()["collected"] == 3


def test_the_api_refusing_a_request_leaves_the_host_untouched() -> None:
    rules = ResponseRules(retry=RULES.retry, host_backoff=RULES.host_backoff, host_backoff_after=2,
                          retry_after_cap_s=300.0, latency=None, through_api=True)
    table = make_table()
    table.add_work("h", 2, now=0.0)
    fill(table, robots(table, "h"), 2)
    state, ticket, _ = send(table)
    refused = FetchResult(url="http://h/1", status=429, headers=[("X-Api-Limit", "concurrency")])
    verdict = judge_page(state, refused, attempt=3, in_current_round=True, now=0.0, rules=rules)
    table.finish_page(state, ticket, verdict, 0.0)
    assert verdict.signal.outcome is FetchOutcome.API_THROTTLED
    assert (state.fetched, state.throttled, state.retries, state.api_refused) == (0, 0, 0, 1)
    assert state.limiter.decreases == 0 and state.next_eligible == 0.0


def test_a_host_that_left_memory_keeps_its_robots_txt_answer_for_a_while() -> None:
    cache = RobotsCache(agent="crawler-node", max_bytes=10_000, ttl_s=100.0)
    table = HostTable(config=PolitenessConfig(host_idle_s=1.0, host_turn_s=0.0, min_host_delay_s=0.0),
                      new_limiter=lambda: AimdLimiter(start=2, floor=1, ceiling=4), backoff_policy=RULES.host_backoff,
                      work=Wakeup(), started_at=0.0, robots_cache=cache)
    table.add_work("h", 1, now=0.0)
    state = robots(table, "h", body=b"User-agent: *\nDisallow: /private\nCrawl-delay: 1\n")
    fill(table, state, 1, now=1.0)
    state, ticket, _ = send(table, now=1.0)
    answer(table, state, ticket, 200, now=1.0)
    assert table.collect(now=10.0) == 0  # its Crawl-delay is not saved yet: it stays
    assert table.unsaved.take() == [HostPoliteness("h", crawl_delay=1.0)]
    assert table.collect(now=20.0) == 1 and table.get("h") is None
    table.add_work("h", 1, now=30.0)  # work again: no robots.txt request, the rules still hold
    back = table.get("h")
    cached = table.robots_of(back, "http", now=30.0)
    assert cached.status is RobotsStatus.READY and back.crawl_delay == 1.0
    assert not cached.rules.allowed("http://h/private/x") and cached.rules.allowed("http://h/public")
    assert table.robots_of(back, "https", now=30.0).status is RobotsStatus.UNKNOWN  # another authority
    table.release_unserved(lambda host: False, now=31.0)  # (or any other way its work goes)
    table.unsaved.take()  # (the frontier would have handed its Crawl-delay back with the work)
    assert table.collect(now=40.0) == 1
    table.add_work("h", 1, now=200.0)  # a day's answer is not used for longer than ttl_s
    assert table.robots_of(table.get("h"), "http", now=200.0).status is RobotsStatus.UNKNOWN


def test_the_robots_cache_is_bounded_in_bytes() -> None:
    cache = RobotsCache(agent="a", max_bytes=3 * RobotsCache.ENTRY_BYTES + 1_000)
    for index in range(10):
        cache.put(f"h{index}", b"x" * 400 if index % 2 else None, 0.0, now=float(index))
    assert len(cache) <= 4 and cache.get("h9", 9.0) is not None and cache.get("h0", 9.0) is None
    cache.put("huge", b"x" * 10_000, 0.0, now=10.0)  # larger than the whole budget: not kept
    assert cache.get("huge", 10.0) is None


def test_over_its_memory_target_the_table_drops_the_longest_idle_hosts_first() -> None:
    table = HostTable(config=PolitenessConfig(host_idle_s=3600.0, host_memory_target=3, host_turn_s=0.0,
                                              min_host_delay_s=0.0),
                      new_limiter=lambda: AimdLimiter(start=2, floor=1, ceiling=4), backoff_policy=RULES.host_backoff,
                      work=Wakeup(), started_at=0.0)
    for index in range(6):
        table.add_work(f"h{index}", 1, now=float(index))
        table.release_unserved(lambda host: False, now=float(index))  # its work went elsewhere: idle
    assert len(table) == 6
    assert table.collect(now=10.0) == 3  # far from idle_s, but over the target
    assert sorted(state.host for state in table) == ["h3", "h4", "h5"]
    assert table.collect(now=11.0) == 0


def test_robots_txt_is_per_authority_and_asked_again_after_its_ttl() -> None:
    table = HostTable(config=PolitenessConfig(host_turn_s=0.0, min_host_delay_s=0.0),
                      new_limiter=lambda: AimdLimiter(start=4, floor=1, ceiling=4), backoff_policy=RULES.host_backoff,
                      work=Wakeup(), started_at=0.0, robots_policy=RobotsPolicy(ttl_s=100.0))
    table.add_work("h", 3, now=0.0)
    state = robots(table, "h", body=b"User-agent: *\nDisallow: /2\n")  # the http authority's rules
    assert table.request_refill(state)
    table.refilled(state, [Lease(1, "http://h/1", "h", 0, 0, 1, 0), Lease(2, "https://h/2", "h", 0, 0, 1, 0),
                           Lease(3, "http://h/2", "h", 0, 0, 1, 0)], None, 0.0)
    assert send(table)[2].url == "http://h/1"
    taken = table.next_host(0.0)
    step, lease = table.next_step(taken, 0.0)
    assert step is Step.ROBOTS and lease.url == "https://h/2"  # https is another authority: its own robots.txt
    ticket = table.start_request(taken, 0.0)
    table.settle(taken, 0.0)
    table.finish_robots(taken, "https", ticket, judge_robots(FetchResult(url="https://h/robots.txt", status=404),
                                                             now=0.0, rules=RULES), 0.0)
    assert send(table)[2].url == "https://h/2"  # no rules there
    taken = table.next_host(0.0)
    assert table.next_step(taken, 0.0) == (Step.DISALLOWED, Lease(3, "http://h/2", "h", 0, 0, 1, 0))
    table.settle(taken, 0.0)
    table.add_work("h", 1, now=200.0)
    assert table.request_refill(taken)
    table.refilled(taken, [Lease(4, "http://h/4", "h", 0, 0, 1, 0)], None, 200.0)
    taken = table.next_host(200.0)
    assert table.next_step(taken, 200.0)[0] is Step.ROBOTS  # the rules are a day old (ttl_s): asked again


def test_hosts_whose_turn_is_over_leave_with_their_buffered_leases_unless_busy() -> None:
    table = HostTable(config=PolitenessConfig(host_turn_s=30.0, min_host_delay_s=0.0),
                      new_limiter=lambda: AimdLimiter(start=2, floor=1, ceiling=4), backoff_policy=RULES.host_backoff,
                      work=Wakeup(), started_at=0.0)
    hosts = ("quiet", "fetching", "spacing", "late")
    for host in hosts:
        table.add_work(host, 5, now=20.0 if host == "late" else 0.0)
    states = {host: robots(table, host) for host in hosts}
    for index, state in enumerate(states.values()):
        fill(table, state, 2, first_id=10 * index)  # leases 0-1, 10-11, 20-21, 30-31
    sent = [send(table) for _ in hosts]  # one request each, the second lease buffered
    tickets = {state.host: ticket for state, ticket, _ in sent}
    for host in ("quiet", "spacing", "late"):
        answer(table, states[host], tickets.pop(host), 200)
    states["spacing"].next_eligible = 40.0  # as if a Crawl-delay were still running

    assert table.end_turns(now=29.0, limit=10) == ([], [])  # nobody's turn is over yet
    # "late" got its work at 20; "fetching" has a request in flight; "spacing" waits its delay
    assert table.end_turns(now=35.0, limit=10) == (["quiet"], [1])
    assert table.get("quiet") is None and len(table) == 3
    answer(table, states["fetching"], tickets.pop("fetching"), 200, now=41.0)
    assert table.end_turns(now=60.0, limit=2) == (["fetching", "spacing"], [11, 21])  # the longest active first
    assert table.end_turns(now=60.0, limit=2) == (["late"], [31])
    assert len(table) == 0 and table.next_host(60.0) is None  # no stale place sends a host that left


def test_without_a_turn_length_a_host_keeps_its_place_until_its_queue_is_done() -> None:
    table = make_table()
    table.add_work("h", 5, now=0.0)
    assert table.end_turns(now=1e9, limit=10) == ([], [])


def test_a_busy_host_whose_turn_is_over_sends_nothing_more_unless_nobody_waits_after_all() -> None:
    table = HostTable(config=PolitenessConfig(host_turn_s=30.0, min_host_delay_s=0.0),
                      new_limiter=lambda: AimdLimiter(start=2, floor=1, ceiling=4), backoff_policy=RULES.host_backoff,
                      work=Wakeup(), started_at=0.0)
    table.add_work("h", 5, now=0.0)
    fill(table, robots(table, "h"), 4)
    state, ticket, _ = send(table)

    assert table.end_turns(now=31.0, limit=10) == ([], [])  # a request in flight: not yet
    assert table.next_host(31.0) is None and not table.wants_refill(state)  # but no more of them
    table.keep_turns(now=32.0)  # nobody waits on disk any more
    assert table.next_host(32.0) is state
    table.settle(state, 32.0)
    assert table.end_turns(now=33.0, limit=10) == ([], [])
    answer(table, state, ticket, 200, now=34.0)
    assert table.end_turns(now=35.0, limit=10) == (["h"], [2, 3, 4])


def test_a_host_that_ran_out_of_work_while_its_turn_ended_starts_a_new_turn_with_new_work() -> None:
    table = HostTable(config=PolitenessConfig(host_turn_s=30.0, min_host_delay_s=0.0),
                      new_limiter=lambda: AimdLimiter(start=2, floor=1, ceiling=4), backoff_policy=RULES.host_backoff,
                      work=Wakeup(), started_at=0.0)
    table.add_work("h", 2, now=0.0)
    fill(table, robots(table, "h"), 2)
    state, ticket, _ = send(table)
    assert table.end_turns(now=31.0, limit=10) == ([], [])  # in flight: its turn ends once it is quiet
    assert table.release_unserved(lambda host: False, now=31.5) == [2]  # ... but its work went away
    answer(table, state, ticket, 200, now=32.0)
    table.add_work("h", 1, now=40.0)  # new work: a new turn, and it may send
    assert table.next_host(40.0) is state
