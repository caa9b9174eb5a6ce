"""robots.txt rules (RFC 9309): the file read as Google's reference parser reads it
(core.robots_groups), URLs matched by protego; this module only decides what a fetched
robots.txt means and when to ask again, the fetching happens in the node like any other request.

Rules belong to an authority: a scheme, a host and a port (RFC 9309 2.3). The node's per-host
state is keyed by ``host[:port]``, so ``http://a.example/`` and ``https://a.example/`` share
one host record, and each of the two schemes has its own :class:`AuthorityRobots` in it.
"""

from __future__ import annotations

import enum
from collections import OrderedDict
from dataclasses import dataclass
from urllib.parse import urlsplit

from protego import Protego

from crawler_node.core.robots_groups import agent_rules

# RFC 9309 2.3.1.2: crawlers SHOULD follow at least five consecutive redirects; past that the
# file MAY be taken as unavailable (no restrictions), which is what we do.
MAX_ROBOTS_REDIRECTS = 5


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
    """What one product token obeys in one robots.txt. The file is read as Google's reference
    parser reads it (core.robots_groups: byte-order mark, lines, groups, the token); protego
    gets only the rules that token obeys, under ``User-agent: *``, and matches URLs with them."""

    parser: Protego | None  # None = allow everything
    agent: str
    sitemap_urls: tuple[str, ...] = ()

    @classmethod
    def parse(cls, body: bytes, agent: str) -> RobotsRules:
        read = agent_rules(body, agent)
        parser = None
        if read.rules or read.crawl_delays:
            lines = ["User-agent: *"]
            lines += [f"Crawl-delay: {delay}" for delay in read.crawl_delays]
            lines += [f"{'Allow' if allow else 'Disallow'}: {pattern}" for allow, pattern in read.rules]
            parser = Protego.parse("\n".join(lines))
        return cls(parser=parser, agent=agent, sitemap_urls=tuple(read.sitemaps))

    def allowed(self, url: str) -> bool:
        return True if self.parser is None else self.parser.can_fetch(url, self.agent)

    def crawl_delay(self) -> float:
        if self.parser is None:
            return 0.0
        delay = self.parser.crawl_delay(self.agent)
        return float(delay) if delay else 0.0

    def sitemaps(self) -> list[str]:
        """The ``Sitemap:`` lines, as written (absolute URLs by the protocol)."""
        return list(self.sitemap_urls)


def robots_url(url: str) -> str:
    """The robots.txt of a URL's authority: same scheme, host and port (RFC 9309 2.3)."""
    parts = urlsplit(url)
    return f"{parts.scheme}://{parts.netloc.rpartition('@')[2]}/robots.txt"


def scheme_of(url: str) -> str:
    """The scheme of a normalised URL (lower case already): "http" or "https"."""
    return url[: url.find(":")]


class RobotsStatus(enum.Enum):
    UNKNOWN = "unknown"  # never asked, or time to ask again
    FETCHING = "fetching"
    READY = "ready"  # rules known (possibly "no restrictions")
    UNAVAILABLE = "unavailable"  # could not be had robots_max_attempts times in a row: given up for now


@dataclass(slots=True)
class AuthorityRobots:
    """One authority's robots.txt as the node knows it. Until it is READY nothing of that
    authority is fetched (RFC 9309 2.3.1.4: unreachable means complete disallow)."""

    status: RobotsStatus = RobotsStatus.UNKNOWN
    rules: RobotsRules | None = None  # READY: None = no restrictions
    crawl_delay: float = 0.0
    since: float = 0.0  # READY: when the rules were had; UNAVAILABLE: when given up
    failures: int = 0  # unavailable answers in a row
    last_error: str | None = None  # why the last attempt gave no rules (for status and logs)
    certificate_failed: bool = False  # UNAVAILABLE because TLS failed: its URLs end as outcome tls


@dataclass(frozen=True, slots=True)
class RobotsPolicy:
    """When to ask an authority for its robots.txt again."""

    ttl_s: float = 86_400.0  # rules are used this long (RFC 9309 2.4: SHOULD NOT exceed 24 h)
    retry_s: float = 30.0  # first wait after a failed attempt, doubling
    retry_cap_s: float = 1800.0  # the longest wait; also how long a give-up holds
    max_attempts: int = 6  # failed attempts in a row before the authority's URLs are given up

    def due(self, robots: AuthorityRobots, now: float) -> bool:
        """Should robots.txt be fetched (again) before the authority's next URL?"""
        status = robots.status
        if status is RobotsStatus.READY:
            return now - robots.since > self.ttl_s
        if status is RobotsStatus.UNAVAILABLE:
            if now - robots.since <= self.retry_cap_s:
                return False
            robots.failures = 0  # a new round of attempts for URLs that arrived since
            return True
        return status is RobotsStatus.UNKNOWN

    def retry_in(self, failures: int, retry_after_s: float | None) -> float:
        """The wait after the ``failures``-th failed attempt in a row (1 = the first)."""
        backoff = min(self.retry_s * 2.0 ** max(0, failures - 1), self.retry_cap_s)
        return max(backoff, min(retry_after_s or 0.0, self.retry_cap_s))

    def gives_up(self, failures: int) -> bool:
        return failures >= self.max_attempts


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

    def get(self, host: str, now: float) -> tuple[RobotsRules | None, float, float] | None:
        """(rules or None for no restrictions, crawl delay, when it was stored), or None when
        not known (or stale). ``host`` is the authority's key, ``scheme://host[:port]``."""
        entry = self._entries.get(host)
        if entry is None:
            return None
        body, crawl_delay, stored_at = entry
        if now - stored_at > self._ttl_s:
            self._drop(host)
            return None
        self.hits += 1
        return (RobotsRules.parse(body, self._agent) if body is not None else None), crawl_delay, stored_at

    def _drop(self, host: str) -> None:
        entry = self._entries.pop(host, None)
        if entry is not None:
            self._bytes -= self.ENTRY_BYTES + (len(entry[0]) if entry[0] else 0)

    def snapshot(self) -> RobotsCacheSnapshot:
        return RobotsCacheSnapshot(hosts=len(self._entries), bytes=self._bytes, hits=self.hits)


@dataclass(frozen=True, slots=True)
class RobotsCacheSnapshot:
    hosts: int
    bytes: int
    hits: int
