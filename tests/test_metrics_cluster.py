"""/metrics of a real 3-node cluster crawling testweb, and the deploy/ artifacts built on it.

Every scrape, during the crawl and after, passes `promtool check metrics`. The cluster series
agree with each other and with what testweb served: the fetch histograms and the answers by
status class count every page request testweb saw, the bytes received are the bytes it sent,
the URLs the members forwarded are the URLs they received, and a SIGKILLed member turns to
down in the others' `crawler_member_up`. The alert rules pass `promtool check rules` and their
own unit tests (deploy/prometheus/alerts_test.yml), and every series the Grafana board and the
rules query is one a live node has. promtool is Debian's `prometheus` package: without it
those checks are skipped, unless CRAWLER_REQUIRE_PROMTOOL is set (as CI does).
"""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
import time
from pathlib import Path

import pytest
import yaml  # PyYAML, from the test extra
from cluster_helpers import FAST_CLUSTER, SECURED, peers_of, plan, wait_until
from conftest import read_crawl_log, roots
from pressure_helpers import get_text, post
from prometheus_client.parser import text_string_to_metric_families

from crawler_node.api.metrics import PinnedHosts
from crawler_node.core.histogram import CountingHistogram, quantile_bound
from crawler_node.tools.report import format_status

ROOT = Path(__file__).resolve().parents[1]
ALERTS = ROOT / "deploy" / "prometheus" / "alerts.yml"
ALERTS_TEST = ROOT / "deploy" / "prometheus" / "alerts_test.yml"
BOARD = ROOT / "deploy" / "grafana" / "crawler-node.json"
HOSTS, PAGES = 12, 30
LATENCY_MS = 60  # testweb's least delay before each answer: above the first bucket (50 ms)
IDS = ["a", "b", "c"]

Samples = dict[tuple[str, frozenset], float]


def promtool() -> str:
    path = shutil.which("promtool")
    if path is None:
        # CI installs it and sets CRAWLER_REQUIRE_PROMTOOL, so there a missing promtool fails.
        assert not os.environ.get("CRAWLER_REQUIRE_PROMTOOL"), "promtool is required here but not installed"
        pytest.skip("promtool not installed (apt-get install -y prometheus)")
    return path


def parse(text: str) -> Samples:
    """{(sample name, its labels): value} of one scrape."""
    return {(sample.name, frozenset(sample.labels.items())): sample.value
            for family in text_string_to_metric_families(text) for sample in family.samples}


def value(samples: Samples, name: str, **labels: str) -> float:
    return samples[(name, frozenset(labels.items()))]


def total(samples: Samples, name: str) -> float:
    """The sum of a series over all its label sets."""
    return sum(v for (sample, _), v in samples.items() if sample == name)


def labelled(samples: Samples, name: str, label: str) -> dict[str, float]:
    return {dict(labels)[label]: v for (sample, labels), v in samples.items() if sample == name}


def check_metrics(text: str) -> None:
    result = subprocess.run([promtool(), "check", "metrics"], input=text, capture_output=True, text=True,
                            timeout=30)
    assert result.returncode == 0 and not result.stdout.strip(), result.stdout + result.stderr


def scrape(node) -> str:
    return get_text(f"{node.url}/metrics")


@pytest.fixture(scope="module")
def cluster(tmp_path_factory):
    """A 3-node cluster crawls testweb to the end; every member is scraped all along."""
    from crawler_node.testweb.process import TestwebProcess
    from crawler_node.tools.node_process import NodeProcess

    tmp = tmp_path_factory.mktemp("metrics-cluster")
    addresses = plan(IDS)
    peers = peers_of(addresses)
    with TestwebProcess(hosts=HOSTS, pages=PAGES, seed=31, profile={"site-*.test": {"latency_ms": LATENCY_MS}},
                        tmp_dir=tmp) as web:
        nodes = [NodeProcess(node_id=node_id, data_dir=tmp / node_id, host=addresses[node_id][0],
                             port=addresses[node_id][1], proxy=web.url, peers=peers,
                             seeds=roots(HOSTS) if node_id == "a" else (), extra_args=[*FAST_CLUSTER, *SECURED])
                 for node_id in IDS]
        try:
            for node in nodes:
                node.start(wait=False)
            for node in nodes:
                node.wait_healthy(30)
            scrapes: list[str] = []
            started = time.monotonic()

            def settled() -> bool:
                """Scraped once more; true once every member is idle, nothing is owed to a peer,
                and every forwarded batch has been acknowledged (forwarded == received)."""
                texts = [scrape(node) for node in nodes]
                scrapes.extend(texts)
                samples = [parse(text) for text in texts]
                return (all(node.status()["idle"] is True for node in nodes)
                        and all(total(s, "crawler_outbox_urls") == 0 for s in samples)
                        and sum(total(s, "crawler_forwarded_urls_total") for s in samples)
                        == sum(total(s, "crawler_received_urls_total") for s in samples))

            wait_until(settled, 120, "the cluster idle with every forward acknowledged", interval=0.3)
            crawl_s = time.monotonic() - started
            final = {node.node_id: parse(scrape(node)) for node in nodes}
            yield {"web": web, "nodes": nodes, "scrapes": scrapes, "final": final, "crawl_s": crawl_s,
                   "texts": {node.node_id: scrape(node) for node in nodes}}
        finally:
            for node in nodes:
                node.stop(timeout_s=15)


