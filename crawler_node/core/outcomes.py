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
    # Trap guards (core.traps, frontier's per-host cap): the URL is never fetched
    REPEATED_SEGMENTS = "repeated_segments"  # a path segment repeats past --max-path-repeats
    PATH_TOO_DEEP = "path_too_deep"  # more path segments than --max-path-depth
    TOO_MANY_QUERY_PARAMS = "too_many_query_params"  # more query parameters than --max-query-params
    DENIED_URL = "denied_url"  # matched by a --deny-url pattern, or by no --allow-url pattern
    HOST_PAGE_CAP = "host_page_cap"  # its host already had --max-pages-per-host URLs accepted
    HOST_DROPPED = "host_dropped"  # an operator dropped its host (crawler-node drop-host): never fetched
    TOO_MANY_REDIRECTS = "too_many_redirects"  # a redirect past --max-redirects: its target is not followed
    CALENDAR_TRAP = "calendar_trap"  # dated more than --max-future-years ahead (core.traps): never fetched
    # The site refused the crawler (core.refusals): the answer is kept as evidence, never as the page.
    BLOCKED_CHALLENGE = "blocked_challenge"  # a bot-management challenge: the host pauses, the URL waits
    BLOCKED_CAPTCHA = "blocked_captcha"  # a captcha page: the host pauses, the URL waits
    BLOCKED_SOFT = "blocked_soft"  # the same small page for every URL: the host pauses, the URL waits
    LOGIN_WALL = "login_wall"  # behind a login (a redirect to a login URL, a bare login form): final
    REFUSED = "refused"  # a 401/403 with no marker: final

    @property
    def success(self) -> bool:
        return self in _SUCCESSES


class Rejection(enum.StrEnum):
    """Why a URL is out of scope (core.scope.Scope.check): the reason the API reports for a
    submitted URL, and for a link, through ``outcome``, its crawl.log line and its counter."""

    HOST_NOT_ALLOWED = "host_not_allowed"
    TOO_DEEP = "too_deep"  # no line: another path may reach the URL at a depth in scope
    REPEATED_SEGMENTS = "repeated_segments"
    PATH_TOO_DEEP = "path_too_deep"
    TOO_MANY_QUERY_PARAMS = "too_many_query_params"
    DENIED_URL = "denied_url"
    CALENDAR_TRAP = "calendar_trap"

    @property
    def outcome(self) -> FetchOutcome | None:
        """The crawl.log outcome of a link turned away for this reason (None: no line)."""
        return _REJECTION_OUTCOMES[self]


_REJECTION_OUTCOMES: dict[Rejection, FetchOutcome | None] = {
    Rejection.HOST_NOT_ALLOWED: FetchOutcome.OUT_OF_SCOPE,
    Rejection.TOO_DEEP: None,
    Rejection.REPEATED_SEGMENTS: FetchOutcome.REPEATED_SEGMENTS,
    Rejection.PATH_TOO_DEEP: FetchOutcome.PATH_TOO_DEEP,
    Rejection.TOO_MANY_QUERY_PARAMS: FetchOutcome.TOO_MANY_QUERY_PARAMS,
    Rejection.DENIED_URL: FetchOutcome.DENIED_URL,
    Rejection.CALENDAR_TRAP: FetchOutcome.CALENDAR_TRAP,
}

# The outcomes of URLs ended without a request because a scope rule or a trap guard turned
# them away, each with its counter in /v1/status (store stage): the crawl.log `error` says why.
SCOPE_OUTCOMES: dict[FetchOutcome, str] = {
    FetchOutcome.OUT_OF_SCOPE: "its host is not in the crawl's scope (--allow-host; by default the host of the "
                               "page it was found on)",
    FetchOutcome.REPEATED_SEGMENTS: "a segment of its path occurs more than --max-path-repeats times",
    FetchOutcome.PATH_TOO_DEEP: "its path has more segments than --max-path-depth",
    FetchOutcome.TOO_MANY_QUERY_PARAMS: "its query has more parameters than --max-query-params",
    FetchOutcome.DENIED_URL: "it matches a --deny-url pattern, or no --allow-url pattern",
    FetchOutcome.HOST_PAGE_CAP: "its host has had --max-pages-per-host URLs accepted already",
    FetchOutcome.CALENDAR_TRAP: "its path or query is dated more than --max-future-years ahead: a calendar trap",
}


_SUCCESSES = frozenset({FetchOutcome.OK, FetchOutcome.REDIRECT, FetchOutcome.NOT_MODIFIED})
