"""The node's configuration inside: one frozen, self-validating group per stage.

The outside is flat and stays so: every setting has one name as a flag (``--fetch-timeout-s``),
a variable (``CRAWLER_FETCH_TIMEOUT_S``) and a TOML key (``fetch_timeout_s``), read into
``Settings`` (settings.py). Inside, each stage takes its own group, built from Settings in one
place (``Settings.node_config``), and checks its own invariants when it is made, so a component
built directly (as the tests build them) is checked as the node's are:

    FetchConfig      one request and the fetch stage (fetch.fetcher, node.fetch_stage)
    RetryConfig      retries and host backoff (core.backoff, core.signals)
    PolitenessConfig per-host limits, pacing, robots.txt, host memory (node.hosts)
    AdmissionConfig  the global gates: a fetch-through API, per-IP limits, bytes held
    FrontierConfig   the durable queue: leases, page caps, parked hosts, shedding, recrawl
    IntakeConfig     the inbound queue (node.intake)
    ParseConfig      the parse stage (node.parse_stage)
    StoreConfig      the store stage and its worker (node.store_stage, store.worker)
    ClusterConfig    membership, routing and the outboxes (cluster.cluster)
    SiteHealthConfig a site's refusals and how they are waited out (core.refusals, core.verdict)
    TestHooks        faults the tests stage in a real node: not settings (no flag, no key)

A group's field has the flat setting's name, so a problem names what the user sets. A default
is written once, here: Settings takes its defaults from these groups. Rules that span groups
(a lease outlives a fetch) are Settings.validate's.
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from dataclasses import MISSING, dataclass, field, fields
from pathlib import Path
from typing import Any

from crawler_node.core.recrawl_policy import RecrawlPolicy
from crawler_node.core.robots_groups import valid_product_token
from crawler_node.core.scope import Scope

SITEMAP_MODES = ("off", "robots", "probe")
RING_KEYS = ("host", "domain")
_HEADER_BAD = " :\r\n"
# Niceness of the parser and store processes (0-19). The event loop paces the whole pipeline;
# where CPU is short, the workers yield to it (their bounded queues then slow the fetching),
# where it is not, this changes nothing.
WORKER_NICE = 10


class ConfigError(ValueError):
    """One or more of a group's values break its rules; ``problems`` says each."""

    def __init__(self, problems: list[str]) -> None:
        super().__init__("; ".join(problems))
        self.problems = problems


def _raise_any(problems: list[str]) -> None:
    if problems:
        raise ConfigError(problems)


def _at_least(config: object, minimum: float, *names: str) -> list[str]:
    return [f"{name} must be >= {minimum:g}, got {getattr(config, name)}" for name in names
            if getattr(config, name) < minimum]


def _not_negative(config: object, *names: str) -> list[str]:
    return [f"{name} must be >= 0" for name in names if getattr(config, name) < 0]


