"""`submit` to a cluster says what happened to each URL: queued on the node asked, forwarded to
the node that owns it, duplicate, or rejected."""

from __future__ import annotations

import os
import re
import subprocess
import sys

from cluster_helpers import FAST_CLUSTER, SECURED, owner_of, peers_of, plan, wait_until
from conftest import roots

HOSTS = 20


def test_submit_reports_what_was_forwarded_to_the_owners(start_testweb, start_node):
    web = start_testweb(hosts=HOSTS, pages=5, seed=81)
    addresses = plan(["a", "b"])
    peers = peers_of(addresses)
    nodes = {node_id: start_node(node_id, host=host, port=port, proxy=web.url, peers=peers, wait=False,
                                 extra_args=[*FAST_CLUSTER, *SECURED])
             for node_id, (host, port) in addresses.items()}
    for node in nodes.values():
        node.wait_healthy(30)
    wait_until(lambda: owner_of(nodes["a"], "site-0.test") in ("a", "b"), 30, "a ring")
    urls = roots(HOSTS)
    mine = sum(1 for url in urls if owner_of(nodes["a"], url.split("/")[2]) == "a")
    env = {key: value for key, value in os.environ.items() if not key.startswith("CRAWLER_")}
    run = subprocess.run([sys.executable, "-m", "crawler_node", "submit", "--node", nodes["a"].url,
                          "--secret", SECURED[1], *urls, "http://site-0.test/"],  # the last one twice
                         capture_output=True, text=True, timeout=60, env=env)
    assert run.returncode == 0, run.stderr
    numbers = re.fullmatch(r"accepted (\d+) here, (\d+) forwarded to the nodes that own them, duplicate (\d+), "
                           r"rejected (\d+)\n", run.stdout)
    assert numbers, run.stdout
    accepted, forwarded, duplicate, rejected = map(int, numbers.groups())
    assert (accepted, forwarded, duplicate, rejected) == (mine, HOSTS - mine, 1, 0)
