"""Prometheus exposition of the node's pressure (rule 8), rendered at scrape time from the node's
snapshot (node.snapshot), the same object ``GET /v1/status`` shows as JSON (api.status).

A custom collector that walks the snapshot: each field's metric is declared beside the field,
in the component that owns it (core.stats), and nothing here names a counter. Rather than
metric objects updated on every event: the hot path only bumps plain counters (and plain
counting histograms, core.histogram), and the registry is per node (no global default
registry), so tests can run several nodes in one process.

Per-host series are for a stable set of hosts (PinnedHosts), not for whichever are busiest at
the scrape: a series that comes and goes every few seconds makes ``rate()`` over its counter
meaningless. What holds for every host is in the aggregates (``crawler_hosts{place}``, the
overall retry ratio and attempts); one host's detail is ``crawler-node hosts`` / ``/v1/status``.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Awaitable, Callable, Iterable, Iterator, Mapping
from typing import TYPE_CHECKING, Any, Protocol, TypeVar

from prometheus_client import CollectorRegistry, generate_latest
from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily, HistogramMetricFamily, InfoMetricFamily
from prometheus_client.utils import floatToGoString

from crawler_node.core.histogram import HistogramSnapshot
from crawler_node.core.stats import Kind, Metric, Stat, fields_of, item_class, metrics_of, shown
from crawler_node.node.host_snapshot import HostSnapshot
from crawler_node.node.node_snapshot import NodeSnapshot

if TYPE_CHECKING:
    from crawler_node.node.node import Node

Family = CounterMetricFamily | GaugeMetricFamily | HistogramMetricFamily | InfoMetricFamily
_FAMILIES: dict[Kind, type[CounterMetricFamily | GaugeMetricFamily | HistogramMetricFamily]] = {
    Kind.COUNTER: CounterMetricFamily, Kind.GAUGE: GaugeMetricFamily, Kind.HISTOGRAM: HistogramMetricFamily,
}


class Exposition:
    """The metric families of one scrape, filled by walking snapshots. A family is shown when a
    field that declares it was met with a value (an empty mapping or list of snapshots too); a
    field not shown (``when``) or None gives none, as an API the node does not use."""

    def __init__(self) -> None:
        self._families: dict[str, tuple[Metric, Family]] = {}

    def walk(self, snapshot: object, labels: Mapping[str, str] | None = None) -> None:
        """Every metric declared below ``snapshot``, with ``labels`` fixed from above."""
        fields = fields_of(type(snapshot))
        here = dict(labels or {})
        for name, how in fields:
            for label in how.is_label:
                here[label] = str(getattr(snapshot, name))
        for name, how in fields:
            if not how.scrape or not shown(snapshot, how):
                continue
            value = getattr(snapshot, name)
            below = {**here, **dict(how.at)} if how.at else here
            for metric in how.metrics:
                self._sample(metric, value, below, snapshot, how)
            if isinstance(value, list | tuple):
                items = item_class(type(snapshot), name)
                if items is not None:
                    self.declare(items)  # an empty list's series still have their family
                    for item in value:
                        self.walk(item, below)
            elif dataclasses.is_dataclass(value) and not isinstance(value, HistogramSnapshot):
                self.walk(value, below)

    def declare(self, cls: type) -> None:
        """The families a snapshot class declares, with or without samples."""
        for metric in metrics_of(cls):
            self._family(metric)

    def families(self) -> Iterator[Family]:
        for _, family in self._families.values():
            yield family

    def _family(self, metric: Metric) -> Family:
        known = self._families.get(metric.name)
        if known is not None:
            if known[0] != metric:
                raise ValueError(f"{metric.name} is declared twice, differently: {known[0]} and {metric}")
            return known[1]
        family: Family
        if metric.kind is Kind.INFO:  # its last label is the value's
            family = InfoMetricFamily(metric.name, metric.help, labels=list(metric.labels[:-1]))
        else:
            family = _FAMILIES[metric.kind](metric.name, metric.help, labels=list(metric.labels))
        self._families[metric.name] = (metric, family)
        return family

    def _sample(self, metric: Metric, value: Any, labels: Mapping[str, str], owner: object, how: Stat) -> None:
        if value is None:
            if how.none is None:
                return
            value = how.none
        family = self._family(metric)
        free = [label for label in metric.labels if label not in labels]
        if isinstance(value, Mapping):
            if len(free) != 1:
                raise ValueError(f"{metric.name}: a mapping needs one label left for its keys, not {free}")
            keys = set(value) | set(how.zeros)
            if how.zeros_from is not None:
                keys |= set(getattr(owner, how.zeros_from))
            for key in sorted(keys):
                self._add(family, metric, {**labels, free[0]: str(key)}, value.get(key, 0))
        elif isinstance(family, InfoMetricFamily):
            family.add_metric([labels[label] for label in metric.labels[:-1]], {metric.labels[-1]: str(value)})
        else:
            if free:
                raise ValueError(f"{metric.name}: labels {free} have no value here")
            self._add(family, metric, labels, value)

    @staticmethod
    def _add(family: Family, metric: Metric, labels: Mapping[str, str], value: Any) -> None:
        values = [labels[label] for label in metric.labels]
        if isinstance(family, HistogramMetricFamily):
            family.add_metric(values, _buckets(value), sum_value=value.sum)
        elif isinstance(family, CounterMetricFamily | GaugeMetricFamily):
            family.add_metric(values, int(value) if isinstance(value, bool) else value)
        else:
            raise TypeError(f"{metric.name}: an info metric's value is a label")


def _buckets(snapshot: HistogramSnapshot) -> list[tuple[str, int]]:
    return [("+Inf" if bound is None else floatToGoString(bound), count) for bound, count in snapshot.buckets]


class NodeCollector:
    """Renders the node's snapshot of one scrape, and the pinned hosts'."""

    def __init__(self) -> None:
        self.snapshot: NodeSnapshot | None = None
        self.hosts: list[HostSnapshot] = []  # the pinned hosts' snapshots (PinnedHosts.refresh)

    def collect(self) -> Iterator[Family]:
        if self.snapshot is None:
            return
        exposition = Exposition()
        exposition.walk(self.snapshot)
        exposition.declare(HostSnapshot)  # the pinned hosts' families, with none pinned yet too
        for host in self.hosts:
            exposition.walk(host)
        yield from exposition.families()


PINNED_HOSTS = 50


class HostLike(Protocol):
    """A host's snapshot, as PinnedHosts reads it (its name: ``snapshot["host"]``)."""

    def __getitem__(self, key: str, /) -> Any: ...


