"""The real docker-compose.yml on a real Docker engine: the cluster in containers, killed,
partitioned, stopped and started, scaled, its peers found by DNS.

Each class is one compose project (a stack shared by its tests, which run in file order and
act on the same crawl): fixed peers (up --build, user/volume/health, kill + start, stop +
start), a partition, and the DNS-found scalable service (3 -> 5 nodes, stop + start mid-crawl).
Ground truth is testweb's own count of what it served, read through its published port.
Without an engine the tests skip; in CI (.ci/docker-setup) CRAWLER_REQUIRE_DOCKER=1 makes
them required. The pure part of cluster.peerdns is tested here too, without an engine.
"""

from __future__ import annotations

import socket
import time
from collections import Counter
from urllib.parse import urlsplit

import pytest
from compose_helpers import SECRET, ComposeStack, duplicates, get_json, post_json, require_docker, wait_until
from conftest import read_crawl_log, roots

from crawler_node.cluster.membership import Membership
from crawler_node.cluster.peerdns import DnsCandidates, address_url, parse_peer_dns

FIXED = ["node1", "node2", "node3"]
UID = "10001"  # the Dockerfile's USER


# --- the pure part of --peer-dns ---------------------------------------------------------------


def test_peer_dns_names_and_urls():
    assert parse_peer_dns("crawler", 8080) == ("crawler", 8080)
    fqdn = "crawler.default.svc.cluster.local"
    assert parse_peer_dns(f"{fqdn}.:9000", 8080) == (fqdn, 9000)
    for bad in ("", "a b", "http://x", "x:0", "x:port"):
        with pytest.raises(ValueError):
            parse_peer_dns(bad, 8080)
    assert address_url("10.0.0.5", 8080) == "http://10.0.0.5:8080"
    assert address_url("fd00::5", 8080) == "http://[fd00::5]:8080"


def test_dns_candidates_join_each_new_address_once_and_again_when_its_member_went_down():
    membership = Membership("me", "http://10.0.0.1:8080", {}, now=0.0, suspect_after_s=1, down_after_s=2)
    candidates = DnsCandidates(own={"10.0.0.1"})
    assert candidates.targets({"10.0.0.1", "10.0.0.2", "10.0.0.3"}, membership) == ["10.0.0.2", "10.0.0.3"]
    membership.merge([("b", "http://10.0.0.2:8080"), ("c", "http://10.0.0.3:8080")], 0.0)
    candidates.joined("10.0.0.2", "b")
    candidates.joined("10.0.0.3", "c")
    candidates.failed("10.0.0.3")  # a join that failed is asked again
    assert candidates.targets({"10.0.0.2", "10.0.0.3"}, membership) == ["10.0.0.3"]
    candidates.joined("10.0.0.3", "c")
    assert candidates.targets({"10.0.0.2", "10.0.0.3"}, membership) == []
    membership.observe_ok("c", 3.0)
    membership.tick(3.0)  # b silent for 3 s: down; asking DNS's address again may bring it back
    assert candidates.targets({"10.0.0.2", "10.0.0.3"}, membership) == ["10.0.0.2"]
    # an address that left DNS is forgotten; back, it is joined through again
    assert candidates.targets({"10.0.0.3"}, membership) == []
    membership.observe_ok("b", 3.5)
    assert candidates.targets({"10.0.0.2", "10.0.0.3"}, membership) == ["10.0.0.2"]
    candidates.own_address("10.0.0.2")  # it answered with this node's own id
    assert candidates.targets({"10.0.0.2", "10.0.0.3"}, membership) == []


def _port_free_on_both_loopbacks() -> int:
    for _ in range(50):
        with socket.socket(socket.AF_INET6) as v6:
            v6.bind(("::1", 0))
            port = v6.getsockname()[1]
            with socket.socket(socket.AF_INET) as v4:
                try:
                    v4.bind(("127.0.0.1", port))
                except OSError:
                    continue
                return port
    raise RuntimeError("no port free on both 127.0.0.1 and ::1")


