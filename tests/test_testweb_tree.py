"""testweb's `--tree-only` web: each host is its spanning tree and nothing more, so a URL a
crawler loses is never found again through another link (issue 14: a destroyed data directory)."""

from __future__ import annotations

import html
import re
import subprocess
import sys
import urllib.request
from collections import Counter
from urllib.parse import urljoin, urlsplit

import pytest

from crawler_node.testweb import TestwebProcess
from crawler_node.testweb.graph import HostFeatures, SyntheticWeb

HOSTS = [f"site-{k}.test" for k in range(6)]
ROBOTS = "User-agent: *\nDisallow: /p/7\nCrawl-delay: 0.1\n"


def tree_web(**kwargs) -> SyntheticWeb:
    return SyntheticWeb(hosts=HOSTS, pages=60, seed=3, cross_link_prob=0.9, tree_only=True, **kwargs)


def every_resource(web: SyntheticWeb) -> set[str]:
    """What exists on the web's hosts: every page and image."""
    return {f"http://{host}{'/' if index == 0 else f'/p/{index}'}" for host in web.hosts
            for index in range(web.pages)} | {f"http://{host}/img/{k}.png" for host in web.hosts
                                              for k in range(web.images)}


def test_every_page_has_exactly_one_parent_and_no_link_leaves_its_host():
    web = tree_web()
    parents: Counter[str] = Counter()
    for url in web.expected_urls():
        host = urlsplit(url).hostname
        for link in web.links(host, urlsplit(url).path):
            assert urlsplit(link).hostname == host, f"{url} links to another host: {link}"
            parents[link] += 1
    roots = {f"http://{host}/" for host in HOSTS}
    assert not roots & set(parents), "a root has a parent: something links back to /"
    assert set(parents.values()) == {1}, [url for url, n in parents.items() if n > 1][:5]
    # The tree spans every resource, and the expected set is exactly the tree.
    assert set(parents) | roots == every_resource(web) == set(web.expected_urls())


def test_robots_prunes_subtrees_and_off_tree_features_are_refused():
    web = tree_web(features={"site-1.test": HostFeatures(robots=ROBOTS)})
    expected = set(web.expected_urls())
    assert "http://site-1.test/p/7" not in expected
    pruned = {url for url in every_resource(web) - expected if url.startswith("http://site-1.test/")}
    assert "http://site-1.test/p/7" in pruned  # and, with it, every page under it
    assert all(url.startswith("http://site-1.test/") for url in every_resource(web) - expected)
    for features in (HostFeatures(redirects=0.2), HostFeatures(trap=True), HostFeatures(duplicates=2)):
        with pytest.raises(ValueError, match="tree_only"):
            tree_web(features={"site-2.test": features})


def test_the_default_web_is_not_a_tree():
    web = SyntheticWeb(hosts=HOSTS, pages=60, seed=3)
    links = Counter(link for url in web.expected_urls()
                    for link in web.links(urlsplit(url).hostname, urlsplit(url).path))
    assert max(links.values()) > 1


_HREF = re.compile(r'<a href="([^"]+)"')  # anchors only: <base href> is not a link


def test_the_served_web_is_the_tree(tmp_path):
    with TestwebProcess(hosts=4, pages=25, seed=5, extra_args=["--tree-only"], tmp_dir=tmp_path) as web:
        graph = SyntheticWeb(hosts=[f"site-{k}.test" for k in range(4)], pages=25, seed=5, tree_only=True)
        expected = web.expected()
        assert expected == graph.expected_urls()
        opener = urllib.request.build_opener(urllib.request.ProxyHandler({"http": web.url}))
        parents: Counter[str] = Counter()
        for url in expected:
            if "/img/" in url:
                continue
            with opener.open(url, timeout=5) as response:
                page = response.read().decode()
            base = re.search(r'<base href="([^"]+)"', page)
            for href in _HREF.findall(page):
                target = urljoin(urljoin(url, html.unescape(base.group(1))) if base else url,
                                 html.unescape(href)).split("#")[0]
                parts = urlsplit(target)
                parents[f"http://{parts.hostname}{parts.path or '/'}"] += 1
        assert set(parents.values()) == {1}
        assert set(parents) == set(expected) - {f"http://site-{k}.test/" for k in range(4)}


def test_tree_only_with_an_off_tree_profile_is_one_line_and_exit_2(tmp_path):
    profile = tmp_path / "profile.json"
    profile.write_text('{"site-0.test": {"redirects": 0.5}}')
    done = subprocess.run([sys.executable, "-m", "crawler_node", "testweb", "--tree-only", "--hosts", "2",
                           "--profile", str(profile), "--listen", "127.0.0.1:0"],
                          capture_output=True, text=True, timeout=30)
    assert done.returncode == 2
    assert done.stderr.strip().count("\n") == 0 and "tree_only" in done.stderr
