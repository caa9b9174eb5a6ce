"""The dashboard in a real browser (Debian's chromium, driven by Playwright) against a 3-node
cluster: it shows the members and the ring, its counts rise while the cluster crawls, a
SIGKILLed member shows as down on the other members' pages within 5 s, and the console stays
free of errors."""

from __future__ import annotations

import os
import shutil

import pytest
from cluster_helpers import FAST_CLUSTER, peers_of, plan
from conftest import roots

pytestmark = pytest.mark.tools  # chromium (Playwright)

REQUIRED = os.environ.get("CRAWLER_REQUIRE_BROWSER") == "1"
CHROMIUM = shutil.which("chromium") or shutil.which("chromium-browser")
# Where to copy the screenshot the test takes (the README's is docs/dashboard.png, made so).
SCREENSHOT = os.environ.get("CRAWLER_DASHBOARD_SCREENSHOT")

try:
    from playwright.sync_api import sync_playwright
except ImportError:  # pragma: no cover - the test extra installs it
    sync_playwright = None


def _browser_or_skip():
    if sync_playwright is None or CHROMIUM is None:
        reason = "needs Playwright for Python and a chromium binary (.ci/run installs both)"
        if REQUIRED:
            pytest.fail(reason)
        pytest.skip(reason)


def test_the_dashboard_shows_the_cluster_and_a_member_going_down(start_testweb, start_node, tmp_path):
    _browser_or_skip()
    # One request at a time per host, 150 ms each: the crawl lasts ~12 s, past the pages' first
    # readings (a fresh cluster fetches within a fraction of a second of its start).
    web = start_testweb(hosts=6, pages=80, seed=61, profile={"site-*.test": {"latency_ms": 150}})
    addresses = plan(["a", "b", "c"])
    peers = peers_of(addresses)
    nodes = {}
    for node_id, (host, port) in addresses.items():
        nodes[node_id] = start_node(node_id, host=host, port=port, proxy=web.url, peers=peers, wait=False,
                                    seeds=roots(6) if node_id == "a" else (),
                                    extra_args=[*FAST_CLUSTER, "--secret", "dashboard-test",
                                                "--host-limit-start", "1", "--host-limit-ceiling", "1"])
    for node in nodes.values():
        node.wait_healthy(30)

    errors: list[str] = []
    with sync_playwright() as playwright:
        browser = playwright.chromium.launch(executable_path=CHROMIUM, headless=True,
                                             args=["--no-sandbox", "--disable-gpu", "--no-proxy-server"])
        try:
            pages = {}
            for node_id in ("a", "b"):
                page = browser.new_page(viewport={"width": 1200, "height": 900})
                page.on("console", lambda message: errors.append(message.text) if message.type == "error" else None)
                page.on("pageerror", lambda exc: errors.append(str(exc)))
                page.goto(nodes[node_id].url + "/", wait_until="load")
                pages[node_id] = page
            page = pages["b"]
            # Three members, and the ring drawn with every member's arcs.
            page.wait_for_function("document.querySelectorAll('#members tr').length === 4", timeout=15_000)
            page.wait_for_function(
                "new Set([...document.querySelectorAll('#ring path.arc')].map(p => p.dataset.member)).size === 3",
                timeout=15_000)
            text = page.inner_text("#members")
            assert all(node_id in text for node_id in ("a", "b", "c"))

            # Counts rise while crawling.
            def progress() -> int:
                return int(page.eval_on_selector("#progress", "bar => bar.value"))

            first = progress()
            page.wait_for_function(f"document.querySelector('#progress').value > {first}", timeout=20_000)
            page.screenshot(path=str(tmp_path / "dashboard-crawling.png"), full_page=True)
            if SCREENSHOT:
                shutil.copyfile(tmp_path / "dashboard-crawling.png", SCREENSHOT)

            # c is SIGKILLed: a's and b's pages say it is down within 5 s.
            nodes["c"].kill()
            for node_id in ("a", "b"):
                pages[node_id].wait_for_function(
                    "[...document.querySelectorAll('#members tr')].some(r => r.cells[0].textContent.startsWith('c') "
                    "&& /down/.test(r.cells[1].textContent))", timeout=5_000)
            assert "c" in pages["a"].inner_text("#members")
            # a's page (the node b's page is not served by) stays fresh: no stale banner.
            assert not pages["a"].is_visible("#stale")
        finally:
            browser.close()
    assert errors == [], errors
