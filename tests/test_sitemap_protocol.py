"""The sitemaps.org protocol's own examples (tests/data/sitemaps/, with their source and
licence in its README): each file, plain and gzip'd, yields exactly the URLs the protocol
says it lists, and the parse worker hands them over as links."""

from __future__ import annotations

import gzip
import json
from pathlib import Path

import pytest

from crawler_node.core.scope import Scope
from crawler_node.core.urls import host_of, normalize_url
from crawler_node.parse.parser_worker import PageReport, ParseContext, parse_pages
from crawler_node.parse.sitemap import Sitemap, read_sitemap

DATA = Path(__file__).parent / "data" / "sitemaps"
EXPECTED: dict[str, dict] = json.loads((DATA / "expected.json").read_text())
LIMITS = {"max_urls": 50_000, "max_bytes": 52_428_800}


def test_every_example_has_its_expected_urls() -> None:
    files = {path.name for path in DATA.iterdir()} - {"README.md", "expected.json"}
    assert files == set(EXPECTED)


@pytest.mark.parametrize("packed", [False, True], ids=["plain", "gzip"])
@pytest.mark.parametrize("name", sorted(EXPECTED))
def test_each_example_lists_exactly_its_urls(name: str, packed: bool) -> None:
    expected = EXPECTED[name]
    body = (DATA / name).read_bytes()
    if packed:
        body = gzip.compress(body)
    sitemap = read_sitemap(body, **LIMITS, text=expected.get("text", False))
    assert sitemap == Sitemap(kind=expected["kind"], urls=expected["urls"])


@pytest.mark.parametrize("name", sorted(EXPECTED))
def test_the_worker_hands_each_examples_urls_over_as_links(name: str) -> None:
    expected = EXPECTED[name]
    context = ParseContext(scope=Scope(allow_hosts=["www.example.com"]), max_links=1)
    url = f"http://www.example.com/{name}"
    job = (gzip.compress((DATA / name).read_bytes()), url, 0, None, False, None, None, expected.get("text", False))
    [report] = parse_pages(context, [job])
    assert isinstance(report, PageReport) and report.kind == "sitemap" and report.error is None
    links = list(dict.fromkeys(normalize_url(listed, url) for listed in expected["urls"]))
    assert report.found == len(expected["urls"])
    assert report.links == [(link, host_of(link)) for link in links]
