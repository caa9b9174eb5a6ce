"""The cost model's pure part (bench/cost_model.py): its invariants, no processes."""

from __future__ import annotations

import sys
from dataclasses import replace
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "bench"))
import cost_model as cm  # noqa: E402

BASE = cm.Params(nodes=1, pages_per_s=1000.0, links_per_page=60.0, cross_host_share=0.3)


def at(n: int, **changes) -> cm.Params:
    return replace(BASE, nodes=n, **changes)


def test_one_node_forwards_and_replicates_nothing():
    p = at(1)
    assert cm.forwarded_share(p) == 0.0
    assert cm.forwarded_per_page(p) == 0.0
    assert cm.replica_rows_per_page(p) == (0.0, 0.0)
    assert cm.heartbeat_bytes_per_s(p) == 0.0
    assert cm.per_node(p)["total_bytes_per_s"] == 0.0


@pytest.mark.parametrize("n", [2, 3, 5, 10, 100])
def test_the_forwarded_share_is_that_of_the_other_owners(n):
    assert cm.forwarded_share(at(n)) == pytest.approx((n - 1) / n)
    assert cm.forwarded_per_page(at(n)) == pytest.approx(60.0 * 0.3 * (n - 1) / n)


def test_the_forwarded_share_grows_with_n_towards_every_cross_host_link():
    shares = [cm.forwarded_per_page(at(n)) for n in range(1, 200)]
    assert shares == sorted(shares)
    assert shares[-1] < 60.0 * 0.3


def test_links_sent_once_already_and_an_uneven_arc_change_what_is_forwarded():
    assert cm.forwarded_per_page(at(3, already_sent_share=0.5)) == pytest.approx(cm.forwarded_per_page(at(3)) / 2)
    assert cm.forwarded_share(at(3, own_share=0.5)) == pytest.approx(0.5)


def test_heartbeat_exchanges_per_node_are_linear_in_n():
    rates = [cm.heartbeat_messages_per_s(at(n)) for n in range(1, 50)]
    steps = {round(b - a, 9) for a, b in zip(rates, rates[1:], strict=False)}
    assert steps == {round(2 / BASE.heartbeat_interval_s, 9)}


def test_heartbeat_bytes_per_node_are_linear_with_a_fixed_answer_and_quadratic_with_member_lists():
    flat = [cm.heartbeat_bytes_per_s(at(n, heartbeat_per_member=0.0)) for n in range(1, 30)]
    assert len({round(b - a, 6) for a, b in zip(flat, flat[1:], strict=False)}) == 1
    # answers that list every member (before the digest): quadratic
    grown = [cm.heartbeat_bytes_per_s(at(n, heartbeat_per_member=100.0)) for n in range(1, 30)]
    second = {round(c - 2 * b + a, 6) for a, b, c in zip(grown, grown[1:], grown[2:], strict=False)}
    assert second == {round(2 * 2 * 100.0 / BASE.heartbeat_interval_s, 6)}


def test_the_heartbeats_answer_does_not_grow_with_the_cluster():
    assert BASE.heartbeat_per_member == 0.0
    assert cm.heartbeat_exchange_bytes(at(3)) == cm.heartbeat_exchange_bytes(at(100))


def test_batches_shrink_as_a_nodes_rows_spread_over_more_peers():
    batches = [cm.rows_per_batch(at(n)) for n in (2, 5, 20, 100, 1000)]
    assert batches == sorted(batches, reverse=True)
    assert batches[0] == BASE.forward_batch and batches[-1] >= 1.0
    # a row pays a larger share of a POST's fixed bytes in a smaller batch
    assert cm.forward_bytes_per_page(at(100)) / cm.forwarded_per_page(at(100)) > \
        cm.forward_bytes_per_page(at(3)) / cm.forwarded_per_page(at(3))


def test_heartbeats_overtake_the_data_somewhere_and_sooner_when_pages_are_slower():
    # (at 1,000 pages/s of real-web-shaped pages, not within 10,000 nodes: fixed-size answers)
    fast = cm.heartbeat_crossover(at(1, pages_per_s=100.0))
    slow = cm.heartbeat_crossover(at(1, pages_per_s=10.0))
    assert fast is not None and slow is not None and slow < fast


def test_a_takeover_moves_the_dead_arc_locally_and_a_handback_sends_it_back():
    p = at(4)
    event = cm.takeover(p, queued=4000.0, fetched=8000.0)
    assert event["promoted_rows"] == pytest.approx(1000.0)
    assert event["seen_from_replica"] == pytest.approx(2000.0)
    assert event["promoted_per_survivor"] == pytest.approx(1000.0 / 3)
    assert event["wire_bytes"] == 0.0 and event["replica_prepaid_bytes"] > 0
    back = cm.handback(p, queued=4000.0, outage_s=10.0)
    assert back["rows"] == pytest.approx(1000.0 + 10.0 * 1000.0)
    assert back["wire_bytes"] > back["rows"] * p.forward_row
    assert cm.give_back(p, queued=4000.0, fetched=8000.0)["rows"] == pytest.approx(3000.0)


def test_the_projection_table_has_a_row_per_size_and_totals_grow():
    table = cm.projection(at(1), [1, 3, 10, 100])
    assert [row["nodes"] for row in table] == [1, 3, 10, 100]
    totals = [row["cluster_bytes_per_s"] for row in table]
    assert totals == sorted(totals)


def test_status_reads_cost_once_per_change_and_nothing_alone_or_per_second():
    assert cm.status_read_bytes(at(1)) == 0.0
    reads = [cm.status_read_bytes(at(n)) for n in range(1, 20)]
    # N-1 exchanges each way, each listing N members: second differences constant
    steps = [b - a for a, b in zip(reads, reads[1:], strict=False)]
    assert len({round(b - a, 6) for a, b in zip(steps, steps[1:], strict=False)}) == 1
    assert reads[1] == pytest.approx(2 * (BASE.status_fixed + 2 * BASE.status_per_member))
    node = cm.per_node(at(10))  # a steady crawl: the data and the heartbeats, no status reads
    assert node["total_bytes_per_s"] == pytest.approx(node["forward_bytes_per_s"] + node["replica_bytes_per_s"]
                                                      + node["heartbeat_bytes_per_s"])


def test_gzip_shrinks_bodies_only_from_its_threshold_and_by_the_curve_between_its_points():
    curve = ((10.0, 0.3), (100.0, 0.2), (500.0, 0.1))
    p = at(3, gzip_curve=curve)
    assert cm.gzip_ratio(p, 5) == 0.3 and cm.gzip_ratio(p, 10_000) == 0.1
    assert cm.gzip_ratio(p, 100) == pytest.approx(0.2)
    assert 0.2 < cm.gzip_ratio(p, 31.6) < 0.3 and cm.gzip_ratio(p, 31.6) == pytest.approx(0.25, abs=0.001)
    rows = cm.rows_per_batch(p)
    assert cm.body_bytes(rows * 100.0, rows, p) == pytest.approx(rows * 100.0 * cm.gzip_ratio(p, rows))
    tiny = (p.gzip_from_bytes - 1) / rows  # bytes a row, for a batch's msgpack just under the threshold
    assert cm.body_bytes(tiny * rows, rows, p) == tiny * rows
    assert cm.wire_bytes(1000.0, 10.0, at(3)) > cm.wire_bytes(1000.0, 10.0, p)  # the curve only saves
