"""Heartbeat answers that cost the same in a cluster of any size: a member asks with the digest
of the peer's member list it last merged and its own id, and the peer leaves an unchanged list
out and gives only the asker's per-IP acknowledgement. A list that changed still comes whole,
so a member learnt by one peer still reaches the others through the heartbeats."""

from __future__ import annotations

import asyncio
import json
import urllib.request

import pytest
from cluster_helpers import peers_of, plan, wait_until
from peer_helpers import Peer, serve, until

from crawler_node.cluster.heartbeats import Heartbeats, parse_members_answer
from crawler_node.cluster.membership import Membership, PeerState
from crawler_node.cluster.peer_client import BadPeerAnswer, PeerClient
from crawler_node.runtime.supervisor import Supervisor

INTERVAL_S = 0.05
_OPENER = urllib.request.build_opener(urllib.request.ProxyHandler({}))


def test_the_digest_names_the_ids_and_urls_and_nothing_else() -> None:
    membership = Membership("a", "http://127.0.0.1:1", {"b": "http://127.0.0.2:1"}, now=0.0,
                            suspect_after_s=1.0, down_after_s=2.0)
    first = membership.digest()
    membership.tick(10.0)  # b is down now: its state is not what a peer merges
    assert membership.get("b").state is PeerState.DOWN and membership.digest() == first
    membership.add("c", "http://127.0.0.3:1", 10.0)
    assert membership.digest() != first
    with_c = membership.digest()
    assert membership.add("b", "http://127.0.0.9:1", 10.0)  # b moved: a peer must learn its new URL
    assert membership.digest() != with_c
    membership.add("b", "http://127.0.0.2:1", 10.0)
    other = Membership("c", "http://127.0.0.3:1", {"a": "http://127.0.0.1:1", "b": "http://127.0.0.2:1"},
                       now=0.0, suspect_after_s=1.0, down_after_s=2.0)
    assert other.digest() == membership.digest()  # the same members, seen from another member


def test_an_answer_without_a_list_is_one_only_for_the_digest_asked_with() -> None:
    assert parse_members_answer({"members_digest": "0123456789abcdef"}, "0123456789abcdef") == ([], False)
    with pytest.raises(BadPeerAnswer):
        parse_members_answer({"members_digest": "0123456789abcdef"}, "fedcba9876543210")
    with pytest.raises(BadPeerAnswer):
        parse_members_answer({"members_digest": "0123456789abcdef"})  # asked without one


async def test_an_unchanged_list_is_left_out_and_a_changed_one_still_spreads() -> None:
    loop = asyncio.get_running_loop()
    b_membership = Membership("b", "http://127.0.0.2:1", {"a": "http://127.0.0.1:1"}, now=loop.time(),
                              suspect_after_s=0.5, down_after_s=1.0)
    peer = Peer(b_membership)
    runner, url = await serve({"/v1/members": peer.handle})
    membership = Membership("a", "http://127.0.0.1:1", {"b": url}, now=loop.time(), suspect_after_s=0.5,
                            down_after_s=1.0)
    learnt: list[str] = []
    supervisor = Supervisor(on_fatal=pytest.fail)
    heartbeats = Heartbeats(membership=membership, advertise_url="http://127.0.0.1:1", interval_s=INTERVAL_S,
                            client=PeerClient(secret=None), supervisor=supervisor, on_changed=lambda why: None,
                            on_member=learnt.append, clock=loop.time)
    try:
        async with heartbeats.client:
            heartbeats.start()
            await until(lambda: len(peer.asked) >= 5, "five heartbeats")
            assert peer.asked[0] == {"from": "a"}  # nothing merged yet: the whole list
            assert all(asked == {"from": "a", "known": b_membership.digest()} for asked in peer.asked[1:5])
            # b learns of c (a join through b): the digest a holds is stale, so the list comes whole
            b_membership.add("c", "http://127.0.0.3:1", loop.time())
            await until(lambda: "c" in membership, "a learning c from b's heartbeat answers")
            assert learnt == ["c"]
            seen = len(peer.asked)
            await until(lambda: len(peer.asked) >= seen + 3, "three more heartbeats")
            assert peer.asked[-1]["known"] == b_membership.digest()  # the new list's, once merged
            assert membership.get("b").state is PeerState.ALIVE and heartbeats.failures["b"] == 0
    finally:
        await supervisor.stop()
        await runner.cleanup()


