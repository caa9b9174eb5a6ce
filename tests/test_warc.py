"""WARC record pieces: the digest label and record ids are what the slow, obvious code gives."""

from __future__ import annotations

import base64
import gzip
import hashlib
import os
import uuid

from crawler_node import warc


def test_sha1_label_is_base32_of_the_sha1() -> None:
    for size in (0, 1, 19, 20, 21, 4096):
        for _ in range(50):
            data = os.urandom(size)
            expected = "sha1:" + base64.b32encode(hashlib.sha1(data).digest()).decode("ascii")
            assert warc.sha1_label(data) == expected


def test_record_ids_are_distinct_version_4_uuids() -> None:
    ids = [warc.record_id() for _ in range(5_000)]
    assert len(set(ids)) == len(ids)
    for record_id in ids:
        assert record_id.startswith("<urn:uuid:") and record_id.endswith(">")
        parsed = uuid.UUID(record_id[len("<urn:uuid:"):-1])
        assert (parsed.version, parsed.variant) == (4, uuid.RFC_4122)
        assert str(parsed) == record_id[len("<urn:uuid:"):-1]


def test_a_header_value_cannot_start_a_new_line() -> None:
    head = warc.http_head("HTTP/1.1 200 OK", [("X-A", "one\r\nX-Injected: yes"), ("X-B\n", "two\r")])
    assert head == b"HTTP/1.1 200 OK\r\nX-A: one  X-Injected: yes\r\nX-B : two \r\n\r\n"


def test_a_member_is_a_whole_gzip_stream() -> None:
    data = b"WARC/1.1\r\n" + os.urandom(3000) + b"<html>" * 500
    assert gzip.decompress(warc.gzip_member(data)) == data