@dataclass(frozen=True, slots=True, kw_only=True)
class FetchConfig:
    user_agent: str = "crawler-node/0.1 (+https://example.invalid/crawler-node)"
    proxy: str | None = None  # fetch through this HTTP proxy (testweb, a forward proxy, a scraping API)
    allow_private: bool = False
    global_inflight: int = 64
    # hosts whose idle keep-alive connections are kept open for their next request (fetch.fetcher)
    keepalive_hosts: int = 512
    connect_timeout_s: float = 10.0
    fetch_timeout_s: float = 30.0
    max_body_bytes: int = 10_000_000
    max_redirects: int = 10  # redirect hops a chain may take; the next one ends it (too_many_redirects)
    # True: the cookies a site sets are kept (in memory, per node, bounded) and sent back to it,
    # as Scrapy and Heritrix do; False: never kept, never sent, as StormCrawler and Nutch do
    cookies: bool = True
    robots_max_bytes: int = 500_000
    # sitemaps: "off", "robots" (the Sitemap: lines of robots.txt), or "probe" (also /sitemap.xml)
    sitemaps: str = "robots"
    # TLS and DNS for direct fetches
    ca_bundle: str | None = None  # PEM file of the CAs to trust instead of the system's
    dns_server: str | None = None  # HOST[:PORT] of the resolver for direct fetches (default: the system's)
    dns_cache_hosts: int = 10_000  # names whose answers are cached (each for its TTL, at most dns_cache_s)
    dns_cache_s: float = 300.0
    # Seconds c-ares waits for the DNS server's answer, per try (2 tries): glibc's resolver
    # waits 5 s (resolv.conf `timeout:5`, `attempts:2`), so a name the system resolves, slowly,
    # resolves here too. c-ares' own default (2 s, newer versions) and the 3 s used before gave
    # up on a server answering in ~5 s: its hosts were never crawled.
    dns_timeout_s: float = 5.0

    def __post_init__(self) -> None:
        problems = _at_least(self, 1, "global_inflight", "max_body_bytes", "dns_cache_hosts")
        problems += [f"{name} must be > 0" for name in ("connect_timeout_s", "fetch_timeout_s", "dns_timeout_s")
                     if getattr(self, name) <= 0]
        problems += _not_negative(self, "max_redirects", "keepalive_hosts", "robots_max_bytes", "dns_cache_s")
        if self.sitemaps not in SITEMAP_MODES:
            problems.append(f"sitemaps must be 'off', 'robots' or 'probe', got {self.sitemaps!r}")
        if self.dns_server is not None:
            server = self.dns_server
            host, _, port = server.rpartition(":") if server.count(":") == 1 else (server, "", "53")
            if not (host or server) or not port.isdigit() or not 0 < int(port) < 65536:
                problems.append(f"dns_server {server!r} must look like HOST[:PORT]")
        _raise_any(problems)


@dataclass(frozen=True, slots=True, kw_only=True)
class RetryConfig:
    retry_budget: int = 3
    retry_base_s: float = 1.0
    retry_cap_s: float = 60.0
    retry_after_cap_s: float = 300.0
    # a host that keeps answering 429 without Retry-After: pause it, doubling, forgiven later
    host_backoff_after: int = 2  # throttled rounds in a row (no success between) before pausing
    host_backoff_initial_s: float = 60.0
    host_backoff_cap_s: float = 3600.0
    host_backoff_forgive_s: float = 600.0
    # a host whose latency rises this many times above its own baseline (and by at least
    # latency_rise_min_s) gets its limit cut as if it had throttled; 0 turns this off
    latency_rise_factor: float = 3.0
    latency_rise_min_s: float = 0.5

    def __post_init__(self) -> None:
        problems = _not_negative(self, "retry_budget", "host_backoff_forgive_s", "latency_rise_min_s")
        problems += _at_least(self, 1, "host_backoff_after")
        if not 0 < self.host_backoff_initial_s <= self.host_backoff_cap_s:
            problems.append("need 0 < host_backoff_initial_s <= host_backoff_cap_s")
        if self.latency_rise_factor != 0 and self.latency_rise_factor <= 1:
            problems.append(f"latency_rise_factor must be 0 (off) or > 1, got {self.latency_rise_factor}")
        _raise_any(problems)


