"""Named outcomes, shared by every stage instead of strings compared across modules.

They are ``StrEnum``s, so the values written to crawl.log, status and metrics labels are the
same words as before (``"ok"``, ``"timeout"``...), and a value read back compares equal to
its member.
"""

from __future__ import annotations

import enum


class ErrorKind(enum.StrEnum):
    """Why a request produced no usable HTTP answer, named for the recovery it triggers
    (see core.backoff.RetryPolicy)."""

    TIMEOUT = "timeout"  # retryable, and a slow-down signal for the host
    CONNECTION = "connection"  # retryable
    PROXY = "proxy"  # the proxy itself failed; retryable
    NOT_ALLOWED = "not_allowed"  # a private address without --allow-private: never retried
    TOO_LARGE = "body_too_large"  # never retried: it would be too large again


class FetchOutcome(enum.StrEnum):
    """What one fetch attempt came to: the ``outcome`` of its crawl.log line."""

    OK = "ok"
    REDIRECT = "redirect"
    HTTP_ERROR = "http_error"  # 4xx other than the throttling ones
    THROTTLED = "throttled"  # the site's 429 / 503 / 509
    SERVER_ERROR = "server_error"
    TIMEOUT = "timeout"
    TOO_LARGE = "too_large"
    CONNECTION = "connection"
    PROXY = "proxy"
    NOT_ALLOWED = "not_allowed"
    API_THROTTLED = "api_throttled"  # the fetch-through API's own concurrency limit
    API_QUOTA = "api_quota"  # the fetch-through API's plan is spent

    @property
    def success(self) -> bool:
        return self in _SUCCESSES


_SUCCESSES = frozenset({FetchOutcome.OK, FetchOutcome.REDIRECT})