def loopback_dns_starter(start_node, proxy: str):
    """``start(node_id, seeds)`` for a (127.0.0.1) and b (::1), one port on both, each finding
    the other through --peer-dns `localhost` (c-ares reads /etc/hosts); not waited for."""
    port = _port_free_on_both_loopbacks()
    common = ["--peer-dns", f"localhost:{port}", "--peer-dns-interval-s", "0.5", "--heartbeat-interval-s", "0.3",
              "--startup-grace-s", "1", "--secret", SECRET]
    hosts = {"a": "127.0.0.1", "b": "[::1]"}

    def start(node_id: str, seeds: list[str], *, host: str | None = None, extra: tuple[str, ...] = ()):
        """``host``: the other loopback, as a restart that got the other member's address."""
        host = host or hosts[node_id]
        return start_node(node_id, host=host, port=port, proxy=proxy, seeds=seeds, wait=False,
                          extra_args=[*common, *extra, "--advertise", f"http://{host}:{port}"])

    return start


@pytest.mark.timeout(120)
def test_nodes_found_by_dns_on_loopback_join_and_share_the_crawl(start_testweb, start_node):
    """Without an engine: `localhost` resolves (c-ares) to 127.0.0.1 and ::1, one node on each,
    the same port; neither is given a peer, each finds the other through --peer-dns."""
    hosts = 10
    web = start_testweb(hosts=hosts, pages=20, seed=5)
    expected = set(web.expected())
    start = loopback_dns_starter(start_node, web.url)
    a, b = start("a", roots(hosts)), start("b", [])
    a.wait_healthy(30)
    b.wait_healthy(30)

    wait_one_cluster(a, b, "a and b in one cluster")
    wait_until(lambda: a.status()["idle"] and b.status()["idle"]
               and all(web.stats()["urls"].get(u, 0) for u in expected), 90, "the crawl complete")
    fetched = {node.node_id: {line["host"] for line in read_crawl_log(node.data_dir)} for node in (a, b)}
    assert fetched["a"] and fetched["b"], "both crawled a share"
    for node_id, node_hosts in fetched.items():
        owners = {get_json(f"{a.url}/v1/ring?host={h}")["owner"] for h in node_hosts}
        assert owners == {node_id}, f"{node_id} fetched hosts owned by {owners}"
    assert duplicates(web.stats()["urls"]) == 0


@pytest.mark.timeout(150)
def test_a_member_found_by_dns_remembers_its_peers_across_a_restart(start_testweb, start_node):
    """a and b find each other through `localhost` (as above) and crawl; both stop. a starts
    again while b is still down (its address refuses, as a replica not yet back in DNS would be
    absent): a lists b from its data directory (members.json), so b's arc is b's, not a's,
    until the failure detector finds b down. Then b returns: nothing either fetched before the
    stop is fetched again, also when every root is submitted again."""
    hosts = 10
    web = start_testweb(hosts=hosts, pages=20, seed=5)
    expected = set(web.expected())
    start = loopback_dns_starter(start_node, web.url)

    a, b = start("a", roots(hosts)), start("b", [])
    a.wait_healthy(30)
    b.wait_healthy(30)
    wait_one_cluster(a, b, "a and b in one cluster")
    wait_until(lambda: a.status()["idle"] and b.status()["idle"]
               and all(web.stats()["urls"].get(u, 0) for u in expected), 90, "the crawl complete")
    b_hosts = {line["host"] for line in read_crawl_log(b.data_dir)}
    assert b_hosts, "b crawled a share"
    assert b.stop(timeout_s=15) == 0 and a.stop(timeout_s=15) == 0
    before = dict(web.stats()["urls"])

    a = start("a", [])
    a.wait_healthy(30)
    assert "b" in members_of(a), f"a does not remember b: {members_of(a)}\n{a.log_tail(20)}"
    assert (tmp := a.data_dir / "members.json").exists(), tmp
    wait_until(lambda: members_of(a)["b"] == "down", 20, "a finds b down")
    b = start("b", [])
    b.wait_healthy(30)
    wait_one_cluster(a, b, "b back in the cluster")
    post_json(f"{a.url}/v1/urls", {"urls": [f"http://site-{i}.test/" for i in range(hosts)]}, secret=SECRET)
    wait_until(lambda: a.status()["idle"] and b.status()["idle"], 60, "both idle again")
    again = fetched_again(web, before)
    assert again == [], f"{len(again)} URLs fetched again after the restarts, e.g. {again[:5]}"
    owners = {get_json(f"{a.url}/v1/ring?host={h}")["owner"] for h in b_hosts}
    assert owners == {"b"}