@dataclass(frozen=True, slots=True, kw_only=True)
class PolitenessConfig:
    """Per-host pacing and memory (node.hosts), robots.txt (core.robots)."""

    # The defaults are the polite pace's (settings.PACES: --pace fills what was not given).
    host_limit_start: int = 1
    host_limit_floor: int = 1
    host_limit_ceiling: int = 1
    min_host_delay_s: float = 1.0  # every host paced at least this much, as a Crawl-delay; 0 = robots.txt's only
    max_crawl_delay_s: float = 30.0
    robots_agent: str = "crawler-node"
    robots_ttl_s: float = 86_400.0  # rules are fetched again after this long (RFC 9309 2.4)
    robots_error_retry_s: float = 30.0  # first wait after a robots.txt that could not be had (doubles)
    robots_retry_cap_s: float = 1800.0  # the longest of those waits
    # robots.txt unavailable (5xx, 429, network, DNS, TLS) this many times in a row: the
    # authority's queued URLs end with outcome robots_unavailable
    robots_max_attempts: int = 6
    robots_cache_bytes: int = 4_000_000  # robots.txt bodies of hosts no longer in memory, at most
    # A host with no work for this long leaves memory, and sooner while more than
    # host_memory_target hosts are in it (its pauses and Crawl-delay stay on disk, its
    # robots.txt answer in a bounded cache). Memory grows with the hosts being crawled, not
    # with every host ever seen.
    host_idle_s: float = 60.0
    host_memory_target: int = 10_000
    host_turn_s: float = 300.0  # while others wait, a host with work keeps its place this long

    def __post_init__(self) -> None:
        problems = _at_least(self, 1, "host_limit_floor", "robots_max_attempts")
        if not self.host_limit_floor <= self.host_limit_start <= self.host_limit_ceiling:
            problems.append("host limits must satisfy floor <= start <= ceiling, got "
                            f"{self.host_limit_floor} <= {self.host_limit_start} <= {self.host_limit_ceiling}")
        if self.min_host_delay_s < 0:
            problems.append(f"min_host_delay_s must be >= 0, got {self.min_host_delay_s}")
        if not 0 < self.robots_error_retry_s <= self.robots_retry_cap_s or self.robots_ttl_s <= 0:
            problems.append("need 0 < robots_error_retry_s <= robots_retry_cap_s and robots_ttl_s > 0")
        if min(self.robots_cache_bytes, self.host_memory_target, self.host_turn_s) < 0:
            problems.append("robots_cache_bytes, host_memory_target, active_hosts and host_turn_s must be >= 0")
        problems += _not_negative(self, "host_idle_s", "max_crawl_delay_s")
        if not valid_product_token(self.robots_agent):
            # RFC 9309 2.2.1: a product token is letters, "_" and "-"; "MyBot/1.0" would match no group
            problems.append(f"robots_agent must be a product token (letters, _ and -), got {self.robots_agent!r}")
        _raise_any(problems)


@dataclass(frozen=True, slots=True, kw_only=True)
class AdmissionConfig:
    """The global gates of rule 5 besides the stages' own: a fetch-through API's limits, the
    per-IP limit of direct fetches, the bytes held between fetch and store."""

    api_limit_header: str = "X-Api-Limit"  # header on the API's 429/509 naming the limit hit
    api_limit_start: int = 0  # first guess of the API's concurrency; 0 = global_inflight
    api_quota_reset_s: float = 3600.0  # after a 509, resume this long later (or POST /v1/resume)
    # direct fetches only (no proxy): hosts on one IP address share this many in-flight requests
    ip_inflight_limit: int = 8  # 0 = no per-IP limit
    ip_limit_per_node: bool = False  # each node applies ip_inflight_limit alone (no shares agreed)
    pipeline_max_bytes: int = 128_000_000  # response bodies held between fetch and store

    def __post_init__(self) -> None:
        problems = _at_least(self, 1, "pipeline_max_bytes") + _not_negative(self, "api_quota_reset_s")
        if not self.api_limit_header or any(c in self.api_limit_header for c in _HEADER_BAD):
            problems.append(f"api_limit_header {self.api_limit_header!r} is not a header name")
        if self.api_limit_start < 0:
            problems.append("api_limit_start must be between 0 and global_inflight")
        if self.ip_inflight_limit < 0:
            problems.append("shed_high_water and ip_inflight_limit must be >= 0")
        _raise_any(problems)


@dataclass(frozen=True, slots=True, kw_only=True)
class FrontierConfig:
    lease_timeout_s: float = 120.0
    max_pages_per_host: int = 100_000  # URLs one host may give the frontier (0: no cap)
    # Hosts with work kept in memory, at most (0 = no bound): a broad crawl queues URLs of
    # millions of hosts, and the others wait on disk for their turn, taken in host-name order
    # (Heritrix's inactive queues), hosts given a seed or a submitted URL first.
    active_hosts: int = 10_000
    # load shedding: over the high-water mark (queued URLs) for shed_after_s, the lowest
    # priority URLs are deferred on disk until the queue drains below the low-water mark
    shed_high_water: int = 1_000_000  # 0 = never shed
    shed_low_water: int = 500_000
    shed_after_s: float = 30.0
    recrawl_priority: int = -1000  # below every discovered link: discovery goes first

    def __post_init__(self) -> None:
        problems = []
        if self.lease_timeout_s <= 0:
            problems.append("lease_timeout_s must be > 0")
        if self.max_pages_per_host < 0:
            problems.append(f"max_pages_per_host must be >= 0 (0: no limit), got {self.max_pages_per_host}")
        if self.active_hosts < 0:
            problems.append("robots_cache_bytes, host_memory_target, active_hosts and host_turn_s must be >= 0")
        if self.shed_high_water < 0:
            problems.append("shed_high_water and ip_inflight_limit must be >= 0")
        if self.shed_high_water and not 0 <= self.shed_low_water < self.shed_high_water:
            problems.append("need 0 <= shed_low_water < shed_high_water")
        problems += _not_negative(self, "shed_after_s")
        _raise_any(problems)


