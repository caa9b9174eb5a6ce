"""Global admission (admission.py): pressure sources, the fetch-through API's limiter and quota
pause, per-IP gates and permits. Pure: time is passed in, resolution is injected."""

from __future__ import annotations

import pytest

from crawler_node.config import PolitenessConfig
from crawler_node.core.backoff import HostBackoffPolicy
from crawler_node.core.limiter import AimdLimiter, Outcome
from crawler_node.core.outcomes import ErrorKind, FetchOutcome
from crawler_node.core.signals import ApiSignal, Signal
from crawler_node.node.admission import API_LIMIT, API_QUOTA, ApiGate, FetchAdmission, IpGate, IpGates
from crawler_node.node.hosts import HostTable, Place, Step
from crawler_node.runtime.wakeup import Wakeup
from crawler_node.settings import Settings, SettingsError

OK = Signal(FetchOutcome.OK, Outcome.SUCCESS)
API_429 = Signal(FetchOutcome.API_THROTTLED, Outcome.NEUTRAL, ApiSignal.THROTTLED, retry_after_s=1.0)
API_509 = Signal(FetchOutcome.API_QUOTA, Outcome.NEUTRAL, ApiSignal.QUOTA)
SITE_429 = Signal(FetchOutcome.THROTTLED, Outcome.THROTTLED)
TIMEOUT = Signal(FetchOutcome.TIMEOUT, Outcome.TIMEOUT, error=ErrorKind.TIMEOUT)


class Source:
    """A pressure source as a stage is one: it answers needs_backout() about itself."""

    def __init__(self, name: str) -> None:
        self.name = name
        self.full = False

    def needs_backout(self) -> bool:
        return self.full


def host_table(start: int = 2, ceiling: int = 4) -> HostTable:
    return HostTable(config=PolitenessConfig(host_turn_s=0.0, min_host_delay_s=0.0),
                     new_limiter=lambda: AimdLimiter(start=start, floor=1, ceiling=ceiling),
                     backoff_policy=HostBackoffPolicy(), work=Wakeup(), started_at=0.0)


def api_gate(start: int = 8, reset_s: float = 60.0) -> ApiGate:
    return ApiGate(limiter=AimdLimiter(start=start, floor=1, ceiling=16), quota_reset_s=reset_s)


def test_the_apis_429_cuts_the_api_limiter_and_a_sites_429_does_not() -> None:
    gate = api_gate(start=8)
    tickets = [gate.limiter.acquire() for _ in range(8)]
    gate.release(tickets.pop(), SITE_429, now=0.0)  # the API delivered the site's 429: a success
    gate.release(tickets.pop(), TIMEOUT, now=0.0)  # the site's news, not the API's
    assert gate.limiter.decreases == 0
    gate.release(tickets.pop(), API_429, now=0.0)
    assert gate.limiter.limit == 4 and gate.throttled == 1
    for ticket in tickets:
        gate.release(ticket, API_429, now=0.0)  # same window: one cut
    assert gate.limiter.decreases == 1


def test_a_509_pauses_until_the_reset_time_or_a_resume() -> None:
    gate = api_gate(reset_s=60.0)
    assert gate.release(gate.limiter.acquire(), API_509, now=100.0) is True
    assert gate.paused(now=100.0) and gate.paused_reason == "quota" and gate.resume_at == 160.0
    assert gate.release(gate.limiter.acquire(), API_509, now=101.0) is False  # already paused
    assert gate.quota_hits == 2 and gate.pauses == 1
    assert gate.paused(now=159.9)
    assert not gate.paused(now=160.0)  # the reset time came
    assert gate.resumes == 1 and gate.snapshot(now=161.0)["paused"] is False
    gate.release(gate.limiter.acquire(), API_509, now=200.0)
    assert gate.resume(now=201.0, by="operator") is True
    assert gate.resume(now=202.0, by="operator") is False
    assert not gate.paused(now=202.0)


def test_a_509_with_retry_after_resumes_then() -> None:
    gate = api_gate(reset_s=3600.0)
    gate.release(gate.limiter.acquire(), Signal(FetchOutcome.API_QUOTA, Outcome.NEUTRAL, ApiSignal.QUOTA, 30.0),
                 now=0.0)
    assert gate.resume_at == 30.0


