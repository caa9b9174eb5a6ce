"""The HTTP API fuzzed on live nodes (issue 14): schemathesis from the node's own OpenAPI
description (GET /v1/openapi.json), with and without the cluster token, and hypothesis over the
msgpack body a peer's outbox sends to POST /v1/urls. Every answer is below 500, the node is
alive afterwards and its heartbeats still work. The description itself is valid OpenAPI and
lists exactly the routes the app serves.

The nodes fetch through testweb as their proxy and crawl only ``*.test`` hosts, so nothing a
fuzzer submits reaches past loopback. The operations that would stop the node under test or
change who is in its cluster are left out where they would (see the constants below).
"""

from __future__ import annotations

import http.client
import json
import os
import re
import socket
import subprocess
import sys
import time
from pathlib import Path

import msgpack
import pytest
import schemathesis
from cluster_helpers import FAST_CLUSTER, get_json, peers_of, plan, wait_until
from hypothesis import HealthCheck, given, seed, settings
from hypothesis import strategies as st

from crawler_node.api.app import PROTECTED, make_app
from crawler_node.api.openapi import OPENAPI_PATH, openapi_document
from crawler_node.node.node import Node
from crawler_node.settings import Settings

SECRET = "fuzz-test-token"
SEED = 14
EXAMPLES = 30  # per operation and phase
SCOPE = ["--allow-host", "*.test"]  # whatever is submitted, only testweb's hosts are crawled
CHECKS = ("not_a_server_error,status_code_conformance,content_type_conformance,response_headers_conformance,"
          "response_schema_conformance")
STOP = "post /v1/control/stop"  # ends the node under test: its body is pause's (api.control._command_body)
# fuzzed last, on the node alone (a sync may carry a pause)
HOLDS_STILL = ("post /v1/control/pause", "post /v1/control/sync", "delete /v1/hosts/{host}/queue")
JOIN = "post /v1/join"  # in a cluster, a fuzzed join puts a stranger (any host name) in the ring
_TOTALS = re.compile(r"(\d+) generated")


def schemathesis_run(node, tmp_path: Path, *, token: str | None = None, exclude: tuple[str, ...] = (),
                     include: tuple[str, ...] = (), timeout_s: float = 100) -> int:
    """Run the schemathesis CLI against ``node``; the number of test cases it generated. With
    the token, also that each protected operation refuses a request without it (ignored_auth)."""
    checks = f"{CHECKS},ignored_auth" if token is not None else CHECKS
    command = [str(Path(sys.executable).with_name("st")), "run", f"{node.url}{OPENAPI_PATH}", "--checks", checks,
               # one worker: hypothesis, asked from several threads, fails inside itself on Python 3.11
               "--seed", str(SEED), "--max-examples", str(EXAMPLES), "--workers", "1", "--request-timeout", "15",
               "--no-color"]
    command += [arg for op in exclude for arg in ("--exclude-operation-id", op)]
    command += [arg for op in include for arg in ("--include-operation-id", op)]
    if token is not None:
        command += ["-H", f"Authorization: Bearer {token}"]
    env = {key: value for key, value in os.environ.items() if "proxy" not in key.lower()}
    done = subprocess.run(command, capture_output=True, text=True, timeout=timeout_s, cwd=tmp_path, env=env,
                          stdin=subprocess.DEVNULL)
    assert done.returncode == 0, f"schemathesis failed ({done.returncode}):\n{done.stdout[-8000:]}{done.stderr[-2000:]}"
    generated = _TOTALS.search(done.stdout)
    assert generated, done.stdout[-2000:]
    return int(generated.group(1))


def call(node, method: str, path: str, body: bytes | None = None, headers: dict | None = None) -> tuple[int, bytes]:
    conn = http.client.HTTPConnection(node.host, node.port, timeout=10)
    try:
        conn.request(method, path, body=body, headers=headers or {})
        response = conn.getresponse()
        return response.status, response.read()
    finally:
        conn.close()


def assert_alive(node) -> None:
    assert node.proc.poll() is None, f"{node.node_id} exited:\n{node.log_tail()}"
    assert call(node, "GET", "/healthz")[0] == 200
    log = node.log_path.read_text(errors="replace")
    assert "Traceback" not in log, log[log.index("Traceback") - 200:][:3000]


def heartbeat_failures(node, peer: str) -> int:
    return get_json(f"{node.url}/v1/status?scope=local")["cluster"]["heartbeats"]["failures"].get(peer, 0)