H = TypeVar("H", bound=HostLike)


class PinnedHosts:
    """The hosts that have per-host series. A host is pinned the first time a scrape finds it
    among the busiest while fewer than ``capacity`` are pinned. It stays pinned until it leaves
    the host table's memory (idle and collected, or its arc moved to another member). Then its
    place goes to a host that is busy at a later scrape.

    Why not the busiest N at each scrape: the busiest change every few seconds (15 of 20 were
    new within 6 s). Each pinned host's series run unbroken for as long as the node holds the
    host, and ``rate()`` over them means what it says. The set is bounded, so the series count
    is too. A host that leaves memory and comes back starts its counters again from 0, and
    Prometheus reads that as a counter reset.
    """

    def __init__(self, capacity: int = PINNED_HOSTS) -> None:
        if capacity < 0:
            raise ValueError(f"capacity must be >= 0, got {capacity}")
        self._capacity = capacity
        self._pinned: set[str] = set()

    def refresh(self, busiest: Iterable[H], lookup: Callable[[str], H | None]) -> list[H]:
        """The pinned hosts' snapshots, sorted by host. ``busiest``: this scrape's busiest
        hosts' snapshots. ``lookup(host)``: a host's snapshot, or None once it has left memory."""
        snapshots: dict[str, H] = {}
        for host in list(self._pinned):
            snapshot = lookup(host)
            if snapshot is None:
                self._pinned.discard(host)
            else:
                snapshots[host] = snapshot
        for snapshot in busiest:
            if len(self._pinned) >= self._capacity:
                break
            host = snapshot["host"]
            if host not in self._pinned:
                self._pinned.add(host)
                snapshots[host] = snapshot
        return [snapshots[host] for host in sorted(snapshots)]


class NodeMetrics:
    def __init__(self, node: Node, *, pinned_hosts: int = PINNED_HOSTS,
                 status: Callable[[], Awaitable[NodeSnapshot]] | None = None) -> None:
        """``status``: where a scrape reads the node's snapshot (the API's snapshot of it,
        api.snapshot); by default it is taken for each scrape."""
        self.registry = CollectorRegistry(auto_describe=False)
        self._collector = NodeCollector()
        self.registry.register(self._collector)
        self._node = node
        self._pinned = PinnedHosts(pinned_hosts)
        self._status = status

    async def render(self) -> bytes:
        snapshot = await (self._status() if self._status is not None else self._node.snapshot())
        self._collector.snapshot = snapshot
        self._collector.hosts = self._pinned.refresh(snapshot.hosts, self._host_snapshot)
        return generate_latest(self.registry)

    def _host_snapshot(self, host: str) -> HostSnapshot | None:
        state = self._node.hosts.get(host)
        return state.snapshot() if state is not None else None
