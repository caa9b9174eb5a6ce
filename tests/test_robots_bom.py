"""robots.txt as Windows editors and careless hands write it, crawled by a real node on a real
testweb and audited from what testweb itself saw (``/_testweb/stats``): a file that starts with
a UTF-8 byte-order mark, and a group that an unknown line does not end (issue 46)."""

from __future__ import annotations

import urllib.request

import pytest
from conftest import read_crawl_log, roots

from crawler_node.testweb.process import TestwebProcess
from crawler_node.tools.node_process import NodeProcess

PAGES = 30
PROFILE = {
    # CRLF and a BOM, as Notepad saves it: "/p/1" keeps out /p/1 and /p/10 ... /p/19
    "site-0.test": {"robots": "User-agent: *\r\nDisallow: /p/1\r\n", "robots_bom": True},
    # RFC 9309 2.1: the group is ended by a User-agent line after a rule, not by an unknown line;
    # crawler-node shares otherbot's rules
    "site-1.test": {"robots": "User-agent: crawler-node\nX-Unknown: yes\nUser-agent: otherbot\nDisallow: /p/2\n"},
}
FORBIDDEN = {"site-0.test": "/p/1", "site-1.test": "/p/2"}


@pytest.fixture(scope="module")
def crawl(tmp_path_factory):
    tmp = tmp_path_factory.mktemp("robots-bom")
    with TestwebProcess(hosts=2, pages=PAGES, seed=46, profile=PROFILE, tmp_dir=tmp) as web:
        node = NodeProcess(node_id="bom-1", data_dir=tmp / "bom-1", proxy=web.url, seeds=roots(2),
                           extra_args=["--host-limit-ceiling", "4", "--host-limit-start", "2"])
        with node:
            status = node.wait_idle(timeout_s=120)
            stats = web.stats()  # before the request below, which testweb counts too
            opener = urllib.request.build_opener(urllib.request.ProxyHandler({"http": web.url}))
            served = opener.open("http://site-0.test/robots.txt", timeout=10).read()
            yield {"status": status, "stats": stats, "served": served,
                   "log": read_crawl_log(node.data_dir, everything=True)}


def test_testweb_serves_the_byte_order_mark(crawl) -> None:
    assert crawl["served"] == b"\xef\xbb\xbfUser-agent: *\r\nDisallow: /p/1\r\n"


def requested(crawl, host: str) -> set[str]:
    prefix = f"http://{host}"
    return {url.removeprefix(prefix) for url in crawl["stats"]["urls"] if url.startswith(prefix + "/")}


@pytest.mark.parametrize("host", sorted(FORBIDDEN))
def test_no_disallowed_page_is_requested(crawl, host: str) -> None:
    paths = requested(crawl, host)
    assert "/robots.txt" in paths
    assert not {path for path in paths if path.startswith(FORBIDDEN[host])}, "robots.txt was not obeyed"
    # the rest of the host was crawled, and every URL the rule kept out has its line in crawl.log
    assert len(paths) > PAGES // 2
    kept_out = {line["url"] for line in crawl["log"] if line["outcome"] == "robots_disallowed"}
    assert {url for url in kept_out if url.startswith(f"http://{host}/")}
    assert all(url.removeprefix(f"http://{host}").startswith(FORBIDDEN[host])
               for url in kept_out if url.startswith(f"http://{host}/"))
