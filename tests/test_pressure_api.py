"""The bad afternoon, part 4: fetching through a paid scraping API (testweb in api_limit mode).

The API's concurrency limit is below the node's global in-flight limit: its 429s (with
``X-Api-Limit: concurrency``) cut the node's API limiter, which settles under the limit, and
never a host's limiter. When the quota runs out (509) fetching stops, status and log say why,
nothing queued is lost, and ``POST /v1/resume`` continues the crawl to the end."""

from __future__ import annotations

import time

from conftest import read_crawl_log, roots, wait_until
from pressure_helpers import post

HOSTS, PAGES = 8, 50
API_CONCURRENCY = 6
QUOTA = 200


def test_api_limits_are_learned_globally_and_a_spent_quota_pauses_until_resume(start_testweb, start_node):
    web = start_testweb(hosts=HOSTS, pages=PAGES, seed=5, profile={"site-*.test": {"latency_ms": 40}},
                        extra_args=["--api-concurrency", str(API_CONCURRENCY), "--api-quota", str(QUOTA)])
    expected = set(web.expected())
    assert len(expected) > QUOTA
    node = start_node(proxy=web.url, seeds=roots(HOSTS), extra_args=["--secret", "s3cret"])

    # Phase 1: crawl until the quota runs out. Sample the API limiter on the way.
    limits: list[int] = []

    def paused():
        status = node.status()
        limits.append(status["api"]["limit"])
        return status if status["api"]["paused"] else None

    status = wait_until(paused, 60, "the API pause")
    assert status["api"]["reason"] == "quota"
    assert status["api"]["resume_at"] > time.time() + 60  # the configured reset, not at once
    assert status["admission"]["blocked_by"] == "api_quota"

    stats = web.stats()["api"]
    assert stats["requests"] == QUOTA
    # the API limiter learned the API's limit: it settles at or under it after the first cuts
    assert status["api"]["throttled"] > 0 and status["api"]["decreases"] >= 1
    settled = limits[len(limits) // 2:]
    assert sum(limit <= API_CONCURRENCY for limit in settled) / len(settled) >= 0.8, limits
    assert max(settled) <= API_CONCURRENCY + 1  # at most a probe above it
    # ... and the API's 429s never cut a host's limit (no site throttled anything)
    assert all(host["limit_decreases"] == 0 for host in status["hosts"]), status["hosts"]
    assert sum(h["throttled"] for h in web.stats()["hosts"].values()) == 0

    # fetching has stopped: the API sees no new requests while paused
    refused_then = web.stats()["api"]["quota_rejected"]
    time.sleep(1.5)
    assert web.stats()["api"]["quota_rejected"] == refused_then
    assert web.stats()["api"]["requests"] == QUOTA
    assert "quota exhausted" in node.log_tail(200)
    # nothing queued is lost: what is not done yet is still in the frontier
    frontier = node.status()["frontier"]
    assert frontier["queued"] > 0 and frontier["leased"] == 0 and frontier["failed"] == 0

    # Phase 2: the plan is topped up; POST /v1/resume (it needs the cluster token) continues.
    web.set_quota(None)
    code, _ = post(f"{node.url}/v1/resume")
    assert code == 401
    code, body = post(f"{node.url}/v1/resume", headers={"Authorization": "Bearer s3cret"})
    assert code == 200 and body["resumed"] is True and body["api"]["paused"] is False
    final = node.wait_idle(timeout_s=60)

    lines = read_crawl_log(node.data_dir)
    assert {line["url"] for line in lines if line["status"] == 200} == expected
    assert final["frontier"]["failed"] == 0 and final["retries"]["gave_up"] == {}
    # refused attempts never reached a site and spent no retry budget
    refused = [line for line in lines if line["outcome"] in ("api_throttled", "api_quota")]
    assert refused and final["retries"]["api_postponed"] == len(refused)
    assert final["api"]["resumes"] == 1 and final["api"]["paused"] is False
    # every URL reached its site exactly once
    urls = web.stats()["urls"]
    assert {url: n for url, n in urls.items() if n != 1 and not url.endswith("/robots.txt")} == {}
