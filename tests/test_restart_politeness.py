"""A host's pause survives a crash: a node SIGKILLed and restarted at once on the same data
directory keeps the host's robots.txt Crawl-delay and the Retry-After of its last 429.

testweb's per-host request history (`/_testweb/stats?history=1`: start time, status and path of
each request, on testweb's clock) is the ground truth: the test asserts on when requests reached
the host, over the whole run, the restart included.
"""

from __future__ import annotations

import signal
import time
from collections.abc import Callable
from dataclasses import dataclass

from cluster_helpers import kill_and_reap as reap
from conftest import wait_until

from crawler_node.testweb import TestwebProcess
from crawler_node.tools.node_process import NodeProcess

HOST = "site-0.test"
ROOT = f"http://{HOST}/"
TOLERANCE_S = 0.05  # clock granularity and scheduling, not politeness
HISTORY_ARGS = ["--history", "10000"]  # every request of the run is kept
TRIGGER_POLL_S = 0.01  # how soon after the event the node is killed


@dataclass(frozen=True, slots=True)
class Request:
    started: float  # testweb's monotonic clock
    status: int  # 0: not answered (the client went away first)
    path: str

    def __str__(self) -> str:
        return f"{self.started:.3f} {self.status} {self.path}"


def requests_to_host(web: TestwebProcess) -> list[Request]:
    history = web.stats(hosts=[HOST], history=True)["hosts"][HOST]["history"]
    return [Request(started, status, path) for started, status, path in history]


def clock_of(web: TestwebProcess) -> float:
    return web.stats(summary=True)["clock"]


def kill_and_reap(node: NodeProcess) -> None:
    """SIGKILL, as a crash would (cluster_helpers.kill_and_reap: its workers go too)."""
    reap(node)
    assert node.proc is not None and node.proc.returncode == -signal.SIGKILL


def eventually(predicate: Callable[[], bool], timeout_s: float, interval_s: float = 0.1) -> bool:
    """Poll until `predicate()` holds (True) or `timeout_s` passes (False)."""
    deadline = time.monotonic() + timeout_s
    while not predicate():
        if time.monotonic() >= deadline:
            return False
        time.sleep(interval_s)
    return True


def timeline(requests: list[Request], around: float | None = None) -> str:
    lines = []
    for previous, current in zip([None, *requests], requests, strict=False):
        gap = "" if previous is None else f" (+{current.started - previous.started:.3f} s)"
        mark = "   <- kill/restart" if around is not None and previous is not None and \
            previous.started <= around < current.started else ""
        lines.append(f"  {current}{gap}{mark}")
    return "\n".join(lines)


# --- Crawl-delay -----------------------------------------------------------------------------

CRAWL_DELAY_S = 3.0


def test_crawl_delay_holds_across_sigkill_and_restart(start_testweb, start_node):
    profile = {HOST: {"robots": f"User-agent: *\nCrawl-delay: {CRAWL_DELAY_S:g}\n"}}
    web = start_testweb(hosts=1, pages=30, seed=41, profile=profile, extra_args=HISTORY_ARGS)  # ~90 s of work
    node = start_node("polite", proxy=web.url, seeds=[ROOT])

    # robots.txt first, then a page: kill the moment the page request reaches the host.
    wait_until(lambda: web.stats(hosts=[HOST])["hosts"][HOST]["requests"] >= 2, 30,
               "the first page request after robots.txt", interval=TRIGGER_POLL_S)
    kill_and_reap(node)
    killed_at = clock_of(web)
    start_node("polite", proxy=web.url, data_dir=node.data_dir)  # no seeds: it resumes its frontier

    def page_after_restart() -> bool:
        return any(r.started > killed_at and r.path != "/robots.txt" for r in requests_to_host(web))

    wait_until(page_after_restart, 30, "a page of the host fetched again after the restart")
    requests = requests_to_host(web)
    too_close = [(a, b) for a, b in zip(requests, requests[1:], strict=False)
                 if b.started - a.started < CRAWL_DELAY_S - TOLERANCE_S]
    assert not too_close, (
        f"requests closer than the {CRAWL_DELAY_S:g} s Crawl-delay: "
        + "; ".join(f"{a.path} then {b.path} {b.started - a.started:.3f} s later" for a, b in too_close)
        + f"\nall requests to {HOST} (start, status, path):\n{timeline(requests, killed_at)}"
    )


# --- Retry-After -----------------------------------------------------------------------------

RETRY_AFTER_S = 4.0
THROTTLING_PROFILE = {
    # One request at a time; the node starts at two, so its second concurrent request gets the
    # 429. Each answer takes 300 ms, so the two overlap.
    HOST: {"max_concurrency": 1, "retry_after_s": RETRY_AFTER_S, "latency_ms": 300, "jitter_ms": 0},
}
THROTTLED_NODE_ARGS = ["--host-limit-start", "2"]


def test_retry_after_holds_across_sigkill_and_restart(start_testweb, start_node):
    web = start_testweb(hosts=1, pages=12, seed=42, profile=THROTTLING_PROFILE, extra_args=HISTORY_ARGS)
    expected_paths = {url[len(f"http://{HOST}"):] for url in web.expected()}
    node = start_node("throttled", proxy=web.url, seeds=[ROOT], extra_args=THROTTLED_NODE_ARGS)

    wait_until(lambda: web.stats(hosts=[HOST])["hosts"][HOST]["throttled"] >= 1, 30,
               "the host's first 429", interval=TRIGGER_POLL_S)
    kill_and_reap(node)
    killed_at = clock_of(web)
    start_node("throttled", proxy=web.url, data_dir=node.data_dir, extra_args=THROTTLED_NODE_ARGS)

    def answered_paths() -> set[str]:
        return {r.path for r in requests_to_host(web) if r.status == 200}

    # The crawl's end is awaited first (bounded, not asserted yet) so both checks below are judged.
    eventually(lambda: expected_paths <= answered_paths(), 60)
    requests = requests_to_host(web)
    first_429 = next(r for r in requests if r.status == 429)
    assert first_429.started <= killed_at
    later = [r for r in requests if r.started > first_429.started]
    assert later, f"no request to {HOST} after its 429:\n{timeline(requests, killed_at)}"
    waited = later[0].started - first_429.started
    assert waited >= RETRY_AFTER_S - TOLERANCE_S, (
        f"{later[0].path} reached {HOST} {waited:.3f} s after its 429 with Retry-After: {RETRY_AFTER_S:g}"
        f" (the node was killed {killed_at - first_429.started:.3f} s after the 429 and restarted at once)"
        f"\nall requests to {HOST} (start, status, path):\n{timeline(requests, killed_at)}"
    )
    missing = expected_paths - {r.path for r in requests if r.status == 200}
    assert not missing, f"never answered 200 after the restart: {sorted(missing)}\n{timeline(requests, killed_at)}"
