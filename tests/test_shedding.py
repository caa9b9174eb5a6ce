"""Load shedding: the pure policy (shedding.ShedPolicy) and the frontier's deferred state."""

from __future__ import annotations

import pytest

from crawler_node.core.shed_policy import (
    ARRIVED_WHILE_SHEDDING,
    DEFER_STEP_MAX,
    QUEUE_OVER_HIGH_WATER,
    ShedAction,
    ShedPolicy,
)
from crawler_node.frontier import Frontier, FrontierBatch, UrlEntry
from crawler_node.frontier.shedding import _DEFER_SQL

SEED = 100


@pytest.mark.parametrize("kwargs", [{"high_water": -1, "low_water": 0, "after_s": 1},
                                    {"high_water": 10, "low_water": 10, "after_s": 1},
                                    {"high_water": 10, "low_water": 5, "after_s": -1}])
def test_policy_validates(kwargs: dict) -> None:
    with pytest.raises(ValueError):
        ShedPolicy(**kwargs)


def test_policy_sheds_only_after_the_queue_stayed_high_and_stops_at_the_low_mark() -> None:
    policy = ShedPolicy(high_water=100, low_water=20, after_s=5.0)
    assert policy.observe(queued=150, deferred=0, now=0.0) == ShedAction(active=False)
    assert policy.observe(queued=90, deferred=0, now=3.0) == ShedAction(active=False)  # dipped: clock restarts
    assert policy.observe(queued=150, deferred=0, now=4.0) == ShedAction(active=False)
    assert policy.observe(queued=150, deferred=0, now=8.9) == ShedAction(active=False)
    # down to the middle of the marks, not just under the high one
    assert policy.observe(queued=150, deferred=0, now=9.0) == ShedAction(active=True, defer=90)
    assert policy.observe(queued=100, deferred=50, now=10.0) == ShedAction(active=True)
    assert policy.observe(queued=21, deferred=50, now=11.0) == ShedAction(active=True)  # hysteresis
    # drained to the low mark: stop, and restore towards the middle of the two marks
    assert policy.observe(queued=20, deferred=50, now=12.0) == ShedAction(active=False, restore=40)
    assert policy.observe(queued=20, deferred=5, now=13.0) == ShedAction(active=False, restore=5)
    assert policy.observe(queued=40, deferred=5, now=14.0) == ShedAction(active=False)
    assert policy.activations == 1


