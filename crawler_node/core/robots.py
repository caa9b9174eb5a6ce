"""robots.txt rules (RFC 9309) through protego; this module only decides what a fetched
robots.txt means, the fetching happens in the node like any other request."""

from __future__ import annotations

import enum
from collections import OrderedDict
from dataclasses import dataclass

from protego import Protego


class RobotsVerdict(enum.Enum):
    PARSE = "parse"  # 2xx: obey the rules in the body
    ALLOW_ALL = "allow_all"  # 4xx "unavailable": RFC 9309 2.3.1.3 says crawl freely
    RETRY_LATER = "retry_later"  # 5xx / 429 / network error: assume disallow, ask again later


def verdict_for_status(status: int | None) -> RobotsVerdict:
    if status is None or status == 429 or status >= 500:
        return RobotsVerdict.RETRY_LATER
    if 200 <= status < 300:
        return RobotsVerdict.PARSE
    return RobotsVerdict.ALLOW_ALL


@dataclass(slots=True)
class RobotsRules:
    parser: Protego | None  # None = allow everything
    agent: str

    @classmethod
    def parse(cls, body: bytes, agent: str) -> RobotsRules:
        text = body.decode("utf-8", errors="replace")
        return cls(parser=Protego.parse(text), agent=agent)

    def allowed(self, url: str) -> bool:
        return True if self.parser is None else self.parser.can_fetch(url, self.agent)

    def crawl_delay(self) -> float:
        if self.parser is None:
            return 0.0
        delay = self.parser.crawl_delay(self.agent)
        return float(delay) if delay else 0.0


class RobotsCache:
    """The robots.txt answers of hosts that are no longer in memory, so a host that gets work
    again is not asked for its robots.txt again at once. Bounded by the bytes of the bodies it
    keeps (least recently stored first out), and an answer is used for at most ``ttl_s``
    (RFC 9309 2.4: a cached copy SHOULD NOT be used for more than 24 hours). Bodies are kept
    as received and parsed again on use: a parsed file costs several times its text."""

    ENTRY_BYTES = 200  # what an entry costs besides its body (key, tuple, dict slot)

    def __init__(self, *, agent: str, max_bytes: int = 8_000_000, ttl_s: float = 86_400.0) -> None:
        if max_bytes < 0 or ttl_s < 0:
            raise ValueError(f"need max_bytes >= 0 and ttl_s >= 0, got {max_bytes}, {ttl_s}")
        self._agent = agent
        self._max_bytes = max_bytes
        self._ttl_s = ttl_s
        self._entries: OrderedDict[str, tuple[bytes | None, float, float]] = OrderedDict()
        self._bytes = 0
        self.hits = 0

    def __len__(self) -> int:
        return len(self._entries)

    def put(self, host: str, body: bytes | None, crawl_delay: float, now: float) -> None:
        """``body`` None: the host has no robots.txt (no restrictions)."""
        self._drop(host)
        size = self.ENTRY_BYTES + (len(body) if body else 0)
        if size > self._max_bytes:
            return
        self._entries[host] = (body, crawl_delay, now)
        self._bytes += size
        while self._bytes > self._max_bytes:
            self._drop(next(iter(self._entries)))

    def get(self, host: str, now: float) -> tuple[RobotsRules | None, float] | None:
        """(rules or None for no restrictions, crawl delay), or None when not known (or stale)."""
        entry = self._entries.get(host)
        if entry is None:
            return None
        body, crawl_delay, stored_at = entry
        if now - stored_at > self._ttl_s:
            self._drop(host)
            return None
        self.hits += 1
        return (RobotsRules.parse(body, self._agent) if body is not None else None), crawl_delay

    def _drop(self, host: str) -> None:
        entry = self._entries.pop(host, None)
        if entry is not None:
            self._bytes -= self.ENTRY_BYTES + (len(entry[0]) if entry[0] else 0)

    def snapshot(self) -> dict[str, int]:
        return {"hosts": len(self._entries), "bytes": self._bytes, "hits": self.hits}
