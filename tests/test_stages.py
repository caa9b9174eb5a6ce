"""Each pipeline component built alone, with its typed dependencies and nothing else: the
intake, the parse stage, the store stage, the lease keeper and the dispatcher. Real frontier
(SQLite in tmp_path), real workers; the parse and store stages run over both the thread
worker and the process worker (one contract, two implementations)."""

from __future__ import annotations

import asyncio
import json
import random
from collections.abc import AsyncIterator, Collection, Mapping
from dataclasses import dataclass
from pathlib import Path

import pytest

from crawler_node.cluster.membership import Membership
from crawler_node.cluster.routing import Router
from crawler_node.config import IntakeConfig, ParseConfig, PolitenessConfig, StoreConfig
from crawler_node.core.backoff import NO_BACKOFF, BackoffState, HostBackoffPolicy, RetryPolicy
from crawler_node.core.limiter import AimdLimiter
from crawler_node.core.response import FetchResult
from crawler_node.core.scope import Scope
from crawler_node.core.signals import LatencyLevel
from crawler_node.core.verdict import ResponseRules, judge_page, judge_robots
from crawler_node.frontier import FrontierService, Lease, UrlEntry
from crawler_node.node.admission import FetchAdmission, Permit
from crawler_node.node.budget import HeldBytes
from crawler_node.node.dispatch import Dispatcher
from crawler_node.node.hosts import HostState, HostTable
from crawler_node.node.intake import Intake, Prepared
from crawler_node.node.leases import LeaseKeeper
from crawler_node.node.parse_stage import ParseStage
from crawler_node.node.stage_items import InboundFull, PageResult
from crawler_node.node.store_stage import StoreStage
from crawler_node.runtime.supervisor import Supervisor
from crawler_node.runtime.wakeup import Wakeup
from crawler_node.store.worker import StoreWorker

RULES = ResponseRules(retry=RetryPolicy(rng=random.Random(1)), host_backoff=HostBackoffPolicy(),
                      host_backoff_after=2, retry_after_cap_s=300.0, latency=None, through_api=False)
PAGE = b"<html><body><a href='/a'>a</a> <a href='http://other.test/b'>b</a></body></html>"


class NoOutboxes:
    """One node: nothing is ever owed to a peer."""

    def __init__(self) -> None:
        self.noted: list[Mapping[str, int]] = []

    def full(self, peers: Collection[str]) -> bool:
        return False

    async def wait_for_space(self, peers: Collection[str]) -> None:
        raise AssertionError("one node never waits for a peer")

    def note_outboxed(self, counts: Mapping[str, int]) -> None:
        self.noted.append(counts)


class Recorder:
    """The next stage, taking pages as they come."""

    def __init__(self) -> None:
        self.pages: list[PageResult] = []
        self.arrived = Wakeup()

    async def put(self, page: PageResult) -> None:
        self.pages.append(page)
        self.arrived.notify()


def alone() -> Router:
    return Router(membership=Membership("a", "http://127.0.0.1:1", {}, now=0.0), weights={}, vnodes=16,
                  key_by="host")


def host_table() -> HostTable:
    return HostTable(config=PolitenessConfig(host_turn_s=0.0, min_host_delay_s=0.0),
                     new_limiter=lambda: AimdLimiter(start=2, floor=1, ceiling=4), backoff_policy=RULES.host_backoff,
                     work=Wakeup(), started_at=0.0)


@pytest.fixture
async def frontier(tmp_path: Path) -> AsyncIterator[FrontierService]:
    service = FrontierService(path=tmp_path / "frontier.sqlite3", lease_timeout_s=60.0)
    await service.open()
    yield service
    await service.close()


def page(lease: Lease, status: int = 200, body: bytes = PAGE) -> PageResult:
    result = FetchResult(url=lease.url, status=status, body=body, headers=[("Content-Type", "text/html")])
    verdict = judge_page(_NEVER_THROTTLED, result, attempt=lease.attempts, in_current_round=True, now=0.0,
                         rules=RULES)
    return PageResult(lease=lease, fetch=result, verdict=verdict)


@dataclass
class _Host:
    crawl_delay: float = 0.0
    throttle_streak: int = 0
    backoff: BackoffState = NO_BACKOFF
    latency: LatencyLevel | None = None


