"""--recrawl adaptive on testweb: three populations of pages, one changing every two seconds,
one every few minutes, one never; over a fixed window of testweb's clock the never-changing
pages are fetched less and less, and every recrawl of them is a 304 without body bytes."""

from __future__ import annotations

import time

from conftest import roots, wait_until

HOSTS, PAGES, SEED = 3, 8, 50
FAST, SLOW, NEVER = "site-0.test", "site-1.test", "site-2.test"
WINDOW_S = 36.0  # of testweb's clock, from the first fetch of a never-changing page


def page_fetches(history: list[list]) -> list[float]:
    return [started for started, _, path in history if path.startswith("/p/")]


def test_adaptive_recrawl_backs_off_pages_that_never_change(start_testweb, start_node):
    web = start_testweb(hosts=HOSTS, pages=PAGES, seed=SEED, extra_args=["--history", "5000"],
                        profile={FAST: {"change_rate": 0.5}, SLOW: {"change_rate": 1 / 180}})
    expected = set(web.expected())
    node = start_node(proxy=web.url, seeds=roots(HOSTS),
                      extra_args=["--recrawl-after", "3s", "--recrawl-min", "1s", "--recrawl-max", "12s"])
    wait_until(lambda: web.stats(summary=True)["totals"]["requests"] >= len(expected), 60, "the first pass")
    first_pass = web.stats(hosts=[NEVER], history=True)["hosts"][NEVER]
    start = min(page_fetches(first_pass["history"]))  # the window starts at the first fetch of them
    deadline = time.monotonic() + WINDOW_S + 30
    while web.stats(summary=True)["clock"] < start + WINDOW_S and time.monotonic() < deadline:
        time.sleep(0.5)
    stats = web.stats(hosts=[FAST, SLOW, NEVER], history=True)["hosts"]
    freshness = web.freshness(pages=True)
    counters = node.status()["counters"]
    node.stop(timeout_s=15)

    # never changing: the thirds of the window see fewer and fewer fetches
    never = [t - start for t in page_fetches(stats[NEVER]["history"]) if t < start + WINDOW_S]
    thirds = [sum(1 for t in never if k * WINDOW_S / 3 <= t < (k + 1) * WINDOW_S / 3) for k in range(3)]
    assert thirds[2] < thirds[0], thirds  # seen: [17, 7, 7] (fixed would fetch them alike each third)
    # ... and each recrawl of them was a 304: no change, no body bytes
    recrawls = len(never) - len(page_fetches(first_pass["history"]))
    assert stats[NEVER]["not_modified"] >= recrawls > 0
    assert stats[NEVER]["body_bytes"] == first_pass["body_bytes"]
    # the changing pages were tracked by testweb; those that change every few minutes were
    # kept fresh, and most fetches of them found nothing new
    # the node counted its recrawls, and the changes among them: 304s and same digests are not
    assert counters["recrawl_checks"] > counters["recrawl_changes"] > 0
    slow = {url: page for url, page in freshness["per_page"].items() if SLOW in url}
    assert slow and sum(p["fresh_s"] for p in slow.values()) >= 0.8 * sum(p["tracked_s"] for p in slow.values())
