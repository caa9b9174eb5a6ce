"""The hosts whose durable politeness (pause, Crawl-delay, backoff) changed since it was last
saved in the frontier's hosts table: marked by the host table as a verdict changes it, taken
by the upkeep's persist job (node.upkeep), which is woken when the first one is marked."""

from __future__ import annotations

from crawler_node.frontier import HostPoliteness
from crawler_node.node.host_state import HostState
from crawler_node.runtime.wakeup import Wakeup


class UnsavedPoliteness:
    def __init__(self) -> None:
        self._states: dict[str, HostState] = {}
        self.wanted = Wakeup()  # notified when durable politeness changed

    def mark(self, state: HostState) -> None:
        if not state.dirty:
            state.dirty = True  # such a host stays in memory until saved (node.host_memory)
            self._states[state.host] = state
            self.wanted.notify()

    def take(self) -> list[HostPoliteness]:
        """The durable politeness that changed since the last call, to save in the frontier."""
        states, self._states = self._states, {}
        for state in states.values():
            state.dirty = False
        return [state.politeness() for state in states.values()]

    def __bool__(self) -> bool:
        return bool(self._states)
