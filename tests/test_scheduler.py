"""The host scheduler's promises: round-robin across hosts, a host never exceeds its limiter,
politeness times are respected, and a slow host does not block the others."""

from crawler_node.core.limiter import AimdLimiter, Outcome
from crawler_node.node.hosts import HostScheduler, Place, Robots


def make_scheduler(start=2, ceiling=4):
    scheduler = HostScheduler(lambda: AimdLimiter(start=start, floor=1, ceiling=ceiling))
    return scheduler


def ready(state):
    state.robots_state = Robots.READY
    return state


def test_round_robin_between_hosts():
    scheduler = make_scheduler()
    for host in ("a", "b", "c"):
        ready(scheduler.add_work(host, 10, now=0.0))
    order = []
    for _ in range(6):
        state = scheduler.next_host(0.0)
        order.append(state.host)
        state.queued -= 1
        state.limiter.release(state.limiter.acquire(), Outcome.SUCCESS)
        scheduler.settle(state, 0.0)
    assert order == ["a", "b", "c", "a", "b", "c"]


def test_host_at_its_limit_is_skipped_until_a_release():
    scheduler = make_scheduler(start=1, ceiling=1)
    slow = ready(scheduler.add_work("slow", 5, now=0.0))
    fast = ready(scheduler.add_work("fast", 5, now=0.0))
    state = scheduler.next_host(0.0)
    assert state is slow
    ticket = slow.limiter.acquire()
    scheduler.settle(slow, 0.0)
    assert slow.place is Place.BLOCKED
    # the slow host's request is still in flight: only the fast host is offered
    for _ in range(3):
        state = scheduler.next_host(0.0)
        assert state is fast
        fast.limiter.release(fast.limiter.acquire(), Outcome.SUCCESS)
        scheduler.settle(fast, 0.0)
    slow.limiter.release(ticket, Outcome.SUCCESS)
    scheduler.on_release(slow, 0.0)
    hosts = {scheduler.next_host(0.0).host}
    assert "slow" in hosts or scheduler.next_host(0.0).host == "slow"


def test_next_eligible_time_is_respected():
    scheduler = make_scheduler()
    state = ready(scheduler.add_work("polite", 3, now=0.0))
    assert scheduler.next_host(0.0) is state
    state.next_eligible = 5.0
    scheduler.settle(state, 0.0)
    assert scheduler.next_host(4.9) is None
    assert scheduler.next_wakeup() == 5.0
    assert scheduler.next_host(5.0) is state


def test_delay_pushes_a_ready_host_out():
    scheduler = make_scheduler()
    state = ready(scheduler.add_work("h", 3, now=0.0))
    scheduler.delay(state, 30.0, now=0.0)
    assert state.place is Place.WAITING
    assert scheduler.next_host(10.0) is None
    assert scheduler.next_host(30.0) is state


def test_host_without_work_goes_idle_and_returns_with_new_work():
    scheduler = make_scheduler()
    state = ready(scheduler.add_work("h", 1, now=0.0))
    taken = scheduler.next_host(0.0)
    taken.queued = 0
    scheduler.settle(taken, 0.0)
    assert state.place is Place.IDLE
    assert scheduler.next_host(0.0) is None
    scheduler.add_work("h", 2, now=1.0)
    assert scheduler.next_host(1.0) is state


def test_host_fetching_robots_is_not_offered():
    scheduler = make_scheduler()
    state = scheduler.add_work("h", 5, now=0.0)
    taken = scheduler.next_host(0.0)
    taken.robots_state = Robots.FETCHING
    scheduler.settle(taken, 0.0)
    assert scheduler.next_host(0.0) is None
    taken.robots_state = Robots.READY
    scheduler.on_release(taken, 0.0)
    assert scheduler.next_host(0.0) is state
