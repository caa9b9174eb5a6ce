"""Heartbeats survive a peer that answers nonsense.

Three members, all in every node's --peer list: `a` and `c` are real nodes, `f` is
tests/fake_peer.py answering every `GET /v1/members` (the heartbeat) with 200 and a malformed
body: a list where the object belongs, `members` a string, a list of numbers, a member without
a URL, `leaving` a string with `members` an object, and bytes that are not JSON. After a full
cycle of those, `c` is SIGKILLed: `a` must still see it go down as fast as it sees any dead
peer, because one member's bad answers must not stop the failure detector for the others.

Timing with the default settings (heartbeat every 0.5 s, down after 2.0 s of silence): `c`'s
last answer is at most one interval before the kill, and a tick comes every interval, so `a`
marks `c` down at most 2.0 + 0.5 s after the kill; the test allows 3 s (the documented bound).
"""

from __future__ import annotations

import subprocess
import sys
import time
from pathlib import Path

from cluster_helpers import get_json, peers_of, plan, wait_until

from crawler_node.tools.node_process import NodeProcess

SECRET = "heartbeat-faults-token"
DOWN_WITHIN_S = 3.0
POLL_S = 0.1
MALFORMED_FOR_S = 6.0  # every malformed kind served (fake_peer.py: one kind a second)
FAKE_PEER = Path(__file__).parent / "fake_peer.py"


def fake_stats(url: str) -> dict:
    return get_json(f"{url}/_fake/stats", timeout=2)


def state_of(observer: NodeProcess, member: str) -> str | None:
    members = get_json(f"{observer.url}/v1/status?scope=local", timeout=2)["members"]
    return next((m["state"] for m in members if m["id"] == member), None)


def assert_alive_and_serving(node: NodeProcess) -> None:
    assert node.proc is not None and node.proc.poll() is None, f"{node.node_id} exited:\n{node.log_tail()}"
    assert _answers(f"{node.url}/healthz"), f"{node.node_id} does not answer /healthz:\n{node.log_tail()}"


def test_malformed_heartbeat_answers_do_not_stop_failure_detection(start_node):
    addresses = plan(["a", "f", "c"])
    peers = peers_of(addresses)
    fake_host, fake_port = addresses["f"]
    fake = subprocess.Popen([sys.executable, str(FAKE_PEER), fake_host, str(fake_port), "1", "--mode",
                             "malformed-members"], stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL,
                            stderr=subprocess.DEVNULL)
    try:
        wait_until(lambda: _answers(f"{peers['f']}/healthz"), 15, "fake peer up")
        nodes = {}
        for node_id in ("a", "c"):
            host, port = addresses[node_id]
            nodes[node_id] = start_node(node_id, host=host, port=port, peers=peers, wait=False,
                                        extra_args=["--secret", SECRET])
        for node in nodes.values():
            node.wait_healthy(30)
        a, c = nodes["a"], nodes["c"]
        wait_until(lambda: state_of(a, "c") == "alive", 15, "a sees c alive")

        # A full cycle of malformed answers: one kind a second, six kinds.
        wait_until(lambda: (fake_stats(peers["f"])["members_for_s"] or 0) >= MALFORMED_FOR_S, 20,
                   f"{MALFORMED_FOR_S:g} s of malformed heartbeat answers")
        assert_alive_and_serving(a)

        c.kill()
        killed = time.monotonic()
        seen: list[tuple[float, str | None]] = []  # (seconds after the kill, when answered; c's state)
        while time.monotonic() - killed <= DOWN_WITHIN_S:
            state = state_of(a, "c")
            seen.append((time.monotonic() - killed, state))
            if state == "down":
                break
            time.sleep(POLL_S)
        down_at = next((at for at, state in seen if state == "down"), None)
        states = ", ".join(f"{at:.1f}s {state}" for at, state in seen[::5])
        served = fake_stats(peers["f"])
        assert down_at is not None and down_at <= DOWN_WITHIN_S, (
            f"a did not see c down within {DOWN_WITHIN_S:g} s after c was SIGKILLed ({states}); "
            f"f served heartbeats {served['members_served']}, the latest {served['members_idle_s']:.1f} s ago."
            f" a's log:\n{a.log_tail(60)}")
        print(f"\na saw c down {down_at:.2f} s after the kill")
        assert_alive_and_serving(a)
    finally:
        fake.kill()
        fake.wait(timeout=10)


def _answers(url: str) -> bool:
    try:
        get_json(url, timeout=1)
        return True
    except Exception:  # noqa: BLE001 - any failure to answer is "not answering"
        return False
