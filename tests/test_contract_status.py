"""`GET /v1/status` and `/metrics` keep BASELINE's shape (issue 45: the inside is rebuilt, the
contract is not). The same crawl (testweb's configuration and seed, a two-member cluster, so
the cluster sections, the members and the per-peer series are filled) runs on BASELINE's tree
and on the tree under test, to idle; then the answers are compared as schemas:

- a status as the set of its key paths, each with the JSON types its value had (list elements,
  such as the hosts and the members, merged under ``[]``; the keys of maps keyed by data, such
  as outcomes, reasons or member ids, replaced by a placeholder);
- the metrics as their families, each with its type, label names and sample names.

Nothing of BASELINE may be missing or retyped at head. An addition is allowed only when it is
listed in ADDED_SINCE_BASELINE, so that adding to the contract is a deliberate act.
"""

from __future__ import annotations

import json
import urllib.error
import urllib.request
from collections import defaultdict
from collections.abc import Iterable, Iterator
from dataclasses import dataclass, field
from pathlib import Path

import pytest
from baseline_tree import HEAD, Tree
from cluster_helpers import FAST_CLUSTER, SECURED, peers_of, plan
from conftest import ANY_HOST, roots, wait_until
from prometheus_client.parser import text_string_to_metric_families

from crawler_node.testweb.process import TestwebProcess
from crawler_node.tools.node_process import NodeProcess

# What head adds to the contract, one entry a line, each with why and the issue that adds it:
# "local PATH" / "cluster PATH" for a status key path (as the failure message spells it; a
# listed map or list allows what is in it), "metrics FAMILY" for a metric family (with its
# labels and samples), "metrics FAMILY label=NAME" or "metrics FAMILY sample=NAME" for a part.
ADDED_SINCE_BASELINE: frozenset[str] = frozenset({
    "local $.totals",  # issue 51: the durable crawl totals (core.crawl_totals), from crawl.log
    "local $.frontier.dropped",  # issue 51: URLs drop-host deleted, counted in known/finished
    "cluster $.totals", "cluster $.frontier.dropped",  # the same, in the cluster view
    "cluster $.members[].remembered",  # issue 51: a silent member's last known/finished still count
    "cluster $.members[].attempts_total",  # issue 51: crawl.log's attempts, durable, for the finished line
    "metrics crawler_crawl_log_lines",  # issue 51: crawl.log lines, durable across restarts
    # issue 52: store processes replaced after they died or stopped answering (store.worker)
    "local $.counters.store_restarts", "cluster $.counters.store_restarts", "metrics crawler_store_restarts",
    "metrics crawler_store_restarts sample=crawler_store_restarts_total",
    # issue 52: URLs a calendar trap's dates turned away (core.traps, --max-future-years)
    "local $.counters.calendar_trap", "cluster $.counters.calendar_trap",
    # issue 47, site health: refusals by kind and refusal pauses (node.fetch_stage), hosts by
    # health state (node.hosts), and each busiest host's health, score, reasons and refusals
    "local $.counters.refusal_pauses",
    "local $.counters.refusals",
    "local $.host_table.health",
    "local $.hosts[].health",
    "local $.hosts[].health_reasons",
    "local $.hosts[].health_score",
    "local $.hosts[].refusal_pauses",
    "local $.hosts[].refusals",
    "cluster $.counters.refusal_pauses",
    "cluster $.counters.refusals",
    "cluster $.host_table.health",
    "cluster $.hosts[].health",
    "cluster $.hosts[].health_reasons",
    "cluster $.hosts[].health_score",
    "cluster $.hosts[].refusal_pauses",
    "cluster $.hosts[].refusals",
    "local $.host_table.worst",
    "cluster $.host_table.worst",
    "metrics crawler_refusals",
    "metrics crawler_refusal_pauses",
    "metrics crawler_hosts_health",
    # recrawls of pages with a history, and those that found a change (issue 50, adaptive recrawl)
    "local $.counters.recrawl_checks", "local $.counters.recrawl_changes",
    "cluster $.counters.recrawl_checks", "cluster $.counters.recrawl_changes",
    "metrics crawler_recrawl_checks", "metrics crawler_recrawl_changes",
})