@pytest.mark.timeout(150)
def test_a_handback_for_a_member_whose_address_moved_reaches_it_and_nothing_is_fetched_again(start_testweb,
                                                                                             start_node):
    """As after `docker compose stop` and `start`, when the network hands the replicas their
    addresses in another order: b stops before the crawl begins and a crawls b's arc for it.
    Both restart with each other's address: a remembers b at what is now a's own address. a's
    first sweep hands b what it fetched for it; that batch must reach b, not whoever answers at
    b's old address (before: a took its own batch in as a replica, and b fetched its arc again
    once the roots were submitted again)."""
    hosts = 10
    web = start_testweb(hosts=hosts, pages=20, seed=5)
    expected = set(web.expected())
    start = loopback_dns_starter(start_node, web.url)

    a, b = start("a", []), start("b", [])
    a.wait_healthy(30)
    b.wait_healthy(30)
    wait_one_cluster(a, b, "a and b in one cluster")
    b_hosts = {h for i in range(hosts) if get_json(f"{a.url}/v1/ring?host={(h := f'site-{i}.test')}")["owner"] == "b"}
    assert b_hosts, "b owns an arc"
    assert b.stop(timeout_s=15) == 0
    wait_until(lambda: members_of(a)["b"] == "down", 20, "a finds b down")
    post_json(f"{a.url}/v1/urls", {"urls": roots(hosts)}, secret=SECRET)
    wait_until(lambda: get_json(f"{a.url}/v1/status?scope=local&fresh=1")["idle"]  # b is down: not the cluster's
               and all(web.stats()["urls"].get(u, 0) for u in expected), 90, "a crawled everything, b's arc too")
    assert a.stop(timeout_s=15) == 0
    before = dict(web.stats()["urls"])

    # a first, where b was; b stays a member (not down) for 30 s, so a's first sweep hands it
    # its arc, and the batch goes to the address a remembers for b: a's own now.
    a = start("a", [], host="[::1]", extra=("--suspect-after-s", "25", "--down-after-s", "30"))
    a.wait_healthy(30)

    def sent() -> dict[str, int]:
        return a.status()["cluster"]["counters"]

    wait_until(lambda: sent()["forward_misdirected"] + sent()["sent_seen"] > 0, 20, "a's first batch for b sent")
    b = start("b", [], host="127.0.0.1")  # where a was
    b.wait_healthy(30)
    wait_one_cluster(a, b, "a and b in one cluster again")
    wait_until(lambda: a.status()["cluster"]["outbox_total"] == 0, 30, "a's outbox acknowledged")
    post_json(f"{a.url}/v1/urls", {"urls": roots(hosts)}, secret=SECRET)
    wait_until(lambda: a.status()["idle"] and b.status()["idle"], 60, "both idle again")
    again = fetched_again(web, before)
    assert again == [], f"{len(again)} URLs fetched again after the restarts, e.g. {again[:5]}"
    assert sent()["forward_misdirected"] > 0, "a's first batch for b went to b's old address, which was a's own"


# --- helpers over loopback nodes ----------------------------------------------------------------


def members_of(node) -> dict[str, str]:
    """Each member `node` lists, by id, with its state."""
    return {m["id"]: m["state"] for m in get_json(f"{node.url}/v1/members", secret=SECRET)["members"]}


def wait_one_cluster(a, b, what: str) -> None:
    """Until a and b each list both as alive (20 s at most)."""
    both = {a.node_id: "alive", b.node_id: "alive"}
    wait_until(lambda: members_of(a) == members_of(b) == both, 20, what)


def fetched_again(web, before: dict[str, int]) -> list[str]:
    """The URLs testweb served more often than the counts in `before`."""
    return sorted(url for url, count in web.stats()["urls"].items() if count > before.get(url, 0))


# --- helpers over a stack ------------------------------------------------------------------------


def expected_urls(stack: ComposeStack) -> set[str]:
    return set(stack.testweb("/_testweb/expected")["urls"])


