"""Bad input to POST /v1/urls gets a documented 4xx with a reason, and the node keeps serving."""

from __future__ import annotations

import gzip
import http.client
import json
import os
import random

import msgpack
import pytest


def post(node, body: bytes, content_type: str = "application/json", headers: dict | None = None,
         path: str = "/v1/urls"):
    conn = http.client.HTTPConnection(node.host, node.port, timeout=30)
    try:
        conn.putrequest("POST", path)
        conn.putheader("Content-Type", content_type)
        conn.putheader("Content-Length", str(len(body)))
        for key, value in (headers or {}).items():
            conn.putheader(key, value)
        conn.endheaders()
        try:
            conn.send(body)
        except (BrokenPipeError, ConnectionResetError):
            pass  # the node may answer (413) before taking the whole body
        response = conn.getresponse()
        return response.status, dict(response.getheaders()), response.read()
    finally:
        conn.close()


@pytest.fixture(scope="module")
def node(tmp_path_factory):
    from crawler_node.tools.node_process import NodeProcess

    tmp = tmp_path_factory.mktemp("api")
    # allow-host keeps everything submitted here from ever being fetched for real
    with NodeProcess(node_id="api-node", data_dir=tmp / "api-node", extra_args=["--allow-host", "*.test"]) as proc:
        yield proc


def reason(body: bytes) -> str:
    return json.loads(body)["error"]


@pytest.mark.parametrize(
    "body, content_type, status, expected_reason",
    [
        (b"{not json", "application/json", 400, "bad_json"),
        # garbage, the same in every process (pytest-xdist workers collect the same ids)
        (random.Random(18).randbytes(64) + b"\xc1", "application/msgpack", 400, "bad_msgpack"),
        (b'{"urls": []}', "application/json", 400, "empty"),
        (b'{"links": ["http://a.test/"]}', "application/json", 400, "bad_shape"),
        (b'{"urls": "http://a.test/"}', "application/json", 400, "bad_shape"),
        (b'{"urls": ["javascript:alert(1)"]}', "application/json", 400, "invalid_urls"),
        (b'{"urls": ["file:///etc/passwd"]}', "application/json", 400, "invalid_urls"),
        (b'{"urls": ["http://"]}', "application/json", 400, "invalid_urls"),
        (b'{"urls": [{"url": "http://a.test/", "depth": "deep"}]}', "application/json", 400, "invalid_urls"),
        (json.dumps({"urls": ["http://a.test/" + "x" * 100_000]}).encode(), "application/json", 400, "invalid_urls"),
    ],
)
def test_malformed_bodies_get_400_with_a_reason(node, body, content_type, status, expected_reason):
    got_status, _, got_body = post(node, body, content_type)
    assert got_status == status
    assert reason(got_body) == expected_reason
    assert json.loads(got_body)["message"]


def test_a_mixed_batch_is_refused_whole(node):
    before = node.status()["counters"]["submitted"]
    status, _, body = post(node, json.dumps({"urls": ["http://ok.test/", "mailto:x@y.test"]}).encode())
    assert status == 400
    invalid = json.loads(body)["invalid"]
    assert invalid == [{"index": 1, "reason": "scheme", "url": "mailto:x@y.test"}]
    assert node.status()["counters"]["submitted"] == before


def test_a_50_mb_body_gets_413(node):
    status, _, body = post(node, b"x" * (50 * 1024 * 1024))
    assert status == 413
    assert reason(body) == "too_large"


def test_random_msgpack_that_decodes_to_a_scalar_is_400(node):
    status, _, body = post(node, msgpack.packb(12345), "application/msgpack")
    assert status == 400 and reason(body) == "bad_shape"


def test_good_json_and_msgpack_are_accepted_with_counts(node):
    status, _, body = post(node, json.dumps({"urls": ["http://a.test/x", "http://a.test/x", "http://elsewhere.example/"]}).encode())
    assert status == 202
    assert json.loads(body) == {"accepted": 1, "forwarded": 0, "duplicate": 1, "rejected": 1, "capped": 0,
                                "reasons": {"host_not_allowed": 1}}
    packed = msgpack.packb({"urls": [{"url": "http://a.test/x"},
                                     {"url": "HTTP://A.TEST:80/y#frag", "depth": 2, "hops": 1}]})
    status, _, body = post(node, packed, "application/msgpack")
    assert status == 202
    assert json.loads(body)["accepted"] == 1 and json.loads(body)["duplicate"] == 1