def test_a_deep_queue_is_deferred_in_bounded_steps_down_to_the_middle_of_the_marks() -> None:
    # A node restarted on a queue far over the mark: each step is one frontier transaction,
    # and the steps go on below the high mark until the middle is reached.
    high, low = 10 * DEFER_STEP_MAX, 2 * DEFER_STEP_MAX
    policy = ShedPolicy(high_water=high, low_water=low, after_s=0.0)
    middle = policy.midpoint
    queued, steps = 100 * DEFER_STEP_MAX, []
    for second in range(200):
        action = policy.observe(queued=queued, deferred=0, now=float(second))
        assert action.active
        if not action.defer:
            break
        steps.append(action.defer)
        queued -= action.defer
    assert queued == middle and max(steps) == DEFER_STEP_MAX and len(steps) == -(-(100 * DEFER_STEP_MAX - middle)
                                                                                  // DEFER_STEP_MAX)
    # arrivals after the last step are not deferred below the high mark (hysteresis, as before)
    assert policy.observe(queued=high, deferred=0, now=300.0) == ShedAction(active=True)
    assert policy.activations == 1


def test_a_disabled_policy_gives_everything_back() -> None:
    policy = ShedPolicy(high_water=0, low_water=0, after_s=0.0)
    assert policy.observe(queued=10**9, deferred=7, now=0.0) == ShedAction(active=False, restore=7)


def entries(host: str, priorities: list[int], start: int = 0) -> list[UrlEntry]:
    return [UrlEntry(url=f"http://{host}/{start + i}", host=host, priority=p, depth=-p if p < 0 else 0)
            for i, p in enumerate(priorities)]


def test_frontier_defers_the_lowest_priority_newest_first_and_never_seeds(tmp_path) -> None:
    with Frontier(tmp_path) as frontier:
        frontier.add(entries("a.test", [SEED, -1, -2, -3, -3, -3]) + entries("b.test", [-1, -3], start=10))
        per_host = frontier.shedding.defer_lowest(4, below_priority=SEED)
        assert per_host == {"a.test": 3, "b.test": 1}
        totals = frontier.totals()
        assert (totals["queued"], totals["deferred"]) == (4, 4)
        assert frontier.host("a.test").deferred == 3 and frontier.host("a.test").queued == 3
        # the -3s went (the newest first); b's -3 is the newest -3 of all
        leases, _ = frontier.lease("a.test", 10)
        assert [lease.priority for lease in leases] == [SEED, -1, -2]
        assert frontier.shedding.cut == -3
        assert frontier.shedding.defer_lowest(100, below_priority=SEED) == {"b.test": 1}  # the seed stays
        assert frontier.shedding.cut == -1
        assert frontier.shedding.counts() == {QUEUE_OVER_HIGH_WATER: 5}


def test_a_deferral_step_reads_only_the_rows_it_defers(tmp_path) -> None:
    # At 10M queued URLs a step that scanned and sorted every queued row held the frontier's
    # thread for minutes; the lowest priorities, newest first, come from an index in order.
    with Frontier(tmp_path) as frontier:
        frontier.add(entries("a.test", [-1, -2, -3]))
        plan = " / ".join(row[3] for row in frontier._db.conn.execute(f"EXPLAIN QUERY PLAN {_DEFER_SQL}", (SEED, 2)))
    assert "USING INDEX urls_shed" in plan and "TEMP B-TREE" not in plan, plan


def test_while_shedding_new_urls_at_or_below_the_cut_are_parked_on_arrival(tmp_path) -> None:
    with Frontier(tmp_path) as frontier:
        frontier.add(entries("a.test", [-1, -4]))
        frontier.shedding.defer_lowest(1, below_priority=SEED)
        assert frontier.shedding.cut == -4
        result = frontier.apply(FrontierBatch(add=entries("a.test", [-5, -4, -2, SEED], start=10)))
        assert len(result.accepted) == 4
        assert [e.priority for e in result.deferred] == [-5, -4]
        assert [e.priority for e in result.queued] == [-2, SEED]
        assert frontier.totals()["deferred"] == 3
        assert frontier.shedding.counts()[ARRIVED_WHILE_SHEDDING] == 2
        # parked URLs are in the seen-set: no duplicates come in later
        assert frontier.add(entries("a.test", [-5], start=10)).duplicates == 1
        frontier.shedding.stop()
        assert frontier.add(entries("a.test", [-9], start=20)).deferred == []


def test_restore_takes_an_equal_share_per_host_best_first_and_survives_a_restart(tmp_path) -> None:
    with Frontier(tmp_path) as frontier:
        frontier.add(entries("a.test", [-1, -2, -3, -4]) + entries("b.test", [-5, -6], start=10)
                     + entries("c.test", [-7], start=20))
        frontier.shedding.defer_lowest(7, below_priority=SEED)
    with Frontier(tmp_path) as frontier:  # deferred rows are on disk, counted at open
        assert frontier.totals()["deferred"] == 7 and frontier.totals()["queued"] == 0
        assert frontier.shedding.cut is None  # shedding state is the node's to decide again
        assert frontier.shedding.restore(3) == {"a.test": 1, "b.test": 1, "c.test": 1}
        leases, _ = frontier.lease("a.test", 10)
        assert [lease.priority for lease in leases] == [-1]  # each host's best first
        assert frontier.shedding.restore(100) == {"a.test": 3, "b.test": 1}
        totals = frontier.totals()
        assert (totals["deferred"], totals["queued"]) == (0, 6)
        assert frontier.shedding.counts()["restored"] == 7  # counted since this open
        assert frontier.shedding.restore(5) == {}


def test_postponed_urls_return_to_the_queue_without_spending_an_attempt(tmp_path) -> None:
    now = [1000.0]
    with Frontier(tmp_path, clock=lambda: now[0]) as frontier:
        frontier.add(entries("a.test", [0]))
        (lease,), _ = frontier.lease("a.test", 1)
        assert lease.attempts == 1
        frontier.apply(FrontierBatch(postponed=[(lease.id, 1005.0)]))
        assert frontier.lease("a.test", 1) == ([], 1005.0)
        now[0] = 1005.0
        (again,), _ = frontier.lease("a.test", 1)
        assert again.id == lease.id and again.attempts == 1  # the refused attempt did not count