def served(stack: ComposeStack) -> dict[str, int]:
    return stack.testweb("/_testweb/stats")["urls"]


def fetched_share(stack: ComposeStack, expected: set[str]) -> float:
    counts = served(stack)
    return sum(1 for url in expected if counts.get(url, 0) > 0) / len(expected)


def crawl_done(stack: ComposeStack, nodes: list[tuple[str, int]], expected: set[str]) -> bool:
    """Every expected URL served at least once, and every node idle (nothing queued, leased
    or owed to a peer)."""
    counts = served(stack)
    if any(counts.get(url, 0) == 0 for url in expected):
        return False
    for service, index in nodes:
        status = stack.try_node(service, "/v1/status?scope=local", index)
        if status is None or status["idle"] is not True:
            return False
    return True


def refetch_report(stack: ComposeStack, containers: list[str], urls: list[str]) -> str:
    """Who fetched `urls` (per host, each node's fetches of them in order) and what the nodes
    logged of takeovers and membership: what a failure needs to be explained, as the stack is
    gone after the test."""
    wanted = set(urls)
    fetchers: dict[str, list[str]] = {}
    for container in containers:
        for line in stack.crawl_log(container):
            if line.get("url") in wanted:
                fetchers.setdefault(urlsplit(line["url"]).hostname or "", []).append(str(line.get("node")))
    per_host = {host: dict(Counter(nodes)) for host, nodes in sorted(fetchers.items())}
    logged = []
    for container in containers:
        log = stack.docker("logs", container, check=False)
        logged += [f"{container}: {line}" for line in (log.stdout + log.stderr).splitlines()
                   if "took over" in line or "membership:" in line or "came back" in line][-15:]
    return f"fetches per host and node: {per_host}; logged:\n" + "\n".join(logged)


def live_view(stack: ComposeStack, service: str, index: int = 1) -> set[str]:
    members = stack.try_node(service, "/v1/members", index)
    return {m["id"] for m in members["members"] if m["state"] == "alive"} if members else set()


def down_in_view(stack: ComposeStack, service: str, member: str, index: int = 1) -> bool:
    """``member`` is down as ``service`` sees it: its arc is routed to its successors."""
    members = stack.try_node(service, "/v1/members", index)
    return bool(members) and any(m["id"] == member and m["state"] == "down" for m in members["members"])


def addresses(stack: ComposeStack, containers: list[str]) -> dict[str, list[str]]:
    """Each container's addresses on its networks."""
    return {c: sorted(n.get("IPAddress", "") for n in stack.inspect(c)["NetworkSettings"]["Networks"].values())
            for c in containers}


def health(stack: ComposeStack, container: str) -> str:
    return stack.inspect(container)["State"].get("Health", {}).get("Status", "none")


def stop_nodes_and_check_exit_codes(stack: ComposeStack, services: list[str], containers: list[str]) -> None:
    started = time.monotonic()
    stack.compose("stop", "-t", "30", *services, timeout=120)
    took = time.monotonic() - started
    for container in containers:
        state = stack.inspect(container)["State"]
        assert state["Status"] == "exited" and state["ExitCode"] == 0, f"{container}: {state}"
    assert took < 30, f"SIGTERM to exit took {took:.1f}s (the grace period is 30 s)"


# --- fixed peers: node1..node3 ---------------------------------------------------------------------


@pytest.fixture(scope="class")
def fixed_stack(tmp_path_factory):
    require_docker()
    stack = ComposeStack(name="fixed", workdir=tmp_path_factory.mktemp("compose-fixed"), nodes=FIXED)
    try:
        stack.up(build=True)  # the image is built once here; the other stacks reuse it
        yield stack
    finally:
        stack.down()