@dataclass(frozen=True, slots=True, kw_only=True)
class IntakeConfig:
    inbound_capacity: int = 20_000  # URLs waiting for the frontier thread
    max_hops: int = 3  # times a URL may be forwarded on by a node that disagrees on its owner

    def __post_init__(self) -> None:
        _raise_any(_at_least(self, 1, "inbound_capacity") + _not_negative(self, "max_hops"))


@dataclass(frozen=True, slots=True, kw_only=True)
class ParseConfig:
    parse_workers: int = 1  # processes; 0 = a thread in this process
    parse_queue: int = 128  # pages waiting for a parser: ~40 ms of parsing at 3,500 pages/s, which
    # absorbs a parser that waits for a CPU on a busy machine (32 closed admission 25% of the time)
    worker_nice: int = WORKER_NICE
    max_links_per_page: int = 2_000
    max_parse_bytes: int = 5_000_000  # links are extracted from this much of a page; beyond, counted as truncated
    read_sitemaps: bool = True  # a page that is not HTML is read as a sitemap (FetchConfig.sitemaps not "off")
    sitemap_max_urls: int = 50_000  # per sitemap file (sitemaps.org)
    sitemap_max_bytes: int = 52_428_800  # uncompressed, per sitemap file (sitemaps.org: 50 MiB)
    warc_metadata: bool = True  # every HTML page's links come back for its WARC metadata record
    # user pipelines: "module:callable" or an entry point name in the group crawler_node.pipelines
    pipelines: tuple[str, ...] = ()
    pipeline_budget_s: float = 2.0  # per pipeline per page; past it the pipeline is stopped, its output dropped
    worker_deadline_s: float = 60.0  # a worker that answers nothing this long is killed and replaced

    def __post_init__(self) -> None:
        problems = _at_least(self, 1, "parse_queue", "max_links_per_page", "max_parse_bytes", "sitemap_max_urls",
                             "sitemap_max_bytes")
        if self.parse_workers < 0:
            problems.append("parse_workers, retry_budget and parse_delay_s must be >= 0")
        if not 0 <= self.worker_nice <= 19:
            problems.append("worker_nice must be between 0 and 19")
        if self.pipeline_budget_s <= 0:
            problems.append(f"pipeline_budget_s must be > 0, got {self.pipeline_budget_s}")
        if self.worker_deadline_s <= 0:
            problems.append(f"worker_deadline_s must be > 0, got {self.worker_deadline_s}")
        _raise_any(problems)


@dataclass(frozen=True, slots=True, kw_only=True)
class StoreConfig:
    store_queue: int = 256  # fetch results waiting for the store
    store_lag_s: float = 5.0  # the store is lagging when its oldest result waits this long
    warc_max_bytes: int = 100_000_000
    crawl_log_max_bytes: int = 100_000_000  # crawl.log is renamed crawl.log.<stamp> past this
    # payload digests remembered for revisit records (identical-payload-digest); 0 = none
    dedup_max_entries: int = 1_000_000
    items_max_bytes: int = 100_000_000  # items/*.jsonl rotate past this
    crawl_name: str = "crawl"  # the warcinfo record's isPartOf
    operator: str | None = None  # the warcinfo record's operator: who runs this crawl (a contact)
    store_in_process: bool = True  # WARC writing in its own process, off the event loop's GIL
    worker_nice: int = WORKER_NICE
    worker_deadline_s: float = 60.0  # a worker that answers nothing this long is killed and replaced

    def __post_init__(self) -> None:
        problems = _at_least(self, 1, "store_queue", "warc_max_bytes", "crawl_log_max_bytes", "items_max_bytes")
        problems += _not_negative(self, "store_lag_s")
        if self.dedup_max_entries < 0:
            problems.append(f"dedup_max_entries must be >= 0, got {self.dedup_max_entries}")
        if not self.crawl_name.strip():
            problems.append("crawl_name must not be empty")
        if not 0 <= self.worker_nice <= 19:
            problems.append("worker_nice must be between 0 and 19")
        _raise_any(problems)


