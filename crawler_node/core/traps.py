"""Spider-trap guards: rules on a canonical URL alone. Pure: no I/O, no state.

A trap is a site that makes new URLs without end: a calendar, a path that repeats itself
(a relative link resolved against its own page, over and over), a query string that grows a
parameter per click. These rules turn such URLs away before they cost a fetch, each with its
own reason (outcomes.Rejection), so crawl.log says which rule it was. The cap on URLs per
host needs a count, so it lives where the count is kept: the frontier (frontier.seen_set).

User patterns (``--allow-url``, ``--deny-url``) run in RE2, whose matching is linear in the
URL's length whatever the pattern: ``(a+)+$``, which makes Python's ``re`` backtrack for
longer than the age of the universe on 40 characters, cannot stall the parser. RE2 refuses
what it cannot do in linear time (backreferences, lookaround): such a pattern is a settings
error, not a slow crawl.
"""

from __future__ import annotations

import re
from collections import Counter
from collections.abc import Callable, Sequence
from typing import Any

import re2  # type: ignore[import-untyped]  # google-re2 ships no types

from crawler_node.core.outcomes import Rejection

# A date in a URL: year and month (and maybe a day) as path segments (/2031/07, /2031/07/14) or
# in one segment or query value (2031-07, 2031-07-14); digits on neither side.
_DATE = re.compile(r"(?<![0-9])([12][0-9]{3})[/-](0[1-9]|1[0-2])(?![0-9])")

_OPTIONS = re2.Options()
_OPTIONS.log_errors = False  # RE2 would also print each bad pattern on stderr; the error says it once


class PatternError(ValueError):
    """A user pattern RE2 cannot compile; ``reason`` is RE2's own word for it."""

    def __init__(self, pattern: str, reason: str) -> None:
        super().__init__(f"{pattern!r} is not an RE2 regular expression: {reason}")
        self.pattern = pattern
        self.reason = reason


def compile_pattern(pattern: str) -> Any:
    """One user pattern, compiled by RE2 (raises PatternError)."""
    try:
        return re2.compile(pattern, _OPTIONS)
    except re2.error as exc:
        reason = exc.args[0] if exc.args else "invalid"
        raise PatternError(pattern, reason.decode() if isinstance(reason, bytes) else str(reason)) from exc


def _any_of(patterns: Sequence[str]) -> Any:
    """One alternation of ``patterns`` (each checked alone first, so an error names it): one
    pass over the URL however many patterns there are."""
    if not patterns:
        return None
    for pattern in patterns:
        compile_pattern(pattern)
    return compile_pattern("|".join(f"(?:{pattern})" for pattern in patterns))