@pytest.mark.slow
@pytest.mark.tools  # a Docker engine
@pytest.mark.timeout(600)
class TestFixedPeers:
    def test_up_build_runs_unprivileged_with_writable_volumes_and_healthy_checks(self, fixed_stack):
        stack = fixed_stack
        for service in ["testweb", *FIXED]:
            assert health(stack, stack.container(service)) == "healthy", service
        for service in FIXED:
            container = stack.container(service)
            assert stack.docker("exec", container, "id", "-u").stdout.strip() == UID
            probe = stack.docker("exec", container, "sh", "-c", "touch /data/.probe && stat -c %u /data/.probe && "
                                 "rm /data/.probe && stat -c %u /data/frontier.sqlite3")
            assert probe.stdout.split() == [UID, UID], f"{service}: /data not the crawler's: {probe.stdout}"
            assert stack.inspect(container)["Config"]["User"].split(":")[0] == UID
        assert live_view(stack, "node1") == set(FIXED)
        # the seeds went to node1 only; it forwarded each host to its owner, and all three crawl
        wait_until(lambda: all(stack.crawl_log(stack.container(s)) for s in FIXED), 60, "every node fetching")

    def test_killed_node_is_taken_over_and_handed_back_complete_with_few_duplicates(self, fixed_stack):
        stack = fixed_stack
        expected = expected_urls(stack)
        wait_until(lambda: fetched_share(stack, expected) >= 0.2, 120, "a fifth of the crawl")
        assert fetched_share(stack, expected) < 0.6, "the crawl is too fast to kill a node mid-crawl"
        node2_hosts = {f"site-{i}.test" for i in range(30)
                       if stack.node("node1", f"/v1/ring?host=site-{i}.test")["owner"] == "node2"}
        assert node2_hosts
        stack.docker("kill", stack.container("node2"))
        killed_at = time.monotonic()
        wait_until(lambda: down_in_view(stack, "node1", "node2") and down_in_view(stack, "node3", "node2"),
                   10, "node2 seen down by node1 and node3")
        assert time.monotonic() - killed_at < 5
        assert stack.node("node1", "/v1/ring?host=" + min(node2_hosts))["live_owner"] in ("node1", "node3")

        def taken_over() -> bool:
            hosts = {line["host"] for service in ("node1", "node3")
                     for line in stack.crawl_log(stack.container(service)) if line.get("fetched_at", "") > ""}
            return bool(hosts & node2_hosts)

        wait_until(taken_over, 30, "node1 or node3 fetching node2's hosts")
        stack.docker("start", stack.container("node2"))
        stack.forget_ports()
        wait_until(lambda: health(stack, stack.container("node2")) == "healthy", 60, "node2 healthy again")
        wait_until(lambda: all("node2" in live_view(stack, s) for s in ("node1", "node3")), 20, "node2 alive again")
        wait_until(lambda: crawl_done(stack, [(s, 1) for s in FIXED], expected), 240, "the crawl complete")
        counts = served(stack)
        assert not [url for url in expected if counts.get(url, 0) == 0]
        handed = sum(stack.node(s, "/v1/status?scope=local")["cluster"]["counters"]["handed_off"] for s in FIXED)
        assert handed > 0, "the takeover nodes handed node2's hosts back"
        assert {line["host"] for line in stack.crawl_log(stack.container("node2"))} & node2_hosts
        dup = duplicates(counts)
        assert dup <= 0.02 * len(expected), f"{dup} duplicate fetches of {len(expected)}"

    def test_stop_start_with_the_same_volumes_exits_0_and_fetches_nothing_again(self, fixed_stack):
        stack = fixed_stack
        expected = expected_urls(stack)
        assert crawl_done(stack, [(s, 1) for s in FIXED], expected)
        before = stack.testweb("/_testweb/stats?summary=1")["totals"]["requests"]
        done_before = {s: stack.node(s, "/v1/status?scope=local")["frontier"]["done"] for s in FIXED}
        stop_nodes_and_check_exit_codes(stack, FIXED, [stack.container(s) for s in FIXED])
        stack.compose("start", *FIXED, timeout=120)
        stack.forget_ports()
        wait_until(lambda: all(health(stack, stack.container(s)) == "healthy" for s in FIXED), 90, "nodes healthy")
        wait_until(lambda: all(live_view(stack, s) == set(FIXED) for s in FIXED), 30, "all three alive")

        def settled() -> bool:  # past the startup grace, leasing would have begun
            statuses = [stack.try_node(s, "/v1/status?scope=local") for s in FIXED]
            return all(st is not None and st["uptime_s"] > 6 and st["idle"] for st in statuses)

        wait_until(settled, 60, "every node idle after its startup grace")
        for service in FIXED:
            frontier = stack.node(service, "/v1/status?scope=local")["frontier"]
            assert frontier["queued"] == 0 and frontier["leased"] == 0, f"{service}: {frontier}"
            assert frontier["done"] == done_before[service], "the durable frontier came back"
        assert stack.testweb("/_testweb/stats?summary=1")["totals"]["requests"] == before, "fetched again"