_NEVER_THROTTLED = _Host()


# ------------------------------------------------------------------------------ intake
async def test_the_intake_normalises_once_scopes_and_takes_urls_in_durably(frontier: FrontierService) -> None:
    hosts = host_table()
    intake = Intake(config=IntakeConfig(inbound_capacity=100, max_hops=3), frontier=frontier, hosts=hosts,
                    router=alone(), outboxes=NoOutboxes(), scope=Scope(allow_hosts=["*.test"]), clock=lambda: 0.0)
    prepared = intake.prepare(["HTTP://A.test:80/x#frag", "mailto:me@a.test", "http://b.example/",
                               {"url": "http://c.test/", "depth": 2, "priority": 7}])
    assert [entry.url for entry in prepared.entries] == ["http://a.test/x", "http://c.test/"]
    assert prepared.invalid == [(1, "mailto:me@a.test", "scheme")]
    assert prepared.out_of_scope == [("http://b.example/", "host_not_allowed")]
    result = await intake.take(prepared)
    assert len(result.accepted) == 2 and (await frontier.totals())["queued"] == 2
    assert hosts.get("a.test").queued == 1 and hosts.get("c.test").queued == 1
    again = await intake.take(intake.prepare(["http://a.test/x"]))
    assert again.duplicates == 1 and intake.idle()


async def test_the_intake_refuses_a_batch_over_its_capacity_instead_of_queueing_it(frontier) -> None:
    intake = Intake(config=IntakeConfig(inbound_capacity=10, max_hops=3), frontier=frontier, hosts=host_table(),
                    router=alone(), outboxes=NoOutboxes(), scope=Scope(), clock=lambda: 0.0)
    first = asyncio.create_task(intake.take(Prepared([UrlEntry(f"http://a.test/{i}", "a.test") for i in range(8)])))
    await asyncio.sleep(0)  # the first batch is on its way to the frontier
    assert not intake.needs_backout()
    with pytest.raises(InboundFull):
        await intake.take(Prepared([UrlEntry(f"http://b.test/{i}", "b.test") for i in range(5)]))
    await first
    assert intake.snapshot()["blocked_puts"] == 1 and (await frontier.totals())["queued"] == 8
    full = asyncio.create_task(intake.take(Prepared([UrlEntry(f"http://c.test/{i}", "c.test") for i in range(10)])))
    await asyncio.sleep(0)  # a batch as large as the whole inbound is on its way
    assert intake.needs_backout()
    with pytest.raises(InboundFull):
        intake.admit()  # what the API asks before it reads a body
    await full
    intake.admit()
    assert intake.snapshot()["blocked_puts"] == 2


# ------------------------------------------------------------------------------ parse stage
@pytest.mark.parametrize("workers", [0, 1], ids=["thread", "process"])
async def test_the_parse_stage_attaches_the_links_in_scope_and_passes_pages_on(workers: int) -> None:
    store, taken = Recorder(), Wakeup()
    stage = ParseStage(config=ParseConfig(max_links_per_page=100, parse_workers=workers, worker_nice=0, parse_queue=2,
                                          warc_metadata=False),
                       scope=Scope(allow_hosts=["a.test"]), store=store, ring_generation=lambda: 0, taken=taken)
    supervisor = Supervisor(on_fatal=pytest.fail)
    await stage.start(supervisor)
    try:
        lease = Lease(1, "http://a.test/", "a.test", 0, 0, 1, 0)
        await stage.put(page(lease))
        assert await store.arrived.wait_until(lambda: len(store.pages) == 1, 10)
        links = store.pages[0].links
        assert [(link.url, link.depth) for link in links] == [("http://a.test/a", 1)]  # other.test: out of scope
        assert await taken.wait_until(stage.idle, 5)
        assert stage.snapshot()["links_discovered"] == 2
    finally:
        await supervisor.stop()
        await stage.close()


