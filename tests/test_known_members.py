"""members.json: what a DNS-found member remembers of its cluster across a restart."""

from __future__ import annotations

import json
import logging
from pathlib import Path

import pytest

from crawler_node.cluster.known_members import KnownMembers
from crawler_node.cluster.membership import Membership


def membership(**peers: str) -> Membership:
    return Membership("a", "http://127.0.0.1:1", {"a": "http://127.0.0.1:1", **peers}, now=0.0)


def test_the_members_are_written_when_they_change_and_read_back_without_this_node(tmp_path: Path) -> None:
    path = tmp_path / "members.json"
    known = KnownMembers(path)
    members = membership(b="http://127.0.0.2:1")
    known.save(members)
    assert KnownMembers(path).load("a") == [("b", "http://127.0.0.2:1")]
    members.add("c", "http://127.0.0.3:1", 1.0)
    members.add("b", "http://127.0.0.9:1", 1.0)  # b came back on another address
    known.save(members)
    assert KnownMembers(path).load("a") == [("b", "http://127.0.0.9:1"), ("c", "http://127.0.0.3:1")]
    assert KnownMembers(path).load("b") == [("c", "http://127.0.0.3:1")]  # never this node itself
    assert not path.with_name("members.json.tmp").exists()


def test_a_member_that_left_with_nothing_left_to_hand_on_is_not_remembered(tmp_path: Path) -> None:
    members = membership(b="http://127.0.0.2:1", c="http://127.0.0.3:1")
    members.observe_leave("b", 1.0, drained=True)
    members.add("d", "http://127.0.0.4:1", 1.0)  # a change of the list: written again
    known = KnownMembers(tmp_path / "members.json")
    known.save(members)
    assert [node_id for node_id, _ in known.load("a")] == ["c", "d"]


@pytest.mark.parametrize("content", [b"", b"{not json", b"[]", b'{"members": 5}', b'{"members": [1]}',
                                     b"[" * 100_000])
def test_a_file_that_cannot_be_read_is_logged_and_ignored(tmp_path: Path, content: bytes,
                                                           caplog: pytest.LogCaptureFixture) -> None:
    path = tmp_path / "members.json"
    path.write_bytes(content)
    with caplog.at_level(logging.WARNING):
        assert KnownMembers(path).load("a") == []
    assert "cannot be read" in caplog.text


def test_members_of_a_bad_id_or_url_are_skipped_and_no_file_is_no_members(tmp_path: Path) -> None:
    path = tmp_path / "members.json"
    assert KnownMembers(path).load("a") == []
    path.write_text(json.dumps({"members": [{"id": "b", "url": "http://127.0.0.2:1"}, {"id": "\u202ex", "url": "x"},
                                            {"id": "c", "url": "http://u@127.0.0.3:1/"}]}))
    assert KnownMembers(path).load("a") == [("b", "http://127.0.0.2:1")]