class TrapRules:
    """The trap guards of a crawl; each limit 0 turns its rule off.

    ``max_path_repeats``: no path segment may occur more than this many times (``/a/b/a/b/a/b/a``
    has ``a`` four times); ``max_path_depth``: at most this many ``/`` in the path;
    ``max_query_params``: at most this many ``&``-separated parameters in the query;
    ``deny_urls``: a URL that one of these matches (searched anywhere in the canonical URL:
    anchor with ``^`` and ``$``) is out; ``allow_urls``: when given, a URL must match one.
    ``max_future_years`` (with ``this_year``, given: no clock here): a URL dated (a year and a
    month in its path or query, see _DATE) more than this many years after ``this_year`` is a
    calendar trap. A calendar links each month to the next one without end (testweb's went
    past 9,000 pages in a minute); only the host page cap or the depth stopped it. No site has
    pages about decades ahead; a blog's archive (the past) is never cut."""

    __slots__ = ("max_path_repeats", "max_path_depth", "max_query_params", "allow_urls", "deny_urls",
                 "max_future_years", "this_year", "_latest_year", "_allow", "_deny", "_plain_slashes")

    def __init__(self, *, max_path_repeats: int = 0, max_path_depth: int = 0, max_query_params: int = 0,
                 allow_urls: Sequence[str] = (), deny_urls: Sequence[str] = (), max_future_years: int = 0,
                 this_year: int = 0) -> None:
        for name, value in (("max_path_repeats", max_path_repeats), ("max_path_depth", max_path_depth),
                            ("max_query_params", max_query_params)):
            if value < 0:
                raise ValueError(f"{name} must be >= 0 (0: no limit), got {value}")
        if isinstance(allow_urls, str) or isinstance(deny_urls, str):
            raise TypeError("allow_urls and deny_urls must be sequences of patterns, not one string")
        self.max_path_repeats = max_path_repeats
        self.max_path_depth = max_path_depth
        self.max_query_params = max_query_params
        if max_future_years < 0 or (max_future_years and this_year <= 0):
            raise ValueError(f"max_future_years must be >= 0 (0: no limit), with this_year; got {max_future_years}")
        self.max_future_years = max_future_years
        self.this_year = this_year
        self._latest_year = this_year + max_future_years if max_future_years else 0
        self.allow_urls = tuple(allow_urls)
        self.deny_urls = tuple(deny_urls)
        self._allow = _any_of(self.allow_urls)
        self._deny = _any_of(self.deny_urls)
        # A path with no more "/" than this breaks neither path rule: most links stop there.
        self._plain_slashes = min(limit for limit in (max_path_repeats, max_path_depth, 1 << 30) if limit)

    def __reduce__(self) -> tuple[Callable[..., TrapRules], tuple[Any, ...]]:
        # The rules travel to the parser processes as their settings; each process compiles them.
        return (_rebuild, (self.max_path_repeats, self.max_path_depth, self.max_query_params,
                           self.allow_urls, self.deny_urls, self.max_future_years, self.this_year))

    @property
    def active(self) -> bool:
        return bool(self.max_path_repeats or self.max_path_depth or self.max_query_params or self._latest_year
                    or self._allow is not None or self._deny is not None)

    def _far_future(self, url: str) -> bool:
        latest = self._latest_year
        if not latest:
            return False
        for match in _DATE.finditer(url, url.find("/", url.find("://") + 3) + 1 or len(url)):
            if int(match.group(1)) > latest:
                return True
        return False

    def check(self, url: str) -> Rejection | None:
        """None when the canonical ``url`` passes every rule, else the first rule it breaks
        (the structural ones first: they are cheaper than a pattern)."""
        # The parser's hot path: a short path without a query passes the structural rules at
        # once ("/" in a canonical URL: the two of "://", then the path's; a query's only add).
        if self._latest_year and self._far_future(url):
            return Rejection.CALENDAR_TRAP
        if url.count("/") - 2 <= self._plain_slashes and "?" not in url:
            return self._patterns(url)
        start = url.find("/", url.find("://") + 3)
        if start < 0:
            path, query = "/", ""
        else:
            path, _, query = url[start:].partition("?")
        repeats = self.max_path_repeats
        # A path of no more segments than the limit cannot repeat one past it: most paths stop here.
        if repeats and path.count("/") > repeats:
            segments = [segment for segment in path.split("/") if segment]
            if len(segments) > repeats and Counter(segments).most_common(1)[0][1] > repeats:
                return Rejection.REPEATED_SEGMENTS
        if self.max_path_depth and path.count("/") > self.max_path_depth:
            return Rejection.PATH_TOO_DEEP
        params = self.max_query_params
        if params and query.count("&") >= params and sum(1 for part in query.split("&") if part) > params:
            return Rejection.TOO_MANY_QUERY_PARAMS
        return self._patterns(url)

    def _patterns(self, url: str) -> Rejection | None:
        if self._deny is not None and self._deny.search(url) is not None:
            return Rejection.DENIED_URL
        if self._allow is not None and self._allow.search(url) is None:
            return Rejection.DENIED_URL
        return None


def _rebuild(max_path_repeats: int, max_path_depth: int, max_query_params: int, allow_urls: tuple[str, ...],
             deny_urls: tuple[str, ...], max_future_years: int = 0, this_year: int = 0) -> TrapRules:
    return TrapRules(max_path_repeats=max_path_repeats, max_path_depth=max_path_depth,
                     max_query_params=max_query_params, allow_urls=allow_urls, deny_urls=deny_urls,
                     max_future_years=max_future_years, this_year=this_year)


NO_TRAP_RULES = TrapRules()