async def test_a_full_parse_queue_asks_for_backout() -> None:
    stage = ParseStage(config=ParseConfig(max_links_per_page=10, parse_workers=0, worker_nice=0, parse_queue=1,
                                          warc_metadata=False),
                       scope=Scope(), store=Recorder(), ring_generation=lambda: 0, taken=Wakeup())
    assert not stage.needs_backout()
    await stage.put(page(Lease(1, "http://a.test/", "a.test", 0, 0, 1, 0)))  # no loop running: it stays
    assert stage.needs_backout() and stage.name == "parse" and not stage.idle()
    await stage.close()


# ------------------------------------------------------------------------------ store stage
@pytest.mark.parametrize("in_process", [False, True], ids=["thread", "process"])
async def test_the_store_stage_writes_then_commits_outcomes_and_links(tmp_path: Path, frontier: FrontierService,
                                                                      in_process: bool) -> None:
    await frontier.add([UrlEntry("http://a.test/", "a.test"), UrlEntry("http://a.test/gone", "a.test")])
    [(leases, _)] = await frontier.lease_many([("a.test", 2)])
    hosts, taken = host_table(), Wakeup()
    held = HeldBytes(limit=10_000, released=taken)
    config = StoreConfig(warc_max_bytes=10**7, store_in_process=in_process, store_queue=4, store_lag_s=5.0,
                         worker_nice=0)
    stage = StoreStage(config=config, worker=StoreWorker(tmp_path, node_id="a", config=config),
                       frontier=frontier, hosts=hosts, router=alone(), outboxes=NoOutboxes(), held=held,
                       node_id="a", taken=taken, clock=lambda: 0.0)
    supervisor = Supervisor(on_fatal=pytest.fail)
    await stage.start(supervisor)
    try:
        ok, missing = page(leases[0]), page(leases[1], status=404, body=b"no")
        ok.links = [UrlEntry("http://a.test/next", "a.test", 1, -1)]
        for result in (ok, missing):
            held.hold(len(result.fetch.body))
            await stage.put(result)
        assert await taken.wait_until(lambda: stage.idle() and stage.snapshot()["fetched"] == 2, 10)
    finally:
        await supervisor.stop()
        await stage.close()
    totals = await frontier.totals()
    assert (totals["done"], totals["queued"], totals["leased"]) == (2, 1, 0)  # the 404 is a result, not a failure
    assert held.held == 0 and hosts.get("a.test").queued == 1
    logged = [json.loads(line) for line in (tmp_path / "crawl.log").read_text().splitlines()]
    assert [(line["url"], line["status"], line["outcome"]) for line in logged] == [
        ("http://a.test/", 200, "ok"), ("http://a.test/gone", 404, "http_error")]


# ------------------------------------------------------------------------------ leases and dispatch
class Pressure:
    name = "store"

    def __init__(self) -> None:
        self.full = True

    def needs_backout(self) -> bool:
        return self.full


class Collected:
    """A store that only keeps what it is given."""

    def __init__(self) -> None:
        self.pages: list = []

    async def put(self, page) -> None:
        self.pages.append(page)


class FakeFetch:
    """The fetch stage's part, answered at once: robots.txt says nothing, every page is a 200."""

    def __init__(self, hosts: HostTable) -> None:
        self._hosts = hosts
        self.fetched: list[str] = []
        self.answered = Wakeup()

    async def fetch_robots(self, state: HostState, permit: Permit, lease: Lease) -> None:
        answer = judge_robots(FetchResult(url=f"http://{state.host}/robots.txt", status=404), now=0.0, rules=RULES)
        self._hosts.finish_robots(state, "http", permit.host_ticket, answer, 0.0)

    async def fetch_page(self, state: HostState, lease: Lease, permit: Permit) -> None:
        result = FetchResult(url=lease.url, status=200)
        verdict = judge_page(state, result, attempt=1, in_current_round=True, now=0.0, rules=RULES)
        self._hosts.finish_page(state, permit.host_ticket, verdict, 0.0)
        self.fetched.append(lease.url)
        self.answered.notify()