# --- the live cluster --------------------------------------------------------------------------


@pytest.mark.tools
def test_every_scrape_passes_promtool(cluster):
    busy = [text for text in cluster["scrapes"] if value(parse(text), "crawler_in_flight") > 0]
    assert len(busy) >= 3, "scraped several times while crawling"
    for text in cluster["scrapes"]:
        check_metrics(text)


def test_every_member_is_up_in_every_view(cluster):
    for node_id, samples in cluster["final"].items():
        assert labelled(samples, "crawler_member_up", "member") == {"a": 1, "b": 1, "c": 1}, node_id
        assert set(labelled(samples, "crawler_outbox_urls", "peer")) == set(IDS) - {node_id}
        assert set(labelled(samples, "crawler_heartbeat_failures_total", "peer")) == set(IDS) - {node_id}
        assert value(samples, "crawler_build_info", version=_version()) == 1


def test_forwarded_urls_are_the_urls_received(cluster):
    # By design: a member counts a batch forwarded when its peer answers 202, the peer counts it
    # received when it answers so; once no batch is in the air the two sums meet (the fixture
    # waited for that, boundedly). Seeds all went to a, so the others' came through forwards.
    finals = cluster["final"].values()
    forwarded = sum(value(s, "crawler_forwarded_urls_total") for s in finals)
    received = sum(value(s, "crawler_received_urls_total") for s in finals)
    assert forwarded == received > 0
    assert value(cluster["final"]["a"], "crawler_forwarded_urls_total") > 0
    assert all(value(cluster["final"][n], "crawler_received_urls_total") > 0 for n in ("b", "c"))


def test_fetch_series_count_every_page_request_testweb_saw(cluster):
    stats = cluster["web"].stats()
    page_requests = sum(count for url, count in stats["urls"].items() if not url.endswith("/robots.txt"))
    counted = 0
    for node in cluster["nodes"]:
        samples = cluster["final"][node.node_id]
        fetches = len(read_crawl_log(node.data_dir))  # one line per page fetch attempt
        assert fetches > 0, f"{node.node_id} crawled its share"
        responses = labelled(samples, "crawler_responses_total", "code_class")
        assert {"2xx", "3xx", "4xx", "5xx", "none"} <= responses.keys()
        assert sum(responses.values()) == fetches, node.node_id
        assert value(samples, "crawler_fetch_duration_seconds_count") == fetches, node.node_id
        assert value(samples, "crawler_fetch_duration_seconds_bucket", le="+Inf") == fetches
        assert value(samples, "crawler_response_body_bytes_count") == fetches - responses["none"]
        assert total(samples, "crawler_fetch_outcomes_total") == fetches
        # testweb answers no sooner than LATENCY_MS: no fetch is in the first bucket
        assert value(samples, "crawler_fetch_duration_seconds_bucket", le="0.05") == 0
        assert value(samples, "crawler_fetch_duration_seconds_sum") >= LATENCY_MS / 1000 * fetches
        # pages were leased and their outcomes stored through timed frontier calls
        for call in ("lease_many", "apply"):
            calls = value(samples, "crawler_frontier_call_duration_seconds_count", call=call)
            assert calls > 0, (node.node_id, call)
            assert value(samples, "crawler_frontier_call_duration_seconds_bucket", call=call, le="+Inf") == calls
        counted += fetches
    assert counted == page_requests
    # Bodies as received, robots.txt included, are the body bytes testweb wrote.
    served = sum(host["body_bytes"] for host in stats["hosts"].values())
    assert sum(value(s, "crawler_fetched_bytes_total") for s in cluster["final"].values()) == served


