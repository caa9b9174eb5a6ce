"""WARC record pieces: the digest label and record ids are what the slow, obvious code gives."""

from __future__ import annotations

import base64
import gzip
import hashlib
import os
import uuid

from crawler_node.store import warc


def test_sha1_label_is_base32_of_the_sha1() -> None:
    for size in (0, 1, 19, 20, 21, 4096):
        for _ in range(50):
            data = os.urandom(size)
            expected = "sha1:" + base64.b32encode(hashlib.sha1(data).digest()).decode("ascii")
            assert warc.sha1_label(data) == expected


def test_record_ids_are_distinct_version_4_uuids() -> None:
    # One at a time and a batch at a time (one os.urandom call per batch).
    ids = [warc.record_id() for _ in range(2_000)] + warc.record_ids(3_000) + warc.record_ids(1)
    assert len(ids) == 5_001 and warc.record_ids(0) == []
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


def test_a_small_record_is_a_whole_gzip_stream_too() -> None:
    # Below SMALL_RECORD_BYTES a record is deflated with the fixed Huffman code.
    request = b"WARC/1.1\r\nWARC-Type: request\r\n" + b"GET /p/1 HTTP/1.1\r\nHost: a.test\r\n" * 20
    for size in (0, 1, 100, warc.SMALL_RECORD_BYTES - 1, warc.SMALL_RECORD_BYTES):
        data = (request * 2)[:size]
        member = warc.gzip_member(data)
        assert gzip.decompress(member) == data
        assert member[:2] == b"\x1f\x8b"  # one member of its own, with its own header
    assert len(warc.gzip_member(request[:1000])) < 500  # still compressed


def exchange(url: str = "http://a.test/p/1", **options) -> tuple[bytes, bytes]:
    return warc.exchange(
        url, "2023-11-14T22:13:20.123000Z", status_line="HTTP/1.1 200 OK",
        response_headers=[("Content-Type", "text/html"), ("Content-Length", "6")], body=b"<html>",
        request_line="GET /p/1 HTTP/1.1", request_headers=[("Host", "a.test")], **options)


def warc_fields(record: bytes) -> list[bytes]:
    return record.split(b"\r\n\r\n", 1)[0].split(b"\r\n")[1:]


def test_the_request_points_at_the_response() -> None:
    response, request = exchange()
    response_id = next(f for f in warc_fields(response) if f.startswith(b"WARC-Record-ID: "))[16:]
    request_id = next(f for f in warc_fields(request) if f.startswith(b"WARC-Record-ID: "))[16:]
    assert response_id != request_id
    assert b"WARC-Concurrent-To: " + response_id in warc_fields(request)
    response, request = exchange(ids=("<urn:uuid:a>", "<urn:uuid:b>"))
    assert b"WARC-Record-ID: <urn:uuid:a>" in warc_fields(response)
    assert {b"WARC-Record-ID: <urn:uuid:b>", b"WARC-Concurrent-To: <urn:uuid:a>"} <= set(warc_fields(request))


def test_a_warc_field_cannot_start_a_new_line() -> None:
    response, request = exchange("http://a.test/x\r\nWARC-Type: evil", ip_address="1.2.3.4\n",
                                 truncated="length\r")
    for record in (response, request):
        fields = warc_fields(record)
        assert [f for f in fields if f.startswith(b"WARC-Type:")] == [fields[0]]
        assert b"WARC-Target-URI: http://a.test/x  WARC-Type: evil" in fields
    assert {b"WARC-IP-Address: 1.2.3.4 ", b"WARC-Truncated: length "} <= set(warc_fields(response))