# Maps whose keys are data, not schema, read from api/status.py and the snapshots it gathers:
# each map's keys are replaced by the placeholder, so that two crawls compare by shape.
DATA_KEYED = {
    "$.counters.outcomes": "<outcome>",  # fetch outcome -> count (node.fetch_stage)
    "$.admission.rejections": "<pressure source>",  # admission's stats, by the source that refused
    "$.admission.blocked_s": "<pressure source>",
    "$.shedding.deferred_by_reason": "<reason>",  # frontier.shedding's counts
    "$.retries.gave_up": "<reason>",  # a retry verdict's reason -> URLs given up
    "$.hosts[].robots": "<scheme>",  # node.host_state: a host's robots.txt, by scheme
    "$.host_table.worst[].robots": "<scheme>",
    "$.host_table.places": "<place>",  # node.hosts: hosts by the place they are in
    "$.cluster.heartbeats.failures": "<member>",  # cluster.heartbeats: by peer id
    "$.cluster.heartbeats.bad_answers": "<member>",
    "$.supervisor.failures": "<task>",  # runtime.supervisor: by task name
    "$.totals.outcomes": "<outcome>",  # core.crawl_totals: crawl.log lines by outcome
    "$.totals.status_codes": "<status>",
    "$.totals.kinds": "<kind>",
    "$.totals.refusal_reasons": "<outcome>",
}
# The stage maps (queues, and each member's queues and oldest_age_s in the cluster view) are
# keyed by stage name, but their stages are a fixed set: they are schema, and kept.

# Where a value is legitimately an int or a float, both are "number": a histogram's bucket
# rows are [upper bound (a float, null for +Inf), count (an int)], merged under one "[][]".
EITHER_NUMBER = frozenset({"$.fetches.fetch_seconds.buckets[][]", "$.fetches.body_bytes.buckets[][]",
                           "$.frontier_calls.lease_many.buckets[][]", "$.frontier_calls.apply.buckets[][]",
                           "$.frontier_calls.take_in.buckets[][]"})

HOSTS, PAGES, SEED = 8, 20, 45
PROFILE = {
    "site-*.test": {"latency_ms": 5},
    # robots.txt with a Crawl-delay and a Disallow (robots sections, robots_disallowed)...
    "site-[01].test": {"latency_ms": 5, "robots": "User-agent: *\nDisallow: /p/1\nCrawl-delay: 0.2\n"},
    # ... redirects (3xx answers) and a flaky host (5xx, retries)
    "site-2.test": {"latency_ms": 5, "redirects": 0.2},
    "site-3.test": {"latency_ms": 5, "error_rate": 0.1},
}
_OPENER = urllib.request.build_opener(urllib.request.ProxyHandler({}))


@dataclass(slots=True)
class Shape:
    """The paths of some documents, each with the JSON types its values had, and its parent
    (the path of the map or list it is in)."""

    types: dict[str, set[str]] = field(default_factory=lambda: defaultdict(set))
    parents: dict[str, str] = field(default_factory=dict)

    def add(self, path: str, kind: str, parent: str | None = None) -> None:
        self.types[path].add(kind)
        if parent is not None:
            self.parents[path] = parent

    def filled(self) -> set[str]:
        """The paths that had something in them (a map with a key, a list with an item, a
        metric family with a sample) at least once."""
        return set(self.parents.values())


def json_type(value: object, path: str) -> str:
    if value is None:
        return "null"
    if isinstance(value, bool):
        return "bool"
    if isinstance(value, int | float) and path in EITHER_NUMBER:
        return "number"
    return {int: "int", float: "float", str: "str", list: "list", dict: "dict"}[type(value)]


def schema(documents: Iterable[object]) -> Shape:
    """Each key path of the documents with the JSON types its values had."""
    shape = Shape()

    def walk(value: object, path: str, parent: str | None) -> None:
        shape.add(path, json_type(value, path), parent)
        if isinstance(value, dict):
            placeholder = DATA_KEYED.get(path)
            for key, item in value.items():
                walk(item, f"{path}.{placeholder or key}", path)
        elif isinstance(value, list):
            for item in value:
                walk(item, f"{path}[]", path)

    for document in documents:
        walk(document, "$", None)
    return shape