def test_per_host_series_cover_a_stable_set(cluster):
    # Every host fits in the pinned set here: each node has series for the hosts it crawled,
    # and a host once in a node's series stays in every later scrape of that node.
    by_node: dict[str, list[set[str]]] = {node_id: [] for node_id in IDS}
    for text in cluster["scrapes"]:
        samples = parse(text)
        hosts = set(labelled(samples, "crawler_host_limit", "host"))
        members = labelled(samples, "crawler_outbox_urls", "peer")
        (node_id,) = set(IDS) - set(members)
        by_node[node_id].append(hosts)
    for node_id, history in by_node.items():
        for earlier, later in zip(history, history[1:]):
            assert earlier <= later, f"{node_id}: {sorted(earlier - later)} dropped from the per-host series"


def test_grafana_board_queries_series_a_node_has(cluster):
    board = json.loads(BOARD.read_text())
    live = {name for samples in cluster["final"].values() for name, _ in samples}
    exprs = [target["expr"] for panel in board["panels"] for target in panel.get("targets", [])]
    exprs += [variable["definition"] for variable in board["templating"]["list"] if variable["type"] == "query"]
    assert len(exprs) >= 20
    for expr in exprs:
        names = set(re.findall(r"\bcrawler_[a-z0-9_]+", expr))
        assert names, expr
        assert names <= live, f"{sorted(names - live)} in {expr!r} is not a series of /metrics"
    assert {"crawler_member_up", "crawler_outbox_urls", "crawler_fetch_duration_seconds_bucket",
            "crawler_responses_total", "crawler_queue_depth"} <= {n for e in exprs for n in re.findall(
                r"\bcrawler_[a-z0-9_]+", e)}
    # The alert rules too.
    rules = [rule for group in yaml.safe_load(ALERTS.read_text())["groups"] for rule in group["rules"]]
    for rule in rules:
        names = set(re.findall(r"\bcrawler_[a-z0-9_]+", rule["expr"]))
        assert names <= live, f"{rule['alert']}: {sorted(names - live)}"
        # A rule on no series of the node watches the scrape itself: Prometheus's own `up`
        # of the crawler job (a member that cannot be scraped has no series to alert on).
        assert names or re.search(r'\bup\{job=~?"crawler', rule["expr"]), rule["alert"]


@pytest.mark.tools
def test_a_pause_shows_on_every_member(cluster):
    # The alert rules tell an operator's pause from a stall and from admission held by pressure.
    nodes = cluster["nodes"]
    token = {"Authorization": f"Bearer {SECURED[1]}"}
    code, answer = post(f"{nodes[0].url}/v1/control/pause", {"reason": "metrics test"}, headers=token)
    assert code == 200 and answer["complete"], answer
    try:
        for node in nodes:
            text = scrape(node)
            check_metrics(text)
            samples = parse(text)
            assert value(samples, "crawler_paused") == 1 and value(samples, "crawler_admission_open") == 0
    finally:
        code, answer = post(f"{nodes[0].url}/v1/control/resume", {}, headers=token)
    assert code == 200 and answer["complete"], answer
    for node in nodes:
        samples = parse(scrape(node))
        assert value(samples, "crawler_paused") == 0 and value(samples, "crawler_admission_open") == 1


@pytest.mark.tools
def test_a_killed_member_is_down_in_the_others_views(cluster):
    nodes = {node.node_id: node for node in cluster["nodes"]}
    victim = nodes["c"]
    victim.kill()
    killed_at = time.monotonic()

    def down_everywhere() -> dict[str, str] | None:
        texts = {node_id: scrape(nodes[node_id]) for node_id in ("a", "b")}
        views = {node_id: parse(text) for node_id, text in texts.items()}
        if all(value(s, "crawler_member_up", member="c") == 0 for s in views.values()):
            return texts
        return None

    texts = wait_until(down_everywhere, 10, "c down in a's and b's crawler_member_up", interval=0.2)
    assert time.monotonic() - killed_at < 10
    for node_id, text in texts.items():
        check_metrics(text)
        samples = parse(text)
        assert value(samples, "crawler_member_up", member="a") == 1
        assert value(samples, "crawler_member_up", member="b") == 1
        assert value(samples, "crawler_heartbeat_failures_total", peer="c") > 0, node_id


# --- deploy/prometheus -------------------------------------------------------------------------


@pytest.mark.tools
def test_alert_rules_pass_promtool_check_rules():
    result = subprocess.run([promtool(), "check", "rules", str(ALERTS)], capture_output=True, text=True,
                            timeout=30)
    assert result.returncode == 0, result.stdout + result.stderr
    assert "SUCCESS: 7 rules found" in result.stdout


