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
    TLS = "tls"  # the certificate (or the handshake) failed verification: never retried
    DNS = "dns"  # the name did not resolve: retried, on its own (longer) schedule


class FetchOutcome(enum.StrEnum):
    """What one fetch attempt came to: the ``outcome`` of its crawl.log line."""

    OK = "ok"
    REDIRECT = "redirect"
    NOT_MODIFIED = "not_modified"  # a 304 to a recrawl's conditional request: the stored page still holds
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
    TLS = "tls"  # certificate error: final for the URL, the reason in crawl.log's error
    DNS = "dns"  # the name did not resolve
    ROBOTS_DISALLOWED = "robots_disallowed"  # robots.txt forbids it: never fetched
    ROBOTS_UNAVAILABLE = "robots_unavailable"  # its robots.txt could not be had: given up, never fetched
    OUT_OF_SCOPE = "out_of_scope"  # a link whose host the crawl's scope leaves out: never fetched
    TOO_MANY_REDIRECTS = "too_many_redirects"  # a redirect past --max-redirects: its target is not followed

    @property
    def success(self) -> bool:
        return self in _SUCCESSES


_SUCCESSES = frozenset({FetchOutcome.OK, FetchOutcome.REDIRECT, FetchOutcome.NOT_MODIFIED})