async def test_the_dispatcher_waits_for_admission_by_notification_then_leases_and_fetches(frontier) -> None:
    await frontier.add([UrlEntry(f"http://h{i % 3}.test/{i}", f"h{i % 3}.test") for i in range(9)])
    work, pressure = Wakeup(), Wakeup()
    hosts = HostTable(config=PolitenessConfig(host_turn_s=0.0, min_host_delay_s=0.0),
                      new_limiter=lambda: AimdLimiter(start=2, floor=1, ceiling=4),
                      backoff_policy=RULES.host_backoff, work=work, started_at=0.0)
    hosts.load(await frontier.hosts_with_work(), 0.0)
    store = Pressure()
    admission = FetchAdmission(api=None, ip_gates=None, pressure=[store])
    leases = LeaseKeeper(frontier=frontier, hosts=hosts, admission=admission, pressure=pressure,
                         on_returned=lambda: None, clock=lambda: 0.0, store=Collected())
    fetch = FakeFetch(hosts)
    dispatcher = Dispatcher(hosts=hosts, admission=admission, leases=leases, fetch=fetch,  # type: ignore[arg-type]
                            serves=lambda host: True, global_inflight=4, work=work, pressure=pressure,
                            on_fatal=pytest.fail, clock=lambda: 0.0)
    supervisor = Supervisor(on_fatal=pytest.fail)
    leases.start(supervisor)
    dispatcher.start(supervisor)
    try:
        await asyncio.sleep(0.05)
        assert fetch.fetched == [] and admission.stats.rejections["store"] == 1  # held back, one wait counted
        store.full = False
        pressure.notify()  # what a stage does when it drains
        assert await fetch.answered.wait_until(lambda: len(fetch.fetched) == 9, 5)
        assert await work.wait_until(dispatcher.idle, 5)
    finally:
        dispatcher.stop()
        leases.stop()
        await supervisor.stop()
    assert sorted(fetch.fetched) == sorted(f"http://h{i % 3}.test/{i}" for i in range(9))
    assert (await frontier.totals())["leased"] == 9  # leased; outcomes are the store stage's to commit


class GatedLeasing:
    """The frontier's lease_many held until the test opens the gate: a round under way."""

    def __init__(self, frontier: FrontierService) -> None:
        self._frontier = frontier
        self.asked = asyncio.Event()
        self.gate = asyncio.Event()
        self.answered = asyncio.Event()  # set in the step that hands the answer to the round

    async def lease_many(self, requests):
        self.asked.set()
        await self.gate.wait()
        answer = await self._frontier.lease_many(requests)
        self.answered.set()
        return answer

    def __getattr__(self, name: str):
        return getattr(self._frontier, name)


async def test_a_lease_round_under_way_when_leasing_stops_gives_its_leases_back_not_to_a_buffer(frontier) -> None:
    # A node leaving with --handoff-on-exit stops leasing and hands its queue on: a round that
    # ends after that must not leave rows leased in a buffer nobody will fetch (they would
    # come back as queued only at the very end, after the node said it was drained).
    await frontier.add([UrlEntry(f"http://a.test/{i}", "a.test") for i in range(4)])
    work, pressure = Wakeup(), Wakeup()
    hosts = HostTable(config=PolitenessConfig(host_turn_s=0.0, min_host_delay_s=0.0),
                      new_limiter=lambda: AimdLimiter(start=2, floor=1, ceiling=4),
                      backoff_policy=RULES.host_backoff, work=work, started_at=0.0)
    hosts.load(await frontier.hosts_with_work(), 0.0)
    gated = GatedLeasing(frontier)
    leases = LeaseKeeper(frontier=gated, hosts=hosts,  # type: ignore[arg-type]
                         admission=FetchAdmission(api=None, ip_gates=None, pressure=[]), pressure=pressure,
                         on_returned=lambda: None, clock=lambda: 0.0, store=Collected())
    supervisor = Supervisor(on_fatal=pytest.fail)
    supervisor.closing()  # the node is stopping: the refill stage may end
    leases.start(supervisor)
    state = hosts.get("a.test")
    assert state is not None
    try:
        leases.want_refill(state)
        await asyncio.wait_for(gated.asked.wait(), 5)
        leases.stop()
        gated.gate.set()
        await asyncio.wait_for(gated.answered.wait(), 5)  # the round has taken its answer, in the same step
        assert not leases.idle()  # the round's leases, to go back
        assert not state.buffer and (await frontier.totals())["leased"] > 0
        await leases.flush()
        totals = await frontier.totals()
        assert (totals["queued"], totals["leased"]) == (4, 0)
    finally:
        await supervisor.stop()
