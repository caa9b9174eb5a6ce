"""Link shapes only a URL Standard parser reads as browsers do, crawled by a real node: testweb's
url_shapes host (crawler_node/testweb/url_shapes.py) serves links written with backslashes,
scheme-relative forms and a windows-1252 page's queries, and its ground truth says which URLs the
node requested."""

from __future__ import annotations

from conftest import read_crawl_log

from crawler_node.testweb import url_shapes
from crawler_node.testweb.graph import SyntheticWeb, _special_links
from crawler_node.testweb.profile import parse_profile

HOST = "site-0.test"


def _shape_urls() -> set[str]:
    return {f"http://{HOST}{path}" for kind in ("shapes", "legacy") for path in url_shapes.targets(HOST, kind)}


def test_the_shapes_are_opt_in() -> None:
    plain = SyntheticWeb(hosts=[HOST], pages=3, seed=1)
    assert not any("/shapes/" in url for url in plain.expected_urls())
    assert parse_profile({HOST: {"url_shapes": True}}).for_host(HOST).url_shapes
    assert parse_profile({HOST: {}}).for_host(HOST).url_shapes is False
    assert _special_links(0, plain.features(HOST)) == []


def test_a_node_requests_what_a_browser_requests_for_each_link_shape(start_testweb, start_node) -> None:
    web = start_testweb(hosts=1, pages=3, profile={HOST: {"url_shapes": True}})
    expected = set(web.expected())
    assert _shape_urls() | {f"http://{HOST}{url_shapes.ENTRY}", f"http://{HOST}{url_shapes.LEGACY}"} <= expected
    node = start_node("shapes", proxy=web.url, seeds=[f"http://{HOST}/"])
    node.wait_idle(60)
    stats = web.stats()
    # Every shape's target once, under the URL a browser requests (the backslash and three-slash
    # shapes as paths on the host, the legacy page's queries in windows-1252), and nothing else:
    # no request for a URL the synthetic web does not have, none for another host.
    requested = {url: count for url, count in stats["urls"].items() if not url.endswith("/robots.txt")}
    assert requested == dict.fromkeys(expected, 1)
    assert stats["misdirected"] == 0
    assert {line["url"] for line in read_crawl_log(node.data_dir)} == expected