def assert_heartbeats_ok(node, peer) -> None:
    """``peer`` is alive in ``node``'s view, and no heartbeat to it fails over a few rounds."""
    def alive() -> bool:
        members = get_json(f"{node.url}/v1/status?scope=local")["members"]
        return any(m["id"] == peer.node_id and m["state"] == "alive" for m in members)
    wait_until(alive, 10, f"{peer.node_id} alive in {node.node_id}'s view")
    before = heartbeat_failures(node, peer.node_id)
    time.sleep(1.5)  # five heartbeat rounds (FAST_CLUSTER: 0.3 s): a window, not a synchronisation
    assert heartbeat_failures(node, peer.node_id) == before
    members = get_json(f"{node.url}/v1/status?scope=local")["members"]
    assert [m["heartbeat_age_s"] < 1.5 for m in members if m["id"] == peer.node_id] == [True], members


@pytest.fixture
def cluster(start_testweb, start_node):
    """Two members with a secret, fetching through testweb."""
    web = start_testweb(hosts=4, pages=5, seed=14)
    addresses = plan(["fuzz-a", "fuzz-b"])
    peers = peers_of(addresses)
    return [start_node(node_id, host=host, port=port, proxy=web.url, peers=peers,
                       extra_args=[*FAST_CLUSTER, *SCOPE, "--secret", SECRET])
            for node_id, (host, port) in addresses.items()]


# --- schemathesis -----------------------------------------------------------------------------


def test_schemathesis_on_a_node_alone(start_testweb, start_node, tmp_path):
    web = start_testweb(hosts=4, pages=5, seed=14)
    node = start_node("fuzz-solo", proxy=web.url, seeds=["http://site-0.test/"], extra_args=SCOPE)
    cases = schemathesis_run(node, tmp_path, exclude=(STOP, *HOLDS_STILL))
    assert_alive(node)
    # Last, what makes the node hold still: pause and drop-host; then it resumes as asked.
    cases += schemathesis_run(node, tmp_path, include=HOLDS_STILL)
    assert_alive(node)
    assert call(node, "POST", "/v1/control/resume")[0] == 200
    assert get_json(f"{node.url}/v1/status?scope=local")["paused"] is False
    print(f"schemathesis: {cases} test cases on a node alone")


def test_schemathesis_on_a_cluster_member_with_and_without_the_token(cluster, tmp_path):
    member, peer = cluster
    status, body = call(member, "GET", OPENAPI_PATH)  # the description itself needs no token
    assert status == 200 and json.loads(body) == json.loads(json.dumps(openapi_document()))
    cases = schemathesis_run(member, tmp_path, exclude=(STOP, *HOLDS_STILL))  # the protected routes: 401
    assert_alive(member)
    cases += schemathesis_run(member, tmp_path, token=SECRET, exclude=(STOP, *HOLDS_STILL, JOIN))
    for node in cluster:
        assert_alive(node)
    assert_heartbeats_ok(member, peer)
    assert_heartbeats_ok(peer, member)
    print(f"schemathesis: {cases} test cases on a cluster member")


# --- msgpack bodies as a peer sends them, and worse ---------------------------------------------

_HUGE = st.one_of(st.integers(-(2**63), 2**64 - 1), st.sampled_from([2**64 - 1, -(2**63), 2**63, 10**6, -(10**6)]))
_SCALAR = st.one_of(st.none(), st.booleans(), _HUGE, st.floats(allow_nan=True), st.text(max_size=40),
                    st.binary(max_size=40))
_ANY = st.recursive(_SCALAR, lambda inner: st.one_of(st.lists(inner, max_size=6),
                                                    st.dictionaries(st.one_of(st.text(max_size=8), _HUGE), inner,
                                                                    max_size=6)), max_leaves=30)
_URL = st.one_of(st.builds("http://site-{}.test/p/{}".format, st.integers(0, 5), st.integers(0, 50)),
                 st.text(max_size=60), st.binary(max_size=20))
_FIELD = st.one_of(_HUGE, _SCALAR)
# The outbox's own item (cluster.forwarding.Outbox._send_batch), each field sometimes of a wrong type.
_PEER_ITEM = st.fixed_dictionaries(
    {"url": _URL},
    optional={"depth": _FIELD, "priority": _FIELD, "hops": _FIELD, "redirects": _FIELD,
              "via": st.one_of(st.none(), st.text(max_size=80), _FIELD), "seen": st.one_of(st.booleans(), _FIELD),
              "extra": _ANY})


def _pack(document) -> bytes:
    return msgpack.packb(document, use_bin_type=True)


def _bad_utf8(raw: bytes) -> bytes:
    """{"urls": [{"url": <a msgpack str of these bytes>}]}: a str that need not be UTF-8."""
    return _pack({"urls": [{"url": "\x00"}]}).replace(b"\xa1\x00", bytes([0xd9, len(raw)]) + raw)


_GOOD_ITEM = st.fixed_dictionaries(
    {"url": _URL.filter(lambda url: isinstance(url, str)), "depth": st.integers(0, 5),
     "priority": st.integers(-10, 10), "hops": st.integers(0, 3), "redirects": st.integers(0, 3),
     "via": st.none() | st.just("http://site-0.test/"), "seen": st.booleans()})