def test_node_keeps_serving_after_bad_input(node):
    for _ in range(3):
        post(node, os.urandom(1000), "application/msgpack")
        post(node, b"\xff\xfe{", "application/json")
    conn = http.client.HTTPConnection(node.host, node.port, timeout=10)
    conn.request("GET", "/healthz")
    assert conn.getresponse().status == 200
    status = node.status()
    assert status["node_id"] == "api-node"


def test_a_batch_addressed_to_another_member_gets_421_and_nothing_is_queued(node):
    """A peer whose address for member "b" is this node's now (a restart moved addresses) is
    told so, and nothing it sent is taken; the same batch addressed to this node is."""
    batch = json.dumps({"urls": ["http://misdirected.test/only-for-b"]}).encode()

    queued = known(node)
    status, _, body = post(node, batch, headers={"X-Crawler-To": "b"})
    assert status == 421 and json.loads(body)["error"] == "misdirected"
    assert json.loads(body)["node_id"] == "api-node"
    assert known(node) == queued
    status, _, body = post(node, batch, headers={"X-Crawler-To": "api-node"})
    assert status == 202 and json.loads(body)["accepted"] == 1
    assert known(node) == queued + 1


def test_a_gzip_body_is_taken_as_its_content(node):
    """Members send their batches gzip'd (cluster.forwarding); any client may."""
    packed = msgpack.packb({"urls": [{"url": f"http://gz.test/{i}", "depth": 1, "via": "http://gz.test/"}
                                     for i in range(50)]})
    body = gzip.compress(packed)
    assert len(body) < len(packed) / 3
    held = known(node)
    status, _, answer = post(node, body, "application/msgpack", {"Content-Encoding": "gzip"})
    assert status == 202 and json.loads(answer)["accepted"] == 50
    assert known(node) == held + 50


@pytest.mark.parametrize(
    "body, encoding, status, expected_reason",
    [
        (b"this is not gzip", "gzip", 400, "bad_body"),
        (b"x\x9c this is not deflate", "deflate", 400, "bad_body"),
        (b'{"urls": ["http://a.test/br"]}', "br", 415, "unsupported_encoding"),
        (b'{"urls": ["http://a.test/compress"]}', "compress", 415, "unsupported_encoding"),
        # mtime=0: the body is a test id, and both xdist workers must make the same one
        (gzip.compress(b'{"urls": ["http://a.test/twice"]}', mtime=0), "gzip, gzip", 415, "unsupported_encoding"),
        # 40 KB that decode to 40 MB: stopped at the body limit, not decoded whole
        (gzip.compress(b"[" * (40 * 1024 * 1024), mtime=0), "gzip", 413, "too_large"),
    ],
)
def test_bodies_in_a_bad_or_unknown_coding_get_a_4xx_with_a_reason(node, body, encoding, status, expected_reason):
    before = node.status()["counters"]["submitted"]
    got_status, headers, got_body = post(node, body, "application/json", {"Content-Encoding": encoding})
    assert got_status == status and reason(got_body) == expected_reason
    if status == 415:
        assert headers["Accept-Encoding"] == "gzip, deflate"
    assert node.status()["counters"]["submitted"] == before


def test_a_control_body_that_does_not_decode_is_400_and_changes_nothing(node):
    for encoding in ("gzip", "br"):
        status, _, answer = post(node, b"not a body", "application/json", {"Content-Encoding": encoding},
                                 path="/v1/control/pause")
        assert status == 400 and "content-encoding" in json.loads(answer)["message"], answer
    assert node.status()["paused"] is False



def known(node) -> int:
    """Every URL the frontier holds, whatever became of it since."""
    frontier = node.status()["frontier"]
    return sum(frontier[state] for state in ("queued", "leased", "done", "failed", "deferred"))
