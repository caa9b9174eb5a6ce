"""The scope and the trap guards as pure rules: the default same-host rule, host globs, and
each guard with its reason; RE2 patterns, linear whatever the pattern; bad patterns refused."""

from __future__ import annotations

import pickle
import re
import sqlite3
import subprocess
import sys
from contextlib import closing
from pathlib import Path

import pytest
from frontier_helpers import FakeClock, entry

from crawler_node.core.outcomes import FetchOutcome, Rejection
from crawler_node.core.scope import Scope, source_of
from crawler_node.core.traps import PatternError, TrapRules, compile_pattern
from crawler_node.frontier import FRONTIER_FILENAME, Frontier, FrontierBatch, UrlEntry
from crawler_node.frontier.schema import SCHEMA_VERSION
from crawler_node.parse.parser_worker import PageReport, ParseContext, parse_pages
from crawler_node.settings import SettingsError
from crawler_node.settings_sources import load_settings


# ------------------------------------------------------------------------------ hosts
def test_by_default_a_link_stays_on_the_host_of_its_page() -> None:
    scope = Scope()
    assert scope.check("http://a.test/x", 1, source_host="a.test") is None
    assert scope.check("https://a.test/x", 1, source_host="a.test") is None  # the scheme may change
    assert scope.check("http://b.test/", 1, source_host="a.test") is Rejection.HOST_NOT_ALLOWED
    assert scope.check("http://www.a.test/", 1, source_host="a.test") is Rejection.HOST_NOT_ALLOWED
    assert scope.check("http://a.test:8080/", 1, source_host="a.test") is Rejection.HOST_NOT_ALLOWED
    # No source: a seed, a submitted URL, a redirect's target, a sitemap robots.txt names.
    assert scope.check("http://b.test/", 0) is None


def test_what_may_change_host_is_told_by_where_a_url_was_found() -> None:
    assert source_of(None, 0) is None  # a seed or a submitted URL
    assert source_of("http://x.test/", 1) is None  # a redirect's target (http://x/ -> https://www.x/)
    assert source_of("http://x.test/robots.txt", 0) is None  # a sitemap robots.txt names
    assert source_of("http://x.test/robots.txt?v=2#top", 0) is None
    assert source_of("http://x.test/robots.txt.html", 0) == "x.test"
    assert source_of("http://x.test:8080/p/robots.txt", 0) == "x.test:8080"  # only /robots.txt names sitemaps
    assert source_of("http://x.test/p/1", 0) == "x.test"


def test_a_wildcard_glob_matches_the_apex_too() -> None:
    # The README's example: --seed https://example.org/ --allow-host '*.example.org'
    scope = Scope(allow_hosts=["*.example.org"])
    assert scope.check("https://example.org/", 0) is None
    assert scope.check("https://www.example.org/", 1, source_host="example.org") is None
    assert scope.check("https://a.b.example.org/", 1) is None
    assert scope.check("https://badexample.org/", 1) is Rejection.HOST_NOT_ALLOWED
    assert scope.check("https://example.org.evil.test/", 1) is Rejection.HOST_NOT_ALLOWED


def test_an_allow_host_list_replaces_the_same_host_rule_and_a_star_lets_any_host_in() -> None:
    listed = Scope(allow_hosts=["a.test", "b.test"])
    assert listed.check("http://b.test/", 1, source_host="a.test") is None  # listed: may cross
    assert listed.check("http://c.test/", 1, source_host="c.test") is Rejection.HOST_NOT_ALLOWED
    wide = Scope(allow_hosts=["*"])
    assert wide.any_host
    assert wide.check("http://anything.test/", 1, source_host="a.test") is None
    assert wide.split(["http://a.test/", "http://z.test/"], 1, "a.test") == (["http://a.test/", "http://z.test/"], [])


def test_depth_is_checked_first_and_has_no_crawl_log_outcome() -> None:
    scope = Scope(max_depth=1)
    assert scope.check("http://b.test/", 2, source_host="a.test") is Rejection.TOO_DEEP
    assert Rejection.TOO_DEEP.outcome is None
    assert Rejection.HOST_NOT_ALLOWED.outcome is FetchOutcome.OUT_OF_SCOPE