_BODIES = st.one_of(
    st.lists(_GOOD_ITEM, min_size=1, max_size=20).map(lambda items: _pack({"urls": items})),
    st.lists(_PEER_ITEM, min_size=1, max_size=20).map(lambda items: _pack({"urls": items})),
    _ANY.map(lambda value: _pack({"urls": value})),
    _ANY.map(_pack),
    st.binary(min_size=1, max_size=40).map(_bad_utf8),
    st.tuples(st.lists(_PEER_ITEM, min_size=1, max_size=5), st.floats(0, 1)).map(  # cut short
        lambda pair: _pack({"urls": pair[0]})[: int(len(_pack({"urls": pair[0]})) * pair[1])]),
    st.integers(1, 5000).map(lambda depth: b"\x91" * depth + b"\xc0"),  # arrays nested deep
    st.binary(max_size=200),
)


def test_msgpack_peer_bodies_never_give_a_5xx(cluster):
    member, peer = cluster
    headers = {"Content-Type": "application/msgpack", "Authorization": f"Bearer {SECRET}",
               "X-Crawler-Forwarded-By": peer.node_id}
    conn = http.client.HTTPConnection(member.host, member.port, timeout=10)
    answers: dict[int, int] = {}

    @seed(SEED)
    @settings(max_examples=300, deadline=None, database=None, derandomize=False,
              suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large])
    @given(body=_BODIES)
    def post(body: bytes) -> None:
        conn.request("POST", "/v1/urls", body=body, headers=headers)
        response = conn.getresponse()
        response.read()
        answers[response.status] = answers.get(response.status, 0) + 1
        assert response.status < 500, (response.status, body[:200])

    started = time.monotonic()
    try:
        post()
    finally:
        conn.close()
    assert time.monotonic() - started < 60
    assert answers.get(202, 0) > 0 and answers.get(400, 0) > 0, answers  # both kinds were reached
    for node in cluster:
        assert_alive(node)
    assert_heartbeats_ok(member, peer)
    assert_heartbeats_ok(peer, member)


def test_a_request_aiohttp_cannot_parse_is_a_400_without_a_traceback_in_the_log(start_node):
    # Found by schemathesis's first probe (a NUL byte in a header): aiohttp answered 400 and
    # logged the parser's traceback at ERROR, once per request any client sent.
    node = start_node("fuzz-raw")
    for request in (b"GET /healthz HTTP/1.1\r\nHost: x\r\nX-Probe: \x00\r\n\r\n",
                    b"GET /healthz HTTP/1.1\r\nHost: x\r\nContent-Length: -1\r\n\r\n",
                    b"GET /" + b"a" * 70_000 + b" HTTP/1.1\r\n\r\n"):
        with socket.create_connection((node.host, node.port), timeout=10) as sock:
            sock.sendall(request)
            answer = sock.recv(65536)
            assert re.match(rb"HTTP/1\.[01] 400 ", answer), (request[:60], answer[:200])
    assert_alive(node)


def test_a_command_body_is_read_whole_and_within_the_read_timeout(start_node):
    # One read of the stream gave what had arrived: a body in two segments was cut, a 400.
    node = start_node("fuzz-slow", extra_args=["--api-read-timeout-s", "1"])
    body = json.dumps({"reason": "x" * 150}).encode()
    head = (b"POST /v1/control/resume?local=1 HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n"
            b"Content-Length: %d\r\n\r\n" % len(body))
    with socket.create_connection((node.host, node.port), timeout=10) as sock:
        sock.sendall(head + body[:20])
        time.sleep(0.2)  # the rest in a segment of its own
        sock.sendall(body[20:])
        answer = sock.recv(65536)
        assert re.match(rb"HTTP/1\.1 200 ", answer), answer[:300]
    with socket.create_connection((node.host, node.port), timeout=10) as sock:
        sock.sendall(head + body[:20])  # and never the rest
        started = time.monotonic()
        answer = sock.recv(65536)
        assert re.match(rb"HTTP/1\.1 408 ", answer) and time.monotonic() - started < 5, answer[:300]
    assert_alive(node)


# --- the description itself -------------------------------------------------------------------


def test_the_description_is_valid_openapi_and_lists_every_route(tmp_path):
    document = openapi_document()
    schemathesis.openapi.from_dict(document).validate()  # against the OpenAPI 3.1 meta-schema
    json.dumps(document)  # plain data

    app = make_app(Node(Settings(node_id="doc", data_dir=tmp_path / "doc").node_config()))
    served = {(route.method.lower(), route.resource.canonical) for route in app.router.routes()
              if route.resource is not None}
    documented = {(method, path) for path, item in document["paths"].items() for method in item
                  if method != "parameters"}
    assert served == documented
    for method, path in documented:
        operation = document["paths"][path][method]
        assert ("security" in operation) == (path in PROTECTED), (method, path)
        assert "503" in operation["responses"], (method, path)
