"""robots.txt by the standard's own suites: every expectation of google/robotstxt's
robots_test.cc and RFC 9309's examples (tests/data/robots/, README.md there), each run through
the node's own decision: the robots.txt answer judged as the fetch stage judges it
(core.verdict.judge_robots), then the URL asked of its rules as the host table asks
(``RobotsRules.allowed``). A case the node answers differently on purpose carries a
``deviation`` in the data and runs here as a strict expected failure with that reason."""

from __future__ import annotations

import json
import random
import re
from pathlib import Path

import pytest

from crawler_node.config import ConfigError, PolitenessConfig
from crawler_node.core.backoff import HostBackoffPolicy, RetryPolicy
from crawler_node.core.response import FetchResult
from crawler_node.core.robots import RobotsRules
from crawler_node.core.robots_groups import valid_product_token
from crawler_node.core.verdict import ResponseRules, judge_robots

DATA = Path(__file__).parent / "data" / "robots"
GOOGLE = json.loads((DATA / "google_robots_test.json").read_text(encoding="utf-8"))
RFC = json.loads((DATA / "rfc9309_examples.json").read_text(encoding="utf-8"))
RUN = re.compile(r"<(.)\*(\d+)>")  # "<a*16652>": the letter a, 16652 times (README.md)


def expand(value: str) -> str:
    return RUN.sub(lambda match: match.group(1) * int(match.group(2)), value)


def body_of(case: dict) -> bytes:
    """The file's bytes: lone surrogates in the JSON text stand for bytes that are not UTF-8."""
    return expand(case["robotstxt"]).encode("utf-8", "surrogateescape")


def rules_for(agent: str) -> ResponseRules:
    return ResponseRules(retry=RetryPolicy(budget=3, base_s=1.0, cap_s=60.0, rng=random.Random(7)),
                         host_backoff=HostBackoffPolicy(initial_s=60.0, rng=random.Random(7)),
                         host_backoff_after=2, retry_after_cap_s=300.0, latency=None, through_api=False,
                         robots_agent=agent)


def node_rules(body: bytes, agent: str) -> RobotsRules | None:
    """What the node keeps of a robots.txt that answered 200 with ``body``."""
    answer = judge_robots(FetchResult(url="http://foo.bar/robots.txt", status=200, body=body), now=0.0,
                          rules=rules_for(agent))
    assert answer.ready
    return answer.rules


def node_allows(body: bytes, agent: str, url: str) -> bool:
    rules = node_rules(body, agent)
    return rules is None or rules.allowed(url)


def params(cases: list[dict]) -> list:
    out = []
    for case in cases:
        marks = [pytest.mark.xfail(strict=True, reason=case["deviation"])] if "deviation" in case else []
        out.append(pytest.param(case, id=case["id"], marks=marks))
    return out


@pytest.mark.parametrize("case", params(GOOGLE["decisions"] + GOOGLE["parser_level"]))
def test_google_robots_test_decisions(case: dict) -> None:
    assert node_allows(body_of(case), case["agent"], expand(case["url"])) is case["allowed"]


@pytest.mark.parametrize("case", params(GOOGLE["agents"]))
def test_google_valid_user_agents(case: dict) -> None:
    assert valid_product_token(case["agent"]) is case["valid"]


@pytest.mark.parametrize("case", params(GOOGLE["sitemaps"]))
def test_google_sitemaps(case: dict) -> None:
    rules = node_rules(body_of(case), "foo")
    assert rules is not None and rules.sitemaps() == case["sitemaps"]


@pytest.mark.parametrize("case", params(RFC["decisions"]))
def test_rfc9309_examples(case: dict) -> None:
    assert node_allows(body_of(case), case["agent"], case["url"]) is case["allowed"]


def test_the_suites_are_whole() -> None:
    """robots_test.cc holds 145 IsUserAgentAllowed and 11 IsValidUserAgentToObey expectations
    (at the commit README.md names); each is a case here, and every deviation gives its reason."""
    assert len(GOOGLE["decisions"]) == 145 and len(GOOGLE["agents"]) == 11
    every = GOOGLE["decisions"] + GOOGLE["agents"] + GOOGLE["parser_level"] + GOOGLE["sitemaps"] + RFC["decisions"]
    assert len({case["id"] for case in every}) == len(every)
    assert all(case["deviation"].strip() for case in every if "deviation" in case)


def test_a_byte_order_mark_hides_no_rule() -> None:
    """Issue 46's case: a BOM before ``User-agent: *`` used to hide the group, and every rule
    after it fell outside any group (the whole site was crawled)."""
    body = b"\xef\xbb\xbfUser-agent: *\r\nDisallow: /private/\r\n"
    assert not node_allows(body, "crawler-node", "http://foo.bar/private/page")
    assert node_allows(body, "crawler-node", "http://foo.bar/public/page")


@pytest.mark.parametrize("agent", ["crawler-node/1.0", "crawler node", "", "crawler*"])
def test_a_robots_agent_that_no_group_could_name_is_refused(agent: str) -> None:
    """The node's own token is checked as Google's IsValidUserAgentToObey checks (the cases
    above): one that is not a product token would silently match no group of any robots.txt."""
    with pytest.raises(ConfigError, match="robots_agent"):
        PolitenessConfig(robots_agent=agent)