# ------------------------------------------------------------------------------ trap guards
def test_a_path_segment_repeated_past_the_limit_is_a_trap() -> None:
    rules = TrapRules(max_path_repeats=3)
    assert rules.check("http://a.test/a/b/a/b/a/b") is None  # "a" three times
    assert rules.check("http://a.test/a/b/a/b/a/b/a") is Rejection.REPEATED_SEGMENTS
    assert rules.check("http://a.test/trap/redirect/x/x/x/x") is Rejection.REPEATED_SEGMENTS
    assert rules.check("http://a.test/x//x//x/") is None  # empty segments do not count
    assert rules.check("http://a.test/p?q=/x/x/x/x") is None  # the query is not the path
    assert rules.check("http://a.test") is None
    assert TrapRules(max_path_repeats=0).check("http://a.test/x/x/x/x/x/x") is None


def test_a_path_deeper_than_the_limit_is_a_trap() -> None:
    rules = TrapRules(max_path_depth=4)
    assert rules.check("http://a.test/1/2/3/4") is None
    assert rules.check("http://a.test/1/2/3/4/5") is Rejection.PATH_TOO_DEEP


def test_a_query_with_more_parameters_than_the_limit_is_a_trap() -> None:
    rules = TrapRules(max_query_params=3)
    assert rules.check("http://a.test/?a=1&b=2&c=3") is None
    assert rules.check("http://a.test/?a=1&&b=2&c=3&") is None  # empty parameters do not count
    assert rules.check("http://a.test/?a=1&b=2&c=3&d=4") is Rejection.TOO_MANY_QUERY_PARAMS
    assert rules.check("http://a.test/a&b&c&d&e") is None  # "&" in the path is no parameter


def test_deny_patterns_turn_urls_away_and_allow_patterns_must_match_one() -> None:
    deny = TrapRules(deny_urls=[r"/calendar/", r"\.pdf$"])
    assert deny.check("http://a.test/calendar/2026/01") is Rejection.DENIED_URL
    assert deny.check("http://a.test/paper.pdf") is Rejection.DENIED_URL
    assert deny.check("http://a.test/paper.pdf.html") is None
    both = TrapRules(allow_urls=[r"^https?://[^/]+/docs/", "(?i)/README"], deny_urls=["/docs/old/"])
    assert both.check("http://a.test/docs/new") is None
    assert both.check("http://a.test/x/readme") is None  # the (?i) of one pattern stays in it
    assert both.check("http://a.test/docs/old/x") is Rejection.DENIED_URL  # deny wins
    assert both.check("http://a.test/blog/") is Rejection.DENIED_URL  # matches no allow pattern


def test_the_rules_go_through_the_scope_after_the_host_rule() -> None:
    scope = Scope(traps=TrapRules(max_query_params=1, deny_urls=["secret"]))
    assert scope.check("http://b.test/secret", 1, source_host="a.test") is Rejection.HOST_NOT_ALLOWED
    assert scope.check("http://a.test/secret", 1, source_host="a.test") is Rejection.DENIED_URL
    kept, rejected = scope.split(["http://a.test/ok", "http://a.test/?a&b", "http://b.test/"], 1, "a.test")
    assert kept == ["http://a.test/ok"]
    assert rejected == [("http://a.test/?a&b", Rejection.TOO_MANY_QUERY_PARAMS),
                        ("http://b.test/", Rejection.HOST_NOT_ALLOWED)]


def test_the_rules_travel_to_a_parser_process_and_work_there() -> None:
    scope = Scope(allow_hosts=["*.test"], traps=TrapRules(max_path_repeats=2, deny_urls=["nope"]))
    copy = pickle.loads(pickle.dumps(scope))
    assert copy.check("http://a.test/nope", 1) is Rejection.DENIED_URL
    assert copy.check("http://a.test/x/x/x", 1) is Rejection.REPEATED_SEGMENTS
    assert copy.check("http://a.test/ok", 1) is None


def test_the_parser_hands_back_each_rejected_link_with_its_reason_once() -> None:
    scope = Scope(traps=TrapRules(max_path_repeats=3, max_query_params=2, deny_urls=["/private/"]))
    context = ParseContext(scope=scope, max_links=100)
    html = b"".join(f'<a href="{href}">x</a>'.encode() for href in (
        "/ok", "http://other.test/", "/a/a/a/a", "/?a=1&b=2&c=3", "/private/x"))
    first, again = parse_pages(context, [(html, "http://h.test/", 0), (html, "http://h.test/2", 0)])
    assert isinstance(first, PageReport)
    assert [url for url, _ in first.links] == ["http://h.test/ok"]
    assert first.rejected == [("http://other.test/", "host_not_allowed"),
                              ("http://h.test/a/a/a/a", "repeated_segments"),
                              ("http://h.test/?a=1&b=2&c=3", "too_many_query_params"),
                              ("http://h.test/private/x", "denied_url")]
    assert again == ([], 5, None)  # each one handed back once, as far as the memory goes