def metric_schema(texts: Iterable[str]) -> Shape:
    """Each metric family as ``FAMILY`` with its type, and ``FAMILY label=NAME`` and
    ``FAMILY sample=NAME`` for its label and sample names (the parser names a counter without
    its ``_total``; its samples keep it)."""
    shape = Shape()
    for text in texts:
        for family in text_string_to_metric_families(text):
            shape.add(family.name, family.type)
            for sample in family.samples:
                shape.add(f"{family.name} sample={sample.name}", "sample", family.name)
                for label in sample.labels:
                    shape.add(f"{family.name} label={label}", "label", family.name)
    return shape


def _types(types: set[str]) -> str:
    return "|".join(sorted(types))


def differences(view: str, baseline: Shape, head: Shape) -> tuple[list[str], list[str]]:
    """What head lost, retyped or added (unlisted) of BASELINE's ``view``, a line each; and,
    apart, what the crawl did not exercise on one side, so cannot be compared: a key under a
    map, list or field that was empty or null on the other side every time (a heartbeat
    failure on one side and none on the other), or a value that was only ever null there."""
    problems: list[str] = []
    unjudged: list[str] = []
    head_filled, baseline_filled = head.filled(), baseline.filled()
    for path, types in sorted(baseline.types.items()):
        if path not in head.types:
            container = _nearest_ancestor(path, baseline, head)
            if container is not None and container not in head_filled:
                unjudged.append(f"  not seen at head: {view} {path}  (its {container} was always empty or null)")
            else:
                problems.append(f"  missing at head:  {view} {path}  (BASELINE: {_types(types)})")
            continue
        # null says nothing of a value's type: compare what each side saw besides null
        was, now = types - {"null"}, head.types[path] - {"null"}
        if was and now and was != now:
            problems.append(f"  retyped at head:  {view} {path}  BASELINE {_types(types)} -> head "
                            f"{_types(head.types[path])}")
        elif was and not now:
            unjudged.append(f"  only null at head: {view} {path}  (BASELINE: {_types(types)})")
    for path in sorted(head.types.keys() - baseline.types.keys()):
        if _listed(view, path, head):
            continue
        container = _nearest_ancestor(path, head, baseline)
        if container is not None and container not in baseline_filled:
            unjudged.append(f"  not seen at BASELINE: {view} {path}  (its {container} was always empty or null)")
        else:
            problems.append(f"  added at head:    {view} {path}  ({_types(head.types[path])}; if meant, "
                            "list it in ADDED_SINCE_BASELINE)")
    return problems, unjudged


def _nearest_ancestor(path: str, shape: Shape, other: Shape) -> str | None:
    """The closest of ``path``'s ancestors in ``shape`` that ``other`` has too."""
    parent = shape.parents.get(path)
    while parent is not None and parent not in other.types:
        parent = shape.parents.get(parent)
    return parent


def _listed(view: str, path: str, head: Shape) -> bool:
    """Whether ADDED_SINCE_BASELINE lists the path, or a path it is in (a new map or family)."""
    at: str | None = path
    while at is not None:
        if f"{view} {at}" in ADDED_SINCE_BASELINE:
            return True
        at = head.parents.get(at)
    return False


@dataclass(frozen=True, slots=True)
class Answers:
    """What both members of one crawl answered once it was idle."""

    local: list[dict]  # GET /v1/status?scope=local
    cluster: list[dict]  # GET /v1/status
    metrics: list[str]  # GET /metrics


def read(node: NodeProcess, path: str) -> bytes:
    """The body of ``GET path`` on ``node``; an answer other than 200 fails, with its body and
    the node's log."""
    try:
        with _OPENER.open(f"{node.url}{path}", timeout=10) as response:
            return response.read()
    except urllib.error.HTTPError as exc:
        raise AssertionError(f"{node.node_id}: GET {path} answered {exc.code}: {exc.read()[:300]!r}; "
                             f"its log ends:\n{node.log_tail(15)}") from None