# --- a partition -------------------------------------------------------------------------------------


@pytest.fixture(scope="class")
def partition_stack(tmp_path_factory):
    require_docker()
    stack = ComposeStack(name="partition", workdir=tmp_path_factory.mktemp("compose-partition"), nodes=FIXED)
    try:
        stack.up(build=True)
        yield stack
    finally:
        stack.down()


@pytest.mark.slow
@pytest.mark.tools  # a Docker engine
@pytest.mark.timeout(600)
class TestPartition:
    def test_a_20s_partition_loses_nothing_and_leaves_nothing_stuck(self, partition_stack):
        stack = partition_stack
        expected = expected_urls(stack)
        wait_until(lambda: fetched_share(stack, expected) >= 0.15, 120, "a part of the crawl")
        node3_hosts = {f"site-{i}.test" for i in range(30)
                       if stack.node("node1", f"/v1/ring?host=site-{i}.test")["owner"] == "node3"}
        container = stack.container("node3")
        aliases = ["node3", "crawler"]
        stats_before = stack.testweb("/_testweb/stats")["hosts"]
        stack.docker("network", "disconnect", stack.network(), container)
        try:
            wait_until(lambda: down_in_view(stack, "node1", "node3") and down_in_view(stack, "node2", "node3"), 10,
                       "node3 seen down on the other side")
            time.sleep(20)  # the partition itself: its length is what this test is about
        finally:
            alias_args = [arg for alias in aliases for arg in ("--alias", alias)]
            stack.docker("network", "connect", *alias_args, stack.network(), container)
        stats_during = stack.testweb("/_testweb/stats")["hosts"]
        stack.forget_ports()
        wait_until(lambda: all("node3" in live_view(stack, s) for s in ("node1", "node2")), 30, "node3 back")
        wait_until(lambda: crawl_done(stack, [(s, 1) for s in FIXED], expected), 300, "the crawl complete")
        counts = served(stack)
        assert not [url for url in expected if counts.get(url, 0) == 0], "URLs lost"
        for service in FIXED:
            frontier = stack.node(service, "/v1/status?scope=local")["frontier"]
            assert frontier["queued"] == 0 and frontier["leased"] == 0, f"stuck on {service}: {frontier}"
        # Duplicates come from the disputed arc only (node3's hosts, crawled by both sides while
        # apart) and number at most what was served of it during the partition.
        disputed = sum(stats_during[h]["requests"] - stats_before[h]["requests"] for h in node3_hosts)
        dup_other = duplicates({u: n for u, n in counts.items() if u.split("/")[2] not in node3_hosts})
        dup = duplicates(counts)
        outcomes: dict[str, int] = {}
        for line in stack.crawl_log(container):
            outcomes[line.get("outcome", "?")] = outcomes.get(line.get("outcome", "?"), 0) + 1
        print(f"partition: {dup} duplicates of {len(expected)}; {disputed} requests to node3's hosts while apart; "
              f"node3's crawl.log outcomes {outcomes}")
        assert dup_other <= 0.02 * len(expected), f"{dup_other} duplicates outside the disputed arc"
        assert dup <= disputed + 0.02 * len(expected), f"{dup} duplicates, {disputed} served of the disputed arc"


# --- peers found by DNS: the scalable `node` service ---------------------------------------------------


@pytest.fixture(scope="class")
def dns_stack(tmp_path_factory):
    require_docker()
    stack = ComposeStack(name="dns", workdir=tmp_path_factory.mktemp("compose-dns"), nodes=["node"],
                         profiles=("dns",))
    try:
        stack.up("testweb", "node", scale={"node": 3}, build=True)
        yield stack
    finally:
        stack.down()


def node_ids(stack: ComposeStack, count: int) -> dict[int, str]:
    """replica index -> node id (the container's hostname)."""
    return {i: stack.inspect(stack.container("node", i))["Config"]["Hostname"] for i in range(1, count + 1)}