# ------------------------------------------------------------------------------ RE2
def test_a_catastrophic_pattern_runs_in_linear_time() -> None:
    # (a+)+$ on "aaa...ab" takes Python's re exponential time; RE2 answers at once. No timing
    # assertion: pytest's timeout is the bound, and this completes far within it.
    rules = TrapRules(deny_urls=["(a+)+$"])
    url = "http://a.test/" + "a" * 100_000 + "!"
    assert rules.check(url) is None
    assert rules.check("http://a.test/" + "a" * 100_000) is Rejection.DENIED_URL
    assert re.compile("(a+)+$").pattern  # the same pattern Python's re would take, and backtrack on


@pytest.mark.parametrize("pattern, reason", [
    ("(", "missing )"),
    (r"(a)\1", "invalid escape"),  # a backreference: not linear, so RE2 has none
    ("(?<=a)b", "perl operator"),  # lookbehind, likewise
])
def test_a_pattern_re2_cannot_run_is_an_error_that_names_it(pattern: str, reason: str) -> None:
    with pytest.raises(PatternError) as raised:
        compile_pattern(pattern)
    assert raised.value.pattern == pattern and reason in raised.value.reason


def test_limits_must_not_be_negative() -> None:
    with pytest.raises(ValueError):
        TrapRules(max_query_params=-1)
    with pytest.raises(TypeError):
        TrapRules(deny_urls="one string")


# ------------------------------------------------------------------------------ settings
def test_settings_carry_the_guards_with_their_defaults() -> None:
    settings = load_settings({}, env={})
    assert (settings.max_path_repeats, settings.max_path_depth, settings.max_query_params,
            settings.max_pages_per_host) == (3, 32, 10, 100_000)
    scope = load_settings({"deny_urls": ["/x/"], "allow_hosts": ["*.example.org"]}, env={}).node_config().scope
    assert scope.check("http://example.org/x/", 0) is Rejection.DENIED_URL


def test_a_bad_pattern_is_a_settings_error() -> None:
    with pytest.raises(SettingsError, match=r"deny_urls: '\(' is not an RE2 regular expression: missing \)"):
        load_settings({"deny_urls": ["("]}, env={})
    with pytest.raises(SettingsError, match="allow_urls"):
        load_settings({}, env={"CRAWLER_ALLOW_URLS": "(?<=a)b"})
    with pytest.raises(SettingsError, match="max_pages_per_host must be >= 0"):
        load_settings({"max_pages_per_host": -1}, env={})


def test_run_with_a_bad_pattern_says_so_in_one_line_and_exits_2(tmp_path) -> None:
    done = subprocess.run([sys.executable, "-m", "crawler_node", "run", "--data-dir", str(tmp_path / "d"),
                           "--deny-url", "/ok/", "--deny-url", "(unclosed"],
                          capture_output=True, text=True, timeout=60)
    assert done.returncode == 2
    assert done.stderr.strip().splitlines() == [
        "crawler-node run: error: deny_urls: '(unclosed' is not an RE2 regular expression: missing ): (unclosed"]


# ------------------------------------------------------------------------------ the per-host page cap
def capped_frontier(tmp_path: Path, clock: FakeClock, cap: int = 3) -> Frontier:
    return Frontier(tmp_path / FRONTIER_FILENAME, lease_timeout_s=60.0, clock=clock, max_pages_per_host=cap)


def urls(entries: list[UrlEntry]) -> list[str]:
    return [e.url for e in entries]