async def test_a_peer_that_leaves_out_a_list_it_changed_is_a_bad_answer() -> None:
    loop = asyncio.get_running_loop()
    b_membership = Membership("b", "http://127.0.0.2:1", {"a": "http://127.0.0.1:1"}, now=loop.time(),
                              suspect_after_s=0.5, down_after_s=1.0)

    def lying(membership: Membership, query: dict) -> dict:
        body = Peer.rule(membership, query)
        if "known" in query:
            body.pop("members", None)  # never the list again, whatever changed
            body["members_digest"] = "f" * 16
        return body

    peer = Peer(b_membership, lying)
    runner, url = await serve({"/v1/members": peer.handle})
    membership = Membership("a", "http://127.0.0.1:1", {"b": url}, now=loop.time(), suspect_after_s=0.5,
                            down_after_s=1.0)
    supervisor = Supervisor(on_fatal=pytest.fail)
    heartbeats = Heartbeats(membership=membership, advertise_url="http://127.0.0.1:1", interval_s=INTERVAL_S,
                            client=PeerClient(secret=None), supervisor=supervisor, on_changed=lambda why: None,
                            on_member=lambda peer_id: None, clock=loop.time)
    try:
        async with heartbeats.client:
            heartbeats.start()
            await until(lambda: heartbeats.bad_answers["b"] >= 3, "answers without the list counted as bad")
            await until(lambda: membership.get("b").state is PeerState.DOWN, "b down: its answers are not heartbeats")
    finally:
        await supervisor.stop()
        await runner.cleanup()


def _get(url: str, secret: str) -> dict:
    request = urllib.request.Request(url, headers={"Authorization": f"Bearer {secret}"})
    with _OPENER.open(request, timeout=5) as response:
        return json.loads(response.read())


def test_a_node_answers_a_member_that_holds_its_list_without_it(start_node) -> None:
    secret = "digest-test-secret"
    addresses = plan(["a", "b"], first_ip=40)
    peers = peers_of(addresses)
    nodes = {node_id: start_node(node_id, host=addresses[node_id][0], port=addresses[node_id][1], peers=peers,
                                 wait=False, extra_args=["--secret", secret]) for node_id in ("a", "b")}
    for node in nodes.values():
        node.wait_healthy(30)
    a = nodes["a"]
    wait_until(lambda: all(m["state"] == "alive" for m in _get(f"{a.url}/v1/members", secret)["members"]),
               30, "a hearing b")
    whole = _get(f"{a.url}/v1/members", secret)
    digest = whole["members_digest"]
    assert [m["id"] for m in whole["members"]] == ["a", "b"] and len(digest) == 16
    short = _get(f"{a.url}/v1/members?from=b&known={digest}", secret)
    assert "members" not in short and short["members_digest"] == digest and short["node_id"] == "a"
    if isinstance(short.get("ips"), dict):  # per-IP shares on: only b's acknowledgement
        assert set(short["ips"]["seen"]) <= {"b"}
    stale = _get(f"{a.url}/v1/members?from=b&known={'0' * 16}", secret)
    assert [m["id"] for m in stale["members"]] == ["a", "b"]
    # and the members' own heartbeats, asking that way, keep both alive
    wait_until(lambda: all(m["state"] == "alive" for n in nodes.values()
                           for m in _get(f"{n.url}/v1/members", secret)["members"]), 10, "both alive")