@pytest.mark.slow
@pytest.mark.tools  # a Docker engine
@pytest.mark.timeout(600)
class TestPeerDns:
    def test_three_replicas_find_each_other_by_dns(self, dns_stack):
        stack = dns_stack
        ids = node_ids(stack, 3)
        wait_until(lambda: all(live_view(stack, "node", i) == set(ids.values()) for i in ids), 30,
                   "every replica sees all three")
        answer = post_json(f"http://{stack.port('node', 1)}/v1/urls",
                           {"urls": [{"url": f"http://site-{i}.test/"} for i in range(4)]}, secret=SECRET)
        assert answer["rejected"] == 0 and answer["duplicate"] == 0, answer  # accepted here or forwarded

    def test_scaling_3_to_5_moves_only_the_new_arcs_and_covers_everything(self, dns_stack):
        stack = dns_stack
        expected = expected_urls(stack)
        hosts = [f"site-{i}.test" for i in range(30)]
        wait_until(lambda: fetched_share(stack, expected) >= 0.15, 120, "a part of the crawl")
        before = {h: stack.node("node", f"/v1/ring?host={h}", 1)["owner"] for h in hosts}
        stack.up("testweb", "node", scale={"node": 5})
        ids = node_ids(stack, 5)
        new = {ids[4], ids[5]}
        wait_until(lambda: all(live_view(stack, "node", i) == set(ids.values()) for i in ids), 30,
                   "every replica sees all five")
        after = {h: stack.node("node", f"/v1/ring?host={h}", 1)["owner"] for h in hosts}
        moved = {h for h in hosts if after[h] != before[h]}
        assert moved and all(after[h] in new for h in moved), "only hosts of the new arcs move, to the new nodes"
        assert fetched_share(stack, expected) < 1.0, "scaled mid-crawl"
        # who fetched each host so far: its owner before, or the new node that took its arc (or
        # the other new node: the two join one after the other, so a host of the new arcs may
        # belong to the first for the moment before the second comes)
        for i, node_id in ids.items():
            for line in stack.crawl_log(stack.container("node", i)):
                if line.get("status") and line["host"] in before:
                    host = line["host"]
                    assert node_id in (before[host], after[host]) or {node_id, after[host]} <= new, (
                        node_id, line["url"])

    def test_unfinished_crawl_resumes_after_stop_and_start(self, dns_stack):
        stack = dns_stack
        expected = expected_urls(stack)
        ids = node_ids(stack, 5)
        containers = [stack.container("node", i) for i in ids]
        assert fetched_share(stack, expected) < 0.9, "the crawl is unfinished when the nodes stop"
        addresses_before = addresses(stack, containers)
        stop_nodes_and_check_exit_codes(stack, ["node"], containers)
        counts_at_stop = served(stack)
        stack.compose("start", "node", timeout=120)
        stack.forget_ports()
        assert node_ids(stack, 5) == ids, "a restarted replica keeps its id (its hostname)"
        wait_until(lambda: all(health(stack, c) == "healthy" for c in containers), 90, "replicas healthy")
        # The network hands the addresses out again, most often in another order: what each
        # replica remembered of its peers' addresses (members.json) is then another's.
        moved = {c: (addresses_before[c], now) for c, now in addresses(stack, containers).items()
                 if now != addresses_before[c]}
        wait_until(lambda: crawl_done(stack, [("node", i) for i in ids], expected), 240, "the crawl complete")
        counts = served(stack)
        assert not [url for url in expected if counts.get(url, 0) == 0], "URLs lost"
        again = [url for url, n in counts_at_stop.items() if n and counts.get(url, 0) > n and url in expected]
        holds = {ids[i]: (stack.try_node("node", "/v1/status?scope=local", i) or {}).get("queues", {})
                 .get("fetch", {}).get("hold") for i in ids}  # why each replica began to lease
        assert len(again) <= 0.02 * len(expected), (f"{len(again)} URLs fetched before the stop were fetched again; "
                                                    f"holds: {holds}; addresses moved: {moved}; "
                                                    f"{refetch_report(stack, containers, again)}")
        dup = duplicates(counts)
        assert dup <= 0.02 * len(expected), f"{dup} duplicate fetches"