def crawl(tree: Tree, tmp: Path) -> Answers:
    """The crawl on ``tree``'s nodes (a, b; a seeded), to idle, and what they answer then."""
    with TestwebProcess(hosts=HOSTS, pages=PAGES, seed=SEED, profile=PROFILE, tmp_dir=tmp) as web:
        addresses = plan(["a", "b"])
        peers = peers_of(addresses)
        nodes = [NodeProcess(node_id=node_id, data_dir=tmp / node_id, host=host, port=port, proxy=web.url,
                             peers=peers, env=tree.env(), seeds=roots(HOSTS) if node_id == "a" else (),
                             extra_args=[*FAST_CLUSTER, *SECURED, *ANY_HOST])
                 for node_id, (host, port) in addresses.items()]
        try:
            for node in nodes:
                node.start(wait=False)
            for node in nodes:
                node.wait_healthy(30)
            # The cluster view's "idle": every member idle, as each member sees it.
            wait_until(lambda: all(node.status()["idle"] for node in nodes), 90, f"the {tree.name} crawl to end",
                       interval=0.2)
            return Answers(local=[json.loads(read(node, "/v1/status?scope=local&fresh=1")) for node in nodes],
                           cluster=[json.loads(read(node, "/v1/status?fresh=1")) for node in nodes],
                           metrics=[read(node, "/metrics").decode() for node in nodes])
        finally:
            for node in nodes:
                node.stop(timeout_s=15)


@pytest.fixture(scope="module")
def answers(baseline_tree: Tree, tmp_path_factory: pytest.TempPathFactory) -> Iterator[dict[str, Answers]]:
    """The same crawl on BASELINE and on head, one after the other."""
    yield {tree.name: crawl(tree, tmp_path_factory.mktemp(tree.name)) for tree in (baseline_tree, HEAD)}


def assert_kept(view: str, baseline: Shape, head: Shape) -> None:
    problems, unjudged = differences(view, baseline, head)
    compared = len(baseline.types.keys() & head.types.keys())
    report = (f"{view}: {compared} paths compared, {len(problems)} changed at head, "
              f"{len(unjudged)} not exercised on one side")
    print(report, *unjudged, sep="\n")
    if problems:
        pytest.fail(f"head changed BASELINE's contract. {report}:\n" + "\n".join(problems + unjudged), pytrace=False)


def test_a_members_own_status_keeps_its_keys_and_types(answers: dict[str, Answers]) -> None:
    assert_kept("local", schema(answers["baseline"].local), schema(answers["head"].local))


def test_the_cluster_view_keeps_its_keys_and_types(answers: dict[str, Answers]) -> None:
    assert_kept("cluster", schema(answers["baseline"].cluster), schema(answers["head"].cluster))


def test_the_metrics_keep_their_names_types_and_labels(answers: dict[str, Answers]) -> None:
    assert_kept("metrics", metric_schema(answers["baseline"].metrics), metric_schema(answers["head"].metrics))


def test_a_change_is_named_path_by_path() -> None:
    """The comparison itself, on made-up statuses: what a failure says."""
    baseline = schema([{"counters": {"fetched": 3, "outcomes": {"ok": 3}}, "members": [{"id": "a", "idle": True}],
                        "cluster": {"events": [], "heartbeats": {"failures": {"b": 1}}}, "held_until": 1.5}])
    head = schema([{"counters": {"fetched": 3.0, "outcomes": {"redirect": 1}, "pages": 3}, "members": [{"id": "a"}],
                    "cluster": {"events": [{"at": 2.5}], "heartbeats": {"failures": {}}}, "held_until": None}])
    problems, unjudged = differences("local", baseline, head)
    assert problems == [
        "  retyped at head:  local $.counters.fetched  BASELINE int -> head float",
        "  missing at head:  local $.members[].idle  (BASELINE: bool)",
        "  added at head:    local $.counters.pages  (int; if meant, list it in ADDED_SINCE_BASELINE)",
    ]
    assert unjudged == [
        "  not seen at head: local $.cluster.heartbeats.failures.<member>  (its $.cluster.heartbeats.failures"
        " was always empty or null)",
        "  only null at head: local $.held_until  (BASELINE: float)",
        "  not seen at BASELINE: local $.cluster.events[]  (its $.cluster.events was always empty or null)",
        "  not seen at BASELINE: local $.cluster.events[].at  (its $.cluster.events was always empty or null)",
    ]
