"""A site that starts answering challenge pages (issue 47): the node sees them as refusals, pauses
that host alone (testweb sees no request from it during the pause), leaves the other hosts at
their pace, and once the pause is over and the site has recovered, fetches every page: nothing
is lost. Pauses are seconds here (the settings' small values); the assertions read what testweb
itself saw, and the crawl.log."""

from __future__ import annotations

from conftest import read_crawl_log

REFUSER = "site-0.test"
HEALTHY = ["site-1.test", "site-2.test", "site-3.test"]
PAUSE_S = 2.0
PROFILE = {
    "site-*.test": {"latency_ms": 50},
    # More than 4 requests in a second: challenged for the next 3 s, then back to normal.
    # 250 ms a page: at a limit of 1 the node stays under the rate; at 2 it goes over it.
    REFUSER: {"latency_ms": 250, "jitter_ms": 0, "challenge_rps": 4, "refusal_for_s": 3},
}
NODE_ARGS = ["--host-limit-start", "3", "--refusal-pause-initial-s", str(PAUSE_S), "--refusal-url-budget", "20",
             "--refusal-forgive-s", "1"]


def _page_requests(history: list[list]) -> list[tuple[float, int]]:
    return [(started, status) for started, status, path in history if path != "/robots.txt"]


def test_a_challenging_site_is_paused_alone_and_every_page_is_fetched(start_testweb, start_node):
    web = start_testweb(hosts=4, pages=40, seed=5, profile=PROFILE, extra_args=["--history", "2000"])
    expected = set(web.expected())
    node = start_node("n1", proxy=web.url, seeds=[f"http://site-{i}.test/" for i in range(4)],
                      extra_args=NODE_ARGS)
    status = node.wait_idle(timeout_s=90)
    stats = web.stats(history=True)
    lines = read_crawl_log(node.data_dir)

    # testweb challenged the refusing host, and only it
    refused = stats["hosts"][REFUSER].get("refused", {})
    assert refused.get("challenge", 0) > 0, stats["hosts"][REFUSER]
    assert all("refused" not in stats["hosts"][host] for host in HEALTHY)

    # the node saw the challenges as such, with their evidence
    blocked = [line for line in lines if line["outcome"] == "blocked_challenge"]
    assert len(blocked) == refused["challenge"]
    assert all(line["host"] == REFUSER and "cf-mitigated" in (line.get("refusal") or "") for line in blocked)

    # paused within 3 requests of the first challenge, and nothing asked during the pause
    requests = _page_requests(stats["hosts"][REFUSER]["history"])
    first = next(index for index, (_, code) in enumerate(requests) if code == 403)
    after = requests[first:]
    gaps = [(after[k + 1][0] - after[k][0], k) for k in range(len(after) - 1)]
    pause_gap = next(((gap, k) for gap, k in gaps if gap >= 0.9 * PAUSE_S), None)
    assert pause_gap is not None and pause_gap[1] <= 3, after[:8]

    # the other hosts never slowed down for it
    hosts = {host["host"]: host for host in status["hosts"]}
    for name in HEALTHY:
        assert hosts.get(name, {"limit_decreases": 0})["limit_decreases"] == 0

    # coverage is complete: every page of every host, the refusing one included
    fetched = {line["url"] for line in lines if line["status"] == 200 and line["outcome"] == "ok"}
    assert fetched == expected
    assert not [line for line in lines if line["outcome"].startswith("blocked_") and line["url"] not in fetched]
