"""A bounded restart budget for a supervised worker (no I/O): at most ``max_restarts`` within
any ``window_s``. A worker that dies once (killed for memory, by an operator's mistake) is
replaced in place; one that dies again and again is a fault replacing will not fix, and the
node stops, non-zero (Erlang's supervisors' intensity and period)."""

from __future__ import annotations

from collections import deque

# Five deaths in five minutes: a page that kills the parser is isolated after one (parse
# stage), so a sixth death within the window is no bad luck.
MAX_RESTARTS = 5
WINDOW_S = 300.0


class RestartBudget:
    def __init__(self, max_restarts: int = MAX_RESTARTS, window_s: float = WINDOW_S) -> None:
        if max_restarts < 0 or window_s <= 0:
            raise ValueError("max_restarts must be >= 0 and window_s > 0")
        self.max_restarts = max_restarts
        self.window_s = window_s
        self._restarts: deque[float] = deque()
        self.total = 0

    def allow(self, now: float) -> bool:
        """One more restart at ``now`` (monotonic seconds): True if within the budget (and then
        counted), False if the budget is spent."""
        while self._restarts and now - self._restarts[0] >= self.window_s:
            self._restarts.popleft()
        if len(self._restarts) >= self.max_restarts:
            return False
        self._restarts.append(now)
        self.total += 1
        return True
