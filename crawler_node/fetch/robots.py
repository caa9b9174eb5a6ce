"""robots.txt rules (RFC 9309) through protego; this module only decides what a fetched
robots.txt means, the fetching happens in the node like any other request."""

from __future__ import annotations

import enum
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
