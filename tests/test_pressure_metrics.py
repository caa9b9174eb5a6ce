"""/metrics of a live node under pressure passes `promtool check metrics` and carries the
pressure series of rule 8. promtool is Debian's `prometheus` package; without it the lint
part is skipped (CI installs it: apt-get install -y prometheus)."""

from __future__ import annotations

import os
import shutil
import subprocess

import pytest
from conftest import roots
from pressure_helpers import get_text

PROFILE = {"site-*.test": {"latency_ms": 20}, "site-0.test": {"max_concurrency": 1, "latency_ms": 50}}


@pytest.fixture(scope="module")
def pressured_metrics(tmp_path_factory):
    """One crawl through an API with a concurrency limit, a throttling host and a tiny
    high-water mark, so the admission, API, shedding and retry series all have values."""
    from crawler_node.testweb.process import TestwebProcess
    from crawler_node.tools.node_process import NodeProcess

    tmp = tmp_path_factory.mktemp("metrics")
    with TestwebProcess(hosts=5, pages=60, seed=4, profile=PROFILE, tmp_dir=tmp,
                        extra_args=["--api-concurrency", "4"]) as web:
        node = NodeProcess(node_id="metrics", data_dir=tmp / "metrics", proxy=web.url, seeds=roots(5),
                           extra_args=["--retry-base-s", "0.05", "--shed-high-water", "40", "--shed-low-water",
                                       "10", "--shed-after-s", "0.1"])
        with node:
            status = node.wait_idle(timeout_s=60)
            yield status, get_text(f"{node.url}/metrics")


def test_metrics_carry_the_pressure_series(pressured_metrics):
    status, metrics = pressured_metrics
    for series in (
        'crawler_queue_depth{stage="parse"}', 'crawler_queue_oldest_age_seconds{stage="frontier"}',
        'crawler_blocked_enqueues_total{stage="parse"}', 'crawler_admission_rejections_total{reason="api_limit"}',
        'crawler_host_in_flight{host="site-0.test"}', 'crawler_host_limit{host="site-0.test"}',
        'crawler_host_retry_ratio{host="site-0.test"}', "crawler_retry_ratio ", "crawler_retries_total ",
        "crawler_api_limit ", "crawler_api_throttled_total ", "crawler_api_paused 0.0",
        'crawler_shed_deferred_total{reason="queue_over_high_water"}', "crawler_shed_restored_total ",
        'crawler_frontier_urls{state="deferred"} 0.0',
    ):
        assert series in metrics, series
    assert status["api"]["throttled"] > 0 and status["shedding"]["deferred_total"] > 0


@pytest.mark.tools
def test_promtool_check_metrics_passes(pressured_metrics):
    if shutil.which("promtool") is None:
        # CI installs it and sets CRAWLER_REQUIRE_PROMTOOL, so there a missing promtool fails.
        assert not os.environ.get("CRAWLER_REQUIRE_PROMTOOL"), "promtool is required here but not installed"
        pytest.skip("promtool not installed (apt-get install -y prometheus)")
    _, metrics = pressured_metrics
    result = subprocess.run(["promtool", "check", "metrics"], input=metrics, capture_output=True, text=True,
                            timeout=30)
    assert result.returncode == 0 and not result.stdout.strip(), result.stdout + result.stderr