@dataclass(frozen=True, slots=True, kw_only=True)
class ClusterConfig:
    """What the cluster's parts are built from (cluster.cluster)."""

    node_id: str
    advertise_url: str
    peers: Mapping[str, str] = field(default_factory=dict)  # id -> URL, as configured
    weights: Mapping[str, int] = field(default_factory=dict)  # id -> ring weight
    secret: str | None = None
    ring_vnodes: int = 160
    ring_key_by: str = "host"  # or "domain": one registrable domain per arc
    heartbeat_interval_s: float = 0.5
    heartbeat_timeout_s: float = 0.5
    suspect_after_s: float = 1.0
    down_after_s: float = 2.0  # + one heartbeat round: a dead or hung peer is routed around within 3 s
    outbox_capacity: int = 50_000  # URLs owed to one peer before the parse stage must wait
    forward_batch: int = 500
    forward_linger_s: float = 0.05  # wait this long for a batch to fill before sending
    # NAME[:PORT] whose A/AAAA records are candidate members (a compose service, a headless Service)
    peer_dns: str | None = None
    peer_dns_interval_s: float = 5.0  # how often NAME is resolved again
    # A member whose majority comes back after it lost it (a partition healed, a SIGSTOP ended)
    # waits this long before its next request, while its successors let go of its hosts and end
    # the requests they have under way (cluster.fencing).
    handback_delay_s: float = 1.0
    # The longest a starting member holds its first lease (cluster.readiness): a fresh one leases
    # once every peer answered or was found down; a restarted or joining one once every peer
    # that answered says it owes it no handback (what was fetched for it while it was away, else
    # it fetches it again). Only a peer that keeps owing, or an old one that does not say, makes
    # it wait this long: a whole compose cluster restarting on two cores took more than 3 s.
    startup_grace_s: float = 30.0
    handoff_on_exit: bool = False  # on SIGTERM, drain the queue to the successors first
    known_members_file: Path | None = None  # members found by DNS, kept across restarts (cluster.known_members)

    def __post_init__(self) -> None:
        problems = []
        if not 0 < self.suspect_after_s < self.down_after_s:
            problems.append("need 0 < suspect_after_s < down_after_s")
        if self.heartbeat_interval_s <= 0 or self.heartbeat_timeout_s <= 0:
            problems.append("heartbeat_interval_s and heartbeat_timeout_s must be > 0")
        elif self.down_after_s < self.suspect_after_s + self.heartbeat_interval_s:
            # A member fences itself after suspect_after_s without a majority (cluster.fencing);
            # its successor must take over at least a heartbeat round later.
            problems.append("down_after_s must be at least suspect_after_s + heartbeat_interval_s, got "
                            f"{self.down_after_s:g} < {self.suspect_after_s:g} + {self.heartbeat_interval_s:g}")
        if self.handback_delay_s < 0:
            problems.append(f"handback_delay_s must be >= 0, got {self.handback_delay_s}")
        if self.ring_key_by not in RING_KEYS:
            problems.append(f"ring_key_by must be 'host' or 'domain', got {self.ring_key_by!r}")
        problems += [f"{name} must be >= 1" for name in ("outbox_capacity", "forward_batch", "ring_vnodes")
                     if getattr(self, name) < 1]
        if self.peer_dns_interval_s <= 0:
            problems.append("peer_dns_interval_s and api_read_timeout_s must be > 0")
        problems += _not_negative(self, "forward_linger_s")
        _raise_any(problems)


TEST_HOOKS_PREFIX = "CRAWLER_TEST_"  # settings_sources leaves CRAWLER_TEST_* alone


