"""The robots.txt records of the host table's hosts, one per authority (scheme + host key), and
the cache that keeps the answers of hosts no longer in memory.

The host table (node.hosts) owns this and calls it; nothing else writes these records. Pure
bookkeeping, no I/O: the request itself is the fetch stage's, its meaning core.verdict's.
"""

from __future__ import annotations

from crawler_node.core.robots import AuthorityRobots, RobotsCache, RobotsCacheSnapshot, RobotsPolicy, RobotsStatus
from crawler_node.core.verdict import RobotsAnswer
from crawler_node.node.host_state import HostState


class HostRobots:
    def __init__(self, *, cache: RobotsCache, policy: RobotsPolicy) -> None:
        self._cache = cache
        self._policy = policy

    def of(self, state: HostState, scheme: str, now: float) -> AuthorityRobots:
        return self.lookup(state, scheme, now)[0]

    def lookup(self, state: HostState, scheme: str, now: float) -> tuple[AuthorityRobots, bool]:
        """The record of one of the host's authorities: from the cache of hosts that left
        memory when it is there (then True: its rules, and Crawl-delay, apply now), else a new
        one to be fetched."""
        slots = state.robots
        if slots is None:
            slots = state.robots = {}
        robots = slots.get(scheme)
        if robots is None:
            robots = slots[scheme] = AuthorityRobots()
            cached = self._cache.get(f"{scheme}://{state.host}", now)
            if cached is not None:
                robots.rules, robots.crawl_delay, robots.since = cached
                robots.status = RobotsStatus.READY
                return robots, True
        return robots, False

    def start_if_due(self, state: HostState, robots: AuthorityRobots, now: float) -> bool:
        """Whether robots.txt must be fetched (again) first; if so, it is now on its way."""
        if not self._policy.due(robots, now):
            return False
        robots.status = RobotsStatus.FETCHING
        state.robots_fetching = True
        return True

    def not_sent(self, state: HostState, scheme: str, now: float) -> None:
        self.of(state, scheme, now).status = RobotsStatus.UNKNOWN
        state.robots_fetching = False

    def answered(self, state: HostState, scheme: str, answer: RobotsAnswer, now: float) -> None:
        state.robots_fetching = False
        robots = self.of(state, scheme, now)
        robots.failures, robots.last_error = answer.failures, answer.error
        robots.certificate_failed = answer.certificate_failed
        robots.status = answer.status
        if answer.ready:
            robots.rules, robots.crawl_delay, robots.since = answer.rules, answer.crawl_delay, now
            self._cache.put(f"{scheme}://{state.host}", answer.body, answer.crawl_delay, now)
        elif answer.status is RobotsStatus.UNAVAILABLE:
            robots.since = now

    @staticmethod
    def crawl_delay(state: HostState) -> float:
        """One Crawl-delay per host key: the largest its authorities with known rules ask for."""
        assert state.robots is not None
        return max((robots.crawl_delay for robots in state.robots.values()
                    if robots.status is RobotsStatus.READY), default=0.0)

    def snapshot(self) -> RobotsCacheSnapshot:
        return self._cache.snapshot()
