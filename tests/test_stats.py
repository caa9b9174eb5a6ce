"""Typed snapshots (core.stats): a field's declaration is read by both renderings, the JSON of
/v1/status and the /metrics exposition, so one value shows the same in both."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field

import pytest

from crawler_node.core.histogram import CountingHistogram, HistogramSnapshot
from crawler_node.core.stats import Indexed, Kind, Metric, counter, gauge, metrics_of, stat, to_json

SHARED = Metric("test_urls", "URLs by state", Kind.GAUGE, ("state",))


@dataclass(frozen=True, slots=True)
class Part:
    moved: int = field(metadata=counter("test_moved", "Moved", when="moved"))
    still: int = field(metadata=stat(json=False))


@dataclass(frozen=True, slots=True)
class Gate:
    ip: str = field(metadata=stat(is_label=("ip",)))
    in_flight: int = field(metadata=gauge("test_ip_in_flight", "In flight", labels=("ip",)))


@dataclass(frozen=True, slots=True)
class Sample(Indexed):
    retries: int = field(metadata=counter("test_retries", "Retries"))
    ratio: float = field(metadata=gauge("test_ratio", "Ratio"))
    queued: int = field(metadata=stat(SHARED, at={"state": "queued"}))
    done: int = field(metadata=stat(SHARED, at={"state": "done"}))
    outcomes: Mapping[str, int] = field(metadata=counter("test_outcomes", "By outcome", labels=("outcome",),
                                                         zeros=("ok",)))
    is_self: bool = field(metadata=stat(key="self"))
    part: Part = field(metadata=stat(flat=True))
    gates: tuple[Gate, ...]
    seconds: HistogramSnapshot
    last: float | None = field(metadata=gauge("test_last", "Last"))


def sample(**changes: object) -> Sample:
    histogram = CountingHistogram([1.0])
    histogram.observe(0.5)
    values: dict[str, object] = {
        "retries": 3, "ratio": 0.25, "queued": 7, "done": 2, "outcomes": {"timeout": 1}, "is_self": True,
        "part": Part(moved=0, still=4), "gates": (Gate("10.0.0.1", 2),), "seconds": histogram.snapshot(),
        "last": None}
    values.update(changes)
    return Sample(**values)  # type: ignore[arg-type]


def test_the_json_is_each_shown_field_under_its_name() -> None:
    assert to_json(sample()) == {
        "retries": 3, "ratio": 0.25, "queued": 7, "done": 2, "outcomes": {"timeout": 1}, "self": True,
        "gates": [{"ip": "10.0.0.1", "in_flight": 2}],
        "seconds": {"buckets": [[1.0, 1], [None, 1]], "sum": 0.5, "count": 1}, "last": None}
    # a flattened part's fields are the owner's; one shown "when" it has moved appears then
    assert to_json(sample(part=Part(moved=5, still=4)))["moved"] == 5


def test_a_snapshot_indexed_like_the_dict_it_replaced_reads_the_fields_json() -> None:
    snapshot = sample(part=Part(moved=1, still=4))
    assert snapshot["retries"] == 3 and snapshot["self"] is True
    assert snapshot["still"] == 4  # found below, in the flattened part
    assert snapshot["gates"] == [{"ip": "10.0.0.1", "in_flight": 2}]
    with pytest.raises(KeyError):
        snapshot["nothing"]


def test_every_declared_metric_is_found_below_a_snapshot_class() -> None:
    names = [metric.name for metric in metrics_of(Sample)]
    assert names == ["test_retries", "test_ratio", "test_urls", "test_urls", "test_outcomes", "test_moved",
                     "test_ip_in_flight", "test_last"]


def exposition(*snapshots: object) -> dict[str, list[tuple[str, dict[str, str], float]]]:
    """What /metrics shows of ``snapshots`` (api.metrics walks them): family -> samples."""
    from crawler_node.api.metrics import Exposition

    shown = Exposition()
    for snapshot in snapshots:
        shown.walk(snapshot)
    return {family.name: [(s.name, s.labels, s.value) for s in family.samples] for family in shown.families()}


def test_one_declaration_renders_one_value_in_the_json_and_in_the_metrics() -> None:
    snapshot = sample(last=12.5)
    json, metrics = to_json(snapshot), exposition(snapshot)
    assert metrics["test_retries"] == [("test_retries_total", {}, json["retries"])]
    assert metrics["test_ratio"] == [("test_ratio", {}, json["ratio"])]
    assert metrics["test_last"] == [("test_last", {}, json["last"])]
    # a family two fields make, one label value each
    assert metrics["test_urls"] == [("test_urls", {"state": "queued"}, 7), ("test_urls", {"state": "done"}, 2)]
    # a mapping's keys are a label's values, with the declared ones from the start
    assert metrics["test_outcomes"] == [("test_outcomes_total", {"outcome": "ok"}, 0),
                                        ("test_outcomes_total", {"outcome": "timeout"}, 1)]
    # a label taken from a field of each item
    assert metrics["test_ip_in_flight"] == [("test_ip_in_flight", {"ip": "10.0.0.1"}, 2)]
    # not shown (when=) and None: no family at all
    assert "test_moved" not in metrics and "test_last" not in exposition(sample())


def test_the_node_snapshot_declares_each_metric_once() -> None:
    from crawler_node.node.host_snapshot import HostSnapshot
    from crawler_node.node.node_snapshot import NodeSnapshot

    declared: dict[str, Metric] = {}
    for metric in [*metrics_of(NodeSnapshot), *metrics_of(HostSnapshot)]:
        assert declared.setdefault(metric.name, metric) == metric, metric.name
    # every family /metrics had before the snapshots were typed (78), crawler_crawl_log_lines
    # (issue 51), crawler_store_restarts (issue 52), issue 47's three and issue 50's two
    assert len(declared) == 85