@dataclass(frozen=True, slots=True, kw_only=True)
class SiteHealthConfig:
    """A site that refuses the crawler (challenge, captcha, soft block): the host pauses
    (doubling per incident, capped, jittered, forgiven after a quiet spell), its URLs wait."""

    refusal_pause_initial_s: float = 60.0
    refusal_pause_cap_s: float = 86_400.0
    refusal_forgive_s: float = 1_800.0  # without a new incident after the last pause ended
    refusal_pause_jitter: float = 0.1  # each pause within +-10% of its nominal length
    refusal_url_budget: int = 3  # refusals a URL may meet; the last one ends it (blocked_challenge, ...)
    soft_block_urls: int = 4  # distinct URLs answered with one small page in a row: a soft block
    soft_block_after_pages: int = 3  # distinct pages a host must have served before

    def __post_init__(self) -> None:
        problems = _not_negative(self, "refusal_forgive_s", "soft_block_after_pages")
        problems += _at_least(self, 1, "refusal_url_budget", "soft_block_urls")
        if not 0 < self.refusal_pause_initial_s <= self.refusal_pause_cap_s:
            problems.append("need 0 < refusal_pause_initial_s <= refusal_pause_cap_s")
        if not 0 <= self.refusal_pause_jitter < 1:
            problems.append(f"refusal_pause_jitter must be in [0, 1), got {self.refusal_pause_jitter}")
        _raise_any(problems)


@dataclass(frozen=True, slots=True, kw_only=True)
class TestHooks:
    """Faults the tests stage in a real node process. Not settings: no flag, no TOML key; read
    from the environment (``CRAWLER_TEST_PARSE_DELAY_S``, ``CRAWLER_TEST_PARSE_CRASH_URL``)."""

    __test__ = False  # not a pytest test class, whatever its name

    parse_delay_s: float = 0.0  # seconds of extra CPU-free delay per parsed page (a slow parser)
    parse_crash_url: str = ""  # the parser process dies (as on a page that crashes lexbor) on this URL

    def __post_init__(self) -> None:
        if self.parse_delay_s < 0:
            raise ConfigError(["parse_workers, retry_budget and parse_delay_s must be >= 0"])

    @classmethod
    def from_env(cls, env: Mapping[str, str] | None = None) -> TestHooks:
        env = os.environ if env is None else env
        try:
            delay = float(env.get(f"{TEST_HOOKS_PREFIX}PARSE_DELAY_S", "0") or 0)
        except ValueError as exc:
            raise ConfigError([f"{TEST_HOOKS_PREFIX}PARSE_DELAY_S: {exc}"]) from None
        return cls(parse_delay_s=delay, parse_crash_url=env.get(f"{TEST_HOOKS_PREFIX}PARSE_CRASH_URL", ""))


NO_TEST_HOOKS = TestHooks()


@dataclass(frozen=True, slots=True, kw_only=True)
class NodeConfig:
    """A node's whole configuration: who it is, and each stage's group (node.node wires them)."""

    node_id: str
    data_dir: Path
    seeds: tuple[str, ...]
    advertise_url: str  # what the node says its URL is (GET /v1/status)
    secret: str | None  # the cluster token the API asks for on peer and control endpoints
    clustered: bool  # started to be a member (--peer or --peer-dns), not alone
    api_read_timeout_s: float
    scope: Scope
    recrawl: RecrawlPolicy
    fetch: FetchConfig
    retry: RetryConfig
    politeness: PolitenessConfig
    admission: AdmissionConfig
    frontier: FrontierConfig
    intake: IntakeConfig
    parse: ParseConfig
    store: StoreConfig
    cluster: ClusterConfig
    hooks: TestHooks = NO_TEST_HOOKS
    site_health: SiteHealthConfig = SiteHealthConfig()

    def spanning_problems(self) -> list[str]:
        """The rules between groups (Settings.validate says them)."""
        problems = []
        if self.frontier.lease_timeout_s <= self.fetch.fetch_timeout_s:
            # A lease must outlive the slowest legitimate fetch, or live work gets handed out twice.
            problems.append("lease_timeout_s must be larger than fetch_timeout_s")
        if self.admission.api_limit_start > self.fetch.global_inflight:
            problems.append("api_limit_start must be between 0 and global_inflight")
        if self.hooks.parse_crash_url and self.parse.parse_workers == 0:
            problems.append("parse_crash_url needs parser processes (parse_workers > 0)")
        return problems


def default(group: type[Any], name: str) -> Any:
    """The default of one field of a group: where Settings takes its own (a default is written once)."""
    for item in fields(group):
        if item.name == name:
            if item.default is not MISSING:
                return item.default
            if item.default_factory is not MISSING:
                return item.default_factory()
    raise LookupError(f"{group.__name__}.{name} has no default")
