"""What a fetch result means, and to which limiter the news goes (DESIGN.md rule 5).

Pure: a FetchResult in, a Signal out. The node applies it: ``host`` to that host's AIMD
limiter and next-eligible time, ``api`` to the fetch-through API's limiter, never both.
"""

from __future__ import annotations

import enum
from dataclasses import dataclass

from crawler_node.backoff import parse_retry_after
from crawler_node.fetch import ErrorKind, FetchResult
from crawler_node.limiter import Outcome


class ApiSignal(enum.Enum):
    NONE = "none"
    THROTTLED = "throttled"  # the proxy/API says: too many concurrent requests through me
    QUOTA = "quota"  # the API plan is spent: stop fetching through it until reset


@dataclass(frozen=True, slots=True)
class Signal:
    outcome: str  # the crawl.log outcome
    host: Outcome  # what the host's limiter learns
    api: ApiSignal = ApiSignal.NONE
    retry_after_s: float | None = None
    error: str | None = None  # the error kind the retry policy looks at

    @property
    def success(self) -> bool:
        return self.outcome in ("ok", "redirect")


def classify(result: FetchResult, *, now: float, api_limit_header: str = "X-Api-Limit") -> Signal:
    retry_after = parse_retry_after(result.header("Retry-After"), now=now) if result.status else None
    if result.error == ErrorKind.TIMEOUT:
        return Signal("timeout", Outcome.TIMEOUT, error=result.error)
    if result.error == ErrorKind.TOO_LARGE:
        return Signal("too_large", Outcome.SUCCESS, error=result.error)
    if result.error is not None:
        return Signal(result.error, Outcome.ERROR, error=result.error)
    status = result.status or 0
    api_header = result.header(api_limit_header)
    if api_header is not None and status in (429, 509):
        # The API's own limit, not the site's: the host limiter must not be cut for it.
        if status == 509 or api_header.strip().lower() == "quota":
            return Signal("api_quota", Outcome.NEUTRAL, ApiSignal.QUOTA, retry_after)
        return Signal("api_throttled", Outcome.NEUTRAL, ApiSignal.THROTTLED, retry_after)
    if status == 509:
        return Signal("api_quota", Outcome.NEUTRAL, ApiSignal.QUOTA, retry_after)
    if 200 <= status < 300:
        return Signal("ok", Outcome.SUCCESS)
    if 300 <= status < 400:
        return Signal("redirect", Outcome.SUCCESS)
    if status in (429, 503):
        return Signal("throttled", Outcome.THROTTLED, retry_after_s=retry_after)
    if status >= 500:
        return Signal("server_error", Outcome.ERROR, retry_after_s=retry_after)
    if status == 408:
        return Signal("http_error", Outcome.TIMEOUT)
    return Signal("http_error", Outcome.NEUTRAL)