@pytest.mark.tools
def test_alert_rules_pass_their_unit_tests():
    result = subprocess.run([promtool(), "test", "rules", str(ALERTS_TEST)], capture_output=True, text=True,
                            timeout=60)
    assert result.returncode == 0, result.stdout + result.stderr
    # Each rule is tested, both firing and quiet (an empty exp_alerts).
    rules = {rule["alert"] for group in yaml.safe_load(ALERTS.read_text())["groups"] for rule in group["rules"]}
    cases = [case for test in yaml.safe_load(ALERTS_TEST.read_text())["tests"] for case in test["alert_rule_test"]]
    assert rules == {"CrawlerNodeStalled", "CrawlerNodeUnreachable", "CrawlerMemberDown", "CrawlerHighRetryRatio",
                     "CrawlerAdmissionHeld", "CrawlerFrontierSlow", "CrawlerHostsRefusing"}
    for rule in rules:
        assert any(c["alertname"] == rule and c["exp_alerts"] for c in cases), f"{rule} never fires in a test"
        assert any(c["alertname"] == rule and not c["exp_alerts"] for c in cases), f"{rule} never stays quiet"
    for group in yaml.safe_load(ALERTS.read_text())["groups"]:
        for rule in group["rules"]:
            assert rule.get("for") and rule["labels"].get("severity") and rule["annotations"].get("summary")


# --- the pure parts ----------------------------------------------------------------------------


def test_histogram_buckets_are_prometheus_le_buckets():
    histogram = CountingHistogram([0.1, 1.0, 10.0])
    for observed in (0.05, 0.1, 0.5, 1.0, 3.0, 10.0, 11.0, 100.0):
        histogram.observe(observed)
    snapshot = histogram.snapshot()
    # a value equal to a bound is in that bound's bucket (le is "less than or equal")
    assert snapshot["buckets"] == [[0.1, 2], [1.0, 4], [10.0, 6], [None, 8]]
    assert snapshot["count"] == 8 == sum(histogram.counts)
    assert snapshot["sum"] == pytest.approx(125.65)
    with pytest.raises(ValueError):
        CountingHistogram([1.0, 1.0])
    with pytest.raises(ValueError):
        CountingHistogram([])


def test_a_quantile_is_read_as_the_bound_of_its_bucket_and_status_shows_the_frontiers():
    histogram = CountingHistogram([0.001, 0.01, 0.1])
    for observed in [0.0005] * 97 + [0.05, 0.05, 3.0]:
        histogram.observe(observed)
    snapshot = histogram.snapshot()
    assert quantile_bound(snapshot, 0.5) == 0.001
    assert quantile_bound(snapshot, 0.99) == 0.1  # the 99th of 100 is a 0.05: within 0.1
    assert quantile_bound(snapshot, 1.0) is None  # the slowest is past the last bound
    assert quantile_bound(CountingHistogram([1.0]).snapshot(), 0.99) is None  # nothing observed
    status = {"node_id": "a", "idle": True, "counters": {
        "fetched": 0, "pages_done": 0, "failed": 0, "retries": 0, "retry_ratio": 0.0},
        "rates": {"fetched_per_s": 0.0}, "queues": {}}
    shown = format_status({**status, "frontier_calls": {
        "lease_many": snapshot, "take_in": CountingHistogram([1.0]).snapshot()}})
    assert "frontier calls since start (count, 99% within): lease_many 100 100 ms, take_in 0 -" in shown, shown
    slow = CountingHistogram([0.001, 0.01, 0.1])
    slow.observe(3.0)
    assert "apply 1 over 100 ms" in format_status({**status, "frontier_calls": {"apply": slow.snapshot()}})


def test_pinned_hosts_stay_until_they_leave_memory():
    in_memory = {f"h{i}": {"host": f"h{i}", "limit": i} for i in range(6)}
    pinned = PinnedHosts(3)

    def refresh(busiest: list[str]) -> list[str]:
        return [s["host"] for s in pinned.refresh([in_memory[h] for h in busiest], in_memory.get)]

    assert refresh(["h4", "h1", "h0", "h5"]) == ["h0", "h1", "h4"]  # the first three seen busy
    assert refresh(["h5", "h3", "h2"]) == ["h0", "h1", "h4"]  # others busier now: no churn
    del in_memory["h1"]  # collected: its place is free
    assert refresh(["h5", "h3"]) == ["h0", "h4", "h5"]
    assert refresh([]) == ["h0", "h4", "h5"]  # idle but still in memory: still pinned
    with pytest.raises(ValueError):
        PinnedHosts(-1)


def _version() -> str:
    from crawler_node import __version__

    return __version__