def test_admission_reasons_in_order_and_leasing_held_only_for_lasting_ones() -> None:
    parse, outbox = Source("parse"), Source("outbox")
    admission = FetchAdmission(api=api_gate(start=1), ip_gates=None, pressure=[parse, outbox])
    with pytest.raises(ValueError):
        FetchAdmission(api=None, ip_gates=None, pressure=[parse, Source("parse")])
    assert admission.blocked(now=0.0) is None
    ticket = admission.api.limiter.acquire()
    assert admission.blocked(now=0.0) == API_LIMIT
    assert admission.hold_leasing(now=0.0) is None  # a full API window frees up by itself
    outbox.full = True
    assert admission.blocked(now=0.0) == "outbox" == admission.hold_leasing(now=0.0)
    parse.full = True
    assert admission.blocked(now=0.0) == "parse"  # in the order the sources were given
    admission.api.release(ticket, API_509, now=0.0)
    assert admission.blocked(now=1.0) == API_QUOTA == admission.hold_leasing(now=1.0)
    assert admission.resume_at() == 60.0


def test_a_permit_takes_and_returns_every_slot() -> None:
    hosts = host_table()
    admission = FetchAdmission(api=api_gate(start=4), ip_gates=None)
    hosts.add_work("a.test", 1, now=0.0)
    state = hosts.get("a.test")
    hosts.bind_ip_gate(state, IpGate("192.0.2.1", limit=3))
    permit = admission.acquire(hosts.start_request(state, 0.0), state.ip_gate)
    assert (state.limiter.in_flight, admission.api.limiter.in_flight, state.ip_gate.in_flight) == (1, 1, 1)
    woken, paused = admission.release(permit, OK, now=0.0)
    hosts.cancel_request(state, permit.host_ticket, 0.0)
    assert (state.limiter.in_flight, admission.api.limiter.in_flight, state.ip_gate.in_flight) == (0, 0, 0)
    assert woken == set() and paused is False


def test_an_ip_gate_parks_hosts_and_a_release_wakes_them() -> None:
    hosts = host_table(start=4, ceiling=4)
    gate = IpGate("192.0.2.1", limit=2)
    states = []
    for name in ("a.test", "b.test", "c.test"):
        hosts.add_work(name, 5, now=0.0)
        state = hosts.get(name)
        hosts.bind_ip_gate(state, gate)
        states.append(state)
    gate.acquire()
    gate.acquire()  # two requests in flight to the address, whichever hosts sent them
    assert hosts.next_host(0.0) is None  # every host has room of its own, the address has none
    assert {s.place for s in states} == {Place.BLOCKED} and gate.waiting == set(states)
    woken = gate.release()
    assert woken == set(states) and gate.waiting == set()
    hosts.wake(woken, 0.0)
    state = hosts.next_host(0.0)
    assert state is not None and hosts.next_step(state, 0.0)[0] is Step.REFILL  # a lease first, then its robots.txt


async def test_ip_gates_resolve_once_and_share_one_gate_per_address() -> None:
    answers = {"a.test": "192.0.2.1", "b.test": "192.0.2.1", "c.test": "192.0.2.9"}
    lookups: list[str] = []
    now = [0.0]

    async def resolve(host: str) -> str:
        lookups.append(host)
        if host not in answers:
            raise OSError("no such host")
        return answers[host]

    gates = IpGates(limit=2, cache_s=300.0, clock=lambda: now[0], resolve=resolve)
    a = await gates.gate_for("a.test")
    b = await gates.gate_for("b.test:8080")  # a non-default port is still the same address
    c = await gates.gate_for("c.test")
    assert a is b and a is not c and a.hosts == 2 and gates.shared() == 1
    assert await gates.gate_for("nowhere.test") is None and gates.failures == 1
    assert (await gates.gate_for("198.51.100.7")).address == "198.51.100.7"  # literals: no lookup
    assert (await gates.gate_for("[2001:db8::1]:8443")).address == "2001:db8::1"
    await gates.address_of("a.test")
    assert lookups == ["a.test", "b.test", "c.test", "nowhere.test"]  # cached
    now[0] = 301.0
    await gates.address_of("a.test")
    assert lookups[-1] == "a.test"  # the cache entry expired


def test_settings_validate_the_flow_control_options() -> None:
    Settings().validate()
    for bad in ({"latency_rise_factor": 1.0}, {"shed_low_water": 10, "shed_high_water": 5},
                {"host_backoff_initial_s": 10.0, "host_backoff_cap_s": 1.0}, {"api_limit_start": 1000},
                {"api_limit_header": "X Api"}, {"ip_inflight_limit": -1}, {"pipeline_max_bytes": 0},
                {"store_lag_s": -1.0}):
        with pytest.raises(SettingsError):
            Settings(**bad).validate()
    Settings(shed_high_water=0, shed_low_water=10, latency_rise_factor=0.0, ip_inflight_limit=0).validate()