def test_a_host_takes_in_no_more_urls_than_its_cap(tmp_path: Path, clock: FakeClock) -> None:
    with capped_frontier(tmp_path, clock) as frontier:
        result = frontier.add([entry("a.test", n) for n in range(5)] + [entry("b.test", 0), entry("b.test", 1)])
        assert urls(result.accepted) == urls([entry("a.test", n) for n in range(3)] + [entry("b.test", 0),
                                                                                         entry("b.test", 1)])
        assert urls(result.capped) == urls([entry("a.test", 3), entry("a.test", 4)])
        assert result.duplicates == 0 and frontier.totals()["queued"] == 5
        # Known URLs stay duplicates; the capped ones, never queued nor remembered, are capped again.
        again = frontier.add([entry("a.test", n) for n in range(5)] + [entry("a.test", 4)])
        assert (again.accepted, urls(again.capped), again.duplicates) == (
            [], urls([entry("a.test", 3), entry("a.test", 4)]), 4)
        # A finished URL still counts: the count only grows.
        [lease] = frontier.lease("a.test", 1)[0]
        frontier.apply(FrontierBatch(done=[lease.id]))
        assert urls(frontier.apply(FrontierBatch(add=[entry("a.test", 9)])).capped) == ["http://a.test/page/9"]
    with capped_frontier(tmp_path, clock) as reopened:  # durable
        assert urls(reopened.add([entry("a.test", 10), entry("c.test", 0)]).capped) == ["http://a.test/page/10"]
    with capped_frontier(tmp_path, clock, cap=0) as uncapped:  # 0: no cap
        assert len(uncapped.add([entry("a.test", n) for n in range(3, 8)]).accepted) == 5


def test_urls_fetched_elsewhere_count_but_are_never_capped(tmp_path: Path, clock: FakeClock) -> None:
    with capped_frontier(tmp_path, clock, cap=2) as frontier:
        assert frontier.handoff.mark_seen([entry("a.test", n) for n in range(3)]) == 3
        assert urls(frontier.add([entry("a.test", 7)]).capped) == ["http://a.test/page/7"]


def test_a_layout_3_file_gets_the_count_of_the_rows_it_has(tmp_path: Path, clock: FakeClock) -> None:
    with Frontier(tmp_path / FRONTIER_FILENAME, clock=clock) as frontier:
        frontier.add([entry("a.test", n) for n in range(4)] + [entry("b.test", 0)])
    path = tmp_path / FRONTIER_FILENAME
    with closing(sqlite3.connect(path)) as db:  # back to layout 3: its hosts table had no count
        db.executescript("""
            CREATE TABLE hosts_3 (host TEXT PRIMARY KEY, next_eligible REAL NOT NULL DEFAULT 0,
                crawl_delay REAL NOT NULL DEFAULT 0, backoff_level INTEGER NOT NULL DEFAULT 0,
                last_throttle REAL) WITHOUT ROWID;
            INSERT INTO hosts_3 SELECT host, next_eligible, crawl_delay, backoff_level, last_throttle FROM hosts;
            DROP TABLE hosts;
            ALTER TABLE hosts_3 RENAME TO hosts;
            PRAGMA user_version = 3;
        """)
    with capped_frontier(tmp_path, clock, cap=5) as migrated:
        assert urls(migrated.add([entry("a.test", 4), entry("a.test", 5)]).capped) == ["http://a.test/page/5"]
    with closing(sqlite3.connect(path)) as db:
        assert db.execute("PRAGMA user_version").fetchone()[0] == SCHEMA_VERSION  # migrated to the current layout
        assert dict(db.execute("SELECT host, accepted FROM hosts")) == {"a.test": 5, "b.test": 1}


def test_a_url_dated_past_max_future_years_is_a_calendar_trap() -> None:
    rules = TrapRules(max_future_years=2, this_year=2026)
    assert rules.check("http://a.test/calendar/2028/12") is None
    assert rules.check("http://a.test/calendar/2029/01") is Rejection.CALENDAR_TRAP
    assert rules.check("http://a.test/events/2031-07-14/") is Rejection.CALENDAR_TRAP
    assert rules.check("http://a.test/cal?month=2040-02") is Rejection.CALENDAR_TRAP
    assert rules.check("http://a.test/archive/1998/05/") is None  # the past is never cut
    assert rules.check("http://2099-01.test/") is None  # the host is not dated
    assert rules.check("http://a.test/item/120301/2999") is None  # no year-month
    assert TrapRules(this_year=2026).check("http://a.test/calendar/2999/01") is None  # 0: off
    assert pickle.loads(pickle.dumps(rules)).check("http://a.test/calendar/2029/01") is Rejection.CALENDAR_TRAP
